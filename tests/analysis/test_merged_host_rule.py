"""The evidence moe.moe_forward's comment cites for charging an MoE layer's host launches on top of its GPU time under
Megatron's batch-level EP overlap behind a dispatcher that waits on the host: every run of runs/ the rule prices
(moe.merged_fwd_bwd behind moe.has_host_sync, on the plan plan validate scores). A change of the cost model or of the
runs that moves these figures fails here, so the comment is brought up to date with it."""

from __future__ import annotations

import statistics

import pytest
from support import scored_runs

from planner.costmodel.base import plan_shape
from planner.costmodel.moe import has_host_sync, merged_fwd_bwd

FILES = ("known_runs_dev.yaml", "known_runs_added.yaml", "moe_runs_added.yaml", "modelzoo_runs_added.yaml")


def _merged_sync_errors() -> dict[str, list[tuple[str, float]]]:
    """Step errors of the runs the merged rule prices, by source: Megatron-Bridge performance summaries, the
    Megatron-MoE-ModelZoo, anything else."""
    out: dict[str, list[tuple[str, float]]] = {"mbridge": [], "modelzoo": [], "other": []}
    for name in FILES:
        for run, ctx, _, ev in scored_runs(name):
            if not (ctx.model.is_moe and has_host_sync(ctx) and merged_fwd_bwd(ctx, plan_shape(ctx, ev.plan))):
                continue
            src = str(run.get("source", "")).lower()
            kind = ("mbridge" if "megatron-bridge performance summary" in src
                    else "modelzoo" if "megatron-moe-modelzoo" in src else "other")
            out[kind].append((run["id"], ev.step_time_s / run["measured"]["step_time_s"] - 1.0))
    return out


@pytest.mark.slow
def test_the_merged_rule_holds_on_the_megatron_bridge_rows_and_not_on_the_modelzoo_ones():
    """moe.moe_forward: the 12 Megatron-Bridge rows miss by 1-23% (median 7%); the two ModelZoo BF16 DeepEP rows are
    +25% and +44%, its MXFP8 HybridEP GB300 row (per-layer CUDA graphs, added 2026-11-29) +49%, its MXFP8 HybridEP
    GB200 4k row (per-layer CUDA graphs, activation offloading; added 2026-11-29) +20%; no other source runs the
    overlap behind a host sync."""
    errs = _merged_sync_errors()
    assert errs["other"] == []
    mb = [abs(e) for _, e in errs["mbridge"]]
    assert len(mb) == 12, errs["mbridge"]
    assert 0.01 <= min(mb) and max(mb) <= 0.235, errs["mbridge"]
    assert 0.06 <= statistics.median(mb) <= 0.08, errs["mbridge"]
    zoo = sorted(e for _, e in errs["modelzoo"])
    assert len(zoo) == 4 and zoo[0] == pytest.approx(0.20, abs=0.01) and zoo[1] == pytest.approx(0.25, abs=0.01), zoo
    assert zoo[2] == pytest.approx(0.44, abs=0.01) and zoo[3] == pytest.approx(0.49, abs=0.01), zoo
