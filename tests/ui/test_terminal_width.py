"""The terminal output fits COLUMNS (also when piped) and never cuts a number: every table cell is checked
against the --json numbers of the same run, at 60, 80 and 120 columns."""

from __future__ import annotations

import json
import re

import pytest
from support import run_cli

CASES = [
    ("--model", "llama-70b", "--cluster", "a100x64", "--tokens", "15T", "--price-per-device-hour", "2.5",
     "--currency", "USD"),
    # long layout labels (CP, EP, ETP) and offloaded optimizer; even pipeline stages, so no stage solver
    ("--model", "mixtral-8x22b", "--cluster", "h100x128", "--seq-len", "16384", "--gbs", "256", "--top", "3",
     "--all-variants", "--offload"),
    ("--model", "mixtral-8x7b", "--cluster", "h100x16", "--rank", "2", "--no-sp", "--tp", "2"),
]


def run(args, width=None):
    r = run_cli(*args, env={"COLUMNS": str(width)} if width else None)
    assert r.exit_code == 0, r.stderr
    return r.stdout


def row_cells(line: str) -> list[str]:
    """Cells of one table row: split on the box's bars (wide) or on spaces (compact)."""
    if "│" in line:
        return [c.strip() for c in line.strip().strip("│").split("│")]
    toks = line.split()
    return [toks[0], " ".join(toks[1:-6]), *toks[-6:]]


def narrow(lines: list[str]) -> bool:
    """The 40-59 column table (issue 26 item 8): one wrapped 'plan' cell per plan."""
    return any(re.match(r"^#\s+plan\s*$", line.strip()) for line in lines)


def narrow_cells(lines: list[str], at: int) -> list[str]:
    """The words of plan row `at` of the narrow table and of its continuation lines (commas dropped)."""
    words = lines[at].split()[1:]
    for line in lines[at + 1:]:
        if not line.startswith("    ") or not line.strip():
            break
        words += line.split()
    return [w.rstrip(",:") for w in words]


def number(cell: str) -> float:
    return float(cell.rstrip("%!").replace(",", "").split("/")[0])


@pytest.fixture(scope="module", params=[0, pytest.param(1, marks=pytest.mark.slow), 2])  # 1: a large search
def case(request):
    args = CASES[request.param]
    return args, json.loads(run(args + ("--json",)))


@pytest.mark.parametrize("width", [60, 80, 120])
def test_no_number_cut_and_no_line_too_wide(case, width):
    args, doc = case
    text = run(args, width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "…" not in text
    # the compact table (no box, no tok/s column) is used at <= 80 columns, and wider where the boxed table
    # would not fit the width (long MoE layouts at 120 columns)
    compact = not any("│" in line for line in lines)
    assert compact or width > 80
    for i, p in enumerate(doc["plans"], 1):
        at = next(k for k, line in enumerate(lines) if re.match(rf"^(│ )?{i}\s", line.strip()))
        cells = row_cells(lines[at]) if not narrow(lines) else narrow_cells(lines, at)
        mem = p["memory"]
        # "~": fits, but not at its memory band's upper edge (planner.ui.table); "!": does not fit
        mark = "" if p["fits"] and p["within_memory_margin"] else ("~" if p["fits"] else "!")
        want = [f"{p['step_time_s']:.3f}", f"{100 * p['mfu']:.1f}%",
                f"{mem['peak_gib']:.1f}/{mem['usable_gib']:.1f}{mark}"]
        if not compact:
            want.append(f"{p['tokens_per_s_per_device']:,.0f}")
        for w in want:
            assert w in cells, (w, cells)
        for c in cells:
            if re.fullmatch(r"[0-9][0-9.,/%!]*", c):
                assert "..." not in c
                number(c)  # parses
    rank = int(args[args.index("--rank") + 1]) if "--rank" in args else 1
    chosen = doc["plans"][rank - 1]
    flat = " ".join(text.split())
    assert " ".join(f"Why #{rank}: {chosen['reason']}".split()) in flat  # wrapped at word boundaries only
    peak, step = chosen["memory"]["peak_gib"], chosen["step_time_s"]
    for part, v in chosen["memory"].items():  # bar rows: part, value, share, each cell whole
        if part.endswith("_gib") and part not in ("peak_gib", "capacity_gib", "usable_gib", "host_gib",
                                                   "host_capacity_gib") and v > 0:
            assert re.search(rf"^{part[:-4]}\s+{v:.2f} GiB\s+{100 * v / peak:.1f}%", text, re.M), part
    host = chosen["memory"]["host_gib"]  # not part of the peak: its own line, the number whole
    limit = chosen["memory"].get("host_capacity_gib")
    of = f" of {limit:.2f} GiB per device" if limit is not None else \
        " GiB per device (the host's memory is not known: not checked)"
    assert (f"in host memory: {host:.2f}{of}" in flat) == (host > 0)
    for part, v in chosen["time_breakdown"].items():
        if v > 0:
            assert re.search(rf"^{part[:-2]}\s+{v:.3f} s\s+{100 * v / step:.1f}%", text, re.M), part
    if "training_estimate" in doc:
        e = doc["training_estimate"]
        assert f"{e['cost']:,.0f}" in text and f"{e['device_hours']:,.0f} device-hours" in flat


def test_piped_default_is_140_and_compact_below_81():
    args = CASES[0][:4]
    wide = run(args)
    assert "┃ # ┃" in wide and max(len(x) for x in wide.splitlines()) <= 140
    narrow = run(args, 80)
    assert "┃" not in narrow and "Z ZeRO stage" in narrow  # abbreviations explained in the footer


@pytest.mark.parametrize("width", [60, 80, 120])
def test_compare_fits_the_width(width):
    args = ("compare", "--model", "llama-8b", "--cluster", "a100x8", "--cluster", "h100-sxm-80gbx16", "--seq-len",
            "4096", "--seq-len", "8192", "--tokens", "1T", "--price-per-device-hour", "2", "--currency", "USD")
    doc = json.loads(run(args + ("--json",)))
    text = run(args, width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width and "…" not in text
    for r in doc["rows"]:
        name, seq = r["cluster"]["name"], str(r["seq_len"])
        row = next(line for line in lines if re.search(rf"{re.escape(name)}\s+\S*\s*{seq}\s", line))
        cells = row_cells(row) if "│" in row else row.split()
        mem = r["memory"]
        for w in (f"{r['step_time_s']:.3f}", f"{100 * r['mfu']:.1f}%",
                  f"{mem['peak_gib']:.1f}/{mem['usable_gib']:.1f}"):
            assert w in cells, (w, cells)
        e = r["training_estimate"]
        assert re.search(rf"{re.escape(name)}.*{seq}.*{e['effective_days']:.1f}.*{e['cost']:,.0f} USD", text)
