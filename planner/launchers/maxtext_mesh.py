"""What a MaxText (0.2.5) run of a plan can be laid out as, read by the emitter (planner.emit.maxtext) and by the
launcher's capability rules (planner.launchers.maxtext) alike: the mesh degrees, their ICI/DCN split over
slices, the decoder block of the model and what that block cannot run. A module of its own so the rules and the
emitter both import it and neither imports the other's module."""

from __future__ import annotations

import math

from planner.costmodel.placement import mesh_degrees_exact, split_ici_dcn_exact
from planner.launchers.contract import contract_values
from planner.launchers.job import Job, Unsupported


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
           "gpt2": "gpt3", "gpt3": "gpt3", "llama4_text": "llama4"}
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


def _window_gap(m, t, block: str) -> list[str]:
    if contract_values(m, t)["sliding_window"] is None:
        return []
    cycle = _WINDOW_CYCLE.get(block)
    pattern = m.sliding_pattern()
    if cycle is None or pattern is None or any(pattern[i] != cycle[i % len(cycle)] for i in range(m.num_layers)):
        return [f"this sliding-window layer pattern (the {block} block's is "
                f"{'global only' if cycle is None else cycle})"]
    return []


def maxtext_model_gaps(m, t) -> list[str]:
    """Model features the MaxText decoder block chosen for `m` does not run (planner.launchers.contract)."""
    block = _block_of(m)
    if block is None:
        return [f"a decoder block for the {m.family} architecture"]
    gaps = _window_gap(m, t, block)
    if (m.norms_per_layer == 4) != (block in _POST_NORM_BLOCKS):
        gaps.append("post-attention/post-MLP norms" if m.norms_per_layer == 4 else "pre-norm-only blocks")
    if m.scale_embeddings != (block in _GEMMA_BLOCKS):
        gaps.append("the sqrt(hidden) embedding scale" if m.scale_embeddings else "an unscaled embedding")
    if _ACT.get(m.activation) is None or (m.activation == "gpt_oss_glu") != (block == "gpt_oss"):
        gaps.append(f"a {m.activation} MLP")
    gaps += _llama4_gap(m, t) if block == "llama4" else _not_llama4_gap(m, t)
    if block == "gpt_oss" and m.moe is not None and t.moe_capacity_factor is not None:
        # maxtext 0.2.5 configs/types.py:5009-5010: "GPT-OSS MoE only supports dropless (capacity_factor=-1) with
        # dense matmul" [raise]
        gaps.append("an expert capacity factor (the gpt_oss block runs dropless only)")
    return gaps + _rope_gap(m, t) + ([] if block == "llama4" else _moe_gap(m))


# Llama 4's block (maxtext 0.2.5 models/llama4.py): layer i has no RoPE iff (i + 1) % nope_layer_interval == 0
# (determine_is_nope_layer) and an MoE FFN iff (i + 1) % interleave_moe_layer_step == 0 (determine_is_moe_layer);
# the RoPE layers attend in chunks of chunk_attn_window_size (AttentionType.CHUNK), the NoPE ones globally; q and k
# L2-normalised on the RoPE layers with use_qk_norm (layers/attentions.py); temperature tuning at scale 0.1 and floor
# 8192, written into the block; the router's top-1 logit through a sigmoid scales the expert input, the combine
# weights are 1 (layers/moe.py); configs/types.py refuses a capacity factor >= 0 and top-k above 1.
LLAMA4_TEMPERATURE = (8192.0, 0.1)


def _interval(pattern: tuple[int, ...]) -> int | None:
    """N with pattern[i] == ((i + 1) % N == 0) for every layer, -1 for an all-zero pattern, else None."""
    if not any(pattern):
        return -1
    n = pattern.index(1) + 1
    return n if all(bool(x) == ((i + 1) % n == 0) for i, x in enumerate(pattern)) else None


def llama4_intervals(m) -> tuple[int, int] | None:
    """(nope_layer_interval, interleave_moe_layer_step) of the llama4 block for `m`, or None when its NoPE or MoE
    layers follow no interval."""
    nope = _interval(m.nope_layer_pattern or (0,) * m.num_layers)
    moe = _interval(tuple(int(m.is_moe_layer(i)) for i in range(m.num_layers)))
    return None if nope is None or moe is None or moe < 1 else (nope, moe)


def _llama4_gap(m, t) -> list[str]:
    gaps: list[str] = []
    iv = llama4_intervals(m)
    e = m.moe
    if iv is None:
        gaps.append("NoPE or MoE layers off the llama4 block's intervals")
    elif m.num_layers % math.lcm(max(iv[0], 1), iv[1]):
        gaps.append("a layer count that is not whole cycles of the llama4 block")
    rope_layers = tuple(1 - x for x in (m.nope_layer_pattern or (0,) * m.num_layers))
    if contract_values(m, t)["chunked_attention"] is not None and m.chunked_pattern() != rope_layers:
        gaps.append("chunked attention on layers other than the RoPE layers")
    if m.attn_temperature_tuning not in (None, LLAMA4_TEMPERATURE):
        gaps.append("attention temperature tuning other than the llama4 block's (floor 8192, scale 0.1)")
    if m.qk_norm:
        gaps.append("a QK-norm with weights (the llama4 block's is L2)")
    if e is not None and (e.top_k != 1 or e.score_function != "sigmoid" or e.norm_topk_prob or not e.probs_on_input):
        gaps.append("a router other than Llama 4's (top-1 sigmoid on the expert input)")
    if e is not None and t.moe_capacity_factor is not None:
        gaps.append("an expert capacity factor (the llama4 block runs dropless only)")
    return gaps


def _not_llama4_gap(m, t) -> list[str]:
    """Llama 4's features on another block, which has none of them."""
    gaps = []
    if contract_values(m, t)["chunked_attention"] is not None:
        gaps.append("chunked attention")
    if any(m.nope_layer_pattern):
        gaps.append("layers without RoPE")
    if m.qk_l2_norm:
        gaps.append("the L2 q/k norm")
    if m.attn_temperature_tuning is not None:
        gaps.append("attention temperature tuning")
    if m.moe is not None and m.moe.probs_on_input:
        gaps.append("gate weights applied to the expert input")
    return gaps


def _rope_gap(m, t) -> list[str]:
    sc = contract_values(m, t)["rope_scaling"]
    if sc is not None and sc[0] not in ("llama3", "yarn", "linear"):
        return [f"{sc[0]} RoPE scaling"]
    if sc is not None and sc[0] == "llama3" and sc[1:] != (8.0, 1.0, 4.0, 8192):
        return ["llama3 RoPE scaling other than Llama 3.1's"]
    return []


def _moe_gap(m) -> list[str]:
    e, gaps = m.moe, []
    if e is None:
        return []
    if e.layer_freq != 1 or e.dense_layers:
        gaps.append("MoE layers other than after first_num_dense_layers")
    if e.aux_loss_per_sequence and e.aux_loss_coeff and e.score_function != "sigmoid":
        gaps.append("a per-sequence balance loss with softmax scores")
    if not e.norm_topk_prob and e.score_function == "sigmoid":
        gaps.append("un-normalised sigmoid gate weights")
    return gaps
