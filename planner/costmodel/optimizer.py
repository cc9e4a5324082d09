"""The optimizer step: memory-bound Adam over the local shard of the parameters, or, offloaded, the
gradient and parameter transfers over PCIe (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840, sec. 4)."""

from __future__ import annotations

from planner.costmodel.base import PARAM_GATHER_BYTES, Context, Shape
from planner.costmodel.memory import StageParams, StateBytesPerParam, grad_bytes_per_param, state_bytes_per_param
from planner.costmodel.trace import Term, formula
from planner.specs.dims import ParallelDims


def adam_bytes_per_param(st: StateBytesPerParam) -> float:
    """HBM bytes one Adam step moves per parameter (memory-bound; ZeRO, SC20, arXiv 1910.02054, sec. 3.1 states):
    read and write the fp32 master (2 x 4) and both moments (2 x the moments' bytes), read the stored gradient,
    write the 2-byte compute copy. fp32 moments and fp32 gradients: 8 + 16 + 4 + 2 = 30 B."""
    master_in_optimizer = st.weights < 4.0  # bf16 weights (Megatron, DeepSpeed): the fp32 master is optimizer state
    moments = st.optimizer - (4.0 if master_in_optimizer else 0.0)  # m and v in optimizer_dtype
    return 2 * 4.0 + 2 * moments + st.grads + 2.0

OPTIMIZER = formula(
    "optimizer.adam",
    "local params x (2 x 4 + 2 x moment bytes + grad bytes + 2) B / HBM bandwidth (Adam reads and writes the "
    "fp32 master, m, v; reads grads; writes bf16 params: 30 B with fp32 moments and grads)",
    "Adam (Kingma & Ba 2015); state bytes per ZeRO, SC20, arXiv 1910.02054, sec. 3.1",
)
OPTIMIZER_AND_OVERHEAD = formula(
    "optimizer.adam_and_overhead",
    "local params x Adam bytes / HBM bandwidth + the fixed per-step overhead of a calibrated profile (data loading, "
    "logging, host syncs: everything a step costs that does not scale with the model)",
    "Adam as above; step_overhead_s fitted by plan calibrate (docs/calibrate.md)",
)
OPTIMIZER_OFFLOAD = formula(
    "optimizer.offload",
    "host params / CPU-Adam rate + local params x (grad bytes + 2 B) / host link: the GPUs of a host share its "
    "CPUs and memory (host params = local params x GPUs per host); gradients cross the host link, bf16 "
    "parameters come back, each GPU over its own link",
    "ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840, sec. 4 and Table 3 (CPU-Adam); host link: the hardware "
    "profile's host_link_unidir_GBps; CPU-Adam rate: calibration.CPU_ADAM_PARAMS_PER_S_PER_HOST",
)


def local_params(dims: ParallelDims, params: StageParams, slow: int, optimizer_sharded: bool) -> float:
    """Parameters whose optimizer state one device of the slowest stage updates."""
    z_dense, z_expert = dims.zero_shard, dims.expert_zero_shard
    return (params.dense[slow] / (z_dense if optimizer_sharded else 1)
            + params.experts[slow] / (z_expert if optimizer_sharded else 1))


def optimizer_term(ctx: Context, shape: Shape, params: StageParams, slow: int) -> Term:
    p = shape.plan
    st = state_bytes_per_param(ctx.train, p.zero_stage, p.offload_optimizer)
    n = local_params(shape.dims, params, slow, st.optimizer_sharded)
    if p.offload_optimizer:
        grad_bytes = grad_bytes_per_param(ctx.train)
        bw = ctx.host_link_bw
        per_host = min(ctx.cluster.node_size, p.devices)
        rate = ctx.calibration.CPU_ADAM_PARAMS_PER_S_PER_HOST
        t_cpu = n * per_host / rate
        t_link = n * (grad_bytes + PARAM_GATHER_BYTES) / bw
        return OPTIMIZER_OFFLOAD.term("optimizer_s", t_cpu + t_link, "s", local_params=n, gpus_per_host=per_host,
                                      cpu_adam_params_per_s=rate, cpu_adam_s=t_cpu,
                                      bytes_per_param=grad_bytes + PARAM_GATHER_BYTES,
                                      bandwidth_GBps=bw / 1e9, host_link_s=t_link)
    adam = adam_bytes_per_param(st)
    if ctx.step_overhead_s > 0:  # a fixed per-step overhead fitted by `plan calibrate` rides with this term
        return OPTIMIZER_AND_OVERHEAD.term(
            "optimizer_s", n * adam / ctx.hbm_bw + ctx.step_overhead_s, "s", local_params=n,
            bytes_per_param=adam, bandwidth_GBps=ctx.hbm_bw / 1e9, step_overhead_s=ctx.step_overhead_s)
    return OPTIMIZER.term("optimizer_s", n * adam / ctx.hbm_bw, "s", local_params=n,
                          bytes_per_param=adam, bandwidth_GBps=ctx.hbm_bw / 1e9)
