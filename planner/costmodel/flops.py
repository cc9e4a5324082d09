"""FLOPs of one transformer layer, per token, forward pass, unsharded.

A matmul of an (m x k) by (k x n) matrix costs 2mkn FLOPs (Kaplan et al. 2020, arXiv 2001.08361,
sec. 2.1). Backward costs 2x forward (one matmul for the input gradient, one for the weight
gradient: Narayanan et al. SC21, arXiv 2104.04473, sec. 5.1). Sharding divides these by the
parallel degree; `planner.costmodel.compute` does that.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs import ModelSpec


@dataclass(frozen=True)
class LayerFlops:
    """Forward FLOPs per token of one layer, by op group (unsharded)."""

    attn_proj: float  # q/k/v/o (or MLA down/up) projections
    attn_core: float  # QK^T and AV (causal, flash-style: only the unmasked half is computed)
    mlp: float  # dense FFN, or shared experts in an MoE layer
    experts: float  # routed experts actually run per token (top_k of them)
    router: float

    @property
    def gemm(self) -> float:
        return self.attn_proj + self.mlp + self.experts + self.router

    @property
    def total(self) -> float:
        return self.gemm + self.attn_core


def attn_proj_flops_per_token(m: ModelSpec) -> float:
    """Projection FLOPs: 2 x (weights touched per token)."""
    h = m.hidden_size
    if m.mla is not None:
        a = m.mla
        dqk = a.qk_nope_head_dim + a.qk_rope_head_dim
        # DeepSeek-V2 paper eq. 9-14 (arXiv 2405.04434): q down/up, kv down (+ shared rope key), kv up, output.
        q = (h * a.q_lora_rank + a.q_lora_rank * m.num_heads * dqk) if a.q_lora_rank else h * m.num_heads * dqk
        kv = (h * (a.kv_lora_rank + a.qk_rope_head_dim)
              + a.kv_lora_rank * m.num_heads * (a.qk_nope_head_dim + a.v_head_dim))
        o = m.num_heads * a.v_head_dim * h
        return 2.0 * (q + kv + o)
    # GQA/MQA/MHA: q and o are nh*hd wide, k and v nkv*hd (Ainslie et al. 2023, arXiv 2305.13245).
    return 2.0 * h * m.head_dim * (2 * m.num_heads + 2 * m.num_kv_heads)


def qk_v_head_dims(m: ModelSpec) -> tuple[int, int]:
    if m.mla is not None:
        return m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim, m.mla.v_head_dim
    return m.head_dim, m.head_dim


def attended_keys(seq_len: int, window: int | None, causal: bool = True) -> float:
    """Mean keys each query attends to: (s+1)/2 causal; a sliding window w caps it near w."""
    s = float(seq_len)
    if not causal:
        return s if window is None else min(s, float(window))
    if window is None or window >= s:
        return (s + 1.0) / 2.0
    w = float(window)
    # queries 1..w see i keys, the remaining s-w see w keys
    return (w * (w + 1) / 2.0 + (s - w) * w) / s


def chunked_attended_keys(seq_len: int, chunk: int, causal: bool = True) -> float:
    """Mean keys each query attends to when attention stays inside blocks of `chunk` tokens (Llama 4's chunked
    attention, HF transformers masking_utils chunked_overlay: kv_idx // chunk == q_idx // chunk): causal, query j of
    a block sees j + 1 keys; else the whole block."""
    s, c = int(seq_len), int(chunk)
    if c >= s:
        return attended_keys(s, None, causal)
    full, rest = divmod(s, c)
    if not causal:
        return (full * c * c + rest * rest) / s
    return (full * c * (c + 1) / 2.0 + rest * (rest + 1) / 2.0) / s


def attn_core_flops_per_token(m: ModelSpec, seq_len: int, local: bool, causal: bool = True) -> float:
    """QK^T (2 * keys * d_qk) + AV (2 * keys * d_v) per head (Vaswani et al. 2017; FlashAttention-2
    paper, arXiv 2307.08691, sec. 4.1 counts the causal case as half); a local layer attends through the
    model's sliding window or inside its attention chunk."""
    dqk, dv = qk_v_head_dims(m)
    if local and m.attention_chunk_size is not None:
        keys = chunked_attended_keys(seq_len, m.attention_chunk_size, causal)
    else:
        keys = attended_keys(seq_len, m.sliding_window if local else None, causal)
    return 2.0 * keys * m.num_heads * (dqk + dv)


def mlp_flops_per_token(m: ModelSpec, ffn: int) -> float:
    return 2.0 * m.ffn_matrices * m.hidden_size * ffn


def is_sliding_layer(m: ModelSpec, i: int) -> bool:
    """Layer i attends through the sliding window: the model's per-layer pattern (HF `layer_types`, the one the
    launch files write: gpt-oss/Gemma 2 alternate, Gemma 3 five local to one global); without one, the first
    `num_sliding_layers` layers (all of them for Mistral)."""
    pat = m.sliding_layer_pattern
    return bool(pat[i]) if pat else i < m.num_sliding_layers


def is_local_layer(m: ModelSpec, i: int) -> bool:
    """Layer i attends locally: through the sliding window, or inside its attention chunk (Llama 4's RoPE layers;
    a model has one kind or the other, ModelSpec._check)."""
    if is_sliding_layer(m, i):
        return True
    pat = m.chunked_layer_pattern
    return bool(pat[i]) if pat else m.attention_chunk_size is not None


def has_local_layers(m: ModelSpec) -> bool:
    """Some layer attends locally (is_local_layer of any layer), read off the patterns without walking the layers:
    the launchers' rules ask it of every candidate plan."""
    sliding = any(m.sliding_layer_pattern) if m.sliding_layer_pattern else m.num_sliding_layers > 0
    chunked = any(m.chunked_layer_pattern) if m.chunked_layer_pattern else m.attention_chunk_size is not None
    return sliding or chunked


def layer_flops(m: ModelSpec, i: int, seq_len: int) -> LayerFlops:
    """Forward FLOPs per token of layer i."""
    proj = attn_proj_flops_per_token(m)
    core = attn_core_flops_per_token(m, seq_len, is_local_layer(m, i))
    if m.is_moe_layer(i):
        e = m.require_moe()
        shared_w = e.shared_expert_ffn_hidden_size or e.expert_ffn_hidden_size
        return LayerFlops(
            attn_proj=proj,
            attn_core=core,
            mlp=e.num_shared_experts * mlp_flops_per_token(m, shared_w),
            experts=e.top_k * mlp_flops_per_token(m, e.expert_ffn_hidden_size),
            router=2.0 * m.hidden_size * e.num_experts,
        )
    return LayerFlops(proj, core, mlp_flops_per_token(m, m.ffn_hidden_size), 0.0, 0.0)


def lm_head_flops_per_token(m: ModelSpec) -> float:
    """Output projection h -> V (the embedding lookup itself is free)."""
    return 2.0 * m.hidden_size * m.vocab_size


def model_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """Training model FLOPs per token for MFU: 3 x forward (fwd + 2x bwd) of every matmul that the
    active parameters take part in plus the causal attention core (the unmasked half of the scores), the
    convention of Megatron-LM's num_floating_point_operations ("only half of the attention matrix is non-zero"),
    of NeMo / Megatron-Bridge's flops formulas behind NVIDIA's published "Model TFLOP/s/GPU", and of MaxText's
    calculate_tflops_training_per_device (causal = non-causal / 2). PaLM (Chowdhery et al. 2022, app. B) and
    SC21 eq. 3 count the masked half too (`noncausal_model_flops_per_token`). No recompute FLOPs (HFU only)."""
    return _model_flops_per_token(m, seq_len, causal=True)


def noncausal_model_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """The same with the whole s x s score matrix counted (PaLM app. B: 6N + 12 l h s; SC21 eq. 3; torchtitan's
    logged MFU)."""
    return _model_flops_per_token(m, seq_len, causal=False)


def layer_fwd_flops_per_token(m: ModelSpec, i: int, seq_len: int, causal: bool = True) -> float:
    """Forward FLOPs per token of layer i: its GEMMs and its attention core."""
    return layer_flops(m, i, seq_len).gemm + attn_core_flops_per_token(m, seq_len, is_local_layer(m, i), causal=causal)


def _model_flops_per_token(m: ModelSpec, seq_len: int, causal: bool) -> float:
    total = lm_head_flops_per_token(m)
    for i in range(m.num_layers):
        total += layer_fwd_flops_per_token(m, i, seq_len, causal)
    return 3.0 * (total + m.mtp_layers * mtp_module_flops_per_token(m, seq_len, causal))


def mtp_module_flops_per_token(m: ModelSpec, seq_len: int, causal: bool = True) -> float:
    """Forward FLOPs per token of one multi-token-prediction module (planner.costmodel.mtp): a layer of the decoder's
    last kind, eh_proj (2h -> h) and the LM head again; Megatron-LM counts the same (training.py
    num_floating_point_operations: the MTP layers with the last layer's kind, "MTH eh proj", "MTP + final logit";
    its 3h norm term is left out here, 1e-6 of the total)."""
    h = m.hidden_size
    eh_proj = 2.0 * 2 * h * h
    return layer_fwd_flops_per_token(m, m.num_layers - 1, seq_len, causal) + eh_proj + lm_head_flops_per_token(m)
