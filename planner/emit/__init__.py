"""Launch configs for a chosen plan, one module per launcher (see docs/launchers.md).

    files, skipped = emit_all(model, cluster, train, plan, prediction)
    write_launch_configs("out/", files)

`files` maps file names to their text; `skipped` maps a launcher to the one-line reason it cannot
express the plan. Launchers: megatron, deepspeed, maxtext, jax, torchtitan.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from planner.emit import deepspeed, maxtext, megatron, torchtitan
from planner.emit.common import cluster_name, dumps
from planner.errors import InputError
from planner.launchers.job import Job, Unsupported, make_job
from planner.names import safe_line
from planner.outputs import write_output_text
from planner.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec

LAUNCHERS: dict[str, Callable[[Job], dict[str, str]]] = {
    "megatron": megatron.emit,
    "deepspeed": deepspeed.emit,
    "maxtext": maxtext.emit_maxtext,
    "jax": maxtext.emit_jax,
    "torchtitan": torchtitan.emit,
}

__all__ = ["LAUNCHERS", "MANIFEST", "Unsupported", "atomic_write_text", "check_out_dir", "emit_all", "plan_json",
           "write_launch_configs"]


def plan_json(model: ModelSpec, cluster: ClusterSpec, train: TrainingSpec, plan: ParallelPlan,
              prediction: dict | None) -> dict:
    """The prediction as given (the `--json` plan schema), plus the model and cluster names; with PP 1 the
    plan has no `schedule` (its `pipeline.schedule` is "none": the knob's 1f1b default means nothing without a
    pipeline; ParallelPlan(**plan) still reads it back)."""
    doc = dict(prediction) if prediction else {"plan": plan.knobs(), "training": train.model_dump()}
    doc.setdefault("plan", plan.knobs())
    if plan.pp == 1 and "schedule" in doc["plan"]:  # no pipeline, no pipeline schedule (pipeline.schedule: none)
        doc["plan"] = {k: v for k, v in doc["plan"].items() if k != "schedule"}
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


MANIFEST = ".planner-files.json"  # {"version": 1, "sha256": {name: hex digest}} of the planner-written files
MANIFEST_MAX_BYTES = 64 << 10  # a manifest lists ~11 names with 64-hex digests (~1.5 KB); 64 KiB is generous
EMITTED_MAX_BYTES = 8 << 20  # an emitted file is a few KiB (torchtitan_model.py the largest, ~10 KiB)
# every name an emitter writes: the only names --force may remove (and only when unchanged since written)
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


def _digest(text: str | bytes) -> str:
    return hashlib.sha256(text.encode("utf-8") if isinstance(text, str) else text).hexdigest()


def manifest_text(files: dict[str, str]) -> str:
    """The manifest of a written set: each planner-written name with the SHA-256 of the bytes written."""
    return json.dumps({"version": 1, "sha256": {n: _digest(t) for n, t in sorted(files.items())}},
                      indent=1, sort_keys=True) + "\n"


def _recorded(out: Path) -> dict[str, str]:
    """{name: sha256} the directory's manifest recorded; {} when it is missing, unreadable, not a regular file,
    over its size limit, an older list-only manifest or anything else (then nothing is deleted)."""
    from planner.catalog.files import read_structured_file

    try:
        doc = read_structured_file(out / MANIFEST, what="manifest", max_bytes=MANIFEST_MAX_BYTES)
    except InputError:
        return {}
    table = doc.get("sha256") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        return {}
    return {n: h for n, h in table.items() if isinstance(n, str) and isinstance(h, str) and n in PLANNER_FILES}


def _unchanged(path: Path, digest: str) -> bool:
    """A regular file (not a link) whose bytes still hash to what the manifest recorded."""
    from planner.catalog.files import read_limited_bytes

    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        return _digest(read_limited_bytes(path, str(path), EMITTED_MAX_BYTES, "a file")) == digest
    except (OSError, InputError):
        return False


def _old_set(out: Path, new: list[str]) -> tuple[list[str], list[str]]:
    """(names to move aside, stale names kept). The new set's names are replaced; another name goes only when
    the planner writes that name and its content is what the manifest recorded: a stale or hostile manifest
    can never make --force remove a file of the user's."""
    recorded = _recorded(out)
    gone, kept = [], []
    for n in sorted(PLANNER_FILES | set(recorded) | set(new)):
        if not os.path.lexists(out / n):
            continue
        if n in new:
            gone.append(n)
        elif n in recorded and _unchanged(out / n, recorded[n]):
            gone.append(n)
        elif n in PLANNER_FILES:
            kept.append(n)
    return gone, kept


def _swap_in(out: Path, stage: Path, backup: Path, names: list[str]) -> list[str]:
    """Move the old set aside, the new set in (renames on one file system); undo everything on failure.
    Returns the stale planner-named files kept because they changed since written (or carry no hash)."""
    old, kept = _old_set(out, names)
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
    return kept


def _refuse_special(out: Path, names: list[str]) -> None:
    """A name of the new set that exists as a FIFO, device, socket or directory is never renamed over."""
    for n in names:
        try:
            mode = os.lstat(out / n).st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise InputError(f"--out {safe_line(str(out), 200)}: {n} is not a regular file (a FIFO, device, "
                             "socket or directory): remove it or give another folder")


def _lock(fd: int, out: Path) -> None:
    """An exclusive lock on the --out directory for the whole swap: a second run writing to the same folder is
    refused instead of leaving a mixed set while both exit 0 (flock on the directory: released at close)."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise InputError(f"--out {safe_line(str(out), 200)} is being written by another plan run: wait for it to "
                         "finish or give another folder") from None


def check_out_dir(out_dir: str | os.PathLike) -> None:
    """Refuse an --out folder that cannot be written, before any search (one input-error line)."""
    if not str(out_dir):
        raise InputError("--out is empty: give the folder to write the launch configs to")
    _check_target(Path(out_dir))


def _check_target(out: Path) -> None:
    if out.is_symlink() and not out.exists():
        raise InputError(f"--out {safe_line(str(out), 200)} is a symbolic link to a missing folder: remove the link "
                         "or give another folder")
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {safe_line(str(out), 200)} exists and is not a directory")


def write_launch_configs(out_dir: str | os.PathLike, files: dict[str, str], force: bool = False,
                         kept: list[str] | None = None) -> list[Path]:
    """Write `files` into `out_dir` as one set, under an exclusive lock on the folder: every file is staged in
    a temporary directory beside it (short names, on the folder's own file system when `out_dir` is a
    symbolic link), then the new set's names, and the stale planner-written files whose content the
    manifest's SHA-256 still matches, are replaced with renames. A failure leaves the previous set whole,
    no temporary directory behind and no folder it created. Refuses a non-empty existing directory unless
    `force`; every other file is kept (stale planner-named files that changed are appended to `kept`)."""
    shown = safe_line(str(out_dir), 200)
    check_out_dir(out_dir)
    for name in files:
        if not name or "/" in name or "\\" in name or name in (".", "..", MANIFEST):
            raise InputError(f"refusing to write a launch config named {safe_line(name)!r}")
    out = Path(os.path.realpath(out_dir))  # stage beside the real folder: renames never cross file systems
    names = sorted(files) + [MANIFEST]
    created = False
    try:
        if not out.is_dir():
            out.mkdir(parents=True)
            created = True
        fd = os.open(out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            _lock(fd, Path(out_dir))
            if not created and any(out.iterdir()) and not force:
                raise InputError(f"--out {shown} is not empty; use --force to overwrite the launch configs in it")
            _refuse_special(out, names)
            _stage_and_swap(out, files, names, kept)
        finally:
            os.close(fd)
    except OSError as e:
        _remove_if_created(out, created)
        raise InputError(f"cannot write launch configs to {shown}: {e.strerror or e}") from None
    except BaseException:
        _remove_if_created(out, created)
        raise
    return [Path(out_dir) / n for n in sorted(files)]


def _remove_if_created(out: Path, created: bool) -> None:
    if created:
        try:
            out.rmdir()  # only when still empty
        except OSError:
            pass


def _stage_and_swap(out: Path, files: dict[str, str], names: list[str], kept: list[str] | None) -> None:
    stage = Path(tempfile.mkdtemp(prefix=".planner-stage-", dir=out.parent))
    try:
        backup = Path(tempfile.mkdtemp(prefix=".planner-prev-", dir=out.parent))
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    try:
        for name, text in files.items():
            _write_file(stage / name, text, 0o755 if name.endswith(".sh") else 0o644)
        _write_file(stage / MANIFEST, manifest_text(files), 0o644)
        stale = _swap_in(out, stage, backup, names)
        if kept is not None:
            kept.extend(stale)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        shutil.rmtree(backup, ignore_errors=True)
