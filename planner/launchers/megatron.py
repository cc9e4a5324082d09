"""Megatron-LM / megatron-core: what it runs (rules read from core_v0.16.1, flags checked against 0.19.2).

Citations: MLM = NVIDIA/Megatron-LM@core_v0.16.1 (../shared/reference/launcher_capabilities.md sec. 1).
"""

from __future__ import annotations

from planner.launchers import Capabilities, Rule, contract_rule, is_tpu, microbatches
from planner.launchers.job import Job


def _interleaved_microbatches(job: Job) -> bool:
    p = job.plan
    return p.pp > 1 and p.vpp > 1 and microbatches(job) % p.pp != 0


_SCHEDULE_NAMES = {"gpipe": "GPipe", "zb": "zero-bubble", "dualpipe": "DualPipe", "dualpipev": "DualPipeV",
                   "1f1b": "1F1B", "interleaved": "interleaved"}

# the pipeline schedules it runs (Capabilities.schedules and the "schedules" rule read this one tuple)
SCHEDULES = ("1f1b", "interleaved")

RULES = (
    contract_rule("megatron"),
    Rule("gpu-only", "Megatron-LM runs on NVIDIA/AMD GPUs, not on {hw}", "MLM: CUDA/ROCm only (no XLA backend)",
         is_tpu, needs_cluster=True, detail=lambda j: {"hw": j.hw_id}),
    Rule("schedules", "Megatron-LM has no {s} schedule (it runs 1F1B, or interleaved 1F1B when vpp > 1)",
         "MLM:megatron/core/pipeline_parallel/schedules.py:45-150 get_forward_backward_func "
         "[absent: GPipe, ZB, DualPipe]",
         lambda j: j.plan.pp > 1 and j.plan.schedule not in SCHEDULES,
         detail=lambda j: {"s": _SCHEDULE_NAMES[j.plan.schedule]}),
    # no rule on the layer split: first/last stage sizes or even splits where those flags state them, any other split
    # (uneven stages, stages that do not divide into vpp) as --pipeline-model-parallel-layout (planner/emit/megatron.py
    # pipeline_layout; megatron-core 0.19.2 transformer/pipeline_parallel_layer_layout.py)
    Rule("interleaved-microbatches", "the interleaved schedule needs the micro-batch count divisible by pp",
         "MLM:megatron/core/pipeline_parallel/schedules.py:995-1015 [assert]", _interleaved_microbatches),
    Rule("fsdp-with-pp", "Megatron-FSDP (zero_stage 3) with pipeline parallelism",
         "MLM:docs/user-guide/features/custom_fsdp.md:23 lists TP, EP, CP only; every Megatron-FSDP functional "
         "test uses PP=1; NVIDIA/Megatron-LM#1455 open",
         lambda j: j.plan.zero_stage == 3 and j.plan.pp > 1, verified=False),
    Rule("no-zero2", "Megatron-LM has no ZeRO-2: its distributed optimizer shards the optimizer states, while the "
         "fp32 main-gradient buffers stay full size (ZeRO-1's memory); use --zero 1",
         "MLM:docs/user-guide/features/dist_optimizer.md (bf16 parameters, fp32 gradients: 6 + 12/d bytes per "
         "parameter); megatron/core/distributed/param_and_grad_buffer.py grad_data [doc]",
         lambda j: j.plan.zero_stage == 2),
    Rule("tp-comm-overlap-needs-sp", "--tp-comm-overlap needs sequence parallelism in Megatron-LM",
         "MLM:megatron/training/arguments.py:915-916 [assert]",
         lambda j: j.plan.tp > 1 and j.plan.tp_comm_overlap and not j.plan.sequence_parallel),
    Rule("shard-size-needs-distopt", "zero_shard_size needs ZeRO stage >= 1 in Megatron-LM (distributed optimizer "
         "instances)", "MLM:megatron/core/parallel_state.py:833-837",
         lambda j: (j.plan.zero_shard_size is not None and j.plan.zero_shard_size < j.plan.dp
                    and j.plan.zero_stage == 0)),
    Rule("offload-needs-distopt", "Megatron-LM offloads the optimizer only with the distributed optimizer "
         "(zero_stage >= 1)", "MLM:megatron/training/arguments.py:1189-1198; megatron/core/optimizer/"
         "optimizer_config.py:375-381 [assert]", lambda j: j.plan.offload_optimizer and j.plan.zero_stage < 1),
    Rule("low-precision-states-need-distopt", "bf16 Adam moments need the precision-aware distributed optimizer "
         "(zero_stage >= 1)", "MLM:megatron/core/optimizer/optimizer_config.py:414-426 [assert]",
         lambda j: j.train.optimizer_dtype == "bf16" and j.plan.zero_stage < 1),
    Rule("mxfp8-blackwell", "MXFP8 is Blackwell only ({hw} has no block-scaled MX tensor cores)",
         "MLM:megatron/core/transformer/transformer_config.py:436-442 [doc]",
         lambda j: j.train.fp8_recipe == "mxfp8" and not j.cluster.hardware.mx_tensor_cores, needs_cluster=True,
         detail=lambda j: {"hw": j.hw_id}),
    Rule("fp8-hardware", "{hw} has no FP8 tensor cores", "MLM:megatron/core/fp8_utils.py:552-590 (Transformer Engine)",
         lambda j: j.train.dtype == "fp8" and not j.fp8_in_hardware, needs_cluster=True,
         detail=lambda j: {"hw": j.hw_id}),
    Rule("experts-over-ep", "{E} experts do not split over ep={ep}", "MLM:megatron/training/arguments.py:1024-1029",
         lambda j: j.model.moe is not None and j.model.moe.num_experts % j.plan.ep != 0,
         detail=lambda j: {"E": j.model.require_moe().num_experts, "ep": j.plan.ep}),
    Rule("flex-needs-ep", "the flex MoE dispatcher needs expert TP x EP > 1 in Megatron-LM (etp={etp}, ep={ep})",
         "MLM:megatron/core/transformer/moe/token_dispatcher.py:1346 [assert] (tp_size there is the expert TP group's)",
         lambda j: (j.model.moe is not None and j.train.dispatcher == "flex" and max(1, j.plan.etp) * j.plan.ep <= 1),
         detail=lambda j: {"etp": max(1, j.plan.etp), "ep": j.plan.ep}),
    Rule("moe-bias-needs-etp1", "MoE experts with biases need expert TP 1 in Megatron-LM",
         "MLM:megatron/core/transformer/transformer_config.py:1587-1591 [assert]",
         lambda j: j.model.moe is not None and j.model.moe.expert_bias and j.plan.etp > 1),
    Rule("alibi", "Megatron-LM has no ALiBi position embedding",
         "MLM:megatron/training/arguments.py --position-embedding-type choices",
         lambda j: j.model.position_embedding == "alibi"),
    Rule("parallel-block", "Megatron-LM's GPT model has no parallel attention+MLP block",
         "MLM:megatron/core/transformer/transformer_layer.py (sequential attention then MLP)",
         lambda j: j.model.parallel_attn_mlp),
    Rule("uneven-needs-pp", "uneven first/last stage layers need pipeline parallelism",
         "MLM:megatron/core/transformer/transformer_config.py:1363-1432", lambda j: j.uneven and j.plan.pp < 2),
)

CAPABILITIES = Capabilities(
    launcher="megatron",
    version="megatron-core core_v0.16.1 (MLM tag, commit 55ac7082517c)",
    checked_against="megatron-core 0.19.2 parse_args + validate_args + TransformerConfig (tests/consumers)",
    framework="megatron",
    hardware=("gpu",),
    schedules=SCHEDULES,
    zero_stages=(0, 1, 3),  # 1: distributed optimizer (no ZeRO-2: rule no-zero2); 3: Megatron-FSDP (PP=1 only)
    cp_kinds=("ring", "a2a"),  # --cp-comm-type p2p / a2a (TE attention only)
    expert_tp="any etp (--expert-tensor-parallel-size); ep*etp divides tp*cp*dp",
    recompute=("none", "selective", "full"),  # full: uniform, or block for k layers per chunk
    offload="optimizer (--optimizer-cpu-offload, precision-aware distopt); no parameter offload",
    fp8_recipes=("delayed", "tensorwise", "blockwise", "mxfp8"),  # --fp8-recipe; mxfp8 on Blackwell
    rank_order="tp-cp-ep-dp-pp (TP innermost), expert grid etp-ep-edp-pp",
    rules=RULES,
)
