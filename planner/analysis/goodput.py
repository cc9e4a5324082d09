"""From step time to calendar time: wall-clock, device-hours, cost, checkpointing and goodput.

Pure functions, SI units (seconds, bytes, bytes/s) unless a name says otherwise. Each formula
carries its source in a one-line comment. Failure and storage figures are either user inputs or
cited defaults; nothing here is a guessed hardware number.

Conventions
-----------
* MTBF: mean time between job-interrupting failures. A synchronous data/model-parallel job stops
  when any one of its N devices fails, so with independent exponential failures the job sees
  ``M = device_mtbf / N`` (a series system).
* Checkpoint cost ``C``: the time training is blocked while a checkpoint is taken. For a
  synchronous save this is ``checkpoint_bytes / aggregate_write_bandwidth``; with asynchronous
  checkpointing (torch DCP async_save, Megatron ``--async-save``) pass the (smaller) blocking
  snapshot time instead via ``checkpoint_s``.
* Checkpoint size: ``CHECKPOINT_BYTES_PER_PARAM = 14`` bytes per parameter for mixed-precision
  Adam: 2 (bf16 weights) + 4 (fp32 master weights) + 4 + 4 (fp32 Adam first and second moments).
  Gradients are not saved. This is ZeRO's 16 B/param of "model states" (2 + 2 + 12) minus the 2 B
  of half-precision gradients (Rajbhandari et al., SC20, arXiv 1910.02054, sec. 3.1).
* Restart time ``R``: from the failure to training resuming at the last checkpoint (detection,
  rescheduling, process start, checkpoint load). It depends on the site; it is a required input.
  Daly (2006) uses R = 10 min in his worked examples, a reasonable order of magnitude to try.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

from planner.errors import InputError

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0

# ---------------------------------------------------------------------------------------------
# Cited defaults
# ---------------------------------------------------------------------------------------------
# Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, sec. 3.3.4):
# 466 job interruptions in a 54-day snapshot of 405B pre-training on 16,384 H100 GPUs, of which
# 47 planned and 419 unexpected. Attributing every unexpected interruption (GPU, HBM, network,
# host, software ...) to the GPUs evenly gives a per-GPU MTBF of 54 d * 24 h * 16384 / 419.
LLAMA3_SNAPSHOT_DAYS = 54
LLAMA3_GPUS = 16384
LLAMA3_UNEXPECTED_INTERRUPTIONS = 419
LLAMA3_H100_MTBF_H = LLAMA3_SNAPSHOT_DAYS * 24 * LLAMA3_GPUS / LLAMA3_UNEXPECTED_INTERRUPTIONS  # ~50,677 h
LLAMA3_MTBF_SOURCE = (
    "Llama 3 (arXiv 2407.21783, sec. 3.3.4): 419 unexpected interruptions in 54 days on "
    "16,384 H100 GPUs -> per-GPU MTBF = 54*24*16384/419 = 50,677 h"
)

# Llama 3 (arXiv 2407.21783, sec. 3.3.1, Storage): Meta's Tectonic file system for Llama 3
# pre-training, 240 PB on 7,500 SSD servers, "sustainable throughput of 2 TB/s and a peak
# throughput of 7 TB/s". A large dedicated training store; smaller sites should pass their own.
LLAMA3_STORAGE_SUSTAINED_BPS = 2e12
LLAMA3_STORAGE_SOURCE = "Llama 3 (arXiv 2407.21783, sec. 3.3.1): Tectonic, 2 TB/s sustained (7 TB/s peak)"

# Rajbhandari et al. 2020 (ZeRO, arXiv 1910.02054, sec. 3.1): 2 + 2 + 12 bytes/param of model
# states; minus the 2 bytes of fp16/bf16 gradients, which a checkpoint does not keep.
CHECKPOINT_BYTES_PER_PARAM = 14.0


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
MAX_TOKENS = 1e18  # a sanity bound on input, far beyond any training run (Llama 3: 15.6T tokens)
_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
_TOKENS_RE = re.compile(r"^\s*([0-9][0-9_,]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+)\s*([KMBTkmbt]?)\s*$")


def parse_tokens(value: str | int | float) -> float:
    """Token count from "15T", "1.5B", "300M", "10k", "2e12", "1_000_000" or a plain number.

    Suffixes are decimal (K=1e3, M=1e6, B=1e9, T=1e12), case-insensitive. Raises InputError for
    anything else, and for counts that are not positive and finite.
    """
    if isinstance(value, bool):
        raise InputError(f"token count must be a number or a string like '15T', not {value!r}")
    if isinstance(value, (int, float)):
        tokens = float(value)
    elif isinstance(value, str):
        m = _TOKENS_RE.match(value)
        if not m:
            raise InputError(f"cannot read token count {value!r}: use a number with an optional K/M/B/T suffix, "
                             "e.g. '15T'")
        number = m.group(1).replace("_", "").replace(",", "")
        try:
            tokens = float(number) * _SUFFIX[m.group(2).upper()]
        except ValueError:
            raise InputError(f"cannot read token count {value!r}") from None
    else:
        raise InputError(f"token count must be a number or a string like '15T', not {type(value).__name__}")
    if not math.isfinite(tokens) or tokens <= 0:
        raise InputError(f"token count must be positive and finite, got {value!r}")
    if tokens > MAX_TOKENS:
        raise InputError(f"token count {tokens:.3g} is absurd (more than {MAX_TOKENS:.0e}, "
                         "~10^5 x the 15T of Llama 3): check the number")
    return tokens


def _positive(name: str, x: float, *, allow_zero: bool = False) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number, got {x!r}") from None
    if not math.isfinite(x) or x < 0 or (x == 0 and not allow_zero):
        raise InputError(f"{name} must be {'non-negative' if allow_zero else 'positive'} and finite, got {x!r}")
    return x


# ---------------------------------------------------------------------------------------------
# Wall-clock, device-hours, cost
# ---------------------------------------------------------------------------------------------
def training_seconds(total_tokens: float, tokens_per_s_per_device: float, devices: int) -> float:
    """Failure-free wall-clock seconds to process `total_tokens` at a steady throughput."""
    total_tokens = _positive("total_tokens", total_tokens)
    tps = _positive("tokens_per_s_per_device", tokens_per_s_per_device)
    n = int(_positive("devices", devices))
    # time = tokens / (per-device throughput * devices)  (definition of throughput)
    return total_tokens / (tps * n)


def device_hours(wall_s: float, devices: int) -> float:
    """Device-hours consumed by `devices` devices held for `wall_s` seconds."""
    # device-hours = N * wall-clock hours  (definition)
    return _positive("devices", devices) * _positive("wall_s", wall_s, allow_zero=True) / SECONDS_PER_HOUR


def cost(device_hours_: float, price_per_device_hour: float) -> float:
    """Cost in the price's currency."""
    # cost = device-hours * price per device-hour  (definition)
    return _positive("device_hours", device_hours_, allow_zero=True) * _positive(
        "price_per_device_hour", price_per_device_hour, allow_zero=True)


# ---------------------------------------------------------------------------------------------
# Checkpointing
# ---------------------------------------------------------------------------------------------
def checkpoint_bytes(params_total: float, bytes_per_param: float = CHECKPOINT_BYTES_PER_PARAM) -> float:
    """Bytes of one full training checkpoint (weights + optimizer state, no gradients)."""
    # ZeRO (arXiv 1910.02054) sec. 3.1: (2 + 12) bytes/param for bf16 weights + fp32 Adam state
    return _positive("params_total", params_total) * _positive("bytes_per_param", bytes_per_param)


def checkpoint_write_s(ckpt_bytes: float, storage_write_Bps: float = LLAMA3_STORAGE_SUSTAINED_BPS) -> float:
    """Seconds to write one checkpoint at the storage system's aggregate write bandwidth."""
    # write time = size / aggregate bandwidth (all ranks write their shards in parallel)
    return (_positive("checkpoint bytes", ckpt_bytes, allow_zero=True)
            / _positive("storage_write_Bps", storage_write_Bps))


def cluster_mtbf_s(device_mtbf_h: float, devices: int) -> float:
    """Mean time between job interruptions for a job on `devices` devices, in seconds."""
    # series system of N independent exponential components: MTBF_job = MTBF_device / N
    return _positive("device_mtbf_h", device_mtbf_h) * SECONDS_PER_HOUR / _positive("devices", devices)


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum compute time between checkpoints."""
    # Young 1974, CACM 17(9):530-531: tau_opt = sqrt(2 * C * M)
    return math.sqrt(2.0 * _positive("checkpoint_s", checkpoint_s, allow_zero=True) * _positive("mtbf_s", mtbf_s))


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints (C < 2M), else M."""
    c = _positive("checkpoint_s", checkpoint_s, allow_zero=True)
    m = _positive("mtbf_s", mtbf_s)
    if c >= 2.0 * m:
        # Daly 2006, FGCS 22(3):303-312 (higher-order optimum): tau_opt = M when C >= 2M
        return m
    x = c / (2.0 * m)
    # Daly 2006, FGCS 22(3):303-312 (higher-order optimum): tau = sqrt(2CM)[1 + sqrt(C/2M)/3 + (C/2M)/9] - C
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - c


def expected_wall_s(solve_s: float, interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Expected wall-clock to finish `solve_s` seconds of failure-free work, with failures."""
    ts = _positive("solve_s", solve_s, allow_zero=True)
    tau = _positive("interval_s", interval_s)
    c = _positive("checkpoint_s", checkpoint_s, allow_zero=True)
    r = _positive("restart_s", restart_s, allow_zero=True)
    m = _positive("mtbf_s", mtbf_s)
    # Daly 2006, FGCS 22(3):303-312 (complete cost model): T_w = M e^{R/M} (e^{(tau+C)/M} - 1) T_s / tau
    return m * math.exp(r / m) * math.expm1((tau + c) / m) * ts / tau


def goodput_fraction(interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Expected fraction of wall-clock spent on useful (kept) training, in (0, 1]."""
    # Daly 2006 complete cost model rearranged: goodput = T_s / T_w = tau / (M e^{R/M} (e^{(tau+C)/M} - 1))
    return 1.0 / expected_wall_s(1.0, interval_s, checkpoint_s, restart_s, mtbf_s)


# ---------------------------------------------------------------------------------------------
# The whole estimate
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingEstimate:
    """Calendar estimate for one plan and a token budget. Times in seconds unless named *_days/_h."""

    total_tokens: float
    devices: int
    tokens_per_s: float  # whole job
    days: float  # failure-free wall-clock
    effective_days: float  # expected wall-clock with checkpoints, failures and restarts
    goodput: float  # days / effective_days
    device_hours: float  # devices * effective wall-clock (what is paid for)
    ideal_device_hours: float  # devices * failure-free wall-clock
    cost: float | None  # device_hours * price; None without a price
    checkpoint_bytes: float
    checkpoint_s: float  # blocking time per checkpoint (C)
    checkpoint_interval_s: float  # compute time between checkpoints (tau)
    interval_method: str  # "daly", "young" or "user"
    restart_s: float  # R
    mtbf_s: float  # job (cluster) MTBF, M
    device_mtbf_h: float
    failures_expected: float  # effective wall-clock / M
    checkpoints_expected: float  # failure-free compute / tau
    assumptions: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        d = asdict(self)
        d["assumptions"] = list(self.assumptions)
        return d


def _checkpoint_time_s(ckpt_b: float, storage_write_Bps: float, checkpoint_s: float | None,
                       assumptions: list[str]) -> float:
    """Blocking time per checkpoint: size / bandwidth, or the user's figure; notes the assumption."""
    if checkpoint_s is None:
        c = checkpoint_write_s(ckpt_b, storage_write_Bps)
        src = " (" + LLAMA3_STORAGE_SOURCE + ")" if storage_write_Bps == LLAMA3_STORAGE_SUSTAINED_BPS else ""
        assumptions.append(f"storage write bandwidth {storage_write_Bps / 1e9:g} GB/s{src}")
    else:
        c = _positive("checkpoint_s", checkpoint_s)
        assumptions.append(f"checkpoint blocking time {c:g} s (user)")
    return c


def _checkpoint_interval(c: float, m: float, checkpoint_interval_s: float | None,
                         interval_method: str) -> tuple[float, str]:
    """(tau, method): the user's interval, or Daly's / Young's optimum for checkpoint time c and MTBF m."""
    if checkpoint_interval_s is not None:
        return _positive("checkpoint_interval_s", checkpoint_interval_s), "user"
    if interval_method == "daly":
        return daly_interval_s(c, m), "daly"
    if interval_method == "young":
        return young_interval_s(c, m), "young"
    raise InputError(f"interval_method must be 'daly' or 'young', got {interval_method!r}")


def estimate_training(
    total_tokens: float | str,
    tokens_per_s_per_device: float,
    devices: int,
    *,
    params_total: float,
    restart_s: float,
    device_mtbf_h: float = LLAMA3_H100_MTBF_H,
    storage_write_Bps: float = LLAMA3_STORAGE_SUSTAINED_BPS,
    checkpoint_bytes_per_param: float = CHECKPOINT_BYTES_PER_PARAM,
    checkpoint_s: float | None = None,
    checkpoint_interval_s: float | None = None,
    interval_method: str = "daly",
    price_per_device_hour: float | None = None,
) -> TrainingEstimate:
    """Wall-clock, device-hours, cost and goodput for training `total_tokens` tokens.

    `restart_s` (time from a failure to training resuming) has no default: it is a property of the
    site. `device_mtbf_h` defaults to the Llama 3 H100 figure and `storage_write_Bps` to Llama 3's
    Tectonic store (see the module constants); pass your own for other hardware or storage.
    `checkpoint_s` overrides the size/bandwidth write time (e.g. for asynchronous saves);
    `checkpoint_interval_s` overrides the optimum (Daly's by default, or "young").
    """
    tokens = parse_tokens(total_tokens)
    n = int(_positive("devices", devices))
    solve_s = training_seconds(tokens, tokens_per_s_per_device, n)
    ckpt_b = checkpoint_bytes(params_total, checkpoint_bytes_per_param)
    assumptions = [
        f"checkpoint = {checkpoint_bytes_per_param:g} B/param (bf16 weights + fp32 master + Adam moments, no grads)",
    ]
    c = _checkpoint_time_s(ckpt_b, storage_write_Bps, checkpoint_s, assumptions)
    m = cluster_mtbf_s(device_mtbf_h, n)
    src = " (" + LLAMA3_MTBF_SOURCE + ")" if device_mtbf_h == LLAMA3_H100_MTBF_H else " (user)"
    assumptions.append(f"per-device MTBF {device_mtbf_h:,.0f} h{src}; job MTBF = device MTBF / {n}")
    r = _positive("restart_s", restart_s, allow_zero=True)
    tau, method = _checkpoint_interval(c, m, checkpoint_interval_s, interval_method)
    g = goodput_fraction(tau, c, r, m)
    wall_s = solve_s / g
    dh = device_hours(wall_s, n)
    price = None if price_per_device_hour is None else cost(dh, price_per_device_hour)
    return TrainingEstimate(
        total_tokens=tokens, devices=n, tokens_per_s=float(tokens_per_s_per_device) * n,
        days=solve_s / SECONDS_PER_DAY, effective_days=wall_s / SECONDS_PER_DAY, goodput=g,
        device_hours=dh, ideal_device_hours=device_hours(solve_s, n), cost=price,
        checkpoint_bytes=ckpt_b, checkpoint_s=c, checkpoint_interval_s=tau, interval_method=method,
        restart_s=r, mtbf_s=m, device_mtbf_h=float(device_mtbf_h),
        failures_expected=wall_s / m, checkpoints_expected=solve_s / tau,
        assumptions=tuple(assumptions),
    )


def plan_devices(plan: dict) -> int:
    """Devices used by a plan from the `--json` schema (`plan` block or the whole plan entry)."""
    knobs = plan.get("plan", plan)
    try:
        return int(knobs.get("tp", 1)) * int(knobs.get("pp", 1)) * int(knobs.get("dp", 1)) * int(knobs.get("cp", 1))
    except (TypeError, ValueError):
        raise InputError("plan has non-integer parallel sizes") from None


def estimate_for_plan(plan: dict, total_tokens: float | str, *, params_total: float, restart_s: float,
                      **kwargs) -> TrainingEstimate:
    """`estimate_training` for one entry of the `--json` "plans" list."""
    if "tokens_per_s_per_device" not in plan:
        raise InputError("plan has no tokens_per_s_per_device")
    return estimate_training(total_tokens, plan["tokens_per_s_per_device"], plan_devices(plan),
                             params_total=params_total, restart_s=restart_s, **kwargs)
