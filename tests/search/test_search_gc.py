"""The search, and the `plan` command around it, raise the cyclic garbage collector's young threshold while they run
(planner.gcpasses SEARCH_GC_YOUNG_THRESHOLD) and give the caller's thresholds back."""

from __future__ import annotations

import gc

from click.testing import CliRunner

from planner import gcpasses
from planner.search import engine


def _thresholds_seen(monkeypatch, module, name: str) -> list[tuple[int, int, int]]:
    """The collector's thresholds at every call of module.name from now on."""
    seen: list[tuple[int, int, int]] = []
    real = getattr(module, name)

    def spy(*args, **kwargs):
        seen.append(gc.get_threshold())
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return seen


def _raised(before: tuple[int, int, int]) -> tuple[int, int, int]:
    return (max(before[0], gcpasses.SEARCH_GC_YOUNG_THRESHOLD), *before[1:])


def test_threshold_raised_during_the_search_and_restored_after(monkeypatch):
    seen = _thresholds_seen(monkeypatch, engine, "_search_or_offload")
    before = gc.get_threshold()
    from planner.app.plan import run_search
    from planner.app.request import PlanRequest

    run_search(PlanRequest(model="llama-3.1-8b", cluster="h100x8"))
    assert seen and all(t == _raised(before) for t in seen)
    assert gc.get_threshold() == before


def test_a_higher_threshold_of_the_caller_is_kept_and_an_error_restores():
    before = gc.get_threshold()
    try:
        gc.set_threshold(10 * engine.SEARCH_GC_YOUNG_THRESHOLD, 20, 30)
        with gcpasses.fewer_gc_passes():
            assert gc.get_threshold() == (10 * engine.SEARCH_GC_YOUNG_THRESHOLD, 20, 30)
        gc.set_threshold(700, 10, 10)
        try:
            with gcpasses.fewer_gc_passes():
                assert gc.get_threshold()[0] == engine.SEARCH_GC_YOUNG_THRESHOLD
                raise KeyError("x")
        except KeyError:
            pass
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_the_plan_command_runs_with_the_raised_threshold_and_restores_it(monkeypatch):
    # the heap a large search leaves is walked by every full collection the output phase sets off (the error-band
    # file read after the search): the command holds the raised threshold from its start to its output
    import planner.analysis.bands as bands
    from planner.ui.cli import main

    seen = _thresholds_seen(monkeypatch, bands, "attach_bands")
    before = gc.get_threshold()
    r = CliRunner().invoke(main, ["--model", "llama-3.1-8b", "--cluster", "h100x8", "--json"])
    assert r.exit_code == 0, r.output
    assert seen == [_raised(before)]
    assert gc.get_threshold() == before
