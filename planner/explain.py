"""Plain-language reasons: why a plan wins, and why its neighbours lose."""

from __future__ import annotations

from planner.costmodel import Context, Evaluation, evaluate
from planner.placement import placement
from planner.space import plan_errors

_SCALE_UP_NAME = {"nvswitch": "NVLink", "xgmi_mesh": "xGMI", "ici_torus": "ICI"}


def reason(ctx: Context, ev: Evaluation) -> str:
    """One line: what each non-trivial knob buys, from the evaluation's own numbers."""
    p, cl = ev.plan, ctx.cluster
    parts = []
    span = placement(cl, p, ctx.train.framework)
    if p.tp > 1:
        where = (_SCALE_UP_NAME.get(cl.hardware.scale_up.kind, "the scale-up fabric") if span["tp"].aligned else
                 f"{cl.hardware.scale_out.kind.upper()} (its groups span {span['tp'].domains} scale-up domains)")
        parts.append(f"TP={p.tp} runs per-layer collectives on {where}")
    if p.pp > 1:
        bub = ev.time_breakdown["bubble_s"] / ev.step_time_s if ev.step_time_s else 0.0
        parts.append(f"PP={p.pp}{' x' + str(p.vpp) + ' virtual' if p.vpp > 1 else ''} "
                     f"({p.schedule}, bubble {100 * bub:.0f}%)")
    if p.cp > 1:
        parts.append(f"CP={p.cp} splits the {ctx.train.seq_len}-token sequence"
                     + ("" if span["cp"].aligned else f" (its K/V exchange crosses {cl.hardware.scale_out.kind.upper()})"))
    if p.ep > 1:
        parts.append(f"EP={p.ep} spreads the experts")
    if p.zero_stage:
        parts.append({1: "ZeRO-1 shards optimizer states", 2: "ZeRO-2 shards optimizer and gradients",
                      3: "ZeRO-3/FSDP shards weights too"}[p.zero_stage])
    if p.recompute != "none":
        parts.append(f"{p.recompute} recompute to fit" + (f" ({p.recompute_layers} layers/stage)" if p.recompute_layers is not None else ""))
    mem = ev.memory
    parts.append(f"peak {mem['peak_gib']:.1f} of {mem['capacity_gib']:.1f} GiB")
    return "; ".join(parts)


NEIGHBOURS = (
    ("TP x2", lambda p: {"tp": p.tp * 2, "dp": p.dp // 2} if p.dp % 2 == 0 else None),
    ("TP /2", lambda p: {"tp": p.tp // 2, "dp": p.dp * 2} if p.tp % 2 == 0 else None),
    ("PP x2", lambda p: {"pp": p.pp * 2, "dp": p.dp // 2} if p.dp % 2 == 0 else None),
    ("PP /2", lambda p: {"pp": p.pp // 2, "dp": p.dp * 2, "vpp": 1, "schedule": "1f1b"} if p.pp % 2 == 0 else None),
    ("ZeRO-3", lambda p: {"zero_stage": 3} if p.zero_stage != 3 else None),
    ("ZeRO-1", lambda p: {"zero_stage": 1} if p.zero_stage != 1 else None),
    ("no recompute", lambda p: {"recompute": "none", "recompute_layers": None} if p.recompute != "none" else None),
    ("full recompute", lambda p: {"recompute": "full", "recompute_layers": None} if p.recompute != "full" or p.recompute_layers is not None else None),
    ("micro-batch x2", lambda p: {"micro_batch": p.micro_batch * 2}),
    ("micro-batch /2", lambda p: {"micro_batch": p.micro_batch // 2} if p.micro_batch % 2 == 0 else None),
    ("CP x2", lambda p: {"cp": p.cp * 2, "dp": p.dp // 2} if p.dp % 2 == 0 else None),
)


def why_not(ctx: Context, ev: Evaluation, cap_gib: float) -> list[dict]:
    """For each neighbour of the plan: does it break a rule, not fit, or run slower (and why)."""
    out = []
    for name, change in NEIGHBOURS:
        upd = change(ev.plan)
        if not upd:
            continue
        if upd.get("pp", ev.plan.pp) == 1:  # a neighbour that keeps PP keeps its schedule
            upd.update(vpp=1, schedule="1f1b")
        if upd.get("tp", ev.plan.tp) == 1:
            upd["sequence_parallel"] = False
        try:
            alt = ev.plan.model_copy(update=upd)
            alt = type(ev.plan)(**alt.model_dump())
        except ValueError:
            continue
        errs = plan_errors(ctx.model, ctx.train, ctx.cluster.count, alt)
        if errs:
            out.append({"change": name, "verdict": "invalid", "detail": errs[0]})
            continue
        a = evaluate(ctx, alt)
        if a.memory["peak_gib"] > cap_gib:
            out.append({"change": name, "verdict": "does not fit",
                        "detail": f"needs {a.memory['peak_gib']:.1f} GiB, {a.memory['peak_gib'] - cap_gib:.1f} GiB over"})
            continue
        d = a.step_time_s / ev.step_time_s - 1
        diffs = {k: a.time_breakdown[k] - ev.time_breakdown.get(k, 0.0) for k in a.time_breakdown}
        worst = max(diffs, key=lambda k: diffs[k])
        because = f"{worst.rsplit('_', 1)[0]} {diffs[worst]:+.3f} s" if diffs[worst] > 0 else "overall"
        out.append({"change": name, "verdict": "slower" if d > 0 else "faster or equal",
                    "detail": f"{100 * d:+.1f}% step time ({because})", "step_time_s": a.step_time_s})
    return out


def derivation(ctx: Context, ev: Evaluation) -> list[dict]:
    """The numbers behind one evaluation, each with the formula and inputs that produced it
    (docs/cost-model.md names the sources)."""
    from planner.costmodel import calibration as cal
    from planner.costmodel.collectives import group_link
    from planner.costmodel.flops import lm_head_flops_per_token
    from planner.costmodel.memory import GIB, logits_bytes_per_token, state_bytes_per_param

    p, m, tr, hw = ev.plan, ctx.model, ctx.train, ctx.cluster.hardware
    rows: list[dict] = []

    def row(name, value, unit, formula):
        rows.append({"name": name, "value": value, "unit": unit, "formula": formula})

    tokens = p.micro_batch * tr.seq_len / p.cp
    nmb = ev.pipeline["num_microbatches"]
    row("tokens per micro-batch per device", tokens, "tokens", f"mbs x seq / cp = {p.micro_batch} x {tr.seq_len} / {p.cp}")
    row("micro-batches per step", nmb, "", f"gbs / (dp x mbs) = {tr.global_batch} / ({p.dp} x {p.micro_batch})")
    row("layers per stage", ev.pipeline["layers_per_stage"], "", "even over pp, or Megatron first/last stage sizes")
    for j, k in enumerate(ctx.kinds):
        f = k.flops
        kind = ("MoE" if k.moe else "dense") + (" sliding" if k.sliding else "")
        row(f"{kind} layer forward FLOPs per token", f.total, "FLOP",
            f"2 x weights touched: attn proj {f.attn_proj:.3g} + attn core {f.attn_core:.3g} (causal, keys=(s+1)/2) "
            f"+ MLP {f.mlp:.3g} + experts {f.experts:.3g} + router {f.router:.3g}; per device / tp={p.tp}")
    peak = ctx.peak
    row("dense peak per device", peak / 1e12, "TFLOP/s", f"{hw.id} {tr.dtype} dense peak (hardware profile)")
    d = min(tokens, m.hidden_size, m.ffn_hidden_size / p.tp)
    row("GEMM efficiency (MLP)", ctx.gemm_eff(tokens, m.hidden_size, m.ffn_hidden_size / p.tp), "",
        f"MAMF ceiling x derate x d/(d+{cal.GEMM_DIM_HALF:g}) = {ctx.gemm_eff_max:.3f} x {d:.0f}/({d:.0f}+{cal.GEMM_DIM_HALF:g}), "
        f"d = min(tokens, h, ffn/tp)")
    row("attention-core efficiency", ctx.attn_eff, "", "cuDNN/TE fused attention: ATTN_REL_EFFICIENCY x GEMM ceiling; "
        "FA2 on Hopper for PyTorch-native stacks: 0.35 (FlashAttention-3 paper)")
    slow = max(range(p.pp), key=lambda s: ev.pipeline["fwd_s_per_microbatch"][s] + ev.pipeline["bwd_s_per_microbatch"][s])
    fw_s, bw_s = ev.pipeline["fwd_s_per_microbatch"][slow], ev.pipeline["bwd_s_per_microbatch"][slow]
    row("slowest stage forward per micro-batch", fw_s, "s", "sum over its layers of FLOPs/(peak x eff) + memory-bound bytes/HBM BW"
        + (" + LM head 2 h V tokens/tp" if slow == p.pp - 1 else ""))
    row("slowest stage backward (+recompute) per micro-batch", bw_s, "s", "2 x forward GEMMs, 2.5 x attention core, + recompute")
    tb = ev.time_breakdown
    row("compute", tb["compute_s"], "s", f"micro-batches x (fwd + bwd) of the slowest stage = {nmb} x stage time")
    row("bubble", tb["bubble_s"], "s", f"(sum of the other stages' times) x {'1/v' if p.schedule == 'interleaved' else '1'} "
        f"for {p.schedule if p.pp > 1 else 'no pipeline'}; uniform stages: (p-1)/m = {(p.pp - 1) / nmb:.3f} of compute")
    if p.tp > 1:
        link = group_link(ctx.cluster, p.tp, 1)
        buf = tokens * m.hidden_size * 2
        row("TP collectives", tb["tp_comm_s"], "s",
            f"per layer fwd+bwd: {'2 all-gathers + 2 reduce-scatters' if p.sequence_parallel else '2 all-reduces'} x 2 of "
            f"{buf / 2**20:.1f} MiB, (n-1)/n x bytes / {link.busbw / 1e9:.0f} GB/s busbw "
            f"({'crosses the scale-up domain' if link.crosses_domain else 'inside the scale-up domain'}) + (n-1) x {link.alpha * 1e6:.1f} us")
    if p.dp * p.cp > 1:
        link = group_link(ctx.cluster, p.dp * p.cp, p.tp, "reduce_scatter")
        row("DP traffic (exposed)", tb["dp_comm_s"], "s",
            f"grad reduce-scatter + param all-gather over {p.dp * p.cp} ranks at {link.busbw / 1e9:.0f} GB/s busbw, less "
            f"{cal.DP_OVERLAP_FRACTION:g} x the overlapping backward/forward")
    if p.cp > 1:
        row("CP traffic (exposed)", tb["cp_comm_s"], "s", "cp-1 K/V ring steps per layer minus the attention they overlap")
    if p.ep > 1:
        row("EP all-to-all", tb["ep_comm_s"], "s", "dispatch + combine of top_k hidden states per MoE layer, fwd and bwd")
    row("optimizer step", tb["optimizer_s"], "s", "~30 bytes per local parameter / HBM bandwidth (or PCIe when offloaded)")
    row("step time", ev.step_time_s, "s", "pipeline time (compute + recompute + bubble + exposed per-layer collectives) "
        "+ pipeline fill/drain p2p + exposed DP traffic + optimizer")
    st = state_bytes_per_param(tr, p.zero_stage, p.offload_optimizer)
    z = p.zero_shard_size or p.dp * p.cp
    mem = ev.memory
    row("weights", mem["weights_gib"], "GiB", f"params on the stage / tp x {st.weights:g} B" + (f" / {z}" if st.weights_sharded else ""))
    row("gradients", mem["grads_gib"], "GiB", f"params on the stage / tp x {st.grads:g} B" + (f" / {z}" if st.grads_sharded else ""))
    row("optimizer states", mem["optimizer_gib"], "GiB",
        f"params on the stage / tp x {st.optimizer:g} B (fp32 master + Adam m, v)" + (f" / {z}" if st.optimizer_sharded else ""))
    row("activations", mem["activations_gib"], "GiB",
        f"per-layer saved tensors x tokens x 2 B x layers x in-flight micro-batches ({p.schedule}); last stage + logits "
        f"{logits_bytes_per_token(m, p.tp, ctx.train.framework) * tokens / GIB:.2f} GiB "
        f"({logits_bytes_per_token(m, 1, ctx.train.framework) / m.vocab_size:g} B per logit / tp)")
    row("peak memory", mem["peak_gib"], "GiB", f"weights + grads + optimizer + activations + buffers + overhead "
        f"(framework {cal.FRAMEWORK_OVERHEAD_GIB.get(tr.framework, 2.0):g} GiB + {100 * (cal.ALLOCATOR_FRAGMENTATION - 1):.0f}% fragmentation)")
    row("MFU", ev.mfu, "", f"model FLOPs per token {ctx.model_flops_per_token:.3g} (6 N_active + non-causal attention, "
        f"incl. LM head {3 * lm_head_flops_per_token(m):.3g}) x tokens / (step x devices x BF16 peak)")
    return rows
