"""Refit the project's calibration constants (planner.calibration) from a runs file, reproducibly.

    python benchmarks/fit_calibration.py                      # dev runs, default constants, leave-one-out
    python benchmarks/fit_calibration.py --runs FILE --const GEMM_SHAPE_DERATE --const GEMM_DIM_HALF \
        --loo source

Least squares on log(predicted / measured) step time over every run with a measured step
(scipy.optimize.least_squares, bounded; planner.analysis.fit). Prints the constants before and after,
the in-sample median / p90 |error| before and after, and the leave-one-out (or leave-one-source-out)
errors: each run predicted by constants fitted without it. Each run's plan is the one `plan validate`
picks with today's constants and is kept fixed. Deterministic; takes minutes with leave-one-out (a
script, not a test).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.costmodel.calibration import fit_ranges  # noqa: E402

# admissible ranges of the fittable constants, written beside each constant in planner.costmodel.calibration: the
# dev-fitted ones' bounds (`fitted(...)`, cited there) and the `refittable(...)` ones the dev fit leaves alone
BOUNDS = fit_ranges()
DEFAULT = ("GEMM_SHAPE_DERATE", "GEMM_DIM_HALF", "MOE_GROUPED_GEMM_REL_EFFICIENCY")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default=str(ROOT / "runs" / "known_runs_dev.yaml"))
    ap.add_argument("--const", action="append", choices=sorted(BOUNDS),
                    help=f"repeatable; default {', '.join(DEFAULT)}")
    ap.add_argument("--loo", choices=("none", "run", "source"), default="run")
    args = ap.parse_args(argv)

    from planner.analysis.fit import fit_constants, leave_one_out, prepare, summary
    from planner.analysis.validate import load_runs

    names = tuple(args.const or DEFAULT)
    bounds = [BOUNDS[n] for n in names]
    cases = prepare(load_runs(args.runs))
    print(f"{len(cases)} runs with a measured step time; fitting {', '.join(names)}")
    fit = fit_constants(cases, names, bounds)
    for n, a, b in zip(names, fit.initial, fit.values, strict=True):
        print(f"  {n:<36} {a:>10.4g} -> {b:.4g}")
    pct = lambda s: f"median {100 * s['median_abs_error']:.1f}%, p90 {100 * s['p90_abs_error']:.1f}%"  # noqa: E731
    print(f"in-sample |error| before: {pct(summary(fit.initial_log_errors))}")
    print(f"in-sample |error| after:  {pct(summary(fit.log_errors))}   ({fit.message})")
    if args.loo != "none":
        loo = leave_one_out(cases, names, bounds, by_group=args.loo == "source", start=fit.values)
        label = "leave-one-source-out" if args.loo == "source" else "leave-one-out"
        print(f"{label} |error|:  {pct(summary(list(loo.values())))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
