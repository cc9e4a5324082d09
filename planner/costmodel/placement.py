"""Rank placement: which links every parallel group of a plan really spans.

The launcher fixes who is next to whom, so the placement is derived from its rank order:
- Megatron-LM (and Megatron-DeepSpeed, whose PipeModelDataParallelTopology is pipe-data-model with the model
  axis fastest): `RankGenerator(order="tp-cp-ep-dp-pp")`, tp fastest (megatron/core/parallel_state.py);
  expert groups use a second generator `tp-ep-dp-pp` with the expert TP size in place of tp, so an EP group is
  `ep` ranks `etp` apart and an expert-data-parallel group `edp` ranks `etp * ep` apart.
- torchtitan: device mesh [pp, dp_replicate, dp_shard, cp, tp] (ParallelDims), tp fastest: the same linear
  order for tp, cp, dp and pp; EP borrows dp_shard * cp (* tp when etp = 1), again contiguous with stride etp.
- MaxText / JAX: mesh axes (stage, data, fsdp, expert, context, tensor), outermost first; each axis is split
  into an ICI part inside one slice and a DCN part across slices, the DCN factors taken from the outer axes
  first (`create_hybrid_device_mesh`; planner/emit/maxtext.py writes the same split). Inside a TPU slice,
  jax `mesh_utils._create_device_mesh_for_nd_torus` maps the logical ICI axes onto physical torus axes,
  innermost (most network-intensive) logical axis first, preferring as many whole physical axes as multiply
  to its size ("Preferentially map to more physical axes first for higher bandwidth").

A group is *aligned* when it lies inside one scale-up domain (NVLink/NVSwitch node, NVL72 rack, xGMI node,
TPU ICI slice). TP3 on 8-GPU nodes is not: with tp fastest, ranks 6, 7, 8 form one TP group across two
nodes. The slowest group of a kind sets the pace of its lockstep collectives, so every figure below is the
worst over all groups of that kind.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

from planner.specs import ClusterSpec, ParallelPlan
from planner.specs.dims import ParallelDims
from planner.stacks import traits

GROUPS = ("tp", "cp", "ep", "dp", "edp", "pp")
MESH_AXES = ("stage", "data", "fsdp", "expert", "context", "tensor")  # MaxText, outermost first
_DCN_ORDER = ("data", "stage", "fsdp", "expert", "context", "tensor")  # planner/emit/maxtext.py
_SCALE_UP_LINK = {"nvswitch": "nvlink", "xgmi_mesh": "xgmi", "ici_torus": "ici"}


@dataclass(frozen=True)
class IciAxis:
    """One physical torus axis (or a segment of it) that a group's in-slice part runs along."""

    length: int  # chips of the group along this physical axis
    axis_length: int  # length of the physical axis in the slice
    wraparound: bool  # the segment is the whole axis and the axis closes into a ring
    on_chip: bool = False  # the axis of a chip's own devices (TPU7x's two TensorCores), not a torus axis

    @property
    def directions(self) -> int:
        """Links per chip usable in each direction along this axis: a closed ring sends both ways (2),
        an open segment only one way end to end (1) (jax-ml/scaling-book sharding.md, Pop Quiz 2)."""
        return 2 if self.wraparound else 1


@dataclass(frozen=True)
class GroupSpan:
    """Where the groups of one kind (tp, cp, ...) of a plan sit; worst case over all groups of the kind."""

    group: str
    size: int
    aligned: bool  # every group of this kind lies inside one scale-up domain
    domains: int  # most scale-up domains one group touches
    min_per_domain: int  # fewest members a group has in a domain it touches: its share of the scale-out NICs
    max_per_domain: int  # most members of one group inside one domain
    concurrent: int  # groups of this kind crossing one domain's boundary at the same time (share its NICs)
    links: tuple[str, ...]  # link classes the group uses: scale-up, plus scale-out when not aligned
    ici_axes: tuple[IciAxis, ...] = ()  # TPU: physical torus axes of the group's in-slice part

    @property
    def crosses_domain(self) -> bool:
        return not self.aligned


@functools.lru_cache(maxsize=4096)
def linear_span(group: str, size: int, stride: int, world: int, domain: int, up: str = "scale-up",
                out: str = "scale-out", unaligned_node: int = 0) -> GroupSpan:
    """Groups of `size` ranks `stride` apart in a linear rank order (block = size * stride ranks holds
    `stride` interleaved groups), on domains of `domain` consecutive ranks. `unaligned_node` > 0: the job's
    nodes of that many ranks sit anywhere in the domains (no block scheduling), so the domain boundaries may fall
    at any node of the job; the slowest group sets the pace, so the worst such offset is the one taken."""
    if size <= 1:
        return GroupSpan(group, 1, True, 1, 1, 1, 0, (up,))
    if unaligned_node <= 0 or domain <= unaligned_node:
        return _span_at_offset(group, size, stride, world, domain, up, out, 0)
    spans = [_span_at_offset(group, size, stride, world, domain, up, out, off)
             for off in range(0, domain, unaligned_node)]
    # worst: crossing, then the fewest members on one side (their NICs carry the group), then the most sharing
    return max(spans, key=lambda sp: (sp.crosses_domain, -sp.min_per_domain, sp.domains, sp.concurrent))


def _span_at_offset(group: str, size: int, stride: int, world: int, domain: int, up: str, out: str,
                    offset: int) -> GroupSpan:
    block = size * stride
    # the pattern repeats every lcm(domain, block) ranks when the domain divides the world and the job starts at a
    # domain boundary; a job starting inside a domain is taken whole
    n = world if world % domain or offset else min(world, math.lcm(domain, block))
    n = max(block, n - n % block)
    # group j of each block of size * stride ranks: the ranks j, j + stride, ... of the block (plain Python: numpy's
    # import is a tenth of a search's time, and these loops run once per (group, layout) shape, lru-cached above)
    most_domains = most_members = 0
    fewest_crossing: int | None = None
    crossing_per_domain: dict[int, int] = {}  # domain -> crossing groups touching it
    for b0 in range(0, n, block):
        for j in range(stride):
            members: dict[int, int] = {}  # domain -> members of this group in it
            r = b0 + j + offset
            for _ in range(size):
                d = r // domain
                members[d] = members.get(d, 0) + 1
                r += stride
            most_domains = max(most_domains, len(members))
            most_members = max(most_members, max(members.values()))
            if len(members) > 1:
                least = min(members.values())
                fewest_crossing = least if fewest_crossing is None else min(fewest_crossing, least)
                for d in members:
                    crossing_per_domain[d] = crossing_per_domain.get(d, 0) + 1
    if fewest_crossing is None:
        return GroupSpan(group, size, True, 1, size, size, 0, (up,))
    return GroupSpan(group, size, False, most_domains, fewest_crossing, most_members,
                     max(crossing_per_domain.values()), (up, out))


def linear_strides(plan: ParallelPlan) -> dict[str, tuple[int, int]]:
    """(size, stride) of each group in Megatron's order tp-cp-ep-dp-pp (torchtitan's mesh gives the same):
    the gradient group is dp*cp ranks tp apart (Megatron reduces over data-parallel-with-context-parallel)."""
    tp, cp, dp, ep, etp = plan.tp, plan.cp, plan.dp, plan.ep, plan.etp
    return {"tp": (tp, 1), "cp": (cp, tp), "ep": (ep, etp), "dp": (dp * cp, tp),
            "edp": (plan.edp, etp * ep), "pp": (plan.pp, tp * cp * dp)}


def mesh_degrees_exact(plan: ParallelPlan) -> dict[str, int] | None:
    """MaxText mesh degrees of a plan, the one rule planner/emit/maxtext.py writes: ZeRO-3 shards over `fsdp`
    (ParallelDims.dp_shard), the rest of dp replicates over `data`; ep is carved out of the sharded axis first,
    then the replicated one. None when ep cannot be carved out of the data-parallel axes (no JAX mesh)."""
    shard = ParallelDims.of(plan).dp_shard if plan.zero_stage == 3 else 1
    replicate = plan.dp // shard
    g = math.gcd(shard, plan.ep)
    rest = plan.ep // g
    if replicate % rest:
        return None
    return {"stage": plan.pp, "data": replicate // rest, "fsdp": shard // g, "expert": plan.ep,
            "context": plan.cp, "tensor": plan.tp}


def mesh_degrees(plan: ParallelPlan) -> dict[str, int]:
    """mesh_degrees_exact; a plan whose ep cannot be carved keeps its experts on `data` (scored, not emitted)."""
    deg = mesh_degrees_exact(plan)
    if deg is not None:
        return deg
    shard = ParallelDims.of(plan).dp_shard if plan.zero_stage == 3 else 1
    return {"stage": plan.pp, "data": plan.dp // shard, "fsdp": shard, "expert": 1, "context": plan.cp,
            "tensor": plan.tp}


def _dcn_factors(deg: dict[str, int], num_slices: int) -> tuple[dict[str, int], int]:
    """DCN degree per mesh axis taken from the outer axes first, data before stage (MaxText's hybrid mesh as
    planner/emit/maxtext.py writes it), and the slice count no axis absorbed."""
    rem = max(1, num_slices)
    dcn = {a: 1 for a in MESH_AXES}
    for a in _DCN_ORDER:
        g = math.gcd(deg[a], rem)
        dcn[a], rem = g, rem // g
    return dcn, rem


def split_ici_dcn_exact(deg: dict[str, int], num_slices: int) -> tuple[dict[str, int], dict[str, int]] | None:
    """(ici, dcn) degrees per mesh axis with prod(dcn) = num_slices; None when the axes' degrees cannot
    cover the slices (no MaxText mesh)."""
    dcn, rem = _dcn_factors(deg, num_slices)
    return None if rem != 1 else ({a: deg[a] // dcn[a] for a in MESH_AXES}, dcn)


def split_ici_dcn(deg: dict[str, int], world: int, slice_size: int) -> tuple[dict[str, int], dict[str, int]]:
    """(ici, dcn) over world / slice_size slices; a remainder no axis absorbs stays on ICI (the emitter refuses
    such a mesh, the cost model still scores it)."""
    dcn, _ = _dcn_factors(deg, world // max(1, slice_size))
    return {a: max(1, deg[a] // dcn[a]) for a in MESH_AXES}, dcn


def placement_domain(cluster: ClusterSpec, world: int) -> int:
    """Consecutive ranks that share one scale-up domain as a job of `world` devices is laid out. A domain of
    one node (HGX 8-GPU, xGMI) is the node. A multi-node domain (GB200 NVL72: 18 trays of 4 GPUs; a TPU
    slice) holds a whole small job; a larger job is allocated in equal segments of whole nodes inside a
    domain: the largest multiple of the node size up to the domain that divides the job (Slurm
    topology/block `--segment`: NVIDIA recommends 16-tray segments, 64 GPUs of an NVL72, for jobs of 128+
    GPUs; NVIDIA technical blog "Achieving Peak System and Workload Efficiency on NVIDIA GB200 NVL72 with
    Slurm Block Scheduling"; MaxText multislice uses equal slices). Without block scheduling
    (ClusterSpec.aligned_allocation false) the whole domain, its boundaries at any node (unaligned_node)."""
    dom, node = cluster.scale_up_size, cluster.node_size
    if not cluster.aligned_allocation and dom > node:
        # nodes anywhere: the whole domain of the hardware, boundaries at any node (linear_span's unaligned_node)
        return cluster.domain_size or cluster.hardware.scale_up.domain_size
    if dom <= node or world <= dom:
        return max(1, min(dom, world))
    for d in range(dom - dom % node, node - 1, -node):
        if world % d == 0:
            return d
    return dom


def slice_shape(cluster: ClusterSpec) -> tuple[int, ...]:
    """The shape of one TPU slice of the cluster (the one owner: the search's TP sizes and the cost model's torus
    mapping read it). A slice holds placement_domain chips (equal slices that divide the job, at most
    max_slice_chips). Its shape is a topology Google offers: 2D up to 16x16 (v5e/v6e); 3D (v4/v5p) with every axis
    a multiple of the 4-chip cube edge from one cube up, else every axis <= 4 (GCP types-topologies: "AxBxC where
    A<=B<=C and A, B, C are either all <= 4 or all integer multiples of 4"; v5p's table: 2x2x1 ... 4x4x8, 8x8x16,
    16x16x24, every axis a multiple of 4 from 4x4x4); the one closest to a cube (GCP: the default topology of a chip
    count is "the one that's most similar to a cube"): the smallest longest axis, then the largest shortest.
    A count no such topology holds falls back to the closest-to-a-cube factorisation with axes <= max_axis."""
    t = cluster.hardware.torus
    assert t is not None  # callers pass TPU clusters only (HardwareSpec.is_tpu: torus rules)
    chips = _slice_chip_shape(cluster)
    # a chip of several devices (TPU7x) adds their axis after the torus axes, as jax's physical mesh does
    # (mesh_utils._get_physical_tpu_mesh: [x, y, z, core])
    return chips + (t.cores_per_chip,) if t.cores_per_chip > 1 else chips


def _slice_chip_shape(cluster: ClusterSpec) -> tuple[int, ...]:
    t = cluster.hardware.torus
    assert t is not None
    n = min(placement_domain(cluster, cluster.count) // t.cores_per_chip, t.max_slice_chips)
    shapes = {tuple(sorted(s)) for a in _divisors(n)
              for s in ([(a, n // a)] if t.dims == 2 else [(a, b, n // (a * b)) for b in _divisors(n // a)])}
    shapes = {s for s in shapes if max(s) <= t.max_axis}
    full_cubes = t.dims == 3 and n >= t.cube ** 3
    offered = {s for s in shapes if t.dims == 2 or (all(x % t.cube == 0 for x in s) if full_cubes
                                                     else max(s) <= t.cube)}
    return min(offered or shapes, key=lambda s: (max(s), -min(s), s), default=(n,))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0] if n < 4096 else \
        sorted({d for i in range(1, math.isqrt(n) + 1) if n % i == 0 for d in (i, n // i)})


def torus_assignment(ici: dict[str, int], shape: tuple[int, ...], cube: int,
                     cores_per_chip: int = 1) -> dict[str, tuple[IciAxis, ...]]:
    """Physical torus axes of each logical ICI axis, as jax mesh_utils._create_device_mesh_for_nd_torus
    assigns them: innermost logical axis first, the largest set of still-free whole physical axes whose
    lengths multiply to its size. When no set fits, the axis takes segments of free axes (the
    allow_split_physical_axes fallback): a segment shorter than its axis has no wraparound link. With several
    devices per chip the last axis of `shape` is the chip's own (slice_shape), assigned like any other."""
    free = list(shape)
    core = len(shape) - 1 if cores_per_chip > 1 else -1
    out: dict[str, tuple[IciAxis, ...]] = {}
    for name in reversed(MESH_AXES):
        size = ici[name]
        if size <= 1:
            out[name] = ()
            continue
        chosen = _whole_axes(free, size)
        if chosen is not None:
            out[name] = tuple(IciAxis(shape[i], shape[i], i != core and shape[i] % cube == 0, i == core)
                              for i in chosen)
            for i in chosen:
                free[i] = 1
            continue
        axes, left = [], size
        for i in sorted(range(len(free)), key=lambda j: -free[j]):
            g = math.gcd(left, free[i])
            if g > 1:
                whole = g == shape[i]
                axes.append(IciAxis(g, shape[i], i != core and whole and shape[i] % cube == 0, i == core))
                free[i] //= g
                left //= g
        out[name] = tuple(axes)
    return out


def _whole_axes(free: list[int], size: int) -> tuple[int, ...] | None:
    usable = [i for i, a in enumerate(free) if a > 1]
    for k in range(len(usable), 0, -1):
        for combo in itertools.combinations(usable, k):
            if math.prod(free[i] for i in combo) == size:
                return combo
    return None


def ici_group_busbw_GBps(cluster: ClusterSpec, axes: tuple[IciAxis, ...]) -> float:
    """Per-direction ICI bandwidth a ring collective over these torus axes gets per device: each axis adds its
    per-link one-way rate once per usable direction (2 on a wraparound ring, 1 on an open segment).
    AllGather time = bytes / (bidirectional ICI bandwidth x num_axes) (jax-ml/scaling-book sharding.md,
    "What happens when we AllGather over multiple axes?"); per-link rate = per-chip one-way rate over the
    2 x dims links of a chip (hardware.yaml: v4 6 x 45, v5p 6 x 100, v5e 4 x 50, v6e 4 x 100 GB/s).
    A chip of several devices (TPU7x) shares its links between them: a group that holds both of a chip's devices
    brings each shard onto the chip once and hands it across the die-to-die link (the chip's rate per device, held
    to what that link carries); a group with one device per chip runs beside its twin group on the same links
    (half the rate each); a group of the chip's own devices only runs at the die-to-die rate."""
    t = cluster.hardware.torus
    if t is None or not axes:
        return 0.0
    chip_axes = [a for a in axes if not a.on_chip]
    core_link = t.core_link_unidir_GBps or 0.0
    if not chip_axes:
        return core_link
    rate = _per_link_GBps(cluster) * sum(a.directions for a in chip_axes)
    if t.cores_per_chip == 1:
        return rate
    if len(chip_axes) < len(axes):
        return min(rate, t.cores_per_chip * core_link)  # each device takes 1/cores of the chip's inflow over it
    return rate / t.cores_per_chip


def ici_device_share_GBps(cluster: ClusterSpec) -> float:
    """A device's share of its chip's one-way ICI rate when its group's shape is not known: the chip's links over
    the chip's devices (TPU7x: two)."""
    t = cluster.hardware.torus
    return cluster.hardware.scale_up.unidir_GBps / (t.cores_per_chip if t else 1)


def _per_link_GBps(cluster: ClusterSpec) -> float:
    """One torus link's one-way rate: the chip's one-way ICI rate over its 2 x dims links."""
    t = cluster.hardware.torus
    assert t is not None
    return cluster.hardware.scale_up.unidir_GBps / (2 * t.dims)


def ici_alltoall_busbw_GBps(cluster: ClusterSpec, axes: tuple[IciAxis, ...]) -> float:
    """Per-device rate at which an all-to-all over these torus axes moves the (n-1)/n of a device's buffer that
    leaves it (the `busbw` collectives.collective_time divides by). Unlike a ring collective, an all-to-all's chunks
    travel part-way round each axis, so the links across an axis's middle carry them: on a bidirectional ring of k
    chips an all-to-all of an array of V = k x b bytes takes V / (4 W_ici), W_ici the bidirectional link rate
    (jax-ml/scaling-book sharding.md, "Our final communication primitive: the AllToAll": "AllGather / 4 for a
    bidirectional ring", its footnote's N^2/4 chunks per link), i.e. k x b / (4 x directions x one-way link rate),
    twice that on an open segment (one link across its middle instead of two). The axes carry their shares at once,
    so the longest (per direction) sets the time; never faster than the chip's links together (the ring rate).
    A chip of several devices (TPU7x) sends every device's own chunks over its links (no chunk serves both), so each
    gets 1/cores of the rate; a group of the chip's own devices only runs at the die-to-die rate."""
    t = cluster.hardware.torus
    if t is None or not axes:
        return 0.0
    chip_axes = [a for a in axes if not a.on_chip]
    if not chip_axes:
        return t.core_link_unidir_GBps or 0.0
    per_link = _per_link_GBps(cluster)
    n = math.prod(a.length for a in chip_axes)
    leaving = (n - 1) / n
    bisection_s_per_GB = max(a.length / (4 * a.directions * per_link) for a in chip_axes)
    injection_s_per_GB = leaving / (per_link * sum(a.directions for a in chip_axes))
    return leaving / max(bisection_s_per_GB, injection_s_per_GB) / t.cores_per_chip


def _mesh_groups(plan: ParallelPlan) -> dict[str, tuple[str, ...]]:
    """Mesh axes each group of the plan runs over (MaxText names)."""
    dp_axes = ("data", "fsdp", "expert", "context")
    return {"tp": ("tensor",), "cp": ("context",), "ep": ("expert",), "dp": dp_axes,
            "edp": ("data", "fsdp"), "pp": ("stage",)}


def _mesh_span(group: str, axes: tuple[str, ...], ici: dict, dcn: dict, torus: dict | None,
               slice_size: int, up: str, out: str) -> GroupSpan:
    n_ici = math.prod(ici[a] for a in axes)
    n_dcn = math.prod(dcn[a] for a in axes)
    size = n_ici * n_dcn
    ici_axes = tuple(x for a in axes for x in (torus or {}).get(a, ())) if n_ici > 1 else ()
    if n_dcn == 1:
        return GroupSpan(group, size, True, 1, size, size, 0, (up,), ici_axes)
    # every slice holds n_ici members of each crossing group; all slice_size / n_ici groups cross at once
    return GroupSpan(group, size, False, n_dcn, n_ici, n_ici, slice_size // n_ici, (up, out), ici_axes)


def placement(cluster: ClusterSpec, plan: ParallelPlan, framework: str) -> dict[str, GroupSpan]:
    """Span of every group kind of `plan` on `cluster` under `framework`'s rank order: MaxText's hybrid
    mesh (and a torus mapping) on TPU or for a stack with a mesh rank order (MaxText), the linear tp-cp-ep-dp-pp
    order else."""
    hw = cluster.hardware
    up, out = _SCALE_UP_LINK[hw.scale_up.kind], hw.scale_out.kind
    world = plan.devices
    domain = placement_domain(cluster, world)
    linear = linear_strides(plan)
    if traits(framework).rank_order == "mesh" or hw.is_tpu:
        ici, dcn = split_ici_dcn(mesh_degrees(plan), world, domain)
        torus = torus_assignment(ici, slice_shape(cluster), hw.torus.cube, hw.torus.cores_per_chip) \
            if hw.torus is not None else None
        spans = {g: _mesh_span(g, axes, ici, dcn, torus, domain, up, out) for g, axes in _mesh_groups(plan).items()}
        # a group the mesh cannot express with the cost model's size (ep not carvable from dp, expert replicas
        # with tp): the linear order stands in
        return {g: sp if sp.size == linear[g][0] else linear_span(g, *linear[g], world, domain, up, out)
                for g, sp in spans.items()}
    loose = unaligned_node(cluster)
    return {g: linear_span(g, size, stride, world, domain, up, out, loose) for g, (size, stride) in linear.items()}


def unaligned_node(cluster: ClusterSpec) -> int:
    """Ranks per node when the job's nodes sit anywhere in multi-node domains (ClusterSpec.aligned_allocation
    false), else 0: the argument linear_span takes."""
    node = cluster.node_size
    return node if not cluster.aligned_allocation and cluster.hardware.scale_up.domain_size > node else 0
