"""Verify an artifact: manifest valid, every file intact, layout complete, and compatible with the
serving target (container toolchain, GPU SM, Neuron platform, device count, compiler flags).

Engines and NEFFs fail late and obscurely on the wrong TensorRT/neuronx-cc version or hardware, so
every mismatch is refused here with a message naming both sides. No torch import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from lmi_build.artifact.files import MANIFEST_NAME, verify_entries, walk_files
from lmi_build.artifact.manifest import Manifest, load_manifest
from lmi_build.errors import LmiBuildError, OptionError, UnknownName, VerifyError
from lmi_build.hashing import tree_digest
from lmi_build.planning.gpus import normalize_sm, sm_number, sm_requirements
from lmi_build.types import PlanMessage

# Versions an artifact of each target is bound to: a different one in the container cannot load it.
BINDING_VERSIONS: dict[str, tuple[str, ...]] = {
    "trtllm": ("tensorrt_llm", "tensorrt"),
    "neuronx": ("neuronx_cc",),
    "hf": (),
}
VERSION_LABELS = {"tensorrt_llm": "TensorRT-LLM", "tensorrt": "TensorRT", "neuronx_cc": "neuronx-cc"}
TARGET_LABELS = {"trtllm": "TensorRT-LLM engines", "neuronx": "Neuron NEFFs", "hf": "a Hugging Face checkpoint"}

# TP degrees the Neuron runtime accepts per platform (facts §5).
NEURON_TP = {"inf2": (1, 2, 4, 8, 24), "trn1": (1, 2, 8, 32)}


class ServingTarget(BaseModel):
    """Where the artifact is meant to run. Every field is optional: only given facts are checked."""

    model_config = ConfigDict(frozen=True)

    container: str | None = None  # container profile name
    versions: dict[str, str] = {}  # the container's toolchain versions (from its profile)
    engine_capable: bool = True
    gpu_sm: str | None = None  # normalised "sm90"
    neuron_platform: Literal["inf2", "trn1"] | None = None
    devices: int | None = None  # GPUs or NeuronCores available to the model
    compiler_flags: str | None = None  # the neuronx-cc flags string the container computes


class VerifyReport(BaseModel):
    valid: bool
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []
    artifact: dict[str, Any] = {}

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def serving_target(
    *,
    container: str | None = None,
    gpu: str | None = None,
    neuron_platform: str | None = None,
    devices: int | None = None,
    compiler_flags: str | None = None,
) -> ServingTarget:
    """Build a ServingTarget from CLI values; the container's versions come from the profile of
    the target that owns it (looked up through the target registry, by name)."""
    versions: dict[str, str] = {}
    engine_capable = True
    if container is not None:
        from lmi_build.planning.targets import container_facts

        facts = container_facts(container)
        versions, engine_capable = dict(facts.versions), facts.engine_capable
    if neuron_platform is not None and neuron_platform not in NEURON_TP:
        raise OptionError(f"unknown Neuron platform '{neuron_platform}'", hint="use inf2 or trn1")
    if devices is not None and devices < 1:
        raise OptionError(f"--devices must be at least 1, got {devices}", hint="give the GPU or NeuronCore count")
    return ServingTarget(
        container=container, versions=versions, engine_capable=engine_capable,
        gpu_sm=normalize_sm(gpu) if gpu else None,
        neuron_platform=neuron_platform,
        devices=devices, compiler_flags=compiler_flags,
    )


def _msg(code: str, message: str, hint: str | None = None) -> PlanMessage:
    return PlanMessage(code=code, message=message, hint=hint)


def check_files(root: Path, manifest: Manifest, *, rehash: bool) -> tuple[list[PlanMessage], list[PlanMessage]]:
    """Every manifest file present with its size (and SHA-256 when ``rehash``); extra files warn."""
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []
    if tree_digest((f.path, f.sha256) for f in manifest.files) != manifest.content_digest:
        errors.append(_msg("manifest_digest", "the manifest's content_digest does not match its own file list",
                           "the manifest was edited: rebuild the artifact"))
    for problem in verify_entries(root, list(manifest.files), rehash=rehash):
        entry = problem.entry
        if problem.kind == "missing":
            errors.append(_msg("file_missing", f"missing file {entry.path} ({entry.size} bytes in the manifest)",
                               "the artifact is incomplete: re-download or rebuild it"))
        elif problem.kind == "size":
            errors.append(_msg("file_size", f"{entry.path} is {problem.found_size} bytes, the manifest says {entry.size}",
                               "the file was changed or replaced: re-download or rebuild the artifact"))
        else:
            errors.append(_msg("file_hash", f"{entry.path} content changed: sha256 {(problem.found_sha256 or '')[:12]}… "
                                            f"but the manifest says {entry.sha256[:12]}…",
                               "the file was modified after the build: re-download or rebuild the artifact"))
    listed = {entry.path for entry in manifest.files}
    try:
        present = walk_files(root)
    except ValueError as error:
        errors.append(_msg("symlink", str(error), "artifacts hold regular files only: replace the link by the file"))
        present = []
    for path in present:
        rel = path.relative_to(root).as_posix()
        if rel not in listed:
            warnings.append(_msg("file_extra", f"unexpected file {rel} (not in the manifest)",
                                 "remove it, or rebuild the artifact if it belongs there"))
    return errors, warnings


def check_layout(root: Path, manifest: Manifest) -> tuple[list[PlanMessage], list[PlanMessage]]:
    from lmi_build.artifact.layout import get_layout

    try:
        layout = get_layout(manifest.layout)
    except UnknownName:
        return [], [_msg("layout_unknown", f"layout '{manifest.layout}' is unknown to this lmi-build; "
                                           "its structure was not checked", "upgrade lmi-build")]
    return list(layout.check(root)), []


def _versions_differ(built: str, served: str) -> bool:
    return built.strip().lstrip("v") != served.strip().lstrip("v")


def built_by_stand_in(manifest: Manifest) -> bool:
    """Whether a test stand-in of the vendor compiler wrote the artifact's engines or NEFFs."""
    return manifest.toolchain.found.get("stand_in") == "true"


def check_compatibility(manifest: Manifest, target: ServingTarget) -> tuple[list[PlanMessage], list[PlanMessage]]:
    """Refuse every mismatch between what the artifact is bound to and the serving target."""
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []
    kind = manifest.target
    what = TARGET_LABELS.get(kind, kind)
    build = manifest.plan.get("build") or {}
    if built_by_stand_in(manifest):
        # Written by a test stand-in of the vendor compiler: structurally valid, never servable,
        # so checking it against a serving target is an error; a plain integrity check warns.
        stand_in = _msg("stand_in", f"the {what} were written by a STAND-IN compiler, not a real build",
                        "rebuild with the real toolchain (--runner docker or local on a GPU host)")
        (errors if target != ServingTarget() else warnings).append(stand_in)

    if target.container is not None:
        container = target.container
        served_family = "trtllm" if "tensorrt_llm" in target.versions else "neuronx" if "neuronx_cc" in target.versions else None
        if served_family is not None and kind != "hf" and served_family != kind:
            errors.append(_msg("container_target", f"artifact holds {what}, container {container} serves "
                               f"{TARGET_LABELS[served_family]}", "choose a container profile of the artifact's target"))
        elif kind == "trtllm" and not target.engine_capable:
            errors.append(_msg("container_engine", f"artifact holds TensorRT-LLM engines, container {container} "
                               "has no TensorRT engine backend", "use an engine-capable profile or rebuild for it"))
        else:
            for name in BINDING_VERSIONS.get(kind, ()):
                served = target.versions.get(name)
                built = manifest.toolchain.version(name)
                label = VERSION_LABELS.get(name, name)
                if served is None:
                    continue
                if built is None:
                    warnings.append(_msg("version_unknown", f"artifact does not record its {label} version; "
                                         f"container {container} has {served}", "rebuild with lmi-build to record it"))
                elif _versions_differ(built, served):
                    noun = "engine" if kind == "trtllm" else "artifact"
                    errors.append(_msg(f"version_{name}", f"{noun} built with {label} {built}, container "
                                       f"{container} has {served}",
                                       f"rebuild for {container} (--container {container}) or serve with the "
                                       f"container it was built for ({manifest.toolchain.profile or 'see inspect'})"))

    if target.gpu_sm is not None:
        if kind == "neuronx":
            errors.append(_msg("target_gpu", f"artifact holds {what} (platform "
                               f"{manifest.hardware.neuron_platform or 'unrecorded'}), serving target is GPU "
                               f"{target.gpu_sm}", "build with `lmi-build trtllm` or `lmi-build hf` for GPUs"))
        elif kind == "trtllm":
            built_sm = manifest.hardware.gpu_sm
            if built_sm is None:
                warnings.append(_msg("gpu_unknown", f"artifact does not record the GPU SM its engines were built "
                                     f"on; serving GPU is {target.gpu_sm}", "rebuild with lmi-build to record it"))
            elif normalize_sm(built_sm) != target.gpu_sm:
                errors.append(_msg("gpu_sm", f"engines built for {normalize_sm(built_sm)}, serving GPU is "
                                   f"{target.gpu_sm}; TensorRT engines run only on the SM they were built on",
                                   f"rebuild on a {target.gpu_sm} GPU"))
        quantization = manifest.plan.get("quantization") or {}
        for what, minimum in sm_requirements(quantization.get("quant_algo"), quantization.get("kv_cache_quant_algo")):
            if sm_number(target.gpu_sm) < minimum:
                errors.append(_msg("gpu_quant", f"artifact is quantized {what}, which needs sm{minimum} or newer; "
                                   f"serving GPU is {target.gpu_sm}", "choose a newer GPU or another quantization"))

    if target.neuron_platform is not None:
        platform = target.neuron_platform
        if kind == "trtllm":
            errors.append(_msg("target_neuron", f"artifact holds {what}, serving target is Neuron {platform}",
                               "build with `lmi-build neuronx` for Inferentia/Trainium"))
        elif kind == "neuronx":
            built_platform = manifest.hardware.neuron_platform or build.get("platform")
            if built_platform is None:
                warnings.append(_msg("platform_unknown", f"artifact does not record its Neuron platform; serving "
                                     f"platform is {platform}", "rebuild with --neuron-platform to record it"))
            elif built_platform != platform:
                errors.append(_msg("neuron_platform", f"NEFFs compiled for {built_platform}, serving platform is "
                                   f"{platform}", f"rebuild for {platform}"))
            tp = build.get("tp")
            if isinstance(tp, int) and tp not in NEURON_TP[platform]:
                errors.append(_msg("neuron_tp", f"artifact has tp {tp}, {platform} supports tp "
                                   f"{', '.join(map(str, NEURON_TP[platform]))}", "rebuild with a supported tp"))

    if target.devices is not None and kind in ("trtllm", "neuronx"):
        world = manifest.world_size
        unit = "GPUs" if kind == "trtllm" else "NeuronCores"
        shape = f"tp {build.get('tp')} x pp {build.get('pp') or 1}" if kind == "trtllm" else f"tp {build.get('tp')}"
        if world is not None and target.devices < world:
            errors.append(_msg("devices", f"artifact needs {world} {unit} ({shape}), serving target has "
                               f"{target.devices}", f"serve on {world} {unit} or rebuild with tp={target.devices}"))
        elif world is not None and target.devices > world:
            warnings.append(_msg("devices_unused", f"artifact uses {world} {unit} ({shape}), serving target has "
                                 f"{target.devices}; {target.devices - world} stay idle",
                                 f"rebuild with tp={target.devices} to use them all"))

    served_flags = target.compiler_flags
    if served_flags is None and kind == "neuronx" and target.container is not None:
        served_flags = _container_flags(target.container, manifest.serving_properties)
    if served_flags is not None and kind == "neuronx":
        built_flags = build.get("compiler_flags")
        if built_flags is not None and built_flags != served_flags:
            errors.append(_msg("compiler_flags", f"NEFFs compiled with flags '{built_flags}', container uses "
                               f"'{served_flags}'; the NEFF cache key differs, so it would recompile",
                               "rebuild with the container's NEURON_CC_FLAGS"))
    return errors, warnings


def _container_flags(container: str, properties: dict[str, str]) -> str | None:
    """The flags string the named container profile computes for these serving.properties; None
    for a container this lmi-build has no profile of (its versions were given some other way)."""
    from lmi_build.planning.targets import container_facts

    try:
        computes = container_facts(container).compiler_flags
    except UnknownName:
        return None
    return computes(properties) if computes is not None else None


def summarize(manifest: Manifest, location: str) -> dict[str, Any]:
    """The short description of an artifact that verify reports and inspect starts from."""
    return {
        "location": location,
        "target": manifest.target,
        "layout": manifest.layout,
        "model": manifest.source.model_dump(mode="json"),
        "recipe": f"{manifest.recipe} v{manifest.recipe_version}",
        "cache_key": manifest.cache_key,
        "content_digest": manifest.content_digest,
        "files": len(manifest.files),
        "total_bytes": manifest.total_bytes,
        "toolchain": {"profile": manifest.toolchain.profile, "image": manifest.toolchain.image,
                      **{k: manifest.toolchain.version(k) for k in sorted({*manifest.toolchain.expected,
                                                                            *manifest.toolchain.found})}},
        "hardware": manifest.hardware.model_dump(mode="json", exclude_none=True),
        "builder": manifest.builder,
        "created_at": manifest.created_at.isoformat(),
    }


def report(errors: list[PlanMessage], warnings: list[PlanMessage], artifact: dict[str, Any]) -> VerifyReport:
    return VerifyReport(valid=not errors, errors=errors, warnings=warnings, artifact=artifact)


def verify_local(path: Path, *, target: ServingTarget | None = None, rehash: bool = True) -> VerifyReport:
    """Verify an artifact directory. A missing or corrupt manifest is an invalid report, not a raise."""
    if not path.is_dir():
        raise LmiBuildError(f"{path} is not a directory", hint="give the artifact directory or an s3:// URL",
                            code="not_found")
    try:
        manifest = load_manifest(path)
    except VerifyError as error:
        return report([_msg("manifest", error.message, error.hint)], [], {"location": str(path)})
    errors, warnings = check_files(path, manifest, rehash=rehash)
    for found_errors, found_warnings in (check_layout(path, manifest),
                                         check_compatibility(manifest, target or ServingTarget())):
        errors += found_errors
        warnings += found_warnings
    return report(errors, warnings, summarize(manifest, str(path)))


__all__ = ["MANIFEST_NAME", "ServingTarget", "VerifyReport", "built_by_stand_in", "check_compatibility", "normalize_sm",
           "report", "serving_target", "summarize", "verify_local"]
