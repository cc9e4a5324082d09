"""`plan compare`: the best plan of one model per setting (cluster x sequence length), as one JSON
document (same names as `plan --json`) and as a table fitted to the width."""

from __future__ import annotations

from typing import Callable

from rich.markup import escape
from rich.table import Table

from planner.errors import NoFeasiblePlan
from planner.ui.costopts import cost_text, estimate_doc
from planner.ui.table import COMPACT_MAX_COLUMNS, memory_cell, plan_label


def compare_doc(model_arg: str, clusters: tuple[str, ...], seq_lens: tuple[int, ...], common: dict, cost: dict,
                run_search: Callable) -> dict:
    """One row per (cluster, seq_len). Bad input anywhere is an error of the whole command (exit 2);
    a setting where nothing fits is a row with `error` (code 3); if no setting has a plan, exit 3."""
    from planner.model_catalog import load_model
    from planner.params import count_params
    from planner.ui.jsondoc import model_object

    spec = load_model(model_arg)
    rows = []
    for cl in clusters:
        for seq in seq_lens or (None,):
            kw = common | {"model_arg": model_arg, "cluster_arg": cl, "seq_len": seq, "top_k": 1}
            try:
                _, _, doc = run_search(kw)
            except NoFeasiblePlan as e:
                rows.append({"cluster": {"name": cl}, "seq_len": seq, "error": {"code": e.exit_code, "message": str(e)}})
                continue
            rows.append(_row(doc, cost))
    if all(r["error"] for r in rows):
        raise NoFeasiblePlan(f"no setting has a fitting plan: {rows[0]['error']['message']}")
    return {"model": model_object(spec, count_params(spec)), "rows": rows}


def _row(doc: dict, cost: dict) -> dict:
    best = doc["plans"][0]
    row = {"cluster": doc["cluster"], "training": doc["training"], "seq_len": doc["training"]["seq_len"],
           "plan": best["plan"], "step_time_s": best["step_time_s"],
           "tokens_per_s_per_device": best["tokens_per_s_per_device"],
           "tokens_per_s": best["tokens_per_s_per_device"] * doc["cluster"]["count"], "mfu": best["mfu"],
           "memory": best["memory"], "fits": best["fits"], "error": None}
    if cost.get("tokens"):
        row["training_estimate"] = estimate_doc(best, doc["model"]["params_total"], cost)
    return row


def compare_table(doc: dict, width: int) -> Table:
    compact = width <= COMPACT_MAX_COLUMNS
    est = any(r.get("training_estimate") for r in doc["rows"])
    cols = ["cluster", "seq", "layout", "step s"] + ([] if compact else ["tok/s total", "tok/s/dev"]) + ["MFU", "GiB"]
    cols += ["days", "cost"] if est else []
    t = Table(title=escape(f"{doc['model']['name']}: best plan per setting"))
    for col in cols:
        wrap = col in ("cluster", "layout")
        t.add_column(col, no_wrap=not wrap, overflow="fold", justify="left" if wrap else "right")
    for r in doc["rows"]:
        if r["error"]:
            t.add_row(escape(r["cluster"]["name"]), str(r.get("seq_len") or ""),
                      escape("no plan fits (exit 3 alone)"), *[""] * (len(cols) - 3))
            continue
        cells = [escape(r["cluster"]["name"]), str(r["seq_len"]), plan_label(r["plan"]), f"{r['step_time_s']:.3f}"]
        if not compact:
            cells += [f"{r['tokens_per_s']:,.0f}", f"{r['tokens_per_s_per_device']:,.0f}"]
        cells += [f"{100 * r['mfu']:.1f}%", memory_cell(r)]
        if est:
            e = r["training_estimate"]
            cells += [f"{e['effective_days']:.1f}", cost_text(e)]
        t.add_row(*cells)
    return t

