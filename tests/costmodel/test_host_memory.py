"""What a plan keeps in host memory (ZeRO-Offload's optimizer states, MaxText's offloaded tensors) must fit the host's
DRAM per device where the hardware profile states it (HardwareSpec.host_memory_gib, capacity.host_fits): the search
never ranks a plan beyond it, a pinned plan beyond it does not fit, and a cluster file states other nodes'."""

from __future__ import annotations

import json

import pytest
from support import one_line_error, run_cli

from planner.catalog.hardware import get_hardware, parse_cluster
from planner.catalog.models import get_model
from planner.costmodel import Context, evaluate
from planner.search.engine import SearchOptions, search
from planner.specs import ParallelPlan, TrainingSpec

GIB = 2**30

# The figures behind the profiles: DGX H100 / H200 "2 TB of DDR5 system memory" (NVIDIA DGX BasePOD reference
# architecture, Core Components), DGX B200 "2 TB using 32 x DIMMs" (DGX B200 User Guide), 8 GPUs each; GCP TPU VMs
# (gcloud compute machine-types list, GiB): ct4p-hightpu-4t 407 for 4 chips, ct5lp-hightpu-8t 384 for 8,
# ct6e-standard-8t 1440 for 8
HOST_GIB_PER_NODE = {"h100-sxm-80gb": (2048, 8), "h200-sxm-141gb": (2048, 8), "b200-sxm-180gb": (2048, 8),
                     "tpu-v4": (407, 4), "tpu-v5e": (384, 8), "tpu-v6e": (1440, 8)}


@pytest.mark.parametrize("hw", sorted(HOST_GIB_PER_NODE))
def test_host_memory_per_device_is_the_reference_node_over_its_devices(hw):
    node_gib, devices = HOST_GIB_PER_NODE[hw]
    assert get_hardware(hw).host_memory_gib == node_gib / devices
    assert get_hardware(hw).devices_per_node == devices


def test_no_host_figure_where_a_published_run_contradicts_it():
    # tpu-recipes' Llama 3.1 405B on v5p-1024 ran offloading 126 GiB per chip by the planner's count, above the 448 GiB
    # for 4 chips GCP lists for ct5p-hightpu-4t: v5p's host share is not checked (hardware_profiles/tpu-v5p.yaml)
    assert get_hardware("tpu-v5p").host_memory_gib is None


def _offload_405b(cluster: str = "b200x16", host_gib: float | None = None):
    cl = parse_cluster(cluster)
    if host_gib is not None:
        cl = cl.model_copy(update={"hardware": cl.hardware.model_copy(update={"host_memory_gib": host_gib})})
    ctx = Context(get_model("llama-3.1-405b"), cl, TrainingSpec(global_batch=1024))
    plan = ParallelPlan(tp=8, pp=2, dp=1, zero_stage=1, micro_batch=1, recompute="full", recompute_layers=15,
                        offload_optimizer=True)
    return ctx, evaluate(ctx, plan)


def test_a_pinned_plan_beyond_the_host_memory_does_not_fit():
    # Llama 3.1 405B on 16 B200 with the optimizer on the host: ZeRO 1 over DP 1 keeps every Adam state of a device's
    # share there, fp32 master weights and two moments (12 B per parameter) of 405.85e9 / 16 parameters, more on the
    # stage with the embedding
    ctx, ev = _offload_405b()
    assert ev.memory["peak_gib"] <= ev.memory["usable_gib"]  # the HBM peak fits
    share = 12 * 405_853_388_800 / 16 / GIB
    assert share < ev.memory["host_gib"] < 1.05 * share
    assert ev.memory["host_capacity_gib"] == 256.0 and not ev.fits and not ev.fits_host
    assert any(w.startswith("does not fit in host memory: keeps") for w in ev.warnings), ev.warnings
    # the same plan on nodes with 4 TB (DGX B200 upgraded; the cluster file's hardware override) fits
    _, big = _offload_405b(host_gib=512)
    assert big.fits and big.memory["host_gib"] == ev.memory["host_gib"]


def test_the_search_ranks_no_plan_beyond_the_host_memory():
    # on 16 B200 every plan whose HBM peak fits needs the optimizer on the host, beyond 256 GiB per GPU: exit 3 saying
    # so, not the HBM advice; on 4 TB nodes the same request has plans
    err = one_line_error(run_cli("--model", "llama-3.1-405b", "--cluster", "b200x16"), code=3)
    assert "keep more in host memory than the host's 256.0 GiB per device" in err, err
    assert "host_memory_gib" in err, err
    ctx, _ = _offload_405b(host_gib=512)
    res = search(ctx, SearchOptions(top_k=3))
    assert res.plans and all(e.fits and e.memory["host_gib"] <= 512 for e in res.plans)
    assert max(e.memory["host_gib"] for e in res.plans) > 256  # the limit decided it


def test_a_cluster_file_states_its_nodes_host_memory(tmp_path):
    f = tmp_path / "dgx-b200-4tb.yaml"
    f.write_text("hardware: {base: b200, host_memory_gib: 512}\ncount: 16\n")
    r = run_cli("--model", "llama-3.1-405b", "--cluster", f, "--json")
    assert r.exit_code == 0, r.stderr[-500:]
    doc = json.loads(r.stdout)
    best = doc["plans"][0]
    assert best["fits"] and best["memory"]["host_capacity_gib"] == 512 == doc["cluster"]["host_memory_gib"]
    assert 256 < best["memory"]["host_gib"] <= 512


def test_the_table_says_the_host_share_against_the_host():
    # Llama 3.1 8B on 4 v5e chips fits only with tensors in host memory: its share is printed against the 48 GiB
    # per chip; on v5p, whose figure is not stated, the line says the host is not checked
    for cluster, tail in (("tpu-v5ex4", " of 48.00 GiB per device"),
                          ("tpu-v5px128", " GiB per device (the host's memory is not known: not checked)")):
        model = "llama-3.1-8b" if cluster == "tpu-v5ex4" else "llama-3.1-405b"
        r = run_cli("--model", model, "--cluster", cluster, "--json")
        assert r.exit_code == 0, r.stderr[-500:]
        host = json.loads(r.stdout)["plans"][0]["memory"]["host_gib"]
        assert host > 0
        flat = " ".join(run_cli("--model", model, "--cluster", cluster).stdout.split())
        assert f"in host memory: {host:.2f}{tail}" in flat, flat[-800:]
