"""plan --launcher: the search keeps only plans the target stack runs (planner/launchers), --out
writes its files; --framework/--emit stay consistent with it; without a target the other launchers' own
best plans are reported. The real libraries judge the written files in tests/consumers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from consumers.scenarios import BY_NAME, CANNOT, SCENARIOS, run_id, run_keys, scenario_run  # noqa: E402
from support import HF_CONFIGS_DIR  # noqa: E402

from planner.catalog.hardware import parse_cluster  # noqa: E402
from planner.catalog.models import load_model  # noqa: E402
from planner.launchers import TARGETS, capabilities, launcher_errors, launchers_for  # noqa: E402
from planner.specs import ParallelPlan, TrainingSpec  # noqa: E402
from planner.ui.cli import main  # noqa: E402

FILES = {"megatron": {"megatron_args.json", "launch_megatron.sh"},
         "deepspeed": {"ds_config.json", "deepspeed_args.json", "launch_deepspeed.sh"},
         "torchtitan": {"torchtitan_args.json", "launch_torchtitan.sh"}, "maxtext": {"maxtext.yml"}}
OWN_MODULE = {"torchtitan_model.py"}  # torchtitan, for a model no registry function builds
HF_PATH = {"hf_config.json", "train_hf.py"}  # DeepSpeed, for a model Megatron-DeepSpeed cannot express


def _cli(*argv):
    return CliRunner().invoke(main, list(argv))


def test_scenarios_cover_the_kinds():
    assert len(SCENARIOS) >= 12
    assert {s.kind for s in SCENARIOS} == {"dense", "moe", "long-context", "fp8", "tpu"}


# the issue-13 scenario (every launcher) stays in the README's fast run; the other scenarios, one full search
# each, run with the slow tests (CI)
FAST_SCENARIO = "llama70b-h100x64-s8k"
assert FAST_SCENARIO in BY_NAME


@pytest.mark.parametrize("key", [pytest.param(k, id=run_id(*k), marks=() if k[0] == FAST_SCENARIO else pytest.mark.slow)
                                 for k in run_keys()])
def test_launcher_target_writes_its_files_or_says_why_not(key):
    run = scenario_run(*key)
    if key in CANNOT:
        assert run.exit_code == 2 and not run.files
        return
    assert run.exit_code == 0, run.stderr
    extra = set(run.files) - FILES[run.launcher] - {"plan.json", ".planner-files.json"}
    own = {"torchtitan": OWN_MODULE, "deepspeed": HF_PATH}.get(run.launcher, set())
    assert FILES[run.launcher] <= set(run.files) and extra <= own
    doc = run.plan_doc
    assert doc["training"]["launcher"] == run.launcher
    assert doc["training"]["framework"] == capabilities(run.launcher).framework
    t = doc["training"]
    train = TrainingSpec(seq_len=t["seq_len"], global_batch=t["global_batch"], dtype=t["dtype"],
                         framework=t["framework"])
    model, cluster = load_model(run.scenario.model), parse_cluster(run.scenario.cluster)
    plan = ParallelPlan(**{k: v for k, v in doc["plan"].items() if v is not None})
    assert launcher_errors(plan, model, train, run.launcher, cluster) == []


def test_cannot_table_reasons_are_the_cli_errors():
    assert set(CANNOT) <= set(run_keys())
    for key, why in CANNOT.items():
        sc = BY_NAME[key[0]]
        res = _cli("--model", sc.model, "--cluster", sc.cluster, "--dtype", sc.dtype, "--launcher", key[1])
        assert res.exit_code == 2 and why.lower() in res.output.lower(), (key, res.output)


def test_tpu_runs_maxtext_only():
    assert launchers_for(parse_cluster("tpu-v5px64")) == ("maxtext",)
    assert launchers_for(parse_cluster("h100x8")) == TARGETS
    res = _cli("--model", "llama-3.1-8b", "--cluster", "tpu-v5px64", "--launcher", "megatron")
    assert res.exit_code == 2 and "maxtext" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_emit_implies_the_target_and_conflicts_exit_2(tmp_path):
    ref = str(HF_CONFIGS_DIR / "llama-3.1-70b.json")
    args = ["--model", ref, "--cluster", "h100x64", "--seq-len", "8192", "--gbs", "128"]
    res = _cli(*args, "--emit", "deepspeed", "--out", str(tmp_path / "d"), "--json")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "d" / "ds_config.json").exists()
    assert json.loads((tmp_path / "d" / "plan.json").read_text())["plan"]["cp"] == 1
    for bad in (["--launcher", "megatron", "--emit", "deepspeed"], ["--launcher", "deepspeed", "--framework", "fsdp"]):
        res = _cli(*args, *bad)
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output


def test_without_a_target_other_launchers_report_their_best_plan(tmp_path):
    """The issue's first case: the best plan uses CP2; DeepSpeed cannot run it, so --out says DeepSpeed's own
    best plan, its step time and the flag that writes it."""
    ref = str(HF_CONFIGS_DIR / "llama-3.1-70b.json")
    res = _cli("--model", ref, "--cluster", "h100x64", "--seq-len", "8192", "--gbs", "128", "--out",
               str(tmp_path / "o"))
    assert res.exit_code == 0
    plan = json.loads((tmp_path / "o" / "plan.json").read_text())["plan"]
    assert plan["cp"] > 1  # the unconstrained best plan (CP2) keeps today's behaviour
    line = next(x for x in res.output.splitlines() if x.startswith("deepspeed cannot run this plan"))
    assert "its best plan:" in line and " s per step" in line and "--launcher deepspeed" in line
    assert "context parallelism" in line


def test_gpt3_megatron_mode_excludes_unverified_fsdp_with_pp():
    """GPT-3 175B on 64 A100 (seq 2048, gbs 1536, fp16): Megatron-FSDP with PP > 1 is unverified in
    Megatron-LM (launcher_capabilities.md), so it is not searched; Megatron-FSDP without PP still is."""
    model = load_model("gpt3-175b")
    train = TrainingSpec(seq_len=2048, global_batch=1536, dtype="fp16")
    errs = launcher_errors(ParallelPlan(pp=8, vpp=12, dp=8, zero_stage=3, schedule="interleaved"), model, train,
                           "megatron")
    assert any("unverified" in e for e in errs)
    assert launcher_errors(ParallelPlan(dp=64, zero_stage=3), model, train, "megatron") == []
    rule = next(r for r in capabilities("megatron").rules if r.id == "fsdp-with-pp")
    assert not rule.verified and "1455" in rule.source
    res = _cli("--model", "gpt3-175b", "--cluster", "a100x64", "--seq-len", "2048", "--gbs", "1536", "--dtype", "fp16",
               "--json", "--top", "5")
    assert res.exit_code == 0
    for p in json.loads(res.output)["plans"]:
        assert not (p["plan"]["zero_stage"] == 3 and p["plan"]["pp"] > 1), p["plan"]


def test_every_rule_cites_its_source_and_every_table_its_version():
    for t in TARGETS:
        caps = capabilities(t)
        assert caps.version and caps.checked_against and caps.hardware
        assert caps.rules and all(r.source and r.why for r in caps.rules)
        assert len({r.id for r in caps.rules}) == len(caps.rules)


def test_maxtext_target_pipelines_with_gpipe_unless_interleaving_is_pinned():
    base = ["--model", "llama-3.1-8b", "--cluster", "h100x16", "--launcher", "maxtext", "--pp", "2", "--json"]
    res = _cli(*base)
    assert res.exit_code == 0 and json.loads(res.output)["plans"][0]["plan"]["schedule"] == "gpipe"
    res = _cli(*base, "--vpp", "2")  # MaxText's circular repeats
    assert res.exit_code == 0 and json.loads(res.output)["plans"][0]["plan"]["schedule"] == "interleaved"


def test_a_tpu_plan_without_a_launcher_pipelines_as_maxtext_does():
    """Without --launcher a TPU plan is costed with MaxText's stack and --out writes maxtext.yml for it, so its
    pipeline is MaxText's GPipe as with --launcher maxtext (planner.app.inputs.pinned_knobs takes the modelled
    launcher's search defaults). Before 2026-11-28 it was costed as 1F1B, and the maxtext.yml written for it ran
    MaxText's pipeline, whose in-flight activations are not 1F1B's."""
    base = ["--model", "llama-3.1-8b", "--cluster", "tpu-v5px16", "--pp", "2", "--vpp", "1", "--top", "1", "--json"]
    plain, target = _cli(*base), _cli(*base, "--launcher", "maxtext")
    assert plain.exit_code == 0 and target.exit_code == 0, plain.output + target.output
    p, t = json.loads(plain.output)["plans"][0], json.loads(target.output)["plans"][0]
    assert p["plan"]["schedule"] == "gpipe" and p["plan"] == t["plan"] and p["step_time_s"] == t["step_time_s"]
    sized = _cli(*base, "--min-devices")  # the fewest devices are counted for the same plans
    assert sized.exit_code == 0, sized.output
    assert json.loads(sized.output)["plans"][0]["plan"]["schedule"] == "gpipe"


def test_min_devices_respects_the_target():
    res = _cli("--model", "llama-3.1-8b", "--cluster", "h100x16", "--seq-len", "8192", "--gbs", "64", "--launcher",
               "deepspeed",
               "--min-devices", "--json")
    assert res.exit_code == 0
    p = json.loads(res.stdout)["plans"][0]["plan"]  # stderr says the device count
    assert p["cp"] == 1 and p["vpp"] == 1 and not (p["pp"] > 1 and p["zero_stage"] > 1)


def test_default_ranking_writes_the_modelled_stacks_files(tmp_path):
    """issue 24: with no --launcher, gpt-oss-120b on 64 H100 ranks first a plan Megatron-LM (the modelled stack)
    runs, and --out writes Megatron's files for it."""
    out = tmp_path / "o"
    res = CliRunner().invoke(main, ["--model", "gpt-oss-120b", "--cluster", "h100x64", "--seq-len", "4096", "--gbs",
                                    "512", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "megatron_args.json").is_file() and (out / "launch_megatron.sh").is_file()
    plan = json.loads((out / "plan.json").read_text())["plan"]
    model, train = load_model("gpt-oss-120b"), TrainingSpec(seq_len=4096, global_batch=512)
    assert launcher_errors(ParallelPlan(**{k: v for k, v in plan.items() if v is not None}), model, train, "megatron",
                           parse_cluster("h100x64")) == []


def test_a_model_the_modelled_launcher_cannot_run_keeps_to_its_layouts(tmp_path):
    """MaxText cannot run DeepSeek-V2 at all (its per-sequence balance loss), yet the plans are costed with MaxText's
    stack: its plan rules alone still gate the search (planner.app.plan.modelled_launcher), so no listed plan is a
    layout MaxText cannot lay out, and --out names the model's reason alone. Before 2026-11-28 nothing gated such a
    search: the same request's 10 layouts held three TP-2 plans with unsplit experts (MaxText splits experts over the
    tensor axis, expert TP = TP), checked here against the ungated search."""
    from planner.app.inputs import build_inputs
    from planner.app.request import PlanRequest, resolve_target
    from planner.costmodel import Context
    from planner.launchers import model_errors
    from planner.search.engine import SearchOptions, search

    args = ["--model", "deepseek-v2", "--cluster", "tpu-v5px64"]
    model, cluster, train = build_inputs(resolve_target(PlanRequest(model="deepseek-v2", cluster="tpu-v5px64")))
    assert model_errors(model, train, "maxtext", cluster)  # the model itself is out of MaxText's reach

    def broken(plan):
        return launcher_errors(plan, model, train, "maxtext", cluster, plan_rules_only=True)

    ungated = search(Context(model, cluster, train), SearchOptions(top_k=10, distinct_layouts=True, memory_margin=True))
    assert sum(bool(broken(e.plan)) for e in ungated.plans) >= 2
    res = _cli(*args, "--top", "10", "--json")
    assert res.exit_code == 0, res.output
    plans = json.loads(res.stdout)["plans"]
    assert len(plans) == 10
    assert all(broken(ParallelPlan(**{k: v for k, v in p["plan"].items() if v is not None})) == [] for p in plans)
    out = tmp_path / "o"
    res = _cli(*args, "--top", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    said = next(line for line in res.output.splitlines() if line.startswith("not written for maxtext"))
    assert "per-sequence balance loss" in said and "expert TP" not in said and "mesh cannot" not in said


def test_maxtext_is_written_no_plan_that_recomputes_some_layers_only(tmp_path):
    """MaxText's remat policy applies to every layer (no --recompute-num-layers), so a plan costed with 4 of 32 layers
    recomputed gets no maxtext.yml, and the search for MaxText proposes no such plan (launchers.maxtext rule
    whole-layer-remat). Before 2026-11-28 the file was written with remat_policy full and a note: a run recomputing all
    32 layers, slower than the plan costed."""
    out = tmp_path / "o"
    res = _cli("--model", "llama-3.1-8b", "--cluster", "tpu-v5px16", "--pp", "1", "--recompute", "full",
               "--recompute-layers", "4", "--top", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert not (out / "maxtext.yml").exists() and (out / "plan.json").is_file()
    assert "not written for maxtext: MaxText's remat policy applies to every layer: full recompute of 4 of the 32 " \
           "layers per stage has no MaxText equivalent" in res.output
    model = load_model("llama-3.1-8b")
    whole = ParallelPlan(dp=16, micro_batch=1, zero_stage=3, recompute="full", recompute_layers=32)
    # torchtitan 0.3.0's FullAC wraps every block alike (rule whole-block-ac)
    for launcher, fw, hw in (("maxtext", "maxtext", "tpu-v5px16"), ("torchtitan", "fsdp", "h100x16")):
        train, cluster = TrainingSpec(seq_len=4096, global_batch=1024, framework=fw), parse_cluster(hw)
        assert launcher_errors(whole, model, train, launcher, cluster) == []
        assert "4 of the 32 layers per stage" in " ".join(
            launcher_errors(whole.model_copy(update={"recompute_layers": 4}), model, train, launcher, cluster))


def test_a_launcher_that_runs_neither_the_model_nor_any_layout_says_so(tmp_path):
    """DeepSeek-V2 (MaxText cannot run its per-sequence balance loss) with 61 layers in FP8 on 128 v5p chips: MaxText's
    plan rules refuse every layout (FP8 takes no gradient accumulation; 61 layers split evenly over no pipeline), so
    the plans are costed with its stack ungated, and each says that MaxText lays out none of them."""
    from planner.catalog.data import data_dir

    spec = (data_dir("model_specs") / "deepseek-v2.yaml").read_text()
    assert "  num_hidden_layers: 60\n" in spec
    model = tmp_path / "dsv2-61.yaml"
    model.write_text(spec.replace("  num_hidden_layers: 60\n", "  num_hidden_layers: 61\n"))
    res = _cli("--model", str(model), "--cluster", "tpu-v5px128", "--dtype", "fp8", "--top", "2", "--json")
    assert res.exit_code == 0, res.output
    plans = json.loads(res.stdout)["plans"]
    assert plans and all(any(w.startswith("maxtext lays out none of these layouts (nor runs the model)")
                             for w in p["warnings"]) for p in plans)


def test_megatron_is_written_no_zero2(tmp_path):
    """Megatron-LM's distributed optimizer keeps its fp32 main-gradient buffers full size (ZeRO-1's memory: its docs
    give 6 + 12/d bytes per parameter), so a plan costed as ZeRO-2 (gradients sharded) is no plan it runs: --launcher
    megatron refuses it (exit 2, rule no-zero2), and without a launcher it is costed as pinned with no Megatron files.
    Before 2026-11-28 the files were written with --use-distributed-optimizer and a note, for a run needing
    4 bytes per parameter more than the plan costed."""
    args = ["--model", "llama-3.1-8b", "--cluster", "h100x16", "--zero", "2", "--top", "1"]
    res = _cli(*args, "--launcher", "megatron")
    assert res.exit_code == 2 and "Megatron-LM has no ZeRO-2" in res.output, res.output
    out = tmp_path / "o"
    res = _cli(*args, "--out", str(out))
    assert res.exit_code == 0, res.output
    assert not (out / "megatron_args.json").exists()
    assert "megatron cannot run the pinned knobs (--zero 2)" in res.output
    assert "not written for megatron: Megatron-LM has no ZeRO-2" in res.output
