"""Fit the cost model's constants on the development runs, in-sample and leave-one-source-out.

    PYTHONPATH=$PWD python -m planner.analysis.devfit            # tables for docs/validation.md

* TPU: one GEMM ceiling per generation (the hardware profile's `gemm_efficiency_max`, for which no TPU
  MAMF measurement exists) fitted by plan calibrate's least squares on that generation's runs in
  runs/known_runs_tpu_dev.yaml; the values in hardware_profiles/tpu-*.yaml are this fit's output.
* GPU: the dev-run constants of planner.costmodel.calibration marked `fitted(...)` there (GPU_CONSTANTS below)
  refitted jointly on the GPU runs by robust (soft-L1) least squares on log(predicted / measured), within the
  source-given bounds written beside each constant.
* Leave-one-source-out (LOSO): for every publication (planner.analysis.bands.source_key), refit on
  all the other sources and predict its runs. A constant no remaining run can move is set to its
  uninformed value (NO_EFFECT: the mechanism is absent), never to the shipped value that was fitted
  with the held-out source. Each run's plan is the one plan validate scores with the shipped constants
  and stays fixed during the refits.

Fitting is planner.analysis.fit's (the one fitter, also `plan calibrate`'s): `least_squares_fit` for the
GPU refit (soft-L1 loss) and, through calibrate.fit_compute, the TPU ceilings; `leave_group_out` for LOSO,
grouped by publication (bands.source_key), with unidentifiable constants at NO_EFFECT instead of the shipped
values. Every prediction gets its constants as a `Calibration` (DEFAULT_CALIBRATION.with_values(...)) passed
into the cost model; nothing is patched. The fitting bounds live beside each constant's value and evidence in
planner.costmodel.calibration; GPU_CONSTANTS below is their view as (low, high, no-effect value) tuples
(benchmarks/fit_calibration.py reads it).
"""

from __future__ import annotations

import math
import statistics

from planner.analysis import calibrate as c
from planner.analysis.bands import source_key
from planner.costmodel.calibration import DEFAULT_CALIBRATION, Calibration, dev_fit_bounds

# GPU constants refitted on the dev runs: name -> (low, high, value when no run shows the mechanism), read from the
# `fitted(...)` fields of planner.costmodel.calibration.Calibration (bounds and their sources are written there).
GPU_CONSTANTS = {name: (f.lo, f.hi, f.no_effect) for name, f in dev_fit_bounds().items()}
# Robust loss: residuals in log(predicted / measured) count quadratically up to ~ROBUST_SCALE (10%) and linearly
# beyond (scipy least_squares loss="soft_l1"), so the few runs whose stack the model cannot see (two DGX Cloud
# DeepSeek-V3 rows 3.3x slower per GPU than Megatron-Bridge's on the same GB200s) do not set the constants that
# every other run shares. A plain least-squares fit lets those rows drag the MoE constants (docs/validation.md).
ROBUST_LOSS = "soft_l1"
ROBUST_SCALE = 0.1


def constants(values: dict[str, float]) -> Calibration:
    """The shipped constants with some replaced (passed into the cost model: nothing is patched)."""
    return DEFAULT_CALIBRATION.with_values(values)


def _log_errs(runs: list[c.PreparedRun], values: dict[str, float]) -> list[float]:
    cal = constants(values)
    return [math.log(r.predict(r.cluster.hardware, cal) / r.measured_s) for r in runs]


def _identifiable(runs: list[c.PreparedRun], names: list[str]) -> list[str]:
    base = _log_errs(runs, {})
    keep = []
    for n in names:
        v = getattr(DEFAULT_CALIBRATION, n)
        probe = _log_errs(runs, {n: v * 1.1})
        if max(abs(a - b) for a, b in zip(probe, base, strict=True)) / math.log(1.1) >= c.SENSITIVITY_MIN:
            keep.append(n)
    return keep


def fit_gpu(runs: list[c.PreparedRun]) -> dict[str, float]:
    """Robust least squares (planner.analysis.fit, the one fitter) over the GPU constants the runs can move, in
    log space within GPU_CONSTANTS' bounds; the others at NO_EFFECT."""
    from planner.analysis.fit import FitParam, least_squares_fit

    names = _identifiable(runs, list(GPU_CONSTANTS))
    fixed = {n: GPU_CONSTANTS[n][2] for n in GPU_CONSTANTS if n not in names}
    params = [FitParam(n, GPU_CONSTANTS[n][0], GPU_CONSTANTS[n][1]) for n in names]
    start = {n: getattr(DEFAULT_CALIBRATION, n) for n in names}
    return fixed | least_squares_fit(lambda v: _log_errs(runs, fixed | v), params, start, loss=ROBUST_LOSS,
                                     f_scale=ROBUST_SCALE)


def fit_tpu(runs: list[c.PreparedRun], fallback_from: list[c.PreparedRun] | None = None) -> dict[str, float]:
    """hardware id -> fitted gemm_efficiency_max, one per TPU generation with runs."""
    out = {}
    for hid in sorted({r.cluster.hardware.id for r in runs}):
        sel = [r for r in runs if r.cluster.hardware.id == hid]
        hw = c.with_values(sel[0].cluster.hardware, {"gemm_efficiency_max": 0.8})
        params = (c.Param("gemm_efficiency_max", 0.3, 0.97, 0.8),)
        out[hid] = c.fit_compute(sel, hw, params).gemm_efficiency_max
    return out


def predict_tpu(run: c.PreparedRun, effs: dict[str, float]) -> float:
    """A generation without runs in the fit gets the median of the fitted generations (stated rule)."""
    eff = effs.get(run.cluster.hardware.id, statistics.median(effs.values()) if effs else 0.8)
    return run.predict(c.with_values(run.cluster.hardware, {"gemm_efficiency_max": eff}))


def loso(runs: list[c.PreparedRun], sources: dict[str, str], tpu: bool) -> dict[str, float]:
    """run id -> predicted/measured - 1 when its source was left out of the fit (planner.analysis.fit's
    leave_group_out, grouped by publication)."""
    from planner.analysis.fit import leave_group_out

    def predict_gpu(test: list[c.PreparedRun], values: dict[str, float]) -> dict[str, float]:
        cal = constants(values)
        return {r.id: r.predict(r.cluster.hardware, cal) / r.measured_s - 1 for r in test}

    if tpu:
        return leave_group_out(runs, lambda r: sources[r.id], fit_tpu, predict_held_tpu)
    return leave_group_out(runs, lambda r: sources[r.id], fit_gpu, predict_gpu)


def predict_held_tpu(held: list[c.PreparedRun], effs: dict[str, float]) -> dict[str, float]:
    """Errors of a left-out publication's TPU runs under the generation ceilings fitted without it. A generation no
    other publication covers (v6e: only the tpu-recipes) has no ceiling in that fit; its runs are predicted with the
    ceiling fitted on the publication's other runs of that generation, one run left out at a time (leave-one-run-out
    within the publication), so the residual measures the model on a generation it was calibrated for, not the spread
    between generations (the median of the others, predict_tpu's rule for a generation never measured)."""
    out = {}
    for r in held:
        hid = r.cluster.hardware.id
        peers = [q for q in held if q.cluster.hardware.id == hid and q.id != r.id]
        fitted = effs if hid in effs or not peers else effs | fit_tpu(peers)
        out[r.id] = predict_tpu(r, fitted) / r.measured_s - 1
    return out


def _stats(errs: list[float]) -> str:
    a = sorted(abs(e) for e in errs)
    return f"median {100 * statistics.median(a):.1f}%, p90 {100 * a[int(0.9 * (len(a) - 1))]:.1f}% ({len(a)} runs)"


def main() -> int:
    from planner.analysis.validate import load_runs
    from planner.catalog.data import data_dir

    for name, tpu in (("known_runs_dev.yaml", False), ("known_runs_tpu_dev.yaml", True)):
        raw = load_runs(data_dir("runs") / name)
        runs, skipped = c.prepare_runs(raw)
        sources = {str(r["id"]): source_key(r) for r in raw}
        shipped = [r.predict(r.cluster.hardware) / r.measured_s - 1 for r in runs]
        print(f"== {name}: shipped constants, in-sample: {_stats(shipped)}")
        if tpu:
            print("   per-generation GEMM ceiling, in-sample fit:",
                  {k: round(v, 3) for k, v in fit_tpu(runs).items()})
        else:
            refit = fit_gpu(runs)
            print("   GPU constants, in-sample refit:", {k: round(v, 4) for k, v in refit.items()})
            cal = constants(refit)
            errs = [r.predict(r.cluster.hardware, cal) / r.measured_s - 1 for r in runs]
            print(f"   refit in-sample: {_stats(errs)}")
        lo = loso(runs, sources, tpu)
        print(f"   leave-one-source-out: {_stats(list(lo.values()))}")
        for src in sorted(set(sources.values())):
            errs = [lo[r.id] for r in runs if sources[r.id] == src]
            print(f"   | {src} | {len(errs)} | {_stats(errs)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
