"""Where Neuron NEFFs can be served: the container's neuronx-cc (the NEFF cache is keyed on it), the
platform the graphs were compiled for and its tensor-parallel degrees, the NeuronCore count, and the
compiler flags string the container computes from serving.properties (part of the NEFF cache key)."""

from __future__ import annotations

from lmi_build.artifact.manifest import Manifest
from lmi_build.artifact.serving import ServingTarget
from lmi_build.artifact.target_api import (
    Problems,
    ReadFile,
    bound_version_problems,
    device_count_problems,
    message,
    read_json_fact,
    record_mismatch,
)
from lmi_build.core.types import PlanMessage
from lmi_build.planning.startup import StartupOutcome, outcome_messages
from lmi_build.targets.neuronx.layouts import COMPILED_DIR
from lmi_build.targets.neuronx.profiles import load_profiles
from lmi_build.targets.neuronx.sdk import refused_option_messages, sdk
from lmi_build.targets.neuronx.startup import PRECOMPILED, evaluate, from_manifest

BOUND_VERSIONS = ("neuronx_cc",)


def check_compatibility(manifest: Manifest, serving: ServingTarget) -> Problems:
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []
    build = manifest.plan.get("build") or {}
    if serving.container is not None and serving.container_target not in (None, "neuronx"):
        return [message("container_target", f"artifact holds Neuron NEFFs, container {serving.container} loads no "
                        "Neuron artifact", "choose a Neuron container profile (lmi-build profiles list)")], []
    version_errors, version_warnings = bound_version_problems(manifest, serving, BOUND_VERSIONS, "artifact")
    errors += version_errors
    warnings += version_warnings
    if serving.gpu_sm is not None:
        errors.append(message("target_gpu", "artifact holds Neuron NEFFs (platform "
                              f"{manifest.hardware.neuron_platform or 'unrecorded'}), serving target is GPU "
                              f"{serving.gpu_sm}", "build with `lmi-build trtllm` or `lmi-build hf` for GPUs"))
    if serving.neuron_platform is not None:
        platform_errors, platform_warnings = _platform_problems(manifest, serving.neuron_platform, build)
        errors += platform_errors
        warnings += platform_warnings
    device_errors, device_warnings = device_count_problems(manifest, serving, "NeuronCores", f"tp {build.get('tp')}")
    errors += device_errors
    warnings += device_warnings
    start_errors, start_warnings = _startup_problems(manifest, serving)
    errors += start_errors
    warnings += start_warnings
    return errors, warnings


def container_startup(manifest: Manifest, serving: ServingTarget) -> StartupOutcome | None:
    """The serving release's start-up outcome for this artifact (``startup.evaluate``), when a
    Neuron container profile is given."""
    profile = next((p for p in load_profiles() if p.name == serving.container), None)
    if profile is None:
        return None
    return evaluate(profile, from_manifest(manifest, serving.compiler_flags))


def _startup_problems(manifest: Manifest, serving: ServingTarget) -> Problems:
    """The start-up model's errors and warnings on the serving release; without a release, the
    checks that need none: the options lmi-build refuses and a --neuron-cc-flags string."""
    outcome = container_startup(manifest, serving)
    if outcome is not None:
        return outcome_messages(outcome)
    errors = refused_option_messages(lambda key: bool(manifest.serving_properties.get(key)))
    return errors + _flags_problems(manifest, serving, manifest.plan.get("build") or {}), []


def _platform_problems(manifest: Manifest, platform: str, build: dict[str, object]) -> Problems:
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []
    built_platform = manifest.hardware.neuron_platform or build.get("platform")
    if built_platform is None:
        warnings.append(message("platform_unknown", f"artifact does not record its Neuron platform; serving "
                                f"platform is {platform}",
                                "plan with --instance-type (an inf2/trn1 type) so the build records it"))
    elif built_platform != platform:
        errors.append(message("neuron_platform", f"NEFFs compiled for {built_platform}, serving platform is "
                              f"{platform}", f"rebuild for {platform} (--instance-type of that platform)"))
    tp = build.get("tp")
    degrees = sdk().tp_degrees.get(platform)  # type: ignore[call-overload]
    if isinstance(tp, int) and degrees is not None and tp not in degrees:
        errors.append(message("neuron_tp", f"artifact has tp {tp}, {platform} supports tp "
                              f"{', '.join(map(str, degrees))}", "rebuild with a supported tp"))
    return errors, warnings


def _flags_problems(manifest: Manifest, serving: ServingTarget, build: dict[str, object]) -> list[PlanMessage]:
    """A --neuron-cc-flags string given without a container profile against the NEFFs' flags."""
    served = serving.compiler_flags
    built = build.get("compiler_flags")
    if served is None or built is None or built == served:
        return []
    return [message("compiler_flags", f"NEFFs compiled with flags '{built}', container uses '{served}'; the NEFF "
                    "cache key differs, so it would recompile", "rebuild with the container's NEURON_CC_FLAGS")]


def record_problems(manifest: Manifest, read: ReadFile) -> list[PlanMessage]:
    """What the start-up model reads from the manifest, against the artifact's own files: the NEFFs
    a precompiled layout loads (the manifest must list at least one: a NEFF left out of it is
    unverified, and "loads 0 NEFFs" is no verdict), the compiler version of compiled/VERSION and the
    neuron block's batch and core count."""
    problems: list[PlanMessage] = []
    listed = {entry.path for entry in manifest.files}
    if manifest.layout in (*PRECOMPILED, "neuronx-optimum") \
            and not any(path.startswith(f"{COMPILED_DIR}/") and path.endswith(".neff") for path in listed):
        problems.append(message("record_neffs", f"the manifest lists no {COMPILED_DIR}/*.neff: the NEFFs the "
                                "container would load are not part of the verified artifact",
                                "the artifact or its manifest was edited after the build: rebuild or re-pull it"))
    version_path = f"{COMPILED_DIR}/VERSION"
    version = read(version_path) if version_path in listed else None
    recorded = manifest.toolchain.version("neuronx_cc")
    if version is not None and recorded is not None:
        found = version.decode("utf-8", "replace").strip()
        if found != recorded:
            problems.append(record_mismatch("record_compiler_version", "neuronx-cc", recorded, found, version_path))
    config = read_json_fact(read, "config.json") if "config.json" in listed else None
    block = config.get("neuron") if config is not None else None
    build = manifest.plan.get("build") or {}
    if isinstance(block, dict):
        for key, planned in (("batch_size", build.get("batch_size")), ("num_cores", build.get("tp"))):
            if planned is not None and key in block and block[key] != planned:
                problems.append(record_mismatch("record_neuron_block", f"the planned {key}", planned, block[key],
                                                "config.json neuron block"))
    return problems
