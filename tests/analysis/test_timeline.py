"""planner.analysis.timeline: simulated schedules against the closed forms of the papers."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import analytic_bubble_fraction, bubble_fraction

from planner.analysis.timeline import (
    Event,
    busy_s,
    idle_intervals,
    makespan_s,
    peak_in_flight,
    schedule_events,
    stage_orders,
)
from planner.errors import InputError

F, B = 2.0, 4.0  # seconds per micro-batch per stage (backward = 2 x forward)


# --- 1F1B ------------------------------------------------------------------------------------
def test_1f1b_uniform_makespan_and_bubble():
    # p = 4, m = 8: makespan = (m + p - 1)(f + b) = 11 * 6 = 66 s; bubble = (p-1)/m = 0.375
    ev = schedule_events(4, 1, 8, "1f1b", F, B)
    assert makespan_s(ev) == pytest.approx(66.0)
    assert bubble_fraction(ev) == pytest.approx(0.375)
    assert busy_s(ev) == pytest.approx([48.0] * 4)


@pytest.mark.parametrize("p, m", [(2, 2), (2, 16), (4, 4), (4, 64), (8, 8), (8, 32), (16, 64)])
def test_1f1b_matches_narayanan(p, m):
    ev = schedule_events(p, 1, m, "1f1b", F, B)
    assert makespan_s(ev) == pytest.approx((m + p - 1) * (F + B))
    assert bubble_fraction(ev) == pytest.approx((p - 1) / m)


def test_1f1b_peak_in_flight_is_p_minus_stage():
    ev = schedule_events(4, 1, 8, "1f1b", F, B)
    assert peak_in_flight(ev) == [4, 3, 2, 1]
    ev = schedule_events(8, 1, 64, "1f1b", F, B)
    assert peak_in_flight(ev) == [8, 7, 6, 5, 4, 3, 2, 1]


def test_1f1b_order_first_and_last_stage():
    orders = stage_orders(4, 1, 6, "1f1b")
    kinds0 = "".join(k for k, _, _ in orders[0])
    kinds3 = "".join(k for k, _, _ in orders[3])
    assert kinds0 == "FFF" + "FB" * 3 + "BBB"  # 3 warm-up forwards on the first stage
    assert kinds3 == "FB" * 6  # none on the last


# --- GPipe -----------------------------------------------------------------------------------
def test_gpipe_same_bubble_as_1f1b_but_m_in_flight():
    g = schedule_events(4, 1, 8, "gpipe", F, B)
    o = schedule_events(4, 1, 8, "1f1b", F, B)
    assert makespan_s(g) == pytest.approx(makespan_s(o)) == pytest.approx(66.0)
    assert bubble_fraction(g) == pytest.approx(bubble_fraction(o)) == pytest.approx(0.375)
    assert peak_in_flight(g) == [8, 8, 8, 8]  # m on every stage
    assert max(peak_in_flight(o)) == 4  # p at most


# --- interleaved -----------------------------------------------------------------------------
@pytest.mark.parametrize("p, v, m", [(4, 2, 8), (4, 2, 16), (4, 4, 8), (8, 2, 16), (8, 4, 32), (2, 3, 6)])
def test_interleaved_bubble_is_divided_by_v(p, v, m):
    ev = schedule_events(p, v, m, "interleaved", F, B)
    # Narayanan et al. 2021 sec. 2.2.2: bubble (p-1)/(v m); makespan m(f+b) + (p-1)(f+b)/v
    assert bubble_fraction(ev) == pytest.approx((p - 1) / (v * m))
    assert makespan_s(ev) == pytest.approx(m * (F + B) + (p - 1) * (F + B) / v)


def test_interleaved_numbers():
    ev = schedule_events(4, 2, 8, "interleaved", F, B)
    assert makespan_s(ev) == pytest.approx(57.0)  # 48 + 3 * 6 / 2
    assert bubble_fraction(ev) == pytest.approx(0.1875)  # 3 / 16
    assert {e.chunk for e in ev} == {0, 1}
    assert all(e.duration_s == pytest.approx(F / 2) for e in ev if e.kind == "F")
    # Megatron warm-up 2(p-s-1) + (v-1)p forwards, plus the one in flight: stage 0 holds 11 chunks
    assert peak_in_flight(ev) == [11, 9, 7, 5]


def test_1f1b_with_vpp_runs_interleaved():
    a = schedule_events(4, 2, 8, "1f1b", F, B)
    b = schedule_events(4, 2, 8, "interleaved", F, B)
    assert a == b


def test_interleaved_needs_m_divisible_by_p():
    with pytest.raises(InputError, match="divisible"):
        schedule_events(4, 2, 6, "interleaved", F, B)


# --- zero bubble (ZB-H1) ---------------------------------------------------------------------
def test_zbh1_cuts_the_1f1b_bubble_to_a_third():
    # T_F = T_B = T_W = 2 s (bwd 4 s split in half): bubble (p-1)(F+B-W) = 3 * 2 = 6 s
    # vs 1F1B's (p-1)(F+B+W) = 18 s
    zb = schedule_events(4, 1, 8, "zb", F, B)
    ob = schedule_events(4, 1, 8, "1f1b", F, B)
    assert makespan_s(zb) == pytest.approx(8 * 6 + 6)  # 54 s
    assert makespan_s(ob) - 48 == pytest.approx(3 * (makespan_s(zb) - 48))
    assert bubble_fraction(zb) == pytest.approx(0.125)  # 3 * 2 / (8 * 6)
    assert bubble_fraction(zb) == pytest.approx(bubble_fraction(ob) / 3)
    assert {e.kind for e in zb} == {"F", "B", "W"}
    assert sum(e.kind == "W" for e in zb) == 4 * 8
    # same peak as 1F1B's first stage (p), per Qi et al.
    assert max(peak_in_flight(zb)) == max(peak_in_flight(ob)) == 4


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 32), (8, 16), (8, 64)])
def test_zbh1_matches_the_paper_formula(p, m):
    ev = schedule_events(p, 1, m, "zb", F, B)
    assert bubble_fraction(ev) == pytest.approx(analytic_bubble_fraction(p, 1, m, "zb"))
    assert bubble_fraction(ev) == pytest.approx((p - 1) * 2 / (m * 6))


def test_zb_w_fraction():
    ev = schedule_events(2, 1, 4, "zb", 1.0, 3.0, w_fraction=1 / 3)
    assert {round(e.duration_s, 9) for e in ev if e.kind == "B"} == {2.0}
    assert {round(e.duration_s, 9) for e in ev if e.kind == "W"} == {1.0}


def test_zb_rejects_vpp():
    with pytest.raises(InputError):
        schedule_events(4, 2, 8, "zb", F, B)


# --- dependencies ----------------------------------------------------------------------------
def _check_dependencies(ev: list[Event], pp: int, vpp: int, p2p: float = 0.0):
    nv = pp * vpp
    p2p = p2p if pp > 1 else 0.0  # with one rank nothing crosses a link
    end = {(e.kind, e.microbatch, e.chunk * pp + e.stage): e.end_s for e in ev}
    eps = 1e-9
    for e in ev:
        vs = e.chunk * pp + e.stage
        if e.kind == "F" and vs > 0:
            assert e.start_s >= end[("F", e.microbatch, vs - 1)] + p2p - eps
        if e.kind == "B":
            dep = end[("F", e.microbatch, vs)] if vs == nv - 1 else end[("B", e.microbatch, vs + 1)] + p2p
            assert e.start_s >= dep - eps
        if e.kind == "W":
            assert e.start_s >= end[("B", e.microbatch, vs)] - eps
    for s in range(pp):  # one pass at a time per rank
        mine = sorted((e for e in ev if e.stage == s), key=lambda e: e.start_s)
        for a, b in zip(mine, mine[1:], strict=False):
            assert b.start_s >= a.end_s - eps


@settings(max_examples=60, deadline=None)
@given(
    pp=st.integers(1, 6),
    vpp=st.integers(1, 3),
    groups=st.integers(1, 4),
    schedule=st.sampled_from(["gpipe", "1f1b", "interleaved", "zb"]),
    seed=st.integers(0, 10_000),
    p2p=st.sampled_from([0.0, 0.1]),
)
def test_any_schedule_respects_dependencies(pp, vpp, groups, schedule, seed, p2p):
    if schedule == "zb":
        vpp = 1
    m = groups * pp
    rnd = random.Random(seed)
    fwd = [rnd.uniform(0.5, 2.0) for _ in range(pp)]
    bwd = [rnd.uniform(1.0, 4.0) for _ in range(pp)]
    ev = schedule_events(pp, vpp, m, schedule, fwd, bwd, p2p_s=p2p)
    per_rank = (3 if schedule == "zb" else 2) * m * vpp
    assert len(ev) == pp * per_rank
    _check_dependencies(ev, pp, vpp, p2p)
    # every stage's compute is exactly what it was given
    for s, busy in enumerate(busy_s(ev, pp)):
        assert busy == pytest.approx(m * (fwd[s] + bwd[s]))
    # a non-uniform pipeline is never better than its slowest stage allows
    assert makespan_s(ev) >= max(m * (f + b) for f, b in zip(fwd, bwd, strict=True)) - 1e-9


def test_slow_stage_dominates():
    # stage 2 is twice as slow: 1F1B makespan = m * 12 + (p-1) stage-times of the others (2+4)... >=
    ev = schedule_events(4, 1, 16, "1f1b", [2, 2, 4, 2], [4, 4, 8, 4])
    assert makespan_s(ev) >= 16 * 12
    assert makespan_s(ev) < 16 * 12 + 3 * 12


def test_p2p_latency_adds_to_the_critical_path():
    a = makespan_s(schedule_events(4, 1, 8, "1f1b", F, B))
    b = makespan_s(schedule_events(4, 1, 8, "1f1b", F, B, p2p_s=0.5))
    # the fill and drain each cross p-1 boundaries: 2 * 3 * 0.5 s at least
    assert b - a >= 3.0 - 1e-9


# --- idle intervals and the JSON block ---------------------------------------------------------
def test_idle_intervals_sum_to_the_bubble():
    ev = schedule_events(4, 1, 8, "1f1b", F, B)
    gaps = idle_intervals(ev, 4)
    span = makespan_s(ev)
    for s, stage_gaps in enumerate(gaps):
        assert sum(b - a for a, b in stage_gaps) == pytest.approx(span - busy_s(ev)[s])
    # stage 0 runs 4 forwards, then waits for micro-batch 0's backward to come back down 3 stages
    assert gaps[0][0] == pytest.approx((4 * F, 4 * F + 3 * B))
    # stage 3 idles for 3 forwards at the start, 3 backwards at the end
    assert gaps[3][0] == pytest.approx((0.0, 3 * F))
    assert gaps[3][-1] == pytest.approx((span - 3 * B, span))


def test_per_stage_times_and_the_no_pipeline_schedule():
    ev = schedule_events(4, 1, 8, "1f1b", [2.0, 2.0, 2.0, 2.0], [4.0, 4.0, 4.0, 4.0])
    assert makespan_s(ev) == pytest.approx(66.0)
    # the cost model labels a plan without pipelining schedule "none"
    one = schedule_events(1, 1, 4, "none", [1.0], [2.0])
    assert makespan_s(one) == pytest.approx(12.0) and bubble_fraction(one) == 0.0
    with pytest.raises(InputError):
        schedule_events(4, 1, 8, "none", F, B)


@pytest.mark.parametrize("args", [
    (0, 1, 8, "1f1b", F, B),
    (4, 0, 8, "1f1b", F, B),
    (4, 1, 0, "1f1b", F, B),
    (4, 1, 8, "pipedream", F, B),
    (4, 1, 8, "1f1b", [1.0, 2.0], B),
    (4, 1, 8, "1f1b", -1.0, B),
    (4, 1, 8, "1f1b", float("nan"), B),
    (4.0, 1, 8, "1f1b", F, B),
])
def test_bad_inputs(args):
    with pytest.raises(InputError):
        schedule_events(*args)


def test_analytic_forms():
    assert analytic_bubble_fraction(4, 1, 8, "1f1b") == pytest.approx(0.375)
    assert analytic_bubble_fraction(4, 1, 8, "gpipe") == pytest.approx(0.375)
    assert analytic_bubble_fraction(4, 2, 8, "interleaved") == pytest.approx(0.1875)
    assert analytic_bubble_fraction(4, 1, 8, "zb") == pytest.approx(0.125)
    assert analytic_bubble_fraction(8, 1, 64, "1f1b") == pytest.approx(7 / 64)
