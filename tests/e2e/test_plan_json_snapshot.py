"""`plan --json` keeps its bytes through the cost-model refactor (stored by tests/snapshot_plan_json.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from snapshot_plan_json import COMMANDS, DIR, run  # noqa: E402


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_plan_json_bytes_unchanged(name):
    assert run(COMMANDS[name]) == (DIR / f"{name}.json").read_text()
