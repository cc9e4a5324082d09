"""The MoE layer from its mechanisms (issue 23): the terms `plan explain` lists for an MoE layer add up to the
layer's forward and backward time for every MoE model of the catalog, under every stack, and the per-token layer
time changes with the micro-batch only through terms that say why."""

from __future__ import annotations

import math

import pytest

from planner.analysis.explain import derivation
from planner.catalog.hardware import get_hardware
from planner.catalog.models import get_model, list_models
from planner.costmodel import Context, evaluate
from planner.costmodel.base import plan_shape
from planner.costmodel.calibration import DEFAULT_CALIBRATION as cal
from planner.costmodel.collectives import collective_time
from planner.costmodel.compute import layer_compute
from planner.costmodel.expert import dispatch_bytes, ep_comm_fwd_s, etp_gather_s
from planner.costmodel.moe import (
    HOST_KERNELS_BWD,
    HOST_KERNELS_FWD,
    HOST_KERNELS_PER_EXPERT_BWD,
    HOST_KERNELS_PER_EXPERT_FWD,
    MoEForward,
    dispatcher_buffer_bytes,
    expert_load,
    grouped_tile_visits_rel,
    local_experts,
    permute_s,
)
from planner.launchers.contract import CONTRACTS, missing_features
from planner.search.space import pinned_errors
from planner.specs import ClusterSpec, ParallelPlan, TrainingSpec

MOE_MODELS = [m.name for m in list_models() if get_model(m.name).is_moe]
FRAMEWORKS = ("megatron", "fsdp", "deepspeed", "maxtext", "automodel")


def _eval(name: str, framework: str = "megatron", mbs: int = 1, ep: int = 8, remat_offloaded: tuple[str, ...] = (),
          **train):
    model = get_model(name)
    cluster = ClusterSpec(hardware=get_hardware("h100-sxm-80gb"), count=64)
    tr = TrainingSpec(seq_len=4096, global_batch=512, framework=framework, **train)
    ep = min(ep, model.require_moe().num_experts)
    plan = ParallelPlan(tp=1, pp=1, dp=64, ep=ep, micro_batch=mbs, zero_stage=1,
                        recompute="selective" if remat_offloaded else "none", remat_offloaded=remat_offloaded)
    ctx = Context(model, cluster, tr)
    return ctx, evaluate(ctx, plan)


def _moe_layer_term(ev):
    return next(t for t in ev.trace.factors if t.name.startswith("layer_compute_s[MoE"))


def test_catalog_has_moe_models():
    assert len(MOE_MODELS) >= 5, MOE_MODELS


# MaxText with the custom remat policy its search tries (all five tensors in host memory: the host offload terms)
OFFLOAD_ALL = ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj")


@pytest.mark.parametrize("framework, offloaded", [(fw, ()) for fw in FRAMEWORKS] + [("maxtext", OFFLOAD_ALL)])
@pytest.mark.parametrize("name", MOE_MODELS)
def test_moe_layer_terms_sum_to_its_time(name, framework, offloaded):
    """fwd = proj + mlp (shared experts) + experts + router + attention + elementwise + permute + ring merge +
    host launch + expert epilogue + unfused RoPE + host offload; bwd = 2 GEMMs + attention backward (2.5 x its
    forward without FP8 attention) + 2 elementwise +
    permute backward (2 x the dropless passes) + ring merge + host launch + expert epilogue + unfused RoPE + remat
    offload: the inputs `plan explain` prints for the layer, and nothing else."""
    ctx, ev = _eval(name, framework, remat_offloaded=offloaded)
    i = _moe_layer_term(ev).inputs
    fwd = (i["proj_s"] + i["mlp_s"] + i["experts_s"] + i["router_s"] + i["attention_s"] + i["elementwise_s"]
           + i["permute_s"] + i["ring_merge_fwd_s"] + i["host_launch_fwd_s"] + i["expert_epilogue_fwd_s"]
           + i["unfused_rope_fwd_s"] + i["host_offload_fwd_s"])
    bwd = (2 * (i["proj_s"] + i["mlp_s"] + i["experts_s"] + i["router_s"]) + i["attention_bwd_s"]
           + 2 * i["elementwise_s"] + i["permute_bwd_s"] + i["ring_merge_bwd_s"] + i["host_launch_bwd_s"]
           + i["expert_epilogue_bwd_s"] + i["unfused_rope_bwd_s"] + i["host_offload_bwd_s"])
    assert math.isclose(fwd, i["fwd_s"], rel_tol=1e-12)
    assert math.isclose(bwd, i["bwd_s"], rel_tol=1e-12)
    assert math.isclose(i["attention_bwd_s"], 2.5 * i["attention_s"], rel_tol=1e-12)
    assert i["experts_s"] > 0 and i["router_s"] > 0 and i["permute_s"] > 0
    assert math.isclose(i["permute_bwd_s"], 2 * i["permute_s"], rel_tol=1e-12)  # dropless: read + write passes x 2
    # the same numbers reach the explain derivation rows
    rows = {r["term"]: r for r in derivation(ctx, ev)}
    row = rows[_moe_layer_term(ev).name]
    assert math.isclose(row["inputs"]["fwd_s"], fwd, rel_tol=1e-12)
    assert "router" in row["formula"] and "permute" in row["formula"] and "host launch" in row["formula"]


def test_the_offload_case_exercises_the_remat_offload_term():
    # the sum above holds the offload terms only where they are non-zero: DeepSeek-V2's MLA layer (128 heads of 192
    # q / k dimensions) copies more than its forward hides on an H100's host link, so that case adds them
    i = _moe_layer_term(_eval("deepseek-v2", "maxtext", remat_offloaded=OFFLOAD_ALL)[1]).inputs
    assert i["host_offload_fwd_s"] > 0 and i["fwd_s"] > i["proj_s"] + i["experts_s"] + i["attention_s"]


def test_host_launch_only_where_the_dispatcher_syncs():
    """Megatron's and torchtitan's dropless dispatchers copy token counts to the host; capacity padding, DeepSpeed's
    GShard gating and MaxText's static shapes do not."""
    name = "qwen3-30b-a3b" if "qwen3-30b-a3b" in MOE_MODELS else MOE_MODELS[0]
    for fw, synced in (("megatron", True), ("fsdp", True), ("deepspeed", False), ("maxtext", False)):
        i = _moe_layer_term(_eval(name, fw)[1]).inputs
        assert (i["host_launch_fwd_s"] + i["host_launch_bwd_s"] > 0) == synced, fw
    i = _moe_layer_term(_eval(name, "megatron", moe_capacity_factor=1.0)[1]).inputs
    assert i["host_launch_fwd_s"] == i["host_launch_bwd_s"] == 0.0


def test_per_token_layer_time_changes_with_micro_batch_only_through_named_terms():
    """From micro-batch 1 to 8 every GEMM and memory pass scales 8x (up to the GEMM efficiency of larger row
    counts); the only term that does not scale is the host launch, which the larger GPU time hides."""
    name = "qwen3-30b-a3b" if "qwen3-30b-a3b" in MOE_MODELS else MOE_MODELS[0]
    i1 = _moe_layer_term(_eval(name, mbs=1)[1]).inputs
    i8 = _moe_layer_term(_eval(name, mbs=8)[1]).inputs
    for k in ("permute_s", "elementwise_s"):
        assert math.isclose(i8[k], 8 * i1[k], rel_tol=0.02), k  # memory-bound: linear in tokens (load ~1)
    for k in ("proj_s", "experts_s", "router_s"):
        assert 7.0 * i1[k] <= i8[k] <= 8.0 * i1[k] * 1.001, k  # larger GEMMs run at least as efficiently
    assert i8["host_launch_fwd_s"] + i8["host_launch_bwd_s"] < i1["host_launch_fwd_s"] + i1["host_launch_bwd_s"]


def test_no_fixed_per_layer_cost_left():
    assert not hasattr(cal, "MOE_DISPATCH_SYNC_S") and not hasattr(cal, "MOE_EXPERT_LAUNCH_S")
    assert MoEForward._fields == ("router", "permute", "experts", "host_fwd", "host_bwd")


def test_dropless_imbalance_model():
    """Busiest EP rank under uniform routing: 1 + sqrt(2 ln ep (ep - 1) / n), n = the EP group's assignments."""
    ctx, ev = _eval(MOE_MODELS[0])
    shape = plan_shape(ctx, ev.plan)
    n = shape.tokens * ev.plan.ep * ctx.model.require_moe().top_k
    ep = ev.plan.ep
    assert expert_load(ctx, shape) == pytest.approx(1 + math.sqrt(2 * math.log(ep) * (ep - 1) / n))
    assert 1.0 < expert_load(ctx, shape) < 1.05
    capped = Context(ctx.model, ctx.cluster, ctx.train.model_copy(update={"moe_capacity_factor": 1.25}))
    assert expert_load(capped, shape) == 1.25



def test_megatron_batch_level_a2a_overlap_hides_ep_comm():
    """--overlap-moe-expert-parallel-comm: the dispatch / combine of one micro-batch hide under another's compute;
    with capacity padding (no host sync) the compute is unchanged."""
    name = "deepseek-v3" if "deepseek-v3" in MOE_MODELS else MOE_MODELS[0]
    _, plain = _eval(name, ep=64, moe_capacity_factor=1.0)
    _, overlap = _eval(name, ep=64, moe_capacity_factor=1.0, moe_a2a_overlap=True)
    assert plain.time_breakdown["ep_comm_s"] > 0
    assert overlap.time_breakdown["ep_comm_s"] < 0.5 * plain.time_breakdown["ep_comm_s"]
    assert overlap.step_time_s < plain.step_time_s
    assert overlap.time_breakdown["compute_s"] == pytest.approx(plain.time_breakdown["compute_s"])


def test_a2a_overlap_with_a_host_sync_exposes_every_host_launch():
    """Merged forward/backward steps behind a dropless dispatcher's host sync: the host's kernel launches of the MoE
    layer (HOST_KERNELS_* x HOST_LAUNCH_S) are charged whole, not only their excess over the GPU work."""
    name = "deepseek-v3" if "deepseek-v3" in MOE_MODELS else MOE_MODELS[0]
    ctx, ev = _eval(name, ep=64, moe_a2a_overlap=True)
    shape = plan_shape(ctx, ev.plan)
    k = next(k for k in ctx.kinds if k.moe)
    c = layer_compute(ctx, shape, k)
    n = local_experts(ctx, shape)
    assert c.host_fwd == pytest.approx((HOST_KERNELS_FWD + HOST_KERNELS_PER_EXPERT_FWD * n) * cal.HOST_LAUNCH_S)
    assert c.host_bwd == pytest.approx((HOST_KERNELS_BWD + HOST_KERNELS_PER_EXPERT_BWD * n) * cal.HOST_LAUNCH_S)
    _, plain = _eval(name, ep=64)
    assert ev.time_breakdown["compute_s"] > plain.time_breakdown["compute_s"]


def test_deepep_buffers_counted_only_for_the_flex_dispatcher():

    name = "deepseek-v3" if "deepseek-v3" in MOE_MODELS else MOE_MODELS[0]
    ctx, ev = _eval(name, ep=16)
    assert dispatcher_buffer_bytes(ctx, plan_shape(ctx, ev.plan)) == 0.0
    ctx, ev = _eval(name, ep=16, moe_dispatcher="flex")
    b = dispatcher_buffer_bytes(ctx, plan_shape(ctx, ev.plan))
    # 10 channels x 8 NVLink peers x 256 tokens x (7168 x 2 + 2048 B) + the RDMA ring to the other node: ~0.3-0.5 GiB
    assert 0.25 * 2**30 < b < 0.6 * 2**30


def test_interleaved_schedule_pinned_without_vpp_searches_the_virtual_stages():
    """`--schedule interleaved --pp 8` with no --vpp: the request is valid (the search tries vpp 2..layers/stage), it
    used to be refused because the check probed vpp 1."""
    model = get_model("qwen3-235b-a22b")
    train = TrainingSpec(seq_len=4096, global_batch=8192)
    assert pinned_errors(model, train, 256, {"pp": 8, "schedule": "interleaved", "ep": 32}) == []
    assert pinned_errors(model, train, 256, {"pp": 8, "schedule": "interleaved", "vpp": 1}) != []


@pytest.mark.parametrize("recipe, per_tensor", [("tensorwise", 3), ("mxfp8", 1), ("blockwise", 1), ("delayed", 0)])
def test_fp8_experts_launch_their_quantize_kernels_per_expert(recipe, per_tensor):
    """FP8 expert GEMMs behind a host sync: each local expert's two GEMM inputs (forward) and two output gradients
    (backward) are quantized one tensor at a time, 3 kernels each under current scaling (amax, scale, cast), 1 under
    block scalings, 0 per expert under delayed scaling (TE's one fused multi-tensor cast)."""
    name = "deepseek-v3" if "deepseek-v3" in MOE_MODELS else MOE_MODELS[0]
    model = get_model(name)
    hw = get_hardware("b200-sxm-180gb") if recipe == "mxfp8" else get_hardware("h100-sxm-80gb")
    tr = TrainingSpec(seq_len=4096, global_batch=512, framework="megatron", dtype="fp8", fp8_recipe=recipe,
                      moe_a2a_overlap=True)
    ctx = Context(model, ClusterSpec(hardware=hw, count=64), tr)
    ev = evaluate(ctx, ParallelPlan(tp=1, pp=1, dp=64, ep=64, micro_batch=1, zero_stage=1))
    shape = plan_shape(ctx, ev.plan)
    c = layer_compute(ctx, shape, next(k for k in ctx.kinds if k.moe))
    n = local_experts(ctx, shape)
    assert n == 4
    assert c.host_fwd == pytest.approx((HOST_KERNELS_FWD + (HOST_KERNELS_PER_EXPERT_FWD + 2 * per_tensor) * n)
                                       * cal.HOST_LAUNCH_S)
    assert c.host_bwd == pytest.approx((HOST_KERNELS_BWD + (HOST_KERNELS_PER_EXPERT_BWD + 2 * per_tensor) * n)
                                       * cal.HOST_LAUNCH_S)


def test_capacity_padded_experts_in_one_kernel_are_a_batched_gemm():
    """MaxText's dense_matmul einsum over capacity buffers (equal groups) runs the local experts as one batched GEMM:
    no grouped-kernel loss, so a capacity factor of 1.0 beats the dropless grouped kernel by 1 / MOE_GROUPED in the
    expert term, and by the row tiles MaxText's dropless megablox kernel revisits (moe.grouped_tile_visits_rel);
    Megatron's per-expert GEMM loop keeps the loss either way."""
    def experts(framework: str, **train) -> tuple[float, float]:
        ctx, ev = _eval("mixtral-8x7b" if "mixtral-8x7b" in MOE_MODELS else MOE_MODELS[0], framework, ep=1, **train)
        shape = plan_shape(ctx, ev.plan)
        return layer_compute(ctx, shape, next(k for k in ctx.kinds if k.moe)).experts, grouped_tile_visits_rel(ctx,
                                                                                                               shape)

    (padded, padded_tiles), (dropless, tiles) = experts("maxtext", moe_capacity_factor=1.0), experts("maxtext")
    assert padded_tiles == 1.0 and tiles > 1.0
    assert padded == pytest.approx(dropless * cal.MOE_GROUPED_GEMM_REL_EFFICIENCY / tiles)
    (padded, padded_tiles), (dropless, tiles) = experts("megatron", moe_capacity_factor=1.0), experts("megatron")
    assert padded == pytest.approx(dropless) and padded_tiles == tiles == 1.0


def test_maxtext_capacity_dispatch_is_two_einsums_over_capacity_buffers():
    """MaxText's dense_matmul: dispatch "BNSM,BNSEC -> EBNCM" and combine "EBNCM,BNSEC -> BNSM" against one-hot masks
    of E experts x C slots per sequence, C = ceil(S top_k / E) x cf (generate_masks): Mixtral 8x7B at S 4096, top-2,
    cf 1.25: C = 1280, 2 x 2 x 8 x 1280 x 4096 = 168 MFLOP per token, at the dense GEMM rate."""
    ctx, ev = _eval("mixtral-8x7b", "maxtext", ep=1, moe_capacity_factor=1.25)
    shape = plan_shape(ctx, ev.plan)
    c = layer_compute(ctx, shape, next(k for k in ctx.kinds if k.moe))
    per_token = 2 * 2 * 8 * 1280 * 4096
    assert per_token == pytest.approx(167.8e6, rel=1e-3)
    assert c.permute == pytest.approx(shape.tokens * per_token / (ctx.peak * ctx.gemm_eff(8 * 1280, 4096, 4096)))
    # backward: the dispatch einsum's one GEMM (its mask is a boolean cast, no gradient) and the combine's two
    # (tests/costmodel/test_moe_einsum_real_code.py measures it on XLA's compiled FLOPs)
    assert c.permute_bwd == pytest.approx(1.5 * c.permute, rel=1e-12)
    dctx, dropless = _eval("mixtral-8x7b", "maxtext", ep=1)  # dropless: permute passes at HBM bandwidth
    assert c.permute > 5 * layer_compute(dctx, plan_shape(dctx, dropless.plan),
                                         next(k for k in dctx.kinds if k.moe)).permute


def test_full_iteration_cuda_graph_removes_the_host_launches():
    """A full-iteration CUDA graph (TrainingSpec.cuda_graph_full_iteration, Megatron --cuda-graph-impl full_iteration)
    replays the step as one launch with static MoE shapes: the dropless layer's host-launch terms (HOST_KERNELS_* x
    HOST_LAUNCH_S behind the dispatcher's sync) go to zero and nothing else of the layer changes; with the batch-level
    EP overlap the merged steps no longer expose the host either. Only Megatron has the knob."""
    name = "qwen3-30b-a3b" if "qwen3-30b-a3b" in MOE_MODELS else MOE_MODELS[0]
    for overlap in (False, True):
        ctx, ev = _eval(name, ep=8, moe_a2a_overlap=overlap)
        gctx, gev = _eval(name, ep=8, moe_a2a_overlap=overlap, cuda_graph_full_iteration=True)
        shape, k = plan_shape(ctx, ev.plan), next(k for k in ctx.kinds if k.moe)
        c, g = layer_compute(ctx, shape, k), layer_compute(gctx, plan_shape(gctx, gev.plan), k)
        assert c.host_fwd + c.host_bwd > 0.0, overlap  # 16 local experts' launches behind the sync
        assert g.host_fwd == g.host_bwd == 0.0
        assert (g.router, g.permute, g.experts) == (c.router, c.permute, c.experts)
        assert gev.step_time_s < ev.step_time_s
    with pytest.raises(ValueError, match="full-iteration CUDA graph"):
        TrainingSpec(global_batch=8, framework="fsdp", cuda_graph_full_iteration=True)


def test_full_iteration_cuda_graph_is_refused_by_every_launcher():
    """No emitter writes the full-iteration graph with the static-shape MoE settings it needs (HybridEP's per-rank
    budget, the paged stash, TE's op fuser): a plan costed with it is refused, not launched as another run."""
    model = get_model("deepseek-v3")
    t = TrainingSpec(global_batch=8, cuda_graph_full_iteration=True)
    for launcher in CONTRACTS:
        assert "a full-iteration CUDA graph" in " ".join(missing_features(model, t, launcher)), launcher
    assert not any("CUDA graph" in f for f in missing_features(model, TrainingSpec(global_batch=8), "megatron"))


def test_megatron_fp8_runs_dispatch_in_bf16_deepseek_in_fp8_with_a_bf16_combine():
    """Megatron-core's dispatchers send the BF16 hidden states whatever the FP8 recipe (token_dispatcher.py at
    core_v0.14.0; fused_a2a.py: no FP8 dispatch for DeepEP / HybridEP): the dispatch + combine of an FP8 run moves the
    bytes of a BF16 one. DeepSeek-V3's own framework quantizes before the dispatch and combines in BF16 (report sec.
    3.3.2): with an alltoall of 2 copies (dispatch, combine) of top_k x h per token, 1 + 2 bytes against 2 + 2."""
    name = "deepseek-v3" if "deepseek-v3" in MOE_MODELS else MOE_MODELS[0]
    times, sent = {}, {}
    for tag, train in (("bf16", {}), ("fp8", {"dtype": "fp8"}), ("fp8_dispatch", {"dtype": "fp8",
                                                                               "fp8_moe_dispatch": True})):
        ctx, ev = _eval(name, ep=8, moe_capacity_factor=1.0, **train)
        shape = plan_shape(ctx, ev.plan)
        k = next(k for k in ctx.kinds if k.moe)
        times[tag] = ep_comm_fwd_s(ctx, shape, k)
        sent[tag] = dispatch_bytes(ctx, shape)
    e = get_model(name).require_moe()
    # 4096 tokens x top_k 8 copies x h 7168 x 2 B at capacity factor 1 (DeepSeek-V3)
    assert sent["fp8"] == sent["bf16"] == 4096 * e.top_k * get_model(name).hidden_size * 2
    assert times["fp8"] == pytest.approx(times["bf16"])
    # the all-to-all's time is alpha + bytes / bandwidth: FP8 dispatch + BF16 combine = 3/4 of two BF16 transfers
    # once the latency is small against 470 MB
    assert times["fp8_dispatch"] == pytest.approx(0.75 * times["bf16"], rel=0.01)


def test_fp8_moe_dispatch_needs_fp8():
    with pytest.raises(ValueError, match="needs dtype fp8"):
        TrainingSpec(seq_len=4096, global_batch=512, framework="megatron", fp8_moe_dispatch=True)


def test_alltoall_dispatcher_sorts_received_tokens_by_local_expert():
    """Megatron's alltoall dispatcher permutes its tokens by expert before the all-to-all, then sorts what it receives
    by local expert, and the reverse around the combine (token_dispatcher.py at core_v0.14.0, "Permutation 2"): with
    4 local experts (Mixtral 8x7B at EP 2) the permute term is 4 + 4 passes of the device's top_k copies, with one
    expert per rank (EP 8) 4; the flex dispatcher has no second sort."""
    name = "mixtral-8x7b"
    model = get_model(name)
    # 4096 tokens x top-2 copies x h 4096 x 2 B at capacity factor 1, over the HBM bandwidth
    passes = {}
    for ep in (2, 8):
        ctx, ev = _eval(name, ep=ep, moe_capacity_factor=1.0)
        copy_s = 4096 * model.require_moe().top_k * model.hidden_size * 2 / ctx.hbm_bw
        passes[ep] = permute_s(ctx, plan_shape(ctx, ev.plan), "fused") / copy_s
    assert passes == {2: pytest.approx(8), 8: pytest.approx(4)}
    ctx, ev = _eval(name, ep=2, moe_capacity_factor=1.0)
    flex = Context(ctx.model, ctx.cluster, ctx.train.model_copy(update={"moe_dispatcher": "flex"}))
    assert permute_s(flex, plan_shape(flex, ev.plan), "fused") == pytest.approx(4 * copy_s)


def test_expert_tensor_parallelism_gathers_and_scatters_the_received_tokens():
    """ETP behind the alltoall dispatcher: after the all-to-all the expert-TP ranks all-gather their received tokens
    and reduce-scatter the expert outputs (token_dispatcher.py at core_v0.14.0 dispatch_postprocess /
    combine_preprocess): etp x the sent copies each way over the TP fabric, and the sort by local expert runs over the
    gathered copies. Mixtral 8x7B, TP 4 = ETP 4, EP 2 on 64 H100s: 4096 / 4 tokens x top-2 x h 4096 x 2 B sent."""
    name = "mixtral-8x7b" if "mixtral-8x7b" in MOE_MODELS else MOE_MODELS[0]
    model = get_model(name)
    cluster = ClusterSpec(hardware=get_hardware("h100-sxm-80gb"), count=64)
    tr = TrainingSpec(seq_len=4096, global_batch=512, framework="megatron", moe_capacity_factor=1.0)
    ctx = Context(model, cluster, tr)
    k = next(k for k in ctx.kinds if k.moe)
    shapes = {}
    for etp in (1, 4):
        plan = ParallelPlan(tp=4, pp=1, dp=16, ep=2, etp=etp, micro_batch=1, zero_stage=1, sequence_parallel=True)
        shapes[etp] = plan_shape(ctx, plan)
    sent = dispatch_bytes(ctx, shapes[4])
    assert sent == 4096 / 4 * model.require_moe().top_k * model.hidden_size * 2
    link = shapes[4].links.tp
    assert etp_gather_s(ctx, shapes[4]) == pytest.approx(
        collective_time("all_gather", 4 * sent, 4, link) + collective_time("reduce_scatter", 4 * sent, 4, link))
    assert etp_gather_s(ctx, shapes[1]) == 0.0
    assert ep_comm_fwd_s(ctx, shapes[4], k) == pytest.approx(ep_comm_fwd_s(ctx, shapes[1], k)
                                                             + etp_gather_s(ctx, shapes[4]))


@pytest.mark.parametrize("ep", [1, 8])
def test_maxtext_gathers_every_local_expert_of_a_stacked_expert_array(ep):
    """MaxText keeps each routed-expert matrix as one (num_experts, emb, mlp) parameter sharded over the fsdp axis
    (MT:layers/moe.py RoutedMoE wi_0 / wi_1 / wo), so its per-array gathers bring the device's 256 / ep experts at
    once: DeepSeek-V3 (h 7168, expert width 2048) on 512 v5p chips at EP 1 (the tpu-recipes v5p-1024 layout) holds
    two gathered bf16 arrays of 256 x 7168 x 2048 (7.0 GiB each) and one fp32 gradient of it (14.0 GiB): 28.0 GiB
    of ZeRO-3 buffers, 3.5 GiB at EP 8 (counted one expert at a time, MLA's projections were the largest array:
    1.4 GiB)."""
    model = get_model("deepseek-v3")
    cluster = ClusterSpec(hardware=get_hardware("tpu-v5p"), count=512)
    tr = TrainingSpec(seq_len=8192, global_batch=512, framework="maxtext")
    ev = evaluate(Context(model, cluster, tr), ParallelPlan(tp=1, pp=1, dp=512, ep=ep, micro_batch=1, zero_stage=3))
    array = 256 // ep * 7168 * 2048
    assert ev.memory["buffers_gib"] == pytest.approx(array * (2 * 2 + 4) / 2**30, rel=1e-9)
    assert ev.memory["buffers_gib"] == pytest.approx(28.0 / ep, rel=1e-9)


def test_shared_experts_run_beside_the_dispatch_only_where_the_stack_takes_it():
    """Megatron takes --moe-shared-expert-overlap with the alltoall and flex dispatchers only (megatron-core 0.19.2
    transformer_config.py: "moe_shared_expert_overlap only works with alltoall or flex token dispatcher"): with
    allgather DeepSeek-V3's shared expert hides none of the dispatch, and its launch files leave the flag out (before,
    they wrote it and megatron refused them; tests/consumers/test_megatron_consumer.py). AutoModel runs its shared
    experts on their own stream with either of its dispatchers."""
    import json

    from consumers.cases import Case

    for fw, kind, runs in (("megatron", "alltoall", True), ("megatron", "flex", True), ("megatron", "allgather", False),
                           ("automodel", "allgather", True), ("automodel", "flex", True), ("fsdp", "alltoall", False)):
        assert TrainingSpec(global_batch=8, framework=fw, moe_dispatcher=kind).shared_expert_overlap is runs, (fw, kind)
    hidden = {}
    for kind in ("alltoall", "allgather"):
        ctx, ev = _eval("deepseek-v3", moe_dispatcher=kind)
        comm = next(t for t in ev.trace.factors if t.name.startswith("layer_comm_fwd_s[MoE"))
        hidden[kind] = comm.inputs["ep_hidden_by_shared_s"]
        case = Case("x", ctx.model, ctx.cluster, ctx.train, ev.plan)
        args = json.loads(case.emit(["megatron"])[0]["megatron_args.json"])["args"]
        assert ("--moe-shared-expert-overlap" in args) is (kind == "alltoall"), kind
    assert hidden["alltoall"] > 0 and hidden["allgather"] == 0.0
