"""Fixtures of the tests of one runs file: a module that names it as FILE gets its runs (`runs`) and plan validate's
document of them (`scored`), each read once per module."""

from __future__ import annotations

import pytest

from planner.analysis.validate import load_runs, validate_runs


@pytest.fixture(scope="module")
def runs(request) -> list[dict]:
    return load_runs(request.module.FILE)


@pytest.fixture(scope="module")
def scored(runs) -> dict:
    return validate_runs(runs)
