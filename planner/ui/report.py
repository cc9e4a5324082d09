"""A self-contained HTML report of a planner run: ranked plans, Pareto front, pipeline timeline,
memory and time breakdowns.

The page has no external resources at all: CSS, SVG and a little JavaScript are inline, fonts are
the system's, and a Content-Security-Policy forbids any network load. Charts are drawn as SVG in
Python, so they show even with JavaScript off; the script only adds table sorting, row/point
highlighting, and marks the page `data-rendered="1"` once it has checked every chart has a
non-empty box (the headless-browser test reads that).

Input is the `--json` result: {"model": {...}, "cluster": {...}, "plans": [best first]}, each plan
as produced by the cost model (plan, step_time_s, tokens_per_s_per_device, mfu, hfu, memory,
time_breakdown, pipeline, fits, warnings, reason). `candidates` (same plan schema) feeds the Pareto
chart; without it the ranked plans are used.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

from planner.analysis import timeline as tl
from planner.costmodel import trace as terms
from planner.errors import InputError, PlannerError
from planner.specs.plan import recompute_label

__all__ = ["render_report", "pareto_front", "plan_label", "CHART_IDS"]

CHART_IDS = ("plans-table", "pareto", "timeline", "memory-breakdown", "time-breakdown")

# chart colours of the breakdown terms (their keys, order and labels: planner.costmodel.trace)
PART_COLOUR = {
    "weights_gib": "#4e79a7", "grads_gib": "#f28e2b", "optimizer_gib": "#e15759", "activations_gib": "#76b7b2",
    "buffers_gib": "#59a14f", "overhead_gib": "#bab0ac",
    "compute_s": "#4e79a7", "recompute_s": "#a0cbe8", "bubble_s": "#bab0ac", "tp_comm_s": "#f28e2b",
    "cp_comm_s": "#ffbe7d", "ep_comm_s": "#e15759", "pp_comm_s": "#b07aa1", "dp_comm_s": "#59a14f",
    "optimizer_s": "#edc948",
}
MEMORY_PARTS = [(k, terms.LABELS[k], PART_COLOUR[k]) for k in terms.MEMORY_PARTS]  # key, label, colour
TIME_PARTS = [(k, terms.LABELS[k], PART_COLOUR[k]) for k in terms.TIME_TERMS]
KIND_COLOUR = {"F": "#4e79a7", "B": "#59a14f", "W": "#b07aa1"}
KIND_LABEL = {"F": "forward", "B": "backward", "W": "weight-gradient (W)"}

MAX_BARS = 8  # plans shown in the breakdown charts
MAX_DRAWN_OPS_PER_STAGE = 128  # passes per Gantt row (~7 px each) before a shorter pipeline is drawn
MAX_SIMULATED_OPS = 100_000  # beyond this (~1 s of simulation) the bubble is quoted from the closed form


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------
def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _num(x: object) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _fmt(x: object, sig: int = 3, unit: str = "") -> str:
    """`sig` significant digits, thousands separators, scientific notation outside [1e-3, 1e7)."""
    v = _num(x)
    if v is None:
        return "–"
    a = abs(v)
    if a == 0:
        text = "0"
    elif a >= 1e7 or a < 1e-3:
        text = f"{v:.{max(0, sig - 1)}e}"
    else:
        decimals = max(0, sig - 1 - math.floor(math.log10(a)))
        text = f"{v:,.{decimals}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
    return text + unit


def _pct(x: object) -> str:
    v = _num(x)
    return "–" if v is None else f"{100 * v:.1f}%"


def _seconds(x: object) -> str:
    v = _num(x)
    if v is None:
        return "–"
    if v == 0:
        return "0 s"
    if abs(v) < 1:
        return _fmt(v * 1e3, 3, " ms")
    return _fmt(v, 3, " s")


def _tokens(x: object) -> str:
    v = _num(x)
    if v is None:
        return "–"
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= div:
            return _fmt(v / div, 4, suffix)
    return _fmt(v, 4)


def _dict_at(d: dict, key: str) -> dict:
    """d[key] when it is a dict, else {} (the JSON is read defensively)."""
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def _knobs(plan: dict) -> dict:
    k = plan.get("plan") if isinstance(plan, dict) else None
    return k if isinstance(k, dict) else {}


def plan_label(plan: dict) -> str:
    """Short name of a `--json` plan entry, as the terminal tables name it (planner.ui.render)."""
    from planner.ui.render import plan_label as knob_label

    return knob_label(_knobs(plan))


def _plan_key(plan: dict) -> str:
    k = _knobs(plan)
    return "|".join(f"{a}={k[a]}" for a in sorted(k))


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _tick_text(t: float, ticks: Sequence[float]) -> str:
    """A tick label with just the decimals its step needs (0.25 steps keep two)."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else abs(t) or 1.0
    d = max(0, math.ceil(-math.log10(step) - 1e-9))
    if abs(step * 10**d - round(step * 10**d)) > 1e-6:
        d += 1
    return f"{t:,.{d}f}"


def _nice_max(v: float) -> float:
    """The first 'nice' tick at or above v (> 0)."""
    ticks = _nice_ticks(0.0, v, 5)
    if ticks[-1] >= v * (1 - 1e-9):
        return ticks[-1]
    step = ticks[1] - ticks[0] if len(ticks) > 1 else v
    return ticks[-1] + step


def _nice_range(lo: float, hi: float, pad: float = 0.06) -> tuple[float, float]:
    if hi <= lo:
        lo, hi = lo - 0.5 * (abs(lo) or 1), hi + 0.5 * (abs(hi) or 1)
    span = hi - lo
    return lo - pad * span, hi + pad * span


def _legend(items: Sequence[tuple[str, ...]], x: float, y: float, width: float) -> tuple[str, float]:
    """Legend entries (label, colour[, css class of a line sample]) left to right, wrapping at `width`;
    returns (svg, height used)."""
    out, cx, cy = [], x, y
    for item in items:
        label, colour = item[0], item[1]
        style = item[2] if len(item) > 2 else "box"
        w = 22 + 7 * len(label)
        if cx + w > x + width and cx > x:
            cx, cy = x, cy + 18
        if style == "box":
            out.append(f'<rect x="{cx:.1f}" y="{cy - 10:.1f}" width="12" height="12" rx="2" fill="{colour}"/>')
        else:  # a line sample drawn with the CSS class `style`
            if style == "total-mark":  # vertical, as drawn on the bars
                out.append(f'<line x1="{cx + 6:.1f}" x2="{cx + 6:.1f}" y1="{cy - 11:.1f}" y2="{cy + 3:.1f}" '
                           f'class="{style}"/>')
            else:
                out.append(f'<line x1="{cx:.1f}" x2="{cx + 13:.1f}" y1="{cy - 4:.1f}" y2="{cy - 4:.1f}" '
                           f'class="{style}"/>')
        out.append(f'<text x="{cx + 16:.1f}" y="{cy}" class="lg">{_e(label)}</text>')
        cx += w + 10
    return "".join(out), cy - y + 18


# ---------------------------------------------------------------------------------------------
# Pareto front
# ---------------------------------------------------------------------------------------------
def _point(plan: dict) -> tuple[float, float] | None:
    mem = _dict_at(plan, "memory")
    x, y = _num(plan.get("step_time_s")), _num(mem.get("peak_gib"))
    if x is None or y is None:
        return None
    return x, y


def _xy(plan: dict) -> tuple[float, float]:
    """(step time, peak memory) of a plan known to have both (see _point)."""
    p = _point(plan)
    assert p is not None
    return p


def pareto_front(candidates: Iterable[dict]) -> list[dict]:
    """Feasible candidates not beaten on both step time and peak memory, fastest first.

    A candidate is dominated when another is at least as good on both and better on one.
    Candidates with `fits` false, or without a step time or peak memory, are ignored.
    """
    pts = []
    for c in candidates:
        if not isinstance(c, dict) or c.get("fits") is False:
            continue
        p = _point(c)
        if p is not None:
            pts.append((p[0], p[1], c))
    pts.sort(key=lambda t: (t[0], t[1]))
    front, best_mem = [], math.inf
    for _x, y, c in pts:
        if y < best_mem:
            front.append(c)
            best_mem = y
    return front


def _capacity_gib(plans: Iterable[dict]) -> float | None:
    """The first memory capacity (GiB) found among the plans, None if none has one."""
    for p in plans:
        mem = p.get("memory")
        cap = _num((mem or {}).get("capacity_gib")) if isinstance(mem, dict) else None
        if cap is not None:
            return cap
    return None


def _pareto_ranges(xs: list[float], ys: list[float], cap: float | None) -> tuple[float, float, float, float]:
    """(x0, x1, y0, y1) of the Pareto chart: padded data ranges, the capacity included, from 0 when the
    data are non-negative (and memory from 0 when the lowest point is under 30% of the highest)."""
    ylo_data, yhi_data = min(ys), max(ys)
    if cap is not None:
        yhi_data = max(yhi_data, cap)
    x0, x1 = _nice_range(min(xs), max(xs))
    y0, y1 = _nice_range(min(0.0, ylo_data) if ylo_data < 0.3 * yhi_data else ylo_data, yhi_data)
    x0, y0 = max(0.0, x0) if min(xs) >= 0 else x0, max(0.0, y0) if ylo_data >= 0 else y0
    return x0, x1, y0, y1


def _front_path(front: list[dict], sx: Callable[[float], float], sy: Callable[[float], float]) -> str:
    """The Pareto front as a dashed staircase ('' for fewer than two points)."""
    fp = [_xy(c) for c in front]
    if len(fp) <= 1:
        return ""
    d = [f"M{sx(fp[0][0]):.1f},{sy(fp[0][1]):.1f}"]
    for bx, by in fp[1:]:  # each step runs right to the next point's time, then down to its memory
        d.append(f"H{sx(bx):.1f}V{sy(by):.1f}")
    return f'<path d="{"".join(d)}" class="front-line"/>'


def _pareto_point(c: dict, on_front: bool, rank: int | None, sx: Callable[[float], float],
                  sy: Callable[[float], float]) -> str:
    """One candidate's circle (with its tooltip) and, for the top three, its rank label."""
    x, y = _xy(c)
    tip = (f"{plan_label(c)}" + (f" (rank {rank})" if rank else "")
           + f"\nstep {_seconds(x)}, peak {_fmt(y, 3)} GiB"
           + ("\nPareto-optimal" if on_front else ""))
    cls = "pt front" if on_front else "pt"
    r = 6 if on_front else 4
    out = (f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{r}" class="{cls}" data-key="{_e(_plan_key(c))}">'
           f"<title>{_e(tip)}</title></circle>")
    return out


# (dx, dy, anchor) of a rank label around its point, tried in order until one overlaps no label placed before
_LABEL_SPOTS = ((8, -8, "start"), (8, 16, "start"), (-8, -8, "end"), (-8, 16, "end"), (8, -22, "start"),
                (-8, -22, "end"), (8, 30, "start"), (-8, 30, "end"))
RANK_LABEL_CHAR_PX, RANK_LABEL_H = 7.2, 12  # the 11 px semibold .rank-label font


def _rank_labels(points: list[tuple[int, float, float]], taken: list[tuple[float, float, float, float]],
                 bounds: tuple[float, float, float, float]) -> str:
    """'#1'..'#3' beside their points (x, y in chart units), each at the first spot that overlaps neither an
    earlier label nor the boxes in `taken` and stays inside `bounds` (x0, y0, x1, y1)."""
    out = []
    for rank, px, py in sorted(points):
        w = len(f"#{rank}") * RANK_LABEL_CHAR_PX
        chosen = None
        for dx, dy, anchor in _label_spots():
            x = px + dx
            left = x if anchor == "start" else x - w
            box = (left, py + dy - RANK_LABEL_H + 2, left + w, py + dy + 2)
            inside = bounds[0] <= box[0] and box[2] <= bounds[2] and bounds[1] <= box[1] and box[3] <= bounds[3]
            if inside and not any(_overlap(_padded(box), t) for t in taken):
                chosen = (x, py + dy, anchor, box)
                break
        if chosen is None:  # crowded: the first spot, clamped inside the plot
            x = min(max(px + 8, bounds[0]), bounds[2] - w)
            chosen = (x, py - 8, "start", (x, py - 18, x + w, py - 6))
        x, y, anchor, box = chosen
        taken.append(box)
        out.append(f'<text x="{x:.1f}" y="{y:.1f}" class="rank-label" text-anchor="{anchor}">#{rank}</text>')
    return "".join(out)


def _label_spots():
    """_LABEL_SPOTS first, then ever farther above and below the point (a crowded cluster of top plans)."""
    yield from _LABEL_SPOTS
    for k in range(1, 40):
        for dx, dy, anchor in ((8, -22 - 14 * k, "start"), (-8, -22 - 14 * k, "end"), (8, 30 + 14 * k, "start"),
                               (-8, 30 + 14 * k, "end")):
            yield dx, dy, anchor


def _padded(box: tuple[float, float, float, float], pad: float = 2.0) -> tuple[float, float, float, float]:
    """A label's box with room for the browser's own glyph metrics (the width estimate is per character)."""
    return box[0] - pad, box[1] - pad, box[2] + pad, box[3] + pad


def _top_points(feasible: list[dict], rank_of: dict, sx: Callable[[float], float],
                sy: Callable[[float], float]) -> list[tuple[int, float, float]]:
    """(rank, x, y) in chart units of the first three ranked plans among the plotted candidates."""
    points: dict[int, tuple[int, float, float]] = {}
    for c in feasible:
        rank = rank_of.get(_plan_key(c))
        if rank is not None and rank <= 3 and rank not in points:
            points[rank] = (rank, sx(_xy(c)[0]), sy(_xy(c)[1]))
    return list(points.values())


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > 0 and min(a[3], b[3]) - max(a[1], b[1]) > 0


def _pareto_note(feasible: int, front: int, infeasible: int) -> str:
    """'N feasible candidates, K on the front; J that do not fit are not plotted.'"""
    plural = infeasible != 1
    return (f"{feasible} feasible candidate{'s' if feasible != 1 else ''}, {front} on the front"
            + (f"; {infeasible} that {'do' if plural else 'does'} not fit {'are' if plural else 'is'}"
               " not plotted" if infeasible else "") + ".")


def _svg_pareto(candidates: list[dict], ranked: list[dict]) -> str:
    feasible = [c for c in candidates if isinstance(c, dict) and c.get("fits") is not False and _point(c)]
    infeasible = sum(1 for c in candidates if isinstance(c, dict) and c.get("fits") is False)
    if not feasible:
        return _chart_missing("pareto", "No feasible candidate has both a step time and a peak memory to plot.")
    front = pareto_front(feasible)
    front_ids = {id(c) for c in front}
    rank_of = {_plan_key(p): i + 1 for i, p in enumerate(ranked)}
    W, H, L, R, T, B = 760, 430, 70, 20, 34, 54
    cap = _capacity_gib(ranked + feasible)
    x0, x1, y0, y1 = _pareto_ranges([_xy(c)[0] for c in feasible], [_xy(c)[1] for c in feasible], cap)

    def sx(v: float) -> float:
        return L + (v - x0) / (x1 - x0) * (W - L - R)

    def sy(v: float) -> float:
        return H - B - (v - y0) / (y1 - y0) * (H - T - B)

    out = [f'<svg id="pareto-svg" class="chart" viewBox="0 0 {W} {H}" role="img" '
           f'aria-label="Step time versus peak memory of feasible candidates">']
    out.append(_axes(W, H, L, R, T, B, x0, x1, y0, y1, sx, sy, "step time (s)", "peak memory (GiB)"))
    cap_shown = cap is not None and y0 <= cap <= y1
    if cap is not None and cap_shown:
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{sy(cap):.1f}" y2="{sy(cap):.1f}" class="cap"/>'
                   f'<text x="{W - R - 4}" y="{sy(cap) - 5:.1f}" class="cap-label" text-anchor="end">'
                   f'capacity {_e(_fmt(cap, 3))} GiB</text>')
    out.append(_front_path(front, sx, sy))
    # dominated first, then the front on top
    for c in sorted(feasible, key=lambda c: id(c) in front_ids):
        out.append(_pareto_point(c, id(c) in front_ids, rank_of.get(_plan_key(c)), sx, sy))
    cap_box: list[tuple[float, float, float, float]] = []
    if cap is not None and cap_shown:
        cap_box.append((W - R - 4 - _text_width(len(f"capacity {_fmt(cap, 3)} GiB")), sy(cap) - 16, W - R,
                        sy(cap) - 2))
    out.append(_rank_labels(_top_points(feasible, rank_of, sx, sy), cap_box, (L, T, W - R, H - B)))
    items: list[tuple[str, ...]] = [("Pareto front", "#e15759"), ("other feasible", "#9aa7b8")]
    if cap_shown:
        items.append(("memory capacity", "", "cap"))
    legend, _ = _legend(items, L, 16, W - L - R)
    out.append(legend)
    out.append("</svg>")
    return "".join(out) + f'<p class="note">{_e(_pareto_note(len(feasible), len(front), infeasible))}</p>'


def _axes(W, H, L, R, T, B, x0, x1, y0, y1, sx, sy, xlabel, ylabel) -> str:
    out = [f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" class="plot-bg"/>']
    xt = _nice_ticks(x0, x1, 6)
    for t in xt:
        if x0 <= t <= x1:
            out.append(f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{T}" y2="{H - B}" class="grid"/>'
                       f'<text x="{sx(t):.1f}" y="{H - B + 16}" class="tick" text-anchor="middle">'
                       f'{_e(_tick_text(t, xt))}</text>')
    yt = _nice_ticks(y0, y1, 5)
    for t in yt:
        if y0 <= t <= y1:
            out.append(f'<line x1="{L}" x2="{W - R}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" class="grid"/>'
                       f'<text x="{L - 6}" y="{sy(t) + 4:.1f}" class="tick" text-anchor="end">'
                       f'{_e(_tick_text(t, yt))}</text>')
    out.append(f'<text x="{(L + W - R) / 2:.1f}" y="{H - 12}" class="axis-label" text-anchor="middle">'
               f'{_e(xlabel)}</text>')
    out.append(f'<text x="16" y="{(T + H - B) / 2:.1f}" class="axis-label" text-anchor="middle" '
               f'transform="rotate(-90 16 {(T + H - B) / 2:.1f})">{_e(ylabel)}</text>')
    return "".join(out)


def _chart_missing(chart_id: str, why: str) -> str:
    return (f'<svg id="{_e(chart_id)}-svg" class="chart empty" viewBox="0 0 760 60" role="img" aria-label="{_e(why)}">'
            f'<text x="380" y="35" text-anchor="middle" class="note-svg">{_e(why)}</text></svg>')


# ---------------------------------------------------------------------------------------------
# Pipeline timeline (Gantt)
# ---------------------------------------------------------------------------------------------
def _stage_times(pipe: dict) -> tuple[list[float], list[float]]:
    """Per-stage forward / backward time of one micro-batch as the scored step counts them: compute
    (backward with recompute) plus the exposed per-layer collectives, half in each pass."""
    fwd = [float(x) for x in pipe["fwd_s_per_microbatch"]]
    bwd = [float(x) for x in pipe["bwd_s_per_microbatch"]]
    comm = [float(x) for x in pipe.get("comm_s_per_microbatch") or [0.0] * len(fwd)]
    return ([f + c / 2 for f, c in zip(fwd, comm, strict=True)],
            [b + c / 2 for b, c in zip(bwd, comm, strict=True)])


def _scored_bubble_s(best: dict, pipe: dict, m_draw: int, fwd: list[float], bwd: list[float]) -> float:
    """The scored bubble (time_breakdown.bubble_s); for a chart drawn with fewer micro-batches, the same
    closed form (planner.costmodel.pipeline.pipeline_step_time) at that count."""
    m = int(pipe["num_microbatches"])
    if m_draw == m:
        return float(best["time_breakdown"]["bubble_s"])
    from planner.costmodel.pipeline import pipeline_step_time

    stage = [f + b for f, b in zip(fwd, bwd, strict=True)]
    sched = str(pipe.get("schedule", "1f1b"))
    return max(0.0, pipeline_step_time(stage, m_draw, sched if sched != "none" else "1f1b", int(pipe.get("vpp", 1)),
                                       fwd) - m_draw * max(stage))


def scored_timeline(best: dict, m_draw: int | None = None) -> tuple[list[tl.Event], float, float]:
    """(events, hand-off slack s, scored bubble s) of a `--json` plan's pipeline drawn with m_draw
    micro-batches (default all): the schedule simulated with the scored stage times and conformed to
    the scored bubble (timeline.conformed_events), so tl.critical_bubble_s(events) equals it."""
    pipe = best["pipeline"]
    pp, vpp, m = int(pipe.get("pp", 1)), int(pipe.get("vpp", 1)), int(pipe["num_microbatches"])
    sched_name = tl.resolve_schedule(pp, vpp, m, str(pipe.get("schedule", "1f1b")))
    fwd, bwd = _stage_times(pipe)
    m_draw = m if m_draw is None else m_draw
    bubble = _scored_bubble_s(best, pipe, m_draw, fwd, bwd)
    events, slack = tl.conformed_events(pp, vpp, m_draw, sched_name, fwd, bwd, bubble)
    return events, slack, bubble


def _timeline_section(best: dict | None) -> str:
    pipe = best.get("pipeline") if isinstance(best, dict) else None
    if not isinstance(best, dict) or not isinstance(pipe, dict) or not pipe:
        return _chart_missing("timeline", "The best plan has no pipeline block to draw.")
    try:
        pp, vpp, m = int(pipe.get("pp", 1)), int(pipe.get("vpp", 1)), int(pipe["num_microbatches"])
        schedule = str(pipe.get("schedule", "1f1b"))
        bubble_s = float(best["time_breakdown"]["bubble_s"])
        step_s = float(best["step_time_s"])
        if schedule in ("dualpipe", "dualpipev"):
            name = "DualPipe" if schedule == "dualpipe" else "DualPipeV"
            return _chart_missing("timeline", f"{name} is not drawn; its scored bubble is {_seconds(bubble_s)} "
                                  f"({_pct(bubble_s / step_s if step_s else 0.0)} of the step).")
        sched_name = tl.resolve_schedule(pp, vpp, m, schedule)
        per_op = 3 if sched_name == "zb" else 2
        fwd, bwd = _stage_times(pipe)
        m_draw = _drawn_microbatches(pp, vpp, m, per_op)
        draw_events, slack, _ = scored_timeline(best, m_draw)
        full_ops = pp * vpp * m * per_op
        plain = tl.schedule_events(pp, vpp, m, sched_name, fwd, bwd) if full_ops <= MAX_SIMULATED_OPS else None
    except (PlannerError, KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        why = exc.args[0] if exc.args else type(exc).__name__
        return _chart_missing("timeline", f"Cannot draw the pipeline schedule: {why}")
    svg = _svg_gantt(draw_events, pp, vpp)
    facts = [
        f"schedule {sched_name}",
        f"PP={pp}",
        f"VPP={vpp}",
        f"{m} micro-batches",
        f"bubble {_seconds(bubble_s)} = {_pct(bubble_s / step_s if step_s else 0.0)} of the step "
        f"(the slowest stage's idle time, as scored)",
        f"pipeline phase {_seconds(m * max(f + b for f, b in zip(fwd, bwd, strict=True)) + bubble_s)}",
    ]
    if plain is not None:
        peaks = tl.peak_in_flight(plain, pp)
        facts.append("peak in-flight micro-batch chunks per stage: " + ", ".join(str(p) for p in peaks))
    cap = ""
    if slack > 0:
        cap += (f'<p class="note">Drawn with a hand-off delay of {_e(_seconds(slack))} on every cross-stage '
                "dependency so that the chart's bubble equals the scored one: the scored closed form (Alpa, "
                "OSDI'22 eq. 2, over Narayanan et al. 2021's schedules) charges the whole fill and drain of the "
                "stages lighter than the slowest, which an ideal overlap would partly hide.</p>")
    if m_draw != m:
        cap += (f'<p class="note">Drawn with {m_draw} of the {m} micro-batches to keep the chart legible; '
                f"the figures above are for all {m}.</p>")
    return svg + f'<p class="facts">{_e(" · ".join(facts))}</p>' + cap


def _drawn_microbatches(pp: int, vpp: int, m: int, per_op: int) -> int:
    """Micro-batches to draw: all of them if each row stays legible, else as many as fit (at least
    2*pp, so fill, steady state and drain all show; a multiple of pp for the interleaved schedule)."""
    if m * vpp * per_op <= MAX_DRAWN_OPS_PER_STAGE:
        return m
    k = max(2 * pp, MAX_DRAWN_OPS_PER_STAGE // (vpp * per_op))
    if vpp > 1:
        k = max(pp, k - k % pp)
    return min(m, k)


def _svg_gantt(events: list[tl.Event], pp: int, vpp: int) -> str:
    W, L, R, T = 960, 74, 16, 30
    row_h, gap = 26, 6
    H_plot = pp * (row_h + gap)
    H = T + H_plot + 70
    span = max((e.end_s for e in events), default=1.0) or 1.0

    def sx(t: float) -> float:
        return L + t / span * (W - L - R)

    out = [f'<svg id="timeline-svg" class="chart" viewBox="0 0 {W} {H}" role="img" '
           f'aria-label="Pipeline schedule of the best plan, one row per stage">',
           '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f3f0ea"/>'
           '<line x1="0" y1="0" x2="0" y2="6" stroke="#d9cfc1" stroke-width="3"/></pattern></defs>']
    gaps = tl.idle_intervals(events, pp)
    for s in range(pp):
        y = T + s * (row_h + gap)
        out.append(f'<text x="{L - 8}" y="{y + row_h / 2 + 4:.1f}" class="tick" text-anchor="end">stage {s}</text>')
        for a, b in gaps[s]:
            out.append(f'<rect x="{sx(a):.2f}" y="{y}" width="{max(0.0, sx(b) - sx(a)):.2f}" height="{row_h}" '
                       f'class="bubble"><title>{_e(f"stage {s} idle (bubble) {_seconds(a)} to {_seconds(b)}")}'
                       '</title></rect>')
    for e in events:
        y = T + e.stage * (row_h + gap)
        x, w = sx(e.start_s), max(0.0, sx(e.end_s) - sx(e.start_s))
        shade = 1.0 - 0.35 * (e.chunk / max(1, vpp - 1)) if vpp > 1 else 1.0
        tip = (f"{KIND_LABEL[e.kind]}, micro-batch {e.microbatch}" + (f", chunk {e.chunk}" if vpp > 1 else "")
               + f", stage {e.stage}: {_seconds(e.start_s)} to {_seconds(e.end_s)}")
        out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h}" fill="{KIND_COLOUR[e.kind]}" '
                   f'fill-opacity="{shade:.2f}" class="op op-{e.kind}"><title>{_e(tip)}</title></rect>')
        if w >= 16:
            out.append(f'<text x="{x + w / 2:.2f}" y="{y + row_h / 2 + 4:.1f}" class="op-label" '
                       f'text-anchor="middle">{e.microbatch}</text>')
    y_axis = T + H_plot
    for t in _nice_ticks(0, span, 8):
        if t <= span * (1 + 1e-9):
            out.append(f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{T - 4}" y2="{y_axis}" class="grid-v"/>'
                       f'<text x="{sx(t):.1f}" y="{y_axis + 14}" class="tick" text-anchor="middle">'
                       f'{_e(_seconds(t))}</text>')
    kinds = sorted({e.kind for e in events}, key="FBW".index)
    items = [(KIND_LABEL[k], KIND_COLOUR[k]) for k in kinds] + [("idle (bubble)", "#e6ddd0")]
    legend, _ = _legend(items, L, y_axis + 40, W - L - R)
    out.append(legend)
    if vpp > 1:
        out.append(f'<text x="{W - R}" y="{y_axis + 40}" class="lg" text-anchor="end">'
                   f'lighter = later model chunk</text>')
    out.append("</svg>")
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Stacked bar charts
# ---------------------------------------------------------------------------------------------
# one bar of a stacked chart: rank, label, [(part label, colour, value)], total, limit
_Bar = tuple[int, str, list[tuple[str, str, float]], float | None, float | None]


def _stacked_rows(plans: list[dict], block: str, parts: Sequence[tuple[str, str, str]], total_key: str,
                  limit_key: str | None) -> list[_Bar]:
    """One bar per plan (of the first MAX_BARS) that has the `block`: (rank, label, [(part label, colour,
    value)], total, limit)."""
    rows: list[_Bar] = []
    for i, p in enumerate(plans[:MAX_BARS]):
        d = p.get(block) if isinstance(p.get(block), dict) else None
        if d is None:
            continue
        vals = [(label, colour, max(0.0, _num(d.get(key)) or 0.0)) for key, label, colour in parts]
        total = _num(d.get(total_key)) if block == "memory" else _num(p.get(total_key))
        limit = _num(d.get(limit_key)) if limit_key else None
        rows.append((i + 1, plan_label(p), vals, total, limit))
    return rows


def _stacked_legend_items(rows: list[_Bar], parts: Sequence[tuple[str, str, str]], total_label: str,
                          limit_key: str | None, limit_label: str) -> list[tuple[str, ...]]:
    """The parts some bar uses, then the total mark and (when drawn) the limit line."""
    used: list[tuple[str, ...]] = [(lab, col) for key, lab, col in parts
                                   if any(v > 0 for _, _, vals, _, _ in rows for l2, _, v in vals if l2 == lab)]
    extra: list[tuple[str, ...]] = [(total_label, "#222", "total-mark")]
    if limit_key and any(r[4] is not None for r in rows):
        extra.append((limit_label, "#c0392b", "cap"))
    return used + extra


TICK_CHAR_PX = 6.6  # a generous average advance of an 11 px sans-serif character (the .tick font), digits included


def _text_width(chars: int, px_per_char: float = TICK_CHAR_PX) -> int:
    return int(chars * px_per_char + 0.999)


def _stacked_bar(row: _Bar, y: float, bar_h: int, L: float, sx: Callable[[float], float], unit: str,
                 total_label: str, limit_label: str) -> str:
    """One plan's label, stacked segments, total mark and limit line."""
    rank, label, vals, total, limit = row
    out = [f'<text x="{L - 8}" y="{y + bar_h / 2 + 4:.1f}" class="tick" text-anchor="end">'
           f'#{rank} {_e(label)}</text>']
    x = 0.0
    for lab, col, v in vals:
        if v <= 0:
            continue
        out.append(f'<rect x="{sx(x):.2f}" y="{y}" width="{sx(x + v) - sx(x):.2f}" height="{bar_h}" fill="{col}" '
                   f'class="seg"><title>{_e(f"#{rank} {label}: {lab} {_fmt(v, 3)} {unit}")}</title></rect>')
        x += v
    if total is not None:
        tx = sx(total)
        out.append(f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{y - 3}" y2="{y + bar_h + 3}" class="total-mark">'
                   f'<title>{_e(f"#{rank} {label}: {total_label} {_fmt(total, 3)} {unit}")}</title></line>')
    if limit is not None:
        lx = sx(limit)
        out.append(f'<line x1="{lx:.1f}" x2="{lx:.1f}" y1="{y - 5}" y2="{y + bar_h + 5}" class="cap">'
                   f'<title>{_e(f"{limit_label} {_fmt(limit, 3)} {unit}")}</title></line>')
    return "".join(out)


def _svg_stacked(chart_id: str, plans: list[dict], block: str, parts: Sequence[tuple[str, str, str]], unit: str,
                 total_key: str, total_label: str, limit_key: str | None = None, limit_label: str = "") -> str:
    rows = _stacked_rows(plans, block, parts, total_key, limit_key)
    if not rows:
        return _chart_missing(chart_id, f"No plan has a {block.replace('_', ' ')} to draw.")
    # the left margin holds the longest "#rank layout" label whole (MoE layouts run to 30 characters);
    # the plot keeps its width and the viewBox grows instead
    L = max(150, _text_width(max(len(f"#{r[0]} {r[1]}") for r in rows)) + 16)
    W, R, T = L + 586, 24, 20
    bar_h, gap = 22, 10
    vmax = max(max(sum(v for _, _, v in vals), total or 0.0, limit or 0.0) for _, _, vals, total, limit in rows)
    vmax = vmax or 1.0
    x1 = _nice_max(vmax)

    def sx(v: float) -> float:
        return L + v / x1 * (W - L - R)

    H_plot = len(rows) * (bar_h + gap)
    legend, lh = _legend(_stacked_legend_items(rows, parts, total_label, limit_key, limit_label),
                         L, T + H_plot + 60, W - L - R)
    H = T + H_plot + 60 + lh + 4
    out = [f'<svg id="{_e(chart_id)}-svg" class="chart" viewBox="0 0 {W} {H:.0f}" role="img" '
           f'aria-label="{_e(block.replace("_", " "))} of the top plans">']
    xt = _nice_ticks(0, x1, 6)
    for t in xt:
        out.append(f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{T - 6}" y2="{T + H_plot}" class="grid-v"/>'
                   f'<text x="{sx(t):.1f}" y="{T + H_plot + 16}" class="tick" text-anchor="middle">'
                   f'{_e(_tick_text(t, xt))}</text>')
    out.append(f'<text x="{(L + W - R) / 2:.1f}" y="{T + H_plot + 34}" class="axis-label" text-anchor="middle">'
               f'{_e(unit)}</text>')
    for j, row in enumerate(rows):
        out.append(_stacked_bar(row, T + j * (bar_h + gap), bar_h, L, sx, unit, total_label, limit_label))
    out.append(legend)
    out.append("</svg>")
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------
_COLUMNS = [  # header, getter, numeric
    ("#", lambda i, p: i + 1, True),
    ("TP", lambda i, p: _knobs(p).get("tp"), True),
    ("PP", lambda i, p: _knobs(p).get("pp"), True),
    ("DP", lambda i, p: _knobs(p).get("dp"), True),
    ("CP", lambda i, p: _knobs(p).get("cp"), True),
    ("EP", lambda i, p: _knobs(p).get("ep"), True),
    ("ETP", lambda i, p: _knobs(p).get("etp"), True),
    ("VPP", lambda i, p: _knobs(p).get("vpp"), True),
    ("micro-batch", lambda i, p: _knobs(p).get("micro_batch"), True),
    ("ZeRO", lambda i, p: _knobs(p).get("zero_stage"), True),
    ("recompute", lambda i, p: recompute_label(_knobs(p)) if _knobs(p).get("recompute") else None, False),
    ("SP", lambda i, p: _yn(_knobs(p).get("sequence_parallel")), False),
    ("schedule", lambda i, p: _knobs(p).get("schedule"), False),
    ("step time (s)", lambda i, p: p.get("step_time_s"), True),
    ("error band", lambda i, p: _band(p), False),
    ("tokens/s/device", lambda i, p: p.get("tokens_per_s_per_device"), True),
    ("MFU", lambda i, p: p.get("mfu"), True),
    ("peak GiB", lambda i, p: (p.get("memory") or {}).get("peak_gib") if isinstance(p.get("memory"), dict) else None,
     True),
    ("fits", lambda i, p: _yn(p.get("fits")), False),
]


def _band(plan: dict) -> str:
    """'±12%': the plan's cross-validated error band (planner.analysis.bands), '–' when absent."""
    band = plan.get("step_time_band")
    b = band if isinstance(band, dict) else {}
    rel = _num(b.get("rel"))
    return "–" if rel is None else f"±{100 * rel:.0f}%"


def _band_note(plans: list[dict]) -> str:
    """The error-band note: set when the leading plans lie within each other's error band ('' otherwise)."""
    from planner.analysis.bands import overlap_note

    note = overlap_note(plans)
    return f'<p class="note"><b>Note:</b> {_e(note)}</p>' if note else ""


def _yn(x: object) -> str:
    return "yes" if x is True else "no" if x is False else "–"


def _cell(header: str, value: object, numeric: bool) -> str:
    if numeric:
        v = _num(value)
        if header == "MFU":
            text = _pct(v)
        elif header == "tokens/s/device":
            text = "–" if v is None else f"{v:,.0f}"
        else:
            text = _fmt(v, 4) if v is not None else ("–" if value is None else str(value))
        sort = "" if v is None else f' data-sort="{v!r}"'
        return f'<td class="num"{sort}>{_e(text)}</td>'
    return f"<td>{_e('–' if value is None else value)}</td>"


_OPTIONAL_COLUMNS = {"CP", "EP", "ETP"}  # shown only when some plan uses them


def _plans_table(plans: list[dict]) -> str:
    if not plans:
        return '<p id="plans-table" class="note">No plans in this result.</p>'
    columns = [c for c in _COLUMNS
               if c[0] not in _OPTIONAL_COLUMNS or any(c[1](i, p) not in (1, None) for i, p in enumerate(plans))]
    head = "".join(f'<th scope="col">{_e(h)}</th>' for h, _, _ in columns)
    common = _common_warnings(plans)
    # one <tbody> per plan: its numbers, then why it ranks there; sorting moves whole groups
    groups = [_plan_group(i, p, columns, common) for i, p in enumerate(plans)]
    every = ('<div class="warn-all">Every plan below: <ul class="warn">'
             + "".join(f"<li>{_e(w)}</li>" for w in common) + "</ul></div>") if common else ""
    return (f'{every}<div class="table-wrap"><table id="plans-table"><thead><tr>{head}</tr></thead>'
            f'{"".join(groups)}</table></div>')


def _plan_group(i: int, p: dict, columns: list, common: list[str]) -> str:
    cells = "".join(_cell(h, get(i, p), num) for h, get, num in columns)
    reason = str(p.get("reason") or "")
    warnings = [str(w) for w in (p.get("warnings") or []) if w and str(w) not in common]
    why = _e(reason)
    if warnings:
        why += '<ul class="warn">' + "".join(f"<li>{_e(w)}</li>" for w in warnings) + "</ul>"
    cls = "plan best" if i == 0 else ("plan nofit" if p.get("fits") is False else "plan")
    detail = (f'<tr class="why-row"><td></td><td class="why" colspan="{len(columns) - 1}">{why}</td></tr>'
              if why else "")
    return f'<tbody class="{cls}" data-key="{_e(_plan_key(p))}"><tr>{cells}</tr>{detail}</tbody>'


def _common_warnings(plans: list[dict]) -> list[str]:
    """The warnings every plan carries (said once above the table instead of under each plan); none for a
    single plan, whose own list says it."""
    if len(plans) < 2:
        return []
    lists = [[str(w) for w in (p.get("warnings") or []) if w] for p in plans]
    return [w for w in dict.fromkeys(lists[0]) if all(w in ws for ws in lists[1:])]


def _estimate_table(estimate: Any) -> str:
    """A goodput.TrainingEstimate (or its to_dict()) as a key/value table; '' without one."""
    if estimate is None:
        return ""
    d = asdict(estimate) if is_dataclass(estimate) and not isinstance(estimate, type) else dict(estimate)
    rows = [
        ("tokens", _tokens(d.get("total_tokens"))),
        ("devices", _fmt(d.get("devices"), 6)),
        ("failure-free wall-clock", _fmt(d.get("days"), 3, " days")),
        ("expected wall-clock (failures, checkpoints, restarts)", _fmt(d.get("effective_days"), 3, " days")),
        ("goodput", _pct(d.get("goodput"))),
        ("device-hours", _fmt(d.get("device_hours"), 4)),
        ("cost", _fmt(d.get("cost"), 4) + (f" {d['currency']}" if d.get("currency") else "")
         if d.get("cost") is not None else "– (no price given)"),
        ("checkpoint size", _fmt((_num(d.get("checkpoint_bytes")) or 0) / 1e12, 3, " TB")),
        ("checkpoint blocking time", _seconds(d.get("checkpoint_s"))),
        ("checkpoint interval", _fmt((_num(d.get("checkpoint_interval_s")) or 0) / 60, 3, " min")
         + f" ({d.get('interval_method', '')})"),
        ("job MTBF", _fmt((_num(d.get("mtbf_s")) or 0) / 3600, 3, " h")),
        ("failures expected", _fmt(d.get("failures_expected"), 3)),
    ]
    body = "".join(f"<tr><th scope=\"row\">{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    notes = "".join(f"<li>{_e(a)}</li>" for a in d.get("assumptions") or [])
    return (f'<section><h2>Time to train</h2><table id="training-estimate" class="kv">{body}</table>'
            + (f'<ul class="note">{notes}</ul>' if notes else "") + "</section>")


# ---------------------------------------------------------------------------------------------
# Page
# ---------------------------------------------------------------------------------------------
_CSS = """
:root{--fg:#1d232b;--muted:#5b6673;--line:#d7dde4;--bg:#fbfcfd;--card:#fff;--accent:#e15759}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
 color:var(--fg);background:var(--bg)}
header{padding:20px 28px 8px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:0 0 10px}
main{padding:0 28px 28px;max-width:1280px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px 18px;margin:16px 0}
.sub{color:var(--muted);margin:0}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:14px 0 0}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:20px}
.card span{color:var(--muted);font-size:12px}
.table-wrap{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid var(--line);padding:5px 7px;text-align:left;vertical-align:top}
thead th{background:#eef2f6;position:sticky;top:0;cursor:pointer;user-select:none;vertical-align:bottom}
thead th[aria-sort=ascending]::after{content:" \\25B2"}
thead th[aria-sort=descending]::after{content:" \\25BC"}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tbody.plan tr:first-child td{border-bottom:none}
tbody.best td{background:#fff6e8}
tbody.nofit td{color:#98a1ab}
tbody.hl td{background:#e8f1fb}
tr.why-row td{padding-top:0;font-size:12.5px}
td.why{color:#33404d}
ul.warn{margin:4px 0 0;padding-left:18px;color:#9c4a00}
.warn-all{margin:4px 0 10px;color:#9c4a00}
table.kv{width:auto}
table.kv th{font-weight:normal;color:var(--muted)}
.note,.facts{color:var(--muted);font-size:12.5px;margin:6px 0 0}
.facts{color:var(--fg)}
svg.chart{width:100%;height:auto;display:block}
#pareto svg.chart{max-width:860px}
#memory-breakdown svg.chart,#time-breakdown svg.chart{max-width:980px}
svg .plot-bg{fill:#fff;stroke:var(--line)}
svg .grid{stroke:#edf0f3}
svg .grid-v{stroke:#edf0f3}
svg .tick{font-size:11px;fill:var(--muted)}
svg .axis-label{font-size:12px;fill:var(--fg)}
svg .lg{font-size:12px;fill:var(--fg)}
svg .note-svg{font-size:13px;fill:var(--muted)}
svg .pt{fill:#9aa7b8;fill-opacity:.75;stroke:#fff;stroke-width:1}
svg .pt.front{fill:var(--accent);fill-opacity:1;stroke:#7a1f20;stroke-width:1.2}
svg .pt.hl{stroke:#111;stroke-width:3}
svg .front-line{fill:none;stroke:var(--accent);stroke-width:1.6;stroke-dasharray:5 3}
svg .cap{stroke:#c0392b;stroke-width:1.4;stroke-dasharray:6 4}
svg .cap-label{font-size:11px;fill:#c0392b}
svg .rank-label{font-size:11px;font-weight:600;fill:var(--fg)}
svg .bubble{fill:url(#hatch)}
svg .op{stroke:#fff;stroke-width:.6}
svg .op-label{font-size:10px;fill:#fff;pointer-events:none}
svg .total-mark{stroke:#222;stroke-width:2.2}
footer{color:var(--muted);font-size:12px;padding:0 28px 24px}
"""

_JS = """
(function(){
  function num(td){var s=td.getAttribute('data-sort');return s===null?NaN:parseFloat(s);}
  var table=document.getElementById('plans-table');
  if(table&&table.tHead){
    var ths=table.tHead.rows[0].cells;
    for(var j=0;j<ths.length;j++){(function(j,th){
      th.addEventListener('click',function(){
        var asc=th.getAttribute('aria-sort')!=='ascending';
        for(var k=0;k<ths.length;k++){ths[k].removeAttribute('aria-sort');}
        th.setAttribute('aria-sort',asc?'ascending':'descending');
        var groups=Array.prototype.slice.call(table.tBodies);
        groups.sort(function(a,b){
          var x=a.rows[0].cells[j],y=b.rows[0].cells[j],nx=num(x),ny=num(y),r;
          if(!isNaN(nx)&&!isNaN(ny)){r=nx-ny;}else{r=x.textContent.localeCompare(y.textContent);}
          return asc?r:-r;});
        groups.forEach(function(g){table.appendChild(g);});
      });})(j,ths[j]);}
    var pts=document.querySelectorAll('#pareto circle[data-key]');
    Array.prototype.forEach.call(table.tBodies,function(row){
      var key=row.getAttribute('data-key');
      row.addEventListener('mouseenter',function(){row.classList.add('hl');
        Array.prototype.forEach.call(pts,function(p){if(p.getAttribute('data-key')===key){p.classList.add('hl');}});});
      row.addEventListener('mouseleave',function(){row.classList.remove('hl');
        Array.prototype.forEach.call(pts,function(p){p.classList.remove('hl');});});
    });
  }
  var ids=%(ids)s,ok=0,shapes=0;
  ids.forEach(function(id){
    var el=document.getElementById(id);if(!el){return;}
    if(el.tagName.toLowerCase()==='table'){if(el.getBoundingClientRect().width>0){ok++;}return;}
    var svg=el.querySelector('svg');if(!svg){return;}
    var box=svg.getBoundingClientRect(),n=svg.querySelectorAll('rect,circle,path,line').length;
    shapes+=n;
    if(box.width>0&&box.height>0&&n>0){ok++;el.setAttribute('data-rendered','1');}
  });
  document.body.setAttribute('data-charts-rendered',String(ok));
  document.body.setAttribute('data-shapes',String(shapes));
  if(ok===ids.length){document.body.dataset.rendered='1';}
})();
"""


def _name(x: object) -> str:
    if isinstance(x, dict):
        return str(x.get("name") or x.get("id") or "")
    return "" if x is None else str(x)


def _check_result(result: object, candidates: object) -> list[dict]:
    """The result's plans; InputError when the result or the candidates are not in the `--json` schema."""
    if not isinstance(result, dict):
        raise InputError("render_report needs the planner's JSON result (a dict with 'plans')")
    plans = result.get("plans") or []
    if not isinstance(plans, list) or not all(isinstance(p, dict) for p in plans):
        raise InputError("result['plans'] must be a list of plan objects")
    if candidates is not None and (not isinstance(candidates, list)
                                   or not all(isinstance(c, dict) for c in candidates)):
        raise InputError("candidates must be a list of plan objects")
    return plans


def _setup_subtitle(result: dict) -> list[str]:
    """Model size, cluster and batch parts of the page's subtitle."""
    model, cluster, training = _dict_at(result, "model"), _dict_at(result, "cluster"), _dict_at(result, "training")
    hw = _name(cluster.get("hardware"))
    count = cluster.get("count")
    sub = []
    total, active = _num(model.get("params_total")), _num(model.get("params_active"))
    if total:
        s = f"{_fmt(total / 1e9, 4)}B parameters"
        if active and model.get("params_active") != model.get("params_total"):
            s += f" ({_fmt(active / 1e9, 4)}B active)"
        sub.append(s)
    if count is not None or hw:
        sub.append(" × ".join(x for x in (_fmt(count, 7) if count is not None else "", hw) if x))
    if _num(training.get("global_batch")) and _num(training.get("seq_len")):
        sub.append(f"global batch {_fmt(training['global_batch'], 7)} × {_fmt(training['seq_len'], 7)} tokens"
                   + (f", {training['dtype']}" if training.get("dtype") else ""))
    return sub


def _search_subtitle(result: dict, plans: list[dict], candidates: list[dict] | None) -> list[str]:
    """Ranked, plotted and evaluated counts of the page's subtitle."""
    sub = [f"{len(plans)} ranked plan{'s' if len(plans) != 1 else ''}"]
    search = _dict_at(result, "search")
    if candidates is not None:
        sub.append(f"{len(candidates)} candidates plotted")
    if _num(search.get("evaluated")) is not None:
        sub.append(f"{_fmt(search['evaluated'], 7)} plans evaluated"
                   + (f", {_fmt(search['feasible'], 7)} fit" if _num(search.get("feasible")) is not None else ""))
    return sub


def _cards(best: dict | None) -> str:
    """The headline figures of the best plan ('' without plans)."""
    if best is None:
        return ""
    mem = _dict_at(best, "memory")
    tps = _num(best.get("tokens_per_s_per_device"))
    items = [
        (plan_label(best), "best plan"),
        (_seconds(best.get("step_time_s")) + ("" if _band(best) == "–" else f" {_band(best)}"), "step time"),
        ("–" if tps is None else f"{tps:,.0f}", "tokens/s per device"),
        (_pct(best.get("mfu")), "MFU"),
        (f"{_fmt(mem.get('peak_gib'), 3)} / {_fmt(mem.get('capacity_gib'), 3)} GiB", "peak / capacity memory"),
    ]
    return '<div class="cards">' + "".join(f"<div class=\"card\"><b>{_e(v)}</b><span>{_e(k)}</span></div>"
                                           for v, k in items) + "</div>"


def _bias_note(result: dict) -> str:
    """The note of a hardware whose published runs landed on one side of the prediction ('' otherwise)."""
    bias = result.get("hardware_bias")
    note = bias.get("note") if isinstance(bias, dict) else None
    return f'<p class="note"><b>Note:</b> {_e(note)}</p>' if isinstance(note, str) and note else ""


def _sections(plans: list[dict], candidates: list[dict] | None, estimate: object, bias_note: str = "") -> list[str]:
    """The page's sections: table, Pareto chart, timeline, breakdowns, training estimate."""
    best = plans[0] if plans else None
    pareto_src = candidates if candidates is not None else plans
    return [
        f'<section><h2>Ranked plans</h2>{_plans_table(plans)}'
        + _band_note(plans) + bias_note
        + '<p class="note">Click a column to sort; hover a row to find it on the Pareto chart. The error band is the '
        'cross-validated error of published runs of the same regime (docs/cli.md).</p></section>',
        f'<section><h2>Step time vs peak memory</h2><div id="pareto">{_svg_pareto(pareto_src, plans)}</div>'
        '</section>',
        f'<section><h2>Pipeline schedule of the best plan</h2><div id="timeline">{_timeline_section(best)}</div>'
        '</section>',
        '<section><h2>Memory per device (peak stage)</h2><div id="memory-breakdown">'
        + _svg_stacked("memory-breakdown", plans, "memory", MEMORY_PARTS, "GiB", "peak_gib", "peak",
                       "capacity_gib", "capacity")
        + "</div></section>",
        '<section><h2>Step time breakdown</h2><div id="time-breakdown">'
        + _svg_stacked("time-breakdown", plans, "time_breakdown", TIME_PARTS, "seconds", "step_time_s",
                       "step time")
        + '<p class="note">Parts are stacked end to end; communication that overlaps compute makes the step '
          "(black mark) shorter than the stack.</p></div></section>",
        _estimate_table(estimate),
    ]


def _page(page_title: str, sub: list[str], cards: str, sections: list[str]) -> str:
    """The HTML document around the sections: head with CSS and CSP, header, footer, script."""
    try:
        from planner import __version__ as version
    except ImportError:  # pragma: no cover
        version = ""
    script = _JS % {'ids': '[' + ','.join(repr(i) for i in CHART_IDS) + ']'}
    # the one inline script is pinned by its hash (CSP Level 2 'sha256-<base64>'): an injected <script> or
    # inline handler does not run even if escaping were ever missed
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; img-src data:"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(page_title)}</title><style>{_CSS}</style></head>"
        f'<body data-rendered="0"><header><h1>{_e(page_title)}</h1>'
        f'<p class="sub">{_e(" · ".join(sub))}</p>{cards}</header>'
        f'<main>{"".join(sections)}</main>'
        f"<footer>Generated by planner {_e(version)}. Self-contained: no network resources.</footer>"
        f"<script>{script}</script>"
        "</body></html>\n"
    )


def render_report(result: dict, candidates: list[dict] | None = None, *, estimate: object = None,
                  title: str | None = None) -> str:
    """The HTML page for a `--json` result (and optionally every evaluated candidate and a
    `goodput.TrainingEstimate` of the best plan). Returns the document as a string."""
    plans = _check_result(result, candidates)
    model_name = _name(_dict_at(result, "model")) or "model"
    cluster_name = _name(_dict_at(result, "cluster")) or "cluster"
    page_title = title or f"Parallel plan: {model_name} on {cluster_name}"
    sub = _setup_subtitle(result) + _search_subtitle(result, plans, candidates)
    best = plans[0] if plans else None
    return _page(page_title, sub, _cards(best), _sections(plans, candidates, estimate, _bias_note(result)))
