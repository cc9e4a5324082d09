"""Emitted Megatron-LM args through megatron-core 0.19.2's own parse_args + validate_args, the
TransformerConfig pretrain_gpt builds from them, and RankGenerator's process groups."""

from __future__ import annotations

import json

import pytest

from consumers.cases import (
    CONSUMER_CASES,
    DEEPSEEK_V3,
    GOLDEN_CASES,
    LLAMA31_8B,
    LLAMA31_405B,
    MIXTRAL_8X7B,
    SEARCH_CASE_NAMES,
    Case,
    catalog_cases,
    cluster,
    search_cases,
)
from consumers.conftest import accepted, rejected, require, run_checker
from consumers.rebuild import argv_of_script, megatron_spec, same_model
from consumers.scenarios import run_id, scenario_run, written, written_keys
from planner.catalog.models import load_model
from planner.costmodel.memory import recompute_modules
from planner.costmodel.mtp import mtp_layer_units
from planner.costmodel.partition import stage_layer_counts
from planner.emit.megatron import pipeline_layout
from planner.launchers.job import make_job
from planner.specs import ParallelPlan, TrainingSpec

pytestmark = pytest.mark.consumers

B200_CASE = Case("llama8b-tp2-cp2-16xb200", LLAMA31_8B, cluster("b200-sxm-180gb", 16),
                 TrainingSpec(seq_len=16384, global_batch=32),
                 ParallelPlan(tp=2, cp=2, dp=4, micro_batch=1, zero_stage=1, recompute="full", recompute_layers=4))
ACCOUNT_CASE = Case("llama405b-pp8vpp8-account-embedding-loss-128xgb200", LLAMA31_405B, cluster("gb200-nvl72", 128),
                    TrainingSpec(seq_len=8192, global_batch=64, dtype="fp8"),
                    ParallelPlan(tp=4, pp=8, vpp=8, cp=2, dp=2, micro_batch=1, zero_stage=1, schedule="interleaved",
                                 account_embedding_loss=True))
# FP8 primary weights (--fp8-param-gather), as Megatron-Bridge's FP8 recipes run them; MXFP8 adds the grad-buffer reuse
FP8_PARAMS_CASE = Case("llama405b-fp8-param-gather-128xgb200", LLAMA31_405B, cluster("gb200-nvl72", 128),
                       TrainingSpec(seq_len=8192, global_batch=64, dtype="fp8", fp8_param_gather=True),
                       ParallelPlan(tp=4, pp=8, vpp=8, cp=2, dp=2, micro_batch=1, zero_stage=1, schedule="interleaved"))
MXFP8_PARAMS_CASE = Case("llama8b-mxfp8-param-gather-8xb200", LLAMA31_8B, cluster("b200-sxm-180gb", 8),
                         TrainingSpec(seq_len=8192, global_batch=16, dtype="fp8", fp8_recipe="mxfp8",
                                      fp8_param_gather=True),
                         ParallelPlan(tp=1, dp=8, micro_batch=1, zero_stage=1, recompute="selective"))
# the flex dispatcher with the HybridEP backend, as Megatron-Bridge's GB200 recipes run it (--moe-flex-backend hybridep)
HYBRIDEP_CASE = Case("mixtral-ep8-flex-hybridep-64xgb200", MIXTRAL_8X7B, cluster("gb200-nvl72", 64),
                     TrainingSpec(seq_len=4096, global_batch=256, moe_dispatcher="flex", moe_flex_backend="hybridep"),
                     ParallelPlan(dp=64, ep=8, etp=1, micro_batch=1, zero_stage=1, recompute="selective"))
# the flex dispatcher with DeepEP's kernels, as the search keeps it where it beats alltoall on Hopper (Mixtral 8x7B on
# 64 H100: planner.search.dispatchers)
DEEPEP_CASE = Case("mixtral-ep8-etp2-flex-deepep-64xh100", MIXTRAL_8X7B, cluster("h100-sxm-80gb", 64),
                   TrainingSpec(seq_len=4096, global_batch=256, moe_dispatcher="flex"),
                   ParallelPlan(tp=2, dp=32, ep=8, etp=2, micro_batch=4, zero_stage=1, recompute="selective",
                                sequence_parallel=True))
# and DeepSeek-V3's shared expert beside it (--moe-shared-expert-overlap, which megatron-core allows with flex from
# 0.18), as the search keeps flex for DeepSeek-V3 on 1024 H100
DEEPEP_SHARED_CASE = Case("deepseek-v3-ep256-flex-deepep-1024xh100", DEEPSEEK_V3, cluster("h100-sxm-80gb", 1024),
                          TrainingSpec(seq_len=4096, global_batch=1024, moe_dispatcher="flex"),
                          ParallelPlan(tp=4, pp=2, vpp=16, dp=128, ep=256, etp=1, micro_batch=1, zero_stage=1,
                                       recompute="none", schedule="interleaved"))
# layer splits only --pipeline-model-parallel-layout states: DeepSeek-V3's 61 layers (and its MTP module) over pp 4 x
# vpp 8, as the search proposes them (planner.search.engine._vpp_choices), and pinned first/last stage sizes that do
# not divide into the virtual stages
LAYOUT_CASE = Case("deepseek-v3-pp4vpp8-layout-1024xh100", DEEPSEEK_V3, cluster("h100-sxm-80gb", 1024),
                   TrainingSpec(seq_len=4096, global_batch=1024),
                   ParallelPlan(tp=2, pp=4, vpp=8, dp=128, ep=256, etp=1, micro_batch=1, zero_stage=1,
                                recompute="selective", schedule="interleaved"))
LAYOUT_FIRST_LAST_CASE = Case("mixtral-pp4vpp2-first7-last7-layout-64xh100", MIXTRAL_8X7B, cluster("h100-sxm-80gb", 64),
                              TrainingSpec(seq_len=4096, global_batch=256),
                              ParallelPlan(tp=2, pp=4, vpp=2, dp=8, ep=8, etp=1, micro_batch=1, zero_stage=1,
                                           schedule="interleaved", first_stage_layers=7, last_stage_layers=7))
# two MTP modules (written m*2), both in the last virtual stage of the last rank
LAYOUT_MTP_CASE = Case("deepseek-v3-mtp2-pp8vpp2-layout-1024xh100", DEEPSEEK_V3.model_copy(update={"mtp_layers": 2}),
                       cluster("h100-sxm-80gb", 1024), TrainingSpec(seq_len=4096, global_batch=1024),
                       ParallelPlan(tp=2, pp=8, vpp=2, dp=64, ep=64, etp=1, micro_batch=1, zero_stage=1,
                                    recompute="full", schedule="interleaved"))
# Megatron's batch-level EP overlap (--overlap-moe-expert-parallel-comm --delay-wgrad-compute) on DeepSeek-V3 and its
# one MTP layer, as the search keeps it on 1024 H100 (planner.search.dispatchers)
OVERLAP_CASE = Case("deepseek-v3-a2a-overlap-pp4vpp8-1024xh100", DEEPSEEK_V3, cluster("h100-sxm-80gb", 1024),
                    TrainingSpec(seq_len=4096, global_batch=1024, moe_a2a_overlap=True), LAYOUT_CASE.plan)
# FP8 primary weights beside the optimizer offloaded to the host: megatron takes the pair with delayed scaling only
# (planner.stacks.rules.fp8_param_gather_offload_needs_delayed)
FP8_PARAMS_OFFLOAD_CASE = Case("llama8b-fp8-delayed-param-gather-offload-8xh100", LLAMA31_8B,
                               cluster("h100-sxm-80gb", 8),
                               TrainingSpec(seq_len=8192, global_batch=16, dtype="fp8", fp8_recipe="delayed",
                                            fp8_param_gather=True),
                               ParallelPlan(dp=8, micro_batch=1, zero_stage=1, recompute="selective",
                                            offload_optimizer=True))
# the allgather dispatcher on a model with a shared expert: no --moe-shared-expert-overlap, which megatron takes with
# alltoall and flex only (TrainingSpec.shared_expert_overlap)
ALLGATHER_SHARED_CASE = Case("deepseek-v3-allgather-ep64-pp16-1024xh100", DEEPSEEK_V3, cluster("h100-sxm-80gb", 1024),
                             TrainingSpec(seq_len=4096, global_batch=1024, moe_dispatcher="allgather"),
                             ParallelPlan(pp=16, dp=64, ep=64, etp=1, micro_batch=1, zero_stage=1,
                                          recompute="selective", first_stage_layers=3, last_stage_layers=2))
EXTRA_CASES = [FP8_PARAMS_OFFLOAD_CASE, ALLGATHER_SHARED_CASE, B200_CASE, ACCOUNT_CASE, FP8_PARAMS_CASE,
               MXFP8_PARAMS_CASE, HYBRIDEP_CASE, DEEPEP_CASE, DEEPEP_SHARED_CASE, LAYOUT_CASE, LAYOUT_FIRST_LAST_CASE,
               LAYOUT_MTP_CASE, OVERLAP_CASE]
CASES = [c for c in CONSUMER_CASES + GOLDEN_CASES + catalog_cases() + EXTRA_CASES
         if "megatron_args.json" in c.emit(["megatron"])[0]]
BY_NAME = {c.name: c for c in CASES}
# the search's own choices are built lazily (four full searches); every one must be written for Megatron
CASE_NAMES = [c.name for c in CASES] + SEARCH_CASE_NAMES


def case_of(name: str) -> Case:
    """A case by name; a search case whose plan Megatron cannot be written for fails here."""
    if name in BY_NAME:
        return BY_NAME[name]
    case = {c.name: c for c in search_cases()}[name]
    assert "megatron_args.json" in case.emit(["megatron"])[0], (name, case.emit(["megatron"])[1])
    return case


def _doc(case) -> dict:
    return json.loads(case.emit(["megatron"])[0]["megatron_args.json"])


def _req(case, rid=None, args=None, env=None, world=None, arch=None) -> dict:
    d = _doc(case)
    return {"id": rid or case.name, "args": d["args"] if args is None else args,
            "env": d["env"] if env is None else env, "world": world or case.cluster.count,
            "arch": arch or (10 if case.cluster.hardware.id.startswith(("b200", "gb200")) else 9)}


def _set(args: list[str], flag: str, value) -> list[str]:
    out = list(args)
    out[out.index(flag) + 1] = str(value)
    return out


def _bad_requests() -> list[dict]:
    dense = BY_NAME["llama70b-tp8pp4vpp5-sp-cp2-128xh100"]
    moe = BY_NAME["mixtral-ep8-pp2-64xh100"]
    fsdp = BY_NAME["llama8b-fsdp-zero3-dp8-8xh100"]
    a = _doc(dense)["args"]
    # the overlap beside two MTP layers, which the planner never plans (stacks.rules.a2a_overlap_model_needs)
    mtp2 = _set(_doc(OVERLAP_CASE)["args"], "--mtp-num-layers", 2)
    mtp2 = _set(mtp2, "--pipeline-model-parallel-layout",
                _doc(OVERLAP_CASE)["args"][mtp2.index("--pipeline-model-parallel-layout") + 1].replace("tmL", "tm*2L"))
    shared = _doc(ALLGATHER_SHARED_CASE)["args"]
    return [
        _req(OVERLAP_CASE, "bad-a2a-overlap-with-two-mtp-layers", args=mtp2),
        _req(FP8_PARAMS_OFFLOAD_CASE, "bad-fp8-param-gather-offload-tensorwise",
             args=_set(_doc(FP8_PARAMS_OFFLOAD_CASE)["args"], "--fp8-recipe", "tensorwise")),
        _req(ALLGATHER_SHARED_CASE, "bad-shared-expert-overlap-with-allgather",
             args=shared + ["--moe-shared-expert-overlap"]),
        _req(dense, "bad-world-size", world=100),
        _req(dense, "bad-missing-cuda-max-connections", env={}),
        _req(dense, "bad-unknown-flag", args=a + ["--virtual-pipeline-model-parallel-size", "5"]),
        _req(dense, "bad-vpp-split", args=_set(a, "--num-layers-per-virtual-pipeline-stage", 3)),
        _req(dense, "bad-recompute-method", args=_set(a, "--recompute-method", "random")),
        _req(dense, "bad-heads-vs-tp", args=_set(a, "--tensor-model-parallel-size", 3), world=48),
        _req(moe, "bad-experts-vs-ep", args=_set(_doc(moe)["args"], "--expert-model-parallel-size", 16)),
        _req(fsdp, "bad-fsdp-with-max-connections-1", env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
    ]


@pytest.fixture(scope="module")
def results():
    require("megatron.core", "megatron.training", "torch", "triton")
    cases = [case_of(name) for name in CASE_NAMES]
    return run_checker("check_megatron.py", [_req(c) for c in cases] + _bad_requests() + _scenario_requests())


RUN_KEYS = written_keys("megatron")  # names only: the CLI runs inside the tests (scenario_run)


def _scenario_requests() -> list[dict]:
    out = []
    for run in written("megatron"):
        d = json.loads(run.files["megatron_args.json"])
        hw = run.plan_doc["hardware"]
        out.append({"id": run.id, "args": d["args"], "env": d["env"], "world": run.plan_doc["devices"],
                    "arch": 10 if hw.startswith(("b200", "gb200")) else 9})
    return out


@pytest.mark.parametrize("key", RUN_KEYS, ids=lambda k: run_id(*k))
def test_scenario_megatron_files_run_and_reproduce_the_model(results, key):
    """`plan --launcher megatron --out`: megatron-core accepts the args, the layout is the plan's, and the
    TransformerConfig + GPTModel args rebuilt from them are the planned model (exact parameter count)."""
    run = scenario_run(*key)
    r = accepted(results, run.id)
    doc = run.plan_doc
    p = doc["plan"]
    assert (r["tp"], r["pp"], r["cp"], r["dp"], r["ep"]) == (p["tp"], p["pp"], p["cp"], p["dp"], p["ep"])
    assert r["megatron_fsdp"] == (p["zero_stage"] == 3) and not (p["zero_stage"] == 3 and p["pp"] > 1)
    planned = load_model(run.scenario.model)
    f = r["model"]
    assert same_model(megatron_spec(f), planned, doc["model"]["params_total"]) == []
    assert (f["attention_dropout"], f["hidden_dropout"]) == (0.0, 0.0)  # the plan assumes no dropout
    llama3 = planned.rope_scaling is not None and planned.rope_scaling.rope_type == "llama3"
    assert f["use_rope_scaling"] == llama3
    if llama3:
        assert f["rope_scaling_factor"] == planned.rope_scaling.factor
    if planned.sliding_window is not None and planned.num_sliding_layers == planned.num_layers:
        assert f["window_size"] == [planned.sliding_window - 1, 0]
    # the launch script passes exactly the checked arguments
    assert argv_of_script(run.files["launch_megatron.sh"]) == json.loads(run.files["megatron_args.json"])["args"]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_megatron_accepts_emitted_args(results, name):
    case = case_of(name)
    r = accepted(results, case.name)
    p = case.plan
    assert (r["tp"], r["pp"], r["cp"], r["dp"], r["ep"]) == (p.tp, p.pp, p.cp, p.dp, p.ep)
    if case.model.moe is not None:
        assert r["etp"] == p.etp
    assert (r["vpp"] or 1) == p.vpp
    assert r["num_microbatches"] == case.train.global_batch // (p.micro_batch * p.dp)
    assert r["sequence_parallel"] == (p.tp > 1 and p.sequence_parallel)
    assert r["config_class"] == ("MLATransformerConfig" if case.model.mla else "TransformerConfig")
    assert r["distributed_optimizer"] == (p.zero_stage >= 1)
    assert r["megatron_fsdp"] == (p.zero_stage == 3)
    layout = pipeline_layout(make_job(case.model, case.cluster, case.train, p))
    if layout is None:
        assert r["layout"] is None and r["first_last"] == [p.first_stage_layers, p.last_stage_layers]
    else:  # the layer split the plan was costed with, stated stage by stage (MTP modules in the last virtual stage)
        assert r["first_last"] == [None, None]
        counts = stage_layer_counts(case.model.num_layers, p.pp, p.first_stage_layers, p.last_stage_layers)
        assert [sum(layers for layers, _ in rank) for rank in r["layout"]] == counts
        # even within a rank to one layer, but for the last virtual stage, which closes with the MTP modules and
        # takes their layer-equivalents fewer where it has them (costmodel.mtp.mtp_layer_units)
        units = mtp_layer_units(case.model, case.train.seq_len)
        ranks = [[n for n, _ in rank] for rank in r["layout"]]
        assert all(max(n) - min(n) <= 1 for n in ranks[:-1]), ranks
        *head, tail = ranks[-1]
        assert not head or (max(head) - min(head) <= 1 and 0 <= max(head) - tail <= units + 1), ranks
        assert r["layout"][-1][-1][1] == case.model.mtp_layers
        assert sum(mtp for rank in r["layout"] for _, mtp in rank) == case.model.mtp_layers
    gran = {"none": None, "selective": "selective", "full": "full"}[p.recompute]
    assert r["recompute"][0] == gran
    if p.recompute == "selective":  # the modules the plan was costed with (memory.recompute_modules), none added
        assert sorted(r["recompute_modules"]) == sorted(recompute_modules(case.model, case.train, p))
    # fine-grained activation offloading as costed (memory.offloaded_elems): on with the plan's modules, else off
    assert r["offload"] == [bool(p.offload_modules), list(p.offload_modules)]
    if case.model.moe is not None and case.model.moe.first_k_dense:
        assert r["moe_layer_freq"] == [int(case.model.is_moe_layer(i)) for i in range(case.model.num_layers)]
    if case.train.dtype == "fp8":
        # the planned (costed) recipe, tensorwise by default; TE's block-scaled recipes in E4M3
        recipe = case.train.fp8_recipe or "tensorwise"
        assert r["fp8"] == ["e4m3" if recipe in ("blockwise", "mxfp8") else "hybrid", recipe]
    # the MoE dispatcher and flex kernels as costed (planner.costmodel.moe.dispatcher / flex_backend)
    if case.model.moe is not None:
        assert r["model"]["moe_token_dispatcher_type"] == (case.train.moe_dispatcher or "alltoall")
        flex = r["model"]["moe_token_dispatcher_type"] == "flex"
        assert flex <= (r["model"]["moe_flex_dispatcher_backend"] == (case.train.moe_flex_backend or "deepep"))
    # FP8 primary weights as costed (planner.costmodel.memory.fp8_weight_copy_bytes)
    assert r["fp8_param_gather"] == case.train.fp8_param_gather
    assert r["reuse_grad_buf_for_mxfp8_param_ag"] == (case.train.fp8_param_gather and case.train.fp8_recipe == "mxfp8"
                                                      and p.zero_stage in (1, 2))
    # gradients are reduced in fp32 unless bf16 was asked for; bf16 Adam moments via the
    # precision-aware optimizer (master weights stay fp32)
    assert r["grad_reduce_in_fp32"] == (case.train.grad_dtype != "bf16" and case.train.dtype != "fp16")
    if case.train.optimizer_dtype == "bf16":
        assert r["precision_aware_optimizer"]
        assert "bfloat16" in r["exp_avg_dtype"] and "bfloat16" in r["exp_avg_sq_dtype"]


def test_every_extra_case_is_written_for_megatron():
    """The cases above exist to run through megatron-core: none may drop out of CASES because Megatron's files were
    not written for it (the layout cases were refused before --pipeline-model-parallel-layout)."""
    assert [c.name for c in EXTRA_CASES if c.name not in BY_NAME] == []


def test_a_case_states_bf16_gradients_and_moments():
    assert any(c.train.grad_dtype == "bf16" and c.train.optimizer_dtype == "bf16" for c in CASES)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_megatron_process_groups_partition_the_world(results, name):
    case = case_of(name)
    r = accepted(results, case.name)
    world, p = case.cluster.count, case.plan
    etp = r["etp"]  # = tp for a dense model (Megatron's default)
    sizes = {"tp": p.tp, "pp": p.pp, "dp": p.dp, "cp": p.cp, "tp-pp": p.tp * p.pp, "ep": p.ep, "etp": etp,
             "edp": p.tp * p.cp * p.dp // (p.ep * etp)}
    for name, size in sizes.items():
        gs = r["groups"][name]
        assert all(len(g) == size for g in gs), name
        assert sorted(x for g in gs for x in g) == list(range(world)), f"{name} groups do not partition the world"
    node = case.cluster.node_size
    if p.tp <= node:  # TP stays inside a node (NVLink): consecutive ranks
        assert all(len({x // node for x in g}) == 1 for g in r["groups"]["tp"])


def test_megatron_blackwell_needs_no_max_connections(results):
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in _doc(B200_CASE)["env"]
    accepted(results, B200_CASE.name)


def test_megatron_rejects_broken_args(results):
    rejected(results, "bad-world-size", "not divisible")
    rejected(results, "bad-missing-cuda-max-connections", "CUDA_DEVICE_MAX_CONNECTIONS")
    rejected(results, "bad-unknown-flag", "unrecognized arguments")
    rejected(results, "bad-vpp-split", "divisible")
    rejected(results, "bad-recompute-method", "invalid choice")
    rejected(results, "bad-heads-vs-tp")
    rejected(results, "bad-experts-vs-ep", "experts")
    rejected(results, "bad-fsdp-with-max-connections-1", "CUDA_DEVICE_MAX_CONNECTIONS")
    rejected(results, "bad-a2a-overlap-with-two-mtp-layers", "MTP supports at most one layer")
    rejected(results, "bad-fp8-param-gather-offload-tensorwise", "--fp8-recipe delayed")
    rejected(results, "bad-shared-expert-overlap-with-allgather", "alltoall or flex")


def test_megatron_runs_what_the_two_rules_leave(results):
    """The positive sides of the two rejections above: FP8 parameter gather with the optimizer offloaded under delayed
    scaling, and the allgather dispatcher on DeepSeek-V3 without the shared-expert overlap flag."""
    args = _doc(FP8_PARAMS_OFFLOAD_CASE)["args"]
    assert "--fp8-param-gather" in args and "--optimizer-cpu-offload" in args
    accepted(results, FP8_PARAMS_OFFLOAD_CASE.name)
    args = _doc(ALLGATHER_SHARED_CASE)["args"]
    assert "--moe-shared-expert-overlap" not in args and "--moe-shared-expert-intermediate-size" in args
    accepted(results, ALLGATHER_SHARED_CASE.name)


def test_megatron_runs_the_overlap_with_one_mtp_layer(results):
    """The positive side of the rule above: the overlap's flags and one MTP layer pass megatron-core's checks."""
    args = _doc(OVERLAP_CASE)["args"]
    assert "--overlap-moe-expert-parallel-comm" in args and args[args.index("--mtp-num-layers") + 1] == "1"
    accepted(results, OVERLAP_CASE.name)


def test_search_choices_are_expressible_in_megatron():
    """Every plan the search chooses for the representative inputs must be written for Megatron."""
    assert [c.name for c in search_cases()] == SEARCH_CASE_NAMES
    assert all(case_of(c.name) is c for c in search_cases())
