"""Issue 17's smaller items: cost options shared by plan/compare/report, cluster overrides, models from
the local Hugging Face cache, options before the subcommand, progress on stderr, legends."""

from __future__ import annotations

import io
import json
import time

import pytest
from rich.console import Console
from support import one_line_error, run_cli

SMALL = ("--model", "llama-8b", "--cluster", "h100x8")


# ----------------------------------------------------------------------------------------- cost options

@pytest.mark.parametrize("cmd", [[], ["compare"], ["report", "--out", "r.html"]])
def test_price_without_tokens_is_an_error_everywhere(cmd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_cli(*cmd, *SMALL, "--price-per-device-hour", "2")
    assert "add the training budget, e.g. --tokens 15T" in one_line_error(r)
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("cmd", [[], ["compare"], ["report", "--out", "r.html"]])
def test_cost_options_accepted_everywhere(cmd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_cli(*cmd, *SMALL, "--tokens", "1T", "--price-per-device-hour", "2", "--currency", "EUR")
    assert r.exit_code == 0, r.stderr
    out = (tmp_path / "r.html").read_text() if cmd and cmd[0] == "report" else r.stdout
    assert " EUR" in out


def test_cost_is_device_hours_times_price():
    plan = json.loads(run_cli(*SMALL, "--tokens", "1T", "--price-per-device-hour", "2", "--json").stdout)
    cmp = json.loads(run_cli("compare", *SMALL, "--tokens", "1T", "--price-per-device-hour", "2", "--json").stdout)
    e, c = plan["training_estimate"], cmp["rows"][0]["training_estimate"]
    assert e["cost"] == pytest.approx(2 * e["device_hours"])
    assert c["cost"] == pytest.approx(e["cost"])  # same plan, same estimate in both commands


@pytest.mark.parametrize("extra,needle", [
    (["--tokens", "1T", "--currency", "EUR"], "add --price-per-device-hour"),
    (["--tokens", "1T", "--price-per-device-hour", "2", "--currency", "E\x1b[31mUR"], "short label"),
])
def test_currency_rules(extra, needle):
    assert needle in one_line_error(run_cli(*SMALL, *extra))


# ----------------------------------------------------------------------------------------- clusters

def test_nic_override_changes_the_network_only():
    base = json.loads(run_cli("--model", "llama-70b", "--cluster", "h100x64", "--tp", "8", "--pp", "1", "--top", "1",
                          "--json").stdout)
    slow = json.loads(run_cli("--model", "llama-70b", "--cluster", "h100x64", "--tp", "8", "--pp", "1", "--top", "1",
                          "--nic-bw", "100Gb", "--json").stdout)
    assert base["cluster"]["nic_GBps"] == 50.0 and slow["cluster"]["nic_GBps"] == 12.5  # 100 Gbit/s = 12.5 GB/s
    b, s = base["plans"][0], slow["plans"][0]
    assert s["time_breakdown"]["tp_comm_s"] == pytest.approx(b["time_breakdown"]["tp_comm_s"])  # NVLink unchanged
    assert s["time_breakdown"]["dp_comm_s"] > b["time_breakdown"]["dp_comm_s"]


def test_scale_up_override_and_units():
    doc = json.loads(run_cli(*SMALL, "--scale-up-bw", "225GB", "--top", "1", "--json").stdout)
    assert doc["cluster"]["scale_up_GBps"] == 225.0 and "scale-up 225 GB/s" in doc["cluster"]["name"]
    assert "with a unit" not in one_line_error(run_cli(*SMALL, "--nic-bw", "0Gb"))
    assert "400Gb (gigabits/s)" in one_line_error(run_cli(*SMALL, "--nic-bw", "400"))


def test_cluster_file_with_only_the_differences(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("hardware: {base: h100, scale_out: {unidir_GBps_per_device: 12.5}}\ncount: 64\n")
    a = json.loads(run_cli("--model", "llama-70b", "--cluster", str(f), "--top", "1", "--json").stdout)
    b = json.loads(run_cli("--model", "llama-70b", "--cluster", "h100x64", "--nic-bw", "12.5GB", "--top", "1",
                       "--json").stdout)
    assert a["cluster"]["nic_GBps"] == 12.5 and a["cluster"]["hbm_capacity_gib"] == 79.65
    assert a["cluster"]["name"] == "h100-sxm-80gbx64 (changed by c.yaml)"
    assert a["plans"][0]["step_time_s"] == b["plans"][0]["step_time_s"]
    f.write_text("hardware: {base: h100, scale_out: {nic: 1}}\ncount: 64\n")
    assert "unknown hardware field 'nic'" in one_line_error(run_cli("--model", "llama-70b", "--cluster", str(f)))


# ----------------------------------------------------------------------------------------- models

def fake_hf_cache(root, repo="acme/tiny-llama", commit="0123abcd"):
    snap = root / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / commit
    snap.mkdir(parents=True)
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
           "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
           "vocab_size": 32000, "max_position_embeddings": 2048, "tie_word_embeddings": False}
    (snap / "config.json").write_text(json.dumps(cfg))
    (root / "hub" / f"models--{repo.replace('/', '--')}" / "refs").mkdir()
    (root / "hub" / f"models--{repo.replace('/', '--')}" / "refs" / "main").write_text(commit)
    return cfg


def test_model_from_local_hf_cache(tmp_path):
    cfg = fake_hf_cache(tmp_path)
    r = run_cli("--model", "acme/tiny-llama", "--cluster", "h100x8", "--top", "1", "--json",
            env={"HF_HOME": str(tmp_path), "HF_HUB_CACHE": ""})
    assert r.exit_code == 0, r.stderr
    m = json.loads(r.stdout)["model"]
    assert m["name"] == "acme/tiny-llama" and m["num_layers"] == cfg["num_hidden_layers"]
    assert m["hidden_size"] == 2048
    r = run_cli("--model", "acme/other", "--cluster", "h100x8", env={"HF_HOME": str(tmp_path), "HF_HUB_CACHE": ""})
    assert "neither in the catalog nor in the local Hugging Face cache" in one_line_error(r)


def test_missing_model_file_says_not_found():
    r = run_cli("--model", "./nope.json", "--cluster", "a100x8")
    assert "model file './nope.json' not found" in one_line_error(r)


def test_models_explains_unversioned_aliases():
    out = run_cli("models").stdout
    assert "llama-70b = llama-3.1-70b" in out and "llama-7b = llama-2-7b" in out


def test_versioned_spelling_resolves():
    a = json.loads(run_cli("--model", "llama2-7b", "--cluster", "h100x8", "--top", "1", "--json").stdout)
    assert a["model"]["name"] == "llama-2-7b"


# ----------------------------------------------------------------------------------------- subcommands

def test_options_before_the_subcommand():
    before = run_cli("--model", "llama-8b", "--cluster", "h100x8", "explain", "--json")
    after = run_cli("explain", "--model", "llama-8b", "--cluster", "h100x8", "--json")
    assert before.exit_code == 0, before.stderr
    assert before.stdout == after.stdout
    err = one_line_error(run_cli("--model", "llama-8b", "--cluster", "h100x8", "--tokens", "1T", "explain"))
    assert "--tokens was given before `explain`, which has no such option" in err


def test_rank_n_reason_and_bars_describe_plan_n():
    doc = json.loads(run_cli(*SMALL, "--json").stdout)
    out = run_cli(*SMALL, "--rank", "3").stdout
    p3 = doc["plans"][2]
    assert " ".join(f"Why #3: {p3['reason']}".split()) in " ".join(out.split())
    assert "Time per step, plan #3" in out and f"{p3['time_breakdown']['compute_s']:.3f} s" in out


@pytest.mark.slow
def test_validate_legend_explains_rel():
    out = run_cli("validate").stdout
    assert "rel: how reliable the published figure is (A primary source" in out


# ----------------------------------------------------------------------------------------- progress

def test_progress_only_on_a_terminal_and_never_on_stdout():
    from planner.ui.progress import progress

    term = io.StringIO()
    with progress("working", True, Console(file=term, force_terminal=True), show_after_s=0.0):
        deadline = time.monotonic() + 5
        while not term.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "working" in term.getvalue()
    quiet = io.StringIO()
    with progress("working", False, Console(file=quiet, force_terminal=True), show_after_s=0.0):
        pass
    piped = io.StringIO()
    with progress("working", True, Console(file=piped, force_terminal=False), show_after_s=0.0):
        pass
    assert quiet.getvalue() == "" and piped.getvalue() == ""
    hostile = io.StringIO()  # a name from a file is shown as text: no markup, no escape sequences
    with progress("model [bold]x\x1b[31m", True, Console(file=hostile, force_terminal=True), show_after_s=0.0):
        deadline = time.monotonic() + 5
        while "model" not in hostile.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "[bold]x?[31m" in hostile.getvalue() and "\x1b[31m" not in hostile.getvalue()


def test_text_output_does_not_depend_on_timing():
    a = run_cli(*SMALL, "--top", "2")
    b = run_cli(*SMALL, "--top", "2")
    assert a.stdout == b.stdout and a.stderr == b.stderr == ""
    assert " s)" not in a.stdout.splitlines()[-1]  # the search line carries no wall-clock time
