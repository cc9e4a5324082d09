"""Terminal rendering with rich (kept as the import path other modules use; the code lives in
planner.ui.table). Colour degrades to plain text when the output is not a terminal."""

from __future__ import annotations

from planner.ui.table import (  # noqa: F401
    MEM_PARTS,
    TIME_PARTS,
    bars,
    make_console,
    plan_label,
    plans_table,
    print_plan_doc,
    recompute_label,
    shown,
)
