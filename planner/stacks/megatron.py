"""Megatron-LM / megatron-core, and the stacks built on it (Megatron-Bridge, NeMo): TrainingSpec framework
"megatron", launch files by planner/emit/megatron.py."""

from __future__ import annotations

from planner.stacks.base import Stack
from planner.stacks.rules import (
    a2a_overlap_needs_vpp,
    embedding_loss_units_split,
    fp8_param_gather_needs_sharded_optimizer,
    fp8_param_gather_offload_recipes,
    interleaved_microbatches,
    offload_modules_runnable,
    partial_recompute_per_virtual_stage,
    recompute_modules_runnable,
)

# megatron-core's --recompute-modules choices (core_v0.19.0 transformer/transformer_config.py __post_init__
# allowed_modules; a plan naming another is refused by ParallelPlan)
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts",
                     "gdn_norm_out")


def unknown_recompute_modules(names: tuple[str, ...] | list[str]) -> list[str]:
    """The names among `names` that are not megatron-core recompute modules (RECOMPUTE_MODULES): the one check a plan
    (ParallelPlan.recompute_modules) and a runs file (plan.recompute_modules) make."""
    return sorted(set(names) - set(RECOMPUTE_MODULES))


# megatron-core's --offload-modules choices of fine-grained activation offloading (--fine-grained-activation-offloading;
# core_v0.19.2 and d98e8a64 transformer/transformer_config.py __post_init__ allowed_modules; a plan naming another is
# refused by ParallelPlan)
OFFLOAD_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act",
                   "fused_group_mlp", "gdp_qkv")
# the ones the cost model prices (memory.megatron_offload_tensors): fused_group_mlp needs Transformer Engine's op fuser
# (--use-transformer-engine-op-fuser) and gdp_qkv a GatedDeltaProduct mixer, neither of which the planner models
PRICED_OFFLOAD_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")


def unknown_offload_modules(names: tuple[str, ...] | list[str]) -> list[str]:
    """The names among `names` that are not megatron-core offload modules (OFFLOAD_MODULES): the one check a plan
    (ParallelPlan.offload_modules) and a runs file (plan.offload_modules) make."""
    return sorted(set(names) - set(OFFLOAD_MODULES))


# the ones the cost model prices (compute.selective_recompute_s, memory.selective_recompute_modules' users); the others
# are refused as not priced (rules.recompute_modules_runnable)
# the FP8 recipes with which FP8 primary weights (--fp8-param-gather) run beside the optimizer offloaded to the host:
# megatron-core 0.19.2 training/arguments.py validate_args, "When `--fp8-param-gather` is enabled, the optimizer cpu
# offload must be used in conjunction with `--fp8-recipe delayed`." [assert]
FP8_PARAM_GATHER_OFFLOAD_RECIPES = ("delayed",)
PRICED_RECOMPUTE_MODULES = ("core_attn", "layernorm", "moe_act", "mla_up_proj", "mlp", "moe")

STACK = Stack(
    name="Megatron-LM",
    framework="megatron",
    covers=("Megatron-LM", "megatron-core", "Megatron-Bridge", "NeMo"),
    emitter="megatron",
    # CUDA context (~0.5 GiB) + NCCL per-communicator buffers (NCCL_BUFFSIZE 4 MiB x channels x peers); was
    # calibration.FRAMEWORK_OVERHEAD_GIB["megatron"]
    overhead_gib=3.0,
    # vocab-parallel cross entropy (megatron/core/tensor_parallel/cross_entropy.py, also the fused variant): one
    # fp32 copy of the logits turned into the softmax in place and saved, backward in place, cast to 2 B: 4 + 2
    logit_bytes=6.0,
    loss_parallel_logit_bytes=None,  # logit_bytes is already the vocab-parallel loss's, whatever the TP degree
    # Transformer Engine's linears cache the quantized weight across a step's micro-batches: megatron-core passes
    # is_first_microbatch to TE (extensions/transformer_engine.py TELinear.forward, unless
    # --disable-parameter-transpose-cache; MegatronModule.set_is_first_microbatch at each step's first micro-batch) and
    # TE keeps the workspace in module._fp8_workspaces["weight"] (TE v2.9 module/linear.py get_weight_workspace
    # cache_name "weight"; grouped_linear.py "weight{i}" per expert GEMM) (memory.fp8_weight_copy_bytes)
    fp8_weight_cache=True,
    # --fp8-param-gather: FP8 primary weights (TE quantized_model_init), all-gathered in FP8 by the distributed
    # optimizer (megatron-core distributed_data_parallel_config.py fp8_param_gather)
    fp8_param_gather_option=True,
    fp8_param_gather_offload_recipes=FP8_PARAM_GATHER_OFFLOAD_RECIPES,  # delayed only (validate_args, above)
    # megatron-core 0.19.2 TransformerConfig.cuda_graph_impl "full_iteration" (--cuda-graph-impl full_iteration): one
    # CUDA graph of the whole forward-backward path, the optimizer step excluded; a dropless MoE layer in it needs
    # static shapes (moe_expert_rank_capacity_factor with HybridEP, moe_paged_stash: transformer_config.py)
    full_iteration_cuda_graph_option=True,
    # megatron-core TransformerConfig.fp8_dot_product_attention -> Transformer Engine's recipe fp8_dpa (set by
    # Megatron-Bridge's config; Megatron-LM's pretrain_gpt.py has no flag for it: launchers/contract.py): TE's
    # DotProductAttention runs the attention core in FP8 (TE 2.17.1 dot_product_attention.py, MXFP8 linears -> MXFP8
    # attention), backward too unless NVTE_FP8_DPA_BWD=0 (backends.py, default "1")
    fp8_attention_option=True,
    # an unset --expert-tensor-parallel-size is the TP degree (megatron-core >= 0.10 arguments.py validate_args: "if
    # args.expert_tensor_parallel_size is None: args.expert_tensor_parallel_size = args.tensor_model_parallel_size";
    # parallel_state.initialize_model_parallel applies the same default)
    etp_default="tp",
    # a published Megatron table that gives no EP is read as not published (the search picks it), not as the flag's
    # default 1 (--expert-model-parallel-size): its rows list the layout they ran where they give one
    ep_unset_is_one=False,
    # TEGroupedMLP / SequentialMLP hold one weight per local expert (megatron-core transformer/moe/experts.py:
    # weight0..weightN, a module per expert); its ZeRO-3 (Megatron-FSDP) gathers per block anyway
    moe_experts_stacked=False,
    grad_reduce_dtype="fp32",  # the fp32 main-grad buffer (TrainingSpec.grad_dtype; --grad-reduce-in-bf16 = bf16)
    grad_buffer_in_reduce_dtype=True,  # the main-grad buffer holds the reduction dtype (DistributedDataParallel)
    grads_in_param_dtype=False,  # fp32 master weights: gradients follow grad_reduce_dtype
    zero3_fp32_sharded_params=False,  # distributed optimizer: bf16 weights + sharded fp32 master (ZeRO sec. 3.1)
    fp8_saves_gemm_inputs=True,  # Transformer Engine FP8 linears save their GEMM inputs in FP8 for backward
    # --recompute-modules: core_attn for dense models (Korthikanti et al. 2022, arXiv 2205.05198, sec. 5); layernorm /
    # moe_act / mla_up_proj for MoE and MLA models (planner.costmodel.memory.selective_recompute_modules)
    selective_saves="modules",
    # Megatron-core's fused bias_swiglu_impl keeps only its input (the fc1 output) for backward
    eager_swiglu_keeps_act=False,
    norm_keeps_rstd=False,  # Transformer Engine's norm statistics: fp32 per token, negligible and not counted
    caching_allocator=True,  # PyTorch's CUDA caching allocator
    launch_loss_chunks=1,  # the loss over the whole micro-batch
    compile_fuses_loss=False,  # no --compile
    chunked_loss_option=False,  # the vocab-parallel loss runs in one piece
    zero3_resident_per_matrix=False,  # (ZeRO-3 is not Megatron's)
    custom_remat_option=False,  # no named-tensor remat policy
    # fine-grained activation offloading (--fine-grained-activation-offloading --offload-modules; megatron-core
    # docs/user-guide/features/fine_grained_activation_offloading.md): the modules whose saved tensors go to host memory
    # (memory.megatron_offload_tensors, compute.activation_offload_s), pinned only
    activation_offload_modules=PRICED_OFFLOAD_MODULES,
    searched_remat_offloads=(),  # no named-tensor remat policy to search
    zero3_unsharded_under_pp=False,  # Megatron-FSDP is not run with PP (launchers/megatron.py fsdp-with-pp)
    pipeline_memory_schedule=None,  # the plan's: megatron-core runs the schedule it names
    # Megatron-core's schedules receive into a tensor per p2p op and pseudo-free each sent output's data
    # (schedules.py deallocate_output_tensor, --deallocate-pipeline-outputs): no per-micro-batch buffers counted
    pp_buffers_per_microbatch=False,
    pytorch_native_kernels=False,  # Transformer Engine kernels: the efficiency ceilings are fitted on Megatron rows
    # Transformer Engine's DotProductAttention picks cuDNN's fused attention (FusedAttention, F16_arbitrary_seqlen) on
    # Hopper and Blackwell, the only backend for gpt-oss's learnable softmax sinks (TE
    # pytorch/attention/dot_product_attention/utils.py get_attention_backend: FlashAttention disabled for softmax_type
    # != vanilla) (base.attention_head_dim_rel)
    cudnn_attention=True,
    eager_unless_compiled=False,  # Transformer Engine fuses the norms, SwiGLU and RoPE already (no --compile)
    eager_composites=(),  # none runs op by op (above)
    fused_loss_option=False,  # its vocab-parallel loss, fused or not, is counted by logit_bytes
    fp8_lm_head=False,  # output_layer is a ColumnParallelLinear outside Transformer Engine's fp8_autocast
    moe_dispatcher="alltoall",  # Megatron-Bridge / NeMo recipes: --moe-token-dispatcher-type alltoall
    moe_dispatchers=("alltoall", "allgather", "flex"),  # --moe-token-dispatcher-type (emit/megatron.py)
    # the all-to-all dispatcher copies the per-expert token counts to the host (megatron-core 0.19.2
    # transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher cuda_sync_point / cuda_dtoh_point; the
    # all-gather dispatcher's tokens_per_expert .cpu())
    moe_dispatch_host_sync=True,
    moe_permute="fused",  # --moe-permute-fusion (TE moe_permute / moe_unpermute) in the recipes
    moe_permute_tp_replicated=False,  # the dispatcher permutes each TP rank's 1 / tp of the tokens (SP or the TP split)
    # HybridEP permutes inside its dispatch (megatron-core 0.19.2 token_dispatcher.py _HybridEPManager:
    # fused=moe_permute_fusion_into_hybridep); its DeepEP backend (_DeepepManager) permutes after the dispatch, which
    # this trait does not tell apart (the flex recipes are costed as HybridEP's)
    moe_flex_permute="in_dispatch",
    # --moe-router-force-load-balancing replaces the router's logits by random ones before its top-k (megatron-core
    # 0.19.2 transformer/moe/router.py: apply_random_logits; moe_utils.py logits.clone().normal_())
    moe_forced_routing="random_scores",
    # --moe-shared-expert-overlap (transformer/moe/shared_experts.py), which megatron-core takes with these
    # dispatchers only (0.19.2 transformer_config.py: "moe_shared_expert_overlap only works with alltoall or flex token
    # dispatcher")
    moe_shared_expert_overlap=("alltoall", "flex"),
    moe_router_fused=True,  # --moe-router-fusion (TE fused_topk_with_score_function)
    moe_gemm_per_expert=True,  # Transformer Engine's GroupedLinear: one cuBLAS GEMM per local expert
    moe_grouped_row_tile=None,  # each expert its own GEMM: no tile shared between experts
    # TEGroupedMLP without the TE op fuser (megatron-core core_r0.15-0.19 transformer/moe/experts.py): the clamp of the
    # GLU halves before the fused quick-GeGLU (fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl) and the fc2
    # bias scaled by the router probabilities (TEGroupedMLP._apply_bias: fc2 built with skip_bias_add=True) are eager
    moe_expert_epilogue_eager=True,
    # Megatron-LM training/arguments.py: "if args.position_embedding_type != 'rope': args.apply_rope_fusion = False";
    # Megatron-Bridge GPTModelProvider.provide does the same (utils/fusions.py validate_rope_fusion_compatibility), and
    # its gpt-oss bridge sets position_embedding_type "yarn"
    yarn_rope_unfused=True,
    moe_a2a_overlap_option=True,  # --overlap-moe-expert-parallel-comm (Megatron-core 0.14, MoE README)
    moe_capacity_einsum=False,  # pads the permuted tokens (fused permute)
    # MoEAlltoAllTokenDispatcher "Permutation 2: Sort tokens by local expert" after the all-to-all and "Unpermutation
    # 2" before the combine when num_local_experts > 1 (megatron-core core_v0.14.0 transformer/moe/token_dispatcher.py
    # dispatch_postprocess / combine_preprocess): sort_chunks_by_idxs (TE moe_sort_chunks_by_index under
    # --moe-permute-fusion) dropless, a view / transpose / contiguous copy of the capacity buffers when padded
    moe_alltoall_sorts_by_local_expert=True,
    # flex runs DeepEP unless a run names HybridEP (TrainingSpec.moe_flex_backend): what planner/emit/megatron.py writes
    # (--moe-flex-dispatcher-backend deepep)
    moe_flex_backend="deepep",
    # the flex dispatcher is searched beside alltoall where no dispatcher is pinned: NVIDIA's Megatron-Bridge
    # performance presets run DeepSeek-V3 with it on every system and Qwen3 / gpt-oss on several
    # (planner.analysis.validate FLEX_RECIPE_MODELS), so a plan without it may be slower than the expert's
    moe_searched_dispatchers=("flex",),
    # --recompute-modules (memory.selective_recompute_modules): the attention core for dense models (Korthikanti et al.
    # 2022 sec. 5), the MLA up-projections for MLA models; the norms and expert activations they re-run as memory-bound
    # passes (compute.recomputed_passes_s)
    selective_recomputes="modules",
    selective_keeps=(),  # no named-save policy: --recompute-modules names what re-runs
    zero3_gather="block",  # Megatron-FSDP gathers one flat buffer per transformer block
    zero3_regather_on_recompute=False,  # the block stays gathered from the recomputed forward to its backward
    legacy_zero3_option=False,  # the blocking 2021 ZeRO-3 is DeepSpeed's (DeepSpeed PR #1188)
    # ZeRO-1/2 is the distributed optimizer, which arrived after Korthikanti et al. 2022 (arXiv 2205.05198)
    zero_is_distributed_optimizer=True,
    rank_order="linear",  # tp-cp-ep-dp-pp, TP innermost (megatron/core/parallel_state.py RankGenerator)
    # each TP rank sends 1/tp of the activation without sequence parallelism too (scatter/gather optimisation,
    # Narayanan et al. SC21, arXiv 2104.04473, sec. 4.1)
    pp_p2p_scatter_gather=True,
    # NVIDIA's benchmark recipes run Transformer Engine userbuffers overlap with TP > 1 (dgxc-benchmarking
    # nemo_megatron/gpt3_175b_hydra.yaml ub_tp_comm_overlap: true; Megatron-Bridge CommOverlapConfig)
    tp_overlap_evidence="nvidia_recipes",
    # the distributed optimizer is the default; the published ZeRO-3 runs at scale (SC21 Table 2) ran 1.5-5x
    # slower than its bandwidth model, so ZeRO-3 (Megatron-FSDP) only where the replica group fits one domain
    searched_zero_stages=(1,),
    hsdp_searched=False,  # --num-distributed-optimizer-instances is tried only when pinned (--zero-shard)
    zero3_in_domain_searched=True,  # Megatron-FSDP within one NVLink domain, where SC21 Table 2 says nothing against it
    # any layer split over the pipeline ranks and virtual stages: --pipeline-model-parallel-layout (megatron-core 0.19.2
    # transformer/pipeline_parallel_layer_layout.py PipelineParallelLayerLayout; the first/last stage sizes' rule that
    # each divides into vpp, transformer_config.py:1990-2062, does not bind: planner/emit/megatron.py pipeline_layout)
    pipeline_layout_option=True,
    plan_rules=(  # each rule cited above it
        # --recompute-method block recomputes the first --recompute-num-layers layers of each TransformerBlock, one per
        # model chunk (megatron-core d98e8a64 megatron/core/recompute.py: the block branch walks
        # num_layers_per_pipeline_rank, the chunk's layers; transformer_config.py recompute_num_layers: "the number of
        # transformer layers to recompute within each pipeline stage", a virtual one under interleaving)
        partial_recompute_per_virtual_stage("Megatron", "--recompute-method block --recompute-num-layers"),
        # megatron-core 0.19.2 pipeline_parallel/schedules.py:1133-1150 (microbatch_group_size_per_vp_stage
        # defaults to pp; the remainder must be 0); core_v0.16.1 schedules.py:995-1015 [assert]
        interleaved_microbatches("Megatron"),
        # megatron-core 0.19.2 transformer/transformer_config.py:2063-2105 [raise]
        embedding_loss_units_split("Megatron"),
        # megatron-core 0.19.2 transformer/transformer_config.py:2669-2699 (overlap_moe_expert_parallel_comm: vpp set
        # when pp > 1, recompute_granularity != full; ep > 1, which the emitter
        # keeps by writing the flag only with ep > 1) [assert]
        a2a_overlap_needs_vpp("Megatron"),
        # megatron-core 0.19.2 training/arguments.py validate_args: "--fp8-param-gather only supported with distributed
        # optimizer, torch fsdp2, megatron fsdp, or inference mode" [assert]
        fp8_param_gather_needs_sharded_optimizer("Megatron"),
        # megatron-core 0.19.2 training/arguments.py validate_args (optimizer CPU offload) [assert]: above
        fp8_param_gather_offload_recipes("Megatron", FP8_PARAM_GATHER_OFFLOAD_RECIPES),
        # megatron-core core_v0.19.0 transformer/transformer_config.py:1784-1830: moe_act "only supported with
        # moe_grouped_gemm" (an MoE model), mla_up_proj "only supported with multi_latent_attention", "Delayed scaling
        # does not support moe_act and layernorm recompute for fp8" [raise]; the modules the planner does not price
        recompute_modules_runnable("Megatron", PRICED_RECOMPUTE_MODULES),
        # megatron-core 0.19.2 / d98e8a64 transformer/transformer_config.py __post_init__
        # (fine_grained_activation_offloading):
        # attn_proj "cannot be set to offload_modules alone without core_attn"; moe_act / expert_fc1 not "while
        # recomputing the entire MoE layer" [raise / assert]; expert_fc1 and moe_act are MoE modules (the
        # feature guide's table: "MoE models only"); the modules the planner does not price
        offload_modules_runnable("Megatron", PRICED_OFFLOAD_MODULES),
    ),
)
