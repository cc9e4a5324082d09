"""The planner's loss term for Megatron's vocab-parallel cross entropy held against megatron-core's own code on CPU.

Megatron-LM (and Megatron-DeepSpeed) compute the loss with `tensor_parallel.vocab_parallel_cross_entropy` on the
output layer's logits, each TP rank holding V / tp of the vocabulary (megatron-core
`models/common/language_module/language_module.py`, `compute_language_model_loss`). The planner counts it as
`Stack.logit_bytes` = 6 B per logit of the rank's shard (planner/stacks/megatron.py). Here megatron-core's function
runs on one CPU rank (a gloo group of one, TP 1: the shard is the whole vocabulary; the kernel's bytes per logit do
not depend on tp) under the same storage tracker as tests/costmodel/test_memory_real_code.py, from the logits
until the output layer's backward starts: the logits, what the loss keeps for its backward and the logits' gradient.
The op is pure PyTorch (no CUDA kernel), so CPU and GPU keep the same tensors.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.consumers  # torch + megatron-core, real code: CI runs it with -m "slow or consumers"

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from test_memory_real_code import TOKENS, _batch, _Live, _model_spec  # noqa: E402

from planner.costmodel.memory import logits_bytes_per_token  # noqa: E402
from planner.specs import TrainingSpec  # noqa: E402

SEQ, BATCH = 256, 2


@pytest.fixture(scope="module")
def megatron_tp1(tmp_path_factory):
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    ps.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    try:
        yield
    finally:
        ps.destroy_model_parallel()
        dist.destroy_process_group()


def measured_vocab_parallel_loss_bytes() -> float:
    """Loss-phase peak per token: the output layer's bf16 logits ([s, b, V], Megatron's layout), the cross entropy's
    forward and backward, until the output layer's backward pre-hook (its gradient input complete)."""
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    spec = _model_spec()
    torch.manual_seed(0)
    head = torch.nn.Linear(spec.hidden_size, spec.vocab_size, bias=False, dtype=torch.bfloat16)
    head.weight.register_post_accumulate_grad_hook(lambda q: setattr(q, "grad", None))
    hidden = torch.randn(SEQ, BATCH, spec.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    _, labels = _batch()
    labels = labels.t().contiguous()[:SEQ, :BATCH]
    tracker = _Live()
    done: dict[str, int] = {}

    def _at_head_backward(*_args) -> None:
        done.setdefault("peak", tracker.peak)

    head.register_full_backward_pre_hook(_at_head_backward)
    with tracker:
        base = tracker.cur
        logits = head(hidden)
        loss = vocab_parallel_cross_entropy(logits, labels).mean()
        del logits  # compute_language_model_loss returns the loss; the logits go out of scope with the forward
        loss.backward()
    return (done["peak"] - base) / TOKENS


def test_vocab_parallel_loss_matches_megatron(megatron_tp1):
    spec = _model_spec()
    train = TrainingSpec(global_batch=BATCH, seq_len=SEQ, framework="megatron")
    planner = logits_bytes_per_token(spec, 1, train)
    measured = measured_vocab_parallel_loss_bytes()
    print(f"loss vocab-parallel: planner {planner:.0f} B/token, megatron-core {measured:.0f}")
    assert planner == pytest.approx(measured, rel=0.05), (planner, measured)
