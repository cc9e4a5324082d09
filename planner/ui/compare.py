"""`plan compare`: the best plan of one model per setting (cluster x sequence length), as one JSON
document (same names as `plan --json`) and as a table fitted to the width."""

from __future__ import annotations

from typing import Callable

from rich import box
from rich.markup import escape
from rich.table import Table

from planner.errors import NoFeasiblePlan
from planner.ui.costopts import cost_band_text, cost_text, estimate_doc
from planner.ui.table import COMPACT_MAX_COLUMNS, memory_cell, plan_label, shown


def compare_doc(model_arg: str, clusters: tuple[str, ...], seq_lens: tuple[int, ...], common: dict, cost: dict,
                run_search: Callable) -> dict:
    """One row per (cluster, seq_len). Bad input anywhere is an error of the whole command (exit 2);
    a setting where nothing fits is a row with `error` (code 3); if no setting has a plan, exit 3."""
    from planner.catalog.models import load_model
    from planner.costmodel.params import count_params
    from planner.ui.jsondoc import model_object

    spec = load_model(model_arg)
    rows: list[dict] = []
    for cl in clusters:
        for seq in seq_lens or (None,):
            kw = common | {"model_arg": model_arg, "cluster_arg": cl, "seq_len": seq, "top_k": 1}
            try:
                _, _, doc = run_search(kw)
            except NoFeasiblePlan as e:
                rows.append({"cluster": {"name": cl}, "seq_len": seq,
                             "error": {"code": e.exit_code, "message": str(e)}})
                continue
            rows.append(_row(doc, cost))
    if all(r["error"] for r in rows):
        raise NoFeasiblePlan(f"no setting has a fitting plan: {rows[0]['error']['message']}")
    return {"model": model_object(spec, count_params(spec)), "rows": rows,
            "band_notes": band_notes(rows) + bias_notes(rows)}


def _within(a: float, band_a: list[float], b: float, band_b: list[float]) -> bool:
    """Each value inside the other's band: the model cannot tell which is smaller."""
    return band_b[0] <= a <= band_b[1] and band_a[0] <= b <= band_a[1]


def _pairs(rows: list[dict]):
    ok = [r for r in rows if not r["error"]]
    for i, a in enumerate(ok):
        for b in ok[i + 1:]:
            yield a, b


def _setting(r: dict, seq: bool) -> str:
    return r["cluster"]["name"] + (f" at seq {r['seq_len']}" if seq else "")


def band_notes(rows: list[dict]) -> list[str]:
    """One sentence per pair of settings whose costs (with a price), else step times, lie within each
    other's error bands (planner.analysis.bands): the comparison does not decide between them."""
    notes = []
    seq = len({r.get("seq_len") for r in rows}) > 1
    for a, b in _pairs(rows):
        ea, eb = a.get("training_estimate") or {}, b.get("training_estimate") or {}
        if ea.get("cost_band") and eb.get("cost_band"):
            if _within(ea["cost"], ea["cost_band"], eb["cost"], eb["cost_band"]):
                notes.append(f"the costs of {_setting(a, seq)} ({cost_text(ea)}) and {_setting(b, seq)} "
                             f"({cost_text(eb)}) lie within each other's error bands: the model cannot tell "
                             "which is cheaper; measure both")
            continue
        ba, bb = a.get("step_time_band"), b.get("step_time_band")
        if ba and bb and _within(a["step_time_s"], [ba["low_s"], ba["high_s"]],
                                 b["step_time_s"], [bb["low_s"], bb["high_s"]]):
            notes.append(f"the step times of {_setting(a, seq)} ({a['step_time_s']:.3f} s) and {_setting(b, seq)} "
                         f"({b['step_time_s']:.3f} s) lie within each other's error bands: the model cannot tell "
                         "which is faster; measure both")
    return notes


def bias_notes(rows: list[dict]) -> list[str]:
    """The note of each compared hardware whose published runs landed on one side of the prediction
    (planner.analysis.bands.hardware_bias), once per hardware: it can decide a comparison the bands leave open."""
    notes: dict[str, str] = {}
    for r in rows:
        bias = r.get("hardware_bias")
        if isinstance(bias, dict):
            notes.setdefault(str(bias["hardware"]), str(bias["note"]))
    return list(notes.values())


def _row(doc: dict, cost: dict) -> dict:
    best = doc["plans"][0]
    row = {"cluster": doc["cluster"], "training": doc["training"], "seq_len": doc["training"]["seq_len"],
           "plan": best["plan"], "step_time_s": best["step_time_s"],
           "tokens_per_s_per_device": best["tokens_per_s_per_device"],
           "tokens_per_s": best["tokens_per_s_per_device"] * doc["cluster"]["count"], "mfu": best["mfu"],
           "memory": best["memory"], "fits": best["fits"], "error": None}
    if best.get("step_time_band"):
        row["step_time_band"] = best["step_time_band"]
    if doc.get("hardware_bias"):
        row["hardware_bias"] = doc["hardware_bias"]
    if cost.get("tokens"):
        row["training_estimate"] = estimate_doc(best, doc["model"]["params_total"], cost, doc["cluster"])
    return row


def _band_cell(r: dict) -> str:
    band = r.get("step_time_band")
    return f"{100 * band['rel']:.0f}%" if band and not r["error"] else ""


def _plan_cells(r: dict, compact: bool, seq: bool) -> list[str]:
    head = [shown(r["cluster"]["name"])] + ([str(r.get("seq_len") or "")] if seq else [])
    if r["error"]:
        return head + ["no plan fits"]
    cells = head + [plan_label(r["plan"]), f"{r['step_time_s']:.3f}"]
    if not compact:
        cells += [_band_cell(r), f"{r['tokens_per_s']:,.0f}", f"{r['tokens_per_s_per_device']:,.0f}"]
    return cells + [f"{100 * r['mfu']:.1f}%", memory_cell(r)]


def _prices_differ(rows: list[dict]) -> bool:
    return len({(r.get("training_estimate") or {}).get("price_per_device_hour") for r in rows if not r["error"]}) > 1


def _estimate_cells(r: dict, seq: bool, price: bool, bands: bool = True) -> list[str]:
    e = r.get("training_estimate")
    head = [shown(r["cluster"]["name"])] + ([str(r.get("seq_len") or "")] if seq else [])
    if not e:
        return head + [""] * (2 + price + bands)
    p = e.get("price_per_device_hour")
    return head + [f"{e['effective_days']:.1f}"] + ([f"{p:g}" if p is not None else "-"] if price else []) + (
        [cost_text(e)] + ([cost_band_text(e)] if bands else []))


def _band_cells(r: dict, seq: bool, est: bool) -> list[str]:
    head = [shown(r["cluster"]["name"])] + ([str(r.get("seq_len") or "")] if seq else [])
    return head + [_band_cell(r)] + ([cost_band_text(r.get("training_estimate") or {})] if est else [])


def _natural_width(cols: list[str], rows: list[list[str]], compact: bool) -> int:
    full = [max([len(c)] + [len(r[j]) if j < len(r) else 0 for r in rows]) for j, c in enumerate(cols)]
    return sum(full) + (2 * (len(cols) - 1) if compact else 3 * (len(cols) - 1) + 4)


def _table(title: str, cols: list[str], rows: list[list[str]], compact: bool, width: int) -> Table:
    """Numbers and names keep their full width; the layout column takes what is left and folds."""
    t = Table(title=title, box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD, pad_edge=not compact,
              show_edge=not compact, collapse_padding=compact)
    rows = [r + [""] * (len(cols) - len(r)) for r in rows]
    full = [max([len(c)] + [len(r[j]) for r in rows]) for j, c in enumerate(cols)]
    gaps = 2 * (len(cols) - 1) if compact else 3 * (len(cols) - 1) + 4  # separators and padding
    for j, col in enumerate(cols):
        w = full[j]
        if col == "layout":
            words = max([len(col)] + [len(x) for r in rows for x in r[j].split()])
            w = max(words, min(full[j], width - gaps - sum(full) + full[j]))
        t.add_column(col, no_wrap=col != "layout", overflow="fold", width=w,
                     justify="left" if col in ("cluster", "layout") else "right")
    for r in rows:
        t.add_row(*r)
    return t


def compare_tables(doc: dict, width: int) -> list[Table]:
    """The best plan per setting; with --tokens the days and cost too, in the same table when it fits the
    width, else in a second one. Compact (<= 80 columns): the error band `±` (and the cost band) in a table
    of their own. The price column only when the rows' prices differ."""
    compact = width <= COMPACT_MAX_COLUMNS
    rows_in = doc["rows"]
    seq = len({r.get("seq_len") for r in rows_in}) > 1
    est = any(r.get("training_estimate") for r in rows_in)
    price = _prices_differ(rows_in)
    head = ["cluster"] + (["seq"] if seq else [])
    cols = head + ["layout", "step s"] + ([] if compact else ["±", "tok/s total", "tok/s/dev"]) + ["MFU", "GiB"]
    est_cols = ["days"] + (["price"] if price else []) + ["cost"] + ([] if compact else ["cost band"])
    rows = [_plan_cells(r, compact, seq) for r in rows_in]
    title = escape(f"{doc['model']['name']}: best plan per setting")
    if est and not compact:
        both = [a + _estimate_cells(r, seq, price)[len(head):] for a, r in zip(rows, rows_in, strict=True)]
        if _natural_width(cols + est_cols, both, compact) <= width:
            return [_table(title, cols + est_cols, both, compact, width)]
    out = [_table(title, cols, rows, compact, width)]
    if est:
        out.append(_table("training time and cost", head + est_cols,
                          [_estimate_cells(r, seq, price, not compact) for r in rows_in], compact, width))
    if compact:
        out.append(_table("error bands", head + ["±"] + (["cost band"] if est else []),
                          [_band_cells(r, seq, est) for r in rows_in if not r["error"]], compact, width))
    return out
