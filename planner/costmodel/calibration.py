"""Every calibrated constant of the cost model, in one place, each with its value, its fitting bounds and its
evidence: the frozen `Calibration`. The cost model reads the one its evaluation `Context` carries
(`ctx.calibration`, DEFAULT_CALIBRATION unless a caller passes another); nothing reads module globals, and a fit
builds new values (`Calibration.with_values`, dataclasses.replace) instead of patching any.

Rules: few constants, each physically meaningful; fitted on the development runs
(shared/reference/known_runs_dev.yaml) as a whole, never per run. docs/cost-model.md explains
the fit and its residuals.

The comment directly above a field is its evidence: docs/cost-model.md's table of constants prints it beside the
value and the fitting bounds (`fitted(...)`: the bounds planner.analysis.devfit refits it within, and the value
that stands for "mechanism absent" when no run can move it); regenerate it with `python scripts/cost_model_doc.py`.
A field on the line after another, without a comment of its own, shares that one's row.

A hardware profile written by `plan calibrate` carries its own values of a few of them (its `calibration:` block,
planner.specs.CalibrationSpec, fields PROFILE_FIELDS): `Calibration.for_hardware` applies them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.specs import HardwareSpec


@dataclass(frozen=True)
class DevFit:
    """How planner.analysis.devfit refits a constant on the development runs."""

    lo: float  # fitting bounds: the physically possible range where a source gives one
    hi: float
    no_effect: float  # the value when no remaining run shows the mechanism (leave-one-source-out)
    note: str = ""  # where the bounds come from, when a source gives them


def fitted(value: float, *, lo: float, hi: float, no_effect: float, note: str = "") -> Any:
    """A field refitted on the development runs (planner.analysis.devfit) within [lo, hi]."""
    return field(default=value, metadata={"devfit": DevFit(lo, hi, no_effect, note)})


def refittable(value: float, *, lo: float, hi: float, note: str) -> Any:
    """A field the dev refit leaves alone but benchmarks/fit_calibration.py may refit within [lo, hi] (`note`: why
    that range)."""
    return field(default=value, metadata={"range": (lo, hi, note)})


@dataclass(frozen=True)
class Calibration:
    """The calibrated constants (units in the names; comments: evidence). Frozen: a fit makes a new one."""

    # --- compute ---------------------------------------------------------------------------------
    # Real transformer GEMMs reach this fraction of the best-shape MAMF ceiling in hardware.yaml
    # (measured_gemm). Fitted on the dev runs (planner.analysis.devfit: robust joint fit of every constant marked
    # "fitted" here); consistent with Megatron-core's 47% MFU on H100 (hardware.yaml mfu_anchors) against an 80% MAMF
    # ceiling.
    GEMM_SHAPE_DERATE: float = fitted(0.795, lo=0.3, hi=1.2, no_effect=1.0)
    # GEMM efficiency falls as the smallest per-device matrix dimension shrinks (tile quantisation, wave
    # effects): eff = eff_max * derate * d / (d + GEMM_DIM_HALF). Fitted; d=GEMM_DIM_HALF loses half.
    GEMM_DIM_HALF: float = refittable(96.0, lo=1.0, hi=1024.0, note="a matrix dimension")
    # FlashAttention-2 reaches 50-73% of A100 peak forward and ~63% backward (Dao 2023, arXiv 2307.08691,
    # sec. 4.1); relative to the ~87% GEMM ceiling that is 0.55-0.85 of GEMM efficiency. Fitted within that range:
    # the fit sits near its lower end (long-sequence and small-hidden runs are slower than the GEMMs explain).
    # Against the kernels it is slow: on H100 it gives 0.803 x 0.795 x 0.55 = 35% of peak (347 TFLOP/s) where
    # FlashAttention-3's BF16 forward reaches up to 740 TFLOP/s, 75% (Shah et al. 2024, arXiv 2407.08608, abstract)
    # and 590 TFLOP/s at 4k tokens, head dim 128 (pytorch/benchmark PR #2391's run of the paper's shapes), and on
    # B200 FlashAttention-4 reaches 1605 TFLOP/s, 71%, up to 1.3x cuDNN 9.13 (together.ai blog "FlashAttention-4").
    # Only runs whose step is mostly attention show it: the model zoo's 128k-token Qwen3-235B-A22B GB200 row
    # (runs/modelzoo_runs_added.yaml, 87% of its MoE layer's forward in the attention core) is +66% at 0.55 and +7%
    # at 0.95, its H100 long-context rows (16k / 32k / 64k / 128k tokens, CP 1-8) +34% / +40% / +44% / +45% at 0.55
    # and +18% / +13% / +6% / -2% at 0.95, while the 4k-8k rows ask for 0.55 (at 0.95: known_runs_added dense median
    # 1.7% -> 7.6%, dev dense p90 12.3% -> 14.0%). The kernel's own rise from 4k to 16k tokens is 5% (590 -> 621
    # TFLOP/s in that run), not the 1.7x between the two; what the short rows charge to attention is not identified
    # (2026-11-27), so the constant stays fitted on the many rows.
    # Tried next (2026-11-27), not shipped: Megatron's Hopper rows at cuDNN's measured rate. Transformer Engine runs
    # cuDNN's FusedAttention rather than flash-attn on sm90 (from v1.5 at least, attention.py: "Select FusedAttention
    # on sm90 and FlashAttention on others for performance"), and the FA3 paper's cuDNN bars (head dim 128, causal),
    # weighted as above, give 0.51 of peak. The other rows, refitted jointly, then ask for 0.67 here (GEMM_SHAPE_DERATE
    # 0.780, FP8_DERATE 0.855, TP_OVERLAP 0.79). The model zoo goes from 20.7% to 15.0% median (its H100 16k-128k rows
    # from +34..45% to +10..22%) and the dev dense median from 4.4% to 3.9%, but the dev MoE p90 goes from 15.5% to
    # 17.8%, every held-out Hopper dense DGX Cloud row moves by about -4.5 points (known_runs_added dense median 1.7% ->
    # 5.3%) and one known_runs_added MoE row goes beyond 35%: the short Hopper rows lack about 5% that is not a
    # per-token cost (the long rows would pay that too).
    # Since 2026-11-28 (round 38) it is a causal layer's efficiency at base.ATTN_REL_REFERENCE_SEQ (4096) tokens, and a
    # stack whose attention core is cuDNN's scales it by the causal tile efficiency at the layer's own length
    # (base.CAUSAL_TILE_REL): cuDNN's published causal rate rises 1.20x from 4k to 16k tokens on H200 (cuDNN 9.19,
    # 502 -> 603 TFLOP/s forward + backward), which the tile model reproduces (the FA3 run above rose 5%: not the
    # kernel Transformer Engine runs). The H100 long-context rows then miss by +28% / +30% / +29% / +26% and the GB200
    # 128k row by +39%; the dev refit keeps this constant at its bound 0.55 and leave-one-source-out moves from 5.6% /
    # 14.3% to 4.9% / 14.4%. What the 4k-8k rows still charge to attention beyond cuDNN's rate (the 1.45x above) is not
    # identified.
    ATTN_REL_EFFICIENCY: float = fitted(0.550, lo=0.55, hi=0.95, no_effect=1.0,
                                       note=("FlashAttention-2 reaches 50-73% of A100 peak forward and ~63% backward "
                                             "(Dao 2023, arXiv 2307.08691, sec. 4.1), i.e. 0.55-0.95 of the ~0.85 "
                                             "GEMM ceiling"))
    # Attention core in PyTorch-native stacks (torchtitan, llm-foundry: SDPA / FlashAttention-2) on Hopper
    # and later, forward + backward: FlashAttention-2 forward reaches at most about 35% of H100 peak and its
    # backward less (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608, sec. 1 and sec. 4), while
    # Megatron/Transformer Engine use cuDNN fused attention (FA3-class). Fitted within that range on the
    # torchtitan rows (the attention-heavy long-sequence CP runs pin it).
    FA2_HOPPER_ABS_EFFICIENCY: float = fitted(0.2295, lo=0.2, hi=0.4, no_effect=1.0,
                                             note=("FA2 forward reaches at most ~35% of H100 peak and its backward "
                                                   "less (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608, sec. "
                                                   "1): 0.2-0.4 absolute"))
    # PyTorch-native training (FSDP2 + torch.compile or eager, no Transformer Engine) on Hopper/Blackwell:
    # fraction of the Megatron+TE per-kernel efficiency it reaches, applied to every tensor-core kernel
    # (GEMMs and attention alike). Fitted on the torchtitan and llm-foundry H100 rows together with the
    # attention constant above (short-sequence 70B rows pin the GEMM side); it also absorbs the 500 W cap of
    # Meta's torchtitan H100s (shared/reference/README.md caveat: a power cap throttles all tensor-core
    # work), which is why it is not applied to Ampere, where the llm-foundry A100 rows match Megatron-era
    # efficiency.
    PYTORCH_NATIVE_HOPPER_EFFICIENCY: float = fitted(0.809, lo=0.3, hi=1.2, no_effect=1.0)
    # Grouped expert GEMMs relative to a dense GEMM of one expert's shape (rows = tokens per local expert; the short-row
    # loss is Context.gemm_eff's d / (d + GEMM_DIM_HALF)). DeepGEMM's published H800 FP8 tables (deepseek-ai/DeepGEMM
    # README, Feb 2025): 8 groups x 4096 rows (N 4096, K 7168) 1288 TFLOPS vs 1304 for one dense 4096 x 4096 x 7168 GEMM
    # (0.99); 4 groups x 8192 rows (N 7168, K 2048) 1099 vs dense 4096-row 1025 (1.07). The fitted runs use Transformer
    # Engine's GroupedLinear (one cuBLAS GEMM per expert), for which no table was found: devfit bounds it to [0.5, 1.1],
    # half of DeepGEMM's ratio at least. Fitted on the dev runs; the fit sits at the lower bound (joint devfit refit
    # 0.507, 2026-11-26). Not a kernel rate: solved row by row (the value at which a row's predicted step equals its
    # measured one, from the predictions at 0.5 and 1.0; rows whose step moves < 3% between the two left out), Hopper
    # and Blackwell Megatron rows alike mostly ask for 0.4-0.75 (dev: H800 DeepSeek-V3 0.42, H100 gpt-oss 0.59, B200
    # gpt-oss 0.44, GB200 gpt-oss 0.54, GB200 DeepSeek-V3 BF16 0.74; the added GB200 gpt-oss-120b rows at 33134 rows per
    # expert 0.40-0.47, so not a short-GEMM loss either), some lower (DGX Cloud DeepSeek-V3 GB200 0.27 / 0.33, the
    # host-bound H100 Qwen3-30B-A3B FP8 rows 0.06-0.38) and the GB200 / B200 Qwen3-235B-A22B ones higher (1.05-2.6),
    # while the two GPU-bound NeMo AutoModel rows on one DGX-H100 (BF16, EP 8 inside NVLink, 8192 rows per local
    # expert) ask for 1.06 (Qwen3-30B-A3B) and 0.84 (gpt-oss-20b; both +33% at 0.5) and the same stack's multi-node rows
    # for 0.42-0.63 (EP 32-64 across nodes: gpt-oss-120b 0.42, DeepSeek-V3 0.48 / 0.63, Kimi-K2 0.53). Their expert
    # kernel is the one the Megatron rows run:
    # grouped_gemm v1.1.4's SM90 path is one cublasGemmEx per expert round robin over 4 streams (fanshiqing/grouped_gemm
    # csrc/grouped_gemm.cu CublasGroupedGemm, NUM_STREAM 4), TE's GroupedLinear the same over its compute streams
    # (TransformerEngine PR #853 "Grouped GEMM via multi-stream cuBLAS"; common/util/multi_stream.cpp
    # get_num_compute_streams: 4). So 0.5 stands in for costs the other rows have and the model lacks (a missing
    # mechanism, not a measured rate); at 1.0 the dev MoE median goes 9.1% -> 18.7%. Not the network: the
    # Megatron-Bridge and DGX Cloud rows of runs/ whose EP group stays in one NVLink domain (50, GB200 NVL72 and 8-GPU
    # nodes) ask for a median 0.47 (0.48 since 2026-11-28's attention changes), those whose EP group crosses domains
    # (21) for 0.47 too (2026-11-27; 0.45 since the causal tile efficiency of round 38); only AutoModel's split
    # (0.84-1.06 on one node, 0.42-0.63 across nodes) follows the network, on 6 rows
    # (tests/analysis/test_moe_grouped_stand_in.py). MaxText's dropless TPU rows, whose megablox
    # kernel is neither cuBLAS nor TE's, ask for 0.26 / 0.54 / 0.71 (Llama 4 Maverick, DeepSeek-V3, Llama 4 Scout on
    # v5p) once the row tiles that kernel revisits are charged (moe.grouped_tile_visits_rel; 0.17 / 0.40 / 0.63
    # without), and MaxText's tiering table's Mixtral 8x7B on v5p (8 experts of 14336, 37k rows per expert) for 0.86
    # (runs/moe_runs_added.yaml, +59% at 0.5): the stand-in is no rate of that kernel. Since 2026-11-28 it applies on
    # GPUs only (moe.grouped_gemm_rel): on a TPU the experts run at the dense rate and the permutation's row gathers
    # at TPU_ROW_GATHER_REL, which maxtext issue #1256 isolates (the four rows then land at -0.4% / -2.7% / -5.0% /
    # -28.2%: Mixtral, DeepSeek-V3, Scout, Maverick). (The DGX Cloud DeepSeek-V3 GB200 rows that
    # dragged it earlier are scored with an allocation without block scheduling, inferred from the rows:
    # ClusterSpec.aligned_allocation, validate.DGXC_SEGMENTED_FROM.)
    MOE_GROUPED_GEMM_REL_EFFICIENCY: float = fitted(0.500, lo=0.5, hi=1.1, no_effect=1.0,
                                                   note=("DeepGEMM's grouped / dense ratio at the same shape, "
                                                         "0.99-1.07, widened for the cuBLAS / TE grouped kernels of "
                                                         "the fitted runs"))
    # Host time to launch one CUDA kernel from PyTorch (Python op dispatch + cudaLaunchKernel), seconds. It shows only
    # where the GPU waits for the host: after an MoE dispatcher's device-to-host sync
    # (planner.costmodel.moe.moe_forward). Range: microseconds for the CUDA launch itself, more for PyTorch's per-op
    # Python / C++ dispatch (NVIDIA's "Getting Started with CUDA Graphs" and PyTorch's "Accelerating PyTorch with CUDA
    # Graphs" blogs describe launch overhead as a first-order cost of short kernels; no per-op figure is quoted here);
    # bounds [2e-6, 5e-5] in devfit. Shipped at Transformer Engine's own SM100 benchmark of its multi-stream
    # GroupedLinear (TransformerEngine PR #3134, 8 experts x 128 tokens, N = K = 2048: 0.27 ms, against 0.07 ms for
    # one single-launch grouped kernel): ~34 us per launched expert GEMM. The dev refit agrees: 36.9 us (joint devfit
    # refit, 2026-11-26; 37.0 us refitted alone) once the FP8 experts' per-expert quantize kernels are counted
    # (planner.costmodel.moe FP8_QUANTIZE_KERNELS_PER_TENSOR; without them the fit sat at 46.5 us, near its bound,
    # standing in for them). The measurement is shipped, not the in-sample fit: at 37 us the dev MoE rows move by at
    # most 8 points either way, while the held-out MoE rows got worse (2026-11-26: runs/moe_runs_added.yaml median
    # 17.8% -> 18.9%, p90 56.7% -> 63.7%; runs/known_runs_added.yaml MoE median 17.7% -> 20.8%). Re-run on the model of
    # 2026-11-27 it still does not pay: dev MoE median 8.5% -> 10.0%, known_runs_added MoE 8.6% -> 10.6%,
    # moe_runs_added 8.6% -> 8.8% (p90 25.3% either way, as plan validate takes it).
    # Driven by the small-expert Qwen3-30B-A3B rows whose step is 2-4x their GPU time; the per-op counts are estimates.
    HOST_LAUNCH_S: float = fitted(3.4e-05, lo=2e-6, hi=5e-5, no_effect=3.4e-5,
                                 note=("per-kernel host launch time, PyTorch eager: a few us (cudaLaunchKernel) to "
                                       "tens of us (op dispatch). Without a run to fit it, the microbenchmark's "
                                       "figure, not 0 (the launches exist whether or not a run shows them): "
                                       "Transformer Engine's multi-stream GroupedLinear spends 0.272 ms on 8 expert "
                                       "GEMMs of 128 tokens on SM100, ~34 us per launched GEMM (TransformerEngine PR "
                                       "#3134, benchmark_grouped_linear.py, 'dispatch' row)"))
    # Unfused attention (pre-FlashAttention stacks): bytes moved per element of the s x s score matrix in
    # forward: QK^T write (2), fused scale-mask-softmax read+write (4), AV read (2) = 8, + the attention dropout's
    # read+write+mask (5) where it runs (TrainingSpec.attention_dropout; compute.UNFUSED_DROPOUT_BYTES_PER_SCORE_FWD);
    # backward moves about twice that (Korthikanti et al. 2022 list these tensors, sec. 4.1).
    UNFUSED_ATTN_BYTES_PER_SCORE_FWD: float = 8.0
    # FP8 GEMMs: fraction of the FP8 MAMF ceiling reached by real shapes relative to BF16 (per-tensor
    # scaling, amax and cast kernels are memory-bound work around every FP8 GEMM). Fitted (0.80 under the earlier
    # plain least-squares fit, which the DGX Cloud DeepSeek-V3 rows dragged; docs/validation.md).
    FP8_DERATE: float = fitted(0.896, lo=0.3, hi=1.2, no_effect=1.0)
    # MXFP8 (32-element blocks with E8M0 scales, Blackwell) GEMMs relative to per-tensor current scaling at the same
    # shapes: quantising each operand along both axes (the backward needs the transposed blocks) and the block-scaled
    # MMA. Set so that the model reproduces the mean MX / CS step ratio of the three same-job pairs Megatron-Bridge
    # publishes (25.11 performance summary, tokens/s/GPU FP8-CS (FP8-MX): Llama 3 8B GB200 31508 (29789), B200 30624
    # (29521), Llama 3.1 405B B200 661 (624): steps 5.8%, 3.7%, 5.6% longer with MXFP8, mean 5.2%;
    # tests/costmodel/test_stack_knobs.py).
    MXFP8_REL_EFFICIENCY: float = 0.926
    # FP8 attention core (TrainingSpec.fp8_attention): its efficiency on the FP8 peak relative to BF16 attention's on
    # the BF16 peak = (measured BF16 fwd+bwd time / FP8 fwd+bwd time) x (BF16 peak / FP8 peak), not fitted. Source:
    # NVIDIA cudnn-frontend benchmark/sdpa_benchmark_training/results/dsv3/gb300/dsv3_20260724_041345.csv (commit
    # e99b0d0b): cuDNN 9.26 SDPA on one GB300, DeepSeek-V3 shapes (128 heads, head dim 192 / 128, batch 2), causal,
    # 4096 tokens, default (non-deterministic) backward: BF16 0.812 + 3.090 ms, per-tensor FP8 0.477 + 1.770 ms,
    # MXFP8 0.540 + 2.294 ms; GB300 dense peaks 2500 / 5000 TFLOP/s (hardware_profiles/gb300-nvl72.yaml). Per-tensor
    # FP8: 3.902 / 2.247 = 1.737x faster -> 0.868; measured on GB300, a stand-in on every other FP8 part (Hopper's
    # FP8 attention is its own kernel). Bounds over the file's 2k-32k tokens: 1.67x-1.85x (0.84-0.93).
    FP8_ATTN_REL_EFFICIENCY: float = 0.868
    # MXFP8 attention (Transformer Engine 2.16.0 / 2.17.1, Megatron-Bridge v0.5.0 / v0.6.0's pins: an MXFP8 recipe
    # quantizes the attention MXFP8 unless NVTE_DPA_FP8_RECIPE says otherwise, dot_product_attention.py recipe table),
    # same file and row as above: 3.902 / 2.834 = 1.377x faster -> 0.688; bounds over 2k-32k tokens: 1.31x-1.52x
    # (0.65-0.76). A stand-in on Blackwell parts other than GB300.
    MXFP8_ATTN_REL_EFFICIENCY: float = 0.688
    # The same two at Llama 3.1's head width (128 + 128, 64 query / 8 key-value heads), which the DeepSeek-V3 shapes
    # above (192 + 128) overstate: same benchmark release (commit e99b0d0b, cuDNN 9.26, one GB300),
    # llama3.1/gb300/llama3.1_20260724_040919.csv, batch 2, causal, 4096 tokens, default backward: BF16 0.303 + 1.096
    # ms, per-tensor FP8 0.218 + 0.986 (1.162x faster -> 0.581), MXFP8 0.238 + 1.203 (0.971x: slower than BF16 ->
    # 0.485). Bounds over 2k-32k tokens: per-tensor 1.03x-1.50x (0.52-0.75), MXFP8 0.89x-1.18x (0.45-0.59). Interpolated
    # on the head width between the two shapes (base.fp8_attention_rel); a stand-in on Blackwell parts other than GB300.
    FP8_ATTN_REL_EFFICIENCY_HD128: float = 0.581
    MXFP8_ATTN_REL_EFFICIENCY_HD128: float = 0.485
    # Fused attention's fixed cost per query tile, in key tiles of base.FUSED_ATTN_TILE_TOKENS (base.ATTN_TILE_REL):
    # loading the query tile, the softmax's final rescale, writing its output and log-sum-exp. Fitted, not on training
    # runs, on NVIDIA cudnn-frontend's published SDPA benchmark (benchmark/sdpa_benchmark_training/results at commit
    # e99b0d0b, one GB200, cuDNN 9.26, batch 2, 128 heads, BF16, forward + default backward, ms): DeepSeek-V3 causal
    # (head dim 192 / 128; dsv3/gb200/dsv3_20260724_041401.csv) 2k 0.311 + 1.029, 4k 0.944 + 3.262, 8k 3.341 +
    # 11.369, 16k 12.147 + 49.095, 32k 51.593 + 205.631, and gpt-oss through its 128-token window (head dim 64;
    # gpt_oss/gb200/gpt_oss_20260724_040709.csv) 0.108 + 0.234, 0.209 + 0.461, 0.412 + 0.903, 0.818 + 1.820, 1.630 +
    # 3.663; one cost per key tile (head dim 64 at (64 + 64) / (192 + 128) of it over base.CUDNN_ATTN_HEAD_DIM_REL's
    # 0.795) and this constant fitted jointly (least squares in log time): 4.1, all ten within -11% / +8%. Bounds: 2.8
    # (the causal rows alone; the window rows then -11% to -24%) to 4.8 (the window rows alone). Checked on a series it
    # did not see: cuDNN 9.19's gpt-oss rows through a 1024-token window, 64 / 8 heads
    # (gb200_919_only_cudnn/gpt_oss_20260226_175022.csv, commit afa9f7c0): 0.87x-1.09x. 4.1 tiles = 525 keys' work.
    ATTN_Q_TILE_OVERHEAD_TILES: float = 4.1
    # Row gathers by index on TPU (XLA's gather, which MaxText's dropless MoE permutation is: moe.row_gather_bw), as a
    # fraction of the chip's HBM bandwidth. MaxText's own source says such ops run element-serially on the TPU's
    # vector units (maxtext 0.2.5 layers/moe.py take_along_last_axis_dense_vjp: "XLA sorts the flattened indices and
    # then runs an element-serial scatter"); no rate is published. Fitted, not on training runs, on the one published
    # pair that isolates it (AI-Hypercomputer/maxtext issue #1256, 2025-02-09): Mixtral-8x7B without attention on a
    # v5p-64 (32 chips) at 50.4% MFU with 8 experts of 14336 top-2, 28% with 56 experts of 2048 top-14 (the same FLOPs;
    # "different tile_sizes, TPU sizes and batch sizes, all leading to 25-28%"), i.e. 1.8x the step: the fine-grained
    # variant moves 7x the token copies (each a hidden vector) for the same expert FLOPs. The step ratio the model
    # gives at 1.8 asks 0.0725 / 0.0759 / 0.0778 at 4 / 8 / 16 sequences of 4096 per chip (FSDP over the 32 chips,
    # full remat, MaxText's defaults; tests/costmodel/test_tpu_row_gather.py), where its MFU is 46% / 49% / 50% and
    # 26% / 27% / 28%: the two levels, not only their ratio. About 210 GB/s on a v5p. Bounds: the three fits.
    # The MaxText (f697340, linears.py permute) ran the backward of its jnp.take gathers as scatter-adds, as the
    # Mixtral and Maverick rows' releases did; the DeepSeek-V3 and Scout rows' (3eb77db) gather there instead
    # (use_custom_sort_vjp). One rate stands for both: no published measurement separates them.
    TPU_ROW_GATHER_REL: float = 0.076
    # Scale on the memory-bound elementwise traffic per token per layer that planner.costmodel.compute counts from the
    # op list (2 norms read+write 4h, 2 residual adds 6h, the MLP activation 3f): 1.0 = no fusion assumed.
    # Not fitted (the dev runs cannot separate it from GEMM efficiency).
    ELEMENTWISE_BYTES_FACTOR: float = 1.0

    # --- communication -----------------------------------------------------------------------------
    # Ring collectives reach ~80% of the per-direction NVLink rate (specs.md 1.3: A100 78%, H100 82%).
    RING_WIRE_FRACTION: float = refittable(0.80, lo=0.3, hi=1.0, note="a fraction of the wire rate")
    # TPU ICI: fraction of the per-chip per-direction ICI rate a 1-D ring collective gets (no measured
    # TPU collective in the reference data: same 80% as NVLink rings, stated as an assumption).
    ICI_BUS_FRACTION: float = 0.80
    # Fraction of MoE all-to-all time hidden under computation (Megatron overlaps the combine of one
    # chunk with the next chunk's expert GEMMs only partially; DeepSeek's DualPipe hides nearly all).
    EP_OVERLAP_FRACTION: float = 0.0
    # Share of the TP collectives hidden under the GEMMs when TP communication overlap is on (Transformer Engine
    # userbuffers, Megatron --tp-comm-overlap; torchtitan async TP). TE splits each GEMM and its all-gather /
    # reduce-scatter into chunks (ring_exchange: tp chunks; pipeline: num_splits 4 in NVIDIA's GPT-3 175B recipe,
    # dgxc-benchmarking nemo_megatron/gpt3_175b_hydra.yaml ub_tp_comm_overlap_cfg), so one chunk stays exposed and
    # the overlapped kernels give up 2-24 SMs to the communication. Fitted on the dev runs whose recipes enable it (the
    # MoE-mechanism refit held it here: refitted jointly it moves to 0.646 at equal residuals, in-sample
    # median 5.3% / p90 17.1% either way, and the torchtitan Table 4 async-TP pair then misses by more than 5 points).
    TP_OVERLAP_HIDDEN_FRACTION: float = fitted(0.588, lo=0.05, hi=0.95, no_effect=0.0,
                                              note=("TE chunks each GEMM with its TP collective: at least one chunk "
                                                    "of tp (or of num_splits 4) stays exposed"))
    # Share of the overlapping compute that hides data-parallel traffic: the gradient reduction is exposed by
    # max(0, reduction time - DP_OVERLAP_FRACTION x the last micro-batch's backward time), the ZeRO gathers by
    # the same share of the forward (Megatron --overlap-grad-reduce / --overlap-param-gather; FSDP2 per-layer
    # reduce-scatter). A share of compute time, not of traffic: the rest of the backward is taken by kernels
    # that contend with NCCL for SMs and memory bandwidth. Fitted.
    DP_OVERLAP_FRACTION: float = refittable(0.8, lo=0.0, hi=1.0, note="a fraction of compute")

    # DeepSpeed ZeRO-3 keeps a gathered parameter for its next use only when that use comes within this many
    # parameters (`stage3_max_reuse_distance`, default 1e9 in the DeepSpeed config docs). A documented
    # default, not fitted.
    DEEPSPEED_MAX_REUSE_DISTANCE_PARAMS: float = 1e9
    # DeepSpeed ZeRO-3 gathers parameters module by module and releases them once more than this many are resident
    # (`stage3_max_live_parameters`, default 1e9; a module larger than it is still gathered whole); gradients leave
    # the device through a bucket of this many elements (`reduce_bucket_size`, default 5e8). Documented defaults
    # (DeepSpeed config docs), not fitted; the planner's ds_config writes the same live limit.
    DEEPSPEED_MAX_LIVE_PARAMS: float = 1e9
    DEEPSPEED_REDUCE_BUCKET_PARAMS: float = 5e8

    # --- memory ------------------------------------------------------------------------------------
    # The framework overhead per device (CUDA context, NCCL buffers) is each stack's: Stack.overhead_gib
    # (planner/stacks/).

    # The caching allocator's reserved/allocated ratio at peak (torch.cuda.max_memory_reserved vs
    # max_memory_allocated); torchtitan reports reserved memory. Fitted on the torchtitan rows. Stacks with PyTorch's
    # caching allocator only (Stack.caching_allocator): XLA assigns buffers statically.
    ALLOCATOR_FRAGMENTATION: float = 1.05
    # Memory left free for the driver and transient spikes when deciding whether a plan fits, under PyTorch's caching
    # allocator; none under XLA, which checks the compiled program against the device's limit
    # (capacity.fit_reserve_gib).
    FIT_RESERVE_GIB: float = 1.0
    # The memory error band: 90% of the published peaks (runs/known_runs_*.yaml with peak_memory_gib, 27 torchtitan
    # rows) lie within a factor 1 + MEMORY_BAND_REL of the prediction, cross-validated (the fitted overhead refitted
    # without each run): `python -m planner.analysis.membands` computes it, tests/analysis/test_memory_validation.py
    # checks this copy. It is the band shown beside the peak (--json peak_memory_band) and the default memory margin:
    # a plan keeps this share of the usable capacity free, peak <= usable x (1 - band), or it ranks after every plan
    # that does (planner.costmodel.capacity, planner.search.ranking); --memory-headroom replaces it. Both ways, not
    # only the under-predicted side (0.08 on these peaks): every published peak is torchtitan's, and for the other
    # stacks the sign of the error is not measured, only its size.
    # 0.2491 before branch mem3 (Table 5 micro-batches, loss-parallel bytes, expandable segments, pipeline buffers);
    # 0.1506 before branch fp8mem (FSDP float8 all-gather stated on 5 rows: the cross-validated overhead refits at 2.75
    # GiB, which moves the over-predicted B200 rows from +15.4..16.5% to +16.3..16.9%)
    MEMORY_BAND_REL: float = 0.1651
    # The inner memory margin: the median of the same cross-validated misses (q0.50 where MEMORY_BAND_REL is q0.90;
    # `python -m planner.analysis.membands` prints both, tests/analysis/test_memory_validation.py checks this copy).
    # Where no plan keeps the margin, the plans that keep this share of the usable capacity free rank before those
    # that do not (planner.search.ranking.memory_tier). On the 27 published peaks, cross-validated, the measured peak
    # exceeds the prediction by more than 0.3% on 15, by more than 4.6% on 9, by more than 16.5% on 1: a plan 0.3%
    # under the capacity would have run out of memory on more than half of them, one at the inner margin on a third.
    MEMORY_BAND_MEDIAN_REL: float = 0.0464

    # --- host (optimizer offload) ---------------------------------------------------------------------
    # DeepSpeed CPU-Adam throughput of one host, parameters updated per second with all its cores (ZeRO-Offload,
    # Ren et al., USENIX ATC 2021, arXiv 2101.06840, Table 3: 10B parameters in about 2.6 s on a DGX-2 host's two
    # 24-core Xeon Platinum 8168 sockets, as read from the paper; the table text could not be re-retrieved in this
    # pass). DeepSpeed's tutorial: DeepSpeedCPUAdam is 5-7x faster than PyTorch's CPU Adam. CPU Adam streams ~30
    # bytes per parameter through host DRAM, so the rate is the host's memory bandwidth, shared by all GPUs of the
    # host: one host updates the optimizer shards of all its GPUs. A documented measurement, not fitted.
    CPU_ADAM_PARAMS_PER_S_PER_HOST: float = 3.9e9

    # --- fixed costs ----------------------------------------------------------------------------------
    # Work per layer that does not shrink with its FLOPs (kernel launch gaps, small uncounted kernels), seconds per
    # transformer layer per micro-batch (forward + backward, 1/3 + 2/3), and per micro-batch per stage. A fit on
    # the dev runs found: per micro-batch any positive value raised the p90; per layer 1.5 ms (with
    # FP8_DERATE refitted to 1.0) gave median 7.5% / p90 19.5%, but a cost that does not shrink with TP, CP or PP
    # then ranked NeMo's published layouts 21st-31st (TP2 PP8 over NeMo's TP4 PP4 for Llama-2 70B, no CP over CP2
    # for Llama-3 8B at 8k). Launch gaps hide under long kernels, so such a cost is not physical at these sizes:
    # both stay 0 until a host-bound floor (max of GPU and host time per layer) is modelled.
    LAYER_OVERHEAD_S: float = 0.0
    MICROBATCH_OVERHEAD_S: float = 0.0

    # Fixed seconds per optimizer step outside the modelled terms (data loading, logging, host work between steps):
    # 0 in the development-run model; `plan calibrate` fits it per hardware profile (the profile's
    # `calibration.step_overhead_s`) when a cluster's own measured steps show one.
    STEP_OVERHEAD_S: float = 0.0

    def with_values(self, values: Mapping[str, float]) -> Calibration:
        """These constants replaced (names as the fields; an unknown name raises TypeError)."""
        return dataclasses.replace(self, **{k: float(v) for k, v in values.items()}) if values else self

    def for_hardware(self, hw: HardwareSpec) -> Calibration:
        """The constants a calibrated hardware profile sets (`calibration:` block, written by `plan calibrate`)
        replace these; the others stay."""
        k = hw.calibration
        if k is None:
            return self
        return self.with_values({f.upper(): v for f in PROFILE_FIELDS if (v := getattr(k, f)) is not None})


# the fields of a hardware profile's `calibration:` block (planner.specs.CalibrationSpec) that set a constant of
# the same name in capitals
PROFILE_FIELDS = ("gemm_shape_derate", "attn_rel_efficiency", "step_overhead_s", "tp_overlap_hidden_fraction")

# the constants fitted on the development runs (planner.analysis.devfit, benchmarks/fit_calibration.py)
DEFAULT_CALIBRATION = Calibration()


def dev_fit_bounds() -> dict[str, DevFit]:
    """name -> DevFit of every constant refitted on the development runs, in field order."""
    return {f.name: f.metadata["devfit"] for f in dataclasses.fields(Calibration) if "devfit" in f.metadata}


def fit_ranges() -> dict[str, tuple[float, float]]:
    """name -> (low, high) of every constant a fit may move: the dev-fitted ones' bounds, then the `refittable`
    ones' ranges, in field order."""
    out = {}
    for f in dataclasses.fields(Calibration):
        if "devfit" in f.metadata:
            out[f.name] = (f.metadata["devfit"].lo, f.metadata["devfit"].hi)
        elif "range" in f.metadata:
            out[f.name] = f.metadata["range"][:2]
    return out


def names() -> tuple[str, ...]:
    """Every constant's name, in field order."""
    return tuple(f.name for f in dataclasses.fields(Calibration))
