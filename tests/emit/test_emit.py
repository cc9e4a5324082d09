"""Pure-python tests of the launch-config emitters (no launcher library needed).

The real libraries judge the same files in tests/consumers/ (marker `consumers`)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess

import pytest
import yaml
from consumers.cases import (
    CONSUMER_CASES,
    DEEPSEEK_V3,
    GOLDEN_CASES,
    LLAMA31_8B,
    LLAMA31_70B,
    MIXTRAL_8X7B,
    Case,
    catalog_cases,
    cluster,
)
from support import SOURCED_HF_CONFIGS_DIR

import planner.emit as emit_mod
from planner.emit import LAUNCHERS, MANIFEST, emit_all, write_launch_configs
from planner.emit.common import run_length_expr
from planner.errors import InputError
from planner.specs import ParallelPlan, TrainingSpec

ALL = CONSUMER_CASES + GOLDEN_CASES + catalog_cases()


def files_of(case, launchers=None):
    return case.emit(launchers)[0]


def mg_args(case) -> list[str]:
    return json.loads(files_of(case, ["megatron"])["megatron_args.json"])["args"]


def flag(args: list[str], name: str):
    """Value after `name`, True for a bare flag, None when absent."""
    if name not in args:
        return None
    i = args.index(name)
    nxt = args[i + 1] if i + 1 < len(args) else "--"
    return True if nxt.startswith(("--", "activation-checkpoint:")) else nxt


def case_with(plan: ParallelPlan, model=LLAMA31_70B, hw="h100-sxm-80gb", count=None, train=None, **ckw) -> Case:
    train = train or TrainingSpec(seq_len=4096, global_batch=512)
    return Case("adhoc", model, cluster(hw, count or plan.devices, **ckw), train, plan)


DENSE = case_with(ParallelPlan(tp=8, pp=4, vpp=5, cp=2, dp=2, recompute="full", zero_stage=1))


# ----------------------------------------------------------------------------------------- emit_all


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_every_case_emits_or_explains_every_launcher(case):
    files, skipped = case.emit()
    assert "plan.json" in files
    made = {"megatron": "megatron_args.json", "deepspeed": "ds_config.json", "maxtext": "maxtext.yml",
            "jax": "jax_mesh.json", "torchtitan": "torchtitan_args.json"}
    for launcher, fname in made.items():
        assert (fname in files) != (launcher in skipped), launcher
        if launcher in skipped:
            reason = skipped[launcher]
            assert reason and "\n" not in reason
    for launcher in case.expect_emit:
        assert launcher not in skipped, f"{launcher}: {skipped.get(launcher)}"
    for launcher, text in case.expect_skip.items():
        assert text.lower() in skipped[launcher].lower()
    for name, text in files.items():
        assert text.endswith("\n")
        if name.endswith(".json"):
            json.loads(text)
        if name.endswith(".yml"):
            yaml.safe_load(text)


def test_emit_subset_and_unknown_launcher():
    files, skipped = DENSE.emit({"megatron"})
    assert set(files) == {"plan.json", "megatron_args.json", "launch_megatron.sh"} and not skipped
    with pytest.raises(InputError, match="unknown launcher"):
        DENSE.emit({"megatron", "nemo"})
    assert set(LAUNCHERS) == {"megatron", "deepspeed", "maxtext", "jax", "torchtitan"}


def test_inconsistent_plans_are_input_errors():
    with pytest.raises(InputError, match="devices"):
        emit_all(LLAMA31_70B, cluster("h100-sxm-80gb", 64), TrainingSpec(global_batch=512),
                 ParallelPlan(tp=8, dp=16), None)
    with pytest.raises(InputError, match="not divisible by dp\\*micro_batch"):
        emit_all(LLAMA31_70B, cluster("h100-sxm-80gb", 64), TrainingSpec(global_batch=100),
                 ParallelPlan(tp=8, dp=8, micro_batch=2), None)
    with pytest.raises(InputError, match="mixture-of-experts"):
        emit_all(LLAMA31_70B, cluster("h100-sxm-80gb", 64), TrainingSpec(global_batch=64),
                 ParallelPlan(tp=8, dp=8, ep=2), None)


def test_plan_json_keeps_the_prediction_and_adds_names():
    pred = {"plan": DENSE.plan.knobs(), "step_time_s": 12.5, "memory": {"peak_gib": 70.1}, "model": {"x": 1}}
    files, _ = emit_all(DENSE.model, DENSE.cluster, DENSE.train, DENSE.plan, pred, {"megatron"})
    doc = json.loads(files["plan.json"])
    assert doc["step_time_s"] == 12.5 and doc["memory"] == {"peak_gib": 70.1} and doc["model"] == {"x": 1}
    assert doc["model_name"] == "llama-3.1-70b" and doc["cluster_name"] == "h100-sxm-80gbx128"
    assert doc["devices"] == 128
    bare = json.loads(emit_all(DENSE.model, DENSE.cluster, DENSE.train, DENSE.plan, None, set())[0]["plan.json"])
    assert bare["plan"]["tp"] == 8 and bare["training"]["global_batch"] == 512


# ----------------------------------------------------------------------------------------- Megatron


def test_megatron_dense_flags():
    a = mg_args(DENSE)
    assert flag(a, "--tensor-model-parallel-size") == "8" and flag(a, "--pipeline-model-parallel-size") == "4"
    assert flag(a, "--num-layers-per-virtual-pipeline-stage") == "4"  # 80 / 4 ranks / 5
    assert flag(a, "--sequence-parallel") is True
    assert flag(a, "--context-parallel-size") == "2" and flag(a, "--cp-comm-type") == "p2p"
    assert flag(a, "--group-query-attention") and flag(a, "--num-query-groups") == "8"
    assert flag(a, "--kv-channels") == "128" and flag(a, "--swiglu") and flag(a, "--normalization") == "RMSNorm"
    assert flag(a, "--position-embedding-type") == "rope" and flag(a, "--untie-embeddings-and-output-weights")
    assert flag(a, "--disable-bias-linear") and flag(a, "--vocab-size") == "128256"
    assert flag(a, "--micro-batch-size") == "1" and flag(a, "--global-batch-size") == "512"
    assert flag(a, "--recompute-granularity") == "full" and flag(a, "--recompute-method") == "uniform"
    assert flag(a, "--use-distributed-optimizer") and flag(a, "--overlap-grad-reduce")
    assert flag(a, "--overlap-param-gather") and flag(a, "--bf16")
    assert flag(a, "--num-experts") is None and flag(a, "--fp8-format") is None
    env = json.loads(files_of(DENSE, ["megatron"])["megatron_args.json"])["env"]
    assert env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert flag(a, "--rotary-percent") is None  # whole heads rotate: megatron's default 1.0


def test_megatron_partial_rotary():
    """Nemotron-4 340B rotates half of each head (its config.json partial_rotary_factor 0.5): --rotary-percent 0.5,
    which megatron-core's GPTModel hands to RotaryEmbedding (the round trip reads it back from parse_args)."""
    from planner.catalog.models import load_model

    a = mg_args(case_with(ParallelPlan(tp=8, pp=8, dp=1, recompute="full", zero_stage=1),
                          model=load_model("nemotron-4-340b")))
    assert flag(a, "--rotary-percent") == "0.5"


def test_megatron_flags_that_depend_on_degrees():
    a = mg_args(case_with(ParallelPlan(tp=1, dp=64, zero_stage=0, sequence_parallel=True)))
    for absent in ("--sequence-parallel", "--num-layers-per-virtual-pipeline-stage", "--context-parallel-size",
                   "--use-distributed-optimizer", "--overlap-param-gather"):
        assert flag(a, absent) is None, absent
    assert flag(a, "--overlap-grad-reduce")
    env = json.loads(files_of(case_with(ParallelPlan(tp=1, dp=64)), ["megatron"])["megatron_args.json"])["env"]
    assert env == {}
    a2a = mg_args(case_with(ParallelPlan(tp=8, cp=4, dp=2, cp_comm="a2a")))
    assert flag(a2a, "--cp-comm-type") == "a2a"


def test_megatron_cuda_max_connections_only_before_blackwell_and_without_fsdp():
    b200 = case_with(ParallelPlan(tp=8, dp=2), hw="b200-sxm-180gb")
    assert json.loads(files_of(b200, ["megatron"])["megatron_args.json"])["env"] == {}
    fsdp_tp = case_with(ParallelPlan(tp=2, dp=8, zero_stage=3), model=LLAMA31_8B,
                        train=TrainingSpec(global_batch=64))
    assert json.loads(files_of(fsdp_tp, ["megatron"])["megatron_args.json"])["env"] == {}


def test_megatron_recompute_mapping():
    sel = mg_args(case_with(ParallelPlan(tp=8, dp=16, recompute="selective")))
    assert flag(sel, "--recompute-granularity") == "selective" and flag(sel, "--recompute-method") is None
    block = mg_args(case_with(ParallelPlan(tp=8, pp=4, dp=4, recompute="full", recompute_layers=6)))
    assert flag(block, "--recompute-method") == "block" and flag(block, "--recompute-num-layers") == "6"
    vblock = mg_args(case_with(ParallelPlan(tp=8, pp=4, vpp=5, dp=4, recompute="full", recompute_layers=10)))
    assert flag(vblock, "--recompute-num-layers") == "2"  # per virtual stage: 10 per rank / 5 chunks
    # a short first rank (14 of 80 layers, the others 22): 16 per rank is partial on the 22-layer ranks (each rank
    # recomputes min(16, its layers), as costed), so block 16; before 2026-11-28 the first rank's size was read as
    # every rank's, and uniform recomputed all 22
    short = mg_args(case_with(ParallelPlan(tp=8, pp=4, dp=4, recompute="full", recompute_layers=16,
                                           first_stage_layers=14)))
    assert flag(short, "--recompute-method") == "block" and flag(short, "--recompute-num-layers") == "16"
    none = mg_args(case_with(ParallelPlan(tp=8, dp=16)))
    assert flag(none, "--recompute-granularity") is None


def test_megatron_zero3_offload_hsdp_and_fp8():
    z3 = mg_args(case_with(ParallelPlan(dp=8, zero_stage=3, zero_shard_size=4), model=LLAMA31_8B,
                           train=TrainingSpec(global_batch=64)))
    assert flag(z3, "--use-megatron-fsdp") and flag(z3, "--data-parallel-sharding-strategy") == "optim_grads_params"
    assert flag(z3, "--ckpt-format") == "fsdp_dtensor" and flag(z3, "--num-distributed-optimizer-instances") == "2"
    off = mg_args(case_with(ParallelPlan(tp=8, dp=16, offload_optimizer=True)))
    assert flag(off, "--optimizer-cpu-offload") and flag(off, "--use-precision-aware-optimizer")
    fp8 = mg_args(case_with(ParallelPlan(tp=8, dp=16), train=TrainingSpec(global_batch=512, dtype="fp8")))
    assert flag(fp8, "--fp8-format") == "hybrid" and flag(fp8, "--fp8-recipe") == "tensorwise" and flag(fp8, "--bf16")
    # the emitted recipe is the one costed: tensorwise by default on Blackwell too (Megatron-Bridge's FP8-CS rows
    # run 4-6% faster than FP8-MX), mxfp8 when planned, in E4M3
    fp8b = mg_args(case_with(ParallelPlan(tp=8, dp=16), hw="b200-sxm-180gb",
                             train=TrainingSpec(global_batch=512, dtype="fp8")))
    assert flag(fp8b, "--fp8-recipe") == "tensorwise"
    mx = mg_args(case_with(ParallelPlan(tp=8, dp=16), hw="b200-sxm-180gb",
                           train=TrainingSpec(global_batch=512, dtype="fp8", fp8_recipe="mxfp8")))
    assert flag(mx, "--fp8-recipe") == "mxfp8" and flag(mx, "--fp8-format") == "e4m3"
    fp16 = mg_args(case_with(ParallelPlan(tp=8, dp=16), train=TrainingSpec(global_batch=512, dtype="fp16")))
    assert flag(fp16, "--fp16") and flag(fp16, "--bf16") is None
    _, skipped = case_with(ParallelPlan(tp=8, dp=8), hw="a100-sxm-80gb",
                           train=TrainingSpec(global_batch=512, dtype="fp8")).emit({"megatron"})
    assert "FP8" in skipped["megatron"]


def test_megatron_moe_and_mla_flags():
    ds = next(c for c in CONSUMER_CASES if c.model is DEEPSEEK_V3)
    a = mg_args(ds)
    assert flag(a, "--num-experts") == "256" and flag(a, "--moe-router-topk") == "8"
    assert flag(a, "--moe-ffn-hidden-size") == "2048" and flag(a, "--moe-layer-freq") == "([0]*3+[1]*58)"
    assert flag(a, "--moe-shared-expert-intermediate-size") == "2048"
    assert flag(a, "--expert-model-parallel-size") == "16" and flag(a, "--expert-tensor-parallel-size") == "1"
    assert flag(a, "--multi-latent-attention") and flag(a, "--q-lora-rank") == "1536"
    assert flag(a, "--kv-lora-rank") == "512" and flag(a, "--qk-head-dim") == "128"
    assert flag(a, "--qk-pos-emb-head-dim") == "64" and flag(a, "--v-head-dim") == "128"
    assert flag(a, "--group-query-attention") is None and flag(a, "--kv-channels") is None
    assert flag(a, "--decoder-first-pipeline-num-layers") == "13"
    assert flag(a, "--decoder-last-pipeline-num-layers") == "16"
    mx = mg_args(next(c for c in CONSUMER_CASES if c.model is MIXTRAL_8X7B))
    assert flag(mx, "--moe-layer-freq") is None and flag(mx, "--moe-shared-expert-intermediate-size") is None
    assert run_length_expr([0, 0, 1, 1, 1, 0]) == "([0]*2+[1]*3+[0]*1)"


def test_megatron_cannot_express():
    cases = {
        "gpipe": case_with(ParallelPlan(tp=8, pp=4, dp=4, schedule="gpipe")),
        "zero-bubble": case_with(ParallelPlan(tp=8, pp=4, vpp=2, dp=4, schedule="zb")),
        "tpu": case_with(ParallelPlan(tp=4, dp=16), hw="tpu-v5p"),
    }
    for why, c in cases.items():
        _, skipped = c.emit({"megatron"})
        assert why.lower() in skipped["megatron"].lower(), (why, skipped)


def test_megatron_states_any_layer_split_as_a_layout():
    """Layers pp does not divide, with no first/last stage sizes, were refused ("do not split evenly"); Megatron
    states any split as --pipeline-model-parallel-layout (megatron-core 0.19.2; the consumer test runs it): the cost
    model's stage counts (partition.stage_layer_counts), the embedding first and the loss last."""
    from planner.costmodel.partition import stage_layer_counts

    c = case_with(ParallelPlan(tp=8, pp=3, dp=2), count=48, train=TrainingSpec(global_batch=60))
    files, skipped = c.emit({"megatron"})
    assert "megatron" not in skipped
    args = json.loads(files["megatron_args.json"])["args"]
    layout = args[args.index("--pipeline-model-parallel-layout") + 1]
    stages = layout.split("|")
    assert len(stages) == 3 and stages[0].startswith("E") and stages[-1].endswith("L")
    counts = [int(st.strip("EL").split("*")[1]) for st in stages]
    assert counts == stage_layer_counts(c.model.num_layers, 3) and c.model.num_layers % 3
    assert not {"--decoder-first-pipeline-num-layers", "--num-layers-per-virtual-pipeline-stage"} & set(args)


def test_megatron_layout_leaves_the_mtp_module_room_as_megatron_bridge_does():
    """DeepSeek-V3 on pp 4 x vpp 4 with the MTP split 16/16/16/13 (partition.mtp_split): the layout is Megatron-Bridge's
    own for that shape (recipes/deepseek/deepseek_v3.py _get_deepseek_v3_pipeline_layout at 067f987: embedding + 4,
    4 x 14, 1 + mtp + loss), the last rank's last virtual stage taking the MTP module's 3 layer-equivalents fewer."""
    from planner.catalog.hardware import parse_cluster
    from planner.catalog.models import get_model
    from planner.emit.megatron import pipeline_layout
    from planner.launchers.job import make_job

    m = get_model("deepseek-v3")
    plan = ParallelPlan(tp=1, pp=4, vpp=4, dp=64, ep=64, schedule="interleaved", first_stage_layers=16,
                        last_stage_layers=13)
    layout = pipeline_layout(make_job(m, parse_cluster("gb200x256"), TrainingSpec(seq_len=4096, global_batch=2048),
                                      plan))
    assert layout == "|".join(["Et*4"] + ["t*4"] * 14 + ["tmL"])


def test_megatron_launch_script_is_valid_bash_with_the_nodes():
    files = files_of(DENSE, ["megatron"])
    sh = files["launch_megatron.sh"]
    assert "--nnodes 16 --nproc-per-node 8" in sh and "export CUDA_DEVICE_MAX_CONNECTIONS=1" in sh
    assert sh.startswith("#!/usr/bin/env bash") and '"$@"' in sh
    for tok in mg_args(DENSE):
        assert tok in sh
    subprocess.run(["bash", "-n"], input=sh, text=True, check=True)
    ds = files_of(next(c for c in CONSUMER_CASES if c.model is DEEPSEEK_V3), ["megatron"])["launch_megatron.sh"]
    assert "'([0]*3+[1]*58)'" in ds  # quoted for the shell
    subprocess.run(["bash", "-n"], input=ds, text=True, check=True)


# ----------------------------------------------------------------------------------------- DeepSpeed


@pytest.mark.parametrize("case", [c for c in ALL if "ds_config.json" in files_of(c, ["deepspeed"])],
                         ids=lambda c: c.name)
def test_deepspeed_batch_triangle(case):
    cfg = json.loads(files_of(case, ["deepspeed"])["ds_config.json"])
    p = case.plan
    assert cfg["train_batch_size"] == case.train.global_batch
    assert cfg["train_micro_batch_size_per_gpu"] == p.micro_batch
    assert cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * p.dp == cfg["train_batch_size"]
    assert cfg["zero_optimization"]["stage"] == p.zero_stage
    args = json.loads(files_of(case, ["deepspeed"])["deepspeed_args.json"])
    if args.get("path") == "hf":  # the transformers model: data x Ulysses sequence parallel ranks
        assert args["data_parallel_size"] * args["sequence_parallel_size"] == case.cluster.count
        return
    a = args["args"]
    assert int(flag(a, "--tensor-model-parallel-size")) * int(flag(a, "--pipeline-model-parallel-size")) * \
        args["data_parallel_size"] == case.cluster.count
    assert flag(a, "--deepspeed_config") == "ds_config.json"


def test_deepspeed_blocks():
    off = next(c for c in CONSUMER_CASES if c.name == "llama2-70b-zero1-offload-tp8-16xa100")
    cfg = json.loads(files_of(off, ["deepspeed"])["ds_config.json"])
    assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert cfg["fp16"]["enabled"] and "bf16" not in cfg
    z3 = json.loads(files_of(next(c for c in CONSUMER_CASES if c.plan.zero_stage == 3 and c.cluster.count == 8),
                             ["deepspeed"])["ds_config.json"])
    assert z3["bf16"] == {"enabled": True} and "stage3_prefetch_bucket_size" in z3["zero_optimization"]


def test_deepspeed_cannot_express():
    cases = {
        "context parallelism": DENSE,
        "expert parallelism": next(c for c in CONSUMER_CASES if c.model is MIXTRAL_8X7B  # the HF path: dp only
                                   and c.train.moe_capacity_factor is None),
        "stage 0-1 only": case_with(ParallelPlan(tp=8, pp=2, dp=8, zero_stage=2)),
        "interleaved": case_with(ParallelPlan(tp=8, pp=2, vpp=2, dp=8)),
        "hybrid sharding": case_with(ParallelPlan(tp=8, dp=16, zero_stage=3, zero_shard_size=8)),
        "fp8": case_with(ParallelPlan(tp=8, dp=16), train=TrainingSpec(global_batch=512, dtype="fp8")),
    }
    for why, c in cases.items():
        _, skipped = c.emit({"deepspeed"})
        assert why.lower() in skipped["deepspeed"].lower(), (why, skipped)


# ----------------------------------------------------------------------------------------- MaxText / JAX


def mt_cfg(case) -> dict:
    return yaml.safe_load(files_of(case, ["maxtext"])["maxtext.yml"])


@pytest.mark.parametrize("case", [c for c in ALL if "maxtext.yml" in files_of(c, ["maxtext"])],
                         ids=lambda c: c.name)
def test_maxtext_batch_and_mesh_arithmetic(case):
    cfg = mt_cfg(case)
    p, world = case.plan, case.cluster.count
    assert cfg["base_config"] == "base.yml"
    micro = cfg["per_device_batch_size"] * world
    assert round(micro * cfg["gradient_accumulation_steps"]) == case.train.global_batch
    nmb = case.train.global_batch // (p.micro_batch * p.dp)
    if p.pp > 1:
        assert cfg["num_pipeline_microbatches"] == nmb and cfg["num_pipeline_repeats"] == p.vpp
    else:
        assert cfg["gradient_accumulation_steps"] == nmb
    axes = ("data", "pipeline", "fsdp", "expert", "context", "tensor")
    ici = {a: cfg[f"ici_{a}_parallelism"] for a in axes}
    dcn = {a: cfg[f"dcn_{a}_parallelism"] for a in axes}
    prod = lambda d: __import__("math").prod(d.values())  # noqa: E731
    assert prod(dcn) == cfg["num_slices"] and prod(ici) * prod(dcn) == world
    assert ici["tensor"] * dcn["tensor"] == p.tp and ici["pipeline"] * dcn["pipeline"] == p.pp
    if p.custom_remat is not None:  # MaxText's custom policy: one key per named tensor (MT:configs/base.yml)
        assert cfg["remat_policy"] == "custom"
        assert {n: cfg[n] for n in p.remat_offloaded + p.remat_device} == \
            {n: "offload" for n in p.remat_offloaded} | {n: "device" for n in p.remat_device}
    else:
        assert cfg["remat_policy"] == {"none": "minimal_with_context", "selective": "minimal",
                                       "full": "full"}[p.recompute]


def test_maxtext_mapping_details():
    tpu = next(c for c in CONSUMER_CASES if c.name == "llama8b-tp4-hsdp-2x32-tpu-v5p")
    cfg = mt_cfg(tpu)
    assert cfg["hardware"] == "tpu" and cfg["num_slices"] == 2
    assert (cfg["dcn_data_parallelism"], cfg["ici_fsdp_parallelism"], cfg["ici_tensor_parallelism"]) == (2, 8, 4)
    uly = mt_cfg(case_with(ParallelPlan(tp=2, cp=4, dp=16, cp_comm="a2a"), hw="tpu-v5p", domain_size=32))
    assert uly["context_parallel_strategy"] == "ulysses"
    _, gpu = case_with(ParallelPlan(tp=8, cp=4, dp=4, cp_comm="a2a")).emit({"maxtext"})
    assert "tpu only" in gpu["maxtext"].lower()  # MT:configs/types.py:4071-4130
    z1 = mt_cfg(case_with(ParallelPlan(tp=8, dp=16, zero_stage=1)))
    assert z1["shard_optimizer_over_data"] is True and z1["hardware"] == "gpu"
    ds = mt_cfg(case_with(ParallelPlan(dp=64, ep=16), model=DEEPSEEK_V3, train=TrainingSpec(global_batch=256)))
    assert ds["decoder_block"] == "deepseek" and ds["attention_type"] == "mla" and ds["first_num_dense_layers"] == 3
    assert ds["num_experts"] == 256 and ds["shared_experts"] == 1 and ds["ici_expert_parallelism"] == 8
    assert "sparse_matmul" not in ds and "capacity_factor" not in ds  # dropless: MaxText's megablox default


def test_maxtext_tpu_context_parallelism_runs_on_tokamax():
    """maxtext 0.2.5 runs TPU ring and Ulysses attention on the Tokamax splash kernels only, and asserts what those
    take (configs/types.py:5211-5290, layers/attention_op.py:713-770): the config turns the kernels on, and the plans
    they cannot run are not written (planner.launchers.maxtext's tpu-* rules). Before, every TPU plan with cp > 1
    wrote a maxtext.yml that MaxText refuses (tests/consumers/test_jax_maxtext_consumer.py holds both against
    pyconfig)."""
    from planner.catalog.models import load_model

    train = TrainingSpec(seq_len=32768, global_batch=64)

    def tpu(plan, model=LLAMA31_8B):
        return case_with(plan, model=model, hw="tpu-v5p", domain_size=64, train=train)

    ring = mt_cfg(tpu(ParallelPlan(tp=4, cp=4, dp=4)))
    assert ring["context_parallel_strategy"] == "ring" and ring["use_tokamax_splash"] is True
    assert "context_parallel_load_balance" not in ring  # base.yml's true: the balanced ring, as costed
    uly = mt_cfg(tpu(ParallelPlan(tp=2, cp=4, dp=8, cp_comm="a2a")))  # 8 KV heads over tp x cp = 8
    assert uly["context_parallel_strategy"] == "ulysses" and uly["use_tokamax_splash"] is True
    assert uly["context_parallel_load_balance"] is False
    gpu = mt_cfg(case_with(ParallelPlan(tp=8, cp=4, dp=4), model=LLAMA31_8B, train=train))
    assert gpu["context_parallel_strategy"] == "ring" and "use_tokamax_splash" not in gpu  # GPU ring: its own kernel
    assert "use_tokamax_splash" not in mt_cfg(tpu(ParallelPlan(tp=4, dp=16)))
    oss = load_model("gpt-oss-20b")  # sliding-window layers and attention sinks
    for kind in ("ring", "a2a"):
        _, skipped = tpu(ParallelPlan(tp=4, cp=4, dp=4, cp_comm=kind), model=oss).emit({"maxtext"})
        assert "global attention only" in skipped["maxtext"] and "attention sinks" in skipped["maxtext"]
    mla = DEEPSEEK_V3  # MLA and one MTP layer
    _, skipped = tpu(ParallelPlan(cp=4, dp=16, ep=16), model=mla).emit({"maxtext"})
    assert "packed sequences" in skipped["maxtext"] and "does not support MTP layers" in skipped["maxtext"]
    _, skipped = tpu(ParallelPlan(cp=4, dp=16, ep=16, cp_comm="a2a"), model=mla).emit({"maxtext"})
    assert "not MLA" in skipped["maxtext"]
    # and on a GPU MaxText's flash kernel takes no sinks at all (attention_op.py validate_gpu_flash_attention)
    _, skipped = case_with(ParallelPlan(tp=4, dp=4), model=oss, train=train).emit({"maxtext"})
    assert "cudnn_flash_te" in skipped["maxtext"]
    # MTP beside the load-balanced token order, on any hardware (multi_token_prediction.py:502-506)
    _, skipped = case_with(ParallelPlan(cp=4, dp=16, ep=16), model=mla, train=train).emit({"maxtext"})
    assert "does not support MTP layers" in skipped["maxtext"]
    unfused = TrainingSpec(seq_len=32768, global_batch=64, attention_impl="unfused")
    _, skipped = case_with(ParallelPlan(tp=4, cp=4, dp=4), model=LLAMA31_8B, hw="tpu-v5p", domain_size=64,
                           train=unfused).emit({"maxtext"})
    assert "flash kernel only" in skipped["maxtext"]


def test_maxtext_splits_kv_heads_whole_and_gpt_oss_dropless():
    """maxtext 0.2.5 shards the KV heads of a non-MLA model over the tensor axis, and under Ulysses over the context
    axis too, and refuses a split that cuts a head (layers/attentions.py:629-640; the Tokamax ring and Ulysses
    kernels assert the same); its gpt_oss block runs dropless only (configs/types.py:5009-5010). Before, such plans were
    written (Qwen3-30B-A3B, 4 KV heads, at tp 8; gpt-oss with a capacity factor) and failed at model build or at
    config load."""
    from planner.catalog.models import load_model

    train = TrainingSpec(seq_len=32768, global_batch=64)

    def tpu(plan, model=LLAMA31_8B, tr=train):
        return case_with(plan, model=model, hw="tpu-v5p", domain_size=64, train=tr)

    assert "maxtext.yml" in files_of(tpu(ParallelPlan(tp=8, dp=8)), ["maxtext"])  # 8 KV heads over tp 8
    _, skipped = tpu(ParallelPlan(tp=16, dp=4)).emit({"maxtext"})
    assert "8 KV heads do not split over 16" in skipped["maxtext"]
    _, skipped = tpu(ParallelPlan(tp=4, cp=4, dp=4, cp_comm="a2a")).emit({"maxtext"})  # Ulysses: x cp
    assert "8 KV heads do not split over 16" in skipped["maxtext"]
    assert "maxtext.yml" in files_of(tpu(ParallelPlan(tp=4, cp=4, dp=4)), ["maxtext"])  # ring: tp only
    mla = tpu(ParallelPlan(tp=16, dp=4, etp=16), model=DEEPSEEK_V3, tr=TrainingSpec(global_batch=64))
    assert "maxtext.yml" in files_of(mla, ["maxtext"])  # MLA: its projections are not split by KV head
    oss = load_model("gpt-oss-20b")
    cf = TrainingSpec(seq_len=4096, global_batch=64, moe_capacity_factor=1.25)
    _, skipped = tpu(ParallelPlan(dp=64, ep=8), model=oss, tr=cf).emit({"maxtext"})
    assert "the gpt_oss block runs dropless only" in skipped["maxtext"]
    assert "maxtext.yml" in files_of(tpu(ParallelPlan(dp=64, ep=8), model=oss, tr=TrainingSpec(global_batch=64)),
                                     ["maxtext"])


def test_maxtext_capacity_factor_runs_the_costed_dense_einsum_path():
    """A capacity-padded MoE plan is costed as MaxText's dense_matmul (Stack.moe_capacity_einsum): its config turns
    sparse_matmul and megablox off, as tpu-recipes' mixtral_8x7b_dropped does."""
    cf = mt_cfg(case_with(ParallelPlan(dp=64, ep=8), model=MIXTRAL_8X7B,
                          train=TrainingSpec(seq_len=4096, global_batch=256, moe_capacity_factor=1.25)))
    assert (cf["capacity_factor"], cf["sparse_matmul"], cf["megablox"]) == (1.25, False, False)


def test_maxtext_and_jax_cannot_express():
    uneven = next(c for c in CONSUMER_CASES if c.model is DEEPSEEK_V3)
    _, skipped = uneven.emit({"maxtext", "jax"})
    assert "evenly" in skipped["maxtext"] and "stage" in skipped["jax"]
    _, s2 = case_with(ParallelPlan(tp=2, dp=32, ep=8, etp=1), model=MIXTRAL_8X7B,
                      train=TrainingSpec(global_batch=256)).emit({"maxtext"})
    assert "tensor" in s2["maxtext"]


@pytest.mark.parametrize("case", [c for c in ALL if "jax_mesh.json" in files_of(c, ["jax"])], ids=lambda c: c.name)
def test_jax_mesh_document(case):
    doc = json.loads(files_of(case, ["jax"])["jax_mesh.json"])
    import math
    assert math.prod(doc["mesh_shape"]) == case.cluster.count == doc["devices"]
    assert [i * d for i, d in zip(doc["ici_mesh_shape"], doc["dcn_mesh_shape"], strict=True)] == doc["mesh_shape"]
    assert math.prod(doc["dcn_mesh_shape"]) == doc["num_slices"]
    axes = set(doc["axis_names"])
    for entry in list(doc["param_specs"].values()) + list(doc["activation_specs"].values()):
        assert len(entry["spec"]) == len(entry["shape"])
        for s in entry["spec"]:
            for a in (s if isinstance(s, list) else [s]):
                assert a is None or a in axes
        for d in entry["shape"]:
            assert d in doc["dims"]
    size = dict(zip(doc["axis_names"], doc["mesh_shape"], strict=True))
    for name, entry in doc["param_specs"].items():  # the real model's shapes shard evenly
        for d, s in zip(entry["shape"], entry["spec"], strict=False):
            k = math.prod(size[a] for a in (s if isinstance(s, list) else [s]) if a)
            assert doc["dims"][d] % k == 0, (name, d, s)


# ----------------------------------------------------------------------------------------- torchtitan


def tt_args(case) -> list[str]:
    return json.loads(files_of(case, ["torchtitan"])["torchtitan_args.json"])["args"]


def test_torchtitan_args():
    a = tt_args(DENSE)
    assert a[:4] == ["--module", "llama3", "--config", "llama3_70b"]
    assert flag(a, "--parallelism.tensor_parallel_degree") == "8"
    assert flag(a, "--parallelism.pipeline_parallel_degree") == "4"
    assert flag(a, "--parallelism.pipeline_parallel_schedule") == "Interleaved1F1B"
    assert flag(a, "--parallelism.pipeline_parallel_layers_per_stage") == "4"
    assert flag(a, "--parallelism.context_parallel_degree") == "2"
    assert flag(a, "--parallelism.enable_sequence_parallel") is True
    assert flag(a, "--training.disable_cuda_graphs") is True
    assert flag(a, "--training.local_batch_size") == "256"  # whole per-rank batch, split into PP micro-batches
    assert flag(a, "--training.global_batch_size") == "512" and a[-1] == "activation-checkpoint:full"
    hsdp = tt_args(case_with(ParallelPlan(dp=16, zero_stage=3, zero_shard_size=8, micro_batch=2), model=LLAMA31_8B,
                             train=TrainingSpec(global_batch=64)))
    assert flag(hsdp, "--parallelism.data_parallel_replicate_degree") == "2"
    assert flag(hsdp, "--parallelism.data_parallel_shard_degree") == "8"
    assert flag(hsdp, "--training.local_batch_size") == "2" and flag(hsdp, "--training.disable_cuda_graphs") is None
    ddp = tt_args(case_with(ParallelPlan(dp=8, zero_stage=0), model=LLAMA31_8B, train=TrainingSpec(global_batch=64)))
    assert flag(ddp, "--parallelism.data_parallel_replicate_degree") == "8"
    assert flag(ddp, "--parallelism.data_parallel_shard_degree") == "1"
    zbv = tt_args(case_with(ParallelPlan(tp=8, pp=4, vpp=2, dp=4, schedule="zb")))
    assert flag(zbv, "--parallelism.pipeline_parallel_schedule") == "ZBVZeroBubble"


def test_torchtitan_cannot_express():
    cases = {
        "expert tensor parallelism": case_with(ParallelPlan(pp=4, dp=8, ep=8, etp=2, tp=2), model=DEEPSEEK_V3,
                                               count=64, train=TrainingSpec(global_batch=256)),
        "ring attention only": case_with(ParallelPlan(tp=8, cp=4, dp=4, cp_comm="a2a")),
        "config_registry": case_with(ParallelPlan(dp=8), model=LLAMA31_8B.model_copy(update={"qkv_bias": True}),
                                     train=TrainingSpec(global_batch=64)),
        "fp16": case_with(ParallelPlan(tp=8, dp=16), train=TrainingSpec(global_batch=512, dtype="fp16")),
        "float8": case_with(ParallelPlan(tp=8, dp=16), train=TrainingSpec(global_batch=512, dtype="fp8")),
        "tpu": case_with(ParallelPlan(tp=4, dp=16), hw="tpu-v5p"),
    }
    for why, c in cases.items():
        _, skipped = c.emit({"torchtitan"})
        assert why.lower() in skipped["torchtitan"].lower(), (why, skipped)


def test_torchtitan_own_module_for_a_model_without_registry_config():
    """Mixtral has no torchtitan 0.3.0 registry function: the planner writes torchtitan_model.py (the consumer
    test builds it with torchtitan and counts the planner's exact parameters)."""
    c = case_with(ParallelPlan(dp=8, ep=8, zero_stage=3), model=MIXTRAL_8X7B, train=TrainingSpec(global_batch=64))
    files, skipped = c.emit({"torchtitan"})
    assert "torchtitan" not in skipped
    args = json.loads(files["torchtitan_args.json"])["args"]
    assert args[:4] == ["--module", "torchtitan_model", "--config", "planner_model"]
    assert "--training.disable_cuda_graphs" in args  # EP with the default all-to-all dispatcher
    text = files["torchtitan_model.py"]
    compile(text, "torchtitan_model.py", "exec")
    for const in ("NUM_LAYERS = 32", "EXPERTS = 8", "TOP_K = 2", "EXPERT_FFN = 14336", "N_KV_HEADS = 8",
                  "VOCAB = 32000", "TIED = False", 'MODEL_NAME = "mixtral-8x7b"', "theta=1000000.0"):
        assert const in text, const
    weird = MIXTRAL_8X7B.model_copy(update={"name": 'x"\nimport os'})
    t2 = case_with(ParallelPlan(dp=8, ep=8, zero_stage=3), model=weird, train=TrainingSpec(global_batch=64))
    compile(t2.emit({"torchtitan"})[0]["torchtitan_model.py"], "m.py", "exec")  # the name stays a string literal


# ----------------------------------------------------------------------------------------- writing


def test_write_launch_configs(tmp_path):
    files, _ = DENSE.emit()
    out = tmp_path / "cfg"
    written = write_launch_configs(out, files)
    assert sorted(p.name for p in written) == sorted(files)
    assert sorted(os.listdir(out)) == sorted([*files, MANIFEST])  # no temp files left behind
    recorded = json.loads((out / MANIFEST).read_text())["sha256"]
    assert sorted(recorded) == sorted(files)
    assert all(recorded[n] == hashlib.sha256(t.encode()).hexdigest() for n, t in files.items())
    for name, text in files.items():
        assert (out / name).read_text() == text
    assert os.stat(out / "launch_megatron.sh").st_mode & stat.S_IXUSR
    assert not os.stat(out / "plan.json").st_mode & stat.S_IXUSR
    with pytest.raises(InputError, match="not empty") as e:
        write_launch_configs(out, files)
    assert "\n" not in str(e.value)
    (out / "plan.json").write_text("old")
    write_launch_configs(out, files, force=True)
    assert (out / "plan.json").read_text() == files["plan.json"]
    empty = tmp_path / "empty"
    empty.mkdir()
    write_launch_configs(empty, {"a.json": "{}\n"})
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        write_launch_configs(afile, files)
    with pytest.raises(InputError, match="refusing"):
        write_launch_configs(tmp_path / "x", {"../evil": "x"})


def _tree(root) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(root.iterdir()) if p.is_file()}


def test_force_over_a_different_plan_leaves_no_old_file(tmp_path):
    """An 8B Megatron set, then a 70B DeepSpeed-only set with --force: nothing of the first survives;
    a file the user put there stays; no staging directory is left beside the target."""
    out = tmp_path / "cfg"
    small = case_with(ParallelPlan(tp=2, dp=4), model=LLAMA31_8B, train=TrainingSpec(global_batch=64))
    write_launch_configs(out, small.emit({"megatron"})[0])
    assert "launch_megatron.sh" in os.listdir(out)
    (out / "my_notes.txt").write_text("mine")
    big_files, _ = case_with(ParallelPlan(tp=8, dp=8, zero_stage=1)).emit({"deepspeed"})
    write_launch_configs(out, big_files, force=True)
    assert sorted(os.listdir(out)) == sorted([*big_files, MANIFEST, "my_notes.txt"])
    assert json.loads((out / "plan.json").read_text())["model_name"] == "llama-3.1-70b"
    assert os.listdir(tmp_path) == ["cfg"]


def test_write_failure_leaves_the_previous_set_whole(tmp_path, monkeypatch):
    out = tmp_path / "cfg"
    old_files, _ = case_with(ParallelPlan(tp=2, dp=4), model=LLAMA31_8B, train=TrainingSpec(global_batch=64)).emit()
    write_launch_configs(out, old_files)
    before = _tree(out)
    real, calls = emit_mod._write_file, []

    def disk_full_on_third(path, text, mode):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real(path, text, mode)

    monkeypatch.setattr(emit_mod, "_write_file", disk_full_on_third)
    new_files, _ = DENSE.emit()
    with pytest.raises(InputError, match="No space left on device") as e:
        write_launch_configs(out, new_files, force=True)
    assert "\n" not in str(e.value) and len(calls) == 3
    assert _tree(out) == before  # every old file, byte for byte; none of the new set
    assert os.listdir(tmp_path) == ["cfg"]  # no staging or backup directory left


def test_hybrid_sharding_for_zero1_and_expert_tp_limits():
    z1 = tt_args(case_with(ParallelPlan(dp=16, zero_stage=1, zero_shard_size=8), model=LLAMA31_8B,
                           train=TrainingSpec(global_batch=64)))
    assert flag(z1, "--parallelism.data_parallel_shard_degree") == "8"
    assert flag(z1, "--parallelism.data_parallel_replicate_degree") == "2"
    assert flag(z1, "--parallelism.fsdp_reshard_after_forward") == "never"
    mg = mg_args(case_with(ParallelPlan(dp=16, zero_stage=1, zero_shard_size=8), model=LLAMA31_8B,
                           train=TrainingSpec(global_batch=64)))
    assert flag(mg, "--num-distributed-optimizer-instances") == "2"
    etp2 = case_with(ParallelPlan(tp=4, dp=16, ep=8, etp=2), model=MIXTRAL_8X7B, train=TrainingSpec(global_batch=64))
    _, skipped = etp2.emit({"maxtext", "jax", "torchtitan"})
    assert "etp=2" in skipped["maxtext"] and "etp=2" in skipped["jax"] and "expert tensor" in skipped["torchtitan"]
    same = case_with(ParallelPlan(tp=4, dp=16, ep=8, etp=4), model=MIXTRAL_8X7B, train=TrainingSpec(global_batch=64))
    files, _ = same.emit({"maxtext", "jax"})
    doc = json.loads(files["jax_mesh.json"])
    assert doc["param_specs"]["layers.experts.w_gate"]["spec"] == ["stage", "expert", "fsdp", "tensor"]


def test_torchtitan_launch_script_runs_its_args_on_every_node():
    """issue 24: a runnable launch_torchtitan.sh (NODE_RANK / MASTER_ADDR like the others) passing exactly the
    torchtitan_args.json arguments, and the trainer settings the registry function supplies listed, not silent."""
    case = next(c for c in CONSUMER_CASES if "torchtitan_args.json" in files_of(c, ["torchtitan"]))
    files = files_of(case, ["torchtitan"])
    sh, doc = files["launch_torchtitan.sh"], json.loads(files["torchtitan_args.json"])
    subprocess.run(["bash", "-n"], input=sh, text=True, check=True)
    assert '--node-rank "${NODE_RANK:-0}"' in sh and '--master-addr "${MASTER_ADDR:-localhost}"' in sh
    assert f"--nnodes {doc['nnodes']} --nproc-per-node {doc['nproc_per_node']}" in sh and '"$@"' in sh
    for tok in doc["args"]:
        assert tok in sh
    assert {"training.steps", "dataset", "tokenizer"} <= set(doc["inherited"])


def test_deepseek_v3_megatron_trains_its_own_router():
    """issue 24: the sigmoid, expert-bias, group-limited (8 groups, top 4) router scaled by 2.5, its sequence-wise
    balance loss, MTP and MLA yarn, and the dispatcher the plan was costed with."""
    a = mg_args(next(c for c in CONSUMER_CASES if c.model is DEEPSEEK_V3))
    assert flag(a, "--moe-router-score-function") == "sigmoid" and flag(a, "--moe-router-enable-expert-bias")
    assert flag(a, "--moe-router-num-groups") == "8" and flag(a, "--moe-router-group-topk") == "4"
    assert flag(a, "--moe-router-topk-scaling-factor") == "2.5" and flag(a, "--mtp-num-layers") == "1"
    assert flag(a, "--moe-router-load-balancing-type") == "seq_aux_loss" and flag(a, "--moe-aux-loss-coeff") == "0.0001"
    assert flag(a, "--rope-type") == "yarn" and flag(a, "--rotary-scaling-factor") == "40.0"
    # the costed dispatcher (Megatron's default alltoall: charged without node-limited savings)
    assert flag(a, "--moe-token-dispatcher-type") == "alltoall" and flag(a, "--norm-epsilon") == "1e-06"


def test_gemma3_text_config_gets_the_gemma3_block_and_megatron_refuses_it():
    """issue 24: a gemma3_text Hugging Face config (tests/data/hf_configs) runs MaxText's gemma3 block with its
    window, local RoPE base and norms; Megatron-LM refuses it naming what it cannot express (no --quick-geglu)."""

    from consumers.cases import Case

    from planner.catalog.hardware import parse_cluster
    from planner.catalog.models import load_model

    m = load_model(str(SOURCED_HF_CONFIGS_DIR / "gemma-3-27b.json"))
    case = Case("gemma3", m, parse_cluster("h100x64"), TrainingSpec(seq_len=8192, global_batch=64, framework="maxtext"),
                ParallelPlan(dp=64, zero_stage=3, recompute="full"))
    files, skipped = case.emit(["maxtext", "megatron"])
    cfg = yaml.safe_load(files["maxtext.yml"])
    assert cfg["decoder_block"] == "gemma3" and cfg["sliding_window_size"] == 1024
    assert cfg["local_rope_max_timescale"] == 10000 and cfg["rope_max_timescale"] == 1000000
    assert cfg["use_post_attn_norm"] and cfg["use_qk_norm"] and cfg["normalization_layer_epsilon"] == 1e-6
    assert "gated gelu_tanh MLP" in skipped["megatron"] and "--quick-geglu" not in files.get("megatron_args.json", "")
