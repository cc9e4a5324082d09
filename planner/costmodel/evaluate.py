"""Evaluate one plan: step time with its breakdown, peak memory with its parts, MFU, warnings, every number
a term of one typed trace (planner.costmodel.trace).

The model is an explicit per-layer sum (in the manner of Calculon, Isaev et al. SC23): for each pipeline
stage, each layer's forward/backward GEMM, attention and memory-bound time on one device
(planner.costmodel.compute), plus the exposed part of each collective (tensor, context, expert); the
pipeline schedule turns per-stage micro-batch times into a step (pipeline); data-parallel gradient
traffic (data) and the optimizer step (optimizer) close it. Memory per stage: planner.costmodel.memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from planner.costmodel.base import Context, Shape, plan_shape, shape_terms
from planner.costmodel.capacity import host_fits, within_margin
from planner.costmodel.compute import compute_term, recompute_term
from planner.costmodel.context import cp_comm_term, cp_warnings
from planner.costmodel.data import dp_comm_term
from planner.costmodel.expert import ep_comm_term, ep_warnings
from planner.costmodel.layers import (
    StageTimes,
    attention_extrapolated,
    attention_range_warnings,
    attention_share_term,
    layer_terms,
    mtp_terms,
    stage_times,
)
from planner.costmodel.memory import (
    GIB,
    StageMemory,
    StageParams,
    memory_terms,
    peak_gib_of,
    stage_memories,
    stage_params,
)
from planner.costmodel.moe import grouped_tile_terms, stated_load_terms
from planner.costmodel.optimizer import optimizer_term
from planner.costmodel.pipeline import bubble_term, makespan_s, p2p_term, rank_first_last_layers
from planner.costmodel.tensor import tp_comm_term, tp_warnings
from planner.costmodel.trace import CostTrace, Term, formula
from planner.specs import ParallelPlan

STEP = formula("evaluate.step", "pipeline makespan (compute + recompute + bubble + exposed per-layer collectives) "
               "+ exposed pipeline p2p + exposed DP traffic + optimizer step", "the terms it sums")
THROUGHPUT = formula("evaluate.throughput", "global batch x seq_len / step / devices", "definition")
MFU = formula(
    "evaluate.mfu", "model FLOPs per token (causal attention) x tokens per step / (step x devices x BF16 dense peak); "
    "mfu_noncausal counts the masked half of the scores too",
    "Megatron-LM num_floating_point_operations and NeMo/Megatron-Bridge flops formulas (causal: half the score "
    "matrix); PaLM, Chowdhery et al. 2022, arXiv 2204.02311, app. B (6N + 12 l h s, non-causal)",
)
HFU = formula("evaluate.hfu", "MFU x (1 + recompute forward share / 3)",
              "PaLM, Chowdhery et al. 2022, app. B (hardware FLOPs count the recompute)")


class Figures(NamedTuple):
    """The numbers of an evaluation the search screens, sorts and ranks by, known before its trace is built: the
    trace's terms of the same names carry the same values, made from the same memory screen and
    Context.memory_limits (tests/search/test_search_memo.py holds them equal)."""

    step_time_s: float
    peak_gib: float
    usable_gib: float  # Context.memory_limits: capacity.usable_capacity_gib
    memory_margin_rel: float  # capacity.memory_margin_rel
    memory_inner_margin_rel: float  # capacity.inner_margin_rel
    host_gib: float  # what the plan keeps in host memory per device (the most of any stage)
    host_capacity_gib: float | None  # the host DRAM per device, where the hardware profile states it


@dataclass(frozen=True)
class Evaluation:
    """One evaluated plan. Every number is read from `trace`, built from `build_trace` when first read (the search
    scores thousands of plans and shows a few); the step time and memory figures the search ranks by are in
    `figures`, the same values. `warnings` and `pipeline` (schedule, layers per stage, per-stage micro-batch times;
    the search adds a stage assignment) travel beside it."""

    plan: ParallelPlan
    figures: Figures
    build_trace: Callable[[], CostTrace] = field(repr=False, compare=False)
    peak_stage: int = 0
    warnings: tuple[str, ...] = ()
    pipeline: dict = field(default_factory=dict)

    @cached_property
    def trace(self) -> CostTrace:
        return self.build_trace()

    @property
    def step_time_s(self) -> float:
        return self.figures.step_time_s

    @cached_property
    def time_breakdown(self) -> dict[str, float]:
        """The time terms by name (read-only: one dict per evaluation)."""
        return {t.name: t.value for t in self.trace.time}

    @cached_property
    def memory(self) -> dict[str, float]:
        """The memory terms by name (read-only: one dict per evaluation)."""
        return {t.name: t.value for t in self.trace.memory}

    @property
    def peak_gib(self) -> float:
        return self.figures.peak_gib

    @property
    def memory_limits(self) -> tuple[float, float, float]:
        """(usable capacity GiB, memory margin, inner margin): what the ranking's memory tiers read
        (planner.search.ranking.memory_tier)."""
        f = self.figures
        return f.usable_gib, f.memory_margin_rel, f.memory_inner_margin_rel

    @property
    def fits(self) -> bool:
        """The peak fits the usable capacity (planner.costmodel.capacity: HBM - reserve - --memory-headroom) and the
        host share the host DRAM per device where it is known (capacity.host_fits)."""
        return self.figures.peak_gib <= self.figures.usable_gib and self.fits_host

    @property
    def fits_host(self) -> bool:
        """What the plan keeps in host memory fits the host DRAM per device (true where that is not known)."""
        return host_fits(self.figures.host_gib, self.figures.host_capacity_gib)

    @property
    def within_margin(self) -> bool:
        """The peak leaves the memory margin of the usable capacity free (planner.costmodel.capacity)."""
        f = self.figures
        return within_margin(f.peak_gib, f.usable_gib, f.memory_margin_rel)

    @property
    def attention_extrapolated(self) -> bool:
        """The attention core takes more of the layer compute than in any run its efficiency was fitted on
        (layers.attention_extrapolated): the step time extrapolates that efficiency."""
        t = self.trace["attention_share"]
        return attention_extrapolated(t.value, str(t.inputs["attention_path"]))

    @property
    def tokens_per_s_per_device(self) -> float:
        return self.trace.value("tokens_per_s_per_device")

    @property
    def mfu(self) -> float:
        return self.trace.value("mfu")

    @property
    def hfu(self) -> float:
        return self.trace.value("hfu")

    def to_dict(self) -> dict:
        return {
            "plan": self.plan.knobs(),
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "memory": self.memory,
            "time_breakdown": self.time_breakdown,
            "fits": self.fits,
            "warnings": list(self.warnings),
            "pipeline": dict(self.pipeline),
        }


def _rate_terms(ctx: Context, shape: Shape, st: StageTimes, step: float) -> tuple[Term, ...]:
    tr, n_dev = ctx.train, shape.plan.devices
    total_tokens = tr.global_batch * tr.seq_len
    mfu = ctx.model_flops_per_token * total_tokens / (step * n_dev * ctx.peak_bf16)
    rec_flops_frac = sum(st.rec) / max(1e-30, sum(st.fwd))
    return (
        THROUGHPUT.term("tokens_per_s_per_device", total_tokens / step / n_dev, "tokens/s",
                        tokens_per_step=total_tokens, step_time_s=step, devices=n_dev),
        MFU.term("mfu", mfu, "", model_flops_per_token=ctx.model_flops_per_token, tokens_per_step=total_tokens,
                 step_time_s=step, devices=n_dev, peak_bf16_flops=ctx.peak_bf16,
                 mfu_noncausal=mfu * ctx.noncausal_model_flops_per_token / ctx.model_flops_per_token),
        HFU.term("hfu", mfu * (1 + rec_flops_frac / 3.0), "", mfu=mfu, recompute_fwd_share=rec_flops_frac),
    )


def _pipeline_doc(shape: Shape, st: StageTimes, counts: list[int]) -> dict:
    p = shape.plan
    return {"pp": p.pp, "vpp": p.vpp, "num_microbatches": shape.nmb, "schedule": p.schedule if p.pp > 1 else "none",
            "layers_per_stage": counts, "fwd_s_per_microbatch": list(st.fwd),
            "bwd_s_per_microbatch": [st.bwd[s] + st.rec[s] for s in range(p.pp)],
            "comm_s_per_microbatch": list(st.comm)}  # exposed per-layer collectives, fwd + bwd


def _layer_warnings(ctx: Context, shape: Shape) -> tuple[str, ...]:
    """The TP, CP, EP and attention-range warnings: they read the group sizes, the groups' fabric and the layer times,
    all inputs of Shape.time_key, under which they are cached per search (as moe.dispatcher_buffer_bytes is)."""
    key = ("layer_warnings",) + shape.time_key
    v = ctx.layer_time_cache.get(key)
    if v is None:
        v = ctx.layer_time_cache[key] = tuple(tp_warnings(ctx, shape) + cp_warnings(ctx, shape)
                                              + ep_warnings(ctx, shape) + attention_range_warnings(ctx, shape))
    return v


def _warnings(ctx: Context, shape: Shape, fig: Figures, peak_stage: int, counts: list[int],
              host_stage: int) -> list[str]:
    out = list(_layer_warnings(ctx, shape))
    if fig.peak_gib > fig.usable_gib:
        out.append(f"does not fit: needs {fig.peak_gib:.1f} GiB of {ctx.cluster.hardware.hbm_capacity_gib:.1f} GiB "
                   f"(stage {peak_stage})")
    if not host_fits(fig.host_gib, fig.host_capacity_gib):  # Evaluation.fits_host
        out.append(f"does not fit in host memory: keeps {fig.host_gib:.1f} GiB per device there (stage "
                   f"{host_stage}), the host has {fig.host_capacity_gib:.1f} GiB per device "
                   "(the hardware profile's reference system; a cluster file's hardware: {base: ..., "
                   "host_memory_gib: N} states yours)")
    if shape.plan.pp > 1 and max(counts) != min(counts):
        out.append(f"uneven pipeline stages: layers per stage {counts}")
    return out


class MemoryScreen(NamedTuple):
    """The memory half of `evaluate`: what the peak needs and the peak itself, exactly as `evaluate` reports it
    (memory.peak_gib_of, which memory_terms uses). The search screens candidates with it and hands it to `evaluate`
    for the ones it keeps (no work done twice; the memory terms are built only then)."""

    plan: ParallelPlan
    shape: Shape
    split: list
    params: StageParams
    peak_stage: int
    peak: StageMemory  # the peak stage's parts
    peak_gib: float
    host_stage: int  # the stage that keeps the most in host memory (memory.host_bytes)
    host_gib: float  # what it keeps there, per device

    def fits(self, ctx: Context, cap_gib: float) -> bool:
        """The HBM peak within `cap_gib` and the host share within the host DRAM per device (capacity.host_fits)."""
        return self.peak_gib <= cap_gib and host_fits(self.host_gib, ctx.cluster.hardware.host_memory_gib)


def screen_memory(ctx: Context, plan: ParallelPlan) -> MemoryScreen:
    """Per-device peak memory of `plan` (the same terms `evaluate` puts in its trace), without the step time."""
    shape = plan_shape(ctx, plan)
    split_key = (plan.pp, *rank_first_last_layers(plan, ctx.model.num_layers),
                 plan.recompute_layers if plan.recompute == "full" else None)
    split = ctx.stage_kind_counts(*split_key)
    # stage_params reads the split and tp, ep, etp: cached per search under them
    key = (plan.tp, plan.ep, plan.etp, *split_key)
    params = ctx.stage_params_cache.get(key)
    if params is None:
        params = ctx.stage_params_cache[key] = stage_params(ctx, plan, split)
    mems = stage_memories(ctx, shape, split, params)
    peak_stage = max(mems, key=lambda s: mems[s].total_gib)  # the first of equals, as over every stage
    host_stage = max(mems, key=lambda s: mems[s].host)
    return MemoryScreen(plan, shape, split, params, peak_stage, mems[peak_stage], peak_gib_of(mems[peak_stage]),
                        host_stage, mems[host_stage].host / GIB)


def evaluate(ctx: Context, plan: ParallelPlan, screened: MemoryScreen | None = None) -> Evaluation:
    """Predict one training step of `plan` (all knobs set). Pure; never raises on a valid plan. `screened`: this
    plan's `screen_memory`, when the caller already has it. The step time and the memory figures are computed here;
    the trace (every term, the same values) when it is first read."""
    if screened is None or screened.plan is not plan:
        screened = screen_memory(ctx, plan)
    shape, split, peak_stage = screened.shape, screened.split, screened.peak_stage
    st = stage_times(ctx, shape, split)
    makespan = makespan_s(ctx, shape, st)
    slow = max(range(plan.pp), key=st.microbatch_s)
    p2p, dp = p2p_term(ctx, shape, st), dp_comm_term(ctx, shape, st, split, slow, screened.params)
    opt = optimizer_term(ctx, shape, screened.params, slow)
    step = makespan + p2p.value + dp.value + opt.value
    figures = Figures(step, screened.peak_gib, *ctx.memory_limits, screened.host_gib,
                      ctx.cluster.hardware.host_memory_gib)

    def build_trace() -> CostTrace:
        time = (compute_term(shape, st.fwd[slow], st.bwd[slow], slow), recompute_term(ctx, shape, st.rec[slow]),
                bubble_term(shape, st, makespan, slow), tp_comm_term(ctx, shape, st.tp[slow]),
                cp_comm_term(shape, st.cp[slow]), ep_comm_term(ctx, shape, st.ep[slow]), p2p, dp, opt)
        step_term = STEP.term("step_time_s", step, "s", makespan_s=makespan, pp_comm_s=p2p.value,
                              dp_comm_s=dp.value, optimizer_s=opt.value)
        return CostTrace(time=time, memory=memory_terms(ctx, shape, screened.peak, peak_stage, screened.host_gib,
                                                        screened.host_stage),
                         factors=(step_term, *shape_terms(ctx, shape), *ctx.rate_terms, *layer_terms(ctx, shape),
                                  attention_share_term(ctx, shape), *mtp_terms(ctx, shape),
                                  *grouped_tile_terms(ctx, shape), *stated_load_terms(ctx, shape),
                                  *_rate_terms(ctx, shape, st, step)))

    counts = [c for c, _, _ in split]
    return Evaluation(plan=plan, figures=figures, build_trace=build_trace, peak_stage=peak_stage,
                      warnings=tuple(_warnings(ctx, shape, figures, peak_stage, counts, screened.host_stage)),
                      pipeline=_pipeline_doc(shape, st, counts))
