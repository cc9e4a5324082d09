"""The MoE dispatcher and Megatron's batch-level EP overlap as searched knobs: where a request pins none, the
dispatchers its stack offers beside the default (searched_dispatchers), each with and without the overlap where the
stack runs it and the request does not pin it (searched_overlap), are each searched in full, and the search whose #1
ranks first is kept (search_dispatchers). Both are training settings (TrainingSpec.moe_dispatcher, moe_a2a_overlap),
not plan knobs: every plan of one search shares them, and the launch files write them."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
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


def searched_overlap(model: ModelSpec, train: TrainingSpec) -> bool:
    """Whether Megatron's batch-level EP all-to-all overlap (TrainingSpec.moe_a2a_overlap) is searched beside its
    absence, for a request that does not pin it (search_dispatchers' overlap_pinned): an MoE model on a stack that runs
    it (Stack.moe_a2a_overlap_option) with a dispatcher it takes (megatron-core transformer_config.py: "supported with
    alltoall/flex token dispatcher"). Megatron's MoE guide names it the fix where the EP all-to-all is exposed ("EP
    All-to-All can consume 30-40% of training time without optimization", megatron/core/transformer/moe/README.md,
    Megatron-LM d98e8a64), and NVIDIA's own recipes run it (Megatron-Bridge's DeepSeek-V3 and Qwen3-235B-A22B H100 /
    B200 presets: the runs of runs/ priced with moe.merged_fwd_bwd); the plans it cannot take (full recompute, the
    'moe' recompute module, pp > 1 without virtual stages: stacks.rules.a2a_overlap_needs) are left to the search
    without it, and without expert parallelism it is inert (moe.merged_fwd_bwd). A model it cannot take (more than one
    MTP layer: stacks.rules.a2a_overlap_model_needs) is not searched with it."""
    from planner.stacks import stack_of
    from planner.stacks.rules import a2a_overlap_model_needs

    return (model.is_moe and not train.moe_a2a_overlap and stack_of(train).moe_a2a_overlap_option
            and train.dispatcher in ("alltoall", "flex") and not a2a_overlap_model_needs(model))


def overlap_pinned_out(fixed: dict[str, Any]) -> bool:
    """Whether the pinned knobs leave the batch-level EP overlap nothing to run: EP pinned to 1 (nothing to overlap),
    or knobs it cannot take (stacks.rules.a2a_overlap_needs, with every unpinned knob at a value it takes: virtual
    stages unless the schedule or vpp is pinned otherwise)."""
    from planner.stacks.rules import a2a_overlap_needs

    schedule = fixed.get("schedule")
    vpp = fixed.get("vpp") or (1 if schedule is not None and schedule != "interleaved" else 2)
    return fixed.get("ep") == 1 or bool(a2a_overlap_needs(fixed.get("recompute") or "selective",
                                                          tuple(fixed.get("recompute_modules") or ()),
                                                          fixed.get("pp") or 1, vpp))


@dataclass(frozen=True)
class DispatcherSearch:
    ctx: Context  # the context of the search kept: its training names the dispatcher and the overlap
    result: SearchResult
    # every dispatcher searched -> the #1 step time of its searches (None where nothing fits): what pinning it keeps;
    # empty where no dispatcher was searched
    seen: dict[str, float | None]
    # where the overlap was searched (searched_overlap): with it (True) and without (False) -> the #1 step time of
    # those searches (None where nothing fits): what pinning it keeps; empty otherwise
    overlap_seen: dict[bool, float | None] = field(default_factory=dict)


def search_dispatchers(ctx: Context, opts: SearchOptions, overlap_pinned: bool = True) -> DispatcherSearch:
    """search() of ctx and, where searched_dispatchers offers any, of each alternative dispatcher, each also with the
    batch-level EP overlap where it is searched (searched_overlap, unless `overlap_pinned`: the request states it); the
    same request otherwise. The one whose #1 ranks first is kept: a lower memory tier, else faster by more than the
    ranking's tie band. A tie keeps the earlier: the stack's default dispatcher, then no overlap, which need no kernels
    or schedule beyond the stack's defaults."""
    dispatchers: list[dict[str, Any]] = [{}, *searched_dispatchers(ctx.model, ctx.cluster, ctx.train)]
    variants = list(dispatchers)
    if not overlap_pinned and not overlap_pinned_out(opts.fixed):
        variants += [d | {"moe_a2a_overlap": True} for d in dispatchers
                     if searched_overlap(ctx.model, ctx.train.model_copy(update=d))]
    if len(variants) == 1:
        return DispatcherSearch(ctx, search(ctx, opts), {})
    ctxs = [ctx] + [Context(ctx.model, ctx.cluster, ctx.train.model_copy(update=settings),
                            memory_headroom_gib=ctx.memory_headroom_gib) for settings in variants[1:]]
    with _searches(ctxs, opts) as found:
        searches = list(zip(ctxs, found.results, strict=True))  # a forked search's: its #1 only (_brief)
        kept = _kept(searches)
        i = next(j for j, (_, r) in enumerate(searches) if r is kept[1])
        result = found.full(i)

    def first(group: list[tuple[Context, SearchResult]]) -> float | None:
        """The #1 step time of what pinning the group's shared setting would keep (None: nothing fits)."""
        r = _kept(group)[1]
        return r.plans[0].step_time_s if r.plans else None

    seen = {d: first([(c, r) for c, r in searches if c.train.dispatcher == d])
            for d in dict.fromkeys(c.train.dispatcher for c, _ in searches)} if len(dispatchers) > 1 else {}
    overlap_seen = {o: first([(c, r) for c, r in searches if c.train.moe_a2a_overlap == o])
                    for o in (False, True)} if len(variants) > len(dispatchers) else {}
    return DispatcherSearch(ctxs[i], result, seen, overlap_seen)


def _kept(searches: list[tuple[Context, SearchResult]]) -> tuple[Context, SearchResult]:
    """The search whose #1 ranks first (_ranks_first), the earliest of tied ones."""
    kept = searches[0]
    for c, r in searches[1:]:
        if r.plans and _ranks_first(r.plans[0], kept[1].plans[0] if kept[1].plans else None):
            kept = (c, r)
    return kept


def side_by_side(opts: SearchOptions, n: int) -> int:
    """Processes that run `n` dispatcher searches side by side (1: one after the other, each scanning its layouts in
    its own processes as planner.search.engine.scan_workers decides): one per search, or one per core with the
    searches dealt round robin (forks.fork_map) where there are fewer cores (or SearchOptions.workers /
    PLANNER_SEARCH_WORKERS) than searches, where the platform forks safely. Side by side, each search fills its own
    caches once; split by layouts, both halves of a search recompute the layer times they share (docs/performance.md,
    round 25)."""
    asked = opts.workers or forks.requested_workers()
    if n < 2 or not (forks.can_fork() and forks.fork_safe()):
        return 1
    cores = asked if asked is not None else min(forks.available_cores(), forks.MAX_WORKERS)
    return min(n, cores) if cores >= 2 else 1


class _Searches:
    """The searches of _searches: `results` in the contexts' order (a forked one's as _brief leaves it: its #1 only),
    full(i) the whole of search i (a forked one's fetched from its process, its traces rebuilt from its context)."""

    def __init__(self, ctxs: list[Context], results: list[SearchResult], deferred: forks.Deferred | None = None):
        self.ctxs, self.results, self._deferred = ctxs, results, deferred

    def full(self, i: int) -> SearchResult:
        if self._deferred is None:
            return self.results[i]
        part = self._deferred.fetch([i])[i]
        return part if isinstance(part, SearchResult) else _restored(self.ctxs[i], part)

    def __enter__(self) -> _Searches:
        return self

    def __exit__(self, kind, value, tb) -> None:
        if self._deferred is not None:
            self._deferred.__exit__(kind, value, tb)


def _searches(ctxs: list[Context], opts: SearchOptions) -> _Searches:
    """search() of each context, in that order: side by side (side_by_side), dealt round robin to this process (the
    first) and forked ones, each with its share of the processes for its own layouts; or one after the other. The
    answers are the same (every cached value is independent of what was computed before:
    tests/search/test_search_memo.py). A forked search first sends only its #1 (_brief: what choosing the search to
    keep reads) and the whole result only if it is kept (forks.fork_deferred): DeepSeek-V3 on h100x1024 keeps a search
    of this process, and the forked one's 1 MB of scored plans were pickled, sent and unpickled for nothing (0.05 s of
    its 1.05 s, docs/performance.md round 37). A fetched search's evaluations come back without their lazily built
    traces, which are rebuilt here from the same context (evaluate is pure). Use it as a context manager: leaving the
    block ends the forked processes."""
    n = len(ctxs)
    procs = side_by_side(opts, n)
    if procs == 1:
        return _Searches(ctxs, [search(c, opts) for c in ctxs])
    total = opts.workers or forks.requested_workers() or min(forks.available_cores(), forks.MAX_WORKERS)
    each = replace(opts, workers=max(1, total // n))
    deferred = forks.fork_deferred(lambda i: search(ctxs[i], each), _brief, n, procs, pack=_portable)
    with deferred.ending_on_error():
        briefs = [p if isinstance(p, SearchResult) else _restored(c, p)
                  for c, p in zip(ctxs, deferred.answers, strict=True)]
    return _Searches(ctxs, briefs, deferred)


def _brief(res: SearchResult) -> tuple:
    """A forked search's result as _portable leaves it, cut to what _kept and the pinning figures read: its #1 (plans
    and ranked hold only it), the other fields as they are but the frontier."""
    return _portable(replace(res, plans=res.plans[:1], ranked=res.plans[:1], frontier=[]))


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
