"""Expert parallelism: the token dispatch and combine all-to-alls of an MoE layer (GShard, Lepikhin et al.
2020, arXiv 2006.16668, sec. 2.2; Megatron-core's all-to-all token dispatcher): top_k copies of each
token's hidden state go to the ep ranks holding their experts and come back."""

from __future__ import annotations

import math

from planner.costmodel import calibration as cal
from planner.costmodel.base import ACT_ELEM_BYTES, Context, LayerKind, Shape
from planner.costmodel.collectives import collective_time
from planner.costmodel.trace import Term, formula

# FP8 recipes dispatch tokens in FP8 (DeepSeek-V3 report, arXiv 2412.19437, sec. 3.3.2): 1 byte per element.
FP8_DISPATCH_BYTES = 1.0
# DualPipe overlaps one micro-batch's forward with another's backward, hiding the EP all-to-alls under
# half of that computation (DeepSeek-V3 report sec. 3.2.1, Fig. 4): only the excess shows.
DUALPIPE_HIDDEN_COMPUTE_SHARE = 0.5

EP_COMM = formula(
    "expert.ep_comm",
    "m x 2 (fwd + bwd) x sum over the slowest stage's MoE layers of 2 all-to-alls (dispatch, combine) of "
    "tokens / tp x top_k x h x bytes; DualPipe: less half the stage's compute",
    "GShard, Lepikhin et al. 2020, arXiv 2006.16668, sec. 2.2; DeepSeek-V3 report, arXiv 2412.19437, sec. 3.2.1",
)


def ep_comm_fwd_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """Forward dispatch + combine all-to-all of one MoE layer for one micro-batch (exposed share)."""
    p = shape.plan
    if not (k.moe and p.ep > 1):
        return 0.0
    m, ep = ctx.model, p.ep
    elem = FP8_DISPATCH_BYTES if ctx.train.dtype == "fp8" else ACT_ELEM_BYTES
    a2a_bytes = shape.tokens / p.tp * m.moe.top_k * m.hidden_size * elem * ep
    t = 2 * collective_time("all_to_all", a2a_bytes / ep, ep, shape.links.ep)
    return t * (1.0 - cal.EP_OVERLAP_FRACTION)


def dualpipe_exposed_ep_s(ep_fwd_s: float, stage_fwd_s: float, stage_bwd_s: float) -> float:
    """The forward EP all-to-all time of a DualPipe stage left after hiding under its compute."""
    return max(0.0, ep_fwd_s - DUALPIPE_HIDDEN_COMPUTE_SHARE * (stage_fwd_s + stage_bwd_s))


def ep_warnings(ctx: Context, shape: Shape) -> list[str]:
    p, cl = shape.plan, ctx.cluster
    if ctx.model.is_moe and p.ep > 1 and shape.links.ep.crosses_domain:
        return [f"EP group of {p.ep} spans {math.ceil(p.ep * p.etp / cl.scale_up_size)} scale-up domains: "
                "token all-to-alls cross the scale-out network"]
    return []


def ep_comm_term(shape: Shape, stage_ep_s: float) -> Term:
    p = shape.plan
    return EP_COMM.term("ep_comm_s", shape.nmb * stage_ep_s, "s", microbatches=shape.nmb,
                        ep_per_microbatch_s=stage_ep_s, ep=p.ep, etp=p.etp,
                        busbw_GBps=shape.links.ep.busbw / 1e9)
