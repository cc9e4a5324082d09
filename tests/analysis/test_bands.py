"""Error bands from the published runs' out-of-sample residuals (runs/error_bands.yaml, planner.analysis.bands)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from planner.analysis.bands import (
    DEV_FILES,
    HELD_OUT_FILES,
    MIN_RUNS,
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


def _loo_covered(res, r) -> bool:
    """Whether run r lies in the band computed WITHOUT it (leave-one-out over the shipped residuals)."""
    return r.miss <= band_for(res, r.family, r.moe, r.framework, exclude_id=r.id).rel


def test_bands_cover_80_percent_of_published_runs_cross_validated():
    res = load_residuals()
    # every dev run, and every held-out run whose source publishes a step time
    dev = sum(len(load_runs(data_dir("runs") / name)) for name, _ in DEV_FILES)
    held = sum(1 for name in HELD_OUT_FILES for run in load_runs(data_dir("runs") / name)
               if (run.get("measured") or {}).get("step_time_s"))
    assert sum(not r.held_out for r in res) == dev == 75 + 37
    # less the one moe_runs_added row plan validate cannot represent (mbridge2509 GB200 DeepSeek-V3 MXFP8 token drop:
    # 61 layers over PP 8 x VP 2, its notes)
    assert sum(r.held_out for r in res) == held - 1 == 68 + 90 + 16 + 15
    assert all(r.error == r.in_sample_error for r in res if r.held_out)  # no constant was fitted on them
    for moe in (False, True):
        covered = [_loo_covered(res, r) for r in res if r.moe == moe]
        assert sum(covered) / len(covered) >= 0.80, (moe, sum(covered) / len(covered))


def test_moe_bands_cover_the_published_moe_runs():
    """The failure this file's held-out residuals fixed (2026-11-27): with the development runs alone, Hopper's three
    Megatron MoE dev runs were fewer than MIN_RUNS and the band fell back to the Hopper Megatron runs, nearly all
    dense: +-12%, inside which 32 of the 49 held-out Hopper Megatron MoE runs landed (65%, for a band that claims
    90%); Blackwell's +-17% held 52 of 71 (73%). Each of the two regimes now covers at least 85% of its runs, each
    left out of its own band, and an MoE plan never gets a band of dense runs."""
    res = load_residuals()
    for family in ("hopper", "blackwell"):
        runs = [r for r in res if (r.family, r.moe, r.framework) == (family, True, "megatron")]
        assert len(runs) >= 50
        assert sum(_loo_covered(res, r) for r in runs) / len(runs) >= 0.85, family
    # the development runs alone, even under today's regime order (MoE before the hardware family), give bands the
    # held-out MoE runs break: Hopper +-18% (the 10 Megatron MoE dev runs) holds 38 of 49, Blackwell +-17% 52 of 71
    dev_only = tuple(r for r in res if not r.held_out)
    for family in ("hopper", "blackwell"):
        held = [r for r in res if r.held_out and (r.family, r.moe, r.framework) == (family, True, "megatron")]
        assert sum(r.miss <= band_for(dev_only, family, True, "megatron").rel for r in held) / len(held) < 0.80
    for family, fw in {(r.family, r.framework) for r in res} | {("ampere", "megatron"), ("hopper", "deepspeed")}:
        for moe, kind in ((True, "MoE"), (False, "dense")):
            regime = band_for(res, family, moe, fw).regime
            # (hardware with fewer than MIN_RUNS runs gets every run's band, labelled so)
            assert kind in regime.split("/") or regime.startswith("all runs; "), (family, fw, moe, regime)


@pytest.mark.slow
def test_shipped_residuals_are_current():
    # the file must be regenerated after a cost-model change: python -m planner.analysis.bands --write
    shipped = {r.id: r.in_sample_error for r in load_residuals()}
    for name in [n for n, _ in DEV_FILES] + list(HELD_OUT_FILES):
        runs = load_runs(data_dir("runs") / name)
        rows = residuals_from_validation(runs, validate_runs(runs)["runs"])
        assert {row["id"] for row in rows} <= shipped.keys(), name
        for row in rows:
            # 0.02: the CP-SAT stage balancer's wall-clock budget moves a few uneven-pipeline runs by ~0.5%
            # under machine load (issue 14a makes it deterministic); a stale file moves far more
            assert abs(row["in_sample_error"] - shipped[row["id"]]) < 0.02, (
                f"{row['id']}: runs/error_bands.yaml is stale; run python -m planner.analysis.bands --write")


def test_regime_fallback_and_band_shape():
    def mk(i, fam, moe, fw, e):
        return Residual(f"r{i}", "s", fam, moe, fw, e)

    res = tuple(mk(i, "hopper", False, "megatron", e) for i, e in enumerate([0.1, -0.1, 0.05, 0.0, 0.2, -0.2]))
    res += (mk(9, "tpu", False, "maxtext", 1.0),)
    res += tuple(mk(20 + i, "ampere", True, "megatron", e) for i, e in enumerate([0.3, -0.3, 0.4, 0.2, -0.1]))
    b = band_for(res, "hopper", False, "megatron")
    assert b.regime == "hopper/dense/megatron" and b.runs == 6
    # no Hopper MoE runs: the MoE runs of the same framework on other hardware, never Hopper's dense ones
    assert band_for(res, "hopper", True, "megatron").regime == "MoE/megatron"
    assert band_for(res, "hopper", True, "fsdp").regime == "MoE"  # nor of that framework: every MoE run
    # one TPU run < MIN_RUNS: the hardware's accuracy is not known, every run's band
    assert band_for(res, "tpu", False, "maxtext").regime == "all runs; only 1 run on tpu"
    assert band_for(res, "tpu", True, "maxtext").rel == band_for(res, "cdna3", True, "fsdp").rel
    # no run on the family at all: the band is the other hardware's, and its label says so
    assert band_for(res, "cdna3", False, "fsdp").regime == "all runs; none on cdna3"
    every = sorted(r.miss for r in res)  # 12 misses: the 0.9 quantile lies 0.9 of the way from the 10th to the 11th
    assert band_for(res, "cdna3", False, "fsdp").rel == pytest.approx(every[9] + 0.9 * (every[10] - every[9])) == \
        band_for(res, "cdna3", True, "fsdp").rel
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


def test_moe_bands_against_issue_23_target():
    """Issue 23 asks for MoE error bands no wider than +-25%. Drawn from every published run (held-out ones included),
    the two Megatron MoE regimes are wider: Hopper +-33%, Blackwell +-28% (from 52 and 79 runs); the target is NOT
    met. With the development runs alone they read +-18% and +-17% and did not hold
    (test_moe_bands_cover_the_published_moe_runs). Each band is its own runs' quantile, and neither may grow past
    today's width by more than a point without this test being updated (a regression of the MoE model widens it)."""
    from planner.analysis.bands import BAND_QUANTILE, _quantile

    res = load_residuals()
    for family, today in (("hopper", 0.333), ("blackwell", 0.284)):
        runs = [r.miss for r in res if (r.family, r.moe, r.framework) == (family, True, "megatron")]
        band = band_for(res, family, True, "megatron")
        assert band.regime == f"{family}/MoE/megatron" and band.runs == len(runs) >= MIN_RUNS
        assert band.rel == pytest.approx(_quantile(runs, BAND_QUANTILE))
        assert band.rel <= today + 0.01, (family, band.rel)


def test_hardware_with_few_runs_gets_every_runs_band_and_says_so():
    """The only MI300X step times in the project's files, torchao's torchtitan Llama-3-8B rows (held out in
    runs/known_runs_memory.yaml), ran 1.42x and 1.81x the predicted step (docs/cli.md). They are in the bands, two
    runs, fewer than MIN_RUNS: MI300X's accuracy is not known, so an MI300X plan gets every run's band, labelled with
    how few are MI300X's, not the +-9% Megatron's dense runs on other hardware would lend it; both rows lie outside
    it. Hardware no run is on gets the same band, labelled so."""
    res = load_residuals()
    assert len([r for r in res if r.family == "cdna3"]) == 2 < MIN_RUNS
    band = band_for(res, "cdna3", False, "megatron")
    assert band.regime == "all runs; only 2 runs on cdna3" and band.runs == len(res)
    assert band.rel > 2 * band_for(res, "hopper", False, "megatron").rel
    rows = {r["id"]: r for r in validate_runs(load_runs(data_dir("runs") / "known_runs_memory.yaml"))["runs"]}
    slower = {rid: r["measured_step_time_s"] / r["step_time_s"] for rid, r in rows.items() if "8xmi300x" in rid}
    assert sorted(slower.values()) == pytest.approx([1.42, 1.81], abs=0.03), slower
    assert min(slower.values()) > 1 + band.rel
    without = band_for(tuple(r for r in res if r.family != "cdna3"), "cdna3", False, "fsdp")
    assert without.regime == "all runs; none on cdna3"
