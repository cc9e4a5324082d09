"""Per-layer and per-stage time of one micro-batch: the compute of each layer kind
(planner.costmodel.compute) plus its TP, CP and EP collectives, summed over the layers of each pipeline
stage (Calculon's explicit per-layer sum, Isaev et al. SC23)."""

from __future__ import annotations

from typing import NamedTuple

from planner.costmodel.base import Context, LayerKind, Shape, StageSplit
from planner.costmodel.compute import (
    kind_label,
    layer_compute,
    layer_compute_term,
    lm_head_fwd_s,
    selective_recompute_s,
)
from planner.costmodel.context import cp_comm_fwd_s
from planner.costmodel.expert import dualpipe_exposed_ep_s, ep_comm_fwd_s
from planner.costmodel.memory import names_moe_module
from planner.costmodel.moe import dispatcher, merged_fwd_bwd
from planner.costmodel.mtp import MTP, eh_proj_fwd_s, mtp_kind
from planner.costmodel.pipeline import head_stage
from planner.costmodel.tensor import tp_comm_fwd_s, tp_exposed_share
from planner.costmodel.trace import Term, formula

LAYER_COMM = formula(
    "layers.comm", "forward TP + CP + EP collectives of one layer for one micro-batch (backward repeats them); EP: "
    "the dispatcher's dispatch + combine less what the shared experts hide (shared-expert overlap)",
    "planner.costmodel.tensor / context / expert (Korthikanti et al. 2022; Ring Attention; GShard)",
)

# LM head backward: input and weight gradients, 2x its forward (Narayanan et al. SC21 sec. 5.1).
LM_HEAD_BWD_RATIO = 2


class LayerTimes(NamedTuple):
    """Seconds of one layer for one micro-batch on one device: forward and backward compute, what selective
    recompute re-runs (compute.selective_recompute_s), and the forward TP / CP / EP collectives (backward
    repeats each)."""

    fwd: float
    bwd: float
    selective: float
    tp: float
    cp: float
    ep: float
    attention: float  # of fwd: the attention core's forward (compute.attention_core_s)
    attention_bwd: float  # of bwd: the attention core's backward (compute.attention_core_bwd_s)


def _layer_times(ctx: Context, shape: Shape, k: LayerKind) -> tuple[LayerTimes, tuple[Term, ...]]:
    c = layer_compute(ctx, shape, k)
    ep_raw = ep_comm_fwd_s(ctx, shape, k)
    # Megatron --moe-shared-expert-overlap: the shared experts run on a side stream during the dispatch and combine,
    # so the dispatcher shows only beyond them (megatron/core/transformer/moe/shared_experts.py)
    shared_hidden = min(ep_raw, c.mlp) if k.moe and ctx.train.shared_expert_overlap else 0.0
    ep = ep_raw - shared_hidden
    # a recomputed MoE layer dispatches and combines again (memory.names_moe_module: the selective re-run time)
    rec_ep = ep if k.moe and names_moe_module(ctx, shape.plan) else 0.0
    t = LayerTimes(c.fwd, c.bwd, selective_recompute_s(ctx, shape, k, c) + rec_ep, tp_comm_fwd_s(ctx, shape, k),
                   cp_comm_fwd_s(ctx, shape, c.attention), ep, c.attention, c.attention_bwd)
    comm = LAYER_COMM.term(f"layer_comm_fwd_s[{kind_label(k)}]", t.tp + t.cp + t.ep, "s", tp_s=t.tp, cp_s=t.cp,
                           ep_s=t.ep, ep_dispatch_s=ep_raw, ep_hidden_by_shared_s=shared_hidden,
                           dispatcher=dispatcher(ctx) if k.moe else "-", tp=shape.plan.tp, cp=shape.plan.cp,
                           ep=shape.plan.ep)
    return t, (layer_compute_term(shape, k, c), comm)


def layer_times(ctx: Context, shape: Shape, k: LayerKind) -> LayerTimes:
    """`_layer_times`, cached in the context under every knob it depends on (with its terms)."""
    key = (k.moe, k.local) + shape.time_key
    v = ctx.layer_time_cache.get(key)
    if v is None:
        v, ctx.layer_term_cache[key] = _layer_times(ctx, shape, k)
        ctx.layer_time_cache[key] = v
    return v


def layer_terms(ctx: Context, shape: Shape) -> tuple[Term, ...]:
    """The compute and collective terms of every layer kind of the model under this plan."""
    out: list[Term] = []
    for k in ctx.kinds:
        layer_times(ctx, shape, k)
        out.extend(ctx.layer_term_cache[(k.moe, k.local) + shape.time_key])
    return tuple(out)


# The largest share of a step's layer compute (forward + backward, all layers) that the attention core takes in any
# development run (runs/known_runs_dev.yaml, runs/known_runs_tpu_dev.yaml, plans as plan validate scores them), per
# attention path (Context.attention_path), rounded up to a percent: the range over which the constant that prices it
# was fitted. "fused" (calibration.ATTN_REL_EFFICIENCY: cuDNN / FlashAttention in Megatron, NeMo, DeepSpeed; MaxText's
# splash attention): 0.310, Megatron-Bridge 25.11's GB200 Llama-3-8B row at 8k tokens (0.336 before its 8k-token layers
# ran at their causal tile efficiency, base.CAUSAL_TILE_REL; the TPU rows reach 0.199); "pytorch_native_fa2"
# (calibration.FA2_HOPPER_ABS_EFFICIENCY): 0.954, torchtitan's 262k-token Llama-3.1-8B CP 8 row; "unfused": 0.461, the
# SC21 GPT-1.7B row (2026-11-28). tests/costmodel/test_attention_range.py recomputes them.
ATTN_FITTED_SHARE_MAX = {"fused": 0.31, "pytorch_native_fa2": 0.96, "unfused": 0.47}
# Beyond it on the fused path, the published Megatron runs at 16k-128k tokens that the fit never saw ran faster than
# predicted (runs/modelzoo_runs_added.yaml: Qwen3-235B-A22B on H100 at 16k / 32k / 64k / 128k tokens, attention 34-80%
# of the layer compute, and on GB200 at 128k, 87%: 20-28% faster; 25-40% before the causal tile efficiency,
# base.CAUSAL_TILE_REL), while those beyond it at 4k tokens (Megatron-Bridge's Qwen3-30B-A3B rows on 8 GB200 / GB300 /
# B300, 31-32%) landed from 8% slower to 4% faster: the warning states the long runs' figure for plans from
# ATTN_BEYOND_FIT_LONG_SEQ tokens on (the same test holds both).
ATTN_BEYOND_FIT_FASTER = (0.20, 0.28)
ATTN_BEYOND_FIT_LONG_SEQ = 16384


def attention_share(ctx: Context, shape: Shape) -> float:
    """The attention core's share of one micro-batch's layer compute over all the model's layers, forward and backward
    (compute.attention_core_bwd_s)."""
    attn = total = 0.0
    for kid, n in ctx.kind_counts:
        t = layer_times(ctx, shape, ctx.kinds[kid])
        attn += n * (t.attention + t.attention_bwd)
        total += n * (t.fwd + t.bwd)
    return attn / total if total > 0 else 0.0


ATTN_SHARE = formula(
    "layers.attention_share",
    "sum over layers of attention-core forward + backward / sum of layer forward + backward; beyond "
    "fitted_max (ATTN_FITTED_SHARE_MAX of its attention path) the fitted attention efficiency is extrapolated",
    "planner.costmodel.layers (ATTN_FITTED_SHARE_MAX: the largest share of any development run per attention path)",
)


def attention_extrapolated(share: float, attention_path: str) -> bool:
    """Whether a plan whose attention core takes `share` of the layer compute lies beyond the range its attention
    efficiency was fitted on (ATTN_FITTED_SHARE_MAX): the one rule the warning below and the error bands
    (planner.analysis.bands: such plans get the band of the published runs that were so) read."""
    return share > ATTN_FITTED_SHARE_MAX[attention_path]


def attention_share_term(ctx: Context, shape: Shape) -> Term:
    return ATTN_SHARE.term("attention_share", attention_share(ctx, shape), "",
                           fitted_max=ATTN_FITTED_SHARE_MAX[ctx.attention_path], attention_path=ctx.attention_path)


def attention_range_warnings(ctx: Context, shape: Shape) -> list[str]:
    """A plan whose layer compute is more attention than any development run on its attention path had
    (ATTN_FITTED_SHARE_MAX): its step time extrapolates the fitted attention efficiency."""
    limit = ATTN_FITTED_SHARE_MAX[ctx.attention_path]
    share = attention_share(ctx, shape)
    if not attention_extrapolated(share, ctx.attention_path):
        return []
    out = (f"attention core is {share:.0%} of the layer compute, more than in any run its efficiency was fitted on "
           f"({limit:.0%}): the step time is extrapolated")
    if ctx.attention_path == "fused" and ctx.train.seq_len >= ATTN_BEYOND_FIT_LONG_SEQ:
        lo, hi = ATTN_BEYOND_FIT_FASTER
        out += (f"; published Megatron runs at {ATTN_BEYOND_FIT_LONG_SEQ // 1024}k-128k tokens not in the fit ran "
                f"{lo:.0%}-{hi:.0%} faster than predicted (runs/modelzoo_runs_added.yaml), so it is likely an "
                "over-estimate")
    return [out]


class MtpTimes(NamedTuple):
    """Seconds of the MTP modules (planner.costmodel.mtp) for one micro-batch on the head rank: forward and backward
    compute, what recompute re-runs (full: eh_proj and the layer with its collectives, as megatron-core checkpoints
    them; selective: the layer's share), and the layer's forward TP / CP / EP collectives."""

    fwd: float
    bwd: float
    rec: float
    tp: float
    cp: float
    ep: float


def mtp_times(ctx: Context, shape: Shape) -> MtpTimes:
    """MtpTimes of the model's MTP modules under this plan (zeros without MTP)."""
    kid = mtp_kind(ctx)
    if kid is None:
        return MtpTimes(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    n, overhead = ctx.model.mtp_layers, ctx.calibration.LAYER_OVERHEAD_S
    lf, lb, lsel, lt, lc, le, _, _ = layer_times(ctx, shape, ctx.kinds[kid])
    proj, head = eh_proj_fwd_s(ctx, shape), lm_head_fwd_s(ctx, shape)
    rec = {"full": lf + proj + lt + lc + le, "selective": lsel}.get(shape.plan.recompute, 0.0)
    return MtpTimes(n * (lf + proj + head + overhead / 3),
                    n * (lb + 2 * proj + LM_HEAD_BWD_RATIO * head + 2 * overhead / 3), n * rec, n * lt, n * lc, n * le)


def mtp_terms(ctx: Context, shape: Shape) -> tuple[Term, ...]:
    """The MTP modules' term (none without MTP)."""
    kid = mtp_kind(ctx)
    if kid is None:
        return ()
    t = mtp_times(ctx, shape)
    return (MTP.term("mtp_fwd_s", t.fwd, "s", modules=ctx.model.mtp_layers, layer_kind=kind_label(ctx.kinds[kid]),
                     eh_proj_fwd_s=eh_proj_fwd_s(ctx, shape), lm_head_fwd_s=lm_head_fwd_s(ctx, shape),
                     bwd_s=t.bwd, recompute_s=t.rec, comm_fwd_s=t.tp + t.cp + t.ep, stage=head_stage(shape.plan)),)


class StageTimes(NamedTuple):
    """Per pipeline stage, seconds of one micro-batch: forward and backward compute, recompute, the TP,
    CP and EP collectives (forward + backward; EP after DualPipe hiding) and the exposed communication."""

    fwd: tuple[float, ...]
    bwd: tuple[float, ...]
    rec: tuple[float, ...]
    tp: tuple[float, ...]
    cp: tuple[float, ...]
    ep: tuple[float, ...]
    comm: tuple[float, ...]

    def microbatch_s(self, s: int) -> float:
        return self.fwd[s] + self.bwd[s] + self.rec[s] + self.comm[s]


def _stage_sums(ctx: Context, shape: Shape, split: StageSplit) -> tuple[float, ...]:
    """(fwd, bwd, recompute, tp, cp, ep) forward sums over one stage's layers."""
    recompute = shape.plan.recompute
    f = b = rc = ttp = tcp = tep = 0.0
    _, head_counts, tail_counts = split
    for part, full_part in ((head_counts, True), (tail_counts, False)):
        for kid, cnt in part.items():
            lf, lb, lsel, lt, lc, le, _, _ = layer_times(ctx, shape, ctx.kinds[kid])
            # + the fixed host/launch cost of running a layer (calibration.LAYER_OVERHEAD_S), 1/3 forward
            f += cnt * (lf + ctx.calibration.LAYER_OVERHEAD_S / 3)
            b += cnt * (lb + 2 * ctx.calibration.LAYER_OVERHEAD_S / 3)
            ttp += cnt * lt
            tcp += cnt * lc
            tep += cnt * le
            if recompute == "full" and full_part:
                rc += cnt * (lf + lt + lc + le)  # re-run the forward, collectives included
            elif recompute == "selective":
                rc += cnt * lsel
    return f, b, rc, ttp, tcp, tep


def stage_times(ctx: Context, shape: Shape, split: list[StageSplit]) -> StageTimes:
    """_stage_times, cached per search under every input it reads: the layer times' key (Shape.time_key: TP, the
    micro-batch's tokens, EP, whether a step has more than one micro-batch, ...), the recompute mode, TP overlap, the
    pipeline depth, DualPipe, the head stage and the split itself (by id, held beside the answer so that the id stays
    its own). The plans of one layout, micro-batch and recompute that differ only in their interleaving share it (most
    of DeepSeek-V2 on tpu-v5px256's 9,832 plans)."""
    p = shape.plan
    key = (shape.time_key, p.recompute, p.tp_comm_overlap, p.pp, p.schedule == "dualpipe", head_stage(p), id(split))
    hit = ctx.stage_times_cache.get(key)
    if hit is None:
        hit = ctx.stage_times_cache[key] = (split, _stage_times(ctx, shape, split))
    return hit[1]


def _stage_times(ctx: Context, shape: Shape, split: list[StageSplit]) -> StageTimes:
    p = shape.plan
    pp = p.pp
    dualpipe = p.schedule == "dualpipe" and pp > 1
    head = head_stage(p)
    fwd, bwd, rec, tp, cp, ep, comm = [], [], [], [], [], [], []
    for s in range(pp):
        f, b, rc, ttp, tcp, tep = _stage_sums(ctx, shape, split[s])
        f += ctx.calibration.MICROBATCH_OVERHEAD_S / 3  # per micro-batch per stage: data, schedule and host work
        b += 2 * ctx.calibration.MICROBATCH_OVERHEAD_S / 3
        if s == head:  # LM head + loss (rank 0 in a V: pipeline.head_stage), and the MTP modules (mtp_times)
            t_head = lm_head_fwd_s(ctx, shape)
            f += t_head
            b += LM_HEAD_BWD_RATIO * t_head
            if ctx.model.mtp_layers:
                mt = mtp_times(ctx, shape)
                f, b, rc = f + mt.fwd, b + mt.bwd, rc + mt.rec
                ttp, tcp, tep = ttp + mt.tp, tcp + mt.cp, tep + mt.ep
        if dualpipe or merged_fwd_bwd(ctx, shape):
            # DualPipe's paired chunks, or Megatron's batch-level EP overlap (a forward and a backward micro-batch
            # merged layer by layer): the all-to-alls hide under the paired compute
            tep = dualpipe_exposed_ep_s(tep, f, b)
        fwd.append(f)
        bwd.append(b)
        rec.append(rc)
        tp.append(2 * ttp)  # collectives: forward + backward
        cp.append(2 * tcp)
        ep.append(2 * tep)
        comm.append(2 * (tp_exposed_share(ctx, p) * ttp + tcp + tep))
    return StageTimes(tuple(fwd), tuple(bwd), tuple(rec), tuple(tp), tuple(cp), tuple(ep), tuple(comm))
