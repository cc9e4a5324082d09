"""Pipeline rules some stacks impose on every plan, whatever the launcher files (planner.specs.dims keeps the
launcher-neutral ones). Each factory takes the stack's name for the message; the stack module cites the code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.stacks.base import PlanRule

if TYPE_CHECKING:
    from planner.specs.model import ModelSpec
    from planner.specs.plan import ParallelPlan
    from planner.specs.training import TrainingSpec


def interleaved_microbatches(who: str) -> PlanRule:
    """The interleaved schedule runs the micro-batches in groups of pp: their count must divide by pp."""

    def rule(model: ModelSpec, train: TrainingSpec, p: ParallelPlan) -> list[str]:
        if p.schedule != "interleaved" or p.pp == 1:
            return []
        dims = p.dims
        if not dims.batch_divides(train.global_batch):
            return []  # a batch that does not divide is planner.specs.dims.batch_errors'
        n = dims.num_microbatches(train.global_batch)
        return [f"the interleaved schedule needs the micro-batch count ({n}) divisible by pp={p.pp} ({who} rule)"
                ] if n % p.pp else []

    return rule


def _uneven_split_holds(model: ModelSpec, p: ParallelPlan) -> tuple[int, int] | None:
    """(layers left for the free stages, free stages) of a valid explicit first/last split, else None."""
    first, last = p.first_stage_layers, p.last_stage_layers
    free = p.pp - (first is not None) - (last is not None)
    rest = model.num_layers - (first or 0) - (last or 0)
    if rest < 0 or (free and rest % free) or (not free and rest):
        return None  # planner.specs.dims reports the split itself
    return rest, free


def uneven_stages_split_into_vpp(who: str, flags: str) -> PlanRule:
    """With virtual stages, each explicitly sized stage's layer count divides into vpp chunks."""

    def rule(model: ModelSpec, train: TrainingSpec, p: ParallelPlan) -> list[str]:
        first, last = p.first_stage_layers, p.last_stage_layers
        if (first is None and last is None) or p.vpp == 1:
            return []
        split = _uneven_split_holds(model, p)
        if split is None:
            return []
        rest, free = split
        if any(c % p.vpp for c in (first, last, rest // free if free else 0) if c is not None):
            return [f"with vpp={p.vpp} every stage's layer count must divide into {p.vpp} virtual stages "
                    f"({who} rule for {flags})"]
        return []

    return rule


def embedding_loss_units_split(who: str) -> PlanRule:
    """Counting the embedding and the loss as a layer each: layers + 2 units split evenly over pp x vpp."""

    def rule(model: ModelSpec, train: TrainingSpec, p: ParallelPlan) -> list[str]:
        units = model.num_layers + 2
        if p.account_embedding_loss and (p.pp < 2 or units % p.pp or (units // p.pp) % p.vpp):
            return [f"counting the embedding and loss as layers needs pp > 1 and {units} divisible by pp={p.pp} "
                    f"into stages divisible by vpp={p.vpp} ({who} rule)"]
        return []

    return rule


def fp8_param_gather_needs_sharded_optimizer(who: str) -> PlanRule:
    """FP8 primary weights are gathered by the distributed optimizer or FSDP: not with plain data parallelism."""

    def rule(model: ModelSpec, train: TrainingSpec, p: ParallelPlan) -> list[str]:
        if train.fp8_param_gather and p.zero_stage == 0:
            return [f"FP8 parameter gather (--fp8-param-gather) needs the distributed optimizer or FSDP: zero stage "
                    f"1 or more ({who} rule)"]
        return []

    return rule


def fp8_param_gather_offload_recipes(who: str, recipes: tuple[str, ...]) -> PlanRule:
    """FP8 primary weights beside the optimizer offloaded to the host need one of these FP8 recipes
    (Stack.fp8_param_gather_offload_recipes; TrainingSpec.fp8_recipe_run: tensorwise when none is stated)."""

    def rule(model: ModelSpec, train: TrainingSpec, p: ParallelPlan) -> list[str]:
        recipe = train.fp8_recipe_run
        if train.fp8_param_gather and p.offload_optimizer and recipe not in recipes:
            return [f"FP8 parameter gather (--fp8-param-gather) beside optimizer offload needs --fp8-recipe "
                    f"{' or '.join(recipes)}, not {recipe} ({who} rule)"]
        return []

    return rule


def partial_recompute_per_virtual_stage(who: str, flags: str) -> PlanRule:
    """Full recompute of k of a pipeline rank's layers, where the stack recomputes the same first layers of each of the
    rank's virtual stages (k / vpp of them): k a multiple of vpp. The search refines partial recompute in the steps the
    stack's rules take (planner.search.engine._refine_partial_recompute)."""

    def rule(model: ModelSpec, train: TrainingSpec, p: ParallelPlan) -> list[str]:
        k, unit = p.recompute_layers, p.vpp
        if p.recompute != "full" or k is None or k % unit == 0:
            return []
        below, above = k - k % unit, k - k % unit + unit
        near = f"{below} or {above}" if below else f"{above}"
        return [f"recompute_layers={k} per pipeline rank does not split over its {unit} virtual stages: {who} "
                f"recomputes the same first layers of each ({flags}), so give a multiple of vpp={unit} ({near})"]

    return rule


def a2a_overlap_needs(recompute: str, recompute_modules: tuple[str, ...] | list[str], pp: int, vpp: int) -> list[str]:
    """What batch-level EP overlap needs that these knobs lack (megatron-core transformer_config.py asserts): no full
    recompute, no 'moe' recompute module and, under pipeline parallelism, virtual stages."""
    return [need for bad, need in (
        (recompute == "full", "no full recompute"),
        ("moe" in recompute_modules, "no 'moe' recompute module (megatron-core asserts it)"),
        (pp > 1 and vpp == 1, f"virtual stages with pp={pp} (--vpp > 1)")) if bad]


# megatron-core's bound on the multi-token-prediction layers beside the batch-level EP overlap (Megatron-LM d98e8a64
# and megatron-core 0.19.2 transformer_config.py: "MTP supports at most one layer when enabling
# overlap_moe_expert_parallel_comm")
A2A_OVERLAP_MAX_MTP_LAYERS = 1


def a2a_overlap_model_needs(model: ModelSpec) -> list[str]:
    """What batch-level EP overlap needs of the model (megatron-core transformer_config.py asserts): at most
    A2A_OVERLAP_MAX_MTP_LAYERS multi-token-prediction layers. Whatever the plan, so the request is refused up front
    where the overlap is pinned (planner.search.request) and the search leaves it out where it is searched
    (planner.search.dispatchers.searched_overlap)."""
    if model.mtp_layers > A2A_OVERLAP_MAX_MTP_LAYERS:
        return [f"at most {A2A_OVERLAP_MAX_MTP_LAYERS} multi-token-prediction layer ({model.name} has "
                f"{model.mtp_layers}; megatron-core asserts it)"]
    return []


def a2a_overlap_needs_vpp(who: str) -> PlanRule:
    """Batch-level EP overlap needs at most one MTP layer (a2a_overlap_model_needs), no full recompute and, under
    pipeline parallelism, the interleaved schedule (virtual stages set): a2a_overlap_needs. Without expert parallelism
    it has nothing to overlap and is left out (the cost model and the emitter ignore it), so that rule is no plan
    error."""

    def rule(model: ModelSpec, train: TrainingSpec, p: ParallelPlan) -> list[str]:
        if not train.moe_a2a_overlap:
            return []
        return [f"batch-level EP overlap (--moe-a2a-overlap) needs {need} ({who} rule)"
                for need in a2a_overlap_model_needs(model)
                + a2a_overlap_needs(p.recompute, p.recompute_modules, p.pp, p.vpp)]

    return rule


def recompute_modules_runnable(who: str, priced: tuple[str, ...]) -> PlanRule:
    """Pinned --recompute-modules the stack runs for this model and precision, and the planner prices."""

    def rule(model: ModelSpec, train: TrainingSpec, p: ParallelPlan) -> list[str]:
        mods = set(p.recompute_modules)
        out = [f"recompute module(s) {', '.join(sorted(mods - set(priced)))} are not priced by the planner: "
               f"choose from {', '.join(priced)}"] if mods - set(priced) else []
        out += [f"recompute module {name} needs {need} ({who} rule)" for name, bad, need in (
            ("moe_act", model.moe is None, "an MoE model"), ("moe", model.moe is None, "an MoE model"),
            ("mla_up_proj", model.mla is None, "multi-latent attention (an MLA model)")) if name in mods and bad]
        if train.dtype == "fp8" and train.fp8_recipe == "delayed" and mods & {"moe_act", "layernorm"}:
            out.append(f"FP8 delayed scaling does not run moe_act or layernorm recompute ({who} rule): choose "
                       "another --fp8-recipe or other modules")
        return out

    return rule


def offload_modules_runnable(who: str, priced: tuple[str, ...]) -> PlanRule:
    """Pinned --offload-modules (fine-grained activation offloading) the stack runs for this model and recompute, and
    the planner prices."""

    def rule(model: ModelSpec, train: TrainingSpec, p: ParallelPlan) -> list[str]:
        mods = set(p.offload_modules)
        if not mods:
            return []
        out = [f"offload module(s) {', '.join(sorted(mods - set(priced)))} are not priced by the planner: choose "
               f"from {', '.join(priced)}"] if mods - set(priced) else []
        out += [f"offload module {name} needs an MoE model ({who} rule)"
                for name in ("expert_fc1", "moe_act") if name in mods and model.moe is None]
        if "qkv_linear" in mods and model.mla is not None:  # MLA's down- and up-projections: not modelled
            out.append("offload module qkv_linear is not priced by the planner for multi-latent attention: choose "
                       "from the others")
        if "attn_proj" in mods and "core_attn" not in mods:
            out.append(f"offload module attn_proj needs core_attn offloaded too: its input is core_attn's output, "
                       f"which core_attn's backward needs ({who} rule)")
        inside = sorted(mods & {"expert_fc1", "moe_act"})
        if inside and p.recompute == "selective" and "moe" in p.recompute_modules:
            out.append(f"offload module(s) {', '.join(inside)} cannot go with the 'moe' recompute module, which "
                       f"recomputes the whole MoE layer ({who} rule)")
        return out

    return rule
