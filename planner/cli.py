"""The `plan` command: a thin click layer over catalogs, cost model, search and emitters."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from typing import Any

import click

from planner import __version__
from planner.errors import PlannerError

KNOB_FLAGS = {  # flag -> ParallelPlan knob
    "tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "ep": "ep", "etp": "etp", "vpp": "vpp",
    "mbs": "micro_batch", "zero": "zero_stage", "recompute": "recompute", "sp": "sequence_parallel",
    "schedule": "schedule", "cp_comm": "cp_comm", "recompute_layers": "recompute_layers",
    "zero_shard": "zero_shard_size", "offload": "offload_optimizer",
}


def _positive(ctx, param, value):
    if value is not None and not isinstance(value, (bool, str, tuple)) and value < 1:
        raise click.BadParameter("must be a positive integer")
    return value


def _complete_model(ctx, param, incomplete):
    from planner.model_catalog import list_models
    names = []
    for name, aliases, _ in list_models():
        names += [name, *aliases]
    return sorted(n for n in set(names) if n.startswith(incomplete))


def _complete_cluster(ctx, param, incomplete):
    from planner.hardware_catalog import list_hardware
    return sorted(f"{hw.id}x" for hw in list_hardware() if f"{hw.id}x".startswith(incomplete))


def plan_options(f):
    """Options shared by every command that builds a plan."""
    opts = [
        click.option("--model", "model_arg", metavar="NAME|FILE", shell_complete=_complete_model,
                     help="catalog name/alias, model spec YAML/JSON, or HF config.json"),
        click.option("--cluster", "cluster_arg", metavar="HWxN|FILE", shell_complete=_complete_cluster,
                     help="<hardware>x<count> (a100x64) or a cluster spec file"),
        click.option("--seq-len", type=int, callback=_positive, help="sequence length in tokens (default 4096)"),
        click.option("--gbs", type=int, callback=_positive, help="global batch in sequences (default: ~4M tokens)"),
        click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8"]), default="bf16", show_default=True),
        click.option("--framework", type=click.Choice(["megatron", "fsdp", "deepspeed", "maxtext"]), default="megatron",
                     show_default=True, help="whose memory/overlap behaviour to model"),
        click.option("--grad-dtype", type=click.Choice(["fp32", "bf16"]),
                     help="gradient buffer / reduction dtype (default: the framework's, fp32 for Megatron and FSDP)"),
        click.option("--optimizer-dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
                     help="Adam moment dtype (bf16: Megatron precision-aware optimizer); master weights stay fp32"),
        click.option("--attention", type=click.Choice(["flash", "unfused"]), default="flash", show_default=True,
                     help="attention kernel: flash (fused, no s x s scores kept; Dao et al. 2022) or unfused "
                     "(scores materialised, as in stacks before mid-2022)"),
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
        click.option("--max-tp", type=int, callback=_positive, help="largest TP to consider (default: scale-up domain)"),
        click.option("--memory-headroom", type=click.FloatRange(0, None), default=0.0, help="GiB to keep free per device"),
        click.option("--top", "top_k", type=click.IntRange(1, 100), default=5, show_default=True),
        click.option("--debug", is_flag=True, help="show a traceback on errors"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _handle_errors(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        debug = kwargs.get("debug") or os.environ.get("PLANNER_DEBUG") == "1"
        try:
            return f(*args, **kwargs)
        except PlannerError as e:
            if debug:
                raise
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)
        except (KeyboardInterrupt, BrokenPipeError):
            sys.exit(130)
        except click.exceptions.Exit:
            raise
        except click.ClickException:
            raise
        except Exception as e:  # never a traceback unless asked
            if debug:
                raise
            msg = " ".join(str(e).split())[:300]
            click.echo(f"error: internal error ({type(e).__name__}: {msg}); rerun with --debug and report it", err=True)
            sys.exit(1)
    return wrapper


def build_inputs(model_arg, cluster_arg, seq_len, gbs, dtype, framework, grad_dtype=None, optimizer_dtype="fp32",
                 attention=None):
    from planner.errors import InputError
    from planner.hardware_catalog import parse_cluster
    from planner.model_catalog import load_model
    from planner.specs import TrainingSpec

    if not model_arg:
        raise InputError("missing --model: give a catalog name (see `plan models`), a spec file or a config.json")
    if not cluster_arg:
        raise InputError("missing --cluster: give <hardware>x<count> such as a100x64 (see `plan clusters`) or a file")
    model = load_model(model_arg)
    cluster = parse_cluster(cluster_arg)
    seq = seq_len or 4096
    if gbs is None:
        gbs = max(1, round(4 * 2**20 / seq))  # ~4M tokens per step, the usual pretraining batch
    try:
        train = TrainingSpec(seq_len=seq, global_batch=gbs, dtype=dtype, framework=framework,
                             grad_dtype=grad_dtype, optimizer_dtype=optimizer_dtype or "fp32",
                             attention_impl=attention or "flash")
    except ValueError as e:
        raise InputError(" ".join(str(e).split())) from None
    return model, cluster, train


def fixed_knobs(kw: dict) -> dict[str, Any]:
    return {knob: kw[flag] for flag, knob in KNOB_FLAGS.items() if kw.get(flag) is not None}


def model_doc(ctx) -> dict:
    m, p = ctx.model, ctx.params
    return {"name": m.name, "family": m.family, "params_total": p.total, "params_active": p.active,
            "params_embedding": p.embedding, "num_layers": m.num_layers, "hidden_size": m.hidden_size,
            "num_heads": m.num_heads, "num_kv_heads": m.num_kv_heads, "moe": m.moe is not None}


def cluster_doc(ctx) -> dict:
    c, hw = ctx.cluster, ctx.cluster.hardware
    return {"name": c.name or f"{hw.id}x{c.count}", "hardware": hw.id, "count": c.count,
            "devices_per_node": c.node_size, "scale_up_domain": c.scale_up_size,
            "hbm_capacity_gib": hw.hbm_capacity_gib, "peak_tflops_bf16": hw.peak_tflops.bf16}


def run_search(kw: dict):
    """Search with the command's options; returns (ctx, result, doc)."""
    from planner.costmodel import Context
    from planner.errors import InputError, NoFeasiblePlan
    from planner.explain import reason
    from planner.costmodel.memory import grad_dtype
    from planner.search import SearchOptions, search
    from planner.specs import ParallelPlan

    model, cluster, train = build_inputs(kw["model_arg"], kw["cluster_arg"], kw.get("seq_len"), kw.get("gbs"),
                                         kw["dtype"], kw["framework"], kw.get("grad_dtype"), kw.get("optimizer_dtype"),
                                         kw.get("attention"))
    fixed = fixed_knobs(kw)
    try:
        ParallelPlan(**{k: v for k, v in fixed.items()})
    except ValueError as e:
        raise InputError(" ".join(str(e).split())) from None
    if fixed.get("vpp", 1) > 1 and "schedule" not in fixed:
        fixed["schedule"] = "interleaved"
    ctx = Context(model, cluster, train)
    t0 = time.perf_counter()
    res = search(ctx, SearchOptions(fixed=fixed, top_k=kw["top_k"], max_tp=kw.get("max_tp"),
                                    memory_headroom_gib=kw.get("memory_headroom") or 0.0))
    seconds = time.perf_counter() - t0
    if not res.plans:
        raise NoFeasiblePlan(nothing_fits_message(ctx, res, kw.get("memory_headroom") or 0.0))
    plans = []
    for ev in res.plans:
        d = ev.to_dict()
        d["reason"] = reason(ctx, ev)
        plans.append(d)
    doc = {"model": model_doc(ctx), "cluster": cluster_doc(ctx),
           "training": {"seq_len": train.seq_len, "global_batch": train.global_batch, "dtype": train.dtype,
                        "framework": train.framework, "grad_dtype": grad_dtype(train),
                        "optimizer_dtype": train.optimizer_dtype, "attention": train.attention_impl},
           "plans": plans,
           "search": {"structures": res.structures, "evaluated": res.evaluated, "feasible": res.feasible,
                      "pruned": res.pruned, "seconds": seconds}}  # emit_doc drops "seconds" from --json
    return ctx, res, doc


def nothing_fits_message(ctx, res, headroom: float) -> str:
    from planner.costmodel import calibration as cal

    cap = ctx.cluster.hardware.hbm_capacity_gib - cal.FIT_RESERVE_GIB - headroom
    low = f"{res.smallest_peak_gib:.1f} GiB" if res.smallest_peak_gib is not None else "unknown"
    return (f"no plan of {ctx.model.name} fits {ctx.cluster.hardware.id} ({cap:.1f} GiB usable per device): the "
            f"smallest peak any plan reaches is {low}. Try more devices, --recompute full, --zero 3, "
            f"--offload, a shorter --seq-len, or an accelerator with more memory")


def emit_doc(doc: dict, as_json: bool) -> None:
    if as_json:
        # byte-identical output for identical input: leave the wall-clock timing out
        out = dict(doc, search={k: v for k, v in doc.get("search", {}).items() if k != "seconds"})
        click.echo(json.dumps(out, indent=2, sort_keys=True, default=float))
    else:
        from planner.render import print_plan_doc
        print_plan_doc(doc)


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@plan_options
@click.option("--json", "as_json", is_flag=True, help="print one JSON object instead of tables")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="write launch configs for the chosen plan here")
@click.option("--emit", "emit", multiple=True, type=click.Choice(["megatron", "deepspeed", "maxtext", "jax", "torchtitan"]),
              help="launchers to write (default: all that can express the plan)")
@click.option("--rank", type=click.IntRange(1, 100), default=1, show_default=True, help="which ranked plan --out writes")
@click.option("--force", is_flag=True, help="overwrite a non-empty --out directory")
@click.option("--min-devices", is_flag=True, help="find the fewest devices (whole nodes, up to the --cluster count) "
              "on which a plan fits (and meets --target-step-s)")
@click.option("--target-step-s", type=click.FloatRange(0, None, min_open=True), help="with --min-devices: required step time")
@click.option("--tokens", help="total training tokens (e.g. 15T): adds wall-clock days, goodput and cost")
@click.option("--price-per-device-hour", type=click.FloatRange(0, None), help="price of one device-hour")
@click.option("--device-mtbf-hours", type=click.FloatRange(0, None, min_open=True),
              help="mean time between failures per device (default: Llama 3's 16k-H100 run)")
@click.option("--restart-min", type=click.FloatRange(0, None), default=10.0, show_default=True,
              help="minutes to restart after a failure (Daly 2006 uses 10 min in his examples)")
@click.version_option(__version__, "--version", prog_name="plan")
@click.pass_context
@_handle_errors
def main(cctx, as_json, out_dir, emit, rank, force, min_devices, target_step_s, tokens, price_per_device_hour, device_mtbf_hours, restart_min, **kw):
    """Plan the parallel layout of a training run: `plan --model llama-70b --cluster a100x64`."""
    if cctx.invoked_subcommand is not None:
        return
    if not kw.get("model_arg") and not kw.get("cluster_arg"):
        click.echo(cctx.get_help())
        return
    if min_devices:
        kw = kw | {"cluster_arg": _min_devices_cluster(kw, target_step_s)}
    elif target_step_s:
        from planner.errors import InputError
        raise InputError("--target-step-s needs --min-devices")
    ctx, res, doc = run_search(kw | {"top_k": max(kw["top_k"], rank)})
    if tokens:
        doc["training_estimate"] = training_estimate(doc, tokens, price_per_device_hour, device_mtbf_hours, restart_min)
    if out_dir:
        _write_out(ctx, doc, out_dir, rank, set(emit) or None, force, quiet=as_json)
    emit_doc(doc, as_json)
    if tokens and not as_json:
        click.echo(estimate_text(doc["training_estimate"]))


def _min_devices_cluster(kw, target_step_s) -> str:
    """The smallest <hw>x<n> (n <= the --cluster count) that fits; the normal search then runs on it."""
    from planner.errors import NoFeasiblePlan
    from planner.search import SearchOptions, min_devices

    model, cluster, train = build_inputs(kw["model_arg"], kw["cluster_arg"], kw.get("seq_len"), kw.get("gbs"),
                                         kw["dtype"], kw["framework"], kw.get("grad_dtype"), kw.get("optimizer_dtype"),
                                         kw.get("attention"))
    opts = SearchOptions(fixed=fixed_knobs(kw), top_k=1, max_tp=kw.get("max_tp"),
                         memory_headroom_gib=kw.get("memory_headroom") or 0.0)
    n, _ = min_devices(model, cluster, train, opts, target_step_s)
    if n is None:
        goal = f" at <= {target_step_s:g} s per step" if target_step_s else ""
        raise NoFeasiblePlan(f"no count up to {cluster.count} {cluster.hardware.id} devices runs {model.name}{goal}; "
                             "raise the --cluster count, relax --target-step-s, or pick a bigger accelerator")
    click.echo(f"fewest devices: {n} x {cluster.hardware.id}", err=True)
    return f"{cluster.hardware.id}x{n}"


def training_estimate(doc, tokens, price, mtbf_h, restart_min) -> dict:
    from planner.goodput import estimate_for_plan

    kw = {"price_per_device_hour": price}
    if mtbf_h:
        kw["device_mtbf_h"] = mtbf_h
    est = estimate_for_plan(doc["plans"][0], tokens, params_total=doc["model"]["params_total"],
                            restart_s=restart_min * 60.0, **kw)
    return est.to_dict()


def estimate_text(e: dict) -> str:
    line = (f"Training: {e['days']:.1f} days without failures, {e['effective_days']:.1f} days expected "
            f"(goodput {100 * e['goodput']:.1f}%: ~{e['failures_expected']:.0f} failures, checkpoint every "
            f"{e['checkpoint_interval_s'] / 60:.0f} min taking {e['checkpoint_s']:.0f} s); "
            f"{e['device_hours']:,.0f} device-hours")
    if e.get("cost") is not None:
        line += f", cost {e['cost']:,.0f}"
    return line


def _write_out(ctx, doc, out_dir, rank, emit, force, quiet):
    from planner.emit import emit_all, write_launch_configs
    from planner.errors import InputError
    from planner.specs import ParallelPlan

    if rank > len(doc["plans"]):
        raise InputError(f"--rank {rank}: only {len(doc['plans'])} plans were found")
    chosen = doc["plans"][rank - 1]
    plan = ParallelPlan(**chosen["plan"])
    pred = dict(chosen) | {"model": doc["model"], "cluster": doc["cluster"], "training": doc["training"]}
    files, skipped = emit_all(ctx.model, ctx.cluster, ctx.train, plan, pred, emit)
    write_launch_configs(out_dir, files, force=force)
    if not quiet:
        click.echo(f"wrote {', '.join(sorted(files))} to {out_dir}", err=True)
        for launcher, why in sorted(skipped.items()):
            click.echo(f"not written for {launcher}: {why}", err=True)


@main.command("models")
@click.option("--json", "as_json", is_flag=True)
@_handle_errors
def models_cmd(as_json):
    """List the model catalog (one model a line)."""
    from planner.model_catalog import list_models
    from planner.params import count_params

    rows = []
    for name, aliases, spec in list_models():
        p = count_params(spec)
        rows.append({"name": name, "aliases": list(aliases), "params_total": p.total, "params_active": p.active,
                     "layers": spec.num_layers, "hidden": spec.hidden_size, "moe": spec.moe is not None})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        act = f" ({r['params_active'] / 1e9:.1f}B active)" if r["moe"] else ""
        al = f"  aliases: {', '.join(r['aliases'])}" if r["aliases"] else ""
        click.echo(f"{r['name']:<22} {r['params_total'] / 1e9:8.1f}B{act:<16} L={r['layers']:<4} h={r['hidden']:<6}{al}")


@main.command("clusters")
@click.option("--json", "as_json", is_flag=True)
@_handle_errors
def clusters_cmd(as_json):
    """List the hardware profiles (use as <id>x<count>)."""
    from planner.hardware_catalog import list_hardware

    rows = []
    for hw in list_hardware():
        rows.append({"id": hw.id, "aliases": list(hw.aliases), "bf16_tflops": hw.peak_tflops.bf16,
                     "fp8_tflops": hw.peak_tflops.fp8, "hbm_gib": hw.hbm_capacity_gib,
                     "scale_up": f"{hw.scale_up.kind} {hw.scale_up.domain_size} x {hw.scale_up.unidir_GBps:g} GB/s/dir",
                     "scale_out_GBps": hw.scale_out.unidir_GBps_per_device})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        fp8 = f"{r['fp8_tflops']:g}" if r["fp8_tflops"] else "-"
        click.echo(f"{r['id']:<16} bf16 {r['bf16_tflops']:7g} TF  fp8 {fp8:>6} TF  HBM {r['hbm_gib']:6.1f} GiB  "
                   f"{r['scale_up']}  NIC {r['scale_out_GBps']:g} GB/s  aliases: {', '.join(r['aliases'])}")


@main.command("validate")
@click.option("--runs", "runs_file", type=click.Path(), help="runs file (default: the project's copy of the dev runs)")
@click.option("--json", "as_json", is_flag=True)
@click.option("--write-docs", type=click.Path(dir_okay=False), help="also write the markdown table here")
@click.option("--search-quality", is_flag=True, help="also rank each fully published plan in an unconstrained search")
@click.option("--debug", is_flag=True)
@_handle_errors
def validate_cmd(runs_file, as_json, write_docs, search_quality, debug):
    """Predict every published run in a runs file and compare with the measurements."""
    from planner.data import data_dir
    from planner.validate import load_runs, markdown_table, validate_runs

    path = runs_file or str(data_dir("runs") / "known_runs_dev.yaml")
    runs = load_runs(path)
    result = validate_runs(runs)
    quality_md = ""
    if search_quality:
        from planner.validate import search_quality as sq, search_quality_table
        result["search_quality"] = [q for r in runs if (q := sq(r))]
        quality_md = ("\n## Search quality: published plans vs the unconstrained search\n\n"
                      "Each fully published layout, scored by this model, against the best plan the search finds "
                      "with only the training settings fixed; rank = position of the published plan among all "
                      "feasible plans the search scored.\n\n" + search_quality_table(result["search_quality"]))
    if write_docs:
        from planner.emit import atomic_write_text
        atomic_write_text(write_docs, "# Validation against published runs\n\n"
                          "Generated by `plan validate --write-docs docs/validation.md --search-quality`.\n\n"
                          + markdown_table(result) + quality_md)
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True, default=float))
    else:
        click.echo(markdown_table(result))


@main.command("explain")
@plan_options
@click.option("--json", "as_json", is_flag=True)
@_handle_errors
def explain_cmd(as_json, **kw):
    """Every number of one plan with its formula, and why each neighbouring plan loses."""
    from planner.costmodel import calibration as cal
    from planner.explain import derivation, why_not

    ctx, res, doc = run_search(kw | {"top_k": 1})
    best = res.plans[0]
    cap = ctx.cluster.hardware.hbm_capacity_gib - cal.FIT_RESERVE_GIB - (kw.get("memory_headroom") or 0.0)
    alts = why_not(ctx, best, cap)
    doc["why_not"] = alts
    doc["derivation"] = derivation(ctx, best)
    if as_json:
        emit_doc(doc, True)
        return
    emit_doc(doc, False)
    click.echo("\nHow each number was computed (formula [inputs]; --json adds each source):")
    for r in doc["derivation"]:
        v = r["value"]
        val = f"{v:.4g}" if isinstance(v, float) else str(v)
        click.echo(f"  {r['name']:<44} {val:>12} {r['unit']:<8} {r['formula']}")
    click.echo("\nWhy not:")
    for a in alts:
        click.echo(f"  {a['change']:<16} {a['verdict']:<16} {a['detail']}")


@main.command("report")
@plan_options
@click.option("--out", "out_file", type=click.Path(dir_okay=False), required=True, help="HTML file to write")
@click.option("--tokens", help="total training tokens: adds the training-time estimate")
@_handle_errors
def report_cmd(out_file, tokens, **kw):
    """A self-contained HTML report: ranked plans, Pareto front, pipeline timeline, breakdowns."""
    from planner.emit import atomic_write_text
    from planner.report import render_report
    from planner.search import SearchOptions, search

    ctx, res, doc = run_search(kw)
    fixed = fixed_knobs(kw)
    every = search(ctx, SearchOptions(fixed=fixed, top_k=100000, max_tp=kw.get("max_tp"),
                                      memory_headroom_gib=kw.get("memory_headroom") or 0.0))
    candidates = [{"plan": e.plan.knobs(), "step_time_s": e.step_time_s, "memory": {"peak_gib": e.memory["peak_gib"]},
                   "fits": e.fits} for e in every.plans]
    est = None
    if tokens:
        from planner.goodput import estimate_for_plan
        est = estimate_for_plan(doc["plans"][0], tokens, params_total=doc["model"]["params_total"], restart_s=600.0)
    atomic_write_text(out_file, render_report(doc, candidates, estimate=est))
    click.echo(f"wrote {out_file} ({len(candidates)} feasible candidates on the Pareto chart)")


@main.command("compare")
@click.option("--model", "model_arg", required=True, metavar="NAME|FILE")
@click.option("--cluster", "clusters", multiple=True, required=True, metavar="HWxN|FILE", help="repeat to compare")
@click.option("--seq-len", "seq_lens", type=int, multiple=True, help="repeat to compare")
@click.option("--gbs", type=int, callback=_positive)
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8"]), default="bf16")
@click.option("--framework", type=click.Choice(["megatron", "fsdp", "deepspeed", "maxtext"]), default="megatron")
@click.option("--json", "as_json", is_flag=True)
@click.option("--debug", is_flag=True)
@_handle_errors
def compare_cmd(model_arg, clusters, seq_lens, gbs, dtype, framework, as_json, debug):
    """The same model on several clusters or sequence lengths, side by side (best plan of each)."""
    from rich.table import Table

    from planner.errors import PlannerError
    from planner.render import plan_label

    rows = []
    for cl in clusters:
        for seq in (seq_lens or (None,)):
            kw = {"model_arg": model_arg, "cluster_arg": cl, "seq_len": seq, "gbs": gbs, "dtype": dtype,
                  "framework": framework, "top_k": 1}
            try:
                _, _, doc = run_search(kw)
                best = doc["plans"][0]
                rows.append({"cluster": doc["cluster"]["name"], "seq_len": doc["training"]["seq_len"],
                             "global_batch": doc["training"]["global_batch"], "plan": best["plan"],
                             "step_time_s": best["step_time_s"], "tokens_per_s_per_device": best["tokens_per_s_per_device"],
                             "tokens_per_s": best["tokens_per_s_per_device"] * doc["cluster"]["count"],
                             "mfu": best["mfu"], "peak_gib": best["memory"]["peak_gib"], "error": None})
            except PlannerError as e:
                rows.append({"cluster": cl, "seq_len": seq, "error": str(e)})
    if as_json:
        click.echo(json.dumps({"model": model_arg, "rows": rows}, indent=2, sort_keys=True, default=float))
        return
    t = Table(title=f"{model_arg}: best plan per setting")
    for col in ("cluster", "seq", "layout", "step s", "tok/s total", "tok/s/dev", "MFU", "peak GiB"):
        t.add_column(col, no_wrap=True)
    for r in rows:
        if r["error"]:
            t.add_row(r["cluster"], str(r["seq_len"] or ""), "no plan: " + r["error"][:60], "", "", "", "", "")
            continue
        t.add_row(r["cluster"], str(r["seq_len"]), plan_label(r["plan"]), f"{r['step_time_s']:.3f}",
                  f"{r['tokens_per_s']:,.0f}", f"{r['tokens_per_s_per_device']:,.0f}", f"{100 * r['mfu']:.1f}%",
                  f"{r['peak_gib']:.1f}")
    from planner.render import make_console
    make_console().print(t)


def main_entry():  # pragma: no cover
    main()


if __name__ == "__main__":  # python -m planner.cli
    main()
