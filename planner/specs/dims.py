"""One owner of every parallel degree, derived group size and divisibility rule of a plan (in the manner of
torchtitan's `ParallelDims` and Megatron-core's `ModelParallelConfig.__post_init__`). The search, the cost
model and every emitter read group sizes and rules from here.

Degrees (Megatron rank order tp -> cp -> ep/dp -> pp): world = tp * pp * cp * dp. ZeRO / FSDP shards the
dense model states over `zero_shard` ranks of the dp * cp group (all of it by default; HSDP when
`zero_shard_size` is smaller), and always over whole CP groups: torchtitan's FSDP mesh is
`dp_shard_cp` = dp_shard * cp (torchtitan/distributed/parallel_dims.py, build_mesh), Megatron's distributed
optimizer instances split the data-parallel-with-CP group, MaxText shards weights over its fsdp and context
axes. So zero_shard = dp_shard * cp, dp = dp_replicate * dp_shard (torchtitan: dp_replicate * dp_shard * cp
* tp * pp == world_size).

Rules (Megatron-core / torchtitan):
  tp * pp * cp * dp == devices;              ep * etp divides tp * cp * dp, experts % ep == 0
  heads % tp == 0; kv_heads % tp == 0 or tp % kv_heads == 0 (KV heads replicated)
  seq_len % (2 * cp) == 0 (load-balanced causal CP chunks); a2a CP needs heads % (tp * cp) == 0
  pp * vpp chunks each get a layer; the search proposes even splits (counting the embedding and loss
  as a layer each where that makes it even: Megatron --account-for-*-in-pipeline-split), first/last stage sizes
  with equal middle stages, and, where the stack states any split (Megatron --pipeline-model-parallel-layout,
  Stack.pipeline_layout_option), the default uneven one; a user-fixed uneven split is allowed
  global_batch % (dp * micro_batch) == 0
  zero_shard_size: a multiple of cp dividing dp * cp (whole CP groups, whole replicas)
  sequence parallelism only with tp > 1; interleaving only with pp > 1
A stack adds its own rules (planner/stacks/: Megatron's interleaved micro-batch count divisible by pp, stage sizes
divisible by vpp, embedding and loss units split over pp x vpp), read through `stack_of(train).plan_errors`.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs.model import ModelSpec
from planner.specs.plan import ParallelPlan
from planner.specs.training import TrainingSpec
from planner.stacks import stack_of


@dataclass(frozen=True)
class ParallelDims:
    """The degrees of a plan and the group sizes derived from them."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    zero_shard_size: int | None = None
    micro_batch: int = 1

    @classmethod
    def of(cls, plan: ParallelPlan) -> ParallelDims:
        return cls(plan.tp, plan.pp, plan.dp, plan.cp, plan.ep, plan.etp, plan.zero_shard_size, plan.micro_batch)

    @property
    def world(self) -> int:
        """Devices the plan runs on: tp * pp * cp * dp (torchtitan ParallelDims world_size)."""
        return self.tp * self.pp * self.cp * self.dp

    @property
    def samples_per_microbatch(self) -> int:
        """Sequences one micro-batch step takes over all data-parallel ranks: dp * micro_batch."""
        return self.dp * self.micro_batch

    def batch_divides(self, global_batch: int) -> bool:
        """The global batch splits into whole micro-batches on every data-parallel rank."""
        return global_batch % self.samples_per_microbatch == 0

    def local_batch(self, global_batch: int) -> int:
        """Sequences per data-parallel rank per step (torchtitan local_batch_size with PP): global_batch / dp."""
        return global_batch // self.dp

    def num_microbatches(self, global_batch: int) -> int:
        """Micro-batches per data-parallel rank per step: global_batch / (dp * micro_batch) (Megatron-core
        num_microbatches_calculator; DeepSpeed gradient_accumulation_steps). A batch that does not divide (which
        `batch_errors` reports) is rounded, at least 1, so the cost model can still score a published run."""
        return max(1, int(round(global_batch / self.samples_per_microbatch)))

    @property
    def dp_cp(self) -> int:
        """The data-parallel group with CP (Megatron), over which gradients are reduced."""
        return self.dp * self.cp

    @property
    def edp(self) -> int:
        """Expert-data-parallel size: replicas of each expert shard (Megatron: dp*cp*tp/(ep*etp))."""
        return max(1, (self.dp * self.cp * self.tp) // (self.ep * self.etp))

    @property
    def zero_shard(self) -> int:
        """Ranks ZeRO / FSDP shards the dense model states over (torchtitan dp_shard_cp)."""
        return self.zero_shard_size or self.dp * self.cp

    @property
    def expert_zero_shard(self) -> int:
        """Ranks the expert states are sharded over: the expert-data-parallel group, capped by zero_shard_size."""
        return min(self.zero_shard, self.edp) if self.zero_shard_size else self.edp

    @property
    def dp_shard(self) -> int:
        """Data-parallel ranks of one shard group, CP excluded (torchtitan data_parallel_shard_degree, MaxText
        fsdp axis)."""
        return self.zero_shard // self.cp

    @property
    def dp_replicate(self) -> int:
        """Replicas of the sharded states (HSDP; torchtitan data_parallel_replicate_degree)."""
        return self.dp // self.dp_shard

    @property
    def zero_replicas(self) -> int:
        """Shard groups in dp * cp (Megatron --num-distributed-optimizer-instances)."""
        return self.dp_cp // self.zero_shard

    def zero_shard_error(self) -> str | None:
        z = self.zero_shard_size
        if z is None or (z % self.cp == 0 and self.dp_cp % z == 0):
            return None
        return (f"zero_shard_size={z} must be a multiple of cp={self.cp} that divides dp*cp={self.dp_cp}: ZeRO/FSDP "
                "shards over whole context-parallel groups (torchtitan dp_shard*cp)")


# ---- the rules, each a small function returning one-line messages ----------------------------------------

def kv_heads_split(model: ModelSpec, tp: int) -> bool:
    """KV heads divide over TP ranks, or each is replicated over tp / kv_heads ranks."""
    return model.num_kv_heads % tp == 0 or tp % model.num_kv_heads == 0


def tp_splits_heads(model: ModelSpec, tp: int) -> bool:
    return model.num_heads % tp == 0 and kv_heads_split(model, tp)


def cp_splits_sequence(seq_len: int, cp: int) -> bool:
    """Load-balanced causal CP cuts the sequence into 2 cp chunks."""
    return cp == 1 or seq_len % (2 * cp) == 0


def size_errors(devices: int, p: ParallelPlan, dims: ParallelDims | None = None) -> list[str]:
    """`dims`: the plan's ParallelDims, when the caller has them."""
    world = (dims or ParallelDims.of(p)).world
    if world != devices:
        return [f"tp*pp*cp*dp = {p.tp}*{p.pp}*{p.cp}*{p.dp} = {world}, not the {devices} devices"]
    return []


def _tensor_context_errors(model: ModelSpec, train: TrainingSpec, p: ParallelPlan) -> list[str]:
    errs = []
    if model.num_heads % p.tp:
        errs.append(f"{model.num_heads} attention heads do not split over tp={p.tp}")
    if not kv_heads_split(model, p.tp):
        errs.append(f"{model.num_kv_heads} KV heads neither divide nor are divisible by tp={p.tp}")
    if not cp_splits_sequence(train.seq_len, p.cp):
        errs.append(f"seq_len {train.seq_len} is not divisible by 2*cp={2 * p.cp}")
    if p.cp > 1 and p.cp_comm == "a2a" and model.num_heads % (p.tp * p.cp):
        errs.append(f"all-to-all CP needs heads ({model.num_heads}) divisible by tp*cp={p.tp * p.cp}")
    return errs


def v_split_counts_embedding_loss(num_layers: int, pp: int) -> bool | None:
    """The V split the planner proposes for DualPipeV: the layers evenly over 2 pp stages (False), else the layers
    with the embedding and the loss counted as a layer each (True), else None (no even V split)."""
    if num_layers % (2 * pp) == 0:
        return False
    return True if (num_layers + 2) % (2 * pp) == 0 else None


def _pipeline_errors(model: ModelSpec, p: ParallelPlan) -> list[str]:
    errs = []
    if p.pp > model.num_layers:
        errs.append(f"pp={p.pp} exceeds the {model.num_layers} layers")
    if p.vpp > 1 and p.pp == 1:
        errs.append("virtual pipeline stages (vpp > 1) need pp > 1")
    if p.schedule == "interleaved" and p.vpp == 1 and p.pp > 1:
        errs.append("the interleaved schedule needs vpp > 1")
    if p.schedule == "dualpipev" and p.pp > 1:
        # DualPipeV holds exactly two stages per rank in a V (torch 2.13 pipelining ScheduleDualPipeV: "requires
        # exactly 2 stages per rank"), an equal number of layers each (the cost model places no uneven V split)
        if p.vpp != 2:
            errs.append("the dualpipev schedule runs two stages per rank: vpp must be 2")
        units = model.num_layers + (2 if p.account_embedding_loss else 0)  # + the embedding and the loss as layers
        if units % (2 * p.pp):
            what = "layers + the embedding and the loss" if p.account_embedding_loss else "layers"
            errs.append(f"dualpipev splits the {units} {what} into 2*pp={2 * p.pp} equal stages")
        if p.first_stage_layers is not None or p.last_stage_layers is not None:
            errs.append("dualpipev takes no first/last stage sizes (its first and last stages share rank 0)")
    elif p.vpp > 1 and p.schedule != "interleaved":
        errs.append("vpp > 1 needs the interleaved schedule")
    return errs


def _stage_split_errors(model: ModelSpec, p: ParallelPlan) -> list[str]:
    first, last = p.first_stage_layers, p.last_stage_layers
    if first is None and last is None:
        if p.pp * p.vpp > model.num_layers + 2:
            return [f"{model.num_layers} layers cannot fill pp*vpp={p.pp * p.vpp} pipeline chunks"]
        return []
    fixed = (first or 0) + (last or 0)
    free = p.pp - (first is not None) - (last is not None)
    rest = model.num_layers - fixed
    if rest < 0 or (free and rest % free) or (not free and rest):
        return [f"uneven stages first={first} last={last} do not split {model.num_layers} layers over pp={p.pp}"]
    return []


def _embedding_loss_errors(model: ModelSpec, p: ParallelPlan) -> list[str]:
    if p.account_embedding_loss and (p.first_stage_layers is not None or p.last_stage_layers is not None):
        return ["account_embedding_loss and first/last stage sizes are exclusive"]
    return []


def batch_errors(train: TrainingSpec, p: ParallelPlan, dims: ParallelDims | None = None) -> list[str]:
    """`dims`: the plan's ParallelDims, when the caller has them."""
    dims = dims or ParallelDims.of(p)
    if not dims.batch_divides(train.global_batch):
        return [f"global batch {train.global_batch} is not divisible by dp*micro_batch={dims.samples_per_microbatch}"]
    return []


def expert_errors(model: ModelSpec, p: ParallelPlan) -> list[str]:
    if model.moe is None:
        return ["ep/etp > 1 need a mixture-of-experts model"] if p.ep > 1 or p.etp > 1 else []
    errs = []
    if model.moe.num_experts % p.ep:
        errs.append(f"{model.moe.num_experts} experts do not split over ep={p.ep}")
    if (p.tp * p.cp * p.dp) % (p.ep * p.etp):
        errs.append(f"ep*etp={p.ep * p.etp} does not divide tp*cp*dp={p.tp * p.cp * p.dp}")
    if p.etp > 1 and model.moe.expert_ffn_hidden_size % p.etp:
        errs.append(f"expert FFN width {model.moe.expert_ffn_hidden_size} does not split over etp={p.etp}")
    return errs


def plan_errors(model: ModelSpec, train: TrainingSpec, devices: int, p: ParallelPlan) -> list[str]:
    """Every rule the plan breaks, as one-line messages (empty = valid)."""
    dims = ParallelDims.of(p)
    zero = dims.zero_shard_error()
    return [
        *size_errors(devices, p, dims),
        *_tensor_context_errors(model, train, p),
        *_pipeline_errors(model, p),
        *_stage_split_errors(model, p),
        *_embedding_loss_errors(model, p),
        *stack_of(train).plan_errors(model, train, p),  # the stack's own rules (planner/stacks/)
        *batch_errors(train, p, dims),
        *expert_errors(model, p),
        *([zero] if zero else []),
        *([f"zero_shard_size={p.zero_shard_size} needs ZeRO (zero_stage >= 1): with zero_stage 0 nothing is sharded"]
          if p.zero_shard_size is not None and p.zero_stage == 0 else []),
        *(["recompute_layers applies only to full recompute"]
          if p.recompute_layers is not None and p.recompute != "full" else []),
        *([f"recompute_layers={p.recompute_layers} is more than the model's {model.num_layers} layers: give at most "
           "the layers of a pipeline stage"] if (p.recompute_layers or 0) > model.num_layers else []),
        *_custom_remat_errors(train, p),
        *_recompute_modules_errors(train, p),
        *_offload_modules_errors(train, p),
    ]


def _offload_modules_errors(train: TrainingSpec, p: ParallelPlan) -> list[str]:
    """Offloaded modules are Megatron's fine-grained activation offloading (--offload-modules); the stack's rules say
    which modules it runs (planner.stacks.rules.offload_modules_runnable)."""
    if p.offload_modules and not stack_of(train).activation_offload_modules:
        return [f"offloaded modules (--offload-modules) are Megatron's fine-grained activation offloading; "
                f"{train.framework} has none"]
    return []


def _recompute_modules_errors(train: TrainingSpec, p: ParallelPlan) -> list[str]:
    """Named recompute modules are Megatron's --recompute-modules, a form of its selective recompute (the stack's
    rules say which modules it runs: planner.stacks.rules.recompute_modules_runnable)."""
    if not p.recompute_modules:
        return []
    if stack_of(train).selective_recomputes != "modules":
        return [f"recompute modules (--recompute-modules) are Megatron's; {train.framework}'s selective recompute "
                "has its own set"]
    if p.recompute != "selective":
        return [f"recompute modules (--recompute-modules) go with selective recompute, not recompute {p.recompute}"]
    return []


def _custom_remat_errors(train: TrainingSpec, p: ParallelPlan) -> list[str]:
    """A custom remat policy (named tensors kept / offloaded) is MaxText's remat_policy 'custom', a form of its
    selective recompute (MT:configs/base.yml)."""
    if not (p.remat_offloaded or p.remat_device):
        return []
    if not stack_of(train).custom_remat_option:
        return [f"a custom remat policy (--remat-offload / --remat-device) is MaxText's; {train.framework} has none"]
    if p.recompute != "selective":
        return [f"a custom remat policy (--remat-offload / --remat-device) is a form of selective recompute, not "
                f"of recompute {p.recompute}"]
    return []
