"""FP8 dot-product attention (TrainingSpec.fp8_attention): the constant is the published measurement, the knob moves
the attention core's rate by exactly that factor and nothing else, the stacks without it refuse it, no launch file
claims it, plan explain shows it, and plan validate infers it for exactly the rows whose cited preset sets it."""

from __future__ import annotations

import copy

import pytest

from planner.analysis.validate import load_runs, run_specs, run_stack, validate_runs
from planner.catalog.data import data_dir
from planner.costmodel.base import Context
from planner.costmodel.calibration import DEFAULT_CALIBRATION as CAL
from planner.launchers.contract import missing_features
from planner.specs import TrainingSpec
from tests.support import run_cli

# NVIDIA cudnn-frontend, benchmark/sdpa_benchmark_training/results/dsv3/gb300/dsv3_20260724_041345.csv (commit
# e99b0d0b): cuDNN 9.26 SDPA on one GB300, DeepSeek-V3 shapes (batch 2, 128 heads, head dim 192 / 128), causal
# (top_left), 4096 tokens, non-deterministic backward; forward and backward time in ms.
MEASURED_MS = {"bf16": (0.812, 3.090), "fp8": (0.477, 1.770), "mxfp8": (0.540, 2.294)}
# GB300 dense peaks, TFLOP/s (hardware_profiles/gb300-nvl72.yaml: BF16 2500, FP8 5000)
GB300_PEAK_BF16, GB300_PEAK_FP8 = 2500.0, 5000.0


def _speedup(kind: str) -> float:
    return sum(MEASURED_MS["bf16"]) / sum(MEASURED_MS[kind])


def test_constants_are_the_published_ratio():
    """Efficiency on the FP8 peak relative to BF16 attention's on the BF16 peak = measured speed-up x BF16 / FP8
    peak: 1.737 x 0.5 and 1.377 x 0.5."""
    assert _speedup("fp8") == pytest.approx(1.7365, abs=1e-4)
    assert _speedup("mxfp8") == pytest.approx(1.3769, abs=1e-4)
    assert CAL.FP8_ATTN_REL_EFFICIENCY == pytest.approx(_speedup("fp8") * GB300_PEAK_BF16 / GB300_PEAK_FP8, abs=5e-4)
    assert CAL.MXFP8_ATTN_REL_EFFICIENCY == pytest.approx(_speedup("mxfp8") * GB300_PEAK_BF16 / GB300_PEAK_FP8,
                                                          abs=5e-4)


def _contexts(recipe: str) -> tuple[Context, Context]:
    runs = load_runs(data_dir("runs") / "blackwell_ultra_runs_added.yaml")
    run = next(r for r in runs if r["id"] == "mbridge2608-dgx-gb300-dsv3-fp8-mx-256gpu")
    model, cluster, train = run_specs(run)
    on = train.model_copy(update={"fp8_recipe": recipe, "fp8_attention": True})
    off = on.model_copy(update={"fp8_attention": False})
    return Context(model, cluster, off), Context(model, cluster, on)


@pytest.mark.parametrize("recipe,kind", [("mxfp8", "mxfp8"), ("tensorwise", "fp8"), ("delayed", "fp8")])
def test_knob_scales_the_attention_rate_by_the_measured_speedup_only(recipe, kind):
    off, on = _contexts(recipe)
    rel = CAL.MXFP8_ATTN_REL_EFFICIENCY if kind == "mxfp8" else CAL.FP8_ATTN_REL_EFFICIENCY
    # on GB300 (the measured part) the attention core runs the measured speed-up faster (to the constant's rounding)
    ratio = on.attn_peak * on.attn_eff / (off.attn_peak * off.attn_eff)
    assert ratio == pytest.approx(rel * GB300_PEAK_FP8 / GB300_PEAK_BF16, rel=1e-12)
    assert ratio == pytest.approx(_speedup(kind), abs=2e-3)
    assert on.attn_peak == on.peak and off.attn_peak == off.peak_bf16
    assert on.attn_eff == pytest.approx(off.attn_eff * rel, rel=1e-12)
    # nothing else of the rates moves
    for name in ("peak", "peak_bf16", "gemm_eff_max", "head_peak", "head_eff_max", "step_overhead_s", "hbm_bw"):
        assert getattr(on, name) == getattr(off, name), name
    (a_off, *rest_off), (a_on, *rest_on) = off.rate_terms[::-1], on.rate_terms[::-1]
    assert rest_on == rest_off  # peak_flops and gemm_efficiency_ceiling terms unchanged
    assert a_on.name == a_off.name == "attention_efficiency"
    assert a_on.inputs["fp8_attention_rel"] == rel and "fp8_attention_rel" not in a_off.inputs
    assert dict(a_on.inputs) == dict(a_off.inputs) | {"fp8_attention_rel": rel, "attention_peak_flops": on.peak,
                                                     "head_width": 320}


def test_the_gain_follows_the_head_width():
    """cuDNN's FP8 attention against its BF16 one at Llama 3.1's heads (128 + 128), same benchmark release as the
    DeepSeek-V3 constants (commit e99b0d0b, cuDNN 9.26, GB300, llama3.1/gb300/llama3.1_20260724_040919.csv, batch 2,
    64 / 8 heads, causal, 4096 tokens, fwd + bwd ms): BF16 0.303 + 1.096, per-tensor FP8 0.218 + 0.986, MXFP8 0.238 +
    1.203. Qwen3 (128 + 128) gets that; DeepSeek-V3 (192 + 128) its own; gpt-oss (64 + 64) is held at 128's."""
    from planner.catalog.models import get_model
    from planner.costmodel.base import fp8_attention_rel

    bf16, fp8, mx = 0.303 + 1.096, 0.218 + 0.986, 0.238 + 1.203
    assert CAL.FP8_ATTN_REL_EFFICIENCY_HD128 == pytest.approx(bf16 / fp8 * GB300_PEAK_BF16 / GB300_PEAK_FP8, abs=1e-3)
    assert CAL.MXFP8_ATTN_REL_EFFICIENCY_HD128 == pytest.approx(bf16 / mx * GB300_PEAK_BF16 / GB300_PEAK_FP8, abs=1e-3)
    assert bf16 / mx < 1  # MXFP8 attention is slower than BF16 at these heads and 4k tokens
    for recipe, narrow, wide in (("mxfp8", CAL.MXFP8_ATTN_REL_EFFICIENCY_HD128, CAL.MXFP8_ATTN_REL_EFFICIENCY),
                                 ("tensorwise", CAL.FP8_ATTN_REL_EFFICIENCY_HD128, CAL.FP8_ATTN_REL_EFFICIENCY)):
        train = TrainingSpec(global_batch=8, dtype="fp8", fp8_recipe=recipe, fp8_attention=True)
        assert fp8_attention_rel(get_model("deepseek-v3"), train, CAL) == wide
        assert fp8_attention_rel(get_model("qwen3-30b-a3b"), train, CAL) == narrow
        assert fp8_attention_rel(get_model("gpt-oss-120b"), train, CAL) == narrow
        mid = get_model("qwen3-30b-a3b").model_copy(update={"head_dim": 160})  # 160 + 160: above both
        assert fp8_attention_rel(mid, train, CAL) == wide
        between = get_model("qwen3-30b-a3b").model_copy(update={"head_dim": 144})  # 288: halfway
        assert fp8_attention_rel(between, train, CAL) == pytest.approx((narrow + wide) / 2)


def test_layer_time_moves_only_through_the_attention_core():
    """The DeepSeek-V3 GB300 26.08 row's plan, each layer kind: the attention core's forward falls by exactly the
    measured factor, every other part of the layer's compute stays, and the totals move by the core's saving
    (backward BWD_ATTN_RATIO x it)."""
    from planner.costmodel.base import plan_shape
    from planner.costmodel.compute import BWD_ATTN_RATIO, layer_compute
    from planner.specs import ParallelPlan

    off, on = _contexts("mxfp8")
    plan = ParallelPlan(tp=1, pp=2, vpp=8, dp=128, ep=32, micro_batch=1, schedule="interleaved")
    for k in off.kinds:
        c_off, c_on = layer_compute(off, plan_shape(off, plan), k), layer_compute(on, plan_shape(on, plan), k)
        speedup = on.attn_peak * on.attn_eff / (off.attn_peak * off.attn_eff)
        assert c_on.attention == pytest.approx(c_off.attention / speedup, rel=1e-12)
        for f in set(c_off._fields) - {"attention", "attention_bwd", "fwd", "bwd"}:
            assert getattr(c_on, f) == getattr(c_off, f), f
        saved = c_off.attention - c_on.attention
        assert c_off.fwd - c_on.fwd == pytest.approx(saved, rel=1e-9)
        assert c_off.attention_bwd - c_on.attention_bwd == pytest.approx(BWD_ATTN_RATIO * saved, rel=1e-9)
        assert c_off.bwd - c_on.bwd == pytest.approx(BWD_ATTN_RATIO * saved, rel=1e-9)


def test_refused_without_fp8_or_on_other_stacks():
    with pytest.raises(ValueError, match="needs dtype fp8"):
        TrainingSpec(global_batch=8, fp8_attention=True)
    for fw in ("fsdp", "deepspeed", "maxtext", "automodel"):
        with pytest.raises(ValueError, match="megatron-core's fp8_dot_product_attention"):
            TrainingSpec(global_batch=8, dtype="fp8", framework=fw, fp8_attention=True)
    assert TrainingSpec(global_batch=8, dtype="fp8", fp8_attention=True).fp8_attention


@pytest.mark.parametrize("args,says", [
    (("--dtype", "bf16", "--fp8-attention"), "needs dtype fp8"),
    (("--dtype", "fp8", "--fp8-attention", "--launcher", "torchtitan"), "the planner models none for fsdp"),
    (("--dtype", "fp8", "--fp8-attention", "--framework", "deepspeed"), "the planner models none for deepspeed"),
    (("--dtype", "fp8", "--fp8-attention", "--launcher", "megatron"), "FP8 dot-product attention"),
    (("--dtype", "fp8", "--fp8-recipe", "blockwise", "--fp8-attention"), "megatron-core gives blockwise scaling no "
                                                                          "fp8_dpa"),
])
def test_cli_refuses_in_one_line(args, says):
    from tests.support import one_line_error

    r = run_cli("--model", "llama-3.1-8b", "--cluster", "h100x8", *args)
    assert says in one_line_error(r)


def test_no_launch_file_claims_it():
    """megatron-core 0.19.2's pretrain_gpt.py has no flag for TransformerConfig.fp8_dot_product_attention
    (arguments.py: 'no CLI argument exists for these'): every launcher refuses a plan costed with it."""
    off, on = _contexts("mxfp8")
    for launcher in ("megatron", "deepspeed", "maxtext", "torchtitan"):
        assert "FP8 dot-product attention" in " ".join(missing_features(on.model, on.train, launcher)), launcher
        assert "FP8 dot-product attention" not in " ".join(missing_features(off.model, off.train, launcher))


def test_explain_shows_the_factor():
    r = run_cli("explain", "--model", "deepseek-v3", "--cluster", "gb300x256", "--dtype", "fp8", "--fp8-recipe",
                "mxfp8", "--fp8-attention", "--tp", "1", "--pp", "2", "--ep", "32")
    assert r.exit_code == 0, r.stderr
    assert f"fp8_attention_rel={CAL.MXFP8_ATTN_REL_EFFICIENCY}" in r.stdout
    r = run_cli("explain", "--model", "deepseek-v3", "--cluster", "gb300x256", "--dtype", "fp8", "--fp8-recipe",
                "mxfp8", "--tp", "1", "--pp", "2", "--ep", "32")
    assert r.exit_code == 0 and "fp8_attention_rel" not in r.stdout


# The rows whose cited preset sets fp8_dot_product_attention (planner.analysis.validate.FP8_DPA_RECIPES)
BLACKWELL_ULTRA_FP8_DPA = {
    f"mbridge{rel}-dgx-gb300-{m}-fp8-mx-{n}gpu" for rel in ("2608", "260601", "2606")
    for m, n in (("dsv3", 256), ("gptoss", 64), ("q30", 8), ("q235", 256))} | {
    "mbridge2606-dgx-gb300-dsv3-fp8-mx-256gpu-gbs15360", "mbridge2606-dgx-b300-q30-fp8-mx-8gpu"}
MOE_FP8_DPA = {f"mbridge{rel}-dgx-gb200-{m}-fp8-mx-{n}gpu" for rel in ("2608", "260601", "2606")
               for m, n in (("gptoss", 64), ("q30", 8), ("q235", 256))}


@pytest.mark.parametrize("name,expect", [("blackwell_ultra_runs_added.yaml", BLACKWELL_ULTRA_FP8_DPA),
                                         ("moe_runs_added.yaml", MOE_FP8_DPA)])
def test_validate_infers_exactly_the_cited_rows(name, expect):
    runs = load_runs(data_dir("runs") / name)
    got = {r["id"] for r in runs if run_stack(r).fp8_dot_product_attention}
    assert got == expect
    assert len(expect) == (14 if name.startswith("blackwell") else 9)
    if name.startswith("blackwell"):  # the transcription's notes name the same rows
        noted = {r["id"] for r in runs if "dot_product_attention" in r["notes"] or "dot-product attention" in
                 r["notes"]}
        assert noted == expect
    for r in runs:  # the inference needs no stated key (a record of the old schema reads as before)
        assert "fp8_dot_product_attention" not in (r.get("stack") or {}), r["id"]


# step-time error of each moved row without / with FP8 attention (2026-11-28; the gpt-oss rows with the fused kernel's
# tile model of sliding-window layers, base.ATTN_TILE_REL: before it (0.009, -0.023), (-0.380, -0.400), (0.013, -0.019)
# on GB300 and (-0.123, -0.151), (-0.440, -0.458), (-0.114, -0.142) on GB200; the GB300 rows with GB300's GEMM
# efficiency from Azure's GB300 / GB200 GEMM ratio, hardware_profiles/gb300-nvl72.yaml: before it DeepSeek-V3
# (0.394, 0.318), (0.398, 0.322), (0.405, 0.329), (0.418, 0.340), Qwen3-30B-A3B (0.061, -0.025) x 2, (0.079, -0.009),
# Qwen3-235B-A22B (0.242, 0.177), (0.269, 0.202), (0.270, 0.203), gpt-oss (0.035, 0.036), (-0.364, -0.364),
# (0.039, 0.040); every row but DeepSeek-V3's with FP8 attention's gain at its head width (base.fp8_attention_rel):
# before it the values of the DeepSeek-V3 shapes, e.g. GB200 Qwen3-30B-A3B (-0.048, -0.125), Qwen3-235B-A22B
# (0.068, 0.015), gpt-oss (-0.100, -0.099))
MOVED_ERRORS = {
    "mbridge2608-dgx-gb300-dsv3-fp8-mx-256gpu": (0.193, 0.128),
    "mbridge260601-dgx-gb300-dsv3-fp8-mx-256gpu": (0.196, 0.131),
    "mbridge2606-dgx-gb300-dsv3-fp8-mx-256gpu": (0.202, 0.137),
    "mbridge2606-dgx-gb300-dsv3-fp8-mx-256gpu-gbs15360": (0.211, 0.146),
    "mbridge2608-dgx-gb300-gptoss-fp8-mx-64gpu": (-0.108, -0.056),
    "mbridge260601-dgx-gb300-gptoss-fp8-mx-64gpu": (-0.452, -0.420),
    "mbridge2606-dgx-gb300-gptoss-fp8-mx-64gpu": (-0.104, -0.052),
    "mbridge2608-dgx-gb300-q30-fp8-mx-8gpu": (-0.083, -0.075),
    "mbridge260601-dgx-gb300-q30-fp8-mx-8gpu": (-0.083, -0.075),
    "mbridge2606-dgx-gb300-q30-fp8-mx-8gpu": (-0.068, -0.060),
    "mbridge2606-dgx-b300-q30-fp8-mx-8gpu": (0.027, 0.036),
    "mbridge2608-dgx-gb300-q235-fp8-mx-256gpu": (0.066, 0.072),
    "mbridge260601-dgx-gb300-q235-fp8-mx-256gpu": (0.089, 0.096),
    "mbridge2606-dgx-gb300-q235-fp8-mx-256gpu": (0.090, 0.097),
    "mbridge2608-dgx-gb200-gptoss-fp8-mx-64gpu": (-0.100, -0.046),
    "mbridge260601-dgx-gb200-gptoss-fp8-mx-64gpu": (-0.425, -0.391),
    "mbridge2606-dgx-gb200-gptoss-fp8-mx-64gpu": (-0.091, -0.037),
    "mbridge2608-dgx-gb200-q30-fp8-mx-8gpu": (-0.048, -0.039),
    "mbridge260601-dgx-gb200-q30-fp8-mx-8gpu": (-0.023, -0.014),
    "mbridge2606-dgx-gb200-q30-fp8-mx-8gpu": (-0.029, -0.021),
    "mbridge2608-dgx-gb200-q235-fp8-mx-256gpu": (0.068, 0.073),
    "mbridge260601-dgx-gb200-q235-fp8-mx-256gpu": (0.079, 0.085),
    "mbridge2606-dgx-gb200-q235-fp8-mx-256gpu": (0.082, 0.088),
}


def test_moved_rows_as_measured():
    """Each moved row's error without the knob (the row stated with fp8_dot_product_attention: false) and with it
    (inferred from its citation). Only DeepSeek-V3's rows run faster: cuDNN's FP8 attention gains at its wide heads
    (192 + 128) and not at Qwen3's 128 + 128 (MXFP8 0.97x BF16's speed at 4k in the same benchmark;
    base.fp8_attention_rel), whose rows move by under a point; gpt-oss's sliding-window layers' FP8 backward visits the
    causal layer's tiles (base.ATTN_TILE_REL), so its rows run slower with it. The GB300 DeepSeek-V3 rows stay the
    slowest predicted."""
    runs = [r for name in ("blackwell_ultra_runs_added.yaml", "moe_runs_added.yaml")
            for r in load_runs(data_dir("runs") / name) if r["id"] in MOVED_ERRORS]
    assert len(runs) == len(MOVED_ERRORS)
    offs = []
    for r in runs:
        off = copy.deepcopy(r)
        off.setdefault("stack", {})["fp8_dot_product_attention"] = False
        offs.append(off)
    with_knob = {r["id"]: r["step_time_error"] for r in validate_runs(runs)["runs"]}
    without = {r["id"]: r["step_time_error"] for r in validate_runs(offs)["runs"]}
    for rid, (before, after) in MOVED_ERRORS.items():
        assert without[rid] == pytest.approx(before, abs=0.0015), rid
        assert with_knob[rid] == pytest.approx(after, abs=0.0015), rid


def test_plan_document_states_it_only_when_on():
    """The --json document's training block says fp8_attention: true when pinned (schema-valid); a default plan's
    document has no such key (its bytes are unchanged)."""
    import jsonschema

    from planner.ui.jsondoc import load_schema
    from tests.support import plan_json

    args = ("--model", "llama-3.1-8b", "--cluster", "h100x8", "--dtype", "fp8", "--tp", "1", "--pp", "1", "--zero", "1",
            "--mbs", "1", "--recompute", "full", "--top", "1")
    on, _ = plan_json(*args, "--fp8-attention")
    off, _ = plan_json(*args)
    jsonschema.Draft202012Validator(load_schema()).validate(on)
    assert on["training"]["fp8_attention"] is True and "fp8_attention" not in off["training"]
    assert on["plans"][0]["plan"] == off["plans"][0]["plan"]
    assert on["plans"][0]["step_time_s"] < off["plans"][0]["step_time_s"]


def test_the_knob_keeps_megatron_fsdp_layouts_in_the_search():
    """No launch file can write FP8 attention, so no launcher gates the search (planner.app.plan.modelled_launcher);
    the Megatron-FSDP (ZeRO-3) layouts the search adds inside an NVLink domain are still screened by the launcher's plan
    rules alone. Before 2026-11-28 they were screened by all its rules, the refused knob included: the #1 plan without
    the knob (TP1 DP8 ZeRO-3, 33.4 s) vanished with it and a PP2 ZeRO-1 plan (33.7 s) ranked first."""
    from tests.support import plan_json

    args = ("--model", "llama-3.1-8b", "--cluster", "h100x8", "--dtype", "fp8", "--top", "1")
    on, _ = plan_json(*args, "--fp8-attention")
    off, _ = plan_json(*args)
    assert off["plans"][0]["plan"]["zero_stage"] == 3
    assert on["plans"][0]["plan"] == off["plans"][0]["plan"]
    assert on["plans"][0]["step_time_s"] < off["plans"][0]["step_time_s"]
