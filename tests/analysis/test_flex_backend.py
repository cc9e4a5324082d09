"""The flex dispatcher's backend (DeepEP / HybridEP) of every published flex run: stated per row in runs/*.yaml with
the recipe line that sets it, and inferred from the citation for a record without it (validate.infer_moe_flex_backend,
what reads the workspace's shared runs files, which carry no stack block): the two must agree row by row. HybridEP's
host launches are counted (planner.costmodel.moe.HYBRIDEP_HOST_KERNELS), DeepEP keeps the estimate."""

from __future__ import annotations

import pytest

from planner.analysis.validate import infer_moe_flex_backend, load_runs, run_stack, validate_runs
from planner.catalog.data import data_dir

FILES = ("known_runs_dev.yaml", "known_runs_added.yaml", "moe_runs_added.yaml", "modelzoo_runs_added.yaml",
         "blackwell_ultra_runs_added.yaml")


@pytest.fixture(scope="module")
def flex_runs() -> list[dict]:
    return [r for f in FILES for r in load_runs(data_dir("runs") / f) if run_stack(r).moe_dispatcher == "flex"]


def test_every_stated_backend_is_the_inferred_one(flex_runs):
    # every flex row of the held-out files states it; the dev file is the workspace's shared one (no stack block):
    # its two flex Megatron-Bridge rows (25.11 GB200) are read by the inference, and DeepSeek's own run keeps DeepEP
    stated = [r for r in flex_runs if "moe_flex_backend" in (r.get("stack") or {})]
    # + the 47 flex rows of blackwell_ultra_runs_added.yaml, all HybridEP; 61 since the model zoo GB300 and GB200 MXFP8
    # 4k rows (2026-11-29)
    assert len(stated) == 61 + 47
    for r in stated:
        if "megatron-bridge performance summary" in r["source"].lower():
            assert infer_moe_flex_backend(r) == r["stack"]["moe_flex_backend"], r["id"]
    by = {b: sum(r["stack"]["moe_flex_backend"] == b for r in stated) for b in ("hybridep", "deepep")}
    assert by == {"hybridep": 43 + 47, "deepep": 18}
    dev = {r["id"]: run_stack(r).moe_flex_backend for r in flex_runs if r not in stated}
    assert dev == {"mbridge2511-dgx-gb200-deepseekv3-bf16-256gpu": "hybridep",
                   "mbridge2511-dgx-gb200-qwen3_30b_a3b-fp8-mx-8gpu": "hybridep", "deepseek-v3-2048xh800": None}


def test_hybridep_host_launches_are_counted():
    """The 25.11 Qwen3-235B-A22B BF16 row on 256 GB200 (HybridEP, 4 local experts): the same run costed with DeepEP's
    estimate (40 / 60 launches after the sync) is slower by the launches HybridEP does not make."""
    row = next(r for r in load_runs(data_dir("runs") / "known_runs_added.yaml")
               if r["id"] == "mbridge2511-dgx-gb200-q235-bf16-256gpu")
    hybrid = validate_runs([row])["runs"][0]
    deepep = validate_runs([row | {"stack": row["stack"] | {"moe_flex_backend": "deepep"}}])["runs"][0]
    assert hybrid["step_time_s"] < 0.9 * deepep["step_time_s"]
    assert abs(hybrid["step_time_error"]) < 0.2 < abs(deepep["step_time_error"])
