"""PyTorch-native FSDP2 stacks: torchtitan (and llm-foundry, NeMo AutoModel as FSDP2): TrainingSpec framework
"fsdp" (the framework's name; "FSDP" the sharding is zero_stage 3), launch files by planner/emit/torchtitan.py."""

from __future__ import annotations

from planner.stacks.base import Stack
from planner.stacks.rules import embedding_loss_units_split, uneven_stages_split_into_vpp

STACK = Stack(
    name="torchtitan (FSDP2)",
    framework="fsdp",
    covers=("torchtitan", "llm-foundry", "PyTorch FSDP2"),
    emitter="torchtitan",
    # what torch.cuda.max_memory_reserved (torchtitan's reported peak) holds beyond the modelled tensors (cuBLAS
    # workspaces, float8 scales, unreused allocator blocks): fitted on the 27 published torchtitan peaks
    # (runs/known_runs_dev.yaml, known_runs_memory.yaml) for the least median |error| once the activation terms were
    # measured on torchtitan's real model (issue 22): 2.0 -> 3.0 GiB, median 7.8% -> 6.6% (p90 20.7% -> 22.4%); refitted
    # after the loss-parallel term and the Table 5 micro-batches (branch mem3): 3.0 -> 2.5 GiB,
    # median 6.1% -> 4.9% (p90 16.7% -> 17.3%)
    overhead_gib=2.5,
    # torch cross_entropy on fp32-upcast logits: the saved fp32 log-softmax output, its incoming fp32 gradient and
    # the fp32 input gradient coexist at the start of backward (3 x 4 B; measured on torchtitan 0.3.0's
    # CrossEntropyLoss, tests/costmodel/test_memory_real_code.py)
    logit_bytes=12.0,
    # with TP the vocabulary is sharded and the loss is vocab-parallel (torchtitan's default loss_parallel: torch's
    # loss_parallel() DTensor handlers until 2025, torchtitan 0.3.0's _LossParallelCrossEntropy): its fused NLL +
    # log-softmax backward keeps the saved fp32 log-probabilities and builds (zeros_like(x) + exp(x)) * grad, three
    # more fp32 tensors: 4 x 4 B (torch/distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward;
    # measured on CPU for both, tests/costmodel/test_memory_real_code.py)
    loss_parallel_logit_bytes=16.0,
    # torchao Float8Linear (tensorwise dynamic scaling) casts weights on the fly for each GEMM and saves the 16-bit
    # weight itself for backward: no persistent FP8 copy (torchao 0.18 float8_linear.py matmul_with_hp_or_float8_args;
    # measured on CPU, tests/costmodel/test_memory_fp8_real_code.py). torchao eab345c (Dec 2024) saved the FP8 cast
    # instead, which checkpointed layers (every published torchtitan peak: selective op or full AC) recompute
    fp8_weight_cache=False,
    # --float8.enable_fsdp_float8_all_gather: FSDP2 all-gathers the linears' weights cast to float8 (torchao
    # fsdp_utils.py WeightWithDynamicFloat8CastTensor fsdp_pre_all_gather / fsdp_post_all_gather: 1-byte data
    # wrapped in a Float8Tensor, measured on CPU in tests/costmodel/test_memory_fp8_real_code.py; torchtitan
    # float8.py enable_fsdp_float8_all_gather when dp_shard > 1)
    fp8_param_gather_option=True,
    fp8_param_gather_offload_recipes=None,  # no optimizer-only offload to pair its float8 all-gather with
    # torchtitan 0.3.0 graphs forward+backward unless --training.disable_cuda_graphs (trainer.py wrap_with_cuda_graph),
    # refused with PP and with EP but for sync-free dispatchers (Trainer.Config._validate_cuda_graphs); the emitted
    # MoE jobs disable it (planner.emit.torchtitan), so its MoE host launches stay charged: not the Megatron knob
    full_iteration_cuda_graph_option=False,
    # the float8 converter swaps nn.Linear modules only (torchao convert_to_float8_training): SDPA keeps the compute
    # dtype, no FP8 attention switch
    fp8_attention_option=False,
    # experts whole unless told: parallelism.expert_tensor_parallel_degree defaults to 1, "1 means disabled"
    # (torchtitan aeb3a4baf, Aug 2025, config/job_config.py; ETP itself deprecated in c4b409af2)
    etp_default="one",
    ep_unset_is_one=False,  # a torchtitan record's null EP is not published: the search picks it
    # GroupedExperts keeps w1 / w2 / w3 as one (num_experts, ...) parameter each (torchtitan 0.3.0
    # models/common/moe.py GroupedExperts.__init__ w1_EFD, w2_EDF, w3_EFD); fully_shard gathers the block at once
    moe_experts_stacked=True,
    grad_reduce_dtype="fp32",  # FSDP2 MixedPrecisionPolicy reduce_dtype fp32 (torchtitan mixed_precision_reduce)
    grad_buffer_in_reduce_dtype=False,  # replicated (DDP-style) PyTorch keeps .grad in the compute dtype
    grads_in_param_dtype=False,  # FSDP2 mixed precision reduces in reduce_dtype (fp32) whatever the parameters
    zero3_fp32_sharded_params=True,  # FSDP2 mixed precision: fp32 sharded parameters, bf16 only when gathered
    fp8_saves_gemm_inputs=False,  # torchao Float8Linear: the planner counts its saved inputs at 2 B
    # op-level selective AC (torchtitan distributed/activation_checkpoint.py SelectiveAC): the block input, the
    # QKV output, the attention output and its logsumexp, the w1 and w2 outputs (every second matmul recomputed);
    # measured on torchtitan 0.3.0's Llama (tests/costmodel/test_memory_real_code.py); MoE layers: about half the
    # tensors
    selective_saves="op_sac",
    # measured on torchtitan 0.3.0's FeedForward (tests/costmodel/test_memory_real_code.py): eager SwiGLU keeps
    # silu(gate)
    eager_swiglu_keeps_act=True,
    # CUDA's aten::_fused_rms_norm keeps (input, rstd, weight) (torch 2.13 derivatives.yaml)
    norm_keeps_rstd=True,
    caching_allocator=True,  # PyTorch's CUDA caching allocator
    # torchtitan 0.3.0's Llama 3 / Qwen3 configs and the planner's emitted torchtitan_model.py run
    # ChunkedLossWrapper (Config.num_chunks = 8, torchtitan components/loss.py)
    launch_loss_chunks=8,
    # torchtitan compiles its loss with --compile since PR #1033 (April 2025; 0.3.0 BaseLoss._maybe_compile): Inductor
    # fuses the cross entropy, which keeps the bf16 logits and writes a bf16 gradient
    compile_fuses_loss=True,
    chunked_loss_option=True,  # ChunkedLossWrapper (torchtitan components/loss.py)
    zero3_resident_per_matrix=False,  # fully_shard per block: the whole block is unsharded at once
    custom_remat_option=False,  # no named-tensor remat policy
    activation_offload_modules=(),  # no module-level activation offloading (Megatron's)
    searched_remat_offloads=(),  # no named-tensor remat policy to search
    # with PP, FSDP keeps the stage's parameters unsharded between micro-batches (torchtitan:
    # reshard_after_forward=False with PP) and reduces the unsharded gradients after the last micro-batch
    # (torch.distributed.pipelining backward_maybe_with_nosync)
    zero3_unsharded_under_pp=True,
    pipeline_memory_schedule=None,  # the plan's: torch.distributed.pipelining runs the schedule it names
    # torch.distributed.pipelining's PipelineStage creates one receive buffer per micro-batch for the input
    # (_prepare_forward_infra: args_recv_info[chunk] for every chunk, _make_tensor_from_meta) and one for the output's
    # gradient (_setup_backward_recv_info: grad_recv_info[mb_index] for every micro-batch), and keeps each output in
    # fwd_cache until that micro-batch's backward (torch 2.13 stage.py; PiPPy PR #1058, April 2024, the same layout)
    pp_buffers_per_microbatch=True,
    # no Transformer Engine: a fraction of Megatron+TE's efficiency on NVIDIA parts with FP8 tensor cores
    # (calibration.PYTORCH_NATIVE_HOPPER_EFFICIENCY, fitted on the torchtitan and llm-foundry H100 rows)
    pytorch_native_kernels=True,
    cudnn_attention=False,  # SDPA / FlashAttention-2
    # eager PyTorch runs each elementwise op as its own kernel; torchtitan --compile.enable fuses them (Inductor)
    eager_unless_compiled=True,
    # all of them: nn.RMSNorm, F.silu(w1(x)) * w3(x) in the FeedForward and over the grouped experts' GEMMs, RoPE
    # through complex numbers (torchtitan 0.3.0 models/common/nn_modules.py, feed_forward.py, moe.py, rope.py)
    eager_composites=("rmsnorm", "swiglu", "expert_swiglu", "rope"),
    # flash-attn's fused CrossEntropyLoss (llm-foundry ComposerMPTCausalLM loss_fn 'fused_crossentropy')
    fused_loss_option=True,
    fp8_lm_head=False,  # torchtitan's float8 converter skips "output" (filter_fqns)
    moe_dispatcher="alltoall",  # all_to_all_single (torchtitan 0.3.0 models/common/token_dispatcher.py)
    moe_dispatchers=("alltoall",),  # the torchtitan emitter writes no DeepEP / HybridEP comm_backend
    moe_searched_dispatchers=(),  # the torchtitan emitter selects no other (moe_dispatchers)
    # AllToAllTokenDispatcher._sync_token_count_exchange copies the split sizes to the host: "this would incur a
    # device-to-host sync"
    moe_dispatch_host_sync=True,
    moe_permute="unfused",  # permute by index gather (generate_permute_indices + indexing), not fused
    moe_permute_tp_replicated=False,  # not modelled: its TP shards the tokens before the MoE (sequence parallel)
    # not modelled yet: under EP its AllToAllTokenDispatcher also reorders the received tokens rank-major ->
    # expert-major and back (torchtitan 0.3.0 models/common/token_dispatcher.py _permute / _unpermute); its rows are
    # not re-scored with it
    moe_alltoall_sorts_by_local_expert=False,
    moe_flex_backend="deepep",  # no flex dispatcher (moe_dispatchers above): the default, never priced
    moe_flex_permute="fused",  # no flex dispatcher (moe_dispatchers); a DeepEP dispatch would permute after it
    # --debug.moe_force_load_balance: the router still scores, then its top-k ids are replaced by a round robin,
    # arange(tokens x top_k) % E (torchtitan 0.3.0 models/common/moe.py _debug_force_load_balance_routing)
    moe_forced_routing="round_robin_scored",
    moe_shared_expert_overlap=(),  # the shared expert runs after the routed ones on the same stream
    moe_router_fused=False,  # torch.topk over the scores
    moe_gemm_per_expert=False,  # torch._grouped_mm: one kernel for all local experts
    moe_grouped_row_tile=None,  # torch._grouped_mm tiles each expert's GEMM as its own problem
    moe_expert_epilogue_eager=False,  # no gpt-oss expert path priced
    yarn_rope_unfused=False,  # its rotary embedding is priced by eager_composites or fused
    moe_a2a_overlap_option=False,  # none
    moe_capacity_einsum=False,  # no capacity padding
    # SelectiveAC "recomputes every second matmul": half the GEMMs and the elementwise work
    selective_recomputes="half_gemms",
    selective_keeps=(),  # no named-save policy: op-level SAC by position, not by name
    zero3_gather="block",  # torchtitan applies fully_shard per transformer block: one all-gather per block
    zero3_regather_on_recompute=False,  # FSDP2 unshards a block once before its recompute (checkpoint inside)
    legacy_zero3_option=False,  # the blocking 2021 ZeRO-3 is DeepSpeed's (DeepSpeed PR #1188)
    zero_is_distributed_optimizer=False,  # FSDP (Zhao et al. 2023, arXiv 2304.11277) shards with its own API
    rank_order="linear",  # pp -> dp_replicate -> dp_shard -> cp -> tp, tp innermost (parallel_dims.py build_mesh)
    pp_p2p_scatter_gather=False,  # sends the full activation unless sequence parallelism shards it
    # torchtitan's Dec 2024 H100 benchmark runs AsyncTP where its id or table title says so
    # (benchmarks/llama3_h100_202412_torchtitan.md Tables 4-6)
    tp_overlap_evidence="async_tp",
    searched_zero_stages=(3,),  # torchtitan shards with FSDP2 (fully_shard) whenever dp_shard > 1
    hsdp_searched=True,  # HSDP: data_parallel_replicate_degree x one shard group per scale-up domain
    zero3_in_domain_searched=False,  # its ZeRO-3 is already among the searched stages (searched_zero_stages)
    pipeline_layout_option=False,  # layers_per_stage, first/last_stage_less_layers (emit/torchtitan.py)
    # torchtitan's own rules imply these two (TT:distributed/pipeline_parallel.py:400-427: no stage sizes with
    # virtual stages; layers + the embedding and output units split over pp x vpp stages). It has no rule on the
    # interleaved micro-batch count beyond n % (n // pp) (torch 2.13 pipelining schedules.py:2935-2942)
    plan_rules=(
        uneven_stages_split_into_vpp("torchtitan", "pipeline_parallel_first/last_stage_less_layers"),
        embedding_loss_units_split("torchtitan"),
    ),
)
