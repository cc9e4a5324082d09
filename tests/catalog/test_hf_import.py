"""Importing Hugging Face config.json files: real reference files, family rules, and bad input."""

from __future__ import annotations

import json

import pytest
from support import HF_CONFIG_FILES, HF_CONFIGS_DIR, N_HF_CONFIGS

from planner.catalog.hf_import import SUPPORTED_MODEL_TYPES, from_hf_config
from planner.catalog.models import load_model_catalog
from planner.costmodel.params import count_params
from planner.errors import InputError
from planner.specs import ModelSpec

HF_FILES = HF_CONFIG_FILES  # tests/data/reference/hf_configs: copies of shared/reference/hf_configs

REQUIRED_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2",
                  "deepseek_v3", "gpt2", "bloom", "falcon", "gemma2", "nemotron", "gpt_oss", "gpt_neox", "mpt"}


def llama(**kw) -> dict:
    return {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "intermediate_size": 11008, **kw}


def test_every_reference_config_is_vendored():
    assert len(HF_FILES) == N_HF_CONFIGS


def test_supported_types():
    assert REQUIRED_TYPES <= set(SUPPORTED_MODEL_TYPES)
    assert {"gemma", "phi3"} <= set(SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize("path", HF_FILES, ids=lambda p: p.stem)
def test_reference_file_imports(path):
    cfg = json.loads(path.read_text())
    m = from_hf_config(cfg, name=path.stem)
    assert isinstance(m, ModelSpec)
    assert m.name == path.stem and m.family == cfg["model_type"]
    layers = cfg.get("num_hidden_layers", cfg.get("n_layer"))
    hidden = cfg.get("hidden_size", cfg.get("n_embd"))
    heads = cfg.get("num_attention_heads", cfg.get("n_head"))
    assert (m.num_layers, m.hidden_size, m.num_heads, m.vocab_size) == (layers, hidden, heads, cfg["vocab_size"])
    if "head_dim" in cfg:
        assert m.head_dim == cfg["head_dim"]
    if "num_key_value_heads" in cfg and m.mla is None:
        assert m.num_kv_heads == cfg["num_key_value_heads"]
    if "tie_word_embeddings" in cfg:
        assert m.tied_embeddings == cfg["tie_word_embeddings"]
    assert count_params(m).total > 0


@pytest.mark.parametrize("name", sorted(load_model_catalog().entries))
def test_catalog_hf_config_imports(name):
    entry = load_model_catalog().entries[name]
    assert from_hf_config(entry.hf_config, name=name).model_copy(update={"source": entry.source}) == entry.spec


# ------------------------------------------------------------------------------------ family rules


def test_reference_family_details():
    load = {p.stem: from_hf_config(json.loads(p.read_text())) for p in HF_FILES}
    q = load["qwen2.5-72b"]
    assert q.qkv_bias and not q.attn_out_bias
    q3 = load["qwen3-32b"]
    assert q3.qk_norm and q3.num_heads * q3.head_dim == 8192 != q3.hidden_size
    g = load["gemma-2-27b"]
    assert (g.norms_per_layer, g.head_dim, g.sliding_window, g.num_sliding_layers) == (4, 128, 4096, 23)
    assert g.tied_embeddings and g.activation == "gelu_tanh"
    n = load["nemotron-4-340b"]
    assert (n.mlp_type, n.norm_type, n.norm_bias, n.head_dim, n.activation) == ("plain", "layernorm", True, 192,
                                                                                "relu2")
    o = load["gpt-oss-120b"]
    assert o.attention_sinks and o.qkv_bias and o.attn_out_bias
    assert o.moe.router_bias and o.moe.expert_bias and (o.moe.num_experts, o.moe.top_k) == (128, 4)
    assert (o.sliding_window, o.num_sliding_layers) == (128, 18)
    d3 = load["deepseek-v3"]
    assert d3.mla.q_lora_rank == 1536 and d3.head_dim == 192
    assert (d3.moe.first_k_dense, d3.num_moe_layers, d3.moe.num_shared_experts) == (3, 58, 1)
    assert not d3.moe.router_bias  # e_score_correction_bias is a buffer in transformers
    d2 = load["deepseek-v2"]
    assert (d2.moe.num_experts, d2.moe.top_k, d2.moe.num_shared_experts, d2.num_moe_layers) == (160, 6, 2, 59)
    f = load["falcon-180b"]
    assert (f.num_kv_heads, f.norms_per_layer, f.parallel_attn_mlp, f.qkv_bias, f.tied_embeddings) == (8, 2, True,
                                                                                                       False, True)
    b = load["bloom-176b"]
    assert b.embedding_norm and b.position_embedding == "alibi" and b.ffn_hidden_size == 4 * 14336 and b.mlp_bias
    g3 = load["gpt3-175b"]
    assert g3.position_embedding == "learned" and g3.max_position_embeddings == 2048 and g3.tied_embeddings
    mi = load["mistral-7b-v0.1"]
    assert (mi.sliding_window, mi.num_sliding_layers) == (4096, 32)
    qm = load["qwen3-30b-a3b"]
    assert qm.num_moe_layers == 48 and qm.moe.expert_ffn_hidden_size == 768


def test_gpt2_defaults():
    m = from_hf_config({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12})
    assert (m.ffn_hidden_size, m.vocab_size, m.max_position_embeddings, m.tied_embeddings) == (3072, 50257, 1024, True)
    assert from_hf_config({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                           "n_inner": None}).ffn_hidden_size == 3072
    # the attribute_map names work too
    m2 = from_hf_config({"model_type": "gpt2", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12})
    assert m2.model_copy(update={"name": m.name}) == m


def test_falcon_layouts():
    base = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71}
    m = from_hf_config(base)  # falcon-7b: multi-query, parallel attention with one LayerNorm
    assert (m.num_kv_heads, m.norms_per_layer, m.head_dim, m.ffn_hidden_size) == (1, 1, 64, 4 * 4544)
    m = from_hf_config({**base, "multi_query": False, "parallel_attn": False})
    assert (m.num_kv_heads, m.norms_per_layer, m.parallel_attn_mlp) == (71, 2, False)
    m = from_hf_config({**base, "num_attention_heads": 128, "hidden_size": 8192, "new_decoder_architecture": True,
                        "num_kv_heads": 8, "bias": True})
    assert (m.num_kv_heads, m.norms_per_layer, m.qkv_bias, m.mlp_bias) == (8, 2, True, True)


def test_mpt_options():
    base = {"model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32, "vocab_size": 50432}
    m = from_hf_config(base)  # mpt-7b
    assert (m.ffn_hidden_size, m.norm_bias, m.qkv_bias, m.position_embedding) == (16384, False, False, "alibi")
    # mosaicml/mpt-7b's config: transformers instantiates 6,649,286,656 parameters (model card: "6.7B")
    assert count_params(m).total == 6_649_286_656
    m = from_hf_config({**base, "expansion_ratio": 2, "no_bias": False,
                        "attn_config": {"alibi": False, "attn_type": "grouped_query_attention", "kv_n_heads": 8}})
    assert (m.ffn_hidden_size, m.norm_bias, m.mlp_bias, m.num_kv_heads, m.position_embedding) == (
        8192, True, True, 8, "learned")
    with pytest.raises(InputError, match="qk_ln"):
        from_hf_config({**base, "attn_config": {"qk_ln": True}})


def test_deepseek_layer_rules():
    cfg = {"model_type": "deepseek_v2", "hidden_size": 1024, "num_hidden_layers": 10, "num_attention_heads": 8,
           "intermediate_size": 2048, "num_experts_per_tok": 2, "n_routed_experts": 8, "first_k_dense_replace": 3,
           "moe_layer_freq": 2}
    m = from_hf_config(cfg)  # DeepSeek reference code: i >= 3 and i % 2 == 0
    assert [i for i in range(10) if m.is_moe_layer(i)] == [4, 6, 8]
    assert from_hf_config({**cfg, "n_routed_experts": None}).moe is None
    assert from_hf_config({**cfg, "q_lora_rank": None}).mla.q_lora_rank is None
    with pytest.raises(InputError, match="num_experts_per_tok"):
        from_hf_config({k: v for k, v in cfg.items() if k != "num_experts_per_tok"})


def test_qwen_moe_layer_rules():
    cfg = {"model_type": "qwen3_moe", "hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 8,
           "num_key_value_heads": 4, "intermediate_size": 2048, "decoder_sparse_step": 2, "mlp_only_layers": [5]}
    m = from_hf_config(cfg)  # HF: (i+1) % step == 0 and i not in mlp_only_layers
    assert [i for i in range(8) if m.is_moe_layer(i)] == [1, 3, 7]
    assert from_hf_config({**cfg, "num_experts": 0}).moe is None
    q2 = from_hf_config({**cfg, "model_type": "qwen2_moe"})
    assert q2.moe.shared_expert_gate and q2.moe.num_shared_experts == 1 and q2.qkv_bias


def test_layer_types_and_windows():
    cfg = {"model_type": "gemma2", "hidden_size": 2304, "num_hidden_layers": 4, "num_attention_heads": 8,
           "intermediate_size": 9216}
    assert from_hf_config(cfg).num_sliding_layers == 2  # alternating, from layer 0
    m = from_hf_config({**cfg, "layer_types": ["sliding_attention"] * 3 + ["full_attention"]})
    assert m.num_sliding_layers == 3
    assert from_hf_config({**cfg, "sliding_window": None}).sliding_window is None
    with pytest.raises(InputError, match="layer_types"):
        from_hf_config({**cfg, "layer_types": ["full_attention"]})
    with pytest.raises(InputError, match="layer_types"):
        from_hf_config({**cfg, "layer_types": ["local"] * 4})
    assert from_hf_config(llama()).sliding_window is None
    mis = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "intermediate_size": 14336, "sliding_window": None}
    assert from_hf_config(mis).num_sliding_layers == 0


def dsv3(**kw) -> dict:
    """DeepSeek-V3's published config.json (a copy of shared/reference/hf_configs) with fields replaced."""
    with open(HF_CONFIGS_DIR / "deepseek-v3.json") as f:
        return {**json.load(f), **kw}


def llama4(**kw) -> dict:
    return {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 8, "num_attention_heads": 40,
            "intermediate_size": 8192, **kw}


def test_llama4_layer_rules():
    """transformers Llama4TextConfig.__post_init__: moe_layers = range(step - 1, L, step); no_rope_layers[i] =
    (i + 1) % interval != 0 (1 = RoPE); layer_types chunked_attention on the RoPE layers when a chunk size is set."""
    m = from_hf_config(llama4(interleave_moe_layer_step=2, num_local_experts=128))
    assert [i for i in range(8) if m.is_moe_layer(i)] == [1, 3, 5, 7]
    assert m.ffn_hidden_size == 16384 and m.moe.expert_ffn_hidden_size == 8192  # intermediate_size_mlp default
    assert m.moe.num_shared_experts == 1 and m.moe.shared_expert_ffn_hidden_size == 8192
    assert m.moe.score_function == "sigmoid" and not m.moe.norm_topk_prob and m.moe.probs_on_input
    assert m.nope_layer_pattern == (0, 0, 0, 1, 0, 0, 0, 1)
    assert m.attention_chunk_size == 8192 and m.chunked_pattern() == (1, 1, 1, 0, 1, 1, 1, 0)
    assert m.qk_l2_norm and m.attn_temperature_tuning == (8192.0, 0.1)  # HF defaults: use_qk_norm, tuning on
    every = from_hf_config(llama4())
    assert every.num_moe_layers == 8 and every.moe.num_experts == 16  # step 1, 16 experts: HF defaults (Scout)
    listed = from_hf_config(llama4(moe_layers=[0, 5, 99]))
    assert [i for i in range(8) if listed.is_moe_layer(i)] == [0, 5]  # HF ignores indices past the last layer
    plain = from_hf_config(llama4(attention_chunk_size=None, no_rope_layers=[1] * 8, use_qk_norm=False))
    assert plain.attention_chunk_size is None and not plain.nope_layer_pattern and not plain.qk_l2_norm
    assert plain.attn_temperature_tuning is None  # tuning acts on NoPE layers only
    typed = from_hf_config(llama4(layer_types=["full_attention"] * 7 + ["chunked_attention"]))
    assert typed.chunked_pattern() == (0,) * 7 + (1,)
    with pytest.raises(InputError, match="no_rope_layers"):
        from_hf_config(llama4(no_rope_layers=[1, 0]))
    with pytest.raises(InputError, match="layer_types"):
        from_hf_config(llama4(layer_types=["sliding_attention"] * 8))
    with pytest.raises(InputError, match="attention_chunk_size"):
        from_hf_config(llama4(attention_chunk_size=None, layer_types=["chunked_attention"] * 8))


def test_llama4_composite_reads_text_config():
    text = {k: v for k, v in llama4(interleave_moe_layer_step=2).items() if k != "model_type"}
    m = from_hf_config({"architectures": ["Llama4ForConditionalGeneration"], "text_config": text,
                        "vision_config": {"hidden_size": 1408}})
    assert m.family == "llama4_text" and m.num_moe_layers == 4
    with pytest.raises(InputError, match="text_config"):
        from_hf_config({"model_type": "llama4", "text_config": [1]})


def test_architectures_without_model_type():
    cfg = llama()
    del cfg["model_type"]
    assert from_hf_config({**cfg, "architectures": ["LlamaForCausalLM"]}).family == "llama"


def test_own_model_type_read_by_its_architecture():
    """A model shipping its own config class under a model_type of its own is read as the family of the class its
    `architectures` name: Kimi K2's config.json (moonshotai/Kimi-K2-Instruct: model_type `kimi_k2`, architectures
    DeepseekV3ForCausalLM, auto_map configuration_deepseek / modeling_deepseek) is DeepSeek-V3's layers, and imports
    as the catalog's kimi-k2 (model_specs/kimi-k2.yaml: its fields under model_type deepseek_v3), 1.03T / 32.9B."""
    entry = load_model_catalog().entries["kimi-k2"]
    own = {**entry.hf_config, "model_type": "kimi_k2",
           "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                        "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}}
    m = from_hf_config(own, name="kimi-k2")
    assert m.model_dump(exclude={"source"}) == entry.spec.model_dump(exclude={"source"})
    counts = count_params(m)
    assert (counts.total, counts.active) == (1026408209408, 32861477888)
    # Kimi K2.5 (model_type kimi_k25) wraps the language model in text_config, of model_type kimi_k2 or deepseek_v3
    # (transformers 5.24.0 Kimi_K25Config maps the first to the second); its vision encoder is not costed
    k25 = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25", "text_config": own,
           "vision_config": {"model_type": "kimi_k25_vision", "hidden_size": 1152, "num_hidden_layers": 27}}
    m25 = from_hf_config(k25, name="kimi-k2")
    assert m25.family == "deepseek_v3"
    assert m25.model_dump(exclude={"source"}) == entry.spec.model_dump(exclude={"source"})
    # a model_type of its own with no supported architecture is refused, naming the model_type
    with pytest.raises(InputError, match="model_type 'kimi_k3' is not supported"):
        from_hf_config({**own, "model_type": "kimi_k3", "architectures": ["KimiK3ForCausalLM"]})


def test_rope_parameters_of_transformers_5():
    """transformers 5 saves RoPE as `rope_parameters` (its to_dict / save_pretrained, transformers 5.24.0): Llama 3.1's
    base and scaling, Gemma 3's per layer type; the top-level fields of earlier files win where both are given."""
    llama31 = llama(max_position_embeddings=131072, rope_parameters={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192, "rope_theta": 500000.0})
    m = from_hf_config(llama31)
    assert m.rope_theta == 500000.0
    assert (m.rope_scaling.rope_type, m.rope_scaling.factor, m.rope_scaling.original_max_position_embeddings) == \
        ("llama3", 8.0, 8192)
    assert from_hf_config(llama(rope_parameters={"rope_type": "default", "rope_theta": 1e6})).rope_scaling is None
    assert from_hf_config({**llama31, "rope_theta": 1e4}).rope_theta == 1e4
    g3 = {"model_type": "gemma3_text", "hidden_size": 1152, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 6912,
          "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
    m3 = from_hf_config(g3)
    assert (m3.rope_theta, m3.rope_local_theta, m3.rope_scaling.rope_type, m3.rope_scaling.factor) == \
        (1e6, 1e4, "linear", 8.0)
    with pytest.raises(InputError, match="'rope_parameters.sliding_attention' must be a mapping"):
        from_hf_config({**g3, "rope_parameters": {"full_attention": {}, "sliding_attention": 3}})
    with pytest.raises(InputError, match="'rope_parameters.rope_theta' must be a positive number"):
        from_hf_config(llama(rope_parameters={"rope_theta": -1}))
    # a config that states no base takes its config class's (transformers 5.24.0 MixtralConfig: 1e6)
    assert from_hf_config({**llama(), "model_type": "mixtral"}).rope_theta == 1e6


def test_partial_rotary_fraction():
    """The share of each head RoPE rotates: Nemotron-4 340B's config.json states partial_rotary_factor 0.5 (the
    reference file), GPT-NeoX its rotary_pct (transformers 5.24.0 GPTNeoXConfig default 0.25), Phi-3's family
    partial_rotary_factor (Phi-4-mini 0.75); transformers 5 writes it into rope_parameters; whole heads otherwise."""
    ref = json.loads((HF_CONFIGS_DIR / "nemotron-4-340b.json").read_text())
    assert from_hf_config(ref).rotary_fraction == 0.5
    neox = {"model_type": "gpt_neox", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
            "intermediate_size": 2048}
    assert from_hf_config(neox).rotary_fraction == 0.25
    assert from_hf_config({**neox, "rotary_pct": 0.5}).rotary_fraction == 0.5
    phi = {"model_type": "phi3", "hidden_size": 3072, "num_hidden_layers": 2, "num_attention_heads": 24,
           "intermediate_size": 8192}
    assert from_hf_config(phi).rotary_fraction == 1.0
    assert from_hf_config({**phi, "partial_rotary_factor": 0.75}).rotary_fraction == 0.75
    assert from_hf_config({**phi, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                      "partial_rotary_factor": 0.75}}).rotary_fraction == 0.75
    assert from_hf_config(llama()).rotary_fraction == 1.0
    with pytest.raises(InputError, match="'partial_rotary_factor' = 1.5 is more than 1"):
        from_hf_config({**phi, "partial_rotary_factor": 1.5})


def test_name_defaults():
    assert from_hf_config(llama()).name == "hf-llama"
    assert from_hf_config(llama(_name_or_path="meta-llama/Llama-2-7b-hf")).name == "meta-llama/Llama-2-7b-hf"
    assert from_hf_config(llama(), name="mine").name == "mine"


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("cfg,match", [
    ({"model_type": "llama4x"}, "model_type 'llama4x' is not supported.*did you mean: llama"),
    ({"model_type": "t5", "d_model": 512}, "model_type 't5' is not supported"),
    ({"hidden_size": 4096}, "'model_type' is missing"),
    ({"architectures": ["T5ForConditionalGeneration"]}, "not supported"),
    ({"model_type": 7}, "'model_type' must be a string"),
    (llama(num_hidden_layers=0), "'num_hidden_layers' must be >= 1, got 0"),
    (llama(num_hidden_layers=10**12), "'num_hidden_layers' must be <= 2048"),
    (llama(vocab_size=10**12), "field 'vocab_size': Input should be less than or equal to"),
    (llama(hidden_size=-4096), "'hidden_size' must be >= 1, got -4096"),
    (llama(intermediate_size=-1), "'intermediate_size' must be >= 1"),
    (llama(num_attention_heads=30), "'num_attention_heads' = 30 does not divide hidden size 4096: set 'head_dim'"),
    (llama(num_key_value_heads=5), "'num_key_value_heads' = 5 does not divide num_attention_heads = 32"),
    ({"model_type": "gpt2", "n_embd": 100, "n_layer": 2, "n_head": 3}, "'n_head' = 3 does not divide hidden size 100"),
    ({"model_type": "bloom", "hidden_size": 100, "n_layer": 2, "n_head": 3}, "'n_head' = 3 does not divide"),
    ({"model_type": "mpt", "d_model": 100, "n_heads": 3, "n_layers": 2}, "'n_heads' = 3 does not divide"),
    ({"model_type": "gpt_neox", "hidden_size": 100, "num_hidden_layers": 2, "num_attention_heads": 3,
      "intermediate_size": 400}, "'num_attention_heads' = 3 does not divide"),
    ({"model_type": "falcon", "hidden_size": 100, "num_hidden_layers": 2, "num_attention_heads": 3},
     "'num_attention_heads' = 3 does not divide"),
    ({k: v for k, v in llama().items() if k != "hidden_size"}, "field 'hidden_size' is missing: add it"),
    ({k: v for k, v in llama().items() if k != "intermediate_size"}, "'intermediate_size' is missing"),
    ({"model_type": "gpt2", "n_embd": 768, "n_head": 12}, "'n_layer' is missing"),
    ({"model_type": "mpt", "d_model": 768, "n_layers": 12}, "'n_heads' is missing"),
    (llama(hidden_size="4096"), "'hidden_size' must be an integer, got str '4096'"),
    (llama(num_hidden_layers=32.5), "'num_hidden_layers' must be an integer, got float"),
    (llama(num_hidden_layers=True), "'num_hidden_layers' must be an integer, got bool"),
    (llama(tie_word_embeddings="yes"), "'tie_word_embeddings' must be true or false"),
    (llama(num_attention_heads=[32]), "'num_attention_heads' must be an integer, got list"),
    ({"model_type": "gpt2", "n_embd": 768, "hidden_size": 1024, "n_layer": 2, "n_head": 12},
     "'n_embd' = 768 conflicts with its alias 'hidden_size' = 1024"),
    ({"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
      "intermediate_size": 14336, "num_local_experts": 2, "num_experts_per_tok": 4},
     "top_k \\(4\\) exceeds num_experts \\(2\\)"),
    ({"model_type": "qwen3_moe", "hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 8,
      "intermediate_size": 2048, "mlp_only_layers": "none"}, "'mlp_only_layers' must be a list of int"),
    ({"model_type": "mpt", "d_model": 768, "n_heads": 12, "n_layers": 12, "attn_config": "alibi"},
     "'attn_config' must be a mapping"),
    ({"model_type": "gpt2", "n_embd": 768, "n_layer": 2, "n_head": 12, "add_cross_attention": True},
     "add_cross_attention"),
    # group-limited routing HF's router cannot run (tests/costmodel/test_transformers_counts.py: transformers fails)
    (dsv3(n_group=3), "'n_group' = 3 does not divide the 256 routed experts"),
    (dsv3(topk_group=9), "'topk_group' = 9 exceeds n_group = 8"),
])
def test_bad_config(cfg, match):
    with pytest.raises(InputError, match=match) as e:
        from_hf_config(cfg)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("bad", [None, [], "llama", 3, ("model_type", "llama")])
def test_non_dict(bad):
    with pytest.raises(InputError, match="must be a mapping"):
        from_hf_config(bad)


@pytest.mark.parametrize("name", ["", "  ", 7])
def test_bad_name(name):
    with pytest.raises(InputError, match="name"):
        from_hf_config(llama(), name=name)


def test_unknown_extra_fields_are_ignored():
    """Real config.json files carry many fields that do not change the parameter count."""
    m = from_hf_config(llama(rope_scaling={"type": "linear", "factor": 2.0}, torch_dtype="bfloat16",
                             transformers_version="4.45.0", some_future_field=[1, 2]))
    assert m.num_layers == 32


def test_rope_base_and_scaling_are_imported():
    """rope_theta and rope_scaling reach the spec (launch files write them: docs/launchers.md)."""
    llama31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    m = from_hf_config(llama(rope_theta=500000.0, rope_scaling=llama31))
    assert m.rope_theta == 500000.0
    assert (m.rope_scaling.rope_type, m.rope_scaling.factor, m.rope_scaling.original_max_position_embeddings) == \
        ("llama3", 8.0, 8192)
    assert from_hf_config(llama()).rope_theta == 10000.0 and from_hf_config(llama()).rope_scaling is None
    assert from_hf_config(llama(rope_scaling={"type": "linear", "factor": 2.0})).rope_scaling.rope_type == "linear"
    for bad in ({"rope_theta": "big"}, {"rope_theta": -1}, {"rope_scaling": {"factor": 8.0}},
                {"rope_scaling": {"rope_type": "llama3", "factor": "x"}}, {"rope_scaling": [8]}):
        with pytest.raises(InputError, match="rope"):
            from_hf_config(llama(**bad))
