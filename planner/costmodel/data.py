"""Data parallelism and ZeRO / FSDP: the gradient reduction and parameter gathers of one step, less what
overlaps compute.

ZeRO stages (Rajbhandari et al., ZeRO, SC20, arXiv 1910.02054, sec. 5 and 7): stage 0 all-reduces the
gradients (2 (n-1)/n B per rank), stages 1-2 reduce-scatter them and all-gather the updated parameters
(same volume), stage 3 / FSDP gathers the parameters for every forward and backward pass and
reduce-scatters the gradients per micro-batch (1.5x). DeepSpeed ZeRO-3 gathers each parameter tensor on
its own (ZeRO-Infinity, Rajbhandari et al. SC21, arXiv 2104.07857, sec. 6.1); DeepSpeed of 2021 blocked
on every gather (PR #1188) and all-reduced gradients (issue #1173).
"""

from __future__ import annotations

from planner.costmodel.base import PARAM_GATHER_BYTES, Context, Shape, StageSplit
from planner.costmodel.collectives import Kind, collective_time, group_link
from planner.costmodel.layers import StageTimes
from planner.costmodel.memory import StageParams, grad_bytes_per_param, largest_layer_params_per_device
from planner.costmodel.trace import Term, formula
from planner.specs import ParallelPlan
from planner.specs.dims import ParallelDims

DP_NONE = formula("data.none", "no data-parallel replicas: 0", "definition (a single replica reduces nothing)")
DP_ALL_REDUCE = formula(
    "data.all_reduce",
    "max(0, all-reduce(grads) - f x last backward): ZeRO-0 gradient all-reduce over dp x cp (experts: over edp)",
    "ZeRO, SC20, arXiv 1910.02054, sec. 7 (2 Psi per rank); overlap: Megatron --overlap-grad-reduce",
)
DP_REDUCE_SCATTER = formula(
    "data.reduce_scatter_all_gather",
    "max(0, reduce-scatter(grads) - f x last backward) + max(0, all-gather(bf16 params) - f x first forward): "
    "ZeRO-1/2, over dp x cp (experts: over edp)",
    "ZeRO, SC20, arXiv 1910.02054, sec. 7.2 (Psi + Psi per rank); Megatron distributed optimizer",
)
DP_ZERO3 = formula(
    "data.zero3_prefetch",
    "m x [max(0, AG - f x fwd) + max(0, (1 + regather) AG + RS - f x (bwd + recompute))] + (1 - f) AG: per "
    "micro-batch all-gathers of bf16 params for forward and backward and reduce-scatter of grads, prefetched "
    "under compute; + HSDP all-reduce across replicas",
    "ZeRO, SC20, sec. 7.2.2 (3 Psi per rank); ZeRO-Infinity, SC21, arXiv 2104.07857, sec. 6.1; FSDP2 prefetch",
)
DP_ZERO3_PIPELINED = formula(
    "data.zero3_pipelined",
    "max(0, AG - f x fwd) + max(0, RS - f x (bwd + recompute)): FSDP under PP gathers the stage once before the "
    "first micro-batch and reduce-scatters once after the last; + HSDP all-reduce across replicas",
    "torchtitan reshard_after_forward=False with PP; torch.distributed.pipelining backward_maybe_with_nosync",
)
DP_ZERO3_BLOCKING = formula(
    "data.zero3_blocking",
    "m x (AG + (1 + regather) AG + all-reduce(grads)): every gather blocks, gradients all-reduced",
    "DeepSpeed ZeRO-3 of 2021: PR #1188 (synchronize before each gather), issue #1173 (all-reduce)",
)


def param_tensors_per_layer(m, moe: bool) -> int:
    """Parameter tensors of one transformer layer in Megatron's fused layout (QKV one matrix, gate and
    up one matrix; biases and norm weights separate tensors)."""
    if m.mla is not None:
        # kv_a, kv_a_norm, kv_b, o, and q (or q_a, q_a_norm, q_b with a query LoRA rank)
        attn = 4 + (3 if m.mla.q_lora_rank else 1) + int(m.qkv_bias) * 2 + int(m.attn_out_bias)
    else:
        attn = 2 + int(m.qkv_bias) + int(m.attn_out_bias) + 2 * int(m.qk_norm)
    norms = m.norms_per_layer * (2 if m.norm_type == "layernorm" and m.norm_bias else 1)
    if moe:
        mlp = 1 + int(m.moe.router_bias) + 2 * (1 + int(m.moe.expert_bias)) + (2 if m.moe.num_shared_experts else 0)
    else:
        mlp = 2 * (1 + int(m.mlp_bias))
    return attn + norms + mlp



def zero3_collectives_per_pass(ctx: Context, stage_split: StageSplit) -> float:
    """Separate all-gathers (and reduce-scatters) one forward or backward pass of a stage issues under
    ZeRO-3/FSDP. DeepSpeed partitions and gathers every parameter tensor on its own (ZeRO-Infinity,
    Rajbhandari et al. SC21, arXiv 2104.07857, sec. 6.1); FSDP2, Megatron-FSDP and XLA gather one
    flat buffer per transformer block (torchtitan applies fully_shard per block)."""
    _, hc, tc = stage_split
    allc = hc + tc
    if ctx.stack.zero3_gather == "tensor":
        return float(sum(n * param_tensors_per_layer(ctx.model, ctx.kinds[j].moe) for j, n in allc.items()))
    return float(sum(allc.values()))


def zero3_regather_fraction(ctx: Context, plan: ParallelPlan, stage_split: StageSplit) -> float:
    """Share of a layer's parameters DeepSpeed ZeRO-3 gathers a second time in backward when the layer is
    fully recomputed: the recomputed forward gathers them, and DeepSpeed keeps a gathered parameter for its
    backward use only when that use comes within `stage3_max_reuse_distance` parameters (DeepSpeed config
    docs, default 1e9). With the layer's P parameters spread evenly over its modules, the parameter at
    relative position x is next used after the 2 (1 - x) P parameters of the rest of the recompute and the
    backward down to it, so the share beyond the window is max(0, 1 - W / 2P). FSDP2 unshards a block once
    before its recompute (checkpointing inside fully_shard): 0 there."""
    if not ctx.stack.zero3_regather_on_recompute or plan.recompute != "full":
        return 0.0
    _, hc, tc = stage_split
    layer = largest_layer_params_per_device(ctx, plan, hc + tc)
    if layer <= 0:
        return 0.0
    return max(0.0, 1.0 - ctx.calibration.DEEPSPEED_MAX_REUSE_DISTANCE_PARAMS / (2.0 * layer))


def _zero3_traffic(ctx: Context, shape: Shape, p_dense: float, p_exp: float, n_ag: float) -> tuple[float, float]:
    """(all-gather of the bf16 parameters, gradient reduction) seconds of one pass of the slowest stage."""
    links, dims = shape.links, shape.dims
    z_dense, z_expert = dims.zero_shard, dims.expert_zero_shard
    e_link = links.edp
    grad_bytes = grad_bytes_per_param(ctx.train)
    ag = collective_time("all_gather", p_dense * PARAM_GATHER_BYTES, z_dense, links.dp_rs, n_ag)
    ag += collective_time("all_gather", p_exp * PARAM_GATHER_BYTES, z_expert, e_link)
    # gradients: reduce-scatter, or all-reduce in DeepSpeed ZeRO-3 of 2021 (issue #1173)
    legacy = ctx.train.legacy_deepspeed_zero3
    red_kind: Kind = "all_reduce" if legacy else "reduce_scatter"
    red_link = links.dp_ar if legacy else links.dp_rs
    rs = collective_time(red_kind, p_dense * grad_bytes, z_dense, red_link, n_ag)
    rs += collective_time(red_kind, p_exp * grad_bytes, z_expert, e_link)
    return ag, rs


def _hsdp_all_reduce_s(ctx: Context, dims: ParallelDims, p_dense: float) -> float:
    """HSDP: gradients of the dense shard all-reduced across the dp x cp / zero_shard_size replicas."""
    if dims.zero_shard >= dims.dp_cp:
        return 0.0
    rep = dims.zero_replicas
    return collective_time("all_reduce", (p_dense / dims.zero_shard) * grad_bytes_per_param(ctx.train), rep,
                           group_link(ctx.cluster, rep, dims.tp * dims.zero_shard, ctx.calibration, "all_reduce"))


def _zero3_term(ctx: Context, shape: Shape, st: StageTimes, split: list[StageSplit], slow: int,
                params: StageParams) -> Term:
    plan, f_ov, nmb = shape.plan, ctx.calibration.DP_OVERLAP_FRACTION, shape.nmb
    p_dense, p_exp = params.dense[slow], params.experts[slow]
    n_ag = zero3_collectives_per_pass(ctx, split[slow])
    ag, rs = _zero3_traffic(ctx, shape, p_dense, p_exp, n_ag)
    fwd_mb, bwd_mb = st.fwd[slow], st.bwd[slow] + st.rec[slow]
    regather = zero3_regather_fraction(ctx, plan, split[slow])
    bwd_ag = (1.0 + regather) * ag
    if ctx.train.legacy_deepspeed_zero3:
        form, t_dp = DP_ZERO3_BLOCKING, nmb * (ag + bwd_ag + rs)
    elif plan.pp > 1 and ctx.stack.zero3_unsharded_under_pp:
        form, t_dp = DP_ZERO3_PIPELINED, max(0.0, ag - f_ov * fwd_mb) + max(0.0, rs - f_ov * bwd_mb)
    else:
        per_mb = max(0.0, ag - f_ov * fwd_mb) + max(0.0, bwd_ag + rs - f_ov * bwd_mb)
        form, t_dp = DP_ZERO3, nmb * per_mb + ag * (1 - f_ov)
    hsdp = _hsdp_all_reduce_s(ctx, shape.dims, p_dense)
    t_dp += hsdp
    return form.term("dp_comm_s", t_dp, "s", all_gather_s=ag, grad_reduce_s=rs, regather_fraction=regather,
                     collectives_per_pass=n_ag, overlap_fraction=f_ov, fwd_s=fwd_mb, bwd_s=bwd_mb,
                     microbatches=nmb, hsdp_all_reduce_s=hsdp, zero_shards=shape.dims.zero_shard)


def _zero012_term(ctx: Context, shape: Shape, st: StageTimes, slow: int, params: StageParams) -> Term:
    """ZeRO 0-2: one reduction (and, sharded, one parameter all-gather) per step, overlapped with the last
    micro-batch's backward / the next step's first forward."""
    plan, links, dims, f_ov = shape.plan, shape.links, shape.dims, ctx.calibration.DP_OVERLAP_FRACTION
    p_dense, p_exp = params.dense[slow], params.experts[slow]
    dp_group, edp, e_link = dims.dp_cp, dims.edp, links.edp
    grad_bytes = grad_bytes_per_param(ctx.train)
    if plan.zero_stage == 0:
        red = collective_time("all_reduce", p_dense * grad_bytes, dp_group, links.dp_ar)
        red += collective_time("all_reduce", p_exp * grad_bytes, edp, e_link)
        gather, form = 0.0, DP_ALL_REDUCE
    else:
        red = collective_time("reduce_scatter", p_dense * grad_bytes, dp_group, links.dp_rs)
        red += collective_time("reduce_scatter", p_exp * grad_bytes, edp, e_link)
        gather = collective_time("all_gather", p_dense * PARAM_GATHER_BYTES, dp_group, links.dp_rs)
        gather += collective_time("all_gather", p_exp * PARAM_GATHER_BYTES, edp, e_link)
        form = DP_REDUCE_SCATTER
    bwd_last = st.bwd[0] + st.rec[0]
    t_dp = max(0.0, red - f_ov * bwd_last) + max(0.0, gather - f_ov * st.fwd[0])
    return form.term("dp_comm_s", t_dp, "s", grad_reduce_s=red, all_gather_s=gather, overlap_fraction=f_ov,
                     bwd_s=bwd_last, fwd_s=st.fwd[0], dp_group=dp_group, edp=edp,
                     busbw_GBps=links.dp_rs.busbw / 1e9)


def dp_comm_term(ctx: Context, shape: Shape, st: StageTimes, split: list[StageSplit], slow: int,
                 params: StageParams) -> Term:
    """Exposed data-parallel traffic of one step (the slowest stage's parameters)."""
    plan, dims = shape.plan, shape.dims
    if not (dims.dp_cp > 1 or dims.edp > 1):
        return DP_NONE.term("dp_comm_s", 0.0, "s", dp_group=dims.dp_cp, edp=dims.edp)
    if plan.zero_stage == 3:
        return _zero3_term(ctx, shape, st, split, slow, params)
    return _zero012_term(ctx, shape, st, slow, params)
