"""DeepSpeed: `ds_config.json` (validated by tests/consumers with the real `DeepSpeedConfig`) and
`deepspeed_args.json`, the Megatron-DeepSpeed command-line arguments that carry TP/PP, which a
DeepSpeed JSON config cannot hold.

DeepSpeed's batch triangle counts data-parallel ranks only:
train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp.
"""

from __future__ import annotations

from planner.emit.common import arg_lines, dumps
from planner.emit.train_hf import TRAIN_HF_PY
from planner.launchers import refuse
from planner.launchers.hf_model import hf_attn_implementation, hf_config_of
from planner.launchers.job import Job, Unsupported
from planner.names import safe_line


def _zero_block(job: Job) -> dict:
    p, h = job.plan, job.model.hidden_size
    z: dict = {"stage": p.zero_stage}
    if p.zero_stage == 0:
        return z
    # bucket sizes: the Hugging Face integration's "auto" rules (hidden^2 and 0.9*hidden^2, 10*hidden)
    z.update({"overlap_comm": True, "contiguous_gradients": True, "reduce_scatter": True,
              "reduce_bucket_size": h * h})
    if p.zero_stage < 3:
        z["allgather_partitions"] = True
        z["allgather_bucket_size"] = h * h
    else:
        z.update({"stage3_prefetch_bucket_size": int(0.9 * h * h),
                  "stage3_param_persistence_threshold": 10 * h,
                  "stage3_max_live_parameters": 1_000_000_000,
                  "stage3_max_reuse_distance": 1_000_000_000,
                  "stage3_gather_16bit_weights_on_model_save": True,
                  "sub_group_size": 1_000_000_000})
    if p.offload_optimizer:
        z["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return z


def ds_config(job: Job) -> dict:
    p, t = job.plan, job.train
    refuse(job, "deepspeed")  # planner/launchers/deepspeed.py
    cfg: dict = {
        "train_batch_size": t.global_batch,
        "train_micro_batch_size_per_gpu": p.micro_batch,
        "gradient_accumulation_steps": job.grad_accum,
        "gradient_clipping": 1.0,
        "zero_optimization": _zero_block(job),
    }
    if t.dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    else:
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000,
                       "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1}
    if p.recompute != "none":
        cfg["activation_checkpointing"] = {"partition_activations": p.tp > 1, "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False, "synchronize_checkpoint_boundary": False}
    cfg["steps_per_print"] = 10
    cfg["wall_clock_breakdown"] = False
    return cfg


def _model_args(job: Job) -> list[str]:
    """The architecture as Megatron-DeepSpeed flags (megatron/arguments.py at 4efb479; planner.launchers.contract
    MEGATRON_DEEPSPEED maps every field, and the capabilities rule "contract" refuses what it cannot hold)."""
    m = job.model
    a = ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size),
         "--ffn-hidden-size", str(m.ffn_hidden_size), "--num-attention-heads", str(m.num_heads),
         "--kv-channels", str(m.head_dim)]
    if m.num_kv_heads != m.num_heads:
        a += ["--num-key-value-heads", str(m.num_kv_heads)]
    if m.mlp_type == "gated":
        if m.activation not in ("silu", "swish"):
            raise Unsupported(f"Megatron-DeepSpeed has no flag for a gated {m.activation} MLP (only --swiglu)")
        a.append("--swiglu")
    elif m.activation == "relu2":
        a.append("--squared-relu")
    elif m.activation in ("gelu_tanh", "gelu_new"):
        a.append("--openai-gelu")  # the tanh approximation (megatron/model/transformer.py ParallelMLP)
    elif m.activation == "gelu" and (m.mlp_bias or m.attn_out_bias or m.qkv_bias):
        a.append("--no-bias-gelu-fusion")  # else the fused bias-GeLU, the tanh approximation, replaces F.gelu
    a += ["--normalization", "rmsnorm" if m.norm_type == "rmsnorm" else "layernorm"]
    if m.norm_eps is not None:
        a += ["--layernorm-epsilon", repr(m.norm_eps)]  # RMSNorm reads it too (megatron/model/rmsnorm.py eps)
    if m.position_embedding == "rope":
        a += ["--use-rotary-position-embeddings", "--no-position-embedding",
              "--rotary-position-embeddings-theta", str(int(m.rope_theta))]
    elif m.position_embedding == "none":
        a.append("--no-position-embedding")
    if not m.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if not (m.mlp_bias or m.attn_out_bias or m.qkv_bias):  # all or none: the contract refuses partial biases
        a.append("--disable-bias-linear")
    if job.train.attention_impl == "flash":
        # as costed: without a flash flag CoreAttention materialises the s x s scores (megatron/model/transformer.py
        # ParallelAttention: use_flash_attn = use_flash_attn_v1 or _v2 or _triton or _builder, arguments.py:433)
        a.append("--use-flash-attn-v2")
    # no dropout, as planned (Megatron-DeepSpeed's defaults are 0.1)
    a += ["--attention-dropout", "0", "--hidden-dropout", "0"]
    # placeholder tokenizer: the planned vocabulary (replace with the real tokenizer at launch)
    a += ["--tokenizer-type", "NullTokenizer", "--vocab-size", str(m.vocab_size)]
    return a


def deepspeed_args(job: Job) -> list[str]:
    """Megatron-DeepSpeed `pretrain_gpt.py` arguments: the parallel layout ds_config.json cannot hold."""
    m, p, t = job.model, job.plan, job.train
    a = ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp)]
    if p.pp == 1:
        a.append("--no-pipeline-parallel")
    if p.tp > 1 and p.sequence_parallel:
        a.append("--sequence-parallel")
    a += _model_args(job)
    a += ["--seq-length", str(t.seq_len), "--max-position-embeddings", str(max(m.max_position_embeddings, t.seq_len)),
          "--micro-batch-size", str(p.micro_batch), "--global-batch-size", str(t.global_batch),
          "--bf16" if t.dtype == "bf16" else "--fp16",
          "--zero-stage", str(p.zero_stage)]
    if p.offload_optimizer:
        a.append("--cpu-optimizer")
    if p.recompute == "full":
        a += ["--checkpoint-activations", "--deepspeed-activation-checkpointing"]
        if p.recompute_layers is not None and p.recompute_layers < m.num_layers // p.pp:
            a += ["--recompute-granularity", "full", "--recompute-method", "block",
                  "--recompute-num-layers", str(p.recompute_layers)]
    elif p.recompute == "selective":
        a += ["--recompute-granularity", "selective"]
    a += ["--deepspeed", "--deepspeed_config", "ds_config.json"]
    return a


def launch_script(job: Job, args: list[str]) -> str:
    """`deepspeed` launcher over a hostfile; data, tokenizer and checkpoint flags are appended at launch."""
    p = job.plan
    out = [
        "#!/usr/bin/env bash",
        f"# DeepSpeed (Megatron-DeepSpeed) launch: {job.world} x {' '.join(job.hw_id.split())} ({job.nodes} node(s) x "
        f"{job.procs_per_node}), written by planner.",
        f"# tp={p.tp} pp={p.pp} dp={p.dp} zero={p.zero_stage} micro_batch={p.micro_batch} "
        f"global_batch={job.train.global_batch} grad_accum={job.grad_accum}",
        "# PLACEHOLDERS to give at launch (appended to the arguments): --data-path DATA, --tokenizer-type/"
        "--tokenizer-model TOKENIZER",
        "# (NullTokenizer with the planned vocabulary is the stand-in), --save/--load CHECKPOINTS, "
        "--train-iters, --lr.",
        "# MEGATRON_DEEPSPEED is the Megatron-DeepSpeed checkout; HOSTFILE lists the nodes "
        "(DeepSpeed hostfile format).",
        "set -euo pipefail",
        'MEGATRON_DEEPSPEED="${MEGATRON_DEEPSPEED:-.}"',
        'cd "$(dirname "$0")"  # ds_config.json sits beside this script',
        "exec deepspeed \\",
        f"  --num_nodes {job.nodes} --num_gpus {job.procs_per_node} \\",
        '  --hostfile "${HOSTFILE:-/job/hostfile}" --master_port "${MASTER_PORT:-29500}" \\',
        '  "$MEGATRON_DEEPSPEED/pretrain_gpt.py" \\',
    ]
    out += [f"  {line} \\" for line in arg_lines(args)]
    out.append('  "$@"')
    return "\n".join(out) + "\n"


# AdamW as the transformers path trains it: beta 0.9/0.95, eps 1e-5, weight decay 0.1 (Llama 2 report, arXiv
# 2307.09288 sec. 2.2); the learning rate is the launch's --lr (this one is a placeholder, Llama 2 7B's 3e-4)
_HF_OPTIMIZER = {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-5, "weight_decay": 0.1}}


def emit_hf(job: Job) -> dict[str, str]:
    """Hugging Face model path: the transformers model of the planned config under ZeRO (data parallel only;
    capabilities rules hf-data-parallel and hf-recompute hold the plan to it), launched by torchrun."""
    from planner.launchers.deepspeed import _why_hf

    p, t = job.plan, job.train
    cfg = ds_config(job)
    cfg["optimizer"] = dict(_HF_OPTIMIZER)
    if p.cp > 1:
        cfg["sequence_parallel_size"] = p.cp  # DeepSpeedConfig: the batch counts world / sp ranks
    doc = {
        "launcher": "transformers + DeepSpeed: torchrun ... train_hf.py --data TOKENS --steps N (launch_deepspeed.sh)",
        "path": "hf",
        "why": _why_hf(job),
        "num_nodes": job.nodes, "num_gpus": job.procs_per_node, "data_parallel_size": p.dp,
        "seq_len": t.seq_len, "sequence_parallel_size": p.cp,
        # as costed: flash attention (no s x s scores) or the eager path that materialises them
        "attn_implementation": hf_attn_implementation(job.model, t),
        "gradient_checkpointing": p.recompute == "full",
        "inherited": {"learning rate": "--lr (else ds_config.json optimizer lr 3e-4)", "steps": "--steps",
                      "data": "--data", "schedule": "constant (no warm-up or decay)", "tokenizer": "the data's"},
        "notes": list(job.notes),
    }
    return {"ds_config.json": dumps(cfg), "deepspeed_args.json": dumps(doc),
            "hf_config.json": dumps(hf_config_of(job.model)), "train_hf.py": TRAIN_HF_PY,
            "launch_deepspeed.sh": hf_launch_script(job)}


def hf_launch_script(job: Job) -> str:
    p = job.plan
    out = [
        "#!/usr/bin/env bash",
        f"# DeepSpeed (transformers model, ZeRO-{p.zero_stage}) launch: {safe_line(job.model.name, 200)} on "
        f"{job.world} x {safe_line(job.hw_id, 200)} ({job.nodes} node(s) x {job.procs_per_node}), written by planner.",
        f"# dp={p.dp} zero={p.zero_stage} micro_batch={p.micro_batch} global_batch={job.train.global_batch} "
        f"grad_accum={job.grad_accum}",
        "# Run on every node with NODE_RANK and MASTER_ADDR set. Arguments are train_hf.py's: --data TOKENS.bin",
        "# --steps N [--lr LR] (PLACEHOLDERS: data and step count; see deepspeed_args.json 'inherited').",
        "set -euo pipefail",
        'cd "$(dirname "$0")"  # hf_config.json, ds_config.json and train_hf.py sit beside this script',
        "exec torchrun \\",
        f"  --nnodes {job.nodes} --nproc-per-node {job.procs_per_node} \\",
        '  --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" '
        '--master-port "${MASTER_PORT:-29500}" \\',
        '  train_hf.py "$@"',
    ]
    return "\n".join(out) + "\n"


def emit(job: Job) -> dict[str, str]:
    from planner.launchers.deepspeed import ds_path  # the capability table owns the path choice

    if ds_path(job) == "hf":
        refuse(job, "deepspeed")
        return emit_hf(job)
    cfg = ds_config(job)
    args = deepspeed_args(job)
    doc = {
        "launcher": "Megatron-DeepSpeed pretrain_gpt.py (deepspeed --num_nodes N --num_gpus G pretrain_gpt.py ARGS)",
        "num_nodes": job.nodes,
        "num_gpus": job.procs_per_node,
        "data_parallel_size": job.plan.dp,
        "args": args,
        "notes": list(job.notes),
    }
    return {"ds_config.json": dumps(cfg), "deepspeed_args.json": dumps(doc),
            "launch_deepspeed.sh": launch_script(job, args)}
