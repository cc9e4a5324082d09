"""Shared plumbing of the consumer tests: skip-or-fail when a library is missing, and one checker
subprocess per consumer (fresh interpreter: the libraries' global state, env vars such as
XLA_FLAGS and WORLD_SIZE, and their heavy imports stay out of the pytest process)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REQUIRE = os.environ.get("PLANNER_REQUIRE_CONSUMERS") == "1"


def require(*modules: str) -> None:
    """Skip when a consumer library is not installed; fail instead under PLANNER_REQUIRE_CONSUMERS=1."""
    def absent(m: str) -> bool:
        try:
            return importlib.util.find_spec(m) is None
        except ModuleNotFoundError:  # a dotted name whose parent package is missing
            return True

    missing = [m for m in modules if absent(m)]
    if missing:
        msg = f"consumer library not installed: {', '.join(missing)} (bash .ci/install_validators.sh)"
        if REQUIRE:
            pytest.fail(msg + " and PLANNER_REQUIRE_CONSUMERS=1", pytrace=False)
        pytest.skip(msg)


def run_checker(script: str, requests: list[dict], env: dict[str, str] | None = None,
                timeout: float = 600) -> dict[str, dict]:
    """Run tests/consumers/<script> on `requests` in a fresh interpreter; {id: result}."""
    with tempfile.TemporaryDirectory() as tmp:
        req, out = Path(tmp) / "requests.json", Path(tmp) / "results.json"
        req.write_text(json.dumps(requests))
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("PYTHONWARNINGS", "ignore")
        proc = subprocess.run([sys.executable, str(HERE / script), str(req), str(out)], env=full_env,
                              capture_output=True, text=True, timeout=timeout, cwd=tmp)
        if proc.returncode != 0 or not out.exists():
            pytest.fail(f"{script} exited {proc.returncode}:\n{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}",
                        pytrace=False)
        return json.loads(out.read_text())


def accepted(results: dict, rid: str) -> dict:
    r = results[rid]
    assert r["ok"], f"{rid} rejected by the consumer: {r['error']}"
    return r


def rejected(results: dict, rid: str, *needles: str) -> str:
    r = results[rid]
    assert not r["ok"], f"{rid} was accepted but must be rejected"
    for n in needles:
        assert n.lower() in r["error"].lower(), f"{rid}: expected {n!r} in the rejection: {r['error']}"
    return r["error"]
