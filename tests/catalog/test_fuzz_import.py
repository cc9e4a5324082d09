"""Fuzz the model importers: any input gives a ModelSpec or a one-line InputError, never another exception."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.catalog.hf_import import from_hf_config
from planner.catalog.models import load_model
from planner.errors import InputError
from planner.specs import ModelSpec

DATA = Path(__file__).parents[1] / "data"
CONFIGS = [json.loads(p.read_text()) for p in sorted(DATA.glob("*.json"))]
FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([0, -1, 1, 2**31, 2**63]),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
values = st.recursive(scalars,
                      lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8), c, max_size=4)),
                      max_leaves=12)
KEYS = sorted({k for c in CONFIGS for k in c} | {"model_type", "hidden_size", "num_hidden_layers",
                                                "num_attention_heads", "num_key_value_heads", "intermediate_size",
                                                "vocab_size", "head_dim", "n_routed_experts", "num_experts"})
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=10))


def check(cfg):
    try:
        out = from_hf_config(cfg)
    except InputError as e:
        assert str(e).strip()
        return
    assert isinstance(out, ModelSpec)


def check_file(tmp_path_factory, text):
    f = tmp_path_factory.mktemp("fz") / "config.json"
    f.write_text(text)
    try:
        out = load_model(str(f))
    except InputError:
        return
    assert isinstance(out, ModelSpec)


@pytest.mark.slow
@FUZZ
@given(st.dictionaries(keys, values, max_size=12))
def test_random_dicts(cfg):
    check(cfg)


@pytest.mark.slow
@FUZZ
@given(values)
def test_random_values(v):
    check(v)


@st.composite
def mutated(draw):
    cfg = dict(draw(st.sampled_from(CONFIGS)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["set", "del", "add"]))
        if op == "del" and cfg:
            cfg.pop(draw(st.sampled_from(sorted(cfg))))
        elif op == "set" and cfg:
            cfg[draw(st.sampled_from(sorted(cfg)))] = draw(values)
        else:
            cfg[draw(keys)] = draw(values)
    return cfg


@FUZZ
@given(mutated())
def test_mutated_real_configs(cfg):
    check(cfg)


def test_real_configs_import():
    assert CONFIGS
    for c in CONFIGS:
        assert isinstance(from_hf_config(c), ModelSpec)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated())
def test_load_model_files(tmp_path_factory, cfg):
    check_file(tmp_path_factory, json.dumps(cfg, default=str, allow_nan=True))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.text(max_size=200),
                 st.dictionaries(keys, values, max_size=8).map(lambda d: json.dumps(d, default=str))))
def test_load_model_random_text(tmp_path_factory, text):
    check_file(tmp_path_factory, text)
