"""Hardware catalog: the cited accelerator profiles in `hardware_profiles/` and cluster parsing.

Pure functions, no global state beyond a read-only cache of the profile files:

- `get_hardware(name)` resolves an id or alias, case- and punctuation-insensitively
  ("H100", "h100-sxm5", "TPU v5p" all work); unknown names raise `InputError` with a did-you-mean.
- `list_hardware()` -> every `hardware_profiles/*.yaml`, validated, sorted by id (for `plan clusters`).
- `parse_cluster(text)` -> ClusterSpec from `<hardware>x<count>` or from a cluster file.

Google's slice names are accepted too: `v5p-256` / `v4-8` count TensorCores (2 per chip: 128 and 4 chips),
`v5e-16` / `v5litepod-16` / `v6e-256` count chips; the cluster's name says how many chips it is. A count after
a system name (`dgx-h100x2`) is devices, so fewer than one system's devices is an error saying so, and so is a
second count (`h100x8x2`: write h100x16).

Cluster shorthand grammar: `<hardware id or alias> x <count>`, e.g. `a100x64`, `h100x16384`,
`h800-sxm-80gbx2048`, `tpu-v5px256`, `gb200-nvl72x144` (spaces around the `x` and `X`, `*` or `×` are
also accepted). The count is split off at the LAST separator followed only by digits, so the
hardware name may itself contain an `x`: `mi300xx16` is 16 MI300X. Because `mi300` is an alias of
`mi300x`, the shorter `mi300x16` also means 16 MI300X. A name with no count (`mi300x`) is an error
that says how to add one; so is the reversed order (`64xa100`). If the text parses as shorthand with
a known accelerator it is shorthand, even if a file of that name exists; otherwise an existing path is
read as a cluster file.

Cluster file (YAML or JSON, at most 1 MiB), a mapping with:
    hardware: <id or alias>            # or an inline HardwareSpec mapping (a full profile), or
                                       # {base: <id or alias>, <only the fields that differ>}
    count: <devices>                   # whole number, 1 .. 1_000_000
    devices_per_node: <int>            # optional override of the profile's node size
    domain_size: <int>                 # optional override of the scale-up domain size
    aligned_allocation: <bool>         # optional, default true: nodes in whole segments of a multi-node domain
    name: <str>                        # optional
    price_per_device_hour: <number>    # optional: this cluster's price of one device-hour (cost with --tokens)
A price may also follow either form after `@`: `h100x16@2.5`, `my-cluster.yaml@1.9`.
Every bad input raises `InputError` with one line saying what is wrong and what to do.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.catalog.data import data_dir
from planner.catalog.files import read_structured_file
from planner.errors import InputError
from planner.names import did_you_mean, normalise
from planner.specs.cluster import MAX_DEVICES, ClusterSpec
from planner.specs.hardware import HardwareSpec

MAX_CLUSTER_FILE_BYTES = 2**20  # 1 MiB: a cluster spec is a few lines
CLUSTER_FILE_KEYS = ("hardware", "count", "devices_per_node", "domain_size", "aligned_allocation", "name",
                     "price_per_device_hour")
MAX_CLUSTER_ARG_CHARS = 4096  # PATH_MAX on Linux: no shorthand or path is longer
_FILE_SUFFIXES = (".yaml", ".yml", ".json")
# <hardware> <sep> <count>: the count part holds no separator character, so the split is always at the
# LAST separator, and anything number-like after it is captured (so "a100x8.5" gets a clear error).
_SHORTHAND = re.compile(r"^(?P<hw>.+?)\s*[xX×*]\s*(?P<count>[-+]?[0-9][0-9_.,eE+-]*)$")
_REVERSED = re.compile(r"^(?P<count>[0-9]+)\s*[xX×*]\s*(?P<hw>.+)$")
# Google Cloud's accelerator types: v4-N and v5p-N count TensorCores (2 per chip: v5p-256 is 128 chips, the
# 4x4x8 slice; cloud.google.com/tpu/docs/v5p "Topology | Cores | Chips" table, and the v4 page), v5e / v5litepod-N
# and v6e-N count chips (1 TensorCore per chip)
_GOOGLE_SLICE = re.compile(r"^(?:tpu-?)?(?P<gen>v4|v5p|v5e|v5litepod|v6e|7x)-(?P<n>[0-9]+)$", re.IGNORECASE)
_CORES_PER_CHIP = {"v4": 2, "v5p": 2, "v5e": 1, "v5litepod": 1, "v6e": 1, "7x": 2}
# TPU7x's TensorCores are each a JAX device (GCP tpu7x: "tpu7x-8" is 4 chips, 8 devices); v4 / v5p's two make one
_PROFILE_OF_GEN = {"v5litepod": "tpu-v5e", "7x": "tpu7x"}
_PRICE = re.compile(r"^(?P<cluster>.+?)\s*@\s*(?P<price>[^@]*)$")
_USAGE = "give <hardware>x<count> such as a100x64 or tpu-v5px256 (see `plan clusters`), or a cluster YAML/JSON file"


# --------------------------------------------------------------------------- catalog


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _validation_summary(e: ValidationError) -> str:
    """First pydantic error as 'field.path: message' on one line."""
    errs = e.errors()
    if not errs:
        return _one_line(str(e))
    first = errs[0]
    loc = ".".join(str(p) for p in first.get("loc", ())) or "spec"
    more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
    return _one_line(f"{loc}: {first.get('msg', 'invalid').removeprefix('Value error, ')}{more}")


@lru_cache(maxsize=1)
def _catalog() -> tuple[tuple[str, HardwareSpec], ...]:
    folder = data_dir("hardware_profiles")
    files = sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if not files:
        raise InputError(f"no hardware profiles found in {folder}; reinstall the package")
    out: dict[str, HardwareSpec] = {}
    for f in files:
        data = read_structured_file(f, what="hardware profile", max_bytes=MAX_CLUSTER_FILE_BYTES,
                                    hint="a HardwareSpec YAML mapping", packaged=True)
        if not isinstance(data, dict):
            raise InputError(f"hardware profile {f.name} must be a mapping of HardwareSpec fields")
        try:
            spec = HardwareSpec(**data)
        except ValidationError as e:
            raise InputError(f"hardware profile {f.name} is invalid: {_validation_summary(e)}") from None
        if spec.id != f.stem:
            raise InputError(f"hardware profile {f.name} has id {spec.id!r}; the file must be named {spec.id}.yaml")
        out[spec.id] = spec
    return tuple(sorted(out.items()))


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """normalised id/alias -> id; an alias claimed by two profiles is a catalog bug."""
    idx: dict[str, str] = {}
    for hid, spec in _catalog():
        for name in (hid, *spec.aliases):
            key = normalise(name)
            if not key:
                continue
            owner = idx.setdefault(key, hid)
            if owner != hid:
                raise InputError(f"hardware name {name!r} is claimed by both {owner} and {hid}; fix the profiles")
    return idx


def list_hardware() -> list[HardwareSpec]:
    """All profiles sorted by id."""
    return [spec for _, spec in _catalog()]


def _choices() -> list[str]:
    names: list[str] = []
    for hid, spec in _catalog():
        names.append(hid)
        names.extend(a.lower() for a in spec.aliases)
    return names


@lru_cache(maxsize=1)
def _by_id() -> dict[str, HardwareSpec]:
    return dict(_catalog())


def _lookup(name: str) -> HardwareSpec | None:
    hid = _index().get(normalise(name))
    return _by_id()[hid] if hid else None


def get_hardware(name: str) -> HardwareSpec:
    """Resolve an id or alias (case/punctuation-insensitive) to its HardwareSpec."""
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"hardware name must be a non-empty string, got {name!r}; see `plan clusters`")
    spec = _lookup(name)
    if spec is None:
        hint = did_you_mean(name.strip(), _choices())
        raise InputError(f"unknown hardware {name.strip()!r}{hint}; run `plan clusters` to list the accelerators")
    return spec


# --------------------------------------------------------------------------- clusters


def _check_count(value: Any, what: str = "device count") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"{what} must be a whole number such as 64, got {value!r}")
    if isinstance(value, str):
        s = value.strip()
        if not re.fullmatch(r"[-+]?[0-9]+", s):
            raise InputError(f"{what} must be a whole number written in digits such as 64, got {s!r}")
        value = int(s)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")) or not value.is_integer():
            raise InputError(f"{what} must be a whole number such as 64, got {value!r}")
        value = int(value)
    if value < 1:
        raise InputError(f"{what} must be at least 1, got {value}")
    if value > MAX_DEVICES:
        raise InputError(f"{what} {value} is absurd (more than {MAX_DEVICES:,}); check the number")
    return value


def _build_cluster(hw: HardwareSpec, count: int, devices_per_node: int | None = None,
                   domain_size: int | None = None, name: str = "", price: float | None = None,
                   aligned_allocation: bool = True) -> ClusterSpec:
    node = devices_per_node or hw.devices_per_node
    if count > node and count % node:
        lo, hi = count // node * node, (count // node + 1) * node
        raise InputError(
            f"{count} {hw.id} devices is not a whole number of {node}-device nodes; use a multiple of {node} "
            f"(e.g. {lo} or {hi}) or set devices_per_node in a cluster file"
        )
    try:
        return ClusterSpec(name=name or f"{hw.id}x{count}", hardware=hw, count=count,
                           devices_per_node=devices_per_node, domain_size=domain_size, price_per_device_hour=price,
                           aligned_allocation=aligned_allocation)
    except ValidationError as e:
        raise InputError(f"invalid cluster: {_validation_summary(e)}") from None


def _split_shorthand(text: str) -> tuple[str, str] | None:
    """(hardware part, count part), split at the last separator that is followed only by a count:
    'mi300xx16' -> ('mi300x', '16'), 'mi300x16' -> ('mi300', '16'), 'mi300x' -> None."""
    m = _SHORTHAND.match(text)
    return (m.group("hw").strip(), m.group("count")) if m else None


def _looks_like_path(text: str) -> bool:
    return "/" in text or "\\" in text or text.lower().endswith(_FILE_SUFFIXES) or text.startswith((".", "~"))


def _check_price(text: str, raw: str) -> float:
    """The price after `@` in a cluster argument: a finite number >= 0 (per device-hour)."""
    try:
        price = float(text.strip())
    except ValueError:
        price = float("nan")
    if not (price >= 0 and price != float("inf")):
        raise InputError(f"cluster {raw!r}: the price after @ must be a number >= 0 per device-hour, e.g. h100x16@2.5")
    return price


def parse_cluster(text: str) -> ClusterSpec:
    """`<hardware>x<count>` (e.g. a100x64, mi300xx16) or the path of a cluster YAML/JSON file, optionally
    followed by `@<price per device-hour>` (h100x16@2.5), which replaces a price the file gives."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"empty cluster; {_USAGE}")
    raw = text.strip()
    if len(raw) > MAX_CLUSTER_ARG_CHARS:
        raise InputError(f"cluster argument is {len(raw):,} characters long, over {MAX_CLUSTER_ARG_CHARS}; {_USAGE}")
    priced = _PRICE.match(raw)
    if priced and not Path(raw).expanduser().exists():
        cluster = _parse_unpriced(priced.group("cluster"))
        price = _check_price(priced.group("price"), raw)
        return cluster.model_copy(update={"price_per_device_hour": price})
    return _parse_unpriced(raw)


def _google_slice(raw: str) -> ClusterSpec | None:
    """`v5p-256` (Google's name: TensorCores for v4/v5p/7x, chips for v5e/v6e) as a cluster of devices (a chip; a
    TensorCore on TPU7x), named so that the output says how many chips it is."""
    m = _GOOGLE_SLICE.match(raw)
    if m is None:
        return None
    gen, n = m.group("gen").lower(), int(m.group("n"))
    per = _CORES_PER_CHIP[gen]
    hw = get_hardware(_PROFILE_OF_GEN.get(gen, f"tpu-{gen}"))
    if n < per or n % per:
        what = "devices" if hw.torus and hw.torus.cores_per_chip > 1 else "chips"
        raise InputError(f"cluster {raw!r}: Google's {gen}-N counts TensorCores ({per} per chip), so N is a multiple "
                         f"of {per}; or give {what} as {hw.id}x<{what}>")
    chips = n // per
    devices = _check_count(chips * (hw.torus.cores_per_chip if hw.torus else 1))
    unit = "TensorCores" if per > 1 else "chips"
    return _build_cluster(hw, devices, name=f"{raw} ({n} {unit} = {chips} chip{'s' * (chips > 1)})" if per > 1 else raw)


def _system_count_hint(raw: str, hw_part: str, hw: HardwareSpec, count: int) -> None:
    """`dgx-h100x2`: the count after a system name (DGX, HGX) is devices, not systems."""
    node = hw.devices_per_node
    if normalise(hw_part).startswith(("dgx", "hgx")) and count < node:
        raise InputError(f"cluster {raw!r}: the count is total devices (GPUs), not {hw_part} systems: "
                         f"{count} {hw_part} systems of {node} GPUs are {hw_part}x{count * node}")


def _nested_count_hint(raw: str, hw_part: str, count_part: str) -> None:
    """`h100x8x2`: one count, the total devices."""
    inner = _split_shorthand(hw_part)
    if inner is None or _lookup(inner[0]) is None or not inner[1].isdigit() or not count_part.isdigit():
        return
    total = int(inner[1]) * int(count_part)
    raise InputError(f"cluster {raw!r}: the count is total devices, written once: {inner[1]} x {count_part} "
                     f"devices are {inner[0]}x{total}")


def _parse_unpriced(raw: str) -> ClusterSpec:
    google = _google_slice(raw)
    if google is not None:
        return google
    split = _split_shorthand(raw)
    if split is not None:
        hw_part, count_part = split
        hw = _lookup(hw_part)
        if hw is not None:
            count = _check_count(count_part)
            _system_count_hint(raw, hw_part, hw, count)
            return _build_cluster(hw, count)
    path = Path(os.path.expanduser(raw))  # os.path: '~nosuchuser/x' stays as written (Path raises)
    try:
        exists = path.exists()
    except (OSError, ValueError) as e:  # ENAMETOOLONG, an embedded NUL...
        raise InputError(f"cluster {raw!r} is no known hardware and no readable file "
                         f"({getattr(e, 'strerror', None) or e}); {_USAGE}") from None
    if exists:
        return load_cluster_file(path)
    if _looks_like_path(raw):
        raise InputError(f"cluster file {raw} does not exist; {_USAGE}")
    if split is not None:
        hw_part = split[0]
        _nested_count_hint(raw, hw_part, split[1])
        hint = did_you_mean(hw_part, _choices())
        raise InputError(f"unknown hardware {hw_part!r} in cluster {raw!r}{hint}; "
                         "run `plan clusters` to list the accelerators")
    named = _lookup(raw)
    if named is not None:
        raise InputError(f"cluster {raw!r} names hardware but no device count; write e.g. {raw}x8 (= 8 x {named.id})")
    rev = _REVERSED.match(raw)
    if rev and _lookup(rev.group("hw").strip()) is not None:
        hw_part, count_part = rev.group("hw").strip(), rev.group("count")
        raise InputError(f"cluster {raw!r}: put the hardware first, e.g. {hw_part}x{count_part}")
    hint = did_you_mean(raw, _choices())
    raise InputError(f"cannot read cluster {raw!r}{hint}; {_USAGE}")


def _read_mapping(path: Path) -> dict[str, Any]:
    data = read_structured_file(path, what="cluster file", max_bytes=MAX_CLUSTER_FILE_BYTES,
                                hint="a cluster YAML or JSON file with `hardware:` and `count:`")
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise InputError(f"cluster file {path} must be a mapping with `hardware:` and `count:`, got {kind}")
    return data


def _optional_positive(data: dict[str, Any], key: str, path: Path) -> int | None:
    if data.get(key) is None:
        return None
    return _check_count(data[key], f"{key} in {path}")


def _check_cluster_fields(data: dict[str, Any], p: Path) -> None:
    """Refuse unknown fields and a missing `hardware:` or `count:`."""
    unknown = sorted(str(k) for k in data if k not in CLUSTER_FILE_KEYS)
    if unknown:
        raise InputError(f"cluster file {p}: unknown field(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(CLUSTER_FILE_KEYS)}")
    if "hardware" not in data or data["hardware"] in (None, ""):
        raise InputError(f"cluster file {p} has no `hardware:`; give an id or alias (see `plan clusters`) "
                         "or a profile mapping")
    if "count" not in data or data["count"] is None:
        raise InputError(f"cluster file {p} has no `count:`; give the number of devices, e.g. count: 64")


def _cluster_file_hardware(hw_field: object, p: Path) -> HardwareSpec:
    """The `hardware:` of a cluster file: a catalog id/alias, a catalog profile with changed fields
    (`base:`), or a whole inline profile."""
    if isinstance(hw_field, str):
        try:
            return get_hardware(hw_field)
        except InputError as e:
            raise InputError(f"cluster file {p}: {e}") from None
    if isinstance(hw_field, dict) and "base" in hw_field:
        # only the fields that differ from a catalog profile (planner.catalog.overrides)
        from planner.catalog.overrides import derive_hardware
        try:
            base = get_hardware(str(hw_field["base"]))
        except InputError as e:
            raise InputError(f"cluster file {p}: hardware.base: {e}") from None
        return derive_hardware(base, hw_field, f"cluster file {p}: hardware")
    if isinstance(hw_field, dict):
        try:
            return HardwareSpec(**{str(k): v for k, v in hw_field.items()})
        except ValidationError as e:
            raise InputError(f"cluster file {p}: inline hardware is invalid: {_validation_summary(e)}") from None
    raise InputError(f"cluster file {p}: `hardware:` must be an id/alias or a profile mapping, got {hw_field!r}")


def load_cluster_file(path: str | Path) -> ClusterSpec:
    """A ClusterSpec from a YAML/JSON cluster file (see the module docstring)."""
    p = Path(path)
    data = _read_mapping(p)
    _check_cluster_fields(data, p)
    hw_field = data["hardware"]
    hw = _cluster_file_hardware(hw_field, p)
    name = data.get("name") or ""
    if not isinstance(name, str):
        raise InputError(f"cluster file {p}: `name:` must be a string, got {name!r}")
    count = _check_count(data["count"], f"count in {p}")
    if not name and isinstance(hw_field, dict) and "base" in hw_field:
        name = f"{hw.id}x{count} (changed by {p.name})"  # never mistaken for the catalog profile
    return _build_cluster(hw, count, _optional_positive(data, "devices_per_node", p),
                          _optional_positive(data, "domain_size", p), name, _file_price(data, p),
                          _optional_bool(data, "aligned_allocation", p))


def _optional_bool(data: dict[str, Any], key: str, p: Path) -> bool:
    value = data.get(key, True)
    if not isinstance(value, bool):
        raise InputError(f"cluster file {p}: `{key}:` must be true or false, got {value!r}")
    return value


def _file_price(data: dict[str, Any], p: Path) -> float | None:
    value = data.get("price_per_device_hour")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
        raise InputError(f"cluster file {p}: price_per_device_hour must be a number >= 0 (price of one "
                         f"device-hour), got {value!r}")
    return float(value)
