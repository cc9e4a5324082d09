"""The traits table every stack fills: how a training stack's behaviour enters the cost model and the search.

A `Stack` is data (one frozen instance per module of planner/stacks/); the cost model and the search read its
fields, never the stack's name. Each stack module cites the source of every value it sets.

This layer imports nothing from the rest of the planner at run time (the specs' types only for type checking):
planner.specs.training reads it to validate stack-specific training switches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from planner.specs.model import ModelSpec
    from planner.specs.plan import ParallelPlan
    from planner.specs.training import TrainingSpec

# a rule of the stack that any plan must keep whatever the launcher: (model, training, plan) -> one-line errors
PlanRule = Callable[["ModelSpec", "TrainingSpec", "ParallelPlan"], list[str]]

GradReduceDtype = Literal["fp32", "compute"]
SelectiveSaves = Literal["modules", "half", "op_sac"]
SelectiveRecomputes = Literal["attention_core", "modules", "half_gemms", "named_keeps"]
Zero3Gather = Literal["block", "tensor"]
RankOrder = Literal["linear", "mesh"]
TpOverlapEvidence = Literal["nvidia_recipes", "async_tp", "xla_tpu", "none"]
MoEDispatcher = Literal["alltoall", "allgather", "flex"]
MoEPermute = Literal["fused", "unfused", "gather"]
# how the flex dispatcher's received tokens reach their experts' order: inside the communication kernel (HybridEP
# writes them expert-major) or by a fused permute after it (DeepEP's dispatch delivers them rank-major)
MoEFlexPermute = Literal["in_dispatch", "fused"]
# the flex dispatcher's kernels (Megatron --moe-flex-dispatcher-backend): DeepEP's normal kernels or HybridEP
MoEFlexBackend = Literal["deepep", "hybridep"]
# how a force-balanced benchmark gate (TrainingSpec.moe_force_balanced) picks experts: random scores through the
# router's top-k (uniform at random: a sampling imbalance), a fixed round robin replacing the top-k of a router that
# still runs ("round_robin_scored"), or a round robin without any router ("round_robin")
ForcedRouting = Literal["random_scores", "round_robin_scored", "round_robin"]
NO_EMITTER = ""  # Stack.emitter of a costing stack: no launcher writes its files
# elementwise composites a PyTorch-native stack runs op by op unless torch.compile fuses them
EtpDefault = Literal["tp", "one"]
EagerComposite = Literal["rmsnorm", "swiglu", "expert_swiglu", "rope"]


@dataclass(frozen=True)
class Stack:
    """One training stack's cost traits, search defaults and plan rules."""

    # ---- identity
    name: str  # how the docs and messages name it
    framework: str  # its TrainingSpec.framework value (--framework)
    covers: tuple[str, ...]  # the stacks whose behaviour these traits model
    # the launcher whose files the planner writes for it (planner/emit/<emitter>.py); "" (NO_EMITTER): a costing
    # stack, scored in `plan validate` where a run names it, neither planned for (--framework) nor written (`plannable`)
    emitter: str

    # ---- memory
    overhead_gib: float  # CUDA context + communicator buffers per device, GiB (memory.overhead)
    logit_bytes: float  # bytes per logit at the loss's peak with the stack's own loss kernel (memory.activations)
    grad_reduce_dtype: GradReduceDtype  # default dtype of the data-parallel gradient reduction
    grad_buffer_in_reduce_dtype: bool  # replicated gradients are stored in the reduction dtype (a main-grad buffer)
    grads_in_param_dtype: bool  # gradients are the cotangents of the parameters, in their dtype (jax.grad); the
    #                             stack casts only fp32 ones to its reduction dtype (memory.grad_bytes_per_param)
    zero3_fp32_sharded_params: bool  # ZeRO-3 keeps fp32 sharded parameters only (FSDP2 mixed precision)
    fp8_saves_gemm_inputs: bool  # FP8 linears save their GEMM inputs for backward in FP8 (1 byte)
    selective_saves: SelectiveSaves  # selective recompute keeps: "modules" (all but the recomputed modules), "half"
    zero3_unsharded_under_pp: bool  # ZeRO-3 with pp > 1 keeps the stage unsharded between micro-batches and
    #                                 reduces its gradients once per step, not once per micro-batch
    # the schedule whose in-flight micro-batches a pipeline stage holds, whatever order the plan names (None: the
    # plan's own; pipeline.memory_schedule)
    pipeline_memory_schedule: str | None
    pp_buffers_per_microbatch: bool  # the pipeline runtime allocates a receive buffer per micro-batch for the stage's
    #                                  input and for its output's gradient, kept for the step, and holds each stage
    #                                  output until its backward (memory.pipeline_buffer_units)
    eager_swiglu_keeps_act: bool  # eager `silu(gate) * up` also keeps silu(gate): a 4th FFN-sized tensor per layer
    #                               unless compiled (memory.activation_elems_per_token)
    norm_keeps_rstd: bool  # each RMSNorm keeps an fp32 rstd per token for backward (torch _fused_rms_norm)
    caching_allocator: bool  # PyTorch's CUDA caching allocator: reserved > allocated (ALLOCATOR_FRAGMENTATION)
    launch_loss_chunks: int  # slices the loss of its emitted launch runs over (TrainingSpec.loss_chunks default
    #                          with --launcher): 1 = the whole micro-batch's logits at once
    compile_fuses_loss: bool  # --compile compiles the loss too: a fused 16-bit loss (TrainingSpec.fused_cross_entropy)
    chunked_loss_option: bool  # the loss may run over slices of the sequence (TrainingSpec.loss_chunks > 1)
    zero3_resident_per_matrix: bool  # ZeRO-3 memory: gathered weights / unsharded gradients in flight are single
    #                                  matrices (the current and the next), not whole layers (memory.zero3_buffers)
    custom_remat_option: bool  # named layer tensors kept / offloaded / rematerialised (MaxText remat_policy custom)
    # the custom remat policies the search tries beside full recompute (each the names of the tensors offloaded to
    # host memory, the rest rematerialised; needs custom_remat_option); () = none
    searched_remat_offloads: tuple[tuple[str, ...], ...]
    # the modules whose saved tensors the stack's fine-grained activation offloading sends to host memory and the
    # planner prices (ParallelPlan.offload_modules; Megatron's --offload-modules); () = the stack has none
    activation_offload_modules: tuple[str, ...]

    # ---- compute
    pytorch_native_kernels: bool  # PyTorch-native kernels (no Transformer Engine): a fraction of TE's efficiency
    cudnn_attention: bool  # the attention core is cuDNN's fused attention (efficiency falls with the head dimension)
    #                               on NVIDIA parts with FP8 tensor cores (calibration.PYTORCH_NATIVE_HOPPER_EFFICIENCY)
    eager_unless_compiled: bool  # elementwise composites run eagerly unless torch.compile fuses them; the stack
    #                              takes --compile (others fuse them already and refuse it)
    eager_composites: tuple[EagerComposite, ...]  # which of them run op by op (compute.eager_elementwise_bytes):
    #                  the norms, the dense / shared-expert SwiGLU, the routed experts' SwiGLU, the rotary embedding
    fused_loss_option: bool  # the loss may be a fused 16-bit cross-entropy kernel (TrainingSpec.fused_cross_entropy)
    fp8_lm_head: bool  # the LM head GEMM runs in FP8 under an FP8 recipe (else it stays 16-bit)
    # MoE layer as the stack runs it (planner.costmodel.moe): its default token dispatcher (alltoall, allgather, flex;
    # TrainingSpec.moe_dispatcher overrides it), whether a dropless dispatcher copies token counts to the host (a
    # device-to-host sync that empties the GPU queue), how tokens are permuted when the dispatcher does not do it
    # ("fused" / "unfused" / "gather": row gathers by index that XLA compiles, moe.permute_s), whether the shared
    # experts run beside the dispatch, whether the router's top-k is one fused kernel, and whether each local expert's
    # GEMM is its own launch (else one grouped kernel)
    moe_dispatcher: MoEDispatcher
    moe_dispatchers: tuple[MoEDispatcher, ...]  # the dispatchers its launch files can select (--moe-dispatcher)
    moe_dispatch_host_sync: bool
    moe_permute: MoEPermute
    # every TP rank permutes all of its tokens' copies, the MoE block's tokens replicated over the TP ranks (MaxText's
    # sparse_matmul shard_map: no tensor axis in its input partition spec), not 1 / tp of them (moe.permute_s)
    moe_permute_tp_replicated: bool
    moe_flex_permute: MoEFlexPermute  # how the flex dispatcher's tokens are permuted (moe.permute_mode)
    moe_forced_routing: ForcedRouting  # how its force-balanced benchmark gate routes (moe.expert_load, moe.router_s,
    #                                    expert.dispatch_ranks_per_token)
    # the dispatchers with which its shared experts run beside the dispatch and combine (empty: never), the trait
    # TrainingSpec.shared_expert_overlap reads
    moe_shared_expert_overlap: tuple[MoEDispatcher, ...]
    moe_router_fused: bool
    moe_gemm_per_expert: bool
    # rows per m-tile of the stack's dropless grouped-GEMM kernel where that kernel computes a tile once for every
    # group with rows in it (megablox: moe.grouped_tile_visits_rel); None where no such kernel runs
    moe_grouped_row_tile: int | None
    # the routed experts' GLU clamp and fc2 bias (gpt-oss) run as separate PyTorch ops around the grouped GEMMs unless
    # the run fuses its grouped MLP (TrainingSpec.moe_fused_grouped_mlp; compute.expert_epilogue_s); False: not priced
    moe_expert_epilogue_eager: bool
    # a YaRN-scaled rotary embedding (non-MLA) runs op by op, its fusion switched off (compute.unfused_rope_s)
    yarn_rope_unfused: bool
    moe_a2a_overlap_option: bool  # batch-level EP all-to-all overlap exists (TrainingSpec.moe_a2a_overlap)
    moe_capacity_einsum: bool  # capacity-padded tokens go to the experts' buffers by one-hot dispatch / combine
    #                            einsums over each sequence (MaxText dense_matmul), not by a permute
    # what selective recompute re-runs: the attention core, the modules Megatron's --recompute-modules names, half
    # the GEMMs, or everything the backward needs but the named tensors selective_keeps holds ("named_keeps")
    selective_recomputes: SelectiveRecomputes

    # ---- ZeRO-3 / data parallelism
    zero3_gather: Zero3Gather  # ZeRO-3 gathers one flat buffer per block, or every parameter tensor on its own
    zero3_regather_on_recompute: bool  # a fully recomputed layer gathers its parameters again for backward
    legacy_zero3_option: bool  # the 2021 blocking ZeRO-3 (TrainingSpec.legacy_deepspeed_zero3) applies
    zero_is_distributed_optimizer: bool  # its ZeRO-1/2 is Megatron's distributed optimizer (absent before mid-2022)

    # ---- placement and communication
    rank_order: RankOrder  # linear tp-cp-ep-dp-pp rank order, or MaxText's hybrid device mesh
    pp_p2p_scatter_gather: bool  # pipeline sends split over the TP ranks even without sequence parallelism
    tp_overlap_evidence: TpOverlapEvidence  # where the runs of this stack overlap TP communication by default

    # ---- search
    searched_zero_stages: tuple[int, ...]  # ZeRO stages the search tries when none is pinned
    hsdp_searched: bool  # the search also tries one shard group per scale-up domain (HSDP) under ZeRO-3
    zero3_in_domain_searched: bool  # ZeRO-3 tried besides the default where the replica group fits one domain

    # ---- rules any plan of this stack keeps (planner.specs.dims.plan_errors adds them to the neutral ones)
    plan_rules: tuple[PlanRule, ...] = ()

    # ---- memory, defaulted: bytes per logit of the stack's loss when TP splits the vocabulary (a loss-parallel cross
    # entropy); None = logit_bytes whatever the TP degree (memory.logits_bytes_per_token)
    loss_parallel_logit_bytes: float | None = None
    # ---- memory, defaulted: FP8 weights (memory.fp8_weight_copy_bytes, memory.zero3_buffers)
    fp8_weight_cache: bool = False  # FP8 linears keep a quantized copy of each weight (and its transpose or
    #                                 column-wise data where the GEMM needs it) from the step's first micro-batch on
    fp8_param_gather_option: bool = False  # weights may be kept / all-gathered in FP8 (TrainingSpec.fp8_param_gather)
    # the FP8 recipes with which FP8 primary weights run beside the optimizer offloaded to the host (None: any); read by
    # the stack's rule (stacks.rules.fp8_param_gather_offload_recipes) and the nothing-fits remedy (planner.app.plan)
    fp8_param_gather_offload_recipes: tuple[str, ...] | None = None
    # ---- recompute, defaulted: the tensors a "named_keeps" selective policy keeps (Stack.selective_recomputes; a
    # jax.checkpoint save_only_these_names policy), its re-runs priced as a custom remat keeping them
    # (compute.custom_remat_recompute_s)
    selective_keeps: tuple[str, ...] = ()
    # ---- host launches, defaulted: the forward-backward may be captured as one CUDA graph replayed each step
    # (TrainingSpec.cuda_graph_full_iteration; planner.costmodel.moe.has_host_sync)
    full_iteration_cuda_graph_option: bool = False
    # ---- attention, defaulted: the attention core may run in FP8 under an FP8 recipe (TrainingSpec.fp8_attention;
    # planner.costmodel.base Context._rates)
    fp8_attention_option: bool = False
    # ---- expert layout, defaulted: the expert tensor-parallel degree the stack runs when a configuration sets none
    # ("tp": the dense TP degree, Megatron's rule; "one": experts whole on each EP rank). A run record with a null
    # plan.etp is read with it (planner.analysis.validate.run_fixed_knobs); the planner's own launch files write it.
    etp_default: EtpDefault = "one"
    # ---- expert layout, defaulted: a configuration that names no expert-parallel degree runs none (experts sharded
    # like the other weights). True where every run publishes its whole configuration and the stack's default is 1;
    # a run record with a null plan.ep is then read as EP 1 (planner.analysis.validate.run_fixed_knobs) instead of
    # letting the search pick one the run never ran.
    ep_unset_is_one: bool = False
    # ---- MoE memory, defaulted: the routed experts' weights are one array per matrix over the experts ([experts, in,
    # out]), so a per-array ZeRO-3 gather (zero3_resident_per_matrix) brings all the device's experts at once
    # (planner.costmodel.memory.largest_matrix_params_per_device). False: one module per expert.
    moe_experts_stacked: bool = False
    # ---- MoE, defaulted: the alltoall dispatcher sorts the tokens it receives from the EP ranks by local expert before
    # the expert GEMMs, and back before the combine, where a rank holds more than one expert: one read and one write of
    # the received copies each way (planner.costmodel.moe.permute_s). False where it is not modelled.
    moe_alltoall_sorts_by_local_expert: bool = False
    # ---- MoE, defaulted: the flex dispatcher's backend when a run names none (TrainingSpec.moe_flex_backend): DeepEP,
    # what Megatron's launch files write (planner/emit/megatron.py --moe-flex-dispatcher-backend deepep) and what
    # NeMo AutoModel's enable_deepep runs
    moe_flex_backend: MoEFlexBackend = "deepep"
    # ---- MoE, defaulted: the dispatchers the search tries beside the default when the request pins none
    # (planner.search.dispatchers.searched_dispatchers, which also says on which hardware): each a launch-file choice of
    # moe_dispatchers. Empty: the default only.
    moe_searched_dispatchers: tuple[MoEDispatcher, ...] = ()
    # ---- pipeline, defaulted: the launch files state any split of the layers over the pipeline ranks and their
    # virtual stages (Megatron's --pipeline-model-parallel-layout), so a split that no first/last stage sizes state
    # (DeepSeek-V3's 61 layers over 8 ranks of 2 virtual stages) is searched too: the default uneven split
    # (planner.costmodel.partition.stage_layer_counts). False: only the splits the stack's first/last sizes state.
    pipeline_layout_option: bool = False


    @property
    def plannable(self) -> bool:
        """The planner plans for this stack (a --framework choice) and writes its launch files: it has an emitter."""
        return self.emitter != NO_EMITTER

    def plan_errors(self, model: ModelSpec, train: TrainingSpec, plan: ParallelPlan) -> list[str]:
        return [e for rule in self.plan_rules for e in rule(model, train, plan)]
