"""Expert parallelism: the token dispatch and combine all-to-alls of an MoE layer (GShard, Lepikhin et al.
2020, arXiv 2006.16668, sec. 2.2; Megatron-core's all-to-all token dispatcher): top_k copies of each
token's hidden state go to the ep ranks holding their experts and come back."""

from __future__ import annotations

from planner.costmodel.base import ACT_ELEM_BYTES, Context, LayerKind, Shape
from planner.costmodel.collectives import collective_time
from planner.costmodel.moe import (
    batched_experts,
    dispatcher,
    expert_load,
    grouped_gemm_rel,
    groups_per_token,
    local_experts,
    row_gather_extrapolated,
)
from planner.costmodel.trace import Term, formula
from planner.specs import MoESpec

# An FP8 dispatch sends 1 byte per element (DeepSeek-V3 report, arXiv 2412.19437, sec. 3.3.2: quantized before the
# dispatch, the combine kept in BF16); only where TrainingSpec.fp8_moe_dispatch says the stack does it.
FP8_DISPATCH_BYTES = 1.0
# DualPipe overlaps one micro-batch's forward with another's backward chunk so that "both all-to-all and PP
# communication can be fully hidden during execution" (DeepSeek-V3 report sec. 3.2.1, Fig. 4): the EP
# all-to-alls hide under the whole paired computation; only an excess over it shows.
DUALPIPE_HIDDEN_COMPUTE_SHARE = 1.0

EP_COMM = formula(
    "expert.ep_comm",
    "m x 2 (fwd + bwd) x sum over the slowest stage's MoE layers of the dispatcher's dispatch + combine of "
    "tokens / tp x top_k x h x bytes (2 B each way, FP8 runs included; 1 B for the dispatch of a stack that quantizes "
    "first): all-to-all (group-limited routing across domains: M remote domains per token over the NIC, top_k copies "
    "over NVLink) plus, with ETP > 1, the expert-TP all-gather + reduce-scatter of etp x those copies, all-gather + "
    "reduce-scatter of tokens x h, or flex (DeepEP / HybridEP at DeepEP's published NVLink share and the NIC rate, "
    "one copy per target rank); less what shared experts hide; DualPipe or batch-level EP overlap: less the stage's "
    "paired compute",
    "GShard, Lepikhin et al. 2020, arXiv 2006.16668, sec. 2.2; DeepSeek-V3 report, arXiv 2412.19437, sec. 3.2.1 "
    "(DualPipe hides all-to-all), 3.2.2 (at most 4 nodes per token, IB then NVLink) and 3.3.2 (FP8 dispatch, BF16 "
    "combine); deepseek-ai/DeepEP README and docs/legacy.md (bandwidths); Megatron-core MoE README "
    "(--overlap-moe-expert-parallel-comm) and token_dispatcher.py at core_v0.14.0 (BF16 hidden states, expert-TP "
    "gather / scatter)",
)


# DeepEP normal kernels reach 153 GB/s of H800's ~160 GB/s NVLink intranode (EP8) and 43-58 GB/s over 50 GB/s CX7
# RDMA (deepseek-ai/DeepEP docs/legacy.md, V1 performance table); V2 on SM100 reaches 726 GB/s of 900 GB/s NVLink5
# (README, EP 8). The lower NVLink share (0.8) is the one used; RDMA at the NIC's achievable rate.
DEEPEP_NVLINK_FRACTION = 0.8


def dispatch_elem_bytes(ctx: Context) -> tuple[float, float]:
    """Bytes per hidden element of the dispatch and of the combine. The activations' 16-bit dtype both ways, FP8
    recipes included: Megatron-core's dispatchers send the hidden states as the layer holds them, in BF16 (the
    alltoall dispatcher's all_to_all of the permuted hidden states, token_dispatcher.py at core_v0.14.0;
    moe_dispatch_fwd_dtype defaults to 'bf16' and fused_a2a.py sets fp8_dispatch False for DeepEP, "HybridEP
    dispatcher does not support fp8 dispatch now"): FP8 starts inside the expert GEMMs. A stack that quantizes
    before the dispatch (TrainingSpec.fp8_moe_dispatch, DeepSeek-V3's) sends 1 byte; its combine stays BF16."""
    return (FP8_DISPATCH_BYTES if ctx.train.fp8_moe_dispatch else ACT_ELEM_BYTES), ACT_ELEM_BYTES


def dispatch_bytes(ctx: Context, shape: Shape, elem: float = ACT_ELEM_BYTES) -> float:
    """Bytes one device sends in one dispatch (or combine): top_k (x load) copies of its tokens' hidden states, at
    `elem` bytes per element."""
    m, p = ctx.model, shape.plan
    return shape.tokens / p.tp * m.require_moe().top_k * expert_load(ctx, shape) * m.hidden_size * elem


def ep_comm_fwd_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """Forward dispatch + combine of one MoE layer for one micro-batch (before any overlap), by dispatcher, each at its
    own element size (dispatch_elem_bytes)."""
    p = shape.plan
    if not (k.moe and p.ep > 1):
        return 0.0
    kind, ep, link = dispatcher(ctx), p.ep, shape.links.ep
    elems = dispatch_elem_bytes(ctx)
    if kind == "allgather":
        # every rank gathers all tokens of the EP group, then reduce-scatters the outputs (Megatron
        # MoEAllGatherTokenDispatcher): all-gather volume of tokens x h each way, not top_k copies
        full = shape.tokens / p.tp * ctx.model.hidden_size * ep
        return sum(collective_time("all_gather", full * e, ep, link) for e in elems)
    if kind == "flex":
        return sum(deepep_dispatch_s(ctx, shape, e) for e in elems)
    # a plain all-to-all sends every one of the top_k copies to its expert's rank, across the network too:
    # group-limited routing saves network volume only where the dispatcher forwards once per node (flex/DeepEP,
    # above; issue 24: Megatron's alltoall dispatcher does not, whatever --moe-router-group-topk says)
    t = sum(collective_time("all_to_all", dispatch_bytes(ctx, shape, e), ep, link) for e in elems)
    return (t + etp_gather_s(ctx, shape)) * (1.0 - ctx.calibration.EP_OVERLAP_FRACTION)


def etp_gather_s(ctx: Context, shape: Shape) -> float:
    """Expert tensor parallelism behind the alltoall dispatcher: after the all-to-all each rank all-gathers the tokens
    its expert-TP peers received, and reduce-scatters the experts' outputs back before the combine (megatron-core
    core_v0.14.0 token_dispatcher.py dispatch_postprocess gather_from_sequence_parallel_region over the expert TP
    group, combine_preprocess reduce_scatter_to_sequence_parallel_region), each of etp x the copies one rank
    received, over the TP fabric, in the activations' 16-bit dtype (the reduce-scatter runs in the router
    probabilities' dtype: fp32 under --moe-router-dtype fp32, not modelled)."""
    etp = max(1, shape.plan.etp)
    if etp <= 1:
        return 0.0
    gathered = dispatch_bytes(ctx, shape) * etp
    link = shape.links.tp
    return collective_time("all_gather", gathered, etp, link) + collective_time("reduce_scatter", gathered, etp, link)


def ranks_per_token(ctx: Context, shape: Shape) -> float:
    """EP ranks one token is sent to by a flex dispatch: DeepEP / HybridEP send a token once to each rank holding at
    least one of its top_k experts (deepseek-ai/DeepEP README, Buffer.get_dispatch_layout: num_tokens_per_rank,
    is_token_in_rank; the combine returns one reduced row per rank), not once per expert: the distinct ranks among its
    experts (moe.groups_per_token over num_experts / ep experts per rank)."""
    e = ctx.model.require_moe()
    return groups_per_token(ctx, max(1, e.num_experts // max(1, shape.plan.ep)))


def deepep_dispatch_s(ctx: Context, shape: Shape, elem: float) -> float:
    """One DeepEP / HybridEP dispatch (or combine): inside one NVLink domain the remote (ep - 1) / ep share of one copy
    per target rank (ranks_per_token) at DEEPEP_NVLINK_FRACTION of the per-direction NVLink rate; across domains each
    token crosses the network once per target domain (DeepEP forwards over RDMA to the same-index GPU, then fans out
    over NVLink: node_limited_dispatch_s, at these rates)."""
    p, m, su = shape.plan, ctx.model, ctx.cluster.hardware.scale_up
    link = shape.links.ep
    if link.crosses_domain:
        return node_limited_dispatch_s(ctx, shape, elem, su.unidir_GBps * DEEPEP_NVLINK_FRACTION * 1e9)
    remote = (p.ep - 1) / p.ep
    sent = shape.tokens / p.tp * ranks_per_token(ctx, shape) * expert_load(ctx, shape) * m.hidden_size * elem
    return link.alpha + sent * remote / (su.unidir_GBps * DEEPEP_NVLINK_FRACTION * 1e9)


def node_limited_dispatch_s(ctx: Context, shape: Shape, elem: float, intra_bw: float | None = None) -> float:
    """One dispatch (or combine) with group-limited routing over EP groups spanning domains (DeepSeek-V3
    report, arXiv 2412.19437, sec. 3.2.2): each token reaches at most M = route_topk_groups routing groups, crossing
    the network once per target domain (to the GPU of the same in-node index) and fanning out to its experts
    over NVLink; the two stages pipeline, so the slower one shows. Expected remote domains: min(M x the domains one
    group spans, the top_k experts' distinct domains) x (D - 1) / D."""
    p, m, link = shape.plan, ctx.model, shape.links.ep
    so = ctx.cluster.hardware.scale_out
    moe = m.require_moe()
    domains = max(1, p.ep // max(1, link.ranks_per_domain))
    # distinct target domains of a token's top_k experts (moe.groups_per_token over the experts of one domain; uniform
    # routing: D (1 - (1 - 1/D)^top_k)); the (D - 1) / D share of them is remote
    reach = groups_per_token(ctx, max(1, moe.num_experts // domains))
    remote = min(group_limited_domains(moe, domains), reach) * (domains - 1) / domains
    tokens = shape.tokens / p.tp
    nic = so.unidir_GBps_per_device * so.achievable_fraction * 1e9
    inter = link.alpha * (domains - 1) + tokens * remote * m.hidden_size * elem / nic
    if intra_bw is None:
        intra_link = ctx.cluster.hardware.scale_up
        intra_bw = (intra_link.ring_busbw_GBps or ctx.calibration.RING_WIRE_FRACTION * intra_link.unidir_GBps) * 1e9
    # the NVLink fan-out delivers one copy per target rank (ranks_per_token)
    intra = tokens * ranks_per_token(ctx, shape) * m.hidden_size * elem / intra_bw
    return max(inter, intra)


def group_limited_domains(moe: MoESpec, domains: int) -> float:
    """The most domains one token's experts can sit in under group-limited routing: M = route_topk_groups groups of
    route_groups, both the groups and the EP domains being runs of consecutive experts. The DeepSeek-V3 report's
    "at most 4 nodes" is one group per node (arXiv 2412.19437 sec. 2.1.2: 8 groups on 8 nodes); an EP group over D
    domains > route_groups spreads each group over D / route_groups of them, so a token reaches up to M x D /
    route_groups (DeepSeek-V3 at EP 256 over 32 nodes: 16, not 4). Fewer domains than groups: at most M. Unlimited
    routing: D."""
    if moe.route_topk_groups is None:
        return float(domains)
    return moe.route_topk_groups * max(1.0, domains / moe.route_groups)


def dualpipe_exposed_ep_s(ep_fwd_s: float, stage_fwd_s: float, stage_bwd_s: float) -> float:
    """The forward EP all-to-all time of a DualPipe stage left after hiding under its compute."""
    return max(0.0, ep_fwd_s - DUALPIPE_HIDDEN_COMPUTE_SHARE * (stage_fwd_s + stage_bwd_s))


# A plan that holds one routed expert per device runs it as one plain GEMM (moe.experts_s), while plans with several
# carry calibration.MOE_GROUPED_GEMM_REL_EFFICIENCY, a stand-in for costs not identified. The published runs with one
# routed expert per device (26 in runs/, all Megatron: 20 Grok-1 DGX Cloud rows, 6 of them on GB200, 2 Llama 4 Maverick
# DGX Cloud rows, 4 Mixtral 8x22B model-zoo rows) ran a median 8.7% slower than predicted (the 20 on Hopper 9.7%), while
# the 176 MoE runs with several experts per device land at a median -1.5% (tests/analysis/test_one_expert_rule.py
# recomputes both): the search favours such plans by about that much more than the runs do, which matters where the
# batch-level EP overlap hides a wide EP group's all-to-alls (planner.search.dispatchers) and EP reaches the expert
# count.
ONE_EXPERT_RUNS = 26
ONE_EXPERT_SLOWER_MEDIAN = 0.087


# A learned router against a force-balanced one, measured: NVIDIA's Megatron-MoE-ModelZoo (yanring/Megatron-MoE-ModelZoo
# at e865051, best_practice/qwen3/readme.md, Long Context table) ran Qwen3-235B-A22B on 256 H100s (TP 4, PP 8, VPP 4,
# EP 8, DeepEP, MBS 1, GBS 256) at 295 / 335 / 368 / 389 TFLOPS per GPU force-balanced and 237 / 277 / 320 / 357 with
# its router (dropless, aux loss 1e-3) at 16k / 32k / 64k / 131k tokens: 24% / 21% / 15% / 9% more time. Charged as a
# load on the busiest EP rank (moe.expert_load: its expert GEMMs, routed copies and all-to-alls), the four gaps ask
# for one load, 1.49-1.53, while the experts' share of the step falls about threefold from 16k to 131k
# (tests/costmodel/test_load_imbalance.py recomputes it from runs/modelzoo_runs_added.yaml); the same repository's
# Mixtral 8x22B (8 experts, EP 8, 4k tokens: 4.46 s dropless, 4.27 s forced) asks for 1.08. A stated measurement, not a
# default: the planner charges a balanced router unless --moe-load-imbalance says otherwise.
LEARNED_ROUTER_MORE_TIME = (0.09, 0.24)
LEARNED_ROUTER_LOAD = 1.5
MIXTRAL_ROUTER_MORE_TIME = 0.045
MIXTRAL_ROUTER_LOAD = 1.08


def routing_warnings(ctx: Context, shape: Shape) -> list[str]:
    """What the routing load charged to a dropless plan with expert parallelism assumes (moe.expert_load)."""
    t, p = ctx.train, shape.plan
    if not ctx.model.is_moe or t.moe_capacity_factor is not None or p.ep <= 1 or t.moe_force_balanced:
        return []
    if t.moe_load_imbalance is not None:
        return [f"MoE routing charged at the stated busiest-rank load {t.moe_load_imbalance:g} (--moe-load-imbalance) "
                f"at EP {p.ep}: a router's load changes with the EP degree, so it holds for the EP it was measured at"]
    lo, hi = LEARNED_ROUTER_MORE_TIME
    return [f"dropless MoE: charged at a balanced router's load; a learned router loads the busiest EP rank more "
            f"(NVIDIA measured, at EP 8: Qwen3-235B-A22B {lo:.0%}-{hi:.0%} longer than force-balanced, a load of "
            f"~{LEARNED_ROUTER_LOAD:g}; Mixtral 8x22B {MIXTRAL_ROUTER_MORE_TIME:.1%}, ~{MIXTRAL_ROUTER_LOAD:g}); "
            "--moe-load-imbalance charges a measured load, --moe-capacity-factor bounds it"]


def ep_warnings(ctx: Context, shape: Shape) -> list[str]:
    p, out = shape.plan, []
    if ctx.model.is_moe and p.ep > 1 and shape.links.ep.crosses_domain:
        out.append(f"EP group of {p.ep} spans {shape.links.ep.domains} scale-up domains: "
                   "token all-to-alls cross the scale-out network")
    out += routing_warnings(ctx, shape)
    if ctx.model.is_moe and p.ep > 1 and local_experts(ctx, shape) == 1 and not batched_experts(ctx) \
            and grouped_gemm_rel(ctx) < 1.0:
        out.append(f"one routed expert per device (EP {p.ep}): its GEMMs are costed as one plain GEMM, without the "
                   f"grouped-expert stand-in plans with several per device carry; the {ONE_EXPERT_RUNS} published runs "
                   f"with one per device ran a median {ONE_EXPERT_SLOWER_MEDIAN:.0%} slower than predicted, so plans "
                   "with fewer EP ranks may be closer than ranked")
    if ctx.model.is_moe and row_gather_extrapolated(ctx):
        out.append(f"dropless MoE on {ctx.cluster.hardware.id}: MaxText's token permutation (row gathers) is priced at "
                   "the share of HBM bandwidth measured on v5p (maxtext issue #1256), not a rate measured on this "
                   "generation; --moe-capacity-factor runs MaxText's einsum dispatch instead")
    if ctx.model.is_moe and ctx.train.moe_a2a_overlap and p.ep == 1:
        # megatron-core asserts expert parallelism for it (transformer_config.py: "overlap_moe_expert_parallel_comm is
        # only supported with expert model parallelism"): moe.merged_fwd_bwd and the emitter leave it out here
        out.append("batch-level EP overlap (--moe-a2a-overlap) with EP 1: no expert all-to-all to overlap, so this "
                   "plan is costed and written without it")
    return out


def ep_comm_term(ctx: Context, shape: Shape, stage_ep_s: float) -> Term:
    p = shape.plan
    return EP_COMM.term("ep_comm_s", shape.nmb * stage_ep_s, "s", microbatches=shape.nmb,
                        ep_per_microbatch_s=stage_ep_s, ep=p.ep, etp=p.etp, dispatcher=dispatcher(ctx),
                        busbw_GBps=shape.links.ep.busbw / 1e9)
