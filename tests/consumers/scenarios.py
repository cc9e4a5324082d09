"""Scenarios for `plan --launcher X --out DIR`: the search picks every knob for the target stack, the CLI
writes its files, and the consumer tests feed them to the real libraries (one checker subprocess per
consumer, shared with the other requests). Each scenario runs for every launcher that runs on its
hardware (planner.launchers.launchers_for); `CANNOT` lists the (scenario, launcher) pairs where the
launcher cannot run the model at all, and why (the CLI exits 2 with that reason).

Nothing runs at import: tests parametrize over `run_keys()` / `written_keys()` (names only, no search) and
call `scenario_run(name, launcher)` inside the test, which runs that one CLI call once per session."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from support import SOURCED_HF_CONFIGS_DIR

# the reference config.json files vendored with the tests (tests/data/reference/README.md)
REF = Path(__file__).resolve().parents[1] / "data" / "reference" / "hf_configs"


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
    assert p.is_file(), p  # vendored with the tests: a missing file is a broken checkout, not a skip
    return str(p)


SCENARIOS = [
    Scenario("llama70b-h100x64-s8k", "dense", _ref("llama-3.1-70b"), "h100x64", 8192, 128),  # issue 13
    Scenario("llama8b-h100x8", "dense", "llama-3.1-8b", "h100x8", 8192, 32),
    Scenario("gpt3-175b-a100x64-fp16", "dense", "gpt3-175b", "a100x64", 2048, 1536, "fp16"),  # issue 13
    Scenario("qwen2.5-72b-h100x64", "dense", "qwen2.5-72b", "h100x64", 4096, 256),
    Scenario("mistral7b-h100x16", "dense", "mistral-7b-v0.1", "h100x16", 4096, 128),
    Scenario("mixtral8x7b-h100x32", "moe", "mixtral-8x7b", "h100x32", 4096, 256),  # issue 13
    Scenario("qwen3-30b-a3b-h100x32", "moe", "qwen3-30b-a3b", "h100x32", 4096, 256),
    Scenario("deepseek-v3-h800x256", "moe", "deepseek-v3", "h800x256", 4096, 1024),
    # the search's batch-level EP overlap and flex / DeepEP choices on 1024 H100 (planner.search.dispatchers)
    Scenario("deepseek-v3-h100x1024", "moe", "deepseek-v3", "h100x1024", 4096, 1024),
    # GLM-4.5: q/k/v biases only, QK-norm, partial rotary 0.5, DeepSeek-V3's router and shared expert, MTP
    Scenario("glm-4.5-h100x256", "moe", str(SOURCED_HF_CONFIGS_DIR / "glm-4.5.json"), "h100x256", 4096, 1024),
    Scenario("llama8b-h100x16-s64k", "long-context", "llama-3.1-8b", "h100x16", 65536, 16),
    Scenario("llama70b-h100x128-s32k", "long-context", "llama-3.1-70b", "h100x128", 32768, 64),
    Scenario("llama70b-h100x64-fp8", "fp8", "llama-3.1-70b", "h100x64", 4096, 256, "fp8"),
    Scenario("llama405b-h100x512-fp8", "fp8", "llama-3.1-405b", "h100x512", 8192, 256, "fp8"),
    Scenario("qwen3-235b-b200x64-fp8", "fp8", "qwen3-235b-a22b", "b200x64", 4096, 512, "fp8"),  # FP8 MoE, Blackwell
    Scenario("llama8b-tpu-v5p-64", "tpu", "llama-3.1-8b", "tpu-v5px64", 4096, 256),
    Scenario("llama70b-tpu-v5p-256", "tpu", "llama-3.1-70b", "tpu-v5px256", 4096, 512),
    # long context on a TPU: the search's ring CP (cp 4), which maxtext 0.2.5 runs on the Tokamax kernels only
    Scenario("llama8b-tpu-v5p-64-s64k", "tpu", "llama-3.1-8b", "tpu-v5px64", 65536, 16),
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
    ("deepseek-v3-h100x1024", "torchtitan"): "load-balancing loss",
    ("deepseek-v3-h100x1024", "deepspeed"): "multi-token prediction",
    ("qwen3-235b-b200x64-fp8", "torchtitan"): "load-balancing loss",
    ("qwen3-235b-b200x64-fp8", "deepspeed"): "fp8",
    ("glm-4.5-h100x256", "torchtitan"): "partial rotary embeddings",
    ("glm-4.5-h100x256", "deepspeed"): "partial rotary embeddings",
    ("glm-4.5-h100x256", "maxtext"): "partial rotary embeddings",
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
        return run_id(self.scenario.name, self.launcher)

    @property
    def plan_doc(self) -> dict:
        return json.loads(self.files["plan.json"])


_TMP = tempfile.TemporaryDirectory(prefix="planner-scenarios-")
BY_NAME = {sc.name: sc for sc in SCENARIOS}


def run_id(name: str, launcher: str) -> str:
    return f"scenario-{name}-{launcher}"


@lru_cache(maxsize=None)
def run_keys() -> tuple[tuple[str, str], ...]:
    """(scenario name, launcher) for every scenario and every launcher of its hardware; no search is run."""
    from planner.catalog.hardware import parse_cluster
    from planner.launchers import launchers_for

    return tuple((sc.name, launcher) for sc in SCENARIOS for launcher in launchers_for(parse_cluster(sc.cluster)))


def written_keys(launcher: str) -> list[tuple[str, str]]:
    """The keys of `launcher` whose CLI call writes files: every one not in `CANNOT`
    (tests/launchers/test_launcher_target.py
    checks that these exit 0 and the `CANNOT` ones exit 2)."""
    return [k for k in run_keys() if k[1] == launcher and k not in CANNOT]


@lru_cache(maxsize=None)
def scenario_run(name: str, launcher: str) -> Run:
    """`plan --launcher X --out DIR` for one scenario (in-process CLI), once per session."""
    from click.testing import CliRunner

    from planner.ui.cli import main

    sc = BY_NAME[name]
    d = Path(_TMP.name) / f"{sc.name}-{launcher}"
    argv = ["--model", sc.model, "--cluster", sc.cluster, "--seq-len", str(sc.seq_len), "--gbs", str(sc.gbs),
            "--dtype", sc.dtype, "--launcher", launcher, "--out", str(d), "--top", "1", "--json"]
    res = CliRunner().invoke(main, argv)
    files = {p.name: p.read_text() for p in sorted(d.iterdir())} if d.is_dir() else {}
    return Run(sc, launcher, res.exit_code, res.stderr if hasattr(res, "stderr") else "", d, files)


def written(launcher: str) -> list[Run]:
    """The runs of `written_keys(launcher)`; each must have exited 0 (call inside a test or fixture)."""
    out = [scenario_run(*k) for k in written_keys(launcher)]
    bad = [(r.id, r.exit_code, r.stderr[-300:]) for r in out if r.exit_code != 0]
    assert not bad, bad
    return out
