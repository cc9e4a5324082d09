"""DeepSpeed 0.19.8 with Megatron-DeepSpeed (deepspeedai/Megatron-DeepSpeed master 4efb479).

Citations: DS = deepspeed 0.19.8:deepspeed/, MDS = Megatron-DeepSpeed (launcher_capabilities.md sec. 2).
"""

from __future__ import annotations

from planner.launchers import Capabilities, Rule, contract_rule, is_tpu, non_default_state_dtypes
from planner.launchers.contract import deepspeed_path, table_missing
from planner.launchers.hf_model import hf_gaps
from planner.launchers.job import Job
from planner.specs.dims import ParallelDims


def _partial_recompute(job: Job) -> bool:
    return job.plan.pp > 1 and job.partial_full_recompute and (job.plan.recompute_layers or 0) > 0


def ds_path(job: Job) -> str | None:
    """The model's DeepSpeed path (planner.launchers.contract.deepspeed_path); a Ulysses plan (cp > 1) of a model both
    paths express runs on the Hugging Face path, where DeepSpeed-Ulysses is written."""
    path = deepspeed_path(job.model, job.train)
    if path == "megatron-deepspeed" and job.plan.cp > 1 and not hf_gaps(job.model, job.train):
        return "hf"
    return path


def _why_hf(job: Job) -> str:
    missing = table_missing(job.model, job.train, "deepspeed")
    if missing:
        return "Megatron-DeepSpeed cannot express " + ", ".join(missing)
    return "DeepSpeed-Ulysses context parallelism is written for it only"


def _hf_path(job: Job) -> bool:
    return ds_path(job) == "hf"


# the pipeline schedules its engine runs (Capabilities.schedules and the "schedules" rule read this one tuple)
SCHEDULES = ("1f1b",)

RULES = (
    contract_rule("deepspeed"),
    Rule("hf-data-parallel", "DeepSpeed runs {name} as the Hugging Face model ({what}): data parallelism under "
         "ZeRO and Ulysses sequence parallelism only, no tensor parallelism, "
         "pipeline parallelism or expert parallelism (tp={tp} pp={pp} ep={ep} cp={cp})",
         "planner/launchers/hf_model.py; DS:runtime/engine.py (ZeRO over the data-parallel group only)",
         lambda j: _hf_path(j) and (j.plan.tp > 1 or j.plan.pp > 1 or j.plan.ep > 1),
         detail=lambda j: {"name": j.model.name, "what": _why_hf(j),
                           "tp": j.plan.tp, "pp": j.plan.pp, "ep": j.plan.ep, "cp": j.plan.cp}),
    Rule("hf-recompute", "the Hugging Face model recomputes every layer (gradient_checkpointing_enable) or none, "
         "not {r}", "transformers modeling_utils.py gradient_checkpointing_enable (per decoder layer)",
         lambda j: _hf_path(j) and (j.plan.recompute == "selective" or j.partial_full_recompute),
         detail=lambda j: {"r": "selective recompute" if j.plan.recompute == "selective" else
                           f"{j.plan.recompute_layers} of {j.model.num_layers} layers"}),
    Rule("gpu-only", "DeepSpeed runs on GPUs, not on {hw}", "DS: CUDA/ROCm accelerators (no XLA backend)",
         is_tpu, needs_cluster=True, detail=lambda j: {"hw": j.hw_id}),
    Rule("no-ring-cp", "DeepSpeed's context parallelism is Ulysses (all-to-all), not ring/all-gather K/V exchange",
         "launcher_capabilities.md sec. 2 [absent]; DS:runtime/sequence_parallel/ulysses_sp.py",
         lambda j: j.plan.cp > 1 and j.plan.cp_comm != "a2a"),
    Rule("ulysses-path", "DeepSpeed-Ulysses runs on the Hugging Face model path only here (Megatron-DeepSpeed's "
         "--ds-sequence-parallel-size is not written)", "MDS:megatron/core/parallel_state.py:145-148",
         lambda j: j.plan.cp > 1 and not _hf_path(j)),
    Rule("ulysses-heads", "Ulysses splits the {h} attention heads ({kv} K/V heads) over cp={cp}: they must divide "
         "by it (K/V heads may also divide it)", "DS:runtime/sequence_parallel/ulysses_sp.py UlyssesSPAttentionHF",
         lambda j: j.plan.cp > 1 and (j.model.num_heads % j.plan.cp != 0 or (
             j.model.num_kv_heads % j.plan.cp != 0 and j.plan.cp % j.model.num_kv_heads != 0)),
         detail=lambda j: {"h": j.model.num_heads, "kv": j.model.num_kv_heads, "cp": j.plan.cp}),
    Rule("pp-needs-zero01", "DeepSpeed's pipeline engine supports ZeRO stage 0-1 only, not stage {z}",
         "DS:runtime/pipe/engine.py:76-77 [assert]", lambda j: j.plan.pp > 1 and j.plan.zero_stage >= 2,
         detail=lambda j: {"z": j.plan.zero_stage}),
    Rule("no-interleaving", "DeepSpeed's pipeline engine has no interleaved (virtual-stage) schedule",
         "launcher_capabilities.md sec. 2 [absent]; MDS:megatron/training.py:674-686", lambda j: j.plan.vpp > 1),
    Rule("schedules", "DeepSpeed's pipeline engine runs 1F1B (TrainSchedule) only, not {s}",
         "DS:runtime/pipe/engine.py:501",
         # interleaved plans: the no-interleaving rule above says why
         lambda j: j.plan.pp > 1 and j.plan.schedule not in (*SCHEDULES, "interleaved"),
         detail=lambda j: {"s": j.plan.schedule}),
    Rule("no-stage-sizes", "DeepSpeed's pipeline engine partitions layers itself (partition_method), not to given "
         "first/last stage sizes", "DS:runtime/pipe/module.py:406-421; MDS:megatron/model/gpt_model.py:463",
         lambda j: j.uneven or j.plan.account_embedding_loss),
    Rule("even-pp-split", "{L} layers do not split evenly over pp={pp} (type:transformer partitioning)",
         "MDS:megatron/model/gpt_model.py:463", lambda j: j.plan.pp > 1 and j.model.num_layers % j.plan.pp != 0,
         detail=lambda j: {"L": j.model.num_layers, "pp": j.plan.pp}),
    Rule("no-hybrid-shard", "DeepSpeed shards ZeRO over all data-parallel ranks: its hybrid sharding (MiCS) was "
         "removed in 0.19, and ZeRO++ hpZ still shards optimizer states over every rank",
         "DS:runtime/zero/config.py (no mics_shard_size in 0.19.8)",
         lambda j: ParallelDims.of(j.plan).zero_replicas > 1),
    Rule("activation-offload", "DeepSpeed has no module-level activation offloading (Megatron's --offload-modules): "
         "its cpu_checkpointing moves the checkpointed layer inputs of full recompute",
         "DS:runtime/activation_checkpointing/config.py [absent]", lambda j: bool(j.plan.offload_modules)),
    Rule("offload-needs-zero", "DeepSpeed offloads the optimizer only with ZeRO stage >= 1",
         "DS:runtime/zero/offload_config.py:56", lambda j: j.plan.offload_optimizer and j.plan.zero_stage == 0),
    Rule("no-fp8", "ds_config has no FP8 training switch (FP8 GEMMs come from Transformer Engine in model code)",
         "launcher_capabilities.md sec. 2 [absent]", lambda j: j.train.dtype == "fp8"),
    Rule("partial-recompute", "Megatron-DeepSpeed's pipe model recomputes every layer (--checkpoint-activations); "
         "partial full recompute is not expressible", "MDS:megatron/model/gpt_model.py:446-452 (block ignored)",
         _partial_recompute),
    Rule("no-tp-overlap", "Megatron-DeepSpeed has no TP communication overlap",
         "MDS:megatron/arguments.py:395-399 [silent]", lambda j: j.plan.tp > 1 and j.plan.tp_comm_overlap),
    Rule("state-dtypes", "--grad-dtype / --optimizer-dtype are written for Megatron-LM only; DeepSpeed would train "
         "with its default gradient and Adam-state dtypes", "planner.emit.megatron", non_default_state_dtypes),
    Rule("alibi", "Megatron-DeepSpeed's GPT has no ALiBi position embedding here",
         "MDS:megatron/arguments.py _add_network_size_args", lambda j: j.model.position_embedding == "alibi"),
    Rule("parallel-block", "Megatron-DeepSpeed's GPT has no parallel attention+MLP block",
         "MDS:megatron/model/transformer.py ParallelTransformerLayer", lambda j: j.model.parallel_attn_mlp),
)

CAPABILITIES = Capabilities(
    launcher="deepspeed",
    version="deepspeed 0.19.8 + Megatron-DeepSpeed master 4efb479 (2025-07-16)",
    checked_against="deepspeed 0.19.8 DeepSpeedConfig (tests/consumers); "
                    "MDS flags read at 207b2d5 megatron/arguments.py",
    framework="deepspeed",
    hardware=("gpu",),
    schedules=SCHEDULES,
    zero_stages=(0, 1, 2, 3),  # 2-3 only with pp = 1
    cp_kinds=("a2a",),  # DeepSpeed-Ulysses on the Hugging Face model path
    expert_tp="none written (DeepSpeed-MoE: all-or-nothing = TP)",
    recompute=("none", "selective", "full"),
    offload="optimizer (stages 1-3), parameters (stage 3 only; not planned)",
    fp8_recipes=(),
    rank_order="pipe-data-model (TP innermost, PipelineModule topology)",
    rules=RULES,
)
