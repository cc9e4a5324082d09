"""Checker (own interpreter): emitted torchtitan 0.3.0 arguments through torchtitan's own CLI.

request {"id", "args": [...], "world": int}: `ConfigManager().parse_args(args)` (tyro over the
config_registry function named by --module/--config, then Trainer.Config.__post_init__), then
`ParallelDims.from_config(cfg.parallelism, world)` (its __post_init__ checks the degrees against the
world), and for pipeline plans torchtitan's own stage split (`_get_pipeline_metadata` +
`_generate_llm_fqn_per_model_part`), reported as transformer layers per stage.
request {"id", "flavor": [module, config]}: build that registry config and report its model's sizes.
Shim: the Float8 converters check the CUDA compute capability when the config is built; it is reported as
the target GPU's ("arch": 9 = Hopper) through torchtitan's `has_cuda_capability`.
"""

import contextlib
import importlib
import io
import json
import os
import sys
import tempfile
import traceback


def _layers_of(model_cfg):
    layers = getattr(model_cfg, "layers", None)
    return len(layers) if layers is not None else None


def check_args(r):
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims

    # an emitted torchtitan_model.py: its directory on sys.path (as its launch line puts it on PYTHONPATH);
    # every request imports its own copy (they share the module name)
    sys.modules.pop("torchtitan_model", None)
    importlib.invalidate_caches()
    path = r.get("pythonpath")
    if r.get("module_text"):
        path = tempfile.mkdtemp(prefix="tt-module-")
        with open(os.path.join(path, "torchtitan_model.py"), "w") as f:
            f.write(r["module_text"])
    if path:
        sys.path.insert(0, path)
    try:
        cfg = ConfigManager().parse_args(list(r["args"]))
    finally:
        if path:
            sys.path.remove(path)
    pd = ParallelDims.from_config(cfg.parallelism, r["world"])
    par, tr = cfg.parallelism, cfg.training
    out = {"dp_replicate": pd.dp_replicate, "dp_shard": pd.dp_shard, "cp": pd.cp, "tp": pd.tp, "pp": pd.pp,
           "ep": pd.ep, "local_batch_size": tr.local_batch_size, "global_batch_size": tr.global_batch_size,
           "seq_len": tr.seq_len, "disable_cuda_graphs": tr.disable_cuda_graphs,
           "sequence_parallel": par.enable_sequence_parallel, "reshard": par.fsdp_reshard_after_forward,
           "schedule": par.pipeline_parallel_schedule, "microbatch": par.pipeline_parallel_microbatch_size,
           "activation_checkpoint": type(cfg.activation_checkpoint).__qualname__,
           "compile": cfg.compile.enable, "async_tp": cfg.compile.enable_async_tensor_parallel,
           "loss_chunks": getattr(cfg.loss, "num_chunks", 1)}
    out["model"] = model_fields(cfg.model_spec.model, r.get("count_params", False))
    if pd.pp > 1:
        from torchtitan.distributed import pipeline_parallel as ppmod
        stages, nlayers, w_in, w_out = ppmod._get_pipeline_metadata(pd, par, cfg.model_spec.model)
        parts = ppmod._generate_llm_fqn_per_model_part(stages, nlayers, w_in, w_out)
        out["layers_per_stage"] = [sum(1 for m in part if m.startswith("layers.")) for part in parts]
        out["num_stages"] = stages
        # the stages rank 0 holds under the schedule's placement (loop, or V for ZBV / DualPipeV), and the schedule
        # class torch builds
        out["rank_stages"] = [list(ppmod._get_pp_rank_to_stage_indices_mapping(r, pd.pp, par.pipeline_parallel_schedule,
                                                                             stages)) for r in range(pd.pp)]
        out["schedule_class"] = ppmod.get_schedule_class(par.pipeline_parallel_schedule).__name__
    return out


_COUNTS = {}


def model_fields(m, count):
    """The registry model's architecture; with `count`, its real parameter count (built on the meta device)."""
    import torch

    att = m.layers[0].attention
    rope = att.rope
    qkv = getattr(att, "qkv_linear", None)
    out = {"n_layers": _layers_of(m), "dim": m.dim, "vocab_size": m.vocab_size, "n_heads": att.n_heads,
           "n_kv_heads": getattr(att, "n_kv_heads", None), "tied": bool(m.enable_weight_tying),
           "norm": type(m.norm).__qualname__, "rope_theta": float(rope.theta), "rope_scaling": rope.scaling,
           "rope_factor": rope.scaling_factor if rope.scaling == "llama" else rope.rope_factor,
           "qkv_bias": bool(qkv.wqkv.bias) if qkv is not None and hasattr(qkv, "wqkv") else None,
           "qk_norm": getattr(att, "qk_norm", None) is not None, "norm_eps": getattr(m.norm, "eps", None),
           "head_dim": getattr(att, "head_dim", None)}
    if count:
        key = id(type(m)), out["n_layers"], out["dim"], out["vocab_size"]
        if key not in _COUNTS:
            with torch.device("meta"):
                model = m.build()
            _COUNTS[key] = sum(p.numel() for p in model.parameters())
        out["params"] = _COUNTS[key]
    return out


def check_flavor(r):
    module, config = r["flavor"]
    reg = importlib.import_module(f"torchtitan.models.{module}.config_registry")
    cfg = getattr(reg, config)()
    m = cfg.model_spec.model
    return {"dim": getattr(m, "dim", None), "vocab_size": getattr(m, "vocab_size", None), "n_layers": _layers_of(m)}


def patch_capability(arch):
    import torchtitan.components.quantization.float8 as f8
    import torchtitan.tools.utils as tu

    def has_cuda_capability(major, minor):
        return (arch["v"], 0) >= (major, minor)

    tu.has_cuda_capability = f8.has_cuda_capability = has_cuda_capability


def main(req_path, out_path):
    arch = {"v": 9}
    patch_capability(arch)
    results = {}
    for r in json.load(open(req_path)):
        arch["v"] = r.get("arch", 9)
        log = io.StringIO()
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                res = check_flavor(r) if "flavor" in r else check_args(r)
            results[r["id"]] = {"ok": True, "error": "", **res}
        except SystemExit as e:  # tyro: unknown option, bad value
            lines = [ln.strip(" │╭╰─") for ln in log.getvalue().splitlines() if ln.strip(" │╭╰─")]
            results[r["id"]] = {"ok": False, "error": f"tyro exit {e.code}: " + " ".join(lines[:12])}
        except Exception as e:
            results[r["id"]] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                                "trace": traceback.format_exc(limit=4)}
    json.dump(results, open(out_path, "w"), default=str)


if __name__ == "__main__":
    main(*sys.argv[1:3])
