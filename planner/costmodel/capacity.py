"""The one usable-capacity rule: how much of a device's memory a plan may use, and when its peak sits so close to
that capacity that the model's own memory error could push it over. The search, Evaluation.fits, the tables,
--json and --out all read these functions.

- usable = HBM - calibration.FIT_RESERVE_GIB - headroom, headroom the user's --memory-headroom (GiB, default 0).
- the margin: without an explicit --memory-headroom a plan must keep the upper edge of its peak's band,
  peak x (1 + calibration.MEMORY_BAND_REL), within the usable capacity (the cross-validated band of the published peaks
  (planner.analysis.membands), to count as fitting with margin; plans that do not rank after the plans of their
  step-time band that do (planner.search.ranking). An explicit --memory-headroom (0 included) replaces the margin.
"""

from __future__ import annotations

from planner.costmodel.calibration import Calibration


def usable_capacity_gib(capacity_gib: float, headroom_gib: float | None, cal: Calibration) -> float:
    """HBM less the fit reserve and the requested headroom (None = none requested)."""
    return capacity_gib - cal.FIT_RESERVE_GIB - (headroom_gib or 0.0)


def memory_margin_rel(headroom_gib: float | None, cal: Calibration) -> float:
    """The share of the usable capacity a plan keeps free by default: the memory band; 0 when the user gave a
    headroom of their own (--memory-headroom, 0 = opt out)."""
    return cal.MEMORY_BAND_REL if headroom_gib is None else 0.0


def within_margin(peak_gib: float, usable_gib: float, margin_rel: float) -> bool:
    """The peak fits even at the upper edge of its memory band: peak x (1 + margin) <= usable."""
    return peak_gib * (1.0 + margin_rel) <= usable_gib
