"""The launch files of a planned request: which launchers to write, the files themselves, and, for each
launcher that cannot run the chosen plan, its own best plan."""

from __future__ import annotations

from planner.app.plan import run_search
from planner.app.request import PlanRequest, resolve_target
from planner.specs.plan import recompute_label


def emit_set(req: PlanRequest, emit: tuple[str, ...]) -> set[str] | None:
    """The launchers --out writes: the target's (with the JAX mesh for MaxText), else --emit or all."""
    if req.launcher:
        return {req.launcher} | ({"jax"} & set(emit) if req.launcher == "maxtext" else set())
    return set(emit) or None


def write_launch_files(ctx, doc: dict, out_dir: str, rank: int, emit: set[str] | None, force: bool) -> dict:
    """Write plan `rank`'s launch files into `out_dir`; returns {dir, written, not_written}."""
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
    kept: list[str] = []
    write_launch_configs(out_dir, files, force=force, kept=kept)
    out = {"dir": str(out_dir), "written": sorted(files), "not_written": dict(sorted(skipped.items())),
           "kept": kept}
    if not chosen.get("within_memory_margin", True):  # the ranking puts such a plan first only when none keeps it
        band = chosen.get("peak_memory_band") or {}
        out["memory_warning"] = (f"plan {rank}'s peak {chosen['memory']['peak_gib']:.1f} GiB may reach "
                                 f"{band.get('high_gib', 0.0):.1f} GiB (its memory band) of "
                                 f"{chosen['memory'].get('usable_gib', 0.0):.1f} GiB usable: it may not fit")
    return out


def other_launchers(ctx, req: PlanRequest, doc: dict, rank: int) -> list[str]:
    """Without a target: for each launcher that cannot run the written plan, a line naming its own best plan."""
    from planner.errors import PlannerError
    from planner.launchers import TARGETS, launcher_errors, launchers_for
    from planner.specs import ParallelPlan

    plan = ParallelPlan(**doc["plans"][rank - 1]["plan"])
    lines = []
    for launcher in TARGETS:
        if launcher not in launchers_for(ctx.cluster):
            continue
        errs = launcher_errors(plan, ctx.model, ctx.train, launcher, ctx.cluster)
        if not errs:
            continue
        try:
            _, _, alt = run_search(resolve_target(req.replace(framework=None, launcher=launcher, top_k=1)))
        except PlannerError as e:
            lines.append(f"{launcher} cannot run this plan ({errs[0]}) and finds no plan of its own with the knobs "
                         f"you pinned ({e})")
            continue
        best = alt["plans"][0]
        lines.append(f"{launcher} cannot run this plan ({errs[0]}); its best plan: {layout_text(best['plan'])}, "
                     f"{best['step_time_s']:.3f} s per step; write it with --launcher {launcher}")
    return lines


def layout_text(p: dict) -> str:
    parts = [f"{k.upper()}{p[k]}" for k in ("tp", "pp", "cp", "dp", "ep") if p.get(k, 1) > 1]
    if p.get("vpp", 1) > 1:
        parts.append(f"VPP{p['vpp']}")
    parts.append(f"ZeRO-{p['zero_stage']}")
    parts.append(f"mbs {p['micro_batch']}, recompute {recompute_label(p)}")
    return " ".join(parts)
