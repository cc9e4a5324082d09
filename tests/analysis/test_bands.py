"""Error bands from the development runs' residuals (runs/error_bands.yaml, planner.analysis.bands)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from planner.analysis.bands import (
    Band,
    Residual,
    band_for,
    hardware_family,
    load_residuals,
    overlap_note,
    residuals_from_validation,
)
from planner.analysis.validate import load_runs, validate_runs
from planner.catalog.data import data_dir
from planner.ui.cli import main


def test_bands_cover_80_percent_of_dev_runs_cross_validated():
    # each run is checked against the band computed WITHOUT it (leave-one-out over the shipped residuals)
    res = load_residuals()
    assert len(res) == 75 + 37
    covered = [r.miss <= band_for(res, r.family, r.moe, r.framework, exclude_id=r.id).rel for r in res]
    assert sum(covered) / len(covered) >= 0.80


@pytest.mark.slow
def test_shipped_residuals_are_current():
    # the file must be regenerated after a cost-model change: python -m planner.analysis.bands --write
    shipped = {r.id: r.in_sample_error for r in load_residuals()}
    for name in ("known_runs_dev.yaml", "known_runs_tpu_dev.yaml"):
        runs = load_runs(data_dir("runs") / name)
        for row in residuals_from_validation(runs, validate_runs(runs)["runs"]):
            # 0.02: the CP-SAT stage balancer's wall-clock budget moves a few uneven-pipeline runs by ~0.5%
            # under machine load (issue 14a makes it deterministic); a stale file moves far more
            assert abs(row["in_sample_error"] - shipped[row["id"]]) < 0.02, (
                f"{row['id']}: runs/error_bands.yaml is stale; run python -m planner.analysis.bands --write")


def test_regime_fallback_and_band_shape():
    def mk(i, fam, moe, fw, e):
        return Residual(f"r{i}", "s", fam, moe, fw, e)

    res = tuple(mk(i, "hopper", False, "megatron", e) for i, e in enumerate([0.1, -0.1, 0.05, 0.0, 0.2, -0.2]))
    res += (mk(9, "tpu", False, "maxtext", 1.0),)
    b = band_for(res, "hopper", False, "megatron")
    assert b.regime == "hopper/dense/megatron" and b.runs == 6
    assert band_for(res, "hopper", True, "megatron").regime == "hopper/megatron"  # no MoE runs: coarser
    assert band_for(res, "tpu", False, "maxtext").regime == "all runs"  # one TPU run < MIN_RUNS
    # no run on the family at all: the band is the other hardware's, and its label says so
    assert band_for(res, "cdna3", False, "fsdp").regime == "all runs; none on cdna3"
    assert band_for(res, "cdna3", False, "fsdp").rel == band_for(res, "tpu", False, "maxtext").rel
    # misses are symmetric in ratio: predicted 2x too slow and 2x too fast are both a miss of 1.0
    assert mk(0, "x", False, "y", 1.0).miss == pytest.approx(1.0) == mk(0, "x", False, "y", -0.5).miss
    band = Band(0.25, "r", 9).around(10.0)
    assert band["low_s"] == pytest.approx(8.0) and band["high_s"] == pytest.approx(12.5)


def test_hardware_families():
    assert [hardware_family(h) for h in ("a100-sxm-80gb", "h800-sxm-80gb", "gb200-nvl72", "tpu-v6e", "mi300x")] == [
        "ampere", "hopper", "blackwell", "tpu", "cdna3"]


def test_overlap_note_only_when_leading_plans_overlap():
    def band(t, rel):
        return {"step_time_s": t, "step_time_band": Band(rel, "hopper", 20).around(t)}

    assert overlap_note([band(10.0, 0.1), band(10.5, 0.1), band(13.0, 0.1)]).startswith("plans 1-2 ")
    assert overlap_note([band(10.0, 0.05), band(12.0, 0.05)]) is None
    assert overlap_note([band(10.0, 0.1)]) is None


def test_plan_json_and_table_carry_the_band():
    args = ["--model", "llama-3.1-8b", "--cluster", "h100x8", "--top", "3"]
    doc = json.loads(CliRunner().invoke(main, args + ["--json"]).output)
    for p in doc["plans"]:
        b = p["step_time_band"]
        assert b["low_s"] < p["step_time_s"] < b["high_s"] and b["rel"] > 0
        assert b["high_s"] == pytest.approx(p["step_time_s"] * (1 + b["rel"]))
    assert "band_note" in doc
    text = CliRunner().invoke(main, args).output
    assert f"±{100 * doc['plans'][0]['step_time_band']['rel']:.0f}%" in text


def test_report_shows_the_band(tmp_path):
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", "--model", "llama-3.1-8b", "--cluster", "h100x8", "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(CliRunner().invoke(main, ["--model", "llama-3.1-8b", "--cluster", "h100x8", "--json"]).output)
    text = out.read_text()
    assert f"±{100 * doc['plans'][0]['step_time_band']['rel']:.0f}%" in text and "error band" in text


def test_moe_bands_within_issue_23_target():
    """Issue 23: the MoE error bands no wider than +-25%, for every regime an MoE dev run is in (Megatron on Blackwell
    and Hopper, torchtitan/FSDP on Hopper, MaxText on TPU). Blackwell Megatron MoE 17.1% (18.2% before Megatron-Bridge's
    rows reduced gradients in bf16 as their scripts do and the DGX Cloud DeepSeek-V3 rows recomputed their launch
    files' modules; 19.9% before DeepSeek-V3's MTP
    module was priced and MoE selective recompute stopped re-running the attention core; 21.5% before HybridEP's host
    launches were counted, 28% while the 25.11 B200 gpt-oss row was scored at its table's EP 8, +-212% when the issue
    was filed); TPU 18% (59% while v6e, which one
    publication covers, was cross-validated at the other generations' ceiling)."""
    res = load_residuals()
    regimes = {(r.family, r.framework) for r in res if r.moe} | {("hopper", "fsdp")}
    assert {("blackwell", "megatron"), ("hopper", "megatron"), ("tpu", "maxtext")} <= regimes
    widths = {reg: band_for(res, reg[0], True, reg[1]).rel for reg in regimes}
    assert max(widths.values()) <= 0.25, widths
    assert widths[("blackwell", "megatron")] == pytest.approx(0.171, abs=0.01)


def test_hardware_without_development_runs_says_so_and_the_held_out_mi300x_steps_show_why():
    """No development run is on MI300X (cdna3): its band is every run's and its label says so. The only MI300X step
    times in the project's files (torchao's torchtitan Llama-3-8B rows, held out in runs/known_runs_memory.yaml) ran
    1.42x and 1.81x the predicted step (docs/cli.md): far outside the borrowed band."""
    res = load_residuals()
    assert not [r for r in res if r.family == "cdna3"]
    assert band_for(res, "cdna3", False, "fsdp").regime == "all runs; none on cdna3"
    rows = {r["id"]: r for r in validate_runs(load_runs(data_dir("runs") / "known_runs_memory.yaml"))["runs"]}
    slower = {rid: r["measured_step_time_s"] / r["step_time_s"] for rid, r in rows.items() if "8xmi300x" in rid}
    assert sorted(slower.values()) == pytest.approx([1.42, 1.81], abs=0.03), slower
    assert min(slower.values()) > 1 + band_for(res, "cdna3", False, "fsdp").rel
