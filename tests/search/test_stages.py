"""planner.search.stages: CP-SAT stage balancing against hand-worked splits and an exhaustive DP.

The numbers are those of real models on H100s (TP=8, bf16, ~400 TFLOP/s achieved per GPU):
- Llama-3-70B (80 layers, h=8192, ffn 28672, vocab 128256): ~0.86e9 params per layer, so per token
  6 * 0.86e9 FLOPs fwd+bwd plus attention; at seq 8192 and micro-batch 2 one layer takes ~31 ms per
  micro-batch, its recompute (the forward) ~10 ms, and the LM head (6 * 8192 * 128256 FLOPs a token)
  ~32 ms. Activations (Korthikanti et al. 2022, 34 s b h / t bytes with SP and flash attention):
  34 * 8192 * 2 * 8192 / 8 = 0.57 GB per layer and micro-batch, 2 s b h / t = 0.034 GB with full
  recompute. States: 0.86e9 / 8 params * (2 weights + 4 fp32 grads + 12/4 sharded Adam) = 0.97 GB.
- DeepSeek-V3 (61 layers, first 3 dense, vocab 129280, h=7168): MoE layer ~20 ms, the LM head + loss
  ~30 ms per micro-batch (1.5 layers), the dense layers ~60 % of an MoE layer.
"""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from support import uniform_stage_problem

from planner.costmodel.partition import stage_layer_counts
from planner.search.stages import (
    ENUMERATION_BUDGET,
    StageAssignment,
    StageProblem,
    assign_stages,
    enumerates,
    flag_splits,
    megatron_flags,
    stage_costs,
    uniform_assignment,
)

GB = 1e9

LLAMA70 = dict(layer_time_s=0.031, layer_recompute_s=0.010, layer_act_bytes=0.57 * GB,
               layer_act_bytes_recompute=0.034 * GB, layer_state_bytes=0.97 * GB,
               first_extra_time_s=0.0005, last_extra_time_s=0.032,
               first_extra_bytes=1.18 * GB,  # embedding 128256 x 8192 / 8 params x 9 bytes
               last_extra_bytes=1.18 * GB + 1.05 * GB)  # LM head states + fp32 logits of 16384 tokens


def _check(p: StageProblem, a: StageAssignment) -> None:
    """The assignment is well formed and its reported numbers are the cost model's."""
    assert len(a.layers_per_stage) == p.pp and sum(a.layers_per_stage) == p.num_layers
    assert all(n >= 1 for n in a.layers_per_stage)
    assert all(0 <= r <= n for r, n in zip(a.recompute_per_stage, a.layers_per_stage, strict=True))
    times, mem = stage_costs(p, a.layers_per_stage, a.recompute_per_stage)
    assert a.stage_time_s == pytest.approx(tuple(times))
    assert a.stage_bytes == pytest.approx(tuple(mem))
    assert a.slowest_stage_s == pytest.approx(max(times))
    assert max(mem) <= p.capacity_bytes


def _dp_optimum(p: StageProblem) -> float | None:
    """Exhaustive: the least slowest-stage time over every contiguous split and recompute count."""
    L, pp = p.num_layers, p.pp
    INF = float("inf")

    def stage_best(s: int, i: int, j: int) -> float:
        best = INF
        n = j - i
        for r in range(n + 1):
            idx = range(i, j)
            t = sum(p.layer_time_s[k] for k in idx) + sum(p.layer_recompute_s[k] for k in idx[:r])
            b = sum(p.layer_state_bytes[k] for k in idx)
            b += p.inflight[s] * (sum(p.layer_act_bytes_recompute[k] for k in idx[:r])
                                  + sum(p.layer_act_bytes[k] for k in idx[r:]))
            b += max(p.layer_act_bytes) if r else 0.0
            if s == 0:
                t, b = t + p.first_extra_time_s, b + p.first_extra_bytes
            if s == pp - 1:
                t, b = t + p.last_extra_time_s, b + p.last_extra_bytes
            if b <= p.capacity_bytes:
                best = min(best, t)
        return best

    f = [[INF] * (L + 1) for _ in range(pp + 1)]
    f[0][0] = 0.0
    for s in range(1, pp + 1):
        for j in range(s, L + 1):
            f[s][j] = min((max(f[s - 1][i], stage_best(s - 1, i, j)) for i in range(s - 1, j)), default=INF)
    return None if f[pp][L] == INF else f[pp][L]


def test_even_split_when_uniform_without_extras():
    p = uniform_stage_problem(64, 8, layer_time_s=0.031, layer_recompute_s=0.010, layer_act_bytes=0.57 * GB,
                             layer_act_bytes_recompute=0.034 * GB, layer_state_bytes=0.97 * GB, capacity_bytes=80 * GB)
    a = assign_stages(p)
    assert a is not None and a.optimal
    _check(p, a)
    assert a.layers_per_stage == (8,) * 8
    assert a.recompute_per_stage == (0,) * 8  # 8 * 0.97 + 8 * 8 * 0.57 = 44 GB fits: no recompute
    assert a.slowest_stage_s == pytest.approx(8 * 0.031)
    assert megatron_flags(a) == (None, None)
    u = uniform_assignment(p)
    assert u is not None and u.layers_per_stage == a.layers_per_stage and not u.optimal


def test_heavy_lm_head_61_layers_16_stages():
    # DeepSeek-V3-like, memory not binding: the LM head (1.5 layers of time) sits on the last stage
    p = uniform_stage_problem(61, 16, layer_time_s=0.020, layer_recompute_s=0.007, layer_act_bytes=0.3 * GB,
                             layer_act_bytes_recompute=0.015 * GB, layer_state_bytes=2.0 * GB,
                             first_extra_time_s=0.001, last_extra_time_s=0.030,
                             first_extra_bytes=1.2 * GB, last_extra_bytes=2.5 * GB, capacity_bytes=75 * GB)
    a, u = assign_stages(p), uniform_assignment(p)
    assert a is not None and u is not None and a.optimal
    _check(p, a)
    assert u.layers_per_stage == tuple(stage_layer_counts(61, 16)) == (3,) + (4,) * 13 + (3, 3)
    assert a.layers_per_stage[-1] < u.layers_per_stage[-1]  # fewer layers beside the LM head
    assert a.layers_per_stage[-1] == 2  # 2 * 20 + 30 = 70 ms <= 4 * 20; 3 layers would be 90 ms
    assert a.slowest_stage_s <= u.slowest_stage_s
    assert a.slowest_stage_s == pytest.approx(0.080 + 0.0)  # 4 layers (or 3 + embedding) set the pace
    assert u.slowest_stage_s == pytest.approx(0.090)  # the even split: 3 layers + LM head
    assert sum(a.recompute_per_stage) == 0
    flags = megatron_flags(a)
    assert flags is not None
    assert stage_layer_counts(61, 16, *flags) == list(a.layers_per_stage)


def test_memory_tight_recomputes_first_stage_only():
    # Llama-3-70B, 80 layers over pp=8, 1F1B, 40 GB free per GPU: stage 0 holds 8 micro-batches of
    # activations, 10 * 0.97 + 8 * 10 * 0.57 + 1.18 = 56.5 GB; the last stage holds one (~18 GB).
    # Without recompute stage s fits at most 7, 8, 9, 10, 11, 11, 11, 11 layers: 78 < 80, so moving
    # layers back cannot avoid recompute (it would take 12 layers, 372 ms, somewhere)
    p = uniform_stage_problem(80, 8, capacity_bytes=40 * GB, **LLAMA70)
    a, u = assign_stages(p), uniform_assignment(p)
    assert a is not None and u is not None and a.optimal
    _check(p, a)
    assert a.recompute_per_stage[0] > 0
    assert a.recompute_per_stage[-1] == 0
    assert a.slowest_stage_s <= u.slowest_stage_s
    # the even split cannot fit without recomputing on the first stage either
    assert u.recompute_per_stage[0] > 0 and u.recompute_per_stage[-1] == 0
    # where recompute saves no memory, only moving layers helps: strictly slower (or infeasible)
    useless = uniform_stage_problem(80, 8, capacity_bytes=40 * GB,
                                   **{**LLAMA70, "layer_act_bytes_recompute": LLAMA70["layer_act_bytes"]})
    b = assign_stages(useless)
    assert b is None or b.slowest_stage_s > a.slowest_stage_s
    # with room to spare nothing is recomputed
    roomy = assign_stages(uniform_stage_problem(80, 8, capacity_bytes=80 * GB, **LLAMA70))
    assert roomy is not None and sum(roomy.recompute_per_stage) == 0


def test_uniform_recompute_is_one_count_for_every_stage():
    p = uniform_stage_problem(80, 8, capacity_bytes=40 * GB, uniform_recompute=True, **LLAMA70)
    a = assign_stages(p)
    assert a is not None
    _check(p, a)
    rc = max(a.recompute_per_stage)
    assert rc > 0
    assert a.recompute_per_stage == tuple(min(rc, n) for n in a.layers_per_stage)
    free = assign_stages(uniform_stage_problem(80, 8, capacity_bytes=40 * GB, **LLAMA70))
    assert free is not None and free.slowest_stage_s <= a.slowest_stage_s + 1e-12


def test_infeasible_returns_none():
    # 80 layers of 0.97 GB states over 4 stages: 19.4 GB of states alone per stage > 16 GB
    p = uniform_stage_problem(80, 4, capacity_bytes=16 * GB, **LLAMA70)
    assert assign_stages(p) is None
    assert uniform_assignment(p) is None
    # more stages than layers
    assert assign_stages(uniform_stage_problem(4, 8, capacity_bytes=80 * GB, **LLAMA70)) is None


def _random_problem(rng: random.Random, layers: tuple[int, int], stages: tuple[int, int],
                    capacity_gb: tuple[float, float], **kw) -> StageProblem:
    """Layers of random time, activations and states (10-30 ms, 0.3-0.6 GB, 0.5-2 GB), a random LM head, 1F1B."""
    L, pp = rng.randint(*layers), rng.randint(*stages)
    t = tuple(rng.uniform(0.01, 0.03) for _ in range(L))
    return StageProblem(
        num_layers=L, pp=pp, layer_time_s=t, layer_recompute_s=tuple(x / 3 for x in t),
        layer_act_bytes=tuple(rng.uniform(0.3, 0.6) * GB for _ in range(L)),
        layer_act_bytes_recompute=(0.03 * GB,) * L,
        layer_state_bytes=tuple(rng.uniform(0.5, 2.0) * GB for _ in range(L)),
        first_extra_time_s=0.001, last_extra_time_s=rng.uniform(0.0, 0.04),
        first_extra_bytes=1.0 * GB, last_extra_bytes=2.0 * GB,
        inflight=tuple(float(pp - s) for s in range(pp)), capacity_bytes=rng.uniform(*capacity_gb) * GB, **kw)


def test_non_uniform_layers_match_exhaustive_dp():
    rng = random.Random(7)
    for case in range(6):
        p = _random_problem(rng, (6, 12), (2, 4), (6, 14))
        want = _dp_optimum(p)
        a = assign_stages(p, deterministic_time=5.0)
        if want is None:
            assert a is None, case
            continue
        assert a is not None and a.optimal, case
        _check(p, a)
        assert a.slowest_stage_s == pytest.approx(want, rel=1e-5), case


def _expressible_optimum(p: StageProblem) -> float | None:
    """Exhaustive over the splits Megatron's first/last-stage flags express (equal middle stages, or the default
    split), each with the fewest recomputed layers per stage that fit (one count for every stage under
    uniform_recompute): the least slowest-stage time."""
    L, pp = p.num_layers, p.pp
    splits = {tuple(stage_layer_counts(L, pp))}
    splits |= {(f,) + (mid,) * (pp - 2) + (L - f - (pp - 2) * mid,)
               for f in range(1, L) for mid in range(1, L) if L - f - (pp - 2) * mid >= 1}
    best = None
    for counts in splits:
        rec = [0] * pp
        for s in range(pp):  # fewest recompute on each stage (more only costs time)
            while stage_costs(p, counts, rec)[1][s] > p.capacity_bytes and rec[s] < counts[s]:
                rec[s] += 1
        if p.uniform_recompute:
            rec = [min(max(rec), n) for n in counts]
        times, mem = stage_costs(p, counts, rec)
        if max(mem) <= p.capacity_bytes and (best is None or max(times) < best):
            best = max(times)
    return best


def _alternating(L: int, pp: int, capacity_gb: float, **kw) -> StageProblem:
    # gpt-oss-like: sliding-window and full-attention layers alternate (12 and 20 ms)
    t = tuple((0.012, 0.020)[i % 2] for i in range(L))
    return StageProblem(L, pp, t, tuple(x / 3 for x in t), (0.3 * GB,) * L, (0.015 * GB,) * L, (1.0 * GB,) * L,
                        0.001, 0.030, 1.2 * GB, 2.5 * GB, tuple(float(pp - s) for s in range(pp)), capacity_gb * GB,
                        **kw)


def test_even_middle_is_the_best_split_megatron_flags_express():
    # 18 alternating layers over 8 stages: the best contiguous split is one no flag expresses, 10 ms faster
    free = _alternating(18, 8, 75)
    assert _dp_optimum(free) == pytest.approx(0.052)
    assert _expressible_optimum(free) == pytest.approx(0.062)
    # with even_middle the solver returns the best expressible split, proved optimal: gpt-oss-120b's 36 layers, BLOOM's
    # 70 and DeepSeek-V3's 61 over the search's stage counts, roomy and memory-tight (recompute per stage or one count)
    cases = [(18, 8, 75), (36, 16, 75), (36, 32, 75), (70, 32, 75), (61, 16, 75), (36, 8, 14.3), (36, 8, 11.3)]
    for L, pp, cap in cases:
        for uniform in (False, True):
            p = _alternating(L, pp, cap, even_middle=True, uniform_recompute=uniform)
            a = assign_stages(p)
            want = _expressible_optimum(p)
            if want is None:
                assert a is None, (L, pp, cap, uniform)
                continue
            assert a is not None and a.optimal, (L, pp, cap, uniform)
            _check(p, a)
            flags = megatron_flags(a)
            assert flags is not None and stage_layer_counts(L, pp, *flags) == list(a.layers_per_stage)
            assert a.slowest_stage_s == pytest.approx(want, rel=1e-5), (L, pp, cap, uniform)
    # random non-uniform layers, checked the same way
    rng = random.Random(3)
    for case in range(6):
        p = _random_problem(rng, (8, 20), (3, 6), (8, 20), even_middle=True)
        want, a = _expressible_optimum(p), assign_stages(p)
        assert (a is None) == (want is None), case
        if a is not None:
            assert a.optimal and megatron_flags(a) is not None, case
            assert a.slowest_stage_s == pytest.approx(want, rel=1e-5), case


def test_flag_splits_are_every_split_the_flags_express_once():
    for L, pp, count in ((61, 16, 101), (61, 4, 871), (36, 32, 6), (36, 16, 29), (12, 2, 11), (9, 1, 1)):
        splits = flag_splits(L, pp)
        assert len(splits) == len(set(splits)) == count, (L, pp)
        assert all(len(c) == pp and sum(c) == L and min(c) >= 1 for c in splits)
        # each is the default split or one the first/last flags give (megatron_flags finds flags for it)
        assert all(megatron_flags(StageAssignment(c, (0,) * pp, 0.0, (0.0,) * pp, (0.0,) * pp, True)) is not None
                   for c in splits)
        assert tuple(stage_layer_counts(L, pp)) in splits


def test_enumeration_finds_the_cp_sat_optimum_of_the_flag_splits():
    # the same integer model, scored split by split or solved by CP-SAT: the same slowest stage and total time (a
    # split of equal objective may differ: of those the enumeration keeps the one with the most memory to spare)
    rng = random.Random(11)
    for case in range(10):
        p = _random_problem(rng, (8, 40), (2, 10), (6, 30), even_middle=True, uniform_recompute=case % 3 == 2)
        e, c = assign_stages(p, method="enumerate"), assign_stages(p, deterministic_time=5.0, method="cp-sat")
        assert (e is None) == (c is None), case
        if e is None or c is None:
            continue
        assert e.solver == "enumeration" and e.optimal and c.solver == "CP-SAT" and c.optimal, case
        _check(p, e)
        assert e.slowest_stage_s == pytest.approx(c.slowest_stage_s, rel=1e-6), case
        assert sum(e.stage_time_s) == pytest.approx(sum(c.stage_time_s), rel=1e-6), case
        assert max(e.stage_bytes) <= max(c.stage_bytes) * (1 + 1e-6) or e.layers_per_stage == c.layers_per_stage


def test_the_search_enumerates_small_flag_split_spaces_and_solves_large_ones():
    small = _alternating(36, 16, 75, even_middle=True)  # 29 splits x 52 stage costings
    assert len(flag_splits(36, 16)) * (36 + 16) <= ENUMERATION_BUDGET
    a = assign_stages(small)
    assert a is not None and a.solver == "enumeration" and a.optimal and enumerates(small)
    big = uniform_stage_problem(126, 3, capacity_bytes=80 * GB, even_middle=True, **LLAMA70)  # 7,626 splits
    assert len(flag_splits(126, 3)) * (126 + 3) > ENUMERATION_BUDGET
    b = assign_stages(big)
    assert b is not None and b.solver == "CP-SAT" and b.optimal and not enumerates(big)
    assert b.slowest_stage_s == pytest.approx(assign_stages(big, method="enumerate").slowest_stage_s, rel=1e-6)
    free = uniform_stage_problem(61, 16, capacity_bytes=80 * GB, **LLAMA70)  # every contiguous split: CP-SAT
    assert assign_stages(free).solver == "CP-SAT" and not enumerates(free)


def test_enumerated_solves_leave_ortools_unloaded():
    # the search's stage solves (engine._solve_stage_problems, two cores or more: threads) import ortools only when a
    # problem needs CP-SAT; its import was a tenth of gpt-oss-120b's search on h100x256, whose problems all enumerate
    code = ("import sys\n"
            "from planner.search import engine, forks\n"
            "from planner.search.stages import StageProblem\n"
            "forks.available_cores = lambda: 2\n"
            "def q(L, pp, even_middle=True):\n"
            "    return StageProblem(L, pp, (0.031,) * L, (0.01,) * L, (0.57e9,) * L, (0.034e9,) * L, (0.97e9,) * L,\n"
            "                        0.0, 0.0, 0.0, 0.0, tuple(float(pp - s) for s in range(pp)), 80e9,\n"
            "                        even_middle=even_middle)\n"
            "small = [q(36, 16), q(36, 32)]\n"
            "out = engine._solve_stage_problems(small)\n"
            "assert all(out[x] is not None and out[x].solver == 'enumeration' for x in small), out\n"
            "assert 'ortools' not in sys.modules, 'ortools imported for enumerated problems'\n"
            "big = q(126, 3)\n"
            "out = engine._solve_stage_problems(small + [big])\n"
            "assert out[big].solver == 'CP-SAT' and 'ortools' in sys.modules, out[big]\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def _deepseek(capacity_gb: float, contiguous: bool = True) -> StageProblem:
    # 3 dense layers (12 ms, 0.3 GB states, 0.5 GB activations) then 58 MoE layers (20 ms, 2 GB, 0.3 GB)
    t = (0.012,) * 3 + (0.020,) * 58
    return StageProblem(61, 16, t, tuple(x / 3 for x in t), (0.5 * GB,) * 3 + (0.3 * GB,) * 58, (0.015 * GB,) * 61,
                        (0.3 * GB,) * 3 + (2.0 * GB,) * 58, 0.001, 0.030, 1.2 * GB, 2.5 * GB,
                        tuple(float(16 - s) for s in range(16)), capacity_gb * GB, contiguous=contiguous)


def test_deepseek_dense_prefix_exact_beats_mean_costs():
    # roomy: 4 MoE layers set the pace (80 ms); the 3 dense layers share stage 0 with the embedding
    p = _deepseek(40)
    a = assign_stages(p)
    assert a is not None and a.optimal
    _check(p, a)
    assert a.slowest_stage_s == pytest.approx(0.080)
    # tight (24 GB): the mean-cost model (layer order ignored) picks a split that, costed layer by layer,
    # overflows memory; the exact contiguous model's split fits
    p = _deepseek(24)
    a = assign_stages(p)
    m = assign_stages(_deepseek(24, contiguous=False))
    assert a is not None and m is not None
    _check(p, a)
    mean_t = (3 * 0.012 + 58 * 0.020) / 61
    assert m.stage_time_s[1] == pytest.approx(m.layers_per_stage[1] * mean_t + m.recompute_per_stage[1] * mean_t / 3)
    exact_t, exact_b = stage_costs(p, m.layers_per_stage, m.recompute_per_stage)
    assert max(exact_b) > p.capacity_bytes or max(exact_t) > a.slowest_stage_s
    # tighter (20 GB): stage 0 takes the light dense layers and recomputes; the mean split is slower
    p = _deepseek(20)
    a, m = assign_stages(p), assign_stages(_deepseek(20, contiguous=False))
    assert a is not None and m is not None
    _check(p, a)
    assert a.layers_per_stage[0] > a.layers_per_stage[1] and a.recompute_per_stage[0] > 0
    assert max(stage_costs(p, m.layers_per_stage, m.recompute_per_stage)[0]) > a.slowest_stage_s


def test_megatron_flags():
    mk = lambda counts: StageAssignment(tuple(counts), (0,) * len(counts), 0.0, (0.0,) * len(counts),  # noqa: E731
                                        (0.0,) * len(counts), True)
    assert megatron_flags(mk([10] * 8)) == (None, None)
    assert megatron_flags(mk(stage_layer_counts(61, 16))) == (None, None)  # the default uneven split
    assert megatron_flags(mk([5] + [4] * 30 + [3])) == (5, 3)
    assert megatron_flags(mk([4] * 15 + [2])) == (None, 2)
    assert megatron_flags(mk([2] + [4] * 15)) == (2, None)
    assert megatron_flags(mk([3, 4, 5, 4])) is None
    assert megatron_flags(mk([7, 5])) == (7, None)  # the one other stage takes the rest
    assert megatron_flags(mk([12])) == (None, None)


@pytest.mark.slow
def test_126_layers_16_stages_optimal_and_128_by_64_deterministic():
    # the budget is CP-SAT deterministic time (work units), so these outcomes do not depend on load:
    # 126 x 16 proves optimal well inside it; 128 x 64 does not, and its best-found split is the same
    # every solve and no slower than the default split
    p = uniform_stage_problem(126, 16, capacity_bytes=60 * GB, **LLAMA70)
    a = assign_stages(p)
    assert a is not None and a.optimal
    _check(p, a)
    q = uniform_stage_problem(128, 64, capacity_bytes=60 * GB, **LLAMA70)
    b, c = assign_stages(q, deterministic_time=0.3), assign_stages(q, deterministic_time=0.3)
    u = uniform_assignment(q)
    assert b is not None and u is not None and not b.optimal
    _check(q, b)
    assert b == c
    assert b.slowest_stage_s <= u.slowest_stage_s + 1e-12


def test_import_does_not_load_ortools():
    code = "import sys, planner.search.stages; assert 'ortools' not in sys.modules, 'ortools imported eagerly'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cp_model_import_defers_pandas():
    # ortools' cp_model imports pandas only for its Series helpers (stages._cp_model): a solve leaves pandas unloaded,
    # and the helpers still work on real pandas objects once the caller imports pandas
    code = ("import sys\n"
            "from planner.search.stages import StageProblem, _cp_model, assign_stages\n"
            "q = StageProblem(8, 2, (0.1,) * 8, (0.05,) * 8, (1.0,) * 8, (0.5,) * 8, (1.0,) * 8, 0.0, 0.0, 0.0, 0.0,\n"
            "                 (2.0, 1.0), 100.0)\n"
            "a = assign_stages(q)\n"
            "assert a is not None and a.layers_per_stage == (4, 4), a\n"
            "assert 'pandas' not in sys.modules, 'pandas imported'\n"
            "import pandas as pd\n"
            "cm = _cp_model()\n"
            "x = cm.CpModel().new_int_var_series('x', pd.Index(range(3)), 0, 5)\n"
            "assert isinstance(x, pd.Series) and len(x) == 3\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_problem_validation():
    with pytest.raises(ValueError):
        StageProblem(4, 2, (0.1,) * 3, (0.1,) * 4, (1.0,) * 4, (1.0,) * 4, (1.0,) * 4, 0, 0, 0, 0, (2.0, 1.0), 10.0)
    with pytest.raises(ValueError):
        uniform_stage_problem(4, 2, layer_time_s=0.1, layer_recompute_s=0.0, layer_act_bytes=1.0,
                             layer_act_bytes_recompute=1.0, layer_state_bytes=1.0, capacity_bytes=10.0,
                             inflight=(1.0,))
    with pytest.raises(ValueError):
        uniform_stage_problem(4, 2, layer_time_s=-0.1, layer_recompute_s=0.0, layer_act_bytes=1.0,
                             layer_act_bytes_recompute=1.0, layer_state_bytes=1.0, capacity_bytes=10.0)
