"""Where Neuron NEFFs can be served: the container's neuronx-cc (the NEFF cache is keyed on it), the
platform the graphs were compiled for and its tensor-parallel degrees, the NeuronCore count, and the
compiler flags string the container computes from serving.properties (part of the NEFF cache key)."""

from __future__ import annotations

from lmi_build.artifact.manifest import Manifest
from lmi_build.artifact.serving import ServingTarget
from lmi_build.artifact.target_api import Problems, bound_version_problems, device_count_problems, message
from lmi_build.targets.neuronx.sdk import sdk
from lmi_build.types import PlanMessage

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
    errors += _flags_problems(manifest, serving, build)
    errors += _batching_problems(manifest, serving, build)
    errors += _embedding_problems(manifest, serving, build)
    rule_errors, rule_warnings = _startup_rule_problems(manifest, serving)
    errors += rule_errors
    warnings += rule_warnings
    return errors, warnings


def _startup_rule_problems(manifest: Manifest, serving: ServingTarget) -> Problems:
    """The serving release's RoPE-scaling outcome for the artifact's model and the options lmi-build
    refuses, evaluated by the rules plan uses (``rope.rope_message``, ``sdk.refused_option_messages``)
    on the model spec the manifest records and the artifact's serving.properties."""
    from lmi_build.model.spec import ModelSpec
    from lmi_build.targets.neuronx.profiles import load_profiles
    from lmi_build.targets.neuronx.rope import rope_message
    from lmi_build.targets.neuronx.sdk import refused_option_messages

    errors = refused_option_messages(lambda key: bool(manifest.serving_properties.get(key)))
    warnings: list[PlanMessage] = []
    profile = next((p for p in load_profiles() if p.name == serving.container), None)
    recorded = manifest.plan.get("spec")
    if profile is None or not isinstance(recorded, dict):
        return errors, warnings
    found = rope_message(profile, ModelSpec.model_validate(recorded))
    if found is not None:
        severity, problem = found
        (warnings if severity == "warning" else errors).append(problem)
    return errors, warnings


def _embedding_problems(manifest: Manifest, serving: ServingTarget, build: dict[str, object]) -> list[PlanMessage]:
    """on_device_embedding as the serving release passes it (from the artifact's serving.properties
    and layout) against the NEFFs' NeuronConfig: another value is another graph (a recompile), and
    presharded weights assert without it (issue 21 findings 9 and 12)."""
    from lmi_build.targets.neuronx.plan import container_on_device_embedding
    from lmi_build.targets.neuronx.profiles import load_profiles

    profile = next((p for p in load_profiles() if p.name == serving.container), None)
    config = build.get("neuron_config")
    if profile is None or not isinstance(config, dict):
        return []
    options = {key.removeprefix("option."): value for key, value in manifest.serving_properties.items()
               if key.startswith("option.")}
    served, why = container_on_device_embedding(profile, manifest.layout, options)
    built = bool(config.get("on_device_embedding"))
    if served == built:
        return []
    outcome = ("transformers-neuronx asserts on the presharded weights" if manifest.layout == "neuronx-tnx" and not served
               else "the graphs differ, so it would recompile")
    return [message("neuron_on_device_embedding",
                    f"{profile.name}: NEFFs compiled with on_device_embedding={str(built).lower()}, the container "
                    f"passes {str(served).lower()} ({why}): {outcome} ({'; '.join(profile.on_device_embedding_sources)})",
                    "rebuild with the serving.properties the artifact ships")]


def _batching_problems(manifest: Manifest, serving: ServingTarget, build: dict[str, object]) -> list[PlanMessage]:
    """The serving release's reading of the artifact's batching keys against the batch the NEFFs were
    compiled for (``batching``: an unset option.rolling_batch is rolling batch on 0.30+)."""
    from lmi_build.targets.neuronx.batching import batching_problems
    from lmi_build.targets.neuronx.profiles import load_profiles

    profile = next((p for p in load_profiles() if p.name == serving.container), None)
    built = build.get("batch_size")
    if profile is None or not isinstance(built, int):
        return []
    return [message("neuron_batching", f"{profile.name}: {problem}",
                    "write the batching the NEFFs were compiled for (option.rolling_batch included), or rebuild")
            for problem in batching_problems(manifest.serving_properties, built, [profile])]


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
    served = serving.compiler_flags
    if served is None and serving.container is not None:
        from lmi_build.targets.neuronx.plan import serving_compiler_flags
        from lmi_build.targets.neuronx.profiles import load_profiles

        profile = next((p for p in load_profiles() if p.name == serving.container), None)
        if profile is not None:
            served = serving_compiler_flags(profile.neuron_cc_flags, manifest.serving_properties)
    built = build.get("compiler_flags")
    if served is None or built is None or built == served:
        return []
    return [message("compiler_flags", f"NEFFs compiled with flags '{built}', container uses '{served}'; the NEFF "
                    "cache key differs, so it would recompile", "rebuild with the container's NEURON_CC_FLAGS")]
