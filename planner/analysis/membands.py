"""The memory error band: how far a published, measured peak lands from the predicted one.

Every run of the project's runs files (runs/known_runs_*.yaml) that publishes `peak_memory_gib` gives one
residual. The residuals are cross-validated: each run's error is its prediction when the one memory constant
fitted on these peaks (the torchtitan stack's overhead, Stack.overhead_gib, which adds to the peak) is refitted
without it (leave-one-run-out, least median |error|). The band is the BAND_QUANTILE quantile of
max(measured/predicted, predicted/measured) - 1, as the step-time bands (planner.analysis.bands): the shipped value is
calibration.MEMORY_BAND_REL, checked against this computation by tests/analysis/test_memory_validation.py. The band is
also the default memory margin (planner.costmodel.capacity); its one-sided side, the quantile of
max(0, measured/predicted - 1), is printed beside it for reference, and so is the median miss, the inner margin
(calibration.MEMORY_BAND_MEDIAN_REL: the second memory tier of the ranking).

    PYTHONPATH=$PWD python -m planner.analysis.membands
"""

from __future__ import annotations

import statistics
import sys

from planner.analysis.bands import BAND_QUANTILE, _quantile
from planner.catalog.data import data_dir

RUN_FILES = ("known_runs_dev.yaml", "known_runs_tpu_dev.yaml", "known_runs_added.yaml", "known_runs_memory.yaml")
# the overhead values tried when refitting without one run (GiB, 0.25 GiB steps)
OVERHEAD_GRID_GIB = tuple(x / 4 for x in range(0, 41))


def peak_rows() -> list[dict]:
    """plan validate's rows of every published run with a measured device peak (id, framework, predicted, measured):
    the band is about the device peak the search holds against the capacity, so a peak of another kind
    (measured.peak_memory_of, e.g. Megatron's allocated bytes on the last rank) is not one of its rows."""
    from planner.analysis.validate import load_runs, validate_runs

    runs = []
    for name in RUN_FILES:
        runs += [r for r in load_runs(data_dir("runs") / name)
                 if (r.get("measured") or {}).get("peak_memory_gib")
                 and (r.get("measured") or {}).get("peak_memory_of", "device") == "device"]
    return [r for r in validate_runs(runs)["runs"] if r.get("measured_peak_memory_gib")]


def loo_errors(rows: list[dict]) -> list[float]:
    """predicted/measured - 1 of each row with the fitted overhead refitted without it (the overhead adds to the
    peak of the rows of its stack, so a refit shifts their prediction by the difference)."""
    from planner.stacks import traits

    out = []
    for i, r in enumerate(rows):
        rest = [x for j, x in enumerate(rows) if j != i]
        fitted = {}
        for fw in {x["framework"] for x in rows}:
            base = traits(fw).overhead_gib
            mine = [x for x in rest if x["framework"] == fw]
            if not mine:
                fitted[fw] = base
                continue
            fitted[fw] = min(OVERHEAD_GRID_GIB, key=lambda ov: (statistics.median(
                abs((x["peak_memory_gib"] + ov - base) / x["measured_peak_memory_gib"] - 1) for x in mine), ov))
        shift = fitted[r["framework"]] - traits(r["framework"]).overhead_gib
        out.append((r["peak_memory_gib"] + shift) / r["measured_peak_memory_gib"] - 1.0)
    return out


def _misses(errors: list[float]) -> list[float]:
    """How far each prediction missed, either way: max(measured/predicted, predicted/measured) - 1."""
    return [max(1.0 + e, 1.0 / (1.0 + e)) - 1.0 for e in errors]


def band_rel(errors: list[float]) -> float:
    return _quantile(_misses(errors), BAND_QUANTILE)


def median_band_rel(errors: list[float]) -> float:
    """The inner margin (calibration.MEMORY_BAND_MEDIAN_REL): the median of the same two-sided misses."""
    return _quantile(_misses(errors), 0.5)


def margin_rel(errors: list[float]) -> float:
    """The one-sided band, the side that runs a plan out of memory: the BAND_QUANTILE quantile of how far each
    measured peak lies above its prediction, max(0, measured / predicted - 1). Printed for reference: the margin is
    the band both ways (calibration.MEMORY_BAND_REL), as only torchtitan's peaks are measured."""
    return _quantile([max(0.0, 1.0 / (1.0 + e) - 1.0) for e in errors], BAND_QUANTILE)


def main(argv: list[str] | None = None) -> int:
    rows = peak_rows()
    errs = loo_errors(rows)
    for r, e in zip(rows, errs, strict=True):
        print(f"{r['id']:60s} {r['framework']:8s} measured {r['measured_peak_memory_gib']:6.1f} predicted "
              f"{r['peak_memory_gib']:6.1f} in-sample {r['peak_memory_error']:+.1%} cross-validated {e:+.1%}")
    a = sorted(abs(e) for e in errs)
    print(f"{len(errs)} peaks: median |error| {statistics.median(a):.1%}, p90 {a[int(0.9 * (len(a) - 1))]:.1%}; "
          f"band (q{BAND_QUANTILE:.2f} of the miss) {band_rel(errs):.4f}, margin (q{BAND_QUANTILE:.2f} of the "
          f"under-prediction) {margin_rel(errs):.4f}, inner margin (q0.50 of the miss) {median_band_rel(errs):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
