"""Pipeline schedules: step time with the bubble, and in-flight micro-batches per stage.

References: GPipe (Huang et al. 2019, arXiv 1811.06965); 1F1B / PipeDream-Flush and interleaved 1F1B
(Narayanan et al. SC21, arXiv 2104.04473, sec. 2.2: bubble (p-1)/m and (p-1)/(v m)); zero-bubble
ZB-H1 (Qi et al. 2023, arXiv 2401.10241, sec. 3: bubble (p-1)(T_F + T_B - T_W) at 1F1B memory);
uneven stages: Alpa (Zheng et al. OSDI'22, eq. 2); DualPipe and DualPipeV (deepseek-ai/DualPipe README,
"Pipeline Bubbles and Memory Usage Comparison"). planner.analysis.timeline draws the same model.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from planner.costmodel.base import ACT_ELEM_BYTES, Context, Shape
from planner.costmodel.collectives import collective_time
from planner.costmodel.trace import Term, formula
from planner.specs import ParallelPlan

if TYPE_CHECKING:
    from planner.costmodel.layers import StageTimes


# ZB-H1 splits the backward into B (input gradient) and W (weight gradient) of about equal time
# (Qi et al. 2023, arXiv 2401.10241, sec. 2: T_B ~ T_W); planner.analysis.timeline draws the same split.
ZB_W_FRACTION = 0.5

# Schedules that place a rank's two stages in a V (rank r holds stages r and 2 pp - 1 - r, so rank 0 holds the first
# and the last: torch 2.13 pipelining generate_stage_to_rank_mapping(style="v"), torchtitan 0.3.0
# _get_pp_rank_to_stage_indices_mapping for ScheduleDualPipeV)
V_SHAPED_SCHEDULES = ("dualpipev",)


def v_shaped(plan: ParallelPlan) -> bool:
    return plan.pp > 1 and plan.schedule in V_SHAPED_SCHEDULES


def head_stage(plan: ParallelPlan) -> int:
    """The rank that holds the LM head and the loss: the last one, or rank 0 in a V (V_SHAPED_SCHEDULES)."""
    return 0 if v_shaped(plan) else plan.pp - 1


def rank_first_last_layers(plan: ParallelPlan, num_layers: int) -> tuple[int | None, int | None]:
    """Layers on the first and on the last rank as the cost model splits them (partition.stage_layer_counts' first /
    last): the plan's own sizes. In a V with the embedding and the loss counted as a layer each, rank 0 holds both
    ends, so it takes two layers fewer than the others (torchtitan's first/last_stage_less_layers on stages 0 and
    2 pp - 1, both rank 0's)."""
    if v_shaped(plan) and plan.account_embedding_loss:
        return (num_layers + 2) // plan.pp - 2, None
    return plan.first_stage_layers, plan.last_stage_layers


def fullest_rank_layers(plan: ParallelPlan, num_layers: int) -> int:
    """Transformer layers of the pipeline rank that holds the most, as partition.stage_layer_counts splits them with
    the plan's first / last rank sizes (rank_first_last_layers)."""
    from planner.costmodel.partition import stage_layer_counts

    return max(stage_layer_counts(num_layers, plan.pp, *rank_first_last_layers(plan, num_layers)))


def dualpipev_fill_s(stage_s: float, fwd_s: float) -> float:
    """One rank's share of DualPipeV's bubble: F&B + B - 3W of one of its two stages (deepseek-ai/DualPipe README:
    bubble (PP/2 - 1)(F&B + B - 3W) over PP stages on PP/2 ranks). torch's ScheduleDualPipeV runs the paired forward
    and backward one after the other unless the model registers an overlap function (torchtitan 0.3.0 does not), so
    F&B = F + B; a stage is half the rank's layers (F = fwd / 2, B = bwd / 2) and W = ZB_W_FRACTION of B."""
    f, b = fwd_s / 2.0, (stage_s - fwd_s) / 2.0
    return f + b + b - 3.0 * ZB_W_FRACTION * b


def pipeline_step_time(stage_s: list[float], m: int, schedule: str, vpp: int = 1,
                       fwd_s: list[float] | None = None, schedules: int = 1) -> float:
    """Time of m micro-batches through stages taking stage_s[i] (fwd+bwd of one micro-batch each).

    Uniform stages give (m + p - 1) t, the 1F1B/GPipe makespan (Narayanan et al. SC21 sec. 2.2); with
    uneven stages the slowest stage sets the steady state and the others fill and drain:
    sum(stage) + (m - 1) max(stage) (Alpa, Zheng et al. OSDI'22, eq. 2). Interleaving shrinks the
    fill/drain by v. ZB-H1 (needs `fwd_s`, the forward part of each stage time) fills with
    T_F + T_B - T_W of each other stage (Qi et al. 2023 sec. 3: bubble (p-1)(T_F + T_B - T_W)), with
    T_W = ZB_W_FRACTION of the backward. DualPipe: (p/2 - 1)/(p - 1) of 1F1B's fill (DeepSeek-V3 Table 2).
    DualPipeV (needs `fwd_s`): each other rank fills with dualpipev_fill_s.
    The m micro-batches run as `schedules` consecutive schedules (schedules_per_step): each fills and drains.
    """
    p = len(stage_s)
    slow = max(range(p), key=stage_s.__getitem__)
    if p == 1:
        return m * stage_s[slow]
    fill_s = list(stage_s)
    frac = 1.0
    if schedule == "interleaved":
        frac = 1.0 / max(1, vpp)
    elif schedule in ("zb", "dualpipev"):
        if fwd_s is None:
            raise ValueError(f"the {schedule} schedule needs the forward part of each stage time (fwd_s)")
        fill_s = [f + (1.0 - 2.0 * ZB_W_FRACTION) * (t - f) if schedule == "zb" else dualpipev_fill_s(t, f)
                  for t, f in zip(stage_s, fwd_s, strict=True)]
    elif schedule == "dualpipe":
        frac = dualpipe_fill_fraction(p)
    return m * stage_s[slow] + schedules * frac * (sum(fill_s) - fill_s[slow])


def dualpipe_fill_fraction(pp: int) -> float:
    """DualPipe's bubble relative to 1F1B's: (PP/2 - 1) vs (PP - 1) stage-times (DeepSeek-V3 report,
    arXiv 2412.19437, sec. 3.2.1 Table 2; its F&B - 3W refinement is ignored, an upper bound)."""
    return max(0.0, pp / 2 - 1) / (pp - 1) if pp > 1 else 0.0


def inflight_microbatches(schedule: str, pp: int, stage: int, m: int, vpp: int = 1) -> float:
    """Micro-batches whose activations a stage holds at its peak, in units of the stage's full
    layer set. 1F1B: p - stage (first stage holds p; SC21 sec. 2.2.1); GPipe: all m; interleaved:
    Megatron's warm-up count ((p - stage - 1) * 2 + (v - 1) * p + 1) chunks of 1/v of the stage."""
    if pp <= 1:
        return 1.0
    if schedule == "gpipe":
        return float(m)
    if schedule == "dualpipe":
        return float(min(m, pp + 1))  # DeepSeek-V3 Table 2: PP + 1 micro-batches of activations
    if schedule == "dualpipev":
        # deepseek-ai/DualPipe README: PP + 1 stage-activations per rank over PP = 2 pp stages, i.e. pp + 1/2 of
        # the rank's two stages
        return float(min(m, pp + 0.5))
    if schedule == "interleaved" and vpp > 1:
        chunks = min(m * vpp, (pp - stage - 1) * 2 + (vpp - 1) * pp + 1)
        return chunks / vpp
    return float(min(m, pp - stage))


# ---- terms of the step: the schedule's makespan, its bubble and the fill/drain transfers ----------------

BUBBLE = formula(
    "pipeline.bubble",
    "max(0, makespan - m x t_slowest), makespan = m x t_slowest + f x (sum of the other stages' t); f = 1 for "
    "1F1B/GPipe, 1/v interleaved, (p/2 - 1)/(p - 1) DualPipe; ZB-H1: the other stages' T_F + T_B - T_W "
    "(T_W = half the backward); DualPipeV: the other ranks' F + 2B - 3W of one of their two stages (F&B = F + B, "
    "run one after the other); x the schedules per step (one per local batch in NeMo AutoModel)",
    "Narayanan et al. SC21, arXiv 2104.04473, sec. 2.2 ((p-1)/m, (p-1)/(v m)); Alpa, Zheng et al. OSDI'22, eq. 2 "
    "(uneven stages); Qi et al. 2023, arXiv 2401.10241, sec. 3; DeepSeek-V3 report, arXiv 2412.19437, Table 2; "
    "deepseek-ai/DualPipe README (DualPipeV); torch 2.13 pipelining ScheduleDualPipeV",
)
P2P = formula(
    "pipeline.p2p",
    "exposed transfers x t_p2p, t_p2p = alpha + tokens x h x 2 B (/ tp with SP or Megatron scatter/gather) / busbw. "
    "Blocking schedules (1F1B, "
    "GPipe, ZB): 2 (m + w) transfers, w = p - 1 warm-up steps; interleaved (Megatron overlap_p2p_comm), "
    "DualPipe and DualPipeV: only the 2 w warm-up / flush transfers (w = 2 (p - 1) + (v - 1) p interleaved) plus, "
    "per steady-state transfer (DualPipeV: 2 per micro-batch each way), max(0, t_p2p - chunk compute)",
    "NeMo docs, Communication Overlap, 'Pipeline-parallel Communication Overlap' (PP traffic grows with the virtual "
    "pipeline size; overlapped in the 1F1B phase only with virtual pipelining; fill and flush exposed); Megatron-LM "
    "--no-overlap-p2p-communication (overlap off for non-interleaved schedules); Megatron-core interleaved "
    "warm-up count; Narayanan et al. SC21 sec. 4.1 (scatter/gather); DeepSeek-V3 report, arXiv 2412.19437, "
    "sec. 3.2.1 (DualPipe hides PP communication)",
)


def p2p_transfer_counts(schedule: str, pp: int, vpp: int, nmb: int) -> tuple[float, float]:
    """(transfers exposed on the critical path, steady-state transfers that overlap a chunk's compute) of one
    stage per step; one transfer = one activation (forward) or gradient (backward) send/recv pair."""
    if pp <= 1:
        return 0.0, 0.0
    if schedule == "interleaved" and vpp > 1:
        warmup = min(nmb * vpp, 2 * (pp - 1) + (vpp - 1) * pp)  # Megatron-core rank 0 warm-up chunks
        return 2.0 * warmup, 2.0 * max(0, nmb * vpp - warmup)
    if schedule == "dualpipe":
        return 2.0 * (pp - 1), 2.0 * max(0, nmb - (pp - 1))
    if schedule == "dualpipev":
        # two stages per rank: each micro-batch crosses ranks twice each way (ZB-V's 2x 1F1B's pipeline volume,
        # sail-sg/zero-bubble-pipeline-parallelism README); warm-up and flush exposed, the rest under a stage's compute
        return 2.0 * (pp - 1), 2.0 * max(0, 2 * nmb - (pp - 1))
    return 2.0 * (nmb + pp - 1), 0.0


def schedule_of(plan: ParallelPlan) -> str:
    return plan.schedule if plan.pp > 1 else "1f1b"


def memory_schedule(ctx: Context, plan: ParallelPlan) -> str:
    """The schedule whose in-flight micro-batches (inflight_microbatches) a stage's activations follow: the stack's own
    under a pipeline (Stack.pipeline_memory_schedule: MaxText's scan keeps every micro-batch, GPipe's memory, whatever
    order the plan names), else the plan's (schedule_of)."""
    own = ctx.stack.pipeline_memory_schedule
    return own if own is not None and plan.pp > 1 else schedule_of(plan)


def schedules_per_step(ctx: Context, shape: Shape) -> int:
    """Pipeline schedules one step runs: one over all its micro-batches, or, where the run groups them
    (TrainingSpec.pp_schedule_microbatches: NeMo AutoModel runs its pipeline schedule once per local batch and repeats
    it for gradient accumulation: NVIDIA-NeMo/Automodel@8d9bfb9 recipes/llm/train_ft.py _run_train_optim_step calls
    _forward_backward_step, i.e. pp.info.schedule.step, once per local batch), one per group (the last one partial)."""
    per = ctx.train.pp_schedule_microbatches
    if shape.plan.pp <= 1 or per is None or per >= shape.nmb:
        return 1
    return math.ceil(shape.nmb / per)


def makespan_s(ctx: Context, shape: Shape, st: StageTimes) -> float:
    """Time of the step's micro-batches through the pipeline stages (pipeline_step_time), schedule by schedule."""
    p = shape.plan
    # the forward pass carries half of the exposed per-layer collectives (they are counted fwd + bwd)
    fwd = [st.fwd[s] + st.comm[s] / 2 for s in range(p.pp)]
    return pipeline_step_time([st.microbatch_s(s) for s in range(p.pp)], shape.nmb, schedule_of(p), p.vpp, fwd,
                              schedules_per_step(ctx, shape))


def bubble_term(shape: Shape, st: StageTimes, makespan: float, slow: int) -> Term:
    p = shape.plan
    return BUBBLE.term("bubble_s", max(0.0, makespan - shape.nmb * st.microbatch_s(slow)), "s",
                       makespan_s=makespan, microbatches=shape.nmb, slowest_stage_s=st.microbatch_s(slow),
                       schedule=schedule_of(p) if p.pp > 1 else "none", pp=p.pp, vpp=p.vpp)


def p2p_term(ctx: Context, shape: Shape, st: StageTimes) -> Term:
    p = shape.plan
    if p.pp <= 1:
        return P2P.term("pp_comm_s", 0.0, "s", pp=p.pp)
    # each TP rank sends its 1/tp of the activation: sequence parallelism shards it, and without it Megatron's
    # scatter/gather optimisation does (Narayanan et al. SC21, arXiv 2104.04473, sec. 4.1)
    split = p.tp if (shape.sp or ctx.stack.pp_p2p_scatter_gather) else 1
    nbytes = shape.tokens * ctx.model.hidden_size * ACT_ELEM_BYTES / split
    t_one = collective_time("send_recv", nbytes, 2, shape.links.pp)
    schedules = schedules_per_step(ctx, shape)  # each schedule's warm-up and flush transfers are exposed
    exposed, steady = p2p_transfer_counts(schedule_of(p), p.pp, p.vpp, math.ceil(shape.nmb / schedules))
    exposed, steady = exposed * schedules, steady * schedules
    chunk_s = min(min(st.fwd), min(st.bwd)) / max(1, p.vpp)  # the shortest compute a transfer hides under
    t = exposed * t_one + steady * max(0.0, t_one - chunk_s)
    return P2P.term("pp_comm_s", t, "s", pp=p.pp, vpp=p.vpp, microbatches=shape.nmb, exposed_transfers=exposed,
                    overlapped_transfers=steady, transfer_s=t_one, chunk_compute_s=chunk_s, bytes_per_transfer=nbytes,
                    busbw_GBps=shape.links.pp.busbw / 1e9, alpha_s=shape.links.pp.alpha)
