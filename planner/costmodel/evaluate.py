"""Evaluate one plan: step time with its breakdown, peak memory with its parts, MFU, warnings.

The model is an explicit per-layer sum (in the manner of Calculon, Isaev et al. SC23): for each
pipeline stage, each layer's forward/backward GEMM, attention and memory-bound time on one device,
plus the exposed part of each collective; the pipeline schedule turns per-stage micro-batch times
into a step; data-parallel gradient traffic and the optimizer step close it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from planner.costmodel import calibration as cal
from planner.costmodel.collectives import collective_time, group_link
from planner.costmodel.flops import (LayerFlops, is_sliding_layer, layer_flops, lm_head_flops_per_token, model_flops_per_token,
                           qk_v_head_dims)
from planner.costmodel.memory import (GIB, activation_elems_per_token, grad_bytes_per_param, logits_bytes_per_token,
                            state_bytes_per_param)
from planner.params import LayerParams, count_params, layer_params
from planner.costmodel.pipeline import inflight_microbatches, pipeline_step_time, stage_layer_counts
from planner.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec


@dataclass(frozen=True)
class LayerKind:
    moe: bool
    sliding: bool
    params: LayerParams
    flops: LayerFlops  # forward, per token, unsharded


class Context:
    """Everything about (model, cluster, training) that does not depend on the plan: computed once
    per search, shared by every candidate."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, train: TrainingSpec):
        self.model, self.cluster, self.train = model, cluster, train
        kinds: dict[tuple[bool, bool], int] = {}
        self.kinds: list[LayerKind] = []  # the distinct layer kinds (dense/MoE x global/sliding)
        self.kind_of_layer: list[int] = []  # layer index -> kind index
        for i in range(model.num_layers):
            key = (model.is_moe_layer(i), is_sliding_layer(model, i))
            if key not in kinds:
                kinds[key] = len(self.kinds)
                self.kinds.append(LayerKind(key[0], key[1], layer_params(model, i), layer_flops(model, i, train.seq_len)))
            self.kind_of_layer.append(kinds[key])
        self.layer_kinds = [self.kinds[j] for j in self.kind_of_layer]
        self.params = count_params(model)
        self.model_flops_per_token = model_flops_per_token(model, train.seq_len)
        hw = cluster.hardware
        self.peak = hw.peak_flops(train.dtype)
        self.peak_bf16 = hw.peak_flops("bf16")
        eff = hw.gemm_efficiency_max
        if train.dtype == "fp8" and hw.peak_tflops.fp8:
            eff = (hw.gemm_efficiency_max_fp8 or eff) * cal.FP8_DERATE
        self.gemm_eff_max = eff * cal.GEMM_SHAPE_DERATE
        self.attn_peak = self.peak_bf16  # attention core runs in bf16 even in FP8 recipes
        self.attn_eff = hw.gemm_efficiency_max * cal.GEMM_SHAPE_DERATE * cal.ATTN_REL_EFFICIENCY
        # NVIDIA parts with FP8 tensor cores = Hopper and later, where kernel generation matters most
        hopper_plus = hw.vendor.upper().startswith("NVIDIA") and hw.peak_tflops.fp8 is not None
        if train.framework in ("fsdp",) and hopper_plus:
            self.gemm_eff_max *= cal.PYTORCH_NATIVE_HOPPER_EFFICIENCY
            # the same derate applies to every tensor-core kernel, attention included
            self.attn_eff = min(self.attn_eff, cal.FA2_HOPPER_ABS_EFFICIENCY) * cal.PYTORCH_NATIVE_HOPPER_EFFICIENCY
        self.unfused_attention = train.attention_impl == "unfused"
        self.hbm_bw = hw.hbm_bandwidth_GBps * 1e9
        # caches shared by every candidate of a search (keys hold every input of the cached value)
        self.layer_time_cache: dict[tuple, tuple] = {}
        self.act_cache: dict[tuple, float] = {}
        self.split_cache: dict[tuple, list] = {}

    def stage_kind_counts(self, pp: int, first: int | None, last: int | None, n_full: int | None):
        """Per stage: (layer counts, {kind: count} of the first n_full layers, {kind: count} of the rest)."""
        key = (pp, first, last, n_full)
        v = self.split_cache.get(key)
        if v is None:
            counts = stage_layer_counts(self.model.num_layers, pp, first, last)
            v, start = [], 0
            for c in counts:
                ids = self.kind_of_layer[start:start + c]
                nf = c if n_full is None else min(c, n_full)
                v.append((c, Counter(ids[:nf]), Counter(ids[nf:])))
                start += c
            self.split_cache[key] = v
        return v

    def gemm_eff(self, *dims: float) -> float:
        d = max(1.0, min(dims))
        return self.gemm_eff_max * d / (d + cal.GEMM_DIM_HALF)


@dataclass
class Evaluation:
    plan: ParallelPlan
    step_time_s: float
    time_breakdown: dict[str, float]
    memory: dict[str, float]
    peak_stage: int
    fits: bool
    tokens_per_s_per_device: float
    mfu: float
    hfu: float
    warnings: list[str] = field(default_factory=list)
    pipeline: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "plan": self.plan.knobs(),
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "memory": dict(self.memory),
            "time_breakdown": dict(self.time_breakdown),
            "fits": self.fits,
            "warnings": list(self.warnings),
            "pipeline": dict(self.pipeline),
        }


def param_tensors_per_layer(m, moe: bool) -> int:
    """Parameter tensors of one transformer layer in Megatron's fused layout (QKV one matrix, gate and
    up one matrix; biases and norm weights separate tensors)."""
    if m.mla is not None:
        # kv_a, kv_a_norm, kv_b, o, and q (or q_a, q_a_norm, q_b with a query LoRA rank)
        attn = 4 + (3 if m.mla.q_lora_rank else 1) + int(m.qkv_bias) * 2 + int(m.attn_out_bias)
    else:
        attn = 2 + int(m.qkv_bias) + int(m.attn_out_bias) + 2 * int(m.qk_norm)
    norms = m.norms_per_layer * (2 if m.norm_type == "layernorm" and m.norm_bias else 1)
    if moe:
        mlp = 1 + int(m.moe.router_bias) + 2 * (1 + int(m.moe.expert_bias)) + (2 if m.moe.num_shared_experts else 0)
    else:
        mlp = 2 * (1 + int(m.mlp_bias))
    return attn + norms + mlp


def zero3_collectives_per_pass(ctx: "Context", stage_split) -> float:
    """Separate all-gathers (and reduce-scatters) one forward or backward pass of a stage issues under
    ZeRO-3/FSDP. DeepSpeed partitions and gathers every parameter tensor on its own (ZeRO-Infinity,
    Rajbhandari et al. SC21, arXiv 2104.07857, sec. 6.1); FSDP2, Megatron-FSDP and XLA gather one
    flat buffer per transformer block (torchtitan applies fully_shard per block)."""
    _, hc, tc = stage_split
    allc = hc + tc
    if ctx.train.framework == "deepspeed":
        return float(sum(n * param_tensors_per_layer(ctx.model, ctx.kinds[j].moe) for j, n in allc.items()))
    return float(sum(allc.values()))


def largest_layer_params_per_device(ctx: "Context", plan: ParallelPlan, kind_ids) -> float:
    """Parameters one device holds of the largest of these layer kinds, unsharded by ZeRO: dense parts
    split by TP, routed experts by EP x ETP."""
    return max(((ctx.kinds[j].params.total - ctx.kinds[j].params.routed_experts) / plan.tp
                + ctx.kinds[j].params.routed_experts / (plan.ep * plan.etp) for j in kind_ids), default=0.0)


def zero3_regather_fraction(ctx: "Context", plan: ParallelPlan, stage_split) -> float:
    """Share of a layer's parameters DeepSpeed ZeRO-3 gathers a second time in backward when the layer is
    fully recomputed: the recomputed forward gathers them, and DeepSpeed keeps a gathered parameter for its
    backward use only when that use comes within `stage3_max_reuse_distance` parameters (DeepSpeed config
    docs, default 1e9). With the layer's P parameters spread evenly over its modules, the parameter at
    relative position x is next used after the 2 (1 - x) P parameters of the rest of the recompute and the
    backward down to it, so the share beyond the window is max(0, 1 - W / 2P). FSDP2 unshards a block once
    before its recompute (checkpointing inside fully_shard): 0 there."""
    if ctx.train.framework != "deepspeed" or plan.recompute != "full":
        return 0.0
    _, hc, tc = stage_split
    layer = largest_layer_params_per_device(ctx, plan, hc + tc)
    if layer <= 0:
        return 0.0
    return max(0.0, 1.0 - cal.DEEPSPEED_MAX_REUSE_DISTANCE_PARAMS / (2.0 * layer))


def _num_microbatches(plan: ParallelPlan, train: TrainingSpec) -> int:
    per_rank = train.global_batch / (plan.dp * plan.micro_batch)
    return max(1, int(round(per_rank)))


def evaluate(ctx: Context, plan: ParallelPlan) -> Evaluation:
    """Predict one training step of `plan` (all knobs set). Pure; never raises on a valid plan."""
    m, cl, tr = ctx.model, ctx.cluster, ctx.train
    hw = cl.hardware
    fw = tr.framework
    tp, pp, cp, dp, ep, etp, vpp = plan.tp, plan.pp, plan.cp, plan.dp, plan.ep, plan.etp, plan.vpp
    sp = plan.sequence_parallel and tp > 1
    mb = plan.micro_batch
    nmb = _num_microbatches(plan, tr)
    tokens = mb * tr.seq_len / cp  # tokens of one micro-batch on one device (along the sequence)
    warnings: list[str] = []

    # ---- placement of each group (Megatron order tp -> cp -> ep/dp -> pp) ----
    tp_link = group_link(cl, tp, 1)
    cp_link = group_link(cl, cp, tp)
    ep_link = group_link(cl, ep, etp, "all_to_all")
    dp_link_rs = group_link(cl, dp * cp, tp, "reduce_scatter")
    dp_link_ar = group_link(cl, dp * cp, tp, "all_reduce")
    pp_link = group_link(cl, 2, tp * cp * dp, "send_recv")
    if tp > 1 and tp_link.crosses_domain:
        warnings.append(f"TP group of {tp} crosses the {cl.scale_up_size}-device scale-up domain: "
                        "its per-layer collectives run over the scale-out network")
    if m.is_moe and ep > 1 and ep_link.crosses_domain:
        warnings.append(f"EP group of {ep} spans {math.ceil(ep * etp / cl.scale_up_size)} scale-up domains: "
                        "token all-to-alls cross the scale-out network")

    # ---- per-layer time of one micro-batch on one device ----
    h = m.hidden_size
    act_elem = 2.0  # bytes per activation element (bf16)
    def layer_times(k: LayerKind) -> tuple[float, float, float, float, float, float]:
        """(fwd compute, bwd compute, attn-core fwd, tp comm fwd, cp comm fwd, ep comm fwd) seconds."""
        f = k.flops
        attn_dims = (tokens, h, (m.num_heads * (m.head_dim if m.mla is None else m.mla.v_head_dim)) / tp)
        t_proj = tokens * f.attn_proj / tp / (ctx.peak * ctx.gemm_eff(*attn_dims))
        t_mlp = 0.0
        if f.mlp:
            width = m.ffn_hidden_size if not k.moe else (
                (m.moe.shared_expert_ffn_hidden_size or m.moe.expert_ffn_hidden_size) * max(1, m.moe.num_shared_experts))
            t_mlp = tokens * f.mlp / tp / (ctx.peak * ctx.gemm_eff(tokens, h, width / tp))
        t_exp = 0.0
        if f.experts:
            e = m.moe
            tok_per_expert = tokens / tp * ep * e.top_k / e.num_experts * (etp if etp > 1 else 1)
            t_exp = tokens * f.experts / tp / (ctx.peak * ctx.gemm_eff(tok_per_expert, h, e.expert_ffn_hidden_size / etp)
                                               * cal.MOE_GROUPED_GEMM_REL_EFFICIENCY)
            t_exp += tokens * f.router / tp / (ctx.peak * ctx.gemm_eff(tokens, h))
        if ctx.unfused_attention:
            # scores materialised: QK^T and AV run as batched GEMMs over the full s x s (no causal
            # skipping) and the softmax/dropout passes over the scores are memory-bound
            dqk, dv = qk_v_head_dims(m)
            scores = tokens * (tr.seq_len) * m.num_heads / tp  # elements of s x s per device
            t_attn = 2.0 * scores * (dqk + dv) / (ctx.peak * ctx.gemm_eff(tr.seq_len, dqk))
            t_attn += scores * cal.UNFUSED_ATTN_BYTES_PER_SCORE_FWD / ctx.hbm_bw
        else:
            t_attn = tokens * f.attn_core / tp / (ctx.attn_peak * ctx.attn_eff)
        # memory-bound elementwise work: norms, residuals, activation, rope (read+write), fwd
        inter = m.ffn_hidden_size if not k.moe else m.moe.expert_ffn_hidden_size * m.moe.top_k
        elem = tokens * (10 * h / (tp if sp else 1) + 3 * inter / tp) * act_elem * cal.ELEMENTWISE_BYTES_FACTOR
        if k.moe:  # token permute + unpermute: read and write top_k copies of each hidden state, twice
            elem += tokens / tp * m.moe.top_k * h * act_elem * 4
        t_elem = elem / ctx.hbm_bw
        fwd = t_proj + t_mlp + t_exp + t_attn + t_elem
        bwd = 2 * (t_proj + t_mlp + t_exp) + 2.5 * t_attn + 2 * t_elem  # FA2 bwd ~2.5x fwd (Dao 2023, sec. 4.1)
        if k.moe and fw == "megatron":
            fwd += cal.MOE_DISPATCH_SYNC_S / 3
            bwd += 2 * cal.MOE_DISPATCH_SYNC_S / 3
        # TP: with SP 2 all-gathers + 2 reduce-scatters of the (tokens x h) activation per layer,
        # without SP 2 all-reduces (Korthikanti et al. 2022, sec. 4.2.2); MoE layers with EP swap
        # the MLP pair for the token all-to-alls.
        buf = tokens * h * act_elem
        n_pairs = 1 if (k.moe and ep > 1) else 2
        if tp > 1:
            if sp:
                t_tp = n_pairs * (collective_time("all_gather", buf, tp, tp_link)
                                  + collective_time("reduce_scatter", buf, tp, tp_link))
            else:
                t_tp = n_pairs * collective_time("all_reduce", buf, tp, group_link(cl, tp, 1, "all_reduce"))
        else:
            t_tp = 0.0
        # CP ring: cp-1 rotations of this rank's K and V, overlapped with the attention blocks
        t_cp = 0.0
        if cp > 1:
            if m.mla is not None:
                kv_width = m.num_heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim + m.mla.v_head_dim) / tp
            else:
                kv_width = 2 * m.num_kv_heads * m.head_dim / tp
            if plan.cp_comm == "a2a":  # Ulysses: all-to-all of q,k,v in and o out (Jacobs et al. 2023)
                t_cp = 4 * collective_time("all_to_all", tokens * h / tp * act_elem * cp, cp, cp_link)
            else:
                step = collective_time("send_recv", tokens * kv_width * act_elem, 2, cp_link)
                t_cp = max(0.0, (cp - 1) * step - t_attn * (cp - 1) / cp)
        # EP: dispatch + combine all-to-all of top_k copies of each token's hidden state
        t_ep = 0.0
        if k.moe and ep > 1:
            a2a_bytes = tokens / tp * m.moe.top_k * h * (1.0 if tr.dtype == "fp8" else act_elem) * ep
            t_ep = 2 * collective_time("all_to_all", a2a_bytes / ep, ep, ep_link)
            t_ep *= 1.0 - cal.EP_OVERLAP_FRACTION
        return fwd, bwd, t_attn, t_tp, t_cp, t_ep

    cache = ctx.layer_time_cache
    tkey = (tp, cp, mb, sp, ep, etp, plan.cp_comm)
    def kind_times(k: LayerKind):
        key = (k.moe, k.sliding) + tkey
        if key not in cache:
            cache[key] = layer_times(k)
        return cache[key]

    def act_elems(k: LayerKind, mode: str) -> float:
        key = (k.moe, k.sliding, tp, sp, mode, etp)
        v = ctx.act_cache.get(key)
        if v is None:
            v = ctx.act_cache[key] = activation_elems_per_token(
                m, k.moe, tp, sp, mode, fw, etp, fp8_gemm_inputs=(tr.dtype == "fp8" and fw == "megatron"))
        return v

    split = ctx.stage_kind_counts(pp, plan.first_stage_layers, plan.last_stage_layers,
                                  plan.recompute_layers if plan.recompute == "full" else None)
    counts = [c for c, _, _ in split]
    stage_fwd, stage_bwd, stage_rec, stage_comm = [], [], [], []
    stage_tp, stage_cp, stage_ep = [], [], []
    for s in range(pp):
        f = b = rc = ttp = tcp = tep = 0.0
        _, head_counts, tail_counts = split[s]
        for part, full_part in ((head_counts, True), (tail_counts, False)):
            for kid, cnt in part.items():
                lf, lb, la, lt, lc, le = kind_times(ctx.kinds[kid])
                f += cnt * lf
                b += cnt * lb
                ttp += cnt * lt
                tcp += cnt * lc
                tep += cnt * le
                if plan.recompute == "full" and full_part:
                    rc += cnt * (lf + lt + lc + le)  # re-run the forward, collectives included
                elif plan.recompute == "selective":
                    rc += cnt * la  # re-run the attention core (Korthikanti sec. 5)
        if s == pp - 1:  # LM head + loss
            head = tokens * lm_head_flops_per_token(m) / tp
            t_head = head / (ctx.peak * ctx.gemm_eff(tokens, h, m.vocab_size / tp))
            f += t_head
            b += 2 * t_head
        stage_fwd.append(f)
        stage_bwd.append(b)
        stage_rec.append(rc)
        stage_tp.append(2 * ttp)  # forward + backward
        stage_cp.append(2 * tcp)
        if plan.schedule == "dualpipe" and pp > 1:
            # DualPipe pairs one micro-batch's forward with another's backward and hides the EP
            # all-to-all under that computation (DeepSeek-V3 report sec. 3.2.1): only the excess shows
            tep = max(0.0, tep - 0.5 * (f + b))
        stage_ep.append(2 * tep)
        stage_comm.append(2 * ((0.0 if plan.tp_comm_overlap else ttp) + tcp + tep))
    stage_mb = [stage_fwd[s] + stage_bwd[s] + stage_rec[s] + stage_comm[s] for s in range(pp)]
    pipe_t = pipeline_step_time(stage_mb, nmb, plan.schedule if pp > 1 else "1f1b", vpp)
    slow = max(range(pp), key=lambda s: stage_mb[s])

    # ---- pipeline p2p: the fill and drain transfers are on the critical path ----
    t_p2p = 0.0
    if pp > 1:
        p2p_bytes = tokens * h * act_elem / (tp if sp else 1)
        t_p2p = 2 * (pp - 1) * collective_time("send_recv", p2p_bytes, 2, pp_link)

    # ---- data parallel: gradients and (ZeRO) parameters ----
    st = state_bytes_per_param(tr, plan.zero_stage, plan.offload_optimizer)
    dense_stage, expert_stage = [], []
    for s in range(pp):
        _, hc, tc = split[s]
        allc = hc + tc
        dense = sum(n * (ctx.kinds[j].params.total - ctx.kinds[j].params.routed_experts) for j, n in allc.items()) / tp
        experts = sum(n * ctx.kinds[j].params.routed_experts for j, n in allc.items()) / (ep * etp)
        if s == 0:
            dense += ctx.params.embedding / tp
        if s == pp - 1:
            dense += (ctx.params.lm_head or (ctx.params.embedding if pp > 1 else 0)) / tp + ctx.params.final_norm
        dense_stage.append(dense)
        expert_stage.append(experts)
    z_dense = plan.zero_shard_size or dp * cp
    z_expert = min(z_dense, plan.edp) if plan.zero_shard_size else plan.edp
    grad_bytes = grad_bytes_per_param(tr)  # fp32 reduction by default (Megatron main grads, FSDP2 reduce_dtype)
    t_dp = 0.0
    dp_group = dp * cp
    p_dense, p_exp = dense_stage[slow], expert_stage[slow]
    edp_link = group_link(cl, plan.edp, tp * cp * dp // max(1, plan.edp) if plan.edp < dp * cp else tp, "reduce_scatter")
    if dp_group > 1 or plan.edp > 1:
        if plan.zero_stage == 3:
            # FSDP/ZeRO-3: per micro-batch, all-gather params for forward and again for backward
            # (bf16), reduce-scatter grads; each overlaps with that micro-batch's compute (prefetch).
            n_ag = zero3_collectives_per_pass(ctx, split[slow])
            ag = collective_time("all_gather", p_dense * 2.0, z_dense, dp_link_rs, n_ag)
            ag += collective_time("all_gather", p_exp * 2.0, z_expert, edp_link)
            # gradients: reduce-scatter, or all-reduce in DeepSpeed ZeRO-3 of 2021 (issue #1173)
            legacy = tr.legacy_deepspeed_zero3
            red_kind, red_link = ("all_reduce", dp_link_ar) if legacy else ("reduce_scatter", dp_link_rs)
            rs = collective_time(red_kind, p_dense * grad_bytes, z_dense, red_link, n_ag)
            rs += collective_time(red_kind, p_exp * grad_bytes, z_expert, edp_link)
            fwd_mb, bwd_mb = stage_fwd[slow], stage_bwd[slow] + stage_rec[slow]
            bwd_ag = (1.0 + zero3_regather_fraction(ctx, plan, split[slow])) * ag
            if legacy:
                # blocking gathers (DeepSpeed PR #1188): nothing overlaps compute
                t_dp = nmb * (ag + bwd_ag + rs)
            elif pp > 1 and fw in ("fsdp", "maxtext"):
                # under pipelining the stage stays unsharded across micro-batches: one all-gather
                # before the first forward, one reduce-scatter after the last backward
                t_dp = max(0.0, ag - cal.DP_OVERLAP_FRACTION * fwd_mb) + max(0.0, rs - cal.DP_OVERLAP_FRACTION * bwd_mb)
            else:
                per_mb = max(0.0, ag - cal.DP_OVERLAP_FRACTION * fwd_mb) + max(0.0, bwd_ag + rs - cal.DP_OVERLAP_FRACTION * bwd_mb)
                t_dp = nmb * per_mb + ag * (1 - cal.DP_OVERLAP_FRACTION)
            if plan.zero_shard_size and plan.zero_shard_size < dp_group:  # HSDP: all-reduce across replicas
                rep = dp_group // plan.zero_shard_size
                t_dp += collective_time("all_reduce", (p_dense / z_dense) * grad_bytes, rep,
                                        group_link(cl, rep, tp * plan.zero_shard_size, "all_reduce"))
        else:
            if plan.zero_stage == 0:
                red = collective_time("all_reduce", p_dense * grad_bytes, dp_group, dp_link_ar)
                red += collective_time("all_reduce", p_exp * grad_bytes, plan.edp, edp_link)
                gather = 0.0
            else:
                red = collective_time("reduce_scatter", p_dense * grad_bytes, dp_group, dp_link_rs)
                red += collective_time("reduce_scatter", p_exp * grad_bytes, plan.edp, edp_link)
                gather = collective_time("all_gather", p_dense * 2.0, dp_group, dp_link_rs)
                gather += collective_time("all_gather", p_exp * 2.0, plan.edp, edp_link)
            # overlapped with the last micro-batch's backward / the next step's first forward
            bwd_last = stage_bwd[0] + stage_rec[0]
            t_dp = max(0.0, red - cal.DP_OVERLAP_FRACTION * bwd_last) + max(0.0, gather - cal.DP_OVERLAP_FRACTION * stage_fwd[0])

    # ---- optimizer step: memory-bound Adam over the local shard (read/write fp32 master, m, v; read
    # grad; write bf16 param: ~30 bytes/param), or over PCIe when offloaded ----
    local_params = p_dense / (z_dense if st.optimizer_sharded else 1) + p_exp / (z_expert if st.optimizer_sharded else 1)
    if plan.offload_optimizer:
        gen = "gen4" if hw.id.startswith("a100") else "gen5"
        t_opt = local_params * (grad_bytes + 2.0) / (cal.PCIE_UNIDIR_GBPS[gen] * 1e9)
    else:
        t_opt = local_params * 30.0 / ctx.hbm_bw

    step = pipe_t + t_p2p + t_dp + t_opt

    # ---- memory per stage; the peak is the max over stages ----
    mem_parts_by_stage = []
    for s in range(pp):
        dn, ex = dense_stage[s], expert_stage[s]
        w, g, o = (dn * d + ex * e for d, e in zip(st.per_param(z_dense), st.per_param(z_expert)))
        if plan.schedule == "dualpipe" and pp > 1:
            w, g = 2 * w, 2 * g  # DualPipe keeps two copies of the parameters (DeepSeek-V3 Table 2)
        n_layers, hc, tc = split[s]
        inflight = inflight_microbatches(plan.schedule if pp > 1 else "1f1b", pp, s, nmb, vpp)
        per_mb = 0.0
        worst_layer = 0.0
        for part, mode in ((hc, plan.recompute), (tc, "none")):
            for kid, cnt in part.items():
                per_mb += cnt * act_elems(ctx.kinds[kid], mode) * tokens * act_elem
        layer_ids = set(hc) | set(tc)
        for kid in layer_ids:
            worst_layer = max(worst_layer, act_elems(ctx.kinds[kid], "none") * tokens * act_elem)
        acts = per_mb * inflight
        if plan.recompute == "full":
            acts += worst_layer  # one layer's full activations exist while it is recomputed
        if ctx.unfused_attention and plan.recompute != "full":
            # Korthikanti eq. 1: softmax output, dropout mask and output, 5 a s^2 b bytes per layer
            acts += inflight * n_layers * 5.0 * m.num_heads / tp * tr.seq_len * tokens
        if s == pp - 1:
            acts += tokens * logits_bytes_per_token(m, tp)
        if s == 0:
            acts += tokens * h * act_elem * (1 if pp > 1 else 0)  # embedding output kept for the first layer
        buffers = 0.0
        if plan.zero_stage == 3 and pp > 1 and fw in ("fsdp", "maxtext"):
            # FSDP under pipelining keeps the stage's parameters unsharded between micro-batches
            # (torchtitan: reshard_after_forward=False with PP) and accumulates unsharded gradients
            # until the last micro-batch (torch.distributed.pipelining backward_maybe_with_nosync).
            buffers = (dn + ex) * (2.0 + grad_bytes)
        elif plan.zero_stage == 3:
            # unsharded bf16 copies of the current and the prefetched layer, plus one layer's grads
            buffers = largest_layer_params_per_device(ctx, plan, layer_ids) * (2.0 * 2 + grad_bytes)
        overhead = cal.FRAMEWORK_OVERHEAD_GIB.get(fw, 2.0) * GIB
        allocated = w + g + o + acts + buffers
        frag = allocated * (cal.ALLOCATOR_FRAGMENTATION - 1.0)
        mem_parts_by_stage.append({
            "weights_gib": w / GIB, "grads_gib": g / GIB, "optimizer_gib": o / GIB,
            "activations_gib": acts / GIB, "buffers_gib": buffers / GIB,
            "overhead_gib": (overhead + frag) / GIB,
        })
    peak_stage = max(range(pp), key=lambda s: sum(mem_parts_by_stage[s].values()))
    mem = dict(mem_parts_by_stage[peak_stage])
    mem["peak_gib"] = sum(mem.values())
    mem["capacity_gib"] = hw.hbm_capacity_gib
    fits = mem["peak_gib"] <= hw.hbm_capacity_gib - cal.FIT_RESERVE_GIB

    total_tokens = tr.global_batch * tr.seq_len
    n_dev = plan.devices
    tps = total_tokens / step / n_dev
    mfu = ctx.model_flops_per_token * total_tokens / (step * n_dev * ctx.peak_bf16)
    rec_flops_frac = sum(stage_rec) / max(1e-30, sum(stage_fwd))
    hfu = mfu * (1 + rec_flops_frac / 3.0)

    compute = nmb * (stage_fwd[slow] + stage_bwd[slow])
    breakdown = {
        "compute_s": compute,
        "recompute_s": nmb * stage_rec[slow],
        "bubble_s": max(0.0, pipe_t - nmb * stage_mb[slow]),
        "tp_comm_s": nmb * stage_tp[slow] * (0.0 if plan.tp_comm_overlap else 1.0),
        "cp_comm_s": nmb * stage_cp[slow],
        "ep_comm_s": nmb * stage_ep[slow],
        "pp_comm_s": t_p2p,
        "dp_comm_s": t_dp,
        "optimizer_s": t_opt,
    }
    if not fits:
        warnings.append(f"does not fit: needs {mem['peak_gib']:.1f} GiB of {hw.hbm_capacity_gib:.1f} GiB "
                        f"(stage {peak_stage})")
    if pp > 1 and max(counts) != min(counts):
        warnings.append(f"uneven pipeline stages: layers per stage {counts}")
    return Evaluation(
        plan=plan, step_time_s=step, time_breakdown=breakdown, memory=mem, peak_stage=peak_stage,
        fits=fits, tokens_per_s_per_device=tps, mfu=mfu, hfu=hfu, warnings=warnings,
        pipeline={"pp": pp, "vpp": vpp, "num_microbatches": nmb, "schedule": plan.schedule if pp > 1 else "none",
                  "layers_per_stage": counts,
                  "fwd_s_per_microbatch": stage_fwd, "bwd_s_per_microbatch": [stage_bwd[s] + stage_rec[s] for s in range(pp)]},
    )


def stage_problem(ctx: Context, plan: ParallelPlan, capacity_gib: float):
    """The layer -> stage balancing problem of `plan` (planner.stages.StageProblem), built from the same
    per-layer costs `evaluate` uses: fwd+bwd time and exposed collectives per layer, the extra time of a
    fully recomputed layer, activation bytes per in-flight micro-batch with and without full recompute,
    model-state bytes per layer, the embedding / LM head + loss extras and in-flight micro-batches per
    stage. Capacity = usable memory less the framework overhead, over the allocator fragmentation."""
    from planner.stages import StageProblem

    evaluate(ctx, plan)  # makes sure the per-kind caches read below hold this plan's entries
    m, tr = ctx.model, ctx.train
    tp, cp, ep, etp, pp = plan.tp, plan.cp, plan.ep, plan.etp, plan.pp
    sp = plan.sequence_parallel and tp > 1
    tokens = plan.micro_batch * tr.seq_len / cp
    tkey = (tp, cp, plan.micro_batch, sp, ep, etp, plan.cp_comm)
    st = state_bytes_per_param(tr, plan.zero_stage, plan.offload_optimizer)
    z_dense = plan.zero_shard_size or plan.dp * cp
    z_exp = min(z_dense, plan.edp) if plan.zero_shard_size else plan.edp
    per = lambda Z: sum(st.per_param(Z))  # noqa: E731
    base_mode = plan.recompute if plan.recompute != "full" else "none"
    t, rc, act, act_rc, state = [], [], [], [], []
    for k in ctx.layer_kinds:
        lf, lb, la, lt, lc, le = ctx.layer_time_cache[(k.moe, k.sliding) + tkey]
        comm = 2 * ((0.0 if plan.tp_comm_overlap else lt) + lc + le)
        t.append(lf + lb + comm + (la if plan.recompute == "selective" else 0.0))
        rc.append(lf + lt + lc + le)
        act.append(ctx.act_cache[(k.moe, k.sliding, tp, sp, base_mode, etp)] * tokens * 2.0)
        act_rc.append(ctx.act_cache[(k.moe, k.sliding, tp, sp, "full", etp)] * tokens * 2.0
                      if (k.moe, k.sliding, tp, sp, "full", etp) in ctx.act_cache
                      else activation_elems_per_token(m, k.moe, tp, sp, "full", tr.framework, etp) * tokens * 2.0)
        dense = (k.params.total - k.params.routed_experts) / tp
        state.append(dense * per(z_dense) + k.params.routed_experts / (ep * etp) * per(z_exp))
    head_s = tokens * lm_head_flops_per_token(m) / tp / (ctx.peak * ctx.gemm_eff(tokens, m.hidden_size, m.vocab_size / tp))
    emb_state = ctx.params.embedding / tp * per(z_dense)
    head_state = (ctx.params.lm_head or ctx.params.embedding) / tp * per(z_dense)
    nmb = _num_microbatches(plan, tr)
    inflight = tuple(inflight_microbatches(plan.schedule, pp, s, nmb, plan.vpp) for s in range(pp))
    overhead = cal.FRAMEWORK_OVERHEAD_GIB.get(tr.framework, 2.0) * GIB
    cap = max(1.0, (capacity_gib * GIB - overhead) / cal.ALLOCATOR_FRAGMENTATION)
    return StageProblem(
        num_layers=m.num_layers, pp=pp, layer_time_s=tuple(t), layer_recompute_s=tuple(rc),
        layer_act_bytes=tuple(act), layer_act_bytes_recompute=tuple(act_rc), layer_state_bytes=tuple(state),
        first_extra_time_s=0.0, last_extra_time_s=3 * head_s,
        first_extra_bytes=emb_state + tokens * m.hidden_size * 2.0 * inflight[0],
        last_extra_bytes=head_state + tokens * logits_bytes_per_token(m, tp),
        inflight=inflight, capacity_bytes=cap,
        uniform_recompute=plan.recompute == "full",
    )
