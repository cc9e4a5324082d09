"""The evidence moe.moe_forward's comment cites for charging an MoE layer's host launches on top of its GPU time under
Megatron's batch-level EP overlap behind a dispatcher that waits on the host: every such run of runs/, scored as plan
validate scores it. A change of the cost model or of the runs that moves these figures fails here, so the comment is
brought up to date with it."""

from __future__ import annotations

import statistics

import pytest

from planner.analysis.validate import load_runs, run_inputs, validate_runs
from planner.catalog.data import data_dir
from planner.costmodel.moe import has_host_sync
from planner.specs.dims import ParallelDims

FILES = ("known_runs_dev.yaml", "known_runs_added.yaml", "moe_runs_added.yaml", "modelzoo_runs_added.yaml")


def _merged_sync_errors() -> dict[str, list[tuple[str, float]]]:
    """Step errors of the runs priced by the merged rule (moe.merged_fwd_bwd behind moe.has_host_sync), by source:
    Megatron-Bridge performance summaries, the Megatron-MoE-ModelZoo, anything else."""
    out: dict[str, list[tuple[str, float]]] = {"mbridge": [], "modelzoo": [], "other": []}
    for name in FILES:
        runs = {r["id"]: r for r in load_runs(data_dir("runs") / name)}
        for row in validate_runs(list(runs.values()))["runs"]:
            run = runs[row["id"]]
            ctx, _ = run_inputs(run)
            p = row["plan"]
            nmb = ParallelDims(dp=p["dp"]).local_batch(ctx.train.global_batch) // p["micro_batch"]
            if not (ctx.model.is_moe and ctx.train.moe_a2a_overlap and has_host_sync(ctx) and p["ep"] > 1 and nmb > 1):
                continue
            src = str(run.get("source", "")).lower()
            kind = ("mbridge" if "megatron-bridge performance summary" in src
                    else "modelzoo" if "megatron-moe-modelzoo" in src else "other")
            out[kind].append((row["id"], row["step_time_error"]))
    return out


@pytest.mark.slow
def test_the_merged_rule_holds_on_the_megatron_bridge_rows_and_not_on_the_modelzoo_ones():
    """moe.moe_forward: the 12 Megatron-Bridge rows miss by 1-23% (median 7%); the two ModelZoo BF16 DeepEP rows are
    +25% and +44%; no other source runs the overlap behind a host sync."""
    errs = _merged_sync_errors()
    assert errs["other"] == []
    mb = [abs(e) for _, e in errs["mbridge"]]
    assert len(mb) == 12, errs["mbridge"]
    assert 0.01 <= min(mb) and max(mb) <= 0.235, errs["mbridge"]
    assert 0.06 <= statistics.median(mb) <= 0.08, errs["mbridge"]
    zoo = sorted(e for _, e in errs["modelzoo"])
    assert len(zoo) == 2 and zoo[0] == pytest.approx(0.25, abs=0.01) and zoo[1] == pytest.approx(0.44, abs=0.01), zoo
