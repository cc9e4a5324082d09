"""`count_params` against Hugging Face transformers itself.

Every config is instantiated with `AutoModelForCausalLM.from_config` on the meta device (no memory, no
weights) and `sum(p.numel() for p in model.parameters())` is compared with our count, exactly. Besides
the reference configs (tests/data/reference/hf_configs) and the catalog, small configs per family exercise
the HF defaults of absent fields and each option the importer reads (biases, GQA/MQA, tied heads, MoE
layer rules, MLA without q-LoRA, Falcon layouts, ...), and the per-layer split is checked module by module.

Needs torch and transformers: skipped when they are missing, unless PLANNER_REQUIRE_CONSUMERS=1, in
which case a missing library is a failure.

Known differences between transformers and the reference numbers (not between transformers and us):
* DeepSeek-V3's `e_score_correction_bias` is a buffer in transformers, so the HF count is 58*256 lower
  than models.yaml's computed_params (which counts it); see tests/costmodel/test_params.py.
* MPT: transformers' port hard-codes a 4x FFN without biases, so only the defaults (expansion_ratio 4,
  no_bias true: every published MPT) are compared; other values follow MosaicML's own code.
* DeepSeek `moe_layer_freq` is ignored by transformers; only the published value 1 is compared.
"""

from __future__ import annotations

import json
import os

import pytest
from support import HF_CONFIG_FILES, N_HF_CONFIGS

from planner.catalog.hf_import import from_hf_config
from planner.catalog.models import load_model_catalog
from planner.costmodel.params import count_params, layer_params
from planner.errors import InputError

pytestmark = pytest.mark.consumers  # real transformers models (the `validate` extra), as the consumer tests

HF_FILES = HF_CONFIG_FILES  # tests/data/reference/hf_configs: copies of shared/reference/hf_configs


def require_transformers():
    """(torch, transformers), or skip; a failure instead when PLANNER_REQUIRE_CONSUMERS=1."""
    try:
        import torch
        import transformers
    except ImportError as e:  # pragma: no cover - depends on the environment
        msg = f"torch/transformers not installed ({e}); pip install torch==2.13.0 transformers"
        if os.environ.get("PLANNER_REQUIRE_CONSUMERS") == "1":
            pytest.fail(msg + " (PLANNER_REQUIRE_CONSUMERS=1)")
        pytest.skip(msg)
    return torch, transformers


def build_hf(cfg: dict):
    torch, transformers = require_transformers()
    hf_cfg = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(hf_cfg)


def numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


def decoder_layers(model, n: int):
    """The ModuleList of decoder blocks (the largest ModuleList with n entries)."""
    import torch

    cands = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    assert cands, "no decoder ModuleList found"
    return max(cands, key=numel)


def toy(model_type: str, **fields) -> dict:
    return {"model_type": model_type, **fields}


# Small configs: only the required fields (HF defaults for everything else), then options one by one.
TOY = {
    "llama-min": toy("llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96),
    "llama-bias-gqa-headdim-tied": toy("llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=24, intermediate_size=96, vocab_size=300,
                                       attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
    "mistral-min": toy("mistral", hidden_size=64, num_hidden_layers=2, num_attention_heads=8, intermediate_size=96),
    "mistral-headdim-nowindow": toy("mistral", hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                                    num_key_value_heads=2, head_dim=32, sliding_window=None, intermediate_size=96),
    "mixtral-min": toy("mixtral", hidden_size=64, num_hidden_layers=2, num_attention_heads=8, intermediate_size=96),
    "mixtral-4x1": toy("mixtral", hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                       intermediate_size=48, num_local_experts=4, num_experts_per_tok=1, vocab_size=128),
    "qwen2-min": toy("qwen2", hidden_size=128, num_hidden_layers=2, num_attention_heads=32, intermediate_size=96),
    "qwen2-gqa-window": toy("qwen2", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                            num_key_value_heads=2, intermediate_size=96, use_sliding_window=True,
                            max_window_layers=2, vocab_size=500),
    "qwen2_moe-min": toy("qwen2_moe", hidden_size=64, num_hidden_layers=2, num_attention_heads=16,
                         intermediate_size=96),
    "qwen2_moe-step2-mlponly-nobias": toy("qwen2_moe", hidden_size=64, num_hidden_layers=6, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=96, num_experts=6,
                                          num_experts_per_tok=2, moe_intermediate_size=16,
                                          shared_expert_intermediate_size=40, decoder_sparse_step=2,
                                          mlp_only_layers=[3], qkv_bias=False, vocab_size=256),
    "qwen3-min": toy("qwen3", hidden_size=64, num_hidden_layers=2, num_attention_heads=32, intermediate_size=96),
    "qwen3-bias-headdim": toy("qwen3", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=48, intermediate_size=96, attention_bias=True,
                              tie_word_embeddings=True, vocab_size=300),
    "qwen3_moe-min": toy("qwen3_moe", hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                         intermediate_size=96),
    "qwen3_moe-step3-mlponly": toy("qwen3_moe", hidden_size=64, num_hidden_layers=7, num_attention_heads=4,
                                   num_key_value_heads=4, head_dim=32, intermediate_size=96, num_experts=8,
                                   num_experts_per_tok=2, moe_intermediate_size=24, decoder_sparse_step=3,
                                   mlp_only_layers=[5, 99], attention_bias=True, vocab_size=256),
    "qwen3_moe-all-dense": toy("qwen3_moe", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=4, intermediate_size=96, num_experts=8,
                               mlp_only_layers=[0, 1], vocab_size=256),
    "deepseek_v2-lite-style": toy("deepseek_v2", hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                                  intermediate_size=96, moe_intermediate_size=16, n_routed_experts=8,
                                  num_experts_per_tok=2, n_shared_experts=2, first_k_dense_replace=1,
                                  q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                                  v_head_dim=12, vocab_size=300),
    "deepseek_v2-biases": toy("deepseek_v2", hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                              intermediate_size=96, num_experts_per_tok=6, attention_bias=True, mlp_bias=True,
                              vocab_size=300, moe_layer_freq=1),
    "deepseek_v3-min": toy("deepseek_v3", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                           intermediate_size=96),
    "deepseek_v3-small": toy("deepseek_v3", hidden_size=64, num_hidden_layers=3, num_attention_heads=8,
                             num_key_value_heads=8, intermediate_size=96, moe_intermediate_size=16,
                             n_routed_experts=16, n_group=4, topk_group=2, num_experts_per_tok=4,
                             n_shared_experts=2, first_k_dense_replace=1, q_lora_rank=24, kv_lora_rank=16,
                             qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, attention_bias=True,
                             vocab_size=300),
    "gpt2-min": toy("gpt2", n_embd=64, n_layer=2, n_head=4),
    "gpt2-aliases-untied": toy("gpt2", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, n_inner=100,
                               max_position_embeddings=128, vocab_size=300, tie_word_embeddings=False),
    "bloom-min": toy("bloom", hidden_size=64, n_layer=2, n_head=4),
    "bloom-untied": toy("bloom", n_embed=64, num_hidden_layers=2, num_attention_heads=8, vocab_size=300,
                        tie_word_embeddings=False),
    "falcon-min": toy("falcon", hidden_size=64, num_hidden_layers=2, num_attention_heads=4),
    "falcon-new-arch-bias": toy("falcon", hidden_size=64, num_hidden_layers=2, num_attention_heads=8, num_kv_heads=2,
                                new_decoder_architecture=True, bias=True, ffn_hidden_size=80, vocab_size=300),
    "falcon-new-arch-1ln": toy("falcon", hidden_size=64, num_hidden_layers=2, num_attention_heads=8, num_kv_heads=4,
                               new_decoder_architecture=True, num_ln_in_parallel_attn=1, vocab_size=300),
    "falcon-sequential-mha": toy("falcon", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 multi_query=False, parallel_attn=False, alibi=True, vocab_size=300,
                                 tie_word_embeddings=False),
    "gemma-min": toy("gemma", hidden_size=64, num_hidden_layers=2, num_attention_heads=16, intermediate_size=96),
    "gemma-gqa-headdim": toy("gemma", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=1, head_dim=32, intermediate_size=96, vocab_size=300),
    "gemma2-min": toy("gemma2", hidden_size=64, num_hidden_layers=3, num_attention_heads=8, intermediate_size=96),
    "gemma2-untied-bias": toy("gemma2", hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=24, intermediate_size=96, attention_bias=True,
                              tie_word_embeddings=False, vocab_size=300),
    # transformers 5.x NemotronAttention crashes on num_key_value_heads=None (its documented default is
    # num_attention_heads, which is what we use), so the minimal Nemotron config states it
    "nemotron-min": toy("nemotron", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=4, intermediate_size=96),
    "nemotron-bias-headdim": toy("nemotron", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, head_dim=24, intermediate_size=96, attention_bias=True,
                                 mlp_bias=True, vocab_size=300),
    "gpt_oss-min": toy("gpt_oss", hidden_size=64, num_hidden_layers=2, num_attention_heads=8, intermediate_size=32),
    "gpt_oss-nobias-4x2": toy("gpt_oss", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=16, intermediate_size=32, num_local_experts=4,
                              num_experts_per_tok=2, attention_bias=False, vocab_size=300),
    "gpt_neox-min": toy("gpt_neox", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96),
    "gpt_neox-nobias-tied": toy("gpt_neox", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=96, attention_bias=False, tie_word_embeddings=True,
                                use_parallel_residual=False, vocab_size=300),
    "mpt-min": toy("mpt", d_model=64, n_heads=4, n_layers=2),
    "mpt-aliases": toy("mpt", hidden_size=64, num_attention_heads=4, num_hidden_layers=3, vocab_size=300,
                       max_seq_len=128, attn_config={"alibi": True}),
    # Llama 4: experts and shared expert of intermediate_size, dense layers of intermediate_size_mlp; MoE every
    # layer by default, every 2nd with the step, or on an explicit moe_layers list; the composite llama4 config
    # is read through its text_config (test_llama4_composite_is_its_text_model)
    "llama4_text-min": toy("llama4_text", hidden_size=64, num_hidden_layers=4, num_attention_heads=8,
                           intermediate_size=32),
    "llama4_text-interleave-gqa": toy("llama4_text", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=16, intermediate_size=32,
                                      intermediate_size_mlp=96, num_local_experts=4, num_experts_per_tok=2,
                                      interleave_moe_layer_step=2, vocab_size=300, use_qk_norm=False),
    "llama4_text-moe_layers-bias-tied": toy("llama4_text", hidden_size=64, num_hidden_layers=5, num_attention_heads=8,
                                            intermediate_size=32, intermediate_size_mlp=48, num_local_experts=3,
                                            moe_layers=[0, 3], attention_bias=True, tie_word_embeddings=True,
                                            vocab_size=300),
    "phi3-min": toy("phi3", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96),
    "phi3-partial-rotary": toy("phi3", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=96, partial_rotary_factor=0.75),
    "glm4_moe-min": toy("glm4_moe", hidden_size=64, num_hidden_layers=3, num_attention_heads=8, head_dim=16,
                        intermediate_size=96, moe_intermediate_size=32, n_routed_experts=8, vocab_size=300),
    "glm4_moe-bias-qknorm-shared": toy("glm4_moe", hidden_size=64, num_hidden_layers=4, num_attention_heads=8,
                                       num_key_value_heads=2, head_dim=16, intermediate_size=96,
                                       moe_intermediate_size=24, n_routed_experts=6, num_experts_per_tok=2,
                                       n_shared_experts=2, first_k_dense_replace=2, attention_bias=True,
                                       use_qk_norm=True, vocab_size=300, tie_word_embeddings=True),
    "phi3-gqa": toy("phi3", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=96, vocab_size=300, pad_token_id=0, tie_word_embeddings=True),
}


def _cases():
    for f in HF_FILES:
        yield pytest.param(json.loads(f.read_text()), id=f"ref-{f.stem}")
    for name, entry in sorted(load_model_catalog().entries.items()):
        yield pytest.param(entry.hf_config, id=f"catalog-{name}")
    for name, cfg in TOY.items():
        yield pytest.param(cfg, id=f"toy-{name}")


@pytest.mark.parametrize("cfg", list(_cases()))
def test_total_matches_transformers(cfg):
    model = build_hf(cfg)
    spec = from_hf_config(cfg)
    assert count_params(spec).total == numel(model)


@pytest.mark.parametrize("cfg", list(_cases()))
def test_layer_split_matches_transformers(cfg):
    """Per layer: total, attention block and routed experts, module by module; the rest is
    embedding + lm_head + final norm."""
    model = build_hf(cfg)
    spec = from_hf_config(cfg)
    layers = decoder_layers(model, spec.num_layers)
    for i, block in enumerate(layers):
        lp = layer_params(spec, i)
        assert lp.total == numel(block), f"layer {i}"
        attn = sum(p.numel() for n, p in block.named_parameters()
                   if n.split(".")[0] in ("self_attn", "attn", "attention", "self_attention"))
        assert lp.attn == attn, f"layer {i} attention"
        routed = sum(p.numel() for n, p in block.named_parameters() if ".experts." in f".{n}")
        assert lp.routed_experts == routed, f"layer {i} routed experts"
        assert (lp.routed_experts > 0) == spec.is_moe_layer(i)
    c = count_params(spec)
    assert numel(model) - numel(layers) == c.embedding + c.lm_head + c.final_norm


# keys a catalog entry adds to its transcribed reference config.json, each cited in the entry's `source`
# (the reference transcriptions of Llama 3.1 leave out rope_scaling, which changes no parameter count)
ADDED_KEYS = {"llama-3.1-8b": {"rope_scaling"}, "llama-3.1-70b": {"rope_scaling"}, "llama-3.1-405b": {"rope_scaling"},
              "deepseek-v3": {"rope_theta", "rope_scaling"},
              "gpt-oss-120b": {"rope_theta", "rope_scaling", "swiglu_limit"}}


def test_catalog_configs_are_the_reference_files():
    """The catalog's hf_config is the reference config.json verbatim, where one exists (plus cited additions)."""
    assert len(HF_FILES) == N_HF_CONFIGS
    by_name = load_model_catalog().entries
    for f in HF_FILES:
        added = ADDED_KEYS.get(f.stem, set())
        cfg = {k: v for k, v in by_name[f.stem].hf_config.items() if k not in added}
        assert cfg == json.loads(f.read_text()), f.name
        assert all(k in by_name[f.stem].hf_config and k in by_name[f.stem].source for k in added), f.name


def test_llama4_composite_is_its_text_model():
    """A Llama4Config (Meta's checkpoint config.json: model_type llama4, the language model under text_config) is
    costed as its text model: the same count as the language model transformers builds inside
    Llama4ForConditionalGeneration (the vision encoder and projector are not costed)."""
    torch, transformers = require_transformers()
    text = {k: v for k, v in TOY["llama4_text-interleave-gqa"].items() if k != "model_type"}
    cfg = {"model_type": "llama4", "text_config": text,
           "vision_config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                             "intermediate_size": 64, "vision_output_dim": 64, "projector_input_dim": 64,
                             "projector_output_dim": 64}}
    hf_cfg = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        full = transformers.Llama4ForConditionalGeneration(hf_cfg)
    text_numel = numel(full.language_model) if hasattr(full, "language_model") else numel(full.model.language_model)
    lm_head = full.lm_head.weight.numel() if getattr(full, "lm_head", None) is not None else 0
    spec = from_hf_config(cfg)
    assert spec.family == "llama4_text"
    assert count_params(spec).total == text_numel + lm_head
    assert count_params(spec).total < numel(full)  # the vision tower is left out


@pytest.mark.parametrize("fields,error", [({"n_group": 3}, "invalid for input"), ({"topk_group": 5}, "out of range")])
def test_group_routing_the_importer_refuses_fails_in_transformers(fields, error):
    """The group-limited routing the importer refuses (tests/catalog/test_hf_import.py) does not run in transformers
    either: its router views the scores as (tokens, n_group, experts / n_group) and takes topk(topk_group) of the
    groups. The same toy with 4 groups of 4 experts, 2 picked, runs."""
    torch, transformers = require_transformers()
    cfg = TOY["deepseek_v3-small"]
    tokens = torch.zeros(1, 8, dtype=torch.long)
    for over in ({}, fields):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**{**cfg, **over}))
        if not over:
            assert model(tokens).logits.shape == (1, 8, 300)
            continue
        with pytest.raises(RuntimeError, match=error):
            model(tokens)
        with pytest.raises(InputError, match=f"'{next(iter(over))}'"):
            from_hf_config({**cfg, **over})


@pytest.mark.parametrize("cfg", list(_cases()))
def test_config_saved_by_transformers_imports_the_same_model(cfg):
    """A config.json as transformers 5 writes it (its config class's to_dict: RoPE as one `rope_parameters` mapping,
    per layer type for Gemma 3, in place of rope_theta / rope_scaling / rope_local_base_freq) imports as the model the
    original file gives: the base, the scaling and every other field. Before the importer read rope_parameters, such
    a file of Llama 3.1 came back with RoPE base 10000 and no scaling."""
    _, transformers = require_transformers()
    saved = transformers.AutoConfig.for_model(**cfg).to_dict()
    saved.pop("_name_or_path", None)
    got, want = from_hf_config(saved, name="m"), from_hf_config(cfg, name="m")
    # group-limited routing is compared wherever the original states it (below: where it leaves it to a default)
    states_groups = "n_group" in cfg and (cfg.get("model_type") != "deepseek_v2" or "topk_method" in cfg)
    assert _comparable(got, states_groups) == _comparable(want, states_groups)


# the MoE fields that state which layers are MoE layers (compared as the per-layer pattern they give: transformers
# writes Llama 4's interleave step out as its `moe_layers` list) and those of group-limited routing, which the saved
# file states where the original left them to a default: DeepSeek-V2's topk_method (transformers' default "greedy";
# the importer reads an absent one with n_group > 1 as the group_limited_greedy of DeepSeek-V2's published config,
# which the reference transcription leaves out) and DeepSeek-V3's n_group / topk_group (transformers' defaults 8 / 4;
# the importer reads absent ones as a single group)
_MOE_LAYOUT = ("first_k_dense", "layer_freq", "dense_layers")
_ROUTE_GROUPS = ("route_groups", "route_topk_groups")


def _comparable(m, with_route_groups: bool) -> dict:
    d = m.model_dump()
    if d["moe"] is not None:
        left_out = _MOE_LAYOUT + (() if with_route_groups else _ROUTE_GROUPS)
        d["moe"] = {k: v for k, v in d["moe"].items() if k not in left_out}
        d["moe_layers"] = tuple(m.is_moe_layer(i) for i in range(m.num_layers))
    return d


def test_glm45_counts_as_transformers_builds_it():
    """GLM-4.5 (tests/data/hf_configs/glm-4.5.json, its `_source`): the importer's count is transformers' own,
    352,797,814,784 parameters (the MTP layer, which transformers does not build, not counted), 33.6B active with the
    embeddings and head; zai-org's README states "355 billion total parameters with 32 billion active"."""
    from support import SOURCED_HF_CONFIGS_DIR

    cfg = json.loads((SOURCED_HF_CONFIGS_DIR / "glm-4.5.json").read_text())
    spec = from_hf_config(cfg)
    c = count_params(spec)
    assert c.total == numel(build_hf(cfg)) == 352_797_814_784
    assert abs(c.total / 355e9 - 1) < 0.01 and abs((c.active - c.embedding - c.lm_head) / 32e9 - 1) < 0.01
    assert (spec.rotary_fraction, spec.qk_norm, spec.qkv_bias, spec.attn_out_bias, spec.mtp_layers) == \
        (0.5, True, True, False, 1)
    assert spec.moe.num_shared_experts == 1 and spec.moe.first_k_dense == 3 and spec.moe.routed_scaling_factor == 2.5
