"""A cluster: `count` devices of one hardware profile, laid out in scale-up domains."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from planner.names import check_name
from planner.specs.hardware import HardwareSpec

MAX_DEVICES = 1_000_000  # beyond any machine built so far; larger is an input error


class ClusterSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = ""
    hardware: HardwareSpec
    count: int = Field(..., ge=1, le=MAX_DEVICES)
    devices_per_node: int | None = Field(None, ge=1, description="override the profile's node size")
    domain_size: int | None = Field(None, ge=1, description="override the scale-up domain size")
    aligned_allocation: bool = Field(
        True, description="the job's nodes come in whole segments inside the scale-up domains (Slurm block "
                          "scheduling `--segment`, NVIDIA's recommendation for GB200 NVL72); false: nodes anywhere "
                          "in a multi-node domain, so a group of several nodes may straddle a domain boundary")
    price_per_device_hour: float | None = Field(
        None, ge=0, allow_inf_nan=False,
        description="what one device-hour of this cluster costs (`h100x16@2.5`, or the cluster file's field); "
                    "the cost of --tokens uses it instead of --price-per-device-hour")

    @field_validator("name")
    @classmethod
    def _one_line_name(cls, v: str) -> str:
        return check_name(v, "cluster name")

    @model_validator(mode="after")
    def _check(self) -> "ClusterSpec":
        if self.count > 1 and self.count % min(self.node_size, self.count) != 0:
            raise ValueError(f"{self.count} devices is not a whole number of {self.node_size}-device nodes")
        torus = self.hardware.torus
        if torus is not None and self.count % torus.cores_per_chip:
            # a TPU7x chip is two JAX devices (its two TensorCores); a job holds whole chips
            raise ValueError(f"a {self.hardware.id} chip is {torus.cores_per_chip} devices (TensorCores): give a "
                             f"multiple of {torus.cores_per_chip} devices ({self.count} is not)")
        return self

    @property
    def node_size(self) -> int:
        return self.devices_per_node or self.hardware.devices_per_node

    @property
    def scale_up_size(self) -> int:
        """Devices that share the fast fabric (never more than the cluster)."""
        return min(self.domain_size or self.hardware.scale_up.domain_size, self.count)
