"""Error bands from the published runs' out-of-sample residuals (runs/error_bands.json, planner.analysis.bands)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from planner.analysis.bands import (
    BIAS_MIN_RUNS,
    DEV_FILES,
    HELD_OUT_FILES,
    MIN_RUNS,
    Band,
    Residual,
    band_for,
    hardware_bias,
    hardware_family,
    load_residuals,
    overlap_note,
    residuals_from_validation,
    sign_test_p,
)
from planner.analysis.validate import load_runs, validate_runs
from planner.catalog.data import data_dir
from planner.ui.cli import main


def _loo_covered(res, r) -> bool:
    """Whether run r lies in the band computed WITHOUT it (leave-one-out over the shipped residuals)."""
    return r.miss <= band_for(res, r.family, r.moe, r.framework, exclude_id=r.id,
                              attention_extrapolated=r.attention_extrapolated).rel


def test_bands_cover_80_percent_of_published_runs_cross_validated():
    res = load_residuals()
    # every dev run, and every held-out run whose source publishes a step time
    dev = sum(len(load_runs(data_dir("runs") / name)) for name, _ in DEV_FILES)
    held = sum(1 for name in HELD_OUT_FILES for run in load_runs(data_dir("runs") / name)
               if (run.get("measured") or {}).get("step_time_s"))
    assert sum(not r.held_out for r in res) == dev == 75 + 37
    # less the one moe_runs_added row plan validate cannot represent (mbridge2509 GB200 DeepSeek-V3 MXFP8 token drop:
    # 61 layers over PP 8 x VP 2, its notes)
    assert sum(r.held_out for r in res) == held - 1 == 71 + 91 + 16 + 15 + 57
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
    # the development runs alone, even under today's regime order (MoE before the hardware family), give a band the
    # held-out MoE runs break: Blackwell +-17% (its 7 Megatron MoE dev runs) holds 53 of 72. Hopper's 3 dev runs
    # borrow the 10 Megatron MoE dev runs' +-18% (38 of 49 held) but keep their own +-26% since 2026-11-28 (43 of 49)
    dev_only = tuple(r for r in res if not r.held_out)
    held = [r for r in res if r.held_out and (r.family, r.moe, r.framework) == ("blackwell", True, "megatron")]
    assert sum(r.miss <= band_for(dev_only, "blackwell", True, "megatron").rel for r in held) / len(held) < 0.80
    assert band_for(dev_only, "hopper", True, "megatron").regime == \
        "hopper/MoE/megatron (3 runs), wider than MoE/megatron"
    for family, fw in {(r.family, r.framework) for r in res} | {("ampere", "megatron"), ("hopper", "deepspeed")}:
        for moe, kind in ((True, "MoE"), (False, "dense")):
            regime = band_for(res, family, moe, fw).regime
            # (hardware with fewer than MIN_RUNS runs gets every run's band, labelled so)
            assert kind in regime.split("/") or regime.startswith("all runs; "), (family, fw, moe, regime)


@pytest.mark.slow
def test_shipped_residuals_are_current():
    # the file must be regenerated after a cost-model change: python -m planner.analysis.bands --write
    shipped = {r.id: r.in_sample_error for r in load_residuals()}
    beyond = {r.id for r in load_residuals() if r.attention_extrapolated}
    hw = {r.id: r.hardware for r in load_residuals()}
    for name in [n for n, _ in DEV_FILES] + list(HELD_OUT_FILES):
        runs = load_runs(data_dir("runs") / name)
        rows = residuals_from_validation(runs, validate_runs(runs)["runs"])
        assert {row["id"] for row in rows} <= shipped.keys(), name
        assert {row["id"] for row in rows if row.get("attention_extrapolated")} == beyond & {row["id"] for row in rows}
        assert all(row["hardware"] == hw[row["id"]] for row in rows), name  # hardware_bias reads it
        for row in rows:
            # 0.02: the CP-SAT stage balancer's wall-clock budget moves a few uneven-pipeline runs by ~0.5%
            # under machine load (issue 14a makes it deterministic); a stale file moves far more
            assert abs(row["in_sample_error"] - shipped[row["id"]]) < 0.02, (
                f"{row['id']}: runs/error_bands.json is stale; run python -m planner.analysis.bands --write")


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
    """Issue 23 asks for MoE error bands no wider than +-25%. Drawn from every published run (held-out ones included)
    whose plan lies within the fitted attention share, the Hopper Megatron MoE band is +-22% (48 runs): met; the
    Blackwell one +-25.6% (135 runs): NOT met (+-31% while GB300 was priced at GB200's GEMM efficiency; +-25.7% before
    Megatron's recomputed norms and activations were charged). Until 2026-11-28 the four H100 long-context rows
    sat in the Hopper regime (+-33%). With the development runs alone the two read +-18% and +-17% and did not hold
    (test_moe_bands_cover_the_published_moe_runs). Each band is its own runs' quantile, and neither may grow past
    today's width by more than a point without this test being updated (a regression of the MoE model widens it)."""
    from planner.analysis.bands import BAND_QUANTILE, _quantile

    res = load_residuals()
    for family, today in (("hopper", 0.224), ("blackwell", 0.256)):
        runs = [r.miss for r in res
                if (r.family, r.moe, r.framework) == (family, True, "megatron") and not r.attention_extrapolated]
        band = band_for(res, family, True, "megatron")
        assert band.regime == f"{family}/MoE/megatron" and band.runs == len(runs) >= MIN_RUNS
        assert band.rel == pytest.approx(_quantile(runs, BAND_QUANTILE))
        assert band.rel <= today + 0.01, (family, band.rel)


def test_plans_beyond_the_fitted_attention_share_get_the_band_of_the_runs_that_were():
    """A plan whose step extrapolates the fitted attention efficiency (planner.costmodel.layers.attention_extrapolated)
    is banded by the published runs that did: the model zoo's 16k-128k-token Qwen3-235B-A22B rows and torchao's MI300X
    float8 row missed by 1.34x-1.81x (+-74%), where the Hopper Megatron MoE band they used to sit in said +-33%; the
    runs within the range no longer carry them. Each of the six lies in the band of the other five but the widest."""
    from planner.analysis.bands import BAND_QUANTILE, EXTRAPOLATED, _quantile

    res = load_residuals()
    beyond = [r for r in res if r.attention_extrapolated]
    assert sorted(r.id.split("-")[0] for r in beyond) == ["modelzoo"] * 5 + ["torchao"]
    assert sorted(round(r.miss, 2) for r in beyond) == pytest.approx([0.34, 0.4, 0.44, 0.45, 0.67, 0.81], abs=0.01)
    band = band_for(res, "hopper", True, "megatron", attention_extrapolated=True)
    assert (band.regime, band.runs) == (EXTRAPOLATED, 6)
    assert band.rel == pytest.approx(_quantile([r.miss for r in beyond], BAND_QUANTILE))
    assert band.rel > 2 * band_for(res, "hopper", True, "megatron").rel
    assert sum(_loo_covered(res, r) for r in beyond) == 5
    # with fewer than MIN_RUNS such runs, such a plan falls back to its regime over every run
    few = tuple(r for r in res if r not in beyond[:2])
    assert band_for(few, "hopper", True, "megatron", attention_extrapolated=True).regime == "hopper/MoE/megatron"
    # the plans: Qwen3-235B-A22B on 256 H100 at 4k tokens and at 64k
    for seq, regime in ((4096, "hopper/MoE/megatron"), (65536, EXTRAPOLATED)):
        doc = json.loads(CliRunner().invoke(main, ["--model", "qwen3-235b-a22b", "--cluster", "h100x256", "--seq-len",
                                                   str(seq), "--top", "2", "--json"]).output)
        assert {p["step_time_band"]["regime"] for p in doc["plans"]} == {regime}, seq


def test_hardware_with_few_runs_gets_every_runs_band_and_says_so():
    """The only MI300X step times in the project's files, torchao's torchtitan Llama-3-8B rows (held out in
    runs/known_runs_memory.yaml), ran 1.42x and 1.81x the predicted step (docs/cli.md). They are in the bands, two
    runs, fewer than MIN_RUNS: MI300X's accuracy is not known, so an MI300X plan gets every run's band, labelled with
    how few are MI300X's, not the +-9% Megatron's dense runs on other hardware would lend it; both rows lie outside
    it. Hardware no run is on gets the same band, labelled so."""
    res = load_residuals()
    assert len([r for r in res if r.family == "cdna3"]) == 2 < MIN_RUNS
    # the float8 row's plan is beyond the fitted attention share: a plan within it gets the other runs' band
    in_range = [r for r in res if not r.attention_extrapolated]
    band = band_for(res, "cdna3", False, "megatron")
    assert band.regime == "all runs; only 1 run on cdna3" and band.runs == len(in_range)
    assert band.rel > 2 * band_for(res, "hopper", False, "megatron").rel
    rows = {r["id"]: r for r in validate_runs(load_runs(data_dir("runs") / "known_runs_memory.yaml"))["runs"]}
    slower = {rid: r["measured_step_time_s"] / r["step_time_s"] for rid, r in rows.items() if "8xmi300x" in rid}
    assert sorted(slower.values()) == pytest.approx([1.42, 1.81], abs=0.03), slower
    assert min(slower.values()) > 1 + band.rel
    without = band_for(tuple(r for r in res if r.family != "cdna3"), "cdna3", False, "fsdp")
    assert without.regime == "all runs; none on cdna3"


def test_a_borrowed_band_is_never_narrower_than_the_regimes_own_runs():
    """torchtitan's three B200 rows (runs/known_runs_memory.yaml) ran 1.74x-1.93x the predicted step: fewer than
    MIN_RUNS, so the regime borrows the FSDP runs of other hardware, which lend +-37% (+-58% while torchao's MI300X
    float8 row, now in the attention-extrapolated regime, counted there). The band keeps its own runs' width."""
    from planner.analysis.bands import BAND_QUANTILE, _quantile

    res = load_residuals()
    own = [r.miss for r in res if (r.family, r.moe, r.framework) == ("blackwell", False, "fsdp")]
    assert len(own) == 3 < MIN_RUNS and min(own) > 0.7
    lent = band_for(tuple(r for r in res if (r.family, r.framework) != ("blackwell", "fsdp")), "blackwell", False,
                    "fsdp")
    assert lent.regime == "dense/fsdp" and lent.rel < 0.4
    band = band_for(res, "blackwell", False, "fsdp")
    assert band.rel == pytest.approx(_quantile(own, BAND_QUANTILE)) and band.rel > 0.9
    assert (band.regime, band.runs) == ("blackwell/dense/fsdp (3 runs), wider than dense/fsdp", 3)
    # a regime whose own few runs missed less than the band it borrows keeps the borrowed one
    few = tuple(Residual(f"b{i}", "s", "blackwell", False, "fsdp", e) for i, e in enumerate([0.05, -0.05, 0.1]))
    pool = tuple(r for r in res if (r.family, r.framework) != ("blackwell", "fsdp")) + few
    kept = band_for(pool, "blackwell", False, "fsdp")
    assert kept.regime == "dense/fsdp" and kept.runs == len(pool_dense := [r for r in pool if (r.moe, r.framework) == (
        False, "fsdp") and not r.attention_extrapolated])
    assert kept.rel == pytest.approx(_quantile([r.miss for r in pool_dense], BAND_QUANTILE)) and kept.rel > 0.1


def _res(hw: str, errors: list[float]) -> tuple[Residual, ...]:
    return tuple(Residual(f"{hw}-{i}", "src", "blackwell", True, "megatron", e, e, True, False, hw)
                 for i, e in enumerate(errors))


def test_hardware_bias_is_said_only_for_many_one_sided_runs():
    """hardware_bias: at least BIAS_MIN_RUNS runs, median signed error beyond 10%, two-sided sign test below 1%."""
    assert sign_test_p(9, 10) == pytest.approx(2 * 11 / 1024)  # 0.021: 9 of 10 is not enough
    assert sign_test_p(11, 12) == pytest.approx(2 * 13 / 4096)  # 0.0063
    assert sign_test_p(28, 38) == pytest.approx(0.0051, abs=1e-4) and sign_test_p(5, 10) == 1.0
    one_sided = [0.15, 0.2, 0.12, 0.3, 0.18, 0.11, 0.25, 0.16, -0.05, 0.14, 0.22, 0.13]  # 11 of 12 too slow
    b = hardware_bias(_res("gb300-nvl72", one_sided), "gb300-nvl72")
    assert b is not None and (b.runs, b.same_side) == (12, 11) and b.median_error == pytest.approx(0.155)
    assert b.p_value == pytest.approx(0.0063, abs=1e-4)
    assert "ran faster than the model predicts: 11 of 12" in b.note() and "0.87x the prediction" in b.note()
    assert "lower edge of their bands" in b.note()
    slow = hardware_bias(_res("x", [-e for e in one_sided]), "x")
    assert slow is not None and "ran slower" in slow.note() and "upper edge" in slow.note()
    assert "1.18x the prediction" in slow.note()  # measured / predicted = 1 / (1 - 0.155)
    assert hardware_bias(_res("x", one_sided[:BIAS_MIN_RUNS - 1]), "x") is None  # too few
    assert hardware_bias(_res("x", one_sided), "y") is None  # another hardware's runs
    assert hardware_bias(_res("x", [e / 2 for e in one_sided]), "x") is None  # median +7.75%: within 10%
    assert hardware_bias(_res("x", one_sided[:10]), "x") is None  # 9 of 10 on one side: p = 0.021


def test_no_hardware_is_one_sided_on_the_shipped_residuals():
    """On the shipped residuals no hardware qualifies. GB300 did (30 of 38 faster than predicted, median +17%, sign
    test p = 0.0005) while its profile priced GEMMs at GB200's efficiency; with the GB300 / GB200 ratio of Azure's
    published cuBLASLt GEMMs (hardware_profiles/gb300-nvl72.yaml, 2026-11-28) its 38 rows sit at a median of +2%,
    21 of 38 slower. B200's runs are one-sided (22 of 28 too fast) but by a median of 6%: not said."""
    res = load_residuals()
    assert all(r.hardware for r in res)
    assert not [hw for hw in {r.hardware for r in res} if hardware_bias(res, hw) is not None]
    gb300 = [r.error for r in res if r.hardware == "gb300-nvl72"]
    assert len(gb300) == 38 and abs(sorted(gb300)[19]) < 0.05
    b200 = [r.error for r in res if r.hardware == "b200-sxm-180gb"]
    assert sum(e < 0 for e in b200) == 22 and len(b200) == 28 and -0.1 < sorted(b200)[14] < 0


@pytest.fixture
def one_sided_gb300(monkeypatch):
    """The shipped residuals with GB300's replaced by twelve one-sided ones (11 of 12 predicted too slow)."""
    from tests.support import patch_one_sided

    patch_one_sided(monkeypatch, "gb300-nvl72")


def test_plans_on_one_sided_hardware_say_so(one_sided_gb300):
    args = ["--model", "qwen3-30b-a3b", "--cluster", "gb300x8", "--top", "2"]
    doc = json.loads(CliRunner().invoke(main, args + ["--json"]).output)
    bias = doc["hardware_bias"]
    assert bias["hardware"] == "gb300-nvl72" and bias["runs"] == 12 and bias["median_error"] > 0.1
    text = " ".join(CliRunner().invoke(main, args).output.split())
    assert "published runs on gb300-nvl72 ran faster than the model predicts: 11 of 12" in text
    other = json.loads(CliRunner().invoke(main, ["--model", "qwen3-30b-a3b", "--cluster", "gb200x8", "--top", "2",
                                                 "--json"]).output)
    assert other["hardware_bias"] is None


def test_shipped_plans_say_nothing():
    doc = json.loads(CliRunner().invoke(main, ["--model", "qwen3-30b-a3b", "--cluster", "gb300x8", "--top", "1",
                                               "--json"]).output)
    assert doc["hardware_bias"] is None


def test_report_shows_the_hardware_bias(tmp_path, one_sided_gb300):
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", "--model", "qwen3-30b-a3b", "--cluster", "gb300x8", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "published runs on gb300-nvl72 ran faster than the model predicts: 11 of 12" in out.read_text()


def test_compare_says_which_hardware_runs_land_on_one_side(one_sided_gb300):
    """`plan compare` of GB300 against GB200: the GB300 note says on which side of its band its published runs
    landed: once, with the row that has it."""
    args = ["compare", "--model", "qwen3-30b-a3b", "--cluster", "gb300x8", "--cluster", "gb200x8"]
    doc = json.loads(CliRunner().invoke(main, args + ["--json"]).output)
    assert [r.get("hardware_bias", {}).get("hardware") for r in doc["rows"]] == ["gb300-nvl72", None]
    notes = [n for n in doc["band_notes"] if "published runs on" in n]
    assert len(notes) == 1 and "gb300-nvl72 ran faster than the model predicts: 11 of 12" in notes[0]
    assert "expect its steps nearer the lower edge of their bands" in notes[0]
