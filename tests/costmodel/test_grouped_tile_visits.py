"""MaxText's dropless experts run megablox's grouped matmul, which computes a row tile once for every group with rows
in it (moe.grouped_tile_visits_rel): the factor against hand arithmetic, the kernel's tile count replayed on routed
group sizes, where it applies (MaxText dropless, more than one local expert) and where not, and its trace term."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from planner.catalog.hardware import parse_cluster
from planner.catalog.models import get_model
from planner.costmodel import Context
from planner.costmodel.evaluate import evaluate, screen_memory
from planner.costmodel.moe import experts_s, grouped_tile_visits_rel, local_experts, tokens_per_local_expert
from planner.specs import ParallelPlan, TrainingSpec

# MaxText base.yml tile_batch_seq at maxtext 9ca35d7 and 3eb77db (Stack.moe_grouped_row_tile)
TILE = 512


def _kernel_tiles(group_sizes: list[int], tm: int) -> int:
    """The m-tiles megablox visits for these group sizes: each non-empty group from the tile holding its first row to
    the tile holding its last (make_group_metadata's rounded_group_ends - rounded_group_starts, in tiles)."""
    start, tiles = 0, 0
    for g in group_sizes:
        if g:
            tiles += -(-(start + g) // tm) - start // tm
        start += g
    return tiles


def _maxtext(model: str, cluster: str, plan: ParallelPlan, **train) -> tuple[Context, object]:
    ctx = Context(get_model(model), parse_cluster(cluster),
                  TrainingSpec(seq_len=8192, global_batch=512, framework="maxtext", **train))
    return ctx, screen_memory(ctx, plan).shape


def test_kernel_tile_count_reaches_its_upper_bound_on_routed_groups():
    # 131072 token copies over 128 experts (the tpu-recipes Maverick v5p-256 layout), DeepSeek-V3's 393216 over 256,
    # Scout's 65536 over 16: routed group sizes (multinomial, seeded) start mid-tile in every group but the first
    # unless a boundary falls on a tile's first row (1 in 512): the kernel visits tiles_m + groups - 1 tiles, at
    # most a tile fewer (seed 0's first two cases: 382 of 383, 1022 of 1023)
    for seed in range(3):
        rng = random.Random(seed)
        for rows, groups in ((131072, 128), (393216, 256), (65536, 16)):
            sizes = [0] * groups
            for _ in range(rows):
                sizes[rng.randrange(groups)] += 1
            bound = rows // TILE + groups - 1
            assert bound - 1 <= _kernel_tiles(sizes, TILE) <= bound, (seed, rows)
    # equal groups that fill whole tiles share none: the lower bound
    assert _kernel_tiles([1024] * 128, TILE) == 131072 // TILE


def test_factor_against_hand_arithmetic():
    # Llama 4 Maverick, TP 4 x FSDP 32 on 128 v5p chips, 16 sequences of 8192 per tensor group, top-1 of 128 experts
    # split over the tensor axis (etp 4, as plan validate scores the tpu-recipes row): every chip of the group runs
    # all 131072 rows, in 256 tiles, 127 revisited
    plan = ParallelPlan(tp=4, etp=4, dp=32, zero_stage=3, micro_batch=16, recompute="full")
    ctx, shape = _maxtext("llama4-maverick", "tpu-v5px128", plan)
    assert local_experts(ctx, shape) == 128
    assert tokens_per_local_expert(ctx, shape) * 128 == pytest.approx(131072, rel=0.01)
    rows = tokens_per_local_expert(ctx, shape) * 128
    tiles = math.ceil(rows / TILE)
    assert grouped_tile_visits_rel(ctx, shape) == pytest.approx((tiles + 127) / tiles)
    assert grouped_tile_visits_rel(ctx, shape) == pytest.approx(1.496, abs=0.002)
    # the expert GEMM time carries it: against the same layer costed by a stack without shared row tiles
    k = next(k for k in ctx.kinds if k.moe)
    with_tiles = experts_s(ctx, shape, k)
    ctx.stack = dataclasses.replace(ctx.stack, moe_grouped_row_tile=None)
    assert grouped_tile_visits_rel(ctx, shape) == 1.0
    assert with_tiles == pytest.approx(1.496 * experts_s(ctx, shape, k), rel=0.002)


def test_applies_only_to_a_shared_tile_kernel_with_several_local_experts():
    plan = ParallelPlan(tp=1, dp=128, zero_stage=3, micro_batch=4, recompute="full")
    ctx, shape = _maxtext("qwen3-30b-a3b", "tpu-v5px128", plan)
    assert grouped_tile_visits_rel(ctx, shape) > 1.0
    # capacity-padded: MaxText's dense_matmul einsums over equal capacity buffers (no megablox)
    ctx, shape = _maxtext("qwen3-30b-a3b", "tpu-v5px128", plan, moe_capacity_factor=1.25)
    assert grouped_tile_visits_rel(ctx, shape) == 1.0
    # one local expert per chip: one group, no shared tile
    ctx, shape = _maxtext("qwen3-30b-a3b", "tpu-v5px128", ParallelPlan(tp=1, dp=128, ep=128, zero_stage=3,
                                                                       micro_batch=4, recompute="full"))
    assert local_experts(ctx, shape) == 1 and grouped_tile_visits_rel(ctx, shape) == 1.0
    # Megatron's experts are one GEMM each (Transformer Engine's GroupedLinear): no tile between experts
    ctx = Context(get_model("qwen3-30b-a3b"), parse_cluster("h100x64"), TrainingSpec(seq_len=4096, global_batch=256))
    shape = screen_memory(ctx, ParallelPlan(tp=1, dp=64, ep=8)).shape
    assert local_experts(ctx, shape) == 16 and grouped_tile_visits_rel(ctx, shape) == 1.0


def test_trace_shows_the_factor_only_where_it_applies():
    plan = ParallelPlan(tp=1, dp=128, zero_stage=3, micro_batch=4, recompute="full")
    ctx, _ = _maxtext("qwen3-30b-a3b", "tpu-v5px128", plan)
    terms = {t.name: t for t in evaluate(ctx, plan).trace.terms()}
    t = terms["grouped_tile_visits_rel"]
    assert t.value > 1.0 and t.inputs["tile_rows"] == TILE and t.inputs["local_experts"] == 128
    ctx, _ = _maxtext("qwen3-30b-a3b", "tpu-v5px128", plan, moe_capacity_factor=1.25)
    assert "grouped_tile_visits_rel" not in {t.name for t in evaluate(ctx, plan).trace.terms()}
