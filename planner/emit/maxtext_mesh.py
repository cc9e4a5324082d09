"""What a MaxText (0.2.5) run of a plan can be laid out as, read by the emitter (planner.emit.maxtext) and by the
launcher's capability rules (planner.emit.capabilities.maxtext) alike: the mesh degrees, their ICI/DCN split over
slices, and the decoder block of the model. A module of its own so the rules and the emitter both import it and
neither imports the other's module."""

from __future__ import annotations

import math

from planner.costmodel.placement import mesh_degrees_exact, split_ici_dcn_exact
from planner.emit.common import Job, Unsupported


def mesh_degrees(job: Job) -> dict[str, int]:
    """The plan's mesh degrees (the one rule: planner.costmodel.placement.mesh_degrees_exact), or Unsupported."""
    p = job.plan
    deg = mesh_degrees_exact(p)
    if deg is None:
        raise Unsupported(f"ep={p.ep} cannot be carved out of dp={p.dp}: a JAX mesh takes experts from the "
                          "data-parallel axes only")
    if math.prod(deg.values()) != job.world:
        raise Unsupported(f"mesh {deg} does not cover the {job.world} devices")
    return deg


def split_ici_dcn(job: Job, deg: dict[str, int]) -> tuple[int, dict[str, int], dict[str, int]]:
    """(num_slices, ici degrees, dcn degrees) with prod(ici) = slice size and prod(dcn) = num_slices
    (planner.costmodel.placement.split_ici_dcn_exact, the rule the cost model charges)."""
    slice_size = job.cluster.scale_up_size
    if job.world % slice_size:
        raise Unsupported(f"{job.world} devices are not whole slices of {slice_size}")
    num_slices = job.world // slice_size
    split = split_ici_dcn_exact(deg, num_slices)
    if split is None:
        raise Unsupported(f"cannot lay the mesh {deg} over {num_slices} slices of {slice_size} devices")
    return num_slices, *split


# planner family (Hugging Face model_type) -> MaxText decoder_block
_BLOCKS = {"llama": "llama2", "mistral": "mistral", "mixtral": "mixtral", "deepseek_v2": "deepseek",
           "deepseek_v3": "deepseek", "gemma": "gemma", "gemma2": "gemma2", "gemma3": "gemma3",
           "gemma3_text": "gemma3", "qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe", "gpt_oss": "gpt_oss",
           "gpt2": "gpt3", "gpt3": "gpt3"}
# the local (1) / global (0) attention cycle a block hard-codes (maxtext 0.2.5 models/gemma2.py: a local then a
# global layer; models/gemma3.py GEMMA3_ATTENTION_PATTERN: 5 local, 1 global; models/gpt_oss.py: local, global);
# every other block attends globally
_WINDOW_CYCLE = {"gemma2": (1, 0), "gemma3": (1, 1, 1, 1, 1, 0), "gpt_oss": (1, 0)}
_GEMMA_BLOCKS = ("gemma", "gemma2", "gemma3")  # scale the embedding by sqrt(emb_dim), as Gemma does
_POST_NORM_BLOCKS = ("gemma2", "gemma3")  # use_post_attn_norm / use_post_ffw_norm
# activation (planner name) -> mlp_activations[0]; MaxText resolves names in jax.nn, whose gelu is the tanh
# approximation (jax.nn.gelu approximate=True), so an erf GeLU is not expressible
_ACT = {"silu": "silu", "swish": "silu", "gelu_tanh": "gelu", "gelu_new": "gelu", "relu": "relu",
        "gpt_oss_glu": "sigmoid"}


def _block_of(m) -> str | None:
    if m.position_embedding == "alibi" or m.parallel_attn_mlp:
        return None
    block = _BLOCKS.get(m.family.lower())
    if block is not None:
        return block
    # an unnamed family: the generic blocks, when the architecture is theirs
    if m.mlp_type == "gated" and m.norm_type == "rmsnorm" and m.position_embedding == "rope" and m.moe is None:
        return "llama2"
    if m.mlp_type == "plain" and m.norm_type == "layernorm" and m.position_embedding == "learned" and m.moe is None:
        return "gpt3"
    return None


def _decoder_block(job: Job) -> str:
    m = job.model
    if m.position_embedding == "alibi":
        raise Unsupported("MaxText has no ALiBi position embedding")
    if m.parallel_attn_mlp:
        raise Unsupported("MaxText has no parallel attention+MLP decoder block")
    block = _block_of(m)
    if block is None:
        raise Unsupported(f"no MaxText decoder block matches the {m.family} architecture of {m.name}")
    return block
