"""Pipeline stage balancing: contiguous layers -> stages, and how many layers each stage recomputes.

`assign_stages` solves, with OR-tools CP-SAT, the problem Megatron's uneven-pipeline flags
(--decoder-first/last-pipeline-num-layers) and per-stage activation recompute leave to the user:

    minimise   max_s time_s
    time_s   = sum of layer_time_s over the stage's layers + sum of layer_recompute_s over its
               recomputed layers + (first_extra_time_s on stage 0) + (last_extra_time_s on stage pp-1)
    bytes_s  = sum of layer_state_bytes over its layers
               + inflight_s * (sum of layer_act_bytes over its stored layers
                               + sum of layer_act_bytes_recompute over its recomputed layers)
               + (max layer_act_bytes if the stage recomputes anything: one layer's full activations
                  exist while it is re-run, as in planner.costmodel)
               + (first_extra_bytes on stage 0) + (last_extra_bytes on stage pp-1)  <=  capacity_bytes
    with n_s >= 1 layers per stage (contiguous, in order) and 0 <= r_s <= n_s recomputed layers,
    the first r_s of the stage (Megatron's --recompute-method block); with `even_middle`, n_1 = ... = n_{pp-2}
    (only the first and last stages differ: the splits --decoder-first/last-pipeline-num-layers express) or the
    default split (stage_layer_counts without flags).

The model is exact over the per-layer tuples: stage boundaries b_s are integer variables and each
per-layer quantity enters through its prefix sum. Where a tuple is uniform (dense models) the prefix
sum is linear in the boundary and the model reduces to integer layer counts; where it is not (MoE models
with leading dense layers, sliding-window mixes) the prefix sums are CP-SAT element constraints.
With `contiguous=False` layer order is ignored: every per-layer cost is replaced by its mean (layers
treated as interchangeable), which is the fast integer-count model.

Ties on the slowest stage are broken by the least total stage time, i.e. the least recompute, so a stage
that is not memory-bound never recomputes. Floats are scaled to integers: time to about 1e-7 of the
total work, bytes to about 1e-6 of the capacity, rounded up so an accepted assignment never exceeds
the capacity by rounding. Reported times and bytes are recomputed in floats from the tuples.

The splits the search poses (even_middle) are few: those are scored one by one on the same integer model
(`flag_splits`, `_enumerated`; within ENUMERATION_BUDGET), which finds the model's optimum without importing ortools.

Deterministic: CP-SAT runs one worker with a fixed seed under a deterministic-time budget
(`max_deterministic_time`, CP-SAT's count of work units, not wall-clock seconds), so the same problem
gives the same split on any machine load, hash seed or core count (same ortools version). Measured
(ortools 9.15, one worker, presolve as PROBING_LEVEL / PRESOLVE_ITERATIONS set it): the deepseek-v3 problems
the search poses (61 layers over 2 or 16 stages, element constraints) prove optimal in 0.0005-0.013
deterministic units (0.02-0.08 s wall); uniform 126 x 16 in 0.01 s; 128 x 64 does not prove optimal within 5
units (~11 s) and returns the best split found within the budget.

ortools is imported inside `assign_stages` (it costs ~0.1 s, ~0.45 s with the pandas it would load: see
`_cp_model`), so importing this module is free.
"""

from __future__ import annotations

import importlib
import math
import sys
import types
from dataclasses import dataclass, replace
from typing import Any, Callable, Literal, Sequence

from planner.costmodel.partition import stage_layer_counts
from planner.costmodel.stage_problem import StageProblem  # the problem the cost model poses (re-exported)

_TIME_UNITS = 10_000_000  # integer resolution of the whole model's time (stage times <= this)
_BYTE_UNITS = 1_000_000  # integer resolution of the capacity
DETERMINISTIC_BUDGET = 1.0  # CP-SAT deterministic time per solve (work units, independent of load)
SOLVER_SEED = 0  # fixed CP-SAT random_seed: one worker + fixed seed + deterministic budget = same answer
# CP-SAT's presolve effort (sat_parameters.proto: cp_model_probing_level, default 2, 0 turns probing off;
# max_presolve_iterations, default 3). On the search's problems presolve was most of the work. The four
# deepseek-v3 / h100x1024 solves (61 layers over 2 and 16 stages), each: 0.16-0.21 s at CP-SAT's defaults;
# 0.04-0.05 s (2 stages) and 0.12-0.14 s (16 stages) without probing; 0.02 s and 0.07-0.08 s without probing and
# with one presolve pass; the same optima proved in all three (ortools 9.15, one worker, measured 2026-11-26).
PROBING_LEVEL = 0
PRESOLVE_ITERATIONS = 1


# Stage costings (_IntegerModel.stage) above which a problem StageProblem.even_middle restricts is left to CP-SAT
# rather than scored split by split: a split costs up to L + pp of them (each stage's recompute counts tried from 0),
# about 0.3 us each on the project machine, so this bound is ~0.05 s; CP-SAT's import alone takes ~0.15-0.2 s (ortools
# and numpy) and its solves of these problems 0.01-0.3 s (measured 2026-11-28: 94 layers over 8 stages, 675 splits,
# 27 ms enumerated against 288 ms solved). CP-SAT takes 67 or more layers over 3 stages, 85 or more over 4, 97 over 5,
# 107 over 6 (BLOOM's 70 over 3, Qwen3-235B's 94 over 4, Llama-3.1-405B's 126 over 3 to 6); DeepSeek-V3's 61 over any
# count and gpt-oss-120b's 36 are enumerated.
ENUMERATION_BUDGET = 150_000


@dataclass(frozen=True)
class StageAssignment:
    layers_per_stage: tuple[int, ...]
    recompute_per_stage: tuple[int, ...]  # layers fully recomputed on each stage (the first ones)
    slowest_stage_s: float
    stage_time_s: tuple[float, ...]
    stage_bytes: tuple[float, ...]
    optimal: bool  # proved optimal: every admitted split scored (enumeration), or CP-SAT's proof
    solver: str = "CP-SAT"  # "enumeration": the splits the flags express scored one by one (flag_splits)


# ---- exact float evaluation ------------------------------------------------------------------------

def _mean_problem(p: StageProblem) -> StageProblem:
    n = p.num_layers
    mean = lambda v: (sum(v) / n,) * n  # noqa: E731
    return replace(p, layer_time_s=mean(p.layer_time_s), layer_recompute_s=mean(p.layer_recompute_s),
                   layer_act_bytes=mean(p.layer_act_bytes),
                   layer_act_bytes_recompute=mean(p.layer_act_bytes_recompute),
                   layer_state_bytes=mean(p.layer_state_bytes))


def stage_costs(p: StageProblem, layers: Sequence[int], recompute: Sequence[int]) -> tuple[list[float], list[float]]:
    """(time per stage, bytes per stage) of a split, in floats, by the module's cost model."""
    if not p.contiguous:
        p = _mean_problem(p)
    if len(layers) != p.pp or len(recompute) != p.pp or sum(layers) != p.num_layers:
        raise ValueError(f"split {list(layers)} / {list(recompute)} does not cover {p.num_layers} layers "
                         f"on {p.pp} stages")
    peak_act = max(p.layer_act_bytes)
    times, mem = [], []
    start = 0
    for s, (n, r) in enumerate(zip(layers, recompute, strict=True)):
        if not 0 <= r <= n:
            raise ValueError(f"stage {s}: {r} recomputed of {n} layers")
        idx = range(start, start + n)
        t = sum(p.layer_time_s[i] for i in idx) + sum(p.layer_recompute_s[i] for i in idx[:r])
        b = sum(p.layer_state_bytes[i] for i in idx)
        b += p.inflight[s] * (sum(p.layer_act_bytes_recompute[i] for i in idx[:r])
                              + sum(p.layer_act_bytes[i] for i in idx[r:]))
        if r:
            b += peak_act
        if s == 0:
            t += p.first_extra_time_s
            b += p.first_extra_bytes
        if s == p.pp - 1:
            t += p.last_extra_time_s
            b += p.last_extra_bytes
        times.append(t)
        mem.append(b)
        start += n
    return times, mem


def _fewest_recompute(p: StageProblem, layers: Sequence[int]) -> list[int] | None:
    """Per stage, the fewest recomputed layers that fit (None if a stage cannot fit)."""
    rec = [0] * p.pp
    for s in range(p.pp):
        while True:
            _, mem = stage_costs(p, layers, rec)
            if mem[s] <= p.capacity_bytes:
                break
            if rec[s] == layers[s]:
                return None
            rec[s] += 1
    return rec


def uniform_assignment(p: StageProblem) -> StageAssignment | None:
    """The default split (planner.costmodel.partition.stage_layer_counts: even, the first/last stages short when pp
    does not divide the layers) with the fewest recomputed layers per stage that fit; None if it cannot fit."""
    if p.pp > p.num_layers:
        return None
    layers = stage_layer_counts(p.num_layers, p.pp)
    if p.uniform_recompute:
        rec = None
        for r in range(max(layers) + 1):
            cand = [min(r, n) for n in layers]
            if max(stage_costs(p, layers, cand)[1]) <= p.capacity_bytes:
                rec = cand
                break
    else:
        rec = _fewest_recompute(p, layers)
    if rec is None:
        return None
    return _assignment(p, layers, rec, optimal=False)


def _assignment(p: StageProblem, layers: Sequence[int], rec: Sequence[int], optimal: bool,
                solver: str = "CP-SAT") -> StageAssignment:
    times, mem = stage_costs(p, layers, rec)
    return StageAssignment(tuple(int(x) for x in layers), tuple(int(x) for x in rec), max(times), tuple(times),
                           tuple(mem), optimal, solver)


def megatron_flags(a: StageAssignment) -> tuple[int | None, int | None] | None:
    """(first_stage_layers, last_stage_layers) for ParallelPlan / Megatron's
    --decoder-first/last-pipeline-num-layers that reproduce the assignment's layer counts (None for a flag
    not needed), or None when the counts are not expressible (middle stages not all equal)."""
    counts = list(a.layers_per_stage)
    pp, n = len(counts), sum(counts)
    if pp == 1 or counts == stage_layer_counts(n, pp):
        return (None, None)
    for first, last in ((counts[0], None), (None, counts[-1]), (counts[0], counts[-1])):
        try:
            if stage_layer_counts(n, pp, first, last) == counts:
                return (first, last)
        except ValueError:
            continue
    return None


# ---- CP-SAT model ----------------------------------------------------------------------------------

_CP_MODEL = "ortools.sat.python.cp_model"


class _DeferredPandas(types.ModuleType):
    """Stands in for pandas while ortools' cp_model imports: the annotations it evaluates then get placeholder
    classes; afterwards every attribute is the real pandas', imported on first use."""

    importing = True

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if self.importing:
            return type(attr, (), {"__module__": "pandas"})
        return getattr(importlib.import_module("pandas"), attr)


def _cp_model() -> Any:
    """ortools' cp_model module. It imports pandas at module level (ortools/sat/python/cp_model.py, `import pandas as
    pd`; ortools 9.15) only for its pandas-Series helpers and their type annotations, which this module never calls,
    and pandas takes ~0.3 s of the planner's ~1 s run. Unless pandas is loaded already, cp_model is imported with a
    stand-in that imports pandas on first real use, so a caller of those helpers sees no difference; if the import
    fails with the stand-in (another ortools), the ordinary import runs."""
    if _CP_MODEL in sys.modules or "pandas" in sys.modules:
        return importlib.import_module(_CP_MODEL)
    stand_in = _DeferredPandas("pandas")
    sys.modules["pandas"] = stand_in
    try:
        module = importlib.import_module(_CP_MODEL)
    except Exception:  # noqa: BLE001 - any failure under the stand-in: retry the ordinary way
        module = None
    finally:
        stand_in.importing = False
        if sys.modules.get("pandas") is stand_in:
            del sys.modules["pandas"]
    if module is None:
        sys.modules.pop(_CP_MODEL, None)
        module = importlib.import_module(_CP_MODEL)
    return module

def _is_uniform(v: Sequence[float]) -> bool:
    hi, lo = max(v), min(v)
    return hi - lo <= 1e-12 * max(abs(hi), 1e-300)


def _inflight_scale(inflight: Sequence[float]) -> int:
    """Smallest Q <= 840 with every inflight * Q integral (else 840, rounded up)."""
    for q in range(1, 841):
        if all(abs(x * q - round(x * q)) <= 1e-9 * max(1.0, x * q) for x in inflight):
            return q
    return 840


@dataclass(frozen=True)
class _Scales:
    """Float -> integer scaling of one problem: time to `_TIME_UNITS` of the total work, bytes to
    `_BYTE_UNITS` of the capacity (rounded up), in-flight counts to multiples of 1/Q."""

    t_scale: float  # integer time units per second
    unit: float  # bytes per integer unit
    Q: int  # in-flight denominator
    q: tuple[int, ...]  # in-flight counts * Q, rounded up
    cap: int  # capacity in units * Q

    def up(self, x: float) -> int:
        """bytes -> units, rounded up."""
        return math.ceil(x / self.unit - 1e-12 * x / self.unit)

    def t_int(self, x: float) -> int:
        """seconds -> integer time units."""
        return round(x * self.t_scale)


def _scales(p: StageProblem) -> _Scales | None:
    """The problem's integer scales; None when the coefficients would be so large that the layers dwarf
    the capacity (nothing fits)."""
    total_t = sum(p.layer_time_s) + sum(p.layer_recompute_s) + p.first_extra_time_s + p.last_extra_time_s
    t_scale = _TIME_UNITS / total_t if total_t > 0 else 1.0
    unit = p.capacity_bytes / _BYTE_UNITS  # bytes per integer unit
    Q = _inflight_scale(p.inflight)
    q = tuple(math.ceil(x * Q - 1e-9 * max(1.0, x * Q)) for x in p.inflight)
    cap = math.floor(p.capacity_bytes / unit * Q)
    sc = _Scales(t_scale, unit, Q, q, cap)
    big_m = max(q) * sc.up(sum(p.layer_act_bytes)) + Q * sc.up(sum(p.layer_state_bytes))
    if big_m > 2**52:
        return None
    return sc


def _prefix(values: Sequence[float], to_int: Callable[[float], int]) -> tuple[str, Any]:
    """(kind, payload): ('lin', coef) when uniform, else ('tab', integer prefix table)."""
    if _is_uniform(values):
        return ("lin", to_int(values[0]))
    table, acc = [0], 0
    for x in values:
        acc += to_int(x)
        table.append(acc)
    return ("tab", table)


class _Elements:
    """Prefix sums at a variable: linear terms for uniform tuples, shared CP-SAT element variables
    otherwise (keyed by (table id, variable id), so boundaries shared by neighbours share the element)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.cache: dict[tuple[int, tuple[str, int]], Any] = {}

    def at(self, pref: tuple[str, Any], var: Any, key: tuple[int, tuple[str, int]]) -> Any:
        kind, payload = pref
        if kind == "lin":
            return payload * var
        v = self.cache.get(key)
        if v is None:
            v = self.model.new_int_var(0, payload[-1], f"el{key}")
            self.model.add_element(var, payload, v)
            self.cache[key] = v
        return v


def _add_boundaries(model: Any, L: int, pp: int) -> tuple[list[Any], list[Any]]:
    """Stage boundaries b_0 = 0 < b_1 < ... < b_pp = L and the layer counts n_s = b_{s+1} - b_s."""
    b = [model.new_constant(0)]
    b += [model.new_int_var(s, L - (pp - s), f"b{s}") for s in range(1, pp)]
    b.append(model.new_constant(L))
    for s in range(pp):
        model.add(b[s + 1] >= b[s] + 1)
    n = [b[s + 1] - b[s] for s in range(pp)]
    return b, n


def _add_even_middle(model: Any, L: int, pp: int, n: list[Any]) -> None:
    """The splits Megatron's flags express (StageProblem.even_middle): the middle stages hold one common count (first
    and last free: --decoder-first/last-pipeline-num-layers), or the split the planner runs without the flags
    (planner.costmodel.partition.stage_layer_counts, megatron_flags (None, None)). Without this the optimum over every
    contiguous split is often one no flag expresses: gpt-oss-120b's 36 alternating sliding / full attention layers over
    16 or 32 stages, BLOOM's 70 over 32; on h100x256 the search's solves returned such splits after 0.7-1.0 s each
    without proving them optimal, and the search then dropped them. With it the same solves prove their optimum in
    0.06-0.13 s (ortools 9.15, one worker, measured 2026-11-27)."""
    mid = model.new_int_var(1, L, "even_mid")
    default = model.new_bool_var("default_split")
    for s, count in enumerate(stage_layer_counts(L, pp)):
        model.add(n[s] == count).only_enforce_if(default)
        if 0 < s < pp - 1:
            model.add(n[s] == mid).only_enforce_if(default.Not())


def _add_recompute(model: Any, p: StageProblem, b: list[Any],
                   n: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """Per stage: r_s recomputed layers (the first ones), their end e_s = b_s + r_s, and z_s = (r_s > 0)."""
    L, pp = p.num_layers, p.pp
    if p.uniform_recompute:
        R = model.new_int_var(0, L - pp + 1, "R")
    r, e, z = [], [], []
    for s in range(pp):
        rs = model.new_int_var(0, L - pp + 1, f"r{s}")
        model.add(rs <= n[s])
        if p.uniform_recompute:
            model.add_min_equality(rs, [R, n[s]])
        es = model.new_int_var(0, L, f"e{s}")
        model.add(es == b[s] + rs)
        zs = model.new_bool_var(f"z{s}")
        model.add(rs == 0).only_enforce_if(zs.Not())
        r.append(rs)
        e.append(es)
        z.append(zs)
    return r, e, z


def _add_stage_costs(model: Any, p: StageProblem, sc: _Scales, b: list[Any], e: list[Any],
                     z: list[Any]) -> tuple[Any, list[Any]]:
    """Per stage time (<= t_max) and memory (<= capacity) constraints; returns (t_max, stage times)."""
    pp = p.pp
    el = _Elements(model)
    PT = _prefix(p.layer_time_s, sc.t_int)
    PR = _prefix(p.layer_recompute_s, sc.t_int)
    PS = _prefix(p.layer_state_bytes, sc.up)
    PA = _prefix(p.layer_act_bytes, sc.up)
    PAR = _prefix(p.layer_act_bytes_recompute, sc.up)
    peak_act = sc.up(max(p.layer_act_bytes))
    Q, q = sc.Q, sc.q
    times = []
    t_max = model.new_int_var(0, _TIME_UNITS + 2, "tmax")
    for s in range(pp):
        bs, bn, es = ("b", s), ("b", s + 1), ("e", s)
        t = el.at(PT, b[s + 1], (0, bn)) - el.at(PT, b[s], (0, bs))
        t += el.at(PR, e[s], (1, es)) - el.at(PR, b[s], (1, bs))
        extra_t = (p.first_extra_time_s if s == 0 else 0.0) + (p.last_extra_time_s if s == pp - 1 else 0.0)
        t += sc.t_int(extra_t)
        times.append(t)
        model.add(t_max >= t)
        mem = Q * (el.at(PS, b[s + 1], (2, bn)) - el.at(PS, b[s], (2, bs)))
        mem += q[s] * (el.at(PA, b[s + 1], (3, bn)) - el.at(PA, e[s], (3, es)))
        mem += q[s] * (el.at(PAR, e[s], (4, es)) - el.at(PAR, b[s], (4, bs)))
        mem += Q * peak_act * z[s]
        extra_b = (p.first_extra_bytes if s == 0 else 0.0) + (p.last_extra_bytes if s == pp - 1 else 0.0)
        mem += Q * sc.up(extra_b)
        model.add(mem <= sc.cap)
    return t_max, times


def _add_objective(model: Any, L: int, pp: int, n: list[Any], t_max: Any, times: list[Any]) -> None:
    """Lexicographic: the slowest stage first, then the total stage time (= the least recompute), then
    the fewest middle stages off a common count (so Megatron's first/last flags can express the split),
    then the smallest common count (the most even split among the ties)."""
    primary = (_TIME_UNITS + 2 * pp + 2) * t_max + sum(times)  # sum(times) <= units + rounding
    if pp > 2:
        mid = model.new_int_var(1, L, "mid")
        dev = []
        for s in range(1, pp - 1):
            d = model.new_bool_var(f"d{s}")
            model.add(n[s] == mid).only_enforce_if(d.Not())
            dev.append(d)
        model.minimize((pp + 1) * (L + 1) * primary + (L + 1) * sum(dev) + mid)
    else:
        model.minimize(primary)


def _add_hint(model: Any, p: StageProblem, b: list[Any], r: list[Any]) -> StageAssignment | None:
    """Hint the default split with the fewest recomputed layers that fit; returns that split (or None)."""
    hint = uniform_assignment(p)
    if hint is not None:
        acc = 0
        for s in range(p.pp):
            acc += hint.layers_per_stage[s]
            if s + 1 < p.pp:
                model.add_hint(b[s + 1], acc)
            model.add_hint(r[s], hint.recompute_per_stage[s])
    return hint


# ---- the splits the flags express, enumerated ---------------------------------------------------------

def flag_splits(L: int, pp: int) -> list[tuple[int, ...]]:
    """Every split StageProblem.even_middle admits, once each: the default split (partition.stage_layer_counts) and
    every split whose middle stages hold one common count m (first + last = L - (pp - 2) m, each >= 1); with pp <= 2
    every split (there is no middle). About L^2 / (2 (pp - 2)) of them: DeepSeek-V3's 61 layers over 16 stages 101,
    over 4 stages 871; gpt-oss-120b's 36 over 32 stages 6."""
    if pp == 1:
        return [(L,)]
    if pp == 2:
        return [(f, L - f) for f in range(1, L)]
    out = {tuple(stage_layer_counts(L, pp)): None}
    for m in range(1, (L - 2) // (pp - 2) + 1):
        ends = L - (pp - 2) * m
        for first in range(1, ends):
            out[(first,) + (m,) * (pp - 2) + (ends - first,)] = None
    return list(out)


def _table(values: Sequence[float], to_int: Callable[[float], int]) -> list[int]:
    """The integer prefix sums the CP-SAT model reads (_prefix), as a table: entry k is the first k layers' sum."""
    kind, payload = _prefix(values, to_int)
    return [payload * k for k in range(len(values) + 1)] if kind == "lin" else payload


class _IntegerModel:
    """The CP-SAT model's integer stage times, memory and objective (_add_stage_costs, _add_objective), evaluated
    for one given split instead of solved for: the same scaled and rounded coefficients, so a split is feasible and
    ranks here exactly as it does in the CP-SAT model."""

    def __init__(self, p: StageProblem, sc: _Scales) -> None:
        self.p, self.sc = p, sc
        self.PT, self.PR = _table(p.layer_time_s, sc.t_int), _table(p.layer_recompute_s, sc.t_int)
        self.PS, self.PA = _table(p.layer_state_bytes, sc.up), _table(p.layer_act_bytes, sc.up)
        self.PAR = _table(p.layer_act_bytes_recompute, sc.up)
        self.peak_act = sc.up(max(p.layer_act_bytes))
        last = p.pp - 1
        self.extra_t = [sc.t_int((p.first_extra_time_s if s == 0 else 0.0) + (p.last_extra_time_s if s == last
                                                                                  else 0.0)) for s in range(p.pp)]
        self.extra_b = [sc.up((p.first_extra_bytes if s == 0 else 0.0) + (p.last_extra_bytes if s == last else 0.0))
                        for s in range(p.pp)]

    def stage(self, s: int, b: int, n: int, r: int) -> tuple[int, int]:
        """(integer time, integer memory) of stage s holding layers b .. b + n - 1 and recomputing the first r."""
        sc, e, bn = self.sc, b + r, b + n
        t = self.PT[bn] - self.PT[b] + self.PR[e] - self.PR[b] + self.extra_t[s]
        mem = sc.Q * (self.PS[bn] - self.PS[b]) + sc.q[s] * (self.PA[bn] - self.PA[e] + self.PAR[e] - self.PAR[b])
        return t, mem + sc.Q * (self.peak_act * (r > 0) + self.extra_b[s])

    def fewest_recompute(self, layers: Sequence[int]) -> tuple[list[int], list[int], list[int]] | None:
        """(recomputed layers, integer times, integer memory) per stage with the fewest recomputed layers that fit (a
        stage's time only grows with them): per stage, or one count R for all (uniform_recompute, r_s = min(R, n_s));
        None if the split cannot fit."""
        starts = [sum(layers[:s]) for s in range(len(layers))]
        cap = self.sc.cap
        if self.p.uniform_recompute:
            for R in range(self.p.num_layers - self.p.pp + 2):
                rec = [min(R, n) for n in layers]
                cost = [self.stage(s, b, n, r) for s, (b, n, r) in enumerate(zip(starts, layers, rec, strict=True))]
                if all(m <= cap for _, m in cost):
                    return rec, [t for t, _ in cost], [m for _, m in cost]
            return None
        rec, times, mems = [], [], []
        for s, (b, n) in enumerate(zip(starts, layers, strict=True)):
            found = next(((r, t, m) for r in range(n + 1) for t, m in (self.stage(s, b, n, r),) if m <= cap), None)
            if found is None:
                return None
            rec.append(found[0])
            times.append(found[1])
            mems.append(found[2])
        return rec, times, mems

    def objective(self, layers: Sequence[int], times: Sequence[int], mems: Sequence[int]) -> tuple[int, ...]:
        """_add_objective's lexicographic order (the slowest stage, then the total; the middle stages off their most
        common count; that count, the smallest of the most common), then the largest stage memory: without recompute
        the total time is the same for every split, so where the middle stages set the pace many splits tie, and of
        those the one with the most memory to spare is kept (CP-SAT returns any of them)."""
        pp = self.p.pp
        primary = (_TIME_UNITS + 2 * pp + 2) * max(times) + sum(times)
        if pp <= 2:
            return primary, 0, 0, max(mems)
        middles = layers[1:-1]
        dev, mid = min((sum(n != m for n in middles), m) for m in set(middles))
        return primary, dev, mid, max(mems)


def _enumerated(p: StageProblem, sc: _Scales) -> StageAssignment | None:
    """The optimum of the CP-SAT model over flag_splits, found by scoring each (_IntegerModel; of equal objectives,
    the first in flag_splits' order). None when no split fits."""
    im, best = _IntegerModel(p, sc), None
    for layers in flag_splits(p.num_layers, p.pp):
        fitted = im.fewest_recompute(layers)
        if fitted is None:
            continue
        key = im.objective(layers, fitted[1], fitted[2])
        if best is None or key < best[0]:
            best = (key, layers, fitted[0])
    return None if best is None else _assignment(p, best[1], best[2], optimal=True, solver="enumeration")


def enumerates(p: StageProblem) -> bool:
    """Whether assign_stages (method "auto") scores the problem's admitted splits one by one (_enumerated) rather than
    solving it with CP-SAT: the splits are few (StageProblem.even_middle, or pp <= 2, within ENUMERATION_BUDGET). A
    problem with more stages than layers has no answer either way (no solver runs)."""
    L, pp = p.num_layers, p.pp
    return pp > L or ((p.even_middle or pp <= 2) and len(flag_splits(L, pp)) * (L + pp) <= ENUMERATION_BUDGET)


def assign_stages(p: StageProblem, deterministic_time: float = DETERMINISTIC_BUDGET,
                  method: Literal["auto", "enumerate", "cp-sat"] = "auto") -> StageAssignment | None:
    """Contiguous layers -> stages, and per-stage counts of fully recomputed layers, minimising the
    slowest stage's time subject to each stage's memory <= capacity. None if infeasible.

    `method` "auto": where the admitted splits are few (StageProblem.even_middle, or pp <= 2, within
    ENUMERATION_BUDGET) each is scored on the CP-SAT model's own integer costs (_enumerated: optimal, `solver`
    "enumeration"), otherwise CP-SAT solves the model; "enumerate" / "cp-sat" force one (tests compare them;
    "enumerate" scores flag_splits only, so beyond pp 2 it answers the even_middle problem whatever `p` says).
    Under CP-SAT `optimal` is True when it proved the optimum within `deterministic_time` (CP-SAT work units,
    not seconds); otherwise the best split it found (or, if it found none within the budget, the default
    split when that fits) is returned. The answer never depends on wall-clock time or machine load."""
    if p.pp > p.num_layers:
        return None
    if not p.contiguous:
        p = _mean_problem(p)
    L, pp = p.num_layers, p.pp
    sc = _scales(p)
    if sc is None:
        return None
    if method == "enumerate" or (method == "auto" and enumerates(p)):
        return _enumerated(p, sc)
    cp_model = _cp_model()
    model = cp_model.CpModel()
    b, n = _add_boundaries(model, L, pp)
    if p.even_middle and pp > 2:
        _add_even_middle(model, L, pp, n)
    r, e, z = _add_recompute(model, p, b, n)
    t_max, times = _add_stage_costs(model, p, sc, b, e, z)
    _add_objective(model, L, pp, n, t_max, times)
    hint = _add_hint(model, p, b, r)

    solver = cp_model.CpSolver()
    # same bytes every run: one worker (parallel portfolios race on wall-clock), a fixed seed, and a
    # deterministic-time budget instead of max_time_in_seconds (CP-SAT docs, sat_parameters.proto)
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = SOLVER_SEED
    solver.parameters.max_deterministic_time = float(deterministic_time)
    solver.parameters.cp_model_probing_level = PROBING_LEVEL
    solver.parameters.max_presolve_iterations = PRESOLVE_ITERATIONS
    status = solver.solve(model)
    if status == cp_model.INFEASIBLE or status == cp_model.MODEL_INVALID:
        return None
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return hint  # nothing found in time: the default split if it fits
    bounds = [0] + [solver.value(b[s]) for s in range(1, pp)] + [L]
    layers = [bounds[s + 1] - bounds[s] for s in range(pp)]
    rec = [solver.value(r[s]) for s in range(pp)]
    return _assignment(p, layers, rec, optimal=status == cp_model.OPTIMAL)
