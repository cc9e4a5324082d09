"""What the tests share: where their fixtures live and the one way to run the CLI in-process.

Everything a test reads is under tests/data/, so a clone in any folder runs the suite (no read of the
workspace's shared/reference; tests/data/reference/README.md says what was copied from it and from which
sources). Tests call the CLI through `run_cli` (or the `cli` fixture of tests/conftest.py, the same function),
never through their own CliRunner set-up."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent  # the checkout whose `planner` package the subprocesses run
DATA_DIR = TESTS_DIR / "data"
REFERENCE_DIR = DATA_DIR / "reference"  # verbatim copies of shared/reference files, citations kept
HF_CONFIGS_DIR = REFERENCE_DIR / "hf_configs"
NCCL_TESTS_DIR = REFERENCE_DIR / "nccl_tests"
MODELS_YAML = REFERENCE_DIR / "models.yaml"

# the 19 Hugging Face config.json transcriptions of shared/reference/hf_configs (tests/data/reference/README.md)
HF_CONFIG_FILES = sorted(HF_CONFIGS_DIR.glob("*.json"))
N_HF_CONFIGS = 19


def run_cli(*args, env: dict[str, str] | None = None, input: str | bytes | None = None,
            catch_exceptions: bool = False) -> Result:
    """`plan ARGS...` in-process with stdout and stderr kept apart (`r.stdout`, `r.stderr`). An exception
    escapes unless `catch_exceptions` (a traceback is never an expected outcome). `env` adds variables for
    the call only."""
    from planner.ui.cli import main

    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:  # click >= 8.2 always separates stderr
        runner = CliRunner()
    return runner.invoke(main, [str(a) for a in args], env=env or {}, input=input,
                         catch_exceptions=catch_exceptions)


def plan_json(*args) -> tuple[dict, str]:
    """`plan ARGS... --json` that must succeed: (the parsed document, the raw stdout)."""
    r = run_cli(*args, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), r.stdout


def one_line_error(r: Result, code: int = 2, max_chars: int | None = None) -> str:
    """The product contract for bad input: exit `code`, no traceback, one line on stderr starting 'error: '
    (at most `max_chars` long when given)."""
    out = r.stdout + r.stderr
    assert r.exit_code == code, (r.exit_code, out[-2000:])
    assert "Traceback" not in out
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines[:5]
    assert lines[0].startswith("error: "), lines[0][:300]
    assert max_chars is None or len(lines[0]) <= max_chars, lines[0][:300]
    return lines[0]


PROCESS_LIMIT_BYTES = 500 * 2**20  # address space of a `cli_process` child


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (PROCESS_LIMIT_BYTES, PROCESS_LIMIT_BYTES))


def cli_process(*args, cwd=None, timeout: float = 10.0) -> subprocess.CompletedProcess:
    """The CLI of this checkout in a subprocess under 500 MB and `timeout` seconds (text stdout/stderr), for
    what an in-process run cannot show: memory and time bounds, signals, special files, exit on a broken pipe."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED="0")
    return subprocess.run([sys.executable, "-m", "planner.ui.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=_limits)


def one_line_error_proc(p: subprocess.CompletedProcess, code: int = 2) -> str:
    """`one_line_error` for a `cli_process` result: no traceback, no MemoryError, one short 'error: ' line."""
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr + p.stdout and "MemoryError" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) <= 700, lines[:3]
    return lines[0]
