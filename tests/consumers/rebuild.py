"""Rebuild a planner ModelSpec from what a launcher's own code parsed out of the emitted files alone, so the
tests can compare the planner's exact parameter count (planner.costmodel.params.count_params, checked against HF
transformers by tests/costmodel/test_transformers_counts.py), rope base and scaling, activation, norm, biases and
tying with the model that was planned."""

from __future__ import annotations

import argparse
import shlex

from planner.costmodel.params import count_params
from planner.specs import MLASpec, ModelSpec, MoESpec, RopeScaling

_ACT = {"silu": "silu", "gelu": "gelu", "squared_relu": "relu2", "quick_gelu": "quick_gelu"}


def _moe(num_experts, top_k, expert_ffn, shared_width, freq, router_bias=False, gate=False, expert_bias=False):
    if not num_experts:
        return None
    pattern = [freq] if isinstance(freq, int) else list(freq)
    first_dense = 0
    if not isinstance(freq, int):
        while first_dense < len(pattern) and pattern[first_dense] == 0:
            first_dense += 1
    return MoESpec(num_experts=num_experts, top_k=top_k, expert_ffn_hidden_size=expert_ffn,
                   num_shared_experts=1 if shared_width else 0, shared_expert_ffn_hidden_size=shared_width or None,
                   first_k_dense=first_dense, router_bias=router_bias, shared_expert_gate=gate, expert_bias=expert_bias)


def megatron_activation(f: dict) -> str:
    """The activation megatron-core's MLP runs (core/transformer/mlp.py): plain F.gelu becomes the fused bias-GeLU
    (tanh approximation) with biases and bias_activation_fusion; quick_gelu with offset 1 and clamp 7 is gpt-oss's."""
    act = f["activation"]
    if act == "gelu" and not f["gated_linear_unit"] and f["add_bias_linear"] and f["bias_activation_fusion"]:
        return "gelu_tanh"
    if act == "quick_gelu" and f["glu_linear_offset"] == 1.0 and f["activation_func_clamp_value"] == 7.0:
        return "gpt_oss_glu"
    return _ACT.get(act, act)


def megatron_spec(f: dict) -> ModelSpec:
    """From megatron-core's TransformerConfig + the GPTModel args (tests/consumers/check_megatron.py)."""
    mla = None
    if f["multi_latent_attention"]:
        mla = MLASpec(q_lora_rank=f["q_lora_rank"], kv_lora_rank=f["kv_lora_rank"], qk_nope_head_dim=f["qk_head_dim"],
                      qk_rope_head_dim=f["qk_pos_emb_head_dim"], v_head_dim=f["v_head_dim"])
    heads = f["num_attention_heads"]
    scaling = RopeScaling(rope_type="llama3", factor=f["rope_scaling_factor"], low_freq_factor=1.0,
                          high_freq_factor=4.0,
                          original_max_position_embeddings=8192) if f["use_rope_scaling"] else None
    return ModelSpec(
        name="rebuilt", num_layers=f["num_layers"], hidden_size=f["hidden_size"], num_heads=heads,
        num_kv_heads=f["num_query_groups"] or heads if mla is None else heads,
        head_dim=f["kv_channels"] if mla is None else mla.qk_nope_head_dim + mla.qk_rope_head_dim,
        ffn_hidden_size=f["ffn_hidden_size"], vocab_size=f["vocab_size"],
        max_position_embeddings=f["max_position_embeddings"],
        mlp_type="gated" if f["gated_linear_unit"] else "plain", activation=megatron_activation(f),
        norm_type="rmsnorm" if f["normalization"] == "RMSNorm" else "layernorm",
        qkv_bias=bool(f["add_bias_linear"] or f["add_qkv_bias"]), attn_out_bias=bool(f["add_bias_linear"]),
        mlp_bias=bool(f["add_bias_linear"]), qk_norm=bool(f["qk_layernorm"]),
        tied_embeddings=not f["untie_embeddings_and_output_weights"],
        position_embedding={"rope": "rope", "learned_absolute": "learned", "none": "none"}[
            f["position_embedding_type"]],
        rope_theta=float(f["rotary_base"]), rope_scaling=scaling, mla=mla,
        moe=_moe(f["num_moe_experts"], f["moe_router_topk"], f["moe_ffn_hidden_size"],
                 # megatron-core: add_bias_linear puts a bias on the router (TopKRouter.bias) and on every expert
                 f["moe_shared_expert_intermediate_size"], f["moe_layer_freq"], bool(f["add_bias_linear"]),
                 bool(f["moe_shared_expert_gate"]), bool(f["add_bias_linear"])))


# MaxText decoder blocks fix the norm and the biases (maxtext layers/decoders.py: the llama2/mistral/mixtral/qwen/
# deepseek blocks use RMSNorm and bias-free projections; gpt3 uses LayerNorm with biases)
_BLOCK_NORM = {"gpt3": ("layernorm", True)}


def maxtext_spec(f: dict) -> ModelSpec:
    """From MaxText's pyconfig (tests/consumers/check_jax.py)."""
    norm, bias = _BLOCK_NORM.get(f["decoder_block"], ("rmsnorm", False))
    mla = None
    if f["attention_type"] == "mla":
        mla = MLASpec(q_lora_rank=f["q_lora_rank"] or None, kv_lora_rank=f["kv_lora_rank"],
                      qk_nope_head_dim=f["qk_nope_head_dim"], qk_rope_head_dim=f["qk_rope_head_dim"],
                      v_head_dim=f["v_head_dim"])
    acts = f["mlp_activations"]
    scaling = None
    if f["rope_type"] == "llama3.1" and f["rope_use_scale"]:
        scaling = RopeScaling(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                              original_max_position_embeddings=8192)  # LLaMARotaryEmbedding's fixed constants
    moe = None
    if f["num_experts"] and f["num_experts"] > 1:
        moe = MoESpec(num_experts=f["num_experts"], top_k=f["num_experts_per_tok"],
                      expert_ffn_hidden_size=f["moe_mlp_dim"],
                      num_shared_experts=f["shared_experts"] or 0,
                      shared_expert_ffn_hidden_size=f["moe_mlp_dim"] if f["shared_experts"] else None,
                      first_k_dense=f["first_num_dense_layers"] or 0)
    heads = f["num_query_heads"]
    return ModelSpec(
        name="rebuilt", num_layers=f["num_decoder_layers"], hidden_size=f["emb_dim"], num_heads=heads,
        num_kv_heads=f["num_kv_heads"] if mla is None else heads,
        head_dim=f["head_dim"] if mla is None else mla.qk_nope_head_dim + mla.qk_rope_head_dim,
        ffn_hidden_size=f["mlp_dim"], vocab_size=f["vocab_size"],
        # MaxText resolves activations in jax.nn, whose gelu is the tanh approximation (approximate=True)
        mlp_type="gated" if len(acts) == 2 and acts[1] == "linear" else "plain",
        activation={"gelu": "gelu_tanh"}.get(acts[0], acts[0]),
        norm_type=norm, qkv_bias=bias or bool(f["attention_bias"]), attn_out_bias=bias, mlp_bias=bias,
        qk_norm=bool(f["use_qk_norm"]), tied_embeddings=bool(f["logits_via_embedding"]),
        position_embedding="learned" if (f["trainable_position_size"] or 0) > 0 else "rope",
        max_position_embeddings=max(1, f["trainable_position_size"] or f["max_target_length"]),
        rope_theta=float(f["rope_max_timescale"]), rope_scaling=scaling, mla=mla, moe=moe)


def mds_parser() -> argparse.ArgumentParser:
    """Megatron-DeepSpeed's own definitions of the architecture flags the emitter writes
    (deepspeedai/Megatron-DeepSpeed megatron/arguments.py at 207b2d5: _add_network_size_args,
    _add_regularization_args, _add_training_args, _add_data_args). Megatron-DeepSpeed is not installable
    beside megatron-core (both are the `megatron` package), so its argparse is mirrored here, names,
    types, defaults and dests as in that file; unknown flags fail as they would there."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    for f in ("--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-key-value-heads",
              "--kv-channels", "--max-position-embeddings", "--seq-length", "--micro-batch-size",
              "--global-batch-size", "--vocab-size", "--zero-stage", "--recompute-num-layers"):
        p.add_argument(f, type=int)
    p.add_argument("--tensor-model-parallel-size", type=int, default=1)
    p.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    p.add_argument("--use-rotary-position-embeddings", action="store_true")
    p.add_argument("--rotary-position-embeddings-theta", type=int, default=10000, dest="rope_theta")
    p.add_argument("--no-position-embedding", action="store_false", dest="add_position_embedding")
    p.add_argument("--normalization", default="layernorm", choices=["layernorm", "rmsnorm"])
    p.add_argument("--layernorm-epsilon", type=float, default=1e-5)
    p.add_argument("--use-flash-attn", "--use-flash-attn-v1", dest="use_flash_attn_v1", action="store_true")
    p.add_argument("--use-flash-attn-v2", action="store_true")
    p.add_argument("--no-bias-gelu-fusion", action="store_false", dest="bias_gelu_fusion")
    for f in ("--swiglu", "--squared-relu", "--openai-gelu", "--untie-embeddings-and-output-weights",
              "--no-pipeline-parallel",
              "--sequence-parallel", "--bf16", "--fp16", "--checkpoint-activations", "--deepspeed",
              "--deepspeed-activation-checkpointing", "--cpu-optimizer"):
        p.add_argument(f, action="store_true")
    p.add_argument("--disable-bias-linear", action="store_false", dest="add_bias_linear")
    p.add_argument("--attention-dropout", type=float, default=0.1)
    p.add_argument("--hidden-dropout", type=float, default=0.1)
    p.add_argument("--tokenizer-type", choices=["BertWordPieceLowerCase", "BertWordPieceCase", "GPT2BPETokenizer",
                                                "SentencePieceTokenizer", "GPTSentencePieceTokenizer", "HFTokenizer",
                                                "NullTokenizer"])
    p.add_argument("--recompute-granularity", choices=["full", "selective"])
    p.add_argument("--recompute-method", choices=["uniform", "block"])
    p.add_argument("--deepspeed_config")
    return p


def _mds_activation(a: argparse.Namespace) -> str:
    """Megatron-DeepSpeed ParallelMLP: openai_gelu (tanh), swiglu, squared relu, else F.gelu, which the fused
    bias-GeLU (the tanh approximation) replaces when the layer has a bias (megatron/model/transformer.py)."""
    if a.swiglu:
        return "silu"
    if a.squared_relu:
        return "relu2"
    return "gelu_tanh" if a.openai_gelu or (a.add_bias_linear and a.bias_gelu_fusion) else "gelu"


def mds_spec(args: list[str]) -> tuple[ModelSpec, argparse.Namespace]:
    a = mds_parser().parse_args(args)
    heads = a.num_attention_heads
    rope = a.use_rotary_position_embeddings
    spec = ModelSpec(
        name="rebuilt", num_layers=a.num_layers, hidden_size=a.hidden_size, num_heads=heads,
        num_kv_heads=a.num_key_value_heads or heads, head_dim=a.kv_channels or a.hidden_size // heads,
        ffn_hidden_size=a.ffn_hidden_size, vocab_size=a.vocab_size, max_position_embeddings=a.max_position_embeddings,
        mlp_type="gated" if a.swiglu else "plain",
        activation=_mds_activation(a),
        norm_eps=a.layernorm_epsilon,
        norm_type=a.normalization, qkv_bias=a.add_bias_linear, attn_out_bias=a.add_bias_linear,
        mlp_bias=a.add_bias_linear, tied_embeddings=not a.untie_embeddings_and_output_weights,
        position_embedding="rope" if rope else ("learned" if a.add_position_embedding else "none"),
        rope_theta=float(a.rope_theta))
    return spec, a


def same_model(rebuilt: ModelSpec, planned: ModelSpec, params_total: int) -> list[str]:
    """What differs between the rebuilt and the planned model ([] = the files reproduce it)."""
    diffs = []
    n = count_params(rebuilt).total
    if n != params_total:
        diffs.append(f"parameters {n:,} != planned {params_total:,}")
    dense_ffn = () if planned.num_dense_layers == 0 else ("ffn_hidden_size",)  # unused when every layer is MoE
    for field in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", *dense_ffn, "vocab_size",
                  "mlp_type", "activation", "norm_type", "qkv_bias", "attn_out_bias", "mlp_bias", "tied_embeddings",
                  "position_embedding", "qk_norm"):
        a, b = getattr(rebuilt, field), getattr(planned, field)
        if field == "activation":
            canon = {"swish": "silu", "gelu_new": "gelu_tanh"}
            a, b = canon.get(a, a), canon.get(b, b)
        if a != b:
            diffs.append(f"{field} {a!r} != planned {b!r}")
    if planned.position_embedding == "rope" and rebuilt.rope_theta != planned.rope_theta:
        diffs.append(f"rope_theta {rebuilt.rope_theta:g} != planned {planned.rope_theta:g}")
    return diffs


def argv_of_script(text: str) -> list[str]:
    """The arguments a launch script passes (the lines between the script path and "$@")."""
    return shlex.split(text.split('pretrain_gpt.py" \\', 1)[1].rsplit('"$@"', 1)[0].replace("\\\n", " "))
