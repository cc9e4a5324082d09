"""gpt-oss as Megatron runs it (issue 23): its routed-expert epilogue in TEGroupedMLP: the GLU clamp before the fused
quick-GeGLU and the fc2 bias scaled by the router probabilities are eager PyTorch ops (megatron-core core_r0.15-0.19
transformer/moe/experts.py, fusions/fused_bias_geglu.py), memory-bound passes over every token's top_k expert copies;
the TE op fuser's fused grouped MLP (Megatron-Bridge's 26.06+ GB200 MXFP8 presets) runs none of them. And its YaRN
rotary embedding, which Megatron runs unfused."""

from __future__ import annotations

import math

import pytest

from planner.catalog.hardware import get_hardware
from planner.catalog.models import get_model
from planner.costmodel import Context, evaluate
from planner.costmodel.base import plan_shape
from planner.costmodel.compute import GLU_CLAMP_BYTES_PER_INTER, expert_epilogue_s, fc2_bias_bytes
from planner.specs import ClusterSpec, ParallelPlan, TrainingSpec


def _ctx(name: str = "gpt-oss-120b", framework: str = "megatron", **train) -> tuple[Context, ParallelPlan]:
    cluster = ClusterSpec(hardware=get_hardware("gb200-nvl72"), count=64)
    tr = TrainingSpec(seq_len=4096, global_batch=1280, framework=framework, moe_force_balanced=True, **train)
    return Context(get_model(name), cluster, tr), ParallelPlan(tp=1, pp=1, dp=64, ep=64, micro_batch=4, zero_stage=1)


def _moe_kind(ctx: Context):
    return next(k for k in ctx.kinds if k.moe)


def test_fc2_bias_bytes_per_element():
    """bf16 probabilities (all-to-all): b*p W2, t + bp R2 R2 W2, cat R2 W2 = 12 forward; bias and probability gradients
    (grad x p, grad x b: R2 W2 + sum R2 each) = 12 backward. fp32 probabilities (flex): b*p W4, t + bp R2 R4 W4, cat
    R4 W4, cast R4 W2 = 28 forward; the casts' gradients 2 x 6 + the two products 2 x 12 = 36 backward."""
    assert fc2_bias_bytes(2.0) == (12.0, 12.0)
    assert fc2_bias_bytes(4.0) == (28.0, 36.0)
    # the clamp: two torch.clamp (R2 W2 per fc1 element) + torch.cat (R2 W2), 2 fc1 elements per intermediate element
    assert GLU_CLAMP_BYTES_PER_INTER == {"fwd": 2 * (4 + 4), "bwd": 2 * (6 + 4)}


def test_gpt_oss_epilogue_on_gb200():
    """gpt-oss-120b, 16384 tokens per micro-batch on one GB200 (8 TB/s), EP 64 with Megatron's forced balancing on
    random logits (busiest rank 1 + sqrt(2 ln 64 x 63 / n), n = 16384 x 64 x 4 assignments: +1.1%): 4 copies of
    each token, each 2880 x 16 B (clamp) + 2880 x 12 B (fc2 bias) forward, 2880 x (20 + 12) B backward."""
    ctx, plan = _ctx()
    shape = plan_shape(ctx, plan)
    fwd, bwd = expert_epilogue_s(ctx, shape, _moe_kind(ctx))
    copies = 16384 * 4 * (1 + math.sqrt(2 * math.log(64) * 63 / (16384 * 64 * 4)))
    assert fwd == pytest.approx(copies * 2880 * (16 + 12) / 8e12, rel=1e-9)  # ~0.66 ms
    assert bwd == pytest.approx(copies * 2880 * (20 + 12) / 8e12, rel=1e-9)  # ~0.76 ms
    # the flex dispatcher hands the experts fp32 probabilities: the bias passes grow to 28 / 36 B
    fctx, _ = _ctx(moe_dispatcher="flex")
    ffwd, fbwd = expert_epilogue_s(fctx, plan_shape(fctx, plan), _moe_kind(fctx))
    assert ffwd == pytest.approx(copies * 2880 * (16 + 28) / 8e12, rel=1e-9)
    assert fbwd == pytest.approx(copies * 2880 * (20 + 36) / 8e12, rel=1e-9)


def test_epilogue_reaches_the_layer_time_and_its_trace():
    ctx, plan = _ctx()
    ev = evaluate(ctx, plan)
    term = next(t for t in ev.trace.factors if t.name.startswith("layer_compute_s[MoE"))
    assert term.inputs["expert_epilogue_fwd_s"] > 0 and term.inputs["expert_epilogue_bwd_s"] > 0
    fused_ctx, _ = _ctx(moe_fused_grouped_mlp=True)
    fused = evaluate(fused_ctx, plan)
    # five micro-batches x 36 MoE layers x (fwd + bwd) of the epilogue, nothing else changes
    epi = term.inputs["expert_epilogue_fwd_s"] + term.inputs["expert_epilogue_bwd_s"]
    assert ev.time_breakdown["compute_s"] - fused.time_breakdown["compute_s"] == pytest.approx(5 * 36 * epi, rel=1e-6)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3"])
def test_no_epilogue_without_clamp_or_expert_bias(name):
    ctx, plan = _ctx(name)
    plan = ParallelPlan(tp=1, pp=1, dp=64, ep=8, micro_batch=1, zero_stage=1)
    assert expert_epilogue_s(ctx, plan_shape(ctx, plan), _moe_kind(ctx)) == (0.0, 0.0)


def test_only_megatron_runs_it_eager_and_only_megatron_fuses_it():
    ctx, plan = _ctx(framework="fsdp")
    assert expert_epilogue_s(ctx, plan_shape(ctx, plan), _moe_kind(ctx)) == (0.0, 0.0)
    with pytest.raises(ValueError, match="op-fuser"):
        TrainingSpec(seq_len=4096, global_batch=8, framework="fsdp", moe_fused_grouped_mlp=True)


def test_yarn_rope_runs_unfused_in_megatron():
    """gpt-oss's YaRN rotary embedding (Megatron --position-embedding-type yarn) runs op by op: Megatron-LM switches
    the RoPE fusion off for every position embedding type but 'rope'. 64 query + 8 key heads of 64: 4608 elements per
    token, 20 B forward and 16 B backward beyond one fused kernel's read and write."""
    from planner.costmodel.compute import UNFUSED_ROPE_EXTRA_BYTES, unfused_rope_s

    assert UNFUSED_ROPE_EXTRA_BYTES == {"fwd": (4 + 6 + 4 + 6 + 4) - 4, "bwd": (4 + 4 + 2 + 4 + 6) - 4}
    ctx, plan = _ctx()
    fwd, bwd = unfused_rope_s(ctx, plan_shape(ctx, plan))
    assert fwd == pytest.approx(16384 * (64 + 8) * 64 * 20 / 8e12, rel=1e-12)  # 0.19 ms per layer
    assert bwd == pytest.approx(16384 * (64 + 8) * 64 * 16 / 8e12, rel=1e-12)
    # a plain rope (Llama 3's scaling) is fused; DeepSeek-V3's YaRN sits in MLA's own path; other stacks price theirs
    for name in ("llama-3.1-8b", "deepseek-v3"):
        other, _ = _ctx(name)
        assert unfused_rope_s(other, plan_shape(other, plan)) == (0.0, 0.0), name
    fsdp, _ = _ctx(framework="fsdp")
    assert unfused_rope_s(fsdp, plan_shape(fsdp, plan)) == (0.0, 0.0)


def test_cudnn_attention_head_dim_64():
    """cuDNN's fused attention at head dim 64 against 128 (FlashAttention-3 paper Fig. 5-6, H100 BF16): causal forward
    363 / 518 TFLOPS at 4k, backward 417 / 499, timed 1 : 2.5 as the cost model does -> 0.793; at 8k 0.797."""
    from planner.costmodel.base import CUDNN_ATTN_HEAD_DIM_REL, attention_head_dim_rel

    at_4k = (1 / 518 + 2.5 / 499) / (1 / 363 + 2.5 / 417)
    at_8k = (1 / 529 + 2.5 / 518) / (1 / 379 + 2.5 / 432)
    assert at_4k == pytest.approx(0.793, abs=5e-4) and at_8k == pytest.approx(0.797, abs=5e-4)
    assert CUDNN_ATTN_HEAD_DIM_REL[64] == pytest.approx((at_4k + at_8k) / 2, abs=1e-3)
    assert attention_head_dim_rel(get_model("gpt-oss-120b")) == CUDNN_ATTN_HEAD_DIM_REL[64]
    for name in ("llama-3.1-8b", "deepseek-v3"):  # head dim 128; MLA's q/k 192
        assert attention_head_dim_rel(get_model(name)) == 1.0
    megatron, _ = _ctx()
    fsdp, _ = _ctx(framework="fsdp")
    assert megatron.attn_head_dim_rel == CUDNN_ATTN_HEAD_DIM_REL[64] and fsdp.attn_head_dim_rel == 1.0


def test_gb200_gpt_oss_rows_land_within_reach():
    """The published GB200 gpt-oss-120b rows (Megatron-Bridge 26.02-26.08 tables, EP 64, micro-batch 4): -16.5% to
    -20.9% (BF16) and -14% (MXFP8) before these mechanisms, -8.8% to -13.7% and -9.6% / -10.5% with them; the 26.06 /
    26.08 MXFP8 rows -11.4% / -12.3% -> -14.2% / -15.1% once their presets' FP8 dot-product attention is priced
    (validate.FP8_DPA_RECIPES). A regression guard at 15.5%; the flagged 26.06.01 regression row (reliability C) is
    left out."""
    from planner.analysis.validate import load_runs, validate_runs
    from planner.catalog.data import data_dir

    runs = [r for f in ("moe_runs_added.yaml", "known_runs_added.yaml") for r in load_runs(data_dir("runs") / f)
            if "gb200-gptoss" in r["id"] and r["reliability"] == "A"]
    assert len(runs) == 6
    errors = {r["id"]: r["step_time_error"] for r in validate_runs(runs)["runs"]}
    assert all(abs(e) <= 0.155 for e in errors.values()), errors


def test_expert_tensor_parallel_shards_run_every_copy():
    """With ETP 2 each shard of an expert runs every token copy routed to the expert, half its width: the clamp's bytes
    per device stay those of tokens / tp x top_k full-width copies, the fc2 bias (full-width partial sums) doubles."""
    ctx, _ = _ctx()
    plan = ParallelPlan(tp=2, pp=1, dp=32, ep=32, etp=2, micro_batch=4, zero_stage=1, sequence_parallel=True)
    shape = plan_shape(ctx, plan)
    from planner.costmodel.moe import expert_load

    copies = 16384 / 2 * 4 * 2 * expert_load(ctx, shape)
    fwd, _ = expert_epilogue_s(ctx, shape, _moe_kind(ctx))
    assert fwd == pytest.approx(copies * (2880 / 2 * 16 + 2880 * 12) / 8e12, rel=1e-12)
