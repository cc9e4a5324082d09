"""Megatron-LM (megatron-core >= 0.17 `pretrain_gpt.py`) arguments and a torchrun launch script.

Flag names are the 0.19.2 parser's (checked by tests/consumers/test_megatron_consumer.py with the real
`parse_args` + `validate_args`). Files: `megatron_args.json` ({"args": [...], "env": {...},
"notes": [...]}) and `launch_megatron.sh`.
"""

from __future__ import annotations

import shlex

from planner.costmodel.memory import recompute_modules
from planner.costmodel.mtp import mtp_layer_units
from planner.costmodel.partition import stage_layer_counts
from planner.emit.common import dumps, moe_layer_pattern, run_length_expr, torchrun_tail
from planner.launchers import refuse
from planner.launchers.contract import bias_layout, rope_scaling_value
from planner.launchers.job import Job, Unsupported
from planner.names import safe_line
from planner.specs.dims import ParallelDims
from planner.stacks import stack_of


class _Args(list):
    """argv being built: `flag(name, value)` appends `--name [value]`."""

    def flag(self, name: str, value=None) -> None:
        self.append(name)
        if isinstance(value, tuple):  # nargs="+" flags
            self.extend(str(v) for v in value)
        elif value is not None:
            self.append(str(value))


def megatron_args(job: Job) -> tuple[list[str], dict[str, str]]:
    """(argv list, env) for `pretrain_gpt.py`; raises Unsupported when a knob has no Megatron flag."""
    refuse(job, "megatron")  # planner/launchers/megatron.py
    a = _Args()
    _parallel_args(job, a)
    _model_args(job, a)
    _moe_args(job, a)
    a.flag("--micro-batch-size", job.plan.micro_batch)
    a.flag("--global-batch-size", job.train.global_batch)
    _precision_args(job, a)
    _recompute_args(job, a)
    env = _optimizer_args(job, a)
    if job.plan.offload_modules:
        # megatron-core 0.19.2 training/arguments.py validate_args: "For fine-grained activation offloading with TE >=
        # 2.10.0, NVTE_CPU_OFFLOAD_V1 should be set to 1 to avoid offloading weights." [assert]
        env["NVTE_CPU_OFFLOAD_V1"] = "1"
    return list(a), env


def pipeline_layout(job: Job) -> str | None:
    """--pipeline-model-parallel-layout for a layer split the classic flags cannot state, else None. The classic
    flags state even splits over pp x vpp, the embedding and loss counted as layers, and first/last stage sizes whose
    counts divide into vpp (megatron-core 0.19.2 transformer_config.py:1990-2105); any other split (DeepSeek-V3's 61
    layers over pp 8 x vpp 2) is written stage by stage: the pipeline ranks' layer counts the plan was costed with
    (planner.costmodel.partition.stage_layer_counts), each rank's split as evenly as it goes over its vpp virtual
    stages, the earlier ones taking the remainder (the last rank's last virtual stage, which the MTP modules close,
    their layer-equivalents fewer: costmodel.mtp.mtp_layer_units); the embedding (E) opens the first virtual stage,
    the MTP modules (m) and the loss (L) close the last (pipeline_parallel_layer_layout.py validate_layer_layout: MTP
    in the last virtual stage of a rank other than the first). Stages are listed in Megatron's order, virtual stage by
    virtual stage over the ranks (stage vpp_rank * pp + pp_rank)."""
    m, p = job.model, job.plan
    if p.pp == 1 or p.account_embedding_loss:
        return None
    counts = stage_layer_counts(m.num_layers, p.pp, p.first_stage_layers, p.last_stage_layers)
    if job.uneven and all(c % p.vpp == 0 for c in counts):
        return None  # --decoder-first/last-pipeline-num-layers [--num-virtual-stages-per-pipeline-rank]
    if not job.uneven and m.num_layers % p.pp == 0 and (m.num_layers // p.pp) % p.vpp == 0:
        return None  # even: [--num-layers-per-virtual-pipeline-stage]
    def over_vpp(c: int) -> list[int]:  # c layers as even as they go over the virtual stages, earlier ones first
        return [c // p.vpp + (v < c % p.vpp) for v in range(p.vpp)]

    chunks = [over_vpp(c) for c in counts]
    units = mtp_layer_units(m, job.train.seq_len)
    if units:
        # the MTP modules close the last virtual stage: it takes their layer-equivalents fewer layers
        # (costmodel.mtp.mtp_layer_units), as Megatron-Bridge's DeepSeek-V3 layouts do (4 x 4 + 1 on pp 4 x vpp 4)
        last = over_vpp(counts[-1] + units)
        last[-1] -= units
        if last[-1] >= 0:
            chunks[-1] = last
    stages = []
    for v in range(p.vpp):
        for rank in range(p.pp):
            n = chunks[rank][v]
            text = f"t*{n}" if n > 1 else "t" * n
            if v == 0 and rank == 0:
                text = "E" + text
            if v == p.vpp - 1 and rank == p.pp - 1:
                mtp = m.mtp_layers or 0
                text += (f"m*{mtp}" if mtp > 1 else "m" * mtp) + "L"
            stages.append(text)
    return "|".join(stages)


def _parallel_args(job: Job, a: _Args) -> None:
    m, p = job.model, job.plan
    a.flag("--tensor-model-parallel-size", p.tp)
    a.flag("--pipeline-model-parallel-size", p.pp)
    layout = pipeline_layout(job)
    if layout is not None:
        a.flag("--pipeline-model-parallel-layout", layout)
    elif job.uneven:
        if p.first_stage_layers is not None:
            a.flag("--decoder-first-pipeline-num-layers", p.first_stage_layers)
        if p.last_stage_layers is not None:
            a.flag("--decoder-last-pipeline-num-layers", p.last_stage_layers)
        if p.vpp > 1:
            # validate_args: with uneven stages the degree must be given as stages per rank
            a.flag("--num-virtual-stages-per-pipeline-rank", p.vpp)
    elif p.account_embedding_loss:
        a.flag("--account-for-embedding-in-pipeline-split")
        a.flag("--account-for-loss-in-pipeline-split")
        if p.vpp > 1:
            a.flag("--num-layers-per-virtual-pipeline-stage", (m.num_layers + 2) // (p.pp * p.vpp))
    elif p.vpp > 1:
        a.flag("--num-layers-per-virtual-pipeline-stage", m.num_layers // p.pp // p.vpp)
    if p.tp > 1 and p.sequence_parallel:
        a.flag("--sequence-parallel")
    if p.tp > 1 and p.tp_comm_overlap:
        a.flag("--tp-comm-overlap")
    if p.cp > 1:
        a.flag("--context-parallel-size", p.cp)
        a.flag("--cp-comm-type", {"ring": "p2p", "a2a": "a2a"}[p.cp_comm])


def _attention_args(job: Job, a: _Args) -> None:
    m = job.model
    a.flag("--num-attention-heads", m.num_heads)
    if m.mla is None:
        a.flag("--kv-channels", m.head_dim)
        if m.num_kv_heads != m.num_heads:
            a.flag("--group-query-attention")
            a.flag("--num-query-groups", m.num_kv_heads)
    else:
        a.flag("--multi-latent-attention")
        if m.mla.q_lora_rank is not None:
            a.flag("--q-lora-rank", m.mla.q_lora_rank)
        a.flag("--kv-lora-rank", m.mla.kv_lora_rank)
        a.flag("--qk-head-dim", m.mla.qk_nope_head_dim)
        a.flag("--qk-pos-emb-head-dim", m.mla.qk_rope_head_dim)
        a.flag("--v-head-dim", m.mla.v_head_dim)
    if m.qk_norm:
        a.flag("--qk-layernorm")
    _window_args(job, a)
    if m.attention_sinks:
        a.flag("--softmax-type", "learnable")  # one learned sink logit per head (gpt-oss)
    if job.train.attention_impl == "unfused":
        a.flag("--attention-backend", "unfused")  # as costed: the s x s scores are materialised
    # flash: the default backend (auto) runs Transformer Engine's flash or cuDNN fused attention, never s x s
    # the plan (memory, numerics) assumes no dropout; Megatron's defaults are 0.1
    a.flag("--attention-dropout", 0)
    a.flag("--hidden-dropout", 0)


def _window_args(job: Job, a: _Args) -> None:
    """Sliding windows on the layers the model has them (megatron-core TransformerConfig window_size,
    window_attn_skip_freq: a per-layer list, 1 = sliding window, 0 = full attention)."""
    m = job.model
    pattern = m.sliding_pattern()
    if m.sliding_window is None or pattern is None or not any(pattern):
        return
    # TE window (left, right): a query sees keys [i - left, i + right]; HF's window of W tokens counts the
    # query itself (transformers masking_utils sliding_window_overlay: kv_idx > q_idx - W), so left = W - 1
    a.flag("--window-size", f"({m.sliding_window - 1},0)")
    if not all(pattern):
        a.flag("--window-attn-skip-freq", skip_freq(pattern))


def skip_freq(pattern: tuple[int, ...]) -> str:
    """--window-attn-skip-freq: N when the layers cycle through N-1 window layers then one global layer
    (megatron-core TransformerConfig window_attn_skip_freq), else the per-layer list as a repeated cycle."""
    n = len(pattern)
    period = next(q for q in range(1, n + 1) if n % q == 0 and pattern == pattern[:q] * (n // q))
    cycle = list(pattern[:period])
    if cycle == [1] * (period - 1) + [0]:
        return str(period)
    return f"{run_length_expr(cycle)}*{n // period}"


def _position_args(job: Job, a: _Args) -> None:
    m = job.model
    sc = rope_scaling_value(m.rope_scaling) if m.position_embedding == "rope" else None
    if sc is not None and sc[0] == "yarn" and m.mla is None:
        a.flag("--position-embedding-type", "yarn")
    else:
        a.flag("--position-embedding-type", {"rope": "rope", "learned": "learned_absolute", "none": "none"}[
            m.position_embedding])
    if m.position_embedding != "rope":
        return
    theta = int(m.rope_theta)  # Megatron's --rotary-base is an int
    if theta != m.rope_theta:
        raise Unsupported(f"RoPE base {m.rope_theta} is not an integer: Megatron-LM's --rotary-base is an int")
    a.flag("--rotary-base", theta)
    if m.rotary_fraction != 1.0:
        a.flag("--rotary-percent", m.rotary_fraction)  # GPTModel's RotaryEmbedding(kv_channels, rotary_percent)
    if m.mla is not None:
        _mla_rope_args(job, a, sc)
    elif sc is None:
        return
    elif sc[0] == "llama3" and sc[2:] == (1.0, 4.0, 8192):
        # Megatron's llama3 scaling fixes low 1, high 4, original 8192 (rotary_pos_embedding.py _apply_scaling)
        a.flag("--use-rope-scaling")
        a.flag("--rope-scaling-factor", sc[1])
    elif sc[0] == "yarn" and sc[5:] == (1.0, 0.0):
        # GPTModel's yarn branch reads config.yarn_* (megatron training/argument_utils.py _apply_yarn_config_from_args)
        a.flag("--rotary-scaling-factor", sc[1])
        a.flag("--yarn-original-max-position-embeddings", sc[2])
        a.flag("--yarn-beta-fast", sc[3])
        a.flag("--yarn-beta-slow", sc[4])
    else:  # capabilities rule "contract" refuses it before this point
        raise Unsupported(f"rope_scaling {sc} is not expressible in Megatron-LM")


def _mla_rope_args(job: Job, a: _Args, sc: tuple | None) -> None:
    """MLATransformerConfig rope_type, rotary_scaling_factor, mscale, mscale_all_dim from flags; original length
    4096 and beta 32/1 are its dataclass defaults (megatron-core 0.19.2 transformer_config.py MLATransformerConfig)."""
    if sc is None:
        a.flag("--rope-type", "rope")
        a.flag("--no-rope-fusion")  # megatron-core: "apply_rope_fusion for MLA only works with YARN RoPE"
        return
    if sc[0] != "yarn" or sc[2:5] != (4096, 32.0, 1.0):
        raise Unsupported(f"rope_scaling {sc} with MLA is not expressible in Megatron-LM")
    a.flag("--rope-type", "yarn")
    a.flag("--rotary-scaling-factor", sc[1])
    a.flag("--mscale", sc[5])
    a.flag("--mscale-all-dim", sc[6])


# activation (planner name) -> Megatron flags; a gated MLP needs a GLU flag (megatron training/arguments.py
# transformer_config_from_args: --swiglu = F.silu + GLU; --quick-geglu = quick_gelu x*sigmoid(1.702x) + GLU;
# --openai-gelu = the tanh approximation; --squared-relu; default F.gelu = erf GeLU)
_GATED = {"silu": ("--swiglu",), "swish": ("--swiglu",), "quick_gelu": ("--quick-geglu",),
          # gpt-oss: x*sigmoid(1.702x) * (y + 1), both clamped at 7 (HF GptOssExperts; Megatron glu_linear_offset,
          # activation_func_clamp_value)
          "gpt_oss_glu": ("--quick-geglu", "--glu-linear-offset", "1.0", "--activation-func-clamp-value", "7.0")}
# Plain GeLU: megatron-core's MLP runs F.gelu (erf), except that with biases and bias_activation_fusion (on by
# default; validate_args turns it off without biases) it runs bias_gelu_impl, the tanh approximation
# (core/transformer/mlp.py, core/fusions/fused_bias_gelu.py). --openai-gelu does not reach TransformerConfig
# (training/argument_utils.py core_transformer_config_from_args).
_PLAIN = {"relu2": ("--squared-relu",)}


def plain_gelu_flags(m) -> tuple[str, ...] | None:
    """Flags giving a plain GeLU MLP the model's approximation, or None when megatron-core cannot."""
    biased = bias_layout(m) == "all"
    if m.activation == "gelu":
        return ("--no-bias-gelu-fusion",) if biased else ()
    if m.activation in ("gelu_tanh", "gelu_new"):
        return () if biased else None
    return _PLAIN.get(m.activation)


def _mlp_args(job: Job, a: _Args) -> None:
    m = job.model
    flags = _GATED.get(m.activation) if m.mlp_type == "gated" else plain_gelu_flags(m)
    if flags is None:
        raise Unsupported(f"Megatron-LM 0.19.2 has no flag for a {m.mlp_type} {m.activation} MLP")
    a.extend(flags)
    if not (m.mlp_bias or m.attn_out_bias or (m.moe is not None and (m.moe.expert_bias or m.moe.router_bias))):
        a.flag("--disable-bias-linear")
        if m.qkv_bias:
            a.flag("--add-qkv-bias")


def _model_args(job: Job, a: _Args) -> None:
    m, t = job.model, job.train
    a.flag("--num-layers", m.num_layers)
    a.flag("--hidden-size", m.hidden_size)
    a.flag("--ffn-hidden-size", m.ffn_hidden_size)
    _attention_args(job, a)
    a.flag("--seq-length", t.seq_len)
    a.flag("--max-position-embeddings", max(m.max_position_embeddings, t.seq_len))
    _mlp_args(job, a)
    a.flag("--normalization", "RMSNorm" if m.norm_type == "rmsnorm" else "LayerNorm")
    if m.norm_eps is not None:
        a.flag("--norm-epsilon", m.norm_eps)
    _position_args(job, a)
    if not m.tied_embeddings:
        a.flag("--untie-embeddings-and-output-weights")
    if m.mtp_layers:
        a.flag("--mtp-num-layers", m.mtp_layers)
    # placeholder tokenizer: the vocabulary size the plan was made for (replace with the real tokenizer at launch)
    a.flag("--tokenizer-type", "NullTokenizer")
    a.flag("--vocab-size", m.vocab_size)


def _moe_args(job: Job, a: _Args) -> None:
    m, p = job.model, job.plan
    if m.moe is None:
        return
    e = m.moe
    a.flag("--num-experts", e.num_experts)
    a.flag("--moe-router-topk", e.top_k)
    a.flag("--moe-ffn-hidden-size", e.expert_ffn_hidden_size)
    pattern = moe_layer_pattern(m)
    if not all(pattern):
        a.flag("--moe-layer-freq", run_length_expr(pattern))
    if e.num_shared_experts:
        shared = e.num_shared_experts * (e.shared_expert_ffn_hidden_size or e.expert_ffn_hidden_size)
        a.flag("--moe-shared-expert-intermediate-size", shared)
        if e.shared_expert_gate:
            a.flag("--moe-shared-expert-gate")
    _router_args(job, a)
    a.flag("--expert-model-parallel-size", p.ep)
    a.flag("--expert-tensor-parallel-size", p.etp)
    if job.train.moe_capacity_factor is not None:
        # drop beyond capacity, pad every expert's input to it (megatron-core TransformerConfig
        # moe_expert_capacity_factor, moe_pad_expert_input_to_capacity)
        a.flag("--moe-expert-capacity-factor", job.train.moe_capacity_factor)
        a.flag("--moe-pad-expert-input-to-capacity")
    # the dispatcher the plan was costed with (planner.costmodel.moe.dispatcher: TrainingSpec.moe_dispatcher, else
    # the stack's); flex sends a token once per target node (DeepSeek-V3 report sec. 3.2.2)
    kind = job.train.dispatcher
    a.flag("--moe-token-dispatcher-type", kind)
    st = stack_of(job.train)
    if kind == "flex":  # the flex kernels the plan was costed with
        a.flag("--moe-flex-dispatcher-backend", job.train.flex_backend)
    # the MoE kernels the plan was costed with (planner/stacks/megatron.py traits; megatron-core 0.19.2
    # TransformerConfig moe_permute_fusion, moe_router_fusion, moe_shared_expert_overlap)
    if st.moe_permute == "fused":
        a.flag("--moe-permute-fusion")
    if st.moe_router_fused:
        a.flag("--moe-router-fusion")
    if e.num_shared_experts and job.train.shared_expert_overlap and not job.train.moe_a2a_overlap:
        a.flag("--moe-shared-expert-overlap")  # megatron-core refuses it beside the batch-level EP overlap
    if job.train.moe_a2a_overlap and p.ep > 1:
        # batch-level EP overlap as costed (planner.costmodel.moe.merged_fwd_bwd; Megatron-core MoE README, v0.14)
        a.flag("--overlap-moe-expert-parallel-comm")
        a.flag("--delay-wgrad-compute")
    a.flag("--moe-grouped-gemm")


def _router_args(job: Job, a: _Args) -> None:
    """The router the model was trained with (megatron-core 0.19.2 TransformerConfig moe_router_*)."""
    e = job.model.require_moe()
    if e.score_function != "softmax":
        a.flag("--moe-router-score-function", e.score_function)
    if e.expert_bias_balancing:
        a.flag("--moe-router-enable-expert-bias")  # DeepSeek-V3's aux-loss-free bias (update rate 1e-3)
    if e.route_topk_groups is not None:
        a.flag("--moe-router-num-groups", e.route_groups)
        a.flag("--moe-router-group-topk", e.route_topk_groups)
    if e.routed_scaling_factor != 1.0:
        a.flag("--moe-router-topk-scaling-factor", e.routed_scaling_factor)
    if not e.norm_topk_prob and e.score_function == "softmax":
        a.flag("--moe-router-pre-softmax")  # softmax over all experts, then top-k: weights not renormalised
    if e.aux_loss_coeff:
        a.flag("--moe-router-load-balancing-type", "seq_aux_loss" if e.aux_loss_per_sequence else "aux_loss")
        a.flag("--moe-aux-loss-coeff", e.aux_loss_coeff)
    else:
        a.flag("--moe-router-load-balancing-type", "none")
    if e.z_loss_coeff:
        a.flag("--moe-z-loss-coeff", e.z_loss_coeff)


def _precision_args(job: Job, a: _Args) -> None:
    t = job.train
    a.flag("--fp16" if t.dtype == "fp16" else "--bf16")
    if t.dtype == "fp8":
        recipe = t.fp8_recipe_run  # the planned recipe (TrainingSpec.fp8_recipe); costed as such
        # E4M3 forward, E5M2 gradients; TE's block-scaled recipes keep E4M3 throughout
        a.flag("--fp8-format", "e4m3" if recipe in ("blockwise", "mxfp8") else "hybrid")
        a.flag("--fp8-recipe", recipe)
        if t.fp8_param_gather:  # FP8 primary weights, as costed (planner.costmodel.memory.fp8_weight_copy_bytes)
            a.flag("--fp8-param-gather")
            if recipe == "mxfp8" and job.plan.zero_stage in (1, 2):
                # MXFP8 parameters all-gather through the gradient buffer (megatron-core optimizer_config.py warns
                # that mxfp8 without it "will use significant amount additional GPU memory"; Megatron-Bridge's
                # bf16_with_mxfp8_mixed sets both); Megatron-FSDP turns it off itself (training/arguments.py)
                a.flag("--reuse-grad-buf-for-mxfp8-param-ag")


def _recompute_args(job: Job, a: _Args) -> None:
    p = job.plan
    if p.recompute == "selective":
        a.flag("--recompute-granularity", "selective")
        modules = recompute_modules(job.model, job.train, p)
        if modules != ("core_attn",):  # megatron-core's default (TransformerConfig.recompute_modules)
            a.flag("--recompute-modules", modules)
    elif p.recompute == "full" and p.recompute_layers != 0:
        a.flag("--recompute-granularity", "full")
        if not job.partial_full_recompute:
            a.flag("--recompute-method", "uniform")
            a.flag("--recompute-num-layers", 1)
        else:
            # block: the first N layers of every model chunk are recomputed (k is set: partial_full_recompute), k a
            # multiple of vpp (the Megatron stack's rule stacks.rules.partial_recompute_per_virtual_stage)
            a.flag("--recompute-method", "block")
            a.flag("--recompute-num-layers", (p.recompute_layers or 0) // p.vpp)
    if p.offload_modules:  # fine-grained activation offloading, as costed (memory.offloaded_elems)
        a.flag("--fine-grained-activation-offloading")
        a.flag("--offload-modules", p.offload_modules)


def _optimizer_args(job: Job, a: _Args) -> dict[str, str]:
    """Data parallelism and optimizer sharding flags; returns the environment the launch needs."""
    p, t = job.plan, job.train
    instances = ParallelDims.of(p).zero_replicas  # shard groups of the dp*cp group (planner.specs.dims)
    if p.zero_stage == 3:
        a.flag("--use-megatron-fsdp")
        a.flag("--data-parallel-sharding-strategy", "optim_grads_params")
        a.flag("--ckpt-format", "fsdp_dtensor")  # validate_args requires it with Megatron-FSDP
        a.flag("--use-distributed-optimizer")
    elif p.zero_stage >= 1:  # ZeRO-1: zero_stage 2 is refused before this (launchers.megatron rule no-zero2)
        a.flag("--use-distributed-optimizer")
    if instances > 1:
        a.flag("--num-distributed-optimizer-instances", instances)
    if p.dp > 1 or p.cp > 1:
        a.flag("--overlap-grad-reduce")
        if p.zero_stage >= 1:
            a.flag("--overlap-param-gather")
    if t.grad_dtype == "bf16":
        a.flag("--grad-reduce-in-bf16")
    if t.optimizer_dtype == "bf16":
        a.flag("--exp-avg-dtype", "bf16")
        a.flag("--exp-avg-sq-dtype", "bf16")
    if p.offload_optimizer or t.optimizer_dtype == "bf16":
        a.flag("--use-precision-aware-optimizer")
    if p.offload_optimizer:
        a.flag("--optimizer-cpu-offload")
        a.flag("--optimizer-offload-fraction", "1.0")
    env: dict[str, str] = {}
    if job.train.moe_a2a_overlap and p.ep > 1:
        # the batch-level EP overlap runs its all-to-alls on their own stream beside the other micro-batch's compute:
        # 32 (Megatron-LM d98e8a64 skills/mcore-run-on-slurm/SKILL.md, CUDA_DEVICE_MAX_CONNECTIONS:
        # "overlap_moe_expert_parallel_comm enabled: set to 32"; the MoE README's requirement "> 1"); validate_args then
        # warns instead of asserting 1 for TP / CP > 1 before Blackwell (megatron/training/arguments.py)
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"
    elif (p.tp > 1 or p.cp > 1) and not job.blackwell_or_later and p.zero_stage != 3:
        # validate_args asserts it before Blackwell; Megatron-FSDP asserts the opposite (it warns instead)
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return env


def emit(job: Job) -> dict[str, str]:
    args, env = megatron_args(job)
    doc = {"args": args, "env": env, "notes": list(job.notes)}
    return {"megatron_args.json": dumps(doc), "launch_megatron.sh": launch_script(job, args, env)}


# the kernels of the flex dispatcher's backends (megatron-core core_v0.16.1 transformer/moe/README.md "Token
# Dispatching"; fused_a2a.py imports deep_ep's Buffer / HybridEPBuffer)
FLEX_KERNELS = {"deepep": "DeepEP (github.com/deepseek-ai/DeepEP)",
                "hybridep": "HybridEP (github.com/deepseek-ai/DeepEP, branch hybrid-ep)"}


def _kernel_requirements(job: Job, args: list[str]) -> list[str]:
    """Comment lines naming what the written flags need beyond Megatron-LM itself: the flex dispatcher's kernels; the
    Transformer Engine the batch-level EP overlap's --delay-wgrad-compute needs beside --overlap-grad-reduce
    (megatron-core 0.19.2 megatron/training/arguments.py validate_args: "overlap_grad_reduce is only supported with
    TE >= 2.8.0 when enabling delay_wgrad_compute")."""
    if job.model.moe is None:
        return []
    out = []
    if job.train.dispatcher == "flex":
        backend = job.train.flex_backend
        out.append(f"# Needs {FLEX_KERNELS[backend]} installed: the flex MoE dispatcher runs its kernels "
                   f"(--moe-flex-dispatcher-backend {backend}).")
    if "--delay-wgrad-compute" in args and "--overlap-grad-reduce" in args:
        out.append("# Needs Transformer Engine >= 2.8: --delay-wgrad-compute (the batch-level EP overlap) beside "
                   "--overlap-grad-reduce.")
    return out


def launch_script(job: Job, args: list[str], env: dict[str, str]) -> str:
    p = job.plan
    out = [
        "#!/usr/bin/env bash",
        f"# Megatron-LM launch: {safe_line(job.model.name, 200)} on {job.world} x {safe_line(job.hw_id, 200)} "
        f"({job.nodes} node(s) x {job.procs_per_node}), written by planner.",
        f"# tp={p.tp} pp={p.pp} vpp={p.vpp} cp={p.cp} dp={p.dp} ep={p.ep} etp={p.etp} "
        f"micro_batch={p.micro_batch} global_batch={job.train.global_batch} grad_accum={job.grad_accum}",
        "# Run on every node with NODE_RANK and MASTER_ADDR set. Arguments given to this script are",
        "# appended (data, tokenizer, checkpoints, --train-iters, learning rate...).",
        "# MEGATRON_LM is the Megatron-LM checkout holding pretrain_gpt.py.",
        *_kernel_requirements(job, args),
        "set -euo pipefail",
    ]
    for k, v in env.items():
        out.append(f"export {k}={shlex.quote(v)}")
    out += [
        'MEGATRON_LM="${MEGATRON_LM:-.}"',
    ]
    out += torchrun_tail(job, 6000, '"$MEGATRON_LM/pretrain_gpt.py"', args)
    return "\n".join(out) + "\n"
