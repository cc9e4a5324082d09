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

from dataclasses import dataclass

from planner.specs import ModelSpec, TrainingSpec

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
    """The dtype gradients are reduced in over data parallelism: the stated one, else Megatron's fp32
    main-grad buffer / FSDP2's fp32 reduce_dtype, else (DeepSpeed) the compute dtype."""
    if train.grad_dtype is not None:
        return train.grad_dtype
    if train.framework in ("megatron", "fsdp", "maxtext"):
        return "fp32"
    return "fp16" if train.dtype == "fp16" else "bf16"


def grad_bytes_per_param(train: TrainingSpec) -> float:
    """Bytes of one gradient element as it is reduced over data parallelism."""
    return 4.0 if grad_dtype(train) == "fp32" else 2.0


def state_bytes_per_param(train: TrainingSpec, zero_stage: int, offload_optimizer: bool) -> StateBytesPerParam:
    """Weights/grads/optimizer bytes per parameter (ZeRO paper sec. 3.1, K=12: fp32 master 4 + Adam m, v
    4 each; 8 with bf16 moments) for each framework."""
    moments = 8.0 if train.optimizer_dtype == "fp32" else 4.0
    if train.framework in ("fsdp", "maxtext") and zero_stage == 3:
        # FSDP2 mixed precision: fp32 sharded params (4), grads (fp32 unless stated), Adam moments.
        return StateBytesPerParam(4.0, True, grad_bytes_per_param(train), True,
                                  0.0 if offload_optimizer else moments, True)
    # the stored gradient: Megatron's main-grad buffer and DeepSpeed's buffer hold the reduction dtype;
    # replicated (DDP-style) PyTorch keeps .grad in the compute dtype unless a dtype is stated
    stored_as_reduced = train.grad_dtype is not None or train.framework in ("megatron", "deepspeed")
    grad = grad_bytes_per_param(train) if stored_as_reduced else 2.0
    return StateBytesPerParam(
        weights=2.0,
        weights_sharded=zero_stage >= 3,
        grads=grad,
        grads_sharded=zero_stage >= 2,
        optimizer=0.0 if offload_optimizer else 4.0 + moments,
        optimizer_sharded=zero_stage >= 1,
    )


def activation_elems_per_token(
    m: ModelSpec, moe_layer: bool, tp: int, sp: bool, recompute: str, framework: str, etp: int = 1,
    fp8_gemm_inputs: bool = False,
) -> float:
    """Elements (at 2 bytes each) one layer saves for backward, per token of the micro-batch on
    this device (tokens already divided by CP), sharded by TP as Megatron shards them."""
    h = m.hidden_size
    hs = h / tp if (sp and tp > 1) else h  # tensors in the sequence-parallel region
    if recompute == "full":
        return hs  # only the layer input (checkpoint), Korthikanti sec. 5 "full recomputation"
    if m.mla is not None:
        a = m.mla
        dqk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q_lat = a.q_lora_rank or 0
        # MLA saves the latents (q: qr, kv: kvr + rope) and the up-projected q, k, v for the core.
        qkv = (q_lat + a.kv_lora_rank + a.qk_rope_head_dim) + m.num_heads * (2 * dqk + a.v_head_dim) / tp
        attn_out = m.num_heads * a.v_head_dim / tp
    else:
        qkv = (m.num_heads + 2 * m.num_kv_heads) * m.head_dim / tp
        attn_out = m.num_heads * m.head_dim / tp
    # Transformer Engine FP8 linears save their GEMM inputs for backward as FP8 (1 byte, half an element)
    g = 0.5 if fp8_gemm_inputs else 1.0
    # attention block: norm input + qkv input (norm output) + q,k,v + softmax stats (fp32 per head) + O
    # (the attention output O stays saved in bf16 for the attention backward; with FP8 the output
    # projection saves its own FP8 copy on top)
    attn = hs + g * hs + qkv + attn_out * (2.0 - g if g < 1 else 1.0) + 2.0 * m.num_heads / tp
    if moe_layer:
        e = m.moe
        fe = e.expert_ffn_hidden_size
        # dispatched input (fc1 GEMM input) + fc1 outputs + activation output (fc2 GEMM input)
        per_expert_token = g * h + ((2 + g) * fe if m.mlp_type == "gated" else (1 + g) * fe) / etp
        shared_w = (e.shared_expert_ffn_hidden_size or fe) * e.num_shared_experts
        shared = ((2 + g) * shared_w if m.mlp_type == "gated" else (1 + g) * shared_w) / tp if e.num_shared_experts else 0.0
        # routed tokens are split over the TP ranks (sequence-parallel tokens enter the dispatcher)
        mlp = hs + g * hs + e.top_k * per_expert_token / tp + shared + e.num_experts / tp
    else:
        f = m.ffn_hidden_size
        # gated: gate, up, act(gate)*up (fc2 input); plain: fc1 out, act (fc2 input)
        inter = (2 + g) * f if m.mlp_type == "gated" else (1 + g) * f
        mlp = hs + g * hs + inter / tp
    total = attn + mlp
    if recompute == "selective" and framework in ("fsdp", "maxtext"):
        # torchtitan "op" selective AC saves every other matmul output and the attention output,
        # recomputing the rest from the layer input: roughly half the per-layer tensors.
        return hs + 0.5 * (total - hs)
    return total


def logits_bytes_per_token(m: ModelSpec, tp: int) -> float:
    """Peak of the loss on fp32-upcast logits (torch cross_entropy on .float() logits): at the start of
    backward the saved fp32 log-softmax output (4 B), its incoming fp32 gradient (4 B) and the fp32
    input gradient (4 B) coexist, before the cast back to bf16; vocab split by TP (loss parallel)."""
    return 12.0 * m.vocab_size / tp


def korthikanti_activation_bytes_per_layer(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False,
                                           recompute: str = "none") -> float:
    """The paper's own per-layer formulas (Korthikanti et al. 2022, arXiv 2205.05198, eqs. 1-4 and
    Table 2), for a GPT layer with dropout and materialised attention scores, 2-byte activations:
    none, no TP: sbh(34 + 5as/h); TP: sbh(10 + 24/t + 5as/(ht)); TP+SP: sbh(34/t + 5as/(ht));
    selective recompute (TP+SP): 34 sbh / t; full recompute: 2 sbh (the layer input)."""
    sbh = float(s) * b * h
    if recompute == "full":
        return 2.0 * sbh
    if recompute == "selective":
        return sbh * 34.0 / t if sp else sbh * (10 + 24.0 / t)
    if t == 1:
        return sbh * (34 + 5.0 * a * s / h)
    if sp:
        return sbh * (34.0 / t + 5.0 * a * s / (h * t))
    return sbh * (10 + 24.0 / t + 5.0 * a * s / (h * t))
