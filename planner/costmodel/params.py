"""Exact parameter counts of a `ModelSpec`, following the Hugging Face transformers module layout.

Pure functions; no torch. `count_params(m).total` equals `sum(p.numel() for p in model.parameters())` of
the transformers model built from the same config.json (checked by tests/costmodel/test_transformers_counts.py).

Conventions (see shared/reference/specs.md section 2):

* Attention (MHA/GQA/MQA): q `h*nh*hd`, k and v `h*kv*hd` each, o `nh*hd*h`.
  `qkv_bias` adds `nh*hd + 2*kv*hd`, `attn_out_bias` adds `h`, `qk_norm` adds `2*hd` (per-head RMSNorm
  weights on q and k, Qwen3), `attention_sinks` adds `nh` (one logit per head, gpt-oss).
* MLA (DeepSeek-V2/V3): q_a `h*qr` + q_a_norm `qr` + q_b `qr*nh*(nope+rope)` (or a full q `h*nh*(nope+rope)`
  when `q_lora_rank` is None), kv_a `h*(kvr+rope)` + kv_a_norm `kvr`, kv_b `kvr*nh*(nope+v)`, o `nh*v*h`.
  With MLA, `qkv_bias` means biases on q_a and kv_a (HF `attention_bias`; q_b and kv_b never have one)
  and `attn_out_bias` a bias on o. `head_dim`/`num_kv_heads` are not used for MLA counts.
* Norms: RMSNorm `h`; LayerNorm `2h` (`h` with `norm_bias=False`). `norms_per_layer` per layer, one final
  norm, plus one after the embedding when `embedding_norm` (BLOOM).
* FFN: `ffn_matrices*h*ffn` (3 gated, 2 plain); `mlp_bias` adds `(ffn_matrices-1)*ffn + h`.
* MoE layer: router `h*E` (+`E` with `router_bias`); one routed expert `ffn_matrices*h*e_ffn`
  (+`(ffn_matrices-1)*e_ffn + h` with `expert_bias`); shared experts are ONE fused MLP of width
  `num_shared*shared_ffn` as in HF DeepSeek (`mlp_bias` applies to it), + `h` for a Qwen2-MoE shared gate.
* Embedding `V*h` (+ `max_position_embeddings*h` for learned positions, + the embedding norm, + one
  `buckets*nh` relative-position-bias table for T5-style relative positions, HF T5 convention);
  lm_head `V*h` unless tied. `active` counts the embedding, lm_head and final norm, every layer's
  attention/norms/dense FFN/router/shared experts, and `top_k` routed experts.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs import ModelSpec


@dataclass(frozen=True)
class LayerParams:
    attn: int  # q/k/v/o projections (+ MLA down/up projections and latent norms), their biases, q/k norms, sinks
    norms: int  # the layer's own norm weights (+biases)
    mlp_dense: int  # dense FFN params (0 in an MoE layer)
    router: int  # router weight (+bias)
    routed_expert_one: int  # ONE routed expert (matrices + biases)
    routed_experts: int  # all routed experts of the layer = num_experts * routed_expert_one
    shared_experts: int  # all shared experts (+ shared gate)
    top_k: int = 0  # routed experts per token in this layer (0 in a dense layer)

    @property
    def total(self) -> int:
        return self.attn + self.norms + self.mlp_dense + self.router + self.routed_experts + self.shared_experts

    @property
    def active(self) -> int:
        return (
            self.attn
            + self.norms
            + self.mlp_dense
            + self.router
            + self.top_k * self.routed_expert_one
            + self.shared_experts
        )


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int
    embedding: int  # input embedding (+ position embedding + embedding norm)
    lm_head: int  # 0 if tied
    final_norm: int
    non_embedding: int  # total - embedding - lm_head


def norm_params(model: ModelSpec) -> int:
    """Parameters of one hidden-size norm."""
    if model.norm_type == "layernorm" and model.norm_bias:
        return 2 * model.hidden_size
    return model.hidden_size


def ffn_params(model: ModelSpec, width: int, bias: bool) -> int:
    """One FFN (or expert) of per-matrix width `width`: matrices plus optional biases."""
    h, m = model.hidden_size, model.ffn_matrices
    n = m * h * width
    if bias:
        n += (m - 1) * width + h
    return n


def attn_params(model: ModelSpec) -> int:
    """One layer's attention block (identical in every layer)."""
    h, nh = model.hidden_size, model.num_heads
    mla = model.mla
    if mla is not None:
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank is None:
            n = h * nh * qk
        else:
            qr = mla.q_lora_rank
            n = h * qr + qr + qr * nh * qk + (qr if model.qkv_bias else 0)
        kva = mla.kv_lora_rank + mla.qk_rope_head_dim
        n += h * kva + (kva if model.qkv_bias else 0) + mla.kv_lora_rank
        n += mla.kv_lora_rank * nh * (mla.qk_nope_head_dim + mla.v_head_dim)
        n += nh * mla.v_head_dim * h
    else:
        hd, kv = model.head_dim, model.num_kv_heads
        n = h * nh * hd + 2 * h * kv * hd + nh * hd * h
        if model.qkv_bias:
            n += nh * hd + 2 * kv * hd
        if model.qk_norm:
            n += 2 * hd
    if model.attn_out_bias:
        n += h
    if model.attention_sinks:
        n += nh
    return n


def layer_params(model: ModelSpec, i: int) -> LayerParams:
    """Parameters of decoder layer `i` (0-based)."""
    if not 0 <= i < model.num_layers:
        raise IndexError(f"layer {i} out of range for {model.num_layers} layers")
    attn = attn_params(model)
    norms = model.norms_per_layer * norm_params(model)
    moe = model.moe
    if moe is None or not model.is_moe_layer(i):
        return LayerParams(attn, norms, ffn_params(model, model.ffn_hidden_size, model.mlp_bias), 0, 0, 0, 0)
    h = model.hidden_size
    router = h * moe.num_experts + (moe.num_experts if moe.router_bias else 0)
    one = ffn_params(model, moe.expert_ffn_hidden_size, moe.expert_bias)
    shared = 0
    if moe.num_shared_experts:
        width = moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size
        shared = ffn_params(model, moe.num_shared_experts * width, model.mlp_bias)
    if moe.shared_expert_gate:
        shared += h
    return LayerParams(attn, norms, 0, router, one, moe.num_experts * one, shared, moe.top_k)


def count_params(model: ModelSpec) -> ParamCounts:
    """Total, active and embedding/head split of the whole model (MTP modules excluded)."""
    h, v = model.hidden_size, model.vocab_size
    embedding = v * h
    if model.position_embedding == "learned":
        embedding += model.max_position_embeddings * h
    if model.embedding_norm:
        embedding += norm_params(model)
    if model.position_embedding == "relative":
        embedding += model.relative_attention_num_buckets * model.num_heads  # T5 relative_attention_bias
    lm_head = 0 if model.tied_embeddings else v * h
    final_norm = norm_params(model)
    total = active = embedding + lm_head + final_norm
    # layers differ only in their FFN: count each distinct kind once
    cache: dict[bool, LayerParams] = {}
    for i in range(model.num_layers):
        moe_layer = model.is_moe_layer(i)
        lp = cache.get(moe_layer)
        if lp is None:
            lp = cache[moe_layer] = layer_params(model, i)
        total += lp.total
        active += lp.active
    return ParamCounts(
        total=total,
        active=active,
        embedding=embedding,
        lm_head=lm_head,
        final_norm=final_norm,
        non_embedding=total - embedding - lm_head,
    )
