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
            continue  # given after the subcommand too: that one wins
        out[mine] = tuple(value) if isinstance(value, tuple) else ((value,) if mine != name else value)
    return out
