"""Search the plan space for the fastest plans that fit.

Outer knobs (tp, cp, pp, dp, ep, etp, vpp) are enumerated over the divisibility rules of
`planner.search.space`; structures whose model states alone cannot fit are pruned with a cheap lower bound
computed for all of them at once. For each surviving structure the inner knobs exploit
monotonicity: a larger micro-batch or less recompute never lowers memory, and for a fixed
micro-batch less recompute is never slower, so only the least recompute that fits is scored for each
(micro-batch, ZeRO stage). Full recompute of only k layers per stage is refined by bisection on k, its first
probes placed where the line from the no-recompute peak to full recompute's meets the capacity.
Every candidate's memory is screened first (planner.costmodel.evaluate.screen_memory, the peak `evaluate` reports);
only the candidates the search keeps are timed. With enough layouts the layouts are scored in forked processes
(planner.search.forks; the same answers, merged in layout order). The leading plans' CP-SAT stage problems are solved
side by side on threads (each solve is deterministic, planner.search.stages).
The final order and the top-k selection follow planner.search.ranking (fastest first, ties only within 0.2% of
the fastest plan, one row per layout when distinct_layouts is set).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from planner.costmodel import Context, Evaluation, evaluate
from planner.costmodel.capacity import inner_margin_rel, memory_margin_rel, usable_capacity_gib, within_margin
from planner.costmodel.evaluate import MemoryScreen, screen_memory
from planner.costmodel.memory import GIB, state_bytes_per_param
from planner.costmodel.mtp import mtp_layer_units
from planner.costmodel.partition import megatron_split, mtp_split, stage_layer_counts
from planner.costmodel.pipeline import fullest_rank_layers
from planner.costmodel.placement import slice_shape  # the one TPU slice shape (search and cost model)
from planner.errors import InputError
from planner.gcpasses import SEARCH_GC_YOUNG_THRESHOLD, fewer_gc_passes  # noqa: F401  (the threshold: tests)
from planner.launchers import capabilities, launcher_errors, model_errors
from planner.search import forks
from planner.search.ranking import (
    RECOMPUTE_ORDER,
    TIE_BAND_REL,
    complexity,
    leaders_first,
    memory_tier,
    rank,
    select,
    sorted_tie_broken,
)
from planner.search.space import divisors, needs_pipeline, plan_errors
from planner.specs import ParallelPlan
from planner.specs.dims import ParallelDims, cp_splits_sequence, tp_splits_heads, v_split_counts_embedding_loss
from planner.specs.plan import KNOBS, RECOMPUTE_NAME_KNOBS  # the one list of knob names (the sort key's tie-break)

MIN_CP_CHUNK = 4096  # tokens per CP rank below which the search does not propose CP (ring steps too short to hide)
MAX_SEARCH_VPP = 1000  # the search proposes every even interleaving (NeMo recipes use 1 layer per chunk)


@dataclass(frozen=True)
class SearchOptions:
    fixed: dict[str, Any] = field(default_factory=dict)  # knob -> value the user pinned
    top_k: int = 5
    max_tp: int | None = None  # default: the scale-up domain (TP stays on NVLink/ICI)
    memory_headroom_gib: float = 0.0  # extra free memory demanded on top of the fit reserve
    # True: plans at the memory edge rank after every plan that keeps the default memory margin
    # (planner.search.ranking.rank; False with an explicit --memory-headroom, which replaces the margin)
    memory_margin: bool = False
    max_micro_batch: int = 16
    require_fit: bool = True  # False: rank non-fitting plans too (validation of published plans)
    # True: the top_k are distinct layouts, each its best variant (planner.search.ranking)
    distinct_layouts: bool = False
    # how many of the leading fitting plans get a CP-SAT stage solve (planner.search.stages); None: top_k.
    # Separate from top_k so a caller that wants every scored plan (the report's scatter reads
    # SearchResult.ranked) does not multiply the solves.
    stage_solves: int | None = None
    launcher: str | None = None  # target stack: only plans it can run (planner.launchers)
    # True: only the launcher's rules that read the plan gate the search (the modelled stack's launcher, which cannot
    # run the model at all: planner.app.plan.modelled_launcher), so the plans are layouts that stack lays out
    launcher_plan_rules_only: bool = False
    # True: only pipeline depths that divide the layers evenly (unless --pp is pinned): the layouts an expert
    # sizes a purchase for (--min-devices), not PP27 over 80 layers with a short first stage
    even_stages: bool = False
    # processes scoring the layouts (planner.search.forks; the answers do not depend on it); None: the
    # PLANNER_SEARCH_WORKERS environment variable, else chosen from the cores and the layouts (scan_workers)
    workers: int | None = None


@dataclass
class SearchResult:
    plans: list[Evaluation]
    evaluated: int
    feasible: int
    structures: int
    pruned: int
    smallest_peak_gib: float | None = None
    smallest_peak_plan: ParallelPlan | None = None
    frontier: list[tuple[float, float]] = field(default_factory=list)  # (step_s, peak_gib) of feasible plans
    ranked: list[Evaluation] = field(default_factory=list)  # every scored plan kept, best first (plans = its head)
    # nothing fitted, the search was repeated with the optimizer offloaded and scored at least one such plan (none
    # when the stack cannot offload), and none of them fits either
    offload_scored: bool = False
    # no candidate scored: the rules broken by the refused candidate breaking the fewest (empty when one was scored)
    refused_for: tuple[str, ...] = ()


TIE_BAND = 1.0 + TIE_BAND_REL  # plans within 0.2% of the fastest count as equally fast (planner.search.ranking)


def _sort_key(e: Evaluation) -> tuple:
    """Fastest first (the working order before the final ranking of planner.search.ranking), before the knob
    tie-break (_knob_strs)."""
    return (round(e.step_time_s, 12), e.peak_gib, complexity(e.plan))


def _knob_strs(e: Evaluation) -> tuple:
    """The working order's last tie-break: every knob's text, in KNOBS order."""
    return tuple(str(getattr(e.plan, k)) for k in KNOBS)


def _working_order(opts: SearchOptions) -> Callable[[list[Evaluation]], list[Evaluation]]:
    """Sorts evaluations by _sort_key then _knob_strs, with the default memory margin by memory tier first: the plans
    at the memory edge after the others (planner.search.ranking.rank), so the stage solves go to the plans the ranking
    will show. The key is computed once per evaluation: the search sorts every scored plan by it before and after the
    stage solves (_balance_stages); the knob texts only for plans whose key another's equals
    (ranking.sorted_tie_broken: on DeepSeek-V2 on tpu-v5px256's 9,832 plans they took most of a pass of the key)."""
    memo: dict[int, tuple[Evaluation, tuple]] = {}  # id -> (the evaluation, held so that its id stays its own; key)

    def key(e: Evaluation) -> tuple:
        hit = memo.get(id(e))
        if hit is None:
            hit = memo[id(e)] = (e, (memory_tier(e), *_sort_key(e)) if opts.memory_margin else _sort_key(e))
        return hit[1]

    def order(evals: list[Evaluation]) -> list[Evaluation]:
        return sorted_tie_broken(evals, key, _knob_strs)
    return order


def _fixed_or(opts: SearchOptions, knob: str, default: list) -> list:
    """The values to try for `knob`: the pinned one, the pinned tuple of allowed ones, or `default`."""
    v = opts.fixed.get(knob)
    if isinstance(v, tuple):
        return [d for d in default if d in v]
    return [v] if v is not None else default


def _zero_choices(ctx: Context, opts: SearchOptions) -> list[int]:
    if "zero_stage" in opts.fixed and opts.fixed["zero_stage"] is not None:
        return [opts.fixed["zero_stage"]]
    return list(ctx.stack.searched_zero_stages)  # each stack's default (planner/stacks/: Megatron's is ZeRO-1)


def structures(ctx: Context, opts: SearchOptions) -> list[dict]:
    """Every valid (tp, cp, pp, dp, ep, etp) for the device count and fixed knobs."""
    n = ctx.cluster.count
    out = []
    for tp in _tp_choices(ctx, opts):
        rest_tp = n // tp
        for cp in _fixed_or(opts, "cp", _cp_candidates(ctx, rest_tp)):
            if rest_tp % cp:
                continue
            for pp, dp in _pp_dp_choices(ctx, opts, rest_tp // cp):
                out += [dict(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp)
                        for ep, etp in _expert_choices(ctx, opts, tp, cp, dp)]
    return out


def _tp_choices(ctx: Context, opts: SearchOptions) -> list[int]:
    """TP degrees: divisors of the device count up to the scale-up domain (or --max-tp) that split the heads
    (and, on a torus, form a ring of the torus)."""
    m, n, fx = ctx.model, ctx.cluster.count, opts.fixed
    max_tp = fx.get("tp") or opts.max_tp or ctx.cluster.scale_up_size
    torus_ok = torus_group_sizes(ctx.cluster) if ctx.cluster.hardware.torus else None
    out = []
    for tp in _fixed_or(opts, "tp", [d for d in divisors(n) if d <= max_tp]):
        if n % tp or not tp_splits_heads(m, tp):
            continue
        if torus_ok is not None and tp not in torus_ok and "tp" not in fx:
            continue
        out.append(tp)
    return out


def _cp_candidates(ctx: Context, rest_tp: int) -> list[int]:
    """CP pays off for long sequences only: keep >= MIN_CP_CHUNK tokens per rank (unless pinned)."""
    seq = ctx.train.seq_len
    return [c for c in divisors(rest_tp) if c == 1 or (cp_splits_sequence(seq, c) and seq // c >= MIN_CP_CHUNK)]


def _pp_dp_choices(ctx: Context, opts: SearchOptions, rest: int) -> list[tuple[int, int]]:
    """(pp, dp) splits of the devices left after TP and CP: pp up to the layer count, dp dividing the batch."""
    m, tr, fx = ctx.model, ctx.train, opts.fixed
    out = []
    least = 2 if needs_pipeline(fx) else 1  # a pinned pipeline schedule or vpp asks for a pipeline
    for pp in _fixed_or(opts, "pp", [p for p in divisors(rest) if least <= p <= m.num_layers
                                     and (not opts.even_stages or m.num_layers % p == 0)]):
        if rest % pp or pp > m.num_layers:
            continue
        dp = rest // pp
        if fx.get("dp") is not None and fx["dp"] != dp:
            continue
        if tr.global_batch % dp:
            continue
        out.append((pp, dp))
    return out


def _expert_choices(ctx: Context, opts: SearchOptions, tp: int, cp: int, dp: int) -> list[tuple[int, int]]:
    """(ep, etp) pairs for a (tp, cp, dp) layout: EP over divisors of the expert count that ep * etp carves out
    of tp * cp * dp (Megatron), ETP 1 or tp; (1, 1) for a dense model."""
    m = ctx.model
    if m.moe is None:
        return [(ep, 1) for ep in _fixed_or(opts, "ep", [1])]
    out = []
    for etp in _fixed_or(opts, "etp", sorted({1, tp})):
        cand = [e for e in divisors(m.moe.num_experts) if (tp * cp * dp) % (e * etp) == 0]
        out += [(ep, etp) for ep in _fixed_or(opts, "ep", cand)]
    return out


def torus_group_sizes(cluster) -> set[int]:
    """Innermost-group sizes (TP) that map onto whole torus axes: a divisor of the first axis, or the
    first axis times a divisor of the second, and so on (a JAX device mesh cannot split an ICI axis
    any other way without leaving the torus). A chip's own devices (TPU7x) come first: a group of them stays on
    one chip."""
    shape = slice_shape(cluster)
    t = cluster.hardware.torus
    if t is not None and t.cores_per_chip > 1:
        shape = shape[-1:] + shape[:-1]
    sizes, prefix = set(), 1
    for a in shape:
        sizes |= {prefix * d for d in divisors(a)}
        prefix *= a
    return sizes


def _state_lower_bound_gib(ctx: Context, rows: list[dict], zero_stages: list[int]) -> list[float]:
    """Cheap lower bound of per-device model-state memory for many structures at once."""
    P = ctx.params
    expert_total = sum(k.params.routed_experts for k in ctx.layer_kinds)
    dense_total = P.total - expert_total
    states = {z: state_bytes_per_param(ctx.train, z, False) for z in set(zero_stages)}
    out = []
    for r, z in zip(rows, zero_stages, strict=True):
        st = states[z]
        tp, pp, cp, dp, ep, etp = (float(r[k]) for k in ("tp", "pp", "cp", "dp", "ep", "etp"))
        zd, ze = dp * cp, max(1.0, dp * cp * tp / (ep * etp))
        val = dense_total / (tp * pp) * sum(st.per_param(zd)) + expert_total / (ep * etp * pp) * sum(st.per_param(ze))
        out.append(val / GIB)
    return out


def _heaviest_stage(ctx: Context, pp: int, first: int | None, last: int | None, units: int) -> int:
    """The fullest stage of a split as the cost model counts it (partition.stage_layer_counts: the embedding-and-loss
    form is the default uneven split), the last counting the MTP modules' `units` (costmodel.mtp.mtp_layer_units)."""
    c = stage_layer_counts(ctx.model.num_layers, pp, first, last)
    return max(c[:-1] + [c[-1] + units])


def _with_mtp_split(ctx: Context, pp: int, v: int, classic: tuple[bool, int | None, int | None, bool],
                    mtp_fl: tuple[int, int] | None, units: int) -> tuple[bool, int | None, int | None, bool]:
    """The MTP split (partition.mtp_split) in place of the classic one where the stack states it (v dividing its
    fullest stages; a layout, or first/last flags that divide into v) and its fullest stage is no fuller than the
    classic split's (the equal middle stages of the first/last form can make it fuller: 61 layers on pp 14). One
    split per (pp, vpp, schedule), as without MTP: proposing both doubled the DeepSeek-V3 search time (gb200x256:
    2.6 -> 5.1 s)."""
    if mtp_fl is None or mtp_fl[0] % v or (mtp_fl[1] % v and not ctx.stack.pipeline_layout_option):
        return classic
    if classic[0] and _heaviest_stage(ctx, pp, *mtp_fl, units) > _heaviest_stage(ctx, pp, *classic[1:3], units):
        return classic
    return (True, *mtp_fl, False)


def _vpp_choices(ctx: Context, opts: SearchOptions, pp: int) -> list[tuple[int, str, int | None, int | None, bool]]:
    """(vpp, schedule, first_stage_layers, last_stage_layers, account_embedding_loss) for a pipeline
    depth. Layer splits are proposed in the forms Megatron's classic flags state: even over pp (and vpp), the
    embedding and loss counted as layers, or explicit first/last stage sizes with equal middle stages
    (planner.costmodel.partition.megatron_split); where none does, the default uneven split if the stack states
    any split (Stack.pipeline_layout_option: Megatron's --pipeline-model-parallel-layout) and v divides its fullest
    ranks' layers; for a model with MTP modules, in their place the split that leaves the last stage room for them
    where it is no fuller (partition.mtp_split, _with_mtp_split); pinned sizes are kept."""
    L = ctx.model.num_layers
    if pp == 1:
        return [(1, "1f1b", None, None, False)]
    sched = opts.fixed.get("schedule")
    vpp_fixed = opts.fixed.get("vpp")
    pinned = "first_stage_layers" in opts.fixed or "last_stage_layers" in opts.fixed
    fullest = max(stage_layer_counts(L, pp))  # the fullest rank of the default split, for the layout fallback
    # MTP modules on the last stage (planner.costmodel.mtp): a split that gives it their layer-equivalents fewer layers
    units = mtp_layer_units(ctx.model, ctx.train.seq_len)
    mtp_fl = mtp_split(L, pp, units) if units and not pinned else None

    def classic(v: int) -> tuple[bool, int | None, int | None, bool]:
        if pinned:
            return True, opts.fixed.get("first_stage_layers"), opts.fixed.get("last_stage_layers"), False
        if L % pp == 0 and (L // pp) % v == 0:
            return True, None, None, False
        if (L + 2) % pp == 0 and ((L + 2) // pp) % v == 0:
            return True, None, None, True
        fl = megatron_split(L, pp, v)
        if fl is None and ctx.stack.pipeline_layout_option and fullest % v == 0:
            # the default uneven split as a stated layout (Stack.pipeline_layout_option), its virtual stages even on
            # the fullest ranks, which set the steady state (v divides their layers, as an even split's v does)
            return True, None, None, False
        return (fl is not None, *(fl or (None, None)), False)

    out = []
    # a pinned schedule, a tuple of allowed ones (a stack's limits), or the default 1F1B / interleaved
    allowed = set(sched) if isinstance(sched, tuple) else ({"1f1b", "interleaved"} if sched is None else {sched})
    if vpp_fixed in (None, 1):
        for name in (s for s in ("1f1b", "gpipe", "zb", "dualpipe") if s in allowed):
            ok, f, la, acc = _with_mtp_split(ctx, pp, 1, classic(1), mtp_fl, units)
            if ok:
                out.append((1, name, f, la, acc))
    v_acc = v_split_counts_embedding_loss(L, pp)
    if "dualpipev" in allowed and vpp_fixed in (None, 2) and not pinned and v_acc is not None:
        out.append((2, "dualpipev", None, None, v_acc))  # two stages per rank in a V (ParallelPlan.schedule)
    if "interleaved" in allowed and vpp_fixed != 1:
        vs = [vpp_fixed] if vpp_fixed not in (None, 1) else [v for v in range(2, min(MAX_SEARCH_VPP, L // pp) + 1)
                                                               if (L // pp) % v == 0 or L % pp]
        for v in vs:
            ok, f, la, acc = _with_mtp_split(ctx, pp, v, classic(v), mtp_fl, units)
            if ok or vpp_fixed not in (None, 1):
                out.append((v, "interleaved", f, la, acc))
    return out


BEAM_THRESHOLD = 600  # (layout, ZeRO) pairs above which the outer knobs are beam-searched
BEAM_WIDTH = 150  # pairs kept by the beam, ranked by a one-plan probe each


def search(ctx: Context, opts: SearchOptions | None = None) -> SearchResult:
    """The fastest fitting plans. When none fits and offload was not pinned, the search is repeated
    with optimizer states offloaded to the host (ZeRO-Offload) and the plans carry a warning."""
    with fewer_gc_passes():  # planner.gcpasses: a search keeps most of what it allocates
        return _search_or_offload(ctx, opts or SearchOptions())


def _search_or_offload(ctx: Context, opts: SearchOptions) -> SearchResult:
    res = _search(ctx, opts)
    if not res.plans and opts.require_fit and "offload_optimizer" not in opts.fixed:
        off = _search(ctx, SearchOptions(**{**opts.__dict__, "fixed": {**opts.fixed, "offload_optimizer": True}}))
        note = ("fits only with optimizer states offloaded to the host (ZeRO-Offload): "
                "the optimizer step runs on the CPU over PCIe")
        noted = {id(e): replace(e, warnings=(*e.warnings, note)) for e in off.plans}
        off.plans = [noted[id(e)] for e in off.plans]
        off.ranked = [noted.get(id(e), e) for e in off.ranked]
        if off.plans:
            off.evaluated += res.evaluated
            return off
        # nothing fits either way: the smallest peak is the lowest of the two searches (the offloaded one's, as a rule)
        lows = [(r.smallest_peak_gib, r.smallest_peak_plan) for r in (res, off) if r.smallest_peak_gib is not None]
        low = min(lows, key=lambda x: x[0]) if lows else (None, None)
        return replace(res, evaluated=res.evaluated + off.evaluated, smallest_peak_gib=low[0],
                       smallest_peak_plan=low[1], offload_scored=off.smallest_peak_gib is not None)
    return res


# Context -> {launcher: True when none of its plan-free rules breaks for the context's model, training and cluster}
_PLAN_FREE_CLEAR: weakref.WeakKeyDictionary[Context, dict[str, bool]] = weakref.WeakKeyDictionary()


def _fits(ev: Evaluation, cap: float) -> bool:
    """An evaluated plan's HBM peak within `cap` (the search's usable capacity) and its host share within the host
    DRAM per device where that is known (Evaluation.fits_host)."""
    return ev.peak_gib <= cap and ev.fits_host


def _invalid(ctx: Context, opts: SearchOptions, plan: ParallelPlan) -> list[str]:
    """The one gate of every candidate: the divisibility rules, then the target launcher's capabilities. Returns the
    rules the plan breaks (empty: a valid candidate). The launcher's rules that hold whatever the plan (model, dtype,
    hardware: planner.launchers.model_errors) are read once per search; when none breaks, each candidate reads only
    the rules of its plan (the same answer), else all of them; only the plan's with opts.launcher_plan_rules_only."""
    errs = plan_errors(ctx.model, ctx.train, ctx.cluster.count, plan)
    if errs or not opts.launcher:
        return errs
    clear = _PLAN_FREE_CLEAR.setdefault(ctx, {})
    if opts.launcher not in clear:
        clear[opts.launcher] = not model_errors(ctx.model, ctx.train, opts.launcher, ctx.cluster)
    return launcher_errors(plan, ctx.model, ctx.train, opts.launcher, ctx.cluster,
                           plan_rules_only=opts.launcher_plan_rules_only or clear[opts.launcher])


def _cp_kinds(opts: SearchOptions) -> list[str]:
    """Context-parallel kinds to try: the target launcher's (DeepSpeed: Ulysses all-to-all only), else ring."""
    kinds = capabilities(opts.launcher).cp_kinds if opts.launcher else ()
    return ["ring"] if not kinds or "ring" in kinds else list(kinds)


def _probe(ctx: Context, opts: SearchOptions, r: dict, z: int, cap: float) -> float:
    """Cheap rank of a (layout, ZeRO) pair for the beam: step time of its most memory-frugal plan
    (micro-batch 1, full recompute, no interleaving); infinity if even that does not fit."""
    try:
        plan = ParallelPlan(**r, micro_batch=1, zero_stage=z, recompute="full", sequence_parallel=r["tp"] > 1,
                            cp_comm=_fixed_or(opts, "cp_comm", _cp_kinds(opts))[0])
    except ValueError:
        return math.inf
    if _invalid(ctx, opts, plan):
        return math.inf
    mem = screen_memory(ctx, plan)  # the step time only of a plan that fits
    return evaluate(ctx, plan, mem).step_time_s if mem.fits(ctx, cap) else math.inf


def _shard_choices(ctx: Context, opts: SearchOptions, r: dict, z: int) -> list[int | None]:
    """ZeRO/FSDP shard group: all of dp*cp, or (HSDP, FSDP frameworks) one scale-up domain."""
    if "zero_shard_size" in opts.fixed:
        return [opts.fixed["zero_shard_size"]]
    group, node = r["dp"] * r["cp"], ctx.cluster.scale_up_size // max(1, r["tp"])
    if z == 3 and ctx.stack.hsdp_searched and 1 < node < group and group % node == 0:
        return [None, node]
    return [None]


PRUNED_PROBES = 50  # pruned (structure, ZeRO) pairs tried, smallest bound first, when nothing the bound kept scored


def _candidate_pairs(ctx: Context, opts: SearchOptions, rows: list[dict], cap: float) -> tuple[list, list]:
    """(structure, ZeRO stage) pairs worth scoring, and those the model-state bound pruned (smallest bound first)."""
    tr, cl = ctx.train, ctx.cluster
    fx = opts.fixed
    zeros = _zero_choices(ctx, opts)
    # prune (structure, zero) pairs whose model states alone exceed the capacity
    pairs = [(r, z) for r in rows for z in zeros]
    if ctx.stack.zero3_in_domain_searched and "zero_stage" not in fx:
        # Megatron-FSDP (ZeRO-3) where the whole model-replica group sits in one NVLink domain: the
        # evidence against ZeRO-3 (SC21 Table 2) is about gathers across the network. Only layouts that
        # Megatron-FSDP is known to run (planner/launchers/megatron.py: not with PP > 1, unverified); by the launcher's
        # plan rules only: a training setting its files cannot write (--fp8-attention, costed as pinned) says nothing
        # about the layout
        pairs += [(r, 3) for r in rows if r["tp"] * r["cp"] * r["dp"] <= cl.scale_up_size and r["dp"] * r["cp"] > 1
                  and not launcher_errors(ParallelPlan(**r, zero_stage=3), ctx.model, tr, ctx.stack.emitter,
                                          plan_rules_only=True)]
    lb = _state_lower_bound_gib(ctx, [r for r, _ in pairs], [z for _, z in pairs])
    held = [b <= cap or not opts.require_fit or bool(fx.get("offload_optimizer")) for b in lb]
    keep = [pr for pr, h in zip(pairs, held, strict=False) if h]
    pruned = [pairs[i] for i in sorted(range(len(pairs)), key=lb.__getitem__) if not held[i]]  # stable
    if len(keep) > BEAM_THRESHOLD:
        keep = _beam(ctx, opts, keep, cap)
    return keep, pruned


def _beam(ctx: Context, opts: SearchOptions, keep: list, cap: float) -> list:
    """Beam over the outer knobs: probe each pair once, expand only the most promising."""
    probes = [(_probe(ctx, opts, r, z, cap), i) for i, (r, z) in enumerate(keep)]
    ranked = sorted(probes)[:BEAM_WIDTH]
    return [keep[i] for t, i in ranked if math.isfinite(t)] or [keep[i] for _, i in ranked]


@dataclass
class _Scan:
    """What scoring the candidates accumulates, and what every candidate of the search shares (set once)."""

    steps: list[list[dict[str, Any]]]  # the recompute variants tried per micro-batch (_recompute_steps)
    margin_rel: float  # the memory margin the ranking keeps (0 without the default margin)
    inner_rel: float = 0.0  # the inner margin, the second memory tier (0 without the default margin)
    evaluated: int = 0
    results: list[Evaluation] = field(default_factory=list)
    best_peak: tuple[float, ParallelPlan] | None = None
    # while no candidate has been scored: the rules broken by the refused candidate that breaks the fewest (what the
    # error says when every candidate is refused)
    fewest_broken: list[str] | None = None
    none_peak: float | None = None  # the current micro-batch's screened peak without recompute (_scan_recomputes)


def _recompute_steps(ctx: Context, opts: SearchOptions) -> list[list[dict[str, Any]]]:
    """The recompute settings to try, in steps of rising recompute and falling memory: the pinned mode or every one
    (RECOMPUTE_ORDER), the stack's searched custom remat policies (Stack.searched_remat_offloads, a form of selective
    recompute) in full recompute's step: each keeps nothing of a layer in HBM (full recompute keeps its input) and
    re-runs no more than full recompute, so the step's plans differ in time (the host copies against the recompute
    they save) and all are scored. A pinned custom policy (--remat-offload / --remat-device; `none` pins none) is the
    only selective one."""
    fx = opts.fixed
    modes = _fixed_or(opts, "recompute", list(RECOMPUTE_ORDER))
    policy = {k: fx[k] for k in RECOMPUTE_NAME_KNOBS if fx.get(k) is not None}  # the custom remat policy's knobs
    if policy:
        named = any(policy.values())
        return [[{"recompute": rc, **policy}] for rc in modes if rc == "selective" or not named]
    steps: list[list[dict[str, Any]]] = [[{"recompute": rc}] for rc in modes if rc != "full"]
    last: list[dict[str, Any]] = [{"recompute": "full"}] if "full" in modes else []
    if ctx.stack.custom_remat_option and "selective" in modes:
        last += [{"recompute": "selective", "remat_offloaded": names} for names in ctx.stack.searched_remat_offloads]
    return steps + [last] * bool(last)


def _scan_recomputes(ctx: Context, opts: SearchOptions, cap: float, scan: _Scan, knobs: dict[str, Any]) -> bool:
    """Score one micro-batch's plans from the least recompute up (_recompute_steps), stopping after the first step
    with a plan that fits and, under the default memory margin, keeps it (a plan at the memory edge ranks after every
    plan that keeps the margin, planner.search.ranking: more recompute at this micro-batch may be the better plan);
    True if one fits."""
    fitted = False
    scan.none_peak = None  # this micro-batch's peak without recompute, once screened (_refine_partial_recompute)
    for step in scan.steps:
        kept = [_score_recompute(ctx, opts, cap, scan, knobs, variant) for variant in step]
        fitted |= any(k is not None for k in kept)
        if any(kept):
            return True  # more recompute only costs time at this micro-batch
    return fitted


def _score_recompute(ctx: Context, opts: SearchOptions, cap: float, scan: _Scan, knobs: dict[str, Any],
                     variant: dict[str, Any]) -> bool | None:
    """Screen and, when it fits (or fit is not required), score one recompute variant of a micro-batch's plan: None
    when it does not fit or cannot be run, else whether it keeps the memory margin (always, without one)."""
    fx = opts.fixed
    rc = variant["recompute"]
    try:
        plan = ParallelPlan(**knobs, **variant, recompute_layers=fx.get("recompute_layers") if rc == "full" else None)
    except ValueError:
        return None
    broken = _invalid(ctx, opts, plan)
    if broken:
        if scan.evaluated == 0 and (scan.fewest_broken is None or len(broken) < len(scan.fewest_broken)):
            scan.fewest_broken = broken
        return None
    mem = screen_memory(ctx, plan)  # memory first: the step time only of a plan the search keeps
    scan.evaluated += 1
    peak = mem.peak_gib
    if rc == "none":
        scan.none_peak = peak
    if scan.best_peak is None or peak < scan.best_peak[0]:
        scan.best_peak = (peak, plan)
    fits, margin = mem.fits(ctx, cap), scan.margin_rel  # the HBM peak and the host share (capacity.host_fits)
    if fits or not opts.require_fit:
        unit = (_recompute_layers_unit(ctx, opts, plan) if rc == "full" and fits and "recompute" not in fx
                and "recompute_layers" not in fx and plan.recompute_layers is None else None)
        if unit is not None:
            # timed once, for the k it keeps: the fewest layers that keep the margin where full recompute does, else
            # the inner margin where it keeps that (the memory tiers, planner.search.ranking)
            target = next(cap * (1.0 - m) for m in (margin, scan.inner_rel, 0.0) if within_margin(peak, cap, m))
            ev = _refine_partial_recompute(ctx, plan, target, mem, scan.none_peak, unit)
            scan.evaluated += 1
        else:
            ev = evaluate(ctx, plan, mem)
        scan.results.append(ev)
    return within_margin(peak, cap, margin) if fits else None


def _scan_layout(ctx: Context, opts: SearchOptions, cap: float, scan: _Scan, r: dict, z: int,
                 shard: int | None) -> None:
    """Score every variant of one (structure, ZeRO stage, shard group): interleaving, SP, CP comm, offload,
    micro-batch, recompute."""
    fx, tr = opts.fixed, ctx.train
    base_fixed = {k: v for k, v in fx.items() if k in ("tp_comm_overlap", "offload_modules") and v is not None}
    per_rank = ParallelDims(dp=r["dp"]).local_batch(tr.global_batch)
    mbs_all = [b for b in divisors(per_rank) if b <= opts.max_micro_batch]
    mbs_list = _fixed_or(opts, "micro_batch", mbs_all)
    for vpp, sched, first, last, acc in _vpp_choices(ctx, opts, r["pp"]):
        for sp in _fixed_or(opts, "sequence_parallel", [True]):
            for cpc in _fixed_or(opts, "cp_comm", _cp_kinds(opts)):
                for off in _fixed_or(opts, "offload_optimizer", [False]):
                    for mb in mbs_list:
                        knobs = dict(**r, vpp=vpp, schedule=sched, micro_batch=mb, zero_stage=z,
                                     sequence_parallel=sp and r["tp"] > 1, cp_comm=cpc, offload_optimizer=off,
                                     zero_shard_size=shard, first_stage_layers=first, account_embedding_loss=acc,
                                     last_stage_layers=last, **base_fixed)
                        if not _scan_recomputes(ctx, opts, cap, scan, knobs) and opts.require_fit and \
                                "micro_batch" not in fx:
                            break  # larger micro-batches only need more memory


def _search(ctx: Context, opts: SearchOptions) -> SearchResult:
    cl = ctx.cluster
    cap = usable_capacity_gib(cl.hardware.hbm_capacity_gib, opts.memory_headroom_gib, ctx.train.framework,
                              ctx.calibration)
    rows = structures(ctx, opts)
    if not rows:
        raise InputError(_no_structure_reason(ctx, opts))
    keep, pruned_pairs = _candidate_pairs(ctx, opts, rows, cap)
    pruned = len(pruned_pairs)
    scan = _Scan(_recompute_steps(ctx, opts), memory_margin_rel(None, ctx.calibration) if opts.memory_margin else 0.0,
                 inner_margin_rel(None, ctx.calibration) if opts.memory_margin else 0.0)
    layouts = [(r, z, shard) for r, z in keep for shard in _shard_choices(ctx, opts, r, z)]
    workers = scan_workers(opts, len(layouts))
    if workers > 1:
        _scan_in_forks(ctx, opts, cap, scan, layouts, workers)
    else:
        for r, z, shard in layouts:
            _scan_layout(ctx, opts, cap, scan, r, z, shard)
    if not scan.evaluated and pruned_pairs and opts.require_fit:
        # nothing the bound kept was scored (none kept, or the rules refused every one): score the best-sharded
        # pruned pairs, smallest bound first, until top_k of them (at most PRUNED_PROBES tried) give a scored plan, to
        # say how far from fitting the runnable layouts are: a memory answer, not a rules one
        scored_pairs = 0
        for r, z in pruned_pairs[:PRUNED_PROBES]:
            before = scan.evaluated
            for shard in _shard_choices(ctx, opts, r, z):
                _scan_layout(ctx, opts, cap, scan, r, z, shard)
            scored_pairs += scan.evaluated > before
            if scored_pairs >= max(1, opts.top_k):
                break
    results, evaluated, best_peak = scan.results, scan.evaluated, scan.best_peak
    working_order = _working_order(opts)
    results = working_order(results)
    if opts.distinct_layouts:  # balance the stages of the plans a distinct-layout table shows
        results = leaders_first(results)
    results = _balance_stages(ctx, opts, results, cap, working_order)
    feasible = [e for e in results if _fits(e, cap)]
    frontier = [(e.step_time_s, e.peak_gib) for e in feasible]
    # every scored plan, best first (the report's)
    ordered = rank(feasible if opts.require_fit else results, memory_margin=opts.memory_margin)
    chosen = select(ordered, opts.top_k, not opts.distinct_layouts)
    return SearchResult(
        plans=chosen, evaluated=evaluated, feasible=len(feasible), structures=len(rows), pruned=pruned,
        smallest_peak_gib=best_peak[0] if best_peak else None, smallest_peak_plan=best_peak[1] if best_peak else None,
        frontier=frontier, ranked=ordered, refused_for=tuple(scan.fewest_broken or ()) if not evaluated else (),
    )


# Layouts per process below which the scan stays in this process. Measured on the project's 2-core machine
# (2026-11-27): forking and merging cost 0.1-0.3 s (DeepSeek-V2 on tpu-v5px256: fork_map 1.60 s around children of
# 1.24 s and 1.37 s), a layout's scoring 1-10 ms (DeepSeek-V3 on h100x1024: 179 layouts in ~0.75 s in one process).
LAYOUTS_PER_WORKER = 16


def scan_workers(opts: SearchOptions, n_layouts: int) -> int:
    """Processes that score the layouts: SearchOptions.workers, else PLANNER_SEARCH_WORKERS, else as many as the
    cores this process may use (at most forks.MAX_WORKERS) with LAYOUTS_PER_WORKER layouts each; always 1 where the
    platform does not fork or the process runs threads a fork is not safe with (planner.search.forks)."""
    asked = opts.workers or forks.requested_workers()
    if not (forks.can_fork() and forks.fork_safe()):
        return 1  # off Linux, or other threads that a fork could leave holding a lock in the child
    if asked is not None:
        return max(1, min(asked, n_layouts))
    return max(1, min(forks.available_cores(), forks.MAX_WORKERS, n_layouts // LAYOUTS_PER_WORKER))


def _scan_one_layout(ctx: Context, opts: SearchOptions, cap: float, steps: list, margins: tuple[float, float],
                     layout: tuple) -> tuple:
    """One layout scanned on its own (in a forked process): what it adds to a _Scan, the evaluations without their
    lazily built traces (a closure over the context does not pickle)."""
    part = _Scan(steps, *margins)
    _scan_layout(ctx, opts, cap, part, *layout)
    return part.evaluated, [portable_evaluation(e) for e in part.results], part.best_peak, part.fewest_broken


def portable_evaluation(e: Evaluation) -> tuple:
    """An evaluation as plain data that pickles (to leave a forked process): all but its lazily built trace, a closure
    over the context that does not pickle (restored_evaluation rebuilds it)."""
    return e.plan, e.figures, e.peak_stage, e.warnings, e.pipeline


def restored_evaluation(ctx: Context, data: tuple) -> Evaluation:
    """The evaluation portable_evaluation took apart, its trace built from `ctx` when first read: evaluate is pure and
    the caches never change a value, so it is the trace the forked process would have built."""
    from functools import partial

    plan, figures, peak_stage, warnings, pipeline = data
    return Evaluation(plan=plan, figures=figures, build_trace=partial(_trace_of, ctx, plan), peak_stage=peak_stage,
                      warnings=warnings, pipeline=pipeline)


def _trace_of(ctx: Context, plan: ParallelPlan):
    return evaluate(ctx, plan).trace


def _scan_in_forks(ctx: Context, opts: SearchOptions, cap: float, scan: _Scan, layouts: list, workers: int) -> None:
    """The layouts scanned by this process and `workers` - 1 forked ones (planner.search.forks, here=True: this
    process takes the first process's share instead of waiting), merged into `scan` in layout order
    as _scan_layout would have filled it: the evaluated count, the results, the smallest peak (the first of equals)
    and, while nothing has been evaluated, the refused candidate breaking the fewest rules."""
    margins = (scan.margin_rel, scan.inner_rel)
    parts = forks.fork_map(lambda i: _scan_one_layout(ctx, opts, cap, scan.steps, margins, layouts[i]),
                           len(layouts), workers, here=True)
    for evaluated, evs, best_peak, fewest in parts:
        if scan.evaluated == 0 and fewest is not None and (scan.fewest_broken is None
                                                           or len(fewest) < len(scan.fewest_broken)):
            scan.fewest_broken = fewest
        scan.evaluated += evaluated
        if best_peak is not None and (scan.best_peak is None or best_peak[0] < scan.best_peak[0]):
            scan.best_peak = best_peak
        scan.results.extend(restored_evaluation(ctx, data) for data in evs)


STAGE_SOLVE_BUDGET = 0.5  # CP-SAT deterministic time per plan (work units, not seconds: load-independent)
# At most this many stage solves per search, whatever --top asks: each costs up to ~1-2 s on the project machine
# (60 solves of --top 100 on h100x720720 took 109 s of 159 s, issue 26 item 9); plans ranked below are kept with
# the even split the scan scored, as the plans beyond `stage_solves` always were.
MAX_STAGE_SOLVES = 10


def _balance_stages(ctx: Context, opts: SearchOptions, results: list[Evaluation], cap: float,
                    working_order: Callable[[list[Evaluation]], list[Evaluation]]) -> list[Evaluation]:
    """For the leading plans whose layers do not split evenly over the pipeline (and have no pinned
    stage sizes), let CP-SAT (planner.search.stages) choose the first/last stage sizes that minimise the
    slowest stage within memory, where Megatron's --decoder-first/last-pipeline-num-layers can express
    them; the re-scored plan replaces the original when it is valid, no slower and keeps its memory tier."""
    fx = opts.fixed
    if "first_stage_layers" in fx or "last_stage_layers" in fx:
        return results
    solves = min(MAX_STAGE_SOLVES, opts.top_k if opts.stage_solves is None else opts.stage_solves)
    lead = [i for i, ev in enumerate(results) if opts.require_fit and _fits(ev, cap)][:solves]
    if lead and (spare := solves - sum(_needs_stage_solve(ctx, results[i].plan) for i in lead)) > 0:
        # the solves the leaders leave (those that need none: even or interleaved pipelines) go to the plain pipelines
        # behind them that balancing could bring below the fastest leader: the balanced slowest stage takes at least
        # the stages' mean time, so the step at best shrinks by mean / slowest stage
        fastest_s = min(results[i].step_time_s for i in lead)
        lead += [i for i, ev in enumerate(results) if i not in lead and _fits(ev, cap)
                 and _needs_stage_solve(ctx, ev.plan) and ev.step_time_s * _balance_bound(ev) < fastest_s][:spare]
    problems = {i: _stage_problem_of(ctx, results[i].plan, cap) for i in lead}
    solved = _solve_stage_problems([q for q in problems.values() if q is not None])
    out = list(results)
    for i in lead:
        q = problems[i]
        new = _balanced_plan(ctx, opts, results[i], cap, None if q is None else solved[q])
        if new is not None:
            out[i] = new
    return working_order(out)


def _balance_bound(ev: Evaluation) -> float:
    """The most stage balancing can shrink a plan's step: its stages' mean time per micro-batch over the slowest's
    (the pipeline terms of planner.costmodel.pipeline; 1.0 when they are not there)."""
    pipe = ev.pipeline
    parts = [pipe.get(k) for k in ("fwd_s_per_microbatch", "bwd_s_per_microbatch", "comm_s_per_microbatch")]
    if not all(parts):
        return 1.0
    stage_s = [sum(t) for t in zip(*parts, strict=True)]
    return sum(stage_s) / len(stage_s) / max(stage_s)


def _needs_stage_solve(ctx: Context, p: ParallelPlan) -> bool:
    """An uneven split over a plain (non-interleaved, non-DualPipe) pipeline Megatron's flags can express."""
    L = ctx.model.num_layers
    return not (p.pp == 1 or p.vpp > 1 or L % p.pp == 0 or p.schedule == "dualpipe" or p.account_embedding_loss)


def _stage_problem_of(ctx: Context, p: ParallelPlan, cap: float) -> Any:
    """The plan's stage-balancing problem (planner.costmodel.balance), None when it needs none or has none; over the
    splits Megatron's first/last-stage flags express (StageProblem.even_middle), the only ones _balanced_plan
    applies."""
    from planner.costmodel.balance import stage_problem

    if not _needs_stage_solve(ctx, p):
        return None
    try:
        return replace(stage_problem(ctx, p, cap), even_middle=True)
    except ValueError:
        return None


def _solve_one(q: Any) -> Any:
    """assign_stages under the search's budget; None also when the problem is refused (ValueError)."""
    from planner.search.stages import assign_stages

    try:
        return assign_stages(q, deterministic_time=STAGE_SOLVE_BUDGET)
    except ValueError:
        return None


def _solve_stage_problems(problems: list) -> dict:
    """Each distinct problem's assignment. Where some need CP-SAT the solves run side by side on threads (CP-SAT
    releases the GIL while it searches); each is one deterministic worker with a deterministic-time budget
    (planner.search.stages), so the answers do not depend on the threads, the order or the machine's load."""
    from planner.search.stages import enumerates

    distinct = list(dict.fromkeys(problems))
    workers = min(len(distinct), forks.available_cores())  # the cores this process may run on
    if workers <= 1 or all(enumerates(q) for q in distinct):
        # enumerated splits are pure Python (threads would share the GIL) and need no ortools, whose import (~0.1 s)
        # was a tenth of gpt-oss-120b's search on h100x256 when its three problems were all enumerated
        return {q: _solve_one(q) for q in distinct}
    from concurrent.futures import ThreadPoolExecutor

    from planner.search.stages import _cp_model

    _cp_model()  # imported once, before the threads
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(distinct, pool.map(_solve_one, distinct), strict=True))


def _balanced_plan(ctx: Context, opts: SearchOptions, ev: Evaluation, cap: float, a: Any) -> Evaluation | None:
    """The plan re-scored with CP-SAT's first/last stage sizes (assignment `a`), or None when there is none that is
    valid, fits, is no slower and is no nearer the memory edge (planner.search.ranking.memory_tier)."""
    from planner.search.stages import megatron_flags

    p = ev.plan
    flags = megatron_flags(a) if a else None
    if a is None or not flags or flags == (None, None):
        return None
    first, last = flags
    try:
        alt = ParallelPlan(**{**p.model_dump(), "first_stage_layers": first, "last_stage_layers": last,
                              "account_embedding_loss": False})
    except ValueError:
        return None
    if _invalid(ctx, opts, alt):
        return None
    new = evaluate(ctx, alt)
    # no slower, and no nearer the memory edge than the plan it replaces (the ranking's memory tiers): a balanced
    # split that only fits without the margin would drop its layout below the plans that keep it
    if (_fits(new, cap) and new.step_time_s <= ev.step_time_s * 1.0001
            and (not opts.memory_margin or memory_tier(new) <= memory_tier(ev))):
        return replace(new, pipeline={**new.pipeline, "stage_assignment": {
            "layers_per_stage": list(a.layers_per_stage),
            "recompute_per_stage": _recomputed_per_stage(alt, a.layers_per_stage),
            "solver": a.solver + (" (optimal)" if a.optimal else "")}})
    return None


def _recomputed_per_stage(p: ParallelPlan, layers: Sequence[int]) -> list[int]:
    """Layers each stage fully recomputes as the plan runs (Context.stage_kind_counts' n_full): all of them under full
    recompute, at most recompute_layers with that count, none otherwise. Not the solver's own counts: it sizes the
    recompute to the capacity, the plan keeps the count the scan chose (for the memory margin)."""
    if p.recompute != "full":
        return [0] * len(layers)
    return [n if p.recompute_layers is None else min(p.recompute_layers, n) for n in layers]


def _recompute_layers_unit(ctx: Context, opts: SearchOptions, plan: ParallelPlan) -> int | None:
    """The step in which the rules take full recompute of only some of a rank's layers for this plan: 1, else vpp
    (Megatron recomputes the same first layers of each virtual stage: stacks.rules.partial_recompute_per_virtual_stage);
    None where they take none (a launcher that recomputes every layer or none) or the step is not below the fullest
    rank's layers (nothing partial to refine)."""
    n = fullest_rank_layers(plan, ctx.model.num_layers)
    for unit in dict.fromkeys((1, plan.vpp)):
        if unit < n and not _invalid(ctx, opts, plan.model_copy(update={"recompute_layers": unit})):
            return unit
    return None


def _refine_partial_recompute(ctx: Context, plan: ParallelPlan, cap: float, full_mem: MemoryScreen,
                              none_peak: float | None = None, unit: int = 1) -> Evaluation:
    """Full recompute of only k layers per stage, k a multiple of `unit` (the rules' step, _recompute_layers_unit): the
    smallest such k whose peak is within `cap` (memory falls with k), scored; the plan recomputing every layer
    (screened as `full_mem`) when no k is. `none_peak`, the peak without recompute (k = 0) when the scan has it, places
    the first probe where the line from it to full recompute's peak meets `cap`, then its neighbour: the activations
    fall by about one layer's saving per recomputed layer, so the answer is mostly one of the two; otherwise (and
    beyond them) bisection, which finds the same k. The search runs over m = k / unit."""
    n = fullest_rank_layers(plan, ctx.model.num_layers)
    lo, hi, best = 1, (n - 1) // unit, None  # k = 0 is "none", already scored; k < n

    def fitting(m: int) -> MemoryScreen | None:  # memory decides: the screen of m x unit layers recomputed, if it fits
        mem = screen_memory(ctx, plan.model_copy(update={"recompute_layers": m * unit}))
        return mem if mem.fits(ctx, cap) else None

    full = full_mem.peak_gib
    if none_peak is not None and none_peak > cap >= full and lo <= hi:
        m = min(hi, max(lo, math.ceil(n * (none_peak - cap) / (none_peak - full) / unit)))
        mem = fitting(m)
        if mem is not None:  # the answer is m or below: try m - 1 first
            best, hi = mem, m - 1
            below = fitting(hi) if hi >= lo else None
            if hi >= lo and below is None:
                lo = hi + 1  # m is the smallest
            elif below is not None:
                best, hi = below, hi - 1
        else:  # the answer is above m: try m + 1 first
            lo = m + 1
            above = fitting(lo) if lo <= hi else None
            if above is not None:
                best, hi = above, lo - 1  # m + 1 is the smallest
            else:
                lo += 1
    while lo <= hi:
        m = (lo + hi) // 2
        mem = fitting(m)
        if mem is not None:
            best, hi = mem, m - 1
        else:
            lo = m + 1
    return evaluate(ctx, plan, full_mem) if best is None else evaluate(ctx, best.plan, best)


def _no_structure_reason(ctx: Context, opts: SearchOptions) -> str:
    fx = {k: v for k, v in opts.fixed.items() if v is not None}
    pinned = ", ".join(f"{k}={v}" for k, v in sorted(fx.items())) or "no fixed knobs"
    return (f"no valid parallel layout of {ctx.model.name} on {ctx.cluster.count} devices with {pinned}: "
            f"check that tp*pp*cp*dp = {ctx.cluster.count}, heads ({ctx.model.num_heads}) divide by tp, "
            f"and global batch ({ctx.train.global_batch}) divides by dp")


def min_devices(model, cluster, train, opts: SearchOptions, target_step_s: float | None = None,
                margin_rel: float | Callable[[Evaluation], float] = 0.0):
    """The fewest devices of the cluster's hardware (whole nodes, up to the cluster's count) on which a
    plan fits (and, with `target_step_s`, steps at least that fast even when it runs `margin_rel` slower
    than predicted: the upper edge of its error band, a function of the plan where the band depends on it):
    doubling to the first feasible count, then bisection over node multiples below it. Returns (count,
    SearchResult) or (None, last)."""
    from planner.specs import ClusterSpec

    limit = cluster.count
    node = min(cluster.node_size, limit)  # a cluster smaller than a node (h100x4) is its own step

    def sized(n: int) -> ClusterSpec:
        return ClusterSpec(name=f"{cluster.hardware.id}x{n}", hardware=cluster.hardware, count=n,
                           devices_per_node=cluster.devices_per_node, domain_size=cluster.domain_size)

    def laid_out(n: int) -> bool:  # some layout multiplies into n (cheap: no plan is scored)
        try:
            return bool(structures(Context(model, sized(n), train), opts))
        except (InputError, ValueError):
            return False

    def ok(n: int):
        try:
            res = search(Context(model, sized(n), train), opts)
        except InputError:
            return None
        if not res.plans:
            return None
        rel = margin_rel(res.plans[0]) if callable(margin_rel) else margin_rel
        good = target_step_s is None or res.plans[0].step_time_s * (1 + rel) <= target_step_s
        return res if good else None

    n, found, last_bad = node, None, 0
    while n <= limit:
        res = ok(n)
        if res is not None:
            found = (n, res)
            break
        last_bad, n = n, n * 2
    if found is None:
        if limit != last_bad and limit % node == 0 and (res := ok(limit)) is not None:
            found = (limit, res)
        else:
            return None, None
    # node multiples strictly between that admit a layout at all (with even stages and a batch that DP must
    # divide, many do not: bisecting over all of them would step over 320 between 256 and 512)
    between = [k * node for k in range(last_bad // node + 1, found[0] // node) if laid_out(k * node)]
    lo, hi = 0, len(between) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        res = ok(between[mid])
        if res is not None:
            found, hi = (between[mid], res), mid - 1
        else:
            lo = mid + 1
    return found
