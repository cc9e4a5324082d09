"""Llama 4's chunked attention: FLOPs against a count of HF's mask, layer kinds, and the launch contract."""

from __future__ import annotations

import pytest

from planner.catalog.models import get_model
from planner.costmodel.flops import chunked_attended_keys, model_flops_per_token
from planner.launchers.contract import table_missing
from planner.specs import TrainingSpec


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
                                                ("maxtext", "maxtext"), ("torchtitan", "fsdp")])
def test_no_launcher_claims_llama4(launcher, framework):
    """No launcher release the planner writes for runs Llama 4's NoPE-layer temperature tuning (Megatron-core
    0.19.2, Megatron-DeepSpeed, torchtitan 0.3.0 have no setting; the MaxText llama4 block is not emitted yet):
    the launch is refused, and chunked attention is named only where the sequence exceeds the chunk."""
    m = get_model("llama4-maverick")
    short = table_missing(m, TrainingSpec(seq_len=8192, global_batch=8, framework=framework), launcher)
    long = table_missing(m, TrainingSpec(seq_len=16384, global_batch=8, framework=framework), launcher)
    assert "attention temperature tuning" in short and "layers without RoPE" in short
    assert "chunked attention" not in short and "chunked attention" in long
