"""The MoE layer from its mechanisms, forward, one micro-batch on one device: the router (GEMM and score
function), the token permute / unpermute around the dispatcher, the routed experts' grouped GEMMs, and the
host time the layer's kernels take to launch where the dispatcher makes the GPU wait for the host.

Every term is shown in the layer's trace (compute.layer_compute_term): the forward of an MoE layer is the sum of
the dense parts (projections, attention, elementwise) and of these terms, nothing else. The shared experts are
the dense `mlp` part (compute.mlp_s); the dispatcher's all-to-all is a collective (planner.costmodel.expert).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from planner.costmodel.base import ACT_ELEM_BYTES, Context, LayerKind, Shape
from planner.costmodel.trace import Term, formula

# Router score function on the fp32 logits (tokens x experts): Megatron's unfused router writes the logits, reads and
# writes them in softmax / sigmoid, reads them in top-k and writes the gathered probabilities (5 passes of 4 B per
# logit; megatron/core/transformer/moe/router.py + moe_utils.topk_softmax_with_capacity); --moe-router-fusion (TE's
# fused_topk_with_score_function kernel) reads the logits once and writes the probabilities (2 passes).
ROUTER_LOGIT_BYTES = 4.0
ROUTER_SCORE_PASSES = {True: 2, False: 5}
# Group-limited routing (DeepSeek-V3 report, arXiv 2412.19437, sec. 2.1.2): group scores (read the scores, write
# groups) and the masked scores (read + write): 3 more passes when unfused, fused into the same kernel otherwise.
GROUP_LIMITED_EXTRA_PASSES = {True: 0, False: 3}
# Token permute + unpermute around the dispatcher, forward, in units of top_k copies of a token's hidden state:
# fused (Megatron --moe-permute-fusion, TE moe_permute / moe_unpermute: one read + one write each) 4 passes; unfused
# (index_select gather, then scatter-add with the probabilities) 6 passes (the unpermute reads the probabilities'
# product and adds into a zeroed output). A dispatcher that permutes inside its communication kernel (DeepEP /
# HybridEP write tokens straight into the expert-major receive buffer) leaves 2 (the combine's weighted sum).
# A permute of row gathers by index that XLA compiles (Stack.moe_permute "gather": MaxText's dropless sparse_matmul,
# layers/moe.py permute / unpermute: the copies gathered into expert order, then gathered back and summed with their
# weights) is counted as the fused one's 4 passes, each at the hardware's row-gather rate (row_gather_bw).
PERMUTE_PASSES = {"fused": 4, "unfused": 6, "in_dispatch": 2, "gather": 4}
# The alltoall dispatcher's second permutation (Stack.moe_alltoall_sorts_by_local_expert): the received tokens sorted by
# local expert after the dispatch and back before the combine, one read + one write each (megatron-core core_v0.14.0
# token_dispatcher.py dispatch_postprocess sort_chunks_by_idxs / combine_preprocess): 4 passes of the received copies.
LOCAL_EXPERT_SORT_PASSES = 4
# PyTorch ops of one MoE layer the host issues after the dispatcher's device-to-host sync (forward) and in the
# backward, beside the per-local-expert GEMMs: the token-count bookkeeping and the load-balancing loss (counts,
# histogram, aux / z-loss: ~20 ops), permute, the all-to-all with its split bookkeeping and chunk sort (~20), the
# activation, unpermute and combine with their index / cast kernels (~20): about 60 forward, estimated from
# Megatron-core's router.py, token_dispatcher.py and experts.py; their autograd backward about 1.5x that (90).
# Counted for the flex dispatcher with the HybridEP backend (Megatron-LM b0cc2706, the Megatron-Bridge v0.3.0 / 26.02
# pin: moe_layer.py MoELayer.forward, token_dispatcher.py _HybridEPManager, fused_a2a.py HybridEPDispatch; DeepEP
# hybrid-ep buffer.py dispatch_with_permute syncs on num_dispatched_tokens_tensor.cpu()): after the sync the host issues
# one dispatch-with-permute call, the experts (TEGroupedMLP: fc1, the fused weighted SwiGLU, fc2, with the
# per-expert GEMMs and casts counted below), one combine-with-unpermute call and the layer's bias-dropout-add, about
# 10 launches; the router, its aux loss and the token counts run before the sync (one CUDA-graph replay each where the
# preset captures the moe_router / moe_preprocess scopes; Megatron-LM docs/discussions/deepseek-v3-gb200-optimization:
# the router is 72 kernels unfused, 31 with --moe-router-fusion, router + preprocess 17 with DeepEP, and with the
# attn / moe_router / moe_preprocess graphs "only the routed experts part still has some CPU overhead").
# Shipped for HybridEP only (HYBRIDEP_HOST_KERNELS below), each run with the backend its recipe sets
# (TrainingSpec.moe_flex_backend; 41 of the 56 published flex runs ran HybridEP, validate.infer_moe_flex_backend): the
# GB200 Qwen3-235B-A22B rows (4 local experts) +21..+23% -> -1.5..0% (the BF16 25.11 row +35% -> +15%), but the
# Qwen3-30B-A3B GB200 mbs-4 rows (16 local experts) -0.4..+0.9% -> -5..-7% (the dev 25.11 row -9% -> -15%) and the
# B200 DeepSeek-V3 EP-8 rows (32 local experts) -2..-7% -> -5..-9%: host time that grows with the local experts beyond
# what the per-expert terms below reach. Counted per dispatcher (2026-11-26, same pins), launches after the sync,
# forward / backward: the alltoall dispatcher syncs before the EP all-to-all (dropless, permute fusion:
# token_dispatcher.py preprocess "before_ep_alltoall"), then two all-to-alls, the fused chunk sort and unsort
# (moe_sort_chunks_by_index: map + sort), the combine all-to-all, the fused unpermute and the bias-dropout-add: ~12-14
# / ~13 (TP > 1 adds the two all-gathers and the reduce-scatter); DeepEP's dispatch waits on the host for the receive
# counts, then _DeepepManager _indices_to_multihot (zeros, mask, boolean indexing and repeat_interleave, each of the
# last two a further host wait), the fused permute (row-id map + permute), unpermute and combine: ~24 / ~15; HybridEP
# ~10 / ~10 (above). TE GroupedLinear's per-expert host work without a kernel (TransformerEngine 5671fd3, the v0.3.0
# pin; module/grouped_linear.py, csrc/extensions/cast.cpp split_quantize bulk MXFP8 / blockwise allocation,
# te_general_grouped_gemm), per expert and call: forward 18 Python calls (weight / bias / quantizer lookups, set_usage
# x2, convert_quantizer, cached get_weight_workspace, two GEMM operand conversions, update_usage, prepare_for_saving
# x4, the main_grad lambda), 5 tensor views made in C++ (4 quantized data / scale views, the GEMM output slice), one
# quantized-storage object and 8 saved tensors; backward 17 calls, 5 views, one object and one AccumulateGrad with
# Megatron's DDP hook on the expert weight. At benchmarks/host_op_costs.py's CPU costs (0.09 us a call, 0.34 us a
# C++-made view, 0.22 us an object, 0.43 us a saved tensor, 4.1 us a hooked leaf: PyTorch eager dispatch only, x86
# EPYC, no CUDA allocator, no launch) that is ~7.0 / ~7.6 us per call, ~14 / ~15 us per expert and layer (fc1 + fc2).
# With those counts for every dispatcher (alltoall 14 / 13 too; the merged path of the batch-level EP overlap left at
# 40 / 60, whose own host work is not counted: under it the H100 Qwen3-235B-A22B rows fall to -8..-15% at the counts)
# the Qwen3-30B-A3B and DeepSeek-V3 rows above ask for ~24-48 us per expert and layer, about 2x what this CPU measures
# (Grace's per-op cost, the CUDA side: caching allocator, cuBLASLt setup, or a GPU-side term of the small
# Qwen3-30B-A3B GEMMs may make up the rest; none measured here), and even at 35 / 35 the H100 gpt-oss-120b BF16 rows
# (alltoall, no per-layer graphs) fall from -2..+1% to -9..-12%: without graphs the launches before the sync
# (attention, router, aux loss, preprocess: ~70) show too, yet charged beyond the attention's GPU time they push the
# ungraphed B200 Qwen3-235B-A22B rows from +3..+4% to +18..+25%. The alltoall and DeepEP counts and the pre-sync span
# need the graph scopes of each preset (Megatron-Bridge *_workload_base_configs.py cuda_graph_scope: attn / moe_router
# / moe_preprocess on GB200, moe_router / moe_preprocess for Qwen3-30B-A3B on B200 / H100, none for Qwen3-235B-A22B on
# B200 / H100) and the merged schedule's own host work, so the estimate stays. Charged over the whole sync-to-sync
# span instead of kernel group by group (the host running ahead wherever the GPU is busy; pre-sync launches by preset
# scope), the same counts hide under the layer's GPU time and the Qwen3-30B-A3B GB200 rows fall to -24%: their gap is
# not host time at these counts.
HOST_KERNELS_FWD = 40
HOST_KERNELS_BWD = 60
# The flex dispatcher with the HybridEP backend (TrainingSpec.moe_flex_backend) is charged what was counted for it
# (above) instead of the estimate: ~10 launches forward and ~10 backward after its one host wait, plus Transformer
# Engine GroupedLinear's per-expert host work that launches no kernel, ~7.0 / ~7.6 us per call forward / backward,
# fc1 and fc2 per local expert and layer (benchmarks/host_op_costs.py's CPU costs: PyTorch eager dispatch only, x86,
# so a lower bound). DeepEP and the alltoall dispatcher keep the estimate (DeepEP's dispatch waits on the host up to
# three times, _DeepepManager above), and so does the batch-level EP overlap's merged step, whose own host work is not
# counted.
HYBRIDEP_HOST_KERNELS = {"fwd": 10, "bwd": 10}
GROUPED_LINEAR_HOST_PER_EXPERT_S = {"fwd": 2 * 7.0e-6, "bwd": 2 * 7.6e-6}
# Transformer Engine's GroupedLinear runs one cuBLAS GEMM per local expert (general_grouped_gemm loops over the
# groups on the host): fc1 and fc2 forward (2 per expert), their data and weight gradients backward (4).
HOST_KERNELS_PER_EXPERT_FWD = 2
HOST_KERNELS_PER_EXPERT_BWD = 4
# MaxText's dense_matmul backward (maxtext@14b5876e / 449b4fe layers/moe.py generate_masks: dispatch_mask =
# combine_mask.astype(bool)): the dispatch mask is a boolean cast, with no gradient, so the dispatch einsum's backward
# is one GEMM (the inputs' gradient); the combine einsum's is two (the expert outputs' gradient and the combine mask's,
# which carries the routing weights' gradient): 3 GEMMs of the size of the forward's 2. XLA's compiled FLOPs of a
# replica of the layer (jax 0.10.2, CPU cost_analysis, B 2, S 256, h 128, E 8, top-2, cf 1.25) put the backward at
# 3 einsums + 2 x the experts + 2 x the router within the elementwise work (776.8 MFLOP vs 757.1 counted; 4 einsums
# would be 841.0): tests/costmodel/test_moe_layer.py test_maxtext_dispatch_backward_is_one_gemm_in_xla.
EINSUM_DISPATCH_GEMMS = {"fwd": 2, "bwd": 3}
# FP8 expert GEMMs quantize their bf16 inputs per expert: fc1's and fc2's inputs forward, their output gradients
# backward (weights are cast once per step, on the first micro-batch). TE's multi-tensor quantize fuses the experts
# into one kernel only for delayed scaling; every other recipe quantizes each expert's tensor on its own
# (TransformerEngine pytorch/csrc/extensions/cast.cpp multi_tensor_quantize_impl: "only have fused kernel for FP8
# delayed scaling"): current (per-tensor) scaling launches an amax kernel, a scale kernel and the cast
# (quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl: nvte_compute_amax, nvte_compute_scale_from_amax,
# nvte_quantize_v2), block scalings (MXFP8, 1x128 / 128x128) one kernel (Float8BlockQuantizer / MXFP8Quantizer).
FP8_QUANTIZED_TENSORS_PER_EXPERT = {"fwd": 2, "bwd": 2}
FP8_QUANTIZE_KERNELS_PER_TENSOR = {"tensorwise": 3, "mxfp8": 1, "blockwise": 1, "delayed": 0}


def dispatcher(ctx: Context) -> str:
    """The MoE token dispatcher (TrainingSpec.dispatcher: the training's, else the stack's)."""
    return ctx.train.dispatcher


def has_host_sync(ctx: Context) -> bool:
    """A dropless dispatcher in a stack with dynamic shapes waits for the token counts on the host (the flex
    dispatcher too: DeepEP's normal dispatch returns the per-expert counts to the host, README
    `num_recv_tokens_per_expert_list`); padding to capacity makes the sizes static (no sync). Under a full-iteration
    CUDA graph (TrainingSpec.cuda_graph_full_iteration) nothing is read on the host and nothing launched from it
    inside the step: the graph is captured with static shapes (HybridEP's per-rank token budget and the paged stash,
    megatron-core 0.19.2 transformer_config.py moe_expert_rank_capacity_factor / moe_paged_stash) and replayed as one
    launch, so the layer's host-launch terms (host_launch_s) are not charged."""
    if ctx.train.cuda_graph_full_iteration:
        return False
    return ctx.stack.moe_dispatch_host_sync and ctx.train.moe_capacity_factor is None


def merged_fwd_bwd(ctx: Context, shape: Shape) -> bool:
    """Megatron's batch-level EP all-to-all overlap (TrainingSpec.moe_a2a_overlap) runs one micro-batch's forward
    merged with another's backward: with expert parallelism and more than one micro-batch per step."""
    return ctx.train.moe_a2a_overlap and shape.nmb > 1 and shape.plan.ep > 1


def permute_mode(ctx: Context) -> str:
    """How tokens reach their experts' buffers: the flex dispatcher's way (Stack.moe_flex_permute: inside HybridEP's
    dispatch, or a fused permute after DeepEP's), by one-hot einsums over capacity buffers (Stack.moe_capacity_einsum,
    capacity-padded), else the stack's permute."""
    if dispatcher(ctx) == "flex":
        return ctx.stack.moe_flex_permute
    if ctx.stack.moe_capacity_einsum and ctx.train.moe_capacity_factor is not None:
        return "einsum"
    return ctx.stack.moe_permute


class MoEForward(NamedTuple):
    """Seconds of one MoE layer's own forward parts for one micro-batch on one device; `host_fwd` / `host_bwd`
    are the host-launch time the GPU waits for (forward after the dispatcher's sync, and backward)."""

    router: float
    permute: float
    experts: float
    host_fwd: float
    host_bwd: float


NO_MOE = MoEForward(0.0, 0.0, 0.0, 0.0, 0.0)


def round_robin_routing(ctx: Context) -> bool:
    """A force-balanced run whose stack's gate routes round robin (Stack.moe_forced_routing): token i goes to experts
    (i x top_k + j) mod E, j < top_k (NVIDIA-NeMo/Automodel@8d9bfb9 components/moe/layers.py FakeBalancedGate.forward;
    torchtitan 0.3.0 models/common/moe.py _debug_force_load_balance_routing)."""
    return ctx.train.moe_force_balanced and ctx.stack.moe_forced_routing != "random_scores"


def router_skipped(ctx: Context) -> bool:
    """The forced gate runs no router at all: AutoModel's FakeBalancedGate builds its weights and indices with
    torch.ones and torch.arange (Stack.moe_forced_routing "round_robin"); torchtitan's scores first."""
    return ctx.train.moe_force_balanced and ctx.stack.moe_forced_routing == "round_robin"


def stated_load(ctx: Context, ep: int) -> float | None:
    """The busiest EP rank's routed load the training fixes: the capacity factor (every expert's input padded to it,
    TrainingSpec.moe_capacity_factor), else a learned router's measured load where EP > 1
    (TrainingSpec.moe_load_imbalance; at EP 1 a device's routed copies are its own tokens': balanced by construction),
    else None."""
    if ctx.train.moe_capacity_factor:
        return ctx.train.moe_capacity_factor
    if ctx.train.moe_load_imbalance is not None:
        return ctx.train.moe_load_imbalance if ep > 1 else 1.0
    return None


def expert_load(ctx: Context, shape: Shape) -> float:
    """Tokens the busiest EP rank processes relative to the balanced load: the load the training states (stated_load:
    the capacity factor, a learned router's measured load). Round-robin forced routing: exactly balanced (1). Dropless
    otherwise: the sampling imbalance of a balanced router (Megatron's --moe-router-force-load-balancing routes on
    random logits, so its benchmarks route uniformly at random): the n = tokens x top_k assignments of the EP group
    land on ep ranks as a multinomial, the busiest rank expects mean + sd x sqrt(2 ln ep) (the normal approximation of
    the maximum of ep loads), i.e. 1 + sqrt(2 ln ep x (ep - 1) / n). A learned router's skew beyond this is charged
    only where stated (ep_warnings gives what NVIDIA measured, expert.LEARNED_ROUTER_LOAD)."""
    stated = stated_load(ctx, shape.plan.ep)
    if stated is not None:
        return stated
    if shape.plan.ep <= 1 or round_robin_routing(ctx):
        return 1.0
    ep = shape.plan.ep
    n = shape.tokens / shape.plan.tp * ep * ctx.model.require_moe().top_k
    return 1.0 + math.sqrt(2.0 * math.log(ep) * (ep - 1) / max(1.0, n))


STATED_LOAD = formula(
    "moe.stated_load",
    "routed token copies on the busiest EP rank / the balanced share: the capacity factor (inputs padded to it), "
    "else a learned router's measured load (--moe-load-imbalance) at EP > 1; multiplies the routed experts' GEMMs, "
    "their activations, the permutation and the dispatch / combine all-to-alls",
    "GShard (Lepikhin et al. 2020, arXiv 2006.16668) sec. 2.2; NVIDIA Megatron-MoE-ModelZoo Qwen3-235B-A22B long "
    "context table (expert.LEARNED_ROUTER_LOAD)",
)


def stated_load_terms(ctx: Context, shape: Shape) -> tuple[Term, ...]:
    """The STATED_LOAD term where the training states a load (the trace of every other plan stays as it was)."""
    load = stated_load(ctx, shape.plan.ep) if ctx.model.is_moe else None
    if load is None:
        return ()
    source = "capacity factor" if ctx.train.moe_capacity_factor else "learned router (measured)"
    return (STATED_LOAD.term("expert_load", load, "", source=source, ep=shape.plan.ep),)


def groups_per_token(ctx: Context, group_experts: int) -> float:
    """Expected number of distinct groups of `group_experts` consecutive experts (an EP rank's, a node's) among one
    token's top_k experts. Round-robin forced routing (round_robin_routing): token i's experts are the top_k
    consecutive ids from i x top_k mod E, so the count is averaged over those starts. Otherwise uniform routing: G
    groups each missed with probability (1 - 1/G)^top_k (drawn with replacement, as the node-limited dispatch has
    always counted it), at least one."""
    e = ctx.model.require_moe()
    n, k = e.num_experts, e.top_k
    g = max(1, min(group_experts, n))
    if round_robin_routing(ctx):
        starts = range(0, n * k // math.gcd(n, k), k)  # i x top_k mod E repeats after E / gcd(E, top_k) tokens
        return sum(len({((s + j) % n) // g for j in range(k)}) for s in starts) / len(starts)
    groups = max(1, n // g)
    return max(1.0, groups * (1.0 - (1.0 - 1.0 / groups) ** k)) if groups > 1 else 1.0


def tokens_per_local_expert(ctx: Context, shape: Shape) -> float:
    """Rows of one local expert's GEMM: the device's tokens x top_k spread over the experts, gathered from the ep
    ranks (and the etp ranks sharing an expert shard), at the routing load."""
    p, e = shape.plan, ctx.model.require_moe()
    return shape.tokens / p.tp * p.ep * e.top_k / e.num_experts * max(1, p.etp) * expert_load(ctx, shape)


def router_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """Router GEMM h -> experts over the device's tokens, then the score function (softmax / sigmoid, top-k,
    group-limited top-k) as memory-bound passes over the fp32 logits."""
    if router_skipped(ctx):
        return 0.0
    m, tp, tokens = ctx.model, shape.plan.tp, shape.tokens
    e = m.require_moe()
    gemm = tokens * k.flops.router / tp / (ctx.peak * ctx.gemm_eff(tokens / tp, m.hidden_size, e.num_experts))
    fused = ctx.stack.moe_router_fused
    passes = ROUTER_SCORE_PASSES[fused] + (GROUP_LIMITED_EXTRA_PASSES[fused] if e.route_topk_groups else 0)
    return gemm + tokens / tp * e.num_experts * ROUTER_LOGIT_BYTES * passes / ctx.hbm_bw


def permute_s(ctx: Context, shape: Shape, mode: str) -> float:
    """Token permute before the dispatcher and unpermute after the combine: top_k (x load) copies of each of the
    device's tokens (all of the TP group's where Stack.moe_permute_tp_replicated) read and written at HBM bandwidth,
    or at the row-gather rate for row gathers by index (row_gather_bw), PERMUTE_PASSES[mode] times, plus the alltoall
    dispatcher's sort of the received copies by local expert and back (local_expert_sort_passes); or the dispatch and
    combine einsums over capacity buffers (einsum_dispatch_s)."""
    if mode == "einsum":
        return einsum_dispatch_s(ctx, shape)
    m = ctx.model
    # each TP rank's share of the tokens, or all of them where the TP ranks hold the same tokens
    tp = 1 if ctx.stack.moe_permute_tp_replicated else shape.plan.tp
    copies = shape.tokens / tp * m.require_moe().top_k * expert_load(ctx, shape)
    # the sort runs on the tokens after the expert-TP all-gather: etp times the copies sent (expert.etp_gather_s)
    passes = PERMUTE_PASSES[mode] + local_expert_sort_passes(ctx, shape) * max(1, shape.plan.etp)
    return copies * m.hidden_size * ACT_ELEM_BYTES * passes / (row_gather_bw(ctx) if mode == "gather" else ctx.hbm_bw)


# The TPU generation calibration.TPU_ROW_GATHER_REL was fitted on (maxtext issue #1256 ran on a v5p-64); on another,
# the rate is that fraction of its own HBM bandwidth, which no published run measures (expert.ep_warnings says so).
ROW_GATHER_FITTED_HARDWARE = "tpu-v5p"


def row_gather_extrapolated(ctx: Context) -> bool:
    """Whether the permutation's row gathers are priced on a TPU generation the rate was not fitted on."""
    hw = ctx.cluster.hardware
    return permute_mode(ctx) == "gather" and hw.is_tpu and hw.id != ROW_GATHER_FITTED_HARDWARE


def row_gather_bw(ctx: Context) -> float:
    """Bytes per second a row gather by index moves (the "gather" permute): on a TPU calibration.TPU_ROW_GATHER_REL of
    its HBM bandwidth (XLA runs it on the vector units, element by element); elsewhere the HBM bandwidth (XLA's GPU
    gather is a memory-bound kernel; not measured here)."""
    return ctx.hbm_bw * (ctx.calibration.TPU_ROW_GATHER_REL if ctx.cluster.hardware.is_tpu else 1.0)


def local_expert_sort_passes(ctx: Context, shape: Shape) -> int:
    """Passes of the alltoall dispatcher's second permutation (LOCAL_EXPERT_SORT_PASSES) where the stack runs it
    (Stack.moe_alltoall_sorts_by_local_expert) and the EP rank holds more than one expert (without EP too: the
    dispatcher sorts whenever num_local_experts > 1); a balanced all-to-all receives as many copies as it sends."""
    if dispatcher(ctx) != "alltoall" or not ctx.stack.moe_alltoall_sorts_by_local_expert \
            or local_experts(ctx, shape) <= 1:
        return 0
    return LOCAL_EXPERT_SORT_PASSES


def einsum_dispatch_bwd_s(permute_fwd_s: float, mode: str) -> float:
    """Backward seconds of MaxText's dispatch and combine einsums (mode "einsum"): EINSUM_DISPATCH_GEMMS' 3 GEMMs for
    the forward's 2; 0 for the memory-bound permute passes (backward with the elementwise work, compute.layer)."""
    if mode != "einsum":
        return 0.0
    return permute_fwd_s * EINSUM_DISPATCH_GEMMS["bwd"] / EINSUM_DISPATCH_GEMMS["fwd"]


def einsum_dispatch_s(ctx: Context, shape: Shape) -> float:
    """MaxText's dense_matmul dispatch and combine (layers/moe.py: "BNSM,BNSEC -> EBNCM" and "EBNCM,BNSEC -> BNSM"):
    each sequence's S tokens against one-hot masks of E experts x C capacity slots, C = max(ceil(S top_k / E) x cf,
    cf) (generate_masks), two GEMMs of 2 S E C h FLOPs per sequence, i.e. 2 E C h per token each."""
    m, p = ctx.model, shape.plan
    e = m.require_moe()
    cf = ctx.train.moe_capacity_factor or 1.0
    seq = ctx.train.seq_len / p.cp  # one batch row of the einsum: a sequence (its CP shard)
    cap = int(max(math.ceil(seq * e.top_k / e.num_experts) * cf, cf))
    flops = 2 * (2.0 * shape.tokens / p.tp * e.num_experts * cap * m.hidden_size)
    return flops / (ctx.peak * ctx.gemm_eff(e.num_experts * cap, m.hidden_size, seq))


def experts_s(ctx: Context, shape: Shape, k: LayerKind) -> float:
    """Routed experts as grouped GEMMs: FLOPs at the efficiency of one expert's GEMM (rows = tokens per local
    expert, h, expert width / etp: planner.costmodel.base.Context.gemm_eff, whose d / (d + GEMM_DIM_HALF) is the
    tile-quantisation loss of a short expert), times the grouped kernel's efficiency relative to a dense GEMM of
    that shape (grouped_gemm_rel; DeepGEMM's published H800 tables put it at ~1) when a device holds more than one
    expert, and the tiles a kernel that shares row tiles between experts computes twice
    (grouped_tile_visits_rel)."""
    m, p, tokens = ctx.model, shape.plan, shape.tokens
    e = m.require_moe()
    rows = tokens_per_local_expert(ctx, shape)
    # one local expert is one plain GEMM (a group of one): no grouped-kernel loss (expert.ep_warnings says what the
    # published runs with one per device show)
    batched = batched_experts(ctx)
    grouped = grouped_gemm_rel(ctx) if local_experts(ctx, shape) > 1 and not batched else 1.0
    eff = ctx.gemm_eff(rows, m.hidden_size, e.expert_ffn_hidden_size / max(1, p.etp)) * grouped
    return (expert_load(ctx, shape) * tokens * k.flops.experts / p.tp / (ctx.peak * eff)
            * grouped_tile_visits_rel(ctx, shape))


def grouped_gemm_rel(ctx: Context) -> float:
    """The grouped-expert stand-in (calibration.MOE_GROUPED_GEMM_REL_EFFICIENCY) where the kernels it stands for run:
    GPUs, whose published MoE runs it was fitted on (per-expert cuBLAS / Transformer Engine GEMMs). 1 on a TPU, where
    MaxText's megablox kernel runs near a dense GEMM's rate once its revisited row tiles (grouped_tile_visits_rel) and
    the permutation's row gathers (row_gather_bw) are priced: at the stand-in's 0.5 the coarse Mixtral of maxtext issue
    #1256 could not reach its published 50.4% MFU (0.5 x the v5p ceiling 0.848 is 42% before any recompute)."""
    return 1.0 if ctx.cluster.hardware.is_tpu else ctx.calibration.MOE_GROUPED_GEMM_REL_EFFICIENCY


def batched_experts(ctx: Context) -> bool:
    """Capacity-padded experts in a stack that runs them as one kernel: equal-sized groups, one batched GEMM (MaxText's
    dense_matmul einsum "EBNCM,EMH -> EBNCH" over the capacity buffers, MaxText layers/moe.py; DeepSpeed-MoE's einsum
    over local experts), which carries no grouped-kernel loss (experts_s)."""
    return ctx.train.moe_capacity_factor is not None and not ctx.stack.moe_gemm_per_expert


# A grouped-GEMM kernel that walks the rows sorted by expert in m-tiles (megablox's gmm, and its backward's gmm and
# tgmm, which MaxText's dropless experts run) computes a tile once for every group with rows in it: a group starting
# mid-tile revisits that tile, "tiles_m <= group_tiles.sum() <= tiles_m + num_groups - 1" (make_group_metadata, MaxText
# src/MaxText/kernels/megablox/backend.py at 3eb77db and MaxText/kernels/megablox/gmm.py at 9ca35d7, from JAX's
# pallas megablox). A router's group sizes are not multiples of the tile, so every group but the first starts
# mid-tile: the upper bound.
GROUPED_TILE_VISITS = formula(
    "moe.grouped_tile_visits",
    "(ceil(rows / tile) + local experts - 1) / ceil(rows / tile): rows = the device's routed token copies (tokens per "
    "local expert x local experts), tile = min(Stack.moe_grouped_row_tile, rows); multiplies the routed experts' "
    "forward and backward GEMM time; 1 without such a kernel, with one local expert, or capacity-padded",
    "JAX pallas megablox make_group_metadata (MaxText src/MaxText/kernels/megablox/backend.py at 3eb77db: forward "
    "gmm, backward gmm + tgmm); MaxText base.yml tile_batch_seq 512",
)


def _grouped_tiles(ctx: Context, shape: Shape) -> tuple[int, float, int] | None:
    """(row tile, rows, local experts) of a dropless grouped kernel with shared row tiles running several local
    experts, else None."""
    tile, groups = ctx.stack.moe_grouped_row_tile, local_experts(ctx, shape)
    if tile is None or groups <= 1 or ctx.train.moe_capacity_factor is not None:
        return None
    return tile, tokens_per_local_expert(ctx, shape) * groups, groups


def grouped_tile_visits_rel(ctx: Context, shape: Shape) -> float:
    """The tiles a dropless grouped kernel with shared row tiles computes over the tiles its rows fill
    (GROUPED_TILE_VISITS)."""
    kernel = _grouped_tiles(ctx, shape)
    return 1.0 if kernel is None else _tile_visits(*kernel)


def _tile_visits(tile: int, rows: float, groups: int) -> float:
    tiles = math.ceil(rows / min(tile, rows))
    return (tiles + groups - 1) / tiles


def grouped_tile_terms(ctx: Context, shape: Shape) -> tuple[Term, ...]:
    """The GROUPED_TILE_VISITS term where such a kernel runs (the trace of every other plan stays as it was)."""
    kernel = _grouped_tiles(ctx, shape) if ctx.model.is_moe else None
    if kernel is None:
        return ()
    tile, rows, groups = kernel
    return (GROUPED_TILE_VISITS.term("grouped_tile_visits_rel", _tile_visits(tile, rows, groups), "",
                                     tile_rows=tile, local_experts=groups, rows=rows),)


def local_experts(ctx: Context, shape: Shape) -> int:
    """Routed experts held by one device: num_experts / ep (each split etp ways, still one GEMM each)."""
    return max(1, ctx.model.require_moe().num_experts // max(1, shape.plan.ep))


def fp8_quantize_kernels_per_expert(ctx: Context, backward: bool) -> int:
    """Quantize kernels one local expert's FP8 GEMMs launch in the forward or the backward (0 in bf16); an FP8 run
    without a stated recipe runs Megatron's tensorwise (TrainingSpec.fp8_recipe)."""
    if ctx.train.dtype != "fp8":
        return 0
    per_tensor = FP8_QUANTIZE_KERNELS_PER_TENSOR[ctx.train.fp8_recipe_run]
    return per_tensor * FP8_QUANTIZED_TENSORS_PER_EXPERT["bwd" if backward else "fwd"]


def host_launch_s(ctx: Context, shape: Shape, backward: bool) -> tuple[float, float]:
    """Host time to launch one MoE layer's kernels (forward after the sync, or backward), as (the dispatcher's
    and permutation kernels, the local experts' GEMMs with their casts), each kernel costing
    calibration.HOST_LAUNCH_S of host time."""
    per_expert = (HOST_KERNELS_PER_EXPERT_BWD if backward else HOST_KERNELS_PER_EXPERT_FWD) \
        + fp8_quantize_kernels_per_expert(ctx, backward)
    n_local = local_experts(ctx, shape) if ctx.stack.moe_gemm_per_expert else 1
    launch = ctx.calibration.HOST_LAUNCH_S
    if dispatcher(ctx) == "flex" and ctx.train.flex_backend == "hybridep" and not merged_fwd_bwd(ctx, shape):
        step = "bwd" if backward else "fwd"  # counted (HYBRIDEP_HOST_KERNELS)
        return (HYBRIDEP_HOST_KERNELS[step] * launch,
                n_local * (per_expert * launch + GROUPED_LINEAR_HOST_PER_EXPERT_S[step]))
    base = HOST_KERNELS_BWD if backward else HOST_KERNELS_FWD
    return base * launch, per_expert * n_local * launch


def moe_forward(ctx: Context, shape: Shape, k: LayerKind, dispatch_fwd_s: float, has_sync: bool,
                permute_mode: str) -> MoEForward:
    """The MoE terms of one layer. With a dispatcher that copies token counts to the host (has_sync) the GPU queue
    is empty after the sync, so the rest of the layer runs kernel group by kernel group at the slower of the GPU
    and of the host launching it (exposed: host launch time beyond the GPU time of the same group). The backward
    reuses the forward's counts, but the queue the forward drained gives the host no lead, so the same holds.
    Without a sync the host runs ahead of the GPU and is not charged (the 25.09 capacity-padded Megatron-Bridge rows
    still run 4-34% slower than predicted, most on B200, those whose recipes replay each layer as a CUDA graph among
    the slowest: the notes of their rows in runs/known_runs_added.yaml and runs/moe_runs_added.yaml). The host launch
    time is not a floor there: charged as one (max of host and GPU time per layer, these kernel counts at
    calibration.HOST_LAUNCH_S), the 25.09 B200 Qwen3-30B-A3B row, whose recipe replays each layer as a CUDA graph,
    would be predicted 3x its step and the B200 Qwen3-235B-A22B current-scaling row +53%."""
    if not k.moe:
        return NO_MOE
    router, permute, experts = router_s(ctx, shape, k), permute_s(ctx, shape, permute_mode), experts_s(ctx, shape, k)
    host_f = host_b = 0.0
    if has_sync and merged_fwd_bwd(ctx, shape):
        # Megatron's batch-level EP overlap merges one micro-batch's forward with another's backward layer by
        # layer. The layer's host launches are charged on top of its GPU time: an empirical rule, not a traced
        # mechanism. Megatron's own order does not drain the queue at the sync (megatron-core
        # model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run: the backward micro-batch's MLP is queued
        # on the compute stream before the forward's dispatch waits for its router's counts, token_dispatcher.py
        # _maybe_dtoh_and_synchronize / DeepEP's host wait), so the merged layer should run at the slower of its
        # GPU time and the host launching both micro-batches' kernels; those outside the MoE block (attention,
        # norms, autograd) are not counted here, and host + GPU stands in for that bound. Rows priced so:
        # the 12 Megatron-Bridge rows miss by 1-23% (median 7%); with max(host, GPU) of these counts instead the H100
        # Qwen3-235B-A22B FP8 rows fall to -35..-40%. Against it: the two Megatron-MoE-ModelZoo BF16 DeepEP rows
        # (runs/modelzoo_runs_added.yaml) +25% / +44%, -10% / +3% under max(host, GPU) (2026-11-27), and its MXFP8
        # HybridEP GB300 row +49%, about -17% under max(host, GPU) from its layer's terms, and GB200 4k row (its expert
        # tensors offloaded) +20%, about 0% so (2026-11-29; the rule's figures:
        # tests/analysis/test_merged_host_rule.py).
        (base_f, exp_f), (base_b, exp_b) = host_launch_s(ctx, shape, False), host_launch_s(ctx, shape, True)
        return MoEForward(router, permute, experts, base_f + exp_f, base_b + exp_b)
    if has_sync:
        # each group of kernels runs at the slower of its GPU time and of the host launching it
        (base_f, exp_f), (base_b, exp_b) = host_launch_s(ctx, shape, False), host_launch_s(ctx, shape, True)
        host_f = max(0.0, base_f - permute - dispatch_fwd_s) + max(0.0, exp_f - experts)
        # the backward's permute passes and expert GEMMs run twice the forward's work; its dispatch (the combine's
        # transpose) is one all-to-all, charged once (layers.stage_times): the host hides under that GPU time only
        host_b = max(0.0, base_b - 2.0 * permute - dispatch_fwd_s) + max(0.0, exp_b - 2.0 * experts)
    return MoEForward(router, permute, experts, host_f, host_b)


# DeepEP (V1) normal-kernel buffers, allocated once per EP group and held for the run (deepseek-ai/DeepEP
# csrc/config.hpp Config::get_nvl_buffer_size_hint / get_rdma_buffer_size_hint; deep_ep/buffer.py: Buffer.num_sms 20,
# get_dispatch_config / get_combine_config: 256 NVLink and 128 RDMA receive tokens per channel at EP 8-64): per channel
# (num_sms / 2) and peer, a ring of receive tokens of hidden bytes + top-k indices and weights (kNumMaxTopK 128 x
# 8 + 4 B) + scales (kNumMaxScales 128 x 4 B).
DEEPEP_CHANNELS = 10
DEEPEP_NVL_RECV_TOKENS = 256
DEEPEP_RDMA_RECV_TOKENS = 128
DEEPEP_TOKEN_META_BYTES = 128 * (8 + 4) + 128 * 4


def dispatcher_buffer_bytes(ctx: Context, shape: Shape) -> float:
    """Bytes of the MoE dispatcher's persistent communication buffers on one device: DeepEP's NVLink ring (peers in
    the NVLink domain, at most 8) and, when the EP group spans domains, its RDMA ring (one per remote domain); the
    NCCL dispatchers allocate their outputs per call (counted with the activations)."""
    p = shape.plan
    if p.ep <= 1:
        return 0.0
    key = ("dispatcher_buffer_bytes",) + shape.time_key  # once per plan shape, not once per stage
    v = ctx.layer_time_cache.get(key)
    if v is None:
        v = ctx.layer_time_cache[key] = _dispatcher_buffer_bytes(ctx, shape)
    return v


def _dispatcher_buffer_bytes(ctx: Context, shape: Shape) -> float:
    p = shape.plan
    if not ctx.model.is_moe or dispatcher(ctx) != "flex":
        return 0.0
    per_token = ctx.model.hidden_size * ACT_ELEM_BYTES + DEEPEP_TOKEN_META_BYTES
    link = shape.links.ep
    nvl_peers = min(p.ep, max(1, link.ranks_per_domain), 8)
    out = DEEPEP_CHANNELS * nvl_peers * DEEPEP_NVL_RECV_TOKENS * per_token
    if link.crosses_domain:
        rdma_peers = max(1, p.ep // max(1, link.ranks_per_domain))
        out += DEEPEP_CHANNELS * rdma_peers * DEEPEP_RDMA_RECV_TOKENS * per_token * 2  # send + receive rings
    return out
