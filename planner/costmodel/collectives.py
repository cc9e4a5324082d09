"""Alpha-beta cost of collectives over a group of ranks placed on the real fabric.

Volumes per rank for a buffer of B bytes over n ranks (Thakur, Rabenseifner & Gropp 2005,
"Optimization of Collective Communication Operations in MPICH"; NCCL's busbw convention,
nccl-tests doc/PERFORMANCE.md):
  all-reduce (ring)        2 (n-1)/n * B      all-gather / reduce-scatter  (n-1)/n * B
  all-to-all               (n-1)/n * B        send/recv                    B
Time = steps * alpha + volume / busbw, where busbw is the measured bus bandwidth of the fabric
the group actually uses (shared/reference/specs.md sec. 1.3).

Placement (planner.costmodel.placement): the launcher's rank order says which scale-up domain (NVLink/NVSwitch
node, NVL72 rack, TPU ICI slice) each member of a group sits in; a group inside one domain uses its fabric
(on a TPU the links of the torus axes it runs along), a group across domains also the scale-out network,
with the NICs of its members there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.costmodel.calibration import Calibration
from planner.costmodel.placement import (
    GroupSpan,
    ici_alltoall_busbw_GBps,
    ici_device_share_GBps,
    ici_group_busbw_GBps,
    linear_span,
    placement_domain,
    unaligned_node,
)
from planner.specs import ClusterSpec

Kind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]


@dataclass(frozen=True)
class Link:
    """Effective fabric for one group: bus bandwidth (bytes/s) and per-step latency (s)."""

    busbw: float
    alpha: float
    crosses_domain: bool
    ranks_per_domain: int
    domains: int = 1  # most scale-up domains one group of this kind touches (planner.costmodel.placement)


def _intra_busbw(cluster: ClusterSpec, per_domain: int, kind: Kind, cal: Calibration, ici_axes: tuple = ()) -> float:
    """Bus bandwidth (bytes/s) of a group's `per_domain` members inside one scale-up domain."""
    su = cluster.hardware.scale_up
    domain = cluster.scale_up_size
    if su.kind == "ici_torus":
        # the links of the torus axes the group runs along (planner.costmodel.placement.ici_group_busbw_GBps; an
        # all-to-all: the links across the middle of its axes, ici_alltoall_busbw_GBps); a group of unknown shape gets
        # the whole chip's links (shared by a chip's devices)
        rate_of = ici_alltoall_busbw_GBps if kind == "all_to_all" else ici_group_busbw_GBps
        rate = rate_of(cluster, ici_axes) if ici_axes else ici_device_share_GBps(cluster)
        return rate * 1e9 * cal.ICI_BUS_FRACTION
    # Scale-up bandwidth: measured ring busbw (specs.md 1.3), else ~80% of the per-direction wire rate.
    intra = (su.ring_busbw_GBps or cal.RING_WIRE_FRACTION * su.unidir_GBps) * 1e9
    if kind == "all_reduce" and su.nvls_allreduce_busbw_GBps and per_domain > 4:
        intra = su.nvls_allreduce_busbw_GBps * 1e9  # NVLink SHARP does the reduction in the switch
    if su.kind == "xgmi_mesh" and per_domain < domain:
        # fully connected mesh without a switch: a rank reaches a peer over one link only
        intra *= max(1, per_domain - 1) / max(1, domain - 1)
    return intra


def span_link(cluster: ClusterSpec, span: GroupSpan, cal: Calibration, kind: Kind = "all_gather") -> Link:
    """Fabric seen by the groups of one kind as planner.costmodel.placement places them. Inside one scale-up domain:
    the domain's bus bandwidth. Across domains each member drives its own NIC and NCCL runs one ring per
    NIC, reducing hierarchically, so busbw grows with the group's members per domain, capped by the
    scale-up fabric (specs.md 1.3: 4x8 B200 all-reduce 382 GB/s with 8x50 GB/s NICs per node); a group
    straddling a boundary unevenly (TP3 ranks 6,7 | 8) is held to the NICs of its fewest members in one
    domain, the slowest link of its ring."""
    su, so = cluster.hardware.scale_up, cluster.hardware.scale_out
    if span.aligned or span.size <= 1:
        return Link(_intra_busbw(cluster, span.max_per_domain, kind, cal, span.ici_axes), su.latency_us * 1e-6,
                    False, span.max_per_domain, span.domains)
    n = span.min_per_domain
    inter = n * so.unidir_GBps_per_device * so.achievable_fraction * 1e9
    if kind == "send_recv" or n == 1:
        # one rank per domain (or a point-to-point pair): the scale-up fabric carries none of the traffic
        # (on an xGMI mesh the scaled intra rate is 0 there, which divided by zero)
        return Link(so.unidir_GBps_per_device * so.achievable_fraction * 1e9 if kind == "send_recv" else inter,
                    so.latency_us * 1e-6, True, n, span.domains)
    return Link(min(_intra_busbw(cluster, n, kind, cal, span.ici_axes), inter), so.latency_us * 1e-6, True, n,
                span.domains)


def group_link(cluster: ClusterSpec, size: int, stride: int, cal: Calibration, kind: Kind = "all_gather") -> Link:
    """Fabric seen by groups of `size` ranks spaced `stride` apart in a linear rank order (Megatron's
    tp-cp-ep-dp-pp) over all the cluster's devices: planner.costmodel.placement.linear_span, then span_link."""
    su, so = cluster.hardware.scale_up, cluster.hardware.scale_out
    span = linear_span("group", size, stride, cluster.count, placement_domain(cluster, cluster.count),
                       su.kind, so.kind, unaligned_node(cluster))
    return span_link(cluster, span, cal, kind)


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
