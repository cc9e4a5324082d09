"""Model catalog: names, aliases, did-you-mean, and `load_model` on files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support import HF_CONFIG_FILES, MODELS_YAML, N_HF_CONFIGS

from planner.catalog.data import data_dir
from planner.catalog.models import get_catalog_entry, get_model, list_models, load_model, load_model_catalog
from planner.costmodel.params import count_params
from planner.errors import InputError
from planner.names import normalise
from planner.specs import ModelSpec

SPEC_FILES = sorted(data_dir("model_specs").glob("*.yaml"))

CANONICAL = [
    "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
    "mistral-7b-v0.1", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-32b",
    "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v2", "deepseek-v3", "gpt3-175b", "bloom-176b",
    "falcon-180b", "gemma-2-27b", "nemotron-4-340b", "gpt-oss-120b", "megatron-gpt-1t", "kimi-k2", "gpt-oss-20b",
    "llama4-maverick",
]


def test_catalog_has_every_reference_model():
    assert sorted(CANONICAL) == [m.name for m in list_models()]
    assert len(SPEC_FILES) == len(CANONICAL)


def test_list_models_shape():
    rows = list_models()
    assert [r.name for r in rows] == sorted(r.name for r in rows)
    for name, aliases, spec in rows:  # the CLI unpacks (name, aliases, spec)
        assert isinstance(spec, ModelSpec) and spec.name == name
        assert isinstance(aliases, tuple)


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_spec_file_format(path):
    data = yaml.safe_load(path.read_text())
    assert set(data) <= {"name", "aliases", "source", "official_params", "notes", "hf_config"}
    assert data["name"] == path.stem
    assert data["source"] and data["official_params"]
    assert "model_type" in data["hf_config"]
    spec = get_model(data["name"])
    assert spec.source == data["source"]


def test_sources_and_official_figures_copied_from_models_yaml():
    models = yaml.safe_load(MODELS_YAML.read_text())["models"]
    by_official = {m["official_params"]: m for m in models.values()}
    for name in CANONICAL:
        e = get_catalog_entry(name)
        ref = by_official[e.official_params]  # verbatim
        assert e.source.startswith(ref["source"])


@pytest.mark.parametrize("alias,canonical", [
    ("llama-70b", "llama-3.1-70b"),
    ("llama-405b", "llama-3.1-405b"),
    ("llama-8b", "llama-3.1-8b"),
    ("llama3-70b", "llama-3.1-70b"),
    ("Llama-3.1 70B", "llama-3.1-70b"),
    ("llama2-70b", "llama-2-70b"),
    ("llama2-7b", "llama-2-7b"),
    ("mixtral-8x7b", "mixtral-8x7b"),
    ("MIXTRAL_8x22B", "mixtral-8x22b"),
    ("mistral-7b", "mistral-7b-v0.1"),
    ("deepseek-v3", "deepseek-v3"),
    ("dsv3", "deepseek-v3"),
    ("dsv2", "deepseek-v2"),
    ("gpt3", "gpt3-175b"),
    ("gpt-175b", "gpt3-175b"),
    ("GPT-3", "gpt3-175b"),
    ("qwen3-moe-30b", "qwen3-30b-a3b"),
    ("qwen3-235b", "qwen3-235b-a22b"),
    ("qwen2.5-72b", "qwen2.5-72b"),
    ("bloom", "bloom-176b"),
    ("gemma2-27b", "gemma-2-27b"),
    ("nemotron-340b", "nemotron-4-340b"),
    ("megatron-1t", "megatron-gpt-1t"),
    ("meta-llama/Llama-3.1-70B", "llama-3.1-70b"),
    ("openai/gpt-oss-120b", "gpt-oss-120b"),
])
def test_aliases(alias, canonical):
    assert get_model(alias).name == canonical
    assert load_model(alias).name == canonical


def test_aliases_are_unique_and_not_redundant():
    seen: dict[str, str] = {}
    for e in load_model_catalog().entries.values():
        keys = [normalise(n) for n in (e.name, *e.aliases)]
        assert len(keys) == len(set(keys)), f"{e.name}: an alias repeats the name or another alias"
        for k in keys:
            assert seen.setdefault(k, e.name) == e.name, f"{k} names both {seen[k]} and {e.name}"


@pytest.mark.parametrize("typo,suggestion", [
    ("lama-70b", "llama-70b"),
    ("mixtral-8x7", "mixtral-8x7b"),
    ("deepsek-v3", "deepseek-v3"),
    ("qwen3-32", "qwen3-32b"),
])
def test_did_you_mean(typo, suggestion):
    with pytest.raises(InputError, match=f"unknown model '{typo}' \\(did you mean: [^)]*{suggestion}") as e:
        get_model(typo)
    assert "\n" not in str(e.value)


def test_unknown_without_suggestion():
    with pytest.raises(InputError, match="unknown model 'zzzz'; `plan models` lists them"):
        load_model("zzzz")


def test_catalog_is_cached():
    assert load_model_catalog() is load_model_catalog()
    assert get_model("llama-70b") is get_model("llama-3.1-70b")


# ------------------------------------------------------------------------------------ files


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    return str(p)


def test_load_hf_config_json(tmp_path):
    cfg = get_catalog_entry("llama-3.1-70b").hf_config
    m = load_model(write(tmp_path, "config.json", json.dumps(cfg)))
    assert m.name == tmp_path.name and m.family == "llama"  # named by its folder, not "config" (issue 27)
    assert count_params(m).total == 70_553_706_496


def test_load_reference_files_directly():
    assert len(HF_CONFIG_FILES) == N_HF_CONFIGS
    for f in HF_CONFIG_FILES:
        m = load_model(str(f))
        assert count_params(m).total == count_params(get_model(f.stem)).total


def test_load_hf_config_yaml_and_name_or_path(tmp_path):
    cfg = {**get_catalog_entry("mixtral-8x7b").hf_config, "_name_or_path": "mistralai/Mixtral-8x7B-v0.1"}
    m = load_model(write(tmp_path, "mixtral.yaml", yaml.safe_dump(cfg)))
    assert m.name == "mistralai/Mixtral-8x7B-v0.1"
    assert count_params(m).active == 12_879_925_248


def test_load_architectures_only(tmp_path):
    cfg = dict(get_catalog_entry("qwen3-32b").hf_config)
    del cfg["model_type"]
    assert count_params(load_model(write(tmp_path, "q.json", json.dumps(cfg)))).total == 32_762_123_264


def test_load_catalog_style_entry(tmp_path):
    entry = {"name": "my-llama", "aliases": ["ml"], "source": "my notes",
             "hf_config": {**get_catalog_entry("llama-2-7b").hf_config}}
    m = load_model(write(tmp_path, "mine.yaml", yaml.safe_dump(entry)))
    assert (m.name, m.source) == ("my-llama", "my notes")
    assert count_params(m).total == 6_738_415_616


def test_catalog_files_load_as_user_files():
    for path in SPEC_FILES:
        assert load_model(str(path)) == get_model(path.stem)


def test_load_native_spec(tmp_path):
    spec = get_model("deepseek-v3")
    data = spec.model_dump(mode="json")
    m = load_model(write(tmp_path, "dsv3.yaml", yaml.safe_dump(data)))
    assert m == spec
    m = load_model(write(tmp_path, "dsv3.json", json.dumps(data)))
    assert m == spec


@pytest.mark.parametrize("content,match", [
    ("", "is empty"),
    ("   \n\n", "is empty"),
    (b"\x00\x01\x02binary", "is binary"),
    (b"\xff\xfe\xfa", "not UTF-8"),
    ("name: [unclosed\n", "not valid YAML"),
    ("- a\n- b\n", "must hold a mapping"),
    ("just a string", "must hold a mapping"),
    ("name: x\nnum_layers: 2\n", "field 'hidden_size': Field required"),
    ("name: x\nnum_layers: 2\nhidden_size: 8\nnum_heads: 2\nnum_kv_heads: 2\nhead_dim: 4\nffn_hidden_size: 8\n"
     "vocab_size: 10\nlayerz: 3\n", "field 'layerz': is not a known field"),
    ("name: x\nnum_layers: two\nhidden_size: 8\nnum_heads: 2\nnum_kv_heads: 2\nhead_dim: 4\nffn_hidden_size: 8\n"
     "vocab_size: 10\n", "field 'num_layers'"),
    ("name: x\nnum_layers: 2\nhidden_size: 8\nnum_heads: 3\nnum_kv_heads: 2\nhead_dim: 4\nffn_hidden_size: 8\n"
     "vocab_size: 10\n", "not a multiple of num_kv_heads"),
    ("model_type: llama\nnum_hidden_layers: 2\nhidden_size: 0\n", "'hidden_size' must be >= 1"),
    ("model_type: llama9\n", "not supported"),
    ("hf_config: {model_type: llama}\n", "field 'name' must be a non-empty string"),
    ("name: a\nhf_config: {model_type: llama, hidden_size: 64}\n", "'num_hidden_layers' is missing"),
    ("name: a\nhf_config: [1]\n", "'hf_config' must be a mapping"),
    ("name: a\nweights: x\nhf_config: {model_type: gpt2, n_embd: 8, n_layer: 1, n_head: 2}\n",
     "unknown field 'weights'"),
    ("{1: 2}", "non-string key 1"),  # issue 26 item 13: refused by the reader, whatever the file holds
])
def test_bad_yaml_files(tmp_path, content, match):
    path = write(tmp_path, "m.yaml", content)
    with pytest.raises(InputError, match=match) as e:
        load_model(path)
    assert "\n" not in str(e.value)
    assert "m.yaml" in str(e.value)


def test_malformed_json(tmp_path):
    with pytest.raises(InputError, match="not valid JSON .* line 2"):
        load_model(write(tmp_path, "c.json", '{"model_type": "llama",\n "hidden_size": }'))


def test_directory(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        load_model(str(tmp_path))


def test_too_big(tmp_path):
    path = write(tmp_path, "big.json", '{"model_type": "llama", "pad": "' + "x" * (1 << 20) + '"}')
    with pytest.raises(InputError, match="over the 1 MiB limit"):
        load_model(path)


def test_missing_path_says_file_not_found(tmp_path):
    with pytest.raises(InputError, match="model file .* not found: check the path"):
        load_model(str(tmp_path / "nope.yaml"))


@pytest.mark.parametrize("bad", ["", "   ", None, 3])
def test_bad_argument(bad):
    with pytest.raises(InputError):
        load_model(bad)
