"""Instance types (``lmi_build/data/instances.toml``): how many devices, how much memory, which
hardware. Used to resolve ``tp=max`` and to refuse plans that cannot fit."""

from functools import cache
from typing import Literal

from pydantic import model_validator

from lmi_build.core.errors import OptionError
from lmi_build.core.tables import bundled_table
from lmi_build.core.types import Record

GIB = 1024**3
# SageMaker names the EC2 instance types with this prefix (ml.g5.12xlarge is g5.12xlarge).
SAGEMAKER_PREFIX = "ml."


class AcceleratorRow(Record):
    """``[accelerators.<name>]``: the per-device facts."""

    kind: Literal["gpu", "neuron"]
    description: str
    memory_gib: float
    usable_memory_gib: float
    runtime_overhead_gib: float
    sm: str | None = None  # GPUs: CUDA SM architecture, e.g. "sm86"
    platform: Literal["inf2", "trn1", "trn2"] | None = None  # Neuron
    source: str  # a key of [sources]
    inferred: str | None = None  # what of the row its source does not state


class Accelerator(AcceleratorRow):
    name: str


class InstanceRow(Record):
    """``[instances.<type>]``: which accelerator, how many devices, how much host memory."""

    accelerator: str
    devices: int  # GPUs, or NeuronCores on Neuron instances
    host_memory_gib: float
    source: str  # a key of [sources]
    inferred: str | None = None  # what of the row its source does not state


class InstancesFile(Record):
    """The whole of instances.toml."""

    sources: dict[str, str]  # key -> the page the rows citing it were read from
    accelerators: dict[str, AcceleratorRow]
    instances: dict[str, InstanceRow]

    @model_validator(mode="after")
    def _known_names(self) -> "InstancesFile":
        for name, row in self.instances.items():
            if row.accelerator not in self.accelerators:
                raise ValueError(f"instance {name} names unknown accelerator {row.accelerator}")
            if name != name.lower() or name.startswith(SAGEMAKER_PREFIX):
                raise ValueError(f"instance {name}: write the EC2 name in lower case, without {SAGEMAKER_PREFIX}")
        cited = [(f"instance {name}", row.source) for name, row in self.instances.items()]
        cited += [(f"accelerator {name}", row.source) for name, row in self.accelerators.items()]
        for what, source in cited:
            if source not in self.sources:
                raise ValueError(f"{what} cites unknown source {source}")
        return self


class InstanceType(Record):
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


def ec2_name(name: str) -> str:
    """The EC2 spelling of an instance type as a user may type it: case and surrounding spaces
    ignored, SageMaker's ``ml.`` prefix dropped (``ml.g5.12xlarge`` is ``g5.12xlarge``)."""
    folded = name.strip().lower()
    return folded[len(SAGEMAKER_PREFIX):] if folded.startswith(SAGEMAKER_PREFIX) else folded


def get_instance(name: str) -> InstanceType:
    """The instance type called ``name`` (EC2 or SageMaker spelling), or an error naming what was
    typed and listing the known ones of its family (all families when the family is unknown)."""
    instances = load_instances()
    wanted = ec2_name(name)
    found = instances.get(wanted)
    if found is not None:  # named as the user typed it, in messages and the plan
        return found if found.name == name.strip() else found.model_copy(update={"name": name.strip()})
    family = wanted.split(".")[0]
    same_family = [known for known in instances if known.split(".")[0] == family]
    choices = same_family or sorted({known.split(".")[0] for known in instances})
    what = "sizes" if same_family else "families"
    prefix = SAGEMAKER_PREFIX if name.strip().lower().startswith(SAGEMAKER_PREFIX) else ""
    raise OptionError(
        f"unknown instance type '{name}'",
        hint=f"known {what}: {', '.join(prefix + choice for choice in choices)}",
    )
