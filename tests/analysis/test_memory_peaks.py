"""Peak memory against every published, measured peak in runs/*.yaml (issue 22: item 4 and its "Must show": at
least 15 published peaks, median |error| <= 10%, p90 <= 20%).

The peaks: 12 rows of runs/known_runs_dev.yaml (torchtitan's Dec 2024 H100 benchmark) and the 15 rows of
runs/known_runs_memory.yaml: the six other rows of the same benchmark's Tables 1-6, Trainy's two torchtitan Llama
3.1 8B rows on 32 and 64 H200s (June 2025), and seven torchtitan Llama 3 8B rows of torchao's float8/MX training
benchmarks on 8 H100s, 8 MI300Xs and 8 B200s (2025), each citing its table and row. All of them are torchtitan's
logged `memory:` figure, the caching allocator's peak *reserved* bytes (torchtitan DeviceMemoryMonitor
max_reserved_gib; the file's header comments say why), compared with the planner's `peak_gib`.

Figures (plan validate's own statistics: median, p90 at the floor index int(0.9 * (n - 1))): at main cf67687, 27
peaks, median |error| 8.7%, p90 46.2%; branch memory median 6.6%, p90 22.4%; branch mem3 (torchtitan 9dec370's
pipeline micro-batches on the 405B Table 5 rows, the loss-parallel cross entropy's 16 B per logit with TP, the
overhead refitted, no allocator fragmentation where the run's allocator had expandable segments, torch pipelining's
per-micro-batch receive buffers) median 4.8%, p90 14.8%: both targets met. Left: the 405B FSDP 1 x CP 8 row (-15%)
and 1F1B row (-12%) under-predicted, torchao's B200 rows over-predicted (+16% to +17%) while the same torchtitan
configuration on MI300X lands at +5%.
"""

from __future__ import annotations

import json
import statistics

import pytest
from support import run_cli

from planner.analysis.validate import check_runs, load_runs, validate_runs
from planner.catalog.data import data_dir
from planner.errors import InputError

RUN_FILES = sorted(data_dir("runs").glob("known_runs*.yaml"))
MEMORY_FILE = data_dir("runs") / "known_runs_memory.yaml"

# Issue 22 targets over the published peaks
TARGET_MEDIAN = 0.10
TARGET_P90 = 0.20
# The worst row, held as a regression bound: 0.518 (torchao's B200 float8 tensorwise row, +51.8%) -> 0.308 (branch
# memory: the 405B 1F1B row, -30.8%) -> 0.173 (branch mem3: torchao's B200 float8 tensorwise row, +17.3%, whose
# torchtitan configuration lands at +4.9% on MI300X)
REGRESSION_WORST = 0.18
# runs/known_runs_memory.yaml alone (15 peaks no constant was fitted on, the issue's "published runs that are not in
# the repository" until this branch): median 0.217 -> 0.083 (branch memory) -> 0.048 (mem3); p90 0.495 -> 0.224 ->
# 0.156 (the B200 rows); held as regression bounds
REGRESSION_NEW_MEDIAN = 0.06
REGRESSION_NEW_P90 = 0.17


def _published_peaks() -> list[dict]:
    return [r for f in RUN_FILES for r in load_runs(f)
            if (r.get("measured") or {}).get("peak_memory_gib") is not None]


@pytest.fixture(scope="module")
def scored():
    runs = _published_peaks()
    return runs, validate_runs(runs)


def test_at_least_twenty_published_peaks_all_scored(scored):
    runs, res = scored
    assert len(runs) >= 27  # 12 dev rows + 15 in known_runs_memory.yaml; the issue asks for at least 15
    assert len({r["id"] for r in runs}) == len(runs)  # ids unique across the run files
    assert res["skipped"] == [] and len(res["runs"]) == len(runs)
    for run, row in zip(runs, res["runs"], strict=True):
        assert row["id"] == run["id"]
        assert row["measured_peak_memory_gib"] == run["measured"]["peak_memory_gib"]
        assert row["peak_memory_gib"] > 0
        err = row["peak_memory_gib"] / row["measured_peak_memory_gib"] - 1
        assert row["peak_memory_error"] == pytest.approx(err)


def test_peak_memory_median_meets_the_target(scored):
    _, res = scored
    errs = sorted(abs(r["peak_memory_error"]) for r in res["runs"])
    assert res["summary"]["peak_memory"]["n"] == len(errs)
    assert res["summary"]["peak_memory"]["median_abs_error"] == pytest.approx(statistics.median(errs))
    assert statistics.median(errs) <= TARGET_MEDIAN, errs  # 0.087 -> 0.066 (branch memory)


def test_peak_memory_p90_meets_the_target(scored):
    # the target, p90 <= 20%: met on branch mem3 (0.462 -> 0.224 on branch memory -> 0.148)
    _, res = scored
    errs = sorted(abs(r["peak_memory_error"]) for r in res["runs"])
    p90 = errs[int(0.9 * (len(errs) - 1))]
    assert res["summary"]["peak_memory"]["p90_abs_error"] == pytest.approx(p90)
    assert p90 <= TARGET_P90, errs
    assert errs[-1] <= REGRESSION_WORST, errs


def test_memory_file_regression_bounds():
    res = validate_runs(load_runs(MEMORY_FILE))
    errs = sorted(abs(r["peak_memory_error"]) for r in res["runs"])
    assert len(errs) == 15
    assert statistics.median(errs) <= REGRESSION_NEW_MEDIAN, errs
    assert errs[int(0.9 * (len(errs) - 1))] <= REGRESSION_NEW_P90, errs


def test_memory_rows_carry_stack_and_citation():
    runs = load_runs(MEMORY_FILE)
    assert len(runs) == 15
    for r in runs:
        assert r["measured"]["peak_memory_gib"] > 0 and r["measured"]["step_time_s"] > 0, r["id"]
        assert any(url in r["source"] for url in ("https://github.com/pytorch/torchtitan/blob/main/benchmarks/",
                                                  "https://github.com/pytorch/ao/blob/main/docs/")), r["id"]
        assert " row " in r["source"], r["id"]  # the table row the figures are read from
        assert r["reliability"] == "A"
        assert r["stack"]["framework"] == "torchtitan" and isinstance(r["stack"]["torch_compile"], bool), r["id"]
        if r["train"]["dtype"] == "fp8":
            # torchao float8's dynamic tensorwise scaling, or the MX row's mxfp8
            assert r["stack"]["fp8_recipe"] in ("tensorwise", "mxfp8"), r["id"]
        else:
            assert r["stack"]["fp8_recipe"] is None, r["id"]


def test_dev_and_memory_rows_do_not_overlap():
    # the new file adds rows of the same tables: none may repeat a dev row's figures
    def key(r: dict) -> tuple:
        return r["model"]["hidden_size"], r["devices"], r["train"]["seq_len"], r["measured"]["peak_memory_gib"]

    dev = load_runs(data_dir("runs") / "known_runs_dev.yaml")
    dev_keys = {key(r) for r in dev if (r.get("measured") or {}).get("peak_memory_gib") is not None}
    assert not dev_keys & {key(r) for r in load_runs(MEMORY_FILE)}


def test_cli_validate_reads_every_memory_row():
    r = run_cli("validate", "--runs", MEMORY_FILE, "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    ids = [run["id"] for run in load_runs(MEMORY_FILE)]
    assert [row["id"] for row in out["runs"]] == ids
    assert out["summary"]["skipped"] == 0 and out["summary"]["peak_memory"]["n"] == len(ids)
    for row in out["runs"]:
        assert row["framework"] == "fsdp" and row["peak_memory_gib"] > 0, row["id"]


def test_expandable_segments_drop_the_allocator_fragmentation():
    # torchao's B200 and H100 rows ran torchtitan's run_train.sh (expandable_segments:True, CUDA); the MI300X rows ran
    # a ROCm build without expandable segments (runs/known_runs_memory.yaml header): the same configuration, the
    # classic allocator's ALLOCATOR_FRAGMENTATION only on the latter
    from planner.costmodel.calibration import DEFAULT_CALIBRATION as cal

    rows = {r["id"]: r for r in load_runs(MEMORY_FILE)}
    b200 = rows["torchao-torchtitan-llama3-8b-8xb200-fsdp-compile-bf16"]
    assert b200["stack"]["expandable_segments"] is True
    assert rows["torchao-torchtitan-llama3-8b-8xmi300x-fsdp-compile-bf16"]["stack"]["expandable_segments"] is False
    classic = json.loads(json.dumps(b200)) | {"id": "b200-classic-allocator"}
    classic["stack"]["expandable_segments"] = False
    on, off = validate_runs([b200, classic])["runs"]
    allocated = sum(on["memory"][k] for k in ("weights_gib", "grads_gib", "optimizer_gib", "activations_gib",
                                               "buffers_gib"))
    assert on["memory"]["overhead_gib"] == pytest.approx(2.5)  # Stack.overhead_gib alone
    extra = (cal.ALLOCATOR_FRAGMENTATION - 1) * allocated
    assert off["peak_memory_gib"] - on["peak_memory_gib"] == pytest.approx(extra)
    bad = json.loads(json.dumps(b200))
    bad["stack"]["expandable_segments"] = "yes"
    with pytest.raises(InputError, match="stack.expandable_segments must be true, false or null"):
        check_runs([bad], "runs.yaml")
