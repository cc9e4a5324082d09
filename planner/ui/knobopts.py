"""The plan-knob options of `plan` (--tp --pp ... --tp-comm-overlap), generated from ParallelPlan's fields:
each option's type, range, choices and help text are the field's own (planner/specs/plan.py documents
every knob where it is declared), so a new knob is one field plus one entry in planner.app.KNOB_FLAGS."""

from __future__ import annotations

import typing
from typing import Any

import click
from annotated_types import Ge, Le

from planner.app import KNOB_FLAGS
from planner.specs import ParallelPlan

# the order the options appear in `plan --help` (flag names, planner.app.KNOB_FLAGS)
HELP_ORDER = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "mbs", "zero", "zero_shard", "recompute",
              "recompute_layers", "recompute_modules", "remat_offload", "remat_device", "sp", "schedule", "cp_comm",
              "offload", "offload_modules", "tp_comm_overlap")

# what a knob is when not pinned, where the search does not vary it (planner/search/engine.py, _fixed_or defaults)
NOT_SEARCHED = {"sp": "on with TP", "cp_comm": "ring", "offload": "off, on only when nothing else fits",
                "offload_modules": "none",
                "tp_comm_overlap": "off", "remat_device": "none",
                "recompute_modules": "the planner's set for the model on Megatron (see above)",
                "remat_offload": "tpu-recipes' policies tried beside full recompute on MaxText (none: not tried); "
                                 "else none"}


def _positive(ctx, param, value):
    if value is not None and value < 1:
        raise click.BadParameter("must be a positive integer")
    return value


def _bounds(field) -> tuple[Any, Any]:
    """The field's ge/le bounds (None where unbounded)."""
    ge = next((m.ge for m in field.metadata if isinstance(m, Ge)), None)
    le = next((m.le for m in field.metadata if isinstance(m, Le)), None)
    return ge, le


def _base_type(annotation) -> Any:
    """int, bool or a Literal from an annotation that may be Optional."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Literal or not args:
        return annotation
    return args[0] if len(args) == 1 else annotation


def _names(ctx, param, value):
    """A comma-separated list of names as the tuple the plan holds, each once; "none" pins the empty list."""
    if value is None:
        return None
    if value.strip() == "none":
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    if not names:
        what = "module" if param is not None and param.name in ("recompute_modules", "offload_modules") else "tensor"
        raise click.BadParameter(f"give comma-separated {what} names, or none")
    return names


def knob_option(flag: str):
    """The click option pinning ParallelPlan field KNOB_FLAGS[flag], typed, ranged and documented by the field."""
    knob = KNOB_FLAGS[flag]
    field = ParallelPlan.model_fields[knob]
    name = "--" + flag.replace("_", "-")
    base = _base_type(field.annotation)
    helptext = f"{field.description or knob}  [default: {NOT_SEARCHED.get(flag, 'searched')}]"
    if base is bool:
        return click.option(f"{name}/--no-{flag.replace('_', '-')}", default=None, help=helptext)
    if typing.get_origin(base) is typing.Literal:
        return click.option(name, type=click.Choice([str(a) for a in typing.get_args(base)]), help=helptext)
    if typing.get_origin(base) is tuple:
        return click.option(name, metavar="NAMES", callback=_names, help=helptext)
    if base is not int:
        raise TypeError(f"ParallelPlan.{knob}: no option type for {field.annotation}")
    ge, le = _bounds(field)
    if ge == 1 and le is None:
        return click.option(name, type=int, callback=_positive, help=helptext)
    return click.option(name, type=click.IntRange(ge, le), help=helptext)


def knob_options() -> list:
    """Every knob option, in HELP_ORDER."""
    assert set(HELP_ORDER) == set(KNOB_FLAGS), "HELP_ORDER lists every KNOB_FLAGS flag once"
    return [knob_option(flag) for flag in HELP_ORDER]
