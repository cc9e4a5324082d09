"""Emitted jax_mesh.json (a real mesh on fake CPU devices + two jitted sharded training steps of a tiny
model with the emitted PartitionSpecs) and maxtext.yml (MaxText 0.2.5's own pyconfig.initialize)."""

from __future__ import annotations

import copy
import json

import pytest

from consumers.cases import CONSUMER_CASES, GOLDEN_CASES, LLAMA31_8B, Case, catalog_cases, cluster
from consumers.conftest import accepted, rejected, require, run_checker
from consumers.rebuild import maxtext_spec, same_model
from consumers.scenarios import run_id, scenario_run, written, written_keys
from planner.catalog.models import load_model
from planner.specs import ParallelPlan, TrainingSpec

pytestmark = pytest.mark.consumers

MAX_DEVICES = 128  # fake CPU devices for the mesh/step checks (bigger golden worlds: MaxText config only)
JAX_CASES = [c for c in CONSUMER_CASES if "jax_mesh.json" in c.emit(["jax"])[0]]
# TPU context parallelism, ring and Ulysses, on the Tokamax splash kernels maxtext 0.2.5 runs them with
# (planner.emit.maxtext; planner.launchers.maxtext's tpu-* rules)
TPU_CP_CASES = [Case(f"llama8b-tp{tp}-cp4-{kind}-64xtpu-v5p", LLAMA31_8B, cluster("tpu-v5p", 64, domain_size=64),
                     TrainingSpec(seq_len=32768, global_batch=64),
                     ParallelPlan(tp=tp, cp=4, dp=64 // (tp * 4), micro_batch=1, zero_stage=1, cp_comm=kind))
                for tp, kind in ((4, "ring"), (2, "a2a"))]  # Ulysses splits the 8 KV heads over tp x cp
MT_CASES = [c for c in CONSUMER_CASES + GOLDEN_CASES + catalog_cases() + TPU_CP_CASES
            if "maxtext.yml" in c.emit(["maxtext"])[0]]
BY_NAME = {c.name: c for c in JAX_CASES}


def _mesh(case) -> dict:
    return json.loads(case.emit(["jax"])[0]["jax_mesh.json"])


def _yml(case) -> str:
    return case.emit(["maxtext"])[0]["maxtext.yml"]


def _bad_requests() -> list[dict]:
    fsdp = BY_NAME["llama8b-fsdp-zero3-dp8-8xh100"]
    tpu = BY_NAME["llama8b-tp4-hsdp-2x32-tpu-v5p"]
    m = _mesh(fsdp)
    wrong_axis = copy.deepcopy(m)
    wrong_axis["param_specs"]["layers.wq"]["spec"] = ["stage", "fsdp", "model"]
    y = _yml(tpu)
    ring = TPU_CP_CASES[0]
    return [
        {"id": "mt-bad-tpu-ring-without-tokamax", "kind": "maxtext", "world": ring.cluster.count,
         "yml": _yml(ring).replace("use_tokamax_splash: true\n", "")},
        {"id": "jax-bad-mesh-product", "kind": "jax", "mesh": m,
         "mesh_shape_override": [1, 1, 4, 1, 1, 1]},                   # 4 != 8 devices
        {"id": "jax-bad-indivisible", "kind": "jax", "mesh": m, "tiny": {"hidden": 12}},  # 12 over fsdp=8
        {"id": "jax-bad-axis-name", "kind": "jax", "mesh": wrong_axis},
        {"id": "mt-bad-ici-product", "kind": "maxtext", "world": tpu.cluster.count,
         "yml": y.replace("ici_tensor_parallelism: 4", "ici_tensor_parallelism: 3")},
        {"id": "mt-bad-unknown-key", "kind": "maxtext", "world": tpu.cluster.count,
         "yml": y + "ici_tensr_parallelism: 2\n"},
        {"id": "mt-bad-dcn-one-slice", "kind": "maxtext", "world": tpu.cluster.count,
         "yml": y.replace("num_slices: 2", "num_slices: 1")},
    ]


@pytest.fixture(scope="module")
def results():
    require("jax", "maxtext")
    reqs = [{"id": "jax:" + c.name, "kind": "jax", "mesh": _mesh(c)} for c in JAX_CASES]
    reqs += [{"id": "mt:" + c.name, "kind": "maxtext", "yml": _yml(c), "world": c.cluster.count} for c in MT_CASES]
    reqs += _bad_requests()
    reqs += [{"id": run.id, "kind": "maxtext", "yml": run.files["maxtext.yml"], "world": run.plan_doc["devices"]}
             for run in written("maxtext")]
    assert max(c.cluster.count for c in JAX_CASES) <= MAX_DEVICES
    # XLA reads the fake device count once, when jax is first imported: set it for the checker's interpreter
    return run_checker("check_jax.py", reqs,
                       env={"XLA_FLAGS": f"--xla_force_host_platform_device_count={MAX_DEVICES}",
                            "JAX_PLATFORMS": "cpu"})


@pytest.mark.parametrize("case", JAX_CASES, ids=lambda c: c.name)
def test_jax_mesh_and_sharded_step(results, case):
    r = accepted(results, "jax:" + case.name)
    doc = _mesh(case)
    assert r["mesh_shape"] == dict(zip(doc["axis_names"], doc["mesh_shape"], strict=True))
    assert r["ici_in_slice"], "an axis without a DCN factor crosses slices"
    assert r["finite"] and r["param_specs_kept"]
    p = case.plan
    assert r["mesh_shape"]["tensor"] == p.tp and r["mesh_shape"]["stage"] == p.pp
    assert r["mesh_shape"]["context"] == p.cp and r["mesh_shape"]["expert"] == p.ep
    assert r["mesh_shape"]["data"] * r["mesh_shape"]["fsdp"] * r["mesh_shape"]["expert"] == p.dp


@pytest.mark.parametrize("case", MT_CASES, ids=lambda c: c.name)
def test_maxtext_accepts_emitted_config(results, case):
    r = accepted(results, "mt:" + case.name)
    p, t = case.plan, case.train
    assert r["global_batch"] == t.global_batch
    assert r["micro_batch"] * r["grad_accum"] == t.global_batch
    if p.pp > 1:
        assert r["pipeline_microbatches"] == t.global_batch // (p.micro_batch * p.dp)
    else:
        assert r["grad_accum"] == t.global_batch // (p.micro_batch * p.dp)
    ici = dict(zip(r["mesh_axes"], r["ici"], strict=True))
    dcn = dict(zip(r["mesh_axes"], r["dcn"], strict=True))
    deg = {a: ici[a] * dcn[a] for a in r["mesh_axes"]}
    assert (deg["tensor"], deg["stage"], deg["context"], deg["expert"]) == (p.tp, p.pp, p.cp, p.ep)
    assert deg["data"] * deg["fsdp"] * deg["expert"] == p.dp
    assert r["num_slices"] * ici["tensor"] * ici["fsdp"] * ici["data"] * ici["stage"] * ici["context"] * \
        ici["expert"] == case.cluster.count
    # MaxText's scanned layers are always checkpointed ("none" = policy None = full remat): no recompute is its
    # minimal_with_context policy, which saves every matmul output
    if p.custom_remat is not None:  # MaxText's custom policy: the named tensors offloaded / kept, the rest remat
        assert r["remat_policy"] == "custom"
        named = {n: "offload" for n in p.remat_offloaded} | {n: "device" for n in p.remat_device}
        assert {n: r["remat_names"].get(n) for n in named} == named, r["remat_names"]
        assert "offload" not in {v for k, v in r["remat_names"].items() if k not in named}, r["remat_names"]
    else:
        assert r["remat_policy"] in {"none": ("minimal_with_context",), "selective": ("minimal",),
                                     "full": ("full",)}[p.recompute]
    assert r["num_decoder_layers"] == case.model.num_layers and r["emb_dim"] == case.model.hidden_size
    if case.cluster.count <= MAX_DEVICES:
        assert r["mesh_shape"] == deg


RUN_KEYS = written_keys("maxtext")  # names only: the CLI runs inside the tests (scenario_run)


@pytest.mark.parametrize("key", RUN_KEYS, ids=lambda k: run_id(*k))
def test_scenario_maxtext_files_run_and_reproduce_the_model(results, key):
    """`plan --launcher maxtext --out`: MaxText's pyconfig accepts maxtext.yml for the world, its mesh is
    the plan's, and the model its config describes is the planned one (exact parameter count, rope base
    and scaling, activation, norm, biases, tying; no dropout)."""
    run = scenario_run(*key)
    r = accepted(results, run.id)
    doc = run.plan_doc
    p = doc["plan"]
    ici, dcn = dict(zip(r["mesh_axes"], r["ici"], strict=True)), dict(zip(r["mesh_axes"], r["dcn"], strict=True))
    deg = {a: ici[a] * dcn[a] for a in r["mesh_axes"]}
    assert (deg["tensor"], deg["stage"], deg["context"], deg["expert"]) == (p["tp"], p["pp"], p["cp"], p["ep"])
    assert deg["data"] * deg["fsdp"] * deg["expert"] == p["dp"]
    assert r["global_batch"] == run.scenario.gbs
    planned = load_model(run.scenario.model)
    f = r["model"]
    assert same_model(maxtext_spec(f), planned, doc["model"]["params_total"]) == []
    assert f["enable_dropout"] is False and f["dropout_rate"] == 0.0
    kind = planned.rope_scaling.rope_type if planned.rope_scaling is not None else None
    assert f["rope_type"] == {"llama3": "llama3.1", "yarn": "yarn", None: "default"}[kind]


def test_tpu_context_parallelism_needs_the_tokamax_kernels(results):
    """Both TPU CP cases are written (and accepted, test_maxtext_accepts_emitted_config); without the kernels' key
    maxtext refuses the ring one."""
    assert all(c in MT_CASES for c in TPU_CP_CASES)
    assert "use_tokamax_splash: true" in _yml(TPU_CP_CASES[0])
    rejected(results, "mt-bad-tpu-ring-without-tokamax", "use_tokamax_splash")


def test_tpu_multislice_puts_only_data_or_stage_on_dcn(results):
    for name in ("llama8b-tp4-hsdp-2x32-tpu-v5p", "llama8b-tp4-pp2-fsdp8-2x32-tpu-v5p"):
        r = accepted(results, "mt:" + name)
        dcn = dict(zip(r["mesh_axes"], r["dcn"], strict=True))
        assert r["num_slices"] == 2 and dcn["tensor"] == 1 and dcn["fsdp"] == 1
        assert dcn["data"] * dcn["stage"] == 2


def test_jax_rejects_broken_meshes(results):
    rejected(results, "jax-bad-mesh-product", "mesh")
    rejected(results, "jax-bad-indivisible")
    rejected(results, "jax-bad-axis-name", "not found in mesh")


def test_maxtext_rejects_broken_configs(results):
    rejected(results, "mt-bad-ici-product", "ici")
    rejected(results, "mt-bad-unknown-key", "ici_tensr_parallelism")
    rejected(results, "mt-bad-dcn-one-slice")
