"""Search features of issue 4: offload fallback, HSDP, beam search, TPU torus rules, --min-devices."""

import pytest

import planner.search.engine as S
from planner.catalog.hardware import parse_cluster
from planner.catalog.models import get_model
from planner.costmodel import Context, evaluate
from planner.costmodel.capacity import usable_capacity_gib
from planner.search.engine import SearchOptions, min_devices, search, slice_shape, torus_group_sizes
from planner.search.ranking import memory_tier
from planner.search.space import plan_errors
from planner.search.stages import StageAssignment
from planner.specs import ParallelPlan, TrainingSpec


def ctx_for(model, cluster, **train):
    return Context(get_model(model), parse_cluster(cluster), TrainingSpec(**({"global_batch": 64} | train)))


def test_offload_only_when_nothing_else_fits():
    ctx = ctx_for("llama-70b", "h100x8", seq_len=4096, global_batch=64)
    assert not search(ctx, SearchOptions(fixed={"offload_optimizer": False})).plans
    res = search(ctx)
    assert res.plans and all(e.plan.offload_optimizer for e in res.plans)
    assert any("offloaded" in w for w in res.plans[0].warnings)
    big = ctx_for("llama-8b", "h100x8", global_batch=64)
    assert not any(e.plan.offload_optimizer for e in search(big).plans)


def test_hsdp_candidates_for_fsdp():
    ctx = ctx_for("llama-8b", "h100x64", framework="fsdp", global_batch=256, seq_len=8192)
    res = search(ctx, SearchOptions(top_k=200))
    shards = {e.plan.zero_shard_size for e in res.plans}
    assert None in shards and 8 in shards  # full shard and shard-within-node both scored
    for e in res.plans:
        assert not plan_errors(ctx.model, ctx.train, 64, e.plan)


@pytest.mark.slow
def test_beam_matches_exhaustive_closely(monkeypatch):
    ctx = ctx_for("llama-70b", "h100x512", seq_len=8192, global_batch=512)
    full = search(ctx, SearchOptions(top_k=1))
    monkeypatch.setattr(S, "BEAM_THRESHOLD", 10)
    monkeypatch.setattr(S, "BEAM_WIDTH", 8)
    beam = search(Context(ctx.model, ctx.cluster, ctx.train), SearchOptions(top_k=1))
    assert beam.evaluated < full.evaluated
    assert beam.plans[0].step_time_s <= full.plans[0].step_time_s * 1.05


@pytest.mark.parametrize("cluster,shape", [("tpu-v5ex256", (16, 16)), ("tpu-v5ex64", (8, 8)),
                                           ("tpu-v5px256", (4, 8, 8)), ("tpu-v4x64", (4, 4, 4))])
def test_slice_shapes(cluster, shape):
    assert slice_shape(parse_cluster(cluster)) == shape


def test_tp_fits_the_torus():
    cl = parse_cluster("tpu-v5ex256")  # 16 x 16: TP must be a divisor of 16 or 16 x a divisor of 16
    sizes = torus_group_sizes(cl)
    assert {1, 2, 4, 8, 16, 32, 256} <= sizes and 12 not in sizes
    ctx = Context(get_model("llama-8b"), cl, TrainingSpec(global_batch=256))
    for r in S.structures(ctx, SearchOptions()):
        assert r["tp"] in sizes


@pytest.mark.slow
def test_min_devices_is_minimal():
    model, cluster = get_model("llama-70b"), parse_cluster("h100x256")
    train = TrainingSpec(global_batch=512, seq_len=4096)
    opts = SearchOptions(fixed={"offload_optimizer": False}, top_k=1)
    n, res = min_devices(model, cluster, train, opts)
    assert n is not None and n % 8 == 0 and res.plans
    smaller = parse_cluster(f"h100x{n - 8}") if n > 8 else None
    if smaller:
        assert not search(Context(model, smaller, train), opts).plans
    n5, res5 = min_devices(model, cluster, train, opts, target_step_s=20.0)
    assert res5.plans[0].step_time_s <= 20.0 and n5 >= n


# (32, 3, 2): 12/8/12 and 10/12/10 share the largest stage, the more even one is chosen; (61, 4, 1): 16/15/15/15
# over 15/16/16/14 for the same reason
@pytest.mark.parametrize("L,pp,vpp,expected", [(126, 16, 1, (7, 7)), (126, 16, 2, (8, 6)), (61, 16, 1, (3, 2)),
                                              (80, 3, 1, (27, 27)), (61, 4, 4, None), (32, 3, 2, (10, 10)),
                                              (61, 4, 1, (16, 15))])
def test_megatron_split(L, pp, vpp, expected):
    from planner.costmodel.partition import megatron_split, stage_layer_counts

    assert megatron_split(L, pp, vpp) == expected
    if expected:
        counts = stage_layer_counts(L, pp, *expected)
        assert sum(counts) == L and len(set(counts[1:-1])) <= 1 and all(c % vpp == 0 for c in counts)


@pytest.mark.parametrize("model,cluster,seq,gbs", [("llama-405b", "h100x1024", 8192, 1024),
                                                   ("deepseek-v3", "h800x256", 4096, 1024),
                                                   ("nemotron-4-340b", "h100x512", 4096, 512)])
def test_search_plans_state_their_layer_split(model, cluster, seq, gbs):
    """Every plan the search returns splits its layers in a form Megatron can be told: evenly over
    pp and vpp, counting the embedding and loss as layers, with explicit first/last stage sizes, or, where none of
    those states a split over virtual stages, as --pipeline-model-parallel-layout: the default uneven split, its
    virtual stages even on the fullest ranks (DeepSeek-V3's 61 layers)."""
    from planner.costmodel.partition import megatron_split, mtp_split, stage_layer_counts
    from planner.emit.megatron import pipeline_layout
    from planner.launchers.job import make_job

    ctx = ctx_for(model, cluster, seq_len=seq, global_batch=gbs)
    L = ctx.model.num_layers
    layouts = 0
    for e in search(ctx, SearchOptions(top_k=10, distinct_layouts=False)).plans:
        p = e.plan
        layout = pipeline_layout(make_job(ctx.model, ctx.cluster, ctx.train, p))
        if p.account_embedding_loss:  # Megatron --account-for-embedding/loss-in-pipeline-split
            assert (L + 2) % p.pp == 0 and ((L + 2) // p.pp) % p.vpp == 0, p
        elif layout is not None:
            counts = stage_layer_counts(L, p.pp, p.first_stage_layers, p.last_stage_layers)
            if ctx.model.mtp_layers:  # the split that leaves the last stage room for the MTP modules
                assert (p.first_stage_layers, p.last_stage_layers) == mtp_split(L, p.pp, 3), p
            else:
                assert p.first_stage_layers is None and p.last_stage_layers is None, p
                assert megatron_split(L, p.pp, p.vpp) is None, p
            assert p.vpp > 1 and max(counts) % p.vpp == 0, p
            assert layout.count("|") == p.pp * p.vpp - 1 and layout.startswith("E") and layout.endswith("L"), layout
            layouts += 1
        elif p.first_stage_layers is None and p.last_stage_layers is None:
            assert L % p.pp == 0 and (L // p.pp) % p.vpp == 0, p
        else:
            assert not plan_errors(ctx.model, ctx.train, ctx.cluster.count, p)


def test_interleaving_is_searched_where_only_a_stated_layout_splits_the_layers():
    """DeepSeek-V3's 61 layers split over no pp x vpp with first/last stage sizes (megatron_split: none), so
    `--schedule interleaved` found no plan Megatron could run (issue 23); with --pipeline-model-parallel-layout the
    search proposes the default uneven split over the virtual stages that divide its fullest ranks, and Megatron's
    launch files state it (tests/consumers/test_megatron_consumer.py runs the layout through megatron-core)."""
    from planner.costmodel.partition import mtp_split, stage_layer_counts
    from planner.emit.megatron import pipeline_layout
    from planner.launchers import launcher_errors
    from planner.launchers.job import make_job

    ctx = ctx_for("deepseek-v3", "h100x1024", seq_len=4096, global_batch=1024)
    plans = search(ctx, SearchOptions(top_k=5, fixed={"schedule": "interleaved"})).plans
    assert plans
    for e in plans:
        p = e.plan
        # DeepSeek-V3's MTP module: the split leaves the last stage its 3 layer-equivalents (partition.mtp_split)
        assert (p.first_stage_layers, p.last_stage_layers) == mtp_split(61, p.pp, 3)
        counts = stage_layer_counts(61, p.pp, p.first_stage_layers, p.last_stage_layers)
        assert p.schedule == "interleaved" and p.vpp > 1 and counts[-1] % p.vpp != 0 and max(counts) % p.vpp == 0
        assert not launcher_errors(p, ctx.model, ctx.train, "megatron")
        layout = pipeline_layout(make_job(ctx.model, ctx.cluster, ctx.train, p))
        assert layout is not None and layout.endswith("mL")


def test_stage_solver_balances_deepseek_stages():
    ctx = ctx_for("deepseek-v3", "h800x256", seq_len=4096, global_batch=1024)
    # pp 4 with 1F1B pinned: 61 layers do not split evenly. The search proposes Megatron-Bridge's 16/16/16/13, which
    # leaves the MTP module room on the last stage (partition.mtp_split); the stage solver rebalances the plain
    # pipelines ranked first, with the MTP module and the LM head on the last stage (balance.stage_problem), and where
    # its split differs it is faster on that plan than the proposed one
    plans = search(ctx, SearchOptions(top_k=3, fixed={"pp": 4, "schedule": "1f1b"})).plans
    balanced = [e for e in plans if e.pipeline.get("stage_assignment")]
    assert balanced
    for e in balanced:
        sa = e.pipeline["stage_assignment"]
        # 871 splits the flags express (61 layers, 4 stages), each scored (planner.search.stages.ENUMERATION_BUDGET)
        assert sa["solver"] == "enumeration (optimal)" and sum(sa["layers_per_stage"]) == 61
        assert e.pipeline["layers_per_stage"] == sa["layers_per_stage"] != [16, 16, 16, 13]
        proposed = evaluate(ctx, e.plan.model_copy(update={"first_stage_layers": 16, "last_stage_layers": 13}))
        assert e.step_time_s < proposed.step_time_s


def test_stage_balancing_keeps_the_memory_tier():
    # BLOOM-176B on 256 H100s, TP 8 x PP 16, the scan's 7 / 4 x 14 / 7 split: moving a layer from the last stage to
    # the first shortens the step but leaves only the inner memory margin (the first stage holds 16 micro-batches of
    # activations). Ranked with the memory margin, the plan that keeps it must not be replaced by that split (its
    # layout would fall below every plan that keeps the margin); without the margin, the faster split replaces it.
    ctx = ctx_for("bloom-176b", "h100x256", seq_len=4096, global_batch=1024)
    plan = ParallelPlan(tp=8, pp=16, dp=2, micro_batch=1, zero_stage=1, recompute="none", sequence_parallel=True,
                        schedule="1f1b", first_stage_layers=7, last_stage_layers=7)
    ev = evaluate(ctx, plan)
    cap = usable_capacity_gib(ctx.cluster.hardware.hbm_capacity_gib, None, ctx.train.framework, ctx.calibration)
    counts = (8,) + (4,) * 14 + (6,)
    moved = evaluate(ctx, plan.model_copy(update={"first_stage_layers": 8, "last_stage_layers": 6}))
    assert moved.step_time_s < ev.step_time_s and memory_tier(moved) > memory_tier(ev) == 0
    a = StageAssignment(counts, (0,) * 16, 0.0, (0.0,) * 16, (0.0,) * 16, True)
    assert S._balanced_plan(ctx, SearchOptions(memory_margin=True), ev, cap, a) is None
    free = S._balanced_plan(ctx, SearchOptions(memory_margin=False), ev, cap, a)
    assert free is not None and (free.plan.first_stage_layers, free.plan.last_stage_layers) == (8, 6)


def test_stage_assignment_reports_the_recompute_the_plan_runs():
    # DeepSeek-V3 on 256 H100s, PP 16 with full recompute of 3 layers per stage (the scan's count for the memory
    # margin): the solver moves layers and sizes its own recompute to the capacity (1 layer per stage here), but the
    # plan keeps recompute_layers 3, so each stage recomputes min(3, its layers): the JSON reports that
    ctx = ctx_for("deepseek-v3", "h100x256", seq_len=4096, global_batch=1024)
    fixed = {"tp": 4, "pp": 16, "ep": 16, "schedule": "1f1b", "recompute": "full", "recompute_layers": 3}
    plans = search(ctx, SearchOptions(top_k=3, fixed=fixed, memory_margin=True)).plans
    balanced = [e for e in plans if e.pipeline.get("stage_assignment")]
    assert balanced
    for e in balanced:
        sa = e.pipeline["stage_assignment"]
        assert sa["layers_per_stage"] == e.pipeline["layers_per_stage"]
        assert sa["recompute_per_stage"] == [min(3, n) for n in sa["layers_per_stage"]]
