"""Safe reading of user files: size-limited, YAML/JSON via safe loaders, one-line errors.
The one reader behind model specs, HF configs, cluster specs, run files and the catalogs.

What it refuses, each with one line naming the file and what to do:
- anything that is not a regular file (devices such as /dev/zero, FIFOs, sockets, directories): checked with
  stat before opening, the file is opened with O_NONBLOCK (a FIFO cannot block) and re-checked with fstat, and
  at most limit + 1 bytes are ever read, so the byte limit holds whatever the size field says;
- binary data, UTF-16/32 text (named as such), text that is not UTF-8;
- YAML alias bombs: the node graph is composed first and its expanded size counted (shared nodes once per
  use); more than MAX_EXPANDED_NODES, or more than ALIAS_GROWTH times the written nodes, is refused before
  any Python object is built; recursive aliases are refused too;
- non-string mapping keys (YAML `1: x`, `null: x`: every field of every input is named),
- duplicate mapping keys (YAML and JSON), non-finite numbers (.inf, .nan, NaN, Infinity) and integers
  longer than MAX_INT_DIGITS digits.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, SequenceNode

from planner.errors import InputError
from planner.names import safe_line

MIB = 2**20
MAX_INPUT_BYTES = 8 * MIB  # run files; model and cluster specs pass 1 MiB
MAX_INT_DIGITS = 30  # no count or size in any input has more digits (10^30 is beyond every real quantity)
MAX_EXPANDED_NODES = 2_000_000  # YAML nodes after alias expansion
ALIAS_GROWTH = 10  # expansion may reuse anchors up to 10x the nodes written (+ 10,000)


def _limit_text(n: int) -> str:
    return f"{n // MIB} MiB" if n % MIB == 0 else f"{n} bytes"


class _Refused(Exception):
    """Raised inside the loaders; turned into an InputError naming the file."""


def read_limited_bytes(path: str | Path, where: str, max_bytes: int, hint: str) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; InputError for anything else (never blocks)."""
    p = str(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{where} does not exist: pass {hint}") from None
    except OSError as e:
        raise InputError(f"{where} cannot be read ({e.strerror or e}): pass {hint}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{where} is a directory: pass {hint}")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{where} is not a regular file (a device, FIFO or socket): pass {hint}")
    if st.st_size > max_bytes:
        raise InputError(f"{where} is {st.st_size:,} bytes, over the {_limit_text(max_bytes)} limit: pass {hint}")
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise InputError(f"{where} cannot be read ({e.strerror or e}): pass {hint}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a special file since the stat
            raise InputError(f"{where} is not a regular file (a device, FIFO or socket): pass {hint}")
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 16, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as e:
        raise InputError(f"{where} cannot be read ({e.strerror or e}): pass {hint}") from None
    finally:
        os.close(fd)
    if total > max_bytes:
        raise InputError(f"{where} is over the {_limit_text(max_bytes)} limit: pass {hint}")
    return b"".join(chunks)


def _decode(raw: bytes, where: str, hint: str) -> str:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) and len(raw) % 2 == 0:
        try:
            raw.decode("utf-16")
            raise InputError(f"{where} is UTF-16 text: save it as UTF-8")
        except UnicodeDecodeError:
            pass
    if b"\x00" in raw:
        raise InputError(f"{where} is binary (or UTF-16/32 text without a byte-order mark): pass {hint} saved as UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{where} is not UTF-8 text: pass {hint} saved as UTF-8") from None


def read_text_file(path: str | Path, where: str, max_bytes: int, hint: str, errors: str = "strict") -> str:
    """The text of a regular UTF-8 file of at most `max_bytes` (read_limited_bytes: never blocks, never reads
    past the limit); `errors="replace"` keeps going over stray bytes (logs), else non-UTF-8 is refused."""
    raw = read_limited_bytes(path, where, max_bytes, hint)
    if errors == "strict":
        return _decode(raw, where, hint)
    return raw.decode("utf-8-sig", errors=errors)


# ------------------------------------------------------------------------------------------- YAML


def _expanded_size(root: Node) -> tuple[int, int]:
    """(nodes written, nodes after alias expansion) of a composed YAML graph; _Refused on a recursive alias."""
    memo: dict[int, int] = {}
    active: set[int] = set()

    def size(n: Node) -> int:
        key = id(n)
        if key in memo:
            return memo[key]
        if key in active:
            raise _Refused("has a recursive alias (an anchor used inside itself)")
        active.add(key)
        if isinstance(n, SequenceNode):
            total = 1 + sum(size(c) for c in n.value)
        elif isinstance(n, MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in n.value)
        else:
            total = 1
        active.discard(key)
        memo[key] = total
        return total

    expanded = size(root)
    return len(memo), expanded


class _Refusals(SafeConstructor):
    """Constructor checks of both loaders: duplicate keys, non-string keys, non-finite floats and absurdly long
    integers are refused."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, str):  # every field of every input is named: 1:, null:, true: are typos
                    raise _Refused(f"has the non-string key {safe_line(repr(key), 60)} (line "
                                   f"{key_node.start_mark.line + 1}): field names are text; quote it or remove it")
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:  # unhashable key: SafeConstructor reports it
                    continue
                if dup:
                    raise _Refused(f"repeats the key {safe_line(key)!r} (line {key_node.start_mark.line + 1}): "
                                   "keep one of them")
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise _Refused(f"has an integer of {digits:,} digits (line {node.start_mark.line + 1}): check the number")
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise _Refused(f"has a non-finite number {safe_line(node.value)!r} (line {node.start_mark.line + 1}): "
                           "give a finite value")
        return value


class _SafeLoader(_Refusals, yaml.SafeLoader):
    """yaml.SafeLoader (pure-Python parser) with the refusals: every file a user passes."""


# The package's own data files (hardware profiles, model catalog, error bands: ~100 KB read by every `plan`) are
# parsed by libyaml's C parser when PyYAML was built with it: ~10x faster, and the same data (tests/e2e/test_hostile.py
# checks every shipped YAML file parses equal with both loaders). User files keep the pure-Python parser, whose
# errors the messages quote.
_PackagedLoader: Any = type("_PackagedLoader", (_Refusals, yaml.CSafeLoader), {}) if yaml.__with_libyaml__ \
    else _SafeLoader

for _loader in {_SafeLoader, _PackagedLoader}:
    _loader.add_constructor("tag:yaml.org,2002:int", _loader.construct_yaml_int)
    _loader.add_constructor("tag:yaml.org,2002:float", _loader.construct_yaml_float)
    _loader.add_constructor("tag:yaml.org,2002:map", _loader.construct_yaml_map)


def _load_yaml(text: str, packaged: bool = False) -> Any:
    loader = (_PackagedLoader if packaged else _SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        written, expanded = _expanded_size(node)
        if expanded > MAX_EXPANDED_NODES or expanded > ALIAS_GROWTH * written + 10_000:
            raise _Refused(f"expands its YAML aliases to {expanded:,} nodes from {written:,} written "
                           "(an alias bomb?): write the values out or use fewer aliases")
        return loader.construct_document(node)
    finally:
        loader.dispose()


# ------------------------------------------------------------------------------------------- JSON


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _Refused(f"repeats the key {safe_line(k)!r}: keep one of them")
        out[k] = v
    return out


def _json_int(s: str) -> int:
    if len(s.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"has an integer of {len(s.lstrip('-')):,} digits: check the number")
    return int(s)


def _json_constant(s: str) -> float:
    raise _Refused(f"has the non-finite number {s}, which is not JSON: give a finite value")


def _load_json(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_json_pairs, parse_int=_json_int, parse_constant=_json_constant)


# ------------------------------------------------------------------------------------------- entry


def read_structured_file(path: str | Path, what: str = "file", max_bytes: int = MAX_INPUT_BYTES,
                         hint: str = "a YAML or JSON file", packaged: bool = False) -> Any:
    """Parse a YAML or JSON file with safe loaders (no code execution); every failure is an InputError
    of one line naming the file (`what`) and what to do (`hint`). `packaged`: one of the package's own data files
    (its YAML is parsed by libyaml's C parser when available)."""
    p = Path(path)
    where = f"{what} {safe_line(str(p))!r}"
    raw = read_limited_bytes(p, where, max_bytes, hint)
    if not raw.strip():
        raise InputError(f"{where} is empty: it must hold {hint}")
    text = _decode(raw, where, hint)
    kind = "JSON" if p.suffix.lower() == ".json" else "YAML"
    try:
        return _load_json(text) if kind == "JSON" else _load_yaml(text, packaged)
    except _Refused as e:
        raise InputError(f"{where} {e}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{where} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}): "
                         "fix the syntax") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        msg = safe_line(" ".join(str(getattr(e, "problem", None) or "parse error").split()))
        raise InputError(f"{where} is not valid YAML ({msg}{at}): fix the syntax") from None
    except RecursionError:
        raise InputError(f"{where} is nested too deeply: fix the file") from None
    except ValueError as e:  # e.g. int() beyond Python's digit limit
        raise InputError(f"{where} holds a value that cannot be read ({safe_line(e)}): fix the file") from None
