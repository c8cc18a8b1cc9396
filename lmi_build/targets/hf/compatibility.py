"""Where a Hugging Face checkpoint can be served: the GPU must have the kernels its quantization needs."""

from __future__ import annotations

from lmi_build.artifact.manifest import Manifest
from lmi_build.artifact.serving import ServingTarget
from lmi_build.artifact.target_api import Problems, gpu_quantization_problems


def check_compatibility(manifest: Manifest, serving: ServingTarget) -> Problems:
    return gpu_quantization_problems(manifest, serving), []
