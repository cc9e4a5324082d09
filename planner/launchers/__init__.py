"""What each launcher can run, as data, one module per launcher, below the search and the emitters that both read it.

Each launcher module defines `CAPABILITIES`: the launcher version the rules were checked against, what it
offers (schedules, ZeRO/FSDP stages, CP kinds, expert TP, recompute, offload, FP8 recipes, rank order) and
`rules`, each a predicate over a plan with the one-line reason and the code that enforces it
(../shared/reference/launcher_capabilities.md). A combination the reference marks *unverified* is a rule
too (`verified=False`): it stays out of the searched space until a test with the real library shows it runs.

    launcher_errors(plan, model, training, launcher, cluster) -> list[str]   # empty: the launcher runs it

The emitters call `refuse(job, launcher)` before writing anything; the search (planner.search.engine) drops every
candidate for which `launcher_errors` is not empty when a target launcher is given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from planner.launchers.job import Job, Unsupported
from planner.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec
from planner.specs.training import Framework

# rule ids (shared by the launcher tables) that depend on the model, dtype or hardware only
PLAN_FREE_RULES = frozenset({"contract", "gpu-only", "registry", "decoder-block", "alibi", "parallel-block", "mla",
                             "moe", "sliding-window", "partial-bias", "no-fp16", "no-fp8", "state-dtypes",
                             "fp8-hardware", "fp8-recipe", "mxfp8-blackwell", "no-capacity", "gpu-flash-sinks"})


@dataclass(frozen=True)
class Rule:
    """One thing the launcher cannot run: `breaks(job)` is True when the plan/model/hardware does it."""

    id: str
    why: str  # one line; may hold {placeholders} filled from `detail(job)`
    source: str  # the code (or doc) that enforces it, as cited in launcher_capabilities.md
    breaks: Callable[[Job], bool]
    needs_cluster: bool = False  # reads the hardware (skipped when no cluster is given)
    verified: bool = True  # False: the reference marks the combination unverified; excluded all the same
    detail: Callable[[Job], dict] | None = None

    @property
    def plan_free(self) -> bool:
        """Holds whatever the plan: the launcher cannot run this model, dtype or hardware at all."""
        return self.id in PLAN_FREE_RULES

    def message(self, job: Job) -> str:
        text = self.why.format(**self.detail(job)) if self.detail else self.why
        return text + ("" if self.verified else " (unverified: excluded until a test with the real library runs it)")


@dataclass(frozen=True)
class Capabilities:
    launcher: str
    version: str  # the launcher release the rules were read from
    checked_against: str  # the installed release the emitted files are validated with (tests/consumers)
    framework: str  # planner TrainingSpec.framework whose memory/overlap behaviour this launcher has
    hardware: tuple[str, ...]  # "gpu", "tpu"
    schedules: tuple[str, ...]  # planner schedule names it can run (with pp > 1)
    zero_stages: tuple[int, ...]
    cp_kinds: tuple[str, ...]  # planner cp_comm values
    expert_tp: str
    recompute: tuple[str, ...]
    offload: str
    fp8_recipes: tuple[str, ...]
    rank_order: str
    rules: tuple[Rule, ...]
    search_defaults: dict = field(default_factory=dict)  # knobs the search pins for this launcher (a tuple: a range)


def _registry() -> dict[str, Capabilities]:
    from planner.launchers import deepspeed, maxtext, megatron, torchtitan

    return {c.launcher: c for c in (megatron.CAPABILITIES, deepspeed.CAPABILITIES, torchtitan.CAPABILITIES,
                                    maxtext.CAPABILITIES)}


TARGETS = ("megatron", "deepspeed", "torchtitan", "maxtext")


def capabilities(launcher: str) -> Capabilities:
    reg = _registry()
    if launcher not in reg:
        raise KeyError(f"unknown launcher {launcher!r}; choose from {', '.join(TARGETS)}")
    return reg[launcher]


@functools.cache
def _plan_rules(launcher: str) -> tuple[Rule, ...]:
    """The rules of `launcher` that read the plan (not Rule.plan_free), in table order."""
    return tuple(r for r in capabilities(launcher).rules if not r.plan_free)


def job_errors(job: Job, launcher: str, plan_rules_only: bool = False) -> list[str]:
    """Every rule of `launcher` the job breaks, as one-line messages (empty = the launcher runs it). plan_rules_only:
    only the rules that read the plan, for a caller that found model_errors empty for the job's model, training and
    cluster (the search, once for all its candidates)."""
    out = []
    for rule in (_plan_rules(launcher) if plan_rules_only else capabilities(launcher).rules):
        if rule.needs_cluster and job.cluster is None:
            continue
        if rule.breaks(job):
            msg = rule.message(job)
            if msg not in out:
                out.append(msg)
    return out


def launcher_errors(plan: ParallelPlan, model: ModelSpec, training: TrainingSpec, launcher: str,
                    cluster: ClusterSpec | None = None, plan_rules_only: bool = False) -> list[str]:
    """Why `launcher` cannot run this plan of this model (empty: it can). Hardware rules need `cluster`.
    plan_rules_only: as job_errors."""
    job = Job(model=model, cluster=cluster, train=training, plan=plan, notes=[])  # type: ignore[arg-type]
    return job_errors(job, launcher, plan_rules_only)


def model_errors(model: ModelSpec, training: TrainingSpec, launcher: str, cluster: ClusterSpec) -> list[str]:
    """The rules no plan can satisfy (model architecture, dtype, hardware): why the target cannot run at all."""
    job = Job(model=model, cluster=cluster, train=training, plan=ParallelPlan(), notes=[])
    return [r.message(job) for r in capabilities(launcher).rules if r.plan_free and r.breaks(job)]


def refuse(job: Job, launcher: str) -> None:
    """Raise Unsupported naming every broken rule on one line (the emitters' single gate)."""
    errs = job_errors(job, launcher)
    if errs:
        raise Unsupported("; ".join(errs))


def launchers_for(cluster: ClusterSpec) -> tuple[str, ...]:
    """The target launchers that run on this cluster's hardware."""
    kind = "tpu" if cluster.hardware.is_tpu else "gpu"
    return tuple(t for t in TARGETS if kind in capabilities(t).hardware)


def launcher_here(preferred: str, cluster: ClusterSpec) -> str | None:
    """`preferred` where it runs on the cluster's hardware, else the first launcher that does (MaxText on TPUs), else
    None: the one rule for which launcher stands in for a stack that cannot run here."""
    runs_here = launchers_for(cluster)
    return preferred if preferred in runs_here else (runs_here[0] if runs_here else None)


def stack_launcher(train: TrainingSpec, cluster: ClusterSpec) -> str | None:
    """The launcher that stands for the training's stack on this cluster: the stack's own where it runs here, else the
    first that does (launcher_here); None for a costing stack no launcher writes (NeMo AutoModel). The one answer
    `plan`'s search gate (planner.app.plan.modelled_launcher) and `plan validate`'s (analysis.validate.stack_search)
    read."""
    from planner.stacks import stack_of

    stack = stack_of(train)
    return launcher_here(stack.emitter, cluster) if stack.plannable else None


def default_framework(cluster: ClusterSpec) -> Framework:
    """The stack scored when neither --framework nor --launcher names one: the stack of launcher_here(Megatron-LM),
    so a TPU plan is costed with MaxText's, the stack validated on TPU runs and written by the launcher that gates
    its search (planner.app.plan.modelled_launcher)."""
    from planner.stacks import DEFAULT_FRAMEWORK, stack_of_emitter, traits

    here = launcher_here(traits(DEFAULT_FRAMEWORK).emitter, cluster)
    stack = stack_of_emitter(here) if here else None
    return cast("Framework", stack.framework) if stack else DEFAULT_FRAMEWORK


def contract_rule(launcher: str) -> Rule:
    """The launcher's architecture contract (planner.launchers.contract): refuse, naming every costed feature of the
    model (or training) that the launcher's release cannot express."""
    from planner.launchers.contract import CONTRACTS, missing_features

    return Rule("contract", "{L} cannot express {what} of {name}, which the plan was costed with",
                f"planner/launchers/contract.py ({CONTRACTS[launcher]['release']})",
                lambda j: bool(missing_features(j.model, j.train, launcher)),
                detail=lambda j: {"L": _LAUNCHER_NAMES[launcher], "name": j.model.name,
                                  "what": ", ".join(missing_features(j.model, j.train, launcher))})


_LAUNCHER_NAMES = {"megatron": "Megatron-LM", "deepspeed": "DeepSpeed", "maxtext": "MaxText",
                   "torchtitan": "torchtitan"}


# ---- predicates shared by several launchers' tables
def is_tpu(job: Job) -> bool:
    return job.is_tpu


def non_default_state_dtypes(job: Job) -> bool:
    return job.train.grad_dtype is not None or job.train.optimizer_dtype != "fp32"


def pipelined(job: Job) -> bool:
    return job.plan.pp > 1


def microbatches(job: Job) -> int:
    """Micro-batches per DP rank per step (Megatron's num_microbatches; ParallelDims owns it)."""
    return job.grad_accum
