"""The runs schema (docs/runs-schema.md): every key a run record may carry, checked before any prediction.
A superset of shared/reference/README.md's schema (files in that schema are read unchanged) with an
explicit `stack:` block; an unknown key anywhere is refused with the closest known one (difflib)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from planner.names import safe_line
from planner.stacks import ALL_FRAMEWORKS as STACK_FRAMEWORKS

PLAN_FIELDS = {  # run-file plan key -> ParallelPlan knob
    "tp": "tp", "pp": "pp", "vpp": "vpp", "dp": "dp", "cp": "cp", "ep": "ep", "etp": "etp",
    "zero_stage": "zero_stage", "micro_batch": "micro_batch", "recompute": "recompute",
    "sequence_parallel": "sequence_parallel", "schedule": "schedule",
    "remat_offloaded": "remat_offloaded", "remat_device": "remat_device",  # MaxText remat_policy custom's names
    "recompute_modules": "recompute_modules",  # Megatron's --recompute-modules (with recompute: selective)
    "offload_modules": "offload_modules",  # Megatron's --offload-modules (fine-grained activation offloading)
    # the decoder layers of the first / last pipeline stage (Megatron's --decoder-first/last-pipeline-num-layers)
    "first_stage_layers": "first_stage_layers", "last_stage_layers": "last_stage_layers",
}
RUN_KEYS = ("id", "source", "reliability", "model", "hardware", "devices", "devices_per_node",
            "aligned_allocation", "train", "plan", "measured", "notes", "stack")
TRAIN_KEYS = ("seq_len", "global_batch", "dtype", "grad_dtype", "optimizer_dtype", "moe_capacity_factor",
              "moe_force_balanced", "moe_load_imbalance", "pp_schedule_microbatches", "attention_dropout")
MEASURED_KEYS = ("step_time_s", "peak_memory_gib", "peak_memory_of", "derived_from")
# what measured.peak_memory_gib is (planner.analysis.validate.compared_peak_gib): the device's peak, max over devices
# (the default: the caching allocator's reserved peak, torchtitan's memory line), or PyTorch's peak allocated bytes
# on the job's last rank (Megatron's mem-max-allocated-bytes: allocated_bytes.all.peak, logged by the last rank)
PEAK_MEMORY_OF = ("device", "allocated_last_rank")
STACK_KEYS = ("framework", "torch_compile", "tp_comm_overlap", "fp8_recipe", "attention", "fused_loss",
              "moe_dispatcher", "moe_a2a_overlap", "cuda_graphs", "activation_offload", "expandable_segments",
              "fp8_param_gather", "cuda_graph_impl", "moe_flex_backend", "fp8_dot_product_attention")
# `model:` is a Hugging Face config: its keys are checked by planner.catalog.hf_import, not here
SECTIONS = {"train": TRAIN_KEYS, "plan": tuple(PLAN_FIELDS), "measured": MEASURED_KEYS, "stack": STACK_KEYS}

# stack.framework: the stack a run used -> whose memory and overlap behaviour the cost model applies
# (TrainingSpec.framework): every planner.stacks framework by its own name (costing stacks too), and the names a run
# may give its stack: NeMo 2 and Megatron-Bridge train with Megatron-core; torchtitan and llm-foundry (Composer) shard
# with PyTorch FSDP/FSDP2; NeMo AutoModel is its own stack (FSDP2 over Transformer Engine and DeepEP,
# planner/stacks/automodel.py); Megatron-DeepSpeed runs DeepSpeed's ZeRO.
STACK_NAMES = {
    "megatron-lm": "megatron", "megatron-core": "megatron", "megatron-bridge": "megatron", "nemo": "megatron",
    "fsdp2": "fsdp", "torchtitan": "fsdp", "llm-foundry": "fsdp", "nemo-automodel": "automodel",
    "megatron-deepspeed": "deepspeed",
}
FRAMEWORKS = {fw: fw for fw in STACK_FRAMEWORKS} | STACK_NAMES
STACK_CHOICES: dict[str, tuple[Any, ...]] = {
    "framework": tuple(FRAMEWORKS),
    "fp8_recipe": ("delayed", "tensorwise", "blockwise", "mxfp8"),  # TrainingSpec.fp8_recipe
    "attention": ("flash", "unfused"),  # TrainingSpec.attention_impl
    # Megatron-core TransformerConfig.moe_token_dispatcher_type (megatron-core 0.19.2 transformer_config.py)
    "moe_dispatcher": ("alltoall", "allgather", "flex"),
    # Megatron-core TransformerConfig.moe_flex_dispatcher_backend (megatron-core 0.19.2): TrainingSpec.moe_flex_backend
    "moe_flex_backend": ("deepep", "hybridep"),
    # Megatron-core TransformerConfig.cuda_graph_impl (megatron-core 0.19.2): full_iteration is priced
    # (TrainingSpec.cuda_graph_full_iteration); the per-layer graphs (local, transformer_engine) are recorded
    "cuda_graph_impl": ("none", "local", "transformer_engine", "full_iteration"),
}
STACK_FLAGS = ("torch_compile", "tp_comm_overlap", "fused_loss", "moe_a2a_overlap", "cuda_graphs",
               "activation_offload", "expandable_segments", "fp8_param_gather", "fp8_dot_product_attention")
# what the cost model prices of the stack block; the other keys are checked and recorded, and a run that
# states a value the model does not price lists it under `stack_not_modelled` in `plan validate --json`
MODELLED_DEFAULTS: dict[str, Any] = {"cuda_graphs": False, "activation_offload": False}
# cuda_graph_impl values the cost model prices (the rest are listed as not modelled)
PRICED_CUDA_GRAPH_IMPLS = ("none", "full_iteration")


def did_you_mean(key: Any, allowed: tuple[str, ...] | list[str], prefix: str = "") -> str:
    """'; did you mean X?' for the closest allowed name, else the list of allowed names."""
    close = difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.6)
    return f"; did you mean {prefix}{close[0]}?" if close else f"; allowed: {', '.join(allowed)}"


def unknown_top_key(run: dict) -> str | None:
    """The first top-level key of a run record the schema does not have."""
    for key in run:
        if key not in RUN_KEYS:
            return f"unknown field {safe_line(repr(key), 80)}{did_you_mean(key, RUN_KEYS)} (docs/runs-schema.md)"
    return None


def unknown_section_key(run: dict) -> str | None:
    """The first key of `train`, `plan`, `measured` or `stack` the schema does not have (`model` is an HF config,
    checked by planner.catalog.hf_import); a section that is not a mapping is left to its own check."""
    for section, keys in SECTIONS.items():
        block = run.get(section)
        for key in block if isinstance(block, dict) else ():
            if key not in keys:
                return (f"unknown field {section}.{safe_line(str(key), 80)}{did_you_mean(key, keys, section + '.')}"
                        " (docs/runs-schema.md)")
    return None


def stack_problem(run: dict) -> str | None:
    """The `stack:` block's values: each null (inferred from the citation) or a value the planner knows."""
    block = run.get("stack")
    if block is not None and not isinstance(block, dict):
        return f"'stack' must be a mapping or null, got {type(block).__name__}"
    for key, v in (block or {}).items():
        if v is None:
            continue
        if key in STACK_FLAGS and not isinstance(v, bool):
            return f"stack.{key} must be true, false or null, got {safe_line(repr(v))}"
        choices = STACK_CHOICES.get(key)
        if choices is not None and v not in choices:
            hint = did_you_mean(v, choices) if isinstance(v, str) else f"; allowed: {', '.join(choices)}"
            return f"stack.{key} {safe_line(repr(v))} is not known{hint}"
    return None


def train_problem(run: dict) -> str | None:
    """The optional precision keys of `train:` (seq_len, global_batch and dtype are checked by TrainingSpec)."""
    t = run.get("train") or {}
    for key in ("grad_dtype", "optimizer_dtype"):
        if t.get(key) is not None and t[key] not in ("fp32", "bf16"):
            return f"train.{key} must be fp32, bf16 or null, got {safe_line(repr(t[key]))}"
    n = t.get("pp_schedule_microbatches")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        return f"train.pp_schedule_microbatches must be a positive integer or null, got {safe_line(repr(n))}"
    p = t.get("attention_dropout")
    if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0):
        return f"train.attention_dropout must be a probability in [0, 1) or null, got {safe_line(repr(p))}"
    return None


@dataclass(frozen=True)
class RunStack:
    """A run's software stack as the cost model takes it: the record's `stack:` block first, the citation
    inference (planner.analysis.validate.infer_*) for what the block leaves out. `stated`: the keys the
    record gave."""

    framework: str
    torch_compile: bool
    tp_comm_overlap: bool
    fp8_recipe: str | None
    attention: str
    fused_loss: bool
    moe_dispatcher: str | None = None
    moe_a2a_overlap: bool = False
    cuda_graphs: bool | None = None
    activation_offload: bool | None = None
    expandable_segments: bool = False  # the caching allocator's expandable segments were in effect (TrainingSpec)
    fp8_param_gather: bool = False  # FP8 primary weights / FP8 all-gather of the weights (TrainingSpec)
    cuda_graph_impl: str | None = None  # Megatron's; full_iteration = TrainingSpec.cuda_graph_full_iteration
    moe_flex_backend: str | None = None  # the flex dispatcher's backend as stated (TrainingSpec.moe_flex_backend)
    fp8_dot_product_attention: bool = False  # the attention core in FP8 (TrainingSpec.fp8_attention)
    stated: tuple[str, ...] = ()

    def not_modelled(self) -> list[str]:
        """Stated stack settings the cost model does not price (it predicts the run as with the default)."""
        out = [f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, default in MODELLED_DEFAULTS.items()
               if (v := getattr(self, k)) not in (None, default)]
        if self.cuda_graph_impl not in (None, *PRICED_CUDA_GRAPH_IMPLS):
            out.append(f"cuda_graph_impl: {self.cuda_graph_impl}")
        return out


def stated_stack(run: dict) -> dict[str, Any]:
    """The non-null values of the record's `stack:` block, the framework as the cost model names it."""
    given = {k: v for k, v in (run.get("stack") or {}).items() if v is not None}
    if "framework" in given:
        given["framework"] = FRAMEWORKS[given["framework"]]
    return given
