"""Safe reading of user files: size-limited, YAML/JSON via safe loaders, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from planner.errors import InputError

MAX_INPUT_BYTES = 8 * 2**20  # no spec or runs file is anywhere near this


def read_structured_file(path: str | Path, what: str = "file", max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """Parse a YAML or JSON file with safe loaders; every failure is an InputError of one line."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p} is a directory; give the path of a YAML or JSON {what}")
    if not p.exists():
        raise InputError(f"{p}: no such {what}")
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise InputError(f"{p} is {size} bytes; a {what} larger than {max_bytes} bytes is refused")
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(f"{p}: cannot read ({e.strerror})") from None
    if not raw.strip():
        raise InputError(f"{p} is empty; expected a YAML or JSON {what}")
    if b"\x00" in raw:
        raise InputError(f"{p} looks binary; expected a YAML or JSON {what}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{p} is not UTF-8 text; expected a YAML or JSON {what}") from None
    try:
        if p.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{p}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise InputError(f"{p}: malformed YAML{where}: {getattr(e, 'problem', None) or 'parse error'}") from None
