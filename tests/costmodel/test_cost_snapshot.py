"""The cost model reproduces its stored snapshot (tests/data/snapshots/cost_snapshot.json, made by
tests/snapshot_cost.py before the issue-14 refactor): every number of about 50 varied plans, to a
relative 1e-12, and every string exactly. A change here must come with a commit that names the term
that moved and why, and regenerates the snapshot."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from snapshot_cost import CASES, SNAPSHOT, evaluate_case  # noqa: E402

STORED = json.loads(SNAPSHOT.read_text())["cases"]


def _diff(path: str, want, got, out: list[str]) -> None:
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(want) != set(got):
            out.append(f"{path}: keys {sorted(want) if isinstance(want, dict) else want} != "
                       f"{sorted(got) if isinstance(got, dict) else got}")
            return
        for k in want:
            _diff(f"{path}.{k}", want[k], got[k], out)
    elif isinstance(want, list):
        if not isinstance(got, (list, tuple)) or len(want) != len(got):
            out.append(f"{path}: {want} != {got}")
            return
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            _diff(f"{path}[{i}]", w, g, out)
    elif isinstance(want, bool) or want is None or isinstance(want, str):
        if want != got or type(want) is not type(got):
            out.append(f"{path}: {want!r} != {got!r}")
    elif isinstance(want, (int, float)):
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isclose(
                want, got, rel_tol=1e-12, abs_tol=0.0):
            out.append(f"{path}: {want!r} != {got!r}")
    else:
        out.append(f"{path}: unexpected stored type {type(want)}")


def test_snapshot_lists_the_generator_cases():
    assert [r["case"] for r in STORED] == json.loads(json.dumps(CASES))
    assert len(STORED) >= 50


@pytest.mark.parametrize("row", STORED, ids=[f"{i}-{r['case']['model']}-{r['case']['cluster']}"
                                              for i, r in enumerate(STORED)])
def test_cost_model_matches_snapshot(row):
    got = json.loads(json.dumps(evaluate_case(row["case"]), default=float))
    out: list[str] = []
    _diff("", {k: v for k, v in row.items() if k != "case"}, got, out)
    assert not out, "\n".join(out[:20])


def test_snapshot_with_shared_contexts():
    """The per-search caches of a shared Context give the same numbers as fresh ones, in any order."""
    cache: dict = {}
    for row in reversed(STORED):
        got = json.loads(json.dumps(evaluate_case(row["case"], cache), default=float))
        out: list[str] = []
        _diff("", {k: v for k, v in row.items() if k != "case"}, got, out)
        assert not out, f"{row['case']}\n" + "\n".join(out[:20])
