"""Expert parallelism: the token dispatch and combine all-to-alls of an MoE layer (GShard, Lepikhin et al.
2020, arXiv 2006.16668, sec. 2.2; Megatron-core's all-to-all token dispatcher): top_k copies of each
token's hidden state go to the ep ranks holding their experts and come back."""

from __future__ import annotations

from planner.costmodel import calibration as cal
from planner.costmodel.base import ACT_ELEM_BYTES, Context, LayerKind, Shape
from planner.costmodel.collectives import collective_time
from planner.costmodel.trace import Term, formula
from planner.specs import ModelSpec, TrainingSpec

# FP8 recipes dispatch tokens in FP8 (DeepSeek-V3 report, arXiv 2412.19437, sec. 3.3.2): 1 byte per element.
FP8_DISPATCH_BYTES = 1.0
# DualPipe overlaps one micro-batch's forward with another's backward chunk so that "both all-to-all and PP
# communication can be fully hidden during execution" (DeepSeek-V3 report sec. 3.2.1, Fig. 4): the EP
# all-to-alls hide under the whole paired computation; only an excess over it shows.
DUALPIPE_HIDDEN_COMPUTE_SHARE = 1.0

EP_COMM = formula(
    "expert.ep_comm",
    "m x 2 (fwd + bwd) x sum over the slowest stage's MoE layers of 2 all-to-alls (dispatch, combine) of "
    "tokens / tp x top_k x h x bytes (group-limited routing across domains: M remote domains per token over the "
    "NIC, top_k copies over NVLink); DualPipe: less the stage's paired compute",
    "GShard, Lepikhin et al. 2020, arXiv 2006.16668, sec. 2.2; DeepSeek-V3 report, arXiv 2412.19437, sec. 3.2.1 "
    "(DualPipe hides all-to-all) and 3.2.2 (at most 4 nodes per token, IB then NVLink)",
)


def expert_load(ctx: Context) -> float:
    """Tokens each expert processes relative to the balanced load: the capacity factor when tokens are padded
    to capacity (TrainingSpec.moe_capacity_factor), else 1 (dropless, charged at balanced routing)."""
    return ctx.train.moe_capacity_factor or 1.0


def node_limited_dispatch(model: ModelSpec, train: TrainingSpec) -> bool:
    """Whether the stack sends group-limited routing once per target node (DeepEP's internode dispatch behind
    Megatron-LM's flex dispatcher, which planner.emit.megatron writes for these models). Without it (Megatron's
    alltoall dispatcher, torchtitan's and MaxText's all-to-alls) every one of the top_k copies crosses the
    network; DeepEP refuses padding to capacity (megatron-core 0.19.2 transformer_config.py flex + deepep)."""
    from planner.stacks import stack_of

    moe = model.moe
    return (moe is not None and moe.route_topk_groups is not None and stack_of(train).moe_node_limited_dispatch
            and train.moe_capacity_factor is None)


def ep_comm_fwd_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """Forward dispatch + combine all-to-all of one MoE layer for one micro-batch (exposed share)."""
    p = shape.plan
    if not (k.moe and p.ep > 1):
        return 0.0
    m, ep = ctx.model, p.ep
    elem = FP8_DISPATCH_BYTES if ctx.train.dtype == "fp8" else ACT_ELEM_BYTES
    link = shape.links.ep
    moe = m.require_moe()
    a2a_bytes = shape.tokens / p.tp * moe.top_k * expert_load(ctx) * m.hidden_size * elem * ep
    t = collective_time("all_to_all", a2a_bytes / ep, ep, link)
    if link.crosses_domain and node_limited_dispatch(m, ctx.train):
        t = min(t, node_limited_dispatch_s(ctx, shape, elem))
    return 2 * t * (1.0 - cal.EP_OVERLAP_FRACTION)


def node_limited_dispatch_s(ctx: Context, shape: Shape, elem: float) -> float:
    """One dispatch (or combine) with group-limited routing over EP groups spanning domains (DeepSeek-V3
    report, arXiv 2412.19437, sec. 3.2.2): each token reaches at most M = route_topk_groups domains, crossing
    the network once per target domain (to the GPU of the same in-node index) and fanning out to its experts
    over NVLink; the two stages pipeline, so the slower one shows. Expected remote domains: M (D - 1) / D."""
    p, m, link = shape.plan, ctx.model, shape.links.ep
    so = ctx.cluster.hardware.scale_out
    moe = m.require_moe()
    assert moe.route_topk_groups is not None  # the caller dispatches here only with group-limited routing
    domains = max(1, p.ep // max(1, link.ranks_per_domain))
    remote = min(moe.route_topk_groups, domains) * (domains - 1) / domains
    tokens = shape.tokens / p.tp
    nic = so.unidir_GBps_per_device * so.achievable_fraction * 1e9
    inter = link.alpha * (domains - 1) + tokens * remote * m.hidden_size * elem / nic
    intra_link = ctx.cluster.hardware.scale_up
    intra_bw = (intra_link.ring_busbw_GBps or cal.RING_WIRE_FRACTION * intra_link.unidir_GBps) * 1e9
    intra = tokens * moe.top_k * m.hidden_size * elem / intra_bw
    return max(inter, intra)


def dualpipe_exposed_ep_s(ep_fwd_s: float, stage_fwd_s: float, stage_bwd_s: float) -> float:
    """The forward EP all-to-all time of a DualPipe stage left after hiding under its compute."""
    return max(0.0, ep_fwd_s - DUALPIPE_HIDDEN_COMPUTE_SHARE * (stage_fwd_s + stage_bwd_s))


def ep_warnings(ctx: Context, shape: Shape) -> list[str]:
    p, out = shape.plan, []
    if ctx.model.is_moe and p.ep > 1 and shape.links.ep.crosses_domain:
        out.append(f"EP group of {p.ep} spans {shape.links.ep.domains} scale-up domains: "
                   "token all-to-alls cross the scale-out network")
    if ctx.model.is_moe and ctx.train.moe_capacity_factor is None:
        out.append("dropless MoE: expert time and memory are charged at balanced routing; a real router loads "
                   "the busiest expert more (--moe-capacity-factor bounds it)")
    return out


def ep_comm_term(shape: Shape, stage_ep_s: float) -> Term:
    p = shape.plan
    return EP_COMM.term("ep_comm_s", shape.nmb * stage_ep_s, "s", microbatches=shape.nmb,
                        ep_per_microbatch_s=stage_ep_s, ep=p.ep, etp=p.etp,
                        busbw_GBps=shape.links.ep.busbw / 1e9)
