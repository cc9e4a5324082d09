"""Refit calibration constants to measured step times (scipy least squares on log error).

The project's constants (planner.calibration) were fitted on the development runs; this module makes
that fit reproducible: `fit_constants(runs, names, bounds)` minimises sum_i log(predicted_i /
measured_i)^2 over the named constants with `scipy.optimize.least_squares` (trust-region reflective,
bounded), and `leave_one_out` refits without each run (or each group of runs) and predicts it.

Each run's plan is fixed before fitting: the plan `plan validate` chooses with the constants as they
are (the published knobs, the search filling the rest). Only `evaluate` is re-run while fitting, with
a fresh Context per prediction because Contexts cache per-layer times computed from the constants.

Reusable core (`plan calibrate`, planner/analysis/calibrate.py, builds on it): `prepare(runs)` -> fixed `RunCase`s,
`fit_constants(cases, names, bounds)` -> `FitResult`, `leave_one_out(cases, names, bounds)`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunCase:
    """One measured run with its plan fixed: enough to re-predict its step time under other constants."""
    id: str
    group: str  # leave-one-group-out unit (the run's source)
    measured_step_s: float
    model: Any
    cluster: Any
    train: Any
    plan: Any


@dataclass(frozen=True)
class FitResult:
    names: tuple[str, ...]
    initial: tuple[float, ...]
    values: tuple[float, ...]
    log_errors: tuple[float, ...]  # per case, log(predicted / measured) at the fitted values
    initial_log_errors: tuple[float, ...]
    success: bool
    message: str

    @property
    def constants(self) -> dict[str, float]:
        return dict(zip(self.names, self.values, strict=True))


def _calibration_module():
    # the module whose attributes the cost model reads at call time (cal.NAME, never bound at import)
    from planner.costmodel import calibration as cal

    return cal


@contextmanager
def calibrated(values: Mapping[str, float]) -> Iterator[None]:
    """Temporarily set calibration constants (restored on exit, also on errors)."""
    cal = _calibration_module()
    old = {k: getattr(cal, k) for k in values}
    try:
        for k, v in values.items():
            setattr(cal, k, float(v))
        yield
    finally:
        for k, v in old.items():
            setattr(cal, k, v)


def prepare(runs: Sequence[dict]) -> list[RunCase]:
    """Runs with a measured step time -> cases whose plan `plan validate` picks with today's constants.
    Runs whose plan cannot be scored are left out (`plan validate` reports them)."""
    from planner.analysis.validate import run_inputs
    from planner.errors import PlannerError
    from planner.search.engine import SearchOptions, search

    cases = []
    for run in runs:
        meas = (run.get("measured") or {}).get("step_time_s")
        if not meas:
            continue
        try:
            ctx, fixed = run_inputs(run)
            res = search(ctx, SearchOptions(fixed=fixed, top_k=1))
        except PlannerError:
            continue
        plan = res.plans[0].plan if res.plans else res.smallest_peak_plan
        if plan is None:
            continue
        cases.append(RunCase(run["id"], str(run.get("source") or run["id"]), float(meas), ctx.model, ctx.cluster,
                             ctx.train, plan))
    return cases


def predict_step_s(case: RunCase) -> float:
    """The case's step time under the constants in force now."""
    from planner.costmodel import Context, evaluate

    return evaluate(Context(case.model, case.cluster, case.train), case.plan).step_time_s


def log_errors(cases: Sequence[RunCase], names: Sequence[str], x: Sequence[float],
               predict: Callable[[RunCase], float] = predict_step_s) -> list[float]:
    """log(predicted / measured) of every case with the named constants set to x."""
    with calibrated(dict(zip(names, x, strict=True))):
        return [math.log(predict(c) / c.measured_step_s) for c in cases]


def fit_constants(cases: Sequence[RunCase], names: Sequence[str], bounds: Sequence[tuple[float, float]],
                  x0: Sequence[float] | None = None,
                  predict: Callable[[RunCase], float] = predict_step_s) -> FitResult:
    """Least squares on log step-time error over the cases (scipy.optimize.least_squares, 'trf', bounded).
    Starts from the current constants (or x0), clipped into the bounds."""
    from scipy.optimize import least_squares

    cal = _calibration_module()
    initial = tuple(float(getattr(cal, n)) for n in names)
    lo, hi = [b[0] for b in bounds], [b[1] for b in bounds]
    start = [min(max(v, a), b) for v, a, b in zip(x0 or initial, lo, hi, strict=True)]
    fun = lambda x: log_errors(cases, names, x, predict)  # noqa: E731
    res = least_squares(fun, start, bounds=(lo, hi), method="trf", diff_step=1e-3, xtol=1e-10, ftol=1e-10)
    values = tuple(float(v) for v in res.x)
    return FitResult(tuple(names), initial, values, tuple(fun(values)), tuple(fun(initial)), bool(res.success),
                     str(res.message))


def leave_one_out(cases: Sequence[RunCase], names: Sequence[str], bounds: Sequence[tuple[float, float]],
                  by_group: bool = False, start: Sequence[float] | None = None,
                  predict: Callable[[RunCase], float] = predict_step_s) -> dict[str, float]:
    """Out-of-sample log error of every case: refit without it (or without its whole group, the
    run's source) from `start`, then predict it. Returns {case id: log error}."""
    units = sorted({c.group for c in cases}) if by_group else [c.id for c in cases]
    out: dict[str, float] = {}
    for u in units:
        held = [c for c in cases if (c.group if by_group else c.id) == u]
        rest = [c for c in cases if c not in held]
        fit = fit_constants(rest, names, bounds, x0=start, predict=predict)
        for c, e in zip(held, log_errors(held, names, fit.values, predict), strict=True):
            out[c.id] = e
    return out


def summary(log_errs: Sequence[float]) -> dict[str, float]:
    """Median and p90 (floor index, as `plan validate`) of |predicted / measured - 1|."""
    rel = sorted(abs(math.exp(e) - 1.0) for e in log_errs)
    if not rel:
        return {"n": 0, "median_abs_error": math.nan, "p90_abs_error": math.nan}
    return {"n": len(rel), "median_abs_error": statistics.median(rel), "p90_abs_error": rel[int(0.9 * (len(rel) - 1))]}
