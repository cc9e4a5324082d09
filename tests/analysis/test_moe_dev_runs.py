"""Issue 23's must-show on the repository's MoE development runs (runs/known_runs_dev.yaml and
runs/known_runs_tpu_dev.yaml, copied with citations from the project's reference data): median |step error| <= 12%,
p90 <= 25% (at the floor index `plan validate` reports), none beyond 35%; and the recipe facts behind two of them."""

from __future__ import annotations

import pytest

from planner.analysis.validate import (
    infer_moe_a2a_overlap,
    infer_moe_capacity_factor,
    infer_moe_dispatcher,
    load_runs,
    preset_knobs,
    validate_runs,
)
from planner.catalog.data import data_dir

MOE_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")


@pytest.fixture(scope="module")
def moe_errors() -> dict[str, float]:
    runs = [r for name in ("known_runs_dev.yaml", "known_runs_tpu_dev.yaml")
            for r in load_runs(data_dir("runs") / name) if any(r["model"].get(k) for k in MOE_KEYS)]
    res = validate_runs(runs)
    return {r["id"]: r["step_time_error"] for r in res["runs"] if r.get("step_time_error") is not None}


@pytest.mark.slow
def test_moe_dev_runs_meet_issue_23_targets(moe_errors):
    errs = sorted(abs(e) for e in moe_errors.values())
    assert len(errs) == 11, moe_errors
    assert errs[len(errs) // 2] <= 0.12, moe_errors
    assert errs[int(0.9 * (len(errs) - 1))] <= 0.25, moe_errors
    assert errs[-1] <= 0.35, moe_errors


def _mbridge(release: str, hardware: str, hidden: int) -> dict:
    return {"id": "x", "hardware": hardware, "model": {"model_type": "qwen3_moe", "hidden_size": hidden},
            "source": f"NVIDIA Megatron-Bridge performance summary, {release} NeMo container (docs/...)", "train": {}}


@pytest.mark.parametrize("release, hardware, hidden, expected", [
    ("25.11", "b200-sxm-180gb", 2048, None),  # v0.2.1 QWEN3_30B_A3B_B200_*: no flex backend (alltoall)
    ("26.02", "b200-sxm-180gb", 2048, None),  # v0.3.0: still none
    ("26.04", "b200-sxm-180gb", 2048, "flex"),  # v0.3.1 on: hybridep on the B200 BF16 preset, inherited by FP8
    ("26.04", "b200-sxm-180gb", 4096, None),  # Qwen3-235B on B200: alltoall in every release
    ("25.11", "gb200-nvl72", 2048, "flex"),  # GB200 presets: hybridep
    ("25.11", "h100-sxm-80gb", 2048, None),  # v0.2.1 QWEN3_30B_A3B_H100_*: none
    ("26.02", "h100-sxm-80gb", 2048, "flex"),  # v0.3.0: deepep
    ("26.06", "h100-sxm-80gb", 4096, None),  # Qwen3-235B on H100: alltoall in every release
])
def test_qwen3_dispatcher_from_the_cited_release(release, hardware, hidden, expected):
    assert infer_moe_dispatcher(_mbridge(release, hardware, hidden)) == expected


def test_maxtext_capacity_factor_from_the_recipe_notes():
    run = {"id": "x", "hardware": "tpu-v6e", "model": {"model_type": "mixtral"}, "train": {},
           "source": "AI-Hypercomputer tpu-recipes -- training/trillium/Mixtral-8x7B-MaxText/README.md",
           "notes": "MoE with token DROPPING: capacity_factor=1.25, megablox=False, sparse_matmul=False"}
    assert infer_moe_capacity_factor(run) == 1.25
    assert infer_moe_capacity_factor(run | {"notes": "dropless, capacity_factor=-1"}) is None


def _dev_run(run_id: str) -> dict:
    return next(r for r in load_runs(data_dir("runs") / "known_runs_dev.yaml") if r["id"] == run_id)


def test_b200_gpt_oss_25_11_scores_the_release_preset_layout():
    """The 25.11 table gives EP 8 for gpt-oss-120b on 64 B200s; the release's preset runs EP 64 with layernorm and
    moe_act recomputed (validate.PRESET_KNOBS), and the later tables' per-sample times put the row with the EP-64
    layout: scored as the preset runs it the prediction is within 12% (-27.5% at the table's EP 8), the file keeps the
    published EP 8."""
    run = _dev_run("mbridge2511-dgx-b200-gpt-oss-120b-bf16-64gpu")
    assert run["plan"]["ep"] == 8
    assert preset_knobs(run) == {"ep": 64, "recompute": "selective"}
    res = validate_runs([run])["runs"][0]
    assert res["plan"]["ep"] == 64 and res["plan"]["recompute"] == "selective"
    assert abs(res["step_time_error"]) <= 0.12, res["step_time_error"]
    # the same model on B200 from another release, or on GB200 from the same one, keeps its published knobs
    gb200 = _dev_run("mbridge2511-dgx-gb200-gpt-oss-120b-bf16-64gpu")
    later = run | {"source": run["source"].replace("25.11 NeMo container", "26.02 NeMo container")}
    assert preset_knobs(gb200) == {} and preset_knobs(later) == {}


def test_h100_qwen3_30b_26_02_01_scores_the_release_preset_layout():
    """The 26.02.01 table repeats the 26.02 row's layout (PP 2, VP 12, EP 8) for Qwen3-30B-A3B on 16 H100s; the
    release's preset (Megatron-Bridge v0.3.1) runs EP 16 without pipeline parallelism, the layout of the 26.04-26.06
    rows, whose tokens/s/GPU (8826-8960) the row's 9058 matches (26.02 at PP 2: 5113). Scored as the preset runs it the
    prediction is within 10% (+50% at the table's columns); the file keeps the published columns, and the 26.02 row
    its own."""
    runs = {r["id"]: r for r in load_runs(data_dir("runs") / "moe_runs_added.yaml")}
    run = runs["mbridge260201-dgx-h100-q30-fp8-cs-16gpu"]
    assert (run["plan"]["pp"], run["plan"]["vpp"], run["plan"]["ep"]) == (2, 12, 8)
    res = validate_runs([run])["runs"][0]
    assert (res["plan"]["pp"], res["plan"]["vpp"], res["plan"]["dp"], res["plan"]["ep"]) == (1, 1, 16, 16)
    assert abs(res["step_time_error"]) <= 0.10, res["step_time_error"]
    published = validate_runs([run | {"source": run["source"].replace("26.02.01 NeMo", "26.02 NeMo")}])["runs"][0]
    assert published["plan"]["pp"] == 2 and published["step_time_error"] > 0.3


@pytest.mark.parametrize("release, hardware, dispatcher, overlap", [
    ("26.02.01", "gb200-nvl72", None, False),  # v0.3.1 GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2: neither
    ("26.04", "gb200-nvl72", "flex", True),  # v0.4.0: hybridep + moe_a2a_overlap
    ("26.04.01", "gb200-nvl72", None, True),  # v0.4.1 / v0.4.2 disagree on the backend; both set the overlap
    ("26.04", "b200-sxm-180gb", "flex", False),  # v0.4.0 B200 V2: EP 8 with hybridep, no overlap
    ("26.04", "h100-sxm-80gb", None, False),
])
def test_gpt_oss_dispatcher_and_overlap_from_the_cited_release(release, hardware, dispatcher, overlap):
    run = _mbridge(release, hardware, 2880)
    run["model"]["model_type"] = "gpt_oss"
    assert infer_moe_dispatcher(run) == dispatcher
    assert infer_moe_a2a_overlap(run) == overlap
