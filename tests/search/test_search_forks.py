"""The search's layouts scored in forked processes (planner.search.forks) give exactly what one process gives: the same
scored plans in the same order with the same figures and warnings, the same counts, smallest peak and refusal, and
the same trace for the plans shown (rebuilt in the parent). The checks that fork run in a fresh interpreter
(tests/search/fork_checks.py): this process may have loaded JAX or PyTorch. Speed is benchmarks/search_speed.py's,
never a test's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import ROOT, one_line_error, run_cli

from planner.search import forks
from planner.search.engine import LAYOUTS_PER_WORKER, SearchOptions, scan_workers

pytestmark = pytest.mark.skipif(not forks.can_fork(), reason="the platform does not fork (Linux only)")


@pytest.mark.parametrize("check", ["gpu_moe", "tpu_moe_unfitting_too", "every_candidate_refused",
                                   "dispatchers_side_by_side", "overlap_searches_dealt", "fork_map_order_and_errors",
                                   "fork_deferred_briefs_and_fetch"])
def test_forked_checks_in_a_fresh_interpreter(check):
    env = {k: v for k, v in os.environ.items() if k != forks.WORKERS_ENV} | {"PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "search" / "fork_checks.py"), check], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


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


def test_dispatcher_searches_side_by_side_one_process_per_core(monkeypatch):
    from planner.search.dispatchers import side_by_side

    monkeypatch.delenv(forks.WORKERS_ENV, raising=False)
    monkeypatch.setattr(forks, "available_cores", lambda: 2)
    monkeypatch.setattr(forks, "fork_safe", lambda: True)
    assert side_by_side(SearchOptions(), 2) == 2
    # fewer cores than searches (dispatchers x the batch-level EP overlap: 4): one process per core, the searches
    # dealt round robin
    assert side_by_side(SearchOptions(), 4) == 2
    assert side_by_side(SearchOptions(workers=3), 4) == 3
    monkeypatch.setattr(forks, "available_cores", lambda: 1)
    assert side_by_side(SearchOptions(), 4) == 1  # one core: one after the other
    monkeypatch.setattr(forks, "available_cores", lambda: 2)
    assert side_by_side(SearchOptions(), 1) == 1
    assert side_by_side(SearchOptions(workers=1), 2) == 1  # the option wins
    monkeypatch.setenv(forks.WORKERS_ENV, "1")
    assert side_by_side(SearchOptions(), 2) == 1
    monkeypatch.setattr(forks, "fork_safe", lambda: False)
    assert side_by_side(SearchOptions(workers=4), 2) == 1  # threads a fork is not safe with


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


def test_a_bad_worker_count_is_one_clear_line():
    r = run_cli("--model", "llama-3.1-8b", "--cluster", "h100x64", env={forks.WORKERS_ENV: "two"})
    assert "PLANNER_SEARCH_WORKERS must be a positive whole number" in one_line_error(r)
