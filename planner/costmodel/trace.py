"""The typed cost trace: every number the cost model produces is a `Term` that names its value, unit,
formula, inputs and source. The breakdowns, `plan explain`, the report and `--json` render terms; no
formula is written out anywhere else.

Each cost module declares its formulas once (`formula(...)` below, registered by id); a term refers to
its formula by id, so a renderer can show the formula text beside the inputs that produced the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Union

Scalar = Union[float, int, str]

# The step-time breakdown, in display order: one list for the model, the tables, the report and --json.
TIME_TERMS: tuple[str, ...] = ("compute_s", "recompute_s", "bubble_s", "tp_comm_s", "cp_comm_s", "ep_comm_s",
                               "pp_comm_s", "dp_comm_s", "optimizer_s")
# The parts of the peak stage's memory, in display order (their sum is peak_gib).
MEMORY_PARTS: tuple[str, ...] = ("weights_gib", "grads_gib", "optimizer_gib", "activations_gib", "buffers_gib",
                                 "overhead_gib")
# Human labels of the terms above (tables, report legends).
LABELS: Mapping[str, str] = MappingProxyType({
    "compute_s": "compute", "recompute_s": "recompute", "bubble_s": "pipeline bubble", "tp_comm_s": "TP comm",
    "cp_comm_s": "CP comm", "ep_comm_s": "EP comm", "pp_comm_s": "PP comm", "dp_comm_s": "DP comm",
    "optimizer_s": "optimizer step", "weights_gib": "weights", "grads_gib": "gradients",
    "optimizer_gib": "optimizer", "activations_gib": "activations", "buffers_gib": "buffers",
    "overhead_gib": "overhead", "host_gib": "in host memory", "host_capacity_gib": "host memory per device",
    "step_time_s": "step time", "peak_gib": "peak memory", "capacity_gib": "device memory",
    "tokens_per_microbatch": "tokens per micro-batch per device", "num_microbatches": "micro-batches per step",
    "peak_flops": "dense peak per device", "gemm_efficiency_ceiling": "GEMM efficiency ceiling",
    "attention_efficiency": "attention-core efficiency",
    "local_attention_tile_rel": "attention-core efficiency of local layers vs causal",
    "causal_attention_tile_rel": "attention-core efficiency at this length vs the fitted one",
    "layer_compute_s": "layer compute (fwd + bwd) per micro-batch",
    "layer_comm_fwd_s": "layer collectives (forward) per micro-batch",
    "attention_share": "attention core's share of the layer compute",
    "tokens_per_s_per_device": "tokens per second per device", "mfu": "MFU", "hfu": "HFU",
})


def label(name: str) -> str:
    """Human label of a term name; `base[kind]` names (per layer kind) read '<base label> (<kind>)'."""
    base, _, kind = name.partition("[")
    text = LABELS.get(base, base)
    return f"{text} ({kind.rstrip(']')})" if kind else text


@dataclass(frozen=True, slots=True)
class Term:
    """One number of the cost model: `value` in `unit`, made by formula `formula_id` from `inputs`."""

    name: str
    value: float
    unit: str
    formula_id: str
    inputs: Mapping[str, Scalar]
    source: str


@dataclass(frozen=True, slots=True)
class Formula:
    """A formula of the cost model, stated once: its id, its text (symbols of its inputs) and its source
    (paper and equation, or documentation)."""

    id: str
    text: str
    source: str

    def term(self, name: str, value: float, unit: str, **inputs: Scalar) -> Term:
        return Term(name, value, unit, self.id, MappingProxyType(inputs), self.source)


FORMULAS: dict[str, Formula] = {}


def formula(id: str, text: str, source: str) -> Formula:
    """Declare (and register) a formula; ids are unique."""
    if id in FORMULAS:
        raise ValueError(f"formula {id} declared twice")
    f = FORMULAS[id] = Formula(id, text, source)
    return f


@dataclass(frozen=True)
class CostTrace:
    """The terms of one evaluation: `time` (the breakdown, TIME_TERMS order), `memory` (the peak stage's
    parts, MEMORY_PARTS order, then peak and capacity), `factors` (intermediate quantities and rates)."""

    time: tuple[Term, ...]
    memory: tuple[Term, ...]
    factors: tuple[Term, ...]
    _by_name: Mapping[str, Term] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {t.name: t for t in (*self.factors, *self.memory, *self.time)})

    def __getitem__(self, name: str) -> Term:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def value(self, name: str) -> float:
        return self._by_name[name].value

    def terms(self) -> tuple[Term, ...]:
        return (*self.time, *self.memory, *self.factors)
