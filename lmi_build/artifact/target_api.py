"""What the artifact layers (package, verify, the caches) need of a target, and the shared checks a
target's serving-compatibility rules are made of.

The caller hands the targets down (the CLI's registry, or the one target a build runs); the artifact
layers never look a target up by name. The whole protocol a target implements is
``lmi_build.building.target.Target``; this is the part of it these layers call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from lmi_build.artifact.layout import Layout
from lmi_build.artifact.manifest import Manifest
from lmi_build.artifact.serving import ServingTarget
from lmi_build.core.errors import UnknownName
from lmi_build.core.reading import BadFile, parse_json
from lmi_build.core.types import PlanMessage, TargetName
from lmi_build.planning.gpus import sm_number, sm_requirements
from lmi_build.planning.startup import StartupOutcome
from lmi_build.planning.target_api import ContainerFacts

Problems = tuple[list[PlanMessage], list[PlanMessage]]  # (errors, warnings)
# A file of the artifact by its manifest path: its bytes (bounded, regular files only), or None.
ReadFile = Callable[[str], "bytes | None"]


class ArtifactTarget(Protocol):
    """The artifact half of ``lmi_build.building.target.Target``."""

    @property
    def name(self) -> TargetName: ...

    @property
    def artifact_label(self) -> str:
        """What its artifacts hold, in words ("TensorRT-LLM engines")."""
        ...

    def layouts(self) -> Mapping[str, Layout]:
        """The artifact layouts this target packages, by name."""
        ...

    def container_profiles(self) -> dict[str, ContainerFacts]: ...

    def check_compatibility(self, manifest: Manifest, serving: ServingTarget) -> Problems:
        """Every mismatch between what the artifact is bound to (toolchain versions, hardware, device
        count, what the container release does at start-up) and where it will be served."""
        ...

    def container_startup(self, manifest: Manifest, serving: ServingTarget) -> StartupOutcome | None:
        """What the serving container release does with the artifact at start-up (the target's
        model of it), or None where the target has no such model or no release is given."""
        ...

    def record_problems(self, manifest: Manifest, read: ReadFile) -> list[PlanMessage]:
        """Where the manifest's record of a fact the serving checks use (architecture, checkpoint
        format, engine version, the NEFFs) is not what the artifact's own files say (``read``: a
        listed file's bytes, None when it cannot be read). A manifest re-hashed after a tamper
        passes the file checks; these facts are then read from the files, never from the record."""
        ...


TargetsByName = Mapping[str, ArtifactTarget]


def profile_owner(targets: TargetsByName, profile: str) -> tuple[ArtifactTarget, ContainerFacts]:
    """The target whose container profiles include ``profile``, and the profile's facts."""
    known: list[str] = []
    for target in targets.values():
        profiles = target.container_profiles()
        if profile in profiles:
            return target, profiles[profile]
        known += profiles
    raise UnknownName(f"unknown container profile '{profile}'",
                      hint=f"use one of: {', '.join(sorted(known))} (lmi-build profiles list)")


def message(code: str, text: str, hint: str | None = None) -> PlanMessage:
    return PlanMessage(code=code, message=text, hint=hint)


VERSION_LABELS = {"tensorrt_llm": "TensorRT-LLM", "tensorrt": "TensorRT", "neuronx_cc": "neuronx-cc"}


def _versions_differ(built: str, served: str) -> bool:
    return built.strip().lstrip("v") != served.strip().lstrip("v")


def bound_version_problems(manifest: Manifest, serving: ServingTarget, names: tuple[str, ...],
                           noun: str) -> Problems:
    """The toolchain versions an artifact is bound to (``names``) against the container's: an
    artifact built with another TensorRT / neuronx-cc cannot be loaded by it."""
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []
    container = serving.container
    for name in names:
        served = serving.versions.get(name)
        built = manifest.toolchain.version(name)
        label = VERSION_LABELS.get(name, name)
        if served is None or container is None:
            continue
        if built is None:
            warnings.append(message("version_unknown", f"artifact does not record its {label} version; "
                                    f"container {container} has {served}", "rebuild with lmi-build to record it"))
        elif _versions_differ(built, served):
            errors.append(message(f"version_{name}", f"{noun} built with {label} {built}, container "
                                  f"{container} has {served}",
                                  f"rebuild with --profile {container}, or serve with the container it was built "
                                  f"for ({manifest.toolchain.profile or 'see lmi-build inspect'})"))
    return errors, warnings


def device_count_problems(manifest: Manifest, serving: ServingTarget, unit: str, shape: str) -> Problems:
    """The devices the artifact's world size needs against those the serving target has."""
    world = manifest.world_size
    if serving.devices is None or world is None:
        return [], []
    if serving.devices < world:
        return [message("devices", f"artifact needs {world} {unit} ({shape}), serving target has "
                        f"{serving.devices}", f"serve on {world} {unit} or rebuild with tp={serving.devices}")], []
    if serving.devices > world:
        return [], [message("devices_unused", f"artifact uses {world} {unit} ({shape}), serving target has "
                            f"{serving.devices}; {serving.devices - world} stay idle",
                            f"rebuild with tp={serving.devices} to use them all")]
    return [], []


def gpu_quantization_problems(manifest: Manifest, serving: ServingTarget) -> list[PlanMessage]:
    """Quantized weights or KV cache whose kernels the serving GPU lacks (FP8 needs sm89+, ...)."""
    if serving.gpu_sm is None:
        return []
    quantization = manifest.plan.get("quantization") or {}
    return [message("gpu_quant", f"artifact is quantized {what}, which needs sm{minimum} or newer; serving GPU is "
                    f"{serving.gpu_sm}", "choose a newer GPU or another quantization")
            for what, minimum in sm_requirements(quantization.get("quant_algo"), quantization.get("kv_cache_quant_algo"))
            if sm_number(serving.gpu_sm) < minimum]


def read_json_fact(read: ReadFile, path: str) -> dict[str, object] | None:
    """A JSON object of the artifact (bounded: ``lmi_build.core.reading``), or None when it is absent or
    not one (the layout check reports such a file)."""
    data = read(path)
    if data is None:
        return None
    try:
        value = parse_json(data, what=path)
    except BadFile:
        return None
    return value if isinstance(value, dict) else None


def record_mismatch(code: str, fact: str, recorded: object, found: object, path: str) -> PlanMessage:
    return message(code, f"the manifest records {fact} {recorded!r}, the artifact's {path} says {found!r}",
                   "the artifact or its manifest was edited after the build: rebuild or re-pull it")
