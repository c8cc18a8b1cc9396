"""Where a Hugging Face checkpoint can be served: the GPU must have the kernels its quantization needs,
and a container profile must be an hf one whose engine loads the checkpoint's architecture
(``data/loader_architectures.toml``: its vLLM's model registry) and format (``data/serving_formats.toml``:
each profile's formats and its vLLM's ModelOpt loader algorithms)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lmi_build.artifact.manifest import Manifest
from lmi_build.artifact.serving import ServingTarget
from lmi_build.artifact.target_api import (
    Problems,
    ReadFile,
    gpu_quantization_problems,
    message,
    read_json_fact,
    record_mismatch,
)
from lmi_build.core.types import PlanMessage
from lmi_build.targets.hf.loaders import architecture_problems, rope_problems
from lmi_build.targets.hf.profiles import get_profile, load_profiles, loads_format
from lmi_build.targets.hf.startup import startup_problems

if TYPE_CHECKING:
    from lmi_build.targets.hf.profiles import HfProfile

# What an engine serves from each kind of container profile, and the command that builds for it.
OTHER_KINDS = {"trtllm": ("TensorRT-LLM", "engines built for it"), "neuronx": ("Neuron", "NEFFs compiled for it")}
# A pre-quantized input passed through (config.json quantization_config.quant_method) -> its format.
PASSED_THROUGH = {"awq": "awq", "gptq": "gptq", "modelopt": "modelopt_hf", "compressed-tensors": "compressed_tensors"}


def check_compatibility(manifest: Manifest, serving: ServingTarget) -> Problems:
    errors = gpu_quantization_problems(manifest, serving)
    warnings: list[PlanMessage] = []
    if serving.container is not None and serving.container_target is not None:
        found_errors, found_warnings = container_problems(manifest, serving.container, serving.container_target)
        errors += found_errors
        warnings += found_warnings
    return errors, warnings


def container_problems(manifest: Manifest, container: str, owner: str) -> Problems:
    """An hf checkpoint against container profile ``container`` of target ``owner``."""
    if owner != "hf":
        kind, serves = OTHER_KINDS.get(owner, (owner, "its own artifacts"))
        hf_profiles = ", ".join(p.name for p in load_profiles())
        return [message("container_target", f"artifact holds a Hugging Face checkpoint; {container} is a {kind} "
                        f"profile, which serves {serves}: check it against an hf profile ({hf_profiles})",
                        f"or build for this container: lmi-build {owner} --profile {container} ...")], []

    profile = get_profile(container)
    spec = manifest.plan.get("spec") or {}
    arch_errors, arch_warnings = architecture_problems(profile, spec.get("architectures") or ())
    arch_errors += rope_problems(profile, (spec.get("rope") or {}).get("scaling_type"))
    errors, warnings = format_problems(manifest, profile)
    return arch_errors + errors + startup_problems(profile, manifest.serving_properties), arch_warnings + warnings


def format_problems(manifest: Manifest, profile: HfProfile) -> Problems:
    """Whether ``profile``'s engine loads the format of the checkpoint an hf artifact holds
    (``profiles.loads_format``, the rule the plan stated before the build)."""
    fmt, algo, what = artifact_format(manifest)
    where = f"{profile.name} ({profile.engine}, {profile.runs_on})"
    rebuild = f"rebuild it for this container: lmi-build hf --profile {profile.name} ..."
    if fmt is None:
        return [], [message("hf_format_unchecked", f"artifact is {what}; lmi-build has no loader facts for it, "
                            f"so whether {where} loads it was not checked")]
    if loads_format(profile, fmt, algo):
        return [], []
    if fmt == "modelopt_hf":
        takes = ", ".join(profile.modelopt_algos) if profile.modelopt_algos else "none (no ModelOpt loader)"
        return [message("hf_format", f"artifact is {what}; {where} loads ModelOpt checkpoints only for "
                        f"quant_algo {takes}", rebuild)], []
    return [message("hf_format", f"artifact is {what}; {where} loads no {fmt} checkpoint", rebuild)], []


def artifact_format(manifest: Manifest) -> tuple[str | None, str | None, str]:
    """(format, ModelOpt quant_algo, words for messages) of the checkpoint an hf artifact holds: what
    the build exported (``HfBuild.export_format``), or the pre-quantized input it passed through."""
    plan: dict[str, Any] = manifest.plan
    quantization = plan.get("quantization") or {}
    pre = quantization.get("pre_quantized")
    if pre:
        method = str(pre.get("method"))
        algo = pre.get("quant_algo")
        fmt = PASSED_THROUGH.get(method)
        return fmt, algo, f"a pre-quantized {method}{f' {algo}' if algo else ''} checkpoint"
    fmt = (plan.get("build") or {}).get("export_format", "hf")
    algo = quantization.get("quant_algo")
    if fmt == "modelopt_hf":
        return fmt, algo, f"a ModelOpt {algo} checkpoint"
    if fmt == "hf":
        return fmt, None, "an unquantized checkpoint"
    return fmt, algo, f"a {fmt} checkpoint{f' ({algo})' if algo else ''}"


def record_problems(manifest: Manifest, read: ReadFile) -> list[PlanMessage]:
    """The architecture and checkpoint format the container checks use, read from the checkpoint's
    own config.json (and hf_quant_config.json) against the manifest's record of them."""
    listed = {entry.path for entry in manifest.files}
    config = read_json_fact(read, "config.json") if "config.json" in listed else None
    if config is None:
        return []  # the layout check reports a missing or unreadable config.json
    problems: list[PlanMessage] = []
    recorded = (manifest.plan.get("spec") or {}).get("architectures")
    if config.get("architectures") != recorded:
        problems.append(record_mismatch("record_architecture", "architectures", recorded,
                                        config.get("architectures"), "config.json"))
    fmt, algo, _ = artifact_format(manifest)
    modelopt = read_json_fact(read, "hf_quant_config.json") if "hf_quant_config.json" in listed else None
    found, found_algo = file_format(config, modelopt)
    if fmt is not None and found != fmt:
        problems.append(record_mismatch("record_format", "the checkpoint format", fmt, found, "config.json"))
    elif fmt == "modelopt_hf" and algo and found_algo and algo != found_algo:
        problems.append(record_mismatch("record_format", "the ModelOpt quant_algo", algo, found_algo,
                                        "hf_quant_config.json"))
    return problems


def file_format(config: dict[str, Any], modelopt: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(format, ModelOpt quant_algo) of a checkpoint from its own files: ModelOpt's unified format
    writes hf_quant_config.json; the packed formats name their quant_method in config.json."""
    if modelopt is not None:
        quantization = modelopt.get("quantization")
        return "modelopt_hf", quantization.get("quant_algo") if isinstance(quantization, dict) else None
    quantization = config.get("quantization_config")
    method = quantization.get("quant_method") if isinstance(quantization, dict) else None
    if method is None:
        return "hf", None
    return PASSED_THROUGH.get(str(method), str(method)), None
