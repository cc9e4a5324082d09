"""`plan calibrate`: fitting the physical constants to a cluster's own measurements."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from support import NCCL_TESTS_DIR

from planner.analysis import calibrate as c
from planner.analysis.nccl_tests import fit_link, parse_nccl_tests
from planner.analysis.validate import load_runs
from planner.catalog.data import data_dir
from planner.catalog.hardware import get_hardware, load_cluster_file
from planner.ui.cli import main

REF_NCCL = str(NCCL_TESTS_DIR)  # published nccl-tests outputs, vendored (tests/data/reference/README.md)


def _h100_dev_rows() -> list[dict]:
    """The H100 Megatron / NeMo rows of the dev set (no torchtitan, no llm-foundry)."""
    return [r for r in load_runs(data_dir("runs") / "known_runs_dev.yaml")
            if r["hardware"] == "h100-sxm-80gb" and "torchtitan" not in r["id"]
            and "foundry" not in r["source"].lower()]


@pytest.fixture(scope="module")
def h100_runs():
    runs = _h100_dev_rows()
    prepared, skipped = c.prepare_runs(runs)
    assert not skipped and len(prepared) >= 20
    return prepared


# The hidden profile: an H100 cluster whose BF16 and FP8 GEMMs reach less than the catalog's MAMF ceilings
# (0.803 and 0.709), whose attention kernels reach 0.6 of GEMM efficiency (default 0.75) and which loses a
# fixed 0.3 s per step.
HIDDEN = {"gemm_efficiency_max": 0.70, "gemm_efficiency_max_fp8": 0.62, "calibration.attn_rel_efficiency": 0.60}
HIDDEN_OVERHEAD_S = 0.3


def synthetic(prepared, hidden_hw, noise=0.05, seed=7, seq_scale=(1,)):
    """The dev runs' configurations (and longer-sequence variants), 'measured' on the hidden profile with
    5% multiplicative Gaussian noise (fixed seed)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in seq_scale:
        for p in prepared:
            q = p if k == 1 else dataclasses.replace(p, id=f"{p.id}-seq{k}x",
                                                      train=p.train.model_copy(update={"seq_len": p.train.seq_len * k}))
            noisy = q.predict(hidden_hw) * (1 + noise * float(rng.standard_normal()))
            out.append(dataclasses.replace(q, measured_s=noisy))
    return out


@pytest.mark.slow
def test_recovers_hidden_constants_within_5_percent_and_helps_held_out_runs(h100_runs):
    base = get_hardware("h100-sxm-80gb")
    hidden = c.with_values(base, HIDDEN | {"calibration.step_overhead_s": HIDDEN_OVERHEAD_S})
    params = {p.name: p for p in c.compute_params(base)}
    # the 24 H100 configurations at 1x, 4x, 16x and 32x their sequence length (attention share varies) to
    # fit; held out: the same configurations at 2x, with their own noise. Ten noise draws (seeds 1-10):
    # recovery is a statistical property, so it is checked on all of them, not on one lucky draw.
    held = synthetic(h100_runs, hidden, seed=99, seq_scale=(2,))
    within_5 = 0
    for seed in range(1, 11):
        res = c.calibrate(synthetic(h100_runs, hidden, seed=seed, seq_scale=(1, 4, 16, 32)), base, leave_one_out=False)
        worst = max(abs(c.get_value(res.hardware, params[n]) / v - 1) for n, v in HIDDEN.items())
        within_5 += worst < 0.05
        assert worst < 0.06, (seed, worst)
        # a 0.3 s overhead under 2-200 s steps with 5% noise is not pinned to 5%: found within 0.25 s
        assert abs(c.get_value(res.hardware, params["calibration.step_overhead_s"]) - HIDDEN_OVERHEAD_S) < 0.25
        before = statistics.median(abs(math.expm1(x)) for x in c.log_errors(held, base))
        after = statistics.median(abs(math.expm1(x)) for x in c.log_errors(held, res.hardware))
        assert after < before / 2 and after < 0.06  # noise is 5%: what remains is the noise
    assert within_5 >= 9  # measured: 9 of 10 (seed 7: attention 5.2% low, GEMM 3.4% high)


def test_link_constants_recovered_from_noisy_nccl_tables():
    rng = np.random.default_rng(3)
    for n, alpha_us, bw in ((8, 2.5, 400.0), (16, 6.0, 180.0)):
        lines = []
        for i in range(3, 35):
            size = 2**i
            t = (2 * (n - 1) * alpha_us + 2 * (n - 1) / n * size / (bw * 1e3)) * (1 + 0.05 * rng.standard_normal())
            alg = size / t / 1e3
            bus = alg * 2 * (n - 1) / n
            lines.append(f"{size} {size // 4} float sum -1 {t:.2f} {alg:.2f} {bus:.2f} 0 {t:.2f} {alg:.2f} {bus:.2f} 0")
        fit = fit_link(parse_nccl_tests("\n".join(lines), name="all_reduce_perf"))
        assert abs(fit.busbw_GBps / bw - 1) < 0.05 and abs(fit.alpha_us / alpha_us - 1) < 0.05, fit


def test_link_updates_map_tables_to_profile_fields():
    from planner.analysis.nccl_tests import read_nccl_tests

    hw = get_hardware("mi300x")
    fits = [fit_link(read_nccl_tests(f"{REF_NCCL}/{f}"), 1 << 20)
            for f in ("mi300x-8gpu-1node-all_reduce.txt", "mi300x-16gpu-2node-all_reduce.txt")]
    upd, lines = c.link_updates(hw, 8, fits)
    # single node: xGMI has no NVLS, so the ring figure; two nodes: 350 GB/s of 8 x 50 GB/s NICs
    assert abs(upd["scale_up.ring_busbw_GBps"] - 300.0) < 5 and 0.85 < upd["scale_out.achievable_fraction"] < 0.9
    assert len(lines) == 2
    prof = c.with_values(hw, upd)
    assert prof.scale_up.ring_busbw_GBps == upd["scale_up.ring_busbw_GBps"]


def test_unidentifiable_constants_are_held(h100_runs):
    base = get_hardware("h100-sxm-80gb")
    res = c.calibrate(h100_runs[:4], base, leave_one_out=False)
    assert set(res.held_fixed) | set(res.fitted) <= {p.name for p in c.compute_params(base)}


@pytest.mark.slow
def test_cli_writes_a_cluster_file_that_plan_accepts(tmp_path):
    # the 24 H100 Megatron / NeMo runs of the dev set. NeMo 24.07's seven alone no longer
    # pin the GEMM ceiling apart from the attention efficiency since a causal layer's attention runs at its length's
    # tile efficiency (base.CAUSAL_TILE_REL: their 2k-token GPT-3 rows slower, their 8k-token Llama 3 rows faster):
    # fitted on them, gemm_efficiency_max ends at its bound 1 and calibrate refuses to write
    runs = _h100_dev_rows()
    assert len(runs) == 24
    runs_file = tmp_path / "mine.yaml"
    runs_file.write_text(yaml.safe_dump(runs))
    out = tmp_path / "my-cluster.yaml"
    r = CliRunner().invoke(main, ["calibrate", "--runs", str(runs_file), "--out", str(out),
                                  "--nccl-tests", f"{REF_NCCL}/h100-8gpu-1node-all_reduce.txt"])
    assert r.exit_code == 0, r.output
    assert "before: median |error|" in r.output and "leave-one-out: median |error|" in r.output
    cluster = load_cluster_file(out)
    assert cluster.hardware.calibration is not None and "plan calibrate" in cluster.hardware.calibration.source
    assert abs(cluster.hardware.scale_up.nvls_allreduce_busbw_GBps - 473.0) < 5
    r = CliRunner().invoke(main, ["--model", "llama-2-7b", "--cluster", str(out), "--json"])
    assert r.exit_code == 0, r.output
    # predictions on the calibrated profile carry the calibration's own leave-one-out band
    band = json.loads(r.output)["plans"][0]["step_time_band"]
    assert band["regime"] == "calibrated profile (leave-one-out)" and band["runs"] == 24
    assert band["rel"] == pytest.approx(cluster.hardware.calibration.error_band_rel)


def test_cli_refuses_mixed_accelerators(tmp_path):
    runs = load_runs(data_dir("runs") / "known_runs_dev.yaml")
    mixed = [next(r for r in runs if r["hardware"] == hw) for hw in ("h100-sxm-80gb", "a100-sxm-80gb")]
    f = tmp_path / "mixed.yaml"
    f.write_text(yaml.safe_dump(mixed))
    r = CliRunner().invoke(main, ["calibrate", "--runs", str(f), "--out", str(tmp_path / "x.yaml")])
    assert r.exit_code == 2 and "one accelerator at a time" in r.output
