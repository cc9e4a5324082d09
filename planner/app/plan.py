"""Plan a request: build its specs, refuse what can never give a plan, search, and assemble the result
document every view renders (`plan`, `plan --json`, explain, report, compare)."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Callable

from planner.app.documents import cluster_object, model_object, require_finite
from planner.app.inputs import (
    build_inputs,
    check_launcher_hardware,
    check_launcher_model,
    check_request,
    pinned_knobs,
)
from planner.app.request import PlanRequest, resolve_target
from planner.errors import InputError, NoFeasiblePlan
from planner.specs import ClusterSpec
from planner.specs.plan import RECOMPUTE_NAME_KNOBS, plan_label, recompute_label

Progress = Callable[[str], AbstractContextManager]  # shows a message while a long step runs (the CLI's spinner)


def quiet(message: str) -> AbstractContextManager:
    """The default Progress: shows nothing."""
    return nullcontext()


def modelled_launcher(model, train, cluster: ClusterSpec) -> tuple[str | None, bool]:
    """Without --launcher, the launcher whose capability rules filter the search (issue 24 item 3): the modelled
    stack's own (planner.stacks: Megatron-LM by default) where it runs on the hardware, else the first launcher
    that does (MaxText on TPUs). So #1 is always a plan the modelled stack runs and --out writes its files. Returns
    (that launcher or None, whether only its plan rules gate the search): True when it cannot run the model at all
    (a rule of the model, dtype or hardware that no plan mends: --out then says why for every launcher), so #1 is
    still a layout the modelled stack lays out. Before 2026-11-28 nothing gated such a search: DeepSeek-V2 on
    tpu-v5px256 ranked first a TP 4 plan with unsplit experts, which MaxText's expert sharding (experts split over
    the tensor axis) cannot lay out, costed with MaxText's stack."""
    from planner.launchers import model_errors, stack_launcher

    gate = stack_launcher(train, cluster)
    if gate is None:
        return None, False
    return gate, bool(model_errors(model, train, gate, cluster))


def search_gate(launcher: str | None, model, train, cluster: ClusterSpec) -> tuple[str | None, bool]:
    """The launcher whose rules gate a search and whether only its plan rules do: --launcher (all its rules), else
    modelled_launcher's answer."""
    return (launcher, False) if launcher else modelled_launcher(model, train, cluster)


def run_search(req: PlanRequest, progress: Progress = quiet):
    """Search for the request's plans; returns (ctx, result, doc). Raises InputError (exit 2) for a request
    that can never give a plan and NoFeasiblePlan (exit 3) when nothing fits."""
    req = resolve_target(req)
    from planner.costmodel import Context

    model, cluster, train = build_inputs(req)
    launcher = req.launcher
    if launcher:
        check_launcher_model(launcher, model, train, cluster)
    gate, plan_rules_only = search_gate(launcher, model, train, cluster)
    fixed = pinned_knobs(req, gate)
    headroom = req.memory_headroom_gib or 0.0
    check_request(model, cluster, train, fixed, headroom)
    ctx = Context(model, cluster, train, memory_headroom_gib=req.memory_headroom_gib)
    t0 = time.perf_counter()

    with progress(f"searching plans for {model.name} on {cluster.name}"):
        ctx, res, unrunnable, dispatchers, overlap = _search_request(req, ctx, fixed, launcher, gate, plan_rules_only)
    seconds = time.perf_counter() - t0
    if not res.plans and not res.structures:
        raise InputError(f"no layout of {model.name} on {cluster.count} {cluster.hardware.id} satisfies the pinned "
                         f"knobs ({req.pins_text()}): pin fewer knobs or change the device count")
    if not res.plans and res.smallest_peak_gib is None:
        # no candidate was even scored: no question of memory (a search that finds nothing that fits scores the
        # best-sharded plans to say why)
        raise InputError(no_runnable_layout_message(model, cluster, req, launcher, gate, res.refused_for))
    if not res.plans:
        raise NoFeasiblePlan(nothing_fits_message(ctx, res, headroom, fixed))
    doc = search_doc(ctx, res, req, seconds)
    margin = margin_note(res)
    if margin:
        doc["plans"][0]["warnings"] = [*doc["plans"][0]["warnings"], margin]
    if dispatchers:
        doc["search"]["moe_dispatchers"] = dispatchers
        chosen = dispatcher_note(ctx, dispatchers)
        if chosen:
            doc["plans"][0]["warnings"] = [*doc["plans"][0]["warnings"], chosen]
    if overlap:
        doc["search"]["moe_a2a_overlap"] = {"with": overlap[True], "without": overlap[False]}
        chosen = overlap_note(ctx, overlap)
        if chosen:
            doc["plans"][0]["warnings"] = [*doc["plans"][0]["warnings"], chosen]
    if unrunnable:
        for p in doc["plans"]:
            p["warnings"] = [*p["warnings"], unrunnable]
    from planner.catalog.models import model_file_defaults
    defaults = model_file_defaults(req.model)
    if defaults:  # a config.json that leaves fields to Hugging Face's defaults: said, not silent
        doc["model"]["defaulted_fields"] = defaults
    from planner.analysis.bands import attach_bands
    attach_bands(ctx, doc, res.plans)  # plans[i].step_time_band, band_note
    require_finite(doc)
    return ctx, res, doc


def _search_request(req: PlanRequest, base, fixed: dict, launcher: str | None, gate: str | None,
                    plan_rules_only: bool = False):
    """The search of a checked request: (ctx, result, what says that the gate's launcher cannot run the plans or None,
    {dispatcher: its #1's step time} where the MoE dispatcher is searched, {with the batch-level EP overlap: its #1's
    step time} where the overlap is searched: planner.search.dispatchers). plan_rules_only: only the plan rules of
    `gate` gate the search (modelled_launcher)."""
    from planner.search.dispatchers import search_dispatchers
    from planner.search.engine import search

    found = search_dispatchers(base, search_options(req, fixed, gate, plan_rules_only),
                               overlap_pinned=req.moe_a2a_overlap is not None)
    pinned = bool(req.knobs)  # the user's pins (`fixed` also holds the launcher's search defaults)
    if (not launcher and gate and not found.result.plans and (pinned or plan_rules_only)
            and found.result.smallest_peak_gib is None):
        # the pinned knobs describe a run the modelled stack's launcher cannot write (DeepSeek-V3's own DualPipe
        # plan): cost it as pinned, and say that no launch files of that launcher are written for it. Not where the
        # launcher runs some of them and none fits: that is the answer (exit 3), with the smallest peak of the plans
        # it runs (before, Llama 3.1 70B on v5e-32 with --remat-offload none reported 16.8 GiB from TP 32 over
        # 8 KV heads, which MaxText refuses, where its plans reach 17.6 GiB). So too where a launcher that cannot
        # run the model (plan_rules_only) lays out none of its layouts: costed with its stack all the same, said
        note = (f"{gate} cannot run the pinned knobs ({req.pins_text()}): the plans are costed as pinned, and --out "
                f"writes no {gate} files for them" if pinned else
                f"{gate} lays out none of these layouts (nor runs the model): the plans are costed with its stack all "
                f"the same, and --out writes no {gate} files for them")
        return base, search(base, search_options(req, fixed, None)), note, {}, {}
    return found.ctx, found.result, None, found.seen, found.overlap_seen


def dispatcher_note(ctx, seen: dict[str, float | None]) -> str | None:
    """What a searched MoE dispatcher other than the stack's default needs (planner.search.dispatchers)."""
    kind, default = ctx.train.moe_dispatcher, ctx.stack.moe_dispatcher
    if kind is None or kind == default:
        return None
    other = seen.get(default)
    against = f"{other:.3f} s with {default}, the stack's default" if other is not None else f"none fits with {default}"
    kernels = f" ({ctx.train.flex_backend} kernels)" if kind == "flex" else ""
    return (f"costed with the {kind} MoE dispatcher{kernels}, searched beside {default}: #1 at {seen[kind]:.3f} s "
            f"against {against}; its launch files need {ctx.train.flex_backend if kind == 'flex' else kind} "
            f"installed, --moe-dispatcher {default} plans without it")


def overlap_note(ctx, seen: dict[bool, float | None]) -> str | None:
    """What a searched batch-level EP overlap the kept plans run changes in the launch (planner.search.dispatchers)."""
    if not ctx.train.moe_a2a_overlap:
        return None
    other = seen.get(False)
    against = f"{other:.3f} s without it" if other is not None else "none fits without it"
    return (f"costed with Megatron's batch-level EP all-to-all overlap (--overlap-moe-expert-parallel-comm "
            f"--delay-wgrad-compute: one micro-batch's forward merged with another's backward), searched beside none: "
            f"#1 at {seen[True]:.3f} s against {against}; --no-moe-a2a-overlap plans without it")


def search_doc(ctx, res, req: PlanRequest, seconds: float) -> dict:
    """The result document of a search: model, cluster, training, ranked plans, ranking and search stats."""
    from planner.analysis.explain import reason
    from planner.costmodel.memory import grad_dtype
    from planner.search.ranking import memory_tier

    train = ctx.train
    usable = usable_capacity_gib(ctx, req.memory_headroom_gib)
    plans = []
    for ev in res.plans:
        d = ev.to_dict()
        d["peak_memory_band"] = peak_memory_band(ev, ctx.calibration.MEMORY_BAND_REL)
        d["within_memory_margin"] = ev.within_margin
        d["memory_tier"] = memory_tier(ev)
        d["reason"] = reason(ctx, ev, usable)
        plans.append(d)
    return {"model": model_object(ctx.model, ctx.params), "cluster": cluster_object(ctx.cluster),
            "training": {"seq_len": train.seq_len, "global_batch": train.global_batch, "dtype": train.dtype,
                         "framework": train.framework, "launcher": req.launcher, "grad_dtype": grad_dtype(train),
                         "optimizer_dtype": train.optimizer_dtype, "attention": train.attention_impl,
                         "torch_compile": train.torch_compile, "moe_capacity_factor": train.moe_capacity_factor,
                         "moe_dispatcher": train.moe_dispatcher, "moe_flex_backend": train.moe_flex_backend,
                         "moe_a2a_overlap": train.moe_a2a_overlap,
                         "fp8_recipe": train.fp8_recipe, "loss_chunks": train.loss_chunks,
                         "fp8_moe_act_cache": train.fp8_moe_act_cache,
                         "fp8_param_gather": train.fp8_param_gather}
            # stated only when on (TrainingSpec.fp8_attention is not searched; a default plan's document is unchanged)
            | ({"fp8_attention": True} if train.fp8_attention else {})
            | ({"moe_load_imbalance": train.moe_load_imbalance} if train.moe_load_imbalance is not None else {}),
            "plans": plans,
            "ranking": ranking_doc(req),
            "search": {"structures": res.structures, "evaluated": res.evaluated, "feasible": res.feasible,
                       "pruned": res.pruned, "memory_headroom_gib": req.memory_headroom_gib or 0.0,
                       "memory_margin_rel": memory_margin_rel(ctx, req.memory_headroom_gib),
                       "seconds": seconds}}  # the --json output drops "seconds" (same input, same bytes)


def ranking_doc(req: PlanRequest) -> dict:
    from planner.search.ranking import TIE_BAND_REL

    return {"order": "step_time_s", "tie_band_rel": TIE_BAND_REL, "tie_break": ["memory.peak_gib", "simpler layout"],
            "distinct_layouts": not req.all_variants}


def usable_capacity_gib(ctx, headroom: float | None) -> float:
    """The memory per device the search allows a plan (planner.costmodel.capacity, the one rule)."""
    from planner.costmodel.capacity import usable_capacity_gib as rule

    return rule(ctx.cluster.hardware.hbm_capacity_gib, headroom, ctx.train.framework, ctx.calibration)


def memory_margin_rel(ctx, headroom: float | None) -> float:
    from planner.costmodel.capacity import memory_margin_rel as rule

    return rule(headroom, ctx.calibration)


def margin_note(res) -> str | None:
    """What the default memory margin cost #1: the fastest plan found, when it is in a later memory tier than #1 (it
    keeps less of the margin) and a slower plan ranks first for it (planner.search.ranking), said with the flag that
    ranks it first."""
    from planner.search.ranking import TIE_BAND_REL, memory_tier

    if not res.plans:
        return None
    fastest = min(res.ranked or res.plans, key=lambda e: e.step_time_s)
    best = res.plans[0]
    tier = memory_tier(best)
    if memory_tier(fastest) <= tier or fastest.step_time_s * (1 + TIE_BAND_REL) >= best.step_time_s:
        return None
    mem, q = fastest.memory, fastest.plan
    slower = best.step_time_s / fastest.step_time_s - 1
    kept = (f"the margin ({mem['memory_margin_rel']:.0%}, the memory error band of the published peaks, out of sample) "
            "free" if tier == 0 else
            f"the inner margin free ({mem['memory_inner_margin_rel']:.1%}, the median miss of the published peaks, out "
            f"of sample); no plan keeps the margin ({mem['memory_margin_rel']:.0%}), #1 keeps the inner one")
    which = "memory margin" if tier == 0 else "inner memory margin"
    return (f"the {which} ranks a {slower:.0%} slower plan first: the fastest plan found "
            f"({plan_label(q.model_dump())} mbs {q.micro_batch}, recompute {recompute_label(q.model_dump())}, "
            f"{fastest.step_time_s:.3f} s) peaks at {mem['peak_gib']:.1f} of {mem['usable_gib']:.1f} GiB usable, "
            f"leaving less than {kept}; --memory-headroom 0 ranks it first")


def search_options(req: PlanRequest, fixed: dict, gate: str | None, plan_rules_only: bool = False):
    """The search options of a request (its pinned knobs `fixed`, the launcher whose rules gate the search, and
    whether only its plan rules do: modelled_launcher)."""
    from planner.search.engine import SearchOptions

    return SearchOptions(fixed=fixed, top_k=req.top_k, max_tp=req.max_tp,
                         memory_headroom_gib=req.memory_headroom_gib or 0.0,
                         memory_margin=req.memory_headroom_gib is None, distinct_layouts=not req.all_variants,
                         launcher=gate, launcher_plan_rules_only=plan_rules_only, even_stages=req.even_stages)


def peak_memory_band(ev, rel: float) -> dict:
    """The peak's cross-validated error band [peak/(1+rel), peak x (1+rel)], rel the calibration's MEMORY_BAND_REL
    (planner.analysis.membands)."""
    peak = ev.memory["peak_gib"]
    return {"low_gib": peak / (1.0 + rel), "high_gib": peak * (1.0 + rel), "rel": rel}


def no_runnable_layout_message(model, cluster, req: PlanRequest, launcher: str | None, gate: str | None = None,
                               refused_for: tuple[str, ...] = ()) -> str:
    """Every layout the request leaves is refused by the launchers' rules and layer splits (`gate`: the launcher whose
    rules gated the search; `refused_for`: the rules broken by the candidate that breaks the fewest,
    SearchResult.refused_for). The advice names pinned knobs only when some are pinned."""
    by = f" by --launcher {launcher}" if launcher else (f" by {gate}, the launcher the plans are costed for" if gate
                                                         else "")
    why = f"; the closest candidate breaks: {'; '.join(refused_for)}" if refused_for else ""
    pins = req.pins_text()
    if pins != "none":
        return (f"no layout of {model.name} on {cluster.count} {cluster.hardware.id} with the pinned knobs ({pins}) "
                f"can be run{by} (the launchers' rules and layer splits refuse every one{why}): pin fewer knobs or "
                "choose another --launcher")
    return (f"no layout of {model.name} on {cluster.count} {cluster.hardware.id} can be run{by} (the launchers' rules "
            f"and layer splits refuse every one{why}): change what the rule names (--gbs, --dtype, the device count) "
            "or choose another --launcher")


def nothing_fits_message(ctx, res, headroom: float, fixed: dict | None = None) -> str:
    """Why nothing fits, and only the remedies the search has not tried already: recompute is searched unless pinned
    (with the stack's custom remat policies, Stack.searched_remat_offloads, unless a policy or another mode is pinned),
    the stack's ZeRO stages (Stack.searched_zero_stages) unless one is pinned, and the optimizer offload whenever
    nothing fits without it and it is not pinned off (planner.search.engine.search, SearchResult.offload_scored)."""
    fixed = fixed or {}
    cap = usable_capacity_gib(ctx, headroom)
    low = f"{res.smallest_peak_gib:.1f} GiB" if res.smallest_peak_gib is not None else "unknown"
    recompute, zero = fixed.get("recompute"), fixed.get("zero_stage")
    zeros = (zero,) if zero is not None else tuple(ctx.stack.searched_zero_stages)
    custom_remat_searched = (bool(ctx.stack.searched_remat_offloads) and recompute in (None, "selective")
                              and all(fixed.get(k) is None for k in RECOMPUTE_NAME_KNOBS))
    tried = [t for t, done in (("full recompute", recompute in (None, "full")),
                               (f"ZeRO {'/'.join(map(str, zeros))}", True),
                               ("optimizer offload to the host",
                                res.offload_scored or fixed.get("offload_optimizer") is True),
                               ("layer tensors in host memory (MaxText custom remat)", custom_remat_searched))
             if done]
    remedies = ["more devices"]
    remedies += ["--recompute full"] if recompute not in (None, "full") else []
    remedies += ["--zero 3"] if 3 not in zeros else []
    remedies += ["--offload"] if fixed.get("offload_optimizer") is False else []  # else searched (or impossible)
    # FP8 primary weights drop the bf16 copy beside Transformer Engine's cached FP8 weights: a numerics choice the
    # search leaves to the user (TrainingSpec.fp8_param_gather), so named, not tried
    if ctx.train.dtype == "fp8" and ctx.stack.fp8_param_gather_option and not ctx.train.fp8_param_gather:
        # beside the optimizer offload the search needed, with a recipe the stack runs them with
        # (Stack.fp8_param_gather_offload_recipes)
        recipes = ctx.stack.fp8_param_gather_offload_recipes
        with_offload = res.offload_scored or fixed.get("offload_optimizer") is True
        remedies += ["--fp8-param-gather" + (f" --fp8-recipe {recipes[0]}" if with_offload and recipes is not None
                                             and ctx.train.fp8_recipe_run not in recipes else "")]
    remedies += ["a shorter --seq-len", "an accelerator with more memory"]
    host = ctx.cluster.hardware.host_memory_gib
    if host is not None and res.smallest_peak_gib is not None and res.smallest_peak_gib <= cap:
        # the HBM peak fits: what fails is the host share (capacity.host_fits: ZeRO-Offload, offloaded tensors)
        return (f"no plan of {ctx.model.name} fits {ctx.cluster.hardware.id}: the plans whose peak fits the "
                f"{cap:.1f} GiB usable per device (the smallest is {low}) keep more in host memory than the host's "
                f"{host:.1f} GiB per device (searched: {', '.join(tried)}). Try more devices, or, if your nodes have "
                "more, state their memory per device in a cluster file (hardware: {base: "
                f"{ctx.cluster.hardware.id}, host_memory_gib: N}})")
    return (f"no plan of {ctx.model.name} fits {ctx.cluster.hardware.id} ({cap:.1f} GiB usable per device): the "
            f"smallest peak any plan reaches is {low} (searched: {', '.join(tried)}). Try "
            f"{', '.join(remedies[:-1])} or {remedies[-1]}")


def min_devices_cluster(req: PlanRequest, target_step_s: float | None,
                        progress: Progress = quiet) -> tuple[ClusterSpec, dict[str, Any]]:
    """The cluster cut to the fewest devices (n <= the request's count) that fit, keeping every setting of the
    cluster (inline hardware, devices_per_node, domain_size, overrides); the normal search then runs on it.
    Returns (that cluster, the summary `--json` reports as `min_devices`)."""
    from planner.search.engine import SearchOptions, min_devices

    model, cluster, train = build_inputs(req)
    if req.launcher:
        check_launcher_hardware(req.launcher, cluster)
    # the launcher the plans are for, its search defaults included, as in run_search: the count found is one its
    # plans fit on
    gate, plan_rules_only = search_gate(req.launcher, model, train, cluster)
    fixed = pinned_knobs(req, gate)
    check_request(model, cluster, train, fixed, req.memory_headroom_gib or 0.0, count_free=True)
    opts = SearchOptions(fixed=fixed, top_k=1, max_tp=req.max_tp, even_stages=True,
                         memory_headroom_gib=req.memory_headroom_gib or 0.0, launcher=gate,
                         launcher_plan_rules_only=plan_rules_only)
    # the upper edge of the found plan's own band: beyond the fitted attention share, that regime's (bands.EXTRAPOLATED)
    bounds = {x: sizing_bound(model, cluster, train, target_step_s, pinned_pp=fixed.get("pp"), attention_extrapolated=x)
              for x in (False, True)}
    with progress(f"finding the fewest {cluster.hardware.id} devices for {model.name}"):
        n, res = min_devices(model, cluster, train, opts, target_step_s,
                             lambda ev: bounds[ev.attention_extrapolated]["margin_rel"])
    if n is None:
        goal = f" at <= {target_step_s:g} s per step at the band's upper edge" if target_step_s else ""
        pins = ", ".join(f"{k}={v}" for k, v in sorted(req.knobs.items()) if v is not None)
        goal += f" with the pinned {pins}" if pins else ""
        raise NoFeasiblePlan(f"no count up to {cluster.count} {cluster.hardware.id} devices runs {model.name}{goal}; "
                             "raise the --cluster count, relax --target-step-s"
                             + (", change the pinned knobs" if pins else "") + " or pick a bigger accelerator")
    summary = {"devices": n, "hardware": cluster.hardware.id, "max_devices": cluster.count,
               "target_step_s": target_step_s, "step_time_s": res.plans[0].step_time_s,
               "num_layers": model.num_layers} | bounds[res.plans[0].attention_extrapolated]
    return ClusterSpec(name=f"{cluster.hardware.id}x{n}", hardware=cluster.hardware, count=n,
                       devices_per_node=cluster.devices_per_node, domain_size=cluster.domain_size,
                       price_per_device_hour=cluster.price_per_device_hour), summary


EVEN_STAGES_RULE = ("pipeline depths that divide the layers evenly (no short first or last stage), whole nodes, "
                    "unless --pp is pinned")


def sizing_bound(model, cluster, train, target_step_s: float | None, pinned_pp: int | None = None,
                 attention_extrapolated: bool = False) -> dict:
    """What --min-devices sizes against. A device count is bought once and run for months, so the target
    step time must hold at the upper edge of the prediction's error band (planner.analysis.bands: 90% of
    published runs like it landed inside), not at the point prediction, which about half the outcomes
    exceed. Fields: `bound` ('step_time_band.high_s' with a target, else 'fits'), `margin_rel` (the band's
    rel the predicted step is multiplied by), `band_regime`, `layout_rule`."""
    rule = EVEN_STAGES_RULE if pinned_pp is None else f"--pp {pinned_pp} as pinned, whole nodes"
    if target_step_s is None:
        return {"bound": "fits", "margin_rel": 0.0, "band_regime": None, "layout_rule": rule}
    from planner.analysis.bands import band_for_context
    from planner.costmodel import Context

    band = band_for_context(Context(model, cluster, train), attention_extrapolated)
    return {"bound": "step_time_band.high_s", "margin_rel": band.rel, "band_regime": band.regime,
            "layout_rule": rule}


def explain_search(req: PlanRequest, progress: Progress = quiet, rank: int = 1, vs: int | None = None):
    """Plan #`rank` of the request's ranking (the one `plan` prints with the same request) with every number's
    derivation and why each of its neighbouring plans loses; with `vs`, the per-term difference between plan
    #rank and plan #vs. (ctx, result, doc) with doc["explained_rank"], doc["derivation"], doc["why_not"] and
    doc["vs"] (planner.analysis.explain)."""
    from planner.analysis.explain import derivation, versus, why_not

    ctx, res, doc = run_search(req.replace(top_k=max(req.top_k, rank, vs or 1)), progress)
    shown = len(res.plans)
    for flag, n in (("--rank", rank), ("--vs", vs)):
        if n is not None and n > shown:
            raise InputError(f"{flag} {n}: only {shown} plan{'s were' if shown != 1 else ' was'} found; "
                             f"give a number from 1 to {shown}")
    if vs is not None and vs == rank:
        raise InputError(f"--vs {vs} is the explained plan itself (--rank {rank}): give another rank")
    ev = res.plans[rank - 1]
    doc["explained_rank"] = rank
    doc["why_not"] = why_not(ctx, ev, usable_capacity_gib(ctx, req.memory_headroom_gib))
    doc["derivation"] = derivation(ctx, ev)
    if vs is not None:
        doc["vs"] = {"rank": rank, "other_rank": vs, "plan": doc["plans"][rank - 1]["plan"],
                     "other_plan": doc["plans"][vs - 1]["plan"], "terms": versus(ctx, ev, res.plans[vs - 1])}
    return ctx, res, doc


def scored_candidates(res) -> list[dict]:
    """Every plan the search scored and kept (SearchResult.ranked, best first), as the report's Pareto chart
    reads them: knobs, step time, peak memory, fits."""
    return [{"plan": e.plan.knobs(), "step_time_s": e.step_time_s, "memory": {"peak_gib": e.peak_gib},
             "fits": e.fits} for e in res.ranked]
