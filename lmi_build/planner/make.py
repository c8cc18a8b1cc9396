"""The build planner: inputs -> a frozen, validated ``BuildPlan``. No side effects, no weights,
no torch/transformers: only config.json (and small files) are read.

Flow: resolve options -> resolve the model source (config only) -> ModelSpec -> recipe -> target
planning -> validations (every problem collected) -> memory -> cache key -> BuildPlan.
"""

from __future__ import annotations

import os
from pathlib import Path

from lmi_build.artifact.hygiene import host_roots, iter_strings, starts_with_root
from lmi_build.core.errors import LmiBuildError, OptionError
from lmi_build.core.reading import read_json_file
from lmi_build.core.types import ModelIdentity, TargetName
from lmi_build.model.normalize import read_spec_file
from lmi_build.model.spec import ModelSpec
from lmi_build.model.tokenizer import VOCABULARY_PATTERNS, tokenizer_files
from lmi_build.options.resolve import OptionInputs, cli_option_pairs, given_options, resolve_given
from lmi_build.options.resolved import ResolvedOptions
from lmi_build.planning import checks
from lmi_build.planning.cache_key import compute_cache_key, config_digest
from lmi_build.planning.checkpoint_estimate import check_host_ram, estimate_checkpoint_step
from lmi_build.planning.context import NOT_WRITTEN, PlanContext, read_options
from lmi_build.planning.findings import Findings
from lmi_build.planning.instances import get_instance
from lmi_build.planning.memory import check_fit, estimate
from lmi_build.planning.options import CommonOptions
from lmi_build.planning.plan import (
    BuildPlan,
    CheckpointStepEstimate,
    MemoryEstimate,
    QuantizationPlan,
    TargetKnobs,
    ToolchainRef,
)
from lmi_build.planning.quantization import plan_quantization, split_messages, tp_group_problem
from lmi_build.planning.request import PlanRequest
from lmi_build.planning.saved import BuildInputs, SavedPlan
from lmi_build.planning.target_api import PlanningTarget, TargetPlan
from lmi_build.recipes.registry import infer_version_options, load_recipes
from lmi_build.recipes.schema import Recipe, TargetSupport
from lmi_build.sources.base import ResolvedSource
from lmi_build.sources.resolve import resolve_source

_ACCELERATOR_WORDS = {"gpu": "NVIDIA GPUs", "neuron": "Neuron devices"}
INSTANCE_HINTS = {"gpu": "pick a GPU instance type (g5, g6, g6e, p4d, p5, ...), or use the neuronx target",
                  "neuron": "pick an inf2.* or trn1.* instance type, or use a GPU target (trtllm, hf)"}
# infer_version_options codes that are warnings (the user's value wins); the rest are errors.
VERSION_WARNINGS = frozenset({"model_version_mismatch"})


def _check_tokenizer_code(model_dir: Path, trusted: bool | None, findings: Findings) -> bool:
    """A tokenizer_config.json with ``auto_map`` makes transformers import the repository's own
    tokenizer code: refused at plan time unless trusted, not when the build loads the tokenizer.
    True when the tokenizer is the model's own code (or its config cannot be read: reported here)."""
    path = model_dir / "tokenizer_config.json"
    try:
        config = read_json_file(path, what="tokenizer config") if path.exists() else {}
    except (OSError, ValueError):
        findings.error("tokenizer_config", f"{path.name} of the model is not readable JSON",
                       hint="fix or re-download the tokenizer files")
        return True
    auto_map = config.get("auto_map") if isinstance(config, dict) else None
    if auto_map and not trusted:
        findings.error("remote_code_tokenizer",
                       "the tokenizer needs the model's own Python code (tokenizer_config.json auto_map), "
                       "which is not trusted", hint="review the repository's code, then pass --trust-remote-code")
    return bool(auto_map)


def _check_tokenizer_files(files: tuple[str, ...], quantization: QuantizationPlan, custom: bool,
                           findings: Findings) -> None:
    """No tokenizer among the source's files: the container cannot serve the artifact (it loads the
    tokenizer from it) and calibration cannot run, so the plan refuses it before any copy, quantization or
    engine build (issue 42 item 3). A tokenizer of the model's own code (auto_map) names its files itself."""
    if custom or tokenizer_files(files):
        return
    calibrates = f" and {quantization.method} calibration tokenizes its samples with it" \
        if quantization.calibration is not None else ""
    findings.error("tokenizer_missing",
                   f"the model has no tokenizer files (none of {', '.join(VOCABULARY_PATTERNS)}): the container "
                   f"loads the tokenizer from the artifact's model directory{calibrates}",
                   hint="add the model's tokenizer files (tokenizer.json or tokenizer.model, with "
                        "tokenizer_config.json) to the model directory, then plan again")


def plan_request(request: PlanRequest, target: PlanningTarget) -> SavedPlan:
    """The plan of a build for ``target`` and where its inputs are: what ``--save`` writes and every
    build executes. Raises ``LmiBuildError`` only when no plan can be made at all (unreadable model
    source, malformed properties); every other problem is a plan error."""
    instance = get_instance(request.instance_type) if request.instance_type else None
    findings = Findings()
    inputs = OptionInputs(cli=_cli_options(request, findings), properties_file=request.properties, env=request.env,
                          recipe_defaults={})
    # The options given decide the model; its recipe's defaults join them in the one resolution.
    given = given_options(inputs, target=target.name)
    model_ref = request.model or given.text("model_id")
    if not model_ref:
        raise OptionError("no model given",
                          hint="pass --model <dir|org/name|s3://bucket/prefix|demo:NAME> or set option.model_id")
    revision = request.revision or given.text("revision")
    source = resolve_source(model_ref, purpose="plan", revision=revision, allow_pickle=request.allow_pickle,
                            endpoint_url=request.endpoint_url)
    spec = read_spec_file(source.path)
    build_inputs = BuildInputs(
        # A local directory is recorded absolute so the plan builds from any working directory.
        model=os.path.abspath(model_ref) if source.identity.kind == "local" else model_ref,
        revision=revision, allow_pickle=request.allow_pickle,
        calib_data=request.calib_data.absolute() if request.calib_data else None)
    recipe, support = _recipe_support(spec, target.name, findings)
    resolution = resolve_given(given, support.defaults if support is not None else {}, strict=request.strict)
    if recipe is None or support is None:
        return SavedPlan(inputs=build_inputs, plan=_early_plan(target, source.identity, spec,
                                                              resolution.options, findings, recipe))
    findings.add_errors(resolution.errors)
    findings.add_warnings(resolution.warnings)
    quantization = _plan_quantization(request, target, recipe, spec, resolution.options, findings)
    ctx = PlanContext(request=request, target=target.name, spec=spec, recipe=recipe, support=support,
                      options=resolution.options, instance=instance, quantization=quantization, findings=findings)
    planned = _plan_target(ctx, target, source)
    memory, checkpoint_step = _plan_memory(ctx, target, planned)
    return SavedPlan(inputs=build_inputs, plan=_finished_plan(ctx, source.identity, planned, memory, checkpoint_step))


def _cli_options(request: PlanRequest, findings: Findings) -> dict[str, tuple[str, str]]:
    """--option pairs with the dedicated flags over them: a flag wins over the same key in --option."""
    cli = cli_option_pairs(list(request.option))
    flags = request.flag_options()
    for key, (value, origin) in flags.items():
        given = cli.get(key)
        if given is not None and given[0] != value:
            findings.warn("flag_conflict", f"{origin} and {given[1]} disagree ({value} vs {given[0]}); {origin} is used",
                          f"give {key} once")
    cli.update(flags)
    return cli


def _recipe_support(spec: ModelSpec, target_name: TargetName,
                    findings: Findings) -> tuple[Recipe | None, TargetSupport | None]:
    """The recipe of ``spec`` and how it builds for the target; a None, with the plan error, where
    the target cannot plan the model at all."""
    if checks.model_config_problems(spec, findings):
        # A config no model can have: no target plans with it (its lengths and shapes would be nonsense).
        return None, None
    try:
        recipe = load_recipes().match(spec)
    except LmiBuildError as error:
        findings.error("architecture_unknown", error.message, hint=error.hint)
        return None, None
    support = recipe.targets.get(target_name)
    if support is None:
        reason = recipe.unsupported.get(target_name)
        findings.error("architecture_unsupported",
                       f"{spec.architecture} ({recipe.name}) cannot be built for {target_name}"
                       + (f": {reason}" if reason else ""),
                       hint=f"targets that support it: {', '.join(recipe.targets) or 'none'}")
    return recipe, support


def _plan_target(ctx: PlanContext, target: PlanningTarget, source: ResolvedSource) -> TargetPlan:
    """The checks every target shares around the target's own plan."""
    _version_options(ctx)
    checks.check_common(ctx)
    custom_tokenizer = _check_tokenizer_code(source.path, read_options(ctx.options, CommonOptions).trust_remote_code,
                                             ctx.findings)
    _check_tokenizer_files(source.files, ctx.quantization, custom_tokenizer, ctx.findings)
    planned = target.plan(ctx)
    checks.check_dtype_cast(ctx, planned.dtype)
    # Group-quantized (INT4) row-parallel layers need whole groups on every rank: known only once tp is.
    if (problem := tp_group_problem(ctx.quantization, ctx.spec, planned.build.tp)) is not None:
        ctx.findings.add_errors([problem])
    return planned


def _plan_memory(ctx: PlanContext, target: PlanningTarget,
                 planned: TargetPlan) -> tuple[MemoryEstimate, CheckpointStepEstimate | None]:
    """The memory estimate, checked against --instance-type, and the convert/quantize step's."""
    instance, quantization, calib_data = ctx.instance, ctx.quantization, ctx.request.calib_data
    memory = estimate(ctx.spec, planned.dtype, quantization, planned.workload, instance)
    if instance is not None and instance.accelerator.kind != target.accelerator:
        ctx.findings.error("instance_target", f"{instance.name} has {instance.accelerator.description}, not the "
                           f"{_ACCELERATOR_WORDS[target.accelerator]} the {target.name} target builds for",
                           hint=INSTANCE_HINTS[target.accelerator])
    elif instance is not None:
        memory = check_fit(memory, planned.workload, instance, ctx.findings)
    # Where the convert/quantize step runs and its cost; not in the cache key (the device decides
    # how, not what: the manifest records the device the build really used).
    step = estimate_checkpoint_step(planned.checkpoint_work, quantization, ctx.spec, calib_data)
    if step is not None and planned.checkpoint_work is not None:
        # One host-RAM figure per step: the step's own estimate (measured rates, the streamed writer's few
        # tensors), not the general two-copies bound as well.
        memory = memory.model_copy(update={"host_ram_bytes": step.host_ram_bytes})
        check_host_ram(step, planned.checkpoint_work, quantization, ctx.spec, calib_data, ctx.findings)
    return memory, step


def _finished_plan(ctx: PlanContext, identity: ModelIdentity, planned: TargetPlan, memory: MemoryEstimate,
                   checkpoint_step: CheckpointStepEstimate | None) -> BuildPlan[TargetKnobs]:
    """The plan with the serving.properties it writes, once they hold no host path, and its cache key."""
    written = ctx.written_options()
    properties = {k: v.value for k, v in written.items()}
    _check_portable({"model": identity.model_dump(mode="json"), "options": properties,
                     "quantization": ctx.quantization.model_dump(mode="json")}, ctx.findings)
    cache_key = compute_cache_key(
        model=identity, config_digest=config_digest(ctx.spec.raw), recipe=ctx.recipe.name,
        recipe_version=ctx.recipe.version, target=ctx.target, options=properties, build=planned.build,
        quantization=ctx.quantization, toolchain=planned.toolchain,
    )
    return BuildPlan(
        target=ctx.target, recipe=ctx.recipe.name, recipe_version=ctx.recipe.version, model=identity,
        spec=ctx.spec, options=properties, option_sources={k: v.source.value for k, v in written.items()},
        build=planned.build, quantization=ctx.quantization, memory=memory, checkpoint_step=checkpoint_step,
        toolchain=planned.toolchain, cache_key=cache_key, valid=not ctx.findings.errors,
        errors=ctx.findings.errors, warnings=ctx.findings.warnings,
    )


def _check_portable(recorded: dict[str, object], findings: Findings) -> None:
    """What the manifest will record must hold no path of this host (home, tmp, the current
    directory): the packager refuses such a manifest, so it is a plan error, found before minutes
    of quantization or compilation rather than after them."""
    roots = host_roots()
    for where, text in iter_strings(recorded):
        if starts_with_root(text, roots):
            name = where.removeprefix(".options.").lstrip(".")  # an option by its key, the rest by JSON path
            findings.error("host_path",
                           f"{name}={text} is a path on this build host; the artifact would "
                           "depend on it",
                           hint="give a path that exists where the artifact is served (e.g. under /opt/ml/model), "
                                "or leave it out")


def _plan_quantization(request: PlanRequest, target: PlanningTarget, recipe: Recipe, spec: ModelSpec,
                       options: ResolvedOptions, findings: Findings) -> QuantizationPlan:
    """The quantization step, and whether the recipe builds it (or loads the pre-quantized input) there."""
    support = recipe.targets[target.name]
    route = target.checkpoint_route(support, spec, options)
    # --quantize is option.quantize from the CLI layer: resolution checked it against the table.
    plan, messages = plan_quantization(None, options, spec, target.quantization, request.calib_data,
                                       checkpoint_route=route)
    errors, warnings = split_messages(messages)
    findings.add_errors(errors)
    findings.add_warnings(warnings)

    # The planned method is the canonical name of the spelling given (static_int8 is int8's).
    method = plan.method or read_options(options, CommonOptions).quantize
    reported = any(m.code in ("quantize_unknown", "quantize_target") for m in errors)
    if method is not None and spec.pre_quantization is None and method not in support.quantize and not reported:
        elsewhere = [name for name, other in recipe.targets.items() if method in other.quantize]
        supported = ", ".join(support.quantize) or "none"
        findings.error("quantize_unsupported",
                       f"{method} quantization is not supported for {recipe.name} on {target.name} "
                       f"(supported: {supported})",
                       hint=(f"use one of: {supported}" if support.quantize else "build without --quantize")
                       + (f"; {method} is available for {', '.join(elsewhere)}" if elsewhere else ""))
    pre = spec.pre_quantization
    if pre is not None and pre.method.lower() not in {m.lower() for m in support.prequantized}:
        accepted = ", ".join(support.prequantized) or "none"
        findings.error("prequantized_unsupported",
                       f"the model is already quantized ({pre.method}), which {target.name} cannot load "
                       f"for {recipe.name} (accepted: {accepted})",
                       hint="start from the unquantized model (lmi-build quantizes it), or pick another target")
    return plan


def _version_options(ctx: PlanContext) -> None:
    # A value that did not parse was reported by resolution: it counts as not given (no second error).
    given = {key: item.value for key, item in ctx.options.values.items() if item.typed is not None}
    values, messages = infer_version_options(ctx.recipe, ctx.spec, ctx.target, given)
    ctx.findings.add_warnings(m for m in messages if m.code in VERSION_WARNINGS)
    ctx.findings.add_errors(m for m in messages if m.code not in VERSION_WARNINGS)
    ctx.version_options = dict(values)
    for key, value in values.items():
        ctx.derive(key, value, "inferred from config.json")


def _early_plan(target: PlanningTarget, identity: ModelIdentity, spec: ModelSpec,
                options: ResolvedOptions, findings: Findings, recipe: Recipe | None) -> BuildPlan:
    """An invalid plan for a model the target cannot build: no knobs, memory or toolchain check."""
    properties = {k: v.value for k, v in options.values.items() if k not in NOT_WRITTEN}
    toolchain = ToolchainRef(target=target.name)
    name, version = (recipe.name, recipe.version) if recipe else ("none", 0)
    cache_key = compute_cache_key(
        model=identity, config_digest=config_digest(spec.raw), recipe=name, recipe_version=version,
        target=target.name, options=properties, build=None, quantization=QuantizationPlan(),
        toolchain=toolchain,
    )
    return BuildPlan(
        target=target.name, recipe=name, recipe_version=version, model=identity, spec=spec,
        options=properties, option_sources={k: v.source.value for k, v in options.values.items()
                                            if k not in NOT_WRITTEN},
        toolchain=toolchain, cache_key=cache_key, valid=False, errors=findings.errors,
        warnings=findings.warnings,
    )
