"""The planned model as a Hugging Face `config.json` (the DeepSpeed launch's Hugging Face model path).

`hf_config_of(model)` writes the transformers config fields of the model's family; `hf_gaps(model, train)`
re-imports that config with the planner's own importer (planner.catalog.hf_import) and names every contract
field (planner.launchers.contract) that comes back different: what transformers' model class of that family would
not run as planned (DeepSeek-V3's aux-loss-free bias updates and MTP module, for instance). Empty: the config
builds the costed model.
"""

from __future__ import annotations

from typing import Any

from planner.errors import InputError
from planner.specs import ModelSpec, TrainingSpec

# families whose transformers config class the writer fills (transformers 5.24.0 configuration_*.py field names)
FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "gemma", "gemma2",
            "gemma3_text", "gpt_oss", "deepseek_v3", "nemotron", "phi3", "llama4_text")
_ACT_KEY = {"gemma": "hidden_act", "gemma2": "hidden_activation", "gemma3_text": "hidden_activation"}
_HF_ACT = {"silu": "silu", "swish": "silu", "gelu_tanh": "gelu_pytorch_tanh", "gelu": "gelu", "relu2": "relu2",
           "gpt_oss_glu": "silu"}


# families whose transformers model class has no FlashAttention-2 path (transformers 5.24.0 modeling_llama4.py
# Llama4PreTrainedModel: _supports_flash_attn False, _supports_flex_attn True): flex attention is their flash kernel
NO_FLASH_ATTENTION_2 = ("llama4_text",)


def hf_attn_implementation(m: ModelSpec, t: TrainingSpec) -> str:
    """transformers' attn_implementation for the costed attention: a flash kernel (no s x s scores kept) or eager."""
    if t.attention_impl != "flash":
        return "eager"
    return "flex_attention" if m.family in NO_FLASH_ATTENTION_2 else "flash_attention_2"


def _rope(m: ModelSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"rope_theta": m.rope_theta}
    if m.rope_local_theta is not None:
        out["rope_local_base_freq"] = m.rope_local_theta
    sc = m.rope_scaling
    if sc is not None:
        out["rope_scaling"] = {k: v for k, v in sc.model_dump().items() if v is not None}
    if m.rotary_fraction != 1.0:
        out["partial_rotary_factor"] = m.rotary_fraction  # read by the families that rotate part of a head
    return out


def _windows(m: ModelSpec) -> dict[str, Any]:
    if m.sliding_window is None or not m.num_sliding_layers:
        return {"sliding_window": None} if m.family in ("mistral", "mixtral", "phi3") else {}
    pattern = m.sliding_pattern()
    out: dict[str, Any] = {"sliding_window": m.sliding_window}
    if m.family in ("qwen2", "qwen3", "qwen3_moe", "qwen2_moe"):
        out["use_sliding_window"] = True
    if pattern is not None and m.family not in ("mistral", "mixtral", "phi3", "qwen3_moe"):
        out["layer_types"] = ["sliding_attention" if b else "full_attention" for b in pattern]
    return out


def _moe(m: ModelSpec) -> dict[str, Any]:
    e = m.moe
    if e is None:
        return {}
    out: dict[str, Any] = {"num_experts_per_tok": e.top_k, "router_aux_loss_coef": e.aux_loss_coeff,
                           "output_router_logits": e.aux_loss_coeff > 0}  # HF adds the aux loss only then
    if m.family in ("mixtral", "gpt_oss"):
        out["num_local_experts"] = e.num_experts
    elif m.family in ("qwen3_moe", "qwen2_moe"):
        out.update(num_experts=e.num_experts, moe_intermediate_size=e.expert_ffn_hidden_size,
                   norm_topk_prob=e.norm_topk_prob, decoder_sparse_step=e.layer_freq,
                   mlp_only_layers=list(e.dense_layers))
        if m.family == "qwen2_moe":
            out["shared_expert_intermediate_size"] = e.shared_expert_ffn_hidden_size or e.expert_ffn_hidden_size
    elif m.family == "llama4_text":
        # Llama4TextMoe: the experts and the one shared expert share intermediate_size; no balance loss in the model
        out.update(num_local_experts=e.num_experts, output_router_logits=False,
                   moe_layers=[i for i in range(m.num_layers) if m.is_moe_layer(i)])
        out.pop("router_aux_loss_coef")
    elif m.family == "deepseek_v3":
        out.update(n_routed_experts=e.num_experts, moe_intermediate_size=e.expert_ffn_hidden_size,
                   n_shared_experts=e.num_shared_experts, first_k_dense_replace=e.first_k_dense,
                   moe_layer_freq=e.layer_freq, n_group=e.route_groups, topk_group=e.route_topk_groups or 1,
                   routed_scaling_factor=e.routed_scaling_factor, norm_topk_prob=e.norm_topk_prob,
                   scoring_func=e.score_function)
        if not e.expert_bias_balancing:
            out["topk_method"] = "greedy"
    return out


def _llama4(m: ModelSpec) -> dict[str, Any]:
    """Llama4TextConfig's own fields (transformers 5.24.0): intermediate_size is the expert width, the dense layers'
    is intermediate_size_mlp; no_rope_layers (1 = RoPE), chunked layer_types, the L2 q/k norm, temperature tuning."""
    e = m.require_moe()
    nope = m.nope_layer_pattern or (0,) * m.num_layers
    tuning = m.attn_temperature_tuning
    return {"intermediate_size": e.expert_ffn_hidden_size, "intermediate_size_mlp": m.ffn_hidden_size,
            "no_rope_layers": [1 - x for x in nope], "attention_chunk_size": m.attention_chunk_size,
            "layer_types": ["chunked_attention" if c else "full_attention" for c in m.chunked_pattern()],
            "use_qk_norm": m.qk_l2_norm, "attn_temperature_tuning": tuning is not None,
            **({"floor_scale": int(tuning[0]), "attn_scale": tuning[1]} if tuning is not None else {})}


def hf_config_of(m: ModelSpec) -> dict[str, Any]:
    """A transformers config.json mapping for the model (InputError when its family has no writer here)."""
    if m.family not in FAMILIES:
        raise InputError(f"no Hugging Face config writer for the {m.family} family")
    cfg: dict[str, Any] = {
        "model_type": m.family, "hidden_size": m.hidden_size, "intermediate_size": m.ffn_hidden_size,
        "num_hidden_layers": m.num_layers, "num_attention_heads": m.num_heads, "num_key_value_heads": m.num_kv_heads,
        "vocab_size": m.vocab_size, "max_position_embeddings": m.max_position_embeddings,
        "tie_word_embeddings": m.tied_embeddings, _ACT_KEY.get(m.family, "hidden_act"): _HF_ACT.get(m.activation,
                                                                                                      m.activation),
        "attention_bias": m.qkv_bias, "attention_dropout": 0.0,
    }
    if m.mla is None:
        cfg["head_dim"] = m.head_dim
    else:
        cfg.update(q_lora_rank=m.mla.q_lora_rank, kv_lora_rank=m.mla.kv_lora_rank,
                   qk_nope_head_dim=m.mla.qk_nope_head_dim, qk_rope_head_dim=m.mla.qk_rope_head_dim,
                   v_head_dim=m.mla.v_head_dim, num_nextn_predict_layers=m.mtp_layers)
    if m.family in ("llama", "nemotron"):
        cfg["mlp_bias"] = m.mlp_bias
    if m.norm_eps is not None:
        cfg["norm_eps" if m.family == "nemotron" else "rms_norm_eps"] = m.norm_eps
    if m.family in ("gemma2", "gemma3_text"):
        cfg["attn_logit_softcapping"] = m.attn_logit_softcap
        cfg["final_logit_softcapping"] = m.final_logit_softcap
    if m.family == "gemma3_text":
        cfg["sliding_window_pattern"] = 6  # only read without layer_types
    if m.family == "llama4_text":
        cfg.update(_llama4(m))
    cfg.update(_rope(m))
    cfg.update(_windows(m))
    cfg.update(_moe(m))
    return cfg


def hf_gaps(m: ModelSpec, t: TrainingSpec) -> list[str]:
    """Contract features the Hugging Face model of `m`'s family would not run as costed (empty: it runs them)."""
    from planner.catalog.hf_import import from_hf_config
    from planner.launchers.contract import BY_NAME, contract_values

    try:
        back = from_hf_config(hf_config_of(m), name=m.name)
    except InputError as e:
        return [str(e)]
    want, got = contract_values(m, t), contract_values(back, t)
    if m.norm_eps is None:  # not stated by the spec: the config class's default is as good as any
        want.pop("norm_eps")
    gaps = [BY_NAME[k].feature or k for k in want if want[k] != got[k]]
    if m.mtp_layers:
        gaps.append("multi-token prediction")  # transformers builds no MTP module (modeling_deepseek_v3.py)
    if m.moe is not None and m.moe.expert_bias_balancing:
        gaps.append("aux-loss-free expert-bias balancing")  # a buffer transformers never updates
    if m.moe is not None and m.moe.aux_loss_per_sequence and m.moe.aux_loss_coeff:
        gaps.append("a per-sequence balance loss")  # HF load_balancing_loss_func is per batch
    if t.moe_capacity_factor is not None and m.moe is not None:
        gaps.append("an expert capacity factor")  # HF MoE blocks are dropless
    return list(dict.fromkeys(gaps))
