"""The search's layouts scored in forked processes (planner.search.forks) give exactly what one process gives: the same
scored plans in the same order with the same figures and warnings, the same counts, smallest peak and refusal, and
the same trace for the plans shown (rebuilt in the parent). Speed is benchmarks/search_speed.py's, never a test's."""

from __future__ import annotations

import sys

import pytest
from support import one_line_error, run_cli

from planner.catalog.hardware import parse_cluster
from planner.catalog.models import get_model
from planner.costmodel import Context
from planner.search import forks
from planner.search.engine import LAYOUTS_PER_WORKER, SearchOptions, scan_workers, search
from planner.specs import TrainingSpec

pytestmark = pytest.mark.skipif(not forks.can_fork(), reason="the platform does not fork (Linux only)")


def _ctx(model: str, cluster: str) -> Context:
    return Context(get_model(model), parse_cluster(cluster), TrainingSpec(seq_len=4096, global_batch=512))


def _count_forks(monkeypatch) -> list[int]:
    """The worker counts of the fork_map calls made from now on."""
    calls: list[int] = []
    real = forks.fork_map

    def counted(task, n, workers):
        calls.append(workers)
        return real(task, n, workers)

    monkeypatch.setattr(forks, "fork_map", counted)
    return calls


def _summary(res) -> tuple:
    return (res.evaluated, res.feasible, res.structures, res.pruned, res.smallest_peak_gib, res.smallest_peak_plan,
            res.frontier, res.refused_for,
            [(e.plan, e.figures, e.peak_stage, e.warnings, e.pipeline) for e in res.ranked])


@pytest.mark.parametrize("model,cluster,opts", [
    ("deepseek-v3", "h100x512", {}),
    ("mixtral-8x7b", "tpu-v5px128", {"require_fit": False}),
])
def test_forked_scan_is_the_single_process_scan(model, cluster, opts, monkeypatch):
    calls = _count_forks(monkeypatch)
    one = search(_ctx(model, cluster), SearchOptions(workers=1, top_k=5, **opts))
    three = search(_ctx(model, cluster), SearchOptions(workers=3, top_k=5, **opts))
    assert calls == [3]  # the second search forked, the first did not
    assert one.evaluated > 500 and len(one.ranked) > 100
    assert _summary(three) == _summary(one)
    # the shown plans' traces are rebuilt in this process from the plan alone: every term as the single process has it
    for a, b in zip(one.plans, three.plans, strict=True):
        assert [(t.name, t.value, t.inputs) for t in b.trace.terms()] == [(t.name, t.value, t.inputs)
                                                                          for t in a.trace.terms()]


def test_a_search_whose_every_candidate_is_refused_says_the_same_rules(monkeypatch):
    # the refusal kept is the first candidate breaking the fewest rules in layout order, merged across the processes:
    # the moe module pinned on a dense model refuses every candidate of every layout
    fixed = {"recompute": "selective", "recompute_modules": ("moe",)}
    calls = _count_forks(monkeypatch)
    one = search(_ctx("llama-3.1-8b", "h100x256"), SearchOptions(fixed=fixed, workers=1))
    three = search(_ctx("llama-3.1-8b", "h100x256"), SearchOptions(fixed=fixed, workers=3))
    # nothing scored: the search repeats with the optimizer offloaded (engine.search), forked again
    assert one.evaluated == 0 and one.structures > 3 and one.refused_for and calls == [3, 3]
    assert _summary(three) == _summary(one)


def test_workers_chosen_from_cores_layouts_and_the_environment(monkeypatch):
    monkeypatch.delenv(forks.WORKERS_ENV, raising=False)
    monkeypatch.setattr(forks, "available_cores", lambda: 4)
    monkeypatch.setattr(forks, "fork_safe", lambda: True)
    assert scan_workers(SearchOptions(), LAYOUTS_PER_WORKER - 1) == 1  # too few layouts to pay for a process
    assert scan_workers(SearchOptions(), 2 * LAYOUTS_PER_WORKER) == 2
    assert scan_workers(SearchOptions(), 100 * LAYOUTS_PER_WORKER) == 4  # the cores
    monkeypatch.setenv(forks.WORKERS_ENV, "3")
    assert scan_workers(SearchOptions(), 100 * LAYOUTS_PER_WORKER) == 3
    assert scan_workers(SearchOptions(workers=1), 100 * LAYOUTS_PER_WORKER) == 1  # the option wins
    monkeypatch.setattr(forks, "fork_safe", lambda: False)
    assert scan_workers(SearchOptions(workers=4), 100 * LAYOUTS_PER_WORKER) == 1  # threads a fork is not safe with
    monkeypatch.setattr(forks, "fork_safe", lambda: True)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert scan_workers(SearchOptions(workers=4), 100 * LAYOUTS_PER_WORKER) == 1  # no fork off Linux


def test_a_bad_worker_count_is_one_clear_line():
    r = run_cli("--model", "llama-3.1-8b", "--cluster", "h100x64", env={forks.WORKERS_ENV: "two"})
    assert "PLANNER_SEARCH_WORKERS must be a positive whole number" in one_line_error(r)


def _square_or_fail(i: int) -> int:
    if i == 5:
        raise ValueError("piece 5 is bad")
    return i * i


def test_fork_map_keeps_the_order_and_raises_what_a_child_raised():
    assert forks.fork_map(lambda i: i * i, 7, 3) == [i * i for i in range(7)]
    with pytest.raises(ValueError, match="piece 5 is bad"):
        forks.fork_map(_square_or_fail, 7, 3)


def test_a_child_that_dies_without_an_answer_is_an_error():
    import os

    def die(i: int) -> int:
        os._exit(3)

    with pytest.raises(RuntimeError, match="ended without an answer"):
        forks.fork_map(die, 4, 2)


def test_a_process_with_jax_or_torch_loaded_is_never_forked(monkeypatch):
    # JAX warns at every fork that its threads will likely deadlock the child: such a process scores in one process
    monkeypatch.setattr(forks.threading, "active_count", lambda: 1)
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert forks.fork_safe()
    monkeypatch.setitem(sys.modules, "jax", sys)
    assert not forks.fork_safe()
    monkeypatch.setattr(forks, "can_fork", lambda: True)
    assert scan_workers(SearchOptions(workers=4), 100 * LAYOUTS_PER_WORKER) == 1
