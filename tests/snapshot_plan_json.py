"""`plan --json` snapshots (issue 14 refactor guard): the exact bytes of a few searches, stored in
tests/data/snapshots/plan_json/ before the cost model was restructured. Regenerate only with a commit that says
which number changed and why:  PYTHONPATH=$PWD python tests/snapshot_plan_json.py"""

from __future__ import annotations

from pathlib import Path

DIR = Path(__file__).parent / "data" / "snapshots" / "plan_json"

# commands whose search needs no CP-SAT stage solve (layers divide over every pp tried), so the bytes do
# not depend on a solver's time budget
COMMANDS = {
    "llama-3.1-8b-h100x16": ["--model", "llama-3.1-8b", "--cluster", "h100x16"],
    "mixtral-8x7b-h100x64": ["--model", "mixtral-8x7b", "--cluster", "h100x64"],
    "llama-3.1-70b-tpu-v5px256-maxtext": ["--model", "llama-3.1-70b", "--cluster", "tpu-v5px256",
                                          "--framework", "maxtext"],
    "llama-3.1-8b-h100x16-fsdp-32k": ["--model", "llama-3.1-8b", "--cluster", "h100x16", "--framework", "fsdp",
                                      "--seq-len", "32768", "--gbs", "64"],
    "qwen3-30b-a3b-h100x32-fsdp": ["--model", "qwen3-30b-a3b", "--cluster", "h100x32", "--framework", "fsdp"],
}


def run(args: list[str]) -> str:
    from click.testing import CliRunner

    from planner.ui.cli import main

    res = CliRunner().invoke(main, [*args, "--json"])
    if res.exit_code != 0:
        raise RuntimeError(f"plan {' '.join(args)} exited {res.exit_code}: {res.output}")
    return res.output


if __name__ == "__main__":
    DIR.mkdir(parents=True, exist_ok=True)
    for name, args in COMMANDS.items():
        (DIR / f"{name}.json").write_text(run(args))
        print(name)
