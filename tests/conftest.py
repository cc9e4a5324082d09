"""Shared fixtures. tests/ itself is on sys.path (pytest inserts the folder of this rootdir-level conftest),
so test modules import their helpers from `support` (tests/support.py) wherever they sit."""

from __future__ import annotations

import pytest
from support import run_cli


@pytest.fixture(scope="session")
def cli():
    """`cli("--model", "llama-70b", "--cluster", "a100x64", env={...})`: the CLI in-process, stdout and stderr
    apart, exceptions not caught (support.run_cli)."""
    return run_cli
