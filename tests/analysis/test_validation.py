"""The cost model against published, measured runs (runs/known_runs_dev.yaml, copied with citations
from the project's reference data)."""

from functools import cache
from pathlib import Path

import pytest

from planner.analysis.validate import load_runs, predict_run, preset_knobs, search_quality, summarise, validate_runs
from planner.catalog.data import data_dir


@cache
def dev_runs() -> list[dict]:
    """The GPU development runs, parsed once when a test first asks (not at collection)."""
    return load_runs(data_dir("runs") / "known_runs_dev.yaml")


@pytest.fixture(scope="module")
def result():
    return validate_runs(dev_runs())


def test_every_run_is_predicted(result):
    assert len(result["runs"]) == len(dev_runs()) == 75
    for r in result["runs"]:
        assert r["step_time_s"] > 0 and r["peak_memory_gib"] > 0
    for run, row in zip(dev_runs(), result["runs"], strict=True):
        pub = {k: v for k, v in (run["plan"] or {}).items() if v is not None}
        for key, knob in (("tp", "tp"), ("pp", "pp"), ("dp", "dp"), ("cp", "cp"), ("ep", "ep"), ("vpp", "vpp"),
                          ("micro_batch", "micro_batch"), ("zero_stage", "zero_stage"), ("recompute", "recompute")):
            if key == "recompute" and "selective-layer" in run["id"]:
                # torchtitan's layer-level selective AC = full recompute of every second block (validate.py)
                assert (row["plan"]["recompute"], row["plan"]["recompute_layers"]) == ("full", 16), run["id"]
            elif key in preset_knobs(run):
                # the cited release preset runs otherwise than its table states (validate.PRESET_KNOBS)
                assert row["plan"][knob] == preset_knobs(run)[key] != pub.get(key), (run["id"], key)
            elif key in pub:
                assert row["plan"][knob] == pub[key], (run["id"], key)


def test_step_time_median_target(result):
    # issue target: median |step-time error| <= 10% on the dev runs
    assert result["summary"]["step_time"]["median_abs_error"] <= 0.10


def test_step_time_p90_target(result):
    # issue target: p90 |step-time error| <= 25%, by the project's percentile (floor index) and by linear
    # interpolation alike; at most 7 of 75 runs may lie beyond 25% for both to hold. The outliers left
    # (docs/validation.md): DeepSeek-V3 on GB200 (DGX Cloud) x2, Qwen3-30B-A3B on H100/B200, SC21 ZeRO-3 2240,
    # torchtitan 405B FSDP8 at 32k; since issue 13 Megatron-Bridge's DeepSeek-V3 on 256 GB200 (zero_stage
    # unpublished): the search no longer fills it with Megatron-FSDP + PP4 (unverified in Megatron-LM,
    # planner/launchers/megatron.py) but with the distributed optimizer and partial recompute, which
    # Megatron runs: error 24% -> 32%; and (issue 12: with Megatron's 6 B/logit loss the planner picks less
    # recompute for its unpublished knob) gpt-oss-120b on B200.
    import statistics

    errs = [abs(r["step_time_error"]) for r in result["runs"]]
    assert result["summary"]["step_time"]["p90_abs_error"] <= 0.25
    assert statistics.quantiles(errs, n=10, method="inclusive")[-1] <= 0.25
    assert sum(e > 0.25 for e in errs) <= 8  # eight lie beyond; both percentiles above still hold


def _row(result, run_id):
    return next(r for r in result["runs"] if r["id"] == run_id)


def test_pre_2022_stacks_recompute_every_layer_or_none(result):
    # Megatron-LM / DeepSpeed before Korthikanti et al. 2022 checkpointed every layer or none: MT-NLG
    # (recompute unpublished) is scored with full recompute of all its layers, not a partial one
    row = _row(result, "mtnlg-530b-2240gpu")
    assert row["plan"]["recompute"] in ("none", "full") and row["plan"]["recompute_layers"] is None
    assert abs(row["step_time_error"]) < 0.25


def test_recipe_precision_from_the_cited_config(result):
    from planner.analysis.validate import infer_precision

    run = next(r for r in dev_runs() if r["id"] == "dgxc-nemotron4-340b-bf16-128xh100")
    assert infer_precision(run) == {"grad_dtype": "bf16", "optimizer_dtype": "bf16"}
    assert infer_precision(next(r for r in dev_runs() if r["id"].startswith("torchtitan"))) == {}
    # with the recipe's bf16 grads and moments the published plan fits without recompute, as it ran
    row = _row(result, "dgxc-nemotron4-340b-bf16-128xh100")
    assert row["fits"] and row["plan"]["recompute"] in ("none", "selective")
    assert abs(row["step_time_error"]) < 0.10


def test_megatron_bridge_rows_reduce_gradients_in_bf16():
    # every Megatron-Bridge performance script sets ddp.grad_reduce_in_fp32 False (validate.RECIPE_PRECISION): the
    # 26.04 DGX-B200 gpt-oss-120b row (EP 8, MBS 4, its preset's recompute_modules layernorm + moe_act) then fits with
    # the preset's selective recompute, where fp32 gradients left it 20 layers of full recompute the recipe never ran
    from planner.analysis.validate import infer_precision

    runs = {r["id"]: r for r in load_runs(data_dir("runs") / "moe_runs_added.yaml")}
    run = runs["mbridge2604-dgx-b200-gptoss-bf16-64gpu"]
    assert infer_precision(run) == {"grad_dtype": "bf16"}
    assert all(infer_precision(r) == {"grad_dtype": "bf16"} for r in dev_runs() if r["id"].startswith("mbridge"))
    row = predict_run(run)
    assert row["fits"] and row["plan"]["recompute"] == "selective", row["plan"]


def test_dgxc_nemo_hydra_recipes_keep_bf16_gradients():
    # the NeMo 24.x hydra recipes of the DGX Cloud releases (llama3.1_405b.yaml and the others: distributed_fused_adam,
    # grad_sync_dtype bf16; Apex allocates the contiguous gradient buffer in that dtype): the 405B run on 576 H100s,
    # the smallest its README says fits, runs its recipe's plan without recompute (activations_checkpoint_granularity
    # null). Read with Megatron's fp32 main-grad buffer it was 83.0 GiB with nothing recomputed (4 B/param of a
    # 5.8 B-parameter stage): the search had to recompute layers the recipe never did.
    from planner.analysis.validate import infer_precision

    added = {r["id"]: r for r in load_runs(data_dir("runs") / "known_runs_added.yaml")}
    run = added["dgxc-llama31-405b-bf16-576xh100"]
    assert infer_precision(run) == {"grad_dtype": "bf16"}
    dev_405b = [r for r in dev_runs() if r["id"].startswith("dgxc-llama31-405b") and r["id"].endswith("xh100")]
    assert len(dev_405b) == 3 and all(infer_precision(r) == {"grad_dtype": "bf16"} for r in dev_405b)
    row = predict_run(run)
    assert row["fits"] and row["plan"]["recompute"] == "none", row["plan"]
    assert row["memory"]["grads_gib"] == pytest.approx(row["memory"]["weights_gib"])  # 2 B/param each, unsharded
    assert 70.0 < row["peak_memory_gib"] < 78.65  # under the usable HBM of the run's 80 GB H100s
    assert abs(row["step_time_error"]) < 0.05  # +3.5%


def test_dgxc_nemo2_llama_405b_recipe_reduces_gradients_in_bf16():
    # dgxc-benchmarking v25.05 (68eaf7e) runs NeMo 7a8f1cc's pretrain_llama31_405b.py with performance_mode, which sets
    # the precision plugin's grad_reduce_in_fp32 False (applied to the DDP config): both GB200 rows, BF16 and FP8; the
    # DeepSeek-V3 rows of the same release set nothing of the kind (NeMo's utils set it for FP8 only)
    from planner.analysis.validate import infer_precision

    rows = {r["id"]: r for r in dev_runs()}
    bf16, fp8 = "dgxc-llama31-405b-bf16-512xgb200", "dgxc-llama31-405b-fp8-128xgb200"
    assert infer_precision(rows[bf16]) == infer_precision(rows[fp8]) == {"grad_dtype": "bf16"}
    b, f = predict_run(rows[bf16]), predict_run(rows[fp8])
    # 2 B per parameter, the bf16 weights' size; the FP8 row (the same TP 4 x PP 8 stage) keeps the same gradients
    assert b["memory"]["grads_gib"] == pytest.approx(b["memory"]["weights_gib"])
    assert f["memory"]["grads_gib"] == pytest.approx(b["memory"]["grads_gib"])
    assert infer_precision(rows["dgxc-deepseek-v3-bf16-128xgb200"]) == {}


def test_unpublished_knobs_are_searched_among_what_the_stack_runs():
    # validate searches what a run leaves out under the plan rules of its stack's launcher (validate.stack_search), as
    # `plan` does: the DGX Cloud MaxText Llama 2 70B row, read without the recipe that states its remat policy
    # (validate.RECIPE_REMAT), was scored with full recompute of 56 of 80 layers, which MaxText (one remat policy for
    # every layer) cannot run; a run whose published knobs that launcher cannot lay out (DeepSeek-V3's DualPipe,
    # costed with Megatron's stack) is searched ungated
    import copy

    from planner.analysis.validate import infer_maxtext_remat

    cited = next(r for r in dev_runs() if r["id"] == "dgxc-maxtext-llama2-70b-bf16-64xh100")
    assert infer_maxtext_remat(cited, "maxtext")["remat_device"][-1] == "mlpwo"  # its recipe's policy (BF16)
    run = copy.deepcopy(cited)
    run["source"] = "a MaxText run on H100s whose recipe is not cited"
    assert infer_maxtext_remat(run, "maxtext") == {"remat_offloaded": (), "remat_device": ()}
    row = predict_run(run)
    assert row["fits"] and row["plan"]["recompute_layers"] is None, row["plan"]
    dsv3 = predict_run(next(r for r in dev_runs() if r["id"] == "deepseek-v3-2048xh800"))
    assert dsv3["plan"]["schedule"] == "dualpipe"
    # a costing stack no launcher writes (NeMo AutoModel) is not held to another stack's launcher rules
    from planner.analysis.validate import run_inputs, stack_search

    automodel = next(r for r in load_runs(data_dir("runs") / "moe_runs_added.yaml")
                     if r["id"] == "automodel-gpt-oss-120b-bf16-64xh100")  # FSDP 64, EP 64: Megatron's rules take it
    ctx, fixed = run_inputs(automodel)
    assert ctx.train.framework == "automodel" and stack_search(ctx, fixed)[1] is False
    ctx, fixed = run_inputs(run)
    assert stack_search(ctx, fixed)[1] is True  # the MaxText row: gated by MaxText's plan rules


def test_deepseek_v3_report_dispatches_in_fp8():
    """DeepSeek-V3's own framework quantizes the MoE inputs to FP8 before the dispatch (report sec. 3.3.2); Megatron-
    Bridge's DeepSeek-V3 rows dispatch the BF16 hidden states."""
    from planner.analysis.validate import infer_precision

    run = next(r for r in dev_runs() if r["id"] == "deepseek-v3-2048xh800")
    assert infer_precision(run)["fp8_moe_dispatch"] is True
    mbridge = next(r for r in dev_runs() if r["id"] == "mbridge2511-dgx-gb200-deepseekv3-bf16-256gpu")
    assert "fp8_moe_dispatch" not in infer_precision(mbridge)


def test_nothing_fits_scores_the_plan_closest_to_fitting(result):
    # SC21's 529.6B ZeRO-3 run at micro-batch 4 fits on its 640 GPUs (76 GiB of 79); on 480 (SC21 says it did
    # not even fit on 560) the sharded states grow by 4 GiB: nothing fits, so the run is scored with the
    # smallest-memory plan (full recompute; the run leaves recompute unpublished) and flagged as not fitting
    import copy
    assert _row(result, "sc21-t2-zero3-529.6b-640gpu")["fits"]
    run = copy.deepcopy(next(r for r in dev_runs() if r["id"] == "sc21-t2-zero3-529.6b-640gpu"))
    run["id"], run["devices"], run["train"]["global_batch"], run["plan"]["dp"] = "zero3-480", 480, 1920, 480
    assert run["plan"]["recompute"] is None
    row = validate_runs([run])["runs"][0]
    assert not row["fits"] and row["plan"]["recompute"] == "full"


def test_torchtitan_dec_2024_pipeline_microbatches_from_the_benchmark_commit():
    # torchtitan 9dec370 splits each DP rank's batch into pp micro-batches (pipelining_utils: n_microbatches defaults
    # to pipeline_parallel_degree): Table 5's 405B 1F1B row (local batch 32, PP 8) runs micro-batches of 4 even where
    # a row states 1 (the shared reference's copy does); Table 6's CP rows (local batch 8 / dp) stay at 1
    import copy

    from planner.analysis.validate import run_fixed_knobs, run_specs

    rows = {r["id"]: r for r in dev_runs()}
    stated_one = copy.deepcopy(rows["torchtitan-llama31-405b-512xh100-1f1b"])
    stated_one["plan"]["micro_batch"] = 1
    for run, mb in ((stated_one, 4), (rows["torchtitan-llama31-405b-512xh100-fsdp4-cp2-seq65536"], 1)):
        assert run_fixed_knobs(run, *run_specs(run))["micro_batch"] == mb, run["id"]
    row = predict_run(stated_one)
    assert row["plan"]["micro_batch"] == 4
    assert abs(row["step_time_s"] / row["measured_step_time_s"] - 1) < 0.10  # 43.2 s vs 40.96 measured (+5.4%)


def test_legacy_deepspeed_zero3_only_for_2021_deepspeed_runs(result):
    # SC21's ZeRO-3 baselines (arXiv 2104) ran DeepSpeed before its overlapped stage-3 rewrite: blocking
    # gathers, all-reduced gradients. Their Megatron rows and every later run are unaffected.
    from planner.analysis.validate import infer_framework, infer_legacy_deepspeed_zero3, stack_date

    legacy = {r["id"] for r in dev_runs() if infer_legacy_deepspeed_zero3(r, infer_framework(r))}
    assert legacy == {r["id"] for r in dev_runs() if r["id"].startswith("sc21-t2-zero3")} and len(legacy) == 4
    assert stack_date(next(r for r in dev_runs() if r["id"].startswith("sc21-t2-zero3"))) == (2021, 4)
    modern = {"id": "x", "source": "DeepSpeed ZeRO-3 blog, 2023"}
    assert not infer_legacy_deepspeed_zero3(modern, "deepspeed")
    for rid in legacy:
        row = _row(result, rid)
        # nothing overlaps: the data-parallel traffic is a large exposed share of the step
        assert row["time_breakdown"]["dp_comm_s"] > 0.15 * row["step_time_s"]
        assert abs(row["step_time_error"]) < 0.35


def test_peak_memory_median_target_torchtitan(result):
    mem = [abs(r["peak_memory_error"]) for r in result["runs"] if "peak_memory_error" in r]
    assert len(mem) == 12 and all("torchtitan" in r["id"] for r in result["runs"] if "peak_memory_error" in r)
    assert result["summary"]["peak_memory"]["median_abs_error"] <= 0.10


def test_summary_of_known_errors():
    # |errors| 0.05, 0.1, 0.2, 0.3, 0.4: median 0.2; p90 by the floor index int(0.9 * 4) = 3 -> 0.3
    rows = [{"id": k, "step_time_error": e} for k, e in zip("abcde", (0.1, -0.2, 0.3, 0.05, -0.4), strict=True)]
    rows[0]["peak_memory_error"], rows[1]["peak_memory_error"] = -0.08, 0.02
    rows.append({"id": "f"})  # unmeasured: counted as a run, not in the error statistics
    s = summarise(rows)
    assert s["runs"] == 6
    assert s["step_time"] == {"n": 5, "median_abs_error": pytest.approx(0.2), "p90_abs_error": pytest.approx(0.3)}
    assert s["peak_memory"] == {"n": 2, "median_abs_error": pytest.approx(0.05), "p90_abs_error": pytest.approx(0.02)}
    assert [w["id"] for w in s["worst"]] == ["e", "c", "b", "a", "d"]


def test_summary_matches_rows(result):
    # the summary's figures recomputed from the rows by hand (median; p90 at the floor index)
    errs = sorted(abs(r["step_time_error"]) for r in result["runs"])
    s = result["summary"]["step_time"]
    assert s["n"] == len(errs) == 75
    assert s["median_abs_error"] == pytest.approx(errs[37])
    assert s["p90_abs_error"] == pytest.approx(errs[int(0.9 * 74)])


def test_dev_run_step_time_targets(result):
    # issue 12 targets on the GPU dev runs, no per-run factors: median |step error| <= 8%, p90 <= 20% (the p90 at
    # the floor index `plan validate` reports). History in docs/validation.md: 8.4% / 21.8% at the start of issue
    # 12, 8.1% / 21.8% after issues 13-17; the MoE per-expert launch term and the robust refit of devfit give the
    # figures there now.
    s = result["summary"]["step_time"]
    assert s["median_abs_error"] <= 0.08
    assert s["p90_abs_error"] <= 0.20


@pytest.mark.slow
@pytest.mark.parametrize("run_id", [
    "nemo2407-llama2-70b-64gpu", "dgxc-gpt3-175b-bf16-128xh100", "dgxc-llama31-405b-bf16-1152xh100",
    "dgxc-nemotron4-340b-bf16-512xh100", "nemo2407-llama3-8b-8gpu", "sc21-t1-gpt-1008.0b-3072gpu",
])
def test_search_finds_published_plan_or_better(run_id):
    """Issue 4 quality: the unconstrained search finds a plan at least as fast as the published one by
    its own model, and the published plan ranks near the top (experts tuned it)."""
    run = next(r for r in dev_runs() if r["id"] == run_id)
    q = search_quality(run)
    assert q["published_fits"]
    assert q["best_step_s"] <= q["published_step_s"] * (1 + 1e-9)
    # experts tuned these layouts: the published plan ranks in the top 10 or the top 5% of feasible plans
    # (measured: ranks 1-10 of 7-337)
    assert q["published_rank"] <= max(10, 0.05 * q["feasible_plans"])
    _rank_agrees_with_best(q)
    if not run_id.startswith("sc21"):  # SC21 Table 1 used full recompute everywhere by method
        # experts tuned these: a claimed 20%+ win would point at the cost model (issue 4)
        assert q["speedup_claimed"] < 0.20


def _rank_agrees_with_best(q: dict) -> None:
    """The rank (counted over the search's frontier) is 1 exactly when the search's best plan (its own
    result list) is not faster than the published plan: two independent paths to one fact."""
    faster = q["best_step_s"] < q["published_step_s"] - 1e-12
    assert (q["published_rank"] > 1) == faster, q["id"]


def test_bad_runs_file(tmp_path):
    from planner.errors import InputError

    p = tmp_path / "r.yaml"
    p.write_text("- id: x\n  model: {}\n  hardware: h100\n  devices: 8\n  train: {global_batch: 8}\n  bogus: 1\n")
    with pytest.raises(InputError, match="unknown field"):
        load_runs(p)
    p.write_text("[1, 2")
    with pytest.raises(InputError, match="not valid YAML"):
        load_runs(p)
    p.write_text("- id: x\n  model: {model_type: nope}\n  hardware: h100\n  devices: 8\n  train: {global_batch: 8}\n")
    with pytest.raises(InputError):
        predict_run(load_runs(p)[0])


@pytest.fixture(scope="module")
def quality():
    """search_quality of every run whose layout is published (the slow part: three searches a run)."""
    return [q for r in dev_runs() if (q := search_quality(r))]


@pytest.mark.slow
def test_every_published_plan_is_inside_the_search_space(quality):
    """Issue 4: for every run whose layout is published and fits by this model, the unconstrained
    search (with only the run's software-stack limits) finds a plan at least as fast."""
    checked = 0
    for q in quality:
        if not q["published_fits"]:
            continue
        checked += 1
        assert q["best_step_s"] <= q["published_step_s"] * (1 + 1e-9), q["id"]
        assert q["published_rank"] <= q["feasible_plans"], q["id"]  # it is one of the feasible plans
        _rank_agrees_with_best(q)
    assert checked >= 45


@pytest.mark.slow
def test_validate_reproduces_docs_validation_md(result, quality):
    """`plan validate --write-docs docs/validation.md --search-quality` regenerates the committed file
    byte for byte (the search is deterministic; the hand-written part after the mark is kept)."""
    from planner.analysis.validate import HAND_WRITTEN_MARK, validation_doc

    doc = Path(__file__).resolve().parents[2] / "docs" / "validation.md"
    committed = doc.read_text()
    assert HAND_WRITTEN_MARK in committed
    assert validation_doc(result, quality, committed) == committed


def test_runs_outside_the_fit_are_predicted():
    # runs/known_runs_added.yaml: 71 published rows no constant was fitted on. Dense, 46 rows -- 41 DGX Cloud rows
    # (Llama 3.1 8B, 70B, Nemotron-4 15B; BF16, FP8; 8-2048 H100s; and the Llama 3.1 405B columns the dev set leaves
    # out, among them the 576-GPU one its README calls the smallest that fits, 83 GiB predicted before the recipe's
    # bf16 gradient buffer was read: validate.RECIPE_PRECISION) and the five rows of the NeMo performance table the
    # dev set leaves out: their published layouts fit as published; their step times: median within 3%, p90 within
    # 6.1% (5.8% until their 8k-token layers ran at their causal tile efficiency, base.CAUSAL_TILE_REL: the Llama 3.1
    # 70B FP8 rows, 6-7% fast, moved by -0.2 points), every row within 15% (the worst, NeMo's Nemotron 8B, is predicted
    # 14% fast, then the 405B FP8 576 / 1152 rows 12% slow: docs/validation.md).
    # MoE, 25 Megatron-Bridge rows (25.09 token-drop, 25.11 and 26.02 dropless; DeepSeek-V3, Qwen3-30B/235B,
    # gpt-oss-120b on GB200, B200, H100; the 25.11 B200 DeepSeek-V3 row with its MTP module, -21%, was added once the
    # planner priced MTP): median 9.1%, p90 21.1% (the 25.09 Qwen3-30B-A3B GB200 token-drop row, -21%),
    # worst the 25.09 token-drop Qwen3-30B-A3B B200 row (-34%; the 25.11 BF16 Qwen3-235B-A22B GB200 row was +35%
    # before HybridEP's host launches were counted, +15% since): the median, p90 and worst within the MoE targets
    # (12%, 25%, 35%), checked here at what the model reaches today. (The 26.02
    # Qwen3-30B-A3B H100 row is scored at the released table's 5113 tokens/s/GPU, +9%; its pre-release draft's 2557,
    # half of it, made it -45%: the row's notes.)
    added = load_runs(data_dir("runs") / "known_runs_added.yaml")
    res = validate_runs(added)
    assert len(res["runs"]) == len(added) == 71
    moe = {str(r["id"]) for r in added if "moe_force_balanced" in r["train"] or "moe_capacity_factor" in r["train"]}
    assert len(moe) == 25
    dense_rows = [r for r in res["runs"] if r["id"] not in moe]
    errors = sorted(abs(r["step_time_error"]) for r in dense_rows)
    assert len(errors) == 46
    assert errors[len(errors) // 2] <= 0.03, errors
    assert errors[int(0.9 * (len(errors) - 1))] <= 0.061 and errors[-1] <= 0.15, errors
    moe_errors = sorted(abs(r["step_time_error"]) for r in res["runs"] if r["id"] in moe)
    assert (moe_errors[len(moe_errors) // 2 - 1] + moe_errors[len(moe_errors) // 2]) / 2 <= 0.10, moe_errors
    assert moe_errors[int(0.9 * (len(moe_errors) - 1))] <= 0.25 and moe_errors[-1] <= 0.35, moe_errors
    assert all(r["fits"] for r in dense_rows)
