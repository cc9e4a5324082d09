"""DeepSpeed (ZeRO) with Megatron-DeepSpeed models: TrainingSpec framework "deepspeed", launch files by
planner/emit/deepspeed.py."""

from __future__ import annotations

from planner.stacks.base import Stack
from planner.stacks.rules import embedding_loss_units_split, interleaved_microbatches, uneven_stages_split_into_vpp

STACK = Stack(
    name="DeepSpeed",
    framework="deepspeed",
    covers=("DeepSpeed", "Megatron-DeepSpeed"),
    emitter="deepspeed",
    # CUDA context (~0.5 GiB) + NCCL per-communicator buffers; was calibration.FRAMEWORK_OVERHEAD_GIB["deepspeed"]
    overhead_gib=3.0,
    logit_bytes=6.0,  # Megatron-DeepSpeed keeps Megatron's vocab-parallel cross entropy (4 B fp32 + 2 B gradient)
    loss_parallel_logit_bytes=None,  # logit_bytes is already the vocab-parallel loss's, whatever the TP degree
    fp8_weight_cache=False,  # no FP8 training switch in ds_config (launchers/deepspeed.py no-fp8): no FP8 weights
    fp8_param_gather_option=False,  # ZeRO-3 gathers the 16-bit parameters (no FP8 all-gather in ds_config)
    fp8_param_gather_offload_recipes=None,  # no FP8 primary weights (fp8_param_gather_option)
    full_iteration_cuda_graph_option=False,  # ds_config has no whole-step CUDA graph of the training step
    fp8_attention_option=False,  # no FP8 training switch in ds_config (launchers/deepspeed.py no-fp8)
    # experts whole on each expert-parallel rank: Megatron-DeepSpeed splits them over TP only with
    # --enable-expert-tensor-parallelism (default off; deepspeed/moe/layer.py enable_expert_tensor_parallelism=False)
    etp_default="one",
    ep_unset_is_one=False,  # a DeepSpeed record's null EP is not published: the search picks it
    # DeepSpeed-MoE's Experts holds a ModuleList, one expert module each (deepspeed/moe/experts.py deepspeed_experts)
    moe_experts_stacked=False,
    grad_reduce_dtype="compute",  # reduced in the compute dtype (TrainingSpec.grad_dtype: DeepSpeed's default)
    grad_buffer_in_reduce_dtype=True,  # DeepSpeed's gradient buffer holds the reduction dtype
    grads_in_param_dtype=False,  # fp32 master weights: gradients follow grad_reduce_dtype
    zero3_fp32_sharded_params=False,  # bf16/fp16 weights + fp32 master in the optimizer (ZeRO sec. 3.1, K=12)
    fp8_saves_gemm_inputs=False,  # no FP8 training switch in ds_config (launchers/deepspeed.py no-fp8)
    selective_saves="modules",  # Megatron-DeepSpeed's selective recompute: the attention core (Korthikanti sec. 5)
    # Megatron-core's fused bias_swiglu_impl keeps only its input (the fc1 output) for backward
    eager_swiglu_keeps_act=False,
    norm_keeps_rstd=False,  # Transformer Engine's norm statistics: fp32 per token, negligible and not counted
    caching_allocator=True,  # PyTorch's CUDA caching allocator
    launch_loss_chunks=1,  # the loss over the whole micro-batch
    compile_fuses_loss=False,  # no --compile
    chunked_loss_option=False,  # the vocab-parallel loss runs in one piece
    zero3_resident_per_matrix=False,  # its own module-by-module rule (zero3_gather "tensor")
    custom_remat_option=False,  # no named-tensor remat policy
    activation_offload_modules=(),  # no module-level activation offloading (Megatron's)
    searched_remat_offloads=(),  # no named-tensor remat policy to search
    zero3_unsharded_under_pp=False,  # its pipeline engine runs ZeRO 0-1 only (DS:runtime/pipe/engine.py:76-77)
    pipeline_memory_schedule=None,  # the plan's: its engine runs 1F1B (TrainSchedule)
    # its pipeline engine reserves pipe buffers for the in-flight micro-batches only (runtime/pipe/engine.py
    # _reserve_pipe_buffers(pipe_schedule.num_pipe_buffers()), TrainSchedule: min(stages - stage_id, micro_batches))
    pp_buffers_per_microbatch=False,
    pytorch_native_kernels=False,  # Megatron kernels: modelled at the Megatron ceilings
    cudnn_attention=False,  # flash-attn / PyTorch attention kernels
    eager_unless_compiled=False,  # Megatron-DeepSpeed's fused kernels; no --compile
    eager_composites=(),  # none runs op by op (above)
    fused_loss_option=False,  # its vocab-parallel loss is counted by logit_bytes
    fp8_lm_head=False,  # the LM head stays 16-bit under FP8 recipes, as in Megatron
    moe_dispatcher="alltoall",  # DeepSpeed-MoE: GShard-style all-to-all of capacity-padded tokens
    moe_dispatchers=("alltoall",),  # DeepSpeed-MoE has one
    moe_searched_dispatchers=(),  # DeepSpeed-MoE has one dispatcher (moe_dispatchers)
    moe_dispatch_host_sync=False,  # capacity gating with static shapes (einsum dispatch): nothing read on the host
    moe_permute="unfused",  # einsum dispatch / combine masks, not a fused permute
    moe_permute_tp_replicated=False,  # not modelled: its einsum dispatch is priced per TP rank's share of the tokens
    moe_alltoall_sorts_by_local_expert=False,  # not modelled: its einsum capacity buffers' copies are moe_permute's
    moe_flex_backend="deepep",  # no flex dispatcher (moe_dispatchers above): the default, never priced
    moe_flex_permute="fused",  # no flex dispatcher (moe_dispatchers)
    moe_forced_routing="random_scores",  # no forced gate of its own: top-k gating over scores (sharded_moe.py)
    moe_shared_expert_overlap=(),  # no shared-expert stream
    moe_router_fused=False,  # top-k gating in PyTorch ops (deepspeed/moe/sharded_moe.py)
    moe_gemm_per_expert=False,  # experts batched by einsum over the local experts
    moe_grouped_row_tile=None,  # equal capacity buffers, one batched GEMM
    moe_expert_epilogue_eager=False,  # no gpt-oss expert path priced
    yarn_rope_unfused=False,  # its rotary embedding is priced by eager_composites or fused
    moe_a2a_overlap_option=False,  # none
    moe_capacity_einsum=False,  # its einsums span the micro-batch: costed as permute passes
    selective_recomputes="attention_core",  # Korthikanti et al. 2022 sec. 5
    selective_keeps=(),  # no named-save policy: its selective recompute is the attention core
    # DeepSpeed partitions and gathers every parameter tensor on its own (ZeRO-Infinity, Rajbhandari et al. SC21,
    # arXiv 2104.07857, sec. 6.1), module by module up to stage3_max_live_parameters, gradients through
    # reduce_bucket_size (DeepSpeed config docs; calibration.DEEPSPEED_MAX_LIVE_PARAMS, _REDUCE_BUCKET_PARAMS)
    zero3_gather="tensor",
    # a gathered parameter is kept for backward only within stage3_max_reuse_distance parameters (DeepSpeed config
    # docs; calibration.DEEPSPEED_MAX_REUSE_DISTANCE_PARAMS)
    zero3_regather_on_recompute=True,
    # ZeRO-3 before v0.5.x (2021): blocking gathers (DeepSpeed PR #1188; overlap arrived with PR #1453) and
    # all-reduced gradients (DeepSpeed issue #1173)
    legacy_zero3_option=True,
    zero_is_distributed_optimizer=False,  # ZeRO stages 1-3 since 2020 (Rajbhandari et al., SC20, arXiv 1910.02054)
    rank_order="linear",  # pipe-data-model, TP innermost (PipelineModule topology)
    pp_p2p_scatter_gather=False,  # the scatter/gather optimisation is modelled for Megatron-LM only (SC21 sec. 4.1)
    tp_overlap_evidence="none",  # Megatron-DeepSpeed has no TP communication overlap (MDS:megatron/arguments.py)
    searched_zero_stages=(1, 2, 3),  # ZeRO stages 1-3 are all first-class in ds_config
    hsdp_searched=False,  # shards over all data-parallel ranks: MiCS was removed in 0.19 (DS:runtime/zero/config.py)
    zero3_in_domain_searched=False,  # its ZeRO-3 is already among the searched stages (searched_zero_stages)
    pipeline_layout_option=False,  # type:transformer partitioning, first/last sizes (planner/launchers/deepspeed.py)
    # Megatron-DeepSpeed forked Megatron-LM's pipeline argument checks (MDS:megatron/arguments.py, megatron/
    # schedules.py); the DeepSpeed launcher refuses virtual stages and stage sizes altogether
    plan_rules=(
        interleaved_microbatches("Megatron"),
        uneven_stages_split_into_vpp("Megatron", "--decoder-first/last-pipeline-num-layers"),
        embedding_loss_units_split("Megatron"),
    ),
)
