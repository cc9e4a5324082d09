"""What every cost module shares: the plan-independent `Context` (model, cluster, training, layer kinds,
rates; computed once per search) and the per-plan `Shape` (tokens per micro-batch, micro-batch count,
the fabric each parallel group runs on)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple

from planner.costmodel.calibration import DEFAULT_CALIBRATION, Calibration
from planner.costmodel.capacity import inner_margin_rel, memory_margin_rel, usable_capacity_gib
from planner.costmodel.collectives import Link, span_link
from planner.costmodel.flops import (
    LayerFlops,
    attn_core_flops_per_token,
    is_local_layer,
    layer_flops,
    model_flops_per_token,
    noncausal_model_flops_per_token,
    qk_v_head_dims,
)
from planner.costmodel.params import LayerParams, count_params, layer_params
from planner.costmodel.partition import stage_layer_counts
from planner.costmodel.placement import placement
from planner.costmodel.trace import Term, formula
from planner.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec
from planner.specs.dims import ParallelDims
from planner.stacks import DEFAULT_FRAMEWORK, stack_of

# Bytes per activation element as the layers exchange and save them (bf16), Korthikanti et al. 2022 sec. 4.1.
ACT_ELEM_BYTES = 2.0
# Bytes per parameter element of the bf16 copies ZeRO-3/FSDP gathers (mixed precision, ZeRO paper sec. 3.1).
PARAM_GATHER_BYTES = 2.0
# PCIe Gen4 x16 per direction (hardware.yaml links.pcie_x16_unidir_GBps.gen4, STAS PCIe table): the host link
# assumed for host traffic (optimizer and activation offload) when a hardware profile states none (the slowest x16
# rate the reference lists).
UNKNOWN_HOST_LINK_GBPS = 31.0

PEAK = formula("rates.peak", "dense tensor-core peak of the compute dtype (attention core: BF16)",
               "hardware profile peak_tflops (vendor datasheet, hardware_profiles/*.yaml)")
GEMM_CEILING = formula(
    "rates.gemm_ceiling",
    "measured MAMF ceiling (FP8: fp8 ceiling x FP8_DERATE, x MXFP8_REL_EFFICIENCY for MXFP8) x GEMM_SHAPE_DERATE "
    "(x PYTORCH_NATIVE_HOPPER_EFFICIENCY for "
    "FSDP stacks on Hopper+); a GEMM of smallest dimension d reaches ceiling x d / (d + GEMM_DIM_HALF)",
    "hardware profile measured_gemm (MAMF); calibration.py (fitted on the dev runs)",
)
ATTN_EFFICIENCY = formula(
    "rates.attention_efficiency",
    "MAMF ceiling x GEMM_SHAPE_DERATE x ATTN_REL_EFFICIENCY (x the head-dimension factor of cuDNN's fused attention "
    "below head dim 128, base.attention_head_dim_rel); FSDP stacks on Hopper+: min(that, FA2_HOPPER_ABS_EFFICIENCY) x "
    "PYTORCH_NATIVE_HOPPER_EFFICIENCY. FP8 attention (TrainingSpec.fp8_attention): on the FP8 peak, x "
    "FP8_ATTN_REL_EFFICIENCY (MXFP8_ATTN_REL_EFFICIENCY under the mxfp8 recipe) at head width 320, its _HD128 "
    "value at 256, linear between",
    "FlashAttention-2, Dao 2023, arXiv 2307.08691, sec. 4.1; FlashAttention-3, Shah et al. 2024, arXiv 2407.08608, "
    "sec. 1 and Fig. 5-6 (cuDNN per head dim); FP8 vs BF16: cudnn-frontend sdpa_benchmark_training dsv3 GB300 "
    "and llama3.1 GB300 results; calibration.py",
)
# cuDNN's fused attention reaches less of the peak per FLOP at head dimension 64 than at 128 (the softmax's exponentials
# and the tile loads are per score, the matmul FLOPs per score scale with the head dimension): FlashAttention-3 paper
# (Shah et al. 2024, arXiv 2407.08608) Fig. 5-6, H100 BF16, cuDNN bars, head dim 64 / 128: causal forward 363 / 518
# TFLOPS at 4k and 379 / 529 at 8k, backward 417 / 499 at 4k and 432 / 518 at 8k. Weighted as the cost model times the
# attention core (backward 2.5x the forward's FLOPs, compute.BWD_ATTN_RATIO): (1/518 + 2.5/499) / (1/363 + 2.5/417) =
# 0.793 at 4k, 0.797 at 8k. Linear between 64 and 128, held below 64 (not measured) and 1 from 128 (head dim 256, lower
# again for cuDNN's forward in the same figure, is not modelled).
CUDNN_ATTN_HEAD_DIM_REL = {64: 0.795, 128: 1.0}


# The head widths (q/k + v head dimensions) at which cuDNN's FP8 attention was measured against its BF16 one
# (calibration.FP8_ATTN_REL_EFFICIENCY*): Llama 3.1's 128 + 128 and DeepSeek-V3's 192 + 128. FP8 gains more where each
# score carries more matmul work; linear between the two, held outside them (no narrower or wider head measured).
FP8_ATTN_HEAD_WIDTHS = (256, 320)


def fp8_attention_rel(model: ModelSpec, train: TrainingSpec, cal: Calibration) -> float:
    """Efficiency of the FP8 attention core on the FP8 peak relative to BF16 attention's on the BF16 peak
    (TrainingSpec.fp8_attention) at the model's head width (FP8_ATTN_HEAD_WIDTHS): the MXFP8_ATTN_REL_EFFICIENCY pair
    under the mxfp8 recipe (Transformer Engine quantizes the attention MXFP8 then), the FP8_ATTN_REL_EFFICIENCY pair
    under the per-tensor ones."""
    mx = train.fp8_recipe == "mxfp8"
    narrow = cal.MXFP8_ATTN_REL_EFFICIENCY_HD128 if mx else cal.FP8_ATTN_REL_EFFICIENCY_HD128
    wide = cal.MXFP8_ATTN_REL_EFFICIENCY if mx else cal.FP8_ATTN_REL_EFFICIENCY
    lo, hi = FP8_ATTN_HEAD_WIDTHS
    width = sum(qk_v_head_dims(model))
    return narrow + (wide - narrow) * (min(max(width, lo), hi) - lo) / (hi - lo)


def attention_head_dim_rel(model: ModelSpec) -> float:
    """Efficiency of cuDNN's fused attention at the model's query-key head dimension relative to head dim 128
    (CUDNN_ATTN_HEAD_DIM_REL)."""
    lo, hi = CUDNN_ATTN_HEAD_DIM_REL[64], CUDNN_ATTN_HEAD_DIM_REL[128]
    d = model.head_dim if model.mla is None else model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
    return lo + (hi - lo) * (min(max(d, 64), 128) - 64) / 64


# A fused attention kernel (FlashAttention-2, arXiv 2307.08691, Algorithm 1 and sec. 3.3) walks each tile of queries
# over the tiles of keys it may see: a causal layer's query tile i visits i + 1 key tiles, a sliding window of w tokens
# about w / tile + 1 (a query tile's band spans w + tile keys), an attention chunk the causal tiles of its chunk; each
# query tile also pays a fixed cost (loading it, the softmax's final rescale, writing its output and log-sum-exp)
# worth calibration.ATTN_Q_TILE_OVERHEAD_TILES key tiles. The cost model's FLOPs count only the keys attended
# (flops.attended_keys), so a narrow window, which visits twice the tiles it uses and pays the query tile's fixed cost
# over one key tile instead of a sequence of them, runs far below the causal layer's efficiency.
FUSED_ATTN_TILE_TOKENS = 128
ATTN_TILE_REL = formula(
    "rates.local_attention_tile_rel",
    "efficiency of a local layer's attention core relative to a causal layer's at the same sequence length: (useful / "
    "(visited + ATTN_Q_TILE_OVERHEAD_TILES)) over the query tiles of each, in FUSED_ATTN_TILE_TOKENS-token tiles; "
    "under FP8 attention a sliding-window layer's backward costs the causal layer's backward",
    "FlashAttention-2 (arXiv 2307.08691) Algorithm 1; NVIDIA cudnn-frontend sdpa_benchmark_training results (GB200, "
    "cuDNN 9.26: DeepSeek-V3 causal and gpt-oss window-128 rows); calibration.ATTN_Q_TILE_OVERHEAD_TILES",
)


def attention_tile_efficiency(seq_len: int, window: int | None, chunk: int | None, q_tile_overhead: float) -> float:
    """Key tiles used / (key tiles visited + the fixed cost per query tile) over one sequence's query tiles
    (FUSED_ATTN_TILE_TOKENS): causal, through a sliding window of `window` tokens, or inside attention chunks."""
    tile = float(FUSED_ATTN_TILE_TOKENS)
    n_tiles = max(1, -(-int(seq_len) // FUSED_ATTN_TILE_TOKENS))
    band = None if window is None or window >= seq_len else window / tile
    per_chunk = None if chunk is None or chunk >= seq_len else max(1, -(-int(chunk) // FUSED_ATTN_TILE_TOKENS))
    used = visited = 0.0
    for i in range(n_tiles):
        j = i % per_chunk if per_chunk else i  # the query tile's index inside its chunk
        if band is None:
            used += j + 0.5
            visited += j + 1.0
        else:
            used += min(j + 0.5, band)
            visited += min(j + 1.0, math.ceil(band) + 1.0)
    return used / (visited + q_tile_overhead * n_tiles)


# The same tiles make a causal layer's efficiency rise with its length: the fixed cost per query tile weighs less
# against the i + 1 key tiles the i-th query tile visits. cuDNN's published causal rates show it: cuDNN 9.19 on one
# H200 (NVIDIA cudnn-frontend benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/
# llama3.1_20260227_034703.csv: 64 query / 8 key-value heads, head dim 128, BF16, top_left mask, default backward)
# runs forward + backward at 397 / 502 / 567 / 603 / 608 TFLOP/s from 2k to 32k tokens (the forward's FLOPs and 2.5x
# them in the backward, over the two times), which is 625 / 646 / 649 / 646 / 630 TFLOP/s once divided by this
# model's causal tile efficiency (0.635 / 0.777 / 0.874 / 0.933 / 0.965 at 4.1 tiles): the tiles account for the
# rise. calibration.ATTN_REL_EFFICIENCY is fitted on the development runs as a causal layer's efficiency at
# ATTN_REL_REFERENCE_SEQ tokens; a stack whose attention core is cuDNN's (Stack.cudnn_attention) scales it by its
# causal tile efficiency at the layer's own length over that one's.
# Under ring context parallelism each rank runs Transformer Engine's load-balanced steps (AttnFuncWithCPAndKVP2P,
# transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py): step 0 its causal "diagonal"
# block of seq / cp tokens, then cp - 1 unmasked blocks of the same work (each half of (seq / cp) squared), every
# ring step waiting for its "lower-triangle" ranks, whose seq / cp queries see seq / 2cp keys.
ATTN_REL_REFERENCE_SEQ = 4096
CAUSAL_TILE_REL = formula(
    "rates.causal_attention_tile_rel",
    "efficiency of a causal layer's fused attention at its length relative to one at ATTN_REL_REFERENCE_SEQ tokens: "
    "attention_tile_efficiency(seq) / attention_tile_efficiency(ATTN_REL_REFERENCE_SEQ); ring CP: cp / (1 / e_diag + "
    "(cp - 1) x (nk + ATTN_Q_TILE_OVERHEAD_TILES) / nk), e_diag the causal efficiency of seq / cp tokens, nk = seq / "
    "(2 cp FUSED_ATTN_TILE_TOKENS) key tiles",
    "FlashAttention-2 (arXiv 2307.08691) Algorithm 1; NVIDIA cudnn-frontend sdpa_benchmark_training results (H200 "
    "cuDNN 9.19 llama3.1 causal rows; GB200 cuDNN 9.26 DeepSeek-V3 causal rows); Transformer Engine "
    "context_parallel.py AttnFuncWithCPAndKVP2P (diagonal / lower-triangle / upper-triangle steps)",
)


def causal_attention_tile_efficiency(seq_len: int, cp: int, ring: bool, q_tile_overhead: float) -> float:
    """Key tiles used / (visited + the fixed cost per query tile) of one rank's causal attention: the whole sequence
    (no CP, or CP that gathers the sequence and splits the heads), else ring CP's diagonal block and cp - 1 unmasked
    steps paced by the lower-triangle rank (CAUSAL_TILE_REL)."""
    if cp <= 1 or not ring:
        return attention_tile_efficiency(seq_len, None, None, q_tile_overhead)
    local = max(1, int(seq_len) // cp)
    diag = attention_tile_efficiency(local, None, None, q_tile_overhead)
    nk = max(1.0, local / (2.0 * FUSED_ATTN_TILE_TOKENS))
    return cp / (1.0 / diag + (cp - 1) * (nk + q_tile_overhead) / nk)


def local_attention_tile_rel(model: ModelSpec, seq_len: int, local: str, q_tile_overhead: float) -> float:
    """The fused kernel's efficiency on a local layer (`local`: "sliding" or "chunked") relative to a causal layer's at
    the same sequence length (ATTN_TILE_REL); 1 for a global layer."""
    if not local:
        return 1.0
    window = model.sliding_window if local == "sliding" else None
    chunk = model.attention_chunk_size if local == "chunked" else None
    return (attention_tile_efficiency(seq_len, window, chunk, q_tile_overhead)
            / attention_tile_efficiency(seq_len, None, None, q_tile_overhead))
TOKENS = formula("shape.tokens", "mbs x seq / cp", "definition (CP splits the sequence)")
MICROBATCHES = formula("shape.microbatches", "gbs / (dp x mbs)", "definition (gradient accumulation steps)")

# (layers, {kind: count} of the first n_full layers, {kind: count} of the rest)
StageSplit = tuple[int, Counter, Counter]


@dataclass(frozen=True)
class LayerKind:
    moe: bool
    local: str  # "" (global attention), "sliding" (window) or "chunked" (Llama 4's attention chunks)
    params: LayerParams
    flops: LayerFlops  # forward, per token, unsharded


class Context:
    """Everything about (model, cluster, training) that does not depend on the plan: computed once
    per search, shared by every candidate."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, train: TrainingSpec,
                 memory_headroom_gib: float | None = None, calibration: Calibration = DEFAULT_CALIBRATION):
        self.model, self.cluster, self.train = model, cluster, train
        # the calibrated constants every cost module reads (planner.costmodel.calibration), with those of a profile
        # written by `plan calibrate` (its `calibration:` block) in place of the development-run values
        self.calibration = calibration.for_hardware(cluster.hardware)
        # --memory-headroom (GiB kept free); None: the default memory margin (planner.costmodel.capacity)
        self.memory_headroom_gib = memory_headroom_gib
        # (usable capacity GiB, memory margin, inner margin) every plan of the search is held to (capacity.py)
        self.memory_limits = (usable_capacity_gib(cluster.hardware.hbm_capacity_gib, memory_headroom_gib,
                                                  train.framework, self.calibration),
                              memory_margin_rel(memory_headroom_gib, self.calibration),
                              inner_margin_rel(memory_headroom_gib, self.calibration))
        self.stack = stack_of(train)  # the stack's cost traits (planner/stacks/)
        kinds: dict[tuple[bool, str], int] = {}
        self.kinds: list[LayerKind] = []  # the distinct layer kinds (dense/MoE x global/sliding/chunked)
        self.kind_of_layer: list[int] = []  # layer index -> kind index
        for i in range(model.num_layers):
            local = ("" if not is_local_layer(model, i) else
                     "chunked" if model.attention_chunk_size is not None else "sliding")
            key = (model.is_moe_layer(i), local)
            if key not in kinds:
                kinds[key] = len(self.kinds)
                self.kinds.append(LayerKind(key[0], key[1], layer_params(model, i),
                                            layer_flops(model, i, train.seq_len)))
            self.kind_of_layer.append(kinds[key])
        self.layer_kinds = [self.kinds[j] for j in self.kind_of_layer]
        self.kind_counts: tuple[tuple[int, int], ...] = tuple(Counter(self.kind_of_layer).items())  # (kind, layers)
        self.params = count_params(model)
        self.model_flops_per_token = model_flops_per_token(model, train.seq_len)
        self.noncausal_model_flops_per_token = noncausal_model_flops_per_token(model, train.seq_len)
        self._rates(cluster, train)
        # caches shared by every candidate of a search (keys hold every input of the cached value)
        self.layer_time_cache: dict[tuple, Any] = {}  # -> planner.costmodel.layers.LayerTimes
        self.layer_term_cache: dict[tuple, tuple[Term, ...]] = {}
        self.act_cache: dict[tuple, float] = {}
        self.split_cache: dict[tuple, list] = {}
        self.links_cache: dict[tuple, Links] = {}  # PLACEMENT_KNOBS -> plan_links
        self.stage_params_cache: dict[tuple, Any] = {}  # -> planner.costmodel.memory.StageParams (evaluate)
        self.time_key_ids: dict[tuple, int] = {}  # every input of a layer's time -> its number (plan_shape)
        self.shape_cache: dict[tuple, tuple] = {}  # SHAPE_KNOBS -> what plan_shape derives from them (_shape_parts)
        self.state_layout_cache: dict[tuple, Any] = {}  # -> planner.costmodel.memory.StateLayout (state_layout)
        self.stage_times_cache: dict[tuple, tuple] = {}  # -> (split, planner.costmodel.layers.StageTimes)
        self.layer_acts_cache: dict[tuple, tuple] = {}  # -> (a stage's split, memory.layer_activations)

    def _rates(self, cluster: ClusterSpec, train: TrainingSpec) -> None:
        """Peak rates and kernel efficiency ceilings of this hardware for this training recipe."""
        hw, cal = cluster.hardware, self.calibration
        self.peak = hw.peak_flops(train.dtype)
        self.peak_bf16 = hw.peak_flops("bf16")
        eff = hw.gemm_efficiency_max
        if train.dtype == "fp8" and hw.peak_tflops.fp8:
            eff = (hw.gemm_efficiency_max_fp8 or eff) * cal.FP8_DERATE
            if train.fp8_recipe == "mxfp8":
                eff *= cal.MXFP8_REL_EFFICIENCY
        self.shape_derate = cal.GEMM_SHAPE_DERATE
        self.attn_rel = cal.ATTN_REL_EFFICIENCY
        # PyTorch-native stacks on NVIDIA parts with FP8 tensor cores (Hopper and later, where kernel generation
        # matters most) reach a fraction of Megatron+TE's efficiency on every tensor-core kernel
        self.fsdp_on_hopper = (self.stack.pytorch_native_kernels and hw.vendor.upper().startswith("NVIDIA")
                               and hw.peak_tflops.fp8 is not None)
        stack = cal.PYTORCH_NATIVE_HOPPER_EFFICIENCY if self.fsdp_on_hopper else 1.0
        self.gemm_eff_max = eff * self.shape_derate * stack
        # the attention core runs in bf16 even in FP8 recipes, unless TrainingSpec.fp8_attention puts it on the FP8
        # peak at fp8_attention_rel of BF16 attention's efficiency (calibration.FP8_ATTN_REL_EFFICIENCY)
        self.fp8_attention = train.fp8_attention and train.dtype == "fp8" and hw.peak_tflops.fp8 is not None
        self.fp8_attn_rel = fp8_attention_rel(self.model, train, cal) if self.fp8_attention else 1.0
        self.attn_peak = self.peak if self.fp8_attention else self.peak_bf16
        # cuDNN fused attention (Stack.cudnn_attention) below head dim 128 (attention_head_dim_rel)
        self.attn_head_dim_rel = attention_head_dim_rel(self.model) if self.stack.cudnn_attention else 1.0
        self.attn_eff = (hw.gemm_efficiency_max * self.shape_derate * self.attn_rel * self.attn_head_dim_rel
                         * self.fp8_attn_rel)
        if self.fsdp_on_hopper:
            self.attn_eff = min(self.attn_eff, cal.FA2_HOPPER_ABS_EFFICIENCY) * stack
        # The LM head (output projection) stays in 16-bit in FP8 recipes: Megatron's output_layer is a plain
        # tensor_parallel.ColumnParallelLinear outside Transformer Engine's fp8_autocast, torchtitan's float8
        # converter skips "output" (filter_fqns). MaxText's FP8 path is not documented here: it keeps the recipe's.
        head_16bit = train.dtype == "fp8" and not self.stack.fp8_lm_head
        self.head_peak = self.peak_bf16 if head_16bit else self.peak
        self.head_eff_max = hw.gemm_efficiency_max * self.shape_derate * stack if head_16bit else self.gemm_eff_max
        self.step_overhead_s = cal.STEP_OVERHEAD_S
        self.tp_overlap_hidden = cal.TP_OVERLAP_HIDDEN_FRACTION
        self.unfused_attention = train.attention_impl == "unfused"
        # which fitted constant prices the attention core (layers.ATTN_FITTED_SHARE_MAX: the range it was fitted on)
        self.attention_path = ("unfused" if self.unfused_attention else
                               "pytorch_native_fa2" if self.fsdp_on_hopper else "fused")
        # the fused kernel on local layers (ATTN_TILE_REL), where the attention core is cuDNN's (Stack.cudnn_attention,
        # the stack its constant was measured on): its efficiency relative to a causal layer's, and whether its
        # backward visits the causal layer's tiles (FP8 attention through a sliding window)
        tiles = self.stack.cudnn_attention and not self.unfused_attention
        self.attn_tile_rel = {k.local: local_attention_tile_rel(self.model, train.seq_len, k.local,
                                                                cal.ATTN_Q_TILE_OVERHEAD_TILES) if tiles else 1.0
                              for k in self.kinds}
        self.attn_bwd_causal_tiles = {k.local: tiles and self.fp8_attention and k.local == "sliding"
                                      for k in self.kinds}
        self.attn_tiles = tiles
        self.causal_tile_rel_cache: dict[tuple[int, str], float] = {}
        # the attention-core FLOPs per token of a causal layer at this sequence length (what such a backward visits)
        self.causal_attn_core_flops = attn_core_flops_per_token(self.model, train.seq_len, local=False)
        self.hbm_bw = hw.hbm_bandwidth_GBps * 1e9
        self.host_link_bw = (hw.host_link_unidir_GBps or UNKNOWN_HOST_LINK_GBPS) * 1e9  # bytes/s, each direction
        self.rate_terms = self._rate_terms(hw, train)

    def causal_tile_rel(self, cp: int, cp_comm: str) -> float:
        """A causal layer's fused-attention efficiency at this length under this CP relative to the one
        ATTN_REL_EFFICIENCY was fitted at (CAUSAL_TILE_REL); 1 where the attention core is not cuDNN's."""
        key = (cp, cp_comm)
        v = self.causal_tile_rel_cache.get(key)
        if v is None:
            v = 1.0
            if self.attn_tiles:
                ov = self.calibration.ATTN_Q_TILE_OVERHEAD_TILES
                v = (causal_attention_tile_efficiency(self.train.seq_len, cp, cp_comm == "ring", ov)
                     / attention_tile_efficiency(ATTN_REL_REFERENCE_SEQ, None, None, ov))
            self.causal_tile_rel_cache[key] = v
        return v

    def _rate_terms(self, hw, train: TrainingSpec) -> tuple[Term, ...]:
        fsdp_hopper, cal = str(self.fsdp_on_hopper), self.calibration
        return (
            PEAK.term("peak_flops", self.peak, "FLOP/s", hardware=hw.id, dtype=train.dtype),
            GEMM_CEILING.term("gemm_efficiency_ceiling", self.gemm_eff_max, "", mamf=hw.gemm_efficiency_max,
                              shape_derate=self.shape_derate, dim_half=cal.GEMM_DIM_HALF, dtype=train.dtype,
                              fsdp_on_hopper=fsdp_hopper, pytorch_native=cal.PYTORCH_NATIVE_HOPPER_EFFICIENCY),
            ATTN_EFFICIENCY.term("attention_efficiency", self.attn_eff, "", mamf=hw.gemm_efficiency_max,
                                 shape_derate=self.shape_derate, rel=self.attn_rel, head_dim_rel=self.attn_head_dim_rel,
                                 fa2_abs=cal.FA2_HOPPER_ABS_EFFICIENCY, fsdp_on_hopper=fsdp_hopper,
                                 pytorch_native=cal.PYTORCH_NATIVE_HOPPER_EFFICIENCY,
                                 attention_impl=train.attention_impl, **self._fp8_attention_inputs()),
        ) + tuple(
            ATTN_TILE_REL.term(f"local_attention_tile_rel[{local}]", rel, "", seq_len=train.seq_len,
                               window=(self.model.sliding_window or 0) if local == "sliding" else 0,
                               chunk=(self.model.attention_chunk_size or 0) if local == "chunked" else 0,
                               tile_tokens=FUSED_ATTN_TILE_TOKENS, q_tile_overhead=cal.ATTN_Q_TILE_OVERHEAD_TILES,
                               fp8_backward_causal_tiles=str(self.attn_bwd_causal_tiles[local]))
            for local, rel in sorted(self.attn_tile_rel.items()) if local and rel != 1.0)

    def _fp8_attention_inputs(self) -> dict[str, Any]:
        """The FP8 attention factor and peak of the attention_efficiency term, only when the knob is on (the default
        plan's trace stays as it was)."""
        if not self.fp8_attention:
            return {}
        return {"fp8_attention_rel": self.fp8_attn_rel, "attention_peak_flops": self.attn_peak,
                "head_width": sum(qk_v_head_dims(self.model))}

    def stage_kind_counts(self, pp: int, first: int | None, last: int | None, n_full: int | None) -> list[StageSplit]:
        """Per stage: (layer counts, {kind: count} of the first n_full layers, {kind: count} of the rest)."""
        key = (pp, first, last, n_full)
        v = self.split_cache.get(key)
        if v is None:
            counts = stage_layer_counts(self.model.num_layers, pp, first, last)
            v, start = [], 0
            for c in counts:
                ids = self.kind_of_layer[start:start + c]
                nf = c if n_full is None else min(c, n_full)
                v.append((c, Counter(ids[:nf]), Counter(ids[nf:])))
                start += c
            self.split_cache[key] = v
        return v

    def gemm_eff(self, *dims: float) -> float:
        """GEMM efficiency falls as the smallest matrix dimension shrinks: eff_max x d / (d + d_half)."""
        d = max(1.0, min(dims))
        return self.gemm_eff_max * d / (d + self.calibration.GEMM_DIM_HALF)

    def head_flops_rate(self, *dims: float) -> float:
        """FLOP/s of the LM head GEMM at these dimensions (16-bit in FP8 recipes, see _rates)."""
        d = max(1.0, min(dims))
        return self.head_peak * self.head_eff_max * d / (d + self.calibration.GEMM_DIM_HALF)


class Links(NamedTuple):
    """The fabric each group of the plan runs on, from the launcher's rank order (planner.costmodel.placement)."""

    tp: Link
    cp: Link
    ep: Link
    dp_rs: Link  # dp x cp ranks, reduce-scatter / all-gather
    dp_ar: Link  # dp x cp ranks, all-reduce
    pp: Link
    tp_ar: Link  # tp ranks, all-reduce (TP without sequence parallelism)
    edp: Link  # replicas of one expert shard, reduce-scatter / all-gather


def plan_links(cluster: ClusterSpec, plan: ParallelPlan, calibration: Calibration,
               framework: str = DEFAULT_FRAMEWORK) -> Links:
    span, cal = placement(cluster, plan, framework), calibration
    return Links(
        tp=span_link(cluster, span["tp"], cal),
        cp=span_link(cluster, span["cp"], cal),
        ep=span_link(cluster, span["ep"], cal, "all_to_all"),
        dp_rs=span_link(cluster, span["dp"], cal, "reduce_scatter"),
        dp_ar=span_link(cluster, span["dp"], cal, "all_reduce"),
        pp=span_link(cluster, span["pp"], cal, "send_recv"),
        tp_ar=span_link(cluster, span["tp"], cal, "all_reduce"),
        edp=span_link(cluster, span["edp"], cal, "reduce_scatter"),
    )


class Shape(NamedTuple):
    """The per-plan quantities every cost module reads."""

    plan: ParallelPlan
    sp: bool  # sequence parallelism in effect (needs tp > 1)
    nmb: int  # micro-batches per step
    tokens: float  # tokens of one micro-batch on one device (along the sequence, split by CP)
    links: Links
    dims: ParallelDims  # group sizes and ZeRO shard groups (planner.specs.dims)
    time_key: tuple  # the number of every input a layer's time depends on (the layer-time cache key, with the kind)


# The plan knobs a plan's placement reads (placement.placement: linear_strides, mesh_degrees with ParallelDims.dp_shard;
# edp and devices follow from them): the key of Context.links_cache. A knob placement starts to read must be added here
# (tests/search/test_search_memo.py checks that every other knob leaves the links unchanged).
PLACEMENT_KNOBS = ("tp", "cp", "pp", "dp", "ep", "etp", "zero_stage", "zero_shard_size")


def context_links(ctx: Context, plan: ParallelPlan) -> Links:
    """plan_links on the context's cluster and framework, cached per search under PLACEMENT_KNOBS (the
    candidates of one layout share them whatever their micro-batch, recompute or schedule)."""
    key = tuple(getattr(plan, k) for k in PLACEMENT_KNOBS)
    v = ctx.links_cache.get(key)
    if v is None:
        v = ctx.links_cache[key] = plan_links(ctx.cluster, plan, ctx.calibration, framework=ctx.train.framework)
    return v


def shape_terms(ctx: Context, shape: Shape) -> tuple[Term, ...]:
    p, tr = shape.plan, ctx.train
    tiles = () if not ctx.attn_tiles else (CAUSAL_TILE_REL.term(
        "causal_attention_tile_rel", ctx.causal_tile_rel(p.cp, p.cp_comm), "", seq_len=tr.seq_len,
        reference_seq=ATTN_REL_REFERENCE_SEQ, cp=p.cp, cp_comm=p.cp_comm, tile_tokens=FUSED_ATTN_TILE_TOKENS,
        q_tile_overhead=ctx.calibration.ATTN_Q_TILE_OVERHEAD_TILES),)
    return (TOKENS.term("tokens_per_microbatch", shape.tokens, "tokens", mbs=p.micro_batch, seq=tr.seq_len, cp=p.cp),
            MICROBATCHES.term("num_microbatches", shape.nmb, "", gbs=tr.global_batch, dp=p.dp, mbs=p.micro_batch),
            *tiles)


# The plan knobs plan_shape derives a Shape from (ParallelDims.of, PLACEMENT_KNOBS, every knob of the time key): the key
# of Context.shape_cache. A knob _shape_parts starts to read must be added here (tests/search/test_search_memo.py checks
# that every other knob leaves the shape unchanged).
SHAPE_KNOBS = ("tp", "pp", "dp", "cp", "ep", "etp", "zero_shard_size", "micro_batch", "zero_stage", "sequence_parallel",
               "cp_comm", "recompute", "remat_device", "remat_offloaded", "recompute_modules", "offload_modules")
_shape_knobs_of = attrgetter(*SHAPE_KNOBS)


def plan_shape(ctx: Context, plan: ParallelPlan) -> Shape:
    """The plan's Shape, its derived quantities (_shape_parts) cached per search under SHAPE_KNOBS (the candidates of
    one layout and micro-batch share them whatever their schedule or pipeline split)."""
    key = _shape_knobs_of(plan)
    v = ctx.shape_cache.get(key)
    if v is None:
        v = ctx.shape_cache[key] = _shape_parts(ctx, plan)
    return Shape(plan, *v)


def _shape_parts(ctx: Context, plan: ParallelPlan) -> tuple:
    """Shape's fields after `plan`: (sp, nmb, tokens, links, dims, time_key)."""
    sp = plan.sequence_parallel and plan.tp > 1
    dims = ParallelDims.of(plan)
    nmb = dims.num_microbatches(ctx.train.global_batch)
    links = context_links(ctx, plan)
    return (sp, nmb, plan.micro_batch * ctx.train.seq_len / plan.cp, links, dims,
            # the custom remat policy in effect sets the recompute and host copies (compute.activation_offload_s), as
            # Megatron's offload modules do under the plan's recompute mode (full recompute offloads nothing), the named
            # Megatron modules the selective recompute time (compute.selective_recompute_s); the fabric of the layer's
            # own collectives (on a TPU torus the axes a group runs along follow the whole mesh, pp and dp too:
            # placement.ici_group_busbw_GBps), and whether a step has more than one micro-batch
            # (moe.merged_fwd_bwd: the batch-level EP overlap's merged schedule)
            _time_key(ctx, (plan.tp, plan.cp, plan.micro_batch, sp, plan.ep, plan.etp, plan.cp_comm,
                            plan.custom_remat, plan.recompute_modules, links.tp, links.tp_ar, links.cp, links.ep,
                            nmb > 1, plan.offload_modules, plan.recompute if plan.offload_modules else None)))


def _time_key(ctx: Context, inputs: tuple) -> tuple[int]:
    """The number of these layer-time inputs in this context: hashed once per plan here, not at every layer-time
    lookup (the Link values hash field by field)."""
    v = ctx.time_key_ids.get(inputs)
    if v is None:
        v = ctx.time_key_ids[inputs] = len(ctx.time_key_ids)
    return (v,)
