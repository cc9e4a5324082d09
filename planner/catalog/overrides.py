"""Cluster changes without a whole hardware profile.

- `--nic-bw 200Gb` / `--scale-up-bw 450GB`: the per-device, per-direction bandwidth of the NIC
  (scale-out) or of the scale-up fabric (NVLink, xGMI, ICI). A unit is required: `Gb` (gigabits/s,
  how NICs are rated: 400Gb for NDR InfiniBand) or `GB` (gigabytes/s, how NVLink is quoted: 450GB
  per direction for H100 NVLink 4). Measured busbw figures of the profile (ring, NVLS) scale with the
  wire bandwidth, so the profile's measured efficiency is kept.
- A cluster file whose `hardware:` is a mapping with `base: <catalog id>` and only the fields that
  differ, e.g. `hardware: {base: h100, scale_out: {unidir_GBps_per_device: 25}}`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import ValidationError

from planner.errors import InputError

MAX_GBPS = 100_000.0  # GB/s per device per direction: far beyond any link built so far
_BW = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(Gb|Gbit|Gbps|Gb/s|Gbit/s|GB|GB/s|GBps)\s*$")


def parse_bandwidth_GBps(text: str, flag: str) -> float:
    """'400Gb' -> 50.0, '450GB' -> 450.0 (GB/s per device per direction)."""
    m = _BW.match(str(text))
    if not m:
        raise InputError(f"{flag} {str(text)[:40]!r}: give a number with a unit, e.g. {flag} 400Gb (gigabits/s) or "
                         f"{flag} 50GB (gigabytes/s), per device and direction")
    value = float(m.group(1))
    gbps = value / 8.0 if m.group(2).startswith("Gb") else value
    if not math.isfinite(gbps) or gbps <= 0 or gbps > MAX_GBPS:
        raise InputError(f"{flag} {text}: must be above 0 and at most {MAX_GBPS:,.0f} GB/s")
    return gbps


def _merge(base: dict, changes: dict, where: str) -> dict:
    out = dict(base)
    for k, v in changes.items():
        if k not in base:
            raise InputError(f"{where}: unknown hardware field {k!r}; allowed: {', '.join(sorted(base))}")
        out[k] = _merge(base[k], v, f"{where}.{k}") if isinstance(v, dict) and isinstance(base[k], dict) else v
    return out


def derive_hardware(base, changes: dict[str, Any], where: str):
    """`base` (a HardwareSpec) with `changes` (nested like the profile) applied and validated."""
    from planner.catalog.hardware import _validation_summary
    from planner.specs.hardware import HardwareSpec

    changes = {str(k): v for k, v in changes.items() if k != "base"}
    try:
        return HardwareSpec(**_merge(base.model_dump(), changes, where))
    except ValidationError as e:
        raise InputError(f"{where}: changed hardware is invalid: {_validation_summary(e)}") from None


def with_bandwidths(cluster, nic_bw: str | None, scale_up_bw: str | None):
    """The cluster with the NIC and/or scale-up bandwidth replaced (None: unchanged)."""
    if nic_bw is None and scale_up_bw is None:
        return cluster
    hw = cluster.hardware
    changes: dict[str, Any] = {}
    label = []
    if nic_bw is not None:
        nic = parse_bandwidth_GBps(nic_bw, "--nic-bw")
        changes["scale_out"] = {"unidir_GBps_per_device": nic}
        label.append(f"NIC {nic:g} GB/s")
    if scale_up_bw is not None:
        up = parse_bandwidth_GBps(scale_up_bw, "--scale-up-bw")
        ratio = up / hw.scale_up.unidir_GBps
        su = {"unidir_GBps": up}
        for k in ("ring_busbw_GBps", "nvls_allreduce_busbw_GBps"):
            if getattr(hw.scale_up, k) is not None:
                su[k] = getattr(hw.scale_up, k) * ratio  # keep the measured fraction of the wire rate
        changes["scale_up"] = su
        label.append(f"scale-up {up:g} GB/s")
    new_hw = derive_hardware(hw, changes, "bandwidth override")
    name = f"{cluster.name or f'{hw.id}x{cluster.count}'} ({', '.join(label)})"
    return cluster.model_copy(update={"hardware": new_hw, "name": name})
