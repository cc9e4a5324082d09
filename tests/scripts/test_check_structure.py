"""The structure rules on hand-written sources: scripts/check_structure.py's function length, and ruff's
complexity rules (C901, PLR0915) that replaced its radon check, with the project's own configuration."""

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_structure", ROOT / "scripts" / "check_structure.py")
cs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cs)


def _function(name: str, body_lines: int) -> str:
    return f"def {name}(x):\n" + "".join(f"    x = x + {i}\n" for i in range(body_lines - 1)) + "    return x\n"


def test_length_limit_is_inclusive_of_the_def_line():
    assert cs.long_functions(_function("ok", 59)) == []  # 60 lines with the def
    assert cs.long_functions(_function("too_long", 60)) == [(1, "too_long", 61)]


def test_nested_and_methods_are_measured():
    src = "class A:\n" + textwrap.indent(_function("m", 70), "    ")
    assert cs.long_functions(src) == [(2, "m", 71)]


def test_data_table_is_exempt():
    rows = "".join(f"        'k{i}': {i},\n" for i in range(80))
    src = f'def table():\n    """A table."""\n    return {{\n{rows}    }}\n'
    assert cs.long_functions(src) == []


def _branches(n: int) -> str:
    return "def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(n)) + "    return -1\n"


def _ruff(tmp_path, src: str) -> list[str]:
    """The rule codes ruff reports on `src` with the project's pyproject.toml."""
    f = tmp_path / "probe.py"
    f.write_text(src)
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--config", str(ROOT / "pyproject.toml"),
                        "--select", "C901,PLR0915", "--output-format", "concise", "--no-cache", str(f)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    return re.findall(r"^\S*probe\.py:\d+:\d+: (\w+)", r.stdout, re.M)


def test_complexity_limit_is_radons_grade_c(tmp_path):
    """Complexity 20 (radon grade C, the worst allowed before) passes; 21 (grade D) is C901."""
    assert _ruff(tmp_path, _branches(19)) == []
    assert _ruff(tmp_path, _branches(20)) == ["C901"]


def test_statement_limit(tmp_path):
    # ruff 0.17.6 reports 51 statements for 51 assignments and a return: 50 assignments and a return pass
    assert _ruff(tmp_path, _function("ok", 51)) == []
    assert _ruff(tmp_path, _function("many", 52)) == ["PLR0915"]


def test_main_exit_codes(tmp_path):
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(_function("g", 10))
    bad.write_text(_function("b", 70))
    assert cs.main([str(good)]) == 0
    assert cs.main([str(bad)]) == 1
    assert cs.main([str(tmp_path / "missing")]) == 2
