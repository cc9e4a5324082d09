"""Read nccl-tests / rccl-tests output and fit the alpha-beta link model to it.

Formats accepted (every variant in shared/reference/nccl_tests/, see its README): an optional Slurm task
prefix (`0: `) on every line; Open MPI / RCCL banner lines mixed in (ignored); rank lines with or without
the `Group` field and any PCI id form; a missing `# nThread` header, device list or `Avg bus bandwidth`
(truncated publications); `#wrong` as `0` or `N/A`; times with decimals or as integers.

The data row layout is nccl-tests' own (src/common.cu): size, count, type, redop, root, then time (us),
algbw, busbw (GB/s), #wrong for out-of-place and again for in-place. busbw = algbw x the collective's bus
factor (nccl-tests doc/PERFORMANCE.md): 2(n-1)/n for all_reduce, (n-1)/n for all_gather / reduce_scatter /
alltoall, 1 for sendrecv / broadcast / reduce.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from planner.errors import InputError
from planner.names import safe_line

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")
MAX_LOG_BYTES = 8 << 20  # 8 MiB: a full sweep with rank listing is a few tens of KiB

_PREFIX = re.compile(r"^\s*\d+:\s?")  # Slurm `srun --label` task prefix
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)"
                   r"\s+\[[^\]]*\]\s*(.*)$")
_NTHREAD = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+).*?(?<!warmup )\biters:\s*(\d+)")
_VERSION = re.compile(r"^(NCCL|RCCL) version\s*:?\s*(\S+)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)")


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    time_us: float  # out-of-place
    algbw_GBps: float
    busbw_GBps: float
    time_us_inplace: float
    busbw_GBps_inplace: float


@dataclass(frozen=True)
class NcclTable:
    rows: tuple[NcclRow, ...]
    collective: str  # one of COLLECTIVES
    ranks: int  # from the rank listing, else from the busbw/algbw ratio
    nodes: int | None  # distinct hosts in the rank listing; None when the output has no listing
    library: str | None  # "NCCL" / "RCCL" when the output names its version
    version: str | None
    iters: int | None
    avg_busbw_GBps: float | None
    devices: tuple[str, ...] = ()

    @property
    def bus_factor(self) -> float:
        """busbw / algbw of the collective over `ranks` (nccl-tests doc/PERFORMANCE.md)."""
        return bus_factor(self.collective, self.ranks)


def bus_factor(collective: str, n: int) -> float:
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return 1.0


MAX_SIZE_DIGITS = 20  # sizes up to 2^64 bytes (nccl-tests' size_t); a longer number is not a message size


class _BadRow(Exception):
    """A data row whose numbers cannot be a measurement (the message names the field and the value)."""


def _row(tokens: list[str]) -> NcclRow | None:
    """A data row: 13 fields (size count type redop root | time algbw busbw wrong | same in-place).
    None when the line is not a data row; _BadRow when it is one with a value no measurement has."""
    if len(tokens) != 13 or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    try:
        t, alg, bus = float(tokens[5]), float(tokens[6]), float(tokens[7])
        t_in, bus_in = float(tokens[9]), float(tokens[11])
    except ValueError:
        return None
    if len(tokens[0]) > MAX_SIZE_DIGITS:
        raise _BadRow(f"size {safe_line(tokens[0], 40)} has {len(tokens[0])} digits (more than a 64-bit size)")
    for field, v in (("time", t), ("algbw", alg), ("busbw", bus), ("in-place time", t_in), ("in-place busbw", bus_in)):
        if not math.isfinite(v) or v < 0:
            raise _BadRow(f"{field} {v:g} is not a finite non-negative number")
    return NcclRow(int(tokens[0]), t, alg, bus, t_in, bus_in)


def _ranks_from_ratio(collective: str, ratio: float) -> int | None:
    """The rank count whose bus factor is `ratio` (None when no count has it: busbw/algbw of 2 or more for an
    all-reduce, 1 or more for an all-gather / reduce-scatter / all-to-all means infinitely many ranks)."""
    top = 2.0 if collective == "all_reduce" else 1.0
    if not 0.0 <= ratio < top - 1e-9:
        return None
    return max(2, min(1 << 24, round(top / (top - ratio))))


def _collective_from_ratio(ratio: float, ranks: int | None, hint: str | None) -> tuple[str, int] | None:
    """(collective, ranks) consistent with busbw/algbw; a file-name hint wins where it fits; None when the ratio
    fits no rank count."""
    if hint is not None and ranks is not None:
        return hint, ranks
    if hint == "sendrecv":
        return hint, 2
    if hint is not None:
        n = _ranks_from_ratio(hint, ratio)
        if n is not None:
            return hint, n
    if ranks is not None:
        best = min(COLLECTIVES, key=lambda c: abs(bus_factor(c, ranks) - ratio))
        return best, ranks
    if abs(ratio - 1.0) < 0.01:
        return "sendrecv", 2
    kind = "all_reduce" if ratio > 1.0 else "all_gather"
    n = _ranks_from_ratio(kind, ratio)
    return None if n is None else (kind, n)


def collective_hint(name: str) -> str | None:
    """Collective named in a log's file name (`all_reduce_perf`, `h100-all_gather.txt`, ...)."""
    key = re.sub(r"[^a-z]", "", name.lower())
    for c in ("reduce_scatter", "all_reduce", "all_gather", "alltoall", "sendrecv"):
        if c.replace("_", "") in key:
            return c
    return None


def parse_nccl_tests(text: str, name: str = "nccl-tests log") -> NcclTable:
    """Parse one nccl-tests / rccl-tests output. Raises InputError when it holds no data row."""
    rows: list[NcclRow] = []
    hosts: dict[int, str] = {}
    devices: dict[int, str] = {}
    iters = version = library = avg = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _PREFIX.sub("", raw, count=1) if _PREFIX.match(raw) and not raw.lstrip().startswith("#") else raw
        line = line.strip()
        if (m := _RANK.match(line)) is not None:
            hosts[int(m.group(1))], devices[int(m.group(1))] = m.group(2), m.group(4).strip()
        elif (m := _NTHREAD.match(line)) is not None:
            iters = int(m.group(3))
        elif (m := _VERSION.match(line)) is not None:
            library, version = m.group(1), m.group(2)
        elif line.startswith("rccl-tests:") and library is None:
            library = "RCCL"
        elif (m := _AVG.match(line)) is not None:
            avg = float(m.group(1)) if len(m.group(1)) < 40 else None
        elif not line.startswith("#") and (row := _data_row(line, name, lineno)) is not None:
            rows.append(row)
    collective, ranks = _shape(rows, hosts, name)
    return NcclTable(tuple(rows), collective, ranks, len(set(hosts.values())) or None, library, version, iters, avg,
                     tuple(devices[k] for k in sorted(devices)))


def _data_row(line: str, name: str, lineno: int) -> NcclRow | None:
    try:
        return _row(line.split())
    except _BadRow as e:
        raise InputError(f"{name} line {lineno}: {e}: give the output of an nccl-tests/rccl-tests *_perf "
                         "binary as printed") from None


def _shape(rows: list[NcclRow], hosts: dict[int, str], name: str) -> tuple[str, int]:
    """(collective, ranks) of a table: the rank listing, the file name and busbw/algbw of the largest row."""
    if not rows:
        raise InputError(f"{name}: no nccl-tests data rows found (expected lines 'size count type redop root time "
                         "algbw busbw #wrong ...'): give the output of an nccl-tests/rccl-tests *_perf binary")
    big = max(rows, key=lambda r: r.size_bytes)
    ratio = big.busbw_GBps / big.algbw_GBps if big.algbw_GBps > 0 else 1.0
    found = _collective_from_ratio(ratio, len(hosts) or None, collective_hint(name))
    if found is None:
        raise InputError(f"{name}: busbw/algbw = {ratio:.4g} on the largest row fits no rank count of any "
                         "collective: keep the '#  Rank ...' listing in the log or name the collective in the "
                         "file name (e.g. all_reduce_perf.txt)")
    collective, ranks = found
    if ranks < 2:
        raise InputError(f"{name}: the log lists one rank: a collective over one rank crosses no link; give a "
                         "run over two or more devices")
    return collective, ranks


def read_nccl_tests(path: str | Path) -> NcclTable:
    """One log through the safe reader (a regular file of at most MAX_LOG_BYTES; a FIFO or device never
    blocks); stray non-UTF-8 bytes are replaced, binary data is refused."""
    from planner.catalog.files import read_text_file

    p = Path(path)
    where = f"nccl-tests log {safe_line(str(p), 200)!r}"
    text = read_text_file(p, where, MAX_LOG_BYTES, "one nccl-tests output per file", errors="replace")
    if "\x00" in text:
        raise InputError(f"{where} is binary: give the text output of an nccl-tests/rccl-tests *_perf binary")
    return parse_nccl_tests(text, name=safe_line(p.name, 200))


@dataclass(frozen=True)
class LinkFit:
    """Alpha-beta fit of one table: t(S) = steps(n) * alpha + bus_factor(n) * S / busbw."""

    collective: str
    ranks: int
    nodes: int | None
    busbw_GBps: float
    alpha_us: float  # per step, in planner.collectives' convention (2(n-1) steps for a ring all-reduce)
    rel_rms_error: float  # relative RMS of the fitted time over the rows used


def steps(collective: str, n: int) -> int:
    """Latency terms per collective in planner.collectives.collective_time."""
    if collective == "all_reduce":
        return 2 * (n - 1)
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        return n - 1
    return 1


def fit_link(table: NcclTable, min_bytes: int = 1) -> LinkFit:
    """Least squares on relative time error (scipy), out-of-place rows of at least `min_bytes` and at least
    two distinct message sizes; InputError when the fit does not give a finite link in the profile's ranges."""
    rows = [r for r in table.rows if r.size_bytes >= min_bytes and r.time_us > 0]
    if len({r.size_bytes for r in rows}) < 2:
        raise InputError(f"{table.collective} table: at least two message sizes (of {min_bytes:,} bytes or more, "
                         "with a positive time) are needed to fit bandwidth and latency")
    try:
        busbw, alpha, rms = _least_squares(table, rows)
    except (ValueError, OverflowError, ZeroDivisionError, FloatingPointError) as e:
        raise InputError(f"{table.collective} table: the alpha-beta fit failed ({safe_line(e, 120)}): check the "
                         "log's times and bandwidths") from None
    from planner.specs.hardware import GBPS_RANGE, LATENCY_US_MAX

    if not (math.isfinite(busbw) and GBPS_RANGE[0] <= busbw <= GBPS_RANGE[1]):
        raise InputError(f"{table.collective} table: the fitted bus bandwidth {busbw:.4g} GB/s is outside "
                         f"{GBPS_RANGE[0]:g}-{GBPS_RANGE[1]:g} GB/s: check the log's times and sizes")
    if not (math.isfinite(alpha) and 0 <= alpha <= LATENCY_US_MAX):
        raise InputError(f"{table.collective} table: the fitted latency {alpha:.4g} us per step is outside "
                         f"0-{LATENCY_US_MAX:g} us: check the log's times")
    return LinkFit(table.collective, table.ranks, table.nodes, busbw, alpha, rms if math.isfinite(rms) else 1.0)


def _least_squares(table: NcclTable, rows: list[NcclRow]) -> tuple[float, float, float]:
    """(busbw GB/s, alpha us per step, relative RMS) of t(S) = steps * alpha + bus_factor * S / busbw."""
    import numpy as np
    from scipy.optimize import least_squares

    size = np.array([float(r.size_bytes) for r in rows], dtype=float)
    t_us = np.array([r.time_us for r in rows], dtype=float)
    k, f = steps(table.collective, table.ranks), table.bus_factor
    bw0 = min(max(max(r.busbw_GBps for r in rows), 1e-2), 1e5)
    a0 = min(max(1e-3, min(t_us) / k), 1e5)

    def resid(x):  # x = log(alpha_us), log(busbw_GBps), kept within exp's range
        x = np.clip(x, -50.0, 50.0)
        pred = k * np.exp(x[0]) + f * size / (np.exp(x[1]) * 1e3)  # GB/s * 1e3 = bytes/us
        return pred / t_us - 1.0

    with np.errstate(all="ignore"):
        sol = least_squares(resid, [math.log(a0), math.log(bw0)], method="lm")
        r = resid(sol.x)
        x = np.clip(sol.x, -50.0, 50.0)
        return float(np.exp(x[1])), float(np.exp(x[0])), float(np.sqrt(np.mean(r * r)))
