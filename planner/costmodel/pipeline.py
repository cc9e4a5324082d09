"""Pipeline schedules: step time with the bubble, and in-flight micro-batches per stage.

References: GPipe (Huang et al. 2019, arXiv 1811.06965); 1F1B / PipeDream-Flush and interleaved 1F1B
(Narayanan et al. SC21, arXiv 2104.04473, sec. 2.2: bubble (p-1)/m and (p-1)/(v m)); zero-bubble
ZB-H1 (Qi et al. 2023, arXiv 2401.10241, sec. 3: bubble about a third of 1F1B's at 1F1B memory).
"""

from __future__ import annotations


def bubble_fraction(schedule: str, pp: int, m: int, vpp: int = 1) -> float:
    """Idle time over ideal time for uniform stages: (p-1)/m for GPipe/1F1B, (p-1)/(v m) interleaved
    (Narayanan et al. SC21 eqs. in sec. 2.2.1-2.2.2), ZB-H1 about 1/3 of 1F1B (Qi et al. 2023, sec. 3.1)."""
    if pp <= 1:
        return 0.0
    base = (pp - 1) / m
    if schedule == "interleaved":
        return base / max(1, vpp)
    if schedule == "zb":
        return base / 3.0
    if schedule == "dualpipe":
        return base * dualpipe_fill_fraction(pp)
    return base


def pipeline_step_time(stage_s: list[float], m: int, schedule: str, vpp: int = 1) -> float:
    """Time of m micro-batches through stages taking stage_s[i] (fwd+bwd of one micro-batch each).

    Uniform stages give (m + p - 1) t, the 1F1B/GPipe makespan; with uneven stages the slowest stage
    sets the steady state: sum(stage) + (m - 1) max(stage). Interleaving shrinks the fill/drain by v.
    """
    p = len(stage_s)
    slowest = max(stage_s)
    if p == 1:
        return m * slowest
    fill = sum(stage_s) - slowest  # fill + drain of the other stages
    frac = 1.0
    if schedule == "interleaved":
        frac = 1.0 / max(1, vpp)
    elif schedule == "zb":
        frac = 1.0 / 3.0
    elif schedule == "dualpipe":
        frac = dualpipe_fill_fraction(p)
    return m * slowest + frac * fill


def dualpipe_fill_fraction(pp: int) -> float:
    """DualPipe's bubble relative to 1F1B's: (PP/2 - 1) vs (PP - 1) stage-times (DeepSeek-V3 report,
    arXiv 2412.19437, sec. 3.2.1 Table 2; its F&B - 3W refinement is ignored, an upper bound)."""
    return max(0.0, pp / 2 - 1) / (pp - 1) if pp > 1 else 0.0


def inflight_microbatches(schedule: str, pp: int, stage: int, m: int, vpp: int = 1) -> float:
    """Micro-batches whose activations a stage holds at its peak, in units of the stage's full
    layer set. 1F1B: p - stage (first stage holds p; SC21 sec. 2.2.1); GPipe: all m; interleaved:
    Megatron's warm-up count ((p - stage - 1) * 2 + (v - 1) * p + 1) chunks of 1/v of the stage."""
    if pp <= 1:
        return 1.0
    if schedule == "gpipe":
        return float(m)
    if schedule == "dualpipe":
        return float(min(m, pp + 1))  # DeepSeek-V3 Table 2: PP + 1 micro-batches of activations
    if schedule == "interleaved" and vpp > 1:
        chunks = min(m * vpp, (pp - stage - 1) * 2 + (vpp - 1) * pp + 1)
        return chunks / vpp
    return float(min(m, pp - stage))


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
    """First/last stage sizes for layers that pp does not divide, in the only form Megatron accepts
    (--decoder-first/last-pipeline-num-layers: equal middle stages; with virtual stages every stage's
    count divisible by vpp): the split whose largest stage is smallest, the last stage (LM head) not
    larger than the first. None when no such split exists."""
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
        key = (max(mid, first, last), first - last)
        if best is None or key < best[0]:
            best = (key, (first, last))
    return best[1] if best else None
