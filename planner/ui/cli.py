"""The `plan` command: a thin click layer over catalogs, cost model, search and emitters."""

from __future__ import annotations

import errno
import functools
import os
import signal
import sys
import time
from typing import Any

import click

from planner import __version__
from planner.errors import PlannerError
from planner.names import error_line, safe_line
from planner.ui.costopts import COST_KEYS, check_cost_options, cost_options, estimate_doc, estimate_text, finite
from planner.ui.inherit import inherit_group_options
from planner.ui.jsondoc import require_finite

KNOB_FLAGS = {  # flag -> ParallelPlan knob
    "tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "ep": "ep", "etp": "etp", "vpp": "vpp",
    "mbs": "micro_batch", "zero": "zero_stage", "recompute": "recompute", "sp": "sequence_parallel",
    "schedule": "schedule", "cp_comm": "cp_comm", "recompute_layers": "recompute_layers",
    "zero_shard": "zero_shard_size", "offload": "offload_optimizer", "tp_comm_overlap": "tp_comm_overlap",
}


def _positive(ctx, param, value):
    values = value if isinstance(value, tuple) else (value,)
    if any(v is not None and not isinstance(v, (bool, str)) and v < 1 for v in values):
        raise click.BadParameter("must be a positive integer")
    return value


_finite = finite  # the one click callback refusing nan/inf (planner.ui.costopts)


class OneLineGroup(click.Group):
    """click.Group whose usage errors are one line on stderr (exit 2), that ends quietly when its output
    pipe closes (`plan models | head -1` exits 0), and that turns SIGTERM into an exit that runs the
    clean-up of half-written files (SIGKILL cannot be caught: a killed run may leave a .NAME.XXXX.tmp)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        previous = _exit_on_sigterm()
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as e:
            err_ctx = getattr(e, "ctx", None)
            where = f"; see `{err_ctx.command_path} --help`" if err_ctx else ""
            click.echo(f"error: {error_line(e.format_message())}{where}", err=True)
            from planner.ui.jsondoc import usage_error_document
            doc = usage_error_document(list(sys.argv[1:] if args is None else args), error_line(e.format_message()))
            if doc is not None:  # --json: the error document on stdout too
                click.echo(doc)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            _quiet_broken_pipe()
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        sys.exit(rv if isinstance(rv, int) else 0)


def _exit_on_sigterm():
    """SIGTERM raises SystemExit(143), so `finally`/`except BaseException` clean-ups (the temporary file of
    an atomic write) run; returns the previous handler (None off the main thread, where it cannot be set)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _quiet_broken_pipe() -> None:
    """The reader of stdout went away (`| head`): stop writing, exit 0 without a message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(0)


def _positive_each(ctx, param, values):
    if any(v < 1 for v in values or ()):
        raise click.BadParameter("must be a positive integer")
    return values


def _complete_model(ctx, param, incomplete):
    from planner.catalog.models import list_models
    names = []
    for name, aliases, _ in list_models():
        names += [name, *aliases]
    return sorted(n for n in set(names) if n.startswith(incomplete))


def _complete_cluster(ctx, param, incomplete):
    from planner.catalog.hardware import list_hardware
    return sorted(f"{hw.id}x" for hw in list_hardware() if f"{hw.id}x".startswith(incomplete))


def plan_options(f):
    """Options shared by every command that builds a plan."""
    for o in reversed(_setting_options() + _knob_options()):
        f = o(f)
    return f


def _setting_options() -> list:
    """Model, cluster and training settings."""
    return [
        click.option("--model", "model_arg", metavar="NAME|FILE", shell_complete=_complete_model,
                     help="catalog name/alias, model spec YAML/JSON, or HF config.json"),
        click.option("--cluster", "cluster_arg", metavar="HWxN|FILE", shell_complete=_complete_cluster,
                     help="<hardware>x<count> (a100x64) or a cluster spec file"),
        click.option("--seq-len", type=int, callback=_positive, help="sequence length in tokens (default 4096)"),
        click.option("--gbs", type=int, callback=_positive, help="global batch in sequences (default: ~4M tokens)"),
        click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8"]), default="bf16", show_default=True),
        click.option("--launcher", type=click.Choice(["megatron", "deepspeed", "torchtitan", "maxtext"]),
                     help="plan for this stack: only plans it can run, scored with its framework behaviour; "
                          "--out writes its files (docs/launchers.md)"),
        click.option("--framework", type=click.Choice(["megatron", "fsdp", "deepspeed", "maxtext"]),
                     help="whose memory/overlap behaviour to model (default: the --launcher's, else megatron)"),
        click.option("--grad-dtype", type=click.Choice(["fp32", "bf16"]),
                     help="gradient buffer / reduction dtype (default: the framework's, fp32 for Megatron and FSDP)"),
        click.option("--optimizer-dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
                     help="Adam moment dtype (bf16: Megatron precision-aware optimizer); master weights stay fp32"),
        click.option("--moe-capacity-factor", type=click.FloatRange(0, 1024, min_open=True), callback=_finite,
                     help="MoE expert capacity (x the balanced load): tokens beyond it are dropped, inputs padded to "
                     "it; time and memory are charged at it (default: dropless, charged at balanced routing)"),
        click.option("--fp8-recipe", type=click.Choice(["delayed", "tensorwise", "blockwise", "mxfp8"]),
                     help="with --dtype fp8: the scaling recipe (Megatron --fp8-recipe; mxfp8 on Blackwell only). "
                     "Default: the launcher's (tensorwise)"),
        click.option("--compile", "torch_compile", is_flag=True, default=None,
                     help="PyTorch-native stacks (--framework fsdp / --launcher torchtitan): run under torch.compile "
                     "(fused elementwise kernels; torchtitan --compile.enable). Default: eager"),
        click.option("--loss-chunks", type=click.IntRange(1, 4096),
                     help="compute and back-propagate the loss over this many slices of the sequence (torchtitan "
                     "ChunkedLossWrapper num_chunks, MaxText num_vocab_tiling): the loss peak holds one slice's "
                     "logits. Default: 8 with --launcher torchtitan (its Llama 3 / Qwen3 configs), else 1"),
        click.option("--fp8-act-cache/--no-fp8-act-cache", "fp8_moe_act_cache", default=None,
                     help="with --dtype fp8 on MoE models: cache the experts' SwiGLU inputs for backward in FP8 and "
                     "recompute the SwiGLU output (DeepSeek-V3 report sec. 3.3.2); default off (Megatron keeps BF16)"),
        click.option("--attention", type=click.Choice(["flash", "unfused"]), default="flash", show_default=True,
                     help="attention kernel: flash (fused, no s x s scores kept; Dao et al. 2022) or unfused "
                     "(scores materialised, as in stacks before mid-2022)"),
    ]


def _knob_options() -> list:
    """The plan knobs (each pins one; the rest are searched) and the search/output settings."""
    return [
        click.option("--tp", type=int, callback=_positive), click.option("--pp", type=int, callback=_positive),
        click.option("--dp", type=int, callback=_positive), click.option("--cp", type=int, callback=_positive),
        click.option("--ep", type=int, callback=_positive), click.option("--etp", type=int, callback=_positive),
        click.option("--vpp", type=int, callback=_positive), click.option("--mbs", type=int, callback=_positive),
        click.option("--zero", type=click.IntRange(0, 3)),
        click.option("--zero-shard", type=int, callback=_positive, help="hybrid sharding group size (HSDP)"),
        click.option("--recompute", type=click.Choice(["none", "selective", "full"])),
        click.option("--recompute-layers", type=click.IntRange(0, None), help="with full: layers per stage recomputed"),
        click.option("--sp/--no-sp", default=None, help="sequence parallelism (with TP)"),
        click.option("--schedule", type=click.Choice(["1f1b", "interleaved", "gpipe", "zb", "dualpipe"])),
        click.option("--cp-comm", type=click.Choice(["ring", "a2a"])),
        click.option("--offload/--no-offload", default=None, help="optimizer states on the CPU"),
        click.option("--tp-comm-overlap/--no-tp-comm-overlap", default=None,
                     help="overlap TP collectives with GEMMs (Megatron --tp-comm-overlap with TE userbuffers; "
                     "torchtitan async TP, needs --compile); default off"),
        click.option("--nic-bw", metavar="BW", help="NIC bandwidth per device and direction, with a unit: 400Gb "
                     "(gigabits/s) or 50GB (gigabytes/s); replaces the hardware profile's"),
        click.option("--scale-up-bw", metavar="BW",
                     help="scale-up (NVLink/xGMI/ICI) bandwidth per device and direction, "
                     "with a unit: 450GB or 3600Gb; measured busbw scales with it"),
        click.option("--max-tp", type=int, callback=_positive,
                     help="largest TP to consider (default: scale-up domain)"),
        click.option("--memory-headroom", type=click.FloatRange(0, None), default=0.0, callback=_finite,
                     help="GiB to keep free per device"),
        click.option("--top", "top_k", type=click.IntRange(1, 100), default=5, show_default=True,
                     help="plans to show: distinct layouts, each its best variant"),
        click.option("--all-variants", is_flag=True, help="also list other variants (micro-batch, ZeRO, recompute, "
                     "virtual stages) of the same layout"),
        click.option("--debug", is_flag=True, help="show a traceback on errors"),
    ]


def _handle_errors(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        debug = kwargs.get("debug") or os.environ.get("PLANNER_DEBUG") == "1"
        try:
            return f(*args, **kwargs)
        except PlannerError as e:
            if debug:
                raise
            click.echo(f"error: {error_line(e)}", err=True)
            _json_error(f, kwargs, e.exit_code, error_line(e))
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            sys.exit(130)
        except BrokenPipeError:
            _quiet_broken_pipe()
        except OSError as e:
            if e.errno != errno.EPIPE:
                raise
            _quiet_broken_pipe()
        except click.exceptions.Exit:
            raise
        except click.ClickException:
            raise
        except Exception as e:  # never a traceback unless asked
            if debug:
                raise
            msg = error_line(e, 300)
            line = f"internal error ({type(e).__name__}: {msg}); rerun with --debug and report it"
            click.echo(f"error: {line}", err=True)
            _json_error(f, kwargs, 1, line)
            sys.exit(1)
    return wrapper


def _json_error(f, kwargs: dict, code: int, message: str) -> None:
    """With --json (on the command or before it), the error also goes to stdout as a JSON document."""
    cctx = click.get_current_context(silent=True)
    parent = cctx.parent.params if cctx is not None and cctx.parent is not None else {}
    if kwargs.get("as_json") or parent.get("as_json"):
        from planner.ui.jsondoc import dumps, error_doc
        command = {"main": "plan", "models_cmd": "models", "clusters_cmd": "clusters", "validate_cmd": "validate",
                   "explain_cmd": "explain", "report_cmd": "plan", "compare_cmd": "compare"}.get(f.__name__, "plan")
        click.echo(dumps(error_doc(command, code, " ".join(message.split()))))


def build_inputs(model_arg, cluster_arg, seq_len, gbs, dtype, framework, grad_dtype=None, optimizer_dtype="fp32",
                 attention=None):
    from pydantic import ValidationError

    from planner.catalog.hardware import parse_cluster
    from planner.catalog.hf_import import _validation_message
    from planner.catalog.models import load_model
    from planner.errors import InputError
    from planner.specs import ClusterSpec, TrainingSpec

    if not model_arg:
        raise InputError("missing --model: give a catalog name (see `plan models`), a spec file or a config.json")
    if not cluster_arg:
        raise InputError("missing --cluster: give <hardware>x<count> such as a100x64 (see `plan clusters`) or a file")
    model = load_model(model_arg)
    cluster = cluster_arg if isinstance(cluster_arg, ClusterSpec) else parse_cluster(cluster_arg)
    seq = seq_len or 4096
    if gbs is None:
        gbs = max(1, round(4 * 2**20 / seq))  # ~4M tokens per step, the usual pretraining batch
    try:
        train = TrainingSpec(seq_len=seq, global_batch=gbs, dtype=dtype, framework=framework,
                             grad_dtype=grad_dtype, optimizer_dtype=optimizer_dtype or "fp32",
                             attention_impl=attention or "flash")
    except ValidationError as e:
        raise InputError(_validation_message(e, "training settings")) from None
    return model, cluster, train


# torchtitan 0.3.0 ChunkedLossWrapper.Config.num_chunks default (torchtitan components/loss.py), used by its Llama 3
# and Qwen3 configs and kept by the planner's emitted torchtitan_model.py
TORCHTITAN_LOSS_CHUNKS = 8


def training_overrides(train, kw: dict):
    """Training settings given by flags that only some models or stacks take (--moe-capacity-factor,
    --compile, --fp8-recipe); the spec's validators and planner.search.request own the rules."""
    from pydantic import ValidationError

    from planner.catalog.hf_import import _validation_message
    from planner.errors import InputError
    upd = {k: kw[k] for k in ("moe_capacity_factor", "torch_compile", "fp8_recipe", "loss_chunks",
                              "fp8_moe_act_cache") if kw.get(k) is not None}
    if upd.get("torch_compile") and kw.get("launcher") == "torchtitan":
        # torchtitan compiles its loss with --compile (PR #1033, 0.3.0 BaseLoss._maybe_compile): Inductor's fused
        # cross entropy keeps the bf16 logits and writes a bf16 gradient, the fused_cross_entropy accounting
        upd["fused_cross_entropy"] = True
    if kw.get("loss_chunks") is None and kw.get("launcher") == "torchtitan":
        # torchtitan 0.3.0's Llama 3 / Qwen3 configs and the planner's torchtitan_model.py: ChunkedLossWrapper(8)
        upd["loss_chunks"] = TORCHTITAN_LOSS_CHUNKS
    if not upd:
        return train
    try:
        return type(train).model_validate(train.model_dump() | upd)
    except ValidationError as e:
        raise InputError(_validation_message(e, "training settings")) from None


def cluster_overrides(cluster, kw: dict):
    """--nic-bw and --scale-up-bw applied to the parsed cluster (planner.catalog.overrides)."""
    from planner.catalog.overrides import with_bandwidths
    return with_bandwidths(cluster, kw.get("nic_bw"), kw.get("scale_up_bw"))


def fixed_knobs(kw: dict) -> dict[str, Any]:
    return {knob: kw[flag] for flag, knob in KNOB_FLAGS.items() if kw.get(flag) is not None}


def model_doc(ctx) -> dict:
    from planner.ui.jsondoc import model_object
    return model_object(ctx.model, ctx.params)


def cluster_doc(ctx) -> dict:
    from planner.ui.jsondoc import cluster_object
    return cluster_object(ctx.cluster)


def run_search(kw: dict, show_progress: bool = False):
    """Search with the command's options; returns (ctx, result, doc). `show_progress`: a spinner on
    stderr (planner.ui.progress) when the search takes over a second and stderr is a terminal."""
    kw = resolve_target(kw, ())
    from planner.costmodel import Context
    from planner.errors import InputError, NoFeasiblePlan
    from planner.search.engine import SearchOptions, search
    from planner.ui.progress import progress

    model, cluster, train = build_inputs(kw["model_arg"], kw["cluster_arg"], kw.get("seq_len"), kw.get("gbs"),
                                         kw["dtype"], kw["framework"], kw.get("grad_dtype"), kw.get("optimizer_dtype"),
                                         kw.get("attention"))
    train = training_overrides(train, kw)
    cluster = cluster_overrides(cluster, kw)
    launcher = kw.get("launcher")
    if launcher:
        check_launcher_model(launcher, model, train, cluster)
    fixed = pinned_knobs(kw, launcher)
    check_request(model, cluster, train, fixed, kw.get("memory_headroom") or 0.0)
    ctx = Context(model, cluster, train)
    t0 = time.perf_counter()
    with progress(f"searching plans for {model.name} on {cluster.name}", show_progress):
        res = search(ctx, SearchOptions(fixed=fixed, top_k=kw["top_k"], max_tp=kw.get("max_tp"),
                                        memory_headroom_gib=kw.get("memory_headroom") or 0.0,
                                        distinct_layouts=not kw.get("all_variants"), launcher=launcher))
    seconds = time.perf_counter() - t0
    if not res.plans and not res.structures:
        pins = " ".join(f"--{f.replace('_', '-')} {fixed[k]}" for f, k in KNOB_FLAGS.items() if k in fixed)
        raise InputError(f"no layout of {model.name} on {cluster.count} {cluster.hardware.id} satisfies the pinned "
                         f"knobs ({pins or 'none'}): pin fewer knobs or change the device count")
    if not res.plans:
        raise NoFeasiblePlan(nothing_fits_message(ctx, res, kw.get("memory_headroom") or 0.0))
    doc = search_doc(ctx, res, kw, launcher, seconds)
    from planner.analysis.bands import attach_bands
    attach_bands(ctx, doc)  # plans[i].step_time_band, band_note (issue 15)
    require_finite(doc)
    return ctx, res, doc


def check_launcher_model(launcher: str, model, train, cluster) -> None:
    """Exit 2 when the target --launcher cannot run on the hardware or cannot express the model."""
    from planner.emit.capabilities import model_errors
    from planner.errors import InputError

    check_launcher_hardware(launcher, cluster)
    cannot = model_errors(model, train, launcher, cluster)
    if cannot:
        raise InputError(f"--launcher {launcher} cannot run {model.name} on {cluster.hardware.id}: {cannot[0]}")


def pinned_knobs(kw: dict, launcher: str | None) -> dict[str, Any]:
    """The knobs the user pinned, checked as a ParallelPlan, with the implied schedule and the launcher's
    own search defaults where nothing was pinned."""
    from pydantic import ValidationError

    from planner.catalog.hf_import import _validation_message
    from planner.errors import InputError
    from planner.specs import ParallelPlan

    fixed = fixed_knobs(kw)
    try:
        ParallelPlan(**{k: v for k, v in fixed.items()})
    except ValidationError as e:
        raise InputError(_validation_message(e, "pinned knobs")) from None
    if fixed.get("vpp", 1) > 1 and "schedule" not in fixed:
        fixed["schedule"] = "interleaved"
    if launcher:  # the target's own defaults (MaxText: GPipe) where the user pinned nothing
        from planner.emit.capabilities import capabilities
        fixed = capabilities(launcher).search_defaults | fixed
    return fixed


def search_doc(ctx, res, kw: dict, launcher: str | None, seconds: float) -> dict:
    """The result document of a search: model, cluster, training, ranked plans, ranking and search stats."""
    from planner.analysis.explain import reason
    from planner.costmodel.memory import grad_dtype

    train = ctx.train
    usable = usable_capacity_gib(ctx, kw.get("memory_headroom") or 0.0)
    plans = []
    for ev in res.plans:
        d = ev.to_dict()
        d["memory"] = dict(d["memory"], usable_gib=usable)
        d["reason"] = reason(ctx, ev, usable)
        plans.append(d)
    return {"model": model_doc(ctx), "cluster": cluster_doc(ctx),
            "training": {"seq_len": train.seq_len, "global_batch": train.global_batch, "dtype": train.dtype,
                         "framework": train.framework, "launcher": launcher, "grad_dtype": grad_dtype(train),
                         "optimizer_dtype": train.optimizer_dtype, "attention": train.attention_impl,
                         "torch_compile": train.torch_compile, "moe_capacity_factor": train.moe_capacity_factor,
                         "fp8_recipe": train.fp8_recipe, "loss_chunks": train.loss_chunks,
                         "fp8_moe_act_cache": train.fp8_moe_act_cache},
            "plans": plans,
            "ranking": ranking_doc(kw),
            "search": {"structures": res.structures, "evaluated": res.evaluated, "feasible": res.feasible,
                       "pruned": res.pruned, "memory_headroom_gib": kw.get("memory_headroom") or 0.0,
                       "seconds": seconds}}  # emit_doc drops "seconds" from --json


def check_launcher_hardware(launcher: str, cluster) -> None:
    from planner.emit.capabilities import launchers_for
    from planner.errors import InputError

    ok = launchers_for(cluster)
    if launcher not in ok:
        raise InputError(f"--launcher {launcher} does not run on {cluster.hardware.id}; choose one of {', '.join(ok)}")


def resolve_target(kw: dict, emit: tuple[str, ...]) -> dict:
    """Make --launcher, --framework and --emit consistent: --launcher sets the framework's default;
    a single --emit L (jax aside) implies --launcher L; a different --framework or --emit is an error."""
    from planner.emit.capabilities import TARGETS, capabilities
    from planner.errors import InputError

    launcher = kw.get("launcher")
    named = sorted({e for e in emit if e in TARGETS})
    if launcher is None and len(named) == 1:
        launcher = named[0]
    if launcher is not None:
        other = [e for e in named if e != launcher]
        if other:
            raise InputError(f"--emit {other[0]} differs from the target --launcher {launcher}: drop one of them")
        fw = capabilities(launcher).framework
        if kw.get("framework") not in (None, fw):
            raise InputError(f"--framework {kw['framework']} differs from --launcher {launcher}'s ({fw}): "
                             "drop --framework")
        return kw | {"launcher": launcher, "framework": fw}
    return kw | {"framework": kw.get("framework") or "megatron"}


def check_request(model, cluster, train, fixed: dict, headroom_gib: float) -> None:
    """Exit 2 with the reason when the request can never give a plan (pinned knobs, dtypes, headroom)."""
    from planner.errors import InputError
    from planner.search.request import request_errors

    errs = request_errors(model, cluster, train, fixed)
    if errs:
        raise InputError("; ".join(dict.fromkeys(errs)))
    if headroom_gib >= cluster.hardware.hbm_capacity_gib:
        raise InputError(f"--memory-headroom {headroom_gib:g} GiB leaves nothing of the "
                         f"{cluster.hardware.hbm_capacity_gib:g} GiB per {cluster.hardware.id}: "
                         "give a smaller headroom")


def ranking_doc(kw: dict) -> dict:
    from planner.search.ranking import TIE_BAND_REL

    return {"order": "step_time_s", "tie_band_rel": TIE_BAND_REL, "tie_break": ["memory.peak_gib", "simpler layout"],
            "distinct_layouts": not kw.get("all_variants")}


def usable_capacity_gib(ctx, headroom: float) -> float:
    """The memory per device the search allows a plan: HBM less the fit reserve and the headroom."""
    from planner.costmodel import calibration as cal

    return ctx.cluster.hardware.hbm_capacity_gib - cal.FIT_RESERVE_GIB - headroom


def nothing_fits_message(ctx, res, headroom: float) -> str:
    cap = usable_capacity_gib(ctx, headroom)
    low = f"{res.smallest_peak_gib:.1f} GiB" if res.smallest_peak_gib is not None else "unknown"
    return (f"no plan of {ctx.model.name} fits {ctx.cluster.hardware.id} ({cap:.1f} GiB usable per device): the "
            f"smallest peak any plan reaches is {low}. Try more devices, --recompute full, --zero 3, "
            f"--offload, a shorter --seq-len, or an accelerator with more memory")


def json_text(doc) -> str:
    """The one place JSON reaches stdout (planner.ui.jsondoc.dumps: sorted keys, checked finite)."""
    from planner.ui.jsondoc import dumps
    return dumps(doc)


def emit_doc(doc: dict, as_json: bool, rank: int = 1, command: str = "plan") -> None:
    if as_json:
        from planner.ui.jsondoc import dumps, versioned
        # byte-identical output for identical input: leave the wall-clock timing out
        out = dict(doc, search={k: v for k, v in doc.get("search", {}).items() if k != "seconds"})
        click.echo(dumps(versioned(command, out)))
    else:
        from planner.ui.render import print_plan_doc
        print_plan_doc(doc, rank=rank)


@click.group(cls=OneLineGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@plan_options
@click.option("--json", "as_json", is_flag=True, help="print one JSON object instead of tables")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="write launch configs for the chosen plan here")
@click.option("--emit", "emit", multiple=True,
              type=click.Choice(["megatron", "deepspeed", "maxtext", "jax", "torchtitan"]),
              help="launchers to write (default: all that can express the plan)")
@click.option("--rank", type=click.IntRange(1, 100), default=1, show_default=True,
              help="which ranked plan --out writes")
@click.option("--force", is_flag=True, help="overwrite a non-empty --out directory")
@click.option("--min-devices", is_flag=True, help="find the fewest devices (whole nodes, up to the --cluster count) "
              "on which a plan fits (and meets --target-step-s)")
@click.option("--target-step-s", type=click.FloatRange(0, None, min_open=True), callback=_finite,
              help="with --min-devices: required step time")
@cost_options
@click.version_option(__version__, "--version", prog_name="plan")
@click.pass_context
@_handle_errors
def main(cctx, as_json, out_dir, emit, rank, force, min_devices, target_step_s, **kw):
    """Plan the parallel layout of a training run: `plan --model llama-70b --cluster a100x64`."""
    if cctx.invoked_subcommand is not None:
        return
    if not kw.get("model_arg") and not kw.get("cluster_arg"):
        click.echo(cctx.get_help())
        return
    kw = resolve_target(kw, emit)
    cost = {k: kw.pop(k, None) for k in COST_KEYS}
    check_cost_options(cost)
    if target_step_s and not min_devices:
        from planner.errors import InputError
        raise InputError("--target-step-s needs --min-devices")
    fewest = None
    if min_devices:
        fewest_cluster, fewest = _min_devices_cluster(kw, target_step_s, show_progress=not as_json)
        kw = kw | {"cluster_arg": fewest_cluster}
    ctx, res, doc = run_search(kw | {"top_k": max(kw["top_k"], rank)}, show_progress=not as_json)
    if fewest:
        doc["min_devices"] = fewest
    if cost["tokens"]:
        doc["training_estimate"] = estimate_doc(doc["plans"][min(rank, len(doc["plans"])) - 1],
                                                doc["model"]["params_total"], cost)
    if out_dir:
        doc["out"] = _write_out(ctx, doc, out_dir, rank, _emit_set(kw, emit), force, quiet=as_json)
        if not kw.get("launcher"):
            _other_launchers(ctx, kw, doc, rank)
    emit_doc(doc, as_json, rank)
    if cost["tokens"] and not as_json:
        from planner.ui.table import columns_for_text
        click.echo(estimate_text(doc["training_estimate"], columns_for_text()))


def _min_devices_cluster(kw, target_step_s, show_progress: bool = False):
    """The cluster cut to the fewest devices (n <= the --cluster count) that fit, keeping every setting of the
    cluster (inline hardware, devices_per_node, domain_size, overrides); the normal search then runs on it.
    Returns (that cluster, the summary `--json` reports as `min_devices`)."""
    from planner.errors import NoFeasiblePlan
    from planner.search.engine import SearchOptions, min_devices
    from planner.specs import ClusterSpec
    from planner.ui.progress import progress

    model, cluster, train = build_inputs(kw["model_arg"], kw["cluster_arg"], kw.get("seq_len"), kw.get("gbs"),
                                         kw["dtype"], kw["framework"], kw.get("grad_dtype"), kw.get("optimizer_dtype"),
                                         kw.get("attention"))
    train = training_overrides(train, kw)
    cluster = cluster_overrides(cluster, kw)
    fixed = fixed_knobs(kw)
    check_request(model, cluster, train, {k: v for k, v in fixed.items() if k not in ("tp", "pp", "cp", "dp")},
                  kw.get("memory_headroom") or 0.0)
    if kw.get("launcher"):
        from planner.emit.capabilities import capabilities
        check_launcher_hardware(kw["launcher"], cluster)
        fixed = capabilities(kw["launcher"]).search_defaults | fixed
    opts = SearchOptions(fixed=fixed, top_k=1, max_tp=kw.get("max_tp"),
                         memory_headroom_gib=kw.get("memory_headroom") or 0.0, launcher=kw.get("launcher"))
    with progress(f"finding the fewest {cluster.hardware.id} devices for {model.name}", show_progress):
        n, _ = min_devices(model, cluster, train, opts, target_step_s)
    if n is None:
        goal = f" at <= {target_step_s:g} s per step" if target_step_s else ""
        raise NoFeasiblePlan(f"no count up to {cluster.count} {cluster.hardware.id} devices runs {model.name}{goal}; "
                             "raise the --cluster count, relax --target-step-s, or pick a bigger accelerator")
    if show_progress:
        click.echo(f"fewest devices: {n} x {cluster.hardware.id}", err=True)
    summary = {"devices": n, "hardware": cluster.hardware.id, "max_devices": cluster.count,
               "target_step_s": target_step_s}
    return ClusterSpec(name=f"{cluster.hardware.id}x{n}", hardware=cluster.hardware, count=n,
                       devices_per_node=cluster.devices_per_node, domain_size=cluster.domain_size), summary


def _emit_set(kw: dict, emit: tuple[str, ...]) -> set[str] | None:
    """The launchers --out writes: the target's (with the JAX mesh for MaxText), else --emit or all."""
    launcher = kw.get("launcher")
    if launcher:
        return {launcher} | ({"jax"} & set(emit) if launcher == "maxtext" else set())
    return set(emit) or None


def _other_launchers(ctx, kw: dict, doc: dict, rank: int) -> None:
    """Without a target: for each launcher that cannot run the written plan, its own best plan (stderr)."""
    from planner.emit.capabilities import TARGETS, launcher_errors, launchers_for
    from planner.errors import PlannerError
    from planner.specs import ParallelPlan

    chosen = doc["plans"][rank - 1]
    plan = ParallelPlan(**chosen["plan"])
    ctx_model, ctx_cluster, ctx_train = ctx.model, ctx.cluster, ctx.train
    for launcher in TARGETS:
        if launcher not in launchers_for(ctx_cluster):
            continue
        errs = launcher_errors(plan, ctx_model, ctx_train, launcher, ctx_cluster)
        if not errs:
            continue
        fw_kw = {k: v for k, v in kw.items() if k != "framework"} | {"launcher": launcher, "top_k": 1}
        try:
            _, _, alt = run_search(resolve_target(fw_kw, ()))
        except PlannerError as e:
            click.echo(f"{launcher} cannot run this plan ({errs[0]}) and finds no plan of its own with the knobs "
                       f"you pinned ({e})", err=True)
            continue
        best = alt["plans"][0]
        click.echo(f"{launcher} cannot run this plan ({errs[0]}); its best plan: {_layout(best['plan'])}, "
                   f"{best['step_time_s']:.3f} s per step; write it with --launcher {launcher}", err=True)


def _layout(p: dict) -> str:
    parts = [f"{k.upper()}{p[k]}" for k in ("tp", "pp", "cp", "dp", "ep") if p.get(k, 1) > 1]
    if p.get("vpp", 1) > 1:
        parts.append(f"VPP{p['vpp']}")
    parts.append(f"ZeRO-{p['zero_stage']}")
    parts.append(f"mbs {p['micro_batch']}, recompute {p['recompute']}")
    return " ".join(parts)


def _write_out(ctx, doc, out_dir, rank, emit, force, quiet: bool = False) -> dict:
    from planner.emit import emit_all, write_launch_configs
    from planner.errors import InputError
    from planner.specs import ParallelPlan

    if rank > len(doc["plans"]):
        raise InputError(f"--rank {rank}: only {len(doc['plans'])} plans were found")
    chosen = doc["plans"][rank - 1]
    plan = ParallelPlan(**chosen["plan"])
    pred = dict(chosen) | {"model": doc["model"], "cluster": doc["cluster"], "training": doc["training"]}
    files, skipped = emit_all(ctx.model, ctx.cluster, ctx.train, plan, pred, emit)
    target = doc["training"].get("launcher")
    if target in skipped:  # the search kept only plans the target runs: an emitter gap, not the user's fault
        raise InputError(f"--launcher {target} cannot write plan {rank}: {skipped[target]}")
    write_launch_configs(out_dir, files, force=force)
    if not quiet:
        click.echo(f"wrote {', '.join(sorted(files))} to {safe_line(out_dir, 200)}", err=True)
    for launcher, why in sorted(skipped.items()):  # on stderr under --json too (the document lists them)
        click.echo(f"not written for {launcher}: {safe_line(why, 300)}", err=True)
    return {"dir": str(out_dir), "written": sorted(files), "not_written": dict(sorted(skipped.items()))}


def check_output_path(path: str, option: str) -> None:
    """Refuse an output path that cannot be written before any long computation (planner.outputs)."""
    from planner.outputs import check_output_path as check

    check(path, option)


def write_text_file(path: str, option: str, text: str) -> None:
    """Write an output file (planner.outputs: atomic for a regular file, in place for a device or FIFO)."""
    from planner.outputs import write_output_text

    write_output_text(path, text, option)


def _print_listing(kw: dict, command: str, doc: dict, text) -> None:
    """A catalog listing (`plan models`, `plan clusters`): the JSON document or one entry a line."""
    if inherit_group_options(kw)["as_json"]:
        from planner.ui.jsondoc import dumps, versioned
        click.echo(dumps(versioned(command, doc)))
        return
    click.echo("\n".join(text(doc)))


@main.command("models")
@click.option("--json", "as_json", is_flag=True)
@_handle_errors
def models_cmd(**kw):
    """List the model catalog (one model a line) and what each short alias means."""
    from planner.ui.listing import models_doc, models_text

    _print_listing(kw, "models", models_doc(), models_text)


@main.command("clusters")
@click.option("--json", "as_json", is_flag=True)
@_handle_errors
def clusters_cmd(**kw):
    """List the hardware profiles (use as <id>x<count>)."""
    from planner.ui.listing import clusters_doc, clusters_text

    _print_listing(kw, "clusters", clusters_doc(), clusters_text)


@main.command("validate")
@click.option("--runs", "runs_file", type=click.Path(), help="runs file (default: the project's copy of the dev runs)")
@click.option("--json", "as_json", is_flag=True)
@click.option("--write-docs", type=click.Path(dir_okay=False), help="also write the markdown table here")
@click.option("--search-quality", is_flag=True, help="also rank each fully published plan in an unconstrained search")
@click.option("--debug", is_flag=True)
@_handle_errors
def validate_cmd(**kw):
    """Predict every published run in a runs file and compare with the measurements."""
    from planner.analysis.validate import VALIDATE_LEGEND, load_runs, markdown_table, validate_runs
    from planner.catalog.data import data_dir
    from planner.ui.progress import progress

    kw = inherit_group_options(kw)
    as_json, write_docs = kw["as_json"], kw["write_docs"]
    path = kw["runs_file"] or str(data_dir("runs") / "known_runs_dev.yaml")
    if write_docs:
        check_output_path(write_docs, "--write-docs")
    runs = load_runs(path)
    with progress(f"predicting {len(runs)} published runs", not as_json):
        result = validate_runs(runs)
    if kw["search_quality"]:
        from planner.analysis.validate import search_quality as sq
        with progress(f"searching the plan space of {len(runs)} published runs", not as_json):
            result["search_quality"] = [q for r in runs if (q := sq(r))]
    if write_docs:
        from pathlib import Path

        from planner.analysis.validate import validation_doc
        previous = Path(write_docs).read_text() if Path(write_docs).is_file() else ""
        write_text_file(write_docs, "--write-docs", validation_doc(result, result.get("search_quality"), previous))
    if as_json:
        from planner.ui.jsondoc import dumps, versioned
        click.echo(dumps(versioned("validate", result)))
    else:
        click.echo(markdown_table(result) + VALIDATE_LEGEND)


@main.command("calibrate")
@click.option("--runs", "runs_file", type=click.Path(dir_okay=False), required=True,
              help="your measured runs (runs schema: id, model, hardware, devices, train, plan, measured.step_time_s)")
@click.option("--nccl-tests", "nccl_logs", type=click.Path(dir_okay=False), multiple=True,
              help="an nccl-tests / rccl-tests output (repeatable): fits link bandwidth and latency")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), required=True,
              help="cluster file to write (give it to --cluster)")
@click.option("--json", "as_json", is_flag=True)
@_handle_errors
def calibrate_cmd(runs_file, nccl_logs, out_file, as_json):
    """Fit the model's physical constants to your cluster's measured steps and nccl-tests logs."""
    import json
    from pathlib import Path

    import yaml

    from planner.analysis import calibrate as c
    from planner.analysis.nccl_tests import fit_link, read_nccl_tests
    from planner.analysis.validate import load_runs
    from planner.errors import InputError

    check_output_path(out_file, "--out")
    prepared, skipped = c.prepare_runs(load_runs(runs_file))
    if not prepared:
        first = "; ".join(s["id"] + ": " + s["reason"] for s in skipped[:2])
        raise InputError(f"{runs_file}: no run could be scored ({first})")
    hw = c.one_hardware(prepared)
    node = prepared[0].cluster.node_size
    updates, link_lines = c.link_updates(hw, node, [fit_link(read_nccl_tests(p), min_bytes=1 << 20) for p in nccl_logs])
    res = c.calibrate(prepared, c.with_values(hw, updates) if updates else hw)
    src = (f"plan calibrate: {len(prepared)} measured runs ({Path(runs_file).name})"
           + (f", nccl-tests {', '.join(Path(p).name for p in nccl_logs)}" if nccl_logs else ""))
    doc = c.cluster_document(res.hardware, prepared, src, res.loo_errors)
    write_text_file(out_file, "--out", "# Written by `plan calibrate`; use it as --cluster. " + src + "\n"
                    + yaml.safe_dump(doc, sort_keys=False, width=120))
    out = {"out": out_file, "links": link_lines, "link_updates": updates,
           "fitted": {k: {"before": a, "after": b} for k, (a, b) in res.fitted.items()}, "held_fixed": res.held_fixed,
           "runs": [{"id": p.id, "measured_s": p.measured_s, "error_before": e0, "error_after": e1}
                    | ({"error_leave_one_out": res.loo_errors[i]} if res.loo_errors else {})
                    for i, (p, e0, e1) in enumerate(zip(prepared, res.errors_before, res.errors_after,
                                                              strict=False))],
           "skipped": skipped}
    if as_json:
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    for line in link_lines:
        click.echo(f"link: {line}")
    for k, (a, b) in res.fitted.items():
        click.echo(f"fitted {k}: {a:.4g} -> {b:.4g}")
    if res.held_fixed:
        click.echo(f"held at their defaults (the runs cannot tell them apart): {', '.join(res.held_fixed)}")
    click.echo(f"before: {c.summary_line(res.errors_before)}")
    click.echo(f"after:  {c.summary_line(res.errors_after)}")
    click.echo(f"leave-one-out: {c.summary_line(res.loo_errors)}" if res.loo_errors
               else "leave-one-out: needs at least 3 runs")
    for s in skipped:
        click.echo(f"not used: {s['id']}: {s['reason']}")
    click.echo(f"wrote {out_file}: plan --model M --cluster {out_file}")


@main.command("explain")
@plan_options
@click.option("--json", "as_json", is_flag=True)
@_handle_errors
def explain_cmd(**kw):
    """Every number of one plan with its formula, and why each neighbouring plan loses."""
    from planner.analysis.explain import derivation, why_not

    kw = inherit_group_options(kw)
    as_json = kw.pop("as_json")
    ctx, res, doc = run_search(kw | {"top_k": 1}, show_progress=not as_json)
    best = res.plans[0]
    alts = why_not(ctx, best, usable_capacity_gib(ctx, kw.get("memory_headroom") or 0.0))
    doc["why_not"] = alts
    doc["derivation"] = derivation(ctx, best)
    if as_json:
        emit_doc(doc, True, command="explain")
        return
    emit_doc(doc, False)
    from planner.ui.table import explain_text
    click.echo(explain_text(doc))


@main.command("report")
@plan_options
@click.option("--out", "out_file", type=click.Path(dir_okay=False), required=True, help="HTML file to write")
@cost_options
@_handle_errors
def report_cmd(**kw):
    """A self-contained HTML report: ranked plans, Pareto front, pipeline timeline, breakdowns."""
    from planner.ui.progress import progress
    from planner.ui.report import render_report

    kw = inherit_group_options(kw)
    out_file = kw.pop("out_file")
    check_output_path(out_file, "--out")
    cost = {k: kw.pop(k, None) for k in COST_KEYS}
    check_cost_options(cost)
    # one search: the ranked plans and every scored candidate of the same run (SearchResult.ranked);
    # only the leading plans get a stage solve, as in `plan`
    ctx, res, doc = run_search(kw, show_progress=True)
    candidates = [{"plan": e.plan.knobs(), "step_time_s": e.step_time_s, "memory": {"peak_gib": e.memory["peak_gib"]},
                   "fits": e.fits} for e in res.ranked]
    est = estimate_doc(doc["plans"][0], doc["model"]["params_total"], cost) if cost["tokens"] else None
    with progress("rendering the report", True):
        html = render_report(doc, candidates, estimate=est)
    write_text_file(out_file, "--out", html)
    click.echo(f"wrote {safe_line(out_file, 200)} ({len(candidates)} feasible candidates on the Pareto chart)")


@main.command("compare")
@click.option("--model", "model_arg", metavar="NAME|FILE", shell_complete=_complete_model)
@click.option("--cluster", "clusters", multiple=True, metavar="HWxN|FILE", help="repeat to compare")
@click.option("--seq-len", "seq_lens", type=int, multiple=True, callback=_positive_each, help="repeat to compare")
@click.option("--gbs", type=int, callback=_positive)
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8"]), default="bf16")
@click.option("--framework", type=click.Choice(["megatron", "fsdp", "deepspeed", "maxtext"]), default="megatron")
@click.option("--memory-headroom", type=click.FloatRange(0, None), default=0.0, help="GiB to keep free per device")
@cost_options
@click.option("--json", "as_json", is_flag=True)
@click.option("--debug", is_flag=True)
@_handle_errors
def compare_cmd(**kw):
    """The same model on several clusters or sequence lengths, side by side (best plan of each)."""
    from planner.errors import InputError
    from planner.ui.compare import compare_doc, compare_tables
    from planner.ui.table import make_console

    kw = inherit_group_options(kw)
    if not kw["model_arg"]:
        raise InputError("missing --model: give a catalog name (see `plan models`), a spec file or a config.json")
    if not kw["clusters"]:
        raise InputError("missing --cluster: give one or more, e.g. --cluster a100x64 --cluster h100x32")
    cost = {k: kw.pop(k, None) for k in COST_KEYS}
    check_cost_options(cost)
    common = {k: kw[k] for k in ("gbs", "dtype", "framework", "memory_headroom")}
    doc = compare_doc(kw["model_arg"], kw["clusters"], kw["seq_lens"], common, cost,
                      lambda k: run_search(k, show_progress=not kw["as_json"]))
    for r in doc["rows"]:
        if r["error"]:  # a setting without a fitting plan: the table says so, the whole reason goes to stderr
            click.echo(f"no plan fits: {error_line(r['error']['message'])}", err=True)
    if kw["as_json"]:
        from planner.ui.jsondoc import dumps, versioned
        click.echo(dumps(versioned("compare", doc)))
        return
    console = make_console()
    for table in compare_tables(doc, console.width):
        console.print(table)


def main_entry():  # pragma: no cover
    main()


if __name__ == "__main__":  # python -m planner.ui.cli
    main()
