"""Refit calibration constants to measured step times (scipy least squares on log error): the one fitter.

`least_squares_fit` (bounded trust-region least squares over log-scaled or additive parameters) and
`leave_group_out` (refit without each group, predict it) are the core every fit of the project calls: the
development-run refit and its leave-one-source-out (planner.analysis.devfit), `plan calibrate` and its
leave-one-out (planner.analysis.calibrate), and the constant refit below (benchmarks/fit_calibration.py). The
fitting bounds of the dev-fitted constants live beside their values and evidence, in planner.costmodel.calibration
(`fitted(...)` fields of `Calibration`).

The project's constants (planner.costmodel.calibration) were fitted on the development runs; this module makes
that fit reproducible: `fit_constants(runs, names, bounds)` minimises sum_i log(predicted_i /
measured_i)^2 over the named constants with `scipy.optimize.least_squares` (trust-region reflective,
bounded), and `leave_one_out` refits without each run (or each group of runs) and predicts it.

Each run's plan is fixed before fitting: the plan `plan validate` chooses with the constants as they
are (the published knobs, the search filling the rest). Only `evaluate` is re-run while fitting, with
a fresh Context per prediction carrying the trial constants (a `Calibration` built with `with_values`; nothing
is patched), because Contexts cache per-layer times computed from them.

Reusable core (`plan calibrate`, planner/analysis/calibrate.py, builds on it): `prepare(runs)` -> fixed `RunCase`s,
`fit_constants(cases, names, bounds)` -> `FitResult`, `leave_one_out(cases, names, bounds)`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.costmodel.calibration import DEFAULT_CALIBRATION, Calibration

# predict(case, calibration) -> step seconds
Predict = Callable[[Any, Calibration], float]


@dataclass(frozen=True)
class FitParam:
    """One fitted quantity: fitted in log space between lo and hi, or (additive: an overhead that may be 0)
    linearly, as (value - lo) / unit."""

    name: str
    lo: float
    hi: float
    additive: bool = False
    unit: float = 1.0

    def to_x(self, v: float) -> float:
        return (v - self.lo) / self.unit if self.additive else math.log(v)

    def from_x(self, x: float) -> float:
        return self.lo + x * self.unit if self.additive else math.exp(x)

    @property
    def x_bounds(self) -> tuple[float, float]:
        return (0.0, (self.hi - self.lo) / self.unit) if self.additive else (math.log(self.lo), math.log(self.hi))


def least_squares_fit(resid: Callable[[dict[str, float]], Sequence[float]], params: Sequence[FitParam],
                      start: Mapping[str, float], loss: str = "linear", f_scale: float = 1.0) -> dict[str, float]:
    """The values of `params` minimising sum rho(resid(values)^2) (scipy.optimize.least_squares, 'trf', bounded,
    diff_step 1e-3), starting from `start` moved just inside the bounds. `loss`: scipy's ("soft_l1": robust)."""
    from scipy.optimize import least_squares

    if not params:
        return {}
    lo, hi = zip(*(p.x_bounds for p in params), strict=True)
    x0 = [min(max(p.to_x(start[p.name]), a + 1e-9), b - 1e-9) for p, a, b in zip(params, lo, hi, strict=True)]

    def unpack(x) -> dict[str, float]:
        return {p.name: p.from_x(float(v)) for p, v in zip(params, x, strict=True)}

    sol = least_squares(lambda x: resid(unpack(x)), x0, bounds=(lo, hi), x_scale=1.0, diff_step=1e-3, loss=loss,
                        f_scale=f_scale)
    return unpack(sol.x)


def leave_group_out(items: Sequence[Any], group_of: Callable[[Any], Any], fit: Callable[[list], Any],
                    predict: Callable[[list, Any], dict]) -> dict:
    """Out-of-sample predictions: for every group (sorted), `fit` on the other items and `predict` the group's
    with that fit. `predict(held, fitted)` returns {key: value}; the union is returned."""
    out: dict = {}
    for g in sorted({group_of(i) for i in items}):
        held = [i for i in items if group_of(i) == g]
        out |= predict(held, fit([i for i in items if group_of(i) != g]))
    return out


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


def predict_step_s(case: RunCase, calibration: Calibration = DEFAULT_CALIBRATION) -> float:
    """The case's step time under these constants."""
    from planner.costmodel import Context, evaluate

    return evaluate(Context(case.model, case.cluster, case.train, calibration=calibration), case.plan).step_time_s


def log_errors(cases: Sequence[RunCase], names: Sequence[str], x: Sequence[float],
               predict: Predict = predict_step_s, base: Calibration = DEFAULT_CALIBRATION) -> list[float]:
    """log(predicted / measured) of every case with the named constants of `base` set to x."""
    calibration = base.with_values(dict(zip(names, x, strict=True)))
    return [math.log(predict(c, calibration) / c.measured_step_s) for c in cases]


def fit_constants(cases: Sequence[RunCase], names: Sequence[str], bounds: Sequence[tuple[float, float]],
                  x0: Sequence[float] | None = None, predict: Predict = predict_step_s,
                  base: Calibration = DEFAULT_CALIBRATION) -> FitResult:
    """Least squares on log step-time error over the cases (least_squares_fit: log-scaled constants, additive
    where the lower bound is 0). Starts from the constants of `base` (or x0), clipped into the bounds."""
    initial = tuple(float(getattr(base, n)) for n in names)
    params = [FitParam(n, lo, hi, additive=lo <= 0) for n, (lo, hi) in zip(names, bounds, strict=True)]
    fitted = least_squares_fit(lambda v: log_errors(cases, names, [v[n] for n in names], predict, base), params,
                               dict(zip(names, x0 or initial, strict=True)))
    values = tuple(fitted[n] for n in names)
    errs = tuple(log_errors(cases, names, values, predict, base))
    return FitResult(tuple(names), initial, values, errs, tuple(log_errors(cases, names, initial, predict, base)),
                     True, "least_squares_fit")


def leave_one_out(cases: Sequence[RunCase], names: Sequence[str], bounds: Sequence[tuple[float, float]],
                  by_group: bool = False, start: Sequence[float] | None = None,
                  predict: Predict = predict_step_s) -> dict[str, float]:
    """Out-of-sample log error of every case: refit without it (or without its whole group, the
    run's source) from `start`, then predict it (leave_group_out). Returns {case id: log error}."""
    return leave_group_out(
        cases, (lambda c: c.group) if by_group else (lambda c: c.id),
        lambda rest: fit_constants(rest, names, bounds, x0=start, predict=predict).values,
        lambda held, values: dict(zip((c.id for c in held), log_errors(held, names, values, predict), strict=True)))


def summary(log_errs: Sequence[float]) -> dict[str, float]:
    """Median and p90 (floor index, as `plan validate`) of |predicted / measured - 1|."""
    rel = sorted(abs(math.exp(e) - 1.0) for e in log_errs)
    if not rel:
        return {"n": 0, "median_abs_error": math.nan, "p90_abs_error": math.nan}
    return {"n": len(rel), "median_abs_error": statistics.median(rel), "p90_abs_error": rel[int(0.9 * (len(rel) - 1))]}
