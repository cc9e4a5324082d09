"""Whole-process wall time of `plan report` against the same `plan` (target: report <= 3x plan).

Run from a checkout: python benchmarks/report_speed.py [repeats]
Runs this checkout's code (`python -m planner.ui.cli` with PYTHONPATH = the checkout), best of `repeats`.
A measuring script, not a test: wall time depends on the machine and its load.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    ("deepseek-v3 on h800x256", ["--model", "deepseek-v3", "--cluster", "h800x256"]),
    ("llama-70b on a100x64", ["--model", "llama-70b", "--cluster", "a100x64"]),
]
TARGET_RATIO = 3.0


def _best_s(argv: list[str], repeats: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "planner.ui.cli", *argv], check=True, capture_output=True, env=env,
                       cwd=ROOT)
        times.append(time.perf_counter() - t0)
    return min(times)


def main(repeats: int = 3) -> int:
    print(f"{'case':<28} {'plan':>8} {'report':>8} {'ratio':>6}  ok (<= {TARGET_RATIO:g}x)")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CASES:
            plan_s = _best_s(args + ["--json"], repeats)
            report_s = _best_s(["report", *args, "--out", str(Path(tmp) / "r.html")], repeats)
            ratio = report_s / plan_s
            bad += ratio > TARGET_RATIO
            ok = "yes" if ratio <= TARGET_RATIO else "NO"
            print(f"{name:<28} {plan_s:>7.2f}s {report_s:>7.2f}s {ratio:>6.2f}  {ok}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
