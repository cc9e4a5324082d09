"""runs/moe_memory_added.yaml: the measured peak memory of Megatron-LM's own MoE CI jobs (issue 23 item 4, MoE
memory), read and scored whole. Each row's measured figure is PyTorch's peak allocated bytes on the job's last rank
(Megatron's mem-max-allocated-bytes), held against the last pipeline stage's allocated memory
(validate.compared_peak_gib). Held out: no constant is fitted on them and the memory band does not read them
(planner.analysis.membands.RUN_FILES)."""

from __future__ import annotations

import statistics

import pytest

from planner.analysis.validate import compared_peak_gib, markdown_table, run_inputs, validate_runs
from planner.catalog.data import data_dir
from planner.costmodel import Context, evaluate
from planner.search.engine import SearchOptions, search

FILE = data_dir("runs") / "moe_memory_added.yaml"


def test_every_row_is_read_and_cites_its_source(runs):
    assert len({r["id"] for r in runs}) == len(runs) == 4
    for r in runs:
        assert "commit 55ac708" in r["source"] and "https://github.com/NVIDIA/Megatron-LM/tree/" in r["source"], r["id"]
        meas = r["measured"]
        assert meas["peak_memory_of"] == "allocated_last_rank" and "step_time_s" not in meas, r["id"]
        # the golden value's bytes, as GiB to the recorded precision
        assert meas["peak_memory_gib"] == pytest.approx(int(meas["derived_from"].split()[1]) / 2**30, abs=5e-4)
        assert r["train"]["attention_dropout"] == 0.0 and r["stack"]["attention"] == "unfused", r["id"]


def test_moe_peaks_within_the_stated_error(runs):
    """Measured 55.98 / 53.62 / 45.83 / 38.37 GiB; predicted (last stage, allocated) -4.1% / -0.3% / -0.7% / +10.5%:
    median 2.4%. The three jobs with an MTP module were -10.4% / -6.9% / -8.3% while the module's layer kept no
    unfused scores in the model (memory.stage_activations now keeps them as a layer of the stage does). The one
    without it (hidden 512, FP8, CUDA graphs of the attention, recorded, not priced) is 10% above its peak,
    unexplained."""
    res = validate_runs(runs)
    assert {r["id"] for r in res["runs"]} == {r["id"] for r in runs}
    errors = {r["id"]: r["peak_memory_error"] for r in res["runs"]}
    assert all(r["peak_memory_compared"]["of"] == "allocated_last_rank" for r in res["runs"])
    assert all(r["fits"] for r in res["runs"])
    assert max(abs(e) for e in errors.values()) <= 0.12, errors
    assert statistics.median(abs(e) for e in errors.values()) <= 0.05, errors
    assert max(abs(e) for i, e in errors.items() if "-mtp-" in i) <= 0.05, errors
    # the text table shows the compared figure and says which it is
    table = markdown_table(res)
    assert "measured as allocated_last_rank" in table
    row = next(line for line in table.splitlines() if line.startswith("| mlmci-moe-mla-mtp-tp2pp2vpp4ep4-fp8"))
    compared = next(r for r in res["runs"] if r["id"].startswith("mlmci-moe-mla-mtp-tp2pp2vpp4ep4-fp8"))
    assert f"| {compared['peak_memory_compared']['predicted_gib']:.1f} |" in row


def test_scores_with_a_dropout_that_did_not_run_miss_by_more_than_60_percent(runs):
    """The jobs set --attention-dropout 0.0. Scored as if the dropout's mask and output were kept too (Korthikanti et
    al. 2022's 5 a s^2 b, the planner's only rule before train.attention_dropout), the same plans come out at 1.8-2.2x
    the measured peaks: the unfused scores are most of these jobs' activations."""
    for run in runs:
        ctx, fixed = run_inputs(run)
        ev = search(ctx, SearchOptions(fixed=fixed, top_k=1)).plans[0]
        with_dropout = Context(ctx.model, ctx.cluster, ctx.train.model_copy(update={"attention_dropout": True}))
        ratio = compared_peak_gib(with_dropout, evaluate(with_dropout, ev.plan), "allocated_last_rank") \
            / run["measured"]["peak_memory_gib"]
        assert ratio > 1.6, (run["id"], ratio)


def test_a_device_peak_is_compared_with_the_device_peak(runs):
    ctx, fixed = run_inputs(runs[0])
    ev = search(ctx, SearchOptions(fixed=fixed, top_k=1)).plans[0]
    assert compared_peak_gib(ctx, ev, "device") == ev.memory["peak_gib"]
    # the last stage's allocated memory leaves out the framework's own memory the device peak carries
    assert compared_peak_gib(ctx, ev, "allocated_last_rank") < ev.memory["peak_gib"] - ev.memory["overhead_gib"] + 1e-9
