"""The typed request every front end (the `plan` CLI, report, compare, tests) gives the application layer:
which model on which cluster, the training settings, the pinned knobs and the search settings."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.specs import ClusterSpec
from planner.specs.training import AttentionImpl, Dtype, Fp8Recipe, Framework, StateDtype

# command-line option name -> ParallelPlan field it pins (the names messages print as `--tp 4`)
KNOB_FLAGS = {
    "tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "ep": "ep", "etp": "etp", "vpp": "vpp",
    "mbs": "micro_batch", "zero": "zero_stage", "recompute": "recompute", "sp": "sequence_parallel",
    "schedule": "schedule", "cp_comm": "cp_comm", "recompute_layers": "recompute_layers",
    "zero_shard": "zero_shard_size", "offload": "offload_optimizer", "tp_comm_overlap": "tp_comm_overlap",
    "remat_offload": "remat_offloaded", "remat_device": "remat_device", "recompute_modules": "recompute_modules",
    "offload_modules": "offload_modules",
}

# request field -> the option name the CLI gives it, where they differ
_OPTION_NAMES = {"model": "model_arg", "cluster": "cluster_arg", "memory_headroom_gib": "memory_headroom"}


@dataclass(frozen=True)
class PlanRequest:
    """One planning request. `knobs` maps ParallelPlan field names to the values the user pinned; every
    other knob is searched. None means "the default" (documented on the matching `plan` option)."""

    model: str | None = None  # catalog name or alias, model spec file, or HF config.json
    cluster: str | ClusterSpec | None = None  # <hardware>x<count>, a cluster spec file, or a parsed cluster
    seq_len: int | None = None  # default 4096
    gbs: int | None = None  # global batch in sequences; default ~4M tokens (planner.app.inputs.default_global_batch)
    dtype: Dtype = "bf16"
    launcher: str | None = None  # target stack: only plans it runs, scored with its behaviour
    framework: Framework | None = None  # default: the launcher's, else planner.launchers.default_framework
    grad_dtype: StateDtype | None = None
    optimizer_dtype: StateDtype | None = "fp32"
    attention: AttentionImpl | None = None  # default flash
    moe_capacity_factor: float | None = None
    moe_load_imbalance: float | None = None  # default: a balanced router's load
    moe_dispatcher: str | None = None  # default: the stack's
    moe_flex_backend: str | None = None  # default: the stack's (DeepEP)
    moe_a2a_overlap: bool | None = None  # None: searched where the stack runs it (planner.search.dispatchers)
    torch_compile: bool | None = None
    fp8_recipe: Fp8Recipe | None = None
    loss_chunks: int | None = None  # default: the --launcher's stack's (torchtitan 8), else 1
    fp8_moe_act_cache: bool | None = None
    fp8_param_gather: bool | None = None
    fp8_attention: bool | None = None  # default off
    param_dtype: StateDtype | None = None  # default fp32
    nic_bw: str | None = None  # "400Gb" / "50GB": replaces the hardware profile's NIC bandwidth
    scale_up_bw: str | None = None
    knobs: Mapping[str, Any] = field(default_factory=dict)
    max_tp: int | None = None
    memory_headroom_gib: float | None = None  # GiB kept free; None: the default memory margin (capacity.py)
    top_k: int = 5
    all_variants: bool = False
    # only pipeline depths dividing the layers evenly (--min-devices sizes a purchase for these layouts)
    even_stages: bool = False

    @classmethod
    def from_options(cls, kw: Mapping[str, Any]) -> PlanRequest:
        """The request from a command's option values (click parameter names; unknown names are ignored)."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            name = _OPTION_NAMES.get(f.name, f.name)
            if f.name != "knobs" and kw.get(name) is not None:
                values[f.name] = kw[name]
        knobs = {knob: kw[flag] for flag, knob in KNOB_FLAGS.items() if kw.get(flag) is not None}
        if knobs.get("recompute_layers") is not None and "recompute" not in knobs:
            knobs["recompute"] = "full"  # K counts fully recomputed layers: --recompute-layers implies full
        return cls(**values, knobs=knobs)

    def replace(self, **changes: Any) -> PlanRequest:
        return dataclasses.replace(self, **changes)

    def pins_text(self) -> str:
        """The pinned knobs as the options that pin them (`--tp 4 --pp 2`), or 'none'."""
        knobs = dict(self.knobs)
        text = lambda v: (",".join(v) or "none") if isinstance(v, tuple) else v  # noqa: E731
        return " ".join(f"--{f.replace('_', '-')} {text(knobs[k])}" for f, k in KNOB_FLAGS.items()
                        if k in knobs) or "none"


def resolve_target(req: PlanRequest, emit: tuple[str, ...] = ()) -> PlanRequest:
    """Make --launcher, --framework and --emit consistent: --launcher sets the framework's default;
    a single --emit L (jax aside) implies --launcher L; a different --framework or --emit is an error."""
    from planner.errors import InputError
    from planner.launchers import TARGETS, capabilities

    launcher = req.launcher
    named = sorted({e for e in emit if e in TARGETS})
    if launcher is None and len(named) == 1:
        launcher = named[0]
    if launcher is not None:
        other = [e for e in named if e != launcher]
        if other:
            raise InputError(f"--emit {other[0]} differs from the target --launcher {launcher}: drop one of them")
        fw = capabilities(launcher).framework
        if req.framework not in (None, fw):
            raise InputError(f"--framework {req.framework} differs from --launcher {launcher}'s ({fw}): "
                             "drop --framework")
        return req.replace(launcher=launcher, framework=fw)
    return req  # no stack named: build_inputs scores the hardware's default (planner.launchers.default_framework)
