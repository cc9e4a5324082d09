"""Training stacks as data: one module per stack (megatron, deepspeed, torchtitan, maxtext, automodel), each one frozen
`Stack` table of cost traits, search defaults and plan rules (planner.stacks.base). The cost model and the search
read a stack's behaviour through `stack_of(train)` / `traits(framework)`, never by comparing its name.

Adding a stack: docs/architecture.md ("Adding a stack").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from planner.stacks import automodel, deepspeed, maxtext, megatron, torchtitan
from planner.stacks.base import PlanRule, Stack

if TYPE_CHECKING:
    from planner.specs.training import TrainingSpec

STACKS: dict[str, Stack] = {s.framework: s for s in (megatron.STACK, torchtitan.STACK, deepspeed.STACK,
                                                      maxtext.STACK, automodel.STACK)}
ALL_FRAMEWORKS: tuple[str, ...] = tuple(STACKS)  # every TrainingSpec.framework value, costing stacks too
# the stacks the planner plans for (--framework) and writes files for: those with an emitter; a costing stack
# (Stack.emitter NO_EMITTER) is scored only where a run names it (plan validate)
FRAMEWORKS: tuple[str, ...] = tuple(fw for fw, s in STACKS.items() if s.plannable)
DEFAULT_FRAMEWORK: Final = "megatron"  # the stack scored when none is named (--framework, --launcher)


def traits(framework: str) -> Stack:
    """The stack of a TrainingSpec.framework value."""
    try:
        return STACKS[framework]
    except KeyError:
        raise KeyError(f"unknown framework {framework!r}; choose from {', '.join(ALL_FRAMEWORKS)}") from None


def stack_of(train: TrainingSpec) -> Stack:
    """The stack whose behaviour `train` is scored with."""
    return traits(train.framework)


def stack_of_emitter(launcher: str) -> Stack | None:
    """The stack a launcher's files run (None: a launcher without one, e.g. jax)."""
    return next((s for s in STACKS.values() if s.plannable and s.emitter == launcher), None)


__all__ = ["ALL_FRAMEWORKS", "DEFAULT_FRAMEWORK", "FRAMEWORKS", "STACKS", "PlanRule", "Stack", "stack_of",
           "stack_of_emitter", "traits"]
