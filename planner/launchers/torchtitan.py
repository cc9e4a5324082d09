"""torchtitan 0.3.0 (PyPI wheel) on torch 2.13.0 pipelining.

Citations: TT = torchtitan 0.3.0:torchtitan/, TORCH = torch 2.13.0 pipelining schedules.py
(launcher_capabilities.md sec. 3).
"""

from __future__ import annotations

from dataclasses import replace

from planner.launchers import Capabilities, Rule, contract_rule, is_tpu, microbatches, non_default_state_dtypes
from planner.launchers.job import Job, Unsupported
from planner.launchers.torchtitan_registry import registry_config, stage_split
from planner.specs.dims import ParallelDims


def _no_registry_config(job: Job) -> bool:
    try:
        registry_config(replace(job, notes=[]))  # a probe: its notes are not the emitter's
    except Unsupported:
        return True
    return False


def _registry_reason(job: Job) -> dict:
    try:
        registry_config(replace(job, notes=[]))
    except Unsupported as e:
        return {"why": str(e)}
    return {"why": ""}


def _stage_split_impossible(job: Job) -> bool:
    if job.plan.pp == 1:
        return False
    try:
        stage_split(replace(job, notes=[]))
    except Unsupported:
        return True
    return False


def _ep_not_from_shard(job: Job) -> bool:
    p = job.plan
    if job.model.moe is None or p.ep == 1:
        return False
    shard = 1 if p.zero_stage == 0 else ParallelDims.of(p).dp_shard
    return (shard * p.cp * p.tp) % p.ep != 0


def _schedule_stages(job: Job) -> bool:
    """Stages per rank: single-stage schedules 1, interleaved >= 2, ZBV and DualPipeV exactly 2 (GPipe not
    interleaved); DeepSeek's bidirectional DualPipe is not among torch's schedules."""
    p = job.plan
    if p.pp == 1:
        return False
    if p.schedule == "zb":
        return p.vpp < 2
    if p.schedule == "dualpipev":
        return p.vpp != 2
    if p.schedule == "gpipe":
        return p.vpp > 1
    return p.schedule == "dualpipe"


def _1f1b_microbatches(job: Job) -> bool:
    p = job.plan
    if p.pp == 1:
        return False
    n = microbatches(job)
    if p.schedule == "dualpipev":
        return n < p.pp * p.vpp  # ScheduleDualPipeV: at least as many micro-batches as stages
    if p.vpp == 1:
        return p.schedule == "1f1b" and n < p.pp
    rounds = max(1, n // p.pp)
    return n % rounds != 0


RULES = (
    contract_rule("torchtitan"),
    Rule("gpu-only", "torchtitan runs on GPUs, not on {hw}", "TT: CUDA/ROCm (torch.distributed NCCL)",
         is_tpu, needs_cluster=True, detail=lambda j: {"hw": j.hw_id}),
    Rule("no-fp16", "torchtitan trains in bf16 or fp32 (mixed_precision_param), not fp16",
         "TT:config/configs.py:78-95", lambda j: j.train.dtype == "fp16"),
    Rule("registry", "{why}", "TT:models/*/config_registry.py (the model comes from a registry function)",
         _no_registry_config, detail=_registry_reason),
    Rule("whole-block-ac", "torchtitan 0.3.0's full activation checkpointing wraps every transformer block: full "
         "recompute of {k} of the {n} layers per stage has no equivalent",
         "TT:distributed/activation_checkpoint.py:152-183 (ActivationCheckpointing.apply, FullAC)",
         lambda j: j.partial_full_recompute, detail=lambda j: {"k": j.plan.recompute_layers, "n": j.max_stage_layers}),
    Rule("no-expert-tp", "torchtitan 0.3.0 has no expert tensor parallelism (experts are split by ep and sharded "
         "by FSDP only)", "TT:models/common/moe_sharding.py:29-47 [absent]",
         lambda j: j.model.moe is not None and j.plan.etp > 1),
    Rule("no-capacity", "torchtitan 0.3.0's MoE is dropless (token groups aligned, no expert capacity); drop "
         "--moe-capacity-factor", "TT:models/common/moe.py [absent: capacity only for HybridEP buffers]",
         lambda j: j.model.moe is not None and j.train.moe_capacity_factor is not None),
    Rule("no-ulysses",
         "torchtitan's context parallelism is ring attention only (K/V exchange), not all-to-all (Ulysses)",
         "TT:distributed/context_parallel/api.py:58-100 [absent]", lambda j: j.plan.cp > 1 and j.plan.cp_comm == "a2a"),
    Rule("uneven-with-vpp", "torchtitan 0.3.0 cannot give first/last stage sizes with virtual stages",
         "TT:distributed/pipeline_parallel.py:400-427", lambda j: j.uneven and j.plan.vpp > 1),
    Rule("stage-split", "the layers do not split into torchtitan's pipeline stages (first/last may only be smaller)",
         "TT:distributed/pipeline_parallel.py:400-427 [assert]", _stage_split_impossible),
    Rule("schedule-stages", "schedule {s} with vpp={v} has the wrong number of stages per rank",
         "TT:distributed/pipeline_parallel.py:219-262; TORCH:3249-3253 [assert]", _schedule_stages,
         detail=lambda j: {"s": j.plan.schedule, "v": j.plan.vpp}),
    Rule("microbatches", "too few or uneven pipeline micro-batches for the schedule",
         "TORCH:1020-1024 (1F1B n_mb >= pp), 2935-2942 (interleaved n_mb % rounds), ScheduleDualPipeV "
         "(n_mb >= stages) [assert]", _1f1b_microbatches),
    Rule("loss-chunks", "torchtitan's chunked loss splits the sequence into --loss-chunks slices: {n} does not "
         "divide seq_len {s}", "TT:components/loss.py ChunkedLossWrapper (seq_len % num_chunks == 0) [assert]",
         lambda j: j.train.seq_len % j.train.loss_chunks != 0,
         detail=lambda j: {"n": j.train.loss_chunks, "s": j.train.seq_len}),
    Rule("activation-offload", "torchtitan 0.3.0 has no module-level activation offloading (Megatron's "
         "--offload-modules): its activation checkpointing recomputes, it does not move tensors to the host",
         "TT:distributed/activation_checkpoint.py [absent]", lambda j: bool(j.plan.offload_modules)),
    Rule("optimizer-offload", "torchtitan offloads parameters, gradients and optimizer states together "
         "(training.enable_cpu_offload), not the optimizer alone", "TT:distributed/fsdp.py CPUOffloadPolicy",
         lambda j: j.plan.offload_optimizer),
    Rule("ep-from-shard", "torchtitan borrows expert parallelism from dp_shard*cp*tp, which ep does not divide",
         "TT:distributed/parallel_dims.py:279, 391-420 [assert]", _ep_not_from_shard),
    Rule("tp-overlap-needs-compile", "async TP (TP communication overlap) needs torch.compile: add --compile",
         "TT:config/configs.py:303-310 [assert]",
         lambda j: j.plan.tp > 1 and j.plan.tp_comm_overlap and not j.train.torch_compile),
    Rule("state-dtypes", "--grad-dtype / --optimizer-dtype are written for Megatron-LM only; torchtitan would train "
         "with its default gradient and Adam-state dtypes", "TT:config/configs.py:78-95 (reduce in fp32 only)",
         non_default_state_dtypes),
    Rule("fp8-recipe", "torchtitan 0.3.0 sets its Float8 recipe in config_registry functions (rowwise), not on the "
         "command line: drop --fp8-recipe", "TT:components/quantization/float8.py:58 (Float8LinearConfig recipe)",
         lambda j: j.train.fp8_recipe is not None),
    Rule("fp8-hardware", "Float8 needs SM89+ ({hw} has no FP8)", "TT:components/quantization/float8.py:86-97 [assert]",
         lambda j: j.train.dtype == "fp8" and not j.fp8_in_hardware, needs_cluster=True,
         detail=lambda j: {"hw": j.hw_id}),
)

CAPABILITIES = Capabilities(
    launcher="torchtitan",
    version="torchtitan 0.3.0 (PyPI wheel), torch 2.13.0 pipelining",
    checked_against="torchtitan 0.3.0 ConfigManager + ParallelDims + pipeline split (tests/consumers)",
    framework="fsdp",
    hardware=("gpu",),
    schedules=("1f1b", "interleaved", "gpipe", "zb", "dualpipev"),
    zero_stages=(0, 1, 2, 3),  # FSDP2: 1-2 as reshard_after_forward=never (ZeRO-2), 3 full shard; HSDP
    cp_kinds=("ring",),  # K/V all-gather (Flex) or SDPA dispatcher
    expert_tp="none (0.3.0)",
    recompute=("none", "selective", "full"),  # every block (rule whole-block-ac)
    offload="parameters+gradients+optimizer together only (not planned)",
    fp8_recipes=("rowwise",),  # through the registry's Float8 config functions
    rank_order="pp -> dp_replicate -> dp_shard -> cp -> tp (tp innermost); sparse pp -> dp_replicate -> efsdp -> ep",
    rules=RULES,
    # the schedules its pipelines are searched over (a range, not a pin): the default 1F1B / interleaved and
    # DualPipeV (torch 2.13 ScheduleDualPipeV, parallelism.pipeline_parallel_schedule DualPipeV)
    search_defaults={"schedule": ("1f1b", "interleaved", "dualpipev")},
)
