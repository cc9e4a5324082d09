"""torchtitan 0.3.0: `torchtitan_args.json`, the `--module/--config` pair and the tyro CLI overrides.

0.3.0 reads no TOML: a run is `torchrun ... -m torchtitan.train --module llama3 --config llama3_70b
--parallelism.tensor_parallel_degree 8 ...`, where `--config` names a Python config_registry
function. Its model (and any Float8 converter) cannot be changed from the command line, so a model
or a dtype that no registry function provides cannot be expressed.
"""

from __future__ import annotations

from planner.emit.common import dumps, torchrun_tail
from planner.launchers import refuse
from planner.launchers.job import Job, Unsupported
from planner.launchers.torchtitan_model import MODULE, module_text
from planner.launchers.torchtitan_registry import (  # noqa: F401  (FLAVORS, ROPE, _MODULE_OF: read by the consumer tests)
    _MODULE_OF,
    FLAVORS,
    ROPE,
    flavor_key,
    registry_config,
    stage_split,
)
from planner.names import safe_line
from planner.specs.dims import ParallelDims


def pp_schedule(job: Job) -> str:
    """torch.distributed.pipelining schedule name for the plan."""
    p = job.plan
    if p.schedule == "dualpipe":
        raise Unsupported("torchtitan 0.3.0 runs DualPipeV (--schedule dualpipev), not DeepSeek's bidirectional "
                          "DualPipe")
    if p.schedule == "dualpipev":
        if p.vpp != 2:
            raise Unsupported("torchtitan's DualPipeV runs exactly two stages per rank (vpp 2)")
        return "DualPipeV"
    if p.schedule == "zb":
        if p.vpp == 2:
            return "ZBVZeroBubble"
        if p.vpp > 2:
            return "InterleavedZeroBubble"
        raise Unsupported("torchtitan's zero-bubble schedules need virtual stages (vpp >= 2)")
    if p.schedule == "gpipe":
        if p.vpp > 1:
            raise Unsupported("torchtitan has no interleaved GPipe schedule (gpipe with vpp > 1)")
        return "GPipe"
    return "Interleaved1F1B" if p.vpp > 1 else "1F1B"


def torchtitan_args(job: Job) -> list[str]:
    p, t, m = job.plan, job.train, job.model
    refuse(job, "torchtitan")  # planner/launchers/torchtitan.py
    if p.zero_stage in (1, 2) and p.dp > 1:
        job.note(f"zero_stage {p.zero_stage} maps to FSDP2 with reshard_after_forward=never (ZeRO-2; torchtitan "
                 "has no ZeRO-1)")
    module, config = registry_config(job)

    # ZeRO >= 1 shards over dp_shard * cp = zero_shard_size ranks (all of dp * cp by default) and replicates
    # across groups (HSDP); planner.specs.dims owns the split
    dims = ParallelDims.of(p)
    shard = 1 if p.zero_stage == 0 else dims.dp_shard
    replicate = p.dp // shard

    a = ["--module", module, "--config", config]

    def opt(key: str, value) -> None:
        a.extend([f"--{key}", str(value)])

    opt("parallelism.data_parallel_replicate_degree", replicate)
    opt("parallelism.data_parallel_shard_degree", shard)
    if p.zero_stage in (1, 2) and shard > 1:
        opt("parallelism.fsdp_reshard_after_forward", "never")
    opt("parallelism.tensor_parallel_degree", p.tp)
    if p.tp > 1:
        a.append("--parallelism.enable_sequence_parallel" if p.sequence_parallel
                 else "--parallelism.no-enable_sequence_parallel")
    opt("parallelism.pipeline_parallel_degree", p.pp)
    if p.pp > 1:
        opt("parallelism.pipeline_parallel_schedule", pp_schedule(job))
        lps, first_less, last_less = stage_split(job)
        opt("parallelism.pipeline_parallel_layers_per_stage", lps)
        # the embedding / head count as this many layers of the first / last stage
        opt("parallelism.pipeline_parallel_first_stage_less_layers", first_less)
        opt("parallelism.pipeline_parallel_last_stage_less_layers", last_less)
        opt("parallelism.pipeline_parallel_microbatch_size", p.micro_batch)
    opt("parallelism.context_parallel_degree", p.cp)
    if m.moe is not None:
        opt("parallelism.expert_parallel_degree", p.ep)

    # batch: local_batch_size is per DP rank per gradient-accumulation step; with PP it is split into
    # pipeline micro-batches of pipeline_parallel_microbatch_size, so the whole per-rank batch goes in one step.
    local = p.dims.local_batch(t.global_batch) if p.pp > 1 else p.micro_batch
    opt("training.local_batch_size", local)
    opt("training.global_batch_size", t.global_batch)
    opt("training.seq_len", t.seq_len)
    opt("training.mixed_precision_param", "bfloat16")
    a.extend(loss_args(job))
    a.extend(compile_args(job))
    if p.pp > 1 or p.ep > 1:
        # Trainer.Config rejects CUDA graphs with PP, and with EP unless a sync-free dispatcher is configured
        a.append("--training.disable_cuda_graphs")
    # activation checkpointing is a tyro subcommand: it must come last
    # partial full recompute (recompute_layers) is refused before this (launchers.torchtitan rule whole-block-ac)
    a.append({"none": "activation-checkpoint:none", "selective": "activation-checkpoint:selective",
              "full": "activation-checkpoint:full"}[p.recompute])
    return a


def loss_args(job: Job) -> list[str]:
    """The loss as costed (memory.logits_bytes_per_token): the registry configs' ChunkedLossWrapper over the planned
    number of sequence slices (TT:components/loss.py ChunkedLossWrapper.Config num_chunks, 8 in the registry)."""
    if job.train.loss_chunks == 1:
        job.note("torchtitan 0.3.0's configs run ChunkedLossWrapper: with one chunk it also keeps an fp32 buffer of "
                 "the hidden-state gradient (6 B x dim per token) the plan's loss term does not count")
    return ["--loss.num_chunks", str(job.train.loss_chunks)]


def compile_args(job: Job) -> list[str]:
    """CompileConfig, explicit both ways (some registry configs compile by default): the step was costed with
    fused (compiled) or eager elementwise kernels; async TP = TP communication overlap, which needs the model
    compiled (CompileConfig.__post_init__)."""
    p = job.plan
    return ["--compile.enable" if job.train.torch_compile else "--compile.no-enable",
            "--compile.enable_async_tensor_parallel" if p.tp > 1 and p.tp_comm_overlap
            else "--compile.no-enable_async_tensor_parallel"]


def emit(job: Job) -> dict[str, str]:
    args = torchtitan_args(job)
    own = args[1] == MODULE
    doc = {
        "torchtitan": "0.3.0",
        "launch": ("PYTHONPATH=<this directory> " if own else "")
        + f"torchrun --nnodes {job.nodes} --nproc-per-node {job.procs_per_node} -m torchtitan.train ARGS",
        "nnodes": job.nodes,
        "nproc_per_node": job.procs_per_node,
        "args": args,
        "placeholders": "give at launch as overrides: DATA (the registry config's dataloader dataset), TOKENIZER "
                        "(hf_assets_path; the registry model's vocabulary is the planned one), CHECKPOINTS "
                        "(checkpoint folder)",
        "notes": list(job.notes),
    }
    doc["inherited"] = dict(INHERITED)
    files = {"torchtitan_args.json": dumps(doc), "launch_torchtitan.sh": launch_script(job, args, own)}
    if own:
        files["torchtitan_model.py"] = module_text(job)
    return files


# Trainer settings the request does not give, which the --config registry function sets (torchtitan 0.3.0
# config_registry functions: training.steps, the dataloader's dataset, optimizer and lr_scheduler, checkpoint and
# metrics); the launch overrides them with these options
INHERITED = {
    "training.steps": "--training.steps N (the registry function's step count otherwise)",
    "dataset": "--dataloader.dataset NAME / --dataloader.dataset_path DATA (the registry's, e.g. c4, otherwise)",
    "tokenizer": "--hf_assets_path TOKENIZER",
    "optimizer": "--optimizer.* (learning rate, betas, eps, weight decay: the registry function's otherwise)",
    "lr_scheduler": "--lr_scheduler.* (warm-up and decay: the registry function's otherwise)",
    "checkpoint": "--checkpoint.* (folder CHECKPOINTS, interval: the registry function's otherwise)",
}


def launch_script(job: Job, args: list[str], own: bool) -> str:
    """torchrun over the nodes, NODE_RANK / MASTER_ADDR / MASTER_PORT from the environment as the other launch
    scripts; arguments given to the script are appended (the overrides INHERITED lists)."""
    p = job.plan
    out = [
        "#!/usr/bin/env bash",
        f"# torchtitan 0.3.0 launch: {safe_line(job.model.name, 200)} on {job.world} x {safe_line(job.hw_id, 200)} "
        f"({job.nodes} node(s) x {job.procs_per_node}), written by planner.",
        f"# tp={p.tp} pp={p.pp} vpp={p.vpp} cp={p.cp} dp={p.dp} ep={p.ep} micro_batch={p.micro_batch} "
        f"global_batch={job.train.global_batch}",
        "# Run on every node with NODE_RANK and MASTER_ADDR set. Arguments given to this script are appended.",
        "# INHERITED from the --config registry function unless given here (torchtitan_args.json 'inherited'):",
        "#   --training.steps, --dataloader.dataset(_path) DATA, --hf_assets_path TOKENIZER, --optimizer.*,",
        "#   --lr_scheduler.*, --checkpoint.* (CHECKPOINTS).",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
    ]
    if own:
        out.append('export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # torchtitan_model.py, the planned model')
    out += torchrun_tail(job, 29500, "-m torchtitan.train", args)
    return "\n".join(out) + "\n"
