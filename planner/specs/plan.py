"""The parallel plan: every knob the search sets or the user fixes.

Conventions follow Megatron-core's `ModelParallelConfig`: ranks are ordered tp -> cp -> ep/dp -> pp,
N = tp * pp * cp * dp, and expert parallelism is carved out of dp * cp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

if TYPE_CHECKING:
    from planner.specs.dims import ParallelDims

Recompute = Literal["none", "selective", "full"]
Schedule = Literal["1f1b", "interleaved", "gpipe", "zb", "dualpipe", "dualpipev"]
CpComm = Literal["ring", "a2a"]


class ParallelPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(1, ge=1, description="tensor-parallel size (Megatron column/row split)")
    pp: int = Field(1, ge=1, description="pipeline stages")
    dp: int = Field(1, ge=1, description="data-parallel ranks, ZeRO/FSDP-sharded ones included")
    cp: int = Field(1, ge=1, description="context-parallel size (sequence split across ranks)")
    ep: int = Field(1, ge=1, description="expert-parallel size, carved out of dp*cp")
    etp: int = Field(1, ge=1, description="expert tensor-parallel size (Megatron --expert-tensor-parallel-size)")
    vpp: int = Field(1, ge=1, description="virtual stages per pipeline rank (interleaved schedule when > 1; "
                     "dualpipev: 2)")
    micro_batch: int = Field(1, ge=1, description="sequences per micro-batch per DP rank")
    zero_stage: int = Field(1, ge=0, le=3, description="0 none, 1 optimizer (= Megatron distributed optimizer), "
                            "2 + gradients, 3 + parameters (FSDP full shard)")
    zero_shard_size: int | None = Field(None, ge=1, description="hybrid sharding: ZeRO shards within groups of this "
                                        "many DP ranks and replicates across them (HSDP); unset = all of dp")
    recompute: Recompute = Field("none", description="activation recompute: none, selective (attention core), full")
    recompute_layers: int | None = Field(None, ge=0, description="with full: layers per stage recomputed (unset = all)")
    remat_offloaded: tuple[str, ...] = Field(
        (), description="with selective recompute on MaxText (remat_policy 'custom'): the named layer tensors "
        "offloaded to host memory (decoder_layer_input, query_proj, key_proj, value_proj, qkv_proj, out_proj, context, "
        "mlpwi, mlpwi_0, mlpwi_1, mlpwo); they leave HBM after the forward (MaxText configs/base.yml)")
    remat_device: tuple[str, ...] = Field(
        (), description="with selective recompute on MaxText (remat_policy 'custom'): the named layer tensors kept in "
        "HBM for backward; the others are rematerialised (decoder_layer_input is kept unless offloaded: the scan's "
        "remat start points)")
    recompute_modules: tuple[str, ...] = Field(
        (), description="with selective recompute on Megatron: the modules recomputed (--recompute-modules; priced: "
        "core_attn, layernorm, moe_act, mla_up_proj, mlp); unset = the planner's set for the model (dense: core_attn; "
        "MoE and MLA: layernorm, moe_act for MoE, mla_up_proj for MLA, core_attn with unfused attention)")
    sequence_parallel: bool = Field(True, description="Megatron sequence parallelism (only meaningful with tp > 1)")
    schedule: Schedule = Field("1f1b", description="1f1b, interleaved (vpp > 1), gpipe, zb (ZB-H1), dualpipe "
                               "(DeepSeek-V3: bidirectional, overlaps EP all-to-all with compute), dualpipev "
                               "(DualPipe cut in half: two stages per rank in a V, torch ScheduleDualPipeV)")
    cp_comm: CpComm = Field("ring", description="ring = p2p K/V rotation; a2a = Ulysses all-to-all")
    first_stage_layers: int | None = Field(None, ge=0, description="uneven PP: layers on the first stage")
    last_stage_layers: int | None = Field(None, ge=0, description="uneven PP: layers on the last stage")
    account_embedding_loss: bool = Field(False, description="Megatron --account-for-embedding-in-pipeline-split "
                                         "and --account-for-loss-in-pipeline-split: the embedding and the loss each "
                                         "count as a layer, so first and last stages take one transformer layer fewer")
    offload_optimizer: bool = Field(False, description="optimizer states and step on the CPU (ZeRO-Offload)")
    offload_modules: tuple[str, ...] = Field(
        (), description="Megatron fine-grained activation offloading (--fine-grained-activation-offloading "
        "--offload-modules): the modules whose saved tensors go to host memory after their forward and come back "
        "for their backward (priced: attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act)")
    tp_comm_overlap: bool = Field(False, description="overlap TP collectives with GEMMs (Megatron --tp-comm-overlap "
                                  "with TE userbuffers; torchtitan async TP, which needs torch.compile)")

    @field_validator("remat_offloaded", "remat_device")
    @classmethod
    def _remat_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        from planner.stacks.maxtext import REMAT_TENSORS

        bad = sorted(set(names) - set(REMAT_TENSORS))
        if bad:
            raise ValueError(f"unknown remat tensor(s) {', '.join(bad)}: choose from {', '.join(REMAT_TENSORS)}")
        return names

    @field_validator("recompute_modules", "offload_modules")
    @classmethod
    def _megatron_module_names(cls, names: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        from planner.stacks.megatron import (
            OFFLOAD_MODULES,
            RECOMPUTE_MODULES,
            unknown_offload_modules,
            unknown_recompute_modules,
        )

        what, known, unknown = ("recompute", RECOMPUTE_MODULES, unknown_recompute_modules) \
            if info.field_name == "recompute_modules" else ("offload", OFFLOAD_MODULES, unknown_offload_modules)
        bad = unknown(names)
        if bad:
            raise ValueError(f"unknown {what} module(s) {', '.join(bad)}: megatron-core's are {', '.join(known)}")
        return names

    @property
    def custom_remat(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(kept, offloaded) tensor names of a MaxText custom remat policy in effect (selective recompute with named
        tensors), None for the stack's own policies."""
        if custom_remat_in_effect(self.recompute, self.remat_device, self.remat_offloaded):
            return self.remat_device, self.remat_offloaded
        return None

    @property
    def devices(self) -> int:
        """tp * pp * cp * dp (planner.specs.dims.ParallelDims.world owns the rule)."""
        return self.dims.world

    @property
    def dims(self) -> ParallelDims:
        """The plan's degrees and derived sizes (planner.specs.dims.ParallelDims)."""
        from planner.specs.dims import ParallelDims

        return ParallelDims.of(self)

    @property
    def edp(self) -> int:
        """Expert-data-parallel size (planner.specs.dims.ParallelDims.edp owns the rule)."""
        return self.dims.edp

    def knobs(self) -> dict:
        return self.model_dump()


# Every knob of a plan, in declaration order: the one list (the CLI flags and run-file keys map onto it).
KNOBS: tuple[str, ...] = tuple(ParallelPlan.model_fields)
# The knobs whose value is a tuple of names (not a range of allowed values, as a tuple pin elsewhere means): MaxText's
# custom remat policy, Megatron's recomputed modules (RECOMPUTE_NAME_KNOBS: they ride on selective recompute) and its
# offloaded modules (any recompute)
RECOMPUTE_NAME_KNOBS: tuple[str, ...] = ("remat_offloaded", "remat_device", "recompute_modules")
NAME_LIST_KNOBS: tuple[str, ...] = (*RECOMPUTE_NAME_KNOBS, "offload_modules")


def plan_label(p: dict, mark_no_sp: bool = False) -> str:
    """Short name of a plan's layout from its knobs: 'TP8 PP4x2 CP2 DP4 EP8' (x = virtual stages)."""
    g = lambda k: p.get(k) or 1  # noqa: E731
    s = f"TP{g('tp')}" + ("*" if mark_no_sp and g("tp") > 1 and not p.get("sequence_parallel", True) else "")
    s += f" PP{g('pp')}" + (f"x{g('vpp')}" if g("vpp") > 1 else "")
    if g("cp") > 1:
        s += f" CP{g('cp')}" + ("(a2a)" if p.get("cp_comm") == "a2a" else "")
    s += f" DP{g('dp')}"
    if g("ep") > 1:
        s += f" EP{g('ep')}"
    if g("etp") > 1:
        s += f" ETP{g('etp')}"
    return s


def custom_remat_in_effect(recompute: str, device: tuple[str, ...] | list | None,
                           offloaded: tuple[str, ...] | list | None) -> bool:
    """MaxText's custom remat policy is in effect: selective recompute with named tensors, kept or offloaded (the one
    rule, for plans, ParallelPlan.custom_remat, and for their knob dicts, recompute_label)."""
    return recompute == "selective" and bool(device or offloaded)


def recompute_label(p: dict, short: bool = False) -> str:
    """A plan's recompute from its knobs: 'selective', 'full(12/stage)', MaxText's custom policy by its tensors; '+off'
    where Megatron's offload modules send tensors to host memory."""
    k = p.get("recompute_layers")
    if p["recompute"] == "full" and k is not None:
        return f"f{k}" if short else f"full({k}/stage)"
    named = [f"{n}:host" for n in p.get("remat_offloaded") or ()] + [f"{n}:hbm" for n in p.get("remat_device") or ()]
    if custom_remat_in_effect(p["recompute"], p.get("remat_device"), p.get("remat_offloaded")):
        return "cust" if short else f"custom({', '.join(named)})"
    off = "+off" if p.get("offload_modules") else ""  # Megatron's offloaded modules (ParallelPlan.offload_modules)
    if short:
        return {"none": "-", "selective": "sel", "full": "full"}[p["recompute"]] + off
    return p["recompute"] + off
