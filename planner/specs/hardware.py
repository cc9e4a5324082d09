"""Accelerator (hardware profile) spec. Conventions from shared/reference/specs.md:
dense (not 2:4 sparse) FLOP/s; per-direction link bandwidth; usable (driver-reported) HBM."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from planner.names import check_name

# Sanity bounds on input figures (not hardware facts): three orders of magnitude either side of every device in
# the catalog, so a typo or a hostile 1e308 / 1e-300 is refused before it overflows or divides by ~0.
TFLOPS_RANGE = (1e-2, 1e6)  # catalog: 19.5 (A100 fp32) .. 5000 (GB200 fp8)
GIB_MAX = 1e5  # catalog HBM: 16 .. 192 GiB
GBPS_RANGE = (1e-3, 1e6)  # catalog links and HBM: 12.5 .. 8000 GB/s
LATENCY_US_MAX = 1e6


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PeakFlops(_Frozen):
    """Dense peak TFLOP/s per device and dtype; None = dtype not supported in hardware."""

    bf16: float = Field(..., ge=TFLOPS_RANGE[0], le=TFLOPS_RANGE[1])
    fp16: float | None = Field(None, ge=TFLOPS_RANGE[0], le=TFLOPS_RANGE[1])
    fp8: float | None = Field(None, ge=TFLOPS_RANGE[0], le=TFLOPS_RANGE[1])
    fp32: float | None = Field(None, ge=TFLOPS_RANGE[0], le=TFLOPS_RANGE[1],
                               description="non-tensor-core FP32 (vector) rate")
    fp4: float | None = Field(None, ge=TFLOPS_RANGE[0], le=TFLOPS_RANGE[1],
                              description="dense FP4 tensor-core rate: present on parts whose tensor cores run the "
                              "block-scaled (MX) formats, Blackwell (SM100) onwards; MXFP8 needs them")


class ScaleUp(_Frozen):
    """The fast domain: NVLink/NVSwitch, xGMI, or a TPU ICI slice."""

    kind: Literal["nvswitch", "xgmi_mesh", "ici_torus"]
    domain_size: int = Field(..., ge=1, description="devices sharing the scale-up fabric")
    unidir_GBps: float = Field(..., ge=GBPS_RANGE[0], le=GBPS_RANGE[1],
                               description="per-device, per-direction wire bandwidth (GB/s)")
    ring_busbw_GBps: float | None = Field(
        None, ge=GBPS_RANGE[0], le=GBPS_RANGE[1],
        description="measured ring all-reduce/all-gather/reduce-scatter busbw inside the domain",
    )
    nvls_allreduce_busbw_GBps: float | None = Field(None, ge=GBPS_RANGE[0], le=GBPS_RANGE[1],
                                                    description="measured NVLS all-reduce busbw")
    latency_us: float = Field(..., ge=0, le=LATENCY_US_MAX, description="per-hop/per-step collective latency (alpha)")
    source: str = ""


class ScaleOut(_Frozen):
    """The network between scale-up domains: InfiniBand/RoCE NICs, or TPU DCN."""

    kind: Literal["ib", "roce", "ethernet", "dcn"]
    unidir_GBps_per_device: float = Field(..., ge=GBPS_RANGE[0], le=GBPS_RANGE[1],
                                          description="NIC bandwidth per device, per direction")
    achievable_fraction: float = Field(
        ..., gt=0, le=1, description="measured busbw / line rate for large ring all-reduces"
    )
    latency_us: float = Field(..., ge=0, le=LATENCY_US_MAX)
    source: str = ""


class TorusSpec(_Frozen):
    """TPU slice topology rules (shared/reference/specs.md sec. 1.6)."""

    dims: int = Field(..., ge=2, le=3, description="2 for v5e/v6e, 3 for v4/v5p")
    cube: int = Field(..., ge=1, description="wraparound exists only on axes that are multiples of this")
    max_axis: int = Field(..., ge=1, description="longest axis of the largest slice")
    max_slice_chips: int = Field(..., ge=1)
    chips_per_host: int = Field(..., ge=1)
    # TPU7x: two TensorCores per chip, each its own JAX device with its own HBM (jax mesh_utils._get_physical_tpu_mesh
    # gives such a slice a 4th physical axis of cores_per_chip devices); v4 / v5p megacore and v5e / v6e: one
    cores_per_chip: int = Field(1, ge=1, le=2, description="JAX devices per chip")
    core_link_unidir_GBps: float | None = Field(
        None, gt=0, description="one-way rate between the devices of one chip (its die-to-die link); None when "
        "cores_per_chip is 1")

    @property
    def max_slice_devices(self) -> int:
        return self.max_slice_chips * self.cores_per_chip

    @model_validator(mode="after")
    def _core_link(self) -> TorusSpec:
        if (self.cores_per_chip > 1) != (self.core_link_unidir_GBps is not None):
            raise ValueError("a chip of several devices needs core_link_unidir_GBps (and only such a chip has one)")
        return self


class CalibrationSpec(_Frozen):
    """Cost-model constants fitted to one cluster's own measurements (`plan calibrate`). None = the
    model's development-run default (planner.costmodel.calibration)."""

    gemm_shape_derate: float | None = Field(None, gt=0, le=2, description="GEMM efficiency / MAMF ceiling")
    attn_rel_efficiency: float | None = Field(None, gt=0, le=2, description="attention core / GEMM efficiency")
    step_overhead_s: float | None = Field(None, ge=0, le=3600, description="fixed seconds per optimizer step")
    tp_overlap_hidden_fraction: float | None = Field(None, ge=0, le=1, description="share of TP collectives "
                                                     "hidden when TP communication overlap is on")
    error_band_rel: float | None = Field(None, ge=0, description="the calibration's own leave-one-out error band "
                                         "(planner.analysis.bands); replaces the dev-run regime's band")
    error_band_runs: int | None = Field(None, ge=1, description="runs behind error_band_rel")
    source: str = Field("", description="what the constants were fitted on")


class HardwareSpec(_Frozen):
    id: str = Field(..., min_length=1)
    name: str = ""
    vendor: str = ""
    aliases: tuple[str, ...] = ()
    peak_tflops: PeakFlops
    gemm_efficiency_max: float = Field(
        ..., gt=0, le=1, description="best-shape measured matmul / dense peak (MAMF, BF16)"
    )
    gemm_efficiency_max_fp8: float | None = Field(None, gt=0, le=1)
    # at least 1 GiB: the fit reserve alone is 1 GiB (costmodel.calibration.FIT_RESERVE_GIB); catalog: 16 .. 192
    hbm_capacity_gib: float = Field(..., ge=1, le=GIB_MAX, description="usable HBM as the driver reports it")
    hbm_bandwidth_GBps: float = Field(..., ge=GBPS_RANGE[0], le=GBPS_RANGE[1])
    host_link_unidir_GBps: float | None = Field(
        None, ge=GBPS_RANGE[0], le=GBPS_RANGE[1],
        description="per-direction device-host link (PCIe x16) rate: optimizer offload traffic; "
        "None = not known (offload then assumes PCIe Gen4 x16, the slowest the reference lists)")
    host_memory_gib: float | None = Field(
        None, gt=0, le=1e6,
        description="host DRAM per device: the reference system's (the profile's source says which) memory per "
        "node / its devices; what ZeRO-Offload and MaxText's offloaded tensors may take (None = not known: not "
        "checked; a cluster file states other nodes' with hardware: {base: <id>, host_memory_gib: N})")
    devices_per_node: int = Field(..., ge=1, description="devices per OS node / host")
    scale_up: ScaleUp
    scale_out: ScaleOut
    torus: TorusSpec | None = None
    calibration: CalibrationSpec | None = Field(None, description="constants fitted by `plan calibrate`")
    source: str = ""
    notes: str = ""

    @field_validator("id", "name", "vendor")
    @classmethod
    def _one_line_name(cls, v: str, info) -> str:
        return check_name(v, info.field_name)  # ids reach shell comments and YAML: no line breaks

    @field_validator("aliases")
    @classmethod
    def _one_line_aliases(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_name(a, "alias") for a in v)

    @model_validator(mode="after")
    def _check(self) -> "HardwareSpec":
        if self.torus is None and self.scale_up.kind == "ici_torus":
            raise ValueError("an ICI-torus accelerator needs `torus` rules")
        if self.torus is not None and self.scale_up.kind != "ici_torus":
            raise ValueError("`torus` rules describe a TPU slice: set scale_up.kind to ici_torus or drop them")
        return self

    @property
    def is_tpu(self) -> bool:
        """A TPU: chips joined by an ICI torus in slices (scale_up.kind ici_torus, which `torus` rules need)."""
        return self.scale_up.kind == "ici_torus"

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for a training dtype; fp8 falls back to bf16 where unsupported."""
        p = self.peak_tflops
        tf = {"bf16": p.bf16, "fp16": p.fp16 or p.bf16, "fp8": p.fp8 or p.bf16, "fp32": p.fp32 or p.bf16}[dtype]
        return tf * 1e12

    @property
    def mx_tensor_cores(self) -> bool:
        """Block-scaled (MX) tensor-core formats, MXFP8 among them: the parts with an FP4 rate (Blackwell on)."""
        return self.peak_tflops.fp4 is not None
