"""Training settings that are not parallelism knobs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.stacks import traits
from planner.stacks.base import MoEFlexBackend

if TYPE_CHECKING:
    from planner.stacks.base import Stack

Dtype = Literal["bf16", "fp16", "fp8"]
# planner.stacks.ALL_FRAMEWORKS (one module each; automodel: a costing stack, not a --framework choice)
Framework = Literal["megatron", "fsdp", "deepspeed", "maxtext", "automodel"]
AttentionImpl = Literal["flash", "unfused"]
StateDtype = Literal["fp32", "bf16"]
Fp8Recipe = Literal["delayed", "tensorwise", "blockwise", "mxfp8"]
MoEDispatcher = Literal["alltoall", "allgather", "flex"]


class TrainingSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seq_len: int = Field(4096, ge=1, le=100_000_000)
    global_batch: int = Field(..., ge=1, le=1_000_000_000, description="sequences per optimizer step")
    dtype: Dtype = Field("bf16", description="compute dtype; fp8 runs GEMMs in FP8 with bf16 elsewhere")
    optimizer: Literal["adam"] = "adam"
    framework: Framework = Field(
        "megatron",
        description="whose memory/overlap behaviour to model: megatron (fp32 grad buffers, distributed "
        "optimizer), fsdp (torchtitan/llm-foundry), deepspeed, maxtext",
    )
    attention_impl: AttentionImpl = Field(
        "flash",
        description="flash: fused attention, no s x s matrix (Dao et al. 2022, arXiv 2205.14135); unfused: "
        "scores materialised and softmax/dropout memory-bound, as in every stack before mid-2022",
    )
    attention_dropout: bool = Field(
        False,
        description="dropout on the attention probabilities (Megatron's --attention-dropout > 0). The planner's "
        "launch files write 0, as planned; it matters only with unfused attention, where the dropout keeps a mask "
        "and its output per score beside the softmax output (PyTorch's dropout at p = 0 returns its input: ATen "
        "Dropout.cpp _dropout_impl). Stacks before mid-2022 ran 0.1 by default (Megatron-LM v2.5 arguments.py)",
    )
    grad_dtype: StateDtype | None = Field(
        None,
        description="dtype of the gradient buffer and of its data-parallel reduction; None = the framework's "
        "default (Megatron and FSDP2: fp32 main grads / reduce_dtype; DeepSpeed: the compute dtype). bf16 = "
        "Megatron --grad-reduce-in-bf16, NeMo distributed optimizer grad_sync_dtype: bf16",
    )
    optimizer_dtype: StateDtype = Field(
        "fp32",
        description="dtype of Adam's two moments (the master weights stay fp32): bf16 = Megatron "
        "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16",
    )
    legacy_deepspeed_zero3: bool = Field(
        False,
        description="DeepSpeed ZeRO-3 as released before v0.5.x (2021): every parameter all-gather blocks (a "
        "torch.cuda.synchronize() before each, DeepSpeed PR #1188; prefetch overlapping compute arrived with PR "
        "#1453, Oct 2021) and gradients are averaged with all-reduce, not reduce-scatter (DeepSpeed issue "
        "#1173). Nothing of ZeRO-3's traffic overlaps compute",
    )
    fused_cross_entropy: bool = Field(
        False,
        description="PyTorch-native stacks (framework fsdp): the loss runs as one fused kernel on the 16-bit logits "
        "(flash-attn's CrossEntropyLoss, llm-foundry's default loss_fn 'fused_crossentropy' for MPT), which saves "
        "the logits and writes a 16-bit gradient: 4 bytes per logit at the loss's peak instead of the 12 of torch's "
        "cross entropy on fp32-upcast logits (torchtitan). Megatron's vocab-parallel loss (fused or not) and MaxText "
        "keep their own accounting (planner.stacks: Stack.logit_bytes)",
    )
    expandable_segments: bool = Field(
        False,
        description="PyTorch's caching allocator grows expandable segments (PYTORCH_CUDA_ALLOC_CONF="
        "expandable_segments:True, which torchtitan's run_train.sh sets) on a platform that implements them (CUDA; "
        "ROCm only since PyTorch PR #173330, relanded as #177974 in 2026): a segment maps pages as it grows, so "
        "reserved memory tracks allocated memory and the planner adds no allocator fragmentation "
        "(planner.costmodel.memory.allocator_fragmentation); off: the classic allocator's "
        "calibration.ALLOCATOR_FRAGMENTATION",
    )

    loss_chunks: int = Field(
        1, ge=1, le=4096,
        description="the loss is computed and back-propagated over this many slices of the sequence, one at a time "
        "(torchtitan ChunkedLossWrapper num_chunks, 8 in torchtitan 0.3.0's Llama 3 / Qwen3 configs; MaxText "
        "num_vocab_tiling): the loss peak holds one slice's logits plus an fp32 buffer of the hidden-state gradient "
        "(planner.costmodel.memory.logits_bytes_per_token). 1 = the whole micro-batch's logits at once",
    )
    param_dtype: StateDtype = Field(
        "fp32",
        description="dtype of the sharded master parameters under ZeRO-3/FSDP (MaxText weight_dtype; FSDP2: fp32): "
        "bf16 halves them (MaxText recipes that set weight_dtype=bfloat16, whose Adam moments inherit it: mu_dtype)",
    )
    moe_capacity_factor: float | None = Field(
        None, gt=0, le=1024,
        description="MoE expert capacity as a multiple of the balanced load (tokens x top_k / experts); tokens "
        "beyond it are dropped and every expert's input is padded to it (Megatron --moe-expert-capacity-factor with "
        "--moe-pad-expert-input-to-capacity, MaxText capacity_factor; GShard, Lepikhin et al. 2020, arXiv "
        "2006.16668, sec. 2.2). None = dropless: expert time and memory follow the routed tokens, charged at the "
        "balanced load (vendor benchmarks force balanced routing; a learned router loads the busiest EP rank more: "
        "moe_load_imbalance)",
    )
    moe_load_imbalance: float | None = Field(
        None, ge=1, le=64,
        description="a learned router's measured load: the routed token copies the busiest EP rank receives over the "
        "balanced share (tokens x top_k x local experts / experts), at the plan's EP degree. Expert GEMMs, the "
        "routed copies' activations and the EP all-to-alls of plans with EP > 1 are charged at it "
        "(planner.costmodel.moe.expert_load; with every expert on each device, EP 1, a device's copies are its own "
        "tokens': balanced by construction). None = the balanced router of vendor benchmarks (planner.costmodel."
        "expert.LEARNED_ROUTER_LOAD gives what NVIDIA measured with a learned one). Dropless routing only",
    )
    moe_dispatcher: MoEDispatcher | None = Field(
        None,
        description="MoE token dispatcher (Megatron --moe-token-dispatcher-type): alltoall (NCCL all-to-all of the "
        "permuted tokens), allgather (every rank gathers all tokens, reduce-scatter back), flex (DeepEP / HybridEP "
        "kernels: permute fused into the dispatch, NVLink then RDMA at their published bandwidths); one the stack "
        "runs (Stack.moe_dispatchers). None = the stack's default (planner/stacks: Stack.moe_dispatcher)",
    )
    moe_flex_backend: MoEFlexBackend | None = Field(
        None,
        description="the flex dispatcher's kernels (Megatron --moe-flex-dispatcher-backend): deepep (DeepEP's normal "
        "kernels, what the Megatron launch files write) or hybridep (HybridEP: the permute inside the dispatch, one "
        "host wait per dispatch; the Megatron-Bridge performance recipes' backend on GB200, and for DeepSeek-V3 "
        "from 26.02). None = the stack's (Stack.moe_flex_backend); only read with the flex dispatcher",
    )
    moe_a2a_overlap: bool = Field(
        False,
        description="Megatron batch-level EP all-to-all overlap (--overlap-moe-expert-parallel-comm with "
        "--delay-wgrad-compute, Megatron-core 0.14): the forward of one micro-batch and the backward of another run "
        "merged layer by layer, each one's dispatch and combine hidden under the other's compute "
        "(megatron/core/transformer/moe/README.md)",
    )
    pp_schedule_microbatches: int | None = Field(
        None, ge=1,
        description="micro-batches per pipeline schedule: the step runs its micro-batches as consecutive schedules "
        "of this many, each with its own fill and drain (NeMo AutoModel with PP runs one schedule per local batch, "
        "local_batch_size / pp_microbatch_size micro-batches, repeated for gradient accumulation: "
        "planner.costmodel.pipeline.schedules_per_step). None = one schedule over all of the step's micro-batches "
        "(Megatron, torchtitan)",
    )
    moe_force_balanced: bool = Field(
        False,
        description="the run forces balanced routing (Megatron --moe-router-force-load-balancing; vendor benchmark "
        "tables): every expert gets exactly the balanced load. False = a learned router, charged at moe_load_imbalance "
        "where stated, else at a balanced router's load (planner.costmodel.moe.expert_load)",
    )
    fp8_recipe: Fp8Recipe | None = Field(
        None,
        description="FP8 scaling recipe (Transformer Engine; Megatron --fp8-recipe): delayed (amax history, NeMo's "
        "fp8_hybrid), tensorwise (current per-tensor scaling), blockwise (1x128 / 128x128 blocks, DeepSeek-V3 report "
        "sec. 3.3.2), mxfp8 (32-element blocks with E8M0 scales; Blackwell's MX tensor cores only). None = the "
        "launcher's default (tensorwise for Megatron). Only mxfp8 changes the modelled speed "
        "(calibration.MXFP8_REL_EFFICIENCY)",
    )
    torch_compile: bool = Field(
        False,
        description="PyTorch-native stacks (framework fsdp: torchtitan, llm-foundry): the model runs under "
        "torch.compile, whose Inductor fuses the elementwise ops of a block (norms, SwiGLU, RoPE) into single "
        "kernels; eager (False) runs each op as its own kernel through HBM (planner.costmodel.compute, "
        "eager_elementwise_bytes). torchtitan --compile.enable. Megatron/TE, DeepSpeed (Megatron kernels) and XLA fuse "
        "these already",
    )
    fp8_moe_act_cache: bool = Field(
        False,
        description="MoE SwiGLU inputs cached for backward in FP8 (1 byte) and the SwiGLU output recomputed, as "
        "DeepSeek-V3's own framework does (report arXiv 2412.19437, sec. 3.3.2 'Low-Precision Storage'); needs "
        "dtype fp8. Megatron keeps them in BF16",
    )
    fp8_moe_dispatch: bool = Field(
        False,
        description="the MoE dispatch all-to-all sends the tokens in FP8 (1 byte per element; the combine stays "
        "BF16), as DeepSeek-V3's own framework does (report arXiv 2412.19437, sec. 3.3.2: activations quantized to "
        "FP8 before the dispatch, combine in BF16); needs dtype fp8. Megatron-core's dispatchers send the BF16 hidden "
        "states (token_dispatcher.py; moe_dispatch_fwd_dtype 'bf16' by default, DeepEP / HybridEP fp8_dispatch "
        "unsupported in fused_a2a.py)",
    )
    fp8_param_gather: bool = Field(
        False,
        description="the FP8 linears' weights are kept or all-gathered in FP8: Megatron --fp8-param-gather (FP8 "
        "primary weights in place of the bf16 copy, all-gathered in FP8 by the distributed optimizer; the FP8 recipes "
        "of NeMo and Megatron-Bridge set it), torchtitan --float8.enable_fsdp_float8_all_gather (FSDP2 gathers 1-byte "
        "weights). Needs dtype fp8 (planner.costmodel.memory.fp8_weight_copy_bytes, zero3_buffers)",
    )
    cuda_graph_full_iteration: bool = Field(
        False,
        description="the forward-backward of a step runs as one captured CUDA graph, replayed each step (Megatron "
        "--cuda-graph-impl full_iteration, megatron-core 0.19.2 TransformerConfig.cuda_graph_impl: the optimizer step "
        "excluded): no kernel is launched from the host inside it, and a dropless MoE layer runs with static shapes "
        "(HybridEP's per-rank token budget moe_expert_rank_capacity_factor with moe_paged_stash), so its dispatcher "
        "waits for no token counts on the host (planner.costmodel.moe.has_host_sync). Megatron only; read from the "
        "cited release's preset in plan validate (planner.analysis.validate.FULL_ITERATION_CG_RECIPES)",
    )
    moe_fused_grouped_mlp: bool = Field(
        False,
        description="the routed experts run as one fused grouped MLP (Megatron --use-transformer-engine-op-fuser: "
        "megatron-core TEGroupedMLP._fused_forward, Transformer Engine's op fuser with the GLU, its clamp, the "
        "router-probability scaling and the fc2 bias inside its ops): no eager expert epilogue "
        "(planner.costmodel.compute.expert_epilogue_s). Megatron only; read from the cited release's preset in plan "
        "validate (the full-iteration CUDA-graph presets set it)",
    )
    fp8_attention: bool = Field(
        False,
        description="the attention core (dot-product attention) runs in FP8 too, forward and backward: megatron-core "
        "TransformerConfig.fp8_dot_product_attention, set by Megatron-Bridge's mixed_precision config; no "
        "pretrain_gpt.py flag (Transformer Engine's fp8_dpa; under the mxfp8 recipe TE 2.16-2.17 quantizes it "
        "MXFP8, else per-tensor FP8). Priced at the FP8 peak x calibration.FP8_ATTN_REL_EFFICIENCY / "
        "MXFP8_ATTN_REL_EFFICIENCY (cuDNN's published FP8 vs BF16 attention benchmark). Needs dtype fp8; Megatron "
        "only; not searched. Read from the cited release's preset in plan validate "
        "(planner.analysis.validate.FP8_DPA_RECIPES)",
    )
    fp8_weight_cache: bool | None = Field(
        None,
        description="whether the FP8 linears keep a quantized copy of each weight across the step (Transformer "
        "Engine's weight workspace); None = the stack's (planner/stacks: Stack.fp8_weight_cache). False for a run on "
        "a framework other than the stack's kernels (DeepSeek-V3's own HAI-LLM is modelled with Megatron's traits)",
    )

    @model_validator(mode="after")
    def _fp8_settings_need_fp8(self) -> "TrainingSpec":
        for is_set, message in _NEEDS_FP8:
            if is_set(self) and self.dtype != "fp8":
                raise ValueError(message.format(t=self))
        return self

    @property
    def dispatcher(self) -> str:
        """The MoE token dispatcher: moe_dispatcher, else the stack's (Stack.moe_dispatcher); the one rule the cost
        model (planner.costmodel.moe.dispatcher), the launch rules and the Megatron launch files read."""
        return self.moe_dispatcher or traits(self.framework).moe_dispatcher

    @property
    def fp8_recipe_run(self) -> str:
        """The FP8 recipe the run uses: fp8_recipe, else tensorwise (Megatron's default, which its launch files write);
        the one rule the cost model, the stacks' rules and the Megatron launch files read."""
        return self.fp8_recipe or "tensorwise"

    @property
    def shared_expert_overlap(self) -> bool:
        """The shared experts run beside the MoE dispatch and combine: the stack runs them so with this dispatcher
        (Stack.moe_shared_expert_overlap); the one rule the cost model (compute.layer_compute, layers._layer_times)
        and the Megatron launch files (--moe-shared-expert-overlap) read."""
        return self.dispatcher in traits(self.framework).moe_shared_expert_overlap

    @property
    def flex_backend(self) -> str:
        """The flex dispatcher's backend: moe_flex_backend, else the stack's (Stack.moe_flex_backend); the one rule
        the cost model (planner.costmodel.moe) and the Megatron launch files read."""
        return self.moe_flex_backend or traits(self.framework).moe_flex_backend

    @model_validator(mode="after")
    def _stack_has_the_settings(self) -> "TrainingSpec":
        stack = traits(self.framework)
        for is_set, offered, message in _STACK_OPTIONS:
            if is_set(self) and not offered(stack):
                raise ValueError(message.format(t=self))
        if self.fp8_attention and self.fp8_recipe == "blockwise":
            # megatron-core fp8_utils.get_fp8_recipe hands fp8_dpa to DelayedScaling (extensions/transformer_engine.py
            # TEDelayedScaling), Float8CurrentScaling and MXFP8BlockScaling, not to Float8BlockScaling: the attention
            # core stays BF16 under blockwise
            raise ValueError("FP8 dot-product attention runs under the tensorwise, delayed or mxfp8 recipe "
                             "(megatron-core gives blockwise scaling no fp8_dpa): drop --fp8-attention or choose "
                             "another --fp8-recipe")
        if self.moe_a2a_overlap and self.moe_dispatcher == "allgather":
            # megatron-core: overlap_moe_expert_parallel_comm needs the alltoall or flex dispatcher
            raise ValueError("batch-level EP overlap (--moe-a2a-overlap) needs the alltoall or flex dispatcher")
        if self.moe_dispatcher is not None and self.moe_dispatcher not in stack.moe_dispatchers:
            # a dispatcher the stack has no code for (DeepEP / HybridEP are Megatron's and NeMo AutoModel's): costing it
            # would price a run no launch file of the stack can start (Stack.moe_dispatchers)
            runs = ", ".join(stack.moe_dispatchers)
            raise ValueError(f"the {self.moe_dispatcher} MoE dispatcher (--moe-dispatcher) is not one "
                             f"{self.framework} runs (its dispatchers: {runs}): choose one of them or drop it")
        if self.moe_capacity_factor is not None and self.dispatcher == "flex" and self.flex_backend == "deepep":
            # megatron-core TransformerConfig.__post_init__ (core_v0.16.1 transformer_config.py:1074-1081, the same at
            # d98e8a6): "Flex token dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity",
            # which every capacity factor here is run with (planner/emit/megatron.py); HybridEP pads
            raise ValueError(f"--moe-capacity-factor {self.moe_capacity_factor:g} pads every expert's input to its "
                             "capacity, which the flex dispatcher's DeepEP kernels refuse (megatron-core: 'Flex token "
                             "dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity'): use "
                             "--moe-dispatcher alltoall or --moe-flex-backend hybridep, or drop the capacity factor")
        if self.moe_load_imbalance is not None and self.moe_capacity_factor is not None:
            raise ValueError(f"--moe-load-imbalance {self.moe_load_imbalance:g} describes dropless routing, while "
                             f"--moe-capacity-factor {self.moe_capacity_factor:g} pads every expert to its capacity "
                             "(the load is the capacity factor): drop one of them")
        if self.moe_load_imbalance is not None and self.moe_force_balanced:
            raise ValueError(f"--moe-load-imbalance {self.moe_load_imbalance:g} is a learned router's load; a "
                             "force-balanced run routes at the balanced load: drop one of them")
        if self.moe_flex_backend is not None and self.dispatcher != "flex":
            # megatron-core TransformerConfig.moe_flex_dispatcher_backend is read by the flex dispatcher only
            raise ValueError(f"--moe-flex-backend {self.moe_flex_backend} selects the flex dispatcher's kernels: add "
                             "--moe-dispatcher flex")
        return self


# Settings that only mean something under an FP8 recipe: (whether the spec sets it, what to tell the user).
_NEEDS_FP8: tuple[tuple[Callable[[TrainingSpec], bool], str], ...] = (
    (lambda t: t.fp8_param_gather, "fp8_param_gather keeps weights in FP8: it needs dtype fp8"),
    (lambda t: t.fp8_moe_act_cache, "fp8_moe_act_cache stores activations in FP8: it needs dtype fp8"),
    (lambda t: t.fp8_moe_dispatch, "fp8_moe_dispatch sends tokens in FP8: it needs dtype fp8"),
    (lambda t: t.fp8_attention, "fp8_attention runs the attention core in FP8: it needs dtype fp8 (--dtype fp8)"),
    (lambda t: t.fp8_recipe is not None,
     "an FP8 recipe (--fp8-recipe {t.fp8_recipe}) needs --dtype fp8: add it or drop the recipe"),
)

# Settings only some stacks run (the one owner of which stack offers what: its Stack trait): (whether the spec sets
# it, whether the stack offers it, what to tell the user; {t.framework} is the spec's stack).
_STACK_OPTIONS: tuple[tuple[Callable[[TrainingSpec], bool], Callable[[Stack], bool], str], ...] = (
    (lambda t: t.fp8_param_gather, lambda s: s.fp8_param_gather_option,
     "FP8 parameter gather is Megatron's --fp8-param-gather or torchtitan's FSDP float8 all-gather; {t.framework} "
     "has none: drop it"),
    (lambda t: t.cuda_graph_full_iteration, lambda s: s.full_iteration_cuda_graph_option,
     "a full-iteration CUDA graph is Megatron-core's --cuda-graph-impl full_iteration; {t.framework} has none: drop "
     "it"),
    (lambda t: t.fp8_attention, lambda s: s.fp8_attention_option,
     "FP8 dot-product attention is megatron-core's fp8_dot_product_attention (Transformer Engine); the planner models "
     "none for {t.framework}: drop it"),
    (lambda t: t.moe_fused_grouped_mlp, lambda s: s.moe_expert_epilogue_eager,
     "a fused grouped MLP is Megatron-core's --use-transformer-engine-op-fuser; {t.framework} has none: drop it"),
    (lambda t: t.moe_a2a_overlap, lambda s: s.moe_a2a_overlap_option,
     "batch-level EP overlap (--moe-a2a-overlap) is Megatron-core's; {t.framework} has none: drop it"),
    (lambda t: t.torch_compile, lambda s: s.eager_unless_compiled,
     "torch.compile (--compile) applies to PyTorch-native stacks (--framework fsdp, --launcher torchtitan); "
     "{t.framework} fuses its elementwise kernels already: drop --compile"),
    (lambda t: t.fused_cross_entropy, lambda s: s.fused_loss_option,
     "fused_cross_entropy describes a PyTorch-native stack (framework fsdp); {t.framework} keeps its own loss: drop "
     "it"),
    (lambda t: t.loss_chunks > 1, lambda s: s.chunked_loss_option,
     "a chunked loss (loss_chunks {t.loss_chunks}) is torchtitan's ChunkedLossWrapper or MaxText's num_vocab_tiling; "
     "{t.framework} computes the loss in one piece: drop it"),
    (lambda t: t.legacy_deepspeed_zero3, lambda s: s.legacy_zero3_option,
     "legacy_deepspeed_zero3 describes DeepSpeed; set framework to deepspeed or drop it"),
)
