"""Issue 22: FP8 weight copies per stack, as the stacks' code keeps them (planner.costmodel.memory:
fp8_weight_copy_bytes, fp8_gathered_weight_bytes; Stack.fp8_weight_cache / fp8_param_gather_option).

Transformer Engine v2.9 (the 25.11 NeMo container's): a cached quantized weight per linear from the step's first
micro-batch on (module/base.py get_weight_workspace, cache_name "weight"), row-wise FP8 data plus on Hopper its
transpose (tensor/storage/float8_tensor_storage.py update_usage, utils.py is_non_tn_fp8_gemm_supported), MXFP8 row- and
column-wise data with an E8M0 scale per 32 elements each (tensor/mxfp8_tensor.py). With --fp8-param-gather the FP8
weight is the parameter itself. torchtitan + torchao: weights cast per GEMM; the FSDP float8 all-gather gathers 1-byte
data (torchao float8/fsdp_utils.py fsdp_pre_all_gather).

The parameter counts are Llama 3.1 8B's own (meta-llama/Llama-3.1-8B config.json: hidden 4096, 32 layers, 32 heads of
128, 8 KV heads, FFN 14336): per layer q, k, v, o = 4096 x (4096 + 2 x 1024) + 4096 x 4096 and gate, up, down =
3 x 4096 x 14336.
"""

from __future__ import annotations

import pytest

from planner.analysis.validate import infer_fp8_param_gather, load_runs, run_specs, run_stack
from planner.catalog.data import data_dir
from planner.catalog.hardware import parse_cluster
from planner.catalog.models import get_model
from planner.costmodel import Context
from planner.costmodel.evaluate import screen_memory
from planner.costmodel.memory import te_fp8_weight_bytes
from planner.specs import ParallelPlan, TrainingSpec

GIB = 2.0**30
LINEAR_PER_LAYER = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336  # 218,103,808
LINEAR_8B = 32 * LINEAR_PER_LAYER  # 6,979,321,856: the FP8 GEMMs' weights (embedding, LM head, norms stay 16-bit)


def _mem(cluster: str, plan: ParallelPlan, **train):
    ctx = Context(get_model("llama-3.1-8b"), parse_cluster(cluster), TrainingSpec(seq_len=8192, **train))
    return screen_memory(ctx, plan).peak


def test_te_bytes_per_weight_element():
    # tensorwise / delayed (Float8Tensor): 1 B data + 1 B transpose on Hopper (TN-only FP8 GEMMs), data only on
    # Blackwell; MXFP8: 2 x (1 B + 1/32 B of E8M0 scale); blockwise: 2 x (1 B + 4 B per 128 x 128 block)
    assert te_fp8_weight_bytes("tensorwise", False) == 2.0
    assert te_fp8_weight_bytes("delayed", False) == 2.0
    assert te_fp8_weight_bytes(None, True) == 1.0
    assert te_fp8_weight_bytes("mxfp8", True) == 2.0625
    assert te_fp8_weight_bytes("blockwise", False) == pytest.approx(2.0 + 8.0 / 16384)


PLAN = ParallelPlan(tp=1, pp=1, dp=8, zero_stage=1, micro_batch=1, recompute="full")


@pytest.mark.parametrize("cluster,recipe,gather,extra_per_param", [
    ("h100x8", "tensorwise", False, 2.0),  # TE's cache beside the bf16 weights: data + transpose
    ("b200x8", "tensorwise", False, 1.0),  # Blackwell: one copy serves both GEMMs
    ("b200x8", "mxfp8", False, 2.0625),
    ("h100x8", "tensorwise", True, 0.0),  # FP8 primary weights with their transpose in place of the bf16 copy
    ("b200x8", "tensorwise", True, -1.0),  # FP8 primary weights, 1 B, in place of 2 B
    ("b200x8", "mxfp8", True, 0.0625),  # MXFP8 parameters: both usages and their scales in place of bf16
])
def test_megatron_fp8_weight_bytes_count_the_linears_only(cluster, recipe, gather, extra_per_param):
    common = dict(global_batch=8, framework="megatron")
    bf16 = _mem(cluster, PLAN, **common)
    fp8 = _mem(cluster, PLAN, dtype="fp8", fp8_recipe=recipe, fp8_param_gather=gather, **common)
    assert (fp8.weights - bf16.weights) == pytest.approx(LINEAR_8B * extra_per_param)


def test_megatron_zero3_fp8_parameters_shard_and_gather_in_fp8():
    # Megatron-FSDP on Blackwell. bf16 parameters: TE's cache holds the whole local matrix (not sharded), 1 B each
    plan = ParallelPlan(tp=1, pp=1, dp=8, zero_stage=3, micro_batch=1, recompute="full")
    common = dict(global_batch=8, framework="megatron")
    bf16 = _mem("b200x8", plan, **common)
    cached = _mem("b200x8", plan, dtype="fp8", fp8_recipe="tensorwise", **common)
    assert cached.weights - bf16.weights == pytest.approx(LINEAR_8B * 1.0)
    assert cached.buffers == bf16.buffers
    # FP8 parameters: 1 B shards (was 2 B / 8) and 1-byte gathered layers (current + prefetched)
    fp8w = _mem("b200x8", plan, dtype="fp8", fp8_recipe="tensorwise", fp8_param_gather=True, **common)
    assert bf16.weights - fp8w.weights == pytest.approx(LINEAR_8B * 1.0 / 8)
    assert bf16.buffers - fp8w.buffers == pytest.approx(2 * LINEAR_PER_LAYER * 1.0)
    # MXFP8 parameters: the shard keeps both usages (the column-wise blocks cannot be made from the row-wise ones)
    mx = _mem("b200x8", plan, dtype="fp8", fp8_recipe="mxfp8", fp8_param_gather=True, **common)
    assert mx.weights - bf16.weights == pytest.approx(LINEAR_8B * 0.0625 / 8)
    assert mx.buffers - bf16.buffers == pytest.approx(2 * LINEAR_PER_LAYER * 0.0625)


def test_torchtitan_float8_all_gather_gathers_one_byte_weights():
    plan = ParallelPlan(tp=1, pp=1, dp=8, zero_stage=3, micro_batch=1, recompute="selective")
    common = dict(global_batch=8, framework="fsdp", dtype="fp8", fp8_recipe="tensorwise", torch_compile=True)
    bf16_ag = _mem("h100x8", plan, **common)
    fp8_ag = _mem("h100x8", plan, fp8_param_gather=True, **common)
    # torchao casts per GEMM: no weight copy in the states either way
    assert fp8_ag.weights == bf16_ag.weights
    assert bf16_ag.buffers - fp8_ag.buffers == pytest.approx(2 * LINEAR_PER_LAYER * 1.0)  # 0.41 GiB
    # FSDP under PP keeps the stage unsharded: every linear of the stage at 1 B
    pp = ParallelPlan(tp=1, pp=2, dp=4, zero_stage=3, micro_batch=1, recompute="full")
    d = _mem("h100x8", pp, **common).buffers - _mem("h100x8", pp, fp8_param_gather=True, **common).buffers
    assert d == pytest.approx(16 * LINEAR_PER_LAYER * 1.0)


def test_fp8_param_gather_needs_fp8_and_a_stack_that_has_it():
    with pytest.raises(ValueError, match="needs dtype fp8"):
        TrainingSpec(global_batch=8, fp8_param_gather=True)
    with pytest.raises(ValueError, match="deepspeed has none"):
        TrainingSpec(global_batch=8, framework="deepspeed", dtype="fp8", fp8_param_gather=True)


def _run(file: str, rid: str) -> dict:
    return next(r for r in load_runs(data_dir("runs") / file) if r["id"] == rid)


def test_runs_state_or_infer_the_setting():
    # Megatron-Bridge's FP8 recipes keep FP8 parameters (v0.2.0 mixed_precision.py fp8_param_gather = True)
    mb = _run("known_runs_dev.yaml", "mbridge2511-dgx-b200-llama31_405b-fp8-cs-128gpu")
    assert infer_fp8_param_gather(mb, "megatron") and run_stack(mb).fp8_param_gather
    # torchtitan's rows: only where the record states it (torchao's "tensorwise with float8 all-gather" rows)
    tt = _run("known_runs_dev.yaml", "torchtitan-llama31-405b-512xh100-1f1b")
    assert not run_stack(tt).fp8_param_gather
    ao = _run("known_runs_memory.yaml", "torchao-torchtitan-llama3-8b-8xb200-fsdp-compile-float8-tensorwise")
    assert run_stack(ao).fp8_param_gather
    mx = _run("known_runs_memory.yaml", "torchao-torchtitan-llama3-8b-8xb200-fsdp-compile-mxfp8")
    assert not run_stack(mx).fp8_param_gather
    # a bf16 run never has it
    bf = _run("known_runs_memory.yaml", "torchao-torchtitan-llama3-8b-8xb200-fsdp-compile-bf16")
    assert not infer_fp8_param_gather(bf, "fsdp")


def test_deepseek_v3_own_framework_keeps_no_te_cache():
    ds = _run("known_runs_dev.yaml", "deepseek-v3-2048xh800")
    _, _, train = run_specs(ds)
    assert train.fp8_weight_cache is False and not train.fp8_param_gather


def test_megatron_fp8_param_gather_needs_the_distributed_optimizer():
    # megatron-core 0.19.2 validate_args: "--fp8-param-gather only supported with distributed optimizer, torch fsdp2,
    # megatron fsdp, or inference mode"
    from planner.stacks import traits

    m = get_model("llama-3.1-8b")
    train = TrainingSpec(global_batch=8, dtype="fp8", fp8_param_gather=True)
    errs = traits("megatron").plan_errors(m, train, ParallelPlan(dp=8, zero_stage=0, micro_batch=1))
    assert any("--fp8-param-gather" in e for e in errs)
    assert not traits("megatron").plan_errors(m, train, ParallelPlan(dp=8, zero_stage=1, micro_batch=1))


def test_megatron_fp8_param_gather_beside_optimizer_offload_needs_delayed_scaling():
    """megatron-core 0.19.2 validate_args: "When `--fp8-param-gather` is enabled, the optimizer cpu offload must be
    used in conjunction with `--fp8-recipe delayed`" (tests/consumers/test_megatron_consumer.py holds it against
    megatron). Before, the search offloaded the optimizer of such plans (DeepSeek-V3 on 64 B200, MXFP8) and wrote files
    megatron refused; pinned, `--offload` wrote them too."""
    from support import one_line_error, run_cli

    from planner.stacks import traits

    m = get_model("llama-3.1-8b")
    plan = ParallelPlan(dp=8, zero_stage=1, micro_batch=1, offload_optimizer=True)
    for recipe in (None, "tensorwise", "blockwise", "mxfp8"):
        train = TrainingSpec(global_batch=8, dtype="fp8", fp8_recipe=recipe, fp8_param_gather=True)
        assert any("--fp8-recipe delayed" in e for e in traits("megatron").plan_errors(m, train, plan)), recipe
        assert not traits("megatron").plan_errors(m, train, plan.model_copy(update={"offload_optimizer": False}))
    delayed = TrainingSpec(global_batch=8, dtype="fp8", fp8_recipe="delayed", fp8_param_gather=True)
    assert not traits("megatron").plan_errors(m, delayed, plan)
    msg = one_line_error(run_cli("--model", "llama-3.1-8b", "--cluster", "h100x8", "--dtype", "fp8",
                                 "--fp8-param-gather", "--offload", "--launcher", "megatron"))
    assert "--fp8-recipe delayed" in msg


def test_cli_flag_reaches_the_costed_plan_and_the_launch_contract():
    # --fp8-param-gather on Hopper, tensorwise: the FP8 primary weight (data + transpose, 2 B) replaces the bf16 copy
    # (2 B), so what goes is TE's cache, 2 B per local linear weight (TP 2: half of the 8B's linears); the JSON says
    # so, and a launcher that cannot write the setting is refused
    import json

    from support import run_cli

    args = ("--model", "llama-3.1-8b", "--cluster", "h100x8", "--dtype", "fp8", "--tp", "2", "--pp", "1",
            "--zero", "1", "--mbs", "1", "--recompute", "selective", "--gbs", "64", "--launcher", "megatron")
    plain, gathered = (json.loads(run_cli(*args, *extra, "--json").stdout) for extra in ((), ("--fp8-param-gather",)))
    assert plain["training"]["fp8_param_gather"] is False and gathered["training"]["fp8_param_gather"] is True
    saved_gib = plain["plans"][0]["memory"]["weights_gib"] - gathered["plans"][0]["memory"]["weights_gib"]
    assert saved_gib == pytest.approx(2.0 * LINEAR_8B / 2 / GIB, rel=1e-6)
    refused = run_cli(*args[:-2], "--launcher", "torchtitan", "--fp8-param-gather")
    assert refused.exit_code == 2 and "FP8 parameter gather" in refused.stderr
