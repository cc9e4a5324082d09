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


def _row(tokens: list[str]) -> NcclRow | None:
    """A data row: 13 fields (size count type redop root | time algbw busbw wrong | same in-place)."""
    if len(tokens) != 13 or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    try:
        t, alg, bus = float(tokens[5]), float(tokens[6]), float(tokens[7])
        t_in, bus_in = float(tokens[9]), float(tokens[11])
    except ValueError:
        return None
    return NcclRow(int(tokens[0]), t, alg, bus, t_in, bus_in)


def _collective_from_ratio(ratio: float, ranks: int | None, hint: str | None) -> tuple[str, int]:
    """(collective, ranks) consistent with busbw/algbw; a file-name hint wins where it fits."""
    if hint is not None and ranks is not None:
        return hint, ranks
    if hint is not None:
        if hint == "all_reduce" and ratio < 2.0:
            return hint, max(2, round(2.0 / (2.0 - ratio)))
        if hint in ("all_gather", "reduce_scatter", "alltoall") and ratio < 1.0:
            return hint, max(2, round(1.0 / (1.0 - ratio)))
        if hint == "sendrecv":
            return hint, ranks or 2
    if ranks is not None:
        best = min(COLLECTIVES, key=lambda c: abs(bus_factor(c, ranks) - ratio))
        return best, ranks
    if abs(ratio - 1.0) < 0.01:
        return "sendrecv", 2
    if ratio > 1.0:
        return "all_reduce", max(2, round(2.0 / (2.0 - ratio)))
    return "all_gather", max(2, round(1.0 / (1.0 - ratio)))


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
    for raw in text.splitlines():
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
            avg = float(m.group(1))
        elif not line.startswith("#") and (row := _row(line.split())) is not None:
            rows.append(row)
    if not rows:
        raise InputError(f"{name}: no nccl-tests data rows found (expected lines 'size count type redop root time "
                         "algbw busbw #wrong ...'): give the output of an nccl-tests/rccl-tests *_perf binary")
    big = max(rows, key=lambda r: r.size_bytes)
    ratio = big.busbw_GBps / big.algbw_GBps if big.algbw_GBps > 0 else 1.0
    collective, ranks = _collective_from_ratio(ratio, len(hosts) or None, collective_hint(name))
    return NcclTable(tuple(rows), collective, ranks, len(set(hosts.values())) or None, library, version, iters, avg,
                     tuple(devices[k] for k in sorted(devices)))


def read_nccl_tests(path: str | Path) -> NcclTable:
    p = Path(path)
    try:
        if p.stat().st_size > MAX_LOG_BYTES:
            raise InputError(f"{p}: larger than {MAX_LOG_BYTES >> 20} MiB; give one nccl-tests output per file")
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise InputError(f"cannot read nccl-tests log {p}: {e.strerror or e}") from None
    return parse_nccl_tests(text, name=p.name)


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
    """Least squares on relative time error (scipy), out-of-place rows of at least `min_bytes`."""
    import numpy as np
    from scipy.optimize import least_squares

    rows = [r for r in table.rows if r.size_bytes >= min_bytes and r.time_us > 0]
    if len(rows) < 2:
        raise InputError(f"{table.collective} table: at least two message sizes are needed to fit bandwidth "
                         "and latency")
    size = np.array([r.size_bytes for r in rows], dtype=float)
    t_us = np.array([r.time_us for r in rows], dtype=float)
    k, f = steps(table.collective, table.ranks), table.bus_factor
    bw0 = max(r.busbw_GBps for r in rows) or 1.0
    a0 = max(1e-3, min(t_us) / k)

    def resid(x):  # x = log(alpha_us), log(busbw_GBps)
        pred = k * math.e ** x[0] + f * size / (math.e ** x[1] * 1e3)  # GB/s * 1e3 = bytes/us
        return pred / t_us - 1.0

    sol = least_squares(resid, [math.log(a0), math.log(bw0)], method="lm")
    r = resid(sol.x)
    return LinkFit(table.collective, table.ranks, table.nodes, float(math.e ** sol.x[1]), float(math.e ** sol.x[0]),
                   float(np.sqrt(np.mean(r * r))))
