"""Context parallelism: the per-layer attention traffic of one micro-batch over the cp ranks that split
the sequence.

Ring (Megatron CP, Liu et al. 2023 Ring Attention, arXiv 2310.01889): cp - 1 rotations of this rank's K and
V, each overlapped with the attention block of the chunk already held. All-to-all (DeepSpeed-Ulysses,
Jacobs et al. 2023, arXiv 2309.14509): q, k, v in and o out, four all-to-alls of the hidden state.
"""

from __future__ import annotations

from planner.costmodel.base import ACT_ELEM_BYTES, Context, Shape
from planner.costmodel.collectives import collective_time
from planner.costmodel.flops import qk_v_head_dims
from planner.costmodel.trace import Term, formula

ULYSSES_ALL_TO_ALLS = 4  # q, k, v in, o out (Jacobs et al. 2023, sec. 3)

CP_COMM = formula(
    "context.cp_comm",
    "m x 2 (fwd + bwd) x sum over the slowest stage's layers of: ring max(0, (cp-1) x send(K,V) - (cp-1)/cp x "
    "attention), a2a 4 all-to-alls of tokens x h / tp x 2 B x cp",
    "Liu et al. 2023, Ring Attention, arXiv 2310.01889; Jacobs et al. 2023, DeepSpeed-Ulysses, arXiv 2309.14509",
)


def kv_width(ctx: Context, tp: int) -> float:
    """K and V elements per token on one TP rank (MLA: the up-projected per-head K and V)."""
    m = ctx.model
    if m.mla is not None:
        return m.num_heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim + m.mla.v_head_dim) / tp
    return 2 * m.num_kv_heads * m.head_dim / tp


# Ring attention merges every step's partial result into the running one: forward out += out_step x
# exp(lse_step - lse) (TE AttnFuncWithCPAndKVP2P, flash_attn_fwd_out_correction), backward dq.add_(dq_step) and
# the dK/dV accumulation handed round the ring: each reads the step's tensor, reads and writes the running
# one (3 x 2 B per element in bf16). The last CP rank merges full-width results at every one of its cp steps.
RING_MERGE_BYTES_PER_ELEM = 3 * ACT_ELEM_BYTES

CP_RING_MERGE = formula(
    "context.ring_merge",
    "ring CP: fwd cp x tokens x heads x v_dim / tp x 6 B, bwd cp x tokens x (heads x qk_dim / tp + K/V width) x 6 B, "
    "at HBM bandwidth",
    "Transformer Engine AttnFuncWithCPAndKVP2P (transformer_engine/pytorch/attention/dot_product_attention/"
    "context_parallel.py: flash_attn_fwd_out_correction per step; dq.add_, dkv accumulation per step)",
)


def ring_merge_s(ctx: Context, shape: Shape) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's ring-attention merges for one micro-batch (0 without ring CP)."""
    p = shape.plan
    if p.cp <= 1 or p.cp_comm != "ring":
        return 0.0, 0.0
    m, tp = ctx.model, p.tp
    dqk, dv = qk_v_head_dims(m)
    scale = p.cp * shape.tokens * RING_MERGE_BYTES_PER_ELEM / ctx.hbm_bw
    return scale * m.num_heads * dv / tp, scale * (m.num_heads * dqk / tp + kv_width(ctx, tp))


def cp_comm_fwd_s(ctx: Context, shape: Shape, attention_fwd_s: float) -> float:
    """Exposed forward CP traffic of one layer for one micro-batch, given its attention-core time."""
    p = shape.plan
    tp, cp, tokens, link = p.tp, p.cp, shape.tokens, shape.links.cp
    if cp <= 1:
        return 0.0
    if p.cp_comm == "a2a":
        h = ctx.model.hidden_size
        return ULYSSES_ALL_TO_ALLS * collective_time("all_to_all", tokens * h / tp * ACT_ELEM_BYTES * cp, cp, link)
    step = collective_time("send_recv", tokens * kv_width(ctx, tp) * ACT_ELEM_BYTES, 2, link)
    return max(0.0, (cp - 1) * step - attention_fwd_s * (cp - 1) / cp)


def cp_warnings(ctx: Context, shape: Shape) -> list[str]:
    p = shape.plan
    if p.cp > 1 and shape.links.cp.crosses_domain:
        return [f"CP group of {p.cp} spans scale-up domains (rank order tp-cp-dp-pp with tp={p.tp}): its K/V "
                "exchange runs over the scale-out network"]
    return []


def cp_comm_term(shape: Shape, stage_cp_s: float) -> Term:
    p = shape.plan
    return CP_COMM.term("cp_comm_s", shape.nmb * stage_cp_s, "s", microbatches=shape.nmb,
                        cp_per_microbatch_s=stage_cp_s, cp=p.cp, cp_comm=p.cp_comm)
