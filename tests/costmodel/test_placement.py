"""Rank placement (issue 12 items 1 and 8): which links each group of a plan spans, from the launcher's order."""

import math

import pytest

from planner.catalog.hardware import parse_cluster
from planner.costmodel.placement import (
    IciAxis,
    ici_alltoall_busbw_GBps,
    ici_group_busbw_GBps,
    linear_span,
    mesh_degrees,
    placement,
    placement_domain,
    slice_shape,
    split_ici_dcn,
    torus_assignment,
)
from planner.specs import ParallelPlan


def test_tp3_on_768_a100_straddles_two_nodes():
    # Megatron tp fastest: TP groups {0,1,2}, {3,4,5}, {6,7,8}: the third spans nodes 0 and 1
    cl = parse_cluster("a100-sxm-80gbx768")
    sp = placement(cl, ParallelPlan(tp=3, pp=8, dp=32), "megatron")
    tp = sp["tp"]
    assert not tp.aligned and tp.domains == 2 and tp.min_per_domain == 1 and tp.max_per_domain == 3
    assert tp.links == ("nvlink", "ib")
    # node 1 (ranks 8-15) holds rank 8 of {6,7,8} and ranks 15 of {15,16,17}: two crossing TP groups at once
    assert tp.concurrent == 2
    # TP8 tiles the node exactly
    assert placement(cl, ParallelPlan(tp=8, pp=8, dp=12), "megatron")["tp"].aligned


def test_tp_aligned_when_it_divides_the_node():
    cl = parse_cluster("h100x64")
    for tp in (1, 2, 4, 8):
        assert placement(cl, ParallelPlan(tp=tp, dp=64 // tp), "megatron")["tp"].aligned


def test_cp_group_when_tp_times_cp_does_not_divide_the_node():
    # tp=2, cp=3: the CP groups are 3 ranks 2 apart, {0,2,4}, {1,3,5}, {6,8,10}, ...: {6,8,10} crosses
    cl = parse_cluster("h100x48")
    sp = placement(cl, ParallelPlan(tp=2, cp=3, dp=8), "megatron")
    assert not sp["cp"].aligned and sp["cp"].min_per_domain == 1
    # tp=2, cp=4 fills the 8-GPU node exactly
    assert placement(cl, ParallelPlan(tp=2, cp=4, dp=6), "megatron")["cp"].aligned


def test_64_rank_groups_on_nvl72_starting_at_rank_64():
    # two NVL72 racks: ranks 0-63 stay in rack 0, ranks 64-127 put 8 ranks in rack 0 and 56 in rack 1
    span = linear_span("ep", 64, 1, 128, 72, "nvlink", "ib")
    assert not span.aligned and span.domains == 2 and span.min_per_domain == 8 and span.max_per_domain == 64
    cl = parse_cluster("gb200-nvl72x144")  # two full racks: ranks 64-127 straddle them
    assert cl.scale_up_size == 72 and placement_domain(cl, 144) == 72
    assert not placement(cl, ParallelPlan(ep=64, dp=144), "megatron")["ep"].aligned
    # a 72-rank group tiles the rack
    assert linear_span("ep", 72, 1, 144, 72, "nvlink", "ib").aligned


def test_nvl72_jobs_are_placed_in_whole_segments():
    # Slurm block scheduling on NVL72: jobs of 128+ GPUs in 16-tray (64-GPU) segments, so EP64 stays in a rack
    cl = parse_cluster("gb200-nvl72x256")
    assert placement_domain(cl, 256) == 64 and placement_domain(cl, 128) == 64
    assert placement_domain(cl, 48) == 48  # a small job sits in one rack
    assert placement(cl, ParallelPlan(ep=64, dp=256), "megatron")["ep"].aligned
    # HGX nodes: the domain is the node whatever the job
    assert placement_domain(parse_cluster("h100x64"), 64) == 8


def test_dp_and_pp_groups_cross_nodes_with_one_rank_per_node():
    cl = parse_cluster("h100x64")
    sp = placement(cl, ParallelPlan(tp=8, pp=2, dp=4), "megatron")
    assert not sp["dp"].aligned and sp["dp"].min_per_domain == 1 and sp["dp"].concurrent == 8
    assert not sp["pp"].aligned
    # tp=2 dp=4 stays in the node: the DP groups are 4 ranks 2 apart inside one node
    assert placement(cl, ParallelPlan(tp=2, pp=8, dp=4), "megatron")["dp"].aligned


def test_torchtitan_uses_the_same_linear_order():
    cl = parse_cluster("h100x64")
    plan = ParallelPlan(tp=4, cp=2, dp=8, zero_stage=3)
    assert placement(cl, plan, "fsdp") == placement(cl, plan, "megatron")


def test_maxtext_mesh_split_and_torus_axes():
    cl = parse_cluster("tpu-v5px512")  # one 512-chip slice of v5p
    assert slice_shape(cl) == (8, 8, 8)
    plan = ParallelPlan(tp=8, dp=64, zero_stage=3)
    deg = mesh_degrees(plan)
    ici, dcn = split_ici_dcn(deg, 512, cl.scale_up_size)
    assert ici["tensor"] == 8 and ici["fsdp"] == 64 and all(v == 1 for v in dcn.values())
    tor = torus_assignment(ici, slice_shape(cl), cl.hardware.torus.cube)
    assert len(tor["tensor"]) == 1 and len(tor["fsdp"]) == 2  # tensor on one axis, fsdp on the other two
    sp = placement(cl, plan, "maxtext")
    assert sp["tp"].aligned and sp["dp"].aligned and sp["tp"].links == ("ici",)


def test_dcn_between_slices_for_the_outer_axis():
    # two v5e 256-chip slices: data parallelism goes over DCN, the rest stays on ICI
    cl = parse_cluster("tpu-v5ex512")
    plan = ParallelPlan(tp=1, dp=512, zero_stage=3, zero_shard_size=256)
    sp = placement(cl, plan, "maxtext")
    assert not sp["dp"].aligned and sp["dp"].links == ("ici", "dcn")
    assert sp["dp"].domains == 2 and sp["dp"].min_per_domain == 256


@pytest.mark.parametrize("cluster,axes,expected", [
    # v5p: 6 links x 100 GB/s one way (hardware.yaml per_link_unidir_GBps 100); a closed 4-ring uses both ways
    ("tpu-v5px64", (IciAxis(4, 4, True),), 200.0),
    ("tpu-v5px64", (IciAxis(4, 4, True), IciAxis(4, 4, True)), 400.0),
    ("tpu-v5px64", (IciAxis(4, 4, True),) * 3, 600.0),  # all six links = the per-chip 600 GB/s one way
    # v5e: 4 ports x 50 GB/s; an 8-long axis has no wraparound (only 16-long ones close), one direction only
    ("tpu-v5ex64", (IciAxis(8, 8, False),), 50.0),
    ("tpu-v5ex256", (IciAxis(16, 16, True),), 100.0),
    ("tpu-v4x64", (IciAxis(4, 4, True),), 90.0),  # v4: 45 GB/s per link one way
])
def test_ici_bandwidth_by_torus_axes(cluster, axes, expected):
    assert ici_group_busbw_GBps(parse_cluster(cluster), axes) == pytest.approx(expected)


def test_tpu_group_shape_sets_its_bandwidth():
    cl = parse_cluster("tpu-v5ex256")  # 16 x 16, both axes wrap
    one_axis = placement(cl, ParallelPlan(tp=16, dp=16, zero_stage=3), "maxtext")["tp"]
    two_axes = placement(cl, ParallelPlan(tp=1, dp=256, zero_stage=3), "maxtext")["dp"]
    assert len(one_axis.ici_axes) == 1 and len(two_axes.ici_axes) == 2
    assert ici_group_busbw_GBps(cl, two_axes.ici_axes) == 2 * ici_group_busbw_GBps(cl, one_axis.ici_axes)
    # a 4-chip TP group on a 16-long axis is an open segment: one direction of one link
    seg = placement(cl, ParallelPlan(tp=4, dp=64, zero_stage=3), "maxtext")["tp"]
    assert seg.ici_axes == (IciAxis(4, 16, False),)
    assert ici_group_busbw_GBps(cl, seg.ici_axes) == pytest.approx(50.0)


def test_ici_all_to_all_is_held_to_the_links_across_the_middle():
    """jax-ml/scaling-book sharding.md: an AllToAll of an array of V bytes over a bidirectional ring takes
    V / (4 W_ici), W_ici the bidirectional link rate ("AllGather / 4 for a bidirectional ring"); each of k chips holds
    b = V / k and sends (k-1)/k of it, so the rate collective_time divides by is (k-1)/k x b / that time."""
    v5e = parse_cluster("tpu-v5ex256")  # 4 ports x 50 GB/s one way: W_ici = 100 GB/s bidirectional per link
    V = 64.0  # GB
    for k in (4, 8, 16):
        ring = (IciAxis(k, k, True),)
        b = V / k
        seconds = (k - 1) / k * b / ici_alltoall_busbw_GBps(v5e, ring)
        assert seconds == pytest.approx(V / (4 * 100.0)), k
        # a quarter of the ring's AllGather of the same array (V / W_ici, the ring collective's rate)
        gather = (k - 1) / k * V / ici_group_busbw_GBps(v5e, ring)
        assert seconds / gather == pytest.approx(k / (4 * (k - 1)))
    # an open segment has one link across its middle, not two: twice the ring's time
    seg = (IciAxis(8, 16, False),)
    assert (7 / 8) * (V / 8) / ici_alltoall_busbw_GBps(v5e, seg) == pytest.approx(2 * V / (4 * 100.0))
    # two axes carry their shares at once: the longer sets the time (a 4 x 16 group: the 16-ring's share)
    two = (IciAxis(4, 4, True), IciAxis(16, 16, True))
    b = V / 64
    assert (63 / 64) * b / ici_alltoall_busbw_GBps(v5e, two) == pytest.approx(16 * b / (4 * 100.0))
    # a pair is never held below its chip's own links (the ring rate: the bisection is not the limit there)
    pair = (IciAxis(2, 2, True),)
    assert ici_alltoall_busbw_GBps(v5e, pair) == pytest.approx(ici_group_busbw_GBps(v5e, pair))


def test_group_limited_routing_is_imported():
    # DeepSeek-V3 config: n_group 8, topk_group 4 (each token to at most 4 nodes, report sec. 2.1.2);
    # DeepSeek-V2: 8 groups, 3 devices (group_limited_greedy)
    from planner.catalog.models import get_model
    v3, v2 = get_model("deepseek-v3").moe, get_model("deepseek-v2").moe
    assert (v3.route_groups, v3.route_topk_groups) == (8, 4)
    assert (v2.route_groups, v2.route_topk_groups) == (8, 3)
    assert get_model("mixtral-8x7b").moe.route_topk_groups is None


def test_mesh_groups_the_mesh_cannot_express_fall_back_to_the_linear_order():
    # MaxText carves ep out of the data axes only; with tp=2, etp=1 the expert replicas (edp = dp*tp/ep) are not
    # one mesh axis product: the span keeps the cost model's group size
    cl = parse_cluster("mi300xx16")
    plan = ParallelPlan(tp=2, dp=8, ep=4, zero_stage=3)
    sp = placement(cl, plan, "maxtext")
    assert sp["edp"].size == plan.edp and sp["ep"].size == 4 and sp["dp"].size == 8


# Google's published v5p single-slice topologies (cloud.google.com/tpu/docs/v5p, "Configurations": 2x2x1 ... 16x16x24,
# every axis a multiple of 4 from one 4x4x4 cube up), as sorted chip counts per axis
V5P_TOPOLOGIES = {4: (1, 2, 2), 8: (2, 2, 2), 32: (2, 4, 4), 64: (4, 4, 4), 128: (4, 4, 8), 256: (4, 8, 8),
                  512: (8, 8, 8), 1024: (8, 8, 16), 2048: (8, 16, 16), 4096: (16, 16, 16), 6144: (16, 16, 24)}


@pytest.mark.parametrize("chips,shape", sorted(V5P_TOPOLOGIES.items()))
def test_slice_shape_is_a_topology_google_offers(chips, shape):
    assert slice_shape(parse_cluster(f"tpu-v5px{chips}")) == shape


def test_search_and_cost_model_share_one_slice_shape():
    """9216 v5p chips are two 4608-chip slices (6144, the largest slice, does not divide 9216; multislice jobs use
    equal slices). The search once said 16x16x24 (a 6144-chip slice), the cost model 16x16x18 (18 is no multiple of
    the 4-chip cube edge): the slice is 12x16x24, for both."""
    from planner.search import engine

    cl = parse_cluster("tpu-v5px9216")
    assert engine.slice_shape is slice_shape
    assert slice_shape(cl) == (12, 16, 24) and math.prod(slice_shape(cl)) * 2 == 9216


def test_unaligned_allocation_puts_a_rack_boundary_inside_an_ep_group():
    """DGX Cloud's DeepSeek-V3 GB200 layout (TP2 PP4 EP32 ETP1 on 128 GPUs): with block scheduling each EP group (32
    consecutive ranks with ETP1, 8 trays) lies in one 16-tray segment; with nodes anywhere in the 18-tray NVL72
    racks the worst offset leaves one 4-GPU tray of a group in the other rack, whose NICs then carry its share of
    the all-to-all."""
    plan = ParallelPlan(tp=2, pp=4, dp=16, ep=32, etp=1)
    aligned = parse_cluster("gb200-nvl72x128")
    assert placement(aligned, plan, "megatron")["ep"].aligned
    loose = aligned.model_copy(update={"aligned_allocation": False})
    assert placement_domain(loose, 128) == 72
    ep = placement(loose, plan, "megatron")["ep"]
    assert not ep.aligned and ep.domains == 2 and ep.min_per_domain == 4
    # TP pairs never leave a tray, whatever the offset
    assert placement(loose, plan, "megatron")["tp"].aligned
    # one-node domains (HGX) are unaffected
    h100 = parse_cluster("h100x128")
    assert placement(h100.model_copy(update={"aligned_allocation": False}), plan, "megatron") == \
        placement(h100, plan, "megatron")


def test_dgxc_releases_before_v26_02_ran_without_block_scheduling():
    from planner.analysis.validate import infer_aligned_allocation

    src = "NVIDIA DGX Cloud benchmarking recipes (NVIDIA/dgxc-benchmarking) at commit {} ({}) -- deepseek_v3"
    assert infer_aligned_allocation({"source": src.format("68eaf7e", "v25.05")}) is False
    assert infer_aligned_allocation({"source": src.format("c84bc9b", "v26.06.01")}) is True
    assert infer_aligned_allocation({"source": "Megatron-Bridge performance summary, 25.11 NeMo container"}) is True
    assert infer_aligned_allocation({"source": src.format("68eaf7e", "v25.05"), "aligned_allocation": True}) is True
