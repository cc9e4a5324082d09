"""Tensor (and sequence) parallelism: the per-layer activation collectives of one micro-batch.

With sequence parallelism a layer runs 2 all-gathers + 2 reduce-scatters of the (tokens x h) activation
in forward, without it 2 all-reduces (Korthikanti et al. 2022, arXiv 2205.05198, sec. 4.2.2); MoE layers
with EP swap the MLP pair for the token all-to-alls (planner.costmodel.expert). Backward mirrors forward.
"""

from __future__ import annotations

from planner.costmodel.base import ACT_ELEM_BYTES, Context, LayerKind, Shape
from planner.costmodel.collectives import collective_time
from planner.costmodel.trace import Term, formula
from planner.specs import ParallelPlan

TP_COMM = formula(
    "tensor.tp_comm",
    "m x 2 (fwd + bwd) x sum over the slowest stage's layers of: SP 2 x (all-gather + reduce-scatter), else 2 "
    "all-reduces, of tokens x h x 2 B (one pair with EP in MoE layers); x (1 - TP_OVERLAP_HIDDEN_FRACTION) when "
    "overlapped with GEMMs",
    "Korthikanti et al. 2022, arXiv 2205.05198, sec. 4.2.2; alpha-beta collectives (Thakur et al. 2005); "
    "Transformer Engine userbuffers overlap (calibration.py)",
)


def tp_comm_fwd_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """Forward TP collectives of one layer for one micro-batch (seconds, not yet less any overlap)."""
    p = shape.plan
    tp = p.tp
    if tp <= 1:
        return 0.0
    buf = shape.tokens * ctx.model.hidden_size * ACT_ELEM_BYTES
    n_pairs = 1 if (k.moe and p.ep > 1) else 2
    if shape.sp:
        link = shape.links.tp
        ag_rs = collective_time("all_gather", buf, tp, link) + collective_time("reduce_scatter", buf, tp, link)
        return n_pairs * ag_rs
    return n_pairs * collective_time("all_reduce", buf, tp, shape.links.tp_ar)


def tp_exposed_share(ctx: Context, p: ParallelPlan) -> float:
    """Share of the TP collective time left on the critical path: all of it, or what TP communication
    overlap does not hide (calibration.TP_OVERLAP_HIDDEN_FRACTION, or the profile's pinned value)."""
    return 1.0 - ctx.tp_overlap_hidden if p.tp_comm_overlap else 1.0


def tp_warnings(ctx: Context, shape: Shape) -> list[str]:
    tp, cl = shape.plan.tp, ctx.cluster
    if tp > 1 and shape.links.tp.crosses_domain:
        return [f"TP group of {tp} crosses the {cl.scale_up_size}-device scale-up domain: "
                "its per-layer collectives run over the scale-out network"]
    return []


def tp_comm_term(ctx: Context, shape: Shape, stage_tp_s: float) -> Term:
    p = shape.plan
    return TP_COMM.term("tp_comm_s", shape.nmb * stage_tp_s * tp_exposed_share(ctx, p), "s",
                        microbatches=shape.nmb, tp_per_microbatch_s=stage_tp_s, tp=p.tp,
                        sequence_parallel=str(shape.sp), overlapped=str(p.tp_comm_overlap),
                        busbw_GBps=shape.links.tp.busbw / 1e9)
