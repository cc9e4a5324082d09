"""Plain-language reasons: why a plan wins, and why its neighbours lose."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from planner.costmodel import Context, Evaluation, evaluate
from planner.costmodel.placement import placement
from planner.costmodel.trace import FORMULAS, Term, label
from planner.search.ranking import memory_tier
from planner.search.space import plan_errors
from planner.specs import ParallelPlan

_SCALE_UP_NAME = {"nvswitch": "NVLink", "xgmi_mesh": "xGMI", "ici_torus": "ICI"}


def reason(ctx: Context, ev: Evaluation, usable_gib: float | None = None) -> str:
    """One line: what each non-trivial knob buys, from the evaluation's own numbers; memory is shown
    against `usable_gib` (the capacity the search allowed) when given, else the device's HBM."""
    p, cl = ev.plan, ctx.cluster
    parts = []
    span = placement(cl, p, ctx.train.framework)
    if p.tp > 1:
        where = (_SCALE_UP_NAME.get(cl.hardware.scale_up.kind, "the scale-up fabric") if span["tp"].aligned else
                 f"{cl.hardware.scale_out.kind.upper()} (its groups span {span['tp'].domains} scale-up domains)")
        parts.append(f"TP={p.tp} runs per-layer collectives on {where}")
    if p.pp > 1:
        bub = ev.time_breakdown["bubble_s"] / ev.step_time_s if ev.step_time_s else 0.0
        parts.append(f"PP={p.pp}{' x' + str(p.vpp) + ' virtual' if p.vpp > 1 else ''} "
                     f"({p.schedule}, bubble {100 * bub:.0f}%)")
    if p.cp > 1:
        parts.append(f"CP={p.cp} splits the {ctx.train.seq_len}-token sequence"
                     + ("" if span["cp"].aligned else
                        f" (its K/V exchange crosses {cl.hardware.scale_out.kind.upper()})"))
    if p.ep > 1:
        # the flex dispatcher sends a token once per target rank, across domains once per target domain
        # (planner.costmodel.expert.deepep_dispatch_s), alltoall / allgather every copy
        via = f" (tokens by the flex dispatcher, {ctx.train.flex_backend})" if ctx.train.dispatcher == "flex" else ""
        parts.append(f"EP={p.ep} spreads the experts{via}")
    batch_dp = math.gcd(ctx.train.global_batch, cl.count)  # the largest DP degree the batch and the devices allow
    if batch_dp < cl.count:  # the rest of the devices must go to TP x PP x CP
        parts.append(f"the global batch ({ctx.train.global_batch:,} sequences) allows DP {batch_dp} at most on "
                     f"{cl.count:,} devices")
    if p.zero_stage:
        parts.append({1: "ZeRO-1 shards optimizer states", 2: "ZeRO-2 shards optimizer and gradients",
                      3: "ZeRO-3/FSDP shards weights too"}[p.zero_stage])
    if p.custom_remat is not None:
        kept, offloaded = p.custom_remat
        parts.append("MaxText custom remat to fit (" + "; ".join(
            [f"{', '.join(offloaded)} in host memory"] * bool(offloaded) + [f"{', '.join(kept)} kept"] * bool(kept))
            + ", the rest recomputed)")
    elif p.recompute != "none":
        layers = f" ({p.recompute_layers} layers/stage)" if p.recompute_layers is not None else ""
        parts.append(f"{p.recompute} recompute to fit{layers}")
    if p.offload_modules:
        parts.append(f"the {', '.join(p.offload_modules)} tensors offloaded to host memory to fit (Megatron "
                     f"fine-grained activation offloading; {ev.memory['host_gib']:.1f} GiB per device)")
    mem = ev.memory
    cap = usable_gib if usable_gib is not None else mem["capacity_gib"]
    parts.append(f"peak {mem['peak_gib']:.1f} of {cap:.1f} GiB" + (" usable" if usable_gib is not None else ""))
    return "; ".join(parts)


Change = Callable[[ParallelPlan], "dict[str, Any] | None"]
EXPERT_OFFLOAD = ("expert_fc1", "moe_act")
NEIGHBOURS: tuple[tuple[str, Change], ...] = (
    ("TP x2", lambda p: {"tp": p.tp * 2, "dp": p.dp // 2} if p.dp % 2 == 0 else None),
    ("TP /2", lambda p: {"tp": p.tp // 2, "dp": p.dp * 2} if p.tp % 2 == 0 else None),
    ("PP x2", lambda p: {"pp": p.pp * 2, "dp": p.dp // 2} if p.dp % 2 == 0 else None),
    ("PP /2", lambda p: {"pp": p.pp // 2, "dp": p.dp * 2, "vpp": 1, "schedule": "1f1b"} if p.pp % 2 == 0 else None),
    ("ZeRO-3", lambda p: {"zero_stage": 3} if p.zero_stage != 3 else None),
    ("ZeRO-1", lambda p: {"zero_stage": 1} if p.zero_stage != 1 else None),
    ("no recompute", lambda p: {"recompute": "none", "recompute_layers": None} if p.recompute != "none" else None),
    ("no offload", lambda p: {"offload_modules": ()} if p.offload_modules else None),
    # what NVIDIA's model zoo offloads where its MoE recipe needs it (Megatron-MoE-ModelZoo e865051
    # best_practice/qwen3/readme.md l.75: --offload-modules expert_fc1 moe_act); not searched: shown where the stack
    # runs it on an MoE model (why_not)
    ("offload experts", lambda p: {"offload_modules": EXPERT_OFFLOAD} if not p.offload_modules else None),
    ("full recompute", lambda p: {"recompute": "full", "recompute_layers": None}
     if p.recompute != "full" or p.recompute_layers is not None else None),
    ("micro-batch x2", lambda p: {"micro_batch": p.micro_batch * 2}),
    ("micro-batch /2", lambda p: {"micro_batch": p.micro_batch // 2} if p.micro_batch % 2 == 0 else None),
    ("CP x2", lambda p: {"cp": p.cp * 2, "dp": p.dp // 2} if p.dp % 2 == 0 else None),
)


def why_not(ctx: Context, ev: Evaluation, cap_gib: float) -> list[dict]:
    """For each neighbour of the plan: does it break a rule, not fit, run slower (and why), or run faster but keep
    less of the memory margin (planner.search.ranking.memory_tier, so it ranks after the plan)."""
    out: list[dict[str, Any]] = []
    tier = memory_tier(ev)
    for name, change in NEIGHBOURS:
        upd = change(ev.plan)
        if not upd or (upd.get("offload_modules") and not (ctx.model.is_moe and ctx.stack.activation_offload_modules)):
            continue
        if upd.get("pp", ev.plan.pp) == 1:  # a neighbour that keeps PP keeps its schedule
            upd.update(vpp=1, schedule="1f1b")
        if upd.get("tp", ev.plan.tp) == 1:
            upd["sequence_parallel"] = False
        try:
            alt = ev.plan.model_copy(update=upd)
            alt = type(ev.plan)(**alt.model_dump())
        except ValueError:
            continue
        errs = plan_errors(ctx.model, ctx.train, ctx.cluster.count, alt)
        if errs:
            out.append({"change": name, "verdict": "invalid", "detail": errs[0]})
            continue
        a = evaluate(ctx, alt)
        if a.memory["peak_gib"] > cap_gib:
            over = a.memory["peak_gib"] - cap_gib
            out.append({"change": name, "verdict": "does not fit",
                        "detail": f"needs {a.memory['peak_gib']:.1f} GiB, {over:.1f} GiB over"})
            continue
        if not a.fits_host:
            out.append({"change": name, "verdict": "does not fit",
                        "detail": f"needs {a.memory['host_gib']:.1f} GiB of host memory per device, the host has "
                                  f"{a.memory['host_capacity_gib']:.1f}"})
            continue
        d = a.step_time_s / ev.step_time_s - 1
        diffs = {k: a.time_breakdown[k] - ev.time_breakdown.get(k, 0.0) for k in a.time_breakdown}
        worst = max(diffs, key=lambda k: diffs[k])
        because = f"{worst.rsplit('_', 1)[0]} {diffs[worst]:+.3f} s" if diffs[worst] > 0 else "overall"
        if d <= 0 and memory_tier(a) > tier:
            # faster, but ranked after the plan: it keeps less of the memory margin (planner.search.ranking)
            kept = "the margin" if tier == 0 else "the inner margin"
            out.append({"change": name, "verdict": "at the memory edge",
                        "detail": f"{100 * d:+.1f}% step time, but peaks at {a.memory['peak_gib']:.1f} of "
                                  f"{a.memory['usable_gib']:.1f} GiB usable, leaving less than {kept} free",
                        "step_time_s": a.step_time_s})
            continue
        dpeak = a.memory["peak_gib"] - ev.memory["peak_gib"]  # what it frees or takes, where it moves the peak
        peak = f", peak {dpeak:+.1f} GiB" if abs(dpeak) >= 0.05 else ""
        out.append({"change": name, "verdict": "slower" if d > 0 else "faster or equal",
                    "detail": f"{100 * d:+.1f}% step time ({because}){peak}", "step_time_s": a.step_time_s})
    return out


SUMMARY_TERMS = ("tokens_per_s_per_device", "mfu", "hfu")


def _fmt_input(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def term_row(t: Term) -> dict:
    """One derivation row: the term's value, its formula (stated once, in the cost model) with the inputs
    that produced this value, and its source."""
    inputs = ", ".join(f"{k}={_fmt_input(v)}" for k, v in t.inputs.items())
    return {"name": label(t.name), "term": t.name, "value": t.value, "unit": t.unit,
            "formula": f"{FORMULAS[t.formula_id].text} [{inputs}]", "formula_id": t.formula_id,
            "inputs": dict(t.inputs), "source": t.source}


def derivation(ctx: Context, ev: Evaluation) -> list[dict]:
    """Every number of one evaluation, rendered from its trace: the plan's shape, rates and per-layer times,
    the step-time terms and the step, the memory parts and the peak, then throughput and MFU."""
    tr = ev.trace
    step = tr["step_time_s"]
    first = [t for t in tr.factors if t.name not in SUMMARY_TERMS and t is not step]
    last = [t for t in tr.factors if t.name in SUMMARY_TERMS]
    return [term_row(t) for t in (*first, *tr.time, step, *tr.memory, *last)]


def versus(ctx: Context, ev: Evaluation, other: Evaluation) -> list[dict]:
    """Per-term difference of two plans of the same request (`plan explain --vs N`): every numeric term of
    the two traces (shape, rates, step-time terms, memory parts, throughput), in derivation order, with
    both values and other - this; terms equal in both are left out."""
    mine = {r["term"]: r for r in derivation(ctx, ev)}
    out = []
    for r in derivation(ctx, other):
        a = mine.get(r["term"])
        if a is None or not _numeric(a["value"]) or not _numeric(r["value"]):
            continue
        diff = float(r["value"]) - float(a["value"])
        if abs(diff) <= 1e-6 * max(abs(float(a["value"])), abs(float(r["value"]))):
            continue  # equal but for float rounding
        out.append({"name": r["name"], "term": r["term"], "unit": r["unit"], "value": float(a["value"]),
                    "other": float(r["value"]), "diff": diff,
                    "rel": diff / float(a["value"]) if float(a["value"]) else None})
    return out


def _numeric(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
