"""DeepSpeed: `ds_config.json` (validated by tests/consumers with the real `DeepSpeedConfig`) and
`deepspeed_args.json`, the Megatron-DeepSpeed command-line arguments that carry TP/PP, which a
DeepSpeed JSON config cannot hold.

DeepSpeed's batch triangle counts data-parallel ranks only:
train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp.
"""

from __future__ import annotations

from planner.emit.common import Job, Unsupported, dumps
from planner.specs.dims import ParallelDims


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
    if job.is_tpu:
        raise Unsupported(f"DeepSpeed runs on GPUs, not on {job.hw_id}")
    if p.cp > 1:
        raise Unsupported("DeepSpeed has no Megatron-style context parallelism in its config (DeepSpeed-Ulysses "
                          "sequence parallelism is set in model code, and ring attention not at all)")
    if job.model.moe is not None and (p.ep > 1 or p.etp > 1):
        raise Unsupported("DeepSpeed-MoE sets expert parallelism in model code (deepspeed.moe.layer.MoE(ep_size)), "
                          "not in ds_config, and has no expert tensor parallelism")
    if p.pp > 1:
        if p.zero_stage >= 2:
            raise Unsupported("DeepSpeed's pipeline engine supports ZeRO stage 0-1 only, not "
                              f"stage {p.zero_stage}, with pipeline parallelism")
        if p.vpp > 1:
            raise Unsupported("DeepSpeed's pipeline engine has no interleaved (virtual-stage) schedule")
        if p.schedule in ("gpipe", "zb", "dualpipe"):
            raise Unsupported(f"DeepSpeed's pipeline engine runs 1F1B only, not {p.schedule}")
        if job.uneven:
            raise Unsupported("DeepSpeed's pipeline engine partitions layers itself (partition_method), "
                              "not to given first/last stage sizes")
    if ParallelDims.of(p).zero_replicas > 1:
        raise Unsupported("DeepSpeed shards ZeRO over all data-parallel ranks; its hybrid sharding (MiCS, "
                          "mics_shard_size) was removed in 0.19, and ZeRO++ hpZ still shards optimizer states "
                          "over every rank")
    if p.offload_optimizer and p.zero_stage == 0:
        raise Unsupported("DeepSpeed offloads the optimizer only with ZeRO stage >= 1")
    if t.dtype == "fp8":
        raise Unsupported("ds_config has no FP8 training switch (FP8 GEMMs come from Transformer Engine in "
                          "the model code)")
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


def deepspeed_args(job: Job) -> list[str]:
    """Megatron-DeepSpeed `pretrain_gpt.py` arguments: the parallel layout ds_config.json cannot hold."""
    m, p, t = job.model, job.plan, job.train
    a = ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp)]
    if p.pp == 1:
        a.append("--no-pipeline-parallel")
    if p.tp > 1 and p.sequence_parallel:
        a.append("--sequence-parallel")
    a += ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size),
          "--ffn-hidden-size", str(m.ffn_hidden_size), "--num-attention-heads", str(m.num_heads)]
    if m.num_kv_heads != m.num_heads:
        a += ["--num-key-value-heads", str(m.num_kv_heads)]
    a += ["--seq-length", str(t.seq_len), "--max-position-embeddings", str(max(m.max_position_embeddings, t.seq_len)),
          "--micro-batch-size", str(p.micro_batch), "--global-batch-size", str(t.global_batch),
          "--bf16" if t.dtype == "bf16" else "--fp16",
          "--zero-stage", str(p.zero_stage)]
    if p.recompute == "full":
        a += ["--checkpoint-activations", "--deepspeed-activation-checkpointing"]
    elif p.recompute == "selective":
        a += ["--recompute-granularity", "selective"]
    a += ["--deepspeed", "--deepspeed_config", "ds_config.json"]
    return a


def emit(job: Job) -> dict[str, str]:
    cfg = ds_config(job)
    doc = {
        "launcher": "Megatron-DeepSpeed pretrain_gpt.py (deepspeed --num_nodes N --num_gpus G pretrain_gpt.py ARGS)",
        "num_nodes": job.nodes,
        "num_gpus": job.procs_per_node,
        "data_parallel_size": job.plan.dp,
        "args": deepspeed_args(job),
        "notes": list(job.notes),
    }
    return {"ds_config.json": dumps(cfg), "deepspeed_args.json": dumps(doc)}
