"""MaxText (0.2.5) `maxtext.yml` and a launcher-neutral JAX `jax_mesh.json`.

Mesh: the plan's degrees become named mesh axes, outermost first
    stage (pp), data (replicated dp), fsdp (sharded dp), expert (ep, carved out of dp), context (cp), tensor (tp)
- zero_stage 3 shards parameters: fsdp = zero_shard_size or dp, data = dp / fsdp (HSDP when data > 1).
- zero_stage 0-2 keep parameters replicated over `data` (MaxText `shard_optimizer_over_data` = ZeRO-1 for 1-2).
- ep is carved out of dp as in Megatron: data*fsdp*expert = dp.
Each axis is split into an ICI part (inside one slice / NVLink domain) and a DCN part (across slices):
the DCN factors are taken from the outer axes first (data, stage, fsdp, expert, context, tensor), so
tensor and context stay on the fast fabric. A slice is `cluster.scale_up_size` devices (a TPU slice,
an NVLink domain).
"""

from __future__ import annotations

import math

from planner.emit.common import Job, Unsupported, dumps

AXES = ("stage", "data", "fsdp", "expert", "context", "tensor")
_DCN_ORDER = ("data", "stage", "fsdp", "expert", "context", "tensor")
# maxtext.yml key stem of each of our axes
_MT_KEY = {"stage": "pipeline", "data": "data", "fsdp": "fsdp", "expert": "expert",
           "context": "context", "tensor": "tensor"}
BATCH = ("data", "fsdp", "expert")  # activations' batch dimension is split over every DP-like axis


def mesh_degrees(job: Job) -> dict[str, int]:
    p = job.plan
    fsdp = (p.zero_shard_size or p.dp) if p.zero_stage == 3 else 1
    if p.ep > 1:
        if p.dp % p.ep:
            raise Unsupported(f"ep={p.ep} does not divide dp={p.dp}: a JAX mesh carves experts out of "
                              "the data-parallel axes only (Megatron may also use cp ranks)")
        # experts come out of the sharded axis first, then out of the replicated one
        g = math.gcd(fsdp, p.ep)
        fsdp //= g
        rest = p.ep // g
    else:
        rest = 1
    data = p.dp // (fsdp * p.ep) if fsdp > 1 or p.zero_stage == 3 else p.dp // p.ep
    if p.zero_stage == 3:
        data = p.dp // ((p.zero_shard_size or p.dp) * rest) if rest > 1 else p.dp // (fsdp * p.ep)
    deg = {"stage": p.pp, "data": data, "fsdp": fsdp, "expert": p.ep, "context": p.cp, "tensor": p.tp}
    if math.prod(deg.values()) != job.world:
        raise Unsupported(f"mesh {deg} does not cover the {job.world} devices")
    return deg


def split_ici_dcn(job: Job, deg: dict[str, int]) -> tuple[int, dict[str, int], dict[str, int]]:
    """(num_slices, ici degrees, dcn degrees) with prod(ici) = slice size and prod(dcn) = num_slices."""
    slice_size = job.cluster.scale_up_size
    if job.world % slice_size:
        raise Unsupported(f"{job.world} devices are not whole slices of {slice_size}")
    num_slices = job.world // slice_size
    rem = num_slices
    dcn = {a: 1 for a in AXES}
    for a in _DCN_ORDER:
        g = math.gcd(deg[a], rem)
        dcn[a] = g
        rem //= g
    if rem != 1:
        raise Unsupported(f"cannot lay the mesh {deg} over {num_slices} slices of {slice_size} devices")
    ici = {a: deg[a] // dcn[a] for a in AXES}
    return num_slices, ici, dcn


def partition_specs(job: Job) -> tuple[dict[str, list], dict[str, list]]:
    """PartitionSpecs (as JSON lists: axis name, list of names, or null) of the params and activations.

    Megatron layout: column-parallel QKV/gate/up ([in, out] sharded on out over `tensor`), row-parallel
    O/down (sharded on in), vocab-parallel embedding and head; `fsdp` shards the other dimension;
    per-layer weights carry a leading layer dimension split over `stage`.
    """
    m, p = job.model, job.plan
    kv_split = "tensor" if m.mla is None and m.num_kv_heads % p.tp == 0 else None
    params: dict[str, list] = {
        "embedding": ["tensor", "fsdp"],            # [vocab, hidden]
        "final_norm": [None],                       # [hidden]
        "layers.attn_norm": ["stage", None],         # [layers, hidden]
        "layers.mlp_norm": ["stage", None],
        "layers.wq": ["stage", "fsdp", "tensor"],   # [layers, hidden, heads*head_dim]
        "layers.wk": ["stage", "fsdp", kv_split],   # [layers, hidden, kv_heads*head_dim]
        "layers.wv": ["stage", "fsdp", kv_split],
        "layers.wo": ["stage", "tensor", "fsdp"],   # [layers, heads*head_dim, hidden]
    }
    if m.mla is not None:
        for k in ("layers.wk", "layers.wv"):
            del params[k]
        params["layers.wkv_a"] = ["stage", "fsdp", None]     # [layers, hidden, kv_lora + rope] (replicated over tp)
        params["layers.wkv_b"] = ["stage", None, "tensor"]   # [layers, kv_lora, heads*(nope+v)]
    if m.moe is None or m.num_dense_layers:
        params.update({
            "layers.w_gate": ["stage", "fsdp", "tensor"],   # [layers, hidden, ffn]
            "layers.w_up": ["stage", "fsdp", "tensor"],
            "layers.w_down": ["stage", "tensor", "fsdp"],   # [layers, ffn, hidden]
        })
    if m.moe is not None:
        etp = "tensor" if p.etp > 1 else None
        params.update({
            "layers.router": ["stage", "fsdp", None],                  # [layers, hidden, experts]
            "layers.experts.w_gate": ["stage", "expert", "fsdp", etp],  # [layers, experts, hidden, expert_ffn]
            "layers.experts.w_up": ["stage", "expert", "fsdp", etp],
            "layers.experts.w_down": ["stage", "expert", etp, "fsdp"],  # [layers, experts, expert_ffn, hidden]
        })
    if not m.tied_embeddings:
        params["lm_head"] = ["fsdp", "tensor"]      # [hidden, vocab]
    batch = list(BATCH)
    seq = ["context", "tensor"] if p.sequence_parallel and p.tp > 1 else "context"
    acts = {
        "tokens": [batch, "context"],                       # [batch, seq]
        "residual": [batch, seq, None],                     # [batch, seq, hidden] (SP: seq over tensor too)
        "attn_heads": [batch, "context", "tensor", None],   # [batch, seq, heads, head_dim]
        "mlp_hidden": [batch, "context", "tensor"],         # [batch, seq, ffn]
        "logits": [batch, "context", "tensor"],             # [batch, seq, vocab]
    }
    if m.moe is not None:
        acts["expert_tokens"] = ["expert", None, None]      # [experts, capacity, hidden] after dispatch
    return params, acts


def jax_mesh(job: Job) -> dict:
    deg = mesh_degrees(job)
    num_slices, ici, dcn = split_ici_dcn(job, deg)
    params, acts = partition_specs(job)
    return {
        "axis_names": list(AXES),
        "mesh_shape": [deg[a] for a in AXES],
        "ici_mesh_shape": [ici[a] for a in AXES],
        "dcn_mesh_shape": [dcn[a] for a in AXES],
        "num_slices": num_slices,
        "devices_per_slice": job.world // num_slices,
        "devices": job.world,
        "batch_axes": list(BATCH),
        "param_specs": params,
        "activation_specs": acts,
        "global_batch": job.train.global_batch,
        "micro_batch_per_dp_rank": job.plan.micro_batch,
        "grad_accum": job.grad_accum,
        "seq_len": job.train.seq_len,
    }


# ------------------------------------------------------------------------------------------- MaxText

def _decoder_block(job: Job) -> str:
    m = job.model
    fam = m.family.lower()
    if fam.startswith("deepseek"):
        return "deepseek"
    if fam in ("mixtral",):
        return "mixtral"
    if fam in ("qwen3_moe",):
        return "qwen3_moe"
    if fam in ("qwen3", "gpt_oss"):
        return fam
    if m.mlp_type == "gated" and m.norm_type == "rmsnorm" and m.position_embedding == "rope" and m.moe is None:
        return "llama2"
    if m.mlp_type == "plain" and m.norm_type == "layernorm" and m.moe is None:
        return "gpt3"
    raise Unsupported(f"no MaxText decoder block matches the {m.family} architecture of {m.name}")


_REMAT = {"none": "none", "selective": "minimal", "full": "full"}


def maxtext_config(job: Job) -> tuple[dict, list[str]]:
    m, p, t = job.model, job.plan, job.train
    if p.schedule == "zb" and p.pp > 1:
        raise Unsupported("MaxText has no zero-bubble pipeline schedule")
    if job.uneven:
        raise Unsupported("MaxText splits layers evenly over pipeline stages (no first/last stage sizes)")
    if m.moe is not None and p.etp not in (1, p.tp):
        raise Unsupported(f"MaxText shards expert weights over the whole tensor axis or not at all, not etp={p.etp}")
    if m.moe is not None and p.etp == 1 and p.tp > 1:
        raise Unsupported("MaxText shards expert weights over the tensor axis (expert TP = TP); etp=1 with "
                          f"tp={p.tp} is not expressible")
    if p.zero_shard_size and p.zero_stage < 3 and p.zero_shard_size < p.dp:
        raise Unsupported("MaxText shards the optimizer over all of `data` (shard_optimizer_over_data); "
                          "a zero_shard_size needs zero_stage 3 (fsdp axis)")
    notes: list[str] = []
    deg = mesh_degrees(job)
    num_slices, ici, dcn = split_ici_dcn(job, deg)
    block = _decoder_block(job)
    cfg: dict = {
        "base_config": "base.yml",
        "run_name": f"planner-{m.name}",
        "hardware": "tpu" if job.is_tpu else "gpu",
        "num_slices": num_slices,
    }
    for a in AXES:
        cfg[f"dcn_{_MT_KEY[a]}_parallelism"] = dcn[a]
    for a in AXES:
        cfg[f"ici_{_MT_KEY[a]}_parallelism"] = ici[a]
    if p.cp > 1:
        cfg["context_parallel_strategy"] = {"ring": "ring", "a2a": "ulysses"}[p.cp_comm]
    if p.zero_stage in (1, 2) and deg["data"] > 1:
        cfg["shard_optimizer_over_data"] = True
    if p.offload_optimizer:
        cfg["optimizer_memory_host_offload"] = True
    # batch: MaxText counts per_device_batch_size over every device of the mesh
    nmb = job.grad_accum
    if p.pp > 1:
        if p.vpp > 1 and (m.num_layers // p.pp) % p.vpp:
            raise Unsupported(f"{m.num_layers // p.pp} layers per stage do not split into vpp={p.vpp} repeats")
        if m.num_layers % p.pp:
            raise Unsupported(f"{m.num_layers} layers do not split evenly over pp={p.pp}")
        if nmb % p.pp:
            raise Unsupported(f"MaxText needs the pipeline micro-batch count ({nmb}) to be a multiple of pp={p.pp}")
        cfg["per_device_batch_size"] = t.global_batch / job.world
        cfg["gradient_accumulation_steps"] = 1
        cfg["num_pipeline_microbatches"] = nmb
        cfg["num_pipeline_repeats"] = p.vpp
        cfg["num_layers_per_pipeline_stage"] = m.num_layers // (p.pp * p.vpp)
        cfg["scan_layers"] = False
        if p.schedule == "1f1b" or p.schedule == "interleaved":
            notes.append("MaxText's pipeline is a circular (looped) schedule; its activation memory is "
                         "not 1F1B's")
    else:
        cfg["per_device_batch_size"] = p.micro_batch * p.dp / job.world
        cfg["gradient_accumulation_steps"] = nmb
    cfg["max_target_length"] = t.seq_len
    cfg["remat_policy"] = _REMAT[p.recompute]
    if p.recompute == "full" and p.recompute_layers is not None and p.recompute_layers < m.num_layers // p.pp:
        notes.append(f"partial recompute ({p.recompute_layers} layers per stage) has no MaxText equivalent: "
                     "remat_policy full recomputes every layer")
    cfg["dtype"] = "float16" if t.dtype == "fp16" else "bfloat16"
    cfg["weight_dtype"] = "float32"
    if t.dtype == "fp8":
        if not job.fp8_in_hardware:
            raise Unsupported(f"{job.hw_id} has no FP8 matmul units")
        cfg["quantization"] = "fp8"
    # model
    cfg["decoder_block"] = block
    cfg["base_emb_dim"] = m.hidden_size
    cfg["base_num_query_heads"] = m.num_heads
    cfg["base_num_kv_heads"] = m.num_kv_heads
    cfg["head_dim"] = m.head_dim
    cfg["base_mlp_dim"] = m.ffn_hidden_size
    cfg["base_num_decoder_layers"] = m.num_layers
    cfg["vocab_size"] = m.vocab_size
    if m.mlp_type == "gated":
        act = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_tanh": "gelu"}.get(m.activation, m.activation)
        cfg["mlp_activations"] = [act, "linear"]
    else:
        cfg["mlp_activations"] = [{"gelu_new": "gelu", "gelu_tanh": "gelu"}.get(m.activation, m.activation)]
    cfg["logits_via_embedding"] = m.tied_embeddings
    cfg["enable_dropout"] = False
    if m.moe is not None:
        e = m.moe
        cfg["num_experts"] = e.num_experts
        cfg["num_experts_per_tok"] = e.top_k
        cfg["base_moe_mlp_dim"] = e.expert_ffn_hidden_size
        cfg["first_num_dense_layers"] = e.first_k_dense
        cfg["shared_experts"] = e.num_shared_experts
        if e.layer_freq != 1:
            notes.append(f"moe layer_freq {e.layer_freq} not expressible in MaxText (every layer after "
                         "first_num_dense_layers is MoE)")
    if m.mla is not None:
        cfg["attention_type"] = "mla"
        cfg["q_lora_rank"] = m.mla.q_lora_rank or 0
        cfg["kv_lora_rank"] = m.mla.kv_lora_rank
        cfg["qk_nope_head_dim"] = m.mla.qk_nope_head_dim
        cfg["qk_rope_head_dim"] = m.mla.qk_rope_head_dim
        cfg["v_head_dim"] = m.mla.v_head_dim
    return cfg, notes


def _yaml_scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_yaml_scalar(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def maxtext_yaml(job: Job, cfg: dict, notes: list[str]) -> str:
    p = job.plan
    head = [
        f"# MaxText config: {job.model.name} on {job.world} x {job.hw_id}, written by planner.",
        f"# plan: tp={p.tp} pp={p.pp} vpp={p.vpp} cp={p.cp} dp={p.dp} ep={p.ep} zero={p.zero_stage} "
        f"micro_batch={p.micro_batch} global_batch={job.train.global_batch} recompute={p.recompute}",
        "# run: python -m maxtext.trainers.pre_train.train maxtext.yml base_output_directory=... dataset_path=...",
    ]
    head += [f"# note: {n}" for n in notes]
    body = [f"{k}: {_yaml_scalar(v)}" for k, v in cfg.items()]
    return "\n".join(head + body) + "\n"


def emit_maxtext(job: Job) -> dict[str, str]:
    cfg, notes = maxtext_config(job)
    return {"maxtext.yml": maxtext_yaml(job, cfg, notes)}


def emit_jax(job: Job) -> dict[str, str]:
    return {"jax_mesh.json": dumps(jax_mesh(job))}
