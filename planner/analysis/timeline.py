"""Pipeline schedules as timed events: who computes what, when, on each pipeline stage.

`schedule_events` fixes the order in which each pipeline rank runs its forward (F) and backward
(B, and W for zero-bubble) passes, as the real schedules do, then simulates the data
dependencies between ranks:

* F of micro-batch i on virtual stage k starts after F of i on virtual stage k-1 ends;
* B of i on virtual stage k starts after B of i on k+1 ends (on the last virtual stage, after
  its own F);
* W (zero-bubble only) of i on k starts after B of i on k;
* a rank runs one pass at a time, in its schedule's order.

Start times, the makespan and the bubbles are therefore emergent, not formulas. Sends are
non-blocking with unbounded buffers, and `p2p_s` (default 0) is added to every dependency that
crosses ranks. With vpp > 1, rank s holds model chunks c = 0..vpp-1, i.e. virtual stages
c*pp + s (Megatron's interleaved layout).

Schedules
---------
gpipe        all forwards, then all backwards (Huang et al. 2019, GPipe, arXiv 1811.06965).
1f1b         PipeDream-Flush: pp-s-1 warm-up forwards, then one forward / one backward
             (Narayanan et al. 2021, SC21, arXiv 2104.04473, sec. 2.2.1).
interleaved  1F1B over vpp model chunks per rank (Narayanan et al. 2021, sec. 2.2.2); the
             order follows Megatron-core's `forward_backward_pipelining_with_interleaving`
             (micro-batch groups of pp, warm-up 2*(pp-s-1) + (vpp-1)*pp).
zb           ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241,
             sec. 3): backward split into B (input gradient) and W (weight gradient); rank s
             defers s W passes to the cool-down, which cuts the 1F1B bubble to
             (pp-1)(F+B-W) at the same peak memory. The order is the reference ZB-H1 schedule
             (warm-up F, then s x (F,B), then (F,B,W) steady state, then (B,W), then the deferred W).

`fwd_s[s]` / `bwd_s[s]` are the times of one micro-batch's full forward / backward on rank s
(all its chunks, as the cost model reports them); each chunk takes 1/vpp of it. For zb,
B = (1 - w_fraction) * bwd and W = w_fraction * bwd (the paper's T_B ~ T_W gives 0.5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner.errors import InputError

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb")
KINDS = ("F", "B", "W")


@dataclass(frozen=True)
class Event:
    stage: int  # pipeline rank, 0 = first
    kind: str  # "F", "B" (the whole backward, or only the input-gradient part for zb) or "W"
    microbatch: int
    chunk: int  # model chunk on this rank (0 unless vpp > 1)
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


Op = tuple[str, int, int]  # (kind, microbatch, chunk)


# ---------------------------------------------------------------------------------------------
# Per-rank orders
# ---------------------------------------------------------------------------------------------
def _interleaved_table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """Megatron-core `get_schedule_table`: (microbatch, chunk) in the order forwards are issued."""
    table: list[tuple[int, int]] = []
    for lo in range(0, m, group):
        hi = min(lo + group, m)  # the last group takes whatever is left
        table.extend((mb, c) for c in range(v) for mb in range(lo, hi))
    return table


def _gpipe_orders(pp: int, vpp: int, m: int) -> list[list[Op]]:
    """GPipe: every rank runs all forwards, then all backwards (chunks mirrored)."""
    table = _interleaved_table(m, vpp, pp)
    orders: list[list[Op]] = []
    for _ in range(pp):
        fw: list[Op] = [("F", mb, c) for mb, c in table]
        bw: list[Op] = [("B", mb, vpp - 1 - c) for mb, c in table]
        orders.append(fw + bw)
    return orders


def _zb_order(s: int, pp: int, m: int) -> list[Op]:
    """ZB-H1 on rank s: warm-up F, s x (F, B), steady (F, B, W), cool-down (B, W), deferred W."""
    order: list[Op] = []
    f = b = w = 0
    for _ in range(min(pp - s - 1, m)):  # warm-up, as 1F1B
        order.append(("F", f, 0))
        f += 1
    for _ in range(s):  # F + B, W deferred (s of them on rank s)
        if f == m:
            break
        order += [("F", f, 0), ("B", b, 0)]
        f += 1
        b += 1
    while f < m:  # steady state: F, B, W
        order += [("F", f, 0), ("B", b, 0), ("W", w, 0)]
        f += 1
        b += 1
        w += 1
    while b < m:  # cool-down: B, W
        order += [("B", b, 0), ("W", w, 0)]
        b += 1
        w += 1
    while w < m:  # the deferred W fill the tail bubble
        order.append(("W", w, 0))
        w += 1
    return order


def _1f1b_order(s: int, pp: int, m: int) -> list[Op]:
    """PipeDream-Flush on rank s: pp-s-1 warm-up forwards, one F / one B, then the cool-down Bs."""
    warm = min(pp - s - 1, m)
    order: list[Op] = [("F", i, 0) for i in range(warm)]
    for i in range(m - warm):
        order += [("F", warm + i, 0), ("B", i, 0)]
    order += [("B", i, 0) for i in range(m - warm, m)]
    return order


def _interleaved_order(s: int, pp: int, vpp: int, table: list[tuple[int, int]]) -> list[Op]:
    """Interleaved 1F1B (Megatron-core) on rank s: k-th forward = table[k], k-th backward = table[k]
    with the chunk mirrored."""
    total = len(table)
    warm = min((pp - s - 1) * 2 + (vpp - 1) * pp, total)
    order: list[Op] = [("F", *table[k]) for k in range(warm)]
    for k in range(total - warm):
        mb, c = table[k + warm]
        order.append(("F", mb, c))
        mb, c = table[k]
        order.append(("B", mb, vpp - 1 - c))
    for k in range(total - warm, total):
        mb, c = table[k]
        order.append(("B", mb, vpp - 1 - c))
    return order


def stage_orders(pp: int, vpp: int, num_microbatches: int, schedule: str) -> list[list[Op]]:
    """The order in which each rank runs its passes, as (kind, microbatch, chunk) tuples."""
    pp, vpp, m, schedule = _check(pp, vpp, num_microbatches, schedule)
    if schedule == "gpipe":
        return _gpipe_orders(pp, vpp, m)
    if schedule == "zb":
        return [_zb_order(s, pp, m) for s in range(pp)]
    if vpp == 1:  # 1f1b, or interleaved with a single chunk
        return [_1f1b_order(s, pp, m) for s in range(pp)]
    table = _interleaved_table(m, vpp, pp)  # a table of m * vpp entries
    return [_interleaved_order(s, pp, vpp, table) for s in range(pp)]


def _check(pp, vpp, m, schedule) -> tuple[int, int, int, str]:
    for name, x in (("pp", pp), ("vpp", vpp), ("num_microbatches", m)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise InputError(f"{name} must be a positive integer, got {x!r}")
    schedule = str(schedule).lower()
    if schedule == "none" and pp == 1:  # the cost model's label for a plan without pipelining
        schedule = "1f1b"
    if schedule not in SCHEDULES:
        raise InputError(f"unknown pipeline schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
    if schedule == "1f1b" and vpp > 1:
        schedule = "interleaved"  # Megatron runs the interleaved schedule whenever vpp > 1
    if schedule == "interleaved" and vpp > 1 and m % pp:
        # Megatron-core's forward_backward_pipelining_with_interleaving raises the same error
        raise InputError(f"interleaved schedule needs num_microbatches ({m}) divisible by pp ({pp})")
    if schedule == "zb" and vpp > 1:
        raise InputError("the zb (ZB-H1) schedule is modelled for vpp = 1 only")
    return pp, vpp, m, schedule


def resolve_schedule(pp: int, vpp: int, num_microbatches: int, schedule: str) -> str:
    """The schedule that will run: "1f1b" with vpp > 1 is "interleaved", "none" (pp = 1) is "1f1b".
    Raises InputError for unknown or unsupported combinations."""
    return _check(pp, vpp, num_microbatches, schedule)[3]


def _per_stage(name: str, x: float | Sequence[float], pp: int) -> list[float]:
    vals: list = [x] * pp if isinstance(x, (int, float)) and not isinstance(x, bool) else list(x)  # type: ignore[arg-type]
    if len(vals) != pp:
        raise InputError(f"{name} has {len(vals)} entries for {pp} pipeline stages")
    out = []
    for v in vals:
        try:
            v = float(v)
        except (TypeError, ValueError):
            raise InputError(f"{name} entries must be numbers, got {v!r}") from None
        if not math.isfinite(v) or v < 0:
            raise InputError(f"{name} entries must be non-negative and finite, got {v!r}")
        out.append(v)
    return out


# ---------------------------------------------------------------------------------------------
# Simulation
# ---------------------------------------------------------------------------------------------
def _durations(pp: int, vpp: int, sched: str, fwd: list[float], bwd: list[float],
               w_fraction: float) -> dict[int, dict[str, float]]:
    """Per rank, the time of one pass of each kind on one chunk (zb splits the backward into B and W)."""
    split = sched == "zb"
    dur = {}
    for s in range(pp):
        f, b = fwd[s] / vpp, bwd[s] / vpp
        dur[s] = {"F": f, "B": b * (1.0 - w_fraction) if split else b, "W": b * w_fraction}
    return dur


def _dependency(kind: str, mb: int, vs: int, s: int, pp: int,
                nv: int) -> tuple[tuple[str, int, int], int] | None:
    """The pass (kind, microbatch, virtual stage) that must end before this one, and its rank;
    None for a first-stage forward (no dependency)."""
    if kind == "F":
        if vs == 0:
            return None
        return ("F", mb, vs - 1), (vs - 1) % pp
    if kind == "B":
        return (("F", mb, vs), s) if vs == nv - 1 else (("B", mb, vs + 1), (vs + 1) % pp)
    return ("B", mb, vs), s


def _simulate(orders: list[list[Op]], dur: dict[int, dict[str, float]], pp: int, vpp: int,
              p2p_s: float, sched: str, m: int) -> list[Event]:
    """Run every rank's order as far as its dependencies allow, round after round, until all passes ran."""
    nv = pp * vpp
    end: dict[tuple[str, int, int], float] = {}  # (kind, microbatch, virtual stage) -> end time
    clock = [0.0] * pp
    ptr = [0] * pp
    events: list[Event] = []

    def ready_at(kind: str, mb: int, vs: int, s: int) -> float | None:
        dep = _dependency(kind, mb, vs, s, pp, nv)
        if dep is None:
            return 0.0
        t = end.get(dep[0])
        if t is None:
            return None
        return t + (p2p_s if dep[1] != s else 0.0)

    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(pp):
            order = orders[s]
            while ptr[s] < len(order):
                kind, mb, c = order[ptr[s]]
                vs = c * pp + s
                t = ready_at(kind, mb, vs, s)
                if t is None:
                    break
                start = max(clock[s], t)
                stop = start + dur[s][kind]
                end[(kind, mb, vs)] = stop
                clock[s] = stop
                events.append(Event(s, kind, mb, c, start, stop))
                ptr[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # an order that waits on itself; cannot happen for the schedules above
            raise RuntimeError(f"pipeline schedule {sched} deadlocked (pp={pp}, vpp={vpp}, m={m})")
    return events


def schedule_events(
    pp: int,
    vpp: int,
    num_microbatches: int,
    schedule: str,
    fwd_s: float | Sequence[float],
    bwd_s: float | Sequence[float],
    *,
    w_fraction: float = 0.5,  # = planner.costmodel.pipeline.ZB_W_FRACTION (Qi et al. 2023: T_B ~ T_W)
    p2p_s: float = 0.0,
) -> list[Event]:
    """Simulate one optimizer step's pipeline; events sorted by (start, stage)."""
    pp, vpp, m, sched = _check(pp, vpp, num_microbatches, schedule)
    fwd = _per_stage("fwd_s", fwd_s, pp)
    bwd = _per_stage("bwd_s", bwd_s, pp)
    if not (0.0 <= w_fraction < 1.0):
        raise InputError(f"w_fraction must be in [0, 1), got {w_fraction!r}")
    if not (math.isfinite(p2p_s) and p2p_s >= 0):
        raise InputError(f"p2p_s must be non-negative, got {p2p_s!r}")
    dur = _durations(pp, vpp, sched, fwd, bwd, w_fraction)
    orders = stage_orders(pp, vpp, m, sched)
    events = _simulate(orders, dur, pp, vpp, p2p_s, sched, m)
    events.sort(key=lambda e: (e.start_s, e.stage))
    return events


# ---------------------------------------------------------------------------------------------
# Measurements on events
# ---------------------------------------------------------------------------------------------
def num_stages(events: Sequence[Event]) -> int:
    return 1 + max((e.stage for e in events), default=-1)


def makespan_s(events: Sequence[Event]) -> float:
    """Time from the first pass starting to the last one ending (one step's pipeline phase)."""
    if not events:
        return 0.0
    return max(e.end_s for e in events) - min(e.start_s for e in events)


def busy_s(events: Sequence[Event], pp: int | None = None) -> list[float]:
    """Compute time per stage."""
    out = [0.0] * (pp or num_stages(events))
    for e in events:
        out[e.stage] += e.duration_s
    return out


def idle_intervals(events: Sequence[Event], pp: int | None = None) -> list[list[tuple[float, float]]]:
    """Per stage, the gaps (start, end) within [0, makespan] where it computes nothing: the bubbles."""
    pp = pp or num_stages(events)
    span_end = max((e.end_s for e in events), default=0.0)
    by_stage: list[list[Event]] = [[] for _ in range(pp)]
    for e in events:
        by_stage[e.stage].append(e)
    gaps: list[list[tuple[float, float]]] = []
    eps = 1e-12 * max(span_end, 1.0)
    for evs in by_stage:
        evs.sort(key=lambda e: e.start_s)
        t, mine = 0.0, []
        for e in evs:
            if e.start_s > t + eps:
                mine.append((t, e.start_s))
            t = max(t, e.end_s)
        if span_end > t + eps:
            mine.append((t, span_end))
        gaps.append(mine)
    return gaps


def critical_bubble_s(events: Sequence[Event], pp: int | None = None) -> float:
    """Idle time of the busiest stage within the pipeline phase: makespan minus its compute. This is
    what the scored model's `bubble_s` measures (the step is set by the slowest stage; idle time of
    lighter stages is load imbalance, not step time), so the two are compared like for like."""
    if not events:
        return 0.0
    return makespan_s(events) - max(busy_s(events, pp))


def conformed_events(pp: int, vpp: int, num_microbatches: int, schedule: str, fwd_s: float | Sequence[float],
                     bwd_s: float | Sequence[float], bubble_s: float, *, w_fraction: float = 0.5,
                     rel_tol: float = 1e-12) -> tuple[list[Event], float]:
    """The schedule drawn in the scored model's time: (events, hand-off slack s).

    The scored pipeline model (planner.costmodel.pipeline.pipeline_step_time) is the closed form of Narayanan et
    al. 2021 (sec. 2.2: (p-1)/m, (p-1)/(v m)) and Qi et al. 2023 (ZB-H1), generalised to uneven stages
    as Alpa's latency sum_s t_s + (m-1) max_s t_s (Zheng et al. OSDI'22, eq. 2). The dependency
    simulation reproduces it exactly for uniform stages and when the slowest stage is the last one; when
    a lighter stage follows the slowest, the closed form charges those stages' whole fill and drain and the
    unbounded-buffer simulation overlaps part of it. So that the drawn chart and the scored step are one
    model, the simulation adds the same slack to every cross-stage dependency (`p2p_s`), found by
    regula falsi, until the busiest stage's idle time equals `bubble_s`; the slack is 0 wherever the
    two already agree. If the simulation already idles more than `bubble_s`, no slack is added and
    the caller gets the plain simulation (its critical_bubble_s exceeds bubble_s)."""
    def run(slack: float) -> tuple[list[Event], float]:
        ev = schedule_events(pp, vpp, num_microbatches, schedule, fwd_s, bwd_s, w_fraction=w_fraction, p2p_s=slack)
        return ev, critical_bubble_s(ev, pp) - bubble_s

    tol = rel_tol * max(abs(bubble_s), 1e-30)
    ev, g_lo = run(0.0)
    if g_lo >= -tol or pp == 1:
        return ev, 0.0
    lo, hi = 0.0, max(bubble_s / max(1, 2 * (pp - 1)), 1e-12)
    ev_hi, g_hi = run(hi)
    while g_hi < 0:  # each cross-stage hop on the critical path adds the slack once: grows linearly
        lo, g_lo, hi = hi, g_hi, 2 * hi
        ev_hi, g_hi = run(hi)
    best, side = (ev_hi, hi, g_hi), 0
    for _ in range(200):  # Illinois regula falsi on a piecewise-linear increasing function
        if abs(best[2]) <= tol:
            break
        x = hi - g_hi * (hi - lo) / (g_hi - g_lo)
        ev_x, g_x = run(x)
        best = (ev_x, x, g_x)
        if g_x > 0:
            hi, g_hi = x, g_x
            if side == 1:
                g_lo /= 2
            side = 1
        else:
            lo, g_lo = x, g_x
            if side == -1:
                g_hi /= 2
            side = -1
    return best[0], best[1]


def peak_in_flight(events: Sequence[Event], pp: int | None = None) -> list[int]:
    """Per stage, the most micro-batch chunks whose forward has started and whose backward
    (B, and W for zb) has not finished: the activations that stage holds at its peak."""
    pp = pp or num_stages(events)
    split = any(e.kind == "W" for e in events)
    last = "W" if split else "B"
    timeline: list[list[tuple[float, int]]] = [[] for _ in range(pp)]
    for e in events:
        if e.kind == "F":
            timeline[e.stage].append((e.start_s, 1))
        elif e.kind == last:
            timeline[e.stage].append((e.end_s, -1))
    peaks = []
    for pts in timeline:
        pts.sort(key=lambda x: (x[0], x[1]))  # at equal times, frees before allocations
        cur = peak = 0
        for _, d in pts:
            cur += d
            peak = max(peak, cur)
        peaks.append(peak)
    return peaks
