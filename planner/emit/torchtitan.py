"""torchtitan 0.3.0: `torchtitan_args.json`, the `--module/--config` pair and the tyro CLI overrides.

0.3.0 reads no TOML: a run is `torchrun ... -m torchtitan.train --module llama3 --config llama3_70b
--parallelism.tensor_parallel_degree 8 ...`, where `--config` names a Python config_registry
function. Its model (and any Float8 converter) cannot be changed from the command line, so a model
or a dtype that no registry function provides cannot be expressed.
"""

from __future__ import annotations

from planner.emit.capabilities import refuse
from planner.emit.common import Job, Unsupported, dumps
from planner.emit.torchtitan_model import CONFIG, MODULE, custom_model_errors, module_text
from planner.specs.dims import ParallelDims

# (module, config, float8 config or None): registry functions of torchtitan 0.3.0 and the model they build.
# Keyed by (layers, hidden, heads, kv_heads, ffn, vocab, experts); tests/consumers checks it against the
# real registry.
FLAVORS: dict[tuple, tuple[str | None, str | None, str | None]] = {
    (32, 4096, 32, 8, 14336, 128256, 0): ("llama3", "llama3_8b", None),
    (80, 8192, 64, 8, 28672, 128256, 0): ("llama3", "llama3_70b", None),
    (126, 16384, 128, 8, 53248, 128256, 0): (None, None, "llama3_405b"),  # its only config converts to Float8
    (61, 7168, 128, 128, 18432, 129280, 256): ("deepseek_v3", "deepseek_v3_671b", "deepseek_v3_671b_float8"),
}
_MODULE_OF = {"llama3_405b": "llama3", "deepseek_v3_671b_float8": "deepseek_v3"}
# the RoPE each registry function builds: (theta, scaling kind or None, factor); tests/consumers checks it
ROPE = {"llama3_8b": (500000.0, "llama3", 8.0), "llama3_70b": (500000.0, "llama3", 8.0),
        "llama3_405b": (500000.0, "llama3", 8.0), "deepseek_v3_671b": (10000.0, "yarn", 40.0),
        "deepseek_v3_671b_float8": (10000.0, "yarn", 40.0)}

_SCHEDULE = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe", "zb": "ZBVZeroBubble"}


def flavor_key(job: Job) -> tuple:
    m = job.model
    return (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.ffn_hidden_size, m.vocab_size,
            m.moe.num_experts if m.moe else 0)


def _check_rope(job: Job, config: str) -> None:
    """The registry's RoPE must be the planned model's: its base exactly (an Unsupported otherwise); a
    different scaling is noted (it changes neither memory nor time)."""
    m = job.model
    theta, kind, factor = ROPE[config]
    if m.position_embedding != "rope" or m.rope_theta != theta:
        raise Unsupported(f"torchtitan's {config} uses RoPE base {theta:g}; {m.name} has "
                          f"{m.rope_theta:g} (a custom model needs its own config function)")
    sc = m.rope_scaling
    if ((sc.rope_type, sc.factor) if sc else None) != (kind, factor):
        job.note(f"{config} applies {kind} RoPE scaling (factor {factor:g}); the planned model has "
                 f"{f'{sc.rope_type} (factor {sc.factor:g})' if sc else 'none'}")


def registry_config(job: Job) -> tuple[str, str]:
    """(--module, --config): the registry function that builds the model, else the planner's own module
    (torchtitan_model.py, planner.emit.torchtitan_model) when torchtitan's config helpers can build it."""
    if job.train.dtype == "fp16":
        raise Unsupported("torchtitan trains in bf16 or fp32 (mixed_precision_param), not fp16")
    try:
        return _registry_function(job)
    except Unsupported as e:
        why = custom_model_errors(job.model)
        if job.train.dtype == "fp8":
            why.append("bf16 (the Float8 converters are set in registry functions)")
        if why:
            raise Unsupported(f"{e}; the planner's own config module needs {', '.join(why)}") from None
        return MODULE, CONFIG


def _registry_function(job: Job) -> tuple[str, str]:
    hit = FLAVORS.get(flavor_key(job))
    m = job.model
    # the registry models (Llama 3, DeepSeek-V3) are bias-free, untied, RMSNorm + SwiGLU, global attention
    if hit is None or m.qkv_bias or m.attn_out_bias or m.mlp_bias or m.tied_embeddings or m.qk_norm \
            or m.norm_type != "rmsnorm" or m.mlp_type != "gated" or m.sliding_window is not None:
        raise Unsupported(f"no torchtitan 0.3.0 config_registry function builds {m.name}")
    module, bf16_cfg, fp8_cfg = hit
    dtype = job.train.dtype
    if dtype == "fp8":
        if fp8_cfg is None:
            raise Unsupported(f"torchtitan 0.3.0 has no Float8 config for {job.model.name} (converters are "
                              "set in config_registry functions, not on the command line)")
        _check_rope(job, fp8_cfg)
        fp8_module = _MODULE_OF.get(fp8_cfg, module)
        assert fp8_module is not None  # FLAVORS rows without a module name theirs in _MODULE_OF
        return fp8_module, fp8_cfg
    if bf16_cfg is None:
        raise Unsupported(f"torchtitan 0.3.0's only config for {job.model.name} ({fp8_cfg}) converts Linear "
                          "layers to Float8, which the command line cannot turn off")
    _check_rope(job, bf16_cfg)
    assert module is not None  # FLAVORS rows with a bf16 config name its module
    return module, bf16_cfg


def pp_schedule(job: Job) -> str:
    """torch.distributed.pipelining schedule name for the plan."""
    p = job.plan
    if p.schedule == "dualpipe":
        raise Unsupported("torchtitan 0.3.0 is not validated here with a DualPipe schedule")
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


def stage_split(job: Job) -> tuple[int, int, int]:
    """(pipeline_parallel_layers_per_stage, first_stage_less_layers, last_stage_less_layers).

    torchtitan splits num_layers + first_less + last_less evenly over pp*vpp stages and gives the
    first (last) stage first_less (last_less) fewer transformer layers.
    """
    m, p = job.model, job.plan
    if p.account_embedding_loss:  # embedding and loss as one layer each: the same split, stated this way
        units = m.num_layers + 2
        if units % (p.pp * p.vpp):
            raise Unsupported(f"{units} layer units do not split into pp*vpp = {p.pp * p.vpp} equal stages")
        return units // (p.pp * p.vpp), 1, 1
    if not job.uneven:
        if m.num_layers % (p.pp * p.vpp):
            raise Unsupported(f"{m.num_layers} layers do not split into pp*vpp = {p.pp * p.vpp} equal stages")
        return m.num_layers // (p.pp * p.vpp), 0, 0
    rest = m.num_layers - (p.first_stage_layers or 0) - (p.last_stage_layers or 0)
    f = p.first_stage_layers
    last = p.last_stage_layers
    if p.pp == 2:
        f = f if f is not None else rest
        last = last if last is not None else rest
        lps = max(f, last)
    else:
        middles = p.pp - (f is not None) - (last is not None)
        if rest % middles:
            raise Unsupported(f"{rest} middle layers do not split evenly over {middles} middle stages")
        lps = rest // middles
        f = lps if f is None else f
        last = lps if last is None else last
    if f > lps or last > lps or f + last + lps * (p.pp - 2) != m.num_layers:
        raise Unsupported(f"torchtitan can only make the first/last stages smaller than the others "
                          f"(first {f}, last {last}, middle {lps})")
    return lps, lps - f, lps - last


def torchtitan_args(job: Job) -> list[str]:
    p, t, m = job.plan, job.train, job.model
    refuse(job, "torchtitan")  # planner/emit/capabilities/torchtitan.py
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
    a.extend(compile_args(job))
    if p.pp > 1 or p.ep > 1:
        # Trainer.Config rejects CUDA graphs with PP, and with EP unless a sync-free dispatcher is configured
        a.append("--training.disable_cuda_graphs")
    # activation checkpointing is a tyro subcommand: it must come last
    if p.recompute == "full" and p.recompute_layers is not None and p.recompute_layers < m.num_layers // p.pp:
        job.note(f"partial recompute ({p.recompute_layers} layers per stage) has no torchtitan 0.3.0 equivalent: "
                 "full AC recomputes every block")
    a.append({"none": "activation-checkpoint:none", "selective": "activation-checkpoint:selective",
              "full": "activation-checkpoint:full"}[p.recompute])
    return a


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
    files = {"torchtitan_args.json": dumps(doc)}
    if own:
        files["torchtitan_model.py"] = module_text(job)
    return files
