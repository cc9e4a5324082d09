"""Per-device memory of a training step: model states and activations.

Model states (Rajbhandari et al., ZeRO, SC20, arXiv 1910.02054, sec. 3.1 and 5): mixed-precision Adam
keeps 2 bytes of fp16/bf16 weights, 2 bytes of gradients and K = 12 bytes of fp32 master weights,
momentum and variance per parameter; stages 1/2/3 shard the optimizer, + gradients, + weights over
the N_d data-parallel ranks. Megatron-LM accumulates and reduces gradients in an fp32 main-grad buffer
(4 bytes; `--accumulate-allreduce-grads-in-fp32`, default with bf16) and its distributed optimizer is
ZeRO-1. PyTorch FSDP2 (torchtitan, llm-foundry) keeps the sharded parameters in fp32 (4 bytes),
fp32 sharded gradients and the two Adam moments: 16 bytes / N_d, plus unsharded bf16 copies of the
layers being computed.

Activations generalise Korthikanti et al. 2022 (arXiv 2205.05198, sec. 4.1, eq. 1-2): a GPT layer
saves sbh(34 + 5as/h) bytes at 2 bytes/element (34 = 11 attention + 19 MLP + 4 LayerNorm elements per
token x 2 bytes, with dropout masks; 5as/h the attention scores); sequence parallelism divides all of it
by t. Here each saved tensor is listed for the layer's real shapes (GQA, gated MLP, MoE, MLA), flash
attention stores no s x s matrix, and modern recipes use no dropout.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from planner.costmodel.base import ACT_ELEM_BYTES, PARAM_GATHER_BYTES, Context, LayerKind, Shape, StageSplit
from planner.costmodel.calibration import Calibration
from planner.costmodel.capacity import fit_reserve_gib
from planner.costmodel.moe import dispatcher_buffer_bytes, stated_load
from planner.costmodel.mtp import mtp_extra_params, mtp_input_bytes_per_token, mtp_kind, mtp_layer_counts
from planner.costmodel.params import layer_params
from planner.costmodel.pipeline import head_stage, inflight_microbatches, memory_schedule, v_shaped
from planner.costmodel.trace import Term, formula
from planner.specs import ModelSpec, ParallelPlan, TrainingSpec
from planner.stacks import stack_of, traits

GIB = float(2**30)


@dataclass(frozen=True)
class StateBytesPerParam:
    """Bytes per parameter resident on the device, before dividing by any sharding degree."""

    weights: float
    weights_sharded: bool
    grads: float
    grads_sharded: bool
    optimizer: float
    optimizer_sharded: bool

    def per_param(self, shards):
        """(weights, grads, optimizer) bytes per parameter when sharded over `shards` ranks (a number or a
        numpy array): each part divides only if that ZeRO stage shards it."""
        return (self.weights / (shards if self.weights_sharded else 1),
                self.grads / (shards if self.grads_sharded else 1),
                self.optimizer / (shards if self.optimizer_sharded else 1))


def grad_dtype(train: TrainingSpec) -> str:
    """The dtype gradients are reduced in over data parallelism: the stated one, else (JAX) the parameters' own
    below fp32, else Megatron's fp32 main-grad buffer / FSDP2's fp32 reduce_dtype, else (DeepSpeed) the compute
    dtype."""
    if train.grad_dtype is not None:
        return train.grad_dtype
    if stack_of(train).grads_in_param_dtype and train.param_dtype != "fp32":
        return train.param_dtype  # MaxText weight_dtype=bfloat16: bf16 cotangents, never cast (Stack trait)
    if stack_of(train).grad_reduce_dtype == "fp32":
        return "fp32"
    return "fp16" if train.dtype == "fp16" else "bf16"


def grad_bytes_per_param(train: TrainingSpec) -> float:
    """Bytes of one gradient element as it is reduced over data parallelism."""
    return 4.0 if grad_dtype(train) == "fp32" else 2.0


def state_bytes_per_param(train: TrainingSpec, zero_stage: int, offload_optimizer: bool) -> StateBytesPerParam:
    """Weights/grads/optimizer bytes per parameter (ZeRO paper sec. 3.1, K=12: fp32 master 4 + Adam m, v
    4 each; 8 with bf16 moments) for each framework."""
    moments = 8.0 if train.optimizer_dtype == "fp32" else 4.0
    stack = stack_of(train)
    if stack.zero3_fp32_sharded_params and zero_stage == 3:
        # FSDP2 mixed precision: fp32 sharded params (4; MaxText weight_dtype bf16: 2), grads (fp32 unless stated),
        # Adam moments.
        return StateBytesPerParam(4.0 if train.param_dtype == "fp32" else 2.0, True, grad_bytes_per_param(train), True,
                                  0.0 if offload_optimizer else moments, True)
    # the stored gradient: Megatron's main-grad buffer and DeepSpeed's buffer hold the reduction dtype;
    # replicated (DDP-style) PyTorch keeps .grad in the compute dtype unless a dtype is stated
    stored_as_reduced = train.grad_dtype is not None or stack.grad_buffer_in_reduce_dtype
    grad = grad_bytes_per_param(train) if stored_as_reduced else 2.0
    return StateBytesPerParam(
        weights=2.0,
        weights_sharded=zero_stage >= 3,
        grads=grad,
        grads_sharded=zero_stage >= 2,
        optimizer=0.0 if offload_optimizer else 4.0 + moments,
        optimizer_sharded=zero_stage >= 1,
    )


def selective_recompute_modules(m: ModelSpec, fused_attention: bool = True,
                                fp8_delayed: bool = False) -> tuple[str, ...]:
    """Megatron-core `--recompute-modules` that "selective" means for this model when the plan names none: the
    attention core (the default, Korthikanti et al. 2022 sec. 5); MoE models recompute the norms and the expert
    activation instead (Megatron-Bridge gpt-oss-120b recipes: recompute_modules=["layernorm", "moe_act"]; Megatron's
    model zoo Qwen3 MoE commands: --recompute-modules moe_act layernorm); MLA models the norms and the MLA
    up-projections (DeepSeek-V3 report, arXiv 2412.19437, sec. 3.3.3: RMSNorm and MLA up-projections are
    recomputed, the SwiGLU output too; Megatron-Bridge's DeepSeek-V3 GB200 / H100 recipes: mla_up_proj). The
    attention core stays for MoE / MLA models only with unfused attention: a fused (flash) kernel keeps no score
    matrix, so recomputing it frees no memory and costs its forward again. Under FP8 delayed scaling megatron-core
    refuses moe_act and layernorm (planner.stacks.rules.recompute_modules_runnable): they are left out, and a model
    left with none recomputes megatron-core's default, the attention core."""
    if m.moe is None and m.mla is None:
        return ("core_attn",)
    mods = [] if fused_attention else ["core_attn"]
    if not fp8_delayed:
        mods += ["layernorm", "moe_act"] if m.moe is not None else ["layernorm"]
    if m.mla is not None:
        mods.append("mla_up_proj")
    return tuple(mods) or ("core_attn",)


def layernorm_module_norms(m: ModelSpec, moe_layer: bool) -> int:
    """Norms megatron-core's "layernorm" recompute module re-runs in one layer: those its Transformer Engine layer
    spec builds as their own modules (core_v0.16.1 models/gpt/gpt_layer_specs.py, transformer_layer.py
    recompute_input_layernorm / recompute_pre_mlp_layernorm skip an IdentityOp): the input norm with MLA (its
    down-projections are plain linears; otherwise the norm is fused into linear_qkv, a TE LayerNormLinear), the
    pre-MLP norm of an MoE layer (the router reads it; a dense MLP's is fused into linear_fc1)."""
    return int(m.mla is not None) + int(moe_layer)


def recompute_modules(m: ModelSpec, train: TrainingSpec, plan: ParallelPlan) -> tuple[str, ...]:
    """The modules a Megatron selective-recompute plan recomputes: those it names (ParallelPlan.recompute_modules),
    else selective_recompute_modules for the model, its attention kernel and its FP8 recipe (the one rule the cost
    model and the launch files read)."""
    if plan.recompute_modules:
        return plan.recompute_modules
    delayed = train.dtype == "fp8" and train.fp8_recipe == "delayed"
    return selective_recompute_modules(m, train.attention_impl != "unfused", delayed)


def _selective_dropped(m: ModelSpec, moe_layer: bool, tp: int, hs: float, g: float, etp: int,
                       expert_load: float = 1.0, mods: tuple[str, ...] | None = None,
                       fp8_moe_act_cache: bool = False) -> float:
    """Elements per token the selective modules `mods` (default: selective_recompute_modules) do not save beyond the
    attention core (their outputs are recomputed)."""
    mods = selective_recompute_modules(m) if mods is None else mods
    dropped = 0.0
    if "layernorm" in mods:
        # the outputs of the norms megatron-core recomputes (a fused norm's output stays saved by its LayerNormLinear)
        dropped += layernorm_module_norms(m, moe_layer) * g * hs
    whole_moe = "moe" in mods and moe_layer
    if whole_moe:
        # megatron-core checkpoints the whole MoE layer (moe_layer.py MoELayer.forward, moe_layer_recompute): it keeps
        # the layer's input, nothing inside (the expert activations among it)
        dropped += _moe_inner_elems(m, tp, g, etp, fp8_moe_act_cache, expert_load)
    if "moe_act" in mods and moe_layer and not whole_moe:  # the expert activation's output (the FC2 input)
        dropped += routed_copies_per_token(m, expert_load, tp) * routed_copy_elems(m, g, etp, fp8_moe_act_cache).fc2_in
    if "mla_up_proj" in mods and m.mla is not None:
        a = m.mla
        dropped += m.num_heads * (2 * (a.qk_nope_head_dim + a.qk_rope_head_dim) + a.v_head_dim) / tp  # q, k, v
    if "mlp" in mods and not moe_layer:
        # a dense layer's MLP checkpointed whole (megatron-core TransformerLayer recompute_mlp, dense MLPs only): its
        # input is kept, its intermediates (activation_elems_per_token's inter) are not, nor the output of the norm
        # fused into its linear_fc1 (a TE LayerNormLinear inside the checkpoint: compute.recomputed_passes_s re-runs it)
        f = m.ffn_hidden_size
        dropped += ((2 + g) * f if m.mlp_type == "gated" else (1 + g) * f) / tp + g * hs
    return dropped


def _op_sac_elems(m: ModelSpec, tp: int, sp: bool, hs: float, qkv: float, attn_out: float) -> float:
    """torchtitan 0.3.0 SelectiveAC (op-level): saves compute-intensive op outputs except every second matmul
    (fused wqkv: mm 1 saved, wo 2 recomputed, w1 3 saved, w3 4 recomputed, w2 5 saved), the SDPA/flex output with
    its fp32 logsumexp, and reduce-scatter outputs (torchtitan distributed/activation_checkpoint.py). Measured on
    CPU for tp 1 (tests/costmodel/test_memory_real_code.py): block input + qkv + attention out + lse + w1 out + w2
    out."""
    h = m.hidden_size
    lse = 2.0 * m.num_heads / tp  # fp32 logsumexp per head, in 2-byte elements
    mlp = m.ffn_hidden_size / tp  # w1 output (fc1 when not gated)
    if m.mlp_type == "gated":
        # w2's matmul output is [tokens, h] partial sums before its reduce-scatter (from the save list; tp > 1 not
        # measured)
        mlp += h
    rs = 2.0 * hs if (sp and tp > 1) else 0.0  # the two reduce-scatter outputs (wo, w2) under SP
    return hs + qkv + attn_out + lse + mlp + rs


def _attention_widths(m: ModelSpec, tp: int) -> tuple[float, float]:
    """(q, k, v elements, attention output elements) per token on one TP rank."""
    if m.mla is not None:
        a = m.mla
        dqk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q_lat = a.q_lora_rank or 0
        # MLA saves the latents (q: qr, kv: kvr + rope) and the up-projected q, k, v for the core.
        qkv = (q_lat + a.kv_lora_rank + a.qk_rope_head_dim) + m.num_heads * (2 * dqk + a.v_head_dim) / tp
        return qkv, m.num_heads * a.v_head_dim / tp
    return (m.num_heads + 2 * m.num_kv_heads) * m.head_dim / tp, m.num_heads * m.head_dim / tp


def _moe_mlp_elems(m: ModelSpec, tp: int, hs: float, g: float, etp: int, fp8_moe_act_cache: bool,
                   expert_load: float) -> float:
    """The MoE block: the norm's input and output (the MoE layer's input), then what the layer saves inside."""
    return hs + g * hs + _moe_inner_elems(m, tp, g, etp, fp8_moe_act_cache, expert_load)


class RoutedCopy(NamedTuple):
    """Elements (2-byte units) one routed token copy saves inside the experts, per expert-TP rank."""

    fc1_in: float  # the dispatched input, the fc1 GEMM input
    act_in: float  # the fc1 outputs the activation reads (gated: gate and up)
    fc2_in: float  # the activation output, the fc2 GEMM input


def routed_copy_elems(m: ModelSpec, g: float, etp: int, fp8_moe_act_cache: bool) -> RoutedCopy:
    """What one routed copy saves (g: the GEMM inputs' width, half with FP8 linears); fp8_moe_act_cache: the SwiGLU
    inputs are kept in FP8 (DeepSeek-V3 report sec. 3.3.2)."""
    fe = m.require_moe().expert_ffn_hidden_size / etp
    act_in = 2 * fe * (0.5 if fp8_moe_act_cache else 1.0) if m.mlp_type == "gated" else fe
    return RoutedCopy(g * m.hidden_size, act_in, g * fe)


def routed_copies_per_token(m: ModelSpec, expert_load: float, tp: int) -> float:
    """Routed copies per token of the micro-batch on one rank: top-k at the load, the tokens split over the TP ranks
    (sequence-parallel tokens enter the dispatcher)."""
    return m.require_moe().top_k * expert_load / tp


def _moe_inner_elems(m: ModelSpec, tp: int, g: float, etp: int, fp8_moe_act_cache: bool, expert_load: float) -> float:
    """What an MoE layer saves inside, beyond its input: per routed copy the dispatched input (fc1 GEMM input), fc1
    outputs and activation output (fc2 GEMM input); the shared experts'; the router's probabilities."""
    e = m.require_moe()
    per_copy = sum(routed_copy_elems(m, g, etp, fp8_moe_act_cache))
    shared_w = (e.shared_expert_ffn_hidden_size or e.expert_ffn_hidden_size) * e.num_shared_experts
    shared_inter = (2 + g) * shared_w if m.mlp_type == "gated" else (1 + g) * shared_w
    shared = shared_inter / tp if e.num_shared_experts else 0.0
    return routed_copies_per_token(m, expert_load, tp) * per_copy + shared + e.num_experts / tp


def maxtext_remat_sizes(m: ModelSpec, tp: int, hs: float) -> dict[str, float]:
    """Elements per token of each tensor MaxText's custom remat policy names, on one device: heads split by TP, the
    embed dimension too where the activations are (hs; MT:configs/base.yml logical_axis_rules 'activation_embed' ->
    tensor)."""
    a, k, d, f = m.num_heads, m.num_kv_heads, m.head_dim, m.ffn_hidden_size
    return {"decoder_layer_input": hs, "query_proj": a * d / tp, "key_proj": k * d / tp, "value_proj": k * d / tp,
            "qkv_proj": (a + 2 * k) * d / tp, "out_proj": hs, "context": a * d / tp, "mlpwi": 2 * f / tp,
            "mlpwi_0": f / tp, "mlpwi_1": f / tp, "mlpwo": hs}


def maxtext_custom_remat_elems(m: ModelSpec, tp: int, hs: float, device: tuple[str, ...],
                               offloaded: tuple[str, ...]) -> float:
    """Elements per token one layer keeps in HBM under MaxText's custom remat policy: the tensors named 'device'
    plus the layer input (decoder_layer_input, the scan's remat start point) unless offloaded; offloaded tensors
    stream to host memory (MT:configs/base.yml remat_policy custom; their transfer: compute.activation_offload_s)."""
    size = maxtext_remat_sizes(m, tp, hs)
    kept = set(device) | ({"decoder_layer_input"} - set(offloaded))
    return sum(size[n] for n in kept)


def maxtext_offloaded_elems(m: ModelSpec, tp: int, sp: bool, offloaded: tuple[str, ...]) -> float:
    """Elements per token one layer copies to host memory under MaxText's custom remat policy (the tensors named
    'offload'), and back for its backward."""
    size = maxtext_remat_sizes(m, tp, sp_width(m, tp, sp))
    return sum(size[n] for n in set(offloaded))


# megatron-core's default --min-offloaded-tensor-size (TransformerConfig.min_offloaded_tensor_size, 1024 * 1024
# elements; core_v0.19.2 and d98e8a64 transformer/transformer_config.py): a smaller saved tensor stays on the device
# (pipeline_parallel/fine_grained_activation_offload.py tensor_need_offloading_checker)
MIN_OFFLOADED_TENSOR_ELEMS = 1024 * 1024
# Offloaded tensors a stage still holds on the device at its peak, in layers: the last group of each module name in
# the backward order stays (PipelineOffloadManager.post_warmup_callback: "Do not offload the last X groups so that the
# reloading won't block the computing stream", offload margin 1 per name), and the group whose device-to-host copy is
# under way lives until the copy ends (ChunkOffloadHandler.bulk_offload_group: record_stream on the d2h stream)
OFFLOAD_RESIDENT_LAYERS = 2


class OffloadedTensor(NamedTuple):
    """One tensor an offload module saves for backward: elements per token (2-byte units) it takes on the device as
    activation_elems_per_token counts it, that the copy to host memory moves, and the tensor's own elements per token
    (what megatron-core's size threshold reads)."""

    device: float
    copied: float
    numel: float


def megatron_offload_tensors(m: ModelSpec, moe_layer: bool, tp: int, sp: bool, g: float, etp: int,
                             fp8_moe_act_cache: bool, expert_load: float, recomputed: tuple[str, ...],
                             fc1_saves_original: bool) -> dict[str, tuple[OffloadedTensor, ...]]:
    """The tensors each megatron-core offload module saves for backward in one layer (fine-grained activation
    offloading offloads every tensor saved inside the module's group: fine_grained_activation_offload.py
    PipelineOffloadManager saved_tensors_hooks), in activation_elems_per_token's terms. A module the layer runs as an
    IdentityOp (a norm fused into the next linear) saves nothing ("Skipped if using IdentityOp", the feature guide):
    the input norm without MLA, the pre-MLP norm of a dense layer (layernorm_module_norms). `recomputed`: the selective
    recompute modules (a recomputed module's checkpoint keeps its inputs, not its outputs). `fc1_saves_original`: the
    expert fc1 keeps its bf16 input when offloaded under a per-tensor FP8 recipe (experts.py
    set_save_original_input(linear_fc1) "to avoid the CPU overhead of multiple d2h copies", not with MXFP8)."""
    hs = sp_width(m, tp, sp)
    T = OffloadedTensor
    _, attn_out = _attention_widths(m, tp)
    if m.mla is not None:  # the core's q, k, v: MLA's up-projected ones (its latents are the projections')
        a = m.mla
        dqk = a.qk_nope_head_dim + a.qk_rope_head_dim
        qkv = (m.num_heads * dqk / tp, m.num_heads * dqk / tp, m.num_heads * a.v_head_dim / tp)
    else:
        qkv = (m.num_heads * m.head_dim / tp, m.num_kv_heads * m.head_dim / tp, m.num_kv_heads * m.head_dim / tp)
    core = tuple(T(w, w, w) for w in qkv)
    if "core_attn" not in recomputed:  # the attention output and its fp32 softmax statistics (2 units per head)
        core += (T(attn_out, attn_out, attn_out), T(2.0 * m.num_heads / tp, 2.0 * m.num_heads / tp, m.num_heads / tp))
    # the output projection's input is the core's output, one storage with it in 16 bits; FP8 adds its own copy
    proj = (T(g * attn_out, g * attn_out, attn_out),) if g < 1 else \
        ((T(attn_out, attn_out, attn_out),) if "core_attn" in recomputed else ())
    out: dict[str, tuple[OffloadedTensor, ...]] = {
        "attn_norm": (T(hs, hs, hs),) if m.mla is not None else (),
        # TE's LayerNormLinear keeps the norm's input and its output, the GEMM input (MLA: not priced, rules)
        "qkv_linear": (T(hs, hs, hs), T(g * hs, g * hs, hs)) if m.mla is None else (),
        "core_attn": core,
        "attn_proj": proj,
        "mlp_norm": (T(hs, hs, hs),) if moe_layer else (),
    }
    if moe_layer:  # the routed copies' tensors as _moe_inner_elems counts them (routed_copy_elems)
        copies, h = routed_copies_per_token(m, expert_load, tp), m.hidden_size
        saved, full = routed_copy_elems(m, g, etp, fp8_moe_act_cache), routed_copy_elems(m, 1.0, etp, False)
        out["expert_fc1"] = (T(copies * saved.fc1_in, copies * (h if fc1_saves_original else saved.fc1_in),
                               copies * h),)
        out["moe_act"] = (T(copies * saved.act_in, copies * saved.act_in, copies * full.act_in),)
    return out


def offloaded_elems(ctx: Context, shape: Shape, k: LayerKind) -> tuple[float, float]:
    """(device, copied) elements per token one layer of kind `k` sends to host memory under the plan's Megatron
    offload modules (megatron_offload_tensors), the tensors below megatron-core's size threshold
    (MIN_OFFLOADED_TENSOR_ELEMS, on this micro-batch's tokens) left out. The plan's recompute mode stands for every
    layer, as the layer's time does (compute.activation_offload_s): nothing under full recompute, whose checkpoints
    save only the layer input (the layers a partial full recompute leaves out are not credited: a conservative
    figure). Cached in the context."""
    p = shape.plan
    mode = p.recompute
    if not p.offload_modules or mode == "full":
        return 0.0, 0.0
    mods = selective_modules(ctx, p) if mode == "selective" else None
    load = stated_load(ctx, p.ep) or 1.0
    key = ("offloaded", k.moe, p.tp, shape.sp, mode, p.etp, p.offload_modules, mods, load, shape.tokens)
    dev, cop = ctx.act_cache.get(key + ("device",)), ctx.act_cache.get(key + ("copied",))
    if dev is None or cop is None:
        tr = ctx.train
        fp8 = tr.dtype == "fp8" and ctx.stack.fp8_saves_gemm_inputs
        groups = megatron_offload_tensors(ctx.model, k.moe, p.tp, shape.sp, 0.5 if fp8 else 1.0, p.etp,
                                          tr.fp8_moe_act_cache, load, mods or (),
                                          fp8 and tr.fp8_recipe_run not in ("mxfp8", "nvfp4"))
        kept = [t for name in p.offload_modules for t in groups.get(name, ())
                if t.numel * shape.tokens >= MIN_OFFLOADED_TENSOR_ELEMS]
        dev = ctx.act_cache[key + ("device",)] = sum(t.device for t in kept)
        cop = ctx.act_cache[key + ("copied",)] = sum(t.copied for t in kept)
    return dev, cop


def sp_width(m: ModelSpec, tp: int, sp: bool) -> float:
    """Elements per token of a hidden-state tensor on one device: split by TP in the sequence-parallel region."""
    return m.hidden_size / tp if (sp and tp > 1) else m.hidden_size


def activation_elems_per_token(
    m: ModelSpec, moe_layer: bool, tp: int, sp: bool, recompute: str, framework: str, etp: int = 1,
    fp8_gemm_inputs: bool = False, fp8_moe_act_cache: bool = False, expert_load: float = 1.0,
    compiled: bool = False, custom_remat: tuple[tuple[str, ...], tuple[str, ...]] | None = None,
    selective_modules: tuple[str, ...] | None = None,
) -> float:
    """Elements (at 2 bytes each) one layer saves for backward, per token of the micro-batch on
    this device (tokens already divided by CP), sharded by TP as Megatron shards them. fp8_moe_act_cache:
    the experts' SwiGLU inputs are saved in FP8 (DeepSeek-V3 report sec. 3.3.2). expert_load: routed tokens
    per expert relative to the balanced load (the capacity factor when padded to capacity). compiled: the
    layer runs under torch.compile (PyTorch-native stacks), whose partitioner fuses the SwiGLU. selective_modules:
    Megatron's recomputed modules (recompute_modules; None: selective_recompute_modules)."""
    hs = sp_width(m, tp, sp)  # tensors in the sequence-parallel region
    stack = traits(framework)
    if recompute == "full":
        return hs  # only the layer input (checkpoint), Korthikanti sec. 5 "full recomputation"
    qkv, attn_out = _attention_widths(m, tp)
    if recompute == "selective" and custom_remat is not None:
        return maxtext_custom_remat_elems(m, tp, hs, *custom_remat)
    if recompute == "selective" and stack.selective_saves == "op_sac" and not moe_layer:
        return _op_sac_elems(m, tp, sp, hs, qkv, attn_out)
    # Transformer Engine FP8 linears save their GEMM inputs for backward as FP8 (1 byte, half an element)
    g = 0.5 if fp8_gemm_inputs else 1.0
    # attention block: norm input + qkv input (norm output) + q,k,v + softmax stats (fp32 per head) + O
    # (the attention output O stays saved in bf16 for the attention backward; with FP8 the output
    # projection saves its own FP8 copy on top)
    attn = hs + g * hs + qkv + attn_out * (2.0 - g if g < 1 else 1.0) + 2.0 * m.num_heads / tp
    if moe_layer:
        mlp = _moe_mlp_elems(m, tp, hs, g, etp, fp8_moe_act_cache, expert_load)
    else:
        # eager torch SwiGLU: `silu(gate) * up` keeps silu(gate) as well (measured on torchtitan's FeedForward)
        act_kept = 1.0 if (stack.eager_swiglu_keeps_act and not compiled) else 0.0
        f = m.ffn_hidden_size
        # gated: gate, up, act(gate)*up (fc2 input) [+ act(gate) in eager torch]; plain: fc1 out, act (fc2 input)
        inter = (2 + g + act_kept) * f if m.mlp_type == "gated" else (1 + g) * f
        mlp = hs + g * hs + inter / tp
    # two fp32 rstd per token (torch _fused_rms_norm keeps (input, rstd, weight)): 8 B = 4 elements
    total = attn + mlp + (4.0 if stack.norm_keeps_rstd else 0.0)
    if recompute == "selective" and stack.selective_saves in ("half", "op_sac"):
        # MaxText remat "minimal"-like policies, and op-level SAC in MoE layers (not measured): every other
        # matmul output and the attention output, roughly half the per-layer tensors
        return hs + 0.5 * (total - hs)
    if recompute == "selective":
        return total - _selective_dropped(m, moe_layer, tp, hs, g, etp, expert_load, selective_modules,
                                          fp8_moe_act_cache)
    return total


# Bytes per logit at the loss's peak with each stack's own loss kernel: Stack.logit_bytes (planner/stacks/).
# A fused cross-entropy kernel on the 16-bit logits (flash-attn losses/cross_entropy.py CrossEntropyLoss, llm-foundry's
# MPT default): it saves the 2-byte logits and its backward writes a 2-byte gradient, with no fp32 copy.
FUSED_LOGIT_BYTES = 4.0
# torchtitan's ChunkedLossWrapper keeps each chunk's bf16 logits alive through that chunk's backward (the loop
# variable `logits`), on top of the loss's own bytes: 2 B per logit of one chunk (torchtitan components/loss.py).
CHUNK_LOGIT_BYTES = 2.0
# ... accumulates the hidden-state gradient of every chunk in an fp32 buffer (GradAccumulator, dtype float32), 4 B
# per hidden element of the micro-batch, and splits the hidden states into detached contiguous chunks (a bf16 copy,
# 2 B, when the micro-batch has more than one sequence; counted always).
CHUNK_GRAD_BUFFER_BYTES = 4.0 + 2.0


def logits_bytes_per_token(m: ModelSpec, tp: int, train: TrainingSpec) -> float:
    """Peak bytes of the loss per token of the micro-batch, vocab split by TP (vocab-parallel / loss-parallel).
    Chunked (train.loss_chunks > 1): one chunk's logits and loss at a time plus the fp32 hidden-gradient buffer."""
    stack = stack_of(train)
    # TP > 1 splits the vocabulary: the stack's vocab-parallel loss (Stack.loss_parallel_logit_bytes) when it has one
    own = stack.loss_parallel_logit_bytes if (tp > 1 and stack.loss_parallel_logit_bytes) else stack.logit_bytes
    per_logit = FUSED_LOGIT_BYTES if train.fused_cross_entropy else own
    if train.loss_chunks <= 1:
        return per_logit * m.vocab_size / tp
    # a fused loss saves the chunk's logits themselves: they are already in its 4 B
    chunk_logits = 0.0 if train.fused_cross_entropy else CHUNK_LOGIT_BYTES
    return ((per_logit + chunk_logits) * m.vocab_size / tp / train.loss_chunks
            + CHUNK_GRAD_BUFFER_BYTES * m.hidden_size)


# ---- per-device memory of each pipeline stage ---------------------------------------------------------

# Unfused attention saves the softmax output (2 B per score element, for the softmax's backward and the AV GEMM's),
# and where an attention dropout runs (TrainingSpec.attention_dropout) its mask (1 B) and its output (2 B, the AV GEMM's
# input then): 5 a s^2 b bytes per layer with dropout (Korthikanti et al. 2022, arXiv 2205.05198, eq. 1), 2 a s^2 b
# without, PyTorch's dropout at p = 0 returning its input (tests/costmodel/test_unfused_attention_memory.py counts both
# on PyTorch's autograd).
UNFUSED_SOFTMAX_BYTES = 2.0
UNFUSED_DROPOUT_BYTES = 3.0


def unfused_score_bytes(train: TrainingSpec) -> float:
    """Bytes unfused attention keeps per score element of a layer until its backward (UNFUSED_SOFTMAX_BYTES, +
    UNFUSED_DROPOUT_BYTES with attention dropout)."""
    return UNFUSED_SOFTMAX_BYTES + (UNFUSED_DROPOUT_BYTES if train.attention_dropout else 0.0)


# Unsharded bf16 copies ZeRO-3/FSDP holds at once: the layer being computed and the prefetched next one.
ZERO3_GATHERED_LAYERS = 2
# The final norm keeps its bf16 input and its bf16 output (the LM head's saved input): 4 B per hidden element
# (measured on torchtitan, tests/costmodel/test_memory_real_code.py).
FINAL_NORM_BYTES_PER_H = 4.0

STATE = formula(
    "memory.states",
    "params on the stage per device (dense / tp, experts / (ep x etp)) x bytes per param / Z when this ZeRO "
    "stage shards the part (Z = zero_shard_size or dp x cp; experts: the expert-data-parallel group); FP8 with "
    "Transformer Engine: + the linears' weights x (TE's quantized copy: 1 B + 1 B transpose on Hopper, 1 B on "
    "Blackwell, MXFP8 2 x (1 + 1/32) B), less the 2-byte copy when they are the FP8 primary weights",
    "Rajbhandari et al., ZeRO, SC20, arXiv 1910.02054, sec. 3.1 and 5; DualPipe keeps two parameter copies "
    "(DeepSeek-V3 report, arXiv 2412.19437, Table 2); Transformer Engine v2.9 module/base.py get_weight_workspace, "
    "tensor/float8_tensor.py, mxfp8_tensor.py",
)
ACTIVATIONS = formula(
    "memory.activations",
    "saved elements per token per layer x tokens x 2 B x layers x in-flight micro-batches (+ one layer's "
    "full activations under full recompute, on the last stage max(that, the loss) + the final norm 4 h B, "
    "+ unfused scores 2 a s^2 b (5 a s^2 b with attention dropout) in layers not recomputed (an MTP module's too) "
    "and in the one "
    "being recomputed, + loss logits "
    "(6 B Megatron vocab-parallel, 12 B torch fp32 cross entropy, 16 B torchtitan's loss-parallel one with tp > 1, "
    "4 B a fused loss kernel) x V / tp on the "
    "last stage, + the embedding output on the first); Megatron's offload modules' tensors (from 1M elements) leave "
    "the saved elements, 2 layers' worth of them stay (the margin group and the copy under way)",
    "Korthikanti et al. 2022, arXiv 2205.05198, sec. 4.1 eq. 1-2 and sec. 5; in-flight micro-batches: "
    "Narayanan et al. SC21 sec. 2.2; megatron-core pipeline_parallel/fine_grained_activation_offload.py",
)
BUFFERS = formula(
    "memory.buffers",
    "ZeRO-3 / FSDP: 2 gathered bf16 layers + one layer's gradients (DeepSpeed: at most max(live limit, largest "
    "module) gathered, largest module + reduce bucket of gradients); FSDP under PP: the stage's unsharded "
    "parameters and gradients (the FP8 linears' gathered weights at 1 B with torchtitan's float8 all-gather, at TE's "
    "quantized size with Megatron's FP8 parameters); + the MoE flex dispatcher's DeepEP buffers "
    "(moe.dispatcher_buffer_bytes); + with "
    "torch.distributed.pipelining, per virtual stage m gradient receive buffers (not on the last stage), the input "
    "receive buffers of the micro-batches not in flight (not on the first) and the in-flight outputs, each tokens x "
    "h (/ tp with SP) x 2 B",
    "ZeRO-3 prefetch (Rajbhandari et al. SC21, arXiv 2104.07857, sec. 6.1); DeepSpeed stage3_max_live_parameters, "
    "reduce_bucket_size defaults; torchtitan reshard_after_forward=False with PP; torch.distributed.pipelining "
    "stage.py (args_recv_info / grad_recv_info per micro-batch, fwd_cache)",
)
OVERHEAD = formula(
    "memory.overhead",
    "framework overhead (CUDA context, NCCL buffers) + (allocator fragmentation - 1) x allocated",
    "Stack.overhead_gib (planner/stacks/) and calibration.ALLOCATOR_FRAGMENTATION (fitted on the torchtitan rows)",
)
PEAK = formula("memory.peak", "sum of the parts of the stage with the largest sum", "the per-stage parts above")
CAPACITY = formula("memory.capacity", "HBM capacity of one device",
                   "hardware profile hbm_capacity_gib (vendor datasheet, hardware_profiles/*.yaml)")
HOST = formula("memory.host", "optimizer states x bytes per param / Z under ZeRO-Offload (as HBM would hold them) + "
               "MaxText's offloaded layer tensors or Megatron's offloaded module tensors (elements per token x 2 B) x "
               "tokens x layers x in-flight micro-batches; kept in host memory, not part of the HBM peak",
               "ZeRO-Offload (Ren et al. 2021, arXiv 2101.06840); MaxText configs/base.yml remat_policy custom "
               "('offload'); megatron-core fine-grained activation offloading (--offload-modules)")
HOST_CAPACITY = formula("memory.host_capacity", "host DRAM per device: the node's memory / its devices, of the "
                        "hardware profile's reference system (a cluster file's hardware: {base: ..., "
                        "host_memory_gib: N} states yours); a plan fits only if what it keeps in host memory is "
                        "within it",
                        "hardware_profiles/*.yaml host_memory_gib (DGX system guides, GCP machine types)")
USABLE = formula("memory.usable", "HBM - fit reserve (0 under XLA) - --memory-headroom; the margin: peak <= usable x "
                 "(1 - margin), else the inner margin (the median miss) where no plan keeps the margin; neither "
                 "with a headroom given (planner.costmodel.capacity)",
                 "calibration.FIT_RESERVE_GIB; calibration.MEMORY_BAND_REL and MEMORY_BAND_MEDIAN_REL (q0.90 and "
                 "q0.50 of the cross-validated misses of the published peaks, planner.analysis.membands)")


@dataclass(frozen=True)
class StageParams:
    """Parameters one device of each stage holds before ZeRO sharding: dense (split by TP) and routed
    experts (split by EP x ETP); the first stage adds the embedding, the last the LM head and final norm."""

    dense: tuple[float, ...]
    experts: tuple[float, ...]
    # of those, the weights of the transformer layers' linears (attention projections, dense / shared MLP, routed
    # experts), the GEMMs an FP8 recipe runs in FP8; the embedding, the LM head, norms and routers stay 16-bit
    linear: tuple[float, ...] = ()


def layer_linear_params_per_device(ctx: Context, plan: ParallelPlan, kid: int) -> float:
    """Parameters of layer kind `kid`'s linears on one device, unsharded by ZeRO: dense ones split by TP, routed
    experts by EP x ETP (StageParams.linear)."""
    lp = ctx.kinds[kid].params
    return (lp.attn + lp.mlp_dense + lp.shared_experts) / plan.tp + lp.routed_experts / (plan.ep * plan.etp)


def stage_params(ctx: Context, plan: ParallelPlan, split: list[StageSplit]) -> StageParams:
    tp, pp = plan.tp, plan.pp
    dense_stage, expert_stage, linear_stage = [], [], []
    head = head_stage(plan)  # rank 0 in a V
    for s in range(pp):
        _, hc, tc = split[s]
        # the head rank also holds the MTP modules' layers (planner.costmodel.mtp)
        allc = hc + tc + (mtp_layer_counts(ctx) if s == head else Counter())
        dense = sum(n * (ctx.kinds[j].params.total - ctx.kinds[j].params.routed_experts) for j, n in allc.items()) / tp
        experts = sum(n * ctx.kinds[j].params.routed_experts for j, n in allc.items()) / (plan.ep * plan.etp)
        linear_stage.append(sum(n * layer_linear_params_per_device(ctx, plan, j) for j, n in allc.items()))
        if s == 0:
            dense += ctx.params.embedding / tp
        if s == head:
            dense += (ctx.params.lm_head or (ctx.params.embedding if pp > 1 else 0)) / tp + ctx.params.final_norm
            extra, extra_linear = mtp_extra_params(ctx, s, plan.schedule)  # eh_proj, norms, the embedding copy
            dense += extra / tp
            linear_stage[-1] += extra_linear / tp
        dense_stage.append(dense)
        expert_stage.append(experts)
    return StageParams(tuple(dense_stage), tuple(expert_stage), tuple(linear_stage))


def _layer_params_per_device(ctx: Context, plan: ParallelPlan, kid: int) -> float:
    lp = ctx.kinds[kid].params
    return (lp.total - lp.routed_experts) / plan.tp + lp.routed_experts / (plan.ep * plan.etp)


def largest_layer_kind(ctx: Context, plan: ParallelPlan, kind_ids) -> int | None:
    """The layer kind of which one device holds the most parameters, unsharded by ZeRO (dense parts split by TP,
    routed experts by EP x ETP); None without kinds."""
    return max(kind_ids, key=lambda j: _layer_params_per_device(ctx, plan, j), default=None)


def largest_layer_params_per_device(ctx: Context, plan: ParallelPlan, kind_ids) -> float:
    """Parameters one device holds of the largest of these layer kinds (largest_layer_kind)."""
    big = largest_layer_kind(ctx, plan, kind_ids)
    return 0.0 if big is None else _layer_params_per_device(ctx, plan, big)


def largest_matrix_params_per_device(m: ModelSpec, plan: ParallelPlan, fused_gate: bool = True,
                                     experts_stacked: bool = False) -> float:
    """The largest single weight matrix (one module) a device holds: the fused q/k/v projection (Megatron's
    query_key_value), the output projection, or the first MLP matrix (gate and up fused when gated and fused_gate),
    split by TP; a routed expert's first matrix split by ETP, or, where a stack keeps the routed experts' matrix as
    one array (experts_stacked, Stack.moe_experts_stacked), that array over the device's num_experts / ep experts.
    MLA attention counts as one module (an upper bound)."""
    h, tp = m.hidden_size, plan.tp
    gate = 2 if (m.mlp_type == "gated" and fused_gate) else 1
    if m.mla is not None:
        attn = float(layer_params(m, 0).attn)
    else:
        attn = float(h * m.head_dim * (m.num_heads + 2 * m.num_kv_heads))
    out = max(attn, h * m.ffn_hidden_size * gate) / tp
    if m.moe is not None:
        e = m.moe
        experts = max(1, e.num_experts // max(1, plan.ep)) if experts_stacked else 1
        out = max(out, experts * h * e.expert_ffn_hidden_size * gate / plan.etp,
                  h * (e.shared_expert_ffn_hidden_size or 0) * gate / tp)
    return out


def act_elems(ctx: Context, shape: Shape, k: LayerKind, mode: str) -> float:
    """activation_elems_per_token of layer kind `k` under recompute `mode`, cached in the context."""
    p, tr = shape.plan, ctx.train
    mods = selective_modules(ctx, p) if mode == "selective" else None
    # the busiest rank's routed copies at the load the training states (the balanced router's sampling skew, which
    # moe.expert_load adds to the time, is not charged here)
    load = stated_load(ctx, p.ep) or 1.0
    key = (k.moe, k.local, p.tp, shape.sp, mode, p.etp, p.remat_device, p.remat_offloaded, mods, load)
    v = ctx.act_cache.get(key)
    if v is None:
        v = ctx.act_cache[key] = activation_elems_per_token(
            ctx.model, k.moe, p.tp, shape.sp, mode, tr.framework, p.etp,
            fp8_gemm_inputs=(tr.dtype == "fp8" and ctx.stack.fp8_saves_gemm_inputs),
            fp8_moe_act_cache=tr.fp8_moe_act_cache, expert_load=load, compiled=tr.torch_compile,
            custom_remat=p.custom_remat, selective_modules=mods)
    return v


def selective_modules(ctx: Context, plan: ParallelPlan) -> tuple[str, ...] | None:
    """The modules selective recompute re-runs: in a stack that names them (Stack.selective_recomputes "modules"),
    recompute_modules; where selective recompute is the attention core alone (Megatron-DeepSpeed's, Korthikanti et al.
    2022 sec. 5), the core; else None (the stack's own policy: compute.selective_recompute_s, activation saves)."""
    if ctx.stack.selective_recomputes == "modules":
        return recompute_modules(ctx.model, ctx.train, plan)
    return ("core_attn",) if ctx.stack.selective_recomputes == "attention_core" else None


def recomputes_moe_layer(ctx: Context, plan: ParallelPlan) -> bool:
    """Selective recompute re-runs whole MoE layers: megatron-core's "moe" module checkpoints the layer's route,
    dispatch, experts, combine and shared experts (moe_layer.py MoELayer.forward custom_forward under
    moe_layer_recompute), so its forward collectives re-run too (layers._layer_times) and its tensors exist again
    while its backward runs (stage_activations). Read per stage: the answer is kept per module set in ctx.act_cache
    (the default set is the context's model's and recipe's)."""
    return plan.recompute == "selective" and names_moe_module(ctx, plan)


def names_moe_module(ctx: Context, plan: ParallelPlan) -> bool:
    """The plan's selective module set holds megatron-core's "moe" module, whatever the plan's recompute mode: what a
    layer's selective re-run time is built from (layers.LayerTimes.selective, shared by the plans of one time key)."""
    if ctx.stack.selective_recomputes != "modules":
        return False
    key = ("recomputes_moe_layer", plan.recompute_modules)
    v = ctx.act_cache.get(key)
    if v is None:
        v = ctx.act_cache[key] = float("moe" in (selective_modules(ctx, plan) or ()))
    return bool(v)


class StageMemory(NamedTuple):
    """Bytes per device of one stage at its peak."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    buffers: float
    overhead: float  # framework overhead + allocator fragmentation
    inflight: float  # micro-batches whose activations the stage holds
    host: float = 0.0  # bytes kept in host memory instead (host_bytes; not part of the HBM peak)

    @property
    def total_gib(self) -> float:
        return sum(self.parts_gib())

    @property
    def allocated_gib(self) -> float:
        """What the caching allocator hands out at the peak: every part but the framework's own memory and the
        allocator's fragmentation (PyTorch's allocated bytes, as Megatron logs them)."""
        return (self.weights + self.grads + self.optimizer + self.activations + self.buffers) / GIB

    def parts_gib(self) -> tuple[float, ...]:
        """MEMORY_PARTS order, in GiB."""
        return (self.weights / GIB, self.grads / GIB, self.optimizer / GIB, self.activations / GIB,
                self.buffers / GIB, self.overhead / GIB)


def layer_activations(ctx: Context, shape: Shape, split: StageSplit) -> tuple[float, float]:
    """_layer_activations, cached per search under every input it reads: the layer-time key (Shape.time_key: TP,
    sequence parallelism, ETP, the micro-batch's tokens, the custom remat policy, the recompute modules), the recompute
    mode and remat tensor names (act_elems' key) and the stage's split itself (by id, held beside the answer so that
    the id stays its own). The plans of one layout, micro-batch and recompute that differ only in their interleaving
    share it."""
    p = shape.plan
    key = (shape.time_key, p.recompute, p.remat_device, p.remat_offloaded, id(split))
    hit = ctx.layer_acts_cache.get(key)
    if hit is None:
        hit = ctx.layer_acts_cache[key] = (split, _layer_activations(ctx, shape, split))
    return hit[1]


def _layer_activations(ctx: Context, shape: Shape, split: StageSplit) -> tuple[float, float]:
    """(bytes saved per micro-batch by the stage's layers, one layer's full activations at most)."""
    _, hc, tc = split
    tokens = shape.tokens
    per_mb = 0.0
    worst_layer = 0.0
    for part, mode in ((hc, shape.plan.recompute), (tc, "none")):
        for kid, cnt in part.items():
            # less what the offload modules send to host memory (offloaded_elems; what stays: stage_activations)
            saved = act_elems(ctx, shape, ctx.kinds[kid], mode) - offloaded_elems(ctx, shape, ctx.kinds[kid])[0]
            per_mb += cnt * saved * tokens * ACT_ELEM_BYTES
    for kid in set(hc) | set(tc):
        worst_layer = max(worst_layer, act_elems(ctx, shape, ctx.kinds[kid], "none") * tokens * ACT_ELEM_BYTES)
    return per_mb, worst_layer


def mtp_activations(ctx: Context, shape: Shape) -> float:
    """Bytes the MTP modules (planner.costmodel.mtp) save per micro-batch: their layer's under the plan's recompute
    (megatron-core checkpoints it under full recompute whatever the recomputed layer count) and their own inputs."""
    kid = mtp_kind(ctx)
    if kid is None:
        return 0.0
    per_token = (act_elems(ctx, shape, ctx.kinds[kid], shape.plan.recompute) * ACT_ELEM_BYTES
                 + mtp_input_bytes_per_token(ctx, shape))
    return ctx.model.mtp_layers * per_token * shape.tokens


def stage_activations(ctx: Context, shape: Shape, split: list[StageSplit], s: int, inflight: float,
                      layer_acts: tuple[float, float] | None = None) -> float:
    """Activation bytes stage `s` holds at its peak (formula memory.activations). `layer_acts`: the stage's
    _layer_activations, when the caller has them."""
    p, m, tokens = shape.plan, ctx.model, shape.tokens
    n_layers = split[s][0]
    per_mb, worst_layer = layer_acts if layer_acts is not None else _layer_activations(ctx, shape, split[s])
    acts = per_mb * inflight
    # one layer's full activations exist while it is recomputed; on the last stage the loss and the LM head's
    # backward finish before any block is recomputed, so the two peaks do not add (measured on torchtitan,
    # tests/costmodel/test_memory_real_code.py)
    custom = p.custom_remat is not None
    recomputing = worst_layer if (p.recompute == "full" or custom) else 0.0
    if recomputes_moe_layer(ctx, p):
        # a recomputed MoE layer's dropped tensors exist again while its backward runs, one layer at a time
        moe_kinds = [ctx.kinds[kid] for kid in set(split[s][1]) | set(split[s][2]) if ctx.kinds[kid].moe]
        recomputing = max((act_elems(ctx, shape, k, "none") - act_elems(ctx, shape, k, "selective")
                           for k in moe_kinds), default=0.0) * tokens * ACT_ELEM_BYTES
    if ctx.unfused_attention:
        # Korthikanti eq. 1: softmax output (with dropout: its mask and output), kept only by
        # layers saving everything: selective recompute drops exactly these (Table 2: 34 s b h / t with SP),
        # full recompute keeps them for the layers it does not recompute
        # (selective recompute in a stack that names its modules drops them only with core_attn among them)
        mods = selective_modules(ctx, p) if p.recompute == "selective" else None
        kept = {"none": n_layers, "selective": 0 if mods is None or "core_attn" in mods else n_layers}.get(
            p.recompute, 0 if p.recompute_layers is None else max(0, n_layers - p.recompute_layers))
        score_layer = unfused_score_bytes(ctx.train) * m.num_heads / p.tp * ctx.train.seq_len * tokens
        # the layer being recomputed in the backward materialises its scores again (Korthikanti sec. 5: selective
        # recompute re-runs the attention core one layer at a time), once, not per micro-batch in flight
        acts += inflight * kept * score_layer + (score_layer if p.recompute != "none" else 0.0)
        if s == head_stage(p) and m.mtp_layers:
            # the MTP modules' transformer layers keep their scores as the stage's layers do (mtp_activations counts
            # the rest of what they save), unless selective recompute drops the core or full recompute checkpoints
            # the module (megatron-core does, whatever the recomputed layer count: mtp_activations)
            mtp_keeps = p.recompute == "none" or (p.recompute == "selective" and kept > 0)
            acts += inflight * m.mtp_layers * score_layer * mtp_keeps
    if s == head_stage(p):  # the loss: the last rank, rank 0 in a V
        # the MTP modules' losses are saved beside the main one until the backward (planner.costmodel.mtp)
        loss = tokens * logits_bytes_per_token(m, p.tp, ctx.train) * (1 + m.mtp_layers)
        acts += max(loss, recomputing)
        # the final norm's input and output (the LM head's input), once more per MTP module
        acts += tokens * FINAL_NORM_BYTES_PER_H * m.hidden_size * (1 + m.mtp_layers)
        acts += mtp_activations(ctx, shape) * inflight
    else:
        acts += recomputing
    if s == 0:
        # embedding output kept for the first layer
        acts += tokens * m.hidden_size * ACT_ELEM_BYTES * (1 if p.pp > 1 else 0)
    if p.offload_modules:  # the offloaded tensors still on the device: the margin group and the copy under way
        acts += OFFLOAD_RESIDENT_LAYERS * tokens * ACT_ELEM_BYTES * max(
            (offloaded_elems(ctx, shape, ctx.kinds[kid])[0] for kid in set(split[s][1]) | set(split[s][2])),
            default=0.0)
    return acts


# ---- FP8 weights --------------------------------------------------------------------------------------------------
# Bytes per weight element of Transformer Engine's quantized weight as its GEMMs use it (TE v2.9, the release of the
# 25.11 NeMo container's Megatron-Bridge rows; tensor/*.py). Per-tensor scaling (delayed, current: Float8Tensor): the
# row-wise FP8 data, 1 B, plus on Hopper its transpose, 1 B, for the dgrad GEMM, since FP8 GEMMs there take only the TN
# layout (utils.py is_non_tn_fp8_gemm_supported: SM 10.x / 13+; float8_tensor_storage.py update_usage creates
# _transpose only where it is false). MXFP8 (MXFP8Tensor): row-wise and column-wise data, 1 B each, with one E8M0
# scale per 32 elements for each, 1/32 B (mxfp8_tensor.py make_empty; MXFP8_BLOCK_SCALING_SIZE 32). Blockwise
# (Float8BlockwiseQTensor, 128 x 128 weight blocks): row- and column-wise data, 1 B each, fp32 scales per block
# (float8_blockwise_tensor.py block_len 128).
FP8_DATA_BYTES = 1.0
MXFP8_SCALE_BYTES = 1.0 / 32
BLOCKWISE_SCALE_BYTES = 4.0 / (128 * 128)


def te_fp8_weight_bytes(recipe: str | None, non_tn_gemm: bool) -> float:
    """Bytes per weight element of TE's quantized weight under `recipe` (None: tensorwise, the Megatron emitter's
    default); non_tn_gemm: the GPU's FP8 GEMMs take any layout (Blackwell: one copy serves both)."""
    if recipe == "mxfp8":
        return 2 * (FP8_DATA_BYTES + MXFP8_SCALE_BYTES)
    if recipe == "blockwise":
        return 2 * (FP8_DATA_BYTES + BLOCKWISE_SCALE_BYTES)
    return FP8_DATA_BYTES if non_tn_gemm else 2 * FP8_DATA_BYTES


def fp8_weight_copy_bytes(ctx: Context, zero_stage: int = 0, shards: float = 1.0) -> float:
    """Bytes per FP8-linear parameter (StageParams.linear) the stack keeps beyond the 16-bit weight the states count
    (formula memory.states). Transformer Engine (Stack.fp8_weight_cache) with bf16 primary weights: its cached quantized
    weight of the whole local matrix, kept from the step's first micro-batch to the next step (under ZeRO-3 too: TE's
    cache is not sharded unless its own fsdp_group is given, which megatron-core does not pass); with FP8 primary
    weights (--fp8-param-gather, TrainingSpec.fp8_param_gather) the quantized weight is the parameter itself, in place
    of the 2-byte copy (DDP's param buffer holds it: megatron-core param_and_grad_buffer.py), and TE returns it as is
    (base.py get_weight_workspace: a QuantizedTensor gets update_usage, no cache); under ZeRO-3 (Megatron-FSDP) the
    shard keeps the quantized data over `shards` ranks and the gathered weight is a buffer (zero3_buffers;
    Megatron-Bridge sets keep_fp8_transpose_cache False with it). 0 for stacks that cast on the fly."""
    tr = ctx.train
    cache = ctx.stack.fp8_weight_cache if tr.fp8_weight_cache is None else tr.fp8_weight_cache
    if tr.dtype != "fp8" or not cache:
        return 0.0
    if tr.fp8_param_gather and zero_stage >= 3:
        # the shard: per-tensor scaling keeps the data only (a transpose is made from it once gathered); the block
        # scalings keep both usages, which cannot be made from one another
        return (te_fp8_weight_bytes(tr.fp8_recipe, True) - PARAM_GATHER_BYTES) / shards
    cached = te_fp8_weight_bytes(tr.fp8_recipe, ctx.cluster.hardware.mx_tensor_cores)
    return cached - (PARAM_GATHER_BYTES if tr.fp8_param_gather else 0.0)


def fp8_gathered_weight_bytes(ctx: Context) -> float:
    """Bytes per FP8-linear parameter of an all-gathered (unsharded) weight with TrainingSpec.fp8_param_gather:
    torchao's FSDP float8 all-gather gathers the 1-byte data (fsdp_utils.py fsdp_pre_all_gather returns
    float8_tensor._data; no transpose is kept: torch._scaled_mm takes the transposed view); Megatron's FP8 parameters
    gather as TE's quantized weight (te_fp8_weight_bytes). Otherwise the 16-bit copy."""
    tr = ctx.train
    if tr.dtype != "fp8" or not tr.fp8_param_gather:
        return PARAM_GATHER_BYTES
    if ctx.stack.fp8_weight_cache:
        return te_fp8_weight_bytes(tr.fp8_recipe, ctx.cluster.hardware.mx_tensor_cores)
    return FP8_DATA_BYTES


def _largest_layer_linear(ctx: Context, plan: ParallelPlan, kind_ids) -> float:
    """FP8-linear parameters of the layer kind largest_layer_params_per_device picks."""
    big = largest_layer_kind(ctx, plan, kind_ids)
    return 0.0 if big is None else layer_linear_params_per_device(ctx, plan, big)


def zero3_buffers(ctx: Context, plan: ParallelPlan, params_on_stage: float, split: StageSplit,
                  grad_bytes: float, linear_on_stage: float = 0.0) -> float:
    """Bytes of the unsharded parameter and gradient buffers ZeRO-3 / FSDP adds (formula memory.buffers)."""
    # FP8 all-gather: the linears' gathered weights at fp8_gathered_weight_bytes each instead of 2 B
    fp8_saving = PARAM_GATHER_BYTES - fp8_gathered_weight_bytes(ctx)
    if plan.zero_stage == 3 and plan.pp > 1 and ctx.stack.zero3_unsharded_under_pp:
        # FSDP under pipelining keeps the stage's parameters unsharded between micro-batches
        # (torchtitan: reshard_after_forward=False with PP) and accumulates unsharded gradients
        # until the last micro-batch (torch.distributed.pipelining backward_maybe_with_nosync).
        return params_on_stage * (PARAM_GATHER_BYTES + grad_bytes) - linear_on_stage * fp8_saving
    if plan.zero_stage == 3:
        # unsharded bf16 copies of the current and the prefetched layer, plus one layer's grads
        _, hc, tc = split
        layer = largest_layer_params_per_device(ctx, plan, set(hc) | set(tc))
        gathered, grads = ZERO3_GATHERED_LAYERS * layer, layer
        if fp8_saving and ctx.stack.zero3_gather == "block" and not ctx.stack.zero3_resident_per_matrix:
            linear = _largest_layer_linear(ctx, plan, set(hc) | set(tc))
            return gathered * PARAM_GATHER_BYTES - ZERO3_GATHERED_LAYERS * linear * fp8_saving + grads * grad_bytes
        if ctx.stack.zero3_gather == "tensor":
            # DeepSpeed gathers module by module up to its live limit and ships gradients through a bucket
            module = largest_matrix_params_per_device(ctx.model, plan)
            gathered = min(gathered, max(ctx.calibration.DEEPSPEED_MAX_LIVE_PARAMS, module))
            grads = min(grads, module + ctx.calibration.DEEPSPEED_REDUCE_BUCKET_PARAMS)
        elif ctx.stack.zero3_resident_per_matrix:
            # XLA: each weight is its own array, all-gathered right before its dot and reduce-scattered right after
            # its gradient; the latency-hiding scheduler keeps the current and the next one in flight
            # MaxText keeps the gate and up projections as two arrays (wi_0, wi_1; MT:configs/base.yml fused_mlp false)
            module = largest_matrix_params_per_device(ctx.model, plan, fused_gate=False,
                                                      experts_stacked=ctx.stack.moe_experts_stacked)
            gathered, grads = min(gathered, ZERO3_GATHERED_LAYERS * module), min(grads, module)
        return gathered * PARAM_GATHER_BYTES + grads * grad_bytes
    return 0.0


def pipeline_buffer_units(pp: int, vpp: int, stage: int, nmb: int, inflight: float, v_shape: bool = False) -> float:
    """Stage-boundary tensors (one micro-batch's stage input or output) a rank holds beside its saved activations when
    the pipeline runtime keeps a receive buffer per micro-batch (Stack.pp_buffers_per_microbatch): for each of its
    virtual stages, a gradient receive buffer per micro-batch unless it is the last stage, an input receive buffer per
    micro-batch unless it is the first (those of the micro-batches in flight are the first layer's saved input,
    already counted), and the output of every micro-batch in flight until its backward. In a V (`v_shape`) rank 0
    holds both the first and the last stage."""
    v = max(1, vpp)
    chunks = inflight * v  # in-flight chunks, spread evenly over the rank's virtual stages
    not_last = v - (1 if stage == (0 if v_shape else pp - 1) else 0)
    not_first = v - (1 if stage == 0 else 0)
    return nmb * not_last + max(0.0, nmb - chunks / v) * not_first + chunks / v * not_last


def pipeline_buffer_bytes(ctx: Context, shape: Shape, stage: int, inflight: float) -> float:
    """Bytes of pipeline_buffer_units: each unit one micro-batch's activation at a stage boundary (tokens x h, split
    by TP under sequence parallelism)."""
    p = shape.plan
    if p.pp <= 1 or not ctx.stack.pp_buffers_per_microbatch:
        return 0.0
    hs = ctx.model.hidden_size / p.tp if (shape.sp and p.tp > 1) else ctx.model.hidden_size
    v = p.vpp if p.schedule in ("interleaved", "dualpipev") else 1
    units = pipeline_buffer_units(p.pp, v, stage, shape.nmb, inflight, v_shaped(p))
    return units * shape.tokens * hs * ACT_ELEM_BYTES


def allocator_fragmentation(framework: str, cal: Calibration, expandable_segments: bool = False) -> float:
    """Reserved / allocated at the peak: the classic caching allocator's (calibration.ALLOCATOR_FRAGMENTATION) for
    PyTorch stacks; 1 with expandable segments (TrainingSpec.expandable_segments: one segment per stream that maps
    physical pages as it grows, c10/cuda/CUDACachingAllocator.cpp ExpandableSegment, so freed blocks are not stranded
    between sizes; PyTorch's CUDA semantics notes: it reduces fragmentation) and for XLA's static buffer assignment."""
    if not traits(framework).caching_allocator or expandable_segments:
        return 1.0
    return cal.ALLOCATOR_FRAGMENTATION


def framework_overhead_bytes(framework: str, on_tpu: bool = False) -> float:
    """The stack's CUDA context and communicator buffers per device (Stack.overhead_gib); none on a TPU, whose
    capacity is XLA:TPU's own limit for the program, the runtime's reservation already outside it (its OOM report
    lists 'reserved 260.00M' beside 'Used X of 31.25G hbm' on v6e; hardware_profiles/tpu-*.yaml)."""
    return 0.0 if on_tpu else traits(framework).overhead_gib * GIB


class StateLayout(NamedTuple):
    """What every stage of one plan shares: bytes per parameter of each state, the ZeRO shard counts,
    the gradient bytes and the framework overhead."""

    states: StateBytesPerParam
    z_dense: int
    z_expert: int
    grad_bytes: float
    overhead_bytes: float
    per_dense: tuple[float, float, float]  # (weights, grads, optimizer) bytes per dense parameter, sharded
    per_expert: tuple[float, float, float]  # the same per routed-expert parameter
    schedule: str  # the pipeline schedule whose in-flight micro-batches the stages hold (pipeline.memory_schedule)
    fp8_copy_bytes: float  # fp8_weight_copy_bytes per FP8-linear parameter
    dispatcher_bytes: float  # dispatcher_buffer_bytes (the same on every stage)
    fragmentation: float  # allocator_fragmentation: reserved / allocated at the peak


def state_layout(ctx: Context, shape: Shape) -> StateLayout:
    """_state_layout, cached per search under every input it reads: the ZeRO stage, the optimizer offload, the two
    shard counts, the schedule whose in-flight micro-batches the stages hold and, for the MoE dispatcher's buffers
    (EP > 1), the plan's time key (the dispatcher_buffer_bytes key)."""
    plan, dims = shape.plan, shape.dims
    key = (plan.zero_stage, plan.offload_optimizer, dims.zero_shard, dims.expert_zero_shard, memory_schedule(ctx, plan),
           shape.time_key if plan.ep > 1 else None)
    v = ctx.state_layout_cache.get(key)
    if v is None:
        v = ctx.state_layout_cache[key] = _state_layout(ctx, shape)
    return v


def _state_layout(ctx: Context, shape: Shape) -> StateLayout:
    plan, dims = shape.plan, shape.dims
    st = state_bytes_per_param(ctx.train, plan.zero_stage, plan.offload_optimizer)
    return StateLayout(st, dims.zero_shard, dims.expert_zero_shard, grad_bytes_per_param(ctx.train),
                       framework_overhead_bytes(ctx.train.framework, ctx.cluster.hardware.is_tpu),
                       st.per_param(dims.zero_shard),
                       st.per_param(dims.expert_zero_shard), memory_schedule(ctx, plan),
                       fp8_weight_copy_bytes(ctx, plan.zero_stage, dims.zero_shard),
                       dispatcher_buffer_bytes(ctx, shape),
                       allocator_fragmentation(ctx.train.framework, ctx.calibration, ctx.train.expandable_segments))


def stage_memory(ctx: Context, shape: Shape, split: list[StageSplit], params: StageParams, s: int,
                 lay: StateLayout, layer_acts: tuple[float, float] | None = None) -> StageMemory:
    """Per-device bytes of stage `s`: model states, activations, ZeRO-3 buffers, overhead. `layer_acts`: the
    stage's _layer_activations, when the caller has them."""
    p = shape.plan
    dn, ex = params.dense[s], params.experts[s]
    (dw, dg, do), (ew, eg, eo) = lay.per_dense, lay.per_expert
    w, g, o = dn * dw + ex * ew, dn * dg + ex * eg, dn * do + ex * eo
    linear = params.linear[s] if params.linear else 0.0
    # FP8 weight copies (TE's cache, or FP8 primary weights in place of bf16)
    w += linear * lay.fp8_copy_bytes
    if p.schedule == "dualpipe" and p.pp > 1:
        # DualPipe keeps two copies of the parameters (DeepSeek-V3 report Table 2): rank s runs stage s of one
        # direction and stage pp-1-s of the other (sec. 3.2.1, Figure 5), so it holds both stages' weights and grads
        mir = p.pp - 1 - s
        dm, em = params.dense[mir], params.experts[mir]
        w += dm * dw + em * ew + (params.linear[mir] if params.linear else 0.0) * lay.fp8_copy_bytes
        g += dm * dg + em * eg
    inflight = inflight_microbatches(lay.schedule, p.pp, s, shape.nmb, p.vpp)
    acts = stage_activations(ctx, shape, split, s, inflight, layer_acts)
    if p.schedule == "dualpipe" and p.pp > 1 and p.pp - 1 - s != s:
        # and the micro-batches in flight on a rank are those of its two stages, one per direction: their mean
        # (DeepSeek-V3 report Table 2 counts PP + 1 of one stage's micro-batches per rank)
        acts = 0.5 * (acts + stage_activations(ctx, shape, split, p.pp - 1 - s, inflight))
    buffers = zero3_buffers(ctx, p, dn + ex, split[s], lay.grad_bytes, linear) if p.zero_stage == 3 else 0.0
    buffers += lay.dispatcher_bytes  # MoE dispatcher's persistent buffers (planner.costmodel.moe)
    buffers += pipeline_buffer_bytes(ctx, shape, s, inflight)  # per-micro-batch pipeline receive buffers, outputs
    allocated = w + g + o + acts + buffers
    frag = allocated * (lay.fragmentation - 1.0)
    return StageMemory(w, g, o, acts, buffers, lay.overhead_bytes + frag, inflight,
                       host_bytes(ctx, shape, split, params, s, lay, inflight))


def host_bytes(ctx: Context, shape: Shape, split: list[StageSplit], params: StageParams, s: int, lay: StateLayout,
               inflight: float) -> float:
    """Bytes per device stage `s` keeps in host memory instead of HBM (formula memory.host): the optimizer states
    under ZeRO-Offload, sharded as HBM would hold them, and the layer tensors MaxText's custom remat policy or
    Megatron's offload modules send there for every micro-batch in flight (compute.activation_offload_s copies
    them)."""
    p = shape.plan
    out = 0.0
    if p.offload_optimizer:
        st = state_bytes_per_param(ctx.train, p.zero_stage, False)
        out += params.dense[s] * st.per_param(lay.z_dense)[2] + params.experts[s] * st.per_param(lay.z_expert)[2]
    if p.custom_remat is not None and p.remat_offloaded:
        key = ("remat_offloaded", p.tp, shape.sp, p.remat_offloaded)  # once per search and policy, not per stage
        elems = ctx.act_cache.get(key)
        if elems is None:
            elems = ctx.act_cache[key] = maxtext_offloaded_elems(ctx.model, p.tp, shape.sp, p.remat_offloaded)
        per_token = elems * ACT_ELEM_BYTES
        out += split[s][0] * per_token * shape.tokens * inflight
    if p.offload_modules:  # Megatron's offloaded module tensors (offloaded_elems), pinned host buffers
        _, hc, tc = split[s]
        copied = sum(cnt * offloaded_elems(ctx, shape, ctx.kinds[kid])[1] for part in (hc, tc)
                     for kid, cnt in part.items())
        out += copied * ACT_ELEM_BYTES * shape.tokens * inflight
    return out


def stage_memories(ctx: Context, shape: Shape, split: list[StageSplit], params: StageParams) -> dict[int, StageMemory]:
    """The StageMemory of every stage that can hold the peak, by stage in stage order. A middle stage (neither the
    first, nor the one with the LM head, in a pipeline that is not bidirectional or V-shaped) with the same layers and
    parameters as an earlier middle stage and no more micro-batches in flight holds no more of any part (what grows
    with the micro-batches in flight: saved activations, pipeline buffers, host copies; the rest is the same), so it
    is skipped: the peak, the most kept in host memory and their stages (the first of equals) are those of all the
    stages (tests/search/test_search_memo.py). The layer activations are computed once per distinct mix of layer
    kinds."""
    p = shape.plan
    lay = state_layout(ctx, shape)
    out: dict[int, StageMemory] = {}
    seen: list[tuple[tuple[Counter, Counter], tuple[float, float]]] = []  # (kind counts, _layer_activations)
    middles: list[tuple[tuple, Counter, Counter, float]] = []  # (sizes, kind counts, in flight) of the computed ones
    skips = p.pp > 2 and p.schedule != "dualpipe" and not v_shaped(p)
    head = head_stage(p)
    for s in range(p.pp):
        count, hc, tc = split[s]
        middle = skips and s not in (0, head)
        if middle:
            sizes = (count, params.dense[s], params.experts[s], params.linear[s] if params.linear else 0.0)
            inflight = inflight_microbatches(lay.schedule, p.pp, s, shape.nmb, p.vpp)
            # dict's own equality: Counter's (Python 3.10+) also walks missing keys as zero counts, slower
            if any(z == sizes and f >= inflight and dict.__eq__(h, hc) and dict.__eq__(t, tc)
                   for z, h, t, f in middles):
                continue
            middles.append((sizes, hc, tc, inflight))
        acts = next((a for (h, t), a in seen if dict.__eq__(h, hc) and dict.__eq__(t, tc)), None)
        if acts is None:
            acts = layer_activations(ctx, shape, split[s])
            seen.append(((hc, tc), acts))
        out[s] = stage_memory(ctx, shape, split, params, s, lay, acts)
    return out


def peak_gib_of(sm: StageMemory) -> float:
    """A stage's peak in GiB, its parts summed in MEMORY_PARTS order (the trace's peak_gib; the search screens with
    it before any term is built)."""
    peak = 0.0
    for v in sm.parts_gib():  # the order of the original dict sum
        peak += v
    return peak


def memory_terms(ctx: Context, shape: Shape, sm: StageMemory, stage: int, host_gib: float,
                 host_stage: int) -> tuple[Term, ...]:
    """The peak stage's parts (MEMORY_PARTS order), its peak and the device capacity, as trace terms; then what the
    stage `host_stage` keeps in host memory (`host_gib`, the most of any stage) and the host DRAM per device where it
    is known (host_capacity_gib, planner.costmodel.capacity.host_fits)."""
    p = shape.plan
    st = state_bytes_per_param(ctx.train, p.zero_stage, p.offload_optimizer)
    z_dense, z_expert = shape.dims.zero_shard, shape.dims.expert_zero_shard
    w, g, o, a, b, ov = sm.parts_gib()
    parts = (
        STATE.term("weights_gib", w, "GiB", bytes_per_param=st.weights, sharded=str(st.weights_sharded),
                   zero_shards=z_dense, expert_zero_shards=z_expert, stage=stage,
                   fp8_copy_bytes_per_linear_param=fp8_weight_copy_bytes(ctx, p.zero_stage, z_dense)),
        STATE.term("grads_gib", g, "GiB", bytes_per_param=st.grads, sharded=str(st.grads_sharded),
                   zero_shards=z_dense, expert_zero_shards=z_expert, stage=stage),
        STATE.term("optimizer_gib", o, "GiB", bytes_per_param=st.optimizer, sharded=str(st.optimizer_sharded),
                   zero_shards=z_dense, expert_zero_shards=z_expert, offloaded=str(p.offload_optimizer)),
        ACTIVATIONS.term("activations_gib", a, "GiB", inflight_microbatches=sm.inflight, tokens=shape.tokens,
                         recompute=p.recompute,
                         logits_bytes_per_token=logits_bytes_per_token(ctx.model, p.tp, ctx.train)),
        BUFFERS.term("buffers_gib", b, "GiB", zero_stage=p.zero_stage, framework=ctx.train.framework),
        OVERHEAD.term("overhead_gib", ov, "GiB", framework_gib=framework_overhead_bytes(
                          ctx.train.framework, ctx.cluster.hardware.is_tpu) / GIB,
                      fragmentation=allocator_fragmentation(ctx.train.framework, ctx.calibration,
                                                            ctx.train.expandable_segments)),
    )
    peak = peak_gib_of(sm)
    cap = ctx.cluster.hardware.hbm_capacity_gib
    headroom, cal = ctx.memory_headroom_gib, ctx.calibration
    usable, margin, inner = ctx.memory_limits  # capacity.usable_capacity_gib, memory_margin_rel, inner_margin_rel
    return (*parts, PEAK.term("peak_gib", peak, "GiB", stage=stage),
            CAPACITY.term("capacity_gib", cap, "GiB", hardware=ctx.cluster.hardware.id),
            USABLE.term("usable_gib", usable, "GiB", reserve_gib=fit_reserve_gib(ctx.train.framework, cal),
                        headroom_gib=headroom or 0.0),
            USABLE.term("memory_margin_rel", margin, "", band_rel=cal.MEMORY_BAND_REL,
                        headroom_given=str(headroom is not None)),
            USABLE.term("memory_inner_margin_rel", inner, "",
                        median_band_rel=cal.MEMORY_BAND_MEDIAN_REL, headroom_given=str(headroom is not None)),
            HOST.term("host_gib", host_gib, "GiB", offload_optimizer=str(p.offload_optimizer),
                      remat_offloaded=",".join(p.remat_offloaded) if p.custom_remat else "",
                      offload_modules=",".join(p.offload_modules), stage=host_stage),
            *host_capacity_terms(ctx))


def host_capacity_terms(ctx: Context) -> tuple[Term, ...]:
    """The host DRAM per device a plan may fill (HardwareSpec.host_memory_gib), as a trace term; none where the
    hardware profile does not state it."""
    hw = ctx.cluster.hardware
    if hw.host_memory_gib is None:
        return ()
    return (HOST_CAPACITY.term("host_capacity_gib", hw.host_memory_gib, "GiB", hardware=hw.id),)
