"""Is a `plan calibrate` fit worth writing? The checks a user cannot do by eye on the printed numbers.

A least-squares fit always returns constants. With runs the model cannot explain (a typo in a step time,
a plan that is not the one measured, a different software stack) it returns nonsense: a GEMM ceiling at
its bound 1.0, attention at 2.0, a seconds-long "overhead", and predictions worse than before. Those fits
are refused (exit 2, nothing written) unless --force; weaker signs are warnings:

- refused: a fitted constant ends at a bound of its admissible range (compute_params: the optimiser wanted
  to go further, so the constant stands for something else than the rate it names); the median |error|
  over the runs is larger after the fit than before (the fit made the predictions worse);
- warned: a fitted per-step overhead above 10% of the median measured step; the leave-one-out median
  |error| (each run predicted by a fit without it) is larger than before
  the fit (the constants do not generalise: too few or inconsistent runs); a run whose published plan the
  model says does not fit in memory (it ran, so its plan, model or memory figures are off); a two-node
  nccl-tests all-reduce above the NIC line rate, capped at it (tree or NVLS algorithms beat the ring's
  line-rate bound: NCCL_ALGO=Ring measures the network).
"""

from __future__ import annotations

import math
import statistics

# a fitted fixed per-step cost above this share of the median measured step is a missing mechanism, not an
# overhead (launch, data loading and logging cost well under it in the published runs the defaults fit with 0)
OVERHEAD_SHARE_MAX = 0.10
# a constant within 0.1% (log) of a bound sits on it: scipy's trust-region fit stops there when the bound
# is active (measured: the inconsistent-runs test ends at exactly 1.0 and 2.0)
BOUND_TOL_LOG = 1e-3


def _median_abs(errors: list[float]) -> float:
    return statistics.median(abs(e) for e in errors) if errors else float("nan")


def at_bounds(res, hw) -> list[str]:
    """One sentence per fitted constant that ends at a bound of its range (an additive overhead at 0 is its
    natural floor, not a bound hit)."""
    from planner.analysis.calibrate import compute_params, get_value

    out = []
    for p in compute_params(hw):
        if p.name not in res.fitted:
            continue
        v = get_value(res.hardware, p)
        if p.additive:
            hit = v >= p.hi * (1 - BOUND_TOL_LOG)
            edge = p.hi
        else:
            hit = abs(math.log(v / p.lo)) < BOUND_TOL_LOG or abs(math.log(v / p.hi)) < BOUND_TOL_LOG
            edge = p.lo if abs(math.log(v / p.lo)) < abs(math.log(v / p.hi)) else p.hi
        if hit:
            out.append(f"{p.name} ended at its bound {edge:g} (from {res.fitted[p.name][0]:.4g}): the runs push it "
                       "beyond any physical value, so it stands for something the model does not see")
    return out


def not_improved(res) -> list[str]:
    before, after = _median_abs(res.errors_before), _median_abs(res.errors_after)
    if after > before:
        return [f"the fit makes the predictions worse: median |error| {100 * before:.1f}% before, "
                f"{100 * after:.1f}% after"]
    return []


def overfit(res) -> list[str]:
    if not res.loo_errors:
        return []
    before, loo = _median_abs(res.errors_before), _median_abs(res.loo_errors)
    if loo > before:
        return [f"leave-one-out median |error| {100 * loo:.1f}% is worse than the defaults' {100 * before:.1f}%: "
                f"fitted on {len(res.errors_before)} runs the constants do not predict an unseen run better; "
                "add runs (other models, sizes, sequence lengths) or keep the defaults"]
    return []


def large_overhead(res, prepared) -> list[str]:
    """The fitted fixed per-step cost when it is a large share of the measured steps."""
    before_after = res.fitted.get("calibration.step_overhead_s")
    if before_after is None or not prepared:
        return []
    med = statistics.median(p.measured_s for p in prepared)
    after = before_after[1]
    if after <= OVERHEAD_SHARE_MAX * med:
        return []
    return [f"calibration.step_overhead_s = {after:.3g} s is {100 * after / med:.0f}% of the median measured step "
            f"({med:.3g} s): a fixed cost that large stands for something the model does not see (a slower data "
            "loader, a different plan or stack), not an overhead"]


def unfit_runs(prepared, headroom_gib: float = 0.0) -> list[str]:
    """Runs whose (published) plan the model says does not fit in memory although it ran."""
    from planner.costmodel import Context, evaluate

    out = []
    for p in prepared:
        ctx = Context(p.model, p.cluster, p.train, memory_headroom_gib=headroom_gib)
        ev = evaluate(ctx, p.plan)
        usable = ev.memory["usable_gib"]  # the one usable-capacity rule (planner.costmodel.capacity)
        if not ev.fits:
            out.append(f"run {p.id}: the model says its plan does not fit ({ev.memory['peak_gib']:.1f} GiB of "
                       f"{usable:.1f} GiB usable) although it ran: check its model, plan and batch; its step "
                       "time is fitted as given")
    return out


def line_rate_GBps(hw, ranks: int, nodes: int) -> float:
    """The NIC line rate one node's devices share in a multi-node collective (per direction)."""
    per_domain = min(ranks // nodes, hw.scale_up.domain_size)
    return per_domain * hw.scale_out.unidir_GBps_per_device


def capped_links(hw, node_size: int, fits: list) -> list[str]:
    """Multi-node nccl-tests fits whose bus bandwidth exceeds the NIC line rate (capped at it by
    planner.analysis.calibrate.link_updates)."""
    out = []
    for f in fits:
        nodes = f.nodes or max(1, math.ceil(f.ranks / node_size))
        if nodes == 1:
            continue
        rate = line_rate_GBps(hw, f.ranks, nodes)
        if f.busbw_GBps > rate:
            out.append(f"{f.collective} on {nodes} nodes: busbw {f.busbw_GBps:.0f} GB/s is above the NIC line rate "
                       f"{rate:.0f} GB/s, so NCCL ran a tree or NVLS (SHARP) algorithm and the figure says little "
                       f"about the network; capped at the line rate. To measure the network, rerun with "
                       f"NCCL_ALGO=Ring (e.g. NCCL_ALGO=Ring all_reduce_perf -b 8 -e 8G -f 2 -g 1 over {nodes} nodes)")
    return out


def review(res, hw, prepared, fits: list, node_size: int) -> tuple[list[str], list[str]]:
    """(reasons to refuse the fit, warnings) for a calibration result `res` started from profile `hw`."""
    refuse = at_bounds(res, hw) + not_improved(res)
    warn = overfit(res) + large_overhead(res, prepared) + unfit_runs(prepared) + capped_links(hw, node_size, fits)
    return refuse, warn
