"""Up-front checks of a planning request: what makes it impossible before any search runs.

`request_errors` reports, one line each, why pinned knobs can never form a valid plan for this model,
cluster and training (the rules themselves live in `planner.search.space`), and which dtype/optimizer choices no
launcher of `planner.emit` can run on this hardware. The CLI turns them into exit 2 with the reason,
so exit 3 ("nothing fits") is kept for valid requests that only run out of memory.
"""

from __future__ import annotations

from planner.search.space import pinned_errors
from planner.specs import ClusterSpec, ModelSpec, TrainingSpec


def dtype_errors(cluster: ClusterSpec, train: TrainingSpec, fixed: dict) -> list[str]:
    """Dtype choices that no launcher can run here (facts from the hardware profile and planner/emit)."""
    hw = cluster.hardware
    errs = []
    if train.dtype == "fp8" and hw.peak_tflops.fp8 is None:
        errs.append(f"--dtype fp8 needs FP8 matmul units and {hw.id} has none (its profile gives no FP8 rate): "
                    "use --dtype bf16")
    if train.fp8_recipe == "mxfp8" and not hw.mx_tensor_cores:
        errs.append(f"--fp8-recipe mxfp8 needs block-scaled (MX) tensor cores, Blackwell onwards, and {hw.id} has none "
                    "(its profile gives no FP4 rate): use --fp8-recipe tensorwise")
    if train.dtype == "fp16" and hw.peak_tflops.fp16 is None and hw.is_tpu:
        errs.append(f"--dtype fp16: {hw.id} has no fp16 matmul units (its profile gives no fp16 rate; TPUs compute "
                    "in bf16): use --dtype bf16")
    custom_states = train.grad_dtype is not None or train.optimizer_dtype != "fp32"
    # --param-dtype bf16 is MaxText's weight_dtype=bfloat16, whose Adam moments inherit it (MT:configs/base.yml
    # mu_dtype)
    maxtext_bf16 = (train.param_dtype == "bf16" and train.optimizer_dtype == "bf16"
                    and train.grad_dtype in (None, "bf16"))
    if custom_states and hw.is_tpu and not maxtext_bf16:
        errs.append("--grad-dtype / --optimizer-dtype are written for Megatron-LM only, which does not run on "
                    f"{hw.id}: drop them")
    if train.optimizer_dtype == "bf16" and fixed.get("zero_stage") == 0:
        errs.append("--optimizer-dtype bf16 needs the distributed optimizer (Megatron-LM's precision-aware "
                    "optimizer requires zero_stage >= 1; the other launchers keep fp32 Adam states): drop --zero 0")
    return errs


def model_training_errors(model: ModelSpec, train: TrainingSpec) -> list[str]:
    """Training settings the model cannot take."""
    for flag, given in (("--moe-capacity-factor", train.moe_capacity_factor is not None),
                        ("--moe-load-imbalance", train.moe_load_imbalance is not None),
                        ("--moe-dispatcher", train.moe_dispatcher is not None),
                        ("--moe-flex-backend", train.moe_flex_backend is not None),
                        ("--moe-a2a-overlap", train.moe_a2a_overlap)):
        if given and not model.is_moe:
            return [f"{flag} applies to MoE models; {model.name} is dense: drop the flag"]
    if train.moe_a2a_overlap:
        from planner.stacks.rules import a2a_overlap_model_needs

        return [f"--moe-a2a-overlap (batch-level EP overlap) needs {need}: drop the flag"
                for need in a2a_overlap_model_needs(model)]
    return []


def count_free_errors(model: ModelSpec, cluster: ClusterSpec, train: TrainingSpec, fixed: dict) -> list[str]:
    """The reasons that hold whatever the device count (for --min-devices, where the count is searched)."""
    return model_training_errors(model, train) + dtype_errors(cluster, train, fixed)


def request_errors(model: ModelSpec, cluster: ClusterSpec, train: TrainingSpec, fixed: dict) -> list[str]:
    """Every reason the request can never give a plan a launcher runs (empty = go ahead and search). The advice
    names pinned knobs only when the user pinned some; else it names the batch and the device count. Reasons that hold
    whatever the layout (count_free_errors) come alone: no layout helps them, so the layout advice would mislead (a
    model the batch-level EP overlap cannot take also fails that rule on every plan)."""
    free = count_free_errors(model, cluster, train, fixed)
    if free:
        return free
    pinned = pinned_errors(model, train, cluster.count, fixed)
    if pinned:
        given = [k for k, v in fixed.items() if v is not None]
        pinned[-1] += (": change or drop the pinned knobs" if given else
                       f": no layout of {cluster.count} devices takes these settings; change --gbs / --seq-len or "
                       "the device count (--min-devices searches the counts up to it)")
    return pinned
