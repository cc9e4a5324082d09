"""Contract values (planner.launchers.contract) rebuilt from what each launcher's own library parsed out of the emitted
files alone: megatron-core's TransformerConfig + args (check_megatron.py), MaxText's pyconfig (check_jax.py),
Megatron-DeepSpeed's argument definitions (rebuild.mds_parser) and transformers' config class (the DeepSpeed
transformers path), torchtitan's model config (check_torchtitan.py). Each function returns {field: value} for the
fields that library exposes; `mismatches` compares them with the costed model's values."""

from __future__ import annotations

from typing import Any

from planner.specs import ModelSpec


def _pattern_of_skip(skip, n: int) -> tuple[int, ...]:
    """megatron-core window_attn_skip_freq: None = every layer windowed; N = layer_number % N != 0 windowed; list."""
    if skip is None:
        return (1,) * n
    if isinstance(skip, int):
        return tuple(int((i + 1) % skip != 0) for i in range(n))
    return tuple(int(x) for x in skip)


def _megatron_rope(f: dict) -> tuple | None:
    if f["use_rope_scaling"]:
        return ("llama3", f["rope_scaling_factor"], 1.0, 4.0, 8192)  # _apply_scaling's fixed constants
    if f["multi_latent_attention"] and f["rope_type"] == "yarn":
        return ("yarn", float(f["rotary_scaling_factor"]), f["original_max_position_embeddings"], float(f["beta_fast"]),
                float(f["beta_slow"]), float(f["mscale"]), float(f["mscale_all_dim"]))
    if f["position_embedding_type"] == "yarn":
        return ("yarn", float(f["yarn_rotary_scaling_factor"]), f["yarn_original_max_position_embeddings"],
                float(f["yarn_beta_fast"]), float(f["yarn_beta_slow"]), float(f["yarn_mscale"]),
                float(f["yarn_mscale_all_dim"]))
    return None


def megatron_values(f: dict, planned: ModelSpec) -> dict[str, Any]:
    from consumers.rebuild import megatron_activation

    mla = f["multi_latent_attention"]
    n = f["num_layers"]
    out: dict[str, Any] = {
        "num_layers": n, "hidden_size": f["hidden_size"], "num_heads": f["num_attention_heads"],
        "num_kv_heads": None if mla else (f["num_query_groups"] or f["num_attention_heads"]),
        "head_dim": None if mla else f["kv_channels"],
        "ffn_hidden_size": f["ffn_hidden_size"] if planned.num_dense_layers else None,
        "vocab_size": f["vocab_size"], "tied_embeddings": not f["untie_embeddings_and_output_weights"],
        "norm_type": "rmsnorm" if f["normalization"] == "RMSNorm" else "layernorm",
        "norm_eps": f["layernorm_epsilon"], "mlp_type": "gated" if f["gated_linear_unit"] else "plain",
        "activation": megatron_activation(f),
        "position_embedding": {"rope": "rope", "yarn": "rope", "learned_absolute": "learned", "none": "none"}[
            f["position_embedding_type"]],
        "rope_scaling": _megatron_rope(f),
        "sliding_window": None if f["window_size"] is None else (
            f["window_size"][0] + 1, _pattern_of_skip(f["window_attn_skip_freq"], n)),
        "qkv_bias": bool(f["add_bias_linear"] or f["add_qkv_bias"]), "attn_out_bias": bool(f["add_bias_linear"]),
        "mlp_bias": bool(f["add_bias_linear"]) and bool(planned.num_dense_layers),
        "qk_norm": bool(f["qk_layernorm"]), "attention_sinks": f["softmax_type"] == "learnable",
        "mla": (f["q_lora_rank"], f["kv_lora_rank"], f["qk_head_dim"], f["qk_pos_emb_head_dim"], f["v_head_dim"])
        if mla else None,
        "attention_impl": "unfused" if "unfused" in f["attention_backend"] else "flash",
        "mtp_layers": f["mtp_num_layers"] or 0,
    }
    if out["position_embedding"] == "rope":
        out["rope_theta"] = float(f["rotary_base"])
        out["rotary_fraction"] = float(f["rotary_percent"])
    else:
        out["rotary_fraction"] = 1.0
    out.update(_megatron_moe(f, n))
    return out


def _megatron_moe(f: dict, n: int) -> dict[str, Any]:
    if not f["num_moe_experts"]:
        return {"num_experts": None, "top_k": None, "moe_layers": None, "router_bias": False, "expert_bias": False}
    freq = f["moe_layer_freq"]
    lb = f["moe_router_load_balancing_type"]
    lb = lb[0] if isinstance(lb, list) else lb
    coeff = f["moe_aux_loss_coeff"]
    coeff = coeff[0] if isinstance(coeff, list) else coeff
    sigmoid = f["moe_router_score_function"] == "sigmoid"
    return {
        "num_experts": f["num_moe_experts"], "top_k": f["moe_router_topk"],
        "expert_ffn_hidden_size": f["moe_ffn_hidden_size"],
        "moe_layers": tuple(1 if i % freq == 0 else 0 for i in range(n)) if isinstance(freq, int) else tuple(freq),
        "shared_expert_ffn": f["moe_shared_expert_intermediate_size"] or 0,
        "shared_expert_gate": bool(f["moe_shared_expert_gate"]),
        "router_bias": bool(f["add_bias_linear"]), "expert_bias": bool(f["add_bias_linear"]),  # TopKRouter.bias
        "score_function": f["moe_router_score_function"],
        "expert_bias_balancing": bool(f["moe_router_enable_expert_bias"]),
        "route_groups": ((f["moe_router_num_groups"], f["moe_router_group_topk"]) if f["moe_router_group_topk"]
                         else None),
        "routed_scaling_factor": f["moe_router_topk_scaling_factor"] or 1.0,
        "norm_topk_prob": sigmoid or not f["moe_router_pre_softmax"],  # sigmoid scores are renormalised (top_k > 1)
        "aux_loss": (coeff, lb == "seq_aux_loss") if coeff and lb in ("aux_loss", "seq_aux_loss") else None,
        "z_loss_coeff": f["moe_z_loss_coeff"] or 0.0, "capacity_factor": f["moe_expert_capacity_factor"],
    }


# MaxText decoder blocks: norm type, post norms, embedding scale, local/global cycle (planner.launchers.maxtext_mesh,
# read from maxtext 0.2.5 models/*.py)
def maxtext_values(f: dict, planned: ModelSpec) -> dict[str, Any]:
    from planner.launchers.maxtext_mesh import _GEMMA_BLOCKS, _POST_NORM_BLOCKS, _WINDOW_CYCLE

    block, n = f["decoder_block"], f["num_decoder_layers"]
    acts = f["mlp_activations"]
    act = {"gelu": "gelu_tanh", "sigmoid": "gpt_oss_glu"}.get(acts[0], acts[0])  # jax.nn.gelu is the tanh form
    mla = f["attention_type"] == "mla"
    cycle = _WINDOW_CYCLE.get(block)
    out: dict[str, Any] = {
        "num_layers": n, "hidden_size": f["emb_dim"], "num_heads": f["num_query_heads"],
        "num_kv_heads": None if mla else f["num_kv_heads"], "head_dim": None if mla else f["head_dim"],
        "ffn_hidden_size": f["mlp_dim"] if planned.num_dense_layers else None, "vocab_size": f["vocab_size"],
        "tied_embeddings": bool(f["logits_via_embedding"]),
        "norm_type": "layernorm" if block == "gpt3" else "rmsnorm", "norm_eps": f["normalization_layer_epsilon"],
        "post_norms": bool(f["use_post_attn_norm"]) and block in _POST_NORM_BLOCKS,
        "mlp_type": "gated" if len(acts) == 2 and acts[1] == "linear" else "plain", "activation": act,
        "scale_embeddings": block in _GEMMA_BLOCKS, "qk_norm": bool(f["use_qk_norm"]),
        "attention_sinks": bool(f["attention_sink"]),
        "sliding_window": (f["sliding_window_size"], tuple(cycle[i % len(cycle)] for i in range(n)))
        if cycle and f["sliding_window_size"] else None,
        "logit_softcap": (f["attn_logits_soft_cap"] or None, f["final_logits_soft_cap"] or None),
        "attention_impl": "unfused" if f["attention"] == "dot_product" else "flash",
        "mtp_layers": f["mtp_num_layers"] or 0,
        "mla": (f["q_lora_rank"] or None, f["kv_lora_rank"], f["qk_nope_head_dim"], f["qk_rope_head_dim"],
                f["v_head_dim"]) if mla else None,
    }
    if not f["trainable_position_size"] or f["trainable_position_size"] <= 0:
        out["rope_theta"] = float(f["rope_max_timescale"])
        local = f["local_rope_max_timescale"]
        out["rope_local_theta"] = float(local) if local and local > 0 else None
    out.update(_maxtext_moe(f, n))
    out.update(_maxtext_llama4(f, n) if block == "llama4" else {
        "chunked_attention": None, "nope_layers": None, "qk_l2_norm": False, "attn_temperature_tuning": None,
        "probs_on_input": False})
    return out


def _maxtext_llama4(f: dict, n: int) -> dict[str, Any]:
    """The llama4 block's layers as maxtext 0.2.5 models/llama4.py builds them (determine_is_nope_layer,
    determine_is_moe_layer, run by tests/consumers/check_jax.py), its chunks on the RoPE layers, L2 q/k norm,
    temperature tuning (0.1 / 8192 in Llama4DecoderLayer) and router (layers/moe.py: sigmoid of the top-1 logit on
    the expert input)."""
    nope = tuple(f["nope_pattern"])
    chunk, seq = f["chunk_attn_window_size"], f["max_target_length"]
    return {
        "nope_layers": nope if any(nope) else None,
        "chunked_attention": (chunk, tuple(1 - x for x in nope)) if chunk < seq else None,
        "qk_l2_norm": bool(f["use_qk_norm"]), "qk_norm": False,
        "attn_temperature_tuning": (8192.0, 0.1) if f["temperature_tuning"] and any(nope) else None,
        "moe_layers": tuple(f["moe_pattern"]),
        # GateLogit applies routed_score_func to the logits first: a second sigmoid, not Llama 4's router
        "score_function": "sigmoid" if not f["routed_score_func"] else f"{f['routed_score_func']} then sigmoid",
        "norm_topk_prob": False, "probs_on_input": True,
    }


def _maxtext_moe(f: dict, n: int) -> dict[str, Any]:
    if not f["num_experts"] or f["num_experts"] <= 1:
        return {"num_experts": None}
    first = f["first_num_dense_layers"] or 0
    groups = f["topk_routing_group"]
    return {
        "num_experts": f["num_experts"], "top_k": f["num_experts_per_tok"], "expert_ffn_hidden_size": f["moe_mlp_dim"],
        "moe_layers": tuple(int(i >= first) for i in range(n)),
        "shared_expert_ffn": (f["shared_experts"] or 0) * f["moe_mlp_dim"],
        "score_function": f["routed_score_func"] or "softmax",
        "expert_bias_balancing": bool(f["routed_bias"]) and (f["routed_bias_update_rate"] or 0) > 0,
        "router_bias": bool(f["routed_bias"]) and not (f["routed_bias_update_rate"] or 0) > 0,
        "expert_bias": bool(f["mlp_bias"]),
        "route_groups": (f["n_routing_groups"], groups) if groups and groups > 0 else None,
        "routed_scaling_factor": f["routed_scaling_factor"], "norm_topk_prob": bool(f["norm_topk_prob"]),
        "aux_loss": (f["load_balance_loss_weight"], bool(f["moe_use_megatron_seq_aux_loss"]))
        if f["load_balance_loss_weight"] else None,
        "capacity_factor": f["capacity_factor"] if f["capacity_factor"] and f["capacity_factor"] > 0 else None,
    }


def mds_values(args: list[str], planned: ModelSpec) -> dict[str, Any]:
    from consumers.rebuild import _mds_activation, mds_parser

    a = mds_parser().parse_args(args)
    bias = bool(a.add_bias_linear)
    out: dict[str, Any] = {
        "num_layers": a.num_layers, "hidden_size": a.hidden_size, "num_heads": a.num_attention_heads,
        "num_kv_heads": a.num_key_value_heads or a.num_attention_heads, "head_dim": a.kv_channels,
        "ffn_hidden_size": a.ffn_hidden_size, "vocab_size": a.vocab_size,
        "tied_embeddings": not a.untie_embeddings_and_output_weights, "norm_type": a.normalization,
        "norm_eps": a.layernorm_epsilon, "mlp_type": "gated" if a.swiglu else "plain", "activation": _mds_activation(a),
        "position_embedding": "rope" if a.use_rotary_position_embeddings else (
            "learned" if a.add_position_embedding else "none"),
        "qkv_bias": bias, "attn_out_bias": bias, "mlp_bias": bias and bool(planned.num_dense_layers),
        "attention_impl": "flash" if (a.use_flash_attn_v1 or a.use_flash_attn_v2) else "unfused",
    }
    if a.use_rotary_position_embeddings:
        out["rope_theta"] = float(a.rope_theta)
    return out


def hf_values(cfg: Any, planned: ModelSpec, attn_implementation: str, seq_len: int) -> dict[str, Any]:
    """From a transformers PretrainedConfig built from hf_config.json (the contract fields it states) for a run of
    seq_len tokens."""
    n = cfg.num_hidden_layers
    types = getattr(cfg, "layer_types", None)
    window = getattr(cfg, "sliding_window", None)
    pattern = tuple(int(t == "sliding_attention") for t in types) if types else (1,) * n
    rp = getattr(cfg, "rope_parameters", None) or {}
    if isinstance(rp, dict) and "full_attention" in rp:  # per-layer-type rope (Gemma 3)
        rp = rp["full_attention"]
    eps = next((getattr(cfg, k) for k in ("rms_norm_eps", "norm_eps", "layer_norm_eps") if hasattr(cfg, k)), None)
    out: dict[str, Any] = {
        "num_layers": n, "hidden_size": cfg.hidden_size, "num_heads": cfg.num_attention_heads,
        "vocab_size": cfg.vocab_size, "tied_embeddings": bool(cfg.tie_word_embeddings), "norm_eps": eps,
        "rope_theta": float(rp.get("rope_theta", getattr(cfg, "rope_theta", 0.0))),
        "rotary_fraction": float(rp.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", 1.0))),
        "sliding_window": None if not window or not any(pattern) or window >= 10**9 else (window, pattern),
        "attention_impl": "flash" if attn_implementation in ("flash_attention_2", "flex_attention") else "unfused",
    }
    if planned.mla is None:
        out.update(num_kv_heads=cfg.num_key_value_heads, head_dim=getattr(cfg, "head_dim", None))
    act = getattr(cfg, "hidden_activation", None) or getattr(cfg, "hidden_act", None)
    out["activation"] = {"gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh"}.get(act, act)
    if planned.activation == "gpt_oss_glu" and act == "silu" and getattr(cfg, "swiglu_limit", None) == 7.0:
        out["activation"] = "gpt_oss_glu"  # GptOssExperts: x*sigmoid(1.702x)*(y+1), clamped at swiglu_limit
    out["qkv_bias"] = bool(getattr(cfg, "attention_bias", False)) or planned.family == "qwen2"  # Qwen2: hard-coded
    if planned.num_dense_layers:
        out["ffn_hidden_size"] = cfg.intermediate_size
    kind = rp.get("rope_type", "default") if isinstance(rp, dict) else "default"
    if kind == "llama3":
        out["rope_scaling"] = ("llama3", rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"],
                               rp["original_max_position_embeddings"])
    elif kind == "default":
        out["rope_scaling"] = None
    if planned.family == "llama4_text":
        out.update(_hf_llama4(cfg, n, seq_len))
    experts = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None)
    if experts and planned.moe is not None:
        coef = getattr(cfg, "router_aux_loss_coef", 0.0) if getattr(cfg, "output_router_logits", False) else 0.0
        out.update(num_experts=experts, top_k=cfg.num_experts_per_tok,
                   aux_loss=(coef, False) if coef else None)
    return out


def _hf_llama4(cfg: Any, n: int, seq_len: int) -> dict[str, Any]:
    """Llama4TextConfig after its __post_init__ (no_rope_layers 1 = RoPE, moe_layers, layer_types) and what
    modeling_llama4.py does with it: the dense FFN is intermediate_size_mlp, experts and the shared expert
    intermediate_size; the L2 q/k norm and chunked attention on the RoPE layers, temperature tuning on the others;
    Llama4Router's sigmoid of the top-k logits scales the expert input (Llama4TextMoe)."""
    nope = tuple(1 - int(x) for x in cfg.no_rope_layers)
    chunked = tuple(int(t == "chunked_attention") for t in cfg.layer_types)
    return {
        "ffn_hidden_size": cfg.intermediate_size_mlp, "expert_ffn_hidden_size": cfg.intermediate_size,
        "shared_expert_ffn": cfg.intermediate_size, "moe_layers": tuple(int(i in cfg.moe_layers) for i in range(n)),
        "nope_layers": nope if any(nope) else None,
        # a chunk that holds the whole sequence is global attention
        "chunked_attention": (cfg.attention_chunk_size, chunked) if any(chunked) and cfg.attention_chunk_size < seq_len
        else None,
        "qk_l2_norm": bool(cfg.use_qk_norm) and not all(nope), "qk_norm": False,
        "attn_temperature_tuning": (float(cfg.floor_scale), float(cfg.attn_scale))
        if cfg.attn_temperature_tuning and any(nope) else None,
        "score_function": "sigmoid", "norm_topk_prob": False, "probs_on_input": True,
    }


def torchtitan_values(f: dict, planned: ModelSpec) -> dict[str, Any]:
    """From the model config torchtitan builds for --module/--config (check_torchtitan.py model_fields)."""
    out: dict[str, Any] = {
        "num_layers": f["n_layers"], "hidden_size": f["dim"], "vocab_size": f["vocab_size"], "num_heads": f["n_heads"],
        "tied_embeddings": bool(f["tied"]), "norm_type": "rmsnorm" if "RMSNorm" in f["norm"] else "layernorm",
        "norm_eps": f["norm_eps"], "rope_theta": float(f["rope_theta"]), "qk_norm": bool(f["qk_norm"]),
        "qkv_bias": bool(f["qkv_bias"]),
    }
    if planned.mla is None:
        # a registry attention config leaves head_dim to its default, dim // n_heads
        out.update(num_kv_heads=f["n_kv_heads"] or f["n_heads"], head_dim=f["head_dim"] or f["dim"] // f["n_heads"])
    return out


def mismatches(rebuilt: dict[str, Any], planned: dict[str, Any], mapped: set[str]) -> list[str]:
    """Every mapped contract field whose rebuilt value differs from the costed one."""
    out = []
    for k in sorted(mapped & set(rebuilt)):
        a, b = rebuilt[k], planned[k]
        if isinstance(a, float) or isinstance(b, float):
            same = a == b or (a is not None and b is not None and abs(float(a) - float(b)) <= 1e-9 * max(1, abs(b)))
        elif k == "activation":
            canon = {"swish": "silu", "gelu_new": "gelu_tanh"}
            same = canon.get(a, a) == canon.get(b, b)
        else:
            same = _norm(a) == _norm(b)
        if not same:
            out.append(f"{k}: launcher {a!r} != costed {b!r}")
    return out


def _norm(v):
    if isinstance(v, list):
        return tuple(_norm(x) for x in v)
    if isinstance(v, tuple):
        return tuple(_norm(x) for x in v)
    return v
