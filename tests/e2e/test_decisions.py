"""Issue 27: decisions a buyer can take -- per-cluster prices, repeated scalar options, error bands in
`plan compare`, --min-devices at the band's upper edge, explain --rank/--vs, calibrate warnings."""

from __future__ import annotations

import json
import re

import pytest
from support import one_line_error, plan_json, run_cli

from planner.catalog.hardware import parse_cluster
from planner.errors import InputError
from planner.ui.cli import main

SMALL = ("--model", "llama-8b", "--cluster", "h100x8")


# ------------------------------------------------------------------------------ repeated scalar options

@pytest.mark.parametrize("args, flag", [
    (["compare", "--model", "llama-8b", "--cluster", "h100x8", "--cluster", "a100x16", "--tokens", "1T",
      "--price-per-device-hour", "2.5", "--price-per-device-hour", "1.5"], "--price-per-device-hour"),
    ([*SMALL, "--framework", "fsdp", "--framework", "megatron"], "--framework"),
    (["compare", "--model", "llama-8b", "--cluster", "h100x8", "--framework", "fsdp", "--framework", "megatron"],
     "--framework"),
    ([*SMALL, "--tp", "2", "--tp", "2"], "--tp"),
    ([*SMALL, "--sp", "--no-sp"], "--sp/--no-sp"),
    (["explain", *SMALL, "--model", "llama-70b"], "--model"),
])
def test_a_repeated_scalar_option_is_an_error(args, flag):
    line = one_line_error(run_cli(*args))
    assert f"{flag} was given more than once: give it once" in line


def test_repeated_price_says_how_to_price_each_cluster():
    r = run_cli("compare", "--model", "llama-8b", "--cluster", "h100x8", "--price-per-device-hour", "2",
            "--price-per-device-hour", "1", "--tokens", "1T")
    assert "--cluster h100x16@2.5" in one_line_error(r)


def test_repeatable_options_still_repeat(tmp_path):
    r = run_cli("compare", "--model", "llama-8b", "--cluster", "h100x8", "--cluster", "a100x16", "--json")
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)["rows"]) == 2


# ------------------------------------------------------------------------------ per-cluster prices

def test_price_in_the_cluster_string_and_file(tmp_path):
    assert parse_cluster("h100x16@2.5").price_per_device_hour == 2.5
    assert parse_cluster("h100x16 @ 0").price_per_device_hour == 0.0
    assert parse_cluster("h100x16").price_per_device_hour is None
    f = tmp_path / "c.yaml"
    f.write_text("hardware: a100\ncount: 32\nprice_per_device_hour: 1.5\n")
    assert parse_cluster(str(f)).price_per_device_hour == 1.5
    assert parse_cluster(f"{f}@1.9").price_per_device_hour == 1.9  # the string's price replaces the file's
    for bad in ("h100x16@", "h100x16@abc", "h100x16@-1", "h100x16@inf", "h100x16@nan"):
        with pytest.raises(InputError, match="price after @ must be a number"):
            parse_cluster(bad)
    f.write_text("hardware: a100\ncount: 32\nprice_per_device_hour: cheap\n")
    with pytest.raises(InputError, match="price_per_device_hour must be a number"):
        parse_cluster(str(f))


def _compare(*args):
    r = run_cli("compare", "--model", "llama-8b", *args, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def _plan_cost(cluster, price):
    r = run_cli("--model", "llama-8b", "--cluster", cluster, "--tokens", "1T", "--price-per-device-hour", price,
            "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)["training_estimate"]["cost"]


def test_compare_charges_each_cluster_its_own_price():
    doc = _compare("--cluster", "h100x8@2.5", "--cluster", "a100x16@1.5", "--tokens", "1T")
    h100, a100 = (r["training_estimate"] for r in doc["rows"])
    assert (h100["price_per_device_hour"], a100["price_per_device_hour"]) == (2.5, 1.5)
    assert h100["price_source"] == a100["price_source"] == "cluster"
    assert doc["rows"][0]["cluster"]["price_per_device_hour"] == 2.5
    # the same figure `plan` gives for that cluster alone at that price
    assert h100["cost"] == pytest.approx(_plan_cost("h100x8", "2.5"), rel=1e-9)
    assert a100["cost"] == pytest.approx(_plan_cost("a100x16", "1.5"), rel=1e-9)
    # cost = device-hours x the cluster's price
    assert a100["cost"] == pytest.approx(a100["device_hours"] * 1.5, rel=1e-9)


def test_the_flag_prices_only_the_clusters_without_their_own():
    doc = _compare("--cluster", "h100x8@2.5", "--cluster", "a100x16", "--tokens", "1T",
                   "--price-per-device-hour", "1.2")
    h100, a100 = (r["training_estimate"] for r in doc["rows"])
    assert (h100["price_per_device_hour"], h100["price_source"]) == (2.5, "cluster")
    assert (a100["price_per_device_hour"], a100["price_source"]) == (1.2, "--price-per-device-hour")


def test_a_cluster_price_lets_currency_through():
    doc = _compare("--cluster", "h100x8@2.5", "--tokens", "1T", "--currency", "EUR")
    assert doc["rows"][0]["training_estimate"]["currency"] == "EUR"


# ------------------------------------------------------------------------------ bands in compare

def test_compare_rows_carry_the_step_time_band_and_the_cost_band():
    doc = _compare("--cluster", "h100x8@2.5", "--cluster", "a100x16@1.5", "--tokens", "1T")
    for row in doc["rows"]:
        b, e = row["step_time_band"], row["training_estimate"]
        assert b["low_s"] < row["step_time_s"] < b["high_s"]
        assert row["step_time_s"] * (1 + b["rel"]) == pytest.approx(b["high_s"])
        lo, hi = e["cost_band"]
        assert lo < e["cost"] < hi
        # cost is device-hours x price, device-hours ~ step time: the band's relative width carries over
        assert hi / e["cost"] == pytest.approx(1 + b["rel"], rel=0.01)
        assert e["effective_days_band"][0] < e["effective_days"] < e["effective_days_band"][1]


def test_compare_says_when_costs_lie_within_each_others_bands():
    far = _compare("--cluster", "h100x8@2.5", "--cluster", "a100x16@2.5", "--tokens", "1T")
    rows = far["rows"]
    assert not any("costs" in n for n in far["band_notes"]), far["band_notes"]
    # price the A100s so their cost lands on the H100s' cost: within each other's band
    h100, a100 = (r["training_estimate"] for r in rows)
    even = 2.5 * h100["cost"] / a100["cost"]
    near = _compare("--cluster", "h100x8@2.5", "--cluster", f"a100x16@{even:.4f}", "--tokens", "1T")
    assert len(near["band_notes"]) == 1
    assert "the costs of h100-sxm-80gbx8" in near["band_notes"][0]
    assert "cannot tell which is cheaper" in near["band_notes"][0]
    table = run_cli("compare", "--model", "llama-8b", "--cluster", "h100x8@2.5", "--cluster", f"a100x16@{even:.4f}",
                "--tokens", "1T", env={"COLUMNS": "200"})
    assert "cost band" in table.stdout and "note: the costs of" in table.stdout


def test_compare_without_price_compares_step_times():
    doc = _compare("--cluster", "h100x8", "--cluster", "h100x16", "--gbs", "256")
    assert all("cost_band" not in r.get("training_estimate", {}) for r in doc["rows"])
    a, b = doc["rows"]
    within = (b["step_time_band"]["low_s"] <= a["step_time_s"] <= b["step_time_band"]["high_s"]
              and a["step_time_band"]["low_s"] <= b["step_time_s"] <= a["step_time_band"]["high_s"])
    assert within == any("step times" in n for n in doc["band_notes"])



def test_compare_costs_each_cluster_with_the_stack_plan_chooses_for_it():
    # without --framework, a TPU row is MaxText's plan, as `plan` gives it (compare costed every row as Megatron:
    # Llama 3.1 70B on 64 v6e chips at TP32 PP2, 204 s, where `plan` gives 68 s), a GPU row Megatron's
    r = run_cli("compare", "--model", "llama-3.1-70b", "--cluster", "tpu-v6ex64", "--cluster", "h100x64", "--json")
    assert r.exit_code == 0, r.stderr
    tpu, gpu = json.loads(r.stdout)["rows"]
    assert (tpu["training"]["framework"], gpu["training"]["framework"]) == ("maxtext", "megatron")
    for row, cluster in ((tpu, "tpu-v6ex64"), (gpu, "h100x64")):
        alone = plan_json("--model", "llama-3.1-70b", "--cluster", cluster)[0]["plans"][0]
        assert row["step_time_s"] == alone["step_time_s"] and row["plan"] == alone["plan"], cluster


# ------------------------------------------------------------------------------ --min-devices

def _min_devices(target):
    r = run_cli("--model", "llama-8b", "--cluster", "h100x256", "--seq-len", "8192", "--gbs", "256", "--min-devices",
            "--target-step-s", str(target), "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.slow
def test_min_devices_meets_the_target_at_the_upper_edge_of_the_band():
    loose = _min_devices(4)  # llama-8b, seq 8192, gbs 256: 64 H100s step in ~3.3 s, ~3.7 s at the band's edge
    n, best = loose["min_devices"]["devices"], loose["plans"][0]
    assert loose["min_devices"]["bound"] == "step_time_band.high_s"
    assert loose["min_devices"]["margin_rel"] == pytest.approx(best["step_time_band"]["rel"])
    assert best["step_time_band"]["high_s"] <= 4
    # a target the point prediction of that count meets but its band's upper edge does not: more devices (midway
    # between the min-devices plan's own step and its band edge; plans[0] can be another plan of that count)
    step = loose["min_devices"]["step_time_s"]
    target = round(step * (1 + loose["min_devices"]["margin_rel"] / 2), 3)
    tight = _min_devices(target)
    assert tight["min_devices"]["devices"] > n
    assert tight["plans"][0]["step_time_band"]["high_s"] <= target


@pytest.mark.slow
def test_min_devices_sizes_even_pipeline_stages():
    from planner.catalog.models import get_model

    doc = _min_devices(4)
    layers = get_model("llama-8b").num_layers
    assert all(layers % p["plan"]["pp"] == 0 for p in doc["plans"])
    assert "divide the layers evenly" in doc["min_devices"]["layout_rule"]


def test_min_devices_does_not_step_over_a_count_between_powers_of_two():
    """With stages dividing 80 layers and DP dividing gbs 512, 384 and 448 admit no layout of Llama 3.1 70B,
    320 (TP4 PP5 x 16) does: the bisection must consider only counts that admit a layout."""
    from planner.catalog.models import get_model
    from planner.search.engine import SearchOptions, min_devices
    from planner.specs import TrainingSpec

    model, cluster = get_model("llama-3.1-70b"), parse_cluster("h100x1024")
    train = TrainingSpec(global_batch=512, seq_len=8192)
    opts = SearchOptions(top_k=1, even_stages=True, fixed={"tp": 4, "cp": 1, "offload_optimizer": False})
    n, res = min_devices(model, cluster, train, opts, target_step_s=14.5, margin_rel=0.0)  # 256: 15.5 s, 320: 13.7 s
    assert n == 320, n
    assert res.plans[0].plan.pp == 5 and res.plans[0].step_time_s <= 14.5


# ------------------------------------------------------------------------------ explain --rank / --vs

def _explain(*extra):
    r = run_cli("explain", "--model", "llama-8b", "--cluster", "h100x16", *extra, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def _term(rows, term):
    return next(r for r in rows if r["term"] == term)


def test_explain_rank_explains_the_plan_of_that_row():
    plan = json.loads(run_cli("--model", "llama-8b", "--cluster", "h100x16", "--json").stdout)
    doc = _explain("--rank", "2")
    assert doc["explained_rank"] == 2
    # the same ranking `plan` prints with the same flags
    assert [p["plan"] for p in doc["plans"]] == [p["plan"] for p in plan["plans"]]
    assert _term(doc["derivation"], "step_time_s")["value"] == pytest.approx(doc["plans"][1]["step_time_s"])
    assert _term(doc["derivation"], "step_time_s")["value"] != pytest.approx(doc["plans"][0]["step_time_s"])
    # its neighbours are #2's: "PP x2" of #2 has twice #2's pipeline depth
    first = _explain()
    assert doc["why_not"] != first["why_not"]


def test_explain_vs_gives_the_per_term_difference():
    doc = _explain("--vs", "2")
    vs = doc["vs"]
    assert (vs["rank"], vs["other_rank"]) == (1, 2)
    assert (vs["plan"], vs["other_plan"]) == (doc["plans"][0]["plan"], doc["plans"][1]["plan"])
    step = _term(vs["terms"], "step_time_s")
    assert step["value"] == pytest.approx(doc["plans"][0]["step_time_s"])
    assert step["other"] == pytest.approx(doc["plans"][1]["step_time_s"])
    assert step["diff"] == pytest.approx(step["other"] - step["value"]) and step["diff"] >= 0
    peak = _term(vs["terms"], "peak_gib")
    assert peak["other"] == pytest.approx(doc["plans"][1]["memory"]["peak_gib"], rel=1e-6)
    # the reverse comparison is the negation, term by term
    back = {t["term"]: t for t in _explain("--rank", "2", "--vs", "1")["vs"]["terms"]}
    for t in vs["terms"]:
        assert back[t["term"]]["diff"] == pytest.approx(-t["diff"])
    text = run_cli("explain", "--model", "llama-8b", "--cluster", "h100x16", "--vs", "2", env={"COLUMNS": "160"}).stdout
    assert "every term that differs (#2 - #1)" in text and "step time" in text.split("#2 - #1")[1]


@pytest.mark.parametrize("extra, says", [(["--vs", "1"], "is the explained plan itself"),
                                         (["--rank", "3", "--top", "1", "--pp", "1", "--tp", "1", "--cp", "1"],
                                          "--rank 3: only 1 plan was found")])
def test_explain_rank_out_of_range(extra, says):
    assert says in one_line_error(run_cli("explain", "--model", "llama-8b", "--cluster", "h100x16", *extra))


# ------------------------------------------------------------------------------ calibrate checks

def _nemo_runs():
    from planner.analysis.validate import load_runs
    from planner.catalog.data import data_dir

    return [r for r in load_runs(data_dir("runs") / "known_runs_dev.yaml") if r["id"].startswith("nemo2407-")]


def _inconsistent_runs(tmp_path):
    """NeMo 24.07's seven published H100 runs with every other step time halved and the rest doubled
    (x0.45 / x1.9): no set of physical constants explains them."""
    import yaml

    runs = [dict(r, measured=dict(r["measured"], step_time_s=r["measured"]["step_time_s"] * (0.45 if i % 2 else 1.9)))
            for i, r in enumerate(_nemo_runs())]
    f = tmp_path / "inconsistent.yaml"
    f.write_text(yaml.safe_dump(runs))
    return f


@pytest.mark.slow
def test_calibrate_refuses_constants_at_their_bounds(tmp_path):
    out = tmp_path / "cluster.yaml"
    line = one_line_error(run_cli("calibrate", "--runs", str(_inconsistent_runs(tmp_path)), "--out", str(out)))
    assert "calibrate wrote nothing" in line and "--force" in line
    # measured: GEMM ceiling 0.803 -> 1 (its bound) and attention 0.574 -> 2 (its bound)
    assert "gemm_efficiency_max ended at its bound 1" in line
    assert "calibration.attn_rel_efficiency ended at its bound 2" in line
    assert not out.exists()


@pytest.mark.slow
def test_calibrate_force_writes_and_warns(tmp_path):
    out = tmp_path / "cluster.yaml"
    r = run_cli("calibrate", "--runs", str(_inconsistent_runs(tmp_path)), "--out", str(out), "--force", "--json")
    assert r.exit_code == 0, r.stderr
    assert out.exists()
    doc = json.loads(r.stdout)
    assert any("ended at its bound" in w for w in doc["warnings"])
    # the leave-one-out error is worse than the defaults' (measured: 55.7% vs 51.1%)
    assert any(w.startswith("leave-one-out median |error|") for w in doc["warnings"])
    assert sum(line.startswith("warning: ") for line in r.stderr.splitlines()) == len(doc["warnings"])


def test_a_fit_that_makes_predictions_worse_is_refused():
    from planner.analysis.calibrate import FitResult
    from planner.analysis.calibrate_checks import not_improved, overfit
    from planner.catalog.hardware import get_hardware

    # the figures: 11.2% before, 15.6% after, leave-one-out 29%
    res = FitResult(get_hardware("h100"), {}, [0.112, -0.112, 0.112], [0.156, -0.156, 0.156],
                    [0.29, -0.29, 0.29])
    assert "11.2% before, 15.6% after" in not_improved(res)[0]
    assert "29.0% is worse than the defaults' 11.2%" in overfit(res)[0]
    good = FitResult(get_hardware("h100"), {}, [0.112, -0.1, 0.05], [0.02, -0.01, 0.01], [0.05, 0.04, -0.03])
    assert not_improved(good) == [] and overfit(good) == []


def test_calibrate_flags_runs_the_model_says_cannot_fit():
    from planner.analysis import calibrate as c
    from planner.analysis.calibrate_checks import unfit_runs

    run_ = next(r for r in _nemo_runs() if r["id"] == "nemo2407-llama2-70b-64gpu")
    # the same run written with TP 1 and PP 1: 70B parameters' weights, gradients and Adam states on one
    # device whatever ZeRO-1 shards
    unfit = dict(run_, id="typo-tp1", plan=dict(run_["plan"], tp=1, pp=1, vpp=1, dp=64))
    prepared, skipped = c.prepare_runs([run_, unfit])
    assert not skipped
    flags = unfit_runs(prepared)
    assert len(flags) == 1 and flags[0].startswith("run typo-tp1: the model says its plan does not fit")


def test_calibrate_says_when_a_two_node_all_reduce_was_capped():
    from support import NCCL_TESTS_DIR

    from planner.analysis import calibrate as c
    from planner.analysis.calibrate_checks import capped_links
    from planner.analysis.nccl_tests import fit_link, read_nccl_tests
    from planner.catalog.hardware import get_hardware

    hw = get_hardware("h100-sxm-80gb")
    two = fit_link(read_nccl_tests(f"{NCCL_TESTS_DIR}/h100-16gpu-2node-all_reduce.txt"), 1 << 20)
    one = fit_link(read_nccl_tests(f"{NCCL_TESTS_DIR}/h100-8gpu-1node-all_reduce.txt"), 1 << 20)
    upd, _ = c.link_updates(hw, 8, [two, one])
    assert upd["scale_out.achievable_fraction"] == 1.0  # 432 GB/s busbw over 8 x 50 GB/s NICs: capped
    notes = capped_links(hw, 8, [two, one])
    assert len(notes) == 1
    assert "busbw 432 GB/s is above the NIC line rate 400 GB/s" in notes[0] and "NCCL_ALGO=Ring" in notes[0]
    mi = get_hardware("mi300x")  # 350 of 400 GB/s: below the line rate, nothing to say
    fit = fit_link(read_nccl_tests(f"{NCCL_TESTS_DIR}/mi300x-16gpu-2node-all_reduce.txt"), 1 << 20)
    assert capped_links(mi, 8, [fit]) == []


# ------------------------------------------------------------------------------ small frictions

def test_header_line_says_what_was_planned():
    r = run_cli("--model", "mixtral-8x7b", "--cluster", "h100x64", "--launcher", "deepspeed", env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.stderr
    first = r.stdout.splitlines()[0]
    # Mixtral 8x7B: 46.7B parameters, 12.9B active; 1,024 x 4,096 = 4.19M tokens
    assert first == ("mixtral-8x7b: 46.7B parameters (12.9B active); global batch 1,024 x 4,096 = 4.19M tokens per "
                     "step; stack deepspeed, bf16; 64 x h100-sxm-80gb")
    # a launcher whose framework has another name says both (torchtitan runs the fsdp stack)
    r = run_cli("--model", "llama-3.1-8b", "--cluster", "h100x64", "--launcher", "torchtitan", env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[0] == ("llama-3.1-8b: 8.03B parameters; global batch 1,024 x 4,096 = 4.19M tokens per "
                                        "step; stack torchtitan (fsdp), bf16; 64 x h100-sxm-80gb")


def _plan_subprocess(args, **kw):
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {
        "PYTHONPATH": str(Path(__file__).parents[2])}
    return subprocess.Popen([sys.executable, "-m", "planner.ui.cli", *args], env=env, **kw)


@pytest.mark.slow
def test_a_closed_output_pipe_exits_0():
    """`plan ... | head -1`: the reader goes away before the table is written (its end of the pipe is closed
    at once), so rich's write fails with EPIPE; that is exit 0, not rich's SystemExit(1)."""
    import subprocess

    proc = _plan_subprocess(["--model", "llama-8b", "--cluster", "h100x8"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err


@pytest.mark.slow
def test_piped_output_follows_the_terminal_stderr_is_on():
    """stdout piped (`plan ... | less`), stderr on an 80-column terminal, COLUMNS unset: 80 columns."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import termios
    import threading

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))

    def drain():  # read what goes to the terminal (a spinner) so the child never blocks on a full pty
        try:
            while os.read(master, 4096):
                pass
        except OSError:
            pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = _plan_subprocess(["--model", "llama-8b", "--cluster", "h100x8"], stdout=subprocess.PIPE,
                                stderr=slave)
        out, _ = proc.communicate(timeout=300)
    finally:
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
    lines = out.decode().splitlines()
    assert proc.returncode == 0 and lines
    assert max(len(line) for line in lines) <= 80 and "Z ZeRO stage" in out.decode()  # the compact table


@pytest.mark.parametrize("flag, meant", [("--global-batch-size", "--gbs"), ("--micro-batch-size", "--mbs"),
                                         ("--tensor-model-parallel-size", "--tp"), ("--seq-length", "--seq-len")])
def test_megatron_style_flags_name_ours(flag, meant):
    line = one_line_error(run_cli(*SMALL, flag, "2"))
    assert f"No such option '{flag}': here it is {meant}" in line


@pytest.mark.parametrize("cluster, says", [
    ("h100x8x2", "the count is total devices, written once: 8 x 2 devices are h100x16"),
    ("dgx-h100x2", "the count is total devices (GPUs), not dgx-h100 systems: 2 dgx-h100 systems of 8 GPUs are "
                   "dgx-h100x16"),
    ("v5p-7", "Google's v5p-N counts TensorCores (2 per chip)"),
])
def test_cluster_counts_are_explained(cluster, says):
    assert says in one_line_error(run_cli("--model", "llama-8b", "--cluster", cluster))


def test_dgx_h100_and_google_slice_names():
    assert parse_cluster("dgx-h100x16").hardware.id == "h100-sxm-80gb"
    assert parse_cluster("dgx-h100x16").count == 16
    # Google's v5p-256 is 256 TensorCores = 128 chips (cloud.google.com/tpu/docs/v5p: 4x4x8, 256 cores, 128 chips)
    v5p = parse_cluster("v5p-256")
    assert (v5p.hardware.id, v5p.count, v5p.name) == ("tpu-v5p", 128, "v5p-256 (256 TensorCores = 128 chips)")
    assert parse_cluster("tpu-v4-8").count == 4
    # v5e and v6e count chips
    assert (parse_cluster("v5litepod-16").hardware.id, parse_cluster("v5litepod-16").count) == ("tpu-v5e", 16)
    assert parse_cluster("v6e-256").count == 256
    assert parse_cluster("tpu-v5px256").count == 256  # our own <hardware>x<chips> form is unchanged


def _hf_config(**drop):
    from planner.catalog.models import get_catalog_entry

    cfg = dict(get_catalog_entry("llama-3.1-8b").hf_config)
    cfg.pop("_name_or_path", None)
    for k in drop:
        cfg.pop(k)
    return cfg


def test_a_config_json_is_named_by_its_folder_or_the_hub_repo(tmp_path):
    from planner.catalog.models import load_model

    folder = tmp_path / "Meta-Llama-3.1-8B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_hf_config()))
    assert load_model(str(folder / "config.json")).name == "Meta-Llama-3.1-8B"
    snap = tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(_hf_config()))
    assert load_model(str(snap / "config.json")).name == "meta-llama/Llama-3.1-8B"
    (tmp_path / "my-8b.json").write_text(json.dumps(_hf_config()))
    assert load_model(str(tmp_path / "my-8b.json")).name == "my-8b"


def test_fields_left_to_hugging_face_defaults_are_said(tmp_path):
    f = tmp_path / "m" / "config.json"
    f.parent.mkdir()
    f.write_text(json.dumps(_hf_config(num_key_value_heads=None, vocab_size=None)))
    r = run_cli("--model", str(f), "--cluster", "h100x8", "--top", "1")
    assert r.exit_code == 0, r.stderr
    # HF LlamaConfig: num_key_value_heads defaults to num_attention_heads (32), vocab_size to 32000
    assert ("note: the model file does not give num_key_value_heads, vocab_size; Hugging Face's defaults are used: "
            "num_key_value_heads = 32, vocab_size = 32000") in r.stderr
    doc = json.loads(run_cli("--model", str(f), "--cluster", "h100x8", "--top", "1", "--json").stdout)
    assert doc["model"]["defaulted_fields"] == {"num_key_value_heads": 32, "vocab_size": 32000}
    whole = tmp_path / "w" / "config.json"
    whole.parent.mkdir()
    whole.write_text(json.dumps(_hf_config()))
    r = run_cli("--model", str(whole), "--cluster", "h100x8", "--top", "1")
    assert "note: the model file" not in r.stderr
    catalog = json.loads(run_cli("--model", "llama-8b", "--cluster", "h100x8", "--json").stdout)
    assert "defaulted_fields" not in catalog["model"]


def test_report_out_over_an_existing_file_needs_force(tmp_path):
    out = tmp_path / "r.html"
    out.write_text("mine")
    line = one_line_error(run_cli("report", *SMALL, "--out", str(out)))
    assert "exists: give --force to replace it" in line and out.read_text() == "mine"
    r = run_cli("report", *SMALL, "--out", str(out), "--force")
    assert r.exit_code == 0, r.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_storage_write_bandwidth_sets_the_checkpoint_cost():
    def estimate(*extra):
        r = run_cli("--model", "llama-8b", "--cluster", "h100x8", "--tokens", "1T", *extra, "--json")
        assert r.exit_code == 0, r.stderr
        return json.loads(r.stdout)["training_estimate"]

    default, slow = estimate(), estimate("--storage-write-bw", "2GB")
    # 8.03B params x 14 B (bf16 weights, fp32 master and Adam moments) = 112 GB: 56 s at 2 GB/s,
    # 1000x less at Llama 3's 2 TB/s default
    assert slow["checkpoint_s"] == pytest.approx(slow["checkpoint_bytes"] / 2e9)
    assert default["checkpoint_s"] == pytest.approx(default["checkpoint_bytes"] / 2e12)
    assert slow["goodput"] < default["goodput"]
    assert any("storage write bandwidth 2 GB/s" in a for a in slow["assumptions"])
    assert "add the training budget" in one_line_error(run_cli(*SMALL, "--storage-write-bw", "2GB"))
    assert "give the checkpoint store's aggregate write bandwidth" in one_line_error(
        run_cli(*SMALL, "--tokens", "1T", "--storage-write-bw", "fast"))


def test_plan_json_has_no_pipeline_schedule_for_pp_1(tmp_path):
    r = run_cli(*SMALL, "--pp", "1", "--out", str(tmp_path / "o"), "--emit", "megatron")
    assert r.exit_code == 0, r.stderr
    doc = json.loads((tmp_path / "o" / "plan.json").read_text())
    assert doc["plan"]["pp"] == 1 and "schedule" not in doc["plan"] and doc["pipeline"]["schedule"] == "none"
    from planner.specs import ParallelPlan

    assert ParallelPlan(**doc["plan"]).pp == 1  # the file still reads back as a plan


def test_docs_cli_names_every_option():
    """docs/cli.md's flag tables keep step with the CLI: every option of every command is named there."""
    from pathlib import Path


    doc = (Path(__file__).parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = [f"{name} {opt}" for name, cmd in {"plan": main, **main.commands}.items() for p in cmd.params
               for opt in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]
               if opt.startswith("--") and opt not in doc]
    assert missing == []


def test_a_large_fitted_overhead_is_warned_about():
    from types import SimpleNamespace

    from planner.analysis.calibrate import FitResult
    from planner.analysis.calibrate_checks import large_overhead
    from planner.catalog.hardware import get_hardware

    runs = [SimpleNamespace(measured_s=s) for s in (6.0, 6.25, 7.0)]  # median 6.25 s
    big = FitResult(get_hardware("h100"), {"calibration.step_overhead_s": (0.0, 2.8)}, [0.1], [0.05])
    assert "2.8 s is 45% of the median measured step (6.25 s)" in large_overhead(big, runs)[0]
    small = FitResult(get_hardware("h100"), {"calibration.step_overhead_s": (0.0, 0.3)}, [0.1], [0.05])
    assert large_overhead(small, runs) == []


def test_an_option_before_and_after_the_subcommand():
    line = one_line_error(run_cli("--model", "llama-70b", "explain", "--model", "llama-8b", "--cluster", "h100x8"))
    assert "--model was given before and after `explain` ('llama-70b' and 'llama-8b'): give it once" in line
    same = run_cli("--model", "llama-8b", "explain", "--model", "llama-8b", "--cluster", "h100x8", "--json")
    assert same.exit_code == 0, same.stderr
    # compare's repeatable --cluster takes both, the one before the subcommand first
    r = run_cli("--cluster", "h100x8", "compare", "--model", "llama-8b", "--cluster", "a100x8", "--json")
    doc = json.loads(r.stdout)
    assert [r["cluster"]["name"] for r in doc["rows"]] == ["h100-sxm-80gbx8", "a100-sxm-80gbx8"]


@pytest.mark.parametrize("launcher,runs", [("megatron", "1f1b, interleaved"), ("maxtext", "gpipe, interleaved"),
                                           ("deepspeed", "1f1b")])
def test_a_pinned_schedule_the_launcher_does_not_run_is_an_input_error(launcher, runs):
    """--schedule zb with a launcher that has no zero-bubble schedule is refused up front with the schedules it runs
    (exit 2), not searched to an empty result reported as a memory problem (exit 3, "the smallest peak any plan
    reaches is unknown")."""
    r = run_cli("--model", "llama-3.1-8b", "--cluster", "h100x16", "--launcher", launcher, "--schedule", "zb",
                "--pp", "2")
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [f"error: --launcher {launcher} does not run the zb pipeline schedule "
                                             f"(it runs {runs}): drop --schedule zb or choose another --launcher"]


def test_pins_no_launcher_layout_passes_are_an_input_error_not_a_memory_one():
    """Pinned knobs that every layout the launcher's rules allow excludes (DeepSpeed's pipeline engine has no
    context parallelism, its Ulysses runs on the data-parallel transformers path only; torchtitan's zero-bubble
    schedules want two stages per rank, a pinned zb schedule has one): exit 2 naming the pins and the launcher; a
    plan that no memory holds stays exit 3 with the smallest peak."""
    r = run_cli("--model", "llama-3.1-8b", "--cluster", "h100x16", "--launcher", "deepspeed", "--pp", "2", "--cp", "2")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("error: no layout of llama-3.1-8b on 16 h100-sxm-80gb with the pinned knobs (--pp 2 "
                                "--cp 2) can be run by --launcher deepspeed (the launchers' rules and layer splits "
                                "refuse every one; the closest candidate breaks: DeepSpeed runs llama-3.1-8b as the "
                                "Hugging Face model (Megatron-DeepSpeed cannot express RoPE scaling): data parallelism "
                                "under ZeRO and Ulysses sequence parallelism only, no tensor parallelism, pipeline "
                                "parallelism or expert parallelism (tp=1 pp=2 ep=1 cp=2)): pin fewer knobs or choose "
                                "another --launcher")
    r = run_cli("--model", "llama-3.1-8b", "--cluster", "h100x16", "--launcher", "torchtitan", "--schedule", "zb",
                "--pp", "2")
    assert r.exit_code == 2
    assert "with the pinned knobs (--pp 2 --schedule zb) can be run by --launcher torchtitan" in r.stderr
    r = run_cli("--model", "llama-3.1-405b", "--cluster", "h100x8", "--launcher", "megatron", "--tp", "8")
    # (the search repeated with the optimizer offloaded: the smallest peak is that search's, still above the HBM)
    low = re.search(r"the smallest peak any plan reaches is ([0-9.]+) GiB \(searched: [^)]*optimizer offload", r.stderr)
    assert r.exit_code == 3 and low and float(low.group(1)) > 80, r.stderr


@pytest.mark.parametrize("pins", [("--schedule", "interleaved"), ("--schedule", "gpipe"), ("--vpp", "2")])
def test_a_pinned_pipeline_schedule_pins_a_pipeline(pins):
    """`--schedule interleaved` (or gpipe, or --vpp 2) with pp free searches pipelines only: a PP1 plan, where no
    schedule runs, is not what was asked for (it used to rank first); where the other pins leave no room for pp >= 2
    the request is refused (exit 2)."""
    doc, _ = plan_json("--model", "llama-3.1-70b", "--cluster", "h100x64", "--gbs", "128", *pins)
    plans = [p["plan"] for p in doc["plans"]]
    assert plans and all(p["pp"] >= 2 for p in plans)
    assert all(p["schedule"] == (pins[1] if pins[0] == "--schedule" else "interleaved") for p in plans)
    r = run_cli("--model", "llama-3.1-8b", "--cluster", "h100x8", "--tp", "8", *pins)
    assert r.exit_code == 2
    assert f"{' '.join(pins)} asks for a pipeline (pp >= 2), which the other pinned knobs leave no room for on 8 " \
           "devices" in r.stderr
