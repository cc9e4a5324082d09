"""The candidate space. Every divisibility rule and derived group size has one owner,
planner.specs.dims (`ParallelDims`, `plan_errors`); this module re-exports `plan_errors` for its callers."""

from __future__ import annotations

from planner.specs.dims import plan_errors

__all__ = ["divisors", "plan_errors"]


def divisors(n: int) -> list[int]:
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]
