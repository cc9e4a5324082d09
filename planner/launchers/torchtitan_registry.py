"""What torchtitan 0.3.0 can build for a plan, read by the emitter (planner.emit.torchtitan) and by the launcher's
capability rules (planner.launchers.torchtitan) alike: the config_registry function of a model
(--module/--config, else the planner's own config module) and the pipeline stage split. A module of its own so
the rules and the emitter both import it and neither imports the other's module."""

from __future__ import annotations

from planner.launchers.job import Job, Unsupported
from planner.launchers.torchtitan_model import CONFIG, MODULE, custom_model_errors

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
    (torchtitan_model.py, planner.launchers.torchtitan_model) when torchtitan's config helpers can build it."""
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
