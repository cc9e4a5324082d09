"""End-to-end tests of the `plan` CLI (click CliRunner + one real subprocess)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from support import one_line_error, plan_json, run_cli

KNOBS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch", "zero_stage", "recompute",
         "sequence_parallel", "schedule")


@pytest.fixture(scope="module")
def llama70b():
    return plan_json("--model", "llama-70b", "--cluster", "a100x64")


def test_json_schema(llama70b):
    doc, _ = llama70b
    assert doc["model"]["params_total"] > 6e10
    assert 0 < doc["model"]["params_active"] <= doc["model"]["params_total"]
    assert doc["cluster"]["count"] == 64
    plans = doc["plans"]
    assert plans
    # best first; plans within the search's 0.5% tie band rank simplest-first (planner.search.engine.TIE_BAND)
    from planner.search.engine import TIE_BAND
    # the default memory margin (planner.costmodel.capacity): plans that do not leave the margin free rank after
    # every plan that does; among the plans keeping it, and among those that do not, the order is by time
    kept = [p["step_time_s"] for p in plans if p["within_memory_margin"]]
    edge = [p["step_time_s"] for p in plans if not p["within_memory_margin"]]
    flags = [p["within_memory_margin"] for p in plans]
    assert flags == sorted(flags, reverse=True)
    tiers = [p["memory_tier"] for p in plans]  # 0 keeps the margin, 1 the inner margin, 2 less (ranking.memory_tier)
    assert tiers == sorted(tiers) and [t == 0 for t in tiers] == flags
    for ts in (kept, edge):
        assert all(a <= b * TIE_BAND for a, b in zip(ts, ts[1:], strict=False))
    for p in plans:
        for k in KNOBS:
            assert k in p["plan"], k
        q = p["plan"]
        assert q["tp"] * q["pp"] * q["cp"] * q["dp"] == 64
        assert p["step_time_s"] > 0 and p["tokens_per_s_per_device"] > 0 and 0 < p["mfu"] < 1
        assert p["memory"]["peak_gib"] > 0
        assert isinstance(p["time_breakdown"], dict) and p["time_breakdown"]
        assert p["fits"] is True
        assert isinstance(p["warnings"], list)


def test_deterministic(llama70b):
    _, out = llama70b
    _, out2 = plan_json("--model", "llama-70b", "--cluster", "a100x64")
    assert out == out2


@pytest.mark.parametrize("flags,expect", [
    (["--tp", "8", "--pp", "2"], {"tp": 8, "pp": 2}),
    (["--tp", "4", "--mbs", "1", "--recompute", "full"], {"tp": 4, "micro_batch": 1, "recompute": "full"}),
    (["--pp", "4", "--vpp", "2"], {"pp": 4, "vpp": 2, "schedule": "interleaved"}),
    (["--dp", "8", "--zero", "1", "--no-sp"], {"dp": 8, "zero_stage": 1, "sequence_parallel": False}),
])
def test_fixed_flags_honoured(flags, expect):
    doc, _ = plan_json("--model", "llama-70b", "--cluster", "a100x64", *flags)
    assert doc["plans"]
    for p in doc["plans"]:
        for k, v in expect.items():
            assert p["plan"][k] == v, (k, p["plan"])
        q = p["plan"]
        assert q["tp"] * q["pp"] * q["cp"] * q["dp"] == 64


def test_moe_fixed_ep():
    doc, _ = plan_json("--model", "mixtral-8x7b", "--cluster", "h100x64", "--ep", "8")
    assert all(p["plan"]["ep"] == 8 for p in doc["plans"])


def test_models_and_clusters_lists():
    for cmd, must in (("models", "llama"), ("clusters", "a100")):
        r = run_cli(cmd)
        assert r.exit_code == 0
        lines = [line for line in r.stdout.splitlines() if line.strip()]
        assert len(lines) >= 3
        assert any(must in line for line in lines)
        first = [line.split()[0] for line in lines]
        assert len(set(first)) == len(first)  # one entry per line


def test_version():
    r = run_cli("--version")
    assert r.exit_code == 0
    assert "plan" in r.stdout and any(ch.isdigit() for ch in r.stdout)


@pytest.mark.parametrize("args,needle", [
    (["--model", "llama-70", "--cluster", "a100x64"], "did you mean"),
    (["--model", "llama-70b", "--cluster", "zz999x64"], ""),
    (["--model", "llama-70b", "--cluster", "a100x0"], ""),
    (["--model", "llama-70b", "--cluster", "a100x-5"], ""),
    (["--model", "llama-70b", "--cluster", "a100x1000000000"], ""),
    (["--model", "llama-70b", "--cluster", "a100x64", "--tp", "8", "--pp", "8", "--dp", "8"], ""),
])
def test_bad_inputs(args, needle):
    err = one_line_error(run_cli(*args))
    assert needle in err.lower()


BAD_FILES = {
    "malformed.yaml": b"name: x\n  num_layers: [1, 2\n: : :\n",
    "empty.yaml": b"",
    "binary.bin": bytes(range(256)) * 4,
    "unknown_type.json": json.dumps({"model_type": "no_such_arch_xyz", "hidden_size": 64}).encode(),
    "zero_layers.yaml": b"name: z\nnum_layers: 0\nhidden_size: 64\nnum_heads: 4\nnum_kv_heads: 4\nhead_dim: 16\n"
                        b"ffn_hidden_size: 128\nvocab_size: 1000\n",
    "bad_heads.json": json.dumps({"model_type": "llama", "hidden_size": 100, "num_attention_heads": 7,
                                  "num_key_value_heads": 7, "num_hidden_layers": 2, "intermediate_size": 256,
                                  "vocab_size": 1000}).encode(),
}


@pytest.mark.parametrize("fname", sorted(BAD_FILES))
def test_bad_model_files(tmp_path, fname):
    f = tmp_path / fname
    f.write_bytes(BAD_FILES[fname])
    one_line_error(run_cli("--model", str(f), "--cluster", "a100x8"))


def test_directory_as_model(tmp_path):
    one_line_error(run_cli("--model", str(tmp_path), "--cluster", "a100x8"))


def test_no_feasible_plan():
    r = run_cli("--model", "llama-405b", "--cluster", "a100x8")
    err = one_line_error(r, code=3)
    assert "GiB" in err and "smallest" in err
    assert "more devices" in err


def test_validate_bad_runs(tmp_path):
    f = tmp_path / "runs.yaml"
    f.write_text("runs: [ {model: 1, \n")
    one_line_error(run_cli("validate", "--runs", str(f)))


def test_subprocess_entry_point():
    exe = shutil.which("plan")
    cmd = [exe] if exe else [sys.executable, "-m", "planner.ui.cli"]
    out = subprocess.run(cmd + ["--model", "llama-70b", "--cluster", "a100x64", "--json", "--top", "2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["plans"]
    bad = subprocess.run(cmd + ["--model", "nonexistent-model", "--cluster", "a100x64"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error:") and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_moe_capacity_factor_flag():
    # a dense model has no experts to cap: one line, exit 2; on an MoE model the flag reaches the plan
    err = one_line_error(run_cli("--model", "llama-3.1-8b", "--cluster", "h100x8", "--moe-capacity-factor", "1.25"))
    assert "MoE" in err and "drop the flag" in err
    one_line_error(run_cli("--model", "mixtral-8x7b", "--cluster", "h100x64", "--moe-capacity-factor", "0"))
    capped, _ = plan_json("--model", "mixtral-8x7b", "--cluster", "h100x64", "--top", "1", "--moe-capacity-factor",
                          "1.25")
    dropless, _ = plan_json("--model", "mixtral-8x7b", "--cluster", "h100x64", "--top", "1")
    assert capped["plans"][0]["step_time_s"] > dropless["plans"][0]["step_time_s"]
    assert any("dropless MoE" in w for w in dropless["plans"][0]["warnings"])
