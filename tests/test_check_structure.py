"""scripts/check_structure.py (issue 14's structure check) on hand-written sources: what it flags and
what it lets through."""

import importlib.util
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def test_complexity_grades_follow_radon():
    assert cs.complex_blocks(_branches(19)) == []  # complexity 20: grade C
    assert cs.complex_blocks(_branches(20)) == [(1, "f", "D", 21)]


def test_main_exit_codes(tmp_path):
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(_function("g", 10))
    bad.write_text(_branches(40))
    assert cs.main([str(good)]) == 0
    assert cs.main([str(bad)]) == 1
    assert cs.main([str(tmp_path / "missing")]) == 2
