"""How scored plans are ordered and which of them are shown.

The rule (documented in docs/quickstart.md, "Reading the output"):

1. Plans are ordered by predicted step time, fastest first.
   With the default memory margin (planner.costmodel.capacity), a plan whose peak does not leave the margin
   free ranks after every plan that does: #1 keeps the margin whenever any plan can. Among the plans that do not,
   those that keep the inner margin (the median memory miss) rank first: the memory tiers 0, 1, 2 (memory_tier).
2. Plans whose step time is within TIE_BAND_REL (0.2%) of the fastest plan count as equally fast:
   among them the smaller peak memory ranks first, then the simpler layout. The band is anchored on
   the fastest plan only, so there are no bucket edges that could split two near-equal plans further
   down the list.
3. Consequently no plan ranks above one that is both faster and smaller: below the band every later
   row is no faster; inside it every later row uses at least as much memory (and, at equal memory, is
   no faster).
4. By default only the best variant of each layout (tp, pp, cp, dp, ep) is shown, so the top k are k
   different layouts; `--all-variants` lists the other variants (micro-batch, ZeRO, recompute,
   virtual stages, ...) too.

The functions take anything with `.plan` (a ParallelPlan), `.step_time_s`, `.peak_gib` and `.memory_limits` (a
cost-model Evaluation).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any, Protocol, Sequence, TypeVar

TIE_BAND_REL = 0.002  # plans within 0.2% of the fastest plan count as equally fast
LAYOUT_KNOBS = ("tp", "pp", "cp", "dp", "ep")
RECOMPUTE_ORDER = ("none", "selective", "full")  # least recompute first (the search's scan order, complexity)


class Scored(Protocol):
    """What ranking reads of a scored plan (read-only, so planner.costmodel's Evaluation properties match)."""

    @property
    def plan(self) -> Any: ...

    @property
    def step_time_s(self) -> float: ...

    @property
    def peak_gib(self) -> float: ...

    @property
    def memory_limits(self) -> tuple[float, float, float] | None:
        """(usable capacity GiB, memory margin, inner margin), None where no capacity applies."""


T = TypeVar("T", bound=Scored)


def complexity(plan) -> tuple:
    """Simpler first: fewer model-parallel dimensions, less interleaving and sharding, less recompute."""
    return (plan.cp, plan.pp, plan.vpp, plan.ep, plan.tp, plan.zero_stage,
            RECOMPUTE_ORDER.index(plan.recompute), len(plan.remat_offloaded) + len(plan.remat_device), plan.micro_batch)


def _knob_text(plan) -> tuple:
    return tuple(f"{k}={v}" for k, v in sorted(plan.model_dump().items()))


def layout_key(plan) -> tuple[int, ...]:
    return tuple(getattr(plan, k) for k in LAYOUT_KNOBS)


def _peak(e: Scored) -> float:
    return float(e.peak_gib)


def memory_tier(e: Scored) -> int:
    """planner.costmodel.capacity.memory_tier of the plan's peak: 0 keeps the memory margin of the usable capacity
    free, 1 only the inner margin (the median miss), 2 less: the model's own memory error could push it over."""
    from planner.costmodel.capacity import memory_tier as tier

    limits = e.memory_limits
    if limits is None:
        return 0
    return tier(_peak(e), *limits)


U = TypeVar("U")


def sorted_tie_broken(items: Sequence[U], key: Callable[[U], tuple], tie: Callable[[U], Any]) -> list[U]:
    """`items` sorted by (key(e), tie(e)), with `tie` read only where two items' keys are equal: a stable sort by the
    key, then each run of equal keys sorted by the tie-break, is the one stable sort by the pair (the knob texts that
    break ties took most of the ranking's time: on DeepSeek-V2 on tpu-v5px256's 9,832 plans, few keys are equal)."""
    keyed = sorted(((key(e), e) for e in items), key=itemgetter(0))
    out: list[U] = []
    i, n = 0, len(keyed)
    while i < n:
        j, k = i + 1, keyed[i][0]
        while j < n and keyed[j][0] == k:
            j += 1
        if j - i == 1:
            out.append(keyed[i][1])
        else:
            out += sorted((e for _, e in keyed[i:j]), key=tie)
        i = j
    return out


def _knob_text_of(e: Scored) -> tuple:
    return _knob_text(e.plan)


def _ordered(evals: list[T], band_rel: float) -> list[T]:
    fastest = min(e.step_time_s for e in evals)
    edge = fastest * (1.0 + band_rel)
    tied = [e for e in evals if e.step_time_s <= edge]
    rest = [e for e in evals if e.step_time_s > edge]
    # (peak, complexity, step, knob text) and (step, peak, complexity, knob text), the knob text only for ties
    return (sorted_tie_broken(tied, lambda e: (_peak(e), complexity(e.plan), e.step_time_s), _knob_text_of)
            + sorted_tie_broken(rest, lambda e: (e.step_time_s, _peak(e), complexity(e.plan)), _knob_text_of))


def rank(evals: Sequence[T], band_rel: float = TIE_BAND_REL, memory_margin: bool = False) -> list[T]:
    """`evals` in the documented order (see the module docstring); deterministic for equal inputs. With
    `memory_margin` (the default margin, planner.costmodel.capacity), the plans at the memory edge follow every
    plan that keeps the margin, those keeping the inner margin first (memory_tier), each tier in that order."""
    if not evals:
        return []
    if not memory_margin:
        return _ordered(list(evals), band_rel)
    tiers: dict[int, list[T]] = {}
    for e in evals:
        tiers.setdefault(memory_tier(e), []).append(e)
    return [e for t in sorted(tiers) for e in _ordered(tiers[t], band_rel)]


def select(ranked: Sequence[T], top_k: int, all_variants: bool = False) -> list[T]:
    """The first `top_k` of a ranked list; by default only the first (best) variant of each layout.
    A subsequence of a ranked list keeps both properties of the ranking (time order outside the band,
    no row dominated by a later one)."""
    if all_variants:
        return list(ranked[:top_k])
    seen: set[tuple[int, ...]] = set()
    out: list[T] = []
    for e in ranked:
        key = layout_key(e.plan)
        if key in seen:
            continue
        seen.add(key)
        out.append(e)
        if len(out) == top_k:
            break
    return out


def leaders_first(evals: Sequence[T]) -> list[T]:
    """The first plan of each layout (in the given order), then the others: so that work spent on the
    leading plans (the stage solver) goes to the rows a distinct-layout table will show."""
    seen: set[tuple[int, ...]] = set()
    lead: list[T] = []
    rest: list[T] = []
    for e in evals:
        key = layout_key(e.plan)
        (rest if key in seen else lead).append(e)
        seen.add(key)
    return lead + rest
