"""The ranked-plans table, the reason line and the bars, fitted to the terminal width.

Above COMPACT_MAX_COLUMNS the wide table is used when it fits; otherwise a compact table with fewer,
abbreviated columns (explained in a footer). Numeric cells never wrap and are never cut: only the
layout and text wrap, at word boundaries. Piped output is COLUMNS wide when that is set (else
PIPED_DEFAULT_COLUMNS), so the same input and COLUMNS give the same bytes.
"""

from __future__ import annotations

import os
import textwrap
from typing import Literal

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.costmodel.trace import MEMORY_PARTS as MEM_PARTS
from planner.costmodel.trace import TIME_TERMS as TIME_PARTS
from planner.names import safe_line
from planner.search.ranking import TIE_BAND_REL
from planner.specs.plan import plan_label, recompute_label

COMPACT_MAX_COLUMNS = 80
PIPED_DEFAULT_COLUMNS = 140
MIN_COLUMNS = 40

RANK_NOTE = (f"Ranked fastest first; plans within {100 * TIE_BAND_REL:g}% of the fastest count as tied and the "
             "smaller peak memory ranks first.")
DISTINCT_NOTE = " One row per layout (--all-variants lists the other variants)."


def shown(name: object) -> str:
    """Input text (a model or cluster name) as rich shows it: controls escaped, cut, no markup."""
    return escape(safe_line(name, 120))


def columns_from_env(default: int = PIPED_DEFAULT_COLUMNS) -> int:
    """COLUMNS (clamped to 40..1000) when it is a whole number, else the width of the terminal stderr is on
    (`plan ... | less` in an 80-column terminal is 80 wide), else `default`."""
    raw = os.environ.get("COLUMNS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return max(MIN_COLUMNS, min(int(raw), 1000))  # narrower than 40 columns is drawn at 40
    tty = _stderr_terminal_columns()
    return max(MIN_COLUMNS, min(tty, 1000)) if tty else default


def _stderr_terminal_columns() -> int | None:
    import sys

    try:
        if sys.stderr is not None and sys.stderr.isatty():
            return os.get_terminal_size(sys.stderr.fileno()).columns or None
    except (OSError, ValueError, AttributeError):
        pass
    return None


class _Console(Console):
    """rich's Console, except that a closed output pipe (`plan ... | head -1`) ends the program with
    exit 0, as docs/cli.md promises, instead of rich's SystemExit(1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.file.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        raise SystemExit(0)


def make_console(file=None) -> Console:
    """rich detects a terminal's width; piped output is COLUMNS wide, else as wide as the terminal stderr
    is on, else 140."""
    c = _Console(file=file)
    return c if c.is_terminal else _Console(file=file, width=columns_from_env())


def zero_label(p: dict, short: bool = False) -> str:
    off = p.get("offload_optimizer")
    return str(p["zero_stage"]) + (("+o" if short else " +off") if off else "")


def memory_cell(r: dict) -> str:
    """peak / the usable capacity the search used (HBM less reserve and headroom); '!' = does not fit, '~' = fits
    but its memory band reaches past the usable capacity (planner.costmodel.capacity)."""
    mem = r["memory"]
    usable = mem.get("usable_gib", mem.get("capacity_gib"))
    mark = "" if r["fits"] and r.get("within_memory_margin", True) else ("~" if r["fits"] else "!")
    return f"{mem['peak_gib']:.1f}/{usable:.1f}" + mark


def band_label(plan: dict) -> str:
    """'±12%': the plan's cross-validated error band (planner.analysis.bands); '-' when absent."""
    from planner.analysis.bands import band_label as label

    return label(plan).strip() or "-"


def wide_table(doc: dict) -> Table:
    t = Table(title=f"{shown(doc['model']['name'])} on {shown(doc['cluster']['name'])}: best plans")
    for col in ("#", "layout", "mbs", "ZeRO", "recompute", "SP", "step s", "±", "tok/s/dev", "MFU", "peak/usable GiB"):
        t.add_column(col, justify="left" if col in ("layout", "recompute") else "right", no_wrap=True)
    for i, r in enumerate(doc["plans"], 1):
        p = r["plan"]
        t.add_row(str(i), plan_label(p), str(p["micro_batch"]), zero_label(p), recompute_label(p),
                  "y" if p["sequence_parallel"] and p["tp"] > 1 else "-", f"{r['step_time_s']:.3f}", band_label(r),
                  f"{r['tokens_per_s_per_device']:,.0f}", f"{100 * r['mfu']:.1f}%", memory_cell(r))
    return t


def compact_table(doc: dict) -> Table:
    t = Table(title=f"{shown(doc['model']['name'])} on {shown(doc['cluster']['name'])}", box=box.SIMPLE_HEAD,
              pad_edge=False, show_edge=False, padding=(0, 1))
    for col in ("#", "layout", "mbs", "Z", "rc", "step s", "±", "MFU", "GiB"):
        wrap = col == "layout"
        t.add_column(col, justify="left" if col in ("layout", "rc") else "right", no_wrap=not wrap,
                     overflow="fold" if wrap else "ellipsis", min_width=None if wrap else len(col))
    rows = [(str(i), plan_label(r["plan"], mark_no_sp=True), str(r["plan"]["micro_batch"]), zero_label(r["plan"], True),
             recompute_label(r["plan"], True), f"{r['step_time_s']:.3f}", band_label(r), f"{100 * r['mfu']:.1f}%",
             memory_cell(r))
            for i, r in enumerate(doc["plans"], 1)]
    for j, c in enumerate(t.columns):  # numbers are never squeezed: a numeric column is as wide as its widest cell
        if c.no_wrap:
            c.min_width = max([len(str(c.header))] + [len(row[j]) for row in rows])
        else:  # the layout wraps between its parts (TP4 / PP4x20 / DP4), never inside one
            c.min_width = max([len(str(c.header))] + [len(w) for row in rows for w in row[j].split()])
    for row in rows:
        t.add_row(*row)
    return t


def legend(doc: dict, compact: bool) -> list[str]:
    plans = doc["plans"]
    distinct = (doc.get("ranking") or {}).get("distinct_layouts", True)
    lines = [RANK_NOTE + (DISTINCT_NOTE if distinct else "")]
    band = (plans[0].get("step_time_band") or {}) if plans else {}
    if band:  # the cross-validated error band (planner.analysis.bands)
        lines.append(f"±: how far measured steps of published runs like these ({band.get('regime', '')}) landed from "
                     "the prediction, out of sample (90% of them); docs/cli.md.")
    if compact:
        lines.append("mbs micro-batch; Z ZeRO stage (1 = distributed optimizer, 3 = FSDP; +o optimizer states "
                     "offloaded to the host); rc recompute (- none, sel selective, full, fK full on K layers per "
                     "stage); MFU model FLOPs utilisation; GiB peak / usable memory per device (! = does not fit).")
        if any(p["plan"]["tp"] > 1 and not p["plan"]["sequence_parallel"] for p in plans):
            lines.append("TP8* = tensor parallel without sequence parallelism.")
    else:
        band = (plans[0].get("memory") or {}).get("memory_margin_rel") if plans else None
        lines.append("peak/usable GiB: predicted peak memory per device / the capacity the search allowed "
                     "(HBM less the fit reserve and --memory-headroom); ! = does not fit"
                     + (f"; ~ = leaves less than the memory margin ({100 * band:.0f}% of it, the memory error band: "
                        "how far published peaks landed from their prediction, out of sample) free: ranked after "
                        "every plan that keeps it, those that keep the median miss "
                        f"({100 * (plans[0].get('memory') or {}).get('memory_inner_margin_rel', 0.0):.1f}%) first "
                        "(--memory-headroom 0 opts out)." if band else "."))
        if any(p["plan"].get("offload_optimizer") for p in plans):
            lines.append("ZeRO 1 +off: ZeRO stage 1 with the optimizer states and step offloaded to the host CPU.")
    return lines


def narrow_table(doc: dict) -> Table:
    """Under the compact table's width (40-59 columns): one wrapped cell per plan, its layout first, then every
    figure of the compact table with its name; lines break between words, never inside a number."""
    t = Table(title=f"{shown(doc['model']['name'])} on {shown(doc['cluster']['name'])}", box=box.SIMPLE_HEAD,
              pad_edge=False, show_edge=False, padding=(0, 1))
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("plan", justify="left", overflow="fold")
    for i, r in enumerate(doc["plans"], 1):
        p = r["plan"]
        t.add_row(str(i), f"{plan_label(p, mark_no_sp=True)}: {r['step_time_s']:.3f} s {band_label(r)}, "
                          f"MFU {100 * r['mfu']:.1f}%, GiB {memory_cell(r)}, mbs {p['micro_batch']}, "
                          f"Z {zero_label(p, True)}, rc {recompute_label(p, True)}")
    return t


def plans_table(doc: dict, width: int) -> tuple[Table, bool]:
    """The wide table when the width allows and it fits, else the compact one, else (40-59 columns) the narrow
    one: a table is never drawn narrower than its cells (rich would cut the layout and the numbers);
    (table, compact)."""
    probe = Console(width=1000, file=open(os.devnull, "w"))
    if width > COMPACT_MAX_COLUMNS:
        t = wide_table(doc)
        if probe.measure(t).maximum <= width:
            return t, False
    t = compact_table(doc)
    return (t if probe.measure(t).minimum <= width else narrow_table(doc)), True


def bars(title: str, parts: dict[str, float], keys: tuple[str, ...], unit: str, total: float, width: int) -> Table:
    """One row per non-zero part: name, value, share of the total, and a bar that takes the width left."""
    rows = [(k, parts.get(k, 0.0)) for k in keys if parts.get(k, 0.0) > 0 or k in ("weights_gib", "compute_s")]
    cells = [(k.rsplit("_", 1)[0], f"{v:.3f} {unit}" if unit == "s" else f"{v:.2f} {unit}",
              f"{100 * v / total:.1f}%" if total > 0 else "") for k, v in rows]
    col_w = [max([len(c[j]) for c in cells] + [1]) for j in range(3)]
    bar_w = max(4, min(40, width - sum(col_w) - 7))  # 3 gaps of 2 spaces, 1 spare
    t = Table(title=title, show_header=False, box=None, pad_edge=False)
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (("part", "left"), ("value", "right"),
                                                                  ("share", "right"))
    for j, (name, just) in enumerate(columns):
        t.add_column(name, justify=just, no_wrap=True, min_width=col_w[j])
    t.add_column("bar", no_wrap=True, overflow="crop")
    top = max([v for _, v in rows] + [1e-12])
    for (label, val, share), (_, v) in zip(cells, rows, strict=True):
        t.add_row(label, val, share, "█" * int(round(bar_w * v / top)))
    return t


def wrapped(text: str, width: int, indent: str = "") -> str:
    """Text wrapped at word boundaries to `width` (never breaks a word or a number)."""
    return textwrap.fill(text, width=width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)


def print_plan_doc(doc: dict, console: Console | None = None, rank: int = 1) -> None:
    """The table, its legend, then the reason line and bars of plan `rank` (1-based)."""
    c = console or make_console()
    width = c.width
    table, compact = plans_table(doc, width)
    if doc.get("model") and doc.get("training"):
        c.print(escape(wrapped(header_line(doc), width, "  ")), soft_wrap=True)
    c.print(table)
    for line in legend(doc, compact):
        c.print(escape(wrapped(line, width)), style="dim", soft_wrap=True)
    if doc.get("band_note"):  # the leading plans lie within each other's error band
        c.print(escape(wrapped(f"note: {doc['band_note']}", width, "  ")), style="yellow", soft_wrap=True)
    bias = doc.get("hardware_bias")
    if isinstance(bias, dict) and bias.get("note"):  # the hardware's published runs landed on one side
        c.print(escape(wrapped(f"note: {bias['note']}", width, "  ")), style="yellow", soft_wrap=True)
    if not doc["plans"]:
        return
    rank = min(max(1, rank), len(doc["plans"]))
    chosen = doc["plans"][rank - 1]
    if chosen.get("reason"):
        c.print(escape(wrapped(f"Why #{rank}: {chosen['reason']}", width, "  ")), soft_wrap=True)
    c.print(bars(f"Memory per device (peak stage), plan #{rank}", chosen["memory"], MEM_PARTS, "GiB",
                 chosen["memory"]["peak_gib"], width))
    host = chosen["memory"].get("host_gib") or 0.0
    if host > 0:  # what the plan moves off HBM (memory.host_bytes): the host must hold it
        limit = chosen["memory"].get("host_capacity_gib")
        size = f"{host:.2f} of {limit:.2f} GiB per device" if limit is not None else \
            f"{host:.2f} GiB per device (the host's memory is not known: not checked)"
        c.print(escape(wrapped(f"in host memory: {size} (optimizer states under offload, offloaded layer tensors), "
                               "not in the peak", width, "  ")), soft_wrap=True)
    c.print(bars(f"Time per step, plan #{rank}", chosen["time_breakdown"], TIME_PARTS, "s",
                 chosen["step_time_s"], width))
    for w in chosen.get("warnings", []):
        c.print(escape(wrapped(f"warning: {w}", width, "  ")), style="yellow", soft_wrap=True)
    s = doc.get("search")
    if s:
        # no wall-clock time here: the same input prints the same bytes
        line = f"searched {s['structures']} layouts, scored {s['evaluated']} plans ({s['feasible']} fit)"
        c.print(escape(wrapped(line, width)), style="dim", soft_wrap=True)


def _count(n: float) -> str:
    """6.74B, 405B, 1.07T, 4.19M."""
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:g}"


def header_line(doc: dict) -> str:
    """'llama-2-7b: 6.74B parameters; global batch 1,024 x 4,096 = 4.19M tokens per step; stack megatron,
    bf16; 64 x a100-sxm-80gb': what was planned, before the table."""
    m, t, cl = doc["model"], doc["training"], doc.get("cluster") or {}
    params = f"{_count(m['params_total'])} parameters"
    if m.get("params_active") and m["params_active"] < m["params_total"]:
        params += f" ({_count(m['params_active'])} active)"
    gb, seq = t["global_batch"], t["seq_len"]
    stack = t.get("launcher") or t.get("framework") or "megatron"
    if t.get("launcher") and t.get("framework") and t["framework"] != t["launcher"]:
        stack += f" ({t['framework']})"
    where = f"; {cl['count']} x {cl['hardware']}" if cl.get("count") and cl.get("hardware") else ""
    return (f"{m['name']}: {params}; global batch {gb:,} x {seq:,} = {_count(gb * seq)} tokens per step; "
            f"stack {stack}, {t.get('dtype', 'bf16')}{where}")


def columns_for_text() -> int:
    """The width plain text lines are wrapped to: the console's (terminal or COLUMNS)."""
    return make_console().width


def explain_text(doc: dict, width: int | None = None) -> str:
    """`plan explain`'s derivation and why-not lists, each entry wrapped at word boundaries."""
    width = width or columns_for_text()
    rank = doc.get("explained_rank", 1)
    lines = ["", f"How each number was computed, plan #{rank} (docs/cost-model.md names the sources):"]
    for r in doc["derivation"]:
        v = r["value"]
        val = f"{v:.4g}" if isinstance(v, float) else str(v)
        lines.append(wrapped(f"  {r['name']:<44} {val:>12} {r['unit']:<8} {r['formula']}", width, " " * 6))
    lines += ["", f"Why not (neighbours of plan #{rank}):"]
    for a in doc["why_not"]:
        lines.append(wrapped(f"  {a['change']:<16} {a['verdict']:<16} {a['detail']}", width, " " * 6))
    if doc.get("vs"):
        lines += versus_lines(doc["vs"], width)
    return "\n".join(lines)


def versus_lines(vs: dict, width: int) -> list[str]:
    """`plan explain --vs N`: every term where plan #N differs from the explained plan, both values and
    the difference (with its share of the explained plan's value)."""
    a, b = vs["rank"], vs["other_rank"]
    lines = ["", wrapped(f"#{a} {plan_label(vs['plan'])} vs #{b} {plan_label(vs['other_plan'])}: every term that "
                         f"differs (#{b} - #{a})", width, "  ")]
    lines.append(f"  {'term':<36} {'#' + str(a):>12} {'#' + str(b):>12} {'difference':>12}")
    for t in vs["terms"]:
        rel = f" ({100 * t['rel']:+.1f}%)" if t.get("rel") is not None else ""
        lines.append(wrapped(f"  {t['name'][:36]:<36} {t['value']:>12.4g} {t['other']:>12.4g} {t['diff']:>+12.4g} "
                             f"{t['unit']}{rel}", width, " " * 6))
    if not vs["terms"]:
        lines.append("  (no term differs)")
    return lines
