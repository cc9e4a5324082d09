"""Megatron-LM (megatron-core >= 0.17 `pretrain_gpt.py`) arguments and a torchrun launch script.

Flag names are the 0.19.2 parser's (checked by tests/consumers/test_megatron_consumer.py with the real
`parse_args` + `validate_args`). Files: `megatron_args.json` ({"args": [...], "env": {...},
"notes": [...]}) and `launch_megatron.sh`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from planner.costmodel.memory import selective_recompute_modules
from planner.emit.common import Job, Unsupported, dumps, moe_layer_pattern, run_length_expr
from planner.names import safe_line
from planner.specs.dims import ParallelDims

# Megatron runs 1F1B, interleaved when vpp > 1 (so '1f1b' and 'interleaved' both map to the degrees); not these:
_SCHEDULES_NOT_IN_MEGATRON = {
    "gpipe": "Megatron-LM has no GPipe schedule (it runs 1F1B, or interleaved 1F1B when vpp > 1)",
    "zb": "Megatron-LM has no zero-bubble schedule (it runs 1F1B, or interleaved 1F1B when vpp > 1)",
    "dualpipe": "Megatron-LM has no DualPipe schedule (DeepSeek's own framework; it runs 1F1B or interleaved)",
}


Flag = Callable[..., None]  # flag(name, value=None): append `--name [value]` (a tuple: several values) to the argv


def _check_expressible(job: Job) -> None:
    """Refuse plans and models Megatron-LM cannot run at all."""
    m, p = job.model, job.plan
    if job.is_tpu:
        raise Unsupported(f"Megatron-LM runs on NVIDIA/AMD GPUs, not on {job.hw_id}")
    if p.pp > 1 and p.schedule in _SCHEDULES_NOT_IN_MEGATRON:
        raise Unsupported(_SCHEDULES_NOT_IN_MEGATRON[p.schedule])
    if m.position_embedding == "alibi":
        raise Unsupported("Megatron-LM has no ALiBi position embedding")
    if m.parallel_attn_mlp:
        raise Unsupported("Megatron-LM's GPT model has no parallel attention+MLP block")


def _pipeline_split_flags(job: Job, flag: Flag) -> None:
    """How the layers split over pipeline stages (even, uneven first/last, embedding/loss counted)."""
    m, p = job.model, job.plan
    if job.uneven:
        if p.pp < 2:
            raise Unsupported("uneven first/last stage layers need pipeline parallelism")
        if p.first_stage_layers is not None:
            flag("--decoder-first-pipeline-num-layers", p.first_stage_layers)
        if p.last_stage_layers is not None:
            flag("--decoder-last-pipeline-num-layers", p.last_stage_layers)
        if p.vpp > 1:
            # validate_args: with uneven stages the degree must be given as stages per rank
            flag("--num-virtual-stages-per-pipeline-rank", p.vpp)
    elif p.account_embedding_loss:
        flag("--account-for-embedding-in-pipeline-split")
        flag("--account-for-loss-in-pipeline-split")
        if p.vpp > 1:
            flag("--num-layers-per-virtual-pipeline-stage", (m.num_layers + 2) // (p.pp * p.vpp))
    else:
        if m.num_layers % p.pp:
            raise Unsupported(f"{m.num_layers} layers do not split evenly over pp={p.pp} and the plan gives no "
                              "first/last stage sizes")
        if p.vpp > 1:
            per_rank = m.num_layers // p.pp
            if per_rank % p.vpp:
                raise Unsupported(f"{per_rank} layers per pipeline rank do not split into vpp={p.vpp} virtual stages")
            flag("--num-layers-per-virtual-pipeline-stage", per_rank // p.vpp)


def _parallelism_flags(job: Job, flag: Flag) -> None:
    """TP / PP / SP / CP degrees and options."""
    p = job.plan
    # ---- parallelism
    flag("--tensor-model-parallel-size", p.tp)
    flag("--pipeline-model-parallel-size", p.pp)
    _pipeline_split_flags(job, flag)
    if p.tp > 1 and p.sequence_parallel:
        flag("--sequence-parallel")
    if p.tp > 1 and p.tp_comm_overlap:
        if not p.sequence_parallel:
            raise Unsupported("--tp-comm-overlap needs sequence parallelism in Megatron-LM")
        flag("--tp-comm-overlap")
    if p.cp > 1:
        flag("--context-parallel-size", p.cp)
        flag("--cp-comm-type", {"ring": "p2p", "a2a": "a2a"}[p.cp_comm])


def _attention_flags(job: Job, flag: Flag) -> None:
    """Attention shape: heads, GQA, or multi-latent attention."""
    m = job.model
    if m.mla is None:
        flag("--kv-channels", m.head_dim)
        if m.num_kv_heads != m.num_heads:
            flag("--group-query-attention")
            flag("--num-query-groups", m.num_kv_heads)
    else:
        flag("--multi-latent-attention")
        if m.mla.q_lora_rank is not None:
            flag("--q-lora-rank", m.mla.q_lora_rank)
        flag("--kv-lora-rank", m.mla.kv_lora_rank)
        flag("--qk-head-dim", m.mla.qk_nope_head_dim)
        flag("--qk-pos-emb-head-dim", m.mla.qk_rope_head_dim)
        flag("--v-head-dim", m.mla.v_head_dim)


def _activation_flags(job: Job, flag: Flag) -> None:
    """The MLP activation (gated or not)."""
    m = job.model
    if m.mlp_type == "gated":
        if m.activation in ("silu", "swish"):
            flag("--swiglu")
        elif m.activation in ("gelu", "gelu_tanh", "gelu_new", "quick_gelu"):
            flag("--quick-geglu")
            job.note(f"gated {m.activation} mapped to --quick-geglu (Megatron's only GeGLU flag)")
        else:
            raise Unsupported(f"Megatron-LM has no flag for a gated {m.activation} MLP")
    elif m.activation == "relu2":
        flag("--squared-relu")
    elif m.activation not in ("gelu", "gelu_new", "gelu_tanh"):
        job.note(f"activation {m.activation} not expressible; Megatron's default GeLU is used")


def _model_flags(job: Job, flag: Flag) -> None:
    """Model shape, norms, embeddings, biases, tokenizer."""
    m, t = job.model, job.train
    # ---- model shape
    flag("--num-layers", m.num_layers)
    flag("--hidden-size", m.hidden_size)
    flag("--ffn-hidden-size", m.ffn_hidden_size)
    flag("--num-attention-heads", m.num_heads)
    _attention_flags(job, flag)
    flag("--seq-length", t.seq_len)
    flag("--max-position-embeddings", max(m.max_position_embeddings, t.seq_len))
    _activation_flags(job, flag)
    flag("--normalization", "RMSNorm" if m.norm_type == "rmsnorm" else "LayerNorm")
    flag("--position-embedding-type",
         {"rope": "rope", "learned": "learned_absolute", "none": "none"}[m.position_embedding])
    if not m.tied_embeddings:
        flag("--untie-embeddings-and-output-weights")
    if not (m.mlp_bias or m.attn_out_bias):
        flag("--disable-bias-linear")
        if m.qkv_bias:
            flag("--add-qkv-bias")
    elif not m.qkv_bias:
        job.note("biases on some but not all linear layers: Megatron adds them everywhere")
    if m.qk_norm:
        flag("--qk-layernorm")
    if m.sliding_window is not None:
        job.note(f"sliding-window attention ({m.sliding_window} tokens on {m.num_sliding_layers} layers) not emitted")
    if m.attention_sinks:
        job.note("attention sinks not emitted")
    flag("--tokenizer-type", "NullTokenizer")
    flag("--vocab-size", m.vocab_size)


def _moe_flags(job: Job, flag: Flag) -> None:
    """Mixture-of-experts layers, router and expert parallelism."""
    m, p = job.model, job.plan
    # ---- mixture of experts
    if m.moe is not None:
        e = m.moe
        flag("--num-experts", e.num_experts)
        flag("--moe-router-topk", e.top_k)
        flag("--moe-ffn-hidden-size", e.expert_ffn_hidden_size)
        pattern = moe_layer_pattern(m)
        if not all(pattern):
            flag("--moe-layer-freq", run_length_expr(pattern))
        if e.num_shared_experts:
            shared = e.num_shared_experts * (e.shared_expert_ffn_hidden_size or e.expert_ffn_hidden_size)
            flag("--moe-shared-expert-intermediate-size", shared)
            if e.shared_expert_gate:
                flag("--moe-shared-expert-gate")
        if e.router_bias and m.family.startswith("deepseek"):
            flag("--moe-router-score-function", "sigmoid")
            flag("--moe-router-enable-expert-bias")
        flag("--expert-model-parallel-size", p.ep)
        flag("--expert-tensor-parallel-size", p.etp)
        flag("--moe-token-dispatcher-type", "alltoall")
        flag("--moe-grouped-gemm")


def _precision_flags(job: Job, flag: Flag) -> None:
    """Compute precision (bf16 / fp16 / fp8 recipe)."""
    t = job.train
    # ---- precision
    if t.dtype == "fp16":
        flag("--fp16")
    else:
        flag("--bf16")
    if t.dtype == "fp8":
        if not job.fp8_in_hardware:
            raise Unsupported(f"{job.hw_id} has no FP8 tensor cores")
        flag("--fp8-format", "hybrid")
        flag("--fp8-recipe", "mxfp8" if job.blackwell_or_later else "tensorwise")


def _recompute_flags(job: Job, flag: Flag) -> None:
    """Activation recompute (selective, full uniform or block)."""
    m, p = job.model, job.plan
    # ---- activation recompute
    if p.recompute == "selective":
        flag("--recompute-granularity", "selective")
        modules = selective_recompute_modules(m)
        if modules != ("core_attn",):  # the cost model's "selective" for MoE / MLA models
            flag("--recompute-modules", modules)
    elif p.recompute == "full" and p.recompute_layers != 0:
        flag("--recompute-granularity", "full")
        per_stage = (job.layers_per_stage or max(p.first_stage_layers or 0, p.last_stage_layers or 0)
                     or m.num_layers // p.pp)
        if p.recompute_layers is None or p.recompute_layers >= per_stage:
            flag("--recompute-method", "uniform")
            flag("--recompute-num-layers", 1)
        else:
            # block: the first N layers of every model chunk are recomputed
            per_chunk = -(-p.recompute_layers // p.vpp)
            if per_chunk * p.vpp != p.recompute_layers:
                job.note(f"recompute_layers {p.recompute_layers} per stage rounded up to {per_chunk} per "
                         f"virtual stage ({per_chunk * p.vpp} per stage)")
            flag("--recompute-method", "block")
            flag("--recompute-num-layers", per_chunk)


def _optimizer_flags(job: Job, flag: Flag) -> None:
    """Gradient-reduction and optimizer-state dtypes, optimizer offload."""
    p, t = job.plan, job.train
    if t.grad_dtype == "bf16":
        flag("--grad-reduce-in-bf16")
    precision_aware = p.offload_optimizer
    if t.optimizer_dtype == "bf16":
        if p.zero_stage < 1:
            raise Unsupported("Megatron-LM keeps bf16 Adam moments only in the distributed optimizer "
                              "(--use-precision-aware-optimizer needs zero_stage >= 1)")
        precision_aware = True
        flag("--exp-avg-dtype", "bf16")
        flag("--exp-avg-sq-dtype", "bf16")
    if precision_aware:
        flag("--use-precision-aware-optimizer")
    if p.offload_optimizer:
        if p.zero_stage < 1:
            raise Unsupported("Megatron-LM offloads the optimizer only with the distributed optimizer "
                              "(zero_stage >= 1)")
        flag("--optimizer-cpu-offload")
        flag("--optimizer-offload-fraction", "1.0")


def _data_parallel_flags(job: Job, flag: Flag) -> dict[str, str]:
    """Data parallelism and ZeRO / Megatron-FSDP sharding; returns the environment."""
    p = job.plan
    # ---- data parallelism / optimizer sharding
    env: dict[str, str] = {}
    instances = ParallelDims.of(p).zero_replicas  # shard groups of the dp*cp group (planner.specs.dims)
    if p.zero_stage == 3:
        flag("--use-megatron-fsdp")
        flag("--data-parallel-sharding-strategy", "optim_grads_params")
        flag("--ckpt-format", "fsdp_dtensor")  # validate_args requires it with Megatron-FSDP
        flag("--use-distributed-optimizer")
    elif p.zero_stage >= 1:
        flag("--use-distributed-optimizer")
        if p.zero_stage == 2:
            job.note("zero_stage 2 maps to the distributed optimizer (optimizer states sharded; gradients are "
                     "reduce-scattered into fp32 buffers that stay full size)")
    elif p.zero_shard_size:
        raise Unsupported("zero_shard_size needs ZeRO stage >= 1 in Megatron-LM")
    if instances > 1:
        flag("--num-distributed-optimizer-instances", instances)
    if p.dp > 1 or p.cp > 1:
        flag("--overlap-grad-reduce")
        if p.zero_stage >= 1:
            flag("--overlap-param-gather")
    _optimizer_flags(job, flag)

    if (p.tp > 1 or p.cp > 1) and not job.blackwell_or_later and p.zero_stage != 3:
        # validate_args asserts it before Blackwell; Megatron-FSDP asserts the opposite (it warns instead)
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return env

def megatron_args(job: Job) -> tuple[list[str], dict[str, str]]:
    """(argv list, env) for `pretrain_gpt.py`; raises Unsupported when a knob has no Megatron flag."""
    _check_expressible(job)
    p, t = job.plan, job.train
    a: list[str] = []

    def flag(name: str, value=None) -> None:
        a.append(name)
        if isinstance(value, tuple):  # nargs="+" flags
            a.extend(str(v) for v in value)
        elif value is not None:
            a.append(str(value))

    _parallelism_flags(job, flag)
    _model_flags(job, flag)
    _moe_flags(job, flag)
    # ---- batch
    flag("--micro-batch-size", p.micro_batch)
    flag("--global-batch-size", t.global_batch)

    _precision_flags(job, flag)
    _recompute_flags(job, flag)
    env = _data_parallel_flags(job, flag)
    return a, env


def emit(job: Job) -> dict[str, str]:
    args, env = megatron_args(job)
    doc = {"args": args, "env": env, "notes": list(job.notes)}
    return {"megatron_args.json": dumps(doc), "launch_megatron.sh": launch_script(job, args, env)}


def _arg_lines(args: list[str]) -> list[str]:
    """Group argv into one `--flag [value...]` per line."""
    lines: list[list[str]] = []
    for tok in args:
        if tok.startswith("--") or not lines:
            lines.append([tok])
        else:
            lines[-1].append(tok)
    return [" ".join(shlex.quote(x) for x in line) for line in lines]


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
        '  --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-6000}" \\',
        '  "$MEGATRON_LM/pretrain_gpt.py" \\',
    ]
    out += [f"  {line} \\" for line in _arg_lines(args)]
    out.append('  "$@"')
    return "\n".join(out) + "\n"
