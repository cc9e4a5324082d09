"""Llama 4's chunked attention: FLOPs against a count of HF's mask, layer kinds, and the launch contract."""

from __future__ import annotations

import pytest

from planner.catalog.models import get_model
from planner.costmodel.flops import chunked_attended_keys, model_flops_per_token
from planner.launchers.contract import table_missing
from planner.specs import MoESpec, TrainingSpec


def _mask_mean_keys(s: int, c: int, causal: bool) -> float:
    """Mean allowed keys per query of transformers' chunked mask (masking_utils chunked_overlay:
    kv_idx // c == q_idx // c, and kv_idx <= q_idx when causal), counted pair by pair."""
    allowed = sum(1 for q in range(s) for k in range(s) if k // c == q // c and (k <= q or not causal))
    return allowed / s


@pytest.mark.parametrize("s,c", [(12, 4), (13, 4), (7, 8), (8, 8), (30, 7)])
@pytest.mark.parametrize("causal", [True, False])
def test_chunked_keys_equal_the_mask(s, c, causal):
    assert chunked_attended_keys(s, c, causal) == pytest.approx(_mask_mean_keys(s, c, causal), rel=1e-12)


def test_maverick_flops_fall_only_beyond_the_chunk():
    """Up to the 8192-token chunk every layer attends globally; at 32768 tokens 36 of the 48 layers attend inside
    their chunk, so the causal attention core of those layers shrinks to (8192 + 1) / 2 keys per query from
    (32768 + 1) / 2: model FLOPs per token fall by 36 x 4 x 40 x 128 x (32768 - 8192) / 2 x 3."""
    m = get_model("llama4-maverick")
    glob = m.model_copy(update={"attention_chunk_size": None, "chunked_layer_pattern": ()})
    assert model_flops_per_token(m, 8192) == model_flops_per_token(glob, 8192)
    diff = model_flops_per_token(glob, 32768) - model_flops_per_token(m, 32768)
    assert diff == pytest.approx(36 * 4 * 40 * 128 * (32768 - 8192) / 2 * 3, rel=1e-9)


def test_layer_kinds_name_the_chunked_layers():
    from planner.catalog.hardware import parse_cluster
    from planner.costmodel.base import Context

    m = get_model("llama4-maverick")
    ctx = Context(m, parse_cluster("h100x8"), TrainingSpec(seq_len=16384, global_batch=8))
    kinds = {(k.moe, k.local) for k in ctx.kinds}
    assert kinds == {(False, "chunked"), (True, "chunked"), (True, "")}  # NoPE layers 3, 7, ... are all MoE
    assert [ctx.kinds[j].local for j in ctx.kind_of_layer[:4]] == ["chunked", "chunked", "chunked", ""]


@pytest.mark.parametrize("launcher,framework", [("megatron", "megatron"), ("deepspeed", "deepspeed"),
                                                ("torchtitan", "fsdp")])
def test_llama4_is_refused_where_the_release_cannot_run_it(launcher, framework):
    """Megatron-core 0.19.2, Megatron-DeepSpeed's GPT and torchtitan 0.3.0 have no setting for the NoPE layers'
    temperature tuning: their tables name it, and chunked attention only where the sequence exceeds the chunk
    (DeepSpeed then runs the transformers model: test_llama4_runs_on_deepspeeds_transformers_path)."""
    m = get_model("llama4-maverick")
    short = table_missing(m, TrainingSpec(seq_len=8192, global_batch=8, framework=framework), launcher)
    long = table_missing(m, TrainingSpec(seq_len=16384, global_batch=8, framework=framework), launcher)
    assert "attention temperature tuning" in short and "layers without RoPE" in short
    assert "chunked attention" not in short and "chunked attention" in long


def test_maxtext_llama4_block_runs_maverick_and_names_what_it_cannot():
    """MaxText's llama4 block (maxtext 0.2.5 models/llama4.py, configs/types.py) runs Maverick at any length; it
    refuses what the block cannot hold: a capacity factor (dropless only), top-k above 1, MoE or NoPE layers off its
    intervals, chunks on other layers than the RoPE ones."""
    m = get_model("llama4-maverick")
    for seq in (8192, 16384):
        assert table_missing(m, TrainingSpec(seq_len=seq, global_batch=8, framework="maxtext"), "maxtext") == []
    t = TrainingSpec(seq_len=16384, global_batch=8, framework="maxtext")
    dropped = table_missing(m, t.model_copy(update={"moe_capacity_factor": 1.0}), "maxtext")
    assert dropped == ["an expert capacity factor (the llama4 block runs dropless only)"]
    top2 = m.model_copy(update={"moe": m.moe.model_copy(update={"top_k": 2})})
    assert "a router other than Llama 4's (top-1 sigmoid on the expert input)" in table_missing(top2, t, "maxtext")
    off = m.model_copy(update={"moe": MoESpec(**{**m.moe.model_dump(), "dense_layers": (5,)})})
    assert "NoPE or MoE layers off the llama4 block's intervals" in table_missing(off, t, "maxtext")
    chunks = m.model_copy(update={"chunked_layer_pattern": (1,) * 48})
    assert "chunked attention on layers other than the RoPE layers" in table_missing(chunks, t, "maxtext")
    # Llama 4's features on another block: a Mixtral with chunks is refused by name
    mix = get_model("mixtral-8x7b").model_copy(update={"attention_chunk_size": 4096})
    assert "chunked attention" in table_missing(mix, t, "maxtext")


def test_llama4_runs_on_deepspeeds_transformers_path():
    """transformers' Llama4ForCausalLM holds every costed field (planner.launchers.hf_model re-imports the config it
    writes): DeepSpeed runs Llama 4 on its Hugging Face path, data parallel under ZeRO, at any length."""
    from planner.launchers.contract import deepspeed_path, missing_features

    m = get_model("llama4-maverick")
    for seq in (8192, 16384):
        t = TrainingSpec(seq_len=seq, global_batch=8, framework="deepspeed")
        assert deepspeed_path(m, t) == "hf" and missing_features(m, t, "deepspeed") == []
    dropped = TrainingSpec(seq_len=8192, global_batch=8, framework="deepspeed", moe_capacity_factor=1.0)
    assert deepspeed_path(m, dropped) is None  # transformers' MoE blocks are dropless


def test_has_local_layers_is_any_local_layer():
    """has_local_layers (the launchers' rules ask it of every candidate) reads the patterns the way is_local_layer
    reads them layer by layer: every catalog model, the sourced HF configs (Gemma 3's five-to-one pattern, Mistral's
    all-sliding window), and a chunk size without a pattern."""
    from support import SOURCED_HF_CONFIGS_DIR

    from planner.catalog.models import list_models, load_model
    from planner.costmodel.flops import has_local_layers, is_local_layer

    models = [get_model(x.name) for x in list_models()]
    models += [load_model(str(p)) for p in sorted(SOURCED_HF_CONFIGS_DIR.glob("*.json"))]
    mav = get_model("llama4-maverick")
    models.append(mav.model_copy(update={"chunked_layer_pattern": ()}))
    kinds = set()
    for m in models:
        want = any(is_local_layer(m, i) for i in range(m.num_layers))
        assert has_local_layers(m) == want, m.name
        kinds.add(want)
    assert kinds == {True, False}
