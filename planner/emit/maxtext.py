"""MaxText (0.2.5) `maxtext.yml` and a launcher-neutral JAX `jax_mesh.json`.

Mesh: the plan's degrees become named mesh axes, outermost first
    stage (pp), data (replicated dp), fsdp (sharded dp), expert (ep, carved out of dp), context (cp), tensor (tp)
- zero_stage 3 shards parameters over fsdp x context: fsdp = zero_shard_size / cp or dp (ParallelDims.dp_shard),
  data = dp / fsdp (HSDP when data > 1).
- zero_stage 0-2 keep parameters replicated over `data` (MaxText `shard_optimizer_over_data` = ZeRO-1 for 1-2).
- ep is carved out of dp as in Megatron: data*fsdp*expert = dp.
Each axis is split into an ICI part (inside one slice / NVLink domain) and a DCN part (across slices):
the DCN factors are taken from the outer axes first (data, stage, fsdp, expert, context, tensor), so
tensor and context stay on the fast fabric. A slice is `cluster.scale_up_size` devices (a TPU slice,
an NVLink domain).
"""

from __future__ import annotations

import functools
import math

from planner.costmodel.placement import MESH_AXES
from planner.emit.common import dumps
from planner.launchers import refuse
from planner.launchers.contract import contract_values
from planner.launchers.job import Job, Unsupported
from planner.launchers.maxtext_mesh import (
    _ACT,
    _decoder_block,
    llama4_intervals,
    mesh_degrees,
    split_ici_dcn,
)
from planner.names import safe_line, yaml_quote

AXES = MESH_AXES
# maxtext.yml key stem of each of our axes
_MT_KEY = {"stage": "pipeline", "data": "data", "fsdp": "fsdp", "expert": "expert",
           "context": "context", "tensor": "tensor"}
BATCH = ("data", "fsdp", "expert")  # activations' batch dimension is split over every DP-like axis


def partition_specs(job: Job) -> tuple[dict[str, int], dict[str, dict], dict[str, dict]]:
    """(dims, params, activations): each param/activation is {"shape": [dim names], "spec": PartitionSpec}
    with the spec as a JSON list (an axis name, a list of axis names, or null per dimension).

    Megatron layout: column-parallel QKV/gate/up ([in, out] sharded on out over `tensor`), row-parallel
    O/down (sharded on in), vocab-parallel embedding and head; the other dimension is sharded over `fsdp`
    (with ZeRO-3 and expert parallelism, over `fsdp` and `expert`: every DP rank holds a shard); per-layer
    weights carry a leading layer dimension split over `stage`.
    """
    m, p = job.model, job.plan
    # the vocabulary padded as Megatron pads it (multiple of 128 * tp) so the vocab-parallel split is even
    unit = 128 * p.tp
    vocab = -(-m.vocab_size // unit) * unit
    dims = {"layers": m.num_layers, "hidden": m.hidden_size, "vocab": vocab, "ffn": m.ffn_hidden_size,
            "batch": job.train.global_batch, "seq": job.train.seq_len}
    fs: str | list[str] = ["fsdp", "expert"] if p.zero_stage == 3 and p.ep > 1 else "fsdp"
    params: dict[str, dict] = {}
    _spec(params, "embedding", ["vocab", "hidden"], ["tensor", fs])
    _spec(params, "final_norm", ["hidden"], [None])
    _spec(params, "layers.attn_norm", ["layers", "hidden"], ["stage", None])
    _spec(params, "layers.mlp_norm", ["layers", "hidden"], ["stage", None])
    _attention_specs(job, fs, dims, params)
    _mlp_specs(job, fs, dims, params)
    if not m.tied_embeddings:
        _spec(params, "lm_head", ["hidden", "vocab"], [fs, "tensor"])
    return dims, params, _activation_specs(job)


def _spec(params: dict[str, dict], name: str, shape: list[str], spec: list) -> None:
    params[name] = {"shape": shape, "spec": spec}


def _attention_specs(job: Job, fs: str | list[str], dims: dict[str, int], params: dict[str, dict]) -> None:
    """Attention weights (GQA or MLA) and their dimensions, added to `dims` and `params` in place."""
    m, p = job.model, job.plan
    w = functools.partial(_spec, params)
    if m.mla is None:
        dims.update(q_out=m.num_heads * m.head_dim, kv_out=m.num_kv_heads * m.head_dim, o_in=m.num_heads * m.head_dim)
        kv_split = "tensor" if m.num_kv_heads % p.tp == 0 else None  # Megatron replicates KV heads when kv < tp
        w("layers.wq", ["layers", "hidden", "q_out"], ["stage", fs, "tensor"])
        w("layers.wk", ["layers", "hidden", "kv_out"], ["stage", fs, kv_split])
        w("layers.wv", ["layers", "hidden", "kv_out"], ["stage", fs, kv_split])
    else:
        a = m.mla
        dims.update(q_out=m.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim),
                    kv_a=a.kv_lora_rank + a.qk_rope_head_dim, kv_lora=a.kv_lora_rank,
                    kv_b_out=m.num_heads * (a.qk_nope_head_dim + a.v_head_dim), o_in=m.num_heads * a.v_head_dim)
        if a.q_lora_rank:
            dims["q_lora"] = a.q_lora_rank
            w("layers.wq_a", ["layers", "hidden", "q_lora"], ["stage", fs, None])
            w("layers.wq_b", ["layers", "q_lora", "q_out"], ["stage", None, "tensor"])
        else:
            w("layers.wq", ["layers", "hidden", "q_out"], ["stage", fs, "tensor"])
        w("layers.wkv_a", ["layers", "hidden", "kv_a"], ["stage", fs, None])      # latent: replicated over tp
        w("layers.wkv_b", ["layers", "kv_lora", "kv_b_out"], ["stage", None, "tensor"])
    w("layers.wo", ["layers", "o_in", "hidden"], ["stage", "tensor", fs])


def _mlp_specs(job: Job, fs: str | list[str], dims: dict[str, int], params: dict[str, dict]) -> None:
    """Dense MLP and MoE expert weights and their dimensions, added to `dims` and `params` in place."""
    m, p = job.model, job.plan
    w = functools.partial(_spec, params)
    if m.moe is None or m.num_dense_layers:
        w("layers.w_gate", ["layers", "hidden", "ffn"], ["stage", fs, "tensor"])
        w("layers.w_up", ["layers", "hidden", "ffn"], ["stage", fs, "tensor"])
        w("layers.w_down", ["layers", "ffn", "hidden"], ["stage", "tensor", fs])
    if m.moe is not None:
        e = m.moe
        dims.update(experts=e.num_experts, expert_ffn=e.expert_ffn_hidden_size)
        etp = "tensor" if p.etp > 1 else None
        w("layers.router", ["layers", "hidden", "experts"], ["stage", fs, None])
        w("layers.experts.w_gate", ["layers", "experts", "hidden", "expert_ffn"], ["stage", "expert", "fsdp", etp])
        w("layers.experts.w_up", ["layers", "experts", "hidden", "expert_ffn"], ["stage", "expert", "fsdp", etp])
        w("layers.experts.w_down", ["layers", "experts", "expert_ffn", "hidden"], ["stage", "expert", etp, "fsdp"])


def _activation_specs(job: Job) -> dict[str, dict]:
    p = job.plan
    batch = list(BATCH)
    seq = ["context", "tensor"] if p.sequence_parallel and p.tp > 1 else "context"
    return {
        "tokens": {"shape": ["batch", "seq"], "spec": [batch, "context"]},
        "residual": {"shape": ["batch", "seq", "hidden"], "spec": [batch, seq, None]},   # SP: seq over tensor too
        "attn_out": {"shape": ["batch", "seq", "o_in"], "spec": [batch, "context", "tensor"]},
        "mlp_hidden": {"shape": ["batch", "seq", "ffn"], "spec": [batch, "context", "tensor"]},
        "logits": {"shape": ["batch", "seq", "vocab"], "spec": [batch, "context", "tensor"]},
    }


def uneven_split_text(num_layers: int, p) -> str:
    """'61 layers over 16 stages as 3, 4, ..., 4, 2' (never 'None' for an unset first/last size)."""
    from planner.costmodel.partition import stage_layer_counts
    counts = list(stage_layer_counts(num_layers, p.pp, p.first_stage_layers, p.last_stage_layers))
    shown = counts if len(counts) <= 4 else [counts[0], counts[1], "...", counts[-2], counts[-1]]
    return f"{num_layers} layers over {p.pp} stages as {', '.join(str(c) for c in shown)}"


def jax_mesh(job: Job) -> dict:
    m, p = job.model, job.plan
    if m.moe is not None and p.etp not in (1, p.tp):
        raise Unsupported(f"a PartitionSpec shards expert weights over all of `tensor` (tp={p.tp}) or none of it, "
                          f"not over etp={p.etp}")
    if job.uneven or m.num_layers % p.pp:
        raise Unsupported("a PartitionSpec splits the stacked layer dimension evenly over `stage`; "
                          f"{uneven_split_text(m.num_layers, p)} is not expressible")
    deg = mesh_degrees(job)
    num_slices, ici, dcn = split_ici_dcn(job, deg)
    dims, params, acts = partition_specs(job)
    return {
        "axis_names": list(AXES),
        "mesh_shape": [deg[a] for a in AXES],
        "ici_mesh_shape": [ici[a] for a in AXES],
        "dcn_mesh_shape": [dcn[a] for a in AXES],
        "num_slices": num_slices,
        "devices_per_slice": job.world // num_slices,
        "devices": job.world,
        "batch_axes": list(BATCH),
        "vocab_size": job.model.vocab_size,  # dims["vocab"] is padded to a multiple of 128*tp (as Megatron pads)
        "dims": dims,
        "param_specs": params,
        "activation_specs": acts,
        "global_batch": job.train.global_batch,
        "micro_batch_per_dp_rank": job.plan.micro_batch,
        "grad_accum": job.grad_accum,
        "seq_len": job.train.seq_len,
    }


# ------------------------------------------------------------------------------------------- MaxText

# MaxText wraps its scanned decoder layers in jax.checkpoint whatever the policy, and remat_policy "none" leaves the
# policy None, i.e. nothing saveable: full remat (maxtext 0.2.5 layers/nnx_decoders.py _apply_layers_sequentially;
# only unscanned layers skip the checkpoint for "none"). Its fastest policy, first in base.yml's list, is
# "minimal_with_context": every named matmul output (q/k/v, attention context, out_proj, mlpwi, mlpwo) is saved and
# only the elementwise ops between them are recomputed, which is what recompute "none" means here. "minimal" also
# recomputes the attention core: Megatron's selective recompute.
_REMAT = {"none": "minimal_with_context", "selective": "minimal", "full": "full"}


def maxtext_config(job: Job) -> tuple[dict, list[str]]:
    m = job.model
    refuse(job, "maxtext")  # planner/launchers/maxtext.py
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
    cfg.update(_mesh_keys(job, deg, ici, dcn))
    cfg.update(_batch_keys(job, notes))
    cfg.update(_precision_keys(job))
    cfg.update(_model_keys(job, block, notes))
    return cfg, notes


def _mesh_keys(job: Job, deg: dict[str, int], ici: dict[str, int], dcn: dict[str, int]) -> dict:
    """Mesh axes (DCN then ICI), context-parallel strategy and optimizer sharding/offload keys."""
    p = job.plan
    cfg: dict = {}
    for a in AXES:
        cfg[f"dcn_{_MT_KEY[a]}_parallelism"] = dcn[a]
    for a in AXES:
        cfg[f"ici_{_MT_KEY[a]}_parallelism"] = ici[a]
    if p.cp > 1:
        cfg["context_parallel_strategy"] = {"ring": "ring", "a2a": "ulysses"}[p.cp_comm]
        if job.is_tpu:
            # TPU ring and Ulysses attention run on the Tokamax splash kernels only (maxtext 0.2.5
            # configs/types.py:5218, 5271 [assert]); Ulysses attends in natural order after its all-to-all, so the
            # causal load-balancing reorder (on by default) is off (types.py:5278-5283 [assert])
            cfg["use_tokamax_splash"] = True
            if p.cp_comm == "a2a":
                cfg["context_parallel_load_balance"] = False
    if p.zero_stage in (1, 2) and deg["data"] > 1:
        cfg["shard_optimizer_over_data"] = True
    if p.offload_optimizer:
        cfg["optimizer_memory_host_offload"] = True
    return cfg


def _batch_keys(job: Job, notes: list[str]) -> dict:
    """Batch and pipeline keys: MaxText counts per_device_batch_size over every device of the mesh."""
    m, p, t = job.model, job.plan, job.train
    cfg: dict = {}
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
        # its activation memory is GPipe's whatever the schedule's name (stacks.maxtext pipeline_memory_schedule), as
        # costed
    else:
        cfg["per_device_batch_size"] = p.micro_batch * p.dp / job.world
        cfg["gradient_accumulation_steps"] = nmb
    return cfg


def _precision_keys(job: Job) -> dict:
    """Sequence length, remat policy and dtypes (FP8 only where the hardware has FP8 matmul units)."""
    p, t = job.plan, job.train
    cfg: dict = {}
    cfg["max_target_length"] = t.seq_len
    cfg["remat_policy"] = _REMAT[p.recompute]
    if p.custom_remat is not None:
        # the costed custom policy (memory.maxtext_custom_remat_elems): the named tensors offloaded / kept, the
        # others rematerialised (MT:configs/base.yml remat_policy custom, one key per tensor)
        cfg["remat_policy"] = "custom"
        cfg |= {name: "offload" for name in p.remat_offloaded} | {name: "device" for name in p.remat_device}
    # partial full recompute (recompute_layers) is refused before this (launchers.maxtext rule whole-layer-remat)
    cfg["dtype"] = "float16" if t.dtype == "fp16" else "bfloat16"
    # bf16 master parameters; the Adam moments inherit them (MT:configs/base.yml mu_dtype), as costed
    cfg["weight_dtype"] = "bfloat16" if t.param_dtype == "bf16" else "float32"
    if t.dtype == "fp8":
        if not job.fp8_in_hardware:
            raise Unsupported(f"{job.hw_id} has no FP8 matmul units")
        cfg["quantization"] = "fp8"
    return cfg


def _model_keys(job: Job, block: str, notes: list[str]) -> dict:
    """The architecture as MaxText keys (the decoder block fixes norm placement, embedding scale and the
    local/global attention cycle; planner.launchers.contract MAXTEXT maps every other field)."""
    m, t = job.model, job.train
    cfg: dict = {"decoder_block": block, "base_emb_dim": m.hidden_size, "base_num_query_heads": m.num_heads,
                 "base_num_kv_heads": m.num_kv_heads, "head_dim": m.head_dim, "base_mlp_dim": m.ffn_hidden_size,
                 "base_num_decoder_layers": m.num_layers, "vocab_size": m.vocab_size}
    act = _ACT[m.activation]
    cfg["mlp_activations"] = [act, "linear"] if m.mlp_type == "gated" else [act]
    if m.activation == "gpt_oss_glu":
        cfg["mlp_activations_limit"] = 7.0  # gpt-oss clamps gate and up at 7 (maxtext configs/models/gpt-oss-120b.yml)
    if m.norm_eps is not None:
        cfg["normalization_layer_epsilon"] = m.norm_eps
    cfg["logits_via_embedding"] = m.tied_embeddings
    cfg["enable_dropout"] = False  # as planned (no dropout)
    cfg["dropout_rate"] = 0.0
    cfg.update(_rope_keys(job, notes))
    if m.position_embedding == "learned":  # MaxText adds a learned position table only when this is > 0
        cfg["trainable_position_size"] = max(m.max_position_embeddings, t.seq_len)
    cfg.update(_attention_keys(job, block))
    cfg.update(_moe_keys(job))
    if block == "llama4":
        cfg.update(_llama4_keys(job))
        # the block takes the sigmoid of the top-1 logit itself (layers/moe.py); a routed_score_func would apply
        # one more to the gate logits before it
        cfg.pop("routed_score_func", None)
    if m.mla is not None:
        cfg["attention_type"] = "mla"
        cfg["q_lora_rank"] = m.mla.q_lora_rank or 0
        cfg["kv_lora_rank"] = m.mla.kv_lora_rank
        cfg["qk_nope_head_dim"] = m.mla.qk_nope_head_dim
        cfg["qk_rope_head_dim"] = m.mla.qk_rope_head_dim
        cfg["v_head_dim"] = m.mla.v_head_dim
    if m.mtp_layers:
        cfg["mtp_num_layers"] = m.mtp_layers
    return cfg


def _attention_keys(job: Job, block: str) -> dict:
    m, t = job.model, job.train
    cfg: dict = {}
    if m.qkv_bias:
        cfg["attention_bias"] = True
    if m.qk_norm:
        cfg["use_qk_norm"] = True
    if m.attention_sinks:
        cfg["attention_sink"] = True
    if m.norms_per_layer == 4:
        cfg["use_post_attn_norm"] = True
        cfg["use_post_ffw_norm"] = True
    if contract_values(m, t)["sliding_window"] is not None:
        cfg["sliding_window_size"] = m.sliding_window  # on the block's local layers (_WINDOW_CYCLE)
    if m.attn_logit_softcap is not None:
        cfg["attn_logits_soft_cap"] = m.attn_logit_softcap
    if m.final_logit_softcap is not None:
        cfg["final_logits_soft_cap"] = m.final_logit_softcap
    # as costed: a flash kernel (TPU splash attention; GPU tokamax Pallas-Triton flash attention) or the plain
    # dot-product path that materialises the scores (maxtext 0.2.5 layers/attention_op.py apply_attention)
    cfg["attention"] = "dot_product" if t.attention_impl == "unfused" else "flash"
    return cfg


def _llama4_keys(job: Job) -> dict:
    """Llama 4's layer cycle, chunks, q/k norm and temperature tuning (planner.launchers.maxtext_mesh
    _llama4_gap names what the block cannot run; maxtext 0.2.5 configs/models/llama4-17b-128e.yml)."""
    m, t = job.model, job.train
    iv = llama4_intervals(m)
    assert iv is not None  # refused before (maxtext_model_gaps)
    nope, step = iv
    return {"nope_layer_interval": nope, "interleave_moe_layer_step": step,
            "inhomogeneous_layer_cycle_interval": math.lcm(max(nope, 1), step),
            "first_num_dense_layers": 0,  # the cycle places the dense layers
            # a chunk no shorter than the sequence attends globally, as the costed model without chunks does
            "chunk_attn_window_size": max(m.attention_chunk_size or 0, t.seq_len) if not any(m.chunked_pattern())
            else m.attention_chunk_size,
            "use_qk_norm": m.qk_l2_norm, "temperature_tuning": m.attn_temperature_tuning is not None,
            "capacity_factor": -1}


def _moe_keys(job: Job) -> dict:
    """Experts and the router (maxtext 0.2.5 base.yml: routed_score_func, routed_bias, n_routing_groups, ...)."""
    e, t = job.model.moe, job.train
    if e is None:
        return {}
    cfg: dict = {"num_experts": e.num_experts, "num_experts_per_tok": e.top_k,
                 "base_moe_mlp_dim": e.expert_ffn_hidden_size, "first_num_dense_layers": e.first_k_dense,
                 "shared_experts": e.num_shared_experts}
    if t.moe_capacity_factor is not None:  # base.yml capacity_factor: -1 = dropless; > 0 drops to a static capacity
        cfg["capacity_factor"] = t.moe_capacity_factor
        # costed as dense_matmul's einsums over capacity buffers (Stack.moe_capacity_einsum), as tpu-recipes'
        # mixtral_8x7b_dropped / mixtral_8x22b_dropped configs run it (megablox and sparse_matmul False)
        cfg["sparse_matmul"] = False
        cfg["megablox"] = False
    if e.score_function != "softmax":
        cfg["routed_score_func"] = e.score_function
    if e.router_bias or e.expert_bias_balancing:
        cfg["routed_bias"] = True
    if e.expert_bias_balancing:
        # DeepSeek-V3's bias update speed gamma = 0.001 (report arXiv 2412.19437 sec. 4.2)
        cfg["routed_bias_update_rate"] = 0.001
    if e.expert_bias:
        cfg["mlp_bias"] = True
    if e.route_topk_groups is not None:
        cfg["n_routing_groups"] = e.route_groups
        cfg["topk_routing_group"] = e.route_topk_groups
    if e.routed_scaling_factor != 1.0:
        cfg["routed_scaling_factor"] = e.routed_scaling_factor
    cfg["norm_topk_prob"] = e.norm_topk_prob
    if e.aux_loss_coeff:
        cfg["load_balance_loss_weight"] = e.aux_loss_coeff
        if e.aux_loss_per_sequence:
            cfg["moe_use_megatron_seq_aux_loss"] = True
    return cfg


def _rope_keys(job: Job, notes: list[str]) -> dict:
    """RoPE bases and scaling (MaxText base.yml rope_*; LLaMARotaryEmbedding hard-codes Llama 3.1's factor 8,
    low 1, high 4, original 8192: maxtext layers/embeddings.py _apply_scaling_factor)."""
    m = job.model
    if m.position_embedding != "rope":
        return {}
    out: dict = {"rope_max_timescale": int(m.rope_theta)}
    if m.rope_local_theta is not None:
        out["local_rope_max_timescale"] = int(m.rope_local_theta)
    sc = contract_values(m, job.train)["rope_scaling"]
    if sc is None and m.family == "llama4_text":
        # Llama 4's interleaved rotation: MaxText's LLaMARotaryEmbedding without its scaling, as maxtext 0.2.5
        # configs/models/llama4-17b-128e.yml writes it (rope_type llama3.1, rope_use_scale false)
        out.update(rope_type="llama3.1", rope_use_scale=False)
    elif sc is None:
        out["rope_type"] = "default"
    elif sc[0] == "llama3":
        out.update(rope_type="llama3.1", rope_use_scale=True)
    elif sc[0] == "linear":
        out.update(rope_type="default", rope_linear_scaling_factor=sc[1])
    else:  # yarn; the rotation layout is the family's (maxtext configs/models/deepseek3-671b.yml, gpt-oss-120b.yml)
        deepseek = m.mla is not None
        out.update(rope_type="yarn", rope_factor=int(sc[1]) if sc[1] == int(sc[1]) else sc[1],
                   original_max_position_embeddings=sc[2], beta_fast=sc[3],
                   beta_slow=sc[4], rope_interleave=deepseek, rope_truncate=deepseek,
                   rope_attention_scaling=not deepseek)
        if deepseek:
            out["mscale"] = sc[5]
    return out


def _yaml_scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        text = repr(v)  # YAML 1.1 (PyYAML, MaxText's loader) reads 1e-06 as a string: write 1.0e-06
        mantissa, _, exp = text.partition("e")
        return f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exp}" if exp else text
    if isinstance(v, int):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_yaml_scalar(x) for x in v) + "]"
    return yaml_quote(str(v))  # one line whatever the value holds (planner.names)


def maxtext_yaml(job: Job, cfg: dict, notes: list[str]) -> str:
    p = job.plan
    head = [
        f"# MaxText config: {safe_line(job.model.name, 200)} on {job.world} x {safe_line(job.hw_id, 200)}, "
        "written by planner.",
        f"# plan: tp={p.tp} pp={p.pp} vpp={p.vpp} cp={p.cp} dp={p.dp} ep={p.ep} zero={p.zero_stage} "
        f"micro_batch={p.micro_batch} global_batch={job.train.global_batch} recompute={p.recompute}",
        "# run: python -m maxtext.trainers.pre_train.train maxtext.yml base_output_directory=CHECKPOINTS "
        "dataset_path=DATA tokenizer_path=TOKENIZER",
        "# PLACEHOLDERS (give them at launch): DATA, TOKENIZER (the vocabulary below is the planned size), "
        "CHECKPOINTS.",
    ]
    head += [f"# note: {safe_line(n, 1000)}" for n in notes]
    body = [f"{k}: {_yaml_scalar(v)}" for k, v in cfg.items()]
    return "\n".join(head + body) + "\n"


def emit_maxtext(job: Job) -> dict[str, str]:
    cfg, notes = maxtext_config(job)
    return {"maxtext.yml": maxtext_yaml(job, cfg, notes)}


def emit_jax(job: Job) -> dict[str, str]:
    return {"jax_mesh.json": dumps(jax_mesh(job))}
