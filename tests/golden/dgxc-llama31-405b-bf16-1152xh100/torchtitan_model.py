"""torchtitan 0.3.0 config module written by planner for the planned model (MODEL_NAME below).

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

MODEL_NAME = "llama-3.1-405b"
NUM_LAYERS = 126
DIM = 16384
N_HEADS = 128
N_KV_HEADS = 8
HEAD_DIM = 128
FFN = 53248
VOCAB = 128256
QK_NORM = False
TIED = False
NORM_EPS = 1e-05
EXPERTS = 0
TOP_K = 0
EXPERT_FFN = 0
FIRST_DENSE = 0
MAX_SEQ_LEN = 131072
ROPE = dict(theta=500000.0, scaling="llama", scaling_factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)
TOKENIZER = "TOKENIZER"  # PLACEHOLDER: the tokenizer/HF assets directory (hf_assets_path)


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
