"""Where TensorRT-LLM engines can be served: the container's TensorRT-LLM/TensorRT (an engine runs only
on the versions that built it), the GPU's SM (and the SM the quantization needs), the device count."""

from __future__ import annotations

from lmi_build.artifact.manifest import Manifest
from lmi_build.artifact.serving import ServingTarget
from lmi_build.artifact.target_api import (
    Problems,
    ReadFile,
    bound_version_problems,
    device_count_problems,
    gpu_quantization_problems,
    message,
    read_json_fact,
    record_mismatch,
)
from lmi_build.core.types import PlanMessage
from lmi_build.planning.gpus import normalize_sm
from lmi_build.planning.startup import StartupOutcome, outcome_messages
from lmi_build.targets.trtllm.engine_check import world_size_of
from lmi_build.targets.trtllm.layouts import ENGINE_SUBDIR, TOOLKIT_DIR
from lmi_build.targets.trtllm.profiles import load_profiles
from lmi_build.targets.trtllm.startup import TOOLKIT_LAYOUT, evaluate, from_manifest

BOUND_VERSIONS = ("tensorrt_llm", "tensorrt")


def check_compatibility(manifest: Manifest, serving: ServingTarget) -> Problems:
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []
    if serving.container is not None and not serving.engine_capable:
        return [message("container_engine", f"artifact holds TensorRT-LLM engines, container {serving.container} "
                        "has no TensorRT engine backend",
                        "serve it with an engine-capable profile (lmi-build profiles list), or rebuild with "
                        f"lmi-build hf for {serving.container}")], []
    if serving.container is not None and serving.container_target not in (None, "trtllm"):
        return [message("container_target", f"artifact holds TensorRT-LLM engines, container {serving.container} "
                        "loads no TensorRT-LLM engines", "choose a TensorRT-LLM container profile "
                        "(lmi-build profiles list)")], []
    version_errors, version_warnings = bound_version_problems(manifest, serving, BOUND_VERSIONS, "engine")
    errors += version_errors
    warnings += version_warnings
    if serving.gpu_sm is not None:
        built_sm = manifest.hardware.gpu_sm
        if built_sm is None:
            warnings.append(message("gpu_unknown", "artifact does not record the GPU SM its engines were built on; "
                                    f"serving GPU is {serving.gpu_sm}", "rebuild with lmi-build to record it"))
        elif normalize_sm(built_sm) != serving.gpu_sm:
            errors.append(message("gpu_sm", f"engines built for {normalize_sm(built_sm)}, serving GPU is "
                                  f"{serving.gpu_sm}; TensorRT engines run only on the SM they were built on",
                                  f"rebuild on a {serving.gpu_sm} GPU"))
        errors += gpu_quantization_problems(manifest, serving)
    if serving.neuron_platform is not None:
        errors.append(message("target_neuron", "artifact holds TensorRT-LLM engines, serving target is Neuron "
                              f"{serving.neuron_platform}", "build with `lmi-build neuronx` for Inferentia/Trainium"))
    build = manifest.plan.get("build") or {}
    device_errors, device_warnings = device_count_problems(
        manifest, serving, "GPUs", f"tp {build.get('tp')} x pp {build.get('pp') or 1}")
    start_errors, start_warnings = _startup_problems(manifest, serving)
    return errors + device_errors + start_errors, warnings + device_warnings + start_warnings


def container_startup(manifest: Manifest, serving: ServingTarget) -> StartupOutcome | None:
    """The serving release's start-up outcome for this artifact (``startup.evaluate``), when a
    TensorRT-LLM container profile is given and the artifact is of a layout the model knows."""
    profile = next((p for p in load_profiles() if p.name == serving.container), None)
    facts = from_manifest(manifest) if profile is not None else None
    if profile is None or facts is None:
        return None
    return evaluate(profile, facts)


def _startup_problems(manifest: Manifest, serving: ServingTarget) -> Problems:
    """The start-up model's errors and warnings on the serving release, less the engine version
    (reported above, by ``bound_version_problems``)."""
    outcome = container_startup(manifest, serving)
    if outcome is None:
        return [], []
    errors, warnings = outcome_messages(outcome)
    return [e for e in errors if e.code != "trtllm_engine_version"], warnings


def record_problems(manifest: Manifest, read: ReadFile) -> list[PlanMessage]:
    """The engine's TensorRT-LLM version, world size and architecture the container checks use, read
    from the engine's own config.json against the manifest's record of them."""
    path = f"{TOOLKIT_DIR}/{ENGINE_SUBDIR}/config.json" if manifest.layout == TOOLKIT_LAYOUT else "config.json"
    listed = {entry.path for entry in manifest.files}
    engine = read_json_fact(read, path) if path in listed else None
    if engine is None:
        return []  # the layout check reports a missing or unreadable engine config
    problems: list[PlanMessage] = []
    recorded = manifest.toolchain.version("tensorrt_llm")
    if recorded is not None and engine.get("version") is not None and str(engine.get("version")) != recorded:
        problems.append(record_mismatch("record_engine_version", "the engine's TensorRT-LLM", recorded,
                                        engine.get("version"), path))
    try:
        world_size: int | None = world_size_of(engine)
    except (TypeError, ValueError):
        world_size = None
    if manifest.world_size is not None and world_size is not None and world_size != manifest.world_size:
        problems.append(record_mismatch("record_world_size", "world size", manifest.world_size, world_size, path))
    pretrained = engine.get("pretrained_config")
    found = pretrained.get("architecture") if isinstance(pretrained, dict) else None
    planned = (manifest.plan.get("build") or {}).get("trtllm_architecture")
    if found is not None and planned is not None and found != planned:
        problems.append(record_mismatch("record_architecture", "the engine architecture", planned, found, path))
    return problems
