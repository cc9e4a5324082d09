"""The checks of tests/search/test_search_forks.py that fork, each run by that test in a fresh interpreter
(`python tests/search/fork_checks.py NAME`): the test process itself may have loaded JAX or PyTorch, which the search
then rightly refuses to fork (planner.search.forks.fork_safe), and forking it anyway could deadlock a child. Exit 0:
the check held."""

from __future__ import annotations

import os
import signal
import sys
import time

from planner.catalog.hardware import parse_cluster
from planner.catalog.models import get_model
from planner.costmodel import Context
from planner.search import forks
from planner.search.engine import SearchOptions, search
from planner.specs import TrainingSpec


def _ctx(model: str, cluster: str) -> Context:
    return Context(get_model(model), parse_cluster(cluster), TrainingSpec(seq_len=4096, global_batch=512))


def _count_forks(name: str = "fork_map") -> list[int]:
    """The worker counts of the calls of forks.fork_map (or forks.fork_deferred) made from now on."""
    calls: list[int] = []
    real = getattr(forks, name)

    def counted(*args, **kw):
        calls.append(args[-1])  # the worker count, the last positional argument of both
        return real(*args, **kw)

    setattr(forks, name, counted)
    return calls


def _summary(res) -> tuple:
    return (res.evaluated, res.feasible, res.structures, res.pruned, res.smallest_peak_gib, res.smallest_peak_plan,
            res.frontier, res.refused_for,
            [(e.plan, e.figures, e.peak_stage, e.warnings, e.pipeline) for e in res.ranked])


def _same_search(model: str, cluster: str, **opts) -> None:
    calls = _count_forks()
    one = search(_ctx(model, cluster), SearchOptions(workers=1, top_k=5, **opts))
    three = search(_ctx(model, cluster), SearchOptions(workers=3, top_k=5, **opts))
    assert calls == [3], calls  # the second search forked, the first did not
    assert one.evaluated > 500 and len(one.ranked) > 100, (one.evaluated, len(one.ranked))
    assert _summary(three) == _summary(one)
    # the shown plans' traces are rebuilt in this process from the plan alone: every term as the single process has it
    for a, b in zip(one.plans, three.plans, strict=True):
        assert [(t.name, t.value, t.inputs) for t in b.trace.terms()] == [(t.name, t.value, t.inputs)
                                                                          for t in a.trace.terms()]


def gpu_moe() -> None:
    _same_search("deepseek-v3", "h100x512")


def tpu_moe_unfitting_too() -> None:
    _same_search("mixtral-8x7b", "tpu-v5px128", require_fit=False)


def every_candidate_refused() -> None:
    # the refusal kept is the first candidate breaking the fewest rules in layout order, merged across the processes:
    # the moe module pinned on a dense model refuses every candidate of every layout
    fixed = {"recompute": "selective", "recompute_modules": ("moe",)}
    calls = _count_forks()
    one = search(_ctx("llama-3.1-8b", "h100x256"), SearchOptions(fixed=fixed, workers=1))
    three = search(_ctx("llama-3.1-8b", "h100x256"), SearchOptions(fixed=fixed, workers=3))
    # nothing scored: the search repeats with the optimizer offloaded (engine.search), forked again
    assert one.evaluated == 0 and one.structures > 3 and one.refused_for and calls == [3, 3], calls
    assert _summary(three) == _summary(one)


def dispatchers_side_by_side() -> None:
    # DeepSeek-V3 on H100s searches alltoall and flex (planner.search.dispatchers): side by side in two forked
    # processes, each scanning its own layouts in one, it keeps what the two searches one after the other keep
    from planner.search.dispatchers import search_dispatchers

    calls = _count_forks("fork_deferred")
    one = search_dispatchers(_ctx("deepseek-v3", "h100x512"), SearchOptions(workers=1, top_k=5))
    two = search_dispatchers(_ctx("deepseek-v3", "h100x512"), SearchOptions(workers=2, top_k=5))
    # the two dispatchers' searches side by side (the first in this process); the forked one sends its #1 first and
    # its whole result only if kept (forks.fork_deferred): here flex is, so both paths are taken
    assert calls == [2], calls
    assert set(one.seen) == {"alltoall", "flex"} and two.seen == one.seen, (one.seen, two.seen)
    assert two.ctx.train == one.ctx.train and _summary(two.result) == _summary(one.result)
    assert all(any(p is r for r in two.result.ranked) for p in two.result.plans)  # one object, as a search leaves it
    for a, b in zip(one.result.plans, two.result.plans, strict=True):  # traces rebuilt here, from the kept context
        assert [(t.name, t.value, t.inputs) for t in b.trace.terms()] == [(t.name, t.value, t.inputs)
                                                                          for t in a.trace.terms()]


def overlap_searches_dealt() -> None:
    # with the batch-level EP overlap searched too, DeepSeek-V3 on H100s runs four searches (alltoall and flex, each
    # with and without it): dealt round robin to two processes, two each (this one and one forked), it keeps what the
    # four one after the other keep
    from planner.search.dispatchers import search_dispatchers

    calls = _count_forks("fork_deferred")
    one = search_dispatchers(_ctx("deepseek-v3", "h100x512"), SearchOptions(workers=1, top_k=5), overlap_pinned=False)
    two = search_dispatchers(_ctx("deepseek-v3", "h100x512"), SearchOptions(workers=2, top_k=5), overlap_pinned=False)
    assert calls == [2], calls  # four searches, two processes
    assert set(one.overlap_seen) == {False, True} and two.overlap_seen == one.overlap_seen, one.overlap_seen
    assert two.seen == one.seen and two.ctx.train == one.ctx.train and _summary(two.result) == _summary(one.result)
    for a, b in zip(one.result.plans, two.result.plans, strict=True):
        assert [(t.name, t.value) for t in b.trace.terms()] == [(t.name, t.value) for t in a.trace.terms()]


def _square_or_fail(i: int) -> int:
    if i == 5:
        raise ValueError("piece 5 is bad")
    return i * i


def _raises(run, kind: type[BaseException], text: str) -> None:
    try:
        run()
    except kind as e:
        assert text in str(e), str(e)
    else:
        raise AssertionError(f"no {kind.__name__} ({text!r})")


def fork_map_order_and_errors() -> None:
    assert forks.fork_map(lambda i: i * i, 7, 3) == [i * i for i in range(7)]
    parent = os.getpid()  # with `here`, this process computes the first process's pieces (0, 3, 6) itself
    assert forks.fork_map(lambda i: (i, os.getpid() == parent), 7, 3, here=True) == [
        (i, i % 3 == 0) for i in range(7)]
    _raises(lambda: forks.fork_map(_square_or_fail, 7, 3, here=True), ValueError, "piece 5 is bad")
    _raises(lambda: forks.fork_map(_square_or_fail, 7, 3), ValueError, "piece 5 is bad")  # a child's exception

    def die(i: int) -> int:
        os._exit(3)

    _raises(lambda: forks.fork_map(die, 4, 2), RuntimeError, "ended without an answer")  # a child dead, no answer


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def fork_deferred_briefs_and_fetch() -> None:
    parent = os.getpid()

    def task(i: int) -> tuple:
        return i, i * i, os.getpid() == parent

    # pieces 0, 3, 6 here (full answers), the others forked (their briefs), fetched on demand
    with forks.fork_deferred(task, lambda a: a[0], 7, 3) as d:
        assert d.answers == [(0, 0, True), 1, 2, (3, 9, True), 4, 5, (6, 36, True)], d.answers
        assert d.fetch([3, 5, 1]) == {3: (3, 9, True), 5: (5, 25, False), 1: (1, 1, False)}
        _raises(lambda: d.fetch([2]), RuntimeError, "fetched once")
    # a forked answer travels as pack(answer); one computed here stays as it is
    with forks.fork_deferred(task, lambda a: a[0], 4, 2, pack=lambda a: ("packed", a)) as d:
        assert d.fetch([0, 1]) == {0: (0, 0, True), 1: ("packed", (1, 1, False))}
    with forks.fork_deferred(task, lambda a: a[0], 6, 3):
        pass  # nothing fetched: both forked processes end all the same (each told by the end of its commands)
    pids = list(forks._UNREAPED)
    for _ in range(200):  # the processes exit once told that nothing is wanted; reaped by the next call
        forks._reap_finished()
        if not forks._UNREAPED:
            break
        time.sleep(0.01)
    assert not forks._UNREAPED and not any(_alive(p) for p in pids), forks._UNREAPED
    _raises(lambda: forks.fork_deferred(_square_or_fail, lambda a: a, 7, 3), ValueError, "piece 5 is bad")

    def die(i: int) -> int:
        os._exit(3)

    _raises(lambda: forks.fork_deferred(lambda i: die(i) if i % 2 else i, lambda a: a, 4, 2), RuntimeError,
            "ended without an answer")

    def dies_unasked(i: int) -> object:  # a forked process that ends after its brief, before the parent asks
        if i % 2:
            signal.signal(signal.SIGALRM, lambda *_: os._exit(4))
            signal.setitimer(signal.ITIMER_REAL, 0.05)
        return i

    with forks.fork_deferred(dies_unasked, lambda a: a, 2, 2) as d:
        time.sleep(0.3)
        _raises(lambda: d.fetch([1]), RuntimeError, "ended without an answer")

    def fails_later(i: int) -> object:
        return (lambda: None) if i % 2 else i  # the brief pickles, the full answer (a lambda) does not

    with forks.fork_deferred(fails_later, lambda a: "brief", 2, 2) as d:
        assert d.answers == [0, "brief"]
        _raises(lambda: d.fetch([1]), Exception, "")


CHECKS = {f.__name__: f for f in (gpu_moe, tpu_moe_unfitting_too, every_candidate_refused, dispatchers_side_by_side,
                                   overlap_searches_dealt, fork_map_order_and_errors, fork_deferred_briefs_and_fetch)}

if __name__ == "__main__":
    assert forks.fork_safe(), "a fresh interpreter must be safe to fork"
    CHECKS[sys.argv[1]]()
    print("ok")
