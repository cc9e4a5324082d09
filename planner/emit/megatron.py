"""Megatron-LM (megatron-core >= 0.17 `pretrain_gpt.py`) arguments and a torchrun launch script.

Flag names are the 0.19.2 parser's (checked by tests/consumers/test_megatron_consumer.py with the real
`parse_args` + `validate_args`). Files: `megatron_args.json` ({"args": [...], "env": {...},
"notes": [...]}) and `launch_megatron.sh`.
"""

from __future__ import annotations

import shlex

from planner.costmodel.memory import selective_recompute_modules
from planner.emit.capabilities import refuse
from planner.emit.common import Job, Unsupported, arg_lines, dumps, moe_layer_pattern, run_length_expr
from planner.names import safe_line
from planner.specs.dims import ParallelDims


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
    refuse(job, "megatron")  # planner/emit/capabilities/megatron.py
    a = _Args()
    _parallel_args(job, a)
    _model_args(job, a)
    _moe_args(job, a)
    a.flag("--micro-batch-size", job.plan.micro_batch)
    a.flag("--global-batch-size", job.train.global_batch)
    _precision_args(job, a)
    _recompute_args(job, a)
    env = _optimizer_args(job, a)
    return list(a), env


def _parallel_args(job: Job, a: _Args) -> None:
    m, p = job.model, job.plan
    a.flag("--tensor-model-parallel-size", p.tp)
    a.flag("--pipeline-model-parallel-size", p.pp)
    if job.uneven:
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
    if m.sliding_window is not None and m.num_sliding_layers == m.num_layers:
        # TE window (left, right): a query sees keys [i - left, i + right]; HF's window of W tokens counts the
        # query itself (transformers masking_utils sliding_window_overlay: kv_idx > q_idx - W), so left = W - 1
        a.flag("--window-size", f"({m.sliding_window - 1},0)")
    elif m.sliding_window is not None:
        job.note(f"sliding-window attention ({m.sliding_window} tokens on {m.num_sliding_layers} of "
                 f"{m.num_layers} layers) not emitted: the spec does not say which layers")
    if m.attention_sinks:
        job.note("attention sinks not emitted")
    # the plan (memory, numerics) assumes no dropout; Megatron's defaults are 0.1
    a.flag("--attention-dropout", 0)
    a.flag("--hidden-dropout", 0)


def _position_args(job: Job, a: _Args) -> None:
    m = job.model
    position_type = {"rope": "rope", "learned": "learned_absolute", "none": "none"}[m.position_embedding]
    a.flag("--position-embedding-type", position_type)
    if m.position_embedding != "rope":
        return
    theta = int(m.rope_theta)  # Megatron's --rotary-base is an int
    if theta != m.rope_theta:
        job.note(f"rope_theta {m.rope_theta} rounded to the integer --rotary-base {theta}")
    a.flag("--rotary-base", theta)
    sc = m.rope_scaling
    if sc is None:
        return
    # Megatron's llama3 scaling fixes low 1, high 4, original 8192 (rotary_pos_embedding.py _apply_scaling)
    if sc.rope_type == "llama3" and (sc.low_freq_factor, sc.high_freq_factor,
                                     sc.original_max_position_embeddings) in ((1.0, 4.0, 8192), (None, None, None)):
        a.flag("--use-rope-scaling")
        a.flag("--rope-scaling-factor", sc.factor)
    else:
        job.note(f"rope_scaling {sc.rope_type} (factor {sc.factor:g}) not emitted: Megatron's --use-rope-scaling is "
                 "Llama 3.1's with low 1, high 4, original 8192")


def _mlp_args(job: Job, a: _Args) -> None:
    m = job.model
    if m.mlp_type == "gated":
        if m.activation in ("silu", "swish"):
            a.flag("--swiglu")
        elif m.activation in ("gelu", "gelu_tanh", "gelu_new", "quick_gelu"):
            a.flag("--quick-geglu")
            job.note(f"gated {m.activation} mapped to --quick-geglu (Megatron's only GeGLU flag)")
        else:
            raise Unsupported(f"Megatron-LM has no flag for a gated {m.activation} MLP")
    elif m.activation == "relu2":
        a.flag("--squared-relu")
    elif m.activation not in ("gelu", "gelu_new", "gelu_tanh"):
        job.note(f"activation {m.activation} not expressible; Megatron's default GeLU is used")
    if not (m.mlp_bias or m.attn_out_bias):
        a.flag("--disable-bias-linear")
        if m.qkv_bias:
            a.flag("--add-qkv-bias")
    elif not m.qkv_bias:
        job.note("biases on some but not all linear layers: Megatron adds them everywhere")


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
    _position_args(job, a)
    if not m.tied_embeddings:
        a.flag("--untie-embeddings-and-output-weights")
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
    if e.router_bias and m.family.startswith("deepseek"):
        a.flag("--moe-router-score-function", "sigmoid")
        a.flag("--moe-router-enable-expert-bias")
    a.flag("--expert-model-parallel-size", p.ep)
    a.flag("--expert-tensor-parallel-size", p.etp)
    if job.train.moe_capacity_factor is not None:
        # drop beyond capacity, pad every expert's input to it (megatron-core TransformerConfig
        # moe_expert_capacity_factor, moe_pad_expert_input_to_capacity)
        a.flag("--moe-expert-capacity-factor", job.train.moe_capacity_factor)
        a.flag("--moe-pad-expert-input-to-capacity")
    a.flag("--moe-token-dispatcher-type", "alltoall")
    a.flag("--moe-grouped-gemm")


def _precision_args(job: Job, a: _Args) -> None:
    t = job.train
    a.flag("--fp16" if t.dtype == "fp16" else "--bf16")
    if t.dtype == "fp8":
        recipe = t.fp8_recipe or "tensorwise"  # the planned recipe (TrainingSpec.fp8_recipe); costed as such
        # E4M3 forward, E5M2 gradients; TE's block-scaled recipes keep E4M3 throughout
        a.flag("--fp8-format", "e4m3" if recipe in ("blockwise", "mxfp8") else "hybrid")
        a.flag("--fp8-recipe", recipe)


def _recompute_args(job: Job, a: _Args) -> None:
    m, p = job.model, job.plan
    if p.recompute == "selective":
        a.flag("--recompute-granularity", "selective")
        modules = selective_recompute_modules(job.model)
        if modules != ("core_attn",):  # the cost model's "selective" for MoE / MLA models
            a.flag("--recompute-modules", modules)
    elif p.recompute == "full" and p.recompute_layers != 0:
        a.flag("--recompute-granularity", "full")
        per_stage = (job.layers_per_stage or max(p.first_stage_layers or 0, p.last_stage_layers or 0)
                     or m.num_layers // p.pp)
        if p.recompute_layers is None or p.recompute_layers >= per_stage:
            a.flag("--recompute-method", "uniform")
            a.flag("--recompute-num-layers", 1)
        else:
            # block: the first N layers of every model chunk are recomputed
            per_chunk = -(-p.recompute_layers // p.vpp)
            if per_chunk * p.vpp != p.recompute_layers:
                job.note(f"recompute_layers {p.recompute_layers} per stage rounded up to {per_chunk} per "
                         f"virtual stage ({per_chunk * p.vpp} per stage)")
            a.flag("--recompute-method", "block")
            a.flag("--recompute-num-layers", per_chunk)


def _optimizer_args(job: Job, a: _Args) -> dict[str, str]:
    """Data parallelism and optimizer sharding flags; returns the environment the launch needs."""
    p, t = job.plan, job.train
    instances = ParallelDims.of(p).zero_replicas  # shard groups of the dp*cp group (planner.specs.dims)
    if p.zero_stage == 3:
        a.flag("--use-megatron-fsdp")
        a.flag("--data-parallel-sharding-strategy", "optim_grads_params")
        a.flag("--ckpt-format", "fsdp_dtensor")  # validate_args requires it with Megatron-FSDP
        a.flag("--use-distributed-optimizer")
    elif p.zero_stage >= 1:
        a.flag("--use-distributed-optimizer")
        if p.zero_stage == 2:
            job.note("zero_stage 2 maps to the distributed optimizer (optimizer states sharded; gradients are "
                     "reduce-scattered into fp32 buffers that stay full size)")
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
    if (p.tp > 1 or p.cp > 1) and not job.blackwell_or_later and p.zero_stage != 3:
        # validate_args asserts it before Blackwell; Megatron-FSDP asserts the opposite (it warns instead)
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return env


def emit(job: Job) -> dict[str, str]:
    args, env = megatron_args(job)
    doc = {"args": args, "env": env, "notes": list(job.notes)}
    return {"megatron_args.json": dumps(doc), "launch_megatron.sh": launch_script(job, args, env)}


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
        "set -euo pipefail",
    ]
    for k, v in env.items():
        out.append(f"export {k}={shlex.quote(v)}")
    out += [
        'MEGATRON_LM="${MEGATRON_LM:-.}"',
        "exec torchrun \\",
        f"  --nnodes {job.nodes} --nproc-per-node {job.procs_per_node} \\",
        '  --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" '
        '--master-port "${MASTER_PORT:-6000}" \\',
        '  "$MEGATRON_LM/pretrain_gpt.py" \\',
    ]
    out += [f"  {line} \\" for line in arg_lines(args)]
    out.append('  "$@"')
    return "\n".join(out) + "\n"
