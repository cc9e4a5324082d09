"""The runs schema (docs/runs-schema.md): the explicit `stack:` block is read first, the citation inference
fills only what it leaves out, and an unknown key anywhere is refused with the key that was meant."""

from __future__ import annotations

import copy
from functools import cache

import pytest
import yaml

from planner.analysis.validate import (
    infer_attention_impl,
    infer_fp8_recipe,
    infer_framework,
    infer_fused_cross_entropy,
    infer_torch_compile,
    infer_tp_comm_overlap,
    load_runs,
    predict_run,
    run_specs,
    run_stack,
    stack_constraints,
)
from planner.catalog.data import data_dir
from planner.errors import InputError


@cache
def dev_runs() -> list[dict]:
    """The GPU and TPU development runs, parsed once when a test first asks (not at collection)."""
    return load_runs(data_dir("runs") / "known_runs_dev.yaml") + load_runs(data_dir("runs") / "known_runs_tpu_dev.yaml")
# a run with nothing in its id or citation the inference rules know: modelled as Megatron unless it says otherwise
LLAMA_8B = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "hidden_act": "silu"}
RUN = {"id": "my-run", "source": "our cluster, 2026", "model": LLAMA_8B, "hardware": "h100-sxm-80gb",
       "devices": 8, "train": {"seq_len": 8192, "global_batch": 16, "dtype": "bf16"},
       "plan": {"dp": 8, "zero_stage": 3, "micro_batch": 2, "recompute": "selective"},
       "measured": {"step_time_s": 2.84}}


def _load(tmp_path, run: dict) -> list[dict]:
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump([run]), encoding="utf-8")
    return load_runs(p)


def test_a_legacy_record_is_modelled_by_the_citation_inference_as_before():
    """Every shipped run (no stack block) gets exactly what the infer_* rules give."""
    for r in dev_runs():
        st, fw = run_stack(r), infer_framework(r)
        assert (st.framework, st.torch_compile, st.tp_comm_overlap, st.fp8_recipe, st.attention, st.fused_loss) == (
            fw, infer_torch_compile(r, fw), infer_tp_comm_overlap(r, fw), infer_fp8_recipe(r),
            infer_attention_impl(r), infer_fused_cross_entropy(r, fw)), r["id"]
        assert st.stated == () and st.not_modelled() == []


def test_the_stack_block_is_read_first(tmp_path):
    assert run_specs(RUN)[2].framework == "megatron"  # nothing to infer from: the default
    run = _load(tmp_path, RUN | {"stack": {"framework": "nemo-automodel", "torch_compile": True}})[0]
    train = run_specs(run)[2]
    assert (train.framework, train.torch_compile, train.fused_cross_entropy) == ("automodel", True, False)
    # a torchtitan citation, but the record says Megatron-Bridge with TP overlap: the record wins
    titan = next(r for r in dev_runs() if r["id"].startswith("torchtitan") and "compile" in r["id"])
    assert run_specs(titan)[2].torch_compile
    stated = copy.deepcopy(titan) | {"stack": {"framework": "megatron-bridge", "tp_comm_overlap": True}}
    m, c, t = run_specs(stated)
    assert (t.framework, t.torch_compile) == ("megatron", False)
    assert stack_constraints(stated, t)["tp_comm_overlap"] is True
    assert run_stack(stated).stated == ("framework", "tp_comm_overlap")


def test_null_stack_keys_are_inferred(tmp_path):
    titan = next(r for r in dev_runs() if r["id"].startswith("torchtitan") and "compile" in r["id"])
    nulls = copy.deepcopy(titan) | {"stack": {"framework": None, "torch_compile": None}}
    assert run_stack(nulls) == run_stack(titan)


def test_stated_precision_overrides_the_recipe_inference(tmp_path):
    run = _load(tmp_path, RUN | {"train": RUN["train"] | {"grad_dtype": "bf16", "optimizer_dtype": "bf16"}})[0]
    t = run_specs(run)[2]
    assert (t.grad_dtype, t.optimizer_dtype) == ("bf16", "bf16")


@pytest.mark.parametrize("section,bad,meant", [
    ("measured", {"step_time": 6.25}, "measured.step_time_s"),
    ("stack", {"framwork": "nemo"}, "stack.framework"),
    ("train", {"global_batch": 16, "seqlen": 8192}, "train.seq_len"),
    ("plan", {"micro_batch_size": 2}, "plan.micro_batch"),
])
def test_an_unknown_key_is_refused_with_the_key_meant(tmp_path, section, bad, meant):
    with pytest.raises(InputError, match=rf"unknown field {section}\.\w+; did you mean {meant}\?"):
        _load(tmp_path, RUN | {section: bad})


def test_an_unknown_top_level_key_is_refused_with_the_key_meant(tmp_path):
    with pytest.raises(InputError, match="unknown field 'stacks'; did you mean stack\\?"):
        _load(tmp_path, RUN | {"stacks": {"framework": "nemo"}})


@pytest.mark.parametrize("stack,message", [
    ({"framework": "lightning"}, "stack.framework 'lightning' is not known"),
    ({"framework": "torchtittan"}, "did you mean torchtitan"),
    ({"cuda_graphs": "yes"}, "stack.cuda_graphs must be true, false or null"),
    ({"moe_dispatcher": "deepep"}, "stack.moe_dispatcher 'deepep' is not known"),
    ("megatron", "'stack' must be a mapping"),
])
def test_a_bad_stack_value_is_refused(tmp_path, stack, message):
    with pytest.raises(InputError, match=message):
        _load(tmp_path, RUN | {"stack": stack})


def test_a_stack_setting_the_framework_cannot_have_is_refused(tmp_path):
    run = _load(tmp_path, RUN | {"stack": {"framework": "megatron", "torch_compile": True}})[0]
    with pytest.raises(InputError, match="torch_compile|compile"):
        run_specs(run)


def test_a_stated_setting_the_model_does_not_price_is_listed(tmp_path):
    stack = {"framework": "torchtitan", "cuda_graphs": True, "moe_dispatcher": "alltoall"}
    out = predict_run(_load(tmp_path, RUN | {"stack": stack})[0])
    assert out["stack_not_modelled"] == ["cuda_graphs: true"] and out["framework"] == "fsdp"
    assert "stack_not_modelled" not in predict_run(_load(tmp_path, RUN)[0])


def test_cuda_graph_impl_is_priced_only_for_a_full_iteration(tmp_path):
    """stack.cuda_graph_impl: full_iteration reaches TrainingSpec.cuda_graph_full_iteration (Megatron only: refused
    for FSDP); the per-layer graphs (transformer_engine, local) are recorded and listed as not priced; a misspelt
    value is refused with the one meant."""
    graphed = run_specs(_load(tmp_path, RUN | {"stack": {"cuda_graph_impl": "full_iteration"}})[0])[2]
    assert graphed.cuda_graph_full_iteration and not run_specs(_load(tmp_path, RUN)[0])[2].cuda_graph_full_iteration
    out = predict_run(_load(tmp_path, RUN | {"stack": {"cuda_graph_impl": "transformer_engine"}})[0])
    assert out["stack_not_modelled"] == ["cuda_graph_impl: transformer_engine"]
    assert "stack_not_modelled" not in predict_run(_load(tmp_path, RUN | {"stack": {"cuda_graph_impl": "none"}})[0])
    fsdp = _load(tmp_path, RUN | {"stack": {"framework": "fsdp", "cuda_graph_impl": "full_iteration"}})[0]
    with pytest.raises(InputError, match="full-iteration CUDA graph"):
        run_specs(fsdp)
    with pytest.raises(InputError, match="did you mean full_iteration"):
        _load(tmp_path, RUN | {"stack": {"cuda_graph_impl": "full_iter"}})


def test_every_stack_is_a_runs_file_framework():
    """A stack added to planner/stacks is accepted in stack.framework by its own name; every other name a run
    may give maps to one of them."""
    from planner.analysis.runschema import FRAMEWORKS
    from planner.stacks import ALL_FRAMEWORKS as STACKS

    assert set(STACKS) <= set(FRAMEWORKS) and set(FRAMEWORKS.values()) == set(STACKS)


def test_a_maxtext_run_states_its_remat_policy_in_the_plan(tmp_path):
    # plan.remat_offloaded / remat_device (MaxText remat_policy custom): the plan's names win over its notes
    from planner.analysis.validate import validate_runs

    tpu = RUN | {"id": "my-tpu-run", "hardware": "tpu-v5p", "devices": 8, "stack": {"framework": "maxtext"},
                 "notes": "remat_policy=custom with decoder_layer_input = offload."}
    noted = validate_runs(_load(tmp_path, tpu))["runs"][0]["plan"]
    stated = tpu | {"plan": tpu["plan"] | {"remat_offloaded": ["decoder_layer_input", "query_proj"]}}
    planned = validate_runs(_load(tmp_path, stated))["runs"][0]["plan"]
    assert noted["remat_offloaded"] == ("decoder_layer_input",)
    assert planned["remat_offloaded"] == ("decoder_layer_input", "query_proj")
    with pytest.raises(InputError, match="plan.remat_offloaded must be a list of MaxText remat tensor names"):
        _load(tmp_path, tpu | {"plan": tpu["plan"] | {"remat_offloaded": "decoder_layer_input"}})


@pytest.mark.parametrize("measured,train,message", [
    ({"step_time_s": 2.84, "peak_memory_gib": 40.0, "peak_memory_of": "reserved"}, {},
     "measured.peak_memory_of must be one of device, allocated_last_rank"),
    ({"step_time_s": 2.84}, {"attention_dropout": 1.5}, "train.attention_dropout must be a probability in [0, 1)"),
    ({"step_time_s": 2.84}, {"attention_dropout": True}, "train.attention_dropout must be a probability in [0, 1)"),
])
def test_a_bad_measured_kind_or_dropout_is_refused(tmp_path, measured, train, message):
    run = RUN | {"measured": measured, "train": RUN["train"] | train}
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        _load(tmp_path, run)


def test_attention_dropout_is_stated_or_inferred_from_the_stack_date(tmp_path):
    """Stated in train.attention_dropout, else on for a stack before FlashAttention (Megatron-LM's 2021 default 0.1)."""
    assert run_specs(RUN)[2].attention_dropout is False
    stated = _load(tmp_path, RUN | {"train": RUN["train"] | {"attention_dropout": 0.1}})[0]
    assert run_specs(stated)[2].attention_dropout is True
    sc21 = next(r for r in dev_runs() if r["id"].startswith("sc21-"))
    assert run_specs(sc21)[2].attention_dropout is True and infer_attention_impl(sc21) == "unfused"
