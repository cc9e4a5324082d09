"""The MoE dispatcher as a searched knob: where a request pins none, the dispatchers its stack offers beside the
default (searched_dispatchers) are each searched in full, and the search whose #1 ranks first is kept
(search_dispatchers). The dispatcher is a training setting (TrainingSpec.moe_dispatcher), not a plan knob: every plan of
one search shares it, and the launch files write it."""

from __future__ import annotations

from dataclasses import dataclass

from planner.costmodel import Context
from planner.search.engine import SearchOptions, SearchResult, search
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
    res = search(ctx, opts)
    alternatives = [Context(ctx.model, ctx.cluster, ctx.train.model_copy(update=settings),
                            memory_headroom_gib=ctx.memory_headroom_gib)
                    for settings in searched_dispatchers(ctx.model, ctx.cluster, ctx.train)]
    if not alternatives:
        return DispatcherSearch(ctx, res, {})
    searches = [(ctx, res), *((alt, search(alt, opts)) for alt in alternatives)]
    seen = {c.train.dispatcher: r.plans[0].step_time_s if r.plans else None for c, r in searches}
    kept = searches[0]
    for c, r in searches[1:]:
        if r.plans and _ranks_first(r.plans[0], kept[1].plans[0] if kept[1].plans else None):
            kept = (c, r)
    return DispatcherSearch(kept[0], kept[1], seen)


def _ranks_first(a, b) -> bool:
    """Whether evaluation `a` ranks before `b` (None: nothing) beyond a tie (planner.search.ranking's memory tiers and
    tie band)."""
    if b is None:
        return True
    ta, tb = memory_tier(a), memory_tier(b)
    return ta < tb or (ta == tb and a.step_time_s * (1.0 + TIE_BAND_REL) < b.step_time_s)
