"""The candidate space. Every divisibility rule and derived group size has one owner,
planner.specs.dims (`ParallelDims`, `plan_errors`); this module re-exports `plan_errors` for its callers.
`pinned_errors` applies the same rules to a user's pinned knobs before any search."""

from __future__ import annotations

from pydantic import ValidationError

from planner.specs import ModelSpec, ParallelPlan, TrainingSpec
from planner.specs.dims import plan_errors, v_split_counts_embedding_loss
from planner.specs.plan import NAME_LIST_KNOBS

__all__ = ["divisors", "pinned_errors", "plan_errors"]


def divisors(n: int) -> list[int]:
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


# schedules that exist only with a pipeline: pinning one (or virtual stages) pins pp >= 2 (1F1B is the default, and
# with pp 1 the schedule is moot)
PIPELINE_SCHEDULES = ("interleaved", "gpipe", "zb", "dualpipe", "dualpipev")


def needs_pipeline(fixed: dict) -> bool:
    """The pinned knobs ask for a pipeline: a schedule of PIPELINE_SCHEDULES (a tuple of allowed schedules is a
    launcher's range, not a pin) or vpp > 1."""
    sched = fixed.get("schedule")
    return (isinstance(sched, str) and sched in PIPELINE_SCHEDULES) or (fixed.get("vpp") or 1) > 1


def _factorisations(devices: int, fixed: dict) -> list[tuple[int, int, int, int]]:
    """Every (tp, pp, cp, dp) with tp*pp*cp*dp == devices that agrees with the pinned ones (pp >= 2 when they ask
    for a pipeline: needs_pipeline)."""
    out = []
    pipeline = needs_pipeline(fixed)
    for tp in ([fixed["tp"]] if "tp" in fixed else divisors(devices)):
        if devices % tp:
            continue
        for pp in ([fixed["pp"]] if "pp" in fixed else divisors(devices // tp)):
            if (devices // tp) % pp or (pipeline and pp == 1 and "pp" not in fixed):
                continue
            for cp in ([fixed["cp"]] if "cp" in fixed else divisors(devices // (tp * pp))):
                if (devices // (tp * pp)) % cp:
                    continue
                dp = devices // (tp * pp * cp)
                if fixed.get("dp", dp) == dp:
                    out.append((tp, pp, cp, dp))
    return out


def _probe_vpps(model: ModelSpec, fx: dict, knobs: dict) -> list[int]:
    """Virtual stages to probe: the pinned vpp; with only the interleaved schedule pinned, the virtual stages the
    search would try (2 .. layers per stage: the search enumerates them, planner.search.engine._vpp_choices); with
    DualPipeV pinned, its two stages per rank."""
    if knobs["schedule"] == "dualpipev" and "vpp" not in fx:
        return [2]
    if "vpp" in fx or knobs["schedule"] != "interleaved":
        return [knobs.get("vpp", 1)]
    return list(range(2, max(2, model.num_layers // knobs["pp"]) + 1))


def pinned_errors(model: ModelSpec, train: TrainingSpec, devices: int, fixed: dict) -> list[str]:
    """Why the pinned knobs can never form a valid plan (empty = some plan satisfies every rule).

    Uses `plan_errors` (the one owner of the rules) on probes: every tp*pp*cp*dp factorisation that agrees
    with the pinned knobs, each other knob pinned or at its most permissive value (ep=etp=vpp=micro_batch=1:
    every rule only gets harder as they grow). Returns the rules broken by the probe breaking the fewest,
    among them the pinned values that would be ignored (zero_shard_size with zero_stage 0, recompute_layers
    without full recompute)."""
    # a tuple pins a range (Capabilities.search_defaults), except on the knobs that hold a list of names
    fx = {k: v for k, v in fixed.items() if v is not None and (not isinstance(v, tuple) or k in NAME_LIST_KNOBS)}
    errs: list[str] = []
    # a custom remat policy and Megatron's named modules ride on selective recompute
    named = fx.get("remat_offloaded") or fx.get("remat_device") or fx.get("recompute_modules")
    base = {"recompute": "full" if fx.get("recompute_layers") is not None else ("selective" if named else "none"),
            "schedule": "interleaved" if fx.get("vpp", 1) > 1 else "1f1b"} | fx
    best: list[str] | None = None
    for tp, pp, cp, dp in _factorisations(devices, fx):
        knobs = base | {"tp": tp, "pp": pp, "cp": cp, "dp": dp}
        if knobs["schedule"] == "interleaved" and pp == 1 and "schedule" not in fx:
            knobs["schedule"] = "1f1b"
        if knobs["schedule"] == "dualpipev" and "account_embedding_loss" not in fx:
            knobs["account_embedding_loss"] = bool(v_split_counts_embedding_loss(model.num_layers, pp))
        for vpp in _probe_vpps(model, fx, knobs):
            try:
                probe = ParallelPlan(**(knobs | {"vpp": vpp}))
            except ValidationError as e:  # a pinned value out of the knob's range: name the knob, no pydantic URL
                first = e.errors()[0]
                return errs + [f"{'.'.join(map(str, first['loc']))}: {first['msg']}"]
            found = plan_errors(model, train, devices, probe)
            if not found:
                return errs
            if best is None or len(found) < len(best):
                best = found
    if best is None and needs_pipeline(fx) and not _factorisations(devices, {k: v for k, v in fx.items()
                                                                           if k not in ("schedule", "vpp")}):
        best = None  # the devices do not factor even without the pipeline: the message below
    elif best is None and needs_pipeline(fx):
        what = f"--vpp {fx['vpp']}" if (fx.get("vpp") or 1) > 1 else f"--schedule {fx['schedule']}"
        return errs + [f"{what} asks for a pipeline (pp >= 2), which the other pinned knobs leave no room for on "
                       f"{devices} device{'s' if devices != 1 else ''}"]
    if best is not None and fx.get("schedule") == "dualpipev" and "pp" not in fx:
        # the depth is searched: say that no depth the devices allow has a V split, not what one probe broke
        depths = sorted({pp for _, pp, _, _ in _factorisations(devices, fx) if pp > 1})
        if depths and all(v_split_counts_embedding_loss(model.num_layers, pp) is None for pp in depths):
            return errs + [f"dualpipev splits the {model.num_layers} layers (or them with the embedding and the loss "
                           f"as one layer each) into 2*pp equal stages, and no pipeline depth of {devices} devices "
                           f"({', '.join(map(str, depths))}) does"]
    if best is None:
        pins = ", ".join(f"{k}={fx[k]}" for k in ("tp", "pp", "cp", "dp") if k in fx)
        best = [f"the pinned {pins} cannot multiply into the {devices} devices (tp*pp*cp*dp = devices)"]
    return errs + best
