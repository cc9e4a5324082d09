"""MaxText's custom remat policy with tensors offloaded to host memory: the copies cross the host link (PCIe, ~15 GB/s
per chip on TPU v5e / v5p, jax-ml/scaling-book tpus.md) in the forward and back in the backward, beside the layer's
compute; what they take beyond it is charged (compute.activation_offload_s), so offloading is not free."""

from __future__ import annotations

import math

from planner.analysis.explain import derivation
from planner.catalog.hardware import get_hardware
from planner.catalog.models import get_model
from planner.costmodel import Context, evaluate
from planner.specs import ClusterSpec, ParallelPlan, TrainingSpec

# jax-ml/scaling-book tpus.md (commit 0819a7d): "PCIe bandwidth for TPU v4 is 16GB / second each way"; "PCIe bandwidth
# is typically around 1.5e10 bytes / second per chip" (v5); footnote: "Trillium (TPU v6e) has 32GB/s"
SCALING_BOOK_HOST_GBPS = {"tpu-v4": 16, "tpu-v5e": 15, "tpu-v5p": 15, "tpu-v6e": 32}
OFFLOAD = ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj", "mlpwi", "mlpwo")


def _layer(offloaded: tuple[str, ...], mbs: int = 1, recompute: str = "selective"):
    model = get_model("llama-3.1-8b")
    cluster = ClusterSpec(hardware=get_hardware("tpu-v5e"), count=64)
    tr = TrainingSpec(seq_len=8192, global_batch=256, framework="maxtext")
    plan = ParallelPlan(tp=1, pp=1, dp=64, zero_stage=3, micro_batch=mbs, recompute=recompute,
                        remat_offloaded=offloaded)
    ctx = Context(model, cluster, tr)
    ev = evaluate(ctx, plan)
    term = next(t for t in ev.trace.factors if t.name.startswith("layer_compute_s["))
    return ctx, ev, term


def test_tpu_host_links_are_the_published_ones():
    for hw, gbps in SCALING_BOOK_HOST_GBPS.items():
        assert get_hardware(hw).host_link_unidir_GBps == gbps, hw


def test_offloaded_copies_beyond_the_layer_compute_are_charged():
    _, ev0, t0 = _layer(())
    _, ev1, t1 = _layer(OFFLOAD)
    i0, i1 = t0.inputs, t1.inputs
    assert i0["host_offload_fwd_s"] == i0["host_offload_bwd_s"] == 0.0
    # by hand: Llama 3.1 8B (h 4096, 32 heads, 8 KV heads of 128, FFN 14336), TP 1: the layer input, q, k, v, the
    # attention output projection, the two MLP input GEMMs' outputs and the MLP output, 2 bytes each, 8192 tokens,
    # over 15 GB/s; the layer's own compute (unchanged by the offload) hides what it can
    h, f = 4096, 14336
    elems = h + 32 * 128 + 8 * 128 + 8 * 128 + h + 2 * f + h
    copy_s = elems * 8192 * 2 / 15e9
    fwd0, bwd0 = i0["fwd_s"], i0["bwd_s"]
    assert copy_s > fwd0  # a heavy policy: the copies outlast the forward
    assert math.isclose(i1["host_offload_fwd_s"], copy_s - fwd0, rel_tol=1e-9)
    assert math.isclose(i1["host_offload_bwd_s"], max(0.0, copy_s - bwd0), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(i1["fwd_s"], fwd0 + i1["host_offload_fwd_s"], rel_tol=1e-12)
    assert math.isclose(i1["bwd_s"], bwd0 + i1["host_offload_bwd_s"], rel_tol=1e-12)
    assert ev1.step_time_s > ev0.step_time_s
    # a light policy hides under the compute
    _, _, t2 = _layer(("key_proj", "value_proj"))
    assert t2.inputs["host_offload_fwd_s"] == t2.inputs["host_offload_bwd_s"] == 0.0


def test_no_offload_charge_without_the_custom_policy_in_effect():
    # full recompute keeps only the layer input; the custom policy (and its offload) applies to selective
    _, _, t = _layer(OFFLOAD, recompute="full")
    assert t.inputs["host_offload_fwd_s"] == t.inputs["host_offload_bwd_s"] == 0.0


def test_explain_shows_the_offload_term():
    ctx, ev, t = _layer(OFFLOAD)
    rows = {r["term"]: r for r in derivation(ctx, ev)}
    row = rows[t.name]
    assert "host offload" in row["formula"]
    assert math.isclose(row["inputs"]["host_offload_fwd_s"], t.inputs["host_offload_fwd_s"], rel_tol=1e-12)


def test_the_host_memory_holds_the_offloaded_tensors_and_optimizer_states():
    # memory.host_bytes: what the plan keeps in host memory instead of HBM, by hand from the model's dimensions
    _, ev0, _ = _layer(())
    _, ev1, _ = _layer(OFFLOAD)
    assert ev0.memory["host_gib"] == 0.0
    h, f = 4096, 14336
    elems = h + 32 * 128 + 8 * 128 + 8 * 128 + h + 2 * f + h  # per token, TP 1
    assert math.isclose(ev1.memory["host_gib"], elems * 2 * 8192 * 32 / 2**30, rel_tol=1e-9)  # 32 layers, 1 in flight
    # ZeRO-Offload: the Adam moments (2 x 4 B; the fp32 master weights stay sharded in HBM under MaxText's fp32
    # ZeRO-3 parameters) of the 8.03e9 parameters over 64 shards
    model = get_model("llama-3.1-8b")
    ctx = Context(model, ClusterSpec(hardware=get_hardware("tpu-v5e"), count=64),
                  TrainingSpec(seq_len=8192, global_batch=256, framework="maxtext"))
    off = evaluate(ctx, ParallelPlan(tp=1, pp=1, dp=64, zero_stage=3, recompute="full", offload_optimizer=True))
    assert off.memory["optimizer_gib"] == 0.0
    assert math.isclose(off.memory["host_gib"], 8 * 8_030_261_248 / 64 / 2**30, rel_tol=1e-9)
