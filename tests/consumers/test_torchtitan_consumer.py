"""Emitted torchtitan 0.3.0 arguments through torchtitan's ConfigManager (tyro + Trainer.Config) and
ParallelDims, and the model table of the emitter against torchtitan's own config registry."""

from __future__ import annotations

import json

import pytest

from consumers.cases import CONSUMER_CASES, GOLDEN_CASES, LLAMA31_8B, Case, catalog_cases, cluster
from consumers.conftest import accepted, rejected, require, run_checker
from consumers.scenarios import run_id, scenario_run, written, written_keys
from planner.catalog.models import load_model
from planner.costmodel.partition import stage_layer_counts
from planner.costmodel.pipeline import head_stage, rank_first_last_layers
from planner.emit.torchtitan import _MODULE_OF, FLAVORS
from planner.specs import ParallelPlan, TrainingSpec

pytestmark = pytest.mark.consumers

NO_SP = Case("llama8b-tp2-no-sp-zero0-16xh100", LLAMA31_8B, cluster("h100-sxm-80gb", 16),
             TrainingSpec(seq_len=8192, global_batch=32),
             ParallelPlan(tp=2, dp=8, zero_stage=0, sequence_parallel=False, micro_batch=2))
CASES = [c for c in CONSUMER_CASES + GOLDEN_CASES + [NO_SP] + catalog_cases()
         if "torchtitan_args.json" in c.emit(["torchtitan"])[0]]
BY_NAME = {c.name: c for c in CASES}
REGISTRY = sorted({(mod or _MODULE_OF[cfg8], cfg) for key, (mod, cfg16, cfg8) in FLAVORS.items()
                   for cfg in (cfg16, cfg8) if cfg})


def _args(case) -> list[str]:
    return json.loads(case.emit(["torchtitan"])[0]["torchtitan_args.json"])["args"]


def _without(args: list[str], flag: str) -> list[str]:
    return [a for a in args if a != flag]


def _set(args: list[str], flag: str, value) -> list[str]:
    out = list(args)
    out[out.index(flag) + 1] = str(value)
    return out


def _bad_requests() -> list[dict]:
    dense = BY_NAME["llama70b-tp8pp4vpp5-sp-cp2-128xh100"]
    a = _args(dense)
    return [
        {"id": "bad-world", "args": a, "world": 96},
        {"id": "bad-cuda-graphs-with-pp", "args": _without(a, "--training.disable_cuda_graphs"), "world": 128},
        {"id": "bad-unknown-option", "args": ["--parallelism.tensor_paralel_degree", "8"] + a, "world": 128},
        {"id": "bad-schedule-layers", "args": _set(a, "--parallelism.pipeline_parallel_layers_per_stage", 80),
         "world": 128},
        {"id": "bad-ac-mode", "args": a[:-1] + ["activation-checkpoint:sometimes"], "world": 128},
    ]


@pytest.fixture(scope="module")
def results():
    require("torchtitan", "torch", "triton")
    reqs = [{"id": c.name, "args": _args(c), "world": c.cluster.count,
             "module_text": c.emit(["torchtitan"])[0].get("torchtitan_model.py")} for c in CASES] + _bad_requests()
    reqs += [{"id": f"flavor:{m}:{cfg}", "flavor": [m, cfg]} for m, cfg in REGISTRY]
    reqs += [{"id": run.id, "args": json.loads(run.files["torchtitan_args.json"])["args"],
              "world": run.plan_doc["devices"], "count_params": True,
              "pythonpath": str(run.out)} for run in written("torchtitan")]
    return run_checker("check_torchtitan.py", reqs)


RUN_KEYS = written_keys("torchtitan")  # names only: the CLI runs inside the tests (scenario_run)


@pytest.mark.parametrize("key", RUN_KEYS, ids=lambda k: run_id(*k))
def test_scenario_torchtitan_files_run_and_build_the_planned_model(results, key):
    """`plan --launcher torchtitan --out`: torchtitan parses the args for the world, and the model its
    registry config builds (on the meta device) has the planner's exact parameter count and RoPE."""
    run = scenario_run(*key)
    r = accepted(results, run.id)
    doc = run.plan_doc
    p = doc["plan"]
    assert (r["tp"], r["pp"], r["cp"]) == (p["tp"], p["pp"], p["cp"])
    assert r["dp_replicate"] * r["dp_shard"] == p["dp"]
    assert r["loss_chunks"] == doc["training"]["loss_chunks"]  # the costed loss (torchtitan's default: 8 slices)
    planned = load_model(run.scenario.model)
    f = r["model"]
    assert f["params"] == doc["model"]["params_total"]
    assert (f["n_layers"], f["dim"], f["n_heads"], f["vocab_size"]) == (planned.num_layers, planned.hidden_size,
                                                                       planned.num_heads, planned.vocab_size)
    assert f["rope_theta"] == planned.rope_theta
    assert f["tied"] == planned.tied_embeddings and "RMSNorm" in f["norm"]
    if planned.rope_scaling is not None and planned.rope_scaling.rope_type == "llama3":
        assert (f["rope_scaling"], f["rope_factor"]) == ("llama", planned.rope_scaling.factor)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_torchtitan_accepts_emitted_args(results, case):
    r = accepted(results, case.name)
    p, t = case.plan, case.train
    assert (r["tp"], r["pp"], r["cp"]) == (p.tp, p.pp, p.cp)
    assert r["sequence_parallel"] == (p.sequence_parallel or p.tp == 1)
    # the step was costed with (eager) or without the unfused elementwise kernels: compile as planned, and
    # async TP exactly when TP communication overlap was planned (torchtitan's CompileConfig checks it needs compile)
    assert r["compile"] == t.torch_compile
    assert r["async_tp"] == (p.tp > 1 and p.tp_comm_overlap)
    assert r["loss_chunks"] == t.loss_chunks  # the loss runs over the slices it was costed with
    assert r["dp_replicate"] * r["dp_shard"] == p.dp
    if case.model.moe is not None:
        assert r["ep"] == p.ep
    dp = r["dp_replicate"] * r["dp_shard"]
    # Trainer.__init__ (GPU-only) derives grad accumulation as global / (local * dp) and asserts it is whole
    assert t.global_batch % (r["local_batch_size"] * dp) == 0
    if p.pp > 1:
        assert r["disable_cuda_graphs"]
        assert r["local_batch_size"] // r["microbatch"] == t.global_batch // (p.micro_batch * p.dp)
        assert r["num_stages"] == p.pp * p.vpp
        lps = r["layers_per_stage"]
        if p.first_stage_layers is not None:
            assert lps[0] == p.first_stage_layers
        if p.last_stage_layers is not None:
            assert lps[-1] == p.last_stage_layers
        assert sum(lps) == case.model.num_layers
        # each rank's layers and the LM head's rank as the cost model places them (partition.stage_layer_counts,
        # pipeline.rank_first_last_layers and head_stage) against torchtitan's own rank-to-stage mapping: the last
        # rank holds the last stage, or rank 0 in a V
        ranks = r["rank_stages"]
        assert [sum(lps[s] for s in stages) for stages in ranks] == \
            stage_layer_counts(case.model.num_layers, p.pp, *rank_first_last_layers(p, case.model.num_layers))
        assert (p.pp * p.vpp - 1 in ranks[0]) == (head_stage(p) == 0)
        if p.schedule == "dualpipev":
            assert r["schedule_class"] == "ScheduleDualPipeV" and ranks[0] == [0, 2 * p.pp - 1]
    else:
        assert r["local_batch_size"] * dp * (t.global_batch // (p.micro_batch * p.dp)) == t.global_batch
    kind = r["activation_checkpoint"]
    if p.recompute == "none":
        assert not kind.startswith(("SelectiveAC", "FullAC")), kind
    else:
        assert kind.startswith({"selective": "SelectiveAC", "full": "FullAC"}[p.recompute]), kind


@pytest.mark.parametrize("module,config", REGISTRY)
def test_torchtitan_flavor_table_matches_registry(results, module, config):
    r = accepted(results, f"flavor:{module}:{config}")
    key = next(k for k, v in FLAVORS.items() if config in v)
    assert (r["n_layers"], r["dim"], r["vocab_size"]) == (key[0], key[1], key[5])


def test_torchtitan_rejects_broken_args(results):
    rejected(results, "bad-world", "world_size")
    rejected(results, "bad-cuda-graphs-with-pp", "disable_cuda_graphs")
    rejected(results, "bad-unknown-option", "tensor_paralel_degree")
    rejected(results, "bad-schedule-layers", "stage")
    rejected(results, "bad-ac-mode")
