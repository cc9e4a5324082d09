"""NVIDIA NeMo AutoModel as its MoE benchmarks run it: PyTorch FSDP2 (+ EP, + torch.distributed.pipelining) over
Transformer Engine kernels and DeepEP. TrainingSpec framework "automodel"; a costing stack: no emitter writes its
configs, so `plan validate` scores runs that name it (runs files: stack.framework nemo-automodel) and the planner
neither plans for it (--framework) nor writes its files.

Every trait is read from NVIDIA-NeMo/Automodel at commit 8d9bfb9 (2025-10-08, the performance summary's), cited as
AM:<path>: the benchmark configs examples/benchmark/configs/*_te_deepep.yaml (BackendConfig attn te (flex for
gpt-oss), linear te, rms_norm te, enable_deepep true, fake_balanced_gate true; parallelizer activation_checkpointing;
torch.optim.Adam; MaskedCrossEntropy fp32_upcast false; no compile section), the MoE layer
nemo_automodel/components/moe/layers.py, its dispatcher components/moe/megatron/token_dispatcher.py and the
parallelizer components/moe/parallelizer.py. Where AutoModel runs the same PyTorch runtime as torchtitan (FSDP2,
torch.distributed.pipelining, the CUDA caching allocator) the torchtitan stack's measured values are taken, and say
so."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.stacks.base import NO_EMITTER, Stack
from planner.stacks.rules import embedding_loss_units_split, uneven_stages_split_into_vpp

if TYPE_CHECKING:
    from planner.specs.model import ModelSpec
    from planner.specs.plan import ParallelPlan
    from planner.specs.training import TrainingSpec


def moe_parallelizer_limits(model: ModelSpec, train: TrainingSpec, p: ParallelPlan) -> list[str]:
    """AutoModel's MoE parallelizer asserts no tensor and no context parallelism (AM:components/moe/parallelizer.py
    parallelize_model: "Tensor parallelism not supported for DeepSeek v3 model", the same for CP)."""
    if model.moe is None:
        return []
    return [f"{name}={n} is not supported by NeMo AutoModel's MoE parallelizer (it asserts {name} 1)"
            for name, n in (("tp", p.tp), ("cp", p.cp)) if n > 1]


STACK = Stack(
    name="NeMo AutoModel (FSDP2 + TE + DeepEP)",
    framework="automodel",
    covers=("NeMo AutoModel",),
    emitter=NO_EMITTER,  # no emitter writes AutoModel configs: a costing stack (module docstring)
    # no AutoModel peak is published; its runtime is torchtitan's (FSDP2, the caching allocator, cuBLAS workspaces):
    # the torchtitan stack's fitted 2.5 GiB (planner/stacks/torchtitan.py). DeepEP's buffers are counted on their own
    # (moe.dispatcher_buffer_bytes)
    overhead_gib=2.5,
    # MaskedCrossEntropy(fp32_upcast=False) (every *_te_deepep.yaml): torch cross_entropy on the bf16 logits, whose
    # saved log-softmax output, incoming gradient and input gradient are bf16: the torchtitan stack's three tensors
    # (measured at 4 B each with its fp32 upcast) at 2 B each
    logit_bytes=6.0,
    loss_parallel_logit_bytes=None,  # no TP with MoE models (moe_parallelizer_limits): no vocab-parallel loss
    # FP8 weights: its benchmark configs train in bf16 (no fp8 section at 8d9bfb9), so no FP8 weight copy and no FP8
    # all-gather are modelled for it (Stack.fp8_weight_cache / fp8_param_gather_option)
    fp8_weight_cache=False,
    fp8_param_gather_option=False,  # FSDP2 gathers its bf16 parameters (no float8 converter in the benchmarks)
    fp8_param_gather_offload_recipes=None,  # no FP8 primary weights (fp8_param_gather_option)
    # no whole-step CUDA graph: its benchmark configs dispatch with DeepEP, whose normal dispatch returns the token
    # counts to the host (NVIDIA-NeMo/Automodel@8d9bfb9 examples/benchmark/configs/*_te_deepep.yaml)
    full_iteration_cuda_graph_option=False,
    fp8_attention_option=False,  # its benchmark configs train in BF16 (no FP8 attention run to model)
    # FSDP2 + EP without tensor parallelism of the experts (the AutoModel MoE recipes set no TP)
    etp_default="one",
    ep_unset_is_one=False,  # an AutoModel record's null EP is not published: the search picks it
    # GroupedExperts keeps gate_and_up_projs / down_projs as one (n_routed_experts, ...) parameter each
    # (NVIDIA-NeMo/Automodel components/moe/layers.py GroupedExperts.__init__); fully_shard gathers the block at once
    moe_experts_stacked=True,
    # FSDP2 MixedPrecisionPolicy(param_dtype bf16, reduce_dtype float32) (AM:components/moe/parallelizer.py apply_fsdp)
    grad_reduce_dtype="fp32",
    grad_buffer_in_reduce_dtype=False,  # FSDP2 keeps no separate gradient buffer (as torchtitan)
    grads_in_param_dtype=False,  # FSDP2 reduces in reduce_dtype (fp32) whatever the parameters
    # FSDP2 mixed precision shards the parameters in the dtype they are built in (the run's param_dtype; the MoE
    # benchmarks build them in bf16: planner.analysis.validate RECIPE_PRECISION) and unshards them in bf16
    zero3_fp32_sharded_params=True,
    # Transformer Engine Linear in bf16 (linear: te); the benchmarks train in bf16 (no fp8 section)
    fp8_saves_gemm_inputs=False,
    # activation_checkpointing wraps each block whole (AM:components/moe/parallelizer.py apply_ac:
    # ptd_checkpoint_wrapper); its selective policy (ignore_router) keeps the router GEMM's output: module-level saves
    selective_saves="modules",
    # the dense and shared-expert MLP runs F.silu(gate_proj(x)) * up_proj(x) eagerly (AM:components/moe/layers.py MLP)
    eager_swiglu_keeps_act=True,
    norm_keeps_rstd=False,  # Transformer Engine RMSNorm (rms_norm: te): fp32 statistics per token, not counted
    caching_allocator=True,  # PyTorch's CUDA caching allocator
    launch_loss_chunks=1,  # (no emitter) MaskedCrossEntropy over the whole micro-batch
    compile_fuses_loss=False,  # the loss is not compiled (no compile section in the benchmark configs)
    chunked_loss_option=False,  # MaskedCrossEntropy runs in one piece
    zero3_resident_per_matrix=False,  # fully_shard per transformer block (AM:components/moe/parallelizer.py apply_fsdp)
    custom_remat_option=False,  # no named-tensor remat policy
    activation_offload_modules=(),  # no module-level activation offloading (Megatron's)
    searched_remat_offloads=(),  # no named-tensor remat policy to search
    # with PP, gradient sync and resharding are deferred to the last backward (AM:components/moe/fsdp_mixin.py
    # patched_backward_maybe_with_nosync), the torchtitan runtime's behaviour
    zero3_unsharded_under_pp=True,
    pipeline_memory_schedule=None,  # the plan's: torch.distributed.pipelining runs the schedule it names
    # AutoPipeline builds torch.distributed.pipelining stages (AM:components/distributed/pipelining): torch's
    # per-micro-batch receive buffers, as the torchtitan stack counts them
    pp_buffers_per_microbatch=True,
    # Transformer Engine Linear and DotProductAttention (cuDNN fused attention) and RMSNorm (BackendConfig linear /
    # attn / rms_norm "te"): modelled at the Megatron+TE ceilings, not PyTorch-native ones. (gpt-oss's configs set
    # attn: flex, torch's FlexAttention; the attention is still costed at the fused-attention ceiling)
    pytorch_native_kernels=False,
    cudnn_attention=False,  # gpt-oss's configs run torch's FlexAttention (above); not the cuDNN per-head-dim figure
    # what TE does not fuse runs eagerly (no compile section in the benchmark configs): the stack takes --compile
    eager_unless_compiled=True,
    # RoPE through eager cos / sin products (AM:components/models/gpt_oss/layers.py _apply_rotary_emb, used by
    # qwen3_moe too) and the dense / shared-expert SwiGLU (MLP.forward); the routed experts' activation is compiled
    # (AM:components/moe/megatron/moe_utils.py weighted_bias_swiglu_impl, layers.py quick_geglu_deepep:
    # @torch.compile) and the norms are TE's. Its real-valued rotation (chunk, four products, a sum, a difference,
    # cat) moves about 18 B per q/k element eagerly, charged as torchtitan's complex form
    # (compute.EAGER_ROPE_EXTRA_BYTES)
    eager_composites=("swiglu", "rope"),
    fused_loss_option=False,  # torch cross entropy (MaskedCrossEntropy), no fused-loss kernel
    fp8_lm_head=False,  # bf16 benchmarks; the LM head is not under an FP8 recipe
    # BackendConfig enable_deepep true: GroupedExpertsDeepEP with MoEFlexTokenDispatcher over DeepEP
    # (AM:components/moe/layers.py); without DeepEP, GroupedExperts gathers every token of the EP group
    # (DTensor full_tensor) and reduce-scatters the output (Partial -> Shard): the all-gather dispatcher
    moe_dispatcher="flex",
    moe_dispatchers=("flex", "allgather"),  # the two above (enable_deepep true / false); no emitter selects either
    moe_searched_dispatchers=(),  # no emitter writes AutoModel's dispatcher choice (moe_dispatchers)
    # DeepEP's normal dispatch hands the per-expert counts to the host (AM:components/moe/megatron/fused_a2a.py
    # torch.tensor(num_recv_tokens_per_expert_list)) and grouped_gemm takes them on the CPU (fanshiqing/grouped_gemm
    # v1.1.4 csrc/grouped_gemm.cu: TORCH_CHECK(batch_sizes.is_cpu()))
    moe_dispatch_host_sync=True,
    moe_permute="fused",  # MegatronMoEConfig(moe_permute_fusion=True) (layers.py init_token_dispatcher)
    moe_permute_tp_replicated=False,  # Megatron-core's dispatcher: each TP rank permutes its 1 / tp of the tokens
    moe_alltoall_sorts_by_local_expert=False,  # no alltoall dispatcher: flex or all-gather only (above)
    moe_flex_backend="deepep",  # BackendConfig enable_deepep: DeepEP's Buffer (AM:components/moe/megatron/fused_a2a.py)
    # DeepEP delivers tokens rank-major; _DeepepManager.get_permuted_hidden_states_by_experts then runs the fused
    # permute (AM:components/moe/megatron/token_dispatcher.py permute(..., fused=permute_fusion))
    moe_flex_permute="fused",
    # the shared experts run on their own CUDA stream beside the routed experts' dispatch (layers.py MoE.forward:
    # _shared_experts_stream)
    moe_shared_expert_overlap=("flex", "allgather"),  # with either of its dispatchers
    moe_router_fused=False,  # Gate.forward: F.linear, softmax / sigmoid, torch.topk as separate ops
    # grouped_gemm's ops.gmm runs one cuBLAS GEMM per local expert on SM90 (fanshiqing/grouped_gemm v1.1.4
    # csrc/grouped_gemm.cu GroupedGemm: "Use cuBLAS for SM90", CublasGroupedGemm loops over the experts, round robin
    # over NUM_STREAM 4 cuBLAS streams: the kernel scheme of Transformer Engine's GroupedLinear, so the same grouped
    # efficiency, calibration.MOE_GROUPED_GEMM_REL_EFFICIENCY)
    moe_gemm_per_expert=True,
    moe_grouped_row_tile=None,  # one cuBLAS GEMM per local expert (above)
    # gpt-oss's expert biases run eagerly around the grouped GEMMs (AM:components/moe/layers.py
    # GroupedExpertsDeepEP._apply_bias: per local expert t + b after fc1 and t + b x p after fc2 with DeepEP's fp32
    # probabilities, torch.cat, cast back; the clamped GLU itself is @torch.compile'd, quick_geglu_deepep). Not priced
    # yet: the fc1 bias at one read and one write per op (16 B forward, 4 B backward per intermediate element) and the
    # fc2 bias as compute.fc2_bias_bytes(4) would move the gpt-oss-20b 8xH100 row from +33% to +47% and gpt-oss-120b
    # 64xH100 from -10% to -2% (2026-11-26), both priced at the grouped efficiency the single-node rows contradict
    # (calibration.MOE_GROUPED_GEMM_REL_EFFICIENCY)
    moe_expert_epilogue_eager=False,
    yarn_rope_unfused=False,  # its rotary embedding is priced by eager_composites or fused
    moe_a2a_overlap_option=False,  # no batch-level EP overlap
    moe_capacity_einsum=False,  # dropless (no capacity factor)
    # fake_balanced_gate: FakeBalancedGate routes token i to experts (i x top_k + j) mod E with equal weights and no
    # router (layers.py FakeBalancedGate.forward)
    moe_forced_routing="round_robin",
    # AutoModel checkpoints whole blocks (apply_ac); its only finer policy (ignore_router) still recomputes all but the
    # router GEMM. Its runs pin recompute full or none; a searched "selective" is costed as the attention core
    selective_recomputes="attention_core",
    selective_keeps=(),  # no named-save policy: a searched selective is costed as the attention core
    zero3_gather="block",  # fully_shard per transformer block: one all-gather per block
    zero3_regather_on_recompute=False,  # FSDP2 unshards a block once before its recompute (checkpoint inside)
    legacy_zero3_option=False,  # the blocking 2021 ZeRO-3 is DeepSpeed's
    zero_is_distributed_optimizer=False,  # FSDP2 shards with its own API
    # FSDP2Manager's device mesh (pp, dp_replicate, dp_shard, cp, tp), tp innermost
    # (AM:components/distributed/fsdp2.py), as torchtitan's
    rank_order="linear",
    pp_p2p_scatter_gather=False,  # torch.distributed.pipelining sends the full activation
    tp_overlap_evidence="none",  # no TP with MoE models (moe_parallelizer_limits)
    searched_zero_stages=(3,),  # FSDP2Manager shards with fully_shard whenever dp_shard > 1
    hsdp_searched=True,  # FSDP2Manager takes dp_replicate_size: HSDP
    zero3_in_domain_searched=False,  # its ZeRO-3 is already among the searched stages
    pipeline_layout_option=False,  # layers_per_stage with first/last stage sizes only (its rules below)
    plan_rules=(  # each rule cited above it
        moe_parallelizer_limits,
        # AutoPipeline splits stages with torch.distributed.pipelining as torchtitan does (layers_per_stage,
        # round_virtual_stages_to_pp_multiple): the same stage rules
        uneven_stages_split_into_vpp("NeMo AutoModel", "layers_per_stage"),
        embedding_loss_units_split("NeMo AutoModel"),
    ),
)
