"""torchtitan 0.3.0: a config module for a model no config_registry function builds.

torchtitan's ConfigManager imports `--module` by its fully qualified name when it is not one of its own
(torchtitan config/manager.py `_load_config`), so `torchtitan_model.py` beside the other files, on
PYTHONPATH, with `--module torchtitan_model --config planner_model`, trains the planned model: the
Qwen3 registry config (its trainer settings and `parallelize_qwen3`, which applies TP, FSDP, CP and EP to
dense and MoE blocks) with its model replaced by one built from torchtitan's own config helpers
(models/common/config_utils.py: make_gqa_config, make_ffn_config, make_moe_config). The consumer test
builds it on the meta device and counts the planner's exact parameters.
"""

from __future__ import annotations

import json

from planner.launchers.job import Job
from planner.specs import ModelSpec

MODULE = "torchtitan_model"
CONFIG = "planner_model"


def custom_model_errors(m: ModelSpec) -> list[str]:
    """Why the generic module cannot build the model (empty: it can)."""
    return _layer_errors(m) + _attention_errors(m) + _moe_errors(m)


def _layer_errors(m: ModelSpec) -> list[str]:
    """Block shape: RMSNorm + SwiGLU, no linear biases."""
    errs = []
    if m.norm_type != "rmsnorm" or m.mlp_type != "gated" or m.activation not in ("silu", "swish"):
        errs.append("only RMSNorm + SwiGLU blocks")
    if m.qkv_bias or m.attn_out_bias or m.mlp_bias:
        errs.append("no linear biases")
    return errs


def _attention_errors(m: ModelSpec) -> list[str]:
    """Attention and block layout: RoPE (unscaled or Llama 3.1), plain GQA, pre-norm blocks."""
    errs = []
    if m.position_embedding != "rope" or (m.rope_scaling is not None and m.rope_scaling.rope_type != "llama3"):
        errs.append("RoPE, unscaled or with Llama 3.1 scaling")
    if m.mla is not None or m.sliding_window is not None or m.attention_sinks or m.parallel_attn_mlp:
        errs.append("no MLA, sliding windows, attention sinks or parallel blocks")
    if m.embedding_norm or m.norms_per_layer != 2:
        errs.append("pre-norm blocks only")
    return errs


def _moe_errors(m: ModelSpec) -> list[str]:
    """MoE: routed softmax top-k experts only."""
    e = m.moe
    if e is not None and (e.num_shared_experts or e.layer_freq != 1 or e.dense_layers or e.router_bias
                          or e.expert_bias or e.shared_expert_gate):
        return ["MoE with routed softmax top-k experts only (no shared experts, biases or layer patterns)"]
    return []


def _rope(m: ModelSpec) -> str:
    sc = m.rope_scaling
    if sc is None:
        return f'dict(theta={m.rope_theta!r}, scaling="none")'
    return (f'dict(theta={m.rope_theta!r}, scaling="llama", scaling_factor={sc.factor!r}, '
            f"low_freq_factor={sc.low_freq_factor or 1.0!r}, high_freq_factor={sc.high_freq_factor or 4.0!r}, "
            f"original_max_position_embeddings={sc.original_max_position_embeddings or 8192!r})")


def module_text(job: Job) -> str:
    m, t = job.model, job.train
    e = m.moe
    consts = [
        f"MODEL_NAME = {json.dumps(m.name)}",
        f"NUM_LAYERS = {m.num_layers}", f"DIM = {m.hidden_size}", f"N_HEADS = {m.num_heads}",
        f"N_KV_HEADS = {m.num_kv_heads}", f"HEAD_DIM = {m.head_dim}", f"FFN = {m.ffn_hidden_size}",
        f"VOCAB = {m.vocab_size}", f"QK_NORM = {m.qk_norm}", f"TIED = {m.tied_embeddings}",
        f"NORM_EPS = {m.norm_eps if m.norm_eps is not None else 1e-5!r}",  # torchtitan RMSNorm.Config default 1e-5
        f"EXPERTS = {e.num_experts if e else 0}", f"TOP_K = {e.top_k if e else 0}",
        f"EXPERT_FFN = {e.expert_ffn_hidden_size if e else 0}", f"FIRST_DENSE = {e.first_k_dense if e else 0}",
        f"MAX_SEQ_LEN = {max(m.max_position_embeddings, t.seq_len)}",
        f"ROPE = {_rope(m)}",
        'TOKENIZER = "TOKENIZER"  # PLACEHOLDER: the tokenizer/HF assets directory (hf_assets_path)',
    ]
    return _HEAD + "\n".join(consts) + "\n" + _BODY


_HEAD = '''"""torchtitan 0.3.0 config module written by planner for the planned model (MODEL_NAME below).

Run with this directory on PYTHONPATH:
  torchrun ... -m torchtitan.train --module torchtitan_model --config planner_model <torchtitan_args.json args>
PLACEHOLDERS: TOKENIZER below; DATA and CHECKPOINTS as overrides at launch (the Qwen3 base config's dataloader
and checkpoint settings otherwise).
"""

import dataclasses

from torchtitan.models.common import ComplexRoPE, Embedding, Linear
from torchtitan.models.common.config_utils import (make_ffn_config, make_gqa_config, make_moe_config,
                                                   make_routed_experts_config, make_router_config)
from torchtitan.models.common.nn_modules import RMSNorm
from torchtitan.models.qwen3 import (_EMBEDDING_SKIP_INIT, _LINEAR_INIT, _NORM_INIT, Qwen3Model,
                                     Qwen3TransformerBlock, _moe_experts_init, _residual_output_init)
from torchtitan.models.qwen3 import config_registry as base

'''

_BODY = '''

def _norm(dim):
    return RMSNorm.Config(normalized_shape=dim, eps=NORM_EPS, param_init=_NORM_INIT)


def _layer(i, rope, inner_attention):
    attention = make_gqa_config(dim=DIM, n_heads=N_HEADS, n_kv_heads=N_KV_HEADS, head_dim=HEAD_DIM,
                                wqkv_param_init=_LINEAR_INIT, wo_param_init=_residual_output_init(NUM_LAYERS),
                                inner_attention=inner_attention, fuse_qkv=True, rope=rope,
                                qk_norm=_norm(HEAD_DIM) if QK_NORM else None)
    kw = {}
    if EXPERTS and i >= FIRST_DENSE:
        kw["moe"] = make_moe_config(
            num_experts=EXPERTS,
            router=make_router_config(dim=DIM, num_experts=EXPERTS, top_k=TOP_K, gate_param_init=_LINEAR_INIT,
                                      score_func="softmax", route_norm=True),
            routed_experts=make_routed_experts_config(dim=DIM, hidden_dim=EXPERT_FFN, num_experts=EXPERTS,
                                                      top_k=TOP_K, param_init=_moe_experts_init(NUM_LAYERS),
                                                      comm_backend="standard"))
    else:
        kw["feed_forward"] = make_ffn_config(dim=DIM, hidden_dim=FFN, w1_param_init=_LINEAR_INIT,
                                             w2w3_param_init=_residual_output_init(NUM_LAYERS))
    return Qwen3TransformerBlock.Config(attention_norm=_norm(DIM), ffn_norm=_norm(DIM), attention=attention, **kw)


def planner_model():
    cfg = base.qwen3_30b_a3b()
    inner = cfg.model_spec.model.layers[0].attention.inner_attention  # the base config's attention backend
    rope = ComplexRoPE.Config(dim=HEAD_DIM, max_seq_len=MAX_SEQ_LEN, **ROPE)
    model = Qwen3Model.Config(
        vocab_size=VOCAB, dim=DIM, norm=_norm(DIM), enable_weight_tying=TIED,
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM, param_init=_EMBEDDING_SKIP_INIT),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB, param_init=_LINEAR_INIT),
        layers=[_layer(i, rope, inner) for i in range(NUM_LAYERS)])
    cfg.model_spec = dataclasses.replace(cfg.model_spec, model=model, flavor="planner")
    cfg.loss = dataclasses.replace(cfg.loss, loss_fn=dataclasses.replace(cfg.loss.loss_fn, global_vocab_size=VOCAB))
    cfg.hf_assets_path = TOKENIZER
    return cfg
'''
