"""Scenarios for `plan --launcher X --out DIR`: the search picks every knob for the target stack, the CLI
writes its files, and the consumer tests feed them to the real libraries (one checker subprocess per
consumer, shared with the other requests). Each scenario runs for every launcher that runs on its
hardware (planner.emit.capabilities.launchers_for); `CANNOT` lists the (scenario, launcher) pairs where the
launcher cannot run the model at all, and why (the CLI exits 2 with that reason)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

REF = Path(__file__).resolve().parents[3] / "shared" / "reference" / "hf_configs"


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # dense, moe, long-context, fp8, tpu
    model: str
    cluster: str
    seq_len: int
    gbs: int
    dtype: str = "bf16"


def _ref(name: str) -> str:
    p = REF / f"{name}.json"
    return str(p) if p.exists() else name  # the catalog entry of the same name otherwise


SCENARIOS = [
    Scenario("llama70b-h100x64-s8k", "dense", _ref("llama-3.1-70b"), "h100x64", 8192, 128),  # issue 13
    Scenario("llama8b-h100x8", "dense", "llama-3.1-8b", "h100x8", 8192, 32),
    Scenario("gpt3-175b-a100x64-fp16", "dense", "gpt3-175b", "a100x64", 2048, 1536, "fp16"),  # issue 13
    Scenario("qwen2.5-72b-h100x64", "dense", "qwen2.5-72b", "h100x64", 4096, 256),
    Scenario("mistral7b-h100x16", "dense", "mistral-7b-v0.1", "h100x16", 4096, 128),
    Scenario("mixtral8x7b-h100x32", "moe", "mixtral-8x7b", "h100x32", 4096, 256),  # issue 13
    Scenario("qwen3-30b-a3b-h100x32", "moe", "qwen3-30b-a3b", "h100x32", 4096, 256),
    Scenario("deepseek-v3-h800x256", "moe", "deepseek-v3", "h800x256", 4096, 1024),
    Scenario("llama8b-h100x16-s64k", "long-context", "llama-3.1-8b", "h100x16", 65536, 16),
    Scenario("llama70b-h100x128-s32k", "long-context", "llama-3.1-70b", "h100x128", 32768, 64),
    Scenario("llama70b-h100x64-fp8", "fp8", "llama-3.1-70b", "h100x64", 4096, 256, "fp8"),
    Scenario("llama405b-h100x512-fp8", "fp8", "llama-3.1-405b", "h100x512", 8192, 256, "fp8"),
    Scenario("llama8b-tpu-v5p-64", "tpu", "llama-3.1-8b", "tpu-v5px64", 4096, 256),
    Scenario("llama70b-tpu-v5p-256", "tpu", "llama-3.1-70b", "tpu-v5px256", 4096, 512),
]

# launchers that cannot run the model at all (plan-free capability rules): the CLI must say so, exit 2
CANNOT = {
    ("gpt3-175b-a100x64-fp16", "torchtitan"): "q/k/v biases",
    ("qwen2.5-72b-h100x64", "torchtitan"): "q/k/v biases",
    ("mistral7b-h100x16", "torchtitan"): "sliding windows",
    ("mixtral8x7b-h100x32", "torchtitan"): "load-balancing loss",
    ("qwen3-30b-a3b-h100x32", "torchtitan"): "load-balancing loss",
    ("deepseek-v3-h800x256", "torchtitan"): "load-balancing loss",
    ("deepseek-v3-h800x256", "deepspeed"): "multi-token prediction",
    ("llama70b-h100x64-fp8", "torchtitan"): "float8",
    ("llama70b-h100x64-fp8", "deepspeed"): "fp8",
    ("llama405b-h100x512-fp8", "deepspeed"): "fp8",
}


@dataclass(frozen=True)
class Run:
    scenario: Scenario
    launcher: str
    exit_code: int
    stderr: str
    out: Path
    files: dict  # name -> text

    @property
    def id(self) -> str:
        return f"scenario-{self.scenario.name}-{self.launcher}"

    @property
    def plan_doc(self) -> dict:
        return json.loads(self.files["plan.json"])


_TMP = tempfile.TemporaryDirectory(prefix="planner-scenarios-")


@lru_cache(maxsize=None)
def runs() -> tuple[Run, ...]:
    """`plan --launcher X --out DIR` for every scenario and every launcher of its hardware (in-process CLI)."""
    from click.testing import CliRunner

    from planner.ui.cli import main
    from planner.emit.capabilities import launchers_for
    from planner.catalog.hardware import parse_cluster

    out = []
    for sc in SCENARIOS:
        for launcher in launchers_for(parse_cluster(sc.cluster)):
            d = Path(_TMP.name) / f"{sc.name}-{launcher}"
            argv = ["--model", sc.model, "--cluster", sc.cluster, "--seq-len", str(sc.seq_len), "--gbs", str(sc.gbs),
                    "--dtype", sc.dtype, "--launcher", launcher, "--out", str(d), "--top", "1", "--json"]
            res = CliRunner().invoke(main, argv)
            files = {p.name: p.read_text() for p in sorted(d.iterdir())} if d.is_dir() else {}
            out.append(Run(sc, launcher, res.exit_code, res.stderr if hasattr(res, "stderr") else "", d, files))
    return tuple(out)


def written(launcher: str) -> list[Run]:
    return [r for r in runs() if r.launcher == launcher and r.exit_code == 0]
