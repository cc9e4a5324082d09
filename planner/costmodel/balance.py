"""The layer -> stage balancing problem of a plan (planner.costmodel.stage_problem.StageProblem), built from the same
per-layer costs `evaluate` uses."""

from __future__ import annotations

from planner.costmodel.base import ACT_ELEM_BYTES, Context, plan_shape
from planner.costmodel.compute import lm_head_fwd_s
from planner.costmodel.layers import layer_times, mtp_times
from planner.costmodel.memory import (
    GIB,
    act_elems,
    allocator_fragmentation,
    framework_overhead_bytes,
    logits_bytes_per_token,
    mtp_activations,
    state_bytes_per_param,
)
from planner.costmodel.mtp import mtp_extra_params
from planner.costmodel.pipeline import inflight_microbatches, memory_schedule
from planner.costmodel.stage_problem import StageProblem
from planner.costmodel.tensor import tp_exposed_share
from planner.specs import ParallelPlan


def _layer_rows(ctx: Context, plan: ParallelPlan) -> tuple[tuple[float, ...], ...]:
    """Per layer: (time, recompute time, activation bytes, activation bytes under full recompute, state bytes)."""
    shape = plan_shape(ctx, plan)
    st = state_bytes_per_param(ctx.train, plan.zero_stage, plan.offload_optimizer)
    z_dense, z_exp = shape.dims.zero_shard, shape.dims.expert_zero_shard
    per_dense, per_exp = sum(st.per_param(z_dense)), sum(st.per_param(z_exp))
    base_mode = plan.recompute if plan.recompute != "full" else "none"
    rows = []
    for k in ctx.layer_kinds:
        lf, lb, lsel, lt, lc, le, _, _ = layer_times(ctx, shape, k)
        comm = 2 * (tp_exposed_share(ctx, plan) * lt + lc + le)
        dense = (k.params.total - k.params.routed_experts) / plan.tp
        selective = lsel if plan.recompute == "selective" else 0.0
        rows.append((lf + lb + comm + selective, lf + lt + lc + le,
                     act_elems(ctx, shape, k, base_mode) * shape.tokens * ACT_ELEM_BYTES,
                     act_elems(ctx, shape, k, "full") * shape.tokens * ACT_ELEM_BYTES,
                     dense * per_dense + k.params.routed_experts / (plan.ep * plan.etp) * per_exp))
    return tuple(zip(*rows, strict=True))


def stage_problem(ctx: Context, plan: ParallelPlan, capacity_gib: float):
    """The balancing problem of `plan`: fwd+bwd time and exposed collectives per layer, the extra time of a
    fully recomputed layer, activation bytes per in-flight micro-batch with and without full recompute,
    model-state bytes per layer, the embedding / LM head + loss extras and in-flight micro-batches per
    stage. Capacity = usable memory less the framework overhead, over the allocator fragmentation."""
    m, pp, tp = ctx.model, plan.pp, plan.tp
    shape = plan_shape(ctx, plan)
    t, rc, act, act_rc, state = _layer_rows(ctx, plan)
    st = state_bytes_per_param(ctx.train, plan.zero_stage, plan.offload_optimizer)
    per_dense = sum(st.per_param(shape.dims.zero_shard))
    inflight = tuple(inflight_microbatches(memory_schedule(ctx, plan), pp, s, shape.nmb, plan.vpp) for s in range(pp))
    overhead = framework_overhead_bytes(ctx.train.framework, ctx.cluster.hardware.is_tpu)
    cap = max(1.0, (capacity_gib * GIB - overhead) / allocator_fragmentation(ctx.train.framework, ctx.calibration,
                                                                                  ctx.train.expandable_segments))
    # the MTP modules sit with the LM head and loss (planner.costmodel.mtp; megatron-core's layouts put them last)
    mt = mtp_times(ctx, shape)
    mtp_time = mt.fwd + mt.bwd + mt.rec + 2 * (tp_exposed_share(ctx, plan) * mt.tp + mt.cp + mt.ep)
    extra, _ = mtp_extra_params(ctx, pp - 1, plan.schedule)  # its layers are the last layer's kind (mtp.mtp_kind)
    mtp_bytes = (m.mtp_layers * state[-1] + extra / tp * per_dense + mtp_activations(ctx, shape) * inflight[pp - 1])
    return StageProblem(
        num_layers=m.num_layers, pp=pp, layer_time_s=t, layer_recompute_s=rc,
        layer_act_bytes=act, layer_act_bytes_recompute=act_rc, layer_state_bytes=state,
        first_extra_time_s=0.0, last_extra_time_s=3 * lm_head_fwd_s(ctx, shape) + mtp_time,
        first_extra_bytes=ctx.params.embedding / tp * per_dense
        + shape.tokens * m.hidden_size * ACT_ELEM_BYTES * inflight[0],
        last_extra_bytes=(ctx.params.lm_head or ctx.params.embedding) / tp * per_dense
        + shape.tokens * logits_bytes_per_token(m, tp, ctx.train) * (1 + m.mtp_layers) + mtp_bytes,
        inflight=inflight, capacity_bytes=cap,
        uniform_recompute=plan.recompute == "full",
    )
