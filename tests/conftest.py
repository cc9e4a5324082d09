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


DEFAULT_DESELECT = ("slow", "consumers")  # markers of pyproject.toml left out of the README's command


def _readme_run(config: pytest.Config) -> bool:
    """The README's `python -m pytest -q`: no test paths named (pyproject's testpaths) and no -m."""
    return not config.option.markexpr and config.args_source == pytest.Config.ArgsSource.TESTPATHS


# modules that import a real library (torch) when imported: the README's run does not even collect them (their
# tests are marked consumers, so the second CI run, -m "slow or consumers", runs them)
HEAVY_IMPORT_MODULES = {"test_memory_real_code.py"}


def pytest_ignore_collect(collection_path, config: pytest.Config) -> bool | None:
    if collection_path.name in HEAVY_IMPORT_MODULES and _readme_run(config):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The README's command runs the fast suite (a few minutes on 2 cores): tests marked slow or consumers are
    deselected, and CI runs them (`-m "slow or consumers"`). Naming files or giving -m runs what is named."""
    if not _readme_run(config):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (drop if any(item.get_closest_marker(m) for m in DEFAULT_DESELECT) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _readme_run(config) and terminalreporter.stats.get("deselected"):
        terminalreporter.write_line('deselected: the slow and consumer tests; CI runs them: '
                                    'python -m pytest -q -m "slow or consumers"')
