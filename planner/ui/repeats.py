"""A scalar option given twice is an error (exit 2, one line), never "the last one wins": click keeps the
last value of a repeated option silently, so `--price-per-device-hour 2.5 --price-per-device-hour 1.5` used
to cost every cluster at 1.5 and `--framework fsdp --framework megatron` to model Megatron.

Options declared `multiple=True` (`compare --cluster`, `--emit`) and plain on-flags (`--force`, which mean
the same however often they are given) may repeat; every other option may be given once."""

from __future__ import annotations

import click

# what to do instead, for the options whose repetition has a meaning the user probably wanted
_INSTEAD = {
    "price_per_device_hour": "to price each cluster, put its price in the cluster, --cluster h100x16@2.5 "
                             "--cluster a100x32@1.5, or price_per_device_hour: in a cluster file",
    "cluster_arg": "to compare clusters use `plan compare --cluster A --cluster B`",
    "seq_len": "to compare sequence lengths use `plan compare --seq-len A --seq-len B`",
}


def _repeatable(param: click.Parameter) -> bool:
    if not isinstance(param, click.Option):
        return True
    if param.multiple or param.count:
        return True
    return bool(param.is_flag and not param.secondary_opts)  # --force --force means --force


def refuse_repeats(ctx: click.Context, order: list[click.Parameter]) -> None:
    """click.UsageError (exit 2) naming the first option given more than once in `order` (click's parser
    lists one entry per occurrence)."""
    seen: set[str] = set()
    for param in order:
        if _repeatable(param) or param.name is None:
            continue
        if param.name in seen:
            flags = "/".join(list(param.opts) + list(getattr(param, "secondary_opts", [])))
            instead = _INSTEAD.get(param.name)
            raise click.UsageError(f"{flags} was given more than once: give it once"
                                   + (f"; {instead}" if instead else ""), ctx)
        seen.add(param.name)


class NoRepeatMixin:
    """For click.Command and click.Group: the parser refuses repeated scalar options."""

    def make_parser(self, ctx: click.Context):
        parser = super().make_parser(ctx)  # type: ignore[misc]
        parse = parser.parse_args

        def parse_args(args):
            opts, largs, order = parse(args)
            refuse_repeats(ctx, order)
            return opts, largs, order

        parser.parse_args = parse_args
        return parser


class NoRepeatCommand(NoRepeatMixin, click.Command):
    """Every subcommand of `plan`."""
