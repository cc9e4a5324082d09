"""Typed, immutable specs (pydantic v2, frozen, unknown fields rejected)."""

from planner.specs.cluster import ClusterSpec
from planner.specs.hardware import CalibrationSpec, HardwareSpec, PeakFlops, ScaleOut, ScaleUp, TorusSpec
from planner.specs.model import MLASpec, ModelSpec, MoESpec, RopeScaling
from planner.specs.plan import ParallelPlan
from planner.specs.training import TrainingSpec

__all__ = [
    "CalibrationSpec", "ClusterSpec", "HardwareSpec", "PeakFlops", "ScaleOut", "ScaleUp", "TorusSpec",
    "MLASpec", "ModelSpec", "MoESpec", "RopeScaling", "ParallelPlan", "TrainingSpec",
]
