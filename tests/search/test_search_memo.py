"""What the search memoises or shares must give what computing afresh gives: the per-search links cache key, the
memory screen against the evaluated peak, threaded stage solves against one-at-a-time solves (issue 23, search
speed; the speed itself is measured in benchmarks/search_speed.py, never here)."""

from __future__ import annotations

import pytest
from support import uniform_stage_problem

from planner.catalog.hardware import parse_cluster
from planner.catalog.models import get_model
from planner.costmodel import Context
from planner.search.engine import SearchOptions, search
from planner.search.stages import assign_stages
from planner.specs import ParallelPlan, TrainingSpec

GB = 1e9


def ctx_for(model, cluster, **train):
    return Context(get_model(model), parse_cluster(cluster), TrainingSpec(**({"global_batch": 64} | train)))


@pytest.mark.parametrize("cluster,framework,plan", [
    ("h100x1024", "megatron", ParallelPlan(tp=4, pp=4, dp=64, ep=16, zero_stage=1)),
    ("a100-sxm-80gbx768", "megatron", ParallelPlan(tp=3, pp=8, dp=32)),
    ("h100x256", "fsdp", ParallelPlan(tp=2, pp=2, cp=2, dp=32, zero_stage=3, zero_shard_size=16)),
    ("tpu-v5px256", "maxtext", ParallelPlan(tp=4, dp=64, ep=8, zero_stage=3)),
    ("tpu-v5px512", "maxtext", ParallelPlan(tp=4, pp=2, cp=2, dp=32, zero_stage=3, zero_shard_size=8)),
])
def test_links_cache_key_holds_every_knob_placement_reads(cluster, framework, plan):
    # Context.links_cache keys plan_links on PLACEMENT_KNOBS: every other knob must leave the links unchanged (a new
    # knob must be listed on one side or the other)
    from planner.costmodel.base import PLACEMENT_KNOBS, plan_links
    from planner.costmodel.calibration import DEFAULT_CALIBRATION
    from planner.specs.plan import KNOBS

    cl = parse_cluster(cluster)
    links = plan_links(cl, plan, DEFAULT_CALIBRATION, framework)
    other = {"vpp": 3, "micro_batch": 7, "recompute": "full", "recompute_layers": 2, "sequence_parallel": False,
             "schedule": "dualpipe", "cp_comm": "a2a", "first_stage_layers": 5, "last_stage_layers": 3,
             "account_embedding_loss": True, "offload_optimizer": True, "tp_comm_overlap": True,
             "remat_offloaded": ("decoder_layer_input",), "remat_device": ("out_proj",),
             "recompute_modules": ("core_attn",), "offload_modules": ("core_attn",)}
    assert set(other) | set(PLACEMENT_KNOBS) == set(KNOBS)
    for knob, value in other.items():
        assert plan_links(cl, plan.model_copy(update={knob: value}), DEFAULT_CALIBRATION, framework) == links, knob


@pytest.mark.parametrize("model,cluster,framework,plan", [
    ("deepseek-v3", "h100x1024", "megatron", ParallelPlan(tp=4, pp=4, dp=64, ep=16, zero_stage=1, micro_batch=2)),
    ("llama-70b", "h100x256", "fsdp", ParallelPlan(tp=2, pp=2, cp=2, dp=32, zero_stage=3, zero_shard_size=16)),
    ("deepseek-v2", "tpu-v5px256", "maxtext", ParallelPlan(tp=4, dp=64, ep=8, zero_stage=3, recompute="selective",
                                                           remat_offloaded=("query_proj",))),
])
def test_shape_cache_key_holds_every_knob_the_shape_reads(model, cluster, framework, plan):
    # Context.shape_cache keys plan_shape's derived quantities on SHAPE_KNOBS: every other knob must leave them
    # unchanged (a new knob must be listed on one side or the other)
    from planner.costmodel.base import SHAPE_KNOBS, _shape_parts
    from planner.specs.plan import KNOBS

    ctx = ctx_for(model, cluster, framework=framework, global_batch=1024)
    parts = _shape_parts(ctx, plan)
    other = {"vpp": 3, "schedule": "dualpipe", "recompute_layers": 2, "first_stage_layers": 5,
             "last_stage_layers": 3, "account_embedding_loss": True, "offload_optimizer": True,
             "tp_comm_overlap": True}
    assert set(other) | set(SHAPE_KNOBS) == set(KNOBS)
    for knob, value in other.items():
        assert _shape_parts(ctx, plan.model_copy(update={knob: value})) == parts, knob


@pytest.mark.parametrize("model,cluster", [("deepseek-v3", "h100x256"), ("mixtral-8x7b", "h100x64"),
                                           ("llama-3.1-8b", "tpu-v5px64")])
def test_memory_screen_is_the_evaluated_peak(model, cluster):
    # the search rejects candidates on screen_memory's peak before evaluating them: it must be the trace's peak_gib
    # exactly (and its peak stage), for fitting and non-fitting plans alike
    from planner.costmodel import evaluate
    from planner.costmodel.evaluate import screen_memory

    ctx = ctx_for(model, cluster)
    res = search(ctx, SearchOptions(top_k=3, require_fit=False, stage_solves=0))
    plans = [e.plan for e in res.ranked[:60]]
    plans += [p.model_copy(update={"micro_batch": 2 * p.micro_batch, "recompute": "none"}) for p in plans[:20]]
    assert len(plans) >= 40
    for p in plans:
        ev, mem = evaluate(ctx, p), screen_memory(ctx, p)
        assert mem.peak_gib == ev.memory["peak_gib"] and mem.peak_stage == ev.peak_stage, p
        assert evaluate(ctx, p, mem) == ev


@pytest.mark.parametrize("model,cluster,framework", [("deepseek-v2", "tpu-v5px64", "maxtext"),
                                                     ("deepseek-v3", "h100x256", "megatron"),
                                                     ("gpt-oss-120b", "h100x64", "megatron"),
                                                     ("llama-3.1-8b", "h100x64", "fsdp")])
def test_plan_caches_give_what_computing_afresh_gives(model, cluster, framework):
    # the state layout, the stage times, the layer activations and the layer warnings are cached per search under the
    # inputs they read (memory.state_layout, layers.stage_times, memory.layer_activations, evaluate._layer_warnings):
    # after a search has filled the caches, every plan (and variants the search may not have scored) must get what a
    # fresh computation gives
    from planner.costmodel.base import plan_shape
    from planner.costmodel.context import cp_warnings
    from planner.costmodel.evaluate import _layer_warnings, screen_memory
    from planner.costmodel.expert import ep_warnings
    from planner.costmodel.layers import _stage_times, attention_range_warnings, stage_times
    from planner.costmodel.memory import _layer_activations, _state_layout, layer_activations, state_layout
    from planner.costmodel.tensor import tp_warnings

    ctx = ctx_for(model, cluster, framework=framework, global_batch=512)
    res = search(ctx, SearchOptions(top_k=3, require_fit=False, stage_solves=0))
    plans = [e.plan for e in res.ranked[:80]]
    variants = [{"micro_batch": 2}, {"recompute": "full", "recompute_layers": 1}, {"recompute": "selective"},
                {"tp_comm_overlap": True}, {"offload_optimizer": True}, {"zero_stage": 3}]
    plans += [p.model_copy(update=v) for p in plans[:10] for v in variants]
    assert len(plans) >= 40
    for p in plans:
        mem = screen_memory(ctx, p)
        shape = plan_shape(ctx, p)
        assert state_layout(ctx, shape) == _state_layout(ctx, shape), p
        assert stage_times(ctx, shape, mem.split) == _stage_times(ctx, shape, mem.split), p
        for part in mem.split:
            assert layer_activations(ctx, shape, part) == _layer_activations(ctx, shape, part), p
        assert _layer_warnings(ctx, shape) == (*tp_warnings(ctx, shape), *cp_warnings(ctx, shape),
                                               *ep_warnings(ctx, shape), *attention_range_warnings(ctx, shape)), p
    assert ctx.stage_times_cache and ctx.layer_acts_cache and ctx.state_layout_cache


def test_search_solves_side_by_side_as_one_by_one():
    # the search solves its leading plans' problems on threads (engine._solve_stage_problems), each distinct problem
    # once: the answers are those of one solve at a time (deterministic budget, one worker each)
    from planner.search.engine import STAGE_SOLVE_BUDGET, _solve_stage_problems

    problems = [uniform_stage_problem(61, pp, layer_time_s=0.020, layer_recompute_s=0.007, layer_act_bytes=act * GB,
                                      layer_act_bytes_recompute=0.015 * GB, layer_state_bytes=2.0 * GB,
                                      first_extra_time_s=0.001, last_extra_time_s=0.030, first_extra_bytes=1.2 * GB,
                                      last_extra_bytes=2.5 * GB, capacity_bytes=75 * GB)
                for pp, act in ((16, 0.3), (8, 0.3), (8, 1.2), (4, 1.5))]
    solved = _solve_stage_problems([*problems, problems[1]])
    assert len(solved) == len(problems)
    for q in problems:
        assert solved[q] == assign_stages(q, deterministic_time=STAGE_SOLVE_BUDGET)
    assert any(a is not None and any(a.recompute_per_stage) for a in solved.values())  # memory binds in one


@pytest.mark.parametrize("model,cluster,launcher,runnable", [
    ("deepseek-v3", "h100x256", "megatron", True), ("llama-3.1-8b", "h100x64", "deepspeed", True),
    ("llama-3.1-8b", "h100x64", "torchtitan", True), ("mixtral-8x7b", "tpu-v5px64", "maxtext", True),
    ("deepseek-v3", "h100x256", "deepspeed", False), ("mixtral-8x7b", "tpu-v5px64", "torchtitan", False),
])
def test_candidate_gate_reads_the_plan_free_rules_once(model, cluster, launcher, runnable):
    # the search reads a launcher's plan-free rules (model, dtype, hardware) once and then, where none breaks, only
    # the rules of each plan (engine._invalid): every candidate must get what reading all the rules gives, with the
    # plan-free messages where one breaks
    from planner.launchers import launcher_errors, model_errors
    from planner.search.engine import _invalid
    from planner.search.space import plan_errors

    ctx = ctx_for(model, cluster)
    assert (not model_errors(ctx.model, ctx.train, launcher, ctx.cluster)) == runnable
    res = search(ctx, SearchOptions(top_k=3, require_fit=False, stage_solves=0))
    base = [e.plan for e in res.ranked[:40]]
    variants = [{"zero_stage": 3}, {"schedule": "dualpipe"}, {"cp_comm": "a2a"}, {"recompute": "selective"},
                {"offload_optimizer": True}, {"zero_stage": 0, "offload_optimizer": True}, {"zero_stage": 2},
                {"micro_batch": 3}, {"tp_comm_overlap": True, "sequence_parallel": False}]
    plans = base + [p.model_copy(update=v) for p in base[:10] for v in variants]
    opts = SearchOptions(launcher=launcher)
    refused = 0
    for p in plans:
        full = plan_errors(ctx.model, ctx.train, ctx.cluster.count, p) or launcher_errors(
            p, ctx.model, ctx.train, launcher, ctx.cluster)
        assert _invalid(ctx, opts, p) == full, p
        refused += bool(full) and not plan_errors(ctx.model, ctx.train, ctx.cluster.count, p)
    assert refused >= 1  # the launcher's own rules refuse some candidates


@pytest.mark.parametrize("model,cluster", [("deepseek-v3", "h100x256"), ("llama-3.1-70b", "h100x64"),
                                           ("mixtral-8x7b", "h100x64")])
def test_partial_recompute_from_the_first_probe_finds_what_bisection_finds(model, cluster):
    # engine._refine_partial_recompute probes first where the line from the no-recompute peak to full recompute's
    # meets the capacity: for every full-recompute plan and capacity between those two peaks it must keep the k that
    # bisection alone keeps (the smallest that fits)
    # (in the rules' step, engine._recompute_layers_unit: vpp for Megatron's interleaved plans)
    from planner.costmodel.evaluate import screen_memory
    from planner.search.engine import _recompute_layers_unit, _refine_partial_recompute

    ctx = ctx_for(model, cluster)
    res = search(ctx, SearchOptions(top_k=3, require_fit=False, stage_solves=0))
    plans = [e.plan.model_copy(update={"recompute": "full", "recompute_layers": None}) for e in res.ranked[:30]]
    checked = moved = stepped = 0
    for p in plans:
        full, none = screen_memory(ctx, p), screen_memory(ctx, p.model_copy(update={"recompute": "none"}))
        unit = _recompute_layers_unit(ctx, SearchOptions(), p)
        if none.peak_gib <= full.peak_gib * 1.01 or unit is None:
            continue
        assert unit == p.vpp  # Megatron: the block method's layers per virtual stage
        for share in (0.05, 0.3, 0.5, 0.7, 0.95):
            cap = full.peak_gib + share * (none.peak_gib - full.peak_gib)
            guided = _refine_partial_recompute(ctx, p, cap, full, none.peak_gib, unit)
            plain = _refine_partial_recompute(ctx, p, cap, full, unit=unit)
            assert guided.plan == plain.plan, (p, cap)
            assert (guided.plan.recompute_layers or 0) % unit == 0, (p, cap)
            checked += 1
            moved += guided.plan.recompute_layers not in (None, unit)
            stepped += unit > 1 and guided.plan.recompute_layers is not None
    assert checked >= 20 and moved >= 5  # capacities that keep some but not all layers
    assert stepped >= 1, stepped  # interleaved plans refined in steps of vpp


@pytest.mark.parametrize("model,cluster,train", [
    ("deepseek-v3", "h100x256", {}), ("llama-3.1-8b", "tpu-v5px64", {}),
    ("llama-3.1-8b", "tpu-v5px64", {"framework": "maxtext"}),  # with a host-offloading plan added below
    ("llama-3.1-70b", "a100-sxm-40gbx16", {}),  # nothing fits in HBM: the optimizer offload retry, host capacity
])
def test_figures_are_the_trace_values(model, cluster, train):
    # the search ranks by Evaluation.figures, computed before the trace: every figure must be its trace term exactly,
    # and fits / fits_host / within_margin what the trace's terms give
    from planner.costmodel import evaluate
    from planner.costmodel.capacity import host_fits, within_margin

    ctx = ctx_for(model, cluster, **train)
    res = search(ctx, SearchOptions(top_k=3, require_fit=False, stage_solves=0))
    assert res.ranked
    evs = list(res.ranked[:40])
    if train.get("framework") == "maxtext":  # MaxText's custom remat offloading the layer inputs to host memory
        evs.append(evaluate(ctx, ParallelPlan(tp=4, dp=16, zero_stage=3, recompute="selective",
                                              remat_offloaded=("decoder_layer_input",))))
    hosts = []
    for ev in evs:
        f, tr = ev.figures, ev.trace
        assert f.step_time_s == tr.value("step_time_s") and f.peak_gib == tr.value("peak_gib")
        assert (f.usable_gib, f.memory_margin_rel, f.memory_inner_margin_rel) == (
            tr.value("usable_gib"), tr.value("memory_margin_rel"), tr.value("memory_inner_margin_rel"))
        assert f.host_gib == tr.value("host_gib")
        limit = tr.value("host_capacity_gib") if "host_capacity_gib" in tr else None
        assert f.host_capacity_gib == limit
        assert ev.fits == (tr.value("peak_gib") <= tr.value("usable_gib") and host_fits(tr.value("host_gib"), limit))
        assert ev.within_margin == within_margin(tr.value("peak_gib"), tr.value("usable_gib"),
                                                 tr.value("memory_margin_rel"))
        assert ev.memory["peak_gib"] == ev.peak_gib and ev.time_breakdown["compute_s"] == tr.value("compute_s")
        hosts.append(f.host_gib)
    if train.get("framework") == "maxtext":
        assert max(hosts) > 0  # the host figure is exercised, not only its zero


def test_the_search_builds_the_traces_it_shows_only():
    # evaluate builds a plan's trace when something reads it: a search that times ~1,500 plans and shows 3 builds a
    # handful (the ranking reads the figures), not one per timed plan
    import importlib

    mod = importlib.import_module("planner.costmodel.evaluate")
    built = []

    class Counted(mod.CostTrace):
        def __post_init__(self):
            built.append(1)
            super().__post_init__()

    ctx = ctx_for("deepseek-v3", "h100x1024", global_batch=4096)
    orig = mod.CostTrace
    mod.CostTrace = Counted
    try:
        res = search(ctx, SearchOptions(top_k=3))
        shown = [ev.step_time_s for ev in res.plans]
    finally:
        mod.CostTrace = orig
    assert res.evaluated > 500 and len(shown) == 3
    assert len(built) <= 10, len(built)


@pytest.mark.parametrize("model,cluster,train,pins", [
    ("deepseek-v3", "h100x1024", {}, [dict(tp=2, pp=16, dp=32, ep=32, micro_batch=1),
                                      dict(tp=2, pp=8, vpp=2, schedule="interleaved", dp=64, ep=64),
                                      dict(tp=1, pp=8, dp=128, ep=64, schedule="gpipe", recompute="full",
                                           recompute_layers=3),
                                      dict(tp=1, pp=16, dp=64, ep=64, schedule="dualpipe"),
                                      dict(tp=1, pp=8, vpp=2, dp=128, ep=64, schedule="dualpipev")]),
    ("llama-3.1-70b", "h100x64", {}, [dict(tp=4, pp=8, dp=2, zero_stage=3, micro_batch=2),
                                      dict(tp=2, pp=8, dp=4, zero_stage=1, offload_optimizer=True),
                                      dict(tp=4, pp=4, dp=4, schedule="zb", micro_batch=2)]),
    ("llama-3.1-70b", "tpu-v5px256", {"framework": "maxtext"},
     [dict(tp=4, pp=8, dp=8, zero_stage=3, recompute="selective", remat_offloaded=("decoder_layer_input",))]),
])
def test_memory_screen_skips_only_dominated_stages(model, cluster, train, pins):
    # memory.stage_memories skips middle stages that an earlier identical stage with at least as many micro-batches in
    # flight dominates: the screen's peak, its stage, the host share and its stage must be those of every stage
    from planner.costmodel.evaluate import screen_memory
    from planner.costmodel.memory import GIB, _layer_activations, stage_memories, stage_memory, state_layout

    ctx = ctx_for(model, cluster, **train)
    res = search(ctx, SearchOptions(top_k=3, require_fit=False, stage_solves=0))
    plans = [e.plan for e in res.ranked[:80]]
    plans += [ParallelPlan(**({"zero_stage": 1} | pin)) for pin in pins]  # every pin a valid plan, screened
    skipped = 0
    for p in plans:
        mem = screen_memory(ctx, p)
        lay = state_layout(ctx, mem.shape)
        every = [stage_memory(ctx, mem.shape, mem.split, mem.params, s, lay,
                              _layer_activations(ctx, mem.shape, mem.split[s])) for s in range(p.pp)]
        peak = max(range(p.pp), key=lambda s: every[s].total_gib)
        host = max(range(p.pp), key=lambda s: every[s].host)
        assert (mem.peak_stage, mem.peak, mem.host_stage, mem.host_gib) == (peak, every[peak], host,
                                                                          every[host].host / GIB), p
        skipped += len(stage_memories(ctx, mem.shape, mem.split, mem.params)) < p.pp
    assert skipped >= 3  # the screens of several plans skipped stages


@pytest.mark.parametrize("model,cluster,train,fixed", [
    ("deepseek-v2", "tpu-v5px256", {}, {}),  # EP groups along ICI torus axes: the axes follow the whole mesh (dp, pp)
    ("qwen3-30b-a3b", "h100x64", {"moe_a2a_overlap": True}, {}),  # the merged schedule needs > 1 micro-batch
    ("mixtral-8x7b", "gb200x144", {}, {}),
    # the moe module's re-dispatch, in the selective re-run time of the layer kind that plans without recompute share
    ("qwen3-30b-a3b", "h100x64", {}, {"recompute_modules": ("moe", "layernorm")}),
])
def test_every_scored_plan_is_what_a_fresh_context_gives(model, cluster, train, fixed):
    # the search shares per-layer times between candidates (Context.layer_time_cache under Shape.time_key): a plan's
    # figures must not depend on which candidates were scored before it, so each must equal its evaluation in a
    # context that has scored nothing else
    from planner.costmodel import evaluate

    ctx = ctx_for(model, cluster, **({"seq_len": 4096, "global_batch": 256} | train))
    res = search(ctx, SearchOptions(fixed=fixed, top_k=3, require_fit=False, stage_solves=0))
    plans = res.ranked[::max(1, len(res.ranked) // 60)]
    assert len(plans) >= 30
    for ev in plans:
        fresh = evaluate(ctx_for(model, cluster, **({"seq_len": 4096, "global_batch": 256} | train)), ev.plan)
        assert fresh.step_time_s == ev.step_time_s and fresh.peak_gib == ev.peak_gib, ev.plan.knobs()
