"""Same input, same bytes: `plan ... --json` gives identical output under machine load and any hash seed.

The CP-SAT stage balancer once stopped on wall-clock time (0.3 s, 2 workers) and gave 3 different
outputs in 5 runs of the command below; it now runs one worker, a fixed seed and a deterministic-time
budget (planner.search.stages), and since 2026-11-28 this command's stage problems (61 layers over 8 stages, 271
splits the flags express) are scored split by split instead (stages.ENUMERATION_BUDGET). This test runs the command
10 times, each with a different PYTHONHASHSEED, while two other searches and a busy loop load the machine, and
compares the bytes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CMD = ["--model", "deepseek-v3", "--cluster", "h100x1024", "--pp", "8", "--schedule", "1f1b", "--json"]
LOAD_SEARCHES = (["--model", "deepseek-v3", "--cluster", "h800x256", "--json"],
                 ["--model", "llama-3.1-405b", "--cluster", "h100x16384", "--seq-len", "8192", "--gbs", "2048",
                  "--json"])
BUSY_LOOP = "while True:\n    pass\n"


def _env(seed: int) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": str(seed)}


def _plan(args: list[str], seed: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner.ui.cli", *args], cwd=ROOT, env=_env(seed),
                          capture_output=True, timeout=600)


def _start_load() -> list[subprocess.Popen]:
    """A busy loop and two searches restarted in a loop, each in its own process group."""
    loops = [BUSY_LOOP]
    for args in LOAD_SEARCHES:
        argv = ", ".join(repr(a) for a in args)
        loops.append(f"import subprocess, sys\nwhile True:\n"
                     f"    subprocess.run([sys.executable, '-m', 'planner.ui.cli', {argv}], capture_output=True)\n")
    return [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=_env(100 + i), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True) for i, code in enumerate(loops)]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the loop and the search it is running (own session)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)


@pytest.mark.slow
def test_json_bytes_identical_over_10_runs_under_load():
    load = _start_load()
    try:
        outs = []
        for seed in range(10):
            r = _plan(CMD, seed)
            assert r.returncode == 0, r.stderr.decode()[-2000:]
            outs.append(r.stdout)
    finally:
        _stop(load)
    assert all(o == outs[0] for o in outs), [i for i, o in enumerate(outs) if o != outs[0]]
    # the plans carry a solved stage split: the test exercises the stage solver, not only the closed-form model
    assert b'"stage_assignment"' in outs[0]
