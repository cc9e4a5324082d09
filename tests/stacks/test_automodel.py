"""NeMo AutoModel as a costing stack (planner/stacks/automodel.py): its benchmark runs are scored with its own traits,
its force-balanced gate routes round robin, and DeepEP sends a token once per target rank."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from planner.analysis.validate import infer_framework, run_inputs
from planner.catalog.hardware import get_hardware
from planner.catalog.models import get_model
from planner.costmodel import Context, evaluate
from planner.costmodel.base import plan_shape
from planner.costmodel.expert import ranks_per_token
from planner.costmodel.moe import expert_load, groups_per_token, permute_mode, router_s
from planner.specs import ClusterSpec, ParallelPlan, TrainingSpec
from planner.specs.dims import plan_errors
from planner.stacks import FRAMEWORKS, traits

RUNS = Path(__file__).resolve().parents[2] / "runs" / "moe_runs_added.yaml"


def _automodel_rows() -> list[dict]:
    return [r for r in yaml.safe_load(RUNS.read_text()) if r["id"].startswith("automodel-")]


def _ctx(model: str, devices: int, framework: str = "automodel", balanced: bool = True) -> Context:
    cluster = ClusterSpec(hardware=get_hardware("h100-sxm-80gb"), count=devices)
    return Context(get_model(model), cluster, TrainingSpec(seq_len=4096, global_batch=512, framework=framework,
                                                           moe_force_balanced=balanced))


def test_a_costing_stack_is_not_a_planning_choice():
    st = traits("automodel")
    assert not st.plannable and "automodel" not in FRAMEWORKS
    assert not st.pytorch_native_kernels and st.moe_dispatcher == "flex" and st.moe_forced_routing == "round_robin"


def test_the_published_rows_are_scored_as_automodel():
    rows = _automodel_rows()
    assert len(rows) == 6
    for r in rows:
        ctx, _ = run_inputs(r)
        assert ctx.train.framework == "automodel", r["id"]
        assert infer_framework({k: v for k, v in r.items() if k != "stack"}) == "automodel"  # from the citation


@pytest.mark.parametrize("run,per_group,expected", [
    ("automodel-deepseek-v3-bf16-256xh100", 4, 2.0),  # EP 64: 8 consecutive experts fill 2 ranks of 4
    ("automodel-deepseek-v3-bf16-256xh100", 32, 1.0),  # ... within one node of 8 ranks (32 experts)
    ("automodel-kimi-k2-bf16-256xh100", 12, 4 / 3),  # EP 32: starts 0, 8, 4 (mod 12) span 1, 2, 1 ranks
    ("automodel-qwen3-30b-a3b-bf16-8xh100", 16, 1.0),  # EP 8
    ("automodel-gpt-oss-120b-bf16-64xh100", 2, 2.0),  # EP 64: top-4 over ranks of 2
    ("automodel-gpt-oss-20b-bf16-8xh100", 4, 1.0),  # EP 8: top-4 over ranks of 4
])
def test_round_robin_targets(run, per_group, expected):
    """FakeBalancedGate: token i -> experts (i top_k + j) mod E (Automodel@8d9bfb9 components/moe/layers.py),
    counted token by token over one period of the pattern."""
    ctx, fixed = run_inputs(next(r for r in _automodel_rows() if r["id"] == run))
    e = ctx.model.require_moe()
    brute = [len({((i * e.top_k + j) % e.num_experts) // per_group for j in range(e.top_k)})
             for i in range(e.num_experts)]
    assert math.isclose(sum(brute) / len(brute), expected)
    assert math.isclose(groups_per_token(ctx, per_group), expected)
    if per_group == e.num_experts // fixed["ep"]:
        assert math.isclose(ranks_per_token(ctx, plan_shape(ctx, ParallelPlan(**{
            k: v for k, v in fixed.items() if k in ("dp", "ep", "pp", "micro_batch")}, zero_stage=3))), expected)


def test_random_routing_targets_and_load():
    """Uniform routing (Megatron's forced balance draws random logits): G (1 - (1 - 1/G)^top_k) distinct groups, and
    the busiest rank's sampling imbalance; the round-robin gate is exactly balanced."""
    ctx = _ctx("deepseek-v3", 64, framework="megatron")
    assert math.isclose(groups_per_token(ctx, 4), 64 * (1 - (63 / 64) ** 8))
    shape = plan_shape(ctx, ParallelPlan(dp=64, ep=64, micro_batch=1, zero_stage=1))
    assert expert_load(ctx, shape) > 1.0 and router_s(ctx, shape, ctx.kinds[-1]) > 0
    am = _ctx("deepseek-v3", 64)
    shape = plan_shape(am, ParallelPlan(dp=64, ep=64, micro_batch=1, zero_stage=3))
    assert expert_load(am, shape) == 1.0 and router_s(am, shape, am.kinds[-1]) == 0.0
    assert ranks_per_token(am, shape) == 2.0 and permute_mode(am) == "fused"
    # torchtitan's forced balance overrides the top-k of a router that still scores (round_robin_scored)
    titan = _ctx("deepseek-v3", 64, framework="fsdp")
    shape = plan_shape(titan, ParallelPlan(dp=64, ep=64, micro_batch=1, zero_stage=3))
    assert expert_load(titan, shape) == 1.0 and router_s(titan, shape, titan.kinds[-1]) > 0
    assert ranks_per_token(titan, shape) == 2.0


def test_deepep_sends_one_copy_per_rank():
    """Inside one NVLink domain a flex dispatch moves tokens x ranks_per_token x h, not x top_k: Qwen3-30B-A3B at EP 8
    with the round-robin gate sends each token to one rank, 1/8 of the top-8 copies."""
    am = _ctx("qwen3-30b-a3b", 8)
    plan = ParallelPlan(dp=8, ep=8, micro_batch=4, zero_stage=3, recompute="full")
    rr = evaluate(am, plan).trace.value("ep_comm_s")
    learned = evaluate(_ctx("qwen3-30b-a3b", 8, balanced=False), plan).trace.value("ep_comm_s")
    spread = groups_per_token(_ctx("qwen3-30b-a3b", 8, balanced=False), 16)
    assert math.isclose(spread, 8 * (1 - (7 / 8) ** 8))
    assert 0.8 * spread < learned / rr < 1.3 * spread  # the link latency and the sampling imbalance aside


def test_moe_parallelizer_refuses_tp_and_cp():
    am = TrainingSpec(global_batch=64, framework="automodel")
    errs = plan_errors(get_model("qwen3-30b-a3b"), am, 8, ParallelPlan(tp=2, dp=4, ep=4, zero_stage=3))
    assert errs == ["tp=2 is not supported by NeMo AutoModel's MoE parallelizer (it asserts tp 1)"]
    assert plan_errors(get_model("llama-3.1-8b"), am, 8, ParallelPlan(tp=2, dp=4, zero_stage=3)) == []


def test_one_pipeline_schedule_per_local_batch():
    """AutoModel with PP runs one pipeline schedule per local batch and repeats it for gradient accumulation
    (Automodel@8d9bfb9 recipes/llm/train_ft.py _run_train_optim_step): DeepSeek-V3 on 1024 H100s (GBS 8192, FSDP 256,
    LBS 8 = 8 micro-batches) runs 4 schedules, each with its fill and drain; the same micro-batches as one schedule
    fill and drain once."""
    from planner.costmodel.pipeline import pipeline_step_time, schedules_per_step

    run = next(r for r in _automodel_rows() if r["id"] == "automodel-deepseek-v3-bf16-1024xh100")
    assert run["train"]["pp_schedule_microbatches"] == 8
    ctx, fixed = run_inputs(run)
    plan = ParallelPlan(**{k: v for k, v in fixed.items() if k in ParallelPlan.model_fields})
    shape = plan_shape(ctx, plan)
    assert (shape.nmb, schedules_per_step(ctx, shape)) == (32, 4)
    once = copy.deepcopy(run)
    del once["train"]["pp_schedule_microbatches"]
    ctx1, _ = run_inputs(once)
    b4, b1 = evaluate(ctx, plan).trace.value("bubble_s"), evaluate(ctx1, plan).trace.value("bubble_s")
    assert math.isclose(b4, 4 * b1, rel_tol=1e-9)
    stage = [1.0, 1.2, 1.1, 1.0]
    assert math.isclose(pipeline_step_time(stage, 32, "interleaved", 8, schedules=4) - 32 * 1.2,
                        4 * (pipeline_step_time(stage, 32, "interleaved", 8) - 32 * 1.2))


@pytest.mark.parametrize("run,rows,local", [
    ("automodel-qwen3-30b-a3b-bf16-8xh100", 8192, 16),  # 4 x 4096 tokens x 8 ranks x top-8 / 128 experts
    ("automodel-gpt-oss-20b-bf16-8xh100", 8192, 4),  # 2 x 4096 tokens x 8 ranks x top-4 / 32 experts
])
def test_single_node_rows_run_long_expert_gemms_gpu_bound(run, rows, local):
    """The two single-node rows (EP 8 inside one DGX-H100) give every local expert 8192 rows, their routed experts
    are most of the MoE layer's forward and the host launches exposed after DeepEP's sync a small part (Qwen3-30B-A3B
    4%, gpt-oss-20b 12%): GPU-bound rows, the cleanest in-situ view of the per-expert cuBLAS GEMMs
    (calibration.MOE_GROUPED_GEMM_REL_EFFICIENCY's evidence)."""
    from planner.costmodel.compute import layer_compute
    from planner.costmodel.moe import local_experts, tokens_per_local_expert

    ctx, fixed = run_inputs(next(r for r in _automodel_rows() if r["id"] == run))
    plan = ParallelPlan(**{k: v for k, v in fixed.items() if k in ParallelPlan.model_fields})
    shape = plan_shape(ctx, plan)
    assert (tokens_per_local_expert(ctx, shape), local_experts(ctx, shape)) == (rows, local)
    c = layer_compute(ctx, shape, next(k for k in ctx.kinds if k.moe))
    assert 0 < c.host_fwd < 0.15 * c.fwd and c.experts > 0.45 * c.fwd
