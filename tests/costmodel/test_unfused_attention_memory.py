"""Unfused attention's saved score tensors held against PyTorch's autograd on CPU (planner.costmodel.memory
unfused_score_bytes: UNFUSED_SOFTMAX_BYTES, + UNFUSED_DROPOUT_BYTES with TrainingSpec.attention_dropout).

The unfused core as Megatron runs it (Megatron-LM v2.5 megatron/model/transformer.py l.300-310, megatron-core's local
DotProductAttention, Transformer Engine's UnfusedDotProductAttention): scores = Q K^T x scale, probs = a fused
scale-mask-softmax (its CUDA kernel takes and returns 16-bit scores and saves only its output), probs = dropout(probs),
context = probs V. The bf16 softmax stands in for the fused kernel here (torch.softmax saves its output too; on CPU the
fp32-softmax fallback of megatron-core's FusedScaleMaskSoftmax would keep an fp32 copy the GPU kernel never makes).
The dropout at p > 0 is torch.native_dropout, the kernel F.dropout dispatches to on CUDA (ATen Dropout.cpp
is_fused_kernel_acceptable: CUDA, 0 < p < 1): a bool mask and the output. At p = 0 F.dropout returns its input
(_dropout_impl), so only the softmax output is kept, once, for the softmax's backward and the AV GEMM's.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.consumers  # torch, real code: CI runs it with -m "slow or consumers"

torch = pytest.importorskip("torch")

from planner.costmodel.memory import UNFUSED_DROPOUT_BYTES, UNFUSED_SOFTMAX_BYTES, unfused_score_bytes  # noqa: E402
from planner.specs import TrainingSpec  # noqa: E402

HEADS, SEQ, DIM = 4, 64, 16


def _saved_bytes_per_score(p: float) -> float:
    """Bytes autograd keeps for the backward per score element, beyond Q, K and V themselves."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(HEADS, SEQ, DIM, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    inputs = {t.untyped_storage().data_ptr() for t in (q, k, v)}
    saved: dict[int, int] = {}

    def pack(t):
        store = t.untyped_storage()
        if store.data_ptr() not in inputs:
            saved[store.data_ptr()] = store.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        scores = torch.bmm(q, k.transpose(1, 2)) * DIM ** -0.5
        probs = torch.softmax(scores, dim=-1)
        probs = torch.native_dropout(probs, p, True)[0] if p > 0 else torch.nn.functional.dropout(probs, p, True)
        out = torch.bmm(probs, v)
    out.float().sum().backward()  # the backward runs from what was kept
    return sum(saved.values()) / (HEADS * SEQ * SEQ)


def test_without_dropout_only_the_softmax_output_is_kept():
    measured = _saved_bytes_per_score(0.0)
    assert measured == UNFUSED_SOFTMAX_BYTES == 2.0
    assert unfused_score_bytes(TrainingSpec(global_batch=8)) == measured  # the planner's plans run no dropout


def test_with_dropout_its_mask_and_output_are_kept_too():
    """Korthikanti et al. 2022 eq. 1's 5 a s^2 b: softmax output 2 B, dropout mask 1 B, dropout output 2 B."""
    measured = _saved_bytes_per_score(0.1)
    assert measured == UNFUSED_SOFTMAX_BYTES + UNFUSED_DROPOUT_BYTES == 5.0
    assert unfused_score_bytes(TrainingSpec(global_batch=8, attention_dropout=True)) == measured
