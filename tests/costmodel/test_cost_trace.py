"""The typed cost trace (issue 14): every number of an evaluation is a term naming its formula and source,
the breakdowns are read from the terms, and the terms add up."""

from __future__ import annotations

import ast
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from snapshot_cost import CASES, build_inputs  # noqa: E402

from planner.costmodel import MEMORY_PARTS, TIME_TERMS, Context, evaluate  # noqa: E402
from planner.costmodel.trace import FORMULAS, Term  # noqa: E402

EVALS = []
for case in CASES:
    _m, _c, _t, _p = build_inputs(case)
    EVALS.append(evaluate(Context(_m, _c, _t), _p))


@pytest.mark.parametrize("ev", EVALS, ids=[f"{i}" for i in range(len(EVALS))])
def test_time_terms_sum_to_the_step(ev):
    """compute + recompute + bubble + exposed TP/CP/EP + p2p + DP + optimizer is the step, which the
    model computes separately as makespan + p2p + DP + optimizer."""
    assert tuple(t.name for t in ev.trace.time) == TIME_TERMS
    assert math.isclose(sum(t.value for t in ev.trace.time), ev.step_time_s, rel_tol=1e-9)
    assert all(t.value >= 0 for t in ev.trace.time)


@pytest.mark.parametrize("ev", EVALS, ids=[f"{i}" for i in range(len(EVALS))])
def test_memory_terms_sum_to_the_peak(ev):
    names = tuple(t.name for t in ev.trace.memory)
    host_limit = ("host_capacity_gib",) if "host_capacity_gib" in ev.trace else ()  # where the profile states it
    assert names == (*MEMORY_PARTS, "peak_gib", "capacity_gib", "usable_gib", "memory_margin_rel",
                     "memory_inner_margin_rel", "host_gib", *host_limit)
    assert math.isclose(sum(ev.trace.value(k) for k in MEMORY_PARTS), ev.memory["peak_gib"], rel_tol=1e-12)
    # the one usable-capacity rule (planner.costmodel.capacity): HBM - reserve - headroom (none here); the reserve is
    # 1 GiB under PyTorch's caching allocator, 0 under XLA's compile-time buffer assignment
    framework = next(t for t in ev.trace.memory if t.name == "buffers_gib").inputs["framework"]
    trace_reserve = next(t for t in ev.trace.memory if t.name == "usable_gib").inputs["reserve_gib"]
    assert trace_reserve == (0.0 if framework == "maxtext" else 1.0)
    assert ev.memory["usable_gib"] == ev.memory["capacity_gib"] - trace_reserve
    assert ev.fits == (ev.memory["peak_gib"] <= ev.memory["capacity_gib"] - trace_reserve
                       and ev.memory["host_gib"] <= ev.memory.get("host_capacity_gib", math.inf))
    assert ev.within_margin == (ev.memory["peak_gib"] <= ev.memory["usable_gib"] * (1 - ev.memory["memory_margin_rel"]))
    # the inner margin (the ranking's second memory tier) keeps less free than the margin
    assert 0 < ev.memory["memory_inner_margin_rel"] < ev.memory["memory_margin_rel"]


def test_every_term_names_a_declared_formula_and_its_source():
    seen = set()
    for ev in EVALS:
        for t in ev.trace.terms():
            assert isinstance(t, Term) and isinstance(t.value, (int, float))
            f = FORMULAS[t.formula_id]
            assert t.source == f.source and f.source and f.text
            seen.add(t.formula_id)
            with pytest.raises(AttributeError):
                t.value = 0.0  # frozen
    # the cases reach every ZeRO / DP mode, both optimizer modes and the pipeline terms
    for fid in ("data.zero3_prefetch", "data.zero3_pipelined", "data.zero3_blocking", "data.all_reduce",
                "data.reduce_scatter_all_gather", "optimizer.offload", "optimizer.adam", "pipeline.bubble"):
        assert fid in seen, fid


def test_breakdowns_are_read_from_the_trace():
    ev = EVALS[6]
    assert ev.time_breakdown == {t.name: t.value for t in ev.trace.time}
    assert ev.to_dict()["time_breakdown"] == ev.time_breakdown
    assert ev.mfu == ev.trace.value("mfu") and ev.step_time_s == ev.trace.value("step_time_s")


def test_costmodel_functions_are_short():
    """Developers' guide: no function over 60 lines (issue 14)."""
    root = Path(__file__).parents[2] / "planner" / "costmodel"
    long = []
    for f in sorted(root.glob("*.py")):
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 60:
                long.append(f"{f.name}:{n.lineno} {n.name}")
    assert not long, long
