"""Megatron's batch-level EP all-to-all overlap as a searched knob: where a request neither pins it on
(--moe-a2a-overlap) nor off (--no-moe-a2a-overlap), every searched dispatcher is searched with and without it and the
search whose #1 ranks first is kept (planner.search.dispatchers); its launch files write it."""

import json

from support import HF_CONFIGS_DIR, one_line_error, plan_json, run_cli

from planner.app.inputs import build_inputs
from planner.app.request import PlanRequest
from planner.search.dispatchers import searched_overlap
from planner.search.ranking import TIE_BAND_REL

KEPT = ("--model", "mixtral-8x7b", "--cluster", "h100x64")  # #1 10.75 s with it, 10.93 s without (2026-11-28)
NOT_KEPT = ("--model", "mixtral-8x7b", "--cluster", "h100x16")  # 72.0 s with it (no full recompute), 54.2 s without


def _searched(**kw) -> bool:
    model, cluster, train = build_inputs(PlanRequest(**kw))
    return searched_overlap(model, train)


def test_the_overlap_is_searched_where_megatron_runs_it():
    assert _searched(model="mixtral-8x7b", cluster="h100x64")
    assert _searched(model="mixtral-8x7b", cluster="a100x64")  # no flex here, the overlap still: alltoall takes it
    assert _searched(model="mixtral-8x7b", cluster="h100x64", moe_dispatcher="flex")
    assert not _searched(model="llama-3.1-8b", cluster="h100x64")  # dense
    # megatron-core: "overlap_moe_expert_parallel_comm is supported with alltoall/flex token dispatcher"
    assert not _searched(model="mixtral-8x7b", cluster="h100x64", moe_dispatcher="allgather")
    assert not _searched(model="mixtral-8x7b", cluster="h100x64", moe_a2a_overlap=True)  # pinned on: nothing to try
    assert not _searched(model="mixtral-8x7b", cluster="tpu-v5px256")  # MaxText has none (Stack.moe_a2a_overlap_option)
    assert not _searched(model="mixtral-8x7b", cluster="h100x64", framework="fsdp")  # nor torchtitan


def test_the_faster_setting_is_kept_and_said():
    doc, _ = plan_json(*KEPT)
    on, _ = plan_json(*KEPT, "--moe-a2a-overlap")
    off, _ = plan_json(*KEPT, "--no-moe-a2a-overlap")
    seen = doc["search"]["moe_a2a_overlap"]
    # each entry is the #1 of what pinning that setting searches (both dispatchers, here)
    assert seen == {"with": on["plans"][0]["step_time_s"], "without": off["plans"][0]["step_time_s"]}
    assert seen["with"] * (1 + TIE_BAND_REL) < seen["without"]
    assert doc["training"]["moe_a2a_overlap"] is True
    assert [(p["plan"], p["step_time_s"]) for p in doc["plans"]] == [(p["plan"], p["step_time_s"]) for p in on["plans"]]
    assert any("batch-level EP all-to-all overlap" in w and "--no-moe-a2a-overlap" in w
               for w in doc["plans"][0]["warnings"])
    # a pinned setting is not searched, either way
    for pinned, value in ((on, True), (off, False)):
        assert "moe_a2a_overlap" not in pinned["search"] and pinned["training"]["moe_a2a_overlap"] is value
    # the dispatchers' entries are what pinning each gives: with the overlap searched, their best of both
    assert min(t for t in doc["search"]["moe_dispatchers"].values() if t is not None) == seen["with"]


def test_a_slower_overlap_is_searched_and_not_kept():
    """On 16 H100 Mixtral 8x7B fits only with full recompute, which megatron-core refuses beside the overlap: its
    search keeps the plans without it, and says nothing of it on #1."""
    doc, _ = plan_json(*NOT_KEPT)
    off, _ = plan_json(*NOT_KEPT, "--no-moe-a2a-overlap")
    seen = doc["search"]["moe_a2a_overlap"]
    assert doc["training"]["moe_a2a_overlap"] is False and seen["without"] == off["plans"][0]["step_time_s"]
    assert seen["with"] > seen["without"]
    assert doc["plans"][0]["plan"]["recompute"] == "full"
    assert not any("batch-level EP" in w for w in doc["plans"][0]["warnings"])


def test_the_kept_overlap_is_written(tmp_path):
    assert run_cli(*KEPT, "--launcher", "megatron", "--out", str(tmp_path)).exit_code == 0
    doc = json.loads((tmp_path / "megatron_args.json").read_text())
    args = doc["args"]
    assert "--overlap-moe-expert-parallel-comm" in args and "--delay-wgrad-compute" in args
    assert "--moe-shared-expert-overlap" not in args  # megatron-core refuses it beside the overlap
    # Megatron-LM's run guide: 32 with the overlap (validate_args only warns then for TP > 1 before Blackwell)
    assert doc["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    script = (tmp_path / "launch_megatron.sh").read_text()
    assert "--overlap-grad-reduce" in args and "# Needs Transformer Engine >= 2.8" in script  # validate_args' gate
    off = tmp_path / "off"
    assert run_cli(*KEPT, "--no-moe-a2a-overlap", "--launcher", "megatron", "--out", str(off)).exit_code == 0
    plain = json.loads((off / "megatron_args.json").read_text())
    assert "--overlap-moe-expert-parallel-comm" not in plain["args"] and "--delay-wgrad-compute" not in plain["args"]
    assert "Transformer Engine >= 2.8" not in (off / "launch_megatron.sh").read_text()
    tp = int(plain["args"][plain["args"].index("--tensor-model-parallel-size") + 1])
    assert plain["env"].get("CUDA_DEVICE_MAX_CONNECTIONS") == ("1" if tp > 1 else None)


def test_a_dense_model_refuses_only_the_overlap_pinned_on():
    r = run_cli("--model", "llama-3.1-8b", "--cluster", "h100x16", "--moe-a2a-overlap")
    assert r.exit_code == 2 and "applies to MoE models" in r.stderr
    assert run_cli("--model", "llama-3.1-8b", "--cluster", "h100x16", "--no-moe-a2a-overlap").exit_code == 0


def test_pinned_knobs_the_overlap_cannot_take_leave_it_unsearched():
    """megatron-core's asserts (stacks.rules.a2a_overlap_needs) read on the pinned knobs, the others at values the
    overlap takes: no search of plans none of which can run it."""
    from planner.search.dispatchers import overlap_pinned_out

    assert not overlap_pinned_out({})
    assert not overlap_pinned_out({"pp": 8})  # virtual stages stay open
    assert not overlap_pinned_out({"pp": 8, "schedule": "interleaved"})
    assert overlap_pinned_out({"pp": 8, "schedule": "1f1b"})
    assert overlap_pinned_out({"pp": 8, "vpp": 1})
    assert not overlap_pinned_out({"pp": 1, "schedule": "1f1b"})  # no pipeline: nothing to interleave
    assert overlap_pinned_out({"recompute": "full"})
    assert overlap_pinned_out({"recompute": "selective", "recompute_modules": ("moe",)})
    assert overlap_pinned_out({"ep": 1})  # nothing to overlap
    doc, _ = plan_json(*NOT_KEPT, "--recompute", "full")
    assert "moe_a2a_overlap" not in doc["search"] and doc["training"]["moe_a2a_overlap"] is False


def test_a_model_with_two_mtp_layers_is_planned_without_the_overlap(tmp_path):
    """megatron-core asserts "MTP supports at most one layer when enabling overlap_moe_expert_parallel_comm"
    (transformer_config.py; tests/consumers/test_megatron_consumer.py holds the emitted args against it): DeepSeek-V3
    with two MTP layers is searched without the overlap, and pinning it is refused up front, in one line, with the
    reason and not the layout advice of a pinned knob. Before, the search kept the overlap for it on 1024 H100 (3.07 s
    against 4.61 s without) and wrote launch files megatron-core refuses."""
    from planner.stacks import stack_of
    from planner.stacks.rules import a2a_overlap_model_needs

    cfg = json.loads((HF_CONFIGS_DIR / "deepseek-v3.json").read_text()) | {"num_nextn_predict_layers": 2}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert _searched(model="deepseek-v3", cluster="h100x1024")  # one MTP layer: searched
    assert not _searched(model=str(path), cluster="h100x1024")
    msg = one_line_error(run_cli("--model", path, "--cluster", "h100x1024", "--moe-a2a-overlap"))
    assert "at most 1 multi-token-prediction layer" in msg and "has 2" in msg and "layout" not in msg
    # the plan rule says the same of any plan (plan validate's runs are priced through it)
    model, _, train = build_inputs(PlanRequest(model=str(path), cluster="h100x1024", moe_a2a_overlap=True))
    assert a2a_overlap_model_needs(model)
    from planner.specs import ParallelPlan
    plan = ParallelPlan(tp=2, pp=4, vpp=8, dp=128, ep=256, micro_batch=1, zero_stage=1, schedule="interleaved")
    assert any("multi-token-prediction" in e for e in stack_of(train).plan_errors(model, train, plan))
    one, _, _ = build_inputs(PlanRequest(model="deepseek-v3", cluster="h100x1024", moe_a2a_overlap=True))
    assert not stack_of(train).plan_errors(one, train, plan)


def test_the_overlap_pinned_beside_ep_1_is_said_and_not_written(tmp_path):
    """megatron-core asserts expert parallelism for the overlap; pinned beside EP 1 it has nothing to overlap: the plan
    says so, and its launch files leave the flags out (Megatron would refuse them)."""
    r = run_cli("--model", "mixtral-8x7b", "--cluster", "h100x64", "--moe-a2a-overlap", "--ep", "1", "--json",
                "--launcher", "megatron", "--out", str(tmp_path))
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert all(any("with EP 1: no expert all-to-all to overlap" in w for w in p["warnings"]) for p in doc["plans"])
    args = json.loads((tmp_path / "megatron_args.json").read_text())["args"]
    assert "--overlap-moe-expert-parallel-comm" not in args and "--delay-wgrad-compute" not in args
    plain, _ = plan_json(*KEPT)
    assert not any("with EP 1" in w for p in plain["plans"] for w in p["warnings"])
