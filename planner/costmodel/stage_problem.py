"""The layer -> stage balancing problem (built by planner.costmodel.balance from the per-layer costs `evaluate`
uses, solved by planner.search.stages): per-layer times and bytes, stage extras, in-flight micro-batches and
the capacity. Plain data with its checks, so the cost model poses the problem without importing the search."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class StageProblem:
    num_layers: int
    pp: int
    layer_time_s: tuple[float, ...]  # per layer, fwd+bwd of one micro-batch, no recompute
    layer_recompute_s: tuple[float, ...]  # extra time if that layer is fully recomputed
    layer_act_bytes: tuple[float, ...]  # activation bytes held per in-flight micro-batch, no recompute
    layer_act_bytes_recompute: tuple[float, ...]  # same with full recompute (layer input only)
    layer_state_bytes: tuple[float, ...]  # weights+grads+optimizer bytes of the layer on one device
    first_extra_time_s: float  # embedding (stage 0)
    last_extra_time_s: float  # LM head + loss (stage pp-1)
    first_extra_bytes: float  # embedding weights etc.
    last_extra_bytes: float  # LM head weights, logits
    inflight: tuple[float, ...]  # in-flight micro-batches per stage (1F1B: pp - s)
    capacity_bytes: float  # per-device memory limit for states + activations
    contiguous: bool = True  # False: ignore layer order, use mean per-layer costs
    uniform_recompute: bool = False  # one count R for every stage, r_s = min(R, n_s) (Megatron's flag)
    # only splits a launch flag expresses: every stage but the first and the last holds the same number of layers
    # (Megatron's --decoder-first/last-pipeline-num-layers), or the default split (partition.stage_layer_counts)
    even_middle: bool = False

    def __post_init__(self) -> None:
        if self.num_layers < 1 or self.pp < 1:
            raise ValueError(f"need num_layers >= 1 and pp >= 1, got {self.num_layers}, {self.pp}")
        for name in ("layer_time_s", "layer_recompute_s", "layer_act_bytes", "layer_act_bytes_recompute",
                     "layer_state_bytes"):
            v = getattr(self, name)
            if len(v) != self.num_layers:
                raise ValueError(f"{name} has {len(v)} entries for {self.num_layers} layers")
            if any(not math.isfinite(x) or x < 0 for x in v):
                raise ValueError(f"{name} must be finite and >= 0")
        if len(self.inflight) != self.pp:
            raise ValueError(f"inflight has {len(self.inflight)} entries for pp={self.pp}")
        if any(not math.isfinite(x) or x < 0 for x in self.inflight):
            raise ValueError("inflight must be finite and >= 0")
        for name in ("first_extra_time_s", "last_extra_time_s", "first_extra_bytes", "last_extra_bytes"):
            x = getattr(self, name)
            if not math.isfinite(x) or x < 0:
                raise ValueError(f"{name} must be finite and >= 0")
        if not (self.capacity_bytes > 0 and math.isfinite(self.capacity_bytes)):
            raise ValueError("capacity_bytes must be finite and > 0")
