"""Emitted launch configs of published runs' plans, compared byte for byte with tests/golden/<case>/.

A change to an emitter shows up here as a diff to review. After an intended change, regenerate with
    UPDATE_GOLDEN=1 python -m pytest tests/emit/test_emit_golden.py
and commit the new files (`skipped.json` holds the launchers that cannot express the plan, and why).
The consumer tests (tests/consumers/, marker `consumers`) load the same plans into the real libraries.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from consumers.cases import GOLDEN_CASES

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def _expected_files(case) -> dict[str, str]:
    files, skipped = case.emit()
    out = dict(files)
    out["skipped.json"] = json.dumps(skipped, indent=2, sort_keys=True) + "\n"
    return out


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=lambda c: c.name)
def test_emitted_files_match_golden(case):
    want = _expected_files(case)
    d = GOLDEN / case.name
    if UPDATE:
        d.mkdir(parents=True, exist_ok=True)
        for stale in d.iterdir():
            if stale.name not in want:
                stale.unlink()
        for name, text in want.items():
            (d / name).write_text(text, encoding="utf-8")
    assert d.is_dir(), f"no golden files for {case.name}: run UPDATE_GOLDEN=1 pytest {__file__}"
    have = {p.name: p.read_text(encoding="utf-8") for p in d.iterdir() if p.is_file()}
    assert sorted(have) == sorted(want), "emitted file set differs from the golden one (UPDATE_GOLDEN=1 to accept)"
    for name in want:
        assert have[name] == want[name], f"{case.name}/{name} differs from the golden file (UPDATE_GOLDEN=1 to accept)"


def test_golden_cases_are_the_published_plans():
    runs = {c.name for c in GOLDEN_CASES}
    assert runs == {"nemo2407-llama2-70b-64gpu", "dgxc-llama31-405b-bf16-1152xh100", "deepseek-v3-2048xh800",
                    "torchtitan-llama31-8b-8xh100-fsdp"}
    for c in GOLDEN_CASES:
        assert c.plan.devices == c.cluster.count
