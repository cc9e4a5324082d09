"""One pipeline model: the report's drawn timeline and the scored step agree on the bubble.

The scored bubble (costmodel.pipeline: Narayanan et al. 2021 sec. 2.2 for 1F1B/GPipe (p-1)/m and
interleaved (p-1)/(v m), Qi et al. 2023 for ZB-H1 (p-1)(T_F + T_B - T_W), Alpa eq. 2 for uneven stages)
is the slowest stage's idle time. The timeline simulates each schedule's order (Megatron-core's
interleaving, ZB-H1's reference order) from the same stage times. Where the closed form is exact
(uniform stages, or the slowest stage last) the plain simulation reproduces it with no help; where a
lighter stage follows the slowest, the closed form charges its whole fill/drain, and the report draws
the simulation with a hand-off slack that makes the two equal (timeline.conformed_events)."""

from __future__ import annotations

import pytest

import planner.analysis.timeline as tl
from planner.app import PlanRequest, build_inputs
from planner.costmodel import Context, evaluate
from planner.specs import ParallelPlan
from planner.ui.report import scored_timeline

# (model, cluster, global batch, plan knobs, whether the slowest stage is the last: the plain simulation agrees)
CASES = [
    ("llama-3.1-70b", "h100x64", 64, dict(tp=8, pp=4, dp=2, schedule="1f1b"), True),
    ("llama-3.1-70b", "h100x64", 64, dict(tp=8, pp=4, dp=2, vpp=2, schedule="interleaved"), True),
    ("llama-3.1-70b", "h100x64", 64, dict(tp=8, pp=4, dp=2, vpp=5, schedule="interleaved"), True),
    ("llama-3.1-70b", "h100x64", 64, dict(tp=8, pp=8, dp=1, schedule="gpipe", recompute="full"), True),
    ("llama-3.1-70b", "h100x64", 64, dict(tp=8, pp=4, dp=2, schedule="zb"), True),
    # DeepSeek-V3 on the default split: its last stage, with the MTP module beside the LM head (costmodel.mtp), is the
    # slowest; on Megatron-Bridge's split (8 x 7 + 5: partition.mtp_split) a lighter last stage follows the slowest,
    # and the plain simulation needs slack
    ("deepseek-v3", "h100x1024", 256, dict(tp=1, pp=8, dp=128, ep=64, schedule="1f1b", recompute="full"), True),
    ("deepseek-v3", "h800x256", 128, dict(tp=1, pp=16, dp=16, ep=16, schedule="1f1b", recompute="full"), True),
    ("deepseek-v3", "h100x1024", 256, dict(tp=1, pp=8, dp=128, ep=64, schedule="1f1b", recompute="full",
                                           first_stage_layers=8, last_stage_layers=5), False),
    ("mixtral-8x7b", "h100x64", 128, dict(tp=2, pp=4, dp=8, ep=8, schedule="1f1b"), True),
]


def _scored(model, cluster, gbs, knobs):
    m, c, t = build_inputs(PlanRequest(model=model, cluster=cluster, gbs=gbs, framework="megatron"))
    ev = evaluate(Context(m, c, t), ParallelPlan(**knobs, sequence_parallel=knobs["tp"] > 1))
    return ev.to_dict()


@pytest.mark.parametrize("model,cluster,gbs,knobs,exact", CASES, ids=[f"{c[0]}-{c[3]['schedule']}-pp{c[3]['pp']}"
                                                                       for c in CASES])
def test_timeline_bubble_equals_scored_bubble(model, cluster, gbs, knobs, exact):
    d = _scored(model, cluster, gbs, knobs)
    bubble = d["time_breakdown"]["bubble_s"]
    assert bubble > 0
    events, slack, quoted = scored_timeline(d)
    assert quoted == bubble
    assert tl.critical_bubble_s(events) == pytest.approx(bubble, rel=1e-9)
    # the drawn step's pipeline phase is the scored one: m x slowest stage + bubble
    pipe = d["pipeline"]
    stage = [f + b + c for f, b, c in zip(pipe["fwd_s_per_microbatch"], pipe["bwd_s_per_microbatch"],
                                          pipe["comm_s_per_microbatch"], strict=True)]
    assert tl.makespan_s(events) == pytest.approx(pipe["num_microbatches"] * max(stage) + bubble, rel=1e-9)
    if exact:  # two independent models, one number: the plain simulation needs no slack
        assert slack == 0.0
    else:
        assert slack > 0.0


def test_drawn_with_fewer_microbatches_agrees_with_the_closed_form_at_that_count():
    d = _scored("deepseek-v3", "h800x256", 128, dict(tp=1, pp=16, dp=16, ep=16, schedule="1f1b", recompute="full"))
    events, _, quoted = scored_timeline(d, m_draw=32)
    assert quoted < d["time_breakdown"]["bubble_s"] * 1.0000001  # the fill/drain does not grow with m
    assert tl.critical_bubble_s(events) == pytest.approx(quoted, rel=1e-9)
