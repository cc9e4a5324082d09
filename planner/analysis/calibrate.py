"""`plan calibrate`: fit the few physical constants of the cost model to one cluster's own measurements.

Inputs: the user's measured steps (a runs file in the runs schema, docs/runs-schema.md; one accelerator)
and optionally nccl-tests / rccl-tests logs. Output: a cluster file whose inline hardware profile carries
the fitted link figures and a `calibration:` block (planner.specs.CalibrationSpec) that `--cluster`
accepts, so every later prediction uses them.

What is fitted, each a physical constant (never a per-run factor):
- links, from nccl-tests tables (planner.analysis.nccl_tests.fit_link): scale-up bus bandwidth and
  per-step latency from single-node tables; scale-out achievable fraction of the NIC line rate and
  latency from multi-node tables;
- compute, from the measured steps (scipy least squares on log(predicted / measured)): the GEMM ceilings
  (`gemm_efficiency_max`, and `gemm_efficiency_max_fp8` for FP8 runs), attention-core efficiency relative
  to GEMMs and a fixed per-step overhead.
  A constant the runs cannot move (|d log t / d log c| below SENSITIVITY_MIN on every run) is left
  at its default rather than fitted to noise.
Each run's plan is the one `plan validate` scores (published knobs fixed, the rest chosen with the
default constants) and is kept fixed during the fit.

This module is the fitting core for a user's own cluster; the development-run constants of the shipped
model are fitted the same way (leave-one-source-out in docs/validation.md).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from planner.costmodel.calibration import DEFAULT_CALIBRATION, Calibration
from planner.errors import InputError
from planner.names import safe_line
from planner.specs import CalibrationSpec, ClusterSpec, HardwareSpec, ModelSpec, ParallelPlan, TrainingSpec

SENSITIVITY_MIN = 0.02  # a constant that moves no run's log step time by 2% per unit log change is not fitted
# A measured step more than 100x from the default prediction is not fitted: the fitted constants together span
# less (GEMM efficiency 0.05-1 is 20x, attention 0.05-2 relative), so such a run is a unit or transcription
# error (ms for s, a per-token figure), and it would pin every constant at its bound.
MAX_MEASURED_RATIO = 100.0


@dataclass(frozen=True)
class Param:
    """One fitted constant: where it lives in the hardware profile and its admissible range."""

    name: str  # "gemm_efficiency_max" or "calibration.<CalibrationSpec field>"
    lo: float
    hi: float
    default: float  # value when the profile does not set it (the model's own constant)
    additive: bool = False  # fitted linearly (an overhead that may be 0), else in log space


def compute_params(hw: HardwareSpec) -> tuple[Param, ...]:
    fp8_eff = hw.gemm_efficiency_max_fp8
    fp8 = (Param("gemm_efficiency_max_fp8", 0.05, 1.0, fp8_eff),) if fp8_eff else ()
    return fp8 + (
        Param("gemm_efficiency_max", 0.05, 1.0, hw.gemm_efficiency_max),
        Param("calibration.attn_rel_efficiency", 0.05, 2.0, DEFAULT_CALIBRATION.ATTN_REL_EFFICIENCY),
        Param("calibration.step_overhead_s", 0.0, 600.0, 0.0, additive=True),
    )


def get_value(hw: HardwareSpec, p: Param) -> float:
    if p.name.startswith("calibration."):
        v = getattr(hw.calibration, p.name.split(".", 1)[1]) if hw.calibration else None
        return p.default if v is None else v
    obj: object = hw
    for part in p.name.split("."):
        obj = getattr(obj, part)
    return float(obj)  # type: ignore[arg-type]  # a numeric profile field by construction (compute_params)


def checked_with_values(hw: HardwareSpec, values: dict[str, float], what: str) -> HardwareSpec:
    """with_values for figures taken from the user's measurements: a value outside its field's range is an
    InputError naming the field and the value (never pydantic's text)."""
    from pydantic import ValidationError

    try:
        return with_values(hw, values)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err.get("loc", ()))
        raise InputError(f"{what} gives {field} = {values.get(field, err.get('input'))!r}, outside the profile's "
                         f"range ({safe_line(err.get('msg', ''), 80)}): check the measurements") from None


def with_values(hw: HardwareSpec, values: dict[str, float]) -> HardwareSpec:
    """The profile with some constants replaced (validated: a value out of its field's range raises)."""
    data = hw.model_dump()
    for name, v in values.items():
        parts = name.split(".")
        node = data
        for part in parts[:-1]:
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
        node[parts[-1]] = float(v)
    return HardwareSpec(**data)


@dataclass(frozen=True)
class PreparedRun:
    id: str
    measured_s: float
    model: ModelSpec
    cluster: ClusterSpec
    train: TrainingSpec
    plan: ParallelPlan

    def predict(self, hw: HardwareSpec, calibration: Calibration = DEFAULT_CALIBRATION) -> float:
        """The step time on profile `hw` with these constants (a profile's `calibration:` block overrides them)."""
        from planner.costmodel import Context, evaluate

        ctx = Context(self.model, self.cluster.model_copy(update={"hardware": hw}), self.train,
                      calibration=calibration)
        return evaluate(ctx, self.plan).step_time_s


def prepare_runs(runs: list[dict]) -> tuple[list[PreparedRun], list[dict]]:
    """Runs with a measured step, their plan chosen as plan validate does; the others as skipped."""
    from planner.analysis.validate import run_inputs, skip_record
    from planner.costmodel import evaluate
    from planner.search.engine import SearchOptions, search

    out, skipped = [], []
    for run in runs:
        try:
            step = (run.get("measured") or {}).get("step_time_s")
            if not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0:
                raise InputError(f"run {run.get('id')}: no positive measured.step_time_s to fit")
            ctx, fixed = run_inputs(run)
            res = search(ctx, SearchOptions(fixed=fixed, top_k=1))
            if res.plans:
                plan = res.plans[0].plan
            elif res.smallest_peak_plan is not None:
                plan = evaluate(ctx, res.smallest_peak_plan).plan
            else:
                raise InputError(f"run {run['id']}: no valid plan with the published knobs")
            prepared = PreparedRun(str(run["id"]), float(step), ctx.model, ctx.cluster, ctx.train, plan)
            _check_measured(prepared)
        except InputError as e:
            skipped.append(skip_record(run, e))
            continue
        out.append(prepared)
    return out, skipped


def _check_measured(run: PreparedRun) -> None:
    """A measured step the default model predicts within MAX_MEASURED_RATIO either way; else the run is skipped."""
    predicted = run.predict(run.cluster.hardware)
    if not (math.isfinite(predicted) and predicted > 0):
        raise InputError(f"run {run.id}: the model gives no finite step time for it ({predicted!r})")
    ratio = run.measured_s / predicted
    if not 1 / MAX_MEASURED_RATIO <= ratio <= MAX_MEASURED_RATIO:
        raise InputError(f"run {run.id}: measured.step_time_s {run.measured_s:.4g} s is {ratio:.3g}x the "
                         f"modelled {predicted:.4g} s (over {MAX_MEASURED_RATIO:g}x either way: a unit error?); "
                         "not fitted")


def one_hardware(prepared: list[PreparedRun]) -> HardwareSpec:
    ids = sorted({p.cluster.hardware.id for p in prepared})
    if len(ids) != 1:
        raise InputError(f"plan calibrate fits one accelerator at a time; the runs use {', '.join(ids) or 'none'}: "
                         "give one runs file per accelerator")
    return prepared[0].cluster.hardware


def log_errors(prepared: list[PreparedRun], hw: HardwareSpec) -> list[float]:
    return [math.log(p.predict(hw) / p.measured_s) for p in prepared]


def _sensitive(prepared: list[PreparedRun], hw: HardwareSpec, params: tuple[Param, ...]) -> tuple[Param, ...]:
    """The params that move at least one run's predicted step by SENSITIVITY_MIN per unit change (log
    change; for an additive overhead: one second per ... relative to the step)."""
    base = log_errors(prepared, hw)
    keep = []
    for p in params:
        v = get_value(hw, p)
        if p.additive:
            probe = with_values(hw, {p.name: v + 0.1 * statistics.median(r.measured_s for r in prepared)})
            scale = 0.1
        else:
            probe = with_values(hw, {p.name: min(p.hi, v * 1.1) if v * 1.1 <= p.hi else v / 1.1})
            scale = abs(math.log(get_value(probe, p) / v))
        moved = max(abs(a - b) for a, b in zip(log_errors(prepared, probe), base, strict=True)) / scale
        if moved >= SENSITIVITY_MIN:
            keep.append(p)
    return tuple(keep)


@dataclass
class FitResult:
    hardware: HardwareSpec
    fitted: dict[str, tuple[float, float]]  # name -> (before, after)
    errors_before: list[float]  # predicted / measured - 1 per run
    errors_after: list[float]
    loo_errors: list[float] = field(default_factory=list)  # each run predicted by a fit without it
    held_fixed: list[str] = field(default_factory=list)


def fit_compute(prepared: list[PreparedRun], hw: HardwareSpec, params: tuple[Param, ...] | None = None) -> HardwareSpec:
    """Least squares on log(predicted / measured) over the sensitive params (planner.analysis.fit, the one
    fitter): log-scaled, an additive overhead in units of the median measured step."""
    from planner.analysis.fit import FitParam, least_squares_fit

    params = _sensitive(prepared, hw, params if params is not None else compute_params(hw))
    if not params or not prepared:
        return hw
    med = statistics.median(r.measured_s for r in prepared)

    def resid(values: dict[str, float]) -> list[float]:
        try:
            return log_errors(prepared, with_values(hw, values))
        except ValueError:  # a trial value outside a profile field's range
            return [10.0] * len(prepared)

    fit_params = [FitParam(p.name, p.lo, p.hi, p.additive, med if p.additive else 1.0) for p in params]
    return with_values(hw, least_squares_fit(resid, fit_params, {p.name: get_value(hw, p) for p in params}))


MAX_FOLDS = 10  # held-out errors from at most 10 fits: leave-one-out up to 10 runs, 10-fold beyond (bounded work)
MAX_RUNS = 100  # a calibration fits 4 constants; 100 runs take ~1 min on the project machine (docs/performance.md)


def folds(n: int) -> list[list[int]]:
    """Run indices held out together: each run alone up to MAX_FOLDS runs (leave-one-out), else run i in fold
    i mod MAX_FOLDS, so the cross-validation costs at most MAX_FOLDS fits whatever the run count (it was
    n fits of n runs each: O(n^2), 30 runs 23.5 s, issue 26 item 9)."""
    k = min(n, MAX_FOLDS)
    return [list(range(j, n, k)) for j in range(k)]


def calibrate(prepared: list[PreparedRun], hw: HardwareSpec, leave_one_out: bool = True) -> FitResult:
    before = [math.expm1(e) for e in log_errors(prepared, hw)]
    fitted_hw = fit_compute(prepared, hw)
    after = [math.expm1(e) for e in log_errors(prepared, fitted_hw)]
    params = compute_params(hw)
    moved = {p.name: (get_value(hw, p), get_value(fitted_hw, p)) for p in params
             if get_value(hw, p) != get_value(fitted_hw, p)}
    loo = [0.0] * len(prepared)
    if leave_one_out and len(prepared) >= 3:
        from planner.analysis.fit import leave_group_out

        fold_of = {i: j for j, fold in enumerate(folds(len(prepared))) for i in fold}  # run i -> its fold
        held_out = leave_group_out(  # each run predicted by a fit without its fold
            list(enumerate(prepared)), lambda ir: fold_of[ir[0]], lambda rest: fit_compute([r for _, r in rest], hw),
            lambda held, fitted: {i: r.predict(fitted) / r.measured_s - 1.0 for i, r in held})
        loo = [held_out[i] for i in range(len(prepared))]
    else:
        loo = []
    return FitResult(fitted_hw, moved, before, after, loo, [p.name for p in params if p.name not in moved])


# --------------------------------------------------------------------------- links from nccl-tests

def link_updates(hw: HardwareSpec, node_size: int, fits: list) -> tuple[dict[str, float], list[str]]:
    """Profile fields set from nccl-tests fits (planner.analysis.nccl_tests.LinkFit) and one line per fit.
    Single-node tables set the scale-up figures (an all-reduce over > 4 ranks of an NVLS-capable switch sets
    the NVLS figure, planner.collectives' rule); multi-node tables set the scale-out fraction of the NIC line
    rate, capped at 1 (a two-node all-reduce can beat the NIC rate with tree/NVLS algorithms: nccl-tests
    issue #309)."""
    up_bw, up_lat, nvls, out_frac, out_lat, lines = [], [], [], [], [], []
    for f in fits:
        nodes = f.nodes or max(1, math.ceil(f.ranks / node_size))
        if nodes == 1:
            if f.collective == "all_reduce" and f.ranks > 4 and hw.scale_up.nvls_allreduce_busbw_GBps:
                nvls.append(f.busbw_GBps)
                target = "scale_up.nvls_allreduce_busbw_GBps"
            else:
                up_bw.append(f.busbw_GBps)
                target = "scale_up.ring_busbw_GBps"
            up_lat.append(f.alpha_us)
        else:
            per_domain = max(1, min(f.ranks // nodes, hw.scale_up.domain_size))
            line_rate = per_domain * hw.scale_out.unidir_GBps_per_device
            out_frac.append(min(1.0, f.busbw_GBps / line_rate))
            out_lat.append(f.alpha_us)
            target = f"scale_out.achievable_fraction ({f.busbw_GBps:.0f} of {line_rate:.0f} GB/s line rate)"
        lines.append(f"{f.collective} {f.ranks} ranks on {nodes} node(s): busbw {f.busbw_GBps:.1f} GB/s, "
                     f"alpha {f.alpha_us:.2f} us/step, rel. RMS {100 * f.rel_rms_error:.1f}% -> {target}")
    med = statistics.median
    updates = {k: med(v) for k, v in (("scale_up.ring_busbw_GBps", up_bw), ("scale_up.nvls_allreduce_busbw_GBps", nvls),
                                      ("scale_up.latency_us", up_lat), ("scale_out.achievable_fraction", out_frac),
                                      ("scale_out.latency_us", out_lat)) if v}
    return updates, lines


# --------------------------------------------------------------------------- output

def summary_line(errors: list[float]) -> str:
    if not errors:
        return "n/a"
    a = sorted(abs(e) for e in errors)
    return f"median |error| {100 * statistics.median(a):.1f}%, max {100 * a[-1]:.1f}% over {len(a)} runs"


def cluster_document(hw: HardwareSpec, prepared: list[PreparedRun], source: str,
                     loo_errors: list[float] | None = None) -> dict:
    """A cluster file (planner.catalog.hardware.load_cluster_file) with the fitted profile inline; with
    leave-one-out errors, its predictions carry that error band instead of the dev runs' one."""
    from planner.analysis.bands import band_from_errors

    finite = [e for e in (loo_errors or []) if math.isfinite(e) and e > -1]
    band = {"error_band_rel": band_from_errors(finite), "error_band_runs": len(finite)} if finite else {}
    cal = (hw.calibration or CalibrationSpec()).model_copy(update={"source": source} | band)
    note = "Fitted by plan calibrate (calibration.source) where it differs from the figures cited: "
    prof = hw.model_copy(update={"calibration": cal, "aliases": (), "name": f"{hw.name or hw.id} (calibrated)",
                                 "source": note + hw.source,
                                 "scale_up": hw.scale_up.model_copy(update={"source": note + hw.scale_up.source}),
                                 "scale_out": hw.scale_out.model_copy(update={"source": note + hw.scale_out.source})})
    biggest = max(prepared, key=lambda p: p.cluster.count)
    doc = {"name": f"{hw.id}-calibrated", "count": biggest.cluster.count,
           "hardware": prof.model_dump(mode="json", exclude_none=True)}
    if biggest.cluster.devices_per_node:
        doc["devices_per_node"] = biggest.cluster.devices_per_node
    return doc


# --------------------------------------------------------------------------- the whole command

@dataclass
class CalibrationRun:
    """Everything `plan calibrate` prints and writes."""

    cluster_doc: dict  # the cluster file (load_cluster_file accepts it)
    result: FitResult
    prepared: list[PreparedRun]
    skipped: list[dict]
    link_lines: list[str]
    link_updates: dict[str, float]


def run_calibration(runs: list[dict], tables: list, runs_name: str, source: str) -> CalibrationRun:
    """Prepare the runs, fit the links of the nccl-tests tables (planner.analysis.nccl_tests.NcclTable) and
    the compute constants; every bad value is an InputError (one line) or a skipped run with its reason."""
    from planner.analysis.nccl_tests import fit_link
    from planner.analysis.validate import check_runs

    runs = check_runs(runs, runs_name)  # the runs schema (load_runs already did for a file: cheap to repeat)
    if len(runs) > MAX_RUNS:  # refused before any work
        raise InputError(f"{runs_name}: {len(runs):,} runs, over the {MAX_RUNS} plan calibrate takes (it fits 4 "
                         f"constants; the work grows with the runs): give at most {MAX_RUNS} runs of one accelerator")
    prepared, skipped = prepare_runs(runs)
    if not prepared:
        first = "; ".join(s["id"] + ": " + s["reason"] for s in skipped[:2])
        raise InputError(f"{runs_name}: no run could be scored ({first or 'the file lists no run'})")
    hw = one_hardware(prepared)
    node = prepared[0].cluster.node_size
    updates, link_lines = link_updates(hw, node, [fit_link(t, min_bytes=1 << 20) for t in tables])
    base = checked_with_values(hw, updates, "the nccl-tests fit") if updates else hw
    res = calibrate(prepared, base)
    doc = cluster_document(res.hardware, prepared, source, res.loo_errors)
    _check_document(doc)
    return CalibrationRun(doc, res, prepared, skipped, link_lines, updates)


def _check_document(doc: dict) -> None:
    """The cluster file must be one `--cluster` accepts: finite numbers and a valid profile (else nothing is
    written and the line says which figure)."""
    from pydantic import ValidationError

    bad = _non_finite(doc)
    if bad:
        raise InputError(f"the fitted cluster file would hold a non-finite number at {bad}: check the measurements")
    try:
        HardwareSpec(**doc["hardware"])
    except ValidationError as e:
        err = e.errors()[0]
        raise InputError(f"the fitted profile has {'.'.join(map(str, err.get('loc', ())))} = {err.get('input')!r} "
                         f"({safe_line(err.get('msg', ''), 80)}): check the measurements") from None


def _non_finite(obj, path: str = "") -> str | None:
    if isinstance(obj, float) and not math.isfinite(obj):
        return path or "(top)"
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for k, v in items:
        found = _non_finite(v, f"{path}.{k}" if path else str(k))
        if found:
            return found
    return None
