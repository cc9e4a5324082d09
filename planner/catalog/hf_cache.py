"""Models from the local Hugging Face cache, by repo id (`--model meta-llama/Llama-3.1-8B`), never the
network. The cache layout is huggingface_hub's: <hub>/models--<org>--<name>/snapshots/<commit>/config.json,
with refs/main naming the commit; <hub> is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def looks_like_repo_id(text: str) -> bool:
    """'org/name' with Hugging Face's characters and no file suffix."""
    return bool(REPO_ID.match(text)) and not text.lower().endswith((".json", ".yaml", ".yml")) and ".." not in text


def hub_dir() -> Path:
    """os.path.expanduser, not Path.expanduser: '~nosuchuser/x' (or no home at all) stays as written instead
    of raising RuntimeError."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    return Path(os.path.expanduser("~/.cache/huggingface/hub"))


REF_MAX_BYTES = 256  # refs/main holds one commit hash (40 hex digits, 64 for SHA-256 repos) and a newline


def _ref_commit(ref: Path) -> str:
    """The commit refs/main names ('' when it is not a small regular text file: then the snapshots decide)."""
    from planner.catalog.files import read_text_file
    from planner.errors import InputError

    try:
        return read_text_file(ref, str(ref), REF_MAX_BYTES, "a commit hash", errors="replace").strip()
    except InputError:
        return ""


def cached_config(repo_id: str) -> Path | None:
    """config.json of `repo_id` in the local cache: the snapshot refs/main names, else the only (or the
    lexicographically last) snapshot that has one; None when the repo is not cached."""
    org, name = repo_id.split("/", 1)
    repo = hub_dir() / f"models--{org}--{name}"
    snaps = repo / "snapshots"
    if not snaps.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        commit = _ref_commit(ref)
        if re.fullmatch(r"[0-9a-f]{6,64}", commit) and os.path.lexists(snaps / commit / "config.json"):
            return snaps / commit / "config.json"
    # a config.json that is there but is a FIFO, a device or a symbolic-link loop is returned too: the safe
    # reader then says what it is, instead of "not in the local cache"
    try:  # not Path.glob: it drops a config.json that is a symbolic-link loop
        found = sorted(d / "config.json" for d in snaps.iterdir() if os.path.lexists(d / "config.json"))
    except OSError:
        return None
    return found[-1] if found else None
