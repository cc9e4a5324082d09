"""Output files: the one place that decides how a path the user named is written.

An output never replaces what the user did not ask to replace. A regular file (or a symbolic link to one)
is replaced atomically: a temporary file beside the target, then `os.replace`. A character device or a
FIFO (`/dev/stdout`, `/dev/null`, a named pipe) is written in place, as a shell redirection would: renaming
over it would turn the system's `/dev/null` into a regular file for every process (as root) or leave a
pipe's reader hanging. Anything else that exists (a directory, a socket, a block device) is refused.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from planner.errors import InputError
from planner.names import safe_line

__all__ = ["check_not_an_input", "check_output_path", "write_output_text"]


def _kind(path: Path) -> str:
    """'missing', 'regular' or 'stream' (character device or FIFO); raises InputError for anything else."""
    shown = safe_line(str(path), 200)
    try:
        st = os.stat(path)  # follows symbolic links: a link to a regular file is written through
    except FileNotFoundError:
        if os.path.islink(path):
            raise InputError(f"{shown} is a symbolic link to a missing file: remove the link or give another "
                             "path") from None
        return "missing"
    except OSError as e:  # a symlink loop, a path through a file, a name too long
        raise InputError(f"{shown} cannot be written ({e.strerror or e}): give another path") from None
    if stat.S_ISREG(st.st_mode):
        return "regular"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return "stream"
    what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
    raise InputError(f"{shown} is {what}: give the path of a file to write")


def check_output_path(path: str, option: str, force: bool | None = None, inputs: tuple = ()) -> None:
    """Refuse an output path that cannot be written before any long computation (one input-error line).
    An output that names one of `inputs` is refused first, whatever `force` says. `force=False`: an
    existing regular file is refused too (the command replaces it only with --force, as `plan --out DIR`
    does a non-empty folder); None: the command's files are replaced (calibrate's profile)."""
    if not path:
        raise InputError(f"{option} is empty: give the path of a file to write")
    check_not_an_input(path, option, [i for i in inputs if i])
    p = Path(path)
    try:
        kind = _kind(p)
    except InputError as e:
        raise InputError(f"{option} {e}") from None
    if kind == "regular" and force is False:
        raise InputError(f"{option} {safe_line(path, 200)} exists: give --force to replace it, or another path")
    target = Path(os.path.realpath(p)) if kind == "regular" else p
    if kind != "stream" and not target.parent.is_dir():
        raise InputError(f"{option} {safe_line(path, 200)}: the folder {safe_line(str(target.parent), 200)} does "
                         "not exist: create it first")


def check_not_an_input(path: str, option: str, inputs: list[str]) -> None:
    """Refuse an output path that names one of the inputs (the same file, through any link or spelling):
    writing it would destroy the input (`report --out m.yaml --model m.yaml`)."""
    try:
        out = os.stat(path)
    except OSError:
        return  # a new file cannot be an input
    if not stat.S_ISREG(out.st_mode):
        return  # /dev/stdout, a FIFO: written in place, nothing is replaced
    for inp in inputs:
        try:
            st = os.stat(inp)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino):
            raise InputError(f"{option} {safe_line(path, 200)} is also an input ({safe_line(inp, 200)}): writing it "
                             "would overwrite the input; give another path")


def write_output_text(path: str | os.PathLike, text: str, option: str = "--out", mode: int | None = None) -> None:
    """Write `text` to the file the user named: atomically for a regular or new file (through a symbolic
    link to its target), in place for a character device or FIFO; one input-error line on any failure."""
    p = Path(path)
    shown = safe_line(str(path), 200)
    try:
        kind = _kind(p)
        if kind == "stream":
            with open(p, "w", encoding="utf-8", newline="\n") as f:  # no O_CREAT effect: it exists
                f.write(text)
            return
        _atomic_replace(Path(os.path.realpath(p)) if kind == "regular" else p, text, mode)
    except InputError as e:
        raise InputError(f"{option} {e}") from None
    except OSError as e:
        raise InputError(f"{option} {shown} cannot be written ({e.strerror or e}): choose a writable path") from None


def _atomic_replace(path: Path, text: str, mode: int | None) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".planner-", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode if mode is not None else 0o644)
        # the target may have become something else since it was checked: never rename over a non-regular file
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise InputError(f"{safe_line(str(path), 200)} changed while it was written: give another path")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
