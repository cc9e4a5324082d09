"""Checker (own interpreter): emitted jax_mesh.json and maxtext.yml against the real JAX and MaxText.

The parent sets XLA_FLAGS=--xla_force_host_platform_device_count=<largest world> before this
interpreter imports jax, so every mesh is built from real (fake-CPU) JAX devices.

jax request:     {"id", "kind": "jax", "mesh": <jax_mesh.json>, "tiny": {dim: size} overrides,
                  "mesh_shape_override": [...] (optional, for rejection tests)}
  The mesh is built the way MaxText builds it: `mesh_utils.create_hybrid_device_mesh(ici, dcn)` when
  there are several slices (CPU devices carry no slice_index, so each is wrapped in a proxy with
  slice_index = i // devices_per_slice, and unwrapped afterwards), else `create_device_mesh(ici)`.
  Then a tiny model with the same parameter names, dimension names and PartitionSpecs (every sharded
  dimension just large enough for its mesh axes) runs two jitted, sharded SGD steps, with the
  activation specs applied as sharding constraints.
maxtext request: {"id", "kind": "maxtext", "yml": <text>, "world": int}
  `maxtext.configs.pyconfig.initialize` on the file (base_config: base.yml resolves to MaxText's own),
  with internal_compile_num_devices = world, then the mesh of its ici/dcn parallelism as above.
"""

import json
import math
import os
import sys
import tempfile
import traceback


def spec_of(entries):
    from jax.sharding import PartitionSpec as P
    return P(*[tuple(e) if isinstance(e, list) else e for e in entries])


class _SliceProxy:
    """A JAX device plus the slice_index a multi-slice TPU device would carry."""

    def __init__(self, dev, slice_index):
        self._dev, self.slice_index = dev, slice_index

    def __getattr__(self, name):
        return getattr(self._dev, name)


def build_mesh(axis_names, ici, dcn, n):
    import jax
    import numpy as np
    from jax.experimental import mesh_utils
    from jax.sharding import Mesh

    devices = jax.devices()[:n]
    if len(devices) < n:
        raise RuntimeError(f"only {len(devices)} fake devices, need {n}")
    slices = math.prod(dcn)
    if slices > 1:
        per = n // slices
        proxies = [_SliceProxy(d, i // per) for i, d in enumerate(devices)]
        arr = mesh_utils.create_hybrid_device_mesh(list(ici), list(dcn), devices=proxies,
                                                   allow_split_physical_axes=True)
        arr = np.vectorize(lambda p: p._dev, otypes=[object])(arr)
    else:
        arr = mesh_utils.create_device_mesh(list(ici), devices=devices, allow_split_physical_axes=True)
    return Mesh(arr, tuple(axis_names))


def ici_axes_stay_in_slice(mesh, dcn, per_slice):
    """Every mesh axis with no DCN factor must connect devices of one slice only."""
    import numpy as np
    ids = np.vectorize(lambda d: d.id // per_slice)(mesh.devices)
    for ax, k in enumerate(dcn):
        if k == 1 and not (ids == np.take(ids, [0], axis=ax)).all():
            return False
    return True


def tiny_dims(doc, overrides):
    """Smallest sizes that every spec can shard: per dimension name, the lcm of the mesh-axis products
    that shard it (x2 so no dimension is a single element per shard); attention widths are unified so
    the toy attention can combine them, likewise the MLA latent widths."""
    size = dict(zip(doc["axis_names"], doc["mesh_shape"], strict=True))
    need = {}
    for entry in list(doc["param_specs"].values()) + list(doc["activation_specs"].values()):
        for dim, s in zip(entry["shape"], entry["spec"], strict=False):
            axes = s if isinstance(s, list) else ([s] if s else [])
            need[dim] = math.lcm(need.get(dim, 1), math.prod(size.get(a, 1) for a in axes))  # JAX judges unknown axes
    groups = [("q_out", "kv_out", "o_in", "kv_b_out"), ("kv_a", "kv_lora", "q_lora")]
    for g in groups:
        common = math.lcm(*[need.get(d, 1) for d in g])
        for d in g:
            if d in need:
                need[d] = common
    tiny = {d: v * (1 if d in ("layers", "batch") else 2) for d, v in need.items()}
    tiny.update(overrides or {})
    return tiny


def jax_step(doc, overrides, mesh_shape_override=None):  # noqa: PLR0915  (one straight script: mesh, model, step)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    ici = doc["ici_mesh_shape"] if mesh_shape_override is None else mesh_shape_override
    mesh = build_mesh(doc["axis_names"], ici, doc["dcn_mesh_shape"], doc["devices"])
    out = {"mesh_shape": dict(mesh.shape),
           "ici_in_slice": ici_axes_stay_in_slice(mesh, doc["dcn_mesh_shape"], doc["devices_per_slice"])}
    dims = tiny_dims(doc, overrides)
    out["tiny_dims"] = dims
    pspecs = {k: spec_of(v["spec"]) for k, v in doc["param_specs"].items()}
    shard = {k: NamedSharding(mesh, s) for k, s in pspecs.items()}
    rng = np.random.default_rng(0)  # host arrays: device_put of numpy compiles nothing
    params = {}
    for name, entry in sorted(doc["param_specs"].items()):
        shape = tuple(dims[d] for d in entry["shape"])
        v = np.ones(shape, np.float32) if "norm" in name else (0.02 * rng.standard_normal(shape)).astype(np.float32)
        params[name] = jax.device_put(v, shard[name])  # rejects an indivisible dimension
    acts = {k: spec_of(v["spec"]) for k, v in doc["activation_specs"].items()}
    wsc = lambda x, k: jax.lax.with_sharding_constraint(x, NamedSharding(mesh, acts[k]))  # noqa: E731
    has = lambda k: k in params  # noqa: E731
    E = dims.get("experts")
    topk = min(2, E) if E else 0

    def rms(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * w

    def layer(x, lp):
        h = rms(x, lp["layers.attn_norm"])
        if "layers.wkv_b" in lp:  # MLA: low-rank latent KV (and Q)
            q = (h @ lp["layers.wq_a"]) @ lp["layers.wq_b"] if "layers.wq_a" in lp else h @ lp["layers.wq"]
            kv = (h @ lp["layers.wkv_a"]) @ lp["layers.wkv_b"]
        else:
            q, kv = h @ lp["layers.wq"], (h @ lp["layers.wk"]) * (h @ lp["layers.wv"])
        steps = jnp.arange(1, x.shape[1] + 1, dtype=x.dtype)[None, :, None]
        att = wsc(q * jnp.cumsum(kv, axis=1) / steps, "attn_out")  # causal token mixing over the sequence
        x = wsc(x + att @ lp["layers.wo"], "residual")
        h = rms(x, lp["layers.mlp_norm"])
        y = jnp.zeros_like(x)
        if "layers.w_gate" in lp:
            g = wsc(jax.nn.silu(h @ lp["layers.w_gate"]) * (h @ lp["layers.w_up"]), "mlp_hidden")
            y = y + g @ lp["layers.w_down"]
        if "layers.router" in lp:
            probs = jax.nn.softmax(h @ lp["layers.router"], axis=-1)
            kth = jax.lax.top_k(probs, topk)[0][..., -1:]
            gate = jnp.where(probs >= kth, probs, 0.0)
            a = jax.nn.silu(jnp.einsum("bsh,ehf->bsef", h, lp["layers.experts.w_gate"])) * \
                jnp.einsum("bsh,ehf->bsef", h, lp["layers.experts.w_up"])
            y = y + jnp.einsum("bsef,efh,bse->bsh", a, lp["layers.experts.w_down"], gate)
        return wsc(x + y, "residual"), None

    def loss_fn(p, tokens):
        x = wsc(jnp.take(p["embedding"], tokens, axis=0), "residual")
        stacked = {k: v for k, v in p.items() if k.startswith("layers.")}
        x, _ = jax.lax.scan(layer, x, stacked)
        x = rms(x, p["final_norm"])
        logits = wsc(x @ (p["lm_head"] if "lm_head" in p else p["embedding"].T), "logits")
        labels = jnp.roll(tokens, -1, axis=1)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))

    tok_sharding = NamedSharding(mesh, acts["tokens"])
    repl = NamedSharding(mesh, P())

    def step(p, tokens):
        loss, g = jax.value_and_grad(loss_fn)(p, tokens)
        return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g), loss

    jstep = jax.jit(step, in_shardings=(shard, tok_sharding), out_shardings=(shard, repl), donate_argnums=0)
    tokens = jax.device_put(rng.integers(0, dims["vocab"], (dims["batch"], dims["seq"]), dtype=np.int32), tok_sharding)
    losses = []
    for _ in range(2):
        params, loss = jstep(params, tokens)
        losses.append(float(loss))
    out["losses"] = losses
    out["finite"] = all(math.isfinite(v) for v in losses)
    out["param_specs_kept"] = all(params[k].sharding.spec == shard[k].spec for k in params)
    out["has_experts"] = has("layers.router")
    return out


def maxtext_check(yml_text, world):
    from maxtext.configs import pyconfig
    from maxtext.utils import max_utils

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "maxtext.yml")
        with open(path, "w") as f:
            f.write(yml_text)
        cfg = pyconfig.initialize(["train.py", path, "skip_jax_distributed_system=true",
                                   "enable_checkpointing=false", "internal_compile=true",
                                   f"internal_compile_num_devices={world}", f"base_output_directory={tmp}"])
    slices = cfg.num_slices
    ici = max_utils.fill_unspecified_mesh_axes(list(cfg.ici_parallelism), world // slices, "ICI")
    dcn = max_utils.fill_unspecified_mesh_axes(list(cfg.dcn_parallelism), slices, "DCN")
    import jax
    # the mesh from MaxText's own ici/dcn lists, when there are enough fake devices to hold it
    mesh = build_mesh(list(cfg.mesh_axes), ici, dcn, world) if world <= len(jax.devices()) else None
    return {"mesh_axes": list(cfg.mesh_axes), "ici": ici, "dcn": dcn, "num_slices": slices,
            "mesh_shape": dict(mesh.shape) if mesh is not None else None,
            "global_batch": cfg.global_batch_size_to_train_on, "micro_batch": cfg.micro_batch_size_to_train_on,
            "grad_accum": cfg.gradient_accumulation_steps, "remat_policy": str(cfg.remat_policy),
            # the custom policy's one key per named tensor, as MaxText resolved it (MT:configs/base.yml)
            "remat_names": {k: v for k, v in cfg.get_keys().items() if v in ("remat", "device", "offload")},
            "pipeline_microbatches": cfg.num_pipeline_microbatches if cfg.ici_pipeline_parallelism *
            cfg.dcn_pipeline_parallelism > 1 else None,
            "decoder_block": str(getattr(cfg.decoder_block, "value", cfg.decoder_block)),
            "num_decoder_layers": cfg.num_decoder_layers, "emb_dim": cfg.emb_dim, "model": model_fields(cfg)}


def model_fields(cfg):
    """The architecture as MaxText's pyconfig resolved it (base.yml defaults under the emitted keys)."""
    names = ("emb_dim", "num_query_heads", "num_kv_heads", "head_dim", "mlp_dim", "num_decoder_layers", "vocab_size",
             "logits_via_embedding", "rope_max_timescale", "rope_type", "rope_use_scale", "enable_dropout",
             "dropout_rate", "attention_bias", "use_qk_norm", "num_experts", "num_experts_per_tok", "moe_mlp_dim",
             "first_num_dense_layers", "shared_experts", "attention_type", "q_lora_rank", "kv_lora_rank",
             "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "max_target_length", "trainable_position_size",
             "normalization_layer_epsilon", "sliding_window_size", "attention_sink", "attn_logits_soft_cap",
             "final_logits_soft_cap", "use_post_attn_norm", "use_post_ffw_norm", "routed_score_func", "routed_bias",
             "routed_bias_update_rate", "routed_scaling_factor", "n_routing_groups", "topk_routing_group",
             "norm_topk_prob", "load_balance_loss_weight", "moe_use_megatron_seq_aux_loss", "mtp_num_layers",
             "capacity_factor", "rope_factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
             "mscale", "local_rope_max_timescale", "rope_linear_scaling_factor", "attention",
             "mlp_activations_limit", "mlp_bias", "nope_layer_interval", "interleave_moe_layer_step",
             "inhomogeneous_layer_cycle_interval", "chunk_attn_window_size", "temperature_tuning")
    out = {n: getattr(cfg, n, None) for n in names}
    out = {k: (str(getattr(v, "value", v)) if k in ("rope_type", "attention_type", "attention") else v)
           for k, v in out.items()}
    out["mlp_activations"] = list(cfg.mlp_activations)
    out["decoder_block"] = str(getattr(cfg.decoder_block, "value", cfg.decoder_block))
    if out["decoder_block"] == "llama4":
        rules = _llama4_layer_rules()
        n = cfg.num_decoder_layers
        out["nope_pattern"] = [int(rules["determine_is_nope_layer"](i, cfg.nope_layer_interval)) for i in range(n)]
        out["moe_pattern"] = [int(rules["determine_is_moe_layer"](i, cfg.interleave_moe_layer_step))
                              for i in range(n)]
    return out


def _llama4_layer_rules() -> dict:
    """determine_is_nope_layer / determine_is_moe_layer as maxtext's models/llama4.py defines them, the layer kinds
    its llama4 block builds: the two functions' own source, run without the module's imports (it imports aqt, which
    the validators do not install)."""
    import ast
    import importlib.util
    import pathlib

    spec = importlib.util.find_spec("maxtext")
    path = pathlib.Path(spec.origin).parent / "models" / "llama4.py"
    tree = ast.parse(path.read_text())
    wanted = [f for f in tree.body if isinstance(f, ast.FunctionDef)
              and f.name in ("determine_is_nope_layer", "determine_is_moe_layer")]
    assert len(wanted) == 2, "maxtext models/llama4.py no longer defines the llama4 layer rules"
    scope: dict = {}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec"), scope)  # noqa: S102 - library source
    return scope


def main(req_path, out_path):
    import time
    results = {}
    for r in json.load(open(req_path)):
        t0 = time.time()
        try:
            if r["kind"] == "jax":
                res = jax_step(r["mesh"], r.get("tiny"), r.get("mesh_shape_override"))
            else:
                res = maxtext_check(r["yml"], r["world"])
            results[r["id"]] = {"ok": True, "error": "", "seconds": round(time.time() - t0, 2), **res}
        except BaseException as e:  # noqa: BLE001 - a consumer's rejection, whatever its type
            if isinstance(e, KeyboardInterrupt):
                raise
            results[r["id"]] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                                "trace": traceback.format_exc(limit=4)}
    json.dump(results, open(out_path, "w"), default=str)


if __name__ == "__main__":
    main(*sys.argv[1:3])
