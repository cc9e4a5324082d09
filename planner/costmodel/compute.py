"""Compute time of one layer for one micro-batch on one device: GEMMs (projections, MLP, experts, router)
at a shape-dependent efficiency, the attention core, and memory-bound elementwise work.

A matmul costs 2mkn FLOPs (Kaplan et al. 2020, arXiv 2001.08361, sec. 2.1; planner.costmodel.flops);
time = FLOPs / (peak x efficiency). Backward runs 2x the forward GEMM FLOPs (Narayanan et al. SC21,
arXiv 2104.04473, sec. 5.1); FlashAttention-2 backward takes about 2.5x its forward (Dao 2023,
arXiv 2307.08691, sec. 4.1).
"""

from __future__ import annotations

from typing import NamedTuple

from planner.costmodel.base import ACT_ELEM_BYTES, Context, LayerKind, Shape
from planner.costmodel.context import ring_merge_s
from planner.costmodel.expert import ep_comm_fwd_s
from planner.costmodel.flops import attn_proj_flops_per_token, lm_head_flops_per_token, qk_v_head_dims
from planner.costmodel.memory import (
    layernorm_module_norms,
    maxtext_offloaded_elems,
    names_moe_module,
    offloaded_elems,
    selective_modules,
)
from planner.costmodel.moe import (
    EINSUM_DISPATCH_GEMMS,
    dispatcher,
    einsum_dispatch_bwd_s,
    expert_load,
    has_host_sync,
    moe_forward,
    permute_mode,
)
from planner.costmodel.trace import Term, formula
from planner.specs import ModelSpec

# Backward / forward time ratios: GEMMs 2 (Narayanan et al. SC21 sec. 5.1), FlashAttention-2 ~2.5
# (Dao 2023, arXiv 2307.08691, sec. 4.1), memory-bound elementwise work 2 (read the saved input and the
# incoming gradient, write the outgoing one).
BWD_GEMM_RATIO = 2.0
BWD_ATTN_RATIO = 2.5
BWD_ELEMENTWISE_RATIO = 2.0
# Elementwise activation elements read+written per token per layer in forward: 2 norms (4h) and 2 residual
# adds (6h) in the hidden width, the MLP activation (3 x intermediate width); Korthikanti et al. 2022 sec. 4.1
# lists the tensors.
ELEMENTWISE_HIDDEN_ELEMS = 10
ELEMENTWISE_INTER_ELEMS = 3
# ... of which one norm reads its input and writes its output: 2 of the hidden width (what a recomputed norm re-runs)
NORM_HIDDEN_ELEMS = 2
# Eager PyTorch (no torch.compile) runs every op of a composite as its own kernel through HBM; the bytes per
# element beyond the one fused kernel (read 2 B, write 2 B) the constants above charge, forward, bf16 in:
# RMSNorm (torch.nn.RMSNorm / ATen rms_norm composite: upcast R2 W4, pow R4 W4, mean R4, x*rsqrt R4 W4,
# downcast R4 W2, *weight R2 W2 = 36 B vs 4 B fused);
EAGER_RMSNORM_EXTRA_BYTES = 32.0
# SwiGLU silu(gate) R2 W2, then * up R4 W2 = 10 B per intermediate element vs the 6 B ELEMENTWISE_INTER_ELEMS charge;
EAGER_SWIGLU_EXTRA_BYTES = 4.0
# RoPE as torchtitan writes it (models/llama3 apply_rotary_emb: float() + view_as_complex R2 W4, complex multiply
# R4 W4, view_as_real + type_as R4 W2 = 20 B per q/k element vs 4 B for a fused rotary kernel).
EAGER_ROPE_EXTRA_BYTES = 16.0

# gpt-oss's routed-expert epilogue as Megatron's TEGroupedMLP runs it without the TE op fuser (megatron-core
# core_r0.15-0.19 transformer/moe/experts.py; Stack.moe_expert_epilogue_eager), bytes per element with one read and one
# write per PyTorch op (a lower bound), bf16 activations:
# - the GLU clamp (activation_func_clamp_value 7): fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl clamps the
#   gate and the linear half of the fc1 output (two torch.clamp, R2 W2 per element) and joins them (torch.cat, R2 W2)
#   before its fused kernel: 8 B per fc1 output element forward; backward the clamp's gradient (read the gradient and
#   the saved input, write: 6 B) and the halves' gradients joined into the input's (chunk backward: 4 B). A GLU's fc1
#   output holds 2 elements per intermediate element: 16 B forward, 20 B backward per intermediate element.
GLU_CLAMP_BYTES_PER_INTER = {"fwd": 16.0, "bwd": 20.0}
# - the fc2 bias: fc2 is built with skip_bias_add=True and TEGroupedMLP._apply_bias adds it outside the GEMM, scaled
#   by the router probability of each permuted token: torch.cat over the local experts of t + b * p, cast back to the
#   activations' dtype. Router probabilities are bf16 (P = 2 B) with the all-to-all dispatcher (the gpt-oss recipes
#   leave moe_router_dtype unset: Transformer Engine's fused_topk_with_score_function returns them in the logits'
#   dtype) and fp32 (P = 4 B) with the flex dispatcher (megatron-core token_dispatcher.py _HybridEPManager /
#   _DeepepManager: token_probs.float()). See fc2_bias_bytes (activations: base.ACT_ELEM_BYTES).
# The rotary embedding of a YaRN-scaled model without MLA (gpt-oss: Megatron --position-embedding-type yarn) runs
# unfused in Megatron (Stack.yarn_rope_unfused): models/common/embeddings/rope_utils.py _apply_rotary_pos_emb_bshd,
# op by op over every q and k element, bf16: t * cos (R2 W2), _rotate_half (the negated half R2 W2 over half the
# elements, torch.cat R2 W2), * sin (R2 W2), the sum (R2 R2 W2), torch.cat with the empty pass-through part (R2 W2):
# 24 B forward; backward grad * cos and grad * sin (4 + 4), the negation (2, half), the halves joined (4), the two
# paths summed (6): 20 B. Beyond one fused kernel's read + write (4 B, not charged either: EAGER_ROPE_EXTRA_BYTES'
# convention): 20 forward, 16 backward.
UNFUSED_ROPE_EXTRA_BYTES = {"fwd": 20.0, "bwd": 16.0}

LAYER_COMPUTE = formula(
    "compute.layer",
    "fwd = proj + mlp + experts + router + attention + elementwise + permute + ring merge + host launch (MoE) + "
    "expert epilogue (eager GLU clamp and fc2 bias, MoE) + unfused RoPE + host offload; bwd = 2 x GEMMs + "
    "attention backward (2.5 x its forward; compute.attention_core_bwd_s) + 2 x elementwise + permute (backward: 2 x "
    "its passes; MaxText's dispatch / combine einsums 3 GEMMs for "
    "2) + ring merge (backward) + host launch (backward) + expert epilogue (backward) + unfused RoPE (backward) + "
    "host offload (backward)",
    "GEMM 2mkn FLOPs (Kaplan et al. 2020 sec. 2.1), backward 2x (Narayanan et al. SC21 sec. 5.1), "
    "FlashAttention-2 backward ~2.5x forward (Dao 2023, arXiv 2307.08691, sec. 4.1); ring merge: context.ring_merge; "
    "host offload (MaxText's offloaded remat tensors, Megatron's offload modules): compute.activation_offload_s",
)


class LayerCompute(NamedTuple):
    """Seconds of one layer's forward parts for one micro-batch on one device, and fwd / bwd totals."""

    proj: float
    mlp: float
    experts: float
    router: float
    permute: float
    permute_bwd: float
    host_fwd: float
    host_bwd: float
    attention: float
    attention_bwd: float
    elementwise: float
    ring_merge_fwd: float
    ring_merge_bwd: float
    epilogue_fwd: float
    epilogue_bwd: float
    rope_fwd: float
    rope_bwd: float
    offload_fwd: float
    offload_bwd: float
    fwd: float
    bwd: float


def attn_proj_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """q/k/v/o (or MLA) projections: FLOPs / tp at the efficiency of (tokens, h, heads x v_dim / tp)."""
    m, tp, tokens = ctx.model, shape.plan.tp, shape.tokens
    attn_dims = (tokens, m.hidden_size, (m.num_heads * (m.head_dim if m.mla is None else m.mla.v_head_dim)) / tp)
    return tokens * k.flops.attn_proj / tp / (ctx.peak * ctx.gemm_eff(*attn_dims))


def mlp_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """Dense FFN (or the shared experts of an MoE layer) at the efficiency of (tokens, h, width / tp)."""
    if not k.flops.mlp:
        return 0.0
    m, tp, tokens = ctx.model, shape.plan.tp, shape.tokens
    if k.moe:
        e = m.require_moe()
        width = (e.shared_expert_ffn_hidden_size or e.expert_ffn_hidden_size) * max(1, e.num_shared_experts)
    else:
        width = m.ffn_hidden_size
    return tokens * k.flops.mlp / tp / (ctx.peak * ctx.gemm_eff(tokens, m.hidden_size, width / tp))


# The attention dropout's forward traffic per score element where it runs (TrainingSpec.attention_dropout): it reads
# the softmax output (2 B) and writes its output (2 B) and its mask (1 B) (Korthikanti et al. 2022 sec. 4.1); at p = 0
# PyTorch's dropout returns its input and moves nothing.
UNFUSED_DROPOUT_BYTES_PER_SCORE_FWD = 5.0


def attention_core_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """Attention core (QK^T, softmax, AV) forward. Unfused: the s x s scores are materialised, the batched
    GEMMs run over all of them and softmax (and dropout, where it runs) are memory-bound (Korthikanti et al. 2022
    sec. 4.1)."""
    m, tp, tokens = ctx.model, shape.plan.tp, shape.tokens
    if ctx.unfused_attention:
        seq = ctx.train.seq_len
        dqk, dv = qk_v_head_dims(m)
        scores = tokens * seq * m.num_heads / tp  # elements of s x s per device
        t = 2.0 * scores * (dqk + dv) / (ctx.peak * ctx.gemm_eff(seq, dqk))
        moved = ctx.calibration.UNFUSED_ATTN_BYTES_PER_SCORE_FWD \
            + (UNFUSED_DROPOUT_BYTES_PER_SCORE_FWD if ctx.train.attention_dropout else 0.0)
        return t + scores * moved / ctx.hbm_bw
    # a causal layer at its length's tile efficiency (base.CAUSAL_TILE_REL), a local layer at its kernel's efficiency
    # relative to a causal layer's (base.ATTN_TILE_REL)
    causal = ctx.causal_tile_rel(shape.plan.cp, shape.plan.cp_comm)
    return tokens * k.flops.attn_core / tp / (ctx.attn_peak * ctx.attn_eff * causal * ctx.attn_tile_rel[k.local])


def attention_core_bwd_s(ctx: Context, shape: Shape, k: LayerKind, fwd_s: float) -> float:
    """Attention core backward: BWD_ATTN_RATIO x its forward; under FP8 attention a sliding-window layer's backward
    costs a causal layer's at the same sequence length (base.ATTN_TILE_REL: cuDNN's FP8 backward through a band grows
    with the square of the sequence in the published benchmark, its BF16 backward and FP8 forward linearly)."""
    if not ctx.attn_bwd_causal_tiles[k.local]:
        return BWD_ATTN_RATIO * fwd_s
    causal = ctx.causal_tile_rel(shape.plan.cp, shape.plan.cp_comm)
    return (BWD_ATTN_RATIO * shape.tokens * ctx.causal_attn_core_flops / shape.plan.tp
            / (ctx.attn_peak * ctx.attn_eff * causal))


def mla_up_proj_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """Forward time of the MLA up-projections (q from the query latent, k/v from the KV latent) of one layer:
    what selective recompute re-runs for MLA models (DeepSeek-V3 report sec. 3.3.3); 0 without MLA."""
    m = ctx.model
    if m.mla is None:
        return 0.0
    a, tp, tokens = m.mla, shape.plan.tp, shape.tokens
    dqk = a.qk_nope_head_dim + a.qk_rope_head_dim
    q_in = a.q_lora_rank or 0  # a full-rank q projection is not an up-projection
    flops = 2 * tokens * m.num_heads * (q_in * dqk + a.kv_lora_rank * (a.qk_nope_head_dim + a.v_head_dim)) / tp
    return flops / (ctx.peak * ctx.gemm_eff(tokens, a.kv_lora_rank, m.num_heads * dqk / tp))


def mla_down_proj_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """Forward time of the MLA down-projections whose outputs the up-projections read (the query latent, when q is
    low-rank, and the KV latent with its shared rope key; DeepSeek-V2 paper eq. 9-14, arXiv 2405.04434), split by TP
    as the layer's other projections (attn_proj_s); 0 without MLA."""
    m = ctx.model
    if m.mla is None:
        return 0.0
    a, tp, tokens, h = m.mla, shape.plan.tp, shape.tokens, m.hidden_size
    width = (a.q_lora_rank or 0) + a.kv_lora_rank + a.qk_rope_head_dim
    return 2 * tokens * h * width / tp / (ctx.peak * ctx.gemm_eff(tokens, h, width / tp))


def elementwise_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """Memory-bound elementwise work (norms, residuals, activation, rope; read + write), forward; eager PyTorch
    adds its unfused composites. An MoE layer's token permute / unpermute is its own term (moe.permute_s)."""
    elem = _fused_pass_bytes(ctx, shape, k, ELEMENTWISE_HIDDEN_ELEMS, ELEMENTWISE_INTER_ELEMS)
    if ctx.stack.eager_unless_compiled and not ctx.train.torch_compile:
        hs, inter = _elementwise_widths(ctx, shape, k)
        elem += shape.tokens * eager_elementwise_bytes(ctx.model, shape.plan.tp, hs, inter, k.moe,
                                                       ctx.stack.eager_composites)
    return elem / ctx.hbm_bw


def _elementwise_widths(ctx: Context, shape: Shape, k: LayerKind) -> tuple[float, float]:
    """(hidden elements per token on this rank, intermediate elements per token before TP) of one layer's
    elementwise work: the hidden width split by SP, the MLP's intermediate width (an MoE layer's: every routed
    copy's)."""
    m, tp = ctx.model, shape.plan.tp
    top_k = m.require_moe().top_k * expert_load(ctx, shape) if k.moe else 0
    inter = m.require_moe().expert_ffn_hidden_size * top_k if k.moe else m.ffn_hidden_size
    return m.hidden_size / (tp if shape.sp else 1), inter


def _fused_pass_bytes(ctx: Context, shape: Shape, k: LayerKind, hidden_elems: float, inter_elems: float) -> float:
    """Bytes fused memory-bound passes move in one layer's forward: `hidden_elems` elements of the hidden width and
    `inter_elems` of the MLP's intermediate width (TP-split) per token (the ELEMENTWISE_* accounting)."""
    hs, inter = _elementwise_widths(ctx, shape, k)
    return (shape.tokens * (hidden_elems * hs + inter_elems * inter / shape.plan.tp)
            * ACT_ELEM_BYTES * ctx.calibration.ELEMENTWISE_BYTES_FACTOR)


def eager_elementwise_bytes(m: ModelSpec, tp: int, hs: float, inter: float, moe: bool,
                            composites: tuple[str, ...]) -> float:
    """Bytes per token one layer's forward moves beyond fused kernels when PyTorch runs these composites eagerly
    (Stack.eager_composites): decomposed RMSNorms, SwiGLU's two kernels (the routed experts' in an MoE layer, else
    the MLP's), RoPE through complex numbers (EAGER_* above; LayerNorm, GELU and non-rotary positions are single
    kernels in eager too)."""
    rms = m.norm_type == "rmsnorm" and "rmsnorm" in composites
    out = m.norms_per_layer * hs * EAGER_RMSNORM_EXTRA_BYTES if rms else 0.0
    if m.mlp_type == "gated" and ("expert_swiglu" if moe else "swiglu") in composites:
        out += inter / tp * EAGER_SWIGLU_EXTRA_BYTES
    if m.position_embedding == "rope" and "rope" in composites:
        # MLA: decoupled rope, k shared; else the rotated share of each head (ModelSpec.rotary_fraction)
        rope = m.mla.qk_rope_head_dim if m.mla is not None else m.head_dim * m.rotary_fraction
        q, kv = m.num_heads * rope, (rope if m.mla is not None else m.num_kv_heads * rope)
        out += (q + kv) / tp * EAGER_ROPE_EXTRA_BYTES
    return out


def fc2_bias_bytes(prob_bytes: float) -> tuple[float, float]:
    """Bytes per fc2 output element of TEGroupedMLP._apply_bias (t + b * p per expert, torch.cat, cast back to bf16),
    forward and backward, with router probabilities of `prob_bytes` (P): forward b * p written (P), the sum (read 2 +
    P, write P), the cat (P + P), the cast (P + 2) when P is not 2 B; backward the cast's gradient and the sum's
    gradient to t (2 + P each way) when P is not 2 B, and the bias and probability gradients (grad x p, grad x b: each
    read P, written P and summed P)."""
    cast = prob_bytes != ACT_ELEM_BYTES
    fwd = (prob_bytes + (ACT_ELEM_BYTES + 2 * prob_bytes) + 2 * prob_bytes
           + ((prob_bytes + ACT_ELEM_BYTES) if cast else 0.0))
    bwd = (2 * (ACT_ELEM_BYTES + prob_bytes) if cast else 0.0) + 2 * 3 * prob_bytes
    return fwd, bwd


def expert_epilogue_s(ctx: Context, shape: Shape, k: LayerKind) -> tuple[float, float]:
    """Forward and backward seconds of the routed experts' eager epilogue (Stack.moe_expert_epilogue_eager, unless the
    run fuses its grouped MLP: TrainingSpec.moe_fused_grouped_mlp): the GLU clamp of a clamped GLU (gpt-oss's, clamp 7)
    over the fc1 output and the fc2 bias scaled by the router probabilities, memory-bound passes over each token's
    top_k (x load) expert copies at HBM bandwidth (GLU_CLAMP_BYTES_PER_INTER, fc2_bias_bytes)."""
    if not k.moe or not ctx.stack.moe_expert_epilogue_eager or ctx.train.moe_fused_grouped_mlp:
        return 0.0, 0.0
    m, p = ctx.model, shape.plan
    e = m.require_moe()
    copies = _epilogue_copies(ctx, shape)
    fwd = bwd = 0.0
    if m.activation == "gpt_oss_glu":  # quick-GeGLU with gate and linear halves clamped at 7 (catalog.hf_import)
        inter = e.expert_ffn_hidden_size / max(1, p.etp)
        fwd += inter * GLU_CLAMP_BYTES_PER_INTER["fwd"]
        bwd += inter * GLU_CLAMP_BYTES_PER_INTER["bwd"]
    if e.expert_bias:
        f, b = fc2_bias_bytes(4.0 if dispatcher(ctx) == "flex" else ACT_ELEM_BYTES)
        fwd += m.hidden_size * f
        bwd += m.hidden_size * b
    return copies * fwd / ctx.hbm_bw, copies * bwd / ctx.hbm_bw


def _epilogue_copies(ctx: Context, shape: Shape) -> float:
    """Routed token copies one device's expert epilogue runs over: each etp rank of an expert shard runs every copy
    routed to it (moe.tokens_per_local_expert), inter / etp wide, the fc2 output full width (partial sums, reduced
    after the bias)."""
    p = shape.plan
    return shape.tokens / p.tp * ctx.model.require_moe().top_k * max(1, p.etp) * expert_load(ctx, shape)


def glu_clamp_fwd_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """Forward seconds of the eager GLU clamp alone (expert_epilogue_s's first part): megatron-core's moe_act
    recompute re-runs it with the activation (experts.py TEGroupedMLP bias_act_func under CheckpointWithoutOutput);
    the fc2 bias is added after fc2, outside the checkpoint."""
    if (not k.moe or not ctx.stack.moe_expert_epilogue_eager or ctx.train.moe_fused_grouped_mlp
            or ctx.model.activation != "gpt_oss_glu"):
        return 0.0
    inter = ctx.model.require_moe().expert_ffn_hidden_size / max(1, shape.plan.etp)
    return _epilogue_copies(ctx, shape) * inter * GLU_CLAMP_BYTES_PER_INTER["fwd"] / ctx.hbm_bw


def unfused_rope_s(ctx: Context, shape: Shape) -> tuple[float, float]:
    """Forward and backward seconds of a YaRN-scaled rotary embedding (non-MLA) that the stack runs unfused
    (Stack.yarn_rope_unfused): UNFUSED_ROPE_EXTRA_BYTES over the device's q and k elements (heads / tp)."""
    m = ctx.model
    sc = m.rope_scaling
    if not (ctx.stack.yarn_rope_unfused and m.position_embedding == "rope" and m.mla is None and sc is not None
            and sc.rope_type == "yarn"):
        return 0.0, 0.0
    elems = shape.tokens * (m.num_heads + m.num_kv_heads) * m.head_dim * m.rotary_fraction / shape.plan.tp
    return (elems * UNFUSED_ROPE_EXTRA_BYTES["fwd"] / ctx.hbm_bw, elems * UNFUSED_ROPE_EXTRA_BYTES["bwd"] / ctx.hbm_bw)


def activation_offload_s(ctx: Context, shape: Shape, k: LayerKind, busy_fwd_s: float,
                         busy_bwd_s: float) -> tuple[float, float]:
    """Forward and backward seconds one layer of kind `k` waits for the host link while its saved tensors go to host
    memory and come back, each way at the host link's one-way rate (Context.host_link_bw; TPU v5e / v5p ~15 GB/s per
    chip, jax-ml/scaling-book tpus.md; NVIDIA parts PCIe Gen5 x16, hardware_profiles/*.yaml).
    - MaxText's custom remat policy with tensors named 'offload' (ParallelPlan.remat_offloaded, selective recompute):
      the copies run beside the layer's own compute (XLA's asynchronous host offload), so only their excess over
      `busy_fwd_s` / `busy_bwd_s` shows.
    - Megatron's offload modules (ParallelPlan.offload_modules, memory.offloaded_elems): the forward's copies run on
      their own stream and the compute stream does not wait for them (megatron-core
      pipeline_parallel/fine_grained_activation_offload.py on_group_commit_forward: the d2h stream waits on the
      compute stream, not the reverse); the backward waits for each layer's reload, issued as the layer after it
      starts its backward (bulk_reload, on_group_commit_backward "Wait for reload to complete before using
      tensors"), so the copy's excess over `busy_bwd_s` shows, in the backward only."""
    p = shape.plan
    if p.custom_remat is not None and p.remat_offloaded:
        copy_s = (maxtext_offloaded_elems(ctx.model, p.tp, shape.sp, p.remat_offloaded) * shape.tokens
                  * ACT_ELEM_BYTES / ctx.host_link_bw)
        return max(0.0, copy_s - busy_fwd_s), max(0.0, copy_s - busy_bwd_s)
    if p.offload_modules:
        # the layer's tensors as the plan's recompute saves them (memory.offloaded_elems)
        copy_s = offloaded_elems(ctx, shape, k)[1] * shape.tokens * ACT_ELEM_BYTES / ctx.host_link_bw
        return 0.0, max(0.0, copy_s - busy_bwd_s)
    return 0.0, 0.0


def layer_compute(ctx: Context, shape: Shape, k: LayerKind) -> LayerCompute:
    """Forward and backward compute seconds of one layer of kind `k` (formula compute.layer); an MoE layer adds its
    router, permute, routed experts and exposed host launch (planner.costmodel.moe)."""
    proj, mlp, attn, elem = attn_proj_s(ctx, shape, k), mlp_s(ctx, shape, k), attention_core_s(ctx, shape, k), \
        elementwise_s(ctx, shape, k)
    dispatch = ep_comm_fwd_s(ctx, shape, k)
    if k.moe and ctx.train.shared_expert_overlap:  # the dispatch group's GPU time is the slower of the
        dispatch = max(dispatch, mlp)  # dispatch and of the shared experts beside it (layers._layer_times)
    mo = moe_forward(ctx, shape, k, dispatch, has_host_sync(ctx), permute_mode(ctx))
    merge_fwd, merge_bwd = ring_merge_s(ctx, shape)
    epi_fwd, epi_bwd = expert_epilogue_s(ctx, shape, k)
    rope_fwd, rope_bwd = unfused_rope_s(ctx, shape)
    einsum_bwd = einsum_dispatch_bwd_s(mo.permute, permute_mode(ctx))  # MaxText's einsums: 3 GEMMs for 2
    # memory-bound permute passes: backward as the elementwise work
    perm_bwd = einsum_bwd or BWD_ELEMENTWISE_RATIO * mo.permute
    fwd = proj + mlp + mo.experts + mo.router + attn + elem + mo.permute + merge_fwd + mo.host_fwd + epi_fwd + rope_fwd
    attn_bwd = attention_core_bwd_s(ctx, shape, k, attn)
    bwd = (BWD_GEMM_RATIO * (proj + mlp + mo.experts + mo.router) + attn_bwd
           + BWD_ELEMENTWISE_RATIO * elem + perm_bwd + merge_bwd + mo.host_bwd + epi_bwd + rope_bwd)
    off_fwd, off_bwd = activation_offload_s(ctx, shape, k, fwd, bwd)
    return LayerCompute(proj, mlp, mo.experts, mo.router, mo.permute, perm_bwd, mo.host_fwd, mo.host_bwd, attn,
                        attn_bwd, elem,
                        merge_fwd, merge_bwd, epi_fwd, epi_bwd, rope_fwd, rope_bwd, off_fwd, off_bwd,
                        fwd + off_fwd, bwd + off_bwd)


def selective_recompute_s(ctx: Context, shape: Shape, k: LayerKind, c: LayerCompute) -> float:
    """Forward seconds selective recompute re-runs in one layer (Stack.selective_recomputes).
    - "modules" (Megatron): the modules --recompute-modules names (memory.recompute_modules): the attention core
      (Korthikanti et al. 2022 sec. 5), the MLA up-projections, a dense layer's MLP, the whole MoE layer, and the
      memory-bound norms and activations those and layernorm / moe_act re-run (recomputed_passes_s);
    - "named_keeps" (MaxText's remat_policy "minimal"): what the backward needs and the stack's named tensors
      (Stack.selective_keeps) do not hold, as a custom remat keeping them (custom_remat_recompute_s);
    - "attention_core" (Megatron-DeepSpeed's selective checkpointing of its CoreAttention; AutoModel's searched
      selective): the core alone, the module set memory.selective_modules gives its saved activations;
    - "half_gemms" (torchtitan, framework fsdp): op-level selective AC saves the attention (SDPA) outputs and every
      second matmul's output and recomputes the rest (torchtitan distributed/activation_checkpoint.py SelectiveAC:
      "recomputes every second matmul"): half the GEMMs and the elementwise work."""
    if ctx.stack.selective_recomputes == "half_gemms":
        return 0.5 * (c.proj + c.mlp + c.experts + c.router) + c.elementwise + c.permute
    if shape.plan.custom_remat is not None:
        return custom_remat_recompute_s(ctx, shape, k, c,
                                        set(shape.plan.remat_device) | set(shape.plan.remat_offloaded))
    if ctx.stack.selective_recomputes == "named_keeps":
        return custom_remat_recompute_s(ctx, shape, k, c, set(ctx.stack.selective_keeps))
    mods = selective_modules(ctx, shape.plan)  # Megatron's --recompute-modules (memory.recompute_modules)
    if ctx.stack.selective_recomputes == "modules" and mods is not None:
        whole_moe = k.moe and names_moe_module(ctx, shape.plan)
        return ((c.attention if "core_attn" in mods else 0.0)
                + (mla_up_proj_s(ctx, shape, k) if "mla_up_proj" in mods else 0.0)
                + (c.mlp if "mlp" in mods and not k.moe else 0.0)  # mlp: dense layers' MLPs (an MoE layer's: moe)
                + (moe_layer_fwd_s(c) if whole_moe else 0.0)
                + recomputed_passes_s(ctx, shape, k, mods, whole_moe))
    return c.attention


def recomputed_passes_s(ctx: Context, shape: Shape, k: LayerKind, mods: tuple[str, ...], whole_moe: bool) -> float:
    """Forward seconds of the memory-bound passes Megatron's recomputed modules re-run (the same bytes the forward's
    elementwise_s charges for them):
    - layernorm: the norms megatron-core runs as their own modules (memory.layernorm_module_norms), NORM_HIDDEN_ELEMS
      each;
    - moe_act (or moe, the whole MoE layer), mlp (a dense layer's MLP): the MLP activation, ELEMENTWISE_INTER_ELEMS
      of the intermediate width; moe_act also the eager GLU clamp inside the checkpointed function (glu_clamp_fwd_s;
      moe_layer_fwd_s already holds it with the rest of the epilogue)."""
    norms = layernorm_module_norms(ctx.model, k.moe) if "layernorm" in mods else 0
    act = ("moe_act" in mods or whole_moe) if k.moe else "mlp" in mods
    if "mlp" in mods and not k.moe:
        norms += 1  # a dense MLP's norm is fused into its fc1 (TE LayerNormLinear): recomputing the MLP re-runs it
    if not norms and not act:
        return 0.0
    out = _fused_pass_bytes(ctx, shape, k, NORM_HIDDEN_ELEMS * norms, ELEMENTWISE_INTER_ELEMS if act else 0)
    out /= ctx.hbm_bw
    if k.moe and "moe_act" in mods and not whole_moe:
        out += glu_clamp_fwd_s(ctx, shape, k)
    return out


def moe_layer_fwd_s(c: LayerCompute) -> float:
    """An MoE layer's own forward compute (no attention): router, permutes, routed and shared experts, their
    epilogue, and the host launches the GPU waits for."""
    return c.router + c.permute + c.experts + c.mlp + c.epilogue_fwd + c.host_fwd


def custom_remat_recompute_s(ctx: Context, shape: Shape, k: LayerKind, c: LayerCompute, saved: set[str]) -> float:
    """Forward seconds one layer re-runs under MaxText's remat_policy 'custom' (ParallelPlan.remat_device /
    remat_offloaded): jax.checkpoint keeps only the named tensors it is told to keep or offload and re-runs every op
    whose output the backward needs and that is not kept (MT:configs/base.yml "custom" remat names, each a
    checkpoint_name in MT:layers/attentions.py, attention_mla.py, linears.py, moe.py). GEMMs only: the memory-bound
    norms and activations re-run too, not charged (XLA fuses them into the fusions around the GEMMs; Megatron's own
    kernels are: recomputed_passes_s).
    - the attention core always: its kernel's residuals (output, log-sum-exp) carry no name, so its forward re-runs
      for its backward (splash attention's custom VJP);
    - the q / k / v projections (MLA: the down- and up-projections leading to them) unless query_proj, key_proj and
      value_proj (or qkv_proj) are kept: the attention backward needs them. With them kept, MLA's down-projections
      still re-run: the up-projections' backward needs their inputs, the normed latents, which carry no name a
      policy here keeps (MT:layers/attention_mla.py mla_query_projection / mla_kv_projection at 3eb77db name only
      the up-projections' outputs query_proj / key_proj / value_proj);
    - the output projection unless out_proj is kept: the MLP's input is the residual sum with it;
    - the MLP's input GEMMs (w0, w1 of a gated MLP; the shared experts' too) unless mlpwi (or mlpwi_0 and mlpwi_1)
      is kept: the activation's and wo's backward need their outputs; in an MoE layer the router and the token
      permutation re-run with them (the sorted tokens carry no name), and the experts' wo too unless mlpwo is kept:
      the combine's gradient with respect to the routing weights needs the expert outputs (MT:layers/moe.py
      unpermute, einsum "BKE,BK -> BE")."""
    m = ctx.model
    out = c.attention
    o_share = attn_out_proj_share(m)
    if not ({"query_proj", "key_proj", "value_proj"} <= saved or "qkv_proj" in saved):
        out += (1.0 - o_share) * c.proj
    else:
        out += mla_down_proj_s(ctx, shape, k)
    if "out_proj" not in saved:
        out += o_share * c.proj
    if not ("mlpwi" in saved or {"mlpwi_0", "mlpwi_1"} <= saved):
        wi_share = (m.ffn_matrices - 1) / m.ffn_matrices  # the input GEMMs among one MLP's matrices
        # MaxText's capacity einsums: only the dispatch re-runs (its output feeds w0 / w1); the combine's output
        # is not needed by any backward (XLA's compiled FLOPs, tests/costmodel/test_moe_einsum_real_code.py)
        dispatch = c.permute / EINSUM_DISPATCH_GEMMS["fwd"] if permute_mode(ctx) == "einsum" else c.permute
        out += wi_share * c.mlp + c.router + dispatch
        if k.moe:
            out += c.experts * (wi_share if "mlpwo" in saved else 1.0)
    return out


def attn_out_proj_share(m: ModelSpec) -> float:
    """The output projection's share of a layer's attention-projection FLOPs (flops.attn_proj_flops_per_token: q,
    k, v and o; MLA's down- and up-projections and o): 2 x heads x value dim x h per token."""
    v_dim = m.mla.v_head_dim if m.mla is not None else m.head_dim
    o_flops = 2.0 * m.num_heads * v_dim * m.hidden_size
    return min(1.0, o_flops / attn_proj_flops_per_token(m))


def kind_label(k: LayerKind) -> str:
    return ("MoE" if k.moe else "dense") + (f" {k.local}" if k.local else "")


def layer_compute_term(shape: Shape, k: LayerKind, c: LayerCompute) -> Term:
    """One layer's compute for one micro-batch on one device, with its parts and per-token FLOPs as inputs."""
    f = k.flops
    return LAYER_COMPUTE.term(
        f"layer_compute_s[{kind_label(k)}]", c.fwd + c.bwd, "s", fwd_s=c.fwd, bwd_s=c.bwd, proj_s=c.proj,
        mlp_s=c.mlp, experts_s=c.experts, router_s=c.router, permute_s=c.permute, permute_bwd_s=c.permute_bwd,
        host_launch_fwd_s=c.host_fwd, host_launch_bwd_s=c.host_bwd, attention_s=c.attention,
        attention_bwd_s=c.attention_bwd, elementwise_s=c.elementwise,
        ring_merge_fwd_s=c.ring_merge_fwd, ring_merge_bwd_s=c.ring_merge_bwd, expert_epilogue_fwd_s=c.epilogue_fwd,
        expert_epilogue_bwd_s=c.epilogue_bwd, unfused_rope_fwd_s=c.rope_fwd, unfused_rope_bwd_s=c.rope_bwd,
        host_offload_fwd_s=c.offload_fwd, host_offload_bwd_s=c.offload_bwd,
        flops_per_token_attn_proj=f.attn_proj, flops_per_token_attn_core=f.attn_core, flops_per_token_mlp=f.mlp,
        flops_per_token_experts=f.experts, flops_per_token_router=f.router, tp=shape.plan.tp, tokens=shape.tokens)


def lm_head_fwd_s(ctx: Context, shape: Shape) -> float:
    """LM head GEMM h -> V over the micro-batch's tokens, vocabulary split by TP; 16-bit in FP8 recipes
    (Megatron's output_layer is outside Transformer Engine's fp8_autocast)."""
    m, tp, tokens = ctx.model, shape.plan.tp, shape.tokens
    return tokens * lm_head_flops_per_token(m) / tp / ctx.head_flops_rate(tokens, m.hidden_size, m.vocab_size / tp)


COMPUTE = formula(
    "compute.step", "m x (fwd + bwd) of the slowest stage per micro-batch",
    "per-layer sum of GEMM, attention and elementwise time (Calculon, Isaev et al. SC23); compute.layer",
)
RECOMPUTE = formula(
    "compute.recompute",
    "m x recompute of the slowest stage: full = the recomputed layers' forward with its collectives, "
    "selective = the GEMMs the stack's policy re-runs: Megatron, of the modules it names, the attention core, MLA "
    "up-projections, dense MLPs and whole MoE layers, with the norm and activation passes its layernorm / moe_act / "
    "mlp / moe modules re-run at HBM bandwidth; MaxText, what its named saves do not hold (the attention core; MLA's "
    "down-projections); Megatron-DeepSpeed / AutoModel, the attention core; torchtitan, half the GEMMs + elementwise",
    "Korthikanti et al. 2022, arXiv 2205.05198, sec. 5; DeepSeek-V3 report, arXiv 2412.19437, sec. 3.3.3; "
    "megatron-core core_v0.16.1 transformer_layer.py, moe/experts.py (recomputed norms, moe_act); "
    "MaxText layers/decoders.py minimal_policy; torchtitan SelectiveAC (op-level)",
)


def compute_term(shape: Shape, stage_fwd_s: float, stage_bwd_s: float, stage: int) -> Term:
    return COMPUTE.term("compute_s", shape.nmb * (stage_fwd_s + stage_bwd_s), "s", microbatches=shape.nmb,
                        fwd_s=stage_fwd_s, bwd_s=stage_bwd_s, stage=stage)


def recompute_term(ctx: Context, shape: Shape, stage_rec_s: float) -> Term:
    """The step's recompute, with the modules a Megatron selective plan re-runs (memory.recompute_modules)."""
    p = shape.plan
    mods = selective_modules(ctx, p) if p.recompute == "selective" else None
    named = {"modules": " ".join(mods)} if mods is not None and ctx.stack.selective_recomputes == "modules" else {}
    return RECOMPUTE.term("recompute_s", shape.nmb * stage_rec_s, "s", microbatches=shape.nmb,
                          recompute_per_microbatch_s=stage_rec_s, mode=p.recompute, **named)
