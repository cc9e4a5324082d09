"""Memory you can trust (issue 22): published runs fit, published peaks are predicted within the stated error,
the memory band is the cross-validated one, one usable-capacity rule, and #1 keeps a margin by default."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from planner.analysis.validate import load_runs, validate_runs
from planner.catalog.data import data_dir

ROOT = Path(__file__).resolve().parents[2]
# every runs file of the project (runs/*.yaml but the generated step-time bands; tests/data/reference holds none)
RUN_FILES = sorted(p.name for p in (ROOT / "runs").glob("*.yaml"))

# Runs whose source says they did not fit as published (none in the project's files today). Before issue 22's
# MaxText work four TPU recipes were predicted not to fit although they ran (v6e-32 Llama 3.1 70B 33.4 GiB, v6e-256x2
# 405B 30.3, v6e-256 GPT-3 175B 31.7 on 30.0 usable; v5p 405B 97.8 on 93.0): the mechanisms were JAX's gradients in
# the parameter dtype (bf16 under weight_dtype=bfloat16), MaxText's unfused gate/up arrays in flight under FSDP, and
# XLA:TPU's own HBM limit (31.25 GiB on v6e, 95.74 on v5p) with the runtime's reservation outside it.
SOURCE_SAYS_DID_NOT_FIT: set[str] = set()


@pytest.fixture(scope="module")
def validated() -> dict[str, dict]:
    rows: dict[str, dict] = {}
    for name in RUN_FILES:
        for r in validate_runs(load_runs(data_dir("runs") / name))["runs"]:
            rows[r["id"]] = r
    return rows


def test_every_published_run_fits_unless_its_source_says_not(validated):
    not_fitting = {rid for rid, r in validated.items() if not r["fits"]}
    assert len(validated) >= 240 and len(RUN_FILES) >= 5
    assert not_fitting == SOURCE_SAYS_DID_NOT_FIT, sorted(not_fitting - SOURCE_SAYS_DID_NOT_FIT)


def test_maxtext_tpu_recipes_fit_by_their_mechanisms(validated):
    # the v6e-32 70B recipe (weight_dtype=bfloat16): bf16 weights, bf16 gradients (jax.grad's cotangents), bf16 Adam
    # moments (mu_dtype inherits weight_dtype, nu follows the parameters): 2 + 2 + 4 B per parameter over 32 chips
    r = validated["tpurecipes-v6e-llama31-70b-v6e-32"]
    assert r["memory"]["grads_gib"] == pytest.approx(r["memory"]["weights_gib"])
    assert r["memory"]["optimizer_gib"] == pytest.approx(2 * r["memory"]["weights_gib"])
    for rid in ("tpurecipes-v6e-llama31-70b-v6e-32", "tpurecipes-v6e-gpt3-175b-bf16-v6e-256",
                "tpurecipes-v5p-llama31-405b-v5p-1024", "tpurecipes-v6e-llama31-405b-2x-v6e-256"):
        mem = validated[rid]["memory"]
        # XLA:TPU's limit is the program's (libtpu's compiler: 31.25 GiB v6e, 95.74 v5p), no reserve or CUDA overhead
        assert mem["usable_gib"] == mem["capacity_gib"] in (31.25, 95.74) and mem["overhead_gib"] == 0.0, rid


# Issue 22's targets over every published peak: median |error| <= 10% (met: 5.9% cross-validated), p90 <= 20% (NOT
# met: 24.7% cross-validated, 22.4% in sample; the 405B 1F1B / interleaved and 70B 2D rows under-predicted by 19-31%,
# torchao's B200 rows over by 22-24%). The torchao H100 rows ran torchtitan 0.0.2 before it compiled the loss (ao
# docs table of 2025-03-12, torchtitan PR #1033 of 2025-04-02): with the eager fp32 loss they moved from -13% to +4%,
# the median from 8.0% to 5.9%, while the cross-validated p90 rose from 22.4% (the refitted overhead no longer offsets
# the B200 rows). Branch mem3: torchtitan 9dec370's pipeline micro-batches on the Table 5 rows (8 of 4 sequences, 2
# stages per rank when interleaved), the loss-parallel cross entropy (16 B per logit with TP), the allocator's
# expandable segments where the run had them and torch.distributed.pipelining's per-micro-batch receive buffers:
# cross-validated median 5.0%, p90 14.8% (in sample 4.8%, 14.8%); the p90 target (20%) is met and asserted.
P90_REGRESSION_BOUND = 0.20


def test_published_peaks_within_the_stated_error(validated):
    errs = sorted(abs(r["peak_memory_error"]) for r in validated.values() if "peak_memory_error" in r)
    assert len(errs) >= 27
    median, p90 = statistics.median(errs), errs[int(0.9 * (len(errs) - 1))]
    assert median <= 0.10 and p90 <= P90_REGRESSION_BOUND, (median, p90)


def test_memory_band_is_the_cross_validated_one():
    from planner.analysis.membands import band_rel, loo_errors, margin_rel, median_band_rel, peak_rows
    from planner.costmodel.calibration import DEFAULT_CALIBRATION as cal

    rows = peak_rows()
    errs = loo_errors(rows)
    assert len(errs) >= 15
    a = sorted(abs(e) for e in errs)
    # cross-validated: median 5.0%, p90 14.8% (in sample 4.8%, 14.8%)
    assert statistics.median(a) <= 0.10 and a[int(0.9 * (len(a) - 1))] <= P90_REGRESSION_BOUND
    assert cal.MEMORY_BAND_REL == pytest.approx(band_rel(errs), abs=5e-4)
    # the inner margin (the ranking's second memory tier): the median of the same misses, 4.64%
    assert cal.MEMORY_BAND_MEDIAN_REL == pytest.approx(median_band_rel(errs), abs=5e-4)
    assert 0 < cal.MEMORY_BAND_MEDIAN_REL < cal.MEMORY_BAND_REL
    # the margin: the one-sided side (measured above predicted), never wider than the two-sided band
    # the under-predicted side alone is narrower: the band, both ways, is the margin (planner.costmodel.capacity)
    assert margin_rel(errs) <= cal.MEMORY_BAND_REL


def test_evaluation_fits_honours_the_headroom():
    from planner.catalog.hardware import parse_cluster
    from planner.catalog.models import get_model
    from planner.costmodel import Context, evaluate
    from planner.specs import ParallelPlan, TrainingSpec

    train = TrainingSpec(seq_len=8192, global_batch=16, framework="fsdp")
    plan = ParallelPlan(dp=8, zero_stage=3, micro_batch=1, recompute="selective")
    model, cluster = get_model("llama-3.1-8b"), parse_cluster("h100x8")
    ev = evaluate(Context(model, cluster, train), plan)
    peak = ev.memory["peak_gib"]
    assert ev.memory["usable_gib"] == cluster.hardware.hbm_capacity_gib - 1.0
    room = ev.memory["usable_gib"] - peak
    tight = evaluate(Context(model, cluster, train, memory_headroom_gib=room + 1.0), plan)
    assert ev.fits and not tight.fits and tight.memory["peak_gib"] == peak
    assert tight.memory["memory_margin_rel"] == 0.0  # an explicit headroom replaces the default margin


README_COMMANDS = [
    ["--model", "llama-70b", "--cluster", "a100x64"],
    ["--model", "llama-3.1-405b", "--cluster", "h100x16384", "--seq-len", "8192", "--gbs", "2048", "--tp", "8"],
    ["--model", str(ROOT / "tests" / "data" / "llama-2-70b.json"), "--cluster", "h100x64"],
    ["--model", "mixtral-8x7b", "--cluster", "h100x32", "--launcher", "deepspeed"],
    ["--model", "llama-405b", "--cluster", "h100x16384", "--seq-len", "8192", "--gbs", "2048"],
]


def _plan(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-m", "planner.ui.cli", *args, "--json"], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("args", README_COMMANDS, ids=lambda a: " ".join(a[1:4]))
def test_readme_commands_keep_the_memory_margin(args):
    # #1 at or below usable x (1 - its memory band): the margin is the band (calibration.MEMORY_BAND_REL, 0.1506: 90%
    # of the published peaks within 15% of their cross-validated prediction)
    from planner.costmodel.calibration import DEFAULT_CALIBRATION as cal

    doc = _plan(args)
    best = doc["plans"][0]
    mem, band = best["memory"], best["peak_memory_band"]
    assert mem["memory_margin_rel"] == band["rel"] == cal.MEMORY_BAND_REL > 0.1
    assert best["within_memory_margin"] and mem["peak_gib"] <= mem["usable_gib"] * (1 - mem["memory_margin_rel"])


def test_memory_headroom_zero_opts_out_of_the_margin():
    # Llama 3.1 405B with torchtitan (the issue cites it on h100x2048): on h100x1024 the fastest layout (73.5 GiB of
    # 78.65 usable) ranks after every plan keeping the margin (#1 33% slower), and #1 says so; --memory-headroom 0
    # gives fastest-first back
    from planner.costmodel.calibration import DEFAULT_CALIBRATION as cal

    args = ["--model", "llama-3.1-405b", "--cluster", "h100x1024", "--seq-len", "8192", "--gbs", "1024",
            "--launcher", "torchtitan"]
    default, plain = _plan(args), _plan([*args, "--memory-headroom", "0"])
    assert default["plans"][0]["within_memory_margin"]
    assert plain["search"]["memory_margin_rel"] == 0.0 and plain["plans"][0]["memory"]["memory_margin_rel"] == 0.0
    fastest = min(p["step_time_s"] for p in plain["plans"])
    assert plain["plans"][0]["step_time_s"] <= fastest * 1.002
    assert default["plans"][0]["step_time_s"] > plain["plans"][0]["step_time_s"] * 1.002
    fast_mem = plain["plans"][0]["memory"]  # fits, but inside the default margin
    assert plain["plans"][0]["fits"] and fast_mem["peak_gib"] > fast_mem["usable_gib"] * (1 - cal.MEMORY_BAND_REL)
    note = [w for w in default["plans"][0]["warnings"] if w.startswith("the memory margin ranks")]
    assert len(note) == 1 and "--memory-headroom 0 ranks it first" in note[0]
    assert f"{plain['plans'][0]['step_time_s']:.3f} s" in note[0]


def test_published_tpu_and_deepseek_plans_fit_from_the_cli(tmp_path):
    # AI-Hypercomputer's Llama 3.1 70B MaxText recipe on v6e-256 (remat_policy custom, the layer input and q/k/v
    # offloaded to host; runs/known_runs_tpu_dev.yaml) fits with the flags describing it. DeepSeek-V3's own plan on 2048
    # H800s (FP8, DualPipe, BF16 moments, FP8 MoE activation cache, its MTP module; the report, arXiv 2412.19437) is
    # its run record through `plan validate`: its own framework keeps no FP8 weight copy across micro-batches
    # (validate.infer_precision), which the plain flags, scored with Transformer Engine's cache, would add: 80.2 GiB
    # on 78.7 usable once the MTP module is priced (81.4 on the middle ranks before it, 78.5 only with the optimizer
    # offloaded)
    v6e = _plan(["--model", "llama-3.1-70b", "--cluster", "tpu-v6ex256", "--gbs", "1280", "--seq-len", "8192",
                 "--launcher", "maxtext", "--tp", "1", "--pp", "1", "--cp", "1", "--zero", "3", "--mbs", "5",
                 "--recompute", "selective", "--remat-offload", "decoder_layer_input,query_proj,key_proj,value_proj"])
    assert v6e["plans"][0]["fits"], v6e["plans"][0]["memory"]
    runs = [r for r in load_runs(data_dir("runs") / "known_runs_dev.yaml") if r["id"] == "deepseek-v3-2048xh800"]
    path = tmp_path / "dsv3.yaml"
    path.write_text(json.dumps(runs))
    out = subprocess.run([sys.executable, "-m", "planner.ui.cli", "validate", "--runs", str(path), "--json"],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    (row,) = json.loads(out.stdout)["runs"]
    assert row["fits"] and row["plan"]["schedule"] == "dualpipe" and row["peak_memory_gib"] < 78.7, row["memory"]
