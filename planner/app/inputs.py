"""From a request to the specs the cost model and the search take, with every check that refuses a request
before the search runs (exit 2 with the reason)."""

from __future__ import annotations

from typing import Any

from planner.app.request import PlanRequest
from planner.errors import InputError
from planner.search.space import divisors
from planner.specs import ClusterSpec, ModelSpec, TrainingSpec


def build_inputs(req: PlanRequest) -> tuple[ModelSpec, ClusterSpec, TrainingSpec]:
    """The model, cluster and training specs of a request, with the flag overrides applied."""
    from pydantic import ValidationError

    from planner.catalog.hardware import parse_cluster
    from planner.catalog.hf_import import _validation_message
    from planner.catalog.models import load_model
    from planner.launchers import default_framework

    if not req.model:
        raise InputError("missing --model: give a catalog name (see `plan models`), a spec file or a config.json")
    if not req.cluster:
        raise InputError("missing --cluster: give <hardware>x<count> such as a100x64 (see `plan clusters`) or a file")
    model = load_model(req.model)
    cluster = req.cluster if isinstance(req.cluster, ClusterSpec) else parse_cluster(req.cluster)
    seq = req.seq_len or 4096
    gbs = req.gbs if req.gbs is not None else default_global_batch(seq, cluster.count)
    try:
        train = TrainingSpec(seq_len=seq, global_batch=gbs, dtype=req.dtype,
                             framework=req.framework or default_framework(cluster),
                             grad_dtype=req.grad_dtype, optimizer_dtype=req.optimizer_dtype or "fp32",
                             attention_impl=req.attention or "flash")
    except ValidationError as e:
        raise InputError(_validation_message(e, "training settings")) from None
    train = training_overrides(train, req)
    return model, cluster_overrides(cluster, req), train


# ~4M tokens per step, the usual pretraining batch (Llama 3 report, arXiv 2407.21783, sec. 3.4.1: 4M tokens at first)
DEFAULT_BATCH_TOKENS = 4 * 2**20


def default_global_batch(seq_len: int, devices: int) -> int:
    """The global batch (sequences) when --gbs is not given: ~DEFAULT_BATCH_TOKENS, rounded to the nearest multiple
    of the largest divisor of the device count that is at most that many sequences, so that every data-parallel
    degree the devices allow divides the batch. A power-of-two batch over 72 devices (one GB200 NVL72) admits only
    DP 1-8 and forces the rest into pipeline stages (llama-3.1-70b, predicted: TP2 PP9 DP4, 20.8 s a step, against
    TP1 PP1 DP72 at 1,008 sequences, 18.9 s); 1,008 = 14 x 72 is as near 4M tokens. Ties go to the smaller batch."""
    base = max(1, round(DEFAULT_BATCH_TOKENS / seq_len))
    step = max(d for d in divisors(devices) if d <= base)
    lo = max(step, base // step * step)
    return lo if base - lo <= lo + step - base else lo + step


def training_overrides(train: TrainingSpec, req: PlanRequest) -> TrainingSpec:
    """Training settings given by flags that only some models or stacks take (--moe-capacity-factor,
    --compile, --fp8-recipe); the spec's validators and planner.search.request own the rules."""
    from pydantic import ValidationError

    from planner.catalog.hf_import import _validation_message

    upd = {k: getattr(req, k) for k in ("moe_capacity_factor", "moe_load_imbalance", "moe_dispatcher",
                                        "moe_flex_backend", "moe_a2a_overlap", "torch_compile", "fp8_recipe",
                                        "loss_chunks", "fp8_moe_act_cache", "fp8_param_gather", "fp8_attention")
           if getattr(req, k) is not None}
    upd |= launch_training_defaults(train, req, upd)
    if req.param_dtype == "bf16":  # MaxText weight_dtype bf16: mu_dtype inherits it (MT:configs/base.yml)
        upd |= {"param_dtype": "bf16", "optimizer_dtype": "bf16"}
    if not upd:
        return train
    try:
        return type(train).model_validate(train.model_dump() | upd)
    except ValidationError as e:
        raise InputError(_validation_message(e, "training settings")) from None


def launch_training_defaults(train: TrainingSpec, req: PlanRequest, upd: dict) -> dict:
    """What the --launcher's emitted files run where the flags leave it open: its chunked loss (Stack
    .launch_loss_chunks) and, with --compile, a compiled (fused) loss (Stack.compile_fuses_loss)."""
    from planner.stacks import stack_of, stack_of_emitter

    stack = stack_of_emitter(req.launcher) if req.launcher else None
    if stack is None or stack is not stack_of(train):  # a --framework other than the launcher's own is refused
        return {}
    out: dict = {}
    if req.loss_chunks is None and stack.launch_loss_chunks > 1:
        out["loss_chunks"] = stack.launch_loss_chunks
    if upd.get("torch_compile") and stack.compile_fuses_loss:
        out["fused_cross_entropy"] = True
    return out


def cluster_overrides(cluster: ClusterSpec, req: PlanRequest) -> ClusterSpec:
    """--nic-bw and --scale-up-bw applied to the parsed cluster (planner.catalog.overrides)."""
    from planner.catalog.overrides import with_bandwidths
    return with_bandwidths(cluster, req.nic_bw, req.scale_up_bw)


def check_launcher_hardware(launcher: str, cluster: ClusterSpec) -> None:
    from planner.launchers import launchers_for

    ok = launchers_for(cluster)
    if launcher not in ok:
        raise InputError(f"--launcher {launcher} does not run on {cluster.hardware.id}; choose one of {', '.join(ok)}")


def check_launcher_model(launcher: str, model: ModelSpec, train: TrainingSpec, cluster: ClusterSpec) -> None:
    """Exit 2 when the target --launcher cannot run on the hardware or cannot express the model."""
    from planner.launchers import model_errors

    check_launcher_hardware(launcher, cluster)
    cannot = model_errors(model, train, launcher, cluster)
    if cannot:
        raise InputError(f"--launcher {launcher} cannot run {model.name} on {cluster.hardware.id}: {cannot[0]}")


def pinned_knobs(req: PlanRequest, gate: str | None = None) -> dict[str, Any]:
    """The knobs the user pinned, checked as a ParallelPlan, with the implied schedule and the search defaults of the
    launcher the plans are for (--launcher, else `gate`, the modelled stack's: planner.app.plan.modelled_launcher)
    where nothing was pinned: a TPU plan without --launcher pipelines with MaxText's GPipe as with it (before
    2026-11-28 it was costed as 1F1B, and the maxtext.yml written for it ran MaxText's pipeline)."""
    from pydantic import ValidationError

    from planner.catalog.hf_import import _validation_message
    from planner.specs import ParallelPlan

    fixed = dict(req.knobs)
    try:
        ParallelPlan(**fixed)
    except ValidationError as e:
        raise InputError(_validation_message(e, "pinned knobs")) from None
    if fixed.get("vpp", 1) > 1 and "schedule" not in fixed:
        fixed["schedule"] = "interleaved"
    target = req.launcher or gate
    if target:  # the target's own defaults (MaxText: GPipe) where the user pinned nothing
        from planner.launchers import capabilities
        fixed = capabilities(target).search_defaults | fixed
    if req.launcher:
        check_launcher_schedule(req.launcher, fixed)
    return fixed


def check_launcher_schedule(launcher: str, fixed: dict) -> None:
    """Exit 2 when a pinned pipeline schedule is one the target --launcher does not run (Capabilities.schedules):
    no plan could pass its rules, and saying so beats an empty search."""
    from planner.launchers import capabilities

    sched, caps = fixed.get("schedule"), capabilities(launcher)
    if isinstance(sched, str) and fixed.get("pp") != 1 and sched not in caps.schedules:
        raise InputError(f"--launcher {launcher} does not run the {sched} pipeline schedule (it runs "
                         f"{', '.join(caps.schedules)}): drop --schedule {sched} or choose another --launcher")


def check_request(model: ModelSpec, cluster: ClusterSpec, train: TrainingSpec, fixed: dict,
                  headroom_gib: float, count_free: bool = False) -> None:
    """Exit 2 with the reason when the request can never give a plan (pinned knobs, dtypes, headroom).
    `count_free` (--min-devices): the device count is still to be chosen, so only the checks that hold at
    every count run (the cluster's count is an upper bound: 1,000 devices the batch does not divide is fine
    when 8 fit)."""
    from planner.search.request import count_free_errors, request_errors

    errs = count_free_errors(model, cluster, train, fixed) if count_free else request_errors(model, cluster, train,
                                                                                            fixed)
    if errs:
        raise InputError("; ".join(dict.fromkeys(errs)))
    if headroom_gib >= cluster.hardware.hbm_capacity_gib:
        raise InputError(f"--memory-headroom {headroom_gib:g} GiB leaves nothing of the "
                         f"{cluster.hardware.hbm_capacity_gib:g} GiB per {cluster.hardware.id}: "
                         "give a smaller headroom")
