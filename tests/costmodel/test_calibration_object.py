"""The calibrated constants are one frozen `Calibration` passed into the cost model (planner.costmodel.calibration):
values, dev-fit bounds and evidence in one place; a fit builds new values, nothing patches module globals."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import planner.costmodel.calibration as calibration_module
from planner.analysis.devfit import GPU_CONSTANTS
from planner.catalog.hardware import get_hardware, parse_cluster
from planner.catalog.models import get_model
from planner.costmodel import Context, evaluate
from planner.costmodel.calibration import (
    DEFAULT_CALIBRATION,
    PROFILE_FIELDS,
    Calibration,
    dev_fit_bounds,
    fit_ranges,
)
from planner.specs import ParallelPlan, TrainingSpec


def _ctx(cluster: str, calibration: Calibration = DEFAULT_CALIBRATION) -> Context:
    return Context(get_model("llama-3.1-8b"), parse_cluster(cluster), TrainingSpec(global_batch=64, seq_len=4096),
                   calibration=calibration)


def test_no_constant_is_a_module_global():
    # the cost model reads ctx.calibration.NAME; a module-level number would be a second, patchable copy
    numbers = [n for n, v in vars(calibration_module).items() if n.isupper() and isinstance(v, (int, float))]
    assert numbers == []
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_CALIBRATION.GEMM_SHAPE_DERATE = 0.5  # type: ignore[misc]


def test_the_constants_passed_in_are_the_ones_used():
    plan = ParallelPlan(tp=2, dp=4, micro_batch=1)
    base = evaluate(_ctx("h100x8"), plan)
    slow = DEFAULT_CALIBRATION.with_values({"GEMM_SHAPE_DERATE": DEFAULT_CALIBRATION.GEMM_SHAPE_DERATE / 2})
    slower = evaluate(_ctx("h100x8", slow), plan)
    assert slower.time_breakdown["compute_s"] > 1.5 * base.time_breakdown["compute_s"]
    # the shipped constants are untouched, so a fresh evaluation gives the first result again
    assert evaluate(_ctx("h100x8"), plan).step_time_s == base.step_time_s


def test_a_calibrated_profile_overrides_its_fields_only():
    hw = get_hardware("tpu-v5p")
    assert hw.calibration is not None  # the shipped TPU profiles carry a `calibration:` block
    cal = _ctx("tpu-v5px64").calibration
    for f in PROFILE_FIELDS:
        v = getattr(hw.calibration, f)
        assert getattr(cal, f.upper()) == (getattr(DEFAULT_CALIBRATION, f.upper()) if v is None else v)
    assert cal.FP8_DERATE == DEFAULT_CALIBRATION.FP8_DERATE
    assert _ctx("h100x8").calibration == DEFAULT_CALIBRATION  # no block: the development-run values


def test_dev_fit_bounds_hold_the_shipped_values():
    bounds = dev_fit_bounds()
    assert GPU_CONSTANTS == {n: (b.lo, b.hi, b.no_effect) for n, b in bounds.items()}
    assert "GEMM_SHAPE_DERATE" in bounds and "GEMM_DIM_HALF" not in bounds
    for name, b in bounds.items():
        assert b.lo <= getattr(DEFAULT_CALIBRATION, name) <= b.hi, name
    # every range a fit may use (benchmarks/fit_calibration.py) is written beside its constant too
    ranges = fit_ranges()
    assert set(bounds) < set(ranges) and {"GEMM_DIM_HALF", "RING_WIRE_FRACTION", "DP_OVERLAP_FRACTION"} <= set(ranges)
    for name, (lo, hi) in ranges.items():
        assert lo <= getattr(DEFAULT_CALIBRATION, name) <= hi, name


def test_with_values_refuses_an_unknown_name():
    with pytest.raises(TypeError):
        DEFAULT_CALIBRATION.with_values({"NO_SUCH_CONSTANT": 1.0})


def test_the_fitter_patches_nothing():
    import planner.analysis.fit as fit

    assert "setattr" not in inspect.getsource(fit) and not hasattr(fit, "calibrated")
