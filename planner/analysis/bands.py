"""Honest error bands: how far a measured step lands from the prediction, per regime.

A regime is (hardware family, dense/MoE, framework). The residuals of every published run whose error is out of
sample are computed once and shipped as data in runs/error_bands.json; regenerate them after any cost-model change
with

    PYTHONPATH=$PWD python -m planner.analysis.bands --write

Two kinds of residual, both out of sample: a development run's (runs/known_runs_dev.yaml, known_runs_tpu_dev.yaml)
is its prediction when its publication was left out of the fit of the constants (leave-one-source-out,
planner.analysis.devfit); a held-out run's (HELD_OUT_FILES: no constant was ever fitted on them) is its prediction
with the shipped constants. A prediction's band is [t/(1+rel), t*(1+rel)], rel the BAND_QUANTILE quantile of
max(measured/predicted, predicted/measured) - 1 over the runs of its regime (at least MIN_RUNS of them; otherwise
the next coarser regime, _levels: the same model kind and framework on other hardware, the same kind on this
hardware family, the same kind anywhere, all runs; hardware with fewer than MIN_RUNS runs gets every run's misses and
says how few are its own). A plan whose attention core takes more of its layer compute than any development run's did
(planner.costmodel.layers.attention_extrapolated: its step time extrapolates the fitted attention efficiency) gets the
band of the published runs that were so, and every other plan the band of the runs that were not (EXTRAPOLATED). The
coverage tests (tests/analysis/test_bands.py) leave each run out of the band it is checked against.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

# two-sided 90% of a regime's misses; leave-one-out coverage of the dev runs: tests/analysis/test_bands.py
BAND_QUANTILE = 0.90
MIN_RUNS = 5  # fewer runs than this in a regime: use the next coarser one
# JSON, not YAML: every `plan` run reads it, and the JSON parser reads it in 0.5 ms where libyaml's parser with PyYAML's
# constructor took 23 ms of a 1.1 s DeepSeek-V3 search (benchmarks/search_speed.py, 2026-11-28)
BANDS_FILE = "error_bands.json"
# (file, TPU): the development runs, which the constants are fitted on
DEV_FILES = (("known_runs_dev.yaml", False), ("known_runs_tpu_dev.yaml", True))
# Published runs no constant was fitted on: their error with the shipped constants is out of sample. Bands drawn
# from the development runs alone covered 65% of the 49 Hopper and 73% of the 71 Blackwell Megatron MoE runs these
# files hold where they claim 90%: the Hopper MoE regime had 3 development runs and borrowed the Hopper Megatron
# band of the dense runs, +-12% (2026-11-27; tests/analysis/test_bands.py).
# runs/known_runs_memory.yaml's rows carry the step times their sources publish beside the peaks (torchtitan on H100,
# H200, B200 and MI300X): no constant is fitted on them either.
HELD_OUT_FILES = ("known_runs_added.yaml", "moe_runs_added.yaml", "modelzoo_runs_added.yaml", "known_runs_memory.yaml",
                  "blackwell_ultra_runs_added.yaml", "tpu7x_runs_added.yaml")
# The regime of plans beyond the attention share the attention efficiency was fitted on. Its published runs (2026-11-28:
# the model zoo's Qwen3-235B-A22B rows at 16k / 32k / 64k / 128k tokens on H100 and 128k on GB200, and torchao's
# MI300X Float8 row) missed by 1.34x-1.81x, while the Hopper Megatron MoE regime they sat in claimed +-33% for all its
# runs: a 64k-token plan was shown +-33% beside a warning that such runs ran 25-40% faster than predicted, and the
# 4k-token plans a band their own runs do not need (+-22% without those four rows). Since the causal tile efficiency
# (base.CAUSAL_TILE_REL, round 38) the model zoo rows miss by 1.26x-1.39x and seven 4k-token Qwen3-30B-A3B rows on 8
# Blackwell GPUs (within 1.08x) are beyond the share too: +-37% over 13 runs.
EXTRAPOLATED = "attention beyond its fitted range"


def hardware_family(hw_id: str, vendor: str = "") -> str:
    """Accelerator generation: ampere, hopper, blackwell, cdna3 (MI300-class), tpu; else the id."""
    h = hw_id.lower()
    if h.startswith("tpu"):
        return "tpu"
    if h.startswith("a100"):
        return "ampere"
    if h.startswith(("h100", "h800", "h200")):
        return "hopper"
    if h.startswith(("b200", "gb200", "b300", "gb300")):
        return "blackwell"
    if h.startswith("mi3"):
        return "cdna3"
    return h


@dataclass(frozen=True)
class Residual:
    id: str
    source: str  # citation key (first words of the source), for leave-one-source-out
    family: str
    moe: bool
    framework: str
    error: float  # predicted / measured - 1 out of sample: leave-one-source-out (dev run), shipped constants (held out)
    in_sample_error: float = float("nan")  # the same with the shipped constants (plan validate)
    held_out: bool = False  # a run no constant was fitted on (HELD_OUT_FILES): error == in_sample_error
    attention_extrapolated: bool = False  # its plan lies beyond the fitted attention share (EXTRAPOLATED)
    hardware: str = ""  # the hardware profile's id (hardware_bias); "" in files written before 2026-11-28

    @property
    def miss(self) -> float:
        """max(measured/predicted, predicted/measured) - 1: the factor by which the measurement lies off
        the prediction, either way (a band built from it never reaches zero seconds)."""
        return max(1.0 + self.error, 1.0 / (1.0 + self.error)) - 1.0


@dataclass(frozen=True)
class Band:
    rel: float
    regime: str  # which regime level supplied it
    runs: int

    def around(self, step_s: float) -> dict:
        return {"low_s": step_s / (1 + self.rel), "high_s": step_s * (1 + self.rel), "rel": self.rel,
                "regime": self.regime, "runs": self.runs}


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _levels(family: str, moe: bool, framework: str):
    """Regime keys from the most specific to all runs: (label, predicate on a Residual). The model kind comes before
    the hardware family: MoE runs miss by 3-5x what dense runs on the same hardware and stack do (the shipped
    residuals: Hopper Megatron 9% dense, 33% MoE), so an MoE plan never borrows a dense band, nor a dense plan an
    MoE one."""
    kind = "MoE" if moe else "dense"
    return (
        (f"{family}/{kind}/{framework}", lambda r: (r.family, r.moe, r.framework) == (family, moe, framework)),
        (f"{kind}/{framework}", lambda r: (r.moe, r.framework) == (moe, framework)),
        (f"{family}/{kind}", lambda r: (r.family, r.moe) == (family, moe)),
        (kind, lambda r: r.moe == moe),
        ("all runs", lambda r: True),
    )


def band_for(residuals: tuple[Residual, ...], family: str, moe: bool, framework: str,
             exclude_id: str | None = None, attention_extrapolated: bool = False) -> Band:
    pool = [r for r in residuals if r.id != exclude_id]
    beyond = [r.miss for r in pool if r.attention_extrapolated]
    if attention_extrapolated and len(beyond) >= MIN_RUNS:
        return Band(_quantile(beyond, BAND_QUANTILE), EXTRAPOLATED, len(beyond))
    if not attention_extrapolated:
        pool = [r for r in pool if not r.attention_extrapolated]
    on_family = sum(r.family == family for r in pool)
    if on_family < MIN_RUNS:
        # (almost) no published run on this hardware: its accuracy is not known, so every run's misses, and the label
        # says how few are its own (the 2 MI300X runs missed by 1.42x and 1.81x, while Megatron's dense runs on other
        # hardware would lend it +-9%)
        label = f"all runs; only {on_family} run{'s' * (on_family > 1)} on {family}" if on_family else \
            f"all runs; none on {family}"
        return Band(_quantile([r.miss for r in pool], BAND_QUANTILE), label, len(pool))
    levels = _levels(family, moe, framework)
    own_label, own_pred = levels[0]
    own = [r.miss for r in pool if own_pred(r)]
    for label, pred in levels:
        sel = [r.miss for r in pool if pred(r)]
        if len(sel) >= MIN_RUNS or label == "all runs":
            rel = _quantile(sel, BAND_QUANTILE)
            if own and label != own_label and _quantile(own, BAND_QUANTILE) > rel:
                # a borrowed band never claims less than the regime's own few runs missed by (torchtitan's three B200
                # rows ran 1.7-1.9x the prediction; the FSDP runs of other hardware lend +-37%)
                return Band(_quantile(own, BAND_QUANTILE), f"{own_label} ({len(own)} runs), wider than {label}",
                            len(own))
            return Band(rel, label, len(sel))
    raise AssertionError("unreachable")


# A hardware's published runs landing on one side of the prediction (hardware_bias): reported, never applied. At least
# BIAS_MIN_RUNS runs, their median signed error beyond BIAS_MIN_REL, and more of them on its side than chance puts
# there: the two-sided sign test (each run above or below the prediction with probability 1/2 under an unbiased model)
# below BIAS_MAX_P. Thresholds of what is worth saying, not fitted: twice the dense median miss (4-5%,
# docs/validation.md) and a 1% test. On the shipped residuals (2026-11-28) no hardware qualifies: gb300-nvl72 did
# (38 runs, median +17%, 30 predicted too slow, p = 0.0005) while its profile priced GEMMs at GB200's efficiency, and
# sits at +2% (21 of 38; +3%, 22 of 39 with the model zoo's GB300 row) with the GB300 / GB200 ratio of Azure's cuBLASLt
# GEMMs; b200 is one-sided (22 of 28 too fast,
# p = 0.004) but by a median of 6%; b300 (14 of 19 too fast, median -7%, p = 0.06) is neither. The runs are taken
# per model kind, as the bands are (dense and MoE runs of one hardware miss differently: TPU7x's eight dense rows all
# ran 10-20% slower than predicted, its MoE rows mostly faster, which pooled hide each other; 2026-11-29). At least 8
# runs: the fewest the 1% sign test can call one-sided (8 of 8: p = 0.0078; 7 of 7: 0.016).
BIAS_MIN_RUNS = 8
BIAS_MIN_REL = 0.10
BIAS_MAX_P = 0.01


@dataclass(frozen=True)
class HardwareBias:
    """The published runs on one hardware that the model predicts on one side: the median of their signed errors
    (predicted / measured - 1, out of sample), how many of them lie on that side and the sign test's p-value."""
    hardware: str
    median_error: float
    runs: int
    same_side: int
    p_value: float
    kind: str = ""  # "dense" / "MoE": the model kind of the runs (the plan's), "" for both

    def doc(self) -> dict:
        return {"hardware": self.hardware, "kind": self.kind, "median_error": self.median_error, "runs": self.runs,
                "same_side": self.same_side, "p_value": self.p_value, "note": self.note()}

    def note(self) -> str:
        m = self.median_error
        side = "faster" if m > 0 else "slower"
        what = f"published {self.kind} runs" if self.kind else "published runs"
        # predicted / measured = 1 + m: the measured step is 1 / (1 + m) of the prediction
        return (f"{what} on {self.hardware} ran {side} than the model predicts: {self.same_side} of "
                f"{self.runs} (median measured step {1 / (1 + m):.2f}x the prediction); expect its steps nearer the "
                f"{'lower' if m > 0 else 'upper'} edge of their bands (docs/cli.md, Error bands)")


def sign_test_p(k: int, n: int) -> float:
    """Two-sided sign test: the chance that at least k of n fair coin flips (or at most n - k) land on one side."""
    return min(1.0, 2.0 * sum(math.comb(n, i) for i in range(k, n + 1)) / 2.0 ** n)


def hardware_bias(residuals: tuple[Residual, ...], hw_id: str, moe: bool | None = None) -> HardwareBias | None:
    """The one-sided miss of the published runs on hardware `hw_id` (of the model kind `moe`; None: both kinds)
    (BIAS_MIN_RUNS, BIAS_MIN_REL, BIAS_MAX_P), None when they are too few, miss by too little or are not more
    one-sided than chance."""
    errs = sorted(r.error for r in residuals if r.hardware == hw_id and (moe is None or r.moe == moe))
    if len(errs) < BIAS_MIN_RUNS:
        return None
    median = _quantile(errs, 0.5)
    signed = [e for e in errs if e != 0.0]  # the sign test drops ties
    side = sum(1 for e in signed if (e > 0) == (median > 0))
    p = sign_test_p(side, len(signed))
    if abs(median) < BIAS_MIN_REL or p >= BIAS_MAX_P:
        return None
    kind = "" if moe is None else ("MoE" if moe else "dense")
    return HardwareBias(hw_id, round(median, 4), len(errs), side, round(p, 4), kind)


BANDS_MAX_BYTES = 1 << 20  # the shipped file is ~60 KiB (a few lines per published run)


def _default_path() -> Path:
    from planner.catalog.data import data_dir

    return data_dir("runs") / BANDS_FILE


@functools.lru_cache(maxsize=4)
def load_residuals(path: str | None = None) -> tuple[Residual, ...]:
    from planner.catalog.files import read_structured_file

    data = read_structured_file(Path(path or _default_path()), what="error bands file", max_bytes=BANDS_MAX_BYTES,
                                packaged=path is None)
    return tuple(Residual(**r) for r in data["runs"])


def band_for_context(ctx, attention_extrapolated: bool = False) -> Band:
    """A calibrated profile's own leave-one-out band (plan calibrate) if it has one, else the published runs' (of the
    runs beyond the fitted attention share for a plan that is, EXTRAPOLATED)."""
    hw = ctx.cluster.hardware
    k = hw.calibration
    if k is not None and k.error_band_rel is not None:
        return Band(k.error_band_rel, "calibrated profile (leave-one-out)", k.error_band_runs or 0)
    return band_for(load_residuals(), hardware_family(hw.id, hw.vendor), ctx.model.is_moe, ctx.train.framework,
                    attention_extrapolated=attention_extrapolated)


def hardware_bias_for_context(ctx) -> HardwareBias | None:
    """hardware_bias of the plan's hardware and model kind; none for a profile whose constants are not the ones the
    published runs were scored with (`plan calibrate` fitted them: a calibration block other than the shipped
    profile's, which the TPU profiles carry for their per-generation constants)."""
    from planner.catalog.hardware import list_hardware

    hw = ctx.cluster.hardware
    shipped = next((h for h in list_hardware() if h.id == hw.id), None)
    if hw.calibration is not None and (shipped is None or hw.calibration != shipped.calibration):
        return None
    return hardware_bias(load_residuals(), hw.id, ctx.model.is_moe)


def band_from_errors(errors: list[float]) -> float:
    """rel of a band from prediction errors (predicted/measured - 1), as for the dev-run regimes."""
    return _quantile([max(1 + e, 1 / (1 + e)) - 1 for e in errors], BAND_QUANTILE)


def attach_bands(ctx, doc: dict, evaluations) -> None:
    """Add `step_time_band` to every plan of a `plan` document (made from `evaluations`, in its order), `band_note`
    when the leading plans lie within each other's band (their order is then not significant) and `hardware_bias`
    when the published runs on the plans' hardware landed on one side of the prediction (hardware_bias)."""
    for p, ev in zip(doc["plans"], evaluations, strict=True):
        p["step_time_band"] = band_for_context(ctx, ev.attention_extrapolated).around(p["step_time_s"])
    doc["band_note"] = overlap_note(doc["plans"])
    bias = hardware_bias_for_context(ctx)
    doc["hardware_bias"] = bias.doc() if bias else None


def overlap_note(plans: list[dict]) -> str | None:
    """'plans 1-3 ...' when plan 2 (and the next ones) lie within plan 1's band and it within theirs."""
    if len(plans) < 2 or "step_time_band" not in plans[0]:
        return None
    b0 = plans[0]["step_time_band"]
    tied = 1
    for p in plans[1:]:
        b = p["step_time_band"]
        if p["step_time_s"] <= b0["high_s"] and plans[0]["step_time_s"] >= b["low_s"]:
            tied += 1
        else:
            break
    if tied < 2:
        return None
    return (f"plans 1-{tied} lie within each other's error band (±{100 * b0['rel']:.0f}%, {b0['regime']}): "
            "the model cannot tell which is faster; measure them")


def band_label(plan: dict) -> str:
    b = plan.get("step_time_band")
    return f" ±{100 * b['rel']:.0f}%" if b else ""


# --------------------------------------------------------------------------- regeneration

def source_key(run: dict) -> str:
    """Which publication a run comes from (for leave-one-source-out): the source text up to its first
    ' -- ' / ',' / '(' (e.g. 'MaxText high-performance results', 'NeMo 24.07 performance summary')."""
    import re

    src = str(run.get("source") or run.get("id"))
    return re.split(r' -- | — |,|\(|;|"', src, maxsplit=1)[0].strip().lower()


def residuals_from_validation(runs: list[dict], rows: list[dict], loso: dict[str, float] | None = None,
                              held_out: bool = False) -> list[dict]:
    """One residual row per scored run: error from `loso` (a development run's leave-one-source-out prediction),
    else the shipped constants' (a held-out run's, flagged `held_out`)."""
    from planner.catalog.hardware import get_hardware
    from planner.catalog.hf_import import from_hf_config

    by_id = {r["id"]: r for r in runs}
    out = []
    for row in rows:
        if "step_time_error" not in row:
            continue
        run = by_id[row["id"]]
        hw = get_hardware(str(run["hardware"]))
        out.append({"id": row["id"], "source": source_key(run), "family": hardware_family(hw.id, hw.vendor),
                    "moe": from_hf_config(run["model"], name=run["id"]).is_moe, "framework": row["framework"],
                    "error": round(float((loso or {}).get(row["id"], row["step_time_error"])), 6),
                    "in_sample_error": round(float(row["step_time_error"]), 6),
                    **({"held_out": True} if held_out else {}),
                    "hardware": hw.id,
                    **({"attention_extrapolated": True} if row["attention_extrapolated"] else {})})
    return out


def write_bands_file(path: Path, residual_rows: list[dict], kind: str) -> None:
    import json

    about = ["Generated by `python -m planner.analysis.bands --write`: one residual per published run,",
             "error = predicted/measured - 1 out of sample. Development runs (runs/known_runs_dev.yaml,",
             "known_runs_tpu_dev.yaml): predicted with their source left out of the constants' fit",
             "(planner.analysis.devfit.loso). Held-out runs (held_out: true; runs/known_runs_added.yaml,",
             "moe_runs_added.yaml, modelzoo_runs_added.yaml, known_runs_memory.yaml,",
             "blackwell_ultra_runs_added.yaml, tpu7x_runs_added.yaml; no constant fitted on them):",
             "predicted with the shipped constants. in_sample_error: with the shipped constants (plan validate).",
             "Do not edit by hand; regenerate after any cost-model change."]
    head = json.dumps({"about": about, "residuals": kind, "quantile": BAND_QUANTILE, "min_runs": MIN_RUNS}, indent=2,
                      ensure_ascii=False)
    # one run per line: a regenerated file's diff shows the runs that moved
    runs = ",\n".join("    " + json.dumps(r, ensure_ascii=False) for r in residual_rows)
    path.write_text(f'{head.removesuffix("}").rstrip()},\n  "runs": [\n{runs}\n  ]\n}}\n')


def main(argv: list[str] | None = None) -> int:
    import argparse

    from planner.analysis.validate import load_runs, validate_runs
    from planner.catalog.data import data_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write runs/error_bands.json")
    args = ap.parse_args(argv)
    from planner.analysis import calibrate, devfit

    rows: list[dict] = []
    for name, tpu in DEV_FILES:
        runs = load_runs(data_dir("runs") / name)
        prepared, _ = calibrate.prepare_runs(runs)
        loso = devfit.loso(prepared, {str(r["id"]): source_key(r) for r in runs}, tpu)
        rows += residuals_from_validation(runs, validate_runs(runs)["runs"], loso)
    for name in HELD_OUT_FILES:
        runs = load_runs(data_dir("runs") / name)
        rows += residuals_from_validation(runs, validate_runs(runs)["runs"], held_out=True)
    if args.write:
        write_bands_file(data_dir("runs") / BANDS_FILE, rows, "out of sample")
    print(f"{len(rows)} residuals" + (" written" if args.write else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
