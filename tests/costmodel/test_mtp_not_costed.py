"""Multi-token prediction: the launch files train DeepSeek-V3's MTP module (planner.emit.megatron --mtp-num-layers),
the cost model leaves it out, and the plan says so (planner.costmodel.evaluate._warnings)."""

from planner.catalog.hardware import parse_cluster
from planner.catalog.hf_import import from_hf_config
from planner.catalog.models import get_catalog_entry, get_model
from planner.costmodel import Context, evaluate
from planner.specs import ParallelPlan, TrainingSpec

PLAN = ParallelPlan(tp=8, pp=4, dp=8, ep=8, etp=1, micro_batch=1, zero_stage=1, recompute="full",
                    sequence_parallel=True, first_stage_layers=16, last_stage_layers=13)


def _evaluate(model):
    ctx = Context(model, parse_cluster("h100x256"), TrainingSpec(seq_len=4096, global_batch=256))
    return evaluate(ctx, PLAN)


def test_mtp_is_warned_not_costed():
    with_mtp = get_model("deepseek-v3")
    assert with_mtp.mtp_layers == 1  # DeepSeek-V3 config.json num_nextn_predict_layers
    without = from_hf_config({**get_catalog_entry("deepseek-v3").hf_config, "num_nextn_predict_layers": 0},
                             name="deepseek-v3-no-mtp")
    a, b = _evaluate(with_mtp), _evaluate(without)
    # the warning's claim: time and memory are those of the model without its MTP module
    assert a.step_time_s == b.step_time_s and a.memory["peak_gib"] == b.memory["peak_gib"]
    assert [w for w in a.warnings if w.startswith("not costed: the model's 1 multi-token-prediction module")]
    assert not [w for w in b.warnings if "multi-token" in w]
