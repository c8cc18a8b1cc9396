"""Instance types (``lmi_build/data/instances.toml``): how many devices, how much memory, which
hardware. Used to resolve ``tp=max`` and to refuse plans that cannot fit."""

from __future__ import annotations

from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from lmi_build.errors import OptionError
from lmi_build.tables import bundled_table

GIB = 1024**3


class AcceleratorRow(BaseModel):
    """``[accelerators.<name>]``: the per-device facts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["gpu", "neuron"]
    description: str
    memory_gib: float
    usable_memory_gib: float
    runtime_overhead_gib: float
    sm: str | None = None  # GPUs: CUDA SM architecture, e.g. "sm86"
    platform: Literal["inf2", "trn1"] | None = None  # Neuron


class Accelerator(AcceleratorRow):
    name: str


class InstanceRow(BaseModel):
    """``[instances.<type>]``: which accelerator, how many devices, how much host memory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    accelerator: str
    devices: int  # GPUs, or NeuronCores on Neuron instances
    host_memory_gib: float


class InstancesFile(BaseModel):
    """The whole of instances.toml."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    accelerators: dict[str, AcceleratorRow]
    instances: dict[str, InstanceRow]

    @model_validator(mode="after")
    def _known_accelerators(self) -> InstancesFile:
        for name, row in self.instances.items():
            if row.accelerator not in self.accelerators:
                raise ValueError(f"instance {name} names unknown accelerator {row.accelerator}")
        return self


class InstanceType(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    accelerator: Accelerator
    devices: int  # GPUs, or NeuronCores on Neuron instances
    host_memory_gib: float

    @property
    def usable_bytes_per_device(self) -> int:
        return int(self.accelerator.usable_memory_gib * GIB)

    @property
    def overhead_bytes_per_device(self) -> int:
        return int(self.accelerator.runtime_overhead_gib * GIB)


@cache
def load_instances() -> dict[str, InstanceType]:
    table = bundled_table("instances.toml", InstancesFile)
    accelerators = {name: Accelerator(name=name, **row.model_dump()) for name, row in table.accelerators.items()}
    return {
        name: InstanceType(name=name, accelerator=accelerators[row.accelerator], devices=row.devices,
                           host_memory_gib=row.host_memory_gib)
        for name, row in table.instances.items()
    }


def get_instance(name: str) -> InstanceType:
    """The instance type called ``name``, or an error listing the known ones of its family."""
    instances = load_instances()
    found = instances.get(name.strip().lower())
    if found is not None:
        return found
    family = name.split(".")[0]
    same_family = [known for known in instances if known.split(".")[0] == family]
    choices = same_family or sorted({known.split(".")[0] for known in instances})
    raise OptionError(
        f"unknown instance type '{name}'",
        hint=f"use one of: {', '.join(choices)}",
    )
