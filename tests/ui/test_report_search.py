"""`plan report` reuses the search of `plan`: the same searches, the same stage solves, every scored plan charted."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

import planner.search.engine
import planner.search.stages
from planner.app import PlanRequest, build_inputs
from planner.costmodel import Context
from planner.search import forks
from planner.search.engine import SearchOptions, search
from planner.ui.cli import main

ARGS = ["--model", "deepseek-v3", "--cluster", "h100x1024", "--pp", "8", "--schedule", "1f1b"]


def _counting(monkeypatch) -> dict[str, int]:
    # counted in this process: the dispatchers' searches side by side in forked processes would count in theirs
    monkeypatch.setenv(forks.WORKERS_ENV, "1")
    calls = {"search": 0, "solve": 0}
    real_search, real_solve = planner.search.engine._search, planner.search.stages.assign_stages

    def counted_search(*a, **k):
        calls["search"] += 1
        return real_search(*a, **k)

    def counted_solve(*a, **k):
        calls["solve"] += 1
        return real_solve(*a, **k)

    monkeypatch.setattr(planner.search.engine, "_search", counted_search)
    monkeypatch.setattr(planner.search.stages, "assign_stages", counted_solve)
    return calls


@pytest.mark.slow
def test_report_runs_one_search_with_the_plans_stage_solves(monkeypatch, tmp_path):
    calls = _counting(monkeypatch)
    r = CliRunner().invoke(main, ARGS + ["--json"])
    assert r.exit_code == 0, r.output
    plan_calls = dict(calls)
    best = json.loads(r.output)["plans"][0]
    calls.update(search=0, solve=0)
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", *ARGS, "--out", str(out)])
    assert r.exit_code == 0, r.output
    # one search per MoE dispatcher searched (alltoall, flex: planner.search.dispatchers), each solving its 5
    # leading plans' stages (61 layers over pp=8): the same in both commands
    assert calls == plan_calls == {"search": 2, "solve": 10}
    n = int(re.search(r"\((\d+) feasible candidates", r.output).group(1))
    assert n > 5  # every scored plan of that one search, not only the top 5
    page = out.read_text()
    assert f"{best['step_time_s']:.3g}" in page or f"{best['step_time_s']:.4g}" in page


@pytest.mark.slow
def test_stage_solves_is_its_own_setting(monkeypatch):
    calls = _counting(monkeypatch)
    ctx = Context(*build_inputs(PlanRequest(model="deepseek-v3", cluster="h100x1024", framework="megatron")))
    fixed = {"pp": 8, "schedule": "1f1b"}
    res = search(ctx, SearchOptions(fixed=fixed, top_k=2, stage_solves=7))
    assert calls["solve"] == 7 and len(res.plans) == 2 and len(res.ranked) > 7
    assert res.plans == res.ranked[:2]
    calls.update(solve=0)
    search(ctx, SearchOptions(fixed=fixed, top_k=3))
    assert calls["solve"] == 3  # default: as many as top_k
    calls.update(solve=0)
    search(ctx, SearchOptions(fixed=fixed, top_k=3, stage_solves=0))
    assert calls["solve"] == 0
