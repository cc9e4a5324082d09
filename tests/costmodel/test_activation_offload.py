"""Megatron's fine-grained activation offloading (--fine-grained-activation-offloading --offload-modules): the tensors a
named module saves for backward go to host memory after its forward and come back for its backward (megatron-core
pipeline_parallel/fine_grained_activation_offload.py). What leaves HBM, what stays, what the host holds and what the
backward waits for are counted from the model's dimensions here, by hand, and held against the planner."""

from __future__ import annotations

import json
import math

import pytest
from support import run_cli

from planner.catalog.hardware import get_hardware
from planner.catalog.models import get_model
from planner.costmodel import Context, evaluate
from planner.costmodel.base import plan_shape
from planner.costmodel.memory import MIN_OFFLOADED_TENSOR_ELEMS, OFFLOAD_RESIDENT_LAYERS, offloaded_elems
from planner.launchers import launcher_errors
from planner.specs import ClusterSpec, ParallelPlan, TrainingSpec
from planner.specs.dims import plan_errors

GIB = 2.0**30
# Qwen3-235B-A22B (Qwen/Qwen3-235B-A22B config.json): hidden 4096, 64 heads / 4 KV heads of 128, 128 experts of 1536,
# top-8, 94 layers, all MoE
H, HEADS, KV, D, FE, TOPK = 4096, 64, 4, 128, 1536, 8


def _ctx(dtype: str = "fp8", recipe: str | None = "mxfp8", seq: int = 4096, gbs: int = 3072, count: int = 256):
    tr = TrainingSpec(seq_len=seq, global_batch=gbs, dtype=dtype, fp8_recipe=recipe if dtype == "fp8" else None)
    return Context(get_model("qwen3-235b-a22b"), ClusterSpec(hardware=get_hardware("gb200-nvl72"), count=count), tr)


def _plan(offload: tuple[str, ...] = (), mbs: int = 3, recompute: str = "selective", **kw) -> ParallelPlan:
    base = dict(tp=1, pp=4, vpp=6, dp=64, ep=64, micro_batch=mbs, zero_stage=1, recompute=recompute,
                schedule="interleaved", account_embedding_loss=True, offload_modules=offload,
                recompute_modules=("moe_act", "layernorm") if recompute == "selective" else ())
    return ParallelPlan(**(base | kw))


def _moe_kind(ctx):
    return next(k for k in ctx.kinds if k.moe)


def test_the_expert_tensors_leave_as_the_model_zoo_runs_them():
    # the model zoo's GB200 MXFP8 recipe (--offload-modules expert_fc1 moe_act): per token of the micro-batch, each of
    # the 8 routed copies leaves its fc1 GEMM input, saved in MXFP8 (1 byte: half a 2-byte element per hidden unit),
    # and the fc1 output the activation reads, gate and up in 16 bits (2 x 1536)
    ctx = _ctx()
    plan = _plan(("expert_fc1", "moe_act"))
    shape = plan_shape(ctx, plan)
    dev, copied = offloaded_elems(ctx, shape, _moe_kind(ctx))
    assert dev == copied == TOPK * 0.5 * H + TOPK * 2 * FE  # 16384 + 24576
    # one module at a time adds up
    one = [offloaded_elems(ctx, plan_shape(ctx, _plan((m,))), _moe_kind(ctx))[0]
           for m in ("expert_fc1", "moe_act")]
    assert one == [TOPK * 0.5 * H, TOPK * 2 * FE]


def test_a_per_tensor_fp8_recipe_copies_the_bf16_fc1_input():
    # experts.py set_save_original_input(linear_fc1) when offloading expert_fc1 without MXFP8 / NVFP4: the 16-bit
    # input is saved (and copied) in place of the FP8 one the HBM count had
    ctx = _ctx(recipe="tensorwise")
    shape = plan_shape(ctx, _plan(("expert_fc1",)))
    dev, copied = offloaded_elems(ctx, shape, _moe_kind(ctx))
    assert (dev, copied) == (TOPK * 0.5 * H, TOPK * 1.0 * H)


def test_tensors_below_megatrons_size_threshold_stay():
    # min_offloaded_tensor_size 1024 * 1024 elements: the attention core's fp32 softmax statistics (tokens x 64 heads)
    # stay at 4096 tokens and leave from 16384; q (64 x 128 wide) leaves from 128 tokens, k and v (4 x 128) from 2048
    assert MIN_OFFLOADED_TENSOR_ELEMS == 1024 * 1024
    ctx = _ctx(dtype="bf16")
    bf16 = lambda tokens_mbs, seq: offloaded_elems(  # noqa: E731
        _ctx(dtype="bf16", seq=seq, gbs=64 * 4 * tokens_mbs),
        plan_shape(_ctx(dtype="bf16", seq=seq, gbs=64 * 4 * tokens_mbs), _plan(("core_attn",), mbs=tokens_mbs)),
        _moe_kind(ctx))[0]
    q, kv, out, lse = HEADS * D, KV * D, HEADS * D, 2 * HEADS
    assert bf16(1, 4096) == q + 2 * kv + out  # lse: 4096 x 64 = 262144 elements, below the threshold
    assert bf16(1, 16384) == q + 2 * kv + out + lse  # 16384 x 64 = 1048576: at it
    assert bf16(1, 1024) == q + out  # k, v: 1024 x 512 = 524288 elements each


def test_hbm_loses_the_offloaded_tensors_but_two_layers_of_them():
    ctx = _ctx()
    base, off = _plan(), _plan(("expert_fc1", "moe_act"))
    ev0, ev1 = evaluate(ctx, base), evaluate(ctx, off)
    shape = plan_shape(ctx, off)
    per_layer = offloaded_elems(ctx, shape, _moe_kind(ctx))[0] * shape.tokens * 2  # bytes
    stage = ev1.peak_stage
    assert stage == ev0.peak_stage == ev1.trace["host_gib"].inputs["stage"] == 0
    inflight = ev1.trace["activations_gib"].inputs["inflight_microbatches"]
    layers = ev1.pipeline["layers_per_stage"][stage]
    assert (layers, inflight) == (23, 4.5)  # 94 layers + embedding + loss over 4 x 6 stages; interleaved 1F1B
    saved = (ev0.memory["activations_gib"] - ev1.memory["activations_gib"]) * GIB
    # every layer of every micro-batch in flight leaves its tensors; the margin group and the copy under way stay
    assert math.isclose(saved, per_layer * (layers * inflight - OFFLOAD_RESIDENT_LAYERS), rel_tol=1e-9)
    # the host holds what left, for every micro-batch in flight (MXFP8: the copies are the saved bytes)
    assert math.isclose(ev1.memory["host_gib"] * GIB, per_layer * layers * inflight, rel_tol=1e-9)
    assert ev0.memory["host_gib"] == 0.0
    # the recipe the model zoo says needs it: without it the plan does not fit a GB200, with it it does
    assert not ev0.fits and ev1.fits


def test_the_backward_waits_for_the_reload_beyond_its_compute():
    # megatron-core: forward copies run on the d2h stream, unwaited; the backward waits for each group's reload, issued
    # one layer ahead: the copy's excess over the layer's backward shows, at the host link's rate (63 GB/s each way)
    ctx = _ctx()
    ev0, ev1 = evaluate(ctx, _plan()), evaluate(ctx, _plan(("expert_fc1", "moe_act")))
    t0 = next(t for t in ev0.trace.factors if t.name.startswith("layer_compute_s[MoE"))
    t1 = next(t for t in ev1.trace.factors if t.name.startswith("layer_compute_s[MoE"))
    shape = plan_shape(ctx, _plan(("expert_fc1", "moe_act")))
    copy_s = (TOPK * 0.5 * H + TOPK * 2 * FE) * shape.tokens * 2 / (get_hardware("gb200-nvl72").host_link_unidir_GBps
                                                                     * 1e9)
    assert t1.inputs["host_offload_fwd_s"] == 0.0
    assert math.isclose(t1.inputs["host_offload_bwd_s"], max(0.0, copy_s - t0.inputs["bwd_s"]), rel_tol=1e-9)
    assert t1.inputs["host_offload_bwd_s"] > 0  # 1 GB per layer outlasts its backward on PCIe Gen5
    assert math.isclose(t1.inputs["bwd_s"], t0.inputs["bwd_s"] + t1.inputs["host_offload_bwd_s"], rel_tol=1e-12)
    assert ev1.step_time_s > ev0.step_time_s
    # a light module hides under the backward
    t2 = next(t for t in evaluate(ctx, _plan(("mlp_norm",))).trace.factors if t.name.startswith("layer_compute_s[MoE"))
    assert t2.inputs["host_offload_bwd_s"] == 0.0


def test_full_recompute_offloads_nothing():
    ctx = _ctx()
    full0, full1 = _plan(recompute="full"), _plan(("expert_fc1", "moe_act"), recompute="full")
    ev0, ev1 = evaluate(ctx, full0), evaluate(ctx, full1)
    assert ev1.memory["host_gib"] == 0.0
    assert math.isclose(ev1.memory["activations_gib"], ev0.memory["activations_gib"], rel_tol=1e-12)
    assert ev1.step_time_s == ev0.step_time_s


@pytest.mark.parametrize("model, offload, recompute_modules, framework, why", [
    ("qwen3-235b-a22b", ("attn_proj",), (), "megatron", "needs core_attn"),
    ("llama-3.1-8b", ("expert_fc1",), (), "megatron", "needs an MoE model"),
    ("qwen3-235b-a22b", ("moe_act",), ("moe",), "megatron", "'moe' recompute module"),
    ("qwen3-235b-a22b", ("fused_group_mlp",), (), "megatron", "not priced"),
    ("deepseek-v3", ("qkv_linear",), (), "megatron", "multi-latent attention"),
    ("qwen3-235b-a22b", ("expert_fc1",), (), "fsdp", "Megatron's"),
])
def test_the_stacks_rules(model, offload, recompute_modules, framework, why):
    m = get_model(model)
    tr = TrainingSpec(seq_len=4096, global_batch=512, framework=framework)
    moe = m.moe is not None
    plan = ParallelPlan(dp=64, ep=64 if moe and m.require_moe().num_experts % 64 == 0 else 1, recompute="selective",
                        recompute_modules=recompute_modules, offload_modules=offload)
    errs = plan_errors(m, tr, 64, plan)
    assert any(why in e for e in errs), errs


def test_unknown_module_names_are_refused():
    with pytest.raises(ValueError, match="unknown offload module"):
        ParallelPlan(offload_modules=("expert_fc2",))


def test_only_megatron_writes_it():
    m = get_model("qwen3-30b-a3b")
    plan = ParallelPlan(dp=64, ep=8, offload_modules=("expert_fc1",))
    tr = TrainingSpec(seq_len=4096, global_batch=512)
    assert not launcher_errors(plan, m, tr, "megatron")
    for launcher in ("torchtitan", "deepspeed", "maxtext"):
        assert any("--offload-modules" in e for e in launcher_errors(plan, m, tr, launcher)), launcher


def test_the_cli_pins_and_refuses_it():
    base = ("--model", "qwen3-30b-a3b", "--cluster", "h100x16", "--ep", "8", "--top", "1", "--json")
    r = run_cli(*base, "--offload-modules", "expert_fc1,moe_act")
    assert r.exit_code == 0, r.stderr[-400:]
    plan = json.loads(r.stdout)["plans"][0]["plan"]
    assert plan["offload_modules"] == ["expert_fc1", "moe_act"]
    r = run_cli(*base, "--offload-modules", "expert_fc9")
    assert r.exit_code == 2 and "unknown offload module" in r.stderr and "Traceback" not in r.stderr
    r = run_cli(*base, "--offload-modules", "expert_fc1", "--framework", "fsdp")
    assert r.exit_code == 2 and "--offload-modules" in r.stderr, r.stderr


def test_explain_shows_what_offloading_the_experts_frees():
    # not searched: `plan explain` offers it beside the plan's other neighbours, with the HBM it frees and its time,
    # where the stack runs it on an MoE model, and takes it away from a plan that has it
    from planner.analysis.explain import why_not

    ctx = _ctx()
    for plan, name in ((_plan(), "offload experts"), (_plan(("expert_fc1", "moe_act")), "no offload")):
        ev = evaluate(ctx, plan)
        row = next(r for r in why_not(ctx, ev, 184.0) if r["change"] == name)
        other = evaluate(ctx, plan.model_copy(update={"offload_modules": () if plan.offload_modules
                                                      else ("expert_fc1", "moe_act")}))
        if other.memory["peak_gib"] > 184.0:
            assert row["verdict"] == "does not fit", row
        else:
            dpeak = other.memory["peak_gib"] - ev.memory["peak_gib"]
            assert f"peak {dpeak:+.1f} GiB" in row["detail"], row
    dense = Context(get_model("llama-3.1-8b"), ClusterSpec(hardware=get_hardware("h100-sxm-80gb"), count=8),
                    TrainingSpec(seq_len=4096, global_batch=64))
    ev = evaluate(dense, ParallelPlan(dp=8, micro_batch=1))
    assert all(r["change"] != "offload experts" for r in why_not(dense, ev, 78.0))
    fsdp = Context(get_model("qwen3-30b-a3b"), ClusterSpec(hardware=get_hardware("h100-sxm-80gb"), count=8),
                   TrainingSpec(seq_len=4096, global_batch=64, framework="fsdp"))
    ev = evaluate(fsdp, ParallelPlan(dp=8, ep=8, zero_stage=3, micro_batch=1))
    assert all(r["change"] != "offload experts" for r in why_not(fsdp, ev, 78.0))
