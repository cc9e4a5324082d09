"""How the layers split over pipeline stages: even splits, Megatron's explicit first/last stage sizes
(--decoder-first/last-pipeline-num-layers)."""

from __future__ import annotations

from functools import lru_cache


def stage_layer_counts(num_layers: int, pp: int, first: int | None = None, last: int | None = None) -> list[int]:
    """Layers per pipeline stage. Even when pp divides the layers; otherwise (or with Megatron's
    --decoder-first/last-pipeline-num-layers) the first/last stages, which also hold the embedding
    and the LM head, take fewer."""
    if pp == 1:
        return [num_layers]
    if first is not None or last is not None:
        f = first if first is not None else None
        la = last if last is not None else None
        fixed = (f or 0) + (la or 0)
        free = pp - (f is not None) - (la is not None)
        rest = num_layers - fixed
        if rest < 0 or (free == 0 and rest != 0) or (free and rest % free):
            raise ValueError(f"cannot split {num_layers} layers as first={first} last={last} over {pp} stages")
        mid = rest // free if free else 0
        counts = [mid] * pp
        if f is not None:
            counts[0] = f
        if la is not None:
            counts[-1] = la
        return counts
    q, r = divmod(num_layers, pp)
    if r == 0:
        return [q] * pp
    counts = [q + 1] * pp
    excess = (q + 1) * pp - num_layers
    order = [pp - 1, 0] + list(range(pp - 2, 0, -1))  # trim last, first, then from the back
    for k in range(excess):
        counts[order[k % len(order)]] -= 1
    return counts


def megatron_split(num_layers: int, pp: int, vpp: int = 1) -> tuple[int, int] | None:
    """First/last stage sizes for layers that pp does not divide, in the form Megatron's first/last flags state
    (--decoder-first/last-pipeline-num-layers: equal middle stages; with virtual stages every stage's
    count divisible by vpp): the split whose largest stage is smallest, the last stage (LM head) not
    larger than the first, and among those the most even one (the smallest spread between stages). None when no
    such split exists (any split is then stated as Megatron's
    --pipeline-model-parallel-layout: planner.emit.megatron.pipeline_layout)."""
    L = num_layers
    if pp < 2:
        return None
    best = None
    mids = [0] if pp == 2 else range(vpp, L // (pp - 2) + 1, vpp)
    for mid in mids:
        rest = L - (pp - 2) * mid
        if rest < 2 * vpp:
            continue
        last = (rest // 2) // vpp * vpp
        first = rest - last
        if last < vpp or first % vpp:
            continue
        stages = (first, last, mid) if pp > 2 else (first, last)
        key = (max(stages), max(stages) - min(stages), first - last)
        if best is None or key < best[0]:
            best = (key, (first, last))
    return best[1] if best else None


@lru_cache(maxsize=None)  # pure, of three ints; the search asks it once per layout (0.2 ms for DeepSeek-V3)
def mtp_split(num_layers: int, pp: int, mtp_units: int) -> tuple[int, int] | None:
    """First/last stage sizes for a model whose last stage also runs MTP modules worth `mtp_units` layers
    (planner.costmodel.mtp.mtp_layer_units), in the form Megatron's first/last flags state (equal middle stages, each
    stage at least one layer): the split whose fullest stage, the last counting its units, is smallest, then the most
    even, then the lightest last stage (every middle size tried: 4 ms for all 60 depths of 61 layers). For DeepSeek-V3
    (61 layers, 3 units) this
    is Megatron-Bridge's own layouts at PP 4, 8 and 16: 16/16/16/13, 8 x 7 + 5, 4 x 15 + 1
    (recipes/deepseek/deepseek_v3.py _get_deepseek_v3_pipeline_layout, at 067f987). None when pp < 2, there are no
    units, or no stage can hold a layer."""
    if pp < 2 or mtp_units <= 0 or num_layers < pp:
        return None
    best = None
    for mid in range(1, (num_layers - 2) // (pp - 2) + 1) if pp > 2 else (0,):
        rest = num_layers - (pp - 2) * mid
        for last in range(1, rest):
            stages = (rest - last, last + mtp_units) + ((mid,) if pp > 2 else ())
            key = (max(stages), max(stages) - min(stages), last)
            if best is None or key < best[0]:
                best = (key, (rest - last, last))
    return best[1] if best else None
