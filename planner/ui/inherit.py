"""Options given before the subcommand (`plan --model llama-70b --cluster a100x64 explain`) are the
subcommand's options: click parses them as the group's, so each subcommand takes over those it also
has, and refuses, with what to do, those it does not."""

from __future__ import annotations

import click
from click.core import ParameterSource

from planner.errors import InputError

# group parameter name -> the subcommand's name for it, where they differ (compare repeats some)
RENAMED = {"compare": {"cluster_arg": "clusters", "seq_len": "seq_lens"}}
IGNORED = {"debug"}


def _given(ctx: click.Context, name: str) -> bool:
    src = ctx.get_parameter_source(name)
    return src not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def _flag(ctx: click.Context, name: str) -> str:
    for p in ctx.command.params:
        if p.name == name and getattr(p, "opts", None):
            return p.opts[0]
    return "--" + name.replace("_", "-")


def _given_twice(ctx: click.Context, parent: click.Context, name: str, mine: str, value, out: dict) -> None:
    """An option given before and after the subcommand: a repeatable one (`compare --cluster`) takes both
    values, the one before first; a scalar one is an error unless both are the same (one value, never "the
    last one wins")."""
    if mine != name or isinstance(out[mine], tuple):  # compare's repeatable --cluster / --seq-len
        before = tuple(value) if isinstance(value, tuple) else (value,)
        out[mine] = before + tuple(out[mine])
        return
    if out[mine] != value:
        flag = _flag(parent, name)
        raise InputError(f"{flag} was given before and after `{ctx.info_name}` ({value!r} and {out[mine]!r}): "
                         "give it once")


def inherit_group_options(kw: dict) -> dict:
    """`kw` (the subcommand's parameters) with every option the user gave before the subcommand."""
    ctx = click.get_current_context()
    parent = ctx.parent
    if parent is None:
        return kw
    out = dict(kw)
    names = RENAMED.get(ctx.info_name or "", {})
    for name, value in parent.params.items():
        if not _given(parent, name) or name in IGNORED:
            continue
        mine = names.get(name, name)
        if mine not in out:
            raise InputError(f"{_flag(parent, name)} was given before `{ctx.info_name}`, which has no such option: "
                             f"remove it (see `plan {ctx.info_name} --help`)")
        if _given(ctx, mine):
            _given_twice(ctx, parent, name, mine, value, out)
            continue
        out[mine] = tuple(value) if isinstance(value, tuple) else ((value,) if mine != name else value)
    return out
