"""runs/blackwell_ultra_runs_added.yaml: Megatron-Bridge's published DGX-GB300 and DGX-B300 MoE pre-training rows
(25.11-26.08 performance summaries at commit 067f987), read and scored whole: a held-out check of the
gb300-nvl72 and b300-sxm-288gb profiles. No constant is fitted on them; the error bounds below are the errors as
first measured (a regression guard, not a target), and the rows' stated stack is the one planner.analysis.validate
infers for the same citation without it (one owner of the presets' behaviour)."""

from __future__ import annotations

import copy
import re

import pytest

from planner.analysis.validate import preset_recompute, run_stack
from planner.catalog.data import data_dir

FILE = data_dir("runs") / "blackwell_ultra_runs_added.yaml"
# rows per (release, system): the tables' DGX-GB300 / DGX-B300 rows of DeepSeek-V3, gpt-oss-120b, Qwen3-30B-A3B,
# Qwen3-235B-A22B and Kimi K2 (the 26.06 GB300 DeepSeek-V3 table has two, GBS 4096 and 15360)
PER_RELEASE = {("2608", "gb300"): 4, ("260601", "gb300"): 4, ("2606", "gb300"): 6, ("2606", "b300"): 3,
               ("260401", "gb300"): 5, ("260401", "b300"): 4, ("2604", "gb300"): 5, ("2604", "b300"): 4,
               ("260201", "gb300"): 5, ("260201", "b300"): 4, ("2602", "gb300"): 4, ("2602", "b300"): 4,
               ("2511", "gb300"): 5}
HARDWARE = {"gb300": "gb300-nvl72", "b300": "b300-sxm-288gb"}


def test_every_row_is_read_and_cites_its_source(runs):
    ids = [r["id"] for r in runs]
    assert len(ids) == len(set(ids)) == sum(PER_RELEASE.values()) == 57
    got: dict[tuple[str, str], int] = {}
    for r in runs:
        m = re.match(r"mbridge(\d+)-dgx-(gb300|b300)-", r["id"])
        assert m, r["id"]
        got[(m.group(1), m.group(2))] = got.get((m.group(1), m.group(2)), 0) + 1
        assert r["hardware"] == HARDWARE[m.group(2)], r["id"]
        assert r["devices_per_node"] == (4 if m.group(2) == "gb300" else 8), r["id"]
        assert "commit 067f987" in r["source"] and "https://github.com/NVIDIA-NeMo/Megatron-Bridge" in r["source"]
        assert r["train"]["moe_force_balanced"] is True, r["id"]  # every MoE row of these tables (footnote)
        assert r["reliability"] in ("A", "B", "C") and r["notes"], r["id"]
    assert got == PER_RELEASE


def test_step_times_are_the_published_throughput(runs):
    for r in runs:
        m = re.match(r"tokens_per_sec_per_gpu=(\d+) ", r["measured"]["derived_from"])
        assert m, r["id"]
        t = r["train"]
        assert r["measured"]["step_time_s"] == pytest.approx(
            t["global_batch"] * t["seq_len"] / (int(m.group(1)) * r["devices"]), rel=1e-12), r["id"]


def test_every_row_is_scored(runs, scored):
    assert scored["summary"]["skipped"] == 0 and not scored["skipped"]
    assert {r["id"] for r in scored["runs"]} == {r["id"] for r in runs}
    assert all(r["step_time_s"] > 0 and r["step_time_error"] is not None and r["fits"] for r in scored["runs"])


def _abs_errors(rows: list[dict]) -> list[float]:
    return sorted(abs(r["step_time_error"]) for r in rows)


def test_errors_as_first_measured(scored):
    """Median / p90 |error| when the file was added (no constant fitted on it): all 57 rows 12.0% / 30.3%; GB300 (38)
    17.3% / 38.7%, B300 (19) 7.6% / 21.2%. The tail is GB300: the full-iteration-graph DeepSeek-V3 rows of 26.06-26.08
    (+39% to +42%), the 25.11 BF16 rows (DeepSeek-V3 +30%, Qwen3-235B-A22B +39%), the 26.06.01 gpt-oss row the table
    flags as a regression (-38%, reliability C) and the Qwen3-235B-A22B rows (+17% to +27%); on B300 the 26.02.01
    Qwen3-235B-A22B row whose columns repeat the 26.02 layout (-30%, reliability C).
    With FP8 dot-product attention read from the 26.06-26.08 presets (validate.FP8_DPA_RECIPES; 14 rows move,
    tests/costmodel/test_fp8_attention.py): all 57 unchanged at 12.0% / 30.3%, GB300 17.3% / 38.7% -> 17.3% / 32.2%
    (DeepSeek-V3 +39..42% -> +32..34%), B300 unchanged.
    With GB300's GEMM efficiency from Azure's published GB300 / GB200 cuBLASLt ratio
    (hardware_profiles/gb300-nvl72.yaml, 2026-11-28; was GB200's own, a stand-in) and gpt-oss's window layers priced by
    the fused kernel's tiles (base.ATTN_TILE_REL): all 57 7.2% / 19.8%, GB300 7.2% / 17.4% (DeepSeek-V3 26.06-26.08
    +13% to +15%, as on GB200), B300 7.6% / 19.8%."""
    def check(rows: list[dict], n: int, median: float, p90: float) -> None:
        e = _abs_errors(rows)
        assert len(e) == n
        assert e[len(e) // 2] <= median + 0.005, e
        assert e[int(0.9 * (len(e) - 1))] <= p90 + 0.005, e

    rows = scored["runs"]
    check(rows, 57, 0.072, 0.198)
    check([r for r in rows if "-gb300-" in r["id"]], 38, 0.072, 0.174)
    check([r for r in rows if "-b300-" in r["id"]], 19, 0.076, 0.198)


def test_stated_stack_is_the_inferred_one(runs):
    """Each row states its release preset's flex backend, full-iteration CUDA graph, batch-level EP overlap and
    (DeepSeek-V3) recompute; validate infers the same from the citation for a record without them
    (FULL_ITERATION_CG_RECIPES, QWEN3_FLEX_FROM, GPT_OSS_FLEX_PRESETS, HYBRIDEP_SYSTEMS, DSV3_RECOMPUTE_PRESETS,
    KIMI_K2_ROUTED_EXPERTS)."""
    flex = full = 0
    for r in runs:
        bare = copy.deepcopy(r)
        bare.pop("stack")
        bare["plan"]["recompute"] = None
        bare["plan"].pop("recompute_modules", None)
        stated, inferred = run_stack(r), run_stack(bare)
        assert stated.moe_dispatcher == inferred.moe_dispatcher, r["id"]
        assert r["stack"].get("moe_flex_backend") == (inferred.moe_flex_backend if inferred.moe_dispatcher == "flex"
                                                      else None), r["id"]
        assert (r["stack"].get("cuda_graph_impl") == "full_iteration") == (inferred.cuda_graph_impl == "full_iteration")
        assert bool(r["stack"].get("moe_a2a_overlap")) == inferred.moe_a2a_overlap, r["id"]
        assert stated.fp8_param_gather == inferred.fp8_param_gather, r["id"]
        if r["model"].get("n_routed_experts") == 256:  # DeepSeek-V3 (Kimi K2 has 384 and presets of its own)
            pr = preset_recompute(bare)
            assert (pr.get("recompute"), tuple(pr.get("recompute_modules") or ())) == (
                r["plan"]["recompute"], tuple(r["plan"].get("recompute_modules") or ())), r["id"]
        flex += inferred.moe_dispatcher == "flex"
        full += inferred.cuda_graph_impl == "full_iteration"
    # alltoall: the gpt-oss GB300 BF16 rows (26.02-26.04.01, 25.11), the B300 gpt-oss rows of 26.02 / 26.02.01 and the
    # B300 Qwen3-235B-A22B rows of 26.02-26.04 (10); full iteration: the 13 GB300 MXFP8 rows of 26.06-26.08 but Kimi
    # K2's, and 26.06's B300 Qwen3-30B-A3B
    assert (flex, full) == (57 - 10, 13 + 1)


def test_kimi_k2_keeps_its_own_presets(runs):
    """Kimi K2 shares DeepSeek-V3's model_type and hidden size: the DeepSeek-V3 preset tables must not reach it. Its
    26.06 GB300 MXFP8 preset (KIMI_K2_PRETRAIN_CONFIG_GB300) captures no full iteration, sets no EP overlap and, with
    Muon, gathers no FP8 parameters; a DeepSeek-V3 record of the same citation does all three (FP8 parameters too)."""
    kimi = next(r for r in runs if r["id"] == "mbridge2606-dgx-gb300-kimik2-fp8-mx-256gpu")
    dsv3 = next(r for r in runs if r["id"] == "mbridge2606-dgx-gb300-dsv3-fp8-mx-256gpu")
    for r, expect in ((kimi, False), (dsv3, True)):
        bare = copy.deepcopy(r)
        bare.pop("stack")
        st = run_stack(bare)
        assert (st.cuda_graph_impl == "full_iteration", st.moe_a2a_overlap, st.fp8_param_gather) == (expect,) * 3
    assert preset_recompute(copy.deepcopy(kimi) | {"plan": kimi["plan"] | {"recompute": None}}) == {}
