"""DualPipeV (torch 2.13 ScheduleDualPipeV, torchtitan 0.3.0 parallelism.pipeline_parallel_schedule DualPipeV):
two stages per rank in a V, so rank 0 holds the first and the last stage, the embedding and the LM head."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from planner.catalog.hardware import parse_cluster
from planner.catalog.models import get_model
from planner.costmodel import Context, evaluate
from planner.costmodel.base import plan_shape
from planner.costmodel.compute import lm_head_fwd_s
from planner.costmodel.layers import stage_times
from planner.costmodel.memory import stage_params
from planner.launchers import capabilities
from planner.search.engine import SearchOptions, search
from planner.specs import ParallelPlan, TrainingSpec
from planner.ui.cli import main


def _ctx() -> Context:
    return Context(get_model("llama-3.1-8b"), parse_cluster("h100x32"),
                   TrainingSpec(seq_len=8192, global_batch=64, framework="fsdp"))


def _plan(schedule: str) -> ParallelPlan:
    return ParallelPlan(tp=2, pp=4, vpp=2, dp=4, zero_stage=3, micro_batch=1, recompute="selective",
                        schedule=schedule)


def _split(ctx: Context, p: ParallelPlan):
    return ctx.stage_kind_counts(p.pp, None, None, None)


def test_rank_zero_holds_the_lm_head_in_a_v():
    # torchtitan 0.3.0 _get_pp_rank_to_stage_indices_mapping(style "v"): rank r holds stages r and 2 pp - 1 - r,
    # so the LM head and the loss (the last stage) sit on rank 0 beside the embedding; the loop placement of the
    # interleaved schedule keeps them on the last rank
    ctx = _ctx()
    v, loop = _plan("dualpipev"), _plan("interleaved")
    pv, pl = stage_params(ctx, v, _split(ctx, v)), stage_params(ctx, loop, _split(ctx, loop))
    head = ctx.params.lm_head / v.tp + ctx.params.final_norm
    assert pv.dense[0] - pl.dense[0] == pytest.approx(head)
    assert pl.dense[3] - pv.dense[3] == pytest.approx(head)
    tv = stage_times(ctx, plan_shape(ctx, v), _split(ctx, v))
    tl = stage_times(ctx, plan_shape(ctx, loop), _split(ctx, loop))
    t_head = lm_head_fwd_s(ctx, plan_shape(ctx, v))
    assert tv.fwd[0] - tl.fwd[0] == pytest.approx(t_head)
    assert tl.fwd[3] - tv.fwd[3] == pytest.approx(t_head)


def test_dualpipev_bubble_is_below_interleaved_and_1f1b_on_the_same_layout():
    ctx = _ctx()
    bubble = {s: evaluate(ctx, _plan(s) if s != "1f1b" else _plan(s).model_copy(update={"vpp": 1}))
              .time_breakdown["bubble_s"] for s in ("1f1b", "interleaved", "dualpipev")}
    assert 0 < bubble["dualpipev"] < bubble["interleaved"] < bubble["1f1b"]


def test_the_torchtitan_range_searches_dualpipev_and_megatron_does_not():
    ctx = _ctx()
    tt = capabilities("torchtitan").search_defaults["schedule"]
    assert "dualpipev" in tt
    res = search(ctx, SearchOptions(fixed={"schedule": tt, "tp": 2, "pp": 4}, top_k=50, require_fit=False))
    scheds = {(e.plan.schedule, e.plan.vpp) for e in res.ranked}
    assert ("dualpipev", 2) in scheds
    res = search(ctx, SearchOptions(fixed={"tp": 2, "pp": 4}, top_k=50, require_fit=False))
    assert all(e.plan.schedule != "dualpipev" for e in res.ranked)


def _pinned_dualpipev(tmp_path, model: str, cluster: str, gbs: int, tp: int, pp: int) -> tuple[dict, dict]:
    """`plan --launcher torchtitan --schedule dualpipev --out`: the #1 plan's knobs and the written pipeline args."""
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["--model", model, "--cluster", cluster, "--seq-len", "8192", "--gbs", str(gbs),
                                  "--launcher", "torchtitan", "--tp", str(tp), "--pp", str(pp), "--schedule",
                                  "dualpipev", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    args = json.loads((out / "torchtitan_args.json").read_text())["args"]
    pipe = {a.removeprefix("--parallelism.pipeline_parallel_"): args[i + 1] for i, a in enumerate(args)
            if a.startswith("--parallelism.pipeline_parallel_")}
    return json.loads(r.stdout)["plans"][0]["plan"], pipe


def test_dualpipev_writes_torchtitans_schedule_and_an_even_v_split(tmp_path):
    plan, pipe = _pinned_dualpipev(tmp_path, "llama-3.1-8b", "h100x32", 64, 2, 4)
    assert (plan["schedule"], plan["vpp"]) == ("dualpipev", 2)
    assert pipe["schedule"] == "DualPipeV"
    # Llama 3.1 8B's 32 layers over 2 x pp = 8 stages
    sizes = ("layers_per_stage", "first_stage_less_layers", "last_stage_less_layers")
    assert [pipe[k] for k in sizes] == ["4", "0", "0"]


@pytest.mark.parametrize("extra,says", [
    (["--launcher", "megatron"], "does not run the dualpipev"),
    (["--launcher", "torchtitan", "--vpp", "3"], "vpp must be 2"),
    (["--launcher", "torchtitan", "--pp", "3"], "2*pp=6 equal stages"),
])
def test_dualpipev_pins_a_launcher_cannot_run_exit_2(extra, says):
    r = CliRunner().invoke(main, ["--model", "llama-3.1-8b", "--cluster", "h100x48", "--schedule", "dualpipev",
                                  *extra])
    assert r.exit_code == 2, r.output
    assert says in r.output


def test_a_v_counting_the_embedding_and_loss_gives_rank_zero_two_layers_fewer():
    # Llama 3.1 405B's 126 layers + the embedding and the loss = 128 units over 2 x pp = 8 stages of 16: torchtitan
    # gives stages 0 and 7 one layer fewer (first/last_stage_less_layers 1), both on rank 0 in a V
    ctx = Context(get_model("llama-3.1-405b"), parse_cluster("h100x256"),
                  TrainingSpec(seq_len=8192, global_batch=256, framework="fsdp"))
    tt = capabilities("torchtitan").search_defaults["schedule"]
    res = search(ctx, SearchOptions(fixed={"schedule": tt, "tp": 8, "pp": 4}, top_k=50, require_fit=False))
    v = next(e for e in res.ranked if e.plan.schedule == "dualpipev")
    assert v.plan.account_embedding_loss and v.pipeline["layers_per_stage"] == [30, 32, 32, 32]
    # the loop placement of the same units trims the first and the last rank by one each
    loop = evaluate(ctx, v.plan.model_copy(update={"schedule": "interleaved"}))
    assert loop.pipeline["layers_per_stage"] == [31, 32, 32, 31]


def test_pinned_dualpipev_takes_the_v_split_counting_the_embedding_and_loss(tmp_path):
    # 126 layers do not split over 2 x 8 stages, 126 + 2 units do: the pinned schedule is not refused
    plan, pipe = _pinned_dualpipev(tmp_path, "llama-3.1-405b", "h100x512", 512, 8, 8)
    assert (plan["schedule"], plan["account_embedding_loss"]) == ("dualpipev", True)
    sizes = ("layers_per_stage", "first_stage_less_layers", "last_stage_less_layers")
    assert [pipe[k] for k in sizes] == ["8", "1", "1"]
