"""Launch configs for a chosen plan, one module per launcher (see docs/launchers.md).

    files, skipped = emit_all(model, cluster, train, plan, prediction)
    write_launch_configs("out/", files)

`files` maps file names to their text; `skipped` maps a launcher to the one-line reason it cannot
express the plan. Launchers: megatron, deepspeed, maxtext, jax, torchtitan.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from planner.emit import deepspeed, maxtext, megatron, torchtitan
from planner.emit.common import Job, Unsupported, cluster_name, dumps, make_job
from planner.errors import InputError
from planner.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec

LAUNCHERS: dict[str, Callable[[Job], dict[str, str]]] = {
    "megatron": megatron.emit,
    "deepspeed": deepspeed.emit,
    "maxtext": maxtext.emit_maxtext,
    "jax": maxtext.emit_jax,
    "torchtitan": torchtitan.emit,
}

__all__ = ["LAUNCHERS", "Unsupported", "atomic_write_text", "emit_all", "plan_json", "write_launch_configs"]


def plan_json(model: ModelSpec, cluster: ClusterSpec, train: TrainingSpec, plan: ParallelPlan,
              prediction: dict | None) -> dict:
    """The prediction as given (the `--json` plan schema), plus the model and cluster names."""
    doc = dict(prediction) if prediction else {"plan": plan.knobs(), "training": train.model_dump()}
    doc.setdefault("plan", plan.knobs())
    doc["model_name"] = model.name
    doc["cluster_name"] = cluster_name(cluster)
    doc["hardware"] = cluster.hardware.id
    doc["devices"] = cluster.count
    return doc


def emit_all(model: ModelSpec, cluster: ClusterSpec, train: TrainingSpec, plan: ParallelPlan,
             prediction: dict | None, emit: set[str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """({file name: text}, {launcher: why it cannot express the plan}). `emit` picks launchers (default all)."""
    wanted = set(LAUNCHERS) if emit is None else set(emit)
    unknown = wanted - set(LAUNCHERS)
    if unknown:
        raise InputError(f"unknown launcher(s) {', '.join(sorted(unknown))}; choose from {', '.join(LAUNCHERS)}")
    make_job(model, cluster, train, plan)  # raises InputError on an inconsistent plan
    files = {"plan.json": dumps(plan_json(model, cluster, train, plan, prediction))}
    skipped: dict[str, str] = {}
    for name, fn in LAUNCHERS.items():
        if name not in wanted:
            continue
        try:
            if name != "megatron" and (train.grad_dtype is not None or train.optimizer_dtype != "fp32"):
                # only Megatron-LM's flags (--grad-reduce-in-bf16, precision-aware optimizer) are emitted
                raise Unsupported("--grad-dtype / --optimizer-dtype are written for Megatron-LM only; "
                                  f"{name} would train with its default gradient and Adam-state dtypes")
            files.update(fn(make_job(model, cluster, train, plan)))  # a fresh Job: notes are per launcher
        except Unsupported as e:
            skipped[name] = str(e)
    return files, skipped


def atomic_write_text(path: str | os.PathLike, text: str, mode: int | None = None) -> None:
    """Write `text` to `path` through a temporary file in the same directory and os.replace."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode if mode is not None else 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_launch_configs(out_dir: str | os.PathLike, files: dict[str, str], force: bool = False) -> list[Path]:
    """Write every file into `out_dir` atomically; refuse a non-empty existing directory unless `force`."""
    out = Path(out_dir)
    if out.is_symlink() and not out.exists():
        raise InputError(f"--out {out} is a symbolic link to a missing folder: remove the link or give another folder")
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(f"--out {out} is not empty; use --force to overwrite the launch configs in it")
    for name in files:
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise InputError(f"refusing to write a launch config named {name!r}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in files.items():
            target = out / name
            atomic_write_text(target, text, 0o755 if name.endswith(".sh") else 0o644)
            written.append(target)
    except OSError as e:
        raise InputError(f"cannot write launch configs to {out}: {e.strerror or e}") from None
    return written
