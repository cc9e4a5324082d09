"""Safe reading of user files: size-limited, YAML/JSON via safe loaders, one-line errors.
The one reader behind model specs, cluster specs and run files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from planner.errors import InputError

MIB = 2**20
MAX_INPUT_BYTES = 8 * MIB  # run files; model and cluster specs pass 1 MiB


def _limit_text(n: int) -> str:
    return f"{n // MIB} MiB" if n % MIB == 0 else f"{n} bytes"


def read_structured_file(path: str | Path, what: str = "file", max_bytes: int = MAX_INPUT_BYTES,
                         hint: str = "a YAML or JSON file") -> Any:
    """Parse a YAML or JSON file with safe loaders (no code execution); every failure is an InputError
    of one line naming the file (`what`) and what to do (`hint`)."""
    p = Path(path)
    where = f"{what} {str(p)!r}"
    if p.is_dir():
        raise InputError(f"{where} is a directory: pass {hint}")
    if not p.exists():
        raise InputError(f"{where} does not exist: pass {hint}")
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise InputError(f"{where} is {size:,} bytes, over the {_limit_text(max_bytes)} limit: pass {hint}")
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(f"{where} cannot be read ({e.strerror or e})") from None
    if not raw.strip():
        raise InputError(f"{where} is empty: it must hold {hint}")
    if b"\x00" in raw:
        raise InputError(f"{where} is binary: pass {hint}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{where} is not UTF-8 text: pass {hint}") from None
    kind = "JSON" if p.suffix.lower() == ".json" else "YAML"
    try:
        return json.loads(text) if kind == "JSON" else yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{where} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}): fix the syntax") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        msg = " ".join(str(getattr(e, "problem", None) or "parse error").split())
        raise InputError(f"{where} is not valid YAML ({msg}{at}): fix the syntax") from None
    except RecursionError:
        raise InputError(f"{where} is nested too deeply: fix the file") from None
