"""Where an artifact will be served, as ``verify`` is told it: every field optional, only the given
facts are checked. The container profile's own facts come from the target that owns the profile."""

from typing import Literal

from lmi_build.core.types import FrozenModel

NeuronPlatformName = Literal["inf2", "trn1"]


class ServingTarget(FrozenModel):
    """Where the artifact is meant to run. Every field is optional: only given facts are checked."""

    container: str | None = None  # container profile name
    container_target: str | None = None  # the target whose profiles name the container (trtllm, neuronx, hf)
    versions: dict[str, str] = {}  # the container's toolchain versions (from its profile)
    engine_capable: bool = True
    gpu_sm: str | None = None  # normalised "sm90"
    neuron_platform: NeuronPlatformName | None = None
    devices: int | None = None  # GPUs or NeuronCores available to the model
    compiler_flags: str | None = None  # the neuronx-cc flags string the container computes

    @property
    def given(self) -> bool:
        """Whether anything about the serving side was given (a plain integrity check otherwise)."""
        return self != ServingTarget()
