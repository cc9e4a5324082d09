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


# other stacks' names for our options (Megatron-LM arguments.py, DeepSpeed / torchtitan config keys):
# an unknown option with one of these names says which option is meant
FOREIGN_FLAGS = {
    "--global-batch-size": "--gbs (global batch in sequences)",
    "--micro-batch-size": "--mbs", "--micro-batch": "--mbs",
    "--train-micro-batch-size-per-gpu": "--mbs", "--train-batch-size": "--gbs",
    "--tensor-model-parallel-size": "--tp", "--pipeline-model-parallel-size": "--pp",
    "--context-parallel-size": "--cp", "--expert-model-parallel-size": "--ep",
    "--expert-tensor-parallel-size": "--etp", "--virtual-pipeline-model-parallel-size": "--vpp",
    "--num-layers-per-virtual-pipeline-stage": "--vpp (virtual stages per pipeline rank, not layers per stage)",
    "--seq-length": "--seq-len", "--seq-len-per-sample": "--seq-len", "--seq_len": "--seq-len",
    "--sequence-parallel": "--sp", "--recompute-granularity": "--recompute", "--recompute-activations": "--recompute",
    "--zero-stage": "--zero", "--data-parallel-size": "--dp (usually left to the search)",
    "--fp8": "--dtype fp8", "--bf16": "--dtype bf16", "--fp16": "--dtype fp16",
    "--tp-size": "--tp", "--pp-size": "--pp", "--cp-size": "--cp", "--ep-size": "--ep",
}


def _foreign(error: click.NoSuchOption, ctx: click.Context) -> click.NoSuchOption:
    """The same error, saying which of our options another stack's flag stands for."""
    meant = FOREIGN_FLAGS.get(error.option_name)
    if meant is None:
        return error
    return click.NoSuchOption(error.option_name, message=f"No such option '{error.option_name}': "
                              f"here it is {meant}", ctx=ctx)


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
    """For click.Command and click.Group: the parser refuses repeated scalar options and names our option for
    another stack's flag (`--global-batch-size` -> --gbs)."""

    def make_parser(self, ctx: click.Context):
        parser = super().make_parser(ctx)  # type: ignore[misc]
        parse = parser.parse_args

        def parse_args(args):
            try:
                opts, largs, order = parse(args)
            except click.NoSuchOption as e:
                raise _foreign(e, ctx) from None
            refuse_repeats(ctx, order)
            return opts, largs, order

        parser.parse_args = parse_args
        return parser


class NoRepeatCommand(NoRepeatMixin, click.Command):
    """Every subcommand of `plan`."""
