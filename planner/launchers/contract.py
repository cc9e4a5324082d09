"""Architecture contracts: every model field the plan was costed with, mapped per launcher to the launcher's own
flag or config key, or to "not expressible" (None) with the release it was read from.

    contract_values(model, train) -> {field: canonical value}         # what the launch must run
    missing_features(model, train, launcher) -> [feature, ...]          # costed but not expressible: refuse

A field whose value is its `neutral` (the feature is absent: no sliding window, no z-loss, ...) runs on a
launcher without the key; any other value needs the launcher's key. The emitters write every mapped field
from the model; the round-trip test (tests/consumers/test_roundtrip_consumer.py) rebuilds these values
from what the real library parsed out of the emitted files and compares every mapped field.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from planner.specs import ModelSpec, RopeScaling, TrainingSpec

_ALWAYS = object()  # a structural field: every launcher must carry it


@dataclass(frozen=True)
class ContractField:
    name: str
    value: Callable[[ModelSpec, TrainingSpec], Any]
    neutral: Any = _ALWAYS  # the value meaning "feature absent"
    feature: str = ""  # how a refusal names it

    def active(self, m: ModelSpec, t: TrainingSpec) -> bool:
        return self.neutral is _ALWAYS or self.value(m, t) != self.neutral


def _moe(get: Callable[[Any], Any], default: Any = None) -> Callable[[ModelSpec, TrainingSpec], Any]:
    return lambda m, t: get(m.moe) if m.moe is not None else default


def rope_scaling_value(sc: RopeScaling | None) -> tuple | None:
    """(type, factor, then the type's parameters with HF's defaults filled in) or None."""
    if sc is None:
        return None
    kind = "yarn" if sc.rope_type in ("yarn", "deepseek_yarn") else sc.rope_type
    if kind == "llama3":  # HF _compute_llama3_parameters defaults are the Llama 3.1 config's
        return (kind, sc.factor, sc.low_freq_factor or 1.0, sc.high_freq_factor or 4.0,
                sc.original_max_position_embeddings or 8192)
    if kind == "yarn":  # HF _compute_yarn_parameters defaults: beta_fast 32, beta_slow 1, mscale 1, mscale_all_dim 0
        return (kind, sc.factor, sc.original_max_position_embeddings, sc.beta_fast or 32.0, sc.beta_slow or 1.0,
                sc.mscale or 1.0, sc.mscale_all_dim or 0.0)
    return (kind, sc.factor, sc.original_max_position_embeddings)


def _rope(m: ModelSpec, t: TrainingSpec) -> tuple | None:
    return rope_scaling_value(m.rope_scaling) if m.position_embedding == "rope" else None


def _window(m: ModelSpec, t: TrainingSpec) -> tuple | None:
    """(window tokens, per-layer pattern 1 = sliding) or None; a window no shorter than the sequence is global."""
    if m.sliding_window is None or m.num_sliding_layers == 0 or m.sliding_window >= t.seq_len:
        return None  # a window of W tokens holds the whole sequence when W >= seq_len: global attention
    pat = m.sliding_pattern()
    return (m.sliding_window, pat if pat is not None else f"{m.num_sliding_layers} of {m.num_layers} layers")


def _chunks(m: ModelSpec, t: TrainingSpec) -> tuple | None:
    """(chunk tokens, per-layer pattern 1 = chunked) or None; a chunk no shorter than the sequence is global."""
    if m.attention_chunk_size is None or m.attention_chunk_size >= t.seq_len or not any(m.chunked_pattern()):
        return None
    return (m.attention_chunk_size, m.chunked_pattern())


def _moe_layers(m: ModelSpec, t: TrainingSpec) -> tuple | None:
    return tuple(int(m.is_moe_layer(i)) for i in range(m.num_layers)) if m.moe else None


def _mla(m: ModelSpec, t: TrainingSpec) -> tuple | None:
    a = m.mla
    return None if a is None else (a.q_lora_rank, a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim,
                                   a.v_head_dim)


def _shared(m: ModelSpec, t: TrainingSpec) -> int:
    e = m.moe
    if e is None or not e.num_shared_experts:
        return 0
    return e.num_shared_experts * (e.shared_expert_ffn_hidden_size or e.expert_ffn_hidden_size)


FIELDS: tuple[ContractField, ...] = (
    ContractField("num_layers", lambda m, t: m.num_layers),
    ContractField("hidden_size", lambda m, t: m.hidden_size),
    ContractField("num_heads", lambda m, t: m.num_heads),
    ContractField("num_kv_heads", lambda m, t: m.num_kv_heads if m.mla is None else None),
    ContractField("head_dim", lambda m, t: m.head_dim if m.mla is None else None),
    ContractField("ffn_hidden_size", lambda m, t: m.ffn_hidden_size if m.num_dense_layers else None),
    ContractField("vocab_size", lambda m, t: m.vocab_size),
    ContractField("tied_embeddings", lambda m, t: m.tied_embeddings),
    ContractField("norm_type", lambda m, t: m.norm_type),
    ContractField("norm_eps", lambda m, t: m.norm_eps, None, "the norm epsilon"),
    ContractField("post_norms", lambda m, t: m.norms_per_layer == 4, False, "post-attention/post-MLP norms"),
    ContractField("mlp_type", lambda m, t: m.mlp_type),
    ContractField("activation", lambda m, t: m.activation),
    ContractField("position_embedding", lambda m, t: m.position_embedding),
    ContractField("rope_theta", lambda m, t: m.rope_theta if m.position_embedding == "rope" else None),
    ContractField("rope_scaling", _rope, None, "RoPE scaling"),
    ContractField("rope_local_theta", lambda m, t: m.rope_local_theta if m.position_embedding == "rope" else None,
                  None, "a separate RoPE base for sliding-window layers"),
    ContractField("rotary_fraction", lambda m, t: m.rotary_fraction if m.position_embedding == "rope" else 1.0, 1.0,
                  "partial rotary embeddings"),
    ContractField("sliding_window", _window, None, "sliding-window attention"),
    ContractField("chunked_attention", _chunks, None, "chunked attention"),
    ContractField("nope_layers", lambda m, t: m.nope_layer_pattern if any(m.nope_layer_pattern) else None, None,
                  "layers without RoPE"),
    ContractField("qk_l2_norm", lambda m, t: m.qk_l2_norm, False, "the L2 q/k norm"),
    ContractField("attn_temperature_tuning", lambda m, t: m.attn_temperature_tuning, None,
                  "attention temperature tuning"),
    ContractField("qkv_bias", lambda m, t: m.qkv_bias, False, "q/k/v biases"),
    ContractField("attn_out_bias", lambda m, t: m.attn_out_bias, False, "attention output bias"),
    ContractField("mlp_bias", lambda m, t: bool(m.mlp_bias and m.num_dense_layers), False, "MLP biases"),
    ContractField("qk_norm", lambda m, t: m.qk_norm, False, "QK-norm"),
    ContractField("scale_embeddings", lambda m, t: m.scale_embeddings, False, "the sqrt(hidden) embedding scale"),
    ContractField("attention_sinks", lambda m, t: m.attention_sinks, False, "attention sinks"),
    ContractField("logit_softcap", lambda m, t: (m.attn_logit_softcap, m.final_logit_softcap), (None, None),
                  "logit soft-capping"),
    ContractField("mla", _mla, None, "multi-latent attention"),
    ContractField("attention_impl", lambda m, t: t.attention_impl),
    ContractField("num_experts", _moe(lambda e: e.num_experts), None, "mixture of experts"),
    ContractField("top_k", _moe(lambda e: e.top_k), None, "mixture of experts"),
    ContractField("expert_ffn_hidden_size", _moe(lambda e: e.expert_ffn_hidden_size), None, "mixture of experts"),
    ContractField("moe_layers", _moe_layers, None, "mixture of experts"),
    ContractField("shared_expert_ffn", _shared, 0, "shared experts"),
    ContractField("shared_expert_gate", _moe(lambda e: e.shared_expert_gate, False), False, "the shared-expert gate"),
    ContractField("router_bias", _moe(lambda e: e.router_bias, False), False, "the trainable router bias"),
    ContractField("expert_bias", _moe(lambda e: e.expert_bias, False), False, "expert biases"),
    ContractField("score_function", _moe(lambda e: e.score_function, "softmax"), "softmax",
                  "sigmoid router scores"),
    ContractField("probs_on_input", _moe(lambda e: e.probs_on_input, False), False,
                  "gate weights applied to the expert input"),
    ContractField("expert_bias_balancing", _moe(lambda e: e.expert_bias_balancing, False), False,
                  "aux-loss-free expert-bias balancing"),
    ContractField("route_groups", _moe(lambda e: (e.route_groups, e.route_topk_groups) if e.route_topk_groups
                                       else None), None, "group-limited routing"),
    ContractField("routed_scaling_factor", _moe(lambda e: e.routed_scaling_factor, 1.0), 1.0,
                  "the routed scaling factor"),
    ContractField("norm_topk_prob", _moe(lambda e: e.norm_topk_prob, True), True,
                  "un-normalised top-k gate weights"),
    ContractField("aux_loss", _moe(lambda e: (e.aux_loss_coeff, e.aux_loss_per_sequence) if e.aux_loss_coeff
                                   else None), None, "the load-balancing loss"),
    ContractField("z_loss_coeff", _moe(lambda e: e.z_loss_coeff, 0.0), 0.0, "the router z-loss"),
    ContractField("capacity_factor", lambda m, t: t.moe_capacity_factor if m.moe else None, None,
                  "an expert capacity factor"),
    ContractField("mtp_layers", lambda m, t: m.mtp_layers, 0, "multi-token prediction"),
    ContractField("fp8_param_gather", lambda m, t: t.fp8_param_gather, False, "FP8 parameter gather"),
    ContractField("cuda_graph_full_iteration", lambda m, t: t.cuda_graph_full_iteration, False,
                  "a full-iteration CUDA graph"),
    ContractField("fp8_attention", lambda m, t: t.fp8_attention, False, "FP8 dot-product attention"),
)
BY_NAME = {f.name: f for f in FIELDS}

# ---- per launcher: field -> flag / config key (None: not expressible in that release)
MEGATRON = {
    "release": "megatron-core 0.19.2 (megatron/training/arguments.py, core/transformer/transformer_config.py)",
    "num_layers": "--num-layers", "hidden_size": "--hidden-size", "num_heads": "--num-attention-heads",
    "num_kv_heads": "--num-query-groups", "head_dim": "--kv-channels", "ffn_hidden_size": "--ffn-hidden-size",
    "vocab_size": "--vocab-size", "tied_embeddings": "--untie-embeddings-and-output-weights",
    "norm_type": "--normalization", "norm_eps": "--norm-epsilon", "post_norms": None,
    "mlp_type": "--swiglu / --quick-geglu (gated_linear_unit)",
    "activation": "--swiglu / --quick-geglu / --squared-relu / --openai-gelu (default erf GeLU)",
    "position_embedding": "--position-embedding-type", "rope_theta": "--rotary-base", "rope_local_theta": None,
    "rotary_fraction": "--rotary-percent",
    "rope_scaling": "--use-rope-scaling --rope-scaling-factor (llama3 with low 1, high 4, original 8192 only)",
    "sliding_window": "--window-size (W-1,0) --window-attn-skip-freq", "qkv_bias": "--add-qkv-bias / bias on",
    # Llama 4: 0.19.2 has no setting for chunked attention or the NoPE layers' temperature tuning, so a Llama 4
    # launch is refused; --no-rope-freq, TransformerConfig.qk_l2_norm and moe_apply_probs_on_input exist but are not
    # written (no Llama 4 launch to carry them)
    "chunked_attention": None, "nope_layers": None, "qk_l2_norm": None, "attn_temperature_tuning": None,
    "probs_on_input": None,
    "attn_out_bias": "--disable-bias-linear (all or none)", "mlp_bias": "--disable-bias-linear (all or none)",
    "qk_norm": "--qk-layernorm", "scale_embeddings": None, "attention_sinks": "--softmax-type learnable",
    "logit_softcap": None, "mla": "--multi-latent-attention --q-lora-rank --kv-lora-rank ...",
    "attention_impl": "--attention-backend (auto = TE flash/fused; unfused)",
    "num_experts": "--num-experts", "top_k": "--moe-router-topk", "expert_ffn_hidden_size": "--moe-ffn-hidden-size",
    "moe_layers": "--moe-layer-freq", "shared_expert_ffn": "--moe-shared-expert-intermediate-size",
    "shared_expert_gate": "--moe-shared-expert-gate", "router_bias": "bias on (add_bias_linear: router bias)",
    "expert_bias": "bias on (add_bias_linear)", "score_function": "--moe-router-score-function",
    "expert_bias_balancing": "--moe-router-enable-expert-bias",
    "route_groups": "--moe-router-num-groups --moe-router-group-topk",
    "routed_scaling_factor": "--moe-router-topk-scaling-factor", "norm_topk_prob": "--moe-router-pre-softmax",
    "aux_loss": "--moe-router-load-balancing-type aux_loss|seq_aux_loss --moe-aux-loss-coeff",
    "z_loss_coeff": "--moe-z-loss-coeff", "capacity_factor": "--moe-expert-capacity-factor",
    "mtp_layers": "--mtp-num-layers", "fp8_param_gather": "--fp8-param-gather",
    # --cuda-graph-impl full_iteration exists (arguments.py), but a dropless MoE graph also needs HybridEP's per-rank
    # token budget, the paged stash and TE's op fuser (transformer_config.py __post_init__), which the emitter does
    # not write: refused rather than launched as a different run than the one costed
    "cuda_graph_full_iteration": None,
    # TransformerConfig.fp8_dot_product_attention exists (fp8_utils.py passes it to TE's recipe as fp8_dpa), but
    # 0.19.2's pretrain_gpt.py has no flag for it: arguments.py _add_network_size_args excludes it ("no CLI argument
    # exists for these"); Megatron-Bridge sets it in its config (mixed_precision.fp8_dot_product_attention)
    "fp8_attention": None,
}
# Megatron-DeepSpeed master 4efb479 megatron/arguments.py (the GPT model of megatron/model/transformer.py)
MEGATRON_DEEPSPEED = {
    "release": "Megatron-DeepSpeed master 4efb479 (2025-07-16) megatron/arguments.py, megatron/model/transformer.py",
    "num_layers": "--num-layers", "hidden_size": "--hidden-size", "num_heads": "--num-attention-heads",
    "num_kv_heads": "--num-key-value-heads", "head_dim": "--kv-channels", "ffn_hidden_size": "--ffn-hidden-size",
    "vocab_size": "--vocab-size", "tied_embeddings": "--untie-embeddings-and-output-weights",
    "norm_type": "--normalization", "norm_eps": "--layernorm-epsilon", "post_norms": None,
    "mlp_type": "--swiglu", "activation": "--swiglu / --squared-relu / --openai-gelu (default erf GeLU)",
    "position_embedding": "--use-rotary-position-embeddings / --no-position-embedding",
    "rope_theta": "--rotary-position-embeddings-theta", "rope_local_theta": None, "rotary_fraction": None,
    "rope_scaling": None, "sliding_window": None,
    "chunked_attention": None, "nope_layers": None, "qk_l2_norm": None, "attn_temperature_tuning": None,
    "probs_on_input": None,
    "qkv_bias": "--disable-bias-linear (all or none)", "attn_out_bias": "--disable-bias-linear (all or none)",
    "mlp_bias": "--disable-bias-linear (all or none)", "qk_norm": None, "scale_embeddings": None,
    "attention_sinks": None, "logit_softcap": None, "mla": None,
    "attention_impl": "--use-flash-attn-v2 (else CoreAttention materialises the scores)",
    "num_experts": None, "top_k": None, "expert_ffn_hidden_size": None, "moe_layers": None,
    "shared_expert_ffn": None, "shared_expert_gate": None, "router_bias": None, "expert_bias": None,
    "score_function": None, "expert_bias_balancing": None, "route_groups": None, "routed_scaling_factor": None,
    "norm_topk_prob": None, "aux_loss": None, "z_loss_coeff": None, "capacity_factor": None, "mtp_layers": None,
    "fp8_param_gather": None, "cuda_graph_full_iteration": None, "fp8_attention": None,
}
MAXTEXT = {
    "release": "maxtext 0.2.5 (configs/base.yml, configs/types.py, layers/decoders.py)",
    "num_layers": "base_num_decoder_layers", "hidden_size": "base_emb_dim", "num_heads": "base_num_query_heads",
    "num_kv_heads": "base_num_kv_heads", "head_dim": "head_dim", "ffn_hidden_size": "base_mlp_dim",
    "vocab_size": "vocab_size", "tied_embeddings": "logits_via_embedding",
    "norm_type": "decoder_block (RMSNorm except gpt3)", "norm_eps": "normalization_layer_epsilon",
    "post_norms": "use_post_attn_norm / use_post_ffw_norm (gemma2/gemma3 blocks)",
    "mlp_type": "mlp_activations", "activation": "mlp_activations (+ mlp_activations_limit)",
    "position_embedding": "trainable_position_size / rope", "rope_theta": "rope_max_timescale",
    "rope_local_theta": "local_rope_max_timescale",
    # base.yml's partial_rotary_factor reaches only the Qwen3 hybrid block's and the M-RoPE embedding in 0.2.5
    # (layers/attentions.py init_rotary_embedding); the decoder blocks the planner writes rotate whole heads
    "rotary_fraction": None,
    "rope_scaling": "rope_type llama3.1 | yarn + rope_factor, original_max_position_embeddings",
    "sliding_window": "sliding_window_size (the block's own local/global pattern)",
    "chunked_attention": "chunk_attn_window_size (llama4 block: its RoPE layers)",
    "nope_layers": "nope_layer_interval (llama4 block)", "qk_l2_norm": "use_qk_norm (llama4 block: L2)",
    "attn_temperature_tuning": "temperature_tuning (llama4 block: floor 8192, scale 0.1)",
    "probs_on_input": "decoder_block llama4 (its router)",
    "qkv_bias": "attention_bias", "attn_out_bias": "attention_bias (gpt_oss block)",
    "mlp_bias": "mlp_bias", "qk_norm": "use_qk_norm", "scale_embeddings": "decoder_block (gemma blocks)",
    "attention_sinks": "attention_sink", "logit_softcap": "attn_logits_soft_cap / final_logits_soft_cap",
    "mla": "attention_type mla + q_lora_rank ...", "attention_impl": "attention",
    "num_experts": "num_experts", "top_k": "num_experts_per_tok", "expert_ffn_hidden_size": "base_moe_mlp_dim",
    "moe_layers": "first_num_dense_layers", "shared_expert_ffn": "shared_experts",
    "shared_expert_gate": None, "router_bias": "routed_bias", "expert_bias": "mlp_bias",
    "score_function": "routed_score_func", "expert_bias_balancing": "routed_bias + routed_bias_update_rate",
    "route_groups": "n_routing_groups / topk_routing_group", "routed_scaling_factor": "routed_scaling_factor",
    "norm_topk_prob": "norm_topk_prob", "aux_loss": "load_balance_loss_weight",
    "z_loss_coeff": "z_loss_multiplier", "capacity_factor": "capacity_factor", "mtp_layers": "mtp_num_layers",
    "fp8_param_gather": None, "cuda_graph_full_iteration": None, "fp8_attention": None,
}
TORCHTITAN = {
    "release": "torchtitan 0.3.0 (models/common/config_utils.py, the config_registry functions)",
    "num_layers": "model config (n_layers)", "hidden_size": "dim", "num_heads": "n_heads",
    "num_kv_heads": "n_kv_heads", "head_dim": "head_dim", "ffn_hidden_size": "hidden_dim", "vocab_size": "vocab_size",
    "tied_embeddings": "tie_word_embeddings", "norm_type": "RMSNorm only", "norm_eps": "norm_eps",
    "post_norms": None, "mlp_type": "SwiGLU only", "activation": "SwiGLU only",
    "position_embedding": "RoPE only", "rope_theta": "rope theta", "rope_local_theta": None, "rotary_fraction": None,
    "rope_scaling": "rope scaling (llama)",
    "sliding_window": None, "qkv_bias": None, "attn_out_bias": None, "mlp_bias": None, "qk_norm": "qk_norm",
    "chunked_attention": None, "nope_layers": None, "qk_l2_norm": None, "attn_temperature_tuning": None,
    "probs_on_input": None,
    "scale_embeddings": None, "attention_sinks": None, "logit_softcap": None, "mla": "deepseek_v3 registry only",
    "attention_impl": "attn backend (sdpa/flex: flash)", "num_experts": "num_experts", "top_k": "top_k",
    "expert_ffn_hidden_size": "moe hidden_dim", "moe_layers": "first dense layers",
    "shared_expert_ffn": "deepseek_v3 registry only", "shared_expert_gate": None, "router_bias": None,
    "expert_bias": None, "score_function": "deepseek_v3 registry only",
    "expert_bias_balancing": "deepseek_v3 registry only", "route_groups": "deepseek_v3 registry only",
    "routed_scaling_factor": "deepseek_v3 registry only", "norm_topk_prob": "router score normalisation",
    "aux_loss": None, "z_loss_coeff": None, "capacity_factor": None, "mtp_layers": None,
    # float8 all-gather is a field of the float8 converter's config, which the emitted job does not write
    "fp8_param_gather": None, "cuda_graph_full_iteration": None, "fp8_attention": None,
}
CONTRACTS: dict[str, dict[str, str | None]] = {"megatron": MEGATRON, "deepspeed": MEGATRON_DEEPSPEED,
                                                "maxtext": MAXTEXT, "torchtitan": TORCHTITAN}


def contract_values(m: ModelSpec, t: TrainingSpec) -> dict[str, Any]:
    """The canonical value of every contract field for the costed model and training."""
    return {f.name: f.value(m, t) for f in FIELDS}


def bias_layout(m: ModelSpec) -> str:
    """'none', 'qkv' (q/k/v only: Qwen2), 'all' (every linear layer the model has) or 'partial'."""
    has = [m.qkv_bias, m.attn_out_bias]
    if m.num_dense_layers:
        has.append(m.mlp_bias)
    if m.moe is not None:
        has += [m.moe.router_bias, m.moe.expert_bias]
    if not any(has):
        return "none"
    if all(has):
        return "all"
    return "qkv" if has[0] and not any(has[1:]) else "partial"


# activations a Megatron-style GPT expresses: gated (GLU) and plain ones, by planner activation name
MEGATRON_GATED = ("silu", "swish", "quick_gelu", "gpt_oss_glu")  # --swiglu, --quick-geglu (+ offset, clamp)
MEGATRON_PLAIN = ("gelu", "gelu_tanh", "gelu_new", "relu2")  # default erf GeLU, --openai-gelu, --squared-relu


def _activation_gap(m: ModelSpec, gated: tuple[str, ...], plain: tuple[str, ...]) -> list[str]:
    ok = m.activation in (gated if m.mlp_type == "gated" else plain)
    return [] if ok else [f"a {'gated ' if m.mlp_type == 'gated' else ''}{m.activation} MLP"]


def _megatron_rope_ok(m: ModelSpec, sc: tuple) -> bool:
    """RoPE scalings megatron-core 0.19.2 writes: Llama 3.1's, yarn through GPTModel (mscale 1, mscale_all_dim 0),
    MLA's yarn with MLATransformerConfig's original length 4096 and beta 32/1."""
    if sc[0] == "llama3":
        return sc[2:] == (1.0, 4.0, 8192)
    if sc[0] != "yarn":
        return False
    return sc[5:] == (1.0, 0.0) if m.mla is None else sc[2:5] == (4096, 32.0, 1.0)


def _megatron_gaps(m: ModelSpec, t: TrainingSpec) -> list[str]:
    gaps = _activation_gap(m, MEGATRON_GATED, MEGATRON_PLAIN)
    if not gaps and m.mlp_type == "plain" and m.activation in ("gelu_tanh", "gelu_new") and bias_layout(m) != "all":
        # megatron-core runs the tanh approximation only as its fused bias-GeLU (planner.emit.megatron)
        gaps.append("a bias-free tanh-approximated GeLU MLP")
    sc = _rope(m, t)
    if sc is not None and not _megatron_rope_ok(m, sc):
        gaps.append(f"{sc[0]} RoPE scaling with these parameters")
    if m.position_embedding == "rope" and m.rope_theta != int(m.rope_theta):
        gaps.append("a non-integer RoPE base")
    if bias_layout(m) == "partial":
        gaps.append("biases on some linear layers only")
    e = m.moe
    if e is not None and e.score_function == "sigmoid" and not e.norm_topk_prob and e.top_k > 1:
        gaps.append("un-normalised sigmoid gate weights")
    if m.sliding_window is not None and m.num_sliding_layers and m.sliding_pattern() is None:
        gaps.append("sliding windows on layers the model does not name")
    return gaps


def _mds_gaps(m: ModelSpec, t: TrainingSpec) -> list[str]:
    gaps = _activation_gap(m, ("silu", "swish"), MEGATRON_PLAIN)
    if m.position_embedding == "rope" and m.rope_theta != int(m.rope_theta):
        gaps.append("a non-integer RoPE base")
    if bias_layout(m) not in ("none", "all"):
        gaps.append("biases on some linear layers only")
    return gaps


def _maxtext_gaps(m: ModelSpec, t: TrainingSpec) -> list[str]:
    from planner.launchers.maxtext_mesh import maxtext_model_gaps  # the decoder blocks' own layouts (beside the mesh)

    return maxtext_model_gaps(m, t)


def _torchtitan_gaps(m: ModelSpec, t: TrainingSpec) -> list[str]:
    return _activation_gap(m, ("silu", "swish"), ()) + ([] if m.norm_type == "rmsnorm" else ["LayerNorm"])


VALUE_GAPS: dict[str, Callable[[ModelSpec, TrainingSpec], list[str]]] = {
    "megatron": _megatron_gaps, "deepspeed": _mds_gaps, "maxtext": _maxtext_gaps, "torchtitan": _torchtitan_gaps}


def table_missing(m: ModelSpec, t: TrainingSpec, launcher: str) -> list[str]:
    """The costed features `launcher` cannot express (its contract maps them to None, or the value has no
    flag), each named once."""
    table = CONTRACTS[launcher]
    out: list[str] = []
    for f in FIELDS:
        if table.get(f.name, None) is None and f.active(m, t):
            name = f.feature or f.name
            if name not in out:
                out.append(name)
    gaps = VALUE_GAPS.get(launcher)
    return out + [g for g in (gaps(m, t) if gaps else []) if g not in out]


@functools.lru_cache(maxsize=256)
def deepspeed_path(m: ModelSpec, t: TrainingSpec) -> str | None:
    """How DeepSpeed runs the model: "megatron-deepspeed" (its GPT, TP/PP/ZeRO) when its flags hold every costed
    field, else "hf" (the transformers model under ZeRO, data parallel only) when its config holds them, else None."""
    if not table_missing(m, t, "deepspeed"):
        return "megatron-deepspeed"
    from planner.launchers.hf_model import hf_gaps

    return "hf" if not hf_gaps(m, t) else None


def missing_features(m: ModelSpec, t: TrainingSpec, launcher: str) -> list[str]:
    """The costed features `launcher` cannot express, each named once (DeepSpeed: by neither of its paths)."""
    return list(_missing(m, t, launcher))


@functools.lru_cache(maxsize=256)  # the search asks once per candidate plan; the answer depends on model and training
def _missing(m: ModelSpec, t: TrainingSpec, launcher: str) -> tuple[str, ...]:
    out = table_missing(m, t, launcher)
    if launcher == "deepspeed" and out:
        from planner.launchers.hf_model import hf_gaps

        hf = hf_gaps(m, t)
        out = [] if not hf else [f"{', '.join(out)} (Megatron-DeepSpeed) and {', '.join(hf)} (transformers)"]
    return tuple(out + dispatcher_gap(m, t, launcher))


def dispatcher_gap(m: ModelSpec, t: TrainingSpec, launcher: str) -> list[str]:
    """A costed MoE dispatcher (TrainingSpec.moe_dispatcher) the launcher's files cannot select
    (planner.stacks: Stack.moe_dispatchers of the stack it runs)."""
    from planner.stacks import stack_of_emitter

    stack = stack_of_emitter(launcher)
    if m.moe is None or t.moe_dispatcher is None or stack is None or t.moe_dispatcher in stack.moe_dispatchers:
        return []
    return [f"the {t.moe_dispatcher} MoE dispatcher"]
