"""Measured runs: score a runs file against the cost model (`plan validate`) and fit the model's physical
constants to a user's runs and nccl-tests logs (`plan calibrate`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.app.plan import Progress, quiet


def default_runs_file() -> str:
    """The project's copy of the published development runs."""
    from planner.catalog.data import data_dir

    return str(data_dir("runs") / "known_runs_dev.yaml")


def validate_file(path: str, search_quality: bool = False, progress: Progress = quiet) -> dict:
    """Predict every run of a runs file; with `search_quality`, also rank each fully published plan in an
    unconstrained search (result["search_quality"])."""
    from planner.analysis.validate import load_runs, validate_runs

    runs = load_runs(path)
    with progress(f"predicting {len(runs)} published runs"):
        result = validate_runs(runs)
    if search_quality:
        from planner.analysis.validate import search_quality as sq
        with progress(f"searching the plan space of {len(runs)} published runs"):
            result["search_quality"] = [q for r in runs if (q := sq(r))]
    return result


def previous_validation_doc(path: str) -> str:
    """The file --write-docs replaces, read (bounded, UTF-8) to keep its hand-written parts ('' if none)."""
    from planner.analysis.validate import previous_doc

    return previous_doc(path)


def validation_markdown(result: dict, previous: str) -> str:
    """docs/validation.md from a validate result, keeping the hand-written parts of `previous`."""
    from planner.analysis.validate import validation_doc

    return validation_doc(result, result.get("search_quality"), previous)


@dataclass(frozen=True)
class Calibration:
    """What `plan calibrate` found: the cluster file's text, the result document and the lines to print."""

    cluster_yaml: str
    doc: dict[str, Any]
    lines: list[str]
    warnings: tuple[str, ...] = ()  # planner.analysis.calibrate_checks: printed on stderr, `warnings` in JSON


def calibrate_file(runs_file: str, nccl_logs: tuple[str, ...], out_file: str, force: bool = False) -> Calibration:
    """Fit the physical constants to the measured runs of `runs_file` (and link bandwidth and latency to
    the nccl-tests logs); the cluster document is meant for `out_file`. Every file is read through the
    bounded reader first; every bad value is one InputError line or a skipped run with its reason
    (planner.analysis.calibrate.run_calibration). A fit that ends a constant at its bound or makes the
    predictions worse raises InputError unless `force` (planner.analysis.calibrate_checks)."""
    import yaml

    from planner.analysis import calibrate as c
    from planner.analysis.nccl_tests import read_nccl_tests
    from planner.analysis.validate import load_runs
    from planner.names import safe_line

    runs, tables = load_runs(runs_file), [read_nccl_tests(p) for p in nccl_logs]
    src = (f"plan calibrate: measured runs ({safe_line(Path(runs_file).name, 200)})"
           + (f", nccl-tests {', '.join(safe_line(Path(p).name, 200) for p in nccl_logs)}" if nccl_logs else ""))
    cal = c.run_calibration(runs, tables, safe_line(runs_file, 200), src)
    res, prepared, skipped = cal.result, cal.prepared, cal.skipped
    warnings = _checked(res, prepared, tables, force)
    text = ("# Written by `plan calibrate`; use it as --cluster. " + src + "\n"
            + yaml.safe_dump(cal.cluster_doc, sort_keys=False, width=120))
    out = {"out": out_file, "links": cal.link_lines, "link_updates": cal.link_updates,
           "fitted": {k: {"before": a, "after": b} for k, (a, b) in res.fitted.items()}, "held_fixed": res.held_fixed,
           "runs": [{"id": p.id, "measured_s": p.measured_s, "error_before": e0, "error_after": e1}
                    | ({"error_leave_one_out": res.loo_errors[i]} if res.loo_errors else {})
                    for i, (p, e0, e1) in enumerate(zip(prepared, res.errors_before, res.errors_after,
                                                              strict=False))],
           "skipped": skipped, "warnings": warnings}
    return Calibration(text, out, _calibration_lines(res, cal.link_lines, skipped, safe_line(out_file, 200)),
                       tuple(warnings))


def _checked(res, prepared, tables: list, force: bool) -> list[str]:
    """The fit's warnings; raises InputError (nothing written) for a fit not worth writing, unless `force`."""
    from planner.analysis import calibrate as c
    from planner.analysis.calibrate_checks import review
    from planner.analysis.nccl_tests import fit_link
    from planner.errors import InputError

    fits = [fit_link(t, min_bytes=1 << 20) for t in tables]
    refuse, warn = review(res, c.one_hardware(prepared), prepared, fits, prepared[0].cluster.node_size)
    if refuse and not force:
        raise InputError(f"calibrate wrote nothing: {'; '.join(refuse)}. Check the runs (a step time, plan or "
                         "stack that is not what ran), or give --force to write the profile anyway")
    return refuse + warn


def _calibration_lines(res, link_lines: list[str], skipped: list[dict], out_file: str) -> list[str]:
    from planner.analysis import calibrate as c

    lines = [f"link: {line}" for line in link_lines]
    lines += [f"fitted {k}: {a:.4g} -> {b:.4g}" for k, (a, b) in res.fitted.items()]
    if res.held_fixed:
        lines.append(f"held at their defaults (the runs cannot tell them apart): {', '.join(res.held_fixed)}")
    lines.append(f"before: {c.summary_line(res.errors_before)}")
    lines.append(f"after:  {c.summary_line(res.errors_after)}")
    lines.append(f"leave-one-out: {c.summary_line(res.loo_errors)}" if res.loo_errors
                 else "leave-one-out: needs at least 3 runs")
    lines += [f"not used: {s['id']}: {s['reason']}" for s in skipped]
    lines.append(f"wrote {out_file}: plan --model M --cluster {out_file}")
    return lines
