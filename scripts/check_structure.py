#!/usr/bin/env python3
"""Function length: no function over 60 lines in planner/ (data tables excepted), the one structure rule
ruff cannot express (complexity and statement counts are ruff's C901 and PLR0915, pyproject.toml). Ruff 0.17.6
has no rule on a function's length in lines: PLR0915 counts statements, flake8-functions' CFQ001 is not
implemented (astral-sh/ruff#2414) and a function-length rule is an open request (astral-sh/ruff#20392). This
script checks that one rule and nothing else; drop it when ruff gains one.

    python scripts/check_structure.py [PATH ...]      (default: planner/ next to this script)

Prints one line per offence (path:line kind name: figure) and exits 1 if there is any, 0 otherwise.

* Length: every def (functions, methods, nested functions) as the AST spans it, decorators excluded:
  end_lineno - lineno + 1, docstring and comments included. A data table is exempt: a function whose
  body, after its docstring, is one `return` of a dict/list/tuple/set literal.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

MAX_FUNCTION_LINES = 60

ROOT = Path(__file__).resolve().parent.parent


def _python_files(paths: list[Path]) -> Iterator[Path]:
    for p in paths:
        if p.is_dir():
            yield from sorted(f for f in p.rglob("*.py") if "__pycache__" not in f.parts)
        elif p.suffix == ".py":
            yield p


def _is_data_table(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    return (len(body) == 1 and isinstance(body[0], ast.Return)
            and isinstance(body[0].value, (ast.Dict, ast.List, ast.Tuple, ast.Set)))


def long_functions(src: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[int, str, int]]:
    """(line, name, length) of every def longer than `limit` lines that is not a data table."""
    out = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit and not _is_data_table(node):
                out.append((node.lineno, node.name, length))
    return sorted(out)


def check(paths: list[Path]) -> list[str]:
    """One line per offence over the given files and folders."""
    problems = []
    for f in _python_files(paths):
        src = f.read_text(encoding="utf-8")
        try:
            shown = f.resolve().relative_to(ROOT)
        except ValueError:
            shown = f
        for line, name, length in long_functions(src):
            problems.append(f"{shown}:{line} length {name}: {length} lines (limit {MAX_FUNCTION_LINES})")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path, default=[ROOT / "planner"])
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        print(f"check_structure: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    problems = check(args.paths)
    for line in problems:
        print(line)
    n_files = sum(1 for _ in _python_files(args.paths))
    print(f"check_structure: {len(problems)} problem(s) in {n_files} file(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
