"""Alpha-beta cost of collectives over a group of ranks placed on the real fabric.

Volumes per rank for a buffer of B bytes over n ranks (Thakur, Rabenseifner & Gropp 2005,
"Optimization of Collective Communication Operations in MPICH"; NCCL's busbw convention,
nccl-tests doc/PERFORMANCE.md):
  all-reduce (ring)        2 (n-1)/n * B      all-gather / reduce-scatter  (n-1)/n * B
  all-to-all               (n-1)/n * B        send/recv                    B
Time = steps * alpha + volume / busbw, where busbw is the measured bus bandwidth of the fabric
the group actually uses (shared/reference/specs.md sec. 1.3).

Placement: Megatron orders ranks tp -> cp -> ep/dp -> pp (`RankGenerator(order="tp-cp-ep-dp-pp")`),
so a group is `size` ranks spaced `stride` apart. It stays inside one scale-up domain (NVLink/NVSwitch
node, NVL72 rack, TPU ICI slice) when size * stride <= domain; otherwise every rank also crosses the
scale-out network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.costmodel import calibration as cal
from planner.specs import ClusterSpec

Kind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]


@dataclass(frozen=True)
class Link:
    """Effective fabric for one group: bus bandwidth (bytes/s) and per-step latency (s)."""

    busbw: float
    alpha: float
    crosses_domain: bool
    ranks_per_domain: int


def group_link(cluster: ClusterSpec, size: int, stride: int, kind: Kind = "all_gather") -> Link:
    """Fabric seen by a group of `size` ranks spaced `stride` apart."""
    hw = cluster.hardware
    su, so = hw.scale_up, hw.scale_out
    domain = cluster.scale_up_size
    per_domain = max(1, min(size, domain // stride)) if stride < domain else 1
    # Scale-up bandwidth: measured ring busbw (specs.md 1.3), else ~80% of the per-direction wire rate.
    intra = (su.ring_busbw_GBps or cal.RING_WIRE_FRACTION * su.unidir_GBps) * 1e9
    if kind == "all_reduce" and su.nvls_allreduce_busbw_GBps and per_domain > 4:
        intra = su.nvls_allreduce_busbw_GBps * 1e9  # NVLink SHARP does the reduction in the switch
    if su.kind == "xgmi_mesh" and per_domain < domain:
        # fully connected mesh without a switch: a rank reaches a peer over one link only
        intra *= (per_domain - 1) / max(1, domain - 1)
    if su.kind == "ici_torus":
        intra = su.unidir_GBps * 1e9 * cal.ICI_BUS_FRACTION
    if size * stride <= domain or size == 1:
        return Link(intra, su.latency_us * 1e-6, False, per_domain)
    # Crossing domains: each rank in a domain drives its own NIC; NCCL runs one ring per NIC and
    # reduces hierarchically, so busbw grows with the group's ranks per domain, capped by the scale-up
    # fabric (specs.md 1.3: 4x8 B200 all-reduce 382 GB/s with 8x50 GB/s NICs per node).
    inter = per_domain * so.unidir_GBps_per_device * so.achievable_fraction * 1e9
    # one rank per domain: the scale-up fabric carries none of this group's traffic (on an xGMI mesh the
    # scaled intra rate above is 0 there, which divided by zero)
    return Link(inter if per_domain == 1 else min(intra, inter), so.latency_us * 1e-6, True, per_domain)


def collective_time(kind: Kind, nbytes: float, size: int, link: Link, count: float = 1.0) -> float:
    """Seconds for a buffer of `nbytes` (full, unsharded) moved over `size` ranks as `count` separate
    collectives of equal share: the bandwidth term is paid once, the latency term `count` times."""
    if size <= 1 or nbytes <= 0:
        return 0.0
    n = size
    if kind == "all_reduce":
        return count * 2 * (n - 1) * link.alpha + 2.0 * (n - 1) / n * nbytes / link.busbw
    if kind in ("all_gather", "reduce_scatter"):
        return count * (n - 1) * link.alpha + (n - 1) / n * nbytes / link.busbw
    if kind == "all_to_all":
        if link.crosses_domain:
            # the share addressed to ranks outside the domain goes over the NIC of the sender
            off = (n - link.ranks_per_domain) / n
            return (n - 1) * link.alpha + off * nbytes / link.busbw * link.ranks_per_domain
        return (n - 1) * link.alpha + (n - 1) / n * nbytes / link.busbw
    if kind == "send_recv":
        return link.alpha + nbytes / link.busbw
    raise ValueError(kind)


def ring_allreduce_volume_fraction(n: int) -> float:
    """Bytes each rank sends in a ring all-reduce, per byte of buffer: 2(n-1)/n (Patarasuk & Yuan 2009)."""
    return 2.0 * (n - 1) / n
