"""Host (CPU) cost of the kinds of operations Transformer Engine's GroupedLinear runs once per local expert without
launching a kernel (counted in the comment beside planner.costmodel.moe HOST_KERNELS_FWD; not used by the model),
measured with PyTorch eager on this machine's CPU.

What it measures: the Python / C++ dispatch path each kind of operation takes (interpreter, pybind, the ATen
dispatcher, autograd bookkeeping), best of several repetitions, on CPU tensors of a few elements.
What it does not measure: the CUDA side (cudaLaunchKernel, the CUDA caching allocator's bookkeeping, events, stream
switches), TE's own C++ (quantizer conversion, cuBLASLt descriptors), the training host's CPU (Grace on GB200, Xeon on
DGX H100 / B200) or the contention a real training process has (data loader, NCCL proxy threads, the GIL).

Run: python benchmarks/host_op_costs.py   (prints microseconds per operation for each kind)
"""

from __future__ import annotations

import time
from typing import Callable

import torch

REPEATS = 7
CALLS = 2000


def best_us(fn: Callable[[], object], calls: int = CALLS) -> float:
    """Best of REPEATS timings of `calls` calls of fn, microseconds per call."""
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


class _Quantizer:
    """Stands for a TE quantizer's Python-side state (set_usage sets two flags)."""

    def __init__(self) -> None:
        self.rowwise_usage, self.columnwise_usage, self.internal = True, True, False

    def set_usage(self, *, rowwise: bool | None = None, columnwise: bool | None = None) -> None:
        if rowwise is not None:
            self.rowwise_usage = rowwise
        if columnwise is not None:
            self.columnwise_usage = columnwise


class _Storage:
    """Stands for a TE quantized-tensor storage object (data, scales and quantizer held as attributes)."""

    def __init__(self, rowwise_data, rowwise_scale, columnwise_data, columnwise_scale, dtype, quantizer,
                 swizzled) -> None:
        self._rowwise_data, self._rowwise_scale_inv = rowwise_data, rowwise_scale
        self._columnwise_data, self._columnwise_scale_inv = columnwise_data, columnwise_scale
        self._fp8_dtype, self._quantizer, self._with_gemm_swizzled_scales = dtype, quantizer, swizzled


class _Save(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, *saved):
        ctx.save_for_backward(*saved)
        return a.view_as(a)

    @staticmethod
    def backward(ctx, g):
        _ = ctx.saved_tensors
        return (g,) + (None,) * len(_)


class _Grads(torch.autograd.Function):
    """One node whose backward hands a gradient to each of its leaf inputs (an expert's weights): one AccumulateGrad
    node and one post-accumulate hook per leaf."""

    @staticmethod
    def forward(ctx, a, grads, *leaves):
        ctx.grads = grads
        return a.view_as(a)

    @staticmethod
    def backward(ctx, g):
        return (g, None, *ctx.grads)


def _slope(cost: Callable[[int], float], n_lo: int = 4, n_hi: int = 64) -> float:
    return (cost(n_hi) - cost(n_lo)) / (n_hi - n_lo)


def measure() -> dict[str, float]:
    """Microseconds per operation of each kind (per item where the kind is a per-item slope)."""
    torch.set_num_threads(1)
    x = torch.randn(256, 16)
    q = _Quantizer()
    d, s = torch.empty(4, dtype=torch.uint8), torch.empty(1)
    a = torch.randn(4, requires_grad=True)

    def save_cost(n: int) -> float:
        saved = [torch.randn(2) for _ in range(n)]
        return best_us(lambda: _Save.apply(a, *saved).sum().backward(), calls=300)

    def hook_cost(n: int) -> float:
        ws = [torch.randn(2, requires_grad=True) for _ in range(n)]
        grads = [torch.zeros(2) for _ in range(n)]

        def drop(p: torch.Tensor) -> None:  # Megatron's DDP hook hands the gradient on and drops it
            p.grad = None

        for w in ws:
            w.register_post_accumulate_grad_hook(drop)
        return best_us(lambda: _Grads.apply(a, grads, *ws).sum().backward(), calls=300)

    def split_cost(n: int) -> float:
        sizes = [256 // n] * n
        return best_us(lambda: torch.split(x, sizes))

    return {
        "py_call": best_us(lambda: q.set_usage(rowwise=True, columnwise=False)),
        "tensor_view": best_us(lambda: x.narrow(0, 4, 8)),
        "tensor_split_piece": _slope(split_cost),
        "py_object": best_us(lambda: _Storage(d, s, d, s, 1, q, True)),
        "autograd_saved_tensor": _slope(save_cost),
        "autograd_leaf_with_hook": _slope(hook_cost),
        "tiny_op_reference": best_us(lambda: x.add(1.0)),
    }


if __name__ == "__main__":
    for k, v in measure().items():
        print(f"{k:28s} {v:7.2f} us")
