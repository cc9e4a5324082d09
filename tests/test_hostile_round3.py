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
