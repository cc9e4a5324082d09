"""Launch configs for a chosen plan, one module per launcher (see docs/launchers.md).

    files, skipped = emit_all(model, cluster, train, plan, prediction)
    write_launch_configs("out/", files)

`files` maps file names to their text; `skipped` maps a launcher to the one-line reason it cannot
express the plan. Launchers: megatron, deepspeed, maxtext, jax, torchtitan.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from planner.emit import deepspeed, maxtext, megatron, torchtitan
from planner.emit.common import Job, Unsupported, cluster_name, dumps, make_job
from planner.errors import InputError
from planner.outputs import write_output_text
from planner.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec

LAUNCHERS: dict[str, Callable[[Job], dict[str, str]]] = {
    "megatron": megatron.emit,
    "deepspeed": deepspeed.emit,
    "maxtext": maxtext.emit_maxtext,
    "jax": maxtext.emit_jax,
    "torchtitan": torchtitan.emit,
}

__all__ = ["LAUNCHERS", "MANIFEST", "Unsupported", "atomic_write_text", "emit_all", "plan_json", "write_launch_configs"]


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
            if name == "jax" and (train.grad_dtype is not None or train.optimizer_dtype != "fp32"):
                # only Megatron-LM's flags (--grad-reduce-in-bf16, precision-aware optimizer) are emitted
                raise Unsupported("--grad-dtype / --optimizer-dtype are written for Megatron-LM only; "
                                  f"{name} would train with its default gradient and Adam-state dtypes")
            files.update(fn(make_job(model, cluster, train, plan)))  # a fresh Job: notes are per launcher
        except Unsupported as e:
            skipped[name] = str(e)
    return files, skipped


def atomic_write_text(path: str | os.PathLike, text: str, mode: int | None = None) -> None:
    """Write `text` to `path` (planner.outputs: atomic for a regular file, in place for a device or FIFO)."""
    write_output_text(path, text, "output", mode)


MANIFEST = ".planner-files.json"  # the names of the planner-written files of a --out directory
# every name an emitter writes (older directories have no manifest: these are still the planner's)
PLANNER_FILES = frozenset({"plan.json", "megatron_args.json", "launch_megatron.sh", "ds_config.json",
                           "deepspeed_args.json", "launch_deepspeed.sh", "maxtext.yml", "jax_mesh.json",
                           "torchtitan_args.json", "torchtitan_model.py", "hf_config.json", "train_hf.py",
                           "launch_torchtitan.sh"})


def _write_file(path: Path, text: str, mode: int) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(path, mode)


def _old_set(out: Path) -> list[str]:
    """The planner-written files now in `out`: its manifest's names and every known planner file name."""
    names = set(PLANNER_FILES)
    try:
        listed = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        if isinstance(listed, list):
            names |= {n for n in listed if isinstance(n, str) and n and "/" not in n and n not in (".", "..")}
    except (OSError, ValueError):
        pass
    names.add(MANIFEST)
    return sorted(n for n in names if (out / n).is_file() or (out / n).is_symlink())


def _swap_in(out: Path, stage: Path, backup: Path, names: list[str]) -> None:
    """Move the old set aside, the new set in (renames on one file system); undo everything on failure."""
    old = _old_set(out)
    moved_out: list[str] = []
    moved_in: list[str] = []
    try:
        for n in old:
            os.replace(out / n, backup / n)
            moved_out.append(n)
        for n in names:
            os.replace(stage / n, out / n)
            moved_in.append(n)
    except BaseException:
        for n in moved_in:
            os.replace(out / n, stage / n)
        for n in moved_out:
            os.replace(backup / n, out / n)
        raise


def write_launch_configs(out_dir: str | os.PathLike, files: dict[str, str], force: bool = False) -> list[Path]:
    """Write `files` into `out_dir` as one set: every file is staged in a temporary directory beside it,
    then the directory's planner-written files (its manifest's, and every name an emitter writes) are
    replaced by the new set with renames. A failure leaves the previous set whole and no temporary
    directory behind. Refuses a non-empty existing directory unless `force`; other files are kept."""
    out = Path(out_dir)
    if out.is_symlink() and not out.exists():
        raise InputError(f"--out {out} is a symbolic link to a missing folder: remove the link or give another folder")
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(f"--out {out} is not empty; use --force to overwrite the launch configs in it")
    for name in files:
        if not name or "/" in name or "\\" in name or name in (".", "..", MANIFEST):
            raise InputError(f"refusing to write a launch config named {name!r}")
    names = sorted(files) + [MANIFEST]
    try:
        out.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
        backup = Path(tempfile.mkdtemp(prefix=f".{out.name}.previous-", dir=out.parent))
        try:
            for name, text in files.items():
                _write_file(stage / name, text, 0o755 if name.endswith(".sh") else 0o644)
            _write_file(stage / MANIFEST, json.dumps(sorted(files)) + "\n", 0o644)
            _swap_in(out, stage, backup, names)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
            shutil.rmtree(backup, ignore_errors=True)
    except OSError as e:
        raise InputError(f"cannot write launch configs to {out}: {e.strerror or e}") from None
    return [out / n for n in sorted(files)]
