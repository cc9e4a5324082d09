"""The optimizer step: memory-bound Adam over the local shard of the parameters, or, offloaded, the
gradient and parameter transfers over PCIe (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840, sec. 4)."""

from __future__ import annotations

from planner.costmodel import calibration as cal
from planner.costmodel.base import PARAM_GATHER_BYTES, Context, Shape
from planner.costmodel.memory import StageParams, grad_bytes_per_param, state_bytes_per_param
from planner.costmodel.trace import Term, formula
from planner.specs.dims import ParallelDims

# Adam step bytes per parameter: read and write the fp32 master weight, m and v (24), read the gradient
# (4), write the bf16 parameter (2): ~30 (ZeRO paper sec. 3.1 states; memory-bound).
ADAM_BYTES_PER_PARAM = 30.0

OPTIMIZER = formula(
    "optimizer.adam",
    "local params x 30 B / HBM bandwidth (Adam reads and writes master, m, v; reads grads; writes bf16 params)",
    "Adam (Kingma & Ba 2015); state bytes per ZeRO, SC20, arXiv 1910.02054, sec. 3.1",
)
OPTIMIZER_OFFLOAD = formula(
    "optimizer.offload",
    "host params / CPU-Adam rate + local params x (grad bytes + 2 B) / PCIe: the GPUs of a host share its CPUs "
    "and memory (host params = local params x GPUs per host); gradients cross PCIe to the host, bf16 "
    "parameters back, each GPU over its own x16 link",
    "ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840, sec. 4 and Table 3 (CPU-Adam); PCIe rates: "
    "calibration.PCIE_UNIDIR_GBPS; CPU-Adam rate: calibration.CPU_ADAM_PARAMS_PER_S_PER_HOST",
)


def local_params(dims: ParallelDims, params: StageParams, slow: int, optimizer_sharded: bool) -> float:
    """Parameters whose optimizer state one device of the slowest stage updates."""
    z_dense, z_expert = dims.zero_shard, dims.expert_zero_shard
    return (params.dense[slow] / (z_dense if optimizer_sharded else 1)
            + params.experts[slow] / (z_expert if optimizer_sharded else 1))


def optimizer_term(ctx: Context, shape: Shape, params: StageParams, slow: int) -> Term:
    p, hw = shape.plan, ctx.cluster.hardware
    st = state_bytes_per_param(ctx.train, p.zero_stage, p.offload_optimizer)
    n = local_params(shape.dims, params, slow, st.optimizer_sharded)
    if p.offload_optimizer:
        gen = "gen4" if hw.id.startswith("a100") else "gen5"
        grad_bytes = grad_bytes_per_param(ctx.train)
        bw = cal.PCIE_UNIDIR_GBPS[gen] * 1e9
        per_host = min(ctx.cluster.node_size, p.devices)
        t_cpu = n * per_host / cal.CPU_ADAM_PARAMS_PER_S_PER_HOST
        t_pcie = n * (grad_bytes + PARAM_GATHER_BYTES) / bw
        return OPTIMIZER_OFFLOAD.term("optimizer_s", t_cpu + t_pcie, "s", local_params=n, gpus_per_host=per_host,
                                      cpu_adam_params_per_s=cal.CPU_ADAM_PARAMS_PER_S_PER_HOST, cpu_adam_s=t_cpu,
                                      bytes_per_param=grad_bytes + PARAM_GATHER_BYTES, pcie=gen,
                                      bandwidth_GBps=bw / 1e9, pcie_s=t_pcie)
    return OPTIMIZER.term("optimizer_s", n * ADAM_BYTES_PER_PARAM / ctx.hbm_bw, "s", local_params=n,
                          bytes_per_param=ADAM_BYTES_PER_PARAM, bandwidth_GBps=ctx.hbm_bw / 1e9)
