"""The MoE dispatcher as a searched knob: where a request pins none, the dispatchers its stack offers beside the
default (searched_dispatchers) are each searched in full, and the search whose #1 ranks first is kept
(search_dispatchers). The dispatcher is a training setting (TrainingSpec.moe_dispatcher), not a plan knob: every plan of
one search shares it, and the launch files write it."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any

from planner.costmodel import Context
from planner.costmodel.evaluate import Evaluation
from planner.search import forks
from planner.search.engine import (
    SearchOptions,
    SearchResult,
    portable_evaluation,
    restored_evaluation,
    search,
)
from planner.search.ranking import TIE_BAND_REL, memory_tier
from planner.specs import ClusterSpec, ModelSpec, TrainingSpec


def searched_dispatchers(model: ModelSpec, cluster: ClusterSpec, train: TrainingSpec) -> tuple[dict[str, str], ...]:
    """The MoE dispatchers the search tries beside the stack's default, as the training settings of each
    (search_dispatchers runs one search each and keeps the one whose best plan ranks first): the stack's
    moe_searched_dispatchers, only for an MoE model whose request pins no dispatcher, flex backend or capacity factor
    (Megatron-Bridge's token drop asserts the alltoall dispatcher, training/utils/moe_token_drop.py; DeepEP refuses
    padding to capacity, megatron-core core_v0.16.1 transformer_config.py:1074-1081), and flex only on NVIDIA NVSwitch
    parts with FP8 tensor cores (Hopper, Blackwell): where DeepEP publishes its kernels' figures (deepseek-ai/DeepEP
    README: H800, SM100) and NVIDIA's recipes run it (pinned with --moe-dispatcher flex it is costed anywhere).
    Megatron's own guide (megatron-core core_v0.16.1 transformer/moe/README.md, Token Dispatching) names flex with
    DeepEP "best for cross-node EP, fine-grained MoE (DeepSeek-V3)" and with HybridEP for "GB200 NVL72, Multi-Node
    NVLink": the flex search runs HybridEP where the scale-up domain spans nodes (NVL72), as every Megatron-Bridge
    GB200 preset does (planner.analysis.validate QWEN3_FLEX_FROM's note), elsewhere the stack's own flex backend
    (Stack.moe_flex_backend: Megatron's DeepEP)."""
    from planner.stacks import stack_of

    if not model.is_moe or train.moe_dispatcher is not None or train.moe_flex_backend is not None \
            or train.moe_capacity_factor is not None:
        return ()
    stack, hw = stack_of(train), cluster.hardware
    deepep_here = hw.scale_up.kind == "nvswitch" and hw.peak_tflops.fp8 is not None
    multi_node_nvlink = cluster.scale_up_size > cluster.node_size
    out: list[dict[str, str]] = []
    for kind in stack.moe_searched_dispatchers:
        if kind not in stack.moe_dispatchers or kind == stack.moe_dispatcher or (kind == "flex" and not deepep_here):
            continue
        backend = "hybridep" if multi_node_nvlink else stack.moe_flex_backend
        out.append({"moe_dispatcher": kind, **({"moe_flex_backend": backend} if kind == "flex" else {})})
    return tuple(out)


@dataclass(frozen=True)
class DispatcherSearch:
    ctx: Context  # the context of the search kept: its training names the dispatcher
    result: SearchResult
    # every dispatcher searched -> its own #1's step time (None where nothing fits); empty where none was searched
    seen: dict[str, float | None]


def search_dispatchers(ctx: Context, opts: SearchOptions) -> DispatcherSearch:
    """search() of ctx and, where searched_dispatchers offers any, of each alternative (the same request otherwise);
    the one whose #1 ranks first is kept: a lower memory tier, else faster by more than the ranking's tie band. A tie
    keeps the stack's default, which needs no kernels beyond the stack's own."""
    alternatives = [Context(ctx.model, ctx.cluster, ctx.train.model_copy(update=settings),
                            memory_headroom_gib=ctx.memory_headroom_gib)
                    for settings in searched_dispatchers(ctx.model, ctx.cluster, ctx.train)]
    if not alternatives:
        return DispatcherSearch(ctx, search(ctx, opts), {})
    ctxs = [ctx, *alternatives]
    searches = list(zip(ctxs, _searches(ctxs, opts), strict=True))
    seen = {c.train.dispatcher: r.plans[0].step_time_s if r.plans else None for c, r in searches}
    kept = searches[0]
    for c, r in searches[1:]:
        if r.plans and _ranks_first(r.plans[0], kept[1].plans[0] if kept[1].plans else None):
            kept = (c, r)
    return DispatcherSearch(kept[0], kept[1], seen)


def side_by_side(opts: SearchOptions, n: int) -> int:
    """Processes that run `n` dispatcher searches side by side (1: one after the other, each scanning its layouts in
    its own processes as planner.search.engine.scan_workers decides): one per search where the platform forks safely
    and the cores (or SearchOptions.workers / PLANNER_SEARCH_WORKERS) allow at least one each. Side by side, each
    search fills its own caches once; split by layouts, both halves of a search recompute the layer times they share
    (docs/performance.md, round 25)."""
    asked = opts.workers or forks.requested_workers()
    if n < 2 or not (forks.can_fork() and forks.fork_safe()):
        return 1
    cores = asked if asked is not None else min(forks.available_cores(), forks.MAX_WORKERS)
    return n if cores >= n else 1


def _searches(ctxs: list[Context], opts: SearchOptions) -> list[SearchResult]:
    """search() of each context, in that order: side by side (side_by_side), the first in this process and each other
    in a forked one, each with its share of the processes for its own layouts; or one after the other. The answers are
    the same (every cached value is independent of what was computed before: tests/search/test_search_memo.py); a
    forked search's evaluations come back without their lazily built traces, which are rebuilt here from the same
    context (evaluate is pure)."""
    n = len(ctxs)
    procs = side_by_side(opts, n)
    if procs == 1:
        return [search(c, opts) for c in ctxs]
    total = opts.workers or forks.requested_workers() or min(forks.available_cores(), forks.MAX_WORKERS)
    each = replace(opts, workers=max(1, total // n))
    here = os.getpid()

    def one(i: int) -> SearchResult | tuple:
        res = search(ctxs[i], each)
        return res if os.getpid() == here else _portable(res)

    parts = forks.fork_map(one, n, procs, here=True)
    return [p if isinstance(p, SearchResult) else _restored(c, p) for c, p in zip(ctxs, parts, strict=True)]


def _portable(res: SearchResult) -> tuple[list[tuple], list[int], list[int], dict[str, Any]]:
    """`res` as plain data that pickles: each distinct evaluation once (engine.portable_evaluation), `plans` and
    `ranked` as indexes into them (an evaluation in both stays one object), the other fields as they are."""
    index: dict[int, int] = {}
    evs: list[tuple] = []

    def at(e: Evaluation) -> int:
        if id(e) not in index:
            index[id(e)] = len(evs)
            evs.append(portable_evaluation(e))
        return index[id(e)]

    plans, ranked = [at(e) for e in res.plans], [at(e) for e in res.ranked]
    rest = {f.name: getattr(res, f.name) for f in fields(res) if f.name not in ("plans", "ranked")}
    return evs, plans, ranked, rest


def _restored(ctx: Context, part: tuple[list[tuple], list[int], list[int], dict[str, Any]]) -> SearchResult:
    """The SearchResult _portable took apart, each evaluation's trace built from `ctx` when first read."""
    evs, plans, ranked, rest = part
    objs = [restored_evaluation(ctx, data) for data in evs]
    return SearchResult(plans=[objs[i] for i in plans], ranked=[objs[i] for i in ranked], **rest)


def _ranks_first(a, b) -> bool:
    """Whether evaluation `a` ranks before `b` (None: nothing) beyond a tie (planner.search.ranking's memory tiers and
    tie band)."""
    if b is None:
        return True
    ta, tb = memory_tier(a), memory_tier(b)
    return ta < tb or (ta == tb and a.step_time_s * (1.0 + TIE_BAND_REL) < b.step_time_s)
