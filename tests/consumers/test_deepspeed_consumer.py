"""Emitted ds_config.json loaded by DeepSpeed's own DeepSpeedConfig (real library, CPU, no launch)."""

from __future__ import annotations

import copy
import json

import pytest

from consumers.cases import CONSUMER_CASES, GOLDEN_CASES, catalog_cases
from consumers.conftest import accepted, rejected, require, run_checker
from consumers.rebuild import argv_of_script, mds_spec, same_model
from consumers.scenarios import run_id, scenario_run, written, written_keys
from planner.catalog.models import load_model
from planner.launchers import launcher_errors
from planner.specs import ParallelPlan

pytestmark = pytest.mark.consumers

CASES = [c for c in CONSUMER_CASES + GOLDEN_CASES + catalog_cases() if "ds_config.json" in c.emit(["deepspeed"])[0]]


def _cfg(case) -> dict:
    return json.loads(case.emit(["deepspeed"])[0]["ds_config.json"])


def _bad_requests() -> list[dict]:
    base = CASES[0]
    cfg = _cfg(base)
    out = []
    wrong = copy.deepcopy(cfg)
    wrong["gradient_accumulation_steps"] += 1          # breaks tbs = mbs * gas * dp
    out.append({"id": "bad-batch-triangle", "config": wrong, "dp": base.plan.dp})
    out.append({"id": "bad-world-as-all-gpus", "config": cfg, "dp": base.cluster.count * 2})  # dp counted wrong
    stage4 = copy.deepcopy(cfg)
    stage4["zero_optimization"]["stage"] = 4
    out.append({"id": "bad-zero-stage-4", "config": stage4, "dp": base.plan.dp})
    gpu = copy.deepcopy(cfg)
    gpu["zero_optimization"]["offload_optimizer"] = {"device": "gpu"}
    out.append({"id": "bad-offload-device", "config": gpu, "dp": base.plan.dp})
    both = copy.deepcopy(cfg)
    both["fp16"] = {"enabled": True}
    out.append({"id": "bad-bf16-and-fp16", "config": both, "dp": base.plan.dp})
    return out


def _world(cfg: dict, dp: int) -> int:
    """The ranks DeepSpeed counts: the DP ranks, times the Ulysses ranks (DeepSpeedConfig divides by them)."""
    return dp * cfg.get("sequence_parallel_size", 1)


@pytest.fixture(scope="module")
def results():
    require("deepspeed", "torch")
    reqs = [{"id": c.name, "config": _cfg(c), "dp": _world(_cfg(c), c.plan.dp)} for c in CASES] + _bad_requests()
    for run in written("deepspeed"):
        cfg = json.loads(run.files["ds_config.json"])
        reqs.append({"id": run.id, "config": cfg, "dp": _world(cfg, run.plan_doc["plan"]["dp"])})
    return run_checker("check_deepspeed.py", reqs)


RUN_KEYS = written_keys("deepspeed")  # names only: the CLI runs inside the tests (scenario_run)


@pytest.mark.parametrize("key", RUN_KEYS, ids=lambda k: run_id(*k))
def test_scenario_deepspeed_files_run_and_reproduce_the_model(results, key):
    """`plan --launcher deepspeed --out`: DeepSpeedConfig accepts ds_config.json for the plan's DP world; the
    plan is one DeepSpeed's engine runs (no CP, PP only with ZeRO 0-1); the Megatron-DeepSpeed arguments
    (in deepspeed_args.json and launch_deepspeed.sh alike), parsed with Megatron-DeepSpeed's flag
    definitions, rebuild the planned model (exact parameter count, rope base, activation, norm, bias, tying)."""
    run = scenario_run(*key)
    r = accepted(results, run.id)
    doc = run.plan_doc
    p = doc["plan"]
    assert r["train_batch_size"] == run.scenario.gbs and r["world_size"] == p["dp"]
    assert r["zero_stage"] == p["zero_stage"] and (p["pp"] == 1 or p["zero_stage"] <= 1)
    planned = load_model(run.scenario.model)
    plan = ParallelPlan(**{k: v for k, v in p.items() if v is not None})
    assert launcher_errors(plan, planned, _train(run), "deepspeed") == []
    ds_doc = json.loads(run.files["deepspeed_args.json"])
    if ds_doc.get("path") == "hf":  # the transformers model: tests/consumers/test_roundtrip_consumer.py rebuilds it
        assert (p["tp"], p["pp"], p["ep"]) == (1, 1, 1) and ds_doc["sequence_parallel_size"] == p["cp"]
        assert ds_doc["attn_implementation"] == "flash_attention_2"
        return
    assert p["cp"] == 1
    args = ds_doc["args"]
    assert argv_of_script(run.files["launch_deepspeed.sh"]) == args
    rebuilt, a = mds_spec(args)
    assert same_model(rebuilt, planned, doc["model"]["params_total"]) == []
    assert (a.attention_dropout, a.hidden_dropout) == (0.0, 0.0)
    assert (a.tensor_model_parallel_size, a.pipeline_model_parallel_size) == (p["tp"], p["pp"])


def _train(run):
    from planner.specs import TrainingSpec
    t = run.plan_doc["training"]
    return TrainingSpec(seq_len=t["seq_len"], global_batch=t["global_batch"], dtype=t["dtype"], framework="deepspeed")


def test_issue_13_llama70b_deepspeed_writes_ds_config():
    """The issue's case: llama-3.1-70b (reference HF config) on 64 H100, seq 8192, gbs 128, --launcher deepspeed."""
    run = scenario_run("llama70b-h100x64-s8k", "deepspeed")
    assert {"ds_config.json", "deepspeed_args.json", "launch_deepspeed.sh", "plan.json"} <= set(run.files)
    doc = json.loads(run.files["deepspeed_args.json"])
    # issue 24: the attention the plan costed (flash), not Megatron-DeepSpeed's CoreAttention (s x s scores)
    if doc.get("path") == "hf":
        assert doc["attn_implementation"] == "flash_attention_2"
    else:
        assert "--rotary-position-embeddings-theta" in doc["args"] and "--use-flash-attn-v2" in doc["args"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_deepspeed_accepts_emitted_config(results, case):
    r = accepted(results, case.name)
    assert r["world_size"] == case.plan.dp  # DeepSpeedConfig's batch world: data-parallel ranks only
    assert r["train_batch_size"] == case.train.global_batch
    assert r["micro_batch"] * r["grad_accum"] * case.plan.dp == case.train.global_batch
    assert r["zero_stage"] == case.plan.zero_stage
    assert (r["offload_optimizer"] is not None and "cpu" in r["offload_optimizer"]) == case.plan.offload_optimizer
    assert r["fp16"] == (case.train.dtype == "fp16")


def test_deepspeed_cases_cover_zero_stages():
    assert {c.plan.zero_stage for c in CASES} >= {1, 3}
    assert any(c.plan.offload_optimizer for c in CASES)


def test_deepspeed_rejects_wrong_batch_triangle(results):
    rejected(results, "bad-batch-triangle", "train_batch_size is not equal to")
    rejected(results, "bad-world-as-all-gpus", "train_batch_size is not equal to")


def test_deepspeed_rejects_bad_zero_and_precision(results):
    rejected(results, "bad-zero-stage-4", "stage")
    rejected(results, "bad-offload-device", "offload_optimizer")
    rejected(results, "bad-bf16-and-fp16", "fp16")
