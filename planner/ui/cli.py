"""The `plan` command: a thin click layer over catalogs, cost model, search and emitters."""

from __future__ import annotations

import errno
import functools
import os
import signal
import sys

import click

from planner import __version__, app
from planner.app import KNOB_FLAGS, PlanRequest, resolve_target  # noqa: F401  (KNOB_FLAGS: flag -> knob)
from planner.errors import PlannerError
from planner.gcpasses import fewer_gc_passes
from planner.names import error_line, safe_line
from planner.stacks import FRAMEWORKS
from planner.ui.costopts import COST_KEYS, check_cost_options, cost_options, estimate_doc, estimate_text, finite
from planner.ui.inherit import inherit_group_options
from planner.ui.knobopts import knob_options
from planner.ui.repeats import NoRepeatCommand, NoRepeatMixin


def _positive(ctx, param, value):
    values = value if isinstance(value, tuple) else (value,)
    if any(v is not None and not isinstance(v, (bool, str)) and v < 1 for v in values):
        raise click.BadParameter("must be a positive integer")
    return value


_finite = finite  # the one click callback refusing nan/inf (planner.ui.costopts)
_ARGV: list[str] = []  # the arguments of this invocation (for the eager --version, which runs before --json is read)


def _print_version(ctx, param, value):
    """--version: `plan, version X`, or with --json anywhere on the line the version document."""
    if not value or ctx.resilient_parsing:
        return
    if "--json" in _ARGV:
        from planner.ui.jsondoc import dumps, versioned
        click.echo(dumps(versioned("plan", {"version": __version__})))
    else:
        click.echo(f"plan, version {__version__}")
    ctx.exit()


class OneLineGroup(NoRepeatMixin, click.Group):
    """click.Group whose usage errors are one line on stderr (exit 2), that ends quietly when its output
    pipe closes (`plan models | head -1` exits 0), and that turns SIGTERM into an exit that runs the
    clean-up of half-written files (SIGKILL cannot be caught: a killed run may leave a .NAME.XXXX.tmp).
    A scalar option given twice is a usage error (planner.ui.repeats), in the group and its subcommands."""

    command_class = NoRepeatCommand

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        previous = _exit_on_sigterm()
        _ascii_fallback()
        _ARGV[:] = list(sys.argv[1:] if args is None else args)
        try:
            with fewer_gc_passes():  # planner.gcpasses: a plan run keeps nearly everything it allocates
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
        except OSError as e:  # raised outside a command (help, --version): same rule as _handle_errors
            if e.errno != errno.EPIPE:
                _output_failed(e)
            _quiet_broken_pipe()
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        sys.exit(rv if isinstance(rv, int) else 0)


# one ASCII character per glyph, so that rich's column widths stay right
_ASCII = {"±": "~", "█": "#", "▌": "|", "…": ".", "·": "-", "—": "-", "–": "-", "×": "x", "≤": "<", "≥": ">",
          "≈": "~", "µ": "u", "→": ">", "←": "<", "─": "-", "│": "|", "✓": "y", "✗": "x", "°": "o", "²": "2"}


def _ascii_glyphs(err: UnicodeError) -> tuple[str, int]:
    """codecs error handler: the planner's glyphs as ASCII, anything else as '?'."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    bad = err.object[err.start:err.end]
    return "".join(_ASCII.get(ch, "?") for ch in bad), err.end


def _ascii_fallback() -> None:
    """stdout/stderr that cannot carry UTF-8 (PYTHONIOENCODING=ascii, LC_ALL=C without UTF-8 mode) get ASCII
    glyphs instead of a UnicodeEncodeError (rich switches to ASCII boxes by itself on such a stream)."""
    import codecs

    try:
        codecs.lookup_error("planner-ascii")
    except LookupError:
        codecs.register_error("planner-ascii", _ascii_glyphs)
    for stream in (sys.stdout, sys.stderr):
        enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if enc and not enc.startswith(("utf", "cp65001")) and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="planner-ascii")
            except (ValueError, OSError):
                pass


def _exit_on_sigterm():
    """SIGTERM raises SystemExit(143), so `finally`/`except BaseException` clean-ups (the temporary file of
    an atomic write) run; returns the previous handler (None off the main thread, where it cannot be set)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _output_failed(e: OSError) -> None:
    """Writing the output failed (`> /dev/full`: ENOSPC, EIO): one line on stderr, exit 2, no traceback; stdout
    is pointed at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    where = f" ({safe_line(e.filename, 200)})" if getattr(e, "filename", None) else ""
    click.echo(f"error: cannot write the output{where}: {e.strerror or e}: check the disk or the redirection",
               err=True)
    sys.exit(2)


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


def _dispatchers_by_stack() -> str:
    """Each plannable stack's MoE dispatchers (Stack.moe_dispatchers), for --moe-dispatcher's help."""
    from planner.stacks import traits

    return "; ".join(f"{fw}: {', '.join(traits(fw).moe_dispatchers)}" for fw in FRAMEWORKS)


def _setting_options() -> list:
    """Model, cluster and training settings."""
    return [
        click.option("--model", "model_arg", metavar="NAME|FILE", shell_complete=_complete_model,
                     help="catalog name/alias, model spec YAML/JSON, or HF config.json"),
        click.option("--cluster", "cluster_arg", metavar="HWxN|FILE", shell_complete=_complete_cluster,
                     help="<hardware>x<count> (a100x64) or a cluster spec file"),
        click.option("--seq-len", type=int, callback=_positive, help="sequence length in tokens (default 4096)"),
        click.option("--gbs", type=int, callback=_positive,
                     help="global batch in sequences (default: ~4M tokens, rounded so that every DP degree the "
                          "devices allow divides it)"),
        click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8"]), default="bf16", show_default=True),
        click.option("--launcher", type=click.Choice(["megatron", "deepspeed", "torchtitan", "maxtext"]),
                     help="plan for this stack: only plans it can run, scored with its framework behaviour; "
                          "--out writes its files (docs/launchers.md)"),
        click.option("--framework", type=click.Choice(list(FRAMEWORKS)),
                     help="whose memory/overlap behaviour to model (default: the --launcher's, else megatron; "
                          "maxtext on TPUs)"),
        click.option("--grad-dtype", type=click.Choice(["fp32", "bf16"]),
                     help="gradient buffer / reduction dtype (default: the framework's, fp32 for Megatron and FSDP)"),
        click.option("--optimizer-dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
                     help="Adam moment dtype (bf16: Megatron precision-aware optimizer); master weights stay fp32"),
        click.option("--moe-capacity-factor", type=click.FloatRange(0, 1024, min_open=True), callback=_finite,
                     help="MoE expert capacity (x the balanced load): tokens beyond it are dropped, inputs padded to "
                     "it; time and memory are charged at it (default: dropless, charged at balanced routing)"),
        click.option("--moe-load-imbalance", type=click.FloatRange(1, 64), callback=_finite,
                     help="a learned router's measured load: the routed tokens the busiest EP rank receives over the "
                     "balanced share, at the EP degree planned; charged to the experts, their activations and the EP "
                     "all-to-alls of plans with EP > 1 (default: a balanced router's, as vendor benchmarks force; "
                     "dropless only)"),
        click.option("--moe-dispatcher", type=click.Choice(["alltoall", "allgather", "flex"]),
                     help="MoE token dispatcher (Megatron --moe-token-dispatcher-type; flex = DeepEP), one the stack "
                     f"runs ({_dispatchers_by_stack()}). Default: the stack's (Megatron alltoall)"),
        click.option("--moe-flex-backend", type=click.Choice(["deepep", "hybridep"]),
                     help="with --moe-dispatcher flex: its kernels (Megatron --moe-flex-dispatcher-backend): deepep, "
                     "or hybridep (Megatron-Bridge's GB200 recipes: the permute inside the dispatch, fewer host "
                     "launches after its sync). Default: deepep"),
        click.option("--moe-a2a-overlap/--no-moe-a2a-overlap", default=None,
                     help="Megatron batch-level EP all-to-all overlap (--overlap-moe-expert-parallel-comm "
                     "--delay-wgrad-compute): one micro-batch's forward merged with another's backward, the "
                     "all-to-alls hidden under that compute; a dropless dispatcher's host syncs then expose the "
                     "host's kernel launches. Default: searched with and without where the stack runs it "
                     "(Megatron, MoE), the faster kept"),
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
        click.option("--param-dtype", type=click.Choice(["fp32", "bf16"]),
                     help="sharded master parameters under ZeRO-3 (MaxText weight_dtype; bf16 also keeps Adam's "
                     "moments in bf16, as MaxText's mu_dtype inherits it). Default fp32"),
        click.option("--fp8-act-cache/--no-fp8-act-cache", "fp8_moe_act_cache", default=None,
                     help="with --dtype fp8 on MoE models: cache the experts' SwiGLU inputs for backward in FP8 and "
                     "recompute the SwiGLU output (DeepSeek-V3 report sec. 3.3.2); default off (Megatron keeps BF16)"),
        click.option("--fp8-param-gather/--no-fp8-param-gather", "fp8_param_gather", default=None,
                     help="with --dtype fp8: keep the FP8 linears' weights in FP8 (Megatron --fp8-param-gather, the "
                     "FP8 recipes of NeMo and Megatron-Bridge; torchtitan's FSDP float8 all-gather) instead of a bf16 "
                     "copy plus Transformer Engine's cached FP8 weights; default off (Megatron's default)"),
        click.option("--fp8-attention/--no-fp8-attention", "fp8_attention", default=None,
                     help="with --dtype fp8, Megatron only: run the attention core in FP8 too (megatron-core's "
                     "TransformerConfig.fp8_dot_product_attention, which Megatron-Bridge sets and Megatron-LM's "
                     "pretrain_gpt.py has no flag for; MXFP8 under --fp8-recipe mxfp8), priced from cuDNN's published "
                     "FP8 vs BF16 attention benchmark; default off (not searched)"),
        click.option("--attention", type=click.Choice(["flash", "unfused"]), default="flash", show_default=True,
                     help="attention kernel: flash (fused, no s x s scores kept; Dao et al. 2022) or unfused "
                     "(scores materialised, as in stacks before mid-2022)"),
    ]


def _knob_options() -> list:
    """The plan knobs (each pins one; the rest are searched) and the search/output settings."""
    return [
        *knob_options(),
        click.option("--nic-bw", metavar="BW", help="NIC bandwidth per device and direction, with a unit: 400Gb "
                     "(gigabits/s) or 50GB (gigabytes/s); replaces the hardware profile's"),
        click.option("--scale-up-bw", metavar="BW",
                     help="scale-up (NVLink/xGMI/ICI) bandwidth per device and direction, "
                     "with a unit: 450GB or 3600Gb; measured busbw scales with it"),
        click.option("--max-tp", type=int, callback=_positive,
                     help="largest TP to consider (default: scale-up domain)"),
        click.option("--memory-headroom", type=click.FloatRange(0, None), default=None, callback=_finite,
                     help="GiB to keep free per device. Default: the memory margin, the memory error band's share of "
                     "the usable memory (90% of published peaks land within it of their prediction, out of sample): "
                     "plans that do not keep it free rank after every plan that does, so #1 and --out keep it when "
                     "any plan can; 0 opts out"),
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
                _output_failed(e)
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
                   "explain_cmd": "explain", "report_cmd": "plan", "compare_cmd": "compare",
                   "calibrate_cmd": "calibrate"}.get(f.__name__, "plan")
        click.echo(dumps(error_doc(command, code, " ".join(message.split()))))


def request_of(kw: dict, emit: tuple[str, ...] = ()) -> PlanRequest:
    """The typed request of a command's options, with --launcher/--framework/--emit made consistent."""
    return resolve_target(PlanRequest.from_options(kw), emit)


def spinner(show: bool):
    """The app layer's Progress: a spinner on stderr (planner.ui.progress) when `show` and stderr is a terminal."""
    if not show:  # --json: nothing to show, and rich stays unimported
        return app.quiet
    from planner.ui.progress import progress

    return lambda message: progress(message, show)


def run_search(kw: dict, show_progress: bool = False):
    """Search with the command's options; returns (ctx, result, doc) (planner.app.run_search)."""
    return app.run_search(request_of(kw), spinner(show_progress))


def model_notes(doc: dict) -> None:
    """stderr: the fields a config.json left to Hugging Face's defaults (model.defaulted_fields)."""
    defaults = doc.get("model", {}).get("defaulted_fields")
    if defaults:
        given = ", ".join(f"{k} = {v}" for k, v in defaults.items())
        click.echo(safe_line(f"note: the model file does not give {', '.join(defaults)}; Hugging Face's defaults "
                             f"are used: {given}. Add them to the file if the model differs", 600), err=True)


def emit_doc(doc: dict, as_json: bool, rank: int = 1, command: str = "plan") -> None:
    if not as_json:
        model_notes(doc)
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
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
@click.pass_context
@_handle_errors
def main(cctx, as_json, out_dir, emit, rank, force, min_devices, target_step_s, **kw):
    """Plan the parallel layout of a training run: `plan --model llama-70b --cluster a100x64`."""
    if cctx.invoked_subcommand is not None:
        return
    if not kw.get("model_arg") and not kw.get("cluster_arg"):
        if as_json:  # a bare `plan --json`: the usage as a document
            from planner.ui.jsondoc import dumps, versioned
            click.echo(dumps(versioned("plan", {"usage": cctx.get_help(), "commands": sorted(main.commands)})))
            return
        click.echo(cctx.get_help())
        return
    if out_dir is not None:  # before any search: an empty or unusable --out is refused up front
        from planner.emit import check_out_dir
        check_out_dir(out_dir)
    cost = {k: kw.pop(k, None) for k in COST_KEYS}
    req = request_of(kw, emit)
    check_cost_options(cost, (kw.get("cluster_arg"),))
    if target_step_s and not min_devices:
        from planner.errors import InputError
        raise InputError("--target-step-s needs --min-devices")
    fewest = None
    if min_devices:
        fewest_cluster, fewest = app.min_devices_cluster(req, target_step_s, spinner(not as_json))
        if not as_json:
            from planner.ui.sizing import sizing_line
            click.echo(sizing_line(fewest), err=True)
        req = req.replace(cluster=fewest_cluster, even_stages=True)
    ctx, res, doc = app.run_search(req.replace(top_k=max(req.top_k, rank)), spinner(not as_json))
    if fewest:
        doc["min_devices"] = fewest
    if cost["tokens"]:
        doc["training_estimate"] = estimate_doc(doc["plans"][min(rank, len(doc["plans"])) - 1],
                                                doc["model"]["params_total"], cost, doc["cluster"])
    if out_dir:
        doc["out"] = _write_out(ctx, doc, out_dir, rank, app.emit_set(req, emit), force, quiet=as_json)
        if not req.launcher:
            for line in app.other_launchers(ctx, req, doc, rank):
                click.echo(line, err=True)
    emit_doc(doc, as_json, rank)
    if cost["tokens"] and not as_json:
        from planner.ui.table import columns_for_text
        click.echo(estimate_text(doc["training_estimate"], columns_for_text()))


def _write_out(ctx, doc, out_dir, rank, emit, force, quiet: bool = False) -> dict:
    out = app.write_launch_files(ctx, doc, out_dir, rank, emit, force)
    kept = out.pop("kept")
    if not quiet:
        click.echo(f"wrote {', '.join(out['written'])} to {safe_line(out_dir, 200)}", err=True)
    if kept:  # a planner file name the manifest does not vouch for: it may be the user's, so it stays
        click.echo(f"kept {', '.join(kept)}: changed since written (or written by an older planner)", err=True)
    if out.get("memory_warning"):
        click.echo(f"warning: {out['memory_warning']}", err=True)
    for launcher, why in out["not_written"].items():  # on stderr under --json too (the document lists them)
        click.echo(f"not written for {launcher}: {safe_line(why, 300)}", err=True)
    return out


def check_output_path(path: str, option: str, force: bool | None = None, inputs: tuple = ()) -> None:
    """Refuse an output path that cannot be written, or that is one of the command's `inputs`, before any
    long computation (planner.outputs)."""
    from planner.outputs import check_output_path as check

    check(path, option, force, tuple(str(p) for p in inputs if p))


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
    from planner.analysis.validate import VALIDATE_LEGEND, markdown_table

    kw = inherit_group_options(kw)
    as_json, write_docs = kw["as_json"], kw["write_docs"]
    if write_docs:
        check_output_path(write_docs, "--write-docs", inputs=(kw["runs_file"] or app.default_runs_file(),))
        previous = app.previous_validation_doc(write_docs)  # bounded, UTF-8, read before the work
    result = app.validate_file(kw["runs_file"] or app.default_runs_file(), kw["search_quality"], spinner(not as_json))
    if write_docs:
        write_text_file(write_docs, "--write-docs", app.validation_markdown(result, previous))
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
@click.option("--force", is_flag=True, help="write the profile even when a fitted constant ends at its bound or "
              "the fit makes the predictions worse (refused otherwise)")
@click.option("--json", "as_json", is_flag=True)
@_handle_errors
def calibrate_cmd(runs_file, nccl_logs, out_file, force, as_json):
    """Fit the model's physical constants to your cluster's measured steps and nccl-tests logs."""
    from planner.ui.jsondoc import dumps, versioned

    check_output_path(out_file, "--out", inputs=(runs_file, *nccl_logs))
    with spinner(not as_json)("fitting the constants to the measured runs"):  # bounded: <= 100 runs, <= 11 fits
        result = app.calibrate_file(runs_file, nccl_logs, out_file, force=force)
    text = dumps(versioned("calibrate", result.doc)) if as_json else ""  # checked finite before anything is written
    write_text_file(out_file, "--out", result.cluster_yaml)
    for warning in result.warnings:
        click.echo(f"warning: {safe_line(warning, 600)}", err=True)
    if as_json:
        click.echo(text)
        return
    for line in result.lines:
        click.echo(line)


@main.command("explain")
@plan_options
@click.option("--rank", type=click.IntRange(1, 100), default=1, show_default=True,
              help="explain plan #N of the ranked table (as `plan` ranks it with the same flags)")
@click.option("--vs", "vs", type=click.IntRange(1, 100),
              help="also show, term by term, how plan #N differs from the explained plan")
@click.option("--json", "as_json", is_flag=True)
@_handle_errors
def explain_cmd(**kw):
    """Every number of one plan with its formula, and why each neighbouring plan loses."""
    kw = inherit_group_options(kw)
    as_json, rank, vs = kw.pop("as_json"), kw.pop("rank"), kw.pop("vs")
    _, _, doc = app.explain_search(request_of(kw), spinner(not as_json), rank=rank, vs=vs)
    if as_json:
        emit_doc(doc, True, rank=rank, command="explain")
        return
    emit_doc(doc, False, rank=rank)
    from planner.ui.table import explain_text
    click.echo(explain_text(doc))


@main.command("report")
@plan_options
@click.option("--out", "out_file", type=click.Path(dir_okay=False), required=True, help="HTML file to write")
@click.option("--force", is_flag=True, help="replace an existing --out file")
@cost_options
@_handle_errors
def report_cmd(**kw):
    """A self-contained HTML report: ranked plans, Pareto front, pipeline timeline, breakdowns."""
    from planner.ui.progress import progress
    from planner.ui.report import render_report

    kw = inherit_group_options(kw)
    out_file, force = kw.pop("out_file"), kw.pop("force")
    check_output_path(out_file, "--out", force=force, inputs=(kw.get("model_arg"), kw.get("cluster_arg")))
    cost = {k: kw.pop(k, None) for k in COST_KEYS}
    check_cost_options(cost, (kw.get("cluster_arg"),))
    # one search: the ranked plans and every scored candidate of the same run (SearchResult.ranked);
    # only the leading plans get a stage solve, as in `plan`
    _, res, doc = run_search(kw, show_progress=True)
    candidates = app.scored_candidates(res)
    est = estimate_doc(doc["plans"][0], doc["model"]["params_total"], cost, doc["cluster"]) if cost["tokens"] else None
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
@click.option("--framework", type=click.Choice(list(FRAMEWORKS)),
              help="whose memory/overlap behaviour to model (default: each cluster's as `plan` chooses it: megatron, "
                   "maxtext on TPUs)")
@click.option("--memory-headroom", type=click.FloatRange(0, None), default=None,
              help="GiB to keep free per device (default: the memory-band margin; 0 opts out)")
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
    check_cost_options(cost, kw["clusters"])
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
    from planner.ui.table import columns_for_text, wrapped
    for note in doc["band_notes"]:
        click.echo(wrapped("note: " + note, columns_for_text(), "  "))


if __name__ == "__main__":  # python -m planner.ui.cli
    main()
