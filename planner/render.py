"""Terminal rendering with rich: ranked plans, memory and time breakdowns as bars.
Colour degrades to plain text when the output is not a terminal (rich's own detection)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from planner.costmodel.trace import MEMORY_PARTS as MEM_PARTS
from planner.costmodel.trace import TIME_TERMS as TIME_PARTS


def plan_label(p: dict) -> str:
    """Short name of a plan's layout from its knobs: 'TP8 PP4x2 CP2 DP4 EP8' (x = virtual stages)."""
    g = lambda k: p.get(k) or 1  # noqa: E731
    s = f"TP{g('tp')} PP{g('pp')}"
    if g("vpp") > 1:
        s += f"x{g('vpp')}"
    if g("cp") > 1:
        s += f" CP{g('cp')}" + ("(a2a)" if p.get("cp_comm") == "a2a" else "")
    s += f" DP{g('dp')}"
    if g("ep") > 1:
        s += f" EP{g('ep')}"
    if g("etp") > 1:
        s += f" ETP{g('etp')}"
    return s


def recompute_label(p: dict) -> str:
    if p["recompute"] == "full" and p.get("recompute_layers") is not None:
        return f"full({p['recompute_layers']}/stage)"
    return p["recompute"]


def plans_table(doc: dict) -> Table:
    t = Table(title=f"{doc['model']['name']} on {doc['cluster']['name']}: best plans", show_lines=False)
    for col in ("#", "layout", "mbs", "ZeRO", "recompute", "SP", "step s", "tok/s/dev", "MFU", "peak GiB"):
        t.add_column(col, justify="right" if col not in ("layout", "recompute") else "left", no_wrap=True)
    for i, r in enumerate(doc["plans"], 1):
        p = r["plan"]
        mem = r["memory"]
        t.add_row(
            str(i), plan_label(p), str(p["micro_batch"]), str(p["zero_stage"]) + (" +off" if p.get("offload_optimizer") else ""),
            recompute_label(p), "y" if p["sequence_parallel"] and p["tp"] > 1 else "-",
            f"{r['step_time_s']:.3f}", f"{r['tokens_per_s_per_device']:,.0f}", f"{100 * r['mfu']:.1f}%",
            f"{mem['peak_gib']:.1f}/{mem['capacity_gib']:.0f}" + ("" if r["fits"] else " !"),
        )
    return t


def bars(title: str, parts: dict[str, float], keys: tuple[str, ...], unit: str, total: float, width: int = 40) -> Table:
    t = Table(title=title, show_header=False, box=None, pad_edge=False)
    t.add_column("part")
    t.add_column("value", justify="right")
    t.add_column("bar")
    top = max([parts.get(k, 0.0) for k in keys] + [1e-12])
    for k in keys:
        v = parts.get(k, 0.0)
        if v <= 0 and k not in ("weights_gib", "compute_s"):
            continue
        n = int(round(width * v / top))
        share = f" {100 * v / total:4.1f}%" if total > 0 else ""
        t.add_row(k.rsplit("_", 1)[0], f"{v:.3f} {unit}" if unit == "s" else f"{v:.2f} {unit}", "█" * n + share)
    return t


def make_console() -> Console:
    """rich degrades colour to plain text when piped; give piped output room for the wide tables."""
    c = Console()
    return c if c.is_terminal else Console(width=140)


def print_plan_doc(doc: dict, console: Console | None = None) -> None:
    c = console or make_console()
    c.print(plans_table(doc))
    if not doc["plans"]:
        return
    best = doc["plans"][0]
    if best.get("reason"):
        c.print(f"[bold]Why #1:[/bold] {best['reason']}")
    c.print(bars("Memory per device (peak stage)", best["memory"], MEM_PARTS, "GiB", best["memory"]["peak_gib"]))
    c.print(bars("Time per step", best["time_breakdown"], TIME_PARTS, "s", best["step_time_s"]))
    for w in best.get("warnings", []):
        c.print(f"[yellow]warning:[/yellow] {w}")
    s = doc.get("search")
    if s:
        c.print(f"[dim]searched {s['structures']} layouts, scored {s['evaluated']} plans "
                f"({s['feasible']} fit)" + (f" in {s['seconds']:.2f} s" if "seconds" in s else "") + "[/dim]")
