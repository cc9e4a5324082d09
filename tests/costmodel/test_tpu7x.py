"""TPU7x (Ironwood): two devices per chip (hardware_profiles/tpu7x.yaml). The device is the TensorCore JAX and MaxText
count; the torus is the chips'; the chip's two devices share its six ICI links and talk to each other over the
die-to-die link."""

import pytest

from planner.catalog.hardware import get_hardware, parse_cluster
from planner.costmodel.placement import (
    IciAxis,
    ici_alltoall_busbw_GBps,
    ici_group_busbw_GBps,
    mesh_degrees,
    placement,
    slice_shape,
    split_ici_dcn,
    torus_assignment,
)
from planner.search.engine import torus_group_sizes
from planner.specs import ParallelPlan

# GCP tpu7x table: 1200 GBps bidirectional ICI per chip over 6 links = 100 GB/s one way per link; the die-to-die link
# is 6x a 1D ICI link (200 GBps bidirectional): 600 GB/s one way
PER_LINK = 100.0
D2D = 600.0


def test_profile_halves_the_chip_figures_per_device():
    hw = get_hardware("ironwood")
    assert hw.id == "tpu7x" and hw.torus is not None and hw.torus.cores_per_chip == 2
    assert hw.peak_tflops.bf16 == pytest.approx(2307 / 2) and hw.peak_tflops.fp8 == pytest.approx(4614 / 2)
    assert hw.hbm_bandwidth_GBps == pytest.approx(7380 / 2)
    assert hw.hbm_capacity_gib == pytest.approx(94.75)  # libtpu 0.0.42.1, tpu7x:2x2x1, per device
    assert hw.gemm_efficiency_max == pytest.approx(956.38 / 1153.5, abs=5e-4)  # microbenchmark, m=n=k=32768 bf16
    assert hw.torus.max_slice_devices == 4096 == hw.scale_up.domain_size  # 8x16x16 chips


def test_google_names_count_tensorcores_which_are_devices():
    cl = parse_cluster("tpu7x-256")  # the recipes' 4x4x8 slice: 128 chips
    assert cl.count == 256 and "128 chips" in cl.name
    assert parse_cluster("ironwoodx256").count == 256


def test_slice_has_the_cores_as_a_fourth_axis():
    # jax mesh_utils._get_physical_tpu_mesh: [x, y, z, core]; GCP's 4x4x8 is 128 chips
    assert slice_shape(parse_cluster("tpu7xx256")) == (4, 4, 8, 2)
    assert slice_shape(parse_cluster("tpu7xx8")) == (1, 2, 2, 2)  # one host, 2x2x1 chips


def test_tp2_lands_on_the_chip():
    cl = parse_cluster("tpu7xx256")
    assert 2 in torus_group_sizes(cl) and 4 in torus_group_sizes(cl)
    sp = placement(cl, ParallelPlan(tp=2, dp=128, zero_stage=3), "maxtext")
    assert sp["tp"].ici_axes == (IciAxis(2, 2, False, True),)
    assert ici_group_busbw_GBps(cl, sp["tp"].ici_axes) == pytest.approx(D2D)
    # the FSDP groups hold one device per chip, each beside its twin group on the same six links: half the chip's
    assert all(not a.on_chip for a in sp["dp"].ici_axes)
    assert ici_group_busbw_GBps(cl, sp["dp"].ici_axes) == pytest.approx(6 * PER_LINK / 2)


def test_fsdp_over_every_device_brings_each_shard_onto_a_chip_once():
    cl = parse_cluster("tpu7xx256")
    sp = placement(cl, ParallelPlan(tp=1, dp=256, zero_stage=3), "maxtext")
    assert sum(a.on_chip for a in sp["dp"].ici_axes) == 1
    # the chip's six links (4, 4 and 8 close into rings), shared through the die-to-die link: the chip's rate per device
    assert ici_group_busbw_GBps(cl, sp["dp"].ici_axes) == pytest.approx(6 * PER_LINK)
    # an all-to-all's chunks are each device's own: both devices' cross the same links
    chip_only = tuple(a for a in sp["dp"].ici_axes if not a.on_chip)
    assert ici_alltoall_busbw_GBps(cl, sp["dp"].ici_axes) == pytest.approx(
        ici_alltoall_busbw_GBps(parse_cluster("tpu-v5px128"), chip_only) / 2)


def test_megacore_generations_are_unchanged():
    cl = parse_cluster("tpu-v5px128")
    assert slice_shape(cl) == (4, 4, 8)
    ring = (IciAxis(4, 4, True),) * 3
    assert ici_group_busbw_GBps(cl, ring) == pytest.approx(600.0)


def test_assignment_matches_jax_on_the_physical_mesh():
    """torus_assignment against jax's own _create_device_mesh_for_nd_torus on TPU7x's [x, y, z, core] mesh."""
    np = pytest.importorskip("numpy")
    mesh_utils = pytest.importorskip("jax._src.mesh_utils")
    cl = parse_cluster("tpu7xx256")
    shape = slice_shape(cl)
    for plan in (ParallelPlan(tp=2, dp=128, zero_stage=3), ParallelPlan(tp=1, dp=256, zero_stage=3),
                 ParallelPlan(tp=4, dp=64, zero_stage=3)):
        ici, _ = split_ici_dcn(mesh_degrees(plan), 256, 256)
        ours = torus_assignment(ici, shape, 4, 2)
        names = [n for n, v in ici.items() if v > 1]
        physical = np.arange(256).reshape(shape)
        _, assignment = mesh_utils._create_device_mesh_for_nd_torus(physical, [ici[n] for n in names],
                                                                     allow_split_physical_axes=True)
        for j, n in enumerate(names):
            theirs = sorted(int(x) for x in assignment[:, j] if x > 1)
            assert sorted(a.length for a in ours[n]) == theirs, (plan, n)
            # the chip's own axis is the last physical axis
            assert any(a.on_chip for a in ours[n]) == (assignment[len(shape) - 1, j] > 1), (plan, n)


@pytest.mark.parametrize("name", ["tpu7xx3", "ironwoodx1", "tpu7x-7"])
def test_a_job_holds_whole_chips(name):
    from planner.errors import InputError

    with pytest.raises(InputError, match="multiple of 2"):
        parse_cluster(name)
    assert parse_cluster("tpu7x-2").name == "tpu7x-2 (2 TensorCores = 1 chip)"


def test_clusters_listing_says_the_ici_rate_is_the_chips():
    from click.testing import CliRunner

    from planner.ui.cli import main

    out = CliRunner().invoke(main, ["clusters"]).output
    line = next(x for x in out.splitlines() if x.startswith("tpu7x "))
    assert "x 600 GB/s/dir per chip of 2 devices" in line and "1153.5 TF" in line
    v5p = next(x for x in out.splitlines() if x.startswith("tpu-v5p "))
    assert "per chip" not in v5p
