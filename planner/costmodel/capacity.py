"""The one usable-capacity rule: how much of a device's memory a plan may use, and when its peak sits so close to
that capacity that the model's own memory error could push it over. The search, Evaluation.fits, the tables,
--json and --out all read these functions.

- usable = HBM - the fit reserve - headroom, headroom the user's --memory-headroom (GiB, default 0); the fit reserve
  is calibration.FIT_RESERVE_GIB under PyTorch's caching allocator (transient spikes above the modelled peak) and 0
  under XLA, which assigns every buffer at compile time and refuses a program over the device's limit (the TPU
  profiles' capacity is XLA:TPU's own limit, the runtime's reservation already excluded: hardware_profiles/tpu-*.yaml).
- the margin: without an explicit --memory-headroom a plan keeps calibration.MEMORY_BAND_REL of the usable capacity
  free, peak <= usable x (1 - band), to count as fitting with margin: the memory error band, the 0.90 quantile of how
  far the published peaks landed from their cross-validated prediction (planner.analysis.membands), either way.
  Stated as a share of the capacity kept free, it is slightly stricter than peak x (1 + band) <= usable. Plans
  that do not keep it rank after every plan that does (planner.search.ranking), so #1, and what --out writes, keeps
  it whenever any plan can. An explicit --memory-headroom (0 included) replaces the margin.
- the inner margin: where no plan keeps the margin, the plans that keep calibration.MEMORY_BAND_MEDIAN_REL free (the
  median of the same misses) rank before those that keep less (memory_tier), so #1 is not a plan at the very edge of
  the capacity while one with room to spare exists. No inner margin either with an explicit --memory-headroom.
- host memory: what a plan keeps in host DRAM instead of HBM (ZeRO-Offload's optimizer states, MaxText's offloaded
  layer tensors: memory.host_bytes, the stage that keeps the most) must not exceed the host DRAM per device
  (HardwareSpec.host_memory_gib: the profile's reference system; a cluster file's `hardware: {base: <id>,
  host_memory_gib: N}` states other nodes'); not checked where the profile does not state it. No margin: the
  figure is the whole of the host's memory, the OS and the data pipeline included, so a plan near it is already at
  the edge.
"""

from __future__ import annotations

from planner.costmodel.calibration import Calibration
from planner.stacks import traits


def fit_reserve_gib(framework: str, cal: Calibration) -> float:
    """Memory kept free beyond the modelled peak: the caching allocator's transient spikes (PyTorch stacks); none
    under XLA's static buffer assignment, checked against the device's limit when the step compiles."""
    return cal.FIT_RESERVE_GIB if traits(framework).caching_allocator else 0.0


def usable_capacity_gib(capacity_gib: float, headroom_gib: float | None, framework: str, cal: Calibration) -> float:
    """HBM less the stack's fit reserve and the requested headroom (None = none requested)."""
    return capacity_gib - fit_reserve_gib(framework, cal) - (headroom_gib or 0.0)


def memory_margin_rel(headroom_gib: float | None, cal: Calibration) -> float:
    """The share of the usable capacity a plan keeps free by default: the memory error band; 0 when the user gave a
    headroom of their own (--memory-headroom, 0 = opt out)."""
    return cal.MEMORY_BAND_REL if headroom_gib is None else 0.0


def within_margin(peak_gib: float, usable_gib: float, margin_rel: float) -> bool:
    """The peak leaves the margin's share of the usable capacity free: peak <= usable x (1 - margin)."""
    return peak_gib <= usable_gib * (1.0 - margin_rel)


def inner_margin_rel(headroom_gib: float | None, cal: Calibration) -> float:
    """The share of the usable capacity the second tier keeps free: the median memory miss; 0 with a headroom given."""
    return cal.MEMORY_BAND_MEDIAN_REL if headroom_gib is None else 0.0


def memory_tier(peak_gib: float, usable_gib: float, margin_rel: float, inner_rel: float) -> int:
    """0: the peak keeps the margin free; 1: it keeps the inner margin (the median miss) but not the margin; 2: less.
    Plans rank tier by tier (planner.search.ranking)."""
    if within_margin(peak_gib, usable_gib, margin_rel):
        return 0
    return 1 if within_margin(peak_gib, usable_gib, inner_rel) else 2


def host_fits(host_gib: float, limit_gib: float | None) -> bool:
    """A plan's host-memory share per device is within the host DRAM per device (None: not known, not checked)."""
    return limit_gib is None or host_gib <= limit_gib
