"""planner.analysis.fit recovers a known constant from runs generated with it."""

from __future__ import annotations

import dataclasses

import pytest

from planner.analysis.fit import fit_constants, leave_one_out, predict_step_s, prepare, summary
from planner.analysis.validate import load_runs
from planner.catalog.data import data_dir
from planner.costmodel.calibration import DEFAULT_CALIBRATION as cal

IDS = ("nemo2407-llama2-70b-64gpu", "nemo2407-gpt3-5b-64gpu", "sc21-t1-gpt-7.5b-128gpu")


@pytest.fixture(scope="module")
def synthetic():
    """Three dev runs whose 'measured' step is the model's own prediction with GEMM_SHAPE_DERATE = 0.70
    (shipped: 0.84): a fit from 0.84 must land on 0.70 and leave no error."""
    runs = [r for r in load_runs(data_dir("runs") / "known_runs_dev.yaml") if r["id"] in IDS]
    cases = prepare(runs)
    assert sorted(c.id for c in cases) == sorted(IDS)
    synthetic = cal.with_values({"GEMM_SHAPE_DERATE": 0.70})
    return [dataclasses.replace(c, measured_step_s=predict_step_s(c, synthetic)) for c in cases]


def test_recovers_a_known_constant(synthetic):
    before = cal.GEMM_SHAPE_DERATE
    fit = fit_constants(synthetic, ["GEMM_SHAPE_DERATE"], [(0.3, 1.0)])
    assert cal.GEMM_SHAPE_DERATE == before  # the fit built new constants; the shipped ones are untouched
    assert fit.initial == (before,)
    assert fit.values[0] == pytest.approx(0.70, rel=1e-4)
    assert max(abs(e) for e in fit.log_errors) < 1e-5
    # at the shipped 0.84 the synthetic runs are predicted too fast: GEMM time scales with 1/derate
    assert all(e < -0.03 for e in fit.initial_log_errors)
    s = summary(fit.log_errors)
    assert s["n"] == 3 and s["median_abs_error"] < 1e-5


def test_leave_one_out_predicts_the_held_out_run(synthetic):
    loo = leave_one_out(synthetic, ["GEMM_SHAPE_DERATE"], [(0.3, 1.0)])
    assert set(loo) == set(IDS)
    assert max(abs(e) for e in loo.values()) < 1e-4  # one true constant: every held-out run is recovered
