"""Multi-token prediction priced: DeepSeek-V3's MTP module, which the Megatron and MaxText launch files train
(--mtp-num-layers, mtp_num_layers), costed on the rank that holds the LM head (planner.costmodel.mtp), its FLOPs in
the MFU, and the pipeline split that leaves it room (partition.mtp_split, the Megatron layout)."""

import pytest

from planner.catalog.hardware import parse_cluster
from planner.catalog.hf_import import from_hf_config
from planner.catalog.models import get_catalog_entry, get_model
from planner.costmodel import Context, evaluate
from planner.costmodel.compute import lm_head_fwd_s
from planner.costmodel.evaluate import screen_memory
from planner.costmodel.flops import model_flops_per_token
from planner.costmodel.layers import layer_times
from planner.costmodel.memory import stage_memories, stage_params
from planner.costmodel.mtp import eh_proj_fwd_s, mtp_extra_params, mtp_kind, mtp_layer_units
from planner.costmodel.partition import mtp_split, stage_layer_counts
from planner.specs import ParallelPlan, TrainingSpec

PLAN = ParallelPlan(tp=8, pp=4, dp=8, ep=8, etp=1, micro_batch=1, zero_stage=1, recompute="full",
                    sequence_parallel=True, first_stage_layers=16, last_stage_layers=13)


def _models():
    with_mtp = get_model("deepseek-v3")
    without = from_hf_config({**get_catalog_entry("deepseek-v3").hf_config, "num_nextn_predict_layers": 0},
                             name="deepseek-v3-no-mtp")
    return with_mtp, without


def _ctx(model, cluster="h100x256", **train):
    return Context(model, parse_cluster(cluster), TrainingSpec(seq_len=4096, global_batch=256, **train))


def test_mtp_flops_per_token_match_nvidias_published_figures():
    # Megatron-Bridge performance summary, 25.11 table (docs/performance-summary.md at v0.2.1): "DeepSeekV3 (w/ MTP)"
    # on B200, 557 Model TFLOP/s/GPU at 2139 tokens/s/GPU; "DeepSeekV3 (w/o MTP)" FP8-MX on GB200, 1003 at 4018
    with_mtp, without = _models()
    assert with_mtp.mtp_layers == 1  # DeepSeek-V3 config.json num_nextn_predict_layers
    assert model_flops_per_token(with_mtp, 4096) == pytest.approx(557e12 / 2139, rel=5e-3)
    assert model_flops_per_token(without, 4096) == pytest.approx(1003e12 / 4018, rel=5e-3)


def test_mtp_split_is_megatron_bridges_deepseek_layouts():
    # Megatron-Bridge recipes/deepseek/deepseek_v3.py _get_deepseek_v3_pipeline_layout (at 067f987): PP 4
    # [E + 16, 16, 16, 13 + m + L], PP 8 [E + 8, 8 x 6, 5 + m + L], PP 16 [E + 4, 4 x 14, 1 + m + L]
    with_mtp, without = _models()
    assert mtp_layer_units(with_mtp, 4096) == 3 and mtp_layer_units(without, 4096) == 0
    assert [mtp_split(61, pp, 3) for pp in (4, 8, 16)] == [(16, 13), (8, 5), (4, 1)]
    assert mtp_split(61, 4, 0) is None and mtp_split(4, 8, 3) is None
    for pp in range(2, 17):  # every depth: a split Megatron's first/last flags state
        counts = stage_layer_counts(61, pp, *mtp_split(61, pp, 3))
        assert sum(counts) == 61 and min(counts) >= 1 and len(set(counts[1:-1])) <= 1
    assert mtp_split(61, 9, 3) == (8, 4)  # 8 + 7 x 7 + 4: no stage above 8 with the module


def test_mtp_module_is_priced_on_the_head_stage():
    with_mtp, without = _models()
    ca, cb = _ctx(with_mtp), _ctx(without)
    a, b = evaluate(ca, PLAN), evaluate(cb, PLAN)
    assert not [w for w in a.warnings if "multi-token" in w]
    shape = screen_memory(ca, PLAN).shape
    kind = ca.kinds[mtp_kind(ca)]
    assert kind.moe  # the decoder's last layer spec: an MoE layer
    lt = layer_times(ca, shape, kind)
    proj, head = eh_proj_fwd_s(ca, shape), lm_head_fwd_s(ca, shape)
    term = a.trace["mtp_fwd_s"]
    assert term.value == pytest.approx(lt.fwd + proj + head + ca.calibration.LAYER_OVERHEAD_S / 3)
    assert 0 < proj < head  # 2h x h against h x V
    # only the head stage changes, by the module's forward (and its backward, recompute and collectives)
    fa, fb = a.pipeline["fwd_s_per_microbatch"], b.pipeline["fwd_s_per_microbatch"]
    assert fa[:-1] == fb[:-1] and fa[-1] == pytest.approx(fb[-1] + term.value)
    assert a.step_time_s > b.step_time_s
    # its weights: the layer, eh_proj and 3 norms, and the word embedding the last stage does not hold otherwise
    pa = stage_params(ca, PLAN, ca.stage_kind_counts(4, 16, 13, None))
    pb = stage_params(cb, PLAN, cb.stage_kind_counts(4, 16, 13, None))
    lp = kind.params
    mtp_dense = (lp.total - lp.routed_experts + 2 * 7168 ** 2 + 3 * 7168 + 129280 * 7168) / 8
    assert pa.dense[-1] == pytest.approx(pb.dense[-1] + mtp_dense) and pa.dense[:-1] == pb.dense[:-1]
    assert pa.experts[-1] == pytest.approx(pb.experts[-1] + lp.routed_experts / 8)
    assert a.memory["peak_gib"] >= b.memory["peak_gib"]


def test_dualpipe_ranks_hold_their_mirror_stage():
    # DualPipe: rank s runs stage s of one direction and stage pp-1-s of the other (DeepSeek-V3 report sec. 3.2.1),
    # so ranks 0 and pp-1 hold the same weights and gradients, the embedding shared with the MTP module
    with_mtp, _ = _models()
    ctx = _ctx(with_mtp, "h800x2048", dtype="fp8", optimizer_dtype="bf16", fp8_moe_act_cache=True)
    plan = ParallelPlan(tp=1, pp=16, dp=128, ep=64, etp=1, micro_batch=1, zero_stage=1, recompute="selective",
                        schedule="dualpipe", first_stage_layers=4, last_stage_layers=1)
    ms = screen_memory(ctx, plan)
    mems = stage_memories(ctx, ms.shape, ms.split, ms.params)  # by stage; DualPipe skips none (both directions)
    assert sorted(mems) == list(range(16))
    assert mems[0].weights == pytest.approx(mems[15].weights) and mems[0].grads == pytest.approx(mems[15].grads)
    assert mems[0].activations == pytest.approx(mems[15].activations)
    embedding = 129280 * 7168
    assert mtp_extra_params(ctx, 15, "1f1b")[0] - mtp_extra_params(ctx, 15, "dualpipe")[0] == embedding
    assert mtp_extra_params(ctx, 0, "1f1b") == mtp_extra_params(ctx, 15, "dualpipe")
