"""Hostile input, round three (outputs that destroy): an output path never replaces what is not a regular file.

Same limits as tests/test_hostile.py: 500 MB address space, 10 s, exit code, exactly one stderr line. The
device-file cases run on FIFOs in a temporary folder, never on the real /dev.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.outputs import check_output_path, write_output_text
from tests.test_hostile import cli, one_line_error_proc

BASE = ("--model", "llama-7b", "--cluster", "h100x8")


def _drain(fifo: Path, into: list[bytes]) -> threading.Thread:
    """A reader on the FIFO (as `cat p` would be), so that the writer's open does not block forever."""
    def read():
        with open(fifo, "rb") as f:
            into.append(f.read())
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def test_fifo_is_written_in_place_not_replaced(tmp_path):
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    got: list[bytes] = []
    t = _drain(fifo, got)
    write_output_text(fifo, "hello\n", "--out")
    t.join(5)
    assert got == [b"hello\n"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO, not a regular file
    assert os.listdir(tmp_path) == ["p"]  # no temporary file left beside it


def test_report_into_a_fifo_as_into_dev_stdout(tmp_path):
    """`plan report --out /dev/stdout` idiom, on a FIFO: the HTML arrives through the pipe, the pipe stays."""
    fifo = tmp_path / "stdout"
    os.mkfifo(fifo)
    got: list[bytes] = []
    t = _drain(fifo, got)
    p = cli("report", *BASE, "--out", fifo, timeout=60)
    t.join(5)
    assert p.returncode == 0, p.stderr[-2000:]
    assert got and got[0].startswith(b"<!DOCTYPE html>") and len(got[0]) > 10000
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_symlink_to_a_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(fifo)
    got: list[bytes] = []
    t = _drain(fifo, got)
    write_output_text(link, "x", "--out")
    t.join(5)
    assert got == [b"x"] and link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_symlink_to_a_regular_file_replaces_the_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "real.yaml"
    target.write_text("old")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    write_output_text(link, "new", "--out")
    assert link.is_symlink() and target.read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["link.yaml", "real.yaml"]


@pytest.mark.parametrize("kind", ["dir", "socket"])
def test_non_regular_targets_are_refused(tmp_path, kind):
    path = tmp_path / "target"
    if kind == "dir":
        path.mkdir()
    else:
        import socket
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    mode_before = os.lstat(path).st_mode
    with pytest.raises(InputError, match="--out .*(directory|not a regular file)"):
        check_output_path(str(path), "--out")
    with pytest.raises(InputError):
        write_output_text(path, "x", "--out")
    assert os.lstat(path).st_mode == mode_before


@pytest.mark.parametrize("command", [("report", *BASE), ("validate",)])
def test_cli_refuses_a_directory_or_socket_before_work(tmp_path, command):
    target = tmp_path / "d"
    target.mkdir()
    option = "--write-docs" if command == ("validate",) else "--out"
    line = one_line_error_proc(cli(*command, option, target))
    assert "is a directory" in line and target.is_dir()


def test_empty_output_path_is_refused():
    line = one_line_error_proc(cli("report", *BASE, "--out", ""))
    assert "--out is empty" in line


# ------------------------------------------------------------------ item 2: --force and the manifest


def _emitted(tmp_path, name="d"):
    """A folder written by the planner (7B on 8 H100s, every launcher) and its file names."""
    out = tmp_path / name
    p = cli(*BASE, "--out", out, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    return out, sorted(os.listdir(out))


def test_stale_manifest_never_makes_force_delete_user_files(tmp_path):
    """Issue 26 item 2: `echo '["notes.txt"]' > d/.planner-files.json; plan ... --out d --force`."""
    d = tmp_path / "d"
    d.mkdir()
    (d / ".planner-files.json").write_text('["notes.txt"]\n')
    (d / "notes.txt").write_text("mine\n")
    p = cli(*BASE, "--out", d, "--force", timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (d / "notes.txt").read_text() == "mine\n"


def test_hostile_manifest_with_the_right_hash_cannot_delete_a_name_the_planner_never_writes(tmp_path):
    import hashlib
    import json

    d = tmp_path / "d"
    d.mkdir()
    (d / "notes.txt").write_text("mine\n")
    digest = hashlib.sha256(b"mine\n").hexdigest()
    (d / ".planner-files.json").write_text(json.dumps({"version": 1, "sha256": {"notes.txt": digest}}))
    p = cli(*BASE, "--out", d, "--force", timeout=60)
    assert p.returncode == 0 and (d / "notes.txt").read_text() == "mine\n"


def test_force_removes_stale_planner_files_only_when_unchanged(tmp_path):
    """A Megatron-only set over a full set: unchanged DeepSpeed files go, an edited one stays (and is named)."""
    out, names = _emitted(tmp_path)
    assert "launch_deepspeed.sh" in names and "ds_config.json" in names
    (out / "launch_deepspeed.sh").write_text("#!/bin/sh\n# my edits\n")
    p = cli(*BASE, "--emit", "megatron", "--out", out, "--force", timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    left = set(os.listdir(out))
    assert "ds_config.json" not in left and "deepspeed_args.json" not in left  # unchanged: removed
    assert (out / "launch_deepspeed.sh").read_text() == "#!/bin/sh\n# my edits\n"  # changed: kept
    assert "kept launch_deepspeed.sh" in p.stderr


def test_fifo_manifest_does_not_block_and_fifo_target_is_refused(tmp_path):
    """Item 3's FIFO named .planner-files.json: the run never blocks on it and never renames over it."""
    d = tmp_path / "d"
    d.mkdir()
    os.mkfifo(d / ".planner-files.json")
    line = one_line_error_proc(cli(*BASE, "--out", d, "--force", timeout=60))
    assert ".planner-files.json is not a regular file" in line
    assert stat.S_ISFIFO(os.lstat(d / ".planner-files.json").st_mode)
    assert os.listdir(tmp_path) == ["d"]  # no staging folder left


def test_every_emitted_name_is_a_planner_name():
    """--force removes only PLANNER_FILES names: every file an emitter writes must be one of them."""
    from planner.catalog.hardware import parse_cluster
    from planner.catalog.models import get_model
    from planner.emit import PLANNER_FILES, emit_all
    from planner.specs import ParallelPlan, TrainingSpec

    names: set[str] = set()
    for cluster in ("h100x8", "tpu-v5px8"):
        files, _ = emit_all(get_model("llama-7b"), parse_cluster(cluster), TrainingSpec(seq_len=4096, global_batch=64),
                            ParallelPlan(tp=1, pp=1, dp=8), None)
        names |= set(files)
    assert len(names) >= 10 and names <= PLANNER_FILES, names - PLANNER_FILES


# ------------------------------------------------------------------ item 10: concurrent --out runs


def test_a_second_writer_to_the_same_folder_is_refused(tmp_path):
    import fcntl

    from planner.emit import write_launch_configs

    d = tmp_path / "d"
    d.mkdir()
    fd = os.open(d, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another run in the middle of its swap
        line = one_line_error_proc(cli(*BASE, "--out", d, "--force", timeout=60))
        assert "being written by another plan run" in line
        with pytest.raises(InputError, match="another plan run"):
            write_launch_configs(d, {"plan.json": "{}\n"}, force=True)
    finally:
        os.close(fd)
    assert os.listdir(d) == []
    write_launch_configs(d, {"plan.json": "{}\n"}, force=True)  # the lock went with its holder
    assert (d / "plan.json").read_text() == "{}\n"


# ------------------------------------------------------------------ item 18: long names, symlinks, empty


def test_legal_245_character_out_name_is_written(tmp_path):
    name = "o" * 245
    p = cli(*BASE, "--emit", "megatron", "--out", tmp_path / name, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "plan.json" in os.listdir(tmp_path / name) and os.listdir(tmp_path) == [name]


def test_out_through_a_symlink_stages_beside_the_real_folder(tmp_path):
    real = tmp_path / "fs2" / "real"
    real.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    p = cli(*BASE, "--emit", "megatron", "--out", link, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert link.is_symlink() and "plan.json" in os.listdir(real)
    assert sorted(os.listdir(tmp_path)) == ["fs2", "link"] and os.listdir(tmp_path / "fs2") == ["real"]


def test_empty_out_folder_is_refused():
    line = one_line_error_proc(cli(*BASE, "--out", ""))
    assert "--out is empty" in line


def test_failed_write_leaves_no_empty_folder(tmp_path):
    from planner.emit import write_launch_configs

    with pytest.raises(InputError, match="refusing"):
        write_launch_configs(tmp_path / "new", {"../x": "1"})
    assert os.listdir(tmp_path) == []
