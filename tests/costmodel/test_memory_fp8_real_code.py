"""torchao's float8 training (torchtitan's Float8 converter) on CPU, held to the planner's FP8 weight terms
(planner.costmodel.memory.fp8_gathered_weight_bytes, Stack.fp8_weight_cache of planner/stacks/torchtitan.py).

- FSDP float8 all-gather (`enable_fsdp_float8_all_gather`): the weight's fsdp_pre_all_gather hands FSDP2 the 1-byte
  float8 data of the shard, and fsdp_post_all_gather wraps the gathered buffer itself, so a gathered weight holds 1 B
  per element.
- Tensorwise Float8Linear keeps no FP8 weight across forward and backward: it saves the 16-bit input and the weight
  parameter itself (a view, no copy) and casts for each GEMM (torchao 0.18 float8_linear.py
  matmul_with_hp_or_float8_args). torchao eab345c (Dec 2024) saved the FP8 cast of the weight instead unless
  force_recompute_fp8_weight_in_bwd; checkpointed layers (selective op or full AC, every torchtitan peak published)
  recompute it, so the planner counts none either way.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.consumers  # torch + torchao, real code: CI runs it with -m "slow or consumers"

torch = pytest.importorskip("torch")
pytest.importorskip("torchao.float8")

from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: E402

from planner.catalog.hardware import parse_cluster  # noqa: E402
from planner.catalog.models import get_model  # noqa: E402
from planner.costmodel import Context  # noqa: E402
from planner.costmodel.memory import fp8_gathered_weight_bytes, fp8_weight_copy_bytes  # noqa: E402
from planner.specs import TrainingSpec  # noqa: E402


def _float8_linear(all_gather: bool, dtype=None):
    m = torch.nn.Sequential(torch.nn.Linear(256, 512, bias=False))
    if dtype is not None:
        m = m.to(dtype)
    convert_to_float8_training(m, config=Float8LinearConfig(enable_fsdp_float8_all_gather=all_gather))
    return m


def _ctx(**train) -> Context:
    return Context(get_model("llama-3.1-8b"), parse_cluster("h100x8"),
                   TrainingSpec(global_batch=8, framework="fsdp", dtype="fp8", **train))


def test_fsdp_float8_all_gather_gathers_one_byte_per_weight():
    w = _float8_linear(all_gather=True)[0].weight
    w._precomputed_scale = torch.tensor(1.0)  # precompute_float8_dynamic_scale_for_fsdp's role (no amax all-reduce)
    (data,), (scale,) = w.fsdp_pre_all_gather(None)
    assert data.numel() == w.numel() and data.element_size() == 1
    gathered, _ = w.fsdp_post_all_gather((data,), (scale,), torch.bfloat16)
    # the unsharded weight is the gathered 1-byte buffer itself, no 16-bit copy
    assert gathered._data.data_ptr() == data.data_ptr() and gathered._data.element_size() == 1
    assert fp8_gathered_weight_bytes(_ctx(fp8_param_gather=True)) == data.element_size()
    assert fp8_gathered_weight_bytes(_ctx()) == 2.0  # without it FSDP gathers the bf16 parameters


def test_float8_linear_saves_no_fp8_weight_copy():
    m = _float8_linear(all_gather=False, dtype=torch.bfloat16)
    x = torch.randn(64, 256, dtype=torch.bfloat16, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = m(x)
    y.sum().backward()  # the backward runs from what was saved
    fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    assert saved and not any(t.dtype in fp8 for t in saved)
    weight = m[0].weight
    saved_weights = [t for t in saved if t.numel() == weight.numel()]
    assert saved_weights and all(t.untyped_storage().data_ptr() == weight.untyped_storage().data_ptr()
                                 for t in saved_weights)
    assert fp8_weight_copy_bytes(_ctx()) == 0.0  # Stack.fp8_weight_cache False for torchtitan
