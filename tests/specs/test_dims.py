"""One owner of the validity rules and group sizes (planner.specs.dims, issue 14): the search, the cost
model and every emitter agree on ZeRO / HSDP shard groups, which always hold whole CP groups as torchtitan's
FSDP mesh dp_shard_cp = dp_shard * cp does (torchtitan/distributed/parallel_dims.py)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from planner.catalog.hardware import parse_cluster
from planner.catalog.models import load_model
from planner.errors import InputError
from planner.launchers.job import make_job
from planner.specs import ParallelPlan, TrainingSpec
from planner.specs.dims import ParallelDims, plan_errors
from planner.ui.cli import main

CMD = ["--model", "llama-3.1-8b", "--cluster", "h100x16", "--framework", "fsdp", "--seq-len", "32768", "--gbs", "64",
       "--tp", "2", "--cp", "4", "--zero", "3", "--zero-shard", "4"]


def test_hsdp_groups_hold_whole_cp_groups():
    d = ParallelDims(tp=2, dp=2, cp=4, zero_shard_size=4)
    assert (d.zero_shard, d.dp_shard, d.dp_replicate, d.zero_replicas) == (4, 1, 2, 2)
    d = ParallelDims(tp=1, dp=16, cp=2, zero_shard_size=8)
    assert (d.zero_shard, d.dp_shard, d.dp_replicate, d.zero_replicas) == (8, 4, 4, 4)
    full = ParallelDims(tp=2, dp=8, cp=2)
    assert (full.zero_shard, full.dp_shard, full.dp_replicate, full.zero_replicas) == (16, 8, 1, 1)
    assert ParallelDims(dp=2, cp=4, zero_shard_size=2).zero_shard_error()  # half a CP group
    assert ParallelDims(dp=2, cp=4, zero_shard_size=16).zero_shard_error()  # more than dp*cp
    assert ParallelDims(dp=2, cp=4, zero_shard_size=8).zero_shard_error() is None


def test_search_and_emitters_apply_the_same_shard_rule():
    model, cluster = load_model("llama-3.1-8b"), parse_cluster("h100x16")
    train = TrainingSpec(seq_len=32768, global_batch=64, framework="fsdp")
    for z, ok in ((4, True), (8, True), (2, False), (16, False)):
        plan = ParallelPlan(tp=2, cp=4, dp=2, zero_stage=3, zero_shard_size=z)
        errs = plan_errors(model, train, 16, plan)
        try:
            make_job(model, cluster, train, plan)
            emit_err = None
        except InputError as e:
            emit_err = str(e)
        assert (not errs) == ok and (emit_err is None) == ok, (z, errs, emit_err)
        if not ok:
            assert emit_err in errs


def test_regression_same_answer_with_and_without_out(tmp_path):
    """Issue 14: this command printed a plan and exited 2 with --out (zero_shard_size checked against
    dp*cp by the search, against dp by the emitters)."""
    runner = CliRunner()
    plain = runner.invoke(main, [*CMD, "--json"])
    assert plain.exit_code == 0, plain.output
    best = json.loads(plain.output)["plans"][0]["plan"]
    assert (best["tp"], best["cp"], best["dp"], best["zero_shard_size"]) == (2, 4, 2, 4)
    out = runner.invoke(main, [*CMD, "--out", str(tmp_path / "o"), "--emit", "torchtitan", "--emit", "megatron"])
    assert out.exit_code == 0, out.output
    tt = json.loads((tmp_path / "o" / "torchtitan_args.json").read_text())["args"]
    # FSDP over dp_shard * cp = 1 * 4 = the 4 ranks the cost model shards over, 2 replicas
    assert tt[tt.index("--parallelism.data_parallel_shard_degree") + 1] == "1"
    assert tt[tt.index("--parallelism.data_parallel_replicate_degree") + 1] == "2"
    assert tt[tt.index("--parallelism.context_parallel_degree") + 1] == "4"
    mg = json.loads((tmp_path / "o" / "megatron_args.json").read_text())["args"]
    assert mg[mg.index("--num-distributed-optimizer-instances") + 1] == "2"


def test_knob_names_come_from_one_list():
    """Issue 14: knob names were listed three times. ParallelPlan's fields are the list; the CLI flags and
    the run-file keys map onto it."""
    from planner.analysis.validate import PLAN_FIELDS
    from planner.specs.plan import KNOBS
    from planner.ui.cli import KNOB_FLAGS

    assert KNOBS == tuple(ParallelPlan.model_fields) and len(KNOBS) == len(set(KNOBS))
    assert set(KNOB_FLAGS.values()) <= set(KNOBS) and set(PLAN_FIELDS.values()) <= set(KNOBS)


def test_parallel_dims_owns_world_and_microbatch_count():
    """One owner of the world size and the micro-batch count (Megatron-core num_microbatches_calculator): the cost
    model's shape, the emitters' Job and the launcher rules read ParallelDims."""
    from planner.costmodel import Context
    from planner.costmodel.base import plan_shape
    from planner.launchers import microbatches

    model, cluster = load_model("llama-3.1-8b"), parse_cluster("h100x16")
    train = TrainingSpec(global_batch=96)
    for plan in (ParallelPlan(tp=2, dp=8, micro_batch=2), ParallelPlan(tp=2, pp=2, dp=4, micro_batch=3),
                 ParallelPlan(tp=4, pp=4, dp=1)):
        dims = ParallelDims.of(plan)
        n = 96 // (plan.dp * plan.micro_batch)
        assert dims.world == plan.devices == 16 and dims.num_microbatches(96) == n
        assert dims.local_batch(96) == 96 // plan.dp and dims.batch_divides(96)
        job = make_job(model, cluster, train, plan)
        assert plan_shape(Context(model, cluster, train), plan).nmb == job.grad_accum == microbatches(job) == n
    assert not ParallelDims(dp=5).batch_divides(96) and ParallelDims(dp=64).num_microbatches(96) == 2  # rounded
