"""MaxText (main e591f30; the same checks in PyPI maxtext 0.2.5, which the consumer tests run).

Citations: MT = maxtext@e591f30:src/maxtext/ (launcher_capabilities.md sec. 4).
"""

from __future__ import annotations

from planner.launchers import Capabilities, Rule, contract_rule, is_tpu, microbatches, non_default_state_dtypes
from planner.launchers.job import Job, Unsupported
from planner.launchers.maxtext_mesh import _decoder_block, mesh_degrees, split_ici_dcn
from planner.specs.dims import ParallelDims


def _mesh_impossible(job: Job) -> bool:
    """EP must be carved from the DP axes and the mesh must lay over whole slices (planner.launchers.maxtext_mesh)."""
    try:
        split_ici_dcn(job, mesh_degrees(job))
    except Unsupported:
        return True
    return False


def _fsdp_over_dcn(job: Job) -> bool:
    """On a TPU multislice, the mesh laid over slices gives DCN an axis other than data or stage
    (planner.emit.maxtext). GPU nodes are 'slices' of one NVLink domain; MaxText's GPU recipes shard FSDP over
    their DCN, so the rule is the TPU multislice one."""
    from planner.launchers.maxtext_mesh import mesh_degrees, split_ici_dcn

    if not is_tpu(job):
        return False
    try:
        _, _, dcn = split_ici_dcn(job, mesh_degrees(job))
    except Unsupported:
        return False  # rule "mesh" says why
    return any(v > 1 for a, v in dcn.items() if a not in ("data", "stage"))


def _state_dtypes_not_maxtexts(job: Job) -> bool:
    """State dtypes MaxText cannot write: any but its own weight_dtype=bfloat16 (bf16 parameters, bf16 Adam moments
    through mu_dtype, bf16 gradients as jax.grad returns them; MT:configs/base.yml)."""
    t = job.train
    own_bf16 = t.param_dtype == "bf16" and t.optimizer_dtype == "bf16" and t.grad_dtype in (None, "bf16")
    return non_default_state_dtypes(job) and not own_bf16


def _no_decoder_block(job: Job) -> bool:
    try:
        _decoder_block(job)
    except Unsupported:
        return True
    return False


def _ring_seq(job: Job) -> bool:
    p = job.plan
    return p.cp > 1 and p.cp_comm == "ring" and job.train.seq_len % (p.cp * p.cp) != 0


def _tpu_cp(job: Job) -> bool:
    """Context parallelism on a TPU: MaxText runs it with the Tokamax kernels (ring: tokamax ring attention; a2a:
    Ulysses), whose asserts the rules below hold (maxtext 0.2.5 configs/types.py:5211-5290 and
    layers/attention_op.py:713-770)."""
    return job.is_tpu and job.plan.cp > 1


def _local_attention(job: Job) -> bool:
    """Some layer attends through a sliding window or inside a chunk (the cost model's is_local_layer)."""
    from planner.costmodel.flops import has_local_layers

    return has_local_layers(job.model)


def _kv_head_shards(job: Job) -> int:
    """The shards MaxText splits a non-MLA model's KV heads into (tp, x cp under Ulysses) when they do not divide the
    heads; 0 when they do (or the model attends with MLA, whose projections are not split by KV head)."""
    p, m = job.plan, job.model
    shards = p.tp * (p.cp if p.cp_comm == "a2a" else 1)
    return shards if m.mla is None and m.num_kv_heads % shards else 0


def _cp_over_dcn(job: Job) -> bool:
    try:
        _, _, dcn = split_ici_dcn(job, mesh_degrees(job))
    except Unsupported:
        return False  # rule "mesh" says why
    return dcn.get("context", 1) > 1


# the pipeline schedules it runs (Capabilities.schedules and the "schedules" rule read this one tuple): GPipe, and its
# circular (repeat) schedule for interleaved plans
SCHEDULES = ("gpipe", "interleaved")

RULES = (
    contract_rule("maxtext"),
    Rule("schedules", "MaxText pipelines with GPipe or its circular (repeat) schedule only, not {s}",
         "MT:docs/guides/optimization/sharding.md:363-385 [doc]",
         # a plan costed as 1F1B is written as MaxText's pipeline, with a note (planner.emit.maxtext)
         lambda j: j.plan.pp > 1 and j.plan.schedule not in (*SCHEDULES, "1f1b"),
         detail=lambda j: {"s": j.plan.schedule}),
    Rule("even-stages", "MaxText splits layers evenly over pipeline stages (no first/last stage sizes)",
         "MT:configs/types.py:3574-3601 [assert]",
         lambda j: j.plan.pp > 1 and (j.uneven or j.plan.account_embedding_loss
                                      or j.model.num_layers % (j.plan.pp * j.plan.vpp) != 0)),
    Rule("pipeline-microbatches", "MaxText needs the pipeline micro-batch count to be a multiple of pp",
         "MT:configs/types.py:3602-3617 [assert]", lambda j: j.plan.pp > 1 and microbatches(j) % j.plan.pp != 0),
    Rule("activation-offload", "MaxText offloads named layer tensors by its custom remat policy (--remat-offload), "
         "not Megatron's modules (--offload-modules)", "MT:configs/base.yml remat_policy custom [absent: no module "
         "offload]", lambda j: bool(j.plan.offload_modules)),
    Rule("whole-layer-remat", "MaxText's remat policy applies to every layer: full recompute of {k} of the {n} layers "
         "per stage has no MaxText equivalent", "MT:configs/base.yml:436-450 remat_policy [one policy, every layer]",
         lambda j: j.partial_full_recompute, detail=lambda j: {"k": j.plan.recompute_layers, "n": j.max_stage_layers}),
    Rule("expert-tp-is-tp", "MaxText shards expert weights over the tensor axis like the dense ones "
         "(expert TP = TP); etp={etp} with tp={tp} is not expressible",
         "MT:configs/base.yml logical_axis_rules mlp_moe",
         lambda j: j.model.moe is not None and j.plan.etp != j.plan.tp,
         detail=lambda j: {"etp": j.plan.etp, "tp": j.plan.tp}),
    Rule("no-zero12-hybrid", "MaxText shards the optimizer over all of `data`; a zero_shard_size needs zero_stage 3 "
         "(fsdp axis)", "MT:configs/base.yml shard_optimizer_over_data [absent: ZeRO-1/2 groups]",
         lambda j: j.plan.zero_shard_size is not None and j.plan.zero_stage < 3
         and ParallelDims.of(j.plan).dp_replicate > 1),
    Rule("ulysses-tpu-only", "MaxText's ulysses context parallelism runs on TPU only",
         "MT:configs/types.py:4071-4130 [assert]",
         lambda j: j.plan.cp > 1 and j.plan.cp_comm == "a2a" and not is_tpu(j), needs_cluster=True),
    Rule("ring-seq", "MaxText ring context parallelism needs seq_len divisible by cp^2",
         "MT:configs/types.py:4011-4060 [assert]", _ring_seq),
    Rule("gpu-flash-sinks", "MaxText runs attention sinks on GPU with Transformer Engine's cuDNN attention only "
         "(attention=cudnn_flash_te), not the flash kernel this plan is costed with",
         "maxtext 0.2.5 layers/attention_op.py:147-157, 1733 [assert]",
         lambda j: not j.is_tpu and j.model.attention_sinks and j.train.attention_impl != "unfused",
         needs_cluster=True),
    # TPU context parallelism runs on the Tokamax splash kernels (the emitter writes use_tokamax_splash: true), which
    # take global causal attention (ring: and MLA) only, with the flash kernel, and neither attention sinks nor
    # dropout (maxtext 0.2.5 configs/types.py:5211-5290 and layers/attention_op.py:713-770 [assert])
    Rule("tpu-cp-flash", "MaxText's TPU context parallelism runs the flash kernel only; this plan is costed with "
         "unfused attention", "maxtext 0.2.5 configs/types.py:5216, 5269 [assert]",
         lambda j: _tpu_cp(j) and j.train.attention_impl == "unfused", needs_cluster=True),
    Rule("tpu-cp-local-attention", "MaxText's TPU context parallelism (Tokamax ring / Ulysses attention) runs global "
         "attention only; {model} has sliding-window or chunked layers",
         "maxtext 0.2.5 layers/attention_op.py:720-721, 767-768 [assert]",
         lambda j: _tpu_cp(j) and _local_attention(j), needs_cluster=True, detail=lambda j: {"model": j.model.name}),
    Rule("tpu-cp-sinks", "MaxText's TPU context parallelism (Tokamax ring / Ulysses attention) does not support "
         "attention sinks", "maxtext 0.2.5 configs/types.py:5236, 5287 [assert]",
         lambda j: _tpu_cp(j) and j.model.attention_sinks, needs_cluster=True),
    Rule("tpu-ring-mla-packing", "MaxText's TPU ring attention with MLA does not support packed sequences (packing, "
         "on by default)", "maxtext 0.2.5 configs/types.py:5225; layers/attention_op.py:724 [assert]",
         lambda j: _tpu_cp(j) and j.plan.cp_comm == "ring" and j.model.mla is not None, needs_cluster=True),
    Rule("tpu-ring-even-cp", "MaxText's load-balanced TPU ring attention (context_parallel_load_balance, on by "
         "default, as costed) needs an even cp", "maxtext 0.2.5 configs/types.py:5230 [assert]",
         lambda j: _tpu_cp(j) and j.plan.cp_comm == "ring" and j.plan.cp % 2 != 0, needs_cluster=True),
    Rule("tpu-ulysses-global", "MaxText's TPU Ulysses attention runs global causal attention only, not MLA",
         "maxtext 0.2.5 configs/types.py:5277 [assert]",
         lambda j: _tpu_cp(j) and j.plan.cp_comm == "a2a" and j.model.mla is not None, needs_cluster=True),
    Rule("tpu-ulysses-dcn", "MaxText's TPU Ulysses attention keeps context parallelism inside a slice (no DCN)",
         "maxtext 0.2.5 configs/types.py:5267 [assert]",
         lambda j: _tpu_cp(j) and j.plan.cp_comm == "a2a" and _cp_over_dcn(j), needs_cluster=True),
    # on any hardware: the load-balanced token order breaks MTP's shift by one token
    Rule("cp-mtp", "MaxText's load-balanced context parallelism (context_parallel_load_balance, on by default, as "
         "costed) does not support MTP layers", "maxtext 0.2.5 layers/multi_token_prediction.py:502-506; "
         "configs/types.py:5232 [raise]",
         lambda j: j.plan.cp > 1 and j.plan.cp_comm == "ring" and j.model.mtp_layers > 0),
    # attention heads are atomic: MaxText shards the KV heads over the tensor axis (base.yml logical_axis_rules
    # kv_heads), and Ulysses over the context axis too
    Rule("kv-heads", "MaxText shards KV heads over the tensor axis (Ulysses over the context axis too): {kv} KV heads "
         "do not split over {shards}", "maxtext 0.2.5 layers/attentions.py:629-640; kernels/attention/"
         "tokamax_ring_attention.py:181-184, ulysses_attention.py:198-201 [raise]", lambda j: _kv_head_shards(j) > 0,
         detail=lambda j: {"kv": j.model.num_kv_heads, "shards": _kv_head_shards(j)}),
    Rule("fp8-no-grad-accum", "MaxText fp8 quantization cannot be combined with gradient accumulation",
         "MT:configs/types.py:3878-3882 [assert]",
         lambda j: j.train.dtype == "fp8" and j.plan.pp == 1 and microbatches(j) > 1),
    Rule("fp8-recipe", "MaxText's fp8 is AQT/Qwix quantization (quantization: fp8); Transformer Engine recipes "
         "(te_fp8_*) are not verified here: drop --fp8-recipe", "MT:configs/types.py:83-103 quantization",
         lambda j: j.train.fp8_recipe is not None),
    Rule("fp8-hardware", "{hw} has no FP8 matmul units", "MT:configs/types.py:83-103 quantization",
         lambda j: j.train.dtype == "fp8" and not j.fp8_in_hardware, needs_cluster=True,
         detail=lambda j: {"hw": j.hw_id}),
    Rule("mesh", "the plan's mesh cannot be laid out (ep from the DP axes, whole slices over DCN)",
         "MT:utils/max_utils.py:461-484 [assert]", _mesh_impossible, needs_cluster=True),
    Rule("dcn-data", "MaxText multislice puts data parallelism across slices: this plan would shard FSDP (or "
         "another axis) over the {n} slices' DCN; its data-parallel replicas must span the slices (HSDP: "
         "zero_shard_size within a slice)", "MT:configs/base.yml dcn_data_parallelism -1 (DCN = data); "
         "MT:docs/guides/optimization/sharding.md (DCN for data parallelism and pipeline stages)",
         _fsdp_over_dcn, needs_cluster=True, detail=lambda j: {"n": j.world // j.cluster.scale_up_size}),
    Rule("decoder-block", "no MaxText decoder block matches the model's architecture",
         "MT:configs/types.py decoder_block", _no_decoder_block),
    Rule("no-tp-overlap", "TP collective-matmul overlap is left to XLA flags (unverified)",
         "launcher_capabilities.md sec. 4 (unverified)", lambda j: j.plan.tp > 1 and j.plan.tp_comm_overlap,
         verified=False),
    Rule("state-dtypes", "--grad-dtype / --optimizer-dtype are written for Megatron-LM only; MaxText would train "
         "with its default gradient and Adam-state dtypes", "MT:configs/base.yml:111-174 (grad_dtype float32)",
         _state_dtypes_not_maxtexts),
)

CAPABILITIES = Capabilities(
    launcher="maxtext",
    version="maxtext main e591f30 (2026-08-22), same checks as PyPI 0.2.5",
    checked_against="maxtext 0.2.5 pyconfig.initialize + jax 0.10.2 mesh (tests/consumers)",
    framework="maxtext",
    hardware=("gpu", "tpu"),
    schedules=SCHEDULES,
    zero_stages=(0, 1, 3),  # 1 = shard_optimizer_over_data; 3 = fsdp axis (2 maps to 1)
    cp_kinds=("ring", "a2a"),  # a2a = ulysses, TPU only
    expert_tp="= tp (the tensor axis)",
    recompute=("none", "selective", "full"),  # remat_policy none / minimal / full
    offload="optimizer_memory_host_offload",
    fp8_recipes=("fp8",),
    rank_order="mesh_axes order (stage moved before data with PP), DCN axes outermost",
    rules=RULES,
    # the schedule its pipelines run, as a range (a tuple), not a pin: a pinned pipeline schedule asks for pp >= 2
    # (planner.search.space.needs_pipeline), MaxText's data-parallel plans need none
    search_defaults={"schedule": ("gpipe",)},
)
