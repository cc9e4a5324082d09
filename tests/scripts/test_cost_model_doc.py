"""docs/cost-model.md's generated tables (formula registry, calibrated constants, stack overheads, per-profile
constants) are what scripts/cost_model_doc.py makes from the code today; the prose around them is kept."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from planner.costmodel.calibration import DEFAULT_CALIBRATION as cal
from planner.costmodel.calibration import dev_fit_bounds, names
from planner.costmodel.trace import FORMULAS

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("cost_model_doc", ROOT / "scripts" / "cost_model_doc.py")
doc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doc)


def _section(text: str, name: str) -> str:
    return text.split(doc.BEGIN.format(name), 1)[1].split(doc.END.format(name), 1)[0]


def test_cost_model_doc_is_up_to_date():
    text = doc.DOC.read_text(encoding="utf-8")
    assert doc.render(text) == text, "docs/cost-model.md is out of date: run python scripts/cost_model_doc.py"


def test_every_formula_and_constant_is_in_the_doc():
    text = doc.render(doc.DOC.read_text(encoding="utf-8"))
    formulas, constants = _section(text, "formulas"), _section(text, "constants")
    assert FORMULAS and all(f"| `{fid}` |" in formulas for fid in FORMULAS)
    assert len(names()) >= 20 and all(n in constants for n in names())
    # a fitted constant shows its devfit bounds on its own row
    row = next(line for line in constants.splitlines() if line.startswith("| GEMM_SHAPE_DERATE |"))
    lo, hi = dev_fit_bounds()["GEMM_SHAPE_DERATE"].lo, dev_fit_bounds()["GEMM_SHAPE_DERATE"].hi
    assert f"| {cal.GEMM_SHAPE_DERATE:g} | {lo:g} - {hi:g} |" in row and "MAMF" in row


def test_the_prose_quotes_only_constants_that_exist():
    # `NAME` in the hand-written text must be a constant of planner/costmodel/calibration.py (a refit that removes
    # or renames one leaves no sentence about it behind)
    text = doc.DOC.read_text(encoding="utf-8")
    assert "`GEMM_SHAPE_DERATE`" in text and doc.unknown_constants(text) == []
    assert doc.unknown_constants(text + "\nsee `NO_SUCH_CONSTANT`.\n") == ["NO_SUCH_CONSTANT"]


def test_render_replaces_a_stale_table_and_keeps_the_prose():
    text = doc.DOC.read_text(encoding="utf-8")
    row = next(line for line in _section(text, "constants").splitlines() if line.startswith("| FIT_RESERVE_GIB |"))
    stale = text.replace(row, row.replace(f"| {cal.FIT_RESERVE_GIB:g} |", "| 123 |")).replace(
        "## Pipeline", "## Pipeline (hand-written)")
    assert stale != text and "| 123 |" in stale
    fixed = doc.render(stale)
    assert "| 123 |" not in fixed and row in fixed and "## Pipeline (hand-written)" in fixed


def test_check_mode_fails_on_an_out_of_date_file(tmp_path):
    stale = tmp_path / "cost-model.md"
    stale.write_text(doc.DOC.read_text(encoding="utf-8").replace("| `shape.tokens` |", "| `shape.tokenz` |"),
                     encoding="utf-8")
    script = [sys.executable, str(ROOT / "scripts" / "cost_model_doc.py")]
    proc = subprocess.run([*script, "--check", str(stale)], capture_output=True, text=True)
    assert proc.returncode == 1 and "out of date" in proc.stderr
    assert subprocess.run([*script, str(stale)], capture_output=True).returncode == 0
    assert subprocess.run([*script, "--check", str(stale)], capture_output=True).returncode == 0
    assert stale.read_text(encoding="utf-8") == doc.DOC.read_text(encoding="utf-8")


def test_a_missing_marker_is_refused():
    text = doc.DOC.read_text(encoding="utf-8").replace(doc.END.format("formulas"), "")
    with pytest.raises(SystemExit, match="generated: formulas"):
        doc.render(text)
