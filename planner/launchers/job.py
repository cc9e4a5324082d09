"""The job a launcher's rules and emitters read: a (model, cluster, training, plan) with the derived numbers every
launcher needs, and `Unsupported`, raised when the launcher cannot express the plan."""

from __future__ import annotations

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
    def max_stage_layers(self) -> int:
        """Transformer layers of the pipeline rank that holds the most, as the cost model splits them
        (partition.stage_layer_counts with the plan's first/last rank sizes)."""
        from planner.costmodel.pipeline import fullest_rank_layers

        return fullest_rank_layers(self.plan, self.model.num_layers)

    @property
    def partial_full_recompute(self) -> bool:
        """Full recompute of fewer layers than the fullest pipeline rank holds (recompute_layers k: each rank
        recomputes min(k, its layers)), which a launcher whose recompute covers every layer cannot write."""
        p = self.plan
        return p.recompute == "full" and p.recompute_layers is not None and p.recompute_layers < self.max_stage_layers

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
