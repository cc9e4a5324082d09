"""The nccl-tests / rccl-tests parser against the real published outputs vendored in
tests/data/reference/nccl_tests/ (copied from shared/reference/nccl_tests/; numbers below are read off those
files; their README lists the sources and the format variants)."""

from __future__ import annotations

import pytest
from support import NCCL_TESTS_DIR

from planner.analysis.nccl_tests import fit_link, parse_nccl_tests, read_nccl_tests
from planner.errors import InputError


def load(name):
    return read_nccl_tests(NCCL_TESTS_DIR / name)


def test_h100_one_node_nvls_all_reduce():
    t = load("h100-8gpu-1node-all_reduce.txt")
    assert (t.collective, t.ranks, t.nodes, t.iters) == ("all_reduce", 8, 1, 2)
    assert [r.size_bytes for r in t.rows] == [2**27 * 2**i for i in range(6)]  # 128 MiB .. 4 GiB
    last = t.rows[-1]
    assert (last.time_us, last.algbw_GBps, last.busbw_GBps, last.busbw_GBps_inplace) == (15870, 270.63, 473.60, 476.53)
    assert t.avg_busbw_GBps == 439.369 and t.devices[0] == "NVIDIA H100 80GB HBM3"
    # the printed average is the mean of every busbw of the table, out-of-place and in-place together
    mean = sum(r.busbw_GBps + r.busbw_GBps_inplace for r in t.rows) / (2 * len(t.rows))
    assert round(mean, 2) == 439.37


def test_h100_two_nodes_with_mpi_noise():
    t = load("h100-16gpu-2node-all_reduce.txt")
    assert (t.collective, t.ranks, t.nodes, t.library, t.version) == ("all_reduce", 16, 2, "NCCL", "2.26.2+cuda12.8")
    assert len(t.rows) == 32 and t.rows[0].size_bytes == 8 and t.rows[-1].size_bytes == 16 * 2**30
    assert (t.rows[-1].algbw_GBps, t.rows[-1].busbw_GBps) == (250.24, 469.21)
    assert t.avg_busbw_GBps == 139.56


def test_a100_slurm_prefixed_truncated_output():
    t = load("a100-16gpu-2node-all_reduce.txt")
    # no rank listing: 16 ranks from busbw/algbw = 2*15/16 = 1.875; node count unknown
    assert (t.collective, t.ranks, t.nodes, t.iters, t.avg_busbw_GBps) == ("all_reduce", 16, None, None, None)
    assert len(t.rows) == 29 and t.rows[-1].size_bytes == 2 * 2**30 and t.rows[-1].time_us == 51406
    assert t.rows[-1].busbw_GBps == 78.33


def test_a100_sendrecv_with_na_wrong_column():
    t = load("a100-8gpu-1node-sendrecv.txt")
    assert t.collective == "sendrecv" and len(t.rows) == 4
    assert [r.busbw_GBps for r in t.rows] == [110.81, 188.60, 192.75, 195.10]
    assert t.rows[-1].busbw_GBps_inplace == 195.56


def test_rccl_variants():
    one = load("mi300x-8gpu-1node-all_reduce.txt")
    assert (one.collective, one.ranks, one.nodes, one.library) == ("all_reduce", 8, 1, "RCCL")
    assert len(one.rows) == 31 and one.rows[-1].busbw_GBps == 315.69 and one.avg_busbw_GBps == 110.464
    two = load("mi300x-16gpu-2node-all_reduce.txt")  # rank lines without `Group`, PCI ids [0000:05:00.0]
    assert (two.ranks, two.nodes, two.library, two.version) == (16, 2, "RCCL", "2.22.3-HEAD:7d8d67c")
    assert two.rows[-1].busbw_GBps == 357.46 and two.avg_busbw_GBps == 92.3318
    assert two.devices == ("AMD Instinct MI300X",) * 16


def test_link_fit_reproduces_large_message_busbw():
    # alpha-beta fit: the bandwidth term approaches the large-message busbw the tables print
    for name, busbw in (("h100-8gpu-1node-all_reduce.txt", 473.6), ("mi300x-8gpu-1node-all_reduce.txt", 315.69),
                        ("mi300x-16gpu-2node-all_reduce.txt", 357.46)):
        fit = fit_link(load(name), min_bytes=1 << 20)
        assert abs(fit.busbw_GBps / busbw - 1) < 0.06, (name, fit)
        assert fit.alpha_us > 0 and fit.rel_rms_error < 0.12


def test_link_fit_recovers_a_synthetic_table():
    # table generated from alpha 3 us/step, 300 GB/s busbw on 8 ranks, exact: recovered to 1e-6
    n, alpha, bw = 8, 3.0, 300.0
    lines = []
    for i in range(3, 33):
        size = 2**i
        t = 2 * (n - 1) * alpha + 2 * (n - 1) / n * size / (bw * 1e3)
        alg = size / t / 1e3
        lines.append(f"{size:>12} {size // 4:>12} float sum -1 {t:.6f} {alg:.6f} {alg * 1.75:.6f} 0 {t:.6f} {alg:.6f} "
                     f"{alg * 1.75:.6f} 0")
    fit = fit_link(parse_nccl_tests("\n".join(lines), name="all_reduce_perf.log"))
    assert fit.ranks == 8 and abs(fit.alpha_us / alpha - 1) < 1e-6 and abs(fit.busbw_GBps / bw - 1) < 1e-6


def test_not_a_log():
    with pytest.raises(InputError, match="no nccl-tests data rows"):
        parse_nccl_tests("hello\nworld\n")
