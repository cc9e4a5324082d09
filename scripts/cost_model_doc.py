#!/usr/bin/env python3
"""Regenerate the generated tables of docs/cost-model.md from the code; the prose around them is kept.

    python scripts/cost_model_doc.py            # rewrite the generated sections of docs/cost-model.md
    python scripts/cost_model_doc.py --check    # exit 1 when the file is out of date (or its prose quotes a
                                                # constant calibration.py no longer defines)

Each generated section sits between `<!-- begin generated: NAME ... -->` and `<!-- end generated: NAME -->`;
everything outside the markers is hand-written and left as it is. The sections:

* formulas: every formula of the cost model's registry (planner.costmodel.trace.FORMULAS: id, text, source),
  with the module that declares it (its literal `formula("id", ...)` call, found in the source);
* constants: every field of planner.costmodel.calibration.Calibration with its value (DEFAULT_CALIBRATION), its
  dev-fit bounds (the field's `fitted(...)`) and its evidence (the comment above it): all read from calibration.py;
* stack_overhead: each stack's `overhead_gib` (planner.stacks);
* profiles: the hardware profiles' per-profile constants (fitted TPU GEMM ceilings, `calibration:` blocks).

tests/scripts/test_cost_model_doc.py fails when docs/cost-model.md differs from what this script writes.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cost-model.md"
BEGIN = "<!-- begin generated: {} (scripts/cost_model_doc.py; edit the code, not this table) -->"
END = "<!-- end generated: {} -->"
SECTION_HEADER = re.compile(r"#\s*---\s*(.*?)\s*-+\s*$")


def _cell(text: str) -> str:
    """Text for one markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _num(v: float) -> str:
    return f"{v:g}"


# --- formulas ------------------------------------------------------------------------------------------------

def declared_formulas() -> list[tuple[str, str]]:
    """(path under planner/costmodel/, formula id) for every literal `formula("id", ...)` call in
    planner/costmodel/, in file order then line order."""
    import planner.costmodel

    out = []
    base = Path(planner.costmodel.__file__).parent
    for path in sorted(base.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = sorted((n.lineno, n.col_offset, first.value) for n in ast.walk(tree)
                       if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "formula"
                       and n.args and isinstance(first := n.args[0], ast.Constant) and isinstance(first.value, str))
        out += [(path.relative_to(base).as_posix(), fid) for _, _, fid in calls]
    return out


def formulas_table() -> str:
    import planner.costmodel
    from planner.costmodel.trace import FORMULAS

    declared = declared_formulas()
    for module, _ in declared:  # importing a module registers its formulas
        parts = [planner.costmodel.__name__, *module.removesuffix(".py").split("/")]
        importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    missing = sorted(set(FORMULAS) - {f for _, f in declared})
    if missing:
        raise SystemExit(f"formulas registered without a literal formula(\"id\", ...) call: {', '.join(missing)}")
    lines = [f"{len(FORMULAS)} formulas, each declared once where it is computed (`planner/costmodel/<module>`); "
             "a trace term names its formula by id.", "", "| id | formula | source | module |", "|---|---|---|---|"]
    for module, fid in declared:
        f = FORMULAS[fid]
        lines.append(f"| `{f.id}` | {_cell(f.text)} | {_cell(f.source)} | `{module}` |")
    return "\n".join(lines) + "\n"


# --- calibrated constants -----------------------------------------------------------------------------------

def _comments(source: str) -> dict[int, str]:
    """Line number -> the comment on that line (without '#')."""
    return {t.start[0]: t.string.lstrip("#").strip() for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type == tokenize.COMMENT}


def _block_above(lines: list[str], comments: dict[int, str], lineno: int) -> list[str]:
    """The comment lines directly above line `lineno` (1-based), up to a blank line or a section header."""
    block: list[str] = []
    i = lineno - 1
    while i >= 1 and lines[i - 1].lstrip().startswith("#") and not SECTION_HEADER.match(lines[i - 1].strip()):
        block.insert(0, comments[i])
        i -= 1
    return block


def calibration_entries() -> list[tuple[str, list[str], str]]:
    """(section, names, evidence) for the fields of calibration.py's `Calibration`, in file order; a field written
    on the line after another without a comment of its own shares that one's evidence (and row)."""
    from planner.costmodel import calibration as cal

    source = Path(cal.__file__).read_text(encoding="utf-8")
    lines, comments = source.splitlines(), _comments(source)
    headers = {i + 1: m.group(1) for i, line in enumerate(lines) if (m := SECTION_HEADER.match(line.strip()))}
    entries: list[tuple[str, list[str], str]] = []
    last_end = -1
    body = next(n.body for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Calibration")
    for node in body:
        if not (isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(t := _target(node), str) and t.isupper()):
            continue
        block = _block_above(lines, comments, node.lineno)
        inline = [comments[n] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1) if n in comments]
        if not block and not inline and entries and node.lineno == last_end + 1:
            entries[-1][1].append(t)
        else:
            section = max(((n, h) for n, h in headers.items() if n < node.lineno), default=(0, ""))[1]
            entries.append((section, [t], " ".join(block + inline)))
        last_end = node.end_lineno or node.lineno
    return entries


def _target(node: ast.Assign | ast.AnnAssign) -> str | None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return targets[0].id if len(targets) == 1 and isinstance(targets[0], ast.Name) else None


def constants_table() -> str:
    from planner.costmodel.calibration import DEFAULT_CALIBRATION, dev_fit_bounds, names

    entries = calibration_entries()
    missing = sorted(set(names()) - {n for _, ns, _ in entries for n in ns})
    if missing:
        raise SystemExit(f"Calibration fields the table would leave out: {', '.join(missing)}")
    bounds_of = dev_fit_bounds()
    lines = ["| constant | value | dev-fit bounds (-: not refitted) | evidence (the comment in `calibration.py`) |",
             "|---|---|---|---|"]
    section = None
    for sec, ns, evidence in entries:
        if sec != section:
            lines.append(f"| **{_cell(sec)}** | | | |")
            section = sec
        bounds = ", ".join(f"{_num(bounds_of[n].lo)} - {_num(bounds_of[n].hi)}" for n in ns if n in bounds_of)
        lines.append(f"| {', '.join(ns)} | {', '.join(_num(getattr(DEFAULT_CALIBRATION, n)) for n in ns)} "
                     f"| {bounds or '-'} "
                     f"| {_cell(evidence)} |")
    return "\n".join(lines) + "\n"


def stack_overhead_table() -> str:
    from planner.stacks import STACKS

    lines = ["| stack (`--framework`) | `overhead_gib` |", "|---|---|"]
    lines += [f"| {_cell(s.name)} (`{fw}`) | {_num(s.overhead_gib)} |" for fw, s in STACKS.items()]
    return "\n".join(lines) + "\n"


def profiles_table() -> str:
    from planner.catalog.hardware import list_hardware
    from planner.costmodel.calibration import PROFILE_FIELDS as fields
    lines = ["| profile | `gemm_efficiency_max` | " + " | ".join(f"`{f}`" for f in fields) + " |",
             "|---|---|" + "---|" * len(fields)]
    for hw in sorted(list_hardware(), key=lambda h: h.id):
        if hw.calibration is None:
            continue
        values = [getattr(hw.calibration, f) for f in fields]
        lines.append(f"| {hw.id} | {_num(hw.gemm_efficiency_max)} | "
                     + " | ".join("-" if v is None else _num(v) for v in values) + " |")
    return "\n".join(lines) + "\n"


SECTIONS = {"formulas": formulas_table, "constants": constants_table, "stack_overhead": stack_overhead_table,
            "profiles": profiles_table}


# --- the document ---------------------------------------------------------------------------------------------

def render(text: str) -> str:
    """`text` with every generated section replaced by what the code gives today; the rest unchanged."""
    for name, make in SECTIONS.items():
        begin, end = BEGIN.format(name), END.format(name)
        if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
            raise SystemExit(f"{DOC.name}: expected one '{begin}' followed by one '{end}'")
        head, rest = text.split(begin, 1)
        text = head + begin + "\n" + make() + end + rest.split(end, 1)[1]
    return text


CONSTANT_NAME = re.compile(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`")


def unknown_constants(text: str) -> list[str]:
    """Constant names the hand-written prose quotes (`NAME` in backticks, outside the generated sections) that
    planner/costmodel/calibration.py no longer defines: prose left behind by a refit or a rename."""
    from planner.costmodel.calibration import names

    for name in SECTIONS:
        head, rest = text.split(BEGIN.format(name), 1)
        text = head + rest.split(END.format(name), 1)[1]
    return sorted({n for n in CONSTANT_NAME.findall(text) if n not in names()})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the file is out of date, write nothing")
    ap.add_argument("path", nargs="?", type=Path, default=DOC)
    args = ap.parse_args(argv)
    old = args.path.read_text(encoding="utf-8")
    new = render(old)
    stale = unknown_constants(new)
    if stale:
        print(f"{args.path}: the prose names constants calibration.py does not define: {', '.join(stale)}",
              file=sys.stderr)
    if args.check:
        if new != old:
            print(f"{args.path} is out of date: run python scripts/cost_model_doc.py", file=sys.stderr)
        return 1 if new != old or stale else 0
    if new != old:
        args.path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # the checkout's planner, as the tables describe it
    sys.exit(main())
