"""Shared helpers of the launch-config emitters: plan checks, batch arithmetic, hardware facts."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from planner.errors import InputError
from planner.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec
from planner.specs.dims import ParallelDims, batch_errors, expert_errors, size_errors


class Unsupported(Exception):
    """The launcher cannot express this plan; `str(self)` says why in one line."""


@dataclass(frozen=True)
class Job:
    """Everything an emitter reads, plus the derived numbers every launcher needs."""

    model: ModelSpec
    cluster: ClusterSpec
    train: TrainingSpec
    plan: ParallelPlan
    notes: list[str] = field(default_factory=list)  # what an emitter mapped approximately

    @property
    def hw_id(self) -> str:
        return self.cluster.hardware.id

    @property
    def world(self) -> int:
        return self.cluster.count

    @property
    def nodes(self) -> int:
        return max(1, self.cluster.count // min(self.cluster.node_size, self.cluster.count))

    @property
    def procs_per_node(self) -> int:
        return min(self.cluster.node_size, self.cluster.count)

    @property
    def grad_accum(self) -> int:
        """Micro-batches per DP rank per optimizer step (Megatron's num_microbatches; ParallelDims owns it)."""
        return ParallelDims.of(self.plan).num_microbatches(self.train.global_batch)

    @property
    def is_tpu(self) -> bool:
        return self.cluster.hardware.is_tpu

    @property
    def is_gpu(self) -> bool:
        return not self.is_tpu

    @property
    def blackwell_or_later(self) -> bool:
        """Megatron drops the CUDA_DEVICE_MAX_CONNECTIONS=1 requirement from compute capability 10."""
        head = self.hw_id.split("-")[0].lower()
        return head in {"b100", "b200", "b300", "gb200", "gb300"}

    @property
    def fp8_in_hardware(self) -> bool:
        return self.cluster.hardware.peak_tflops.fp8 is not None

    @property
    def layers_per_stage(self) -> int | None:
        """Transformer layers per pipeline rank when the split is even, else None."""
        p = self.plan
        if p.first_stage_layers is not None or p.last_stage_layers is not None:
            return None
        if self.model.num_layers % p.pp:
            return None
        return self.model.num_layers // p.pp

    @property
    def uneven(self) -> bool:
        return self.plan.first_stage_layers is not None or self.plan.last_stage_layers is not None

    def note(self, text: str) -> None:
        self.notes.append(text)


def make_job(model: ModelSpec, cluster: ClusterSpec, train: TrainingSpec, plan: ParallelPlan) -> Job:
    """Check the plan is internally consistent for this cluster and batch (the rules of planner.specs.dims:
    devices, batch, ZeRO shard group, experts); raise InputError with the first broken one."""
    zero_error = ParallelDims.of(plan).zero_shard_error()
    errs = [*size_errors(cluster.count, plan), *batch_errors(train, plan), *([zero_error] if zero_error else []),
            *expert_errors(model, plan)]
    if errs:
        raise InputError(errs[0])
    return Job(model=model, cluster=cluster, train=train, plan=plan, notes=[])


def dumps(obj) -> str:
    """Stable JSON text: 2-space indent, keys in insertion order, trailing newline; NaN/Infinity refused
    (they are not JSON: a launcher's parser would reject the file)."""
    return json.dumps(obj, indent=2, default=float, allow_nan=False) + "\n"


def torchrun_tail(job: Job, master_port: int, entry: str, args: list[str]) -> list[str]:
    """The end of a launch script: torchrun over the job's nodes (NODE_RANK / MASTER_ADDR / MASTER_PORT from the
    environment), `entry` (a script or `-m module`), the planned arguments, then those given to the script."""
    out = ["exec torchrun \\",
           f"  --nnodes {job.nodes} --nproc-per-node {job.procs_per_node} \\",
           '  --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" '
           f'--master-port "${{MASTER_PORT:-{master_port}}}" \\',
           f"  {entry} \\"]
    return out + [f"  {line} \\" for line in arg_lines(args)] + ['  "$@"']


def arg_lines(args: list[str]) -> list[str]:
    """Group argv into one shell-quoted `--flag [value...]` per line (for launch scripts)."""
    lines: list[list[str]] = []
    for tok in args:
        if tok.startswith("--") or not lines:
            lines.append([tok])
        else:
            lines[-1].append(tok)
    return [" ".join(shlex.quote(x) for x in line) for line in lines]


def cluster_name(cluster: ClusterSpec) -> str:
    return cluster.name or f"{cluster.hardware.id}x{cluster.count}"


def moe_layer_pattern(model: ModelSpec) -> list[int]:
    """1 for an MoE layer, 0 for a dense one, per layer (HF first_k_dense/layer_freq rule)."""
    return [1 if model.is_moe_layer(i) else 0 for i in range(model.num_layers)]


def run_length_expr(bits: list[int]) -> str:
    """Megatron's `--moe-layer-freq` list expression, e.g. `([0]*3+[1]*58)`."""
    runs: list[tuple[int, int]] = []
    for b in bits:
        if runs and runs[-1][0] == b:
            runs[-1] = (b, runs[-1][1] + 1)
        else:
            runs.append((b, 1))
    return "(" + "+".join(f"[{b}]*{n}" for b, n in runs) + ")"
