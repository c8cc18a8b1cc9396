"""AWS Neuron target (transformers-neuronx, as the LMI Neuron container runs it): resolve the NEFF
compile's knobs (``NeuronxBuild``) exactly as the container would, so its NEFF cache hits.

The rules (buckets, GQA fallbacks, compiler flags) are those of the SDK pin in
``targets/neuronx/data/neuron_sdk.toml``; the numbers live there, not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lmi_build.core.errors import shown_values
from lmi_build.core.types import TargetName
from lmi_build.model.spec import ModelSpec
from lmi_build.options.booleans import parse_bool
from lmi_build.options.resolved import ResolvedOptions
from lmi_build.planning import checks
from lmi_build.planning.context import PlanContext, handler_options, read_options, written_text
from lmi_build.planning.memory import Workload
from lmi_build.planning.plan import ToolchainRef
from lmi_build.planning.quantization import QuantizationRules
from lmi_build.planning.startup import outcome_messages
from lmi_build.planning.target_api import ContainerFacts, RecipeRoute, TargetPlan
from lmi_build.recipes.schema import Recipe, TargetSupport
from lmi_build.targets.neuronx.batching import ContainerBatching, container_batching
from lmi_build.targets.neuronx.knobs import NeuronxBuild
from lmi_build.targets.neuronx.options import NeuronxOptions, withhold_rolling_batch, withhold_static_batch
from lmi_build.targets.neuronx.profiles import get_profile, load_profiles
from lmi_build.targets.neuronx.sdk import NeuronPlatform, sdk
from lmi_build.targets.neuronx.serving import (
    LoaderRefused,
    choose_loader,
    compiler_flags,
    container_on_device_embedding,
    contexts_refusal,
    continuous_batching,
    serving_compiler_flags,
)
from lmi_build.targets.neuronx.startup import evaluate, from_planned

if TYPE_CHECKING:
    from lmi_build.targets.neuronx.profiles import Loader, NeuronProfile

DEFAULT_GQA = "shard-over-heads"  # TNX's own default; option.group_query_attention's choices are the table's
AMP = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
OPTIMUM_TASK = "text-generation"  # DJL's task_from_config for a *ForCausalLM architecture
OPTIMUM_CLASS = "optimum.neuron.NeuronModelForCausalLM"  # the class lmi-build's driver exports with


def token_buckets(n_positions: int, first_bucket: int) -> tuple[int, ...]:
    """TNX: an int n_positions becomes doubling token-generation buckets from ``first_bucket``."""
    buckets: list[int] = []
    size = first_bucket
    while size < n_positions:
        buckets.append(size)
        size *= 2
    buckets.append(n_positions)
    return tuple(buckets)


def half_buckets(buckets: tuple[int, ...]) -> tuple[int, ...]:
    """TNX: context_length_estimate=None -> half of each token bucket."""
    return tuple(sorted({max(1, bucket // 2) for bucket in buckets}))


def continuous_batching_contexts(n_positions: int, first_bucket: int, first_large: int) -> tuple[int, ...]:
    """DJL under continuous batching: 128, then doubling from 1024 up to n_positions."""
    contexts = {min(first_bucket, n_positions), n_positions}
    size = first_large
    while size < n_positions:
        contexts.add(size)
        size *= 2
    return tuple(sorted(contexts))


def effective_gqa(requested: str | None, *, batch_size: int, tp: int, heads: int, kv_heads: int,
                  head_dim: int) -> str:
    """The strategy transformers-neuronx settles on, in its control flow (neuron_sdk.toml [gqa]:
    1ade6d7 decoder.py:112-176): early returns keep a strategy whatever the KV heads."""
    if requested is None and heads == kv_heads:
        return DEFAULT_GQA  # plain MHA: TNX configures no GQA, the heads are sharded (padded where needed)
    effective = DEFAULT_GQA if requested is None else requested
    if requested == "replicated-heads":
        return effective
    if requested == "shard-over-batch":
        if batch_size % tp == 0:
            return effective
        effective = "shard-over-heads"
    if requested == "all-gather-heads":
        if (kv_heads * head_dim) % tp:
            effective = "shard-over-heads"
        if heads % tp == 0:
            return effective
        pad = ((heads // tp + 1) * tp - heads) % tp  # utils.get_pad_size
        if pad % kv_heads == 0:
            return effective
        effective = "shard-over-heads"
    if kv_heads % tp:
        effective = "replicated-heads"
    return effective


def unbuilt_reason(profile: NeuronProfile, loader: str, layout: str) -> tuple[str, str] | None:
    """(why, hint) when lmi-build does not build the artifact of ``loader``/``layout`` for ``profile``:
    a plan error and the build's preflight refusal alike, so plan and build give one verdict."""
    if loader not in ("tnx", "optimum"):
        why = sdk().unbuilt_loaders[loader].reason
        return (f"{profile.name} loads this model with DJL's {loader} loader, whose artifact lmi-build does not "
                f"build: {why}", "pick a profile or options where DJL uses transformers-neuronx or optimum-neuron "
                                 "(lmi-build profiles list)")
    if layout == "neuronx-split" and profile.split_layout_unbuilt:
        return (f"{profile.name}: lmi-build does not build its split checkpoint/ + compiled/ layout: "
                f"{profile.split_layout_unbuilt}", "pick lmi-0.27.0 or newer (lmi-build profiles list)")
    if loader == "optimum" and profile.optimum_class != OPTIMUM_CLASS:
        return (f"{profile.name} exports with {profile.optimum_class}, not {OPTIMUM_CLASS}: lmi-build's driver "
                "would not be the container's code path", "pick lmi-0.27.0 or newer (lmi-build profiles list)")
    return None


def tnx_kwargs(*, batch: int, amp: str, tp: int, n_positions: int, continuous: bool,
               given_contexts: tuple[int, ...] | None, contexts: tuple[int, ...]) -> dict[str, Any]:
    """``NeuronAutoModelForCausalLM.from_pretrained`` kwargs as DJL builds them: n_positions as one
    int (TNX derives the buckets), context_length_estimate only when given (in the order given: DJL
    passes its parsed list), both as lists under continuous batching (DJL then fills the context
    estimates itself when none are given: ``contexts``)."""
    kwargs: dict[str, Any] = {"batch_size": batch, "amp": amp, "tp_degree": tp, "n_positions": n_positions}
    if given_contexts is not None:
        kwargs["context_length_estimate"] = list(given_contexts)
    if continuous:
        kwargs["n_positions"] = [n_positions]
        if given_contexts is None:
            kwargs["context_length_estimate"] = list(contexts)
    return kwargs


def optimum_kwargs(*, tp: int, amp: str, batch: int, n_positions: int) -> dict[str, Any]:
    """``NeuronModelForCausalLM.from_pretrained`` kwargs of DJL's OptimumModelLoader when it exports
    (get_compiler_args + get_model_args; 0.27.0-dlc / 0.30.0-dlc model_loader.py OptimumModelLoader):
    the amp string as DJL has it, the task of a causal LM, batch and sequence length."""
    return {"export": True, "num_cores": tp, "auto_cast_type": amp, "task": OPTIMUM_TASK,
            "batch_size": batch, "sequence_length": n_positions}


def neuron_config(*, continuous: bool, batch: int, gqa_requested: str | None, quantized: bool,
                  amp: str, on_device_embedding: bool) -> dict[str, Any]:
    """The NeuronConfig keys DJL passes, only those it sets (ML:179-225); on_device_embedding where
    the release turns it on for precompiled models (0.30+)."""
    config: dict[str, Any] = {"on_device_embedding": True} if on_device_embedding else {}
    if continuous:
        config["continuous_batching"] = {"batch_size_for_shared_caches": batch}
    if gqa_requested is not None:
        config["group_query_attention"] = gqa_requested
    if quantized:
        config["quant"] = {"dequant_dtype": amp}
    return config


class NeuronxPlanning:
    """The planning half of the neuronx target (``lmi_build.targets.neuronx.target``)."""

    name: TargetName = "neuronx"
    engine = "Python"
    accelerator: Literal["gpu", "neuron"] = "neuron"
    # It quantizes at load time: static_int8 is the container's own spelling of int8 (DJL tnx_properties.py
    # TnXQuantizeMethods, 0.28.0-dlc..0.30.0-dlc:45), which lmi-build writes for int8.
    quantization = QuantizationRules(target="neuronx", load_time_methods={"int8": "int8", "static_int8": "int8"},
                                     load_time_hint="use --quantize int8 (load_in_8bit) for neuronx, or build for "
                                                    "trtllm/hf")

    def container_profiles(self) -> dict[str, ContainerFacts]:
        return {profile.name: ContainerFacts(versions=profile.versions(),
                                             compiler_flags=partial(serving_compiler_flags, profile.neuron_cc_flags))
                for profile in load_profiles()}

    def checkpoint_route(self, support: TargetSupport, spec: ModelSpec,
                         options: ResolvedOptions) -> Literal["modelopt", "vendor"]:
        return "vendor"  # TNX compiles from the HF checkpoint itself

    def recipe_route(self, recipe: Recipe, support: TargetSupport, profile: str) -> RecipeRoute:
        found = get_profile(profile)
        return RecipeRoute(True, route=f"NEFFs compiled from the Hugging Face checkpoint with neuronx-cc "
                                       f"{found.neuronx_cc} (default loader {found.default_loader}); RoPE and "
                                       "loader limits of the release are checked per model at plan time")

    def toolchain(self, profile: str | None) -> ToolchainRef:
        found = get_profile(profile)
        return ToolchainRef(target="neuronx", profile=found.name, image=found.image or None,
                            versions=found.versions())

    def plan(self, ctx: PlanContext) -> TargetPlan:
        profile = get_profile(ctx.request.profile)
        # A GPU instance type is refused by the planner (instance_target); it gives no platform.
        platform = _platform(ctx)
        tp = checks.resolve_tp(ctx, unit="NeuronCore")
        _check_tp_degree(ctx, tp, platform)
        _check_tp_heads(ctx, tp)
        dtype = checks.resolve_dtype(ctx)
        shape = _neff_shape(ctx, profile, *_batching(ctx, profile, self.engine))
        container_flags = ctx.request.env.get("NEURON_CC_FLAGS", profile.neuron_cc_flags)
        build = _neff_build(ctx, profile, tp=tp, amp=AMP[dtype], platform=platform, shape=shape,
                            container_flags=container_flags)
        ctx.write_options(NeuronxOptions(engine=self.engine), "neuronx target")
        ctx.write_options(NeuronxOptions(tensor_parallel_degree=tp), "resolved tp")
        ctx.write_options(NeuronxOptions(dtype=checks.lmi_dtype(dtype)), "resolved dtype")
        ctx.write_options(NeuronxOptions(n_positions=shape.top), "build knob")
        if ctx.quantization.method == "int8":
            # The Neuron container's only spelling (it then loads with load_in_8bit).
            ctx.write_options(NeuronxOptions(quantize="static_int8"), "neuronx int8 weights")
        _check_startup(ctx, profile, build, container_flags)
        # What the build's preflight refuses, unless the start-up model already said why (a loader that
        # compiles at start-up): plan and build give one verdict (issue 32 item 3).
        if (unbuilt := unbuilt_reason(profile, build.loader, build.layout)) is not None and not ctx.findings.has(
                "neuron_loader_compiles"):
            ctx.findings.error("neuron_unbuilt", unbuilt[0], hint=unbuilt[1])
        return TargetPlan(build=build, toolchain=self.toolchain(profile.name),
                          workload=Workload(batch_size=shape.batch, seq_len=shape.top, tp=tp, preallocated=True),
                          dtype=dtype)


# The stages of ``NeuronxPlanning.plan``, in its order: tensor parallelism, batching, the lengths
# compiled, GQA, the loader and layout, then the start-up check of what the plan writes.
def _platform(ctx: PlanContext) -> NeuronPlatform | None:
    """The Neuron platform of --instance-type, refused (None) when the SDK table has no facts
    for it (Trainium2: neuron_sdk.toml holds inf2 and trn1 tensor-parallel degrees only)."""
    if ctx.instance is None or (platform := ctx.instance.accelerator.platform) is None:
        return None
    known = sdk().tp_degrees
    if (name := next((name for name in known if name == platform), None)) is not None:
        return name
    ctx.findings.error("neuron_platform", f"{ctx.instance.name} is a {platform} instance; the neuronx target "
                       f"builds for {' and '.join(known)} only (transformers-neuronx, {sdk().name})",
                       hint=f"plan with an {' or '.join(f'{name}.*' for name in known)} instance type")
    return None


def _check_tp_degree(ctx: PlanContext, tp: int, platform: NeuronPlatform | None) -> None:
    degrees = sdk().tp_degrees
    if platform is not None:
        allowed = list(degrees[platform])
        where: str = platform
    else:
        allowed = sorted({d for values in degrees.values() for d in values})
        where = "any Neuron platform"
    if tp not in allowed:
        ctx.findings.error("tp_neuron_degree", f"tp={tp} is not a tensor-parallel degree for {where}",
                           hint=f"use --tp one of {', '.join(map(str, allowed))}")
    if ctx.instance is not None and tp > ctx.instance.devices:
        ctx.findings.error("instance_devices",
                           f"tp={tp} needs {tp} NeuronCores, {ctx.instance.name} has {ctx.instance.devices}",
                           hint=f"use --tp <= {ctx.instance.devices} or a larger instance")


def _check_tp_heads(ctx: PlanContext, tp: int) -> None:
    """What transformers-neuronx does when tp does not divide the heads (``tp_rules``): pads them
    up to a multiple of tp for the models built on its padded decoder (a warning: the padding
    costs compute and memory), refuses the others; Mixtral's tp must divide the experts or be a
    multiple of them."""
    rules = sdk().tp_rules
    spec = ctx.spec
    heads = spec.num_attention_heads
    divisors = [d for d in range(1, heads + 1) if heads % d == 0 and d <= 64]
    if heads % tp and spec.model_type in rules.pad_heads_model_types:
        padded = -(-heads // tp) * tp
        ctx.findings.warn("tp_heads_padded",
                          f"transformers-neuronx pads the {heads} attention heads to {padded} for tp={tp}: "
                          f"{padded - heads} heads of compute and KV cache do nothing",
                          hint=f"a tp that divides {heads} needs no padding: {', '.join(map(str, divisors))}")
    elif heads % tp:
        ctx.findings.error("tp_heads", f"tp={tp} does not divide the {heads} attention heads, and "
                           f"transformers-neuronx pads no heads for {spec.model_type}",
                           hint=f"use a tp that divides {heads}: {', '.join(map(str, divisors))}")
    experts = spec.num_experts
    if spec.model_type in rules.experts_model_types and experts and experts % tp and tp % experts:
        ctx.findings.error("tp_experts", f"transformers-neuronx refuses tp={tp} for {experts} experts: tp must "
                           "divide the experts or be a multiple of them (mixtral/config.py)",
                           hint=f"use a tp that divides {experts} or is a multiple of it")


def _batching(ctx: PlanContext, profile: NeuronProfile, engine: str) -> tuple[int, bool]:
    """(the batch the NEFFs are compiled for, rolling batch on), with serving.properties' batching
    keys written so that ``profile``'s release reads them back as planned (``container_batching``):

    - rolling batch (option.rolling_batch other than disable, or --max-batch-size): the release's
      resolution of ``auto`` written out, option.max_rolling_batch_size, and no option.batch_size
      (DJL sets it from max_rolling_batch_size, and refuses one > 1 next to rolling batch);
    - static batching: option.rolling_batch=disable (an unset key is auto on 0.30+), the batch as
      option.batch_size (what TNX compiles) and as the top-level batch_size (the requests DJL's
      server hands the model at once), and no option.max_rolling_batch_size."""
    given, user = read_options(ctx, NeuronxOptions), ctx.user_options(NeuronxOptions)
    requested = given.rolling_batch
    if requested in (None, "disable") and user.max_rolling_batch_size is not None and user.rolling_batch is None:
        requested = "auto"  # --max-batch-size asks for rolling batch
    # DJL's older name max_dynamic_batch_size: the server's batch when batch_size is unset
    # (ModelInfo.java@0.30.0-dlc:864-867)
    server = user.batch_size if user.batch_size is not None else user.max_dynamic_batch_size
    option_batch = user.option_batch_size
    if requested not in (None, "disable"):
        max_rolling = given.max_rolling_batch_size or 1
        # The recommender resolves auto from the size the user wrote, before it sets its own default
        # (LmiConfigRecommender.java@0.30.0-dlc:36-44 order, 63-69 reads it; 0.32.0-dlc:38-43, 66-67):
        # lmi-build's default size must not turn an unsized auto into vllm.
        sized = max_rolling if user.max_rolling_batch_size is not None else None
        written = NeuronxOptions(engine=engine, rolling_batch=requested, max_rolling_batch_size=sized,
                                 batch_size=server)
        reading = container_batching(written_text(written), profile)
        if reading.rolling:
            _write_rolling_batch(ctx, profile, reading, max_rolling, option_batch, server)
            return max_rolling, True
    if option_batch is not None and server is not None and option_batch != server:
        ctx.findings.error("neuron_batch_size",
                           f"option.batch_size={option_batch} (the batch the NEFFs are compiled for) and "
                           f"batch_size={server} (the requests DJL hands the model at once) differ",
                           hint="give one of them: lmi-build writes both with the same value")
    batch = option_batch or server or 1
    ctx.write_options(NeuronxOptions(rolling_batch="disable"),
                      "static batching (an unset option.rolling_batch is auto on LMI 0.30+)")
    ctx.write_options(NeuronxOptions(option_batch_size=batch), "the batch the NEFFs are compiled for")
    ctx.write_options(NeuronxOptions(batch_size=batch),
                      "the requests DJL's server batches per call (ModelInfo.java:864-867)")
    withhold_rolling_batch(ctx)
    return batch, False


def _write_rolling_batch(ctx: PlanContext, profile: NeuronProfile, reading: ContainerBatching, max_rolling: int,
                         option_batch: int | None, server: int | None) -> None:
    """Rolling batch as the release resolves it, refusing the static batch sizes DJL refuses next to it."""
    if option_batch is not None and option_batch > 1:
        ctx.findings.error("neuron_batch_rolling",
                           f"{profile.name} refuses option.batch_size={option_batch} with rolling batch "
                           f"({reading.why}; tnx_properties.py validate_batch_size): under rolling batch "
                           "DJL compiles for option.max_rolling_batch_size",
                           hint="drop option.batch_size (rolling batch, --max-batch-size N), or set "
                                "-o option.rolling_batch=disable for a static batch")
    if server is not None and server > 1:
        ctx.findings.error("neuron_batch_rolling",
                           f"batch_size={server} batches requests statically, next to rolling batch ({reading.why})",
                           hint="drop batch_size for rolling batch, or drop option.rolling_batch")
    ctx.write_options(NeuronxOptions(rolling_batch=reading.rolling_batch),
                      f"as {profile.name} resolves it ({reading.why})")
    ctx.write_options(NeuronxOptions(max_rolling_batch_size=max_rolling), "build knob")
    withhold_static_batch(ctx)


@dataclass(frozen=True)
class NeffShape:
    """The batch and sequence lengths the NEFFs are compiled for."""

    batch: int
    rolling: bool  # rolling batch on
    continuous: bool  # TNX continuous batching (DJL compiles the shared caches for it)
    n_positions: tuple[int, ...]  # token-generation buckets
    contexts: tuple[int, ...]  # context-encoding buckets
    top: int  # the largest n_positions


def _neff_shape(ctx: PlanContext, profile: NeuronProfile, batch: int, rolling: bool) -> NeffShape:
    """The buckets ``profile``'s release compiles for this batching: one n_positions under continuous
    batching, else TNX's doubling token buckets, and the context estimates (``_contexts``)."""
    defaults = sdk().defaults
    given = read_options(ctx, NeuronxOptions)  # with what the batching wrote
    continuous = continuous_batching(profile, rolling=rolling, batch=batch, model_type=ctx.spec.model_type,
                                     rolling_batch=given.rolling_batch)
    # option.n_positions as given (one int, as the container reads it; it derives the buckets), else what
    # the release resolves when serving.properties has none (``n_positions_default``)
    requested = given.n_positions if given.n_positions is not None else profile.n_positions_default
    if requested is None:
        limit, cap = ctx.spec.max_position_embeddings, defaults.max_n_positions
        requested = min(limit, cap) if limit else cap
    n_positions = (requested,) if continuous else token_buckets(requested, defaults.first_bucket)
    checks.check_total_length(ctx, max(n_positions), "n_positions", "lower --n-positions to at most {limit}")
    contexts = _contexts(ctx, profile, given, n_positions, continuous)
    _check_io_lengths(ctx, max(n_positions))
    return NeffShape(batch=batch, rolling=rolling, continuous=continuous, n_positions=n_positions,
                     contexts=contexts, top=max(n_positions))


def _contexts(ctx: PlanContext, profile: NeuronProfile, given: NeuronxOptions, n_positions: tuple[int, ...],
              continuous: bool) -> tuple[int, ...]:
    """The context-encoding buckets: option.context_length_estimate (sorted, deduplicated), checked
    against what DJL accepts under continuous batching; else the release's own."""
    defaults, top = sdk().defaults, max(n_positions)
    bsh = (given.cache_layout or "") == "BSH"
    if given.context_length_estimate is None:
        if not continuous:
            return half_buckets(n_positions)
        if profile.continuous_batching_contexts == "n_positions" or bsh:
            return (top,)
        return continuous_batching_contexts(top, defaults.first_bucket, defaults.continuous_batching_first_large_bucket)
    given_contexts = given.context_length_estimate
    contexts = tuple(sorted(set(given_contexts)))
    if continuous and (refusal := contexts_refusal(profile, list(given_contexts), top, bsh)):
        ctx.findings.error("context_length_estimate",
                           f"{profile.name} refuses context_length_estimate {shown_values(given_contexts)} under "
                           f"continuous batching: {refusal} ({'; '.join(profile.continuous_batching_contexts_sources)})",
                           hint="drop --context-length-estimate, or turn rolling batch off")
    elif unused := [size for size in contexts if size > top]:
        ctx.findings.warn("context_bucket_unused",
                          f"context_length_estimate {shown_values(unused)} above n_positions {top}: transformers-neuronx "
                          f"compiles and loads it as given, and no prompt that fits n_positions runs it "
                          f"({'; '.join(defaults.context_buckets_sources)})",
                          hint=f"keep every --context-length-estimate <= {top} (less to compile and load), "
                          "or raise --n-positions")
    return contexts


def _check_io_lengths(ctx: PlanContext, top: int) -> None:
    user = ctx.user_options(NeuronxOptions)
    if user.max_input_len is None or user.max_output_len is None:
        return
    given = read_options(ctx, NeuronxOptions)
    max_input, max_output = given.max_input_len, given.max_output_len
    if max_input is not None and max_output is not None and max_input + max_output > top:
        ctx.findings.error("n_positions_short",
                           f"max_input_len + max_output_len = {max_input + max_output} exceeds n_positions {top}",
                           hint=f"raise --n-positions to at least {max_input + max_output}")


def _gqa(ctx: PlanContext, tp: int, batch: int) -> tuple[str | None, str]:
    """(option.group_query_attention, the strategy TNX settles on), warning where they differ."""
    spec = ctx.spec
    requested = read_options(ctx, NeuronxOptions).group_query_attention
    wanted = requested or DEFAULT_GQA
    gqa = effective_gqa(requested, batch_size=batch, tp=tp, heads=spec.num_attention_heads,
                        kv_heads=spec.num_kv_heads, head_dim=spec.head_dim)
    if gqa != wanted:
        ctx.findings.warn("gqa_fallback",
                          f"transformers-neuronx will use {gqa} instead of {wanted} "
                          f"(kv_heads={spec.num_kv_heads}, head_dim={spec.head_dim}, tp={tp}, batch={batch})",
                          hint="choose a tp that divides the KV heads to keep KV sharded, "
                          "or accept the replicated KV cache (more memory per core)")
    return requested, gqa


def _neff_build(ctx: PlanContext, profile: NeuronProfile, *, tp: int, amp: str, platform: NeuronPlatform | None,
                shape: NeffShape, container_flags: str) -> NeuronxBuild:
    """The compile's knobs: GQA, the loader DJL picks and its layout, the compiler flags and the
    loader's own kwargs, each as ``profile``'s release makes them."""
    given = read_options(ctx, NeuronxOptions)
    model_type = ctx.spec.model_type
    requested, gqa = _gqa(ctx, tp, shape.batch)
    level = given.neuron_optimize_level  # the table bounds it to 1..3
    # DJL adds each precision flag whenever its option is set, even to false.
    flags = compiler_flags(container_flags, level, given.enable_mixed_precision_accumulation is not None,
                           given.enable_saturate_infinity is not None,
                           properties_built=2 if given.speculative_draft_model is not None else 1)
    loader = _loader(ctx, profile, shape.rolling)
    layout = _layout(ctx, profile, loader)
    embedding = _on_device_embedding(ctx, profile, layout)
    if layout == "neuronx-split" and model_type not in sdk().split_classes:
        ctx.findings.error("neuron_split_class", f"{profile.name} has no transformers-neuronx sampling class for "
                           f"{model_type}", hint="pick lmi-0.28.0 or newer (lmi-build profiles list)")
    batch, top = shape.batch, shape.top
    return NeuronxBuild(
        tp=tp, amp=amp, n_positions=shape.n_positions, context_length_estimate=shape.contexts, batch_size=batch,
        continuous_batching=shape.continuous, gqa_requested=requested, gqa_effective=gqa, unroll=given.unroll,
        neuron_optimize_level=level, on_device_embedding=embedding, compiler_flags=flags, platform=platform,
        loader=loader, layout=layout,
        optimum_kwargs=optimum_kwargs(tp=tp, amp=amp, batch=batch, n_positions=top) if loader == "optimum" else {},
        split_class=sdk().split_classes.get(model_type) if layout == "neuronx-split" else None,
        tnx_kwargs=tnx_kwargs(batch=batch, amp=amp, tp=tp, n_positions=top, continuous=shape.continuous,
                              given_contexts=given.context_length_estimate, contexts=shape.contexts),
        neuron_config=neuron_config(continuous=shape.continuous, batch=batch, gqa_requested=requested,
                                    quantized=ctx.quantization.method == "int8", amp=amp,
                                    on_device_embedding=embedding),
    )


def _loader(ctx: PlanContext, profile: NeuronProfile, rolling: bool) -> Loader:
    """The loader from the options DJL will read: the user's, and those lmi-build writes to
    serving.properties that steer it (quantize=static_int8 for int8, which sets load_in_8bit)."""
    options = handler_options({key: item.value for key, item in ctx.options.values.items() if ctx.user_set(key)})
    if ctx.quantization.method == "int8":
        options.update(quantize="static_int8", load_in_8bit="true")
    rolling_batch = read_options(ctx, NeuronxOptions).rolling_batch or "disable"
    try:
        loader = choose_loader(profile, model_type=ctx.spec.model_type, rolling=rolling, options=options,
                               rolling_batch=rolling_batch)
        if options.get("model_loader") == "vllm" and loader == "tnx":
            ctx.findings.warn("neuron_model_loader_ignored",
                              f"option.model_loader=vllm selects vLLM's loader only with option.rolling_batch=vllm; "
                              f"with rolling_batch={rolling_batch} {profile.name} keeps its transformers-neuronx "
                              f"loader, which this build compiles for ({'; '.join(sdk().loader_rules.vllm_loader_sources)})",
                              hint="drop option.model_loader=vllm")
        return loader
    except LoaderRefused as refused:
        ctx.findings.error("neuron_model_loader", str(refused), hint=refused.hint)
        return "tnx"


def _layout(ctx: PlanContext, profile: NeuronProfile, loader: Loader) -> Literal[
        "neuronx-tnx", "neuronx-legacy", "neuronx-split", "neuronx-optimum", "neuronx-cache"]:
    """option.compiled_graph_path=s3://... asks for a compile-cache tree the container reads
    through NEURON_COMPILE_CACHE_URL beside the original weights; otherwise the precompiled
    layout of the loader (optimum-neuron's export) or of the profile (TNX)."""
    given = read_options(ctx, NeuronxOptions)
    graph = given.compiled_graph_path
    if loader == "optimum":
        if graph:
            ctx.findings.error("compiled_graph_path_optimum",
                               "option.compiled_graph_path is read only by DJL's transformers-neuronx loader, "
                               "not by the optimum loader this plan uses",
                               hint="drop option.compiled_graph_path (the optimum export is self-contained)")
        return "neuronx-optimum"
    if not graph:
        return profile.layout
    if not graph.startswith("s3://"):
        ctx.findings.error("compiled_graph_path_local",
                           f"option.compiled_graph_path={graph} is a local directory: DJL then loads flat NEFFs "
                           "from it (model.load), which a compile-cache tree cannot satisfy",
                           hint="give the s3:// URL the artifact will be published to, or leave it unset "
                                "for the self-contained precompiled layout")
    if graph.startswith("s3://") and profile.compiled_graph_path_s3 == "rejected":
        ctx.findings.error("compiled_graph_path_rejected",
                           f"{profile.name} would model.load() {graph} itself, which transformers-neuronx refuses "
                           f"as a missing directory ({'; '.join(profile.compiled_graph_path_sources)})",
                           hint="drop option.compiled_graph_path (the precompiled layout), or pick lmi-0.28.0 "
                                "or newer")
    ref = ctx.request.model or given.model_id or ""
    if ref.startswith("demo:") or (ref and not ref.startswith("s3://") and Path(ref).expanduser().exists()):
        ctx.findings.error("compiled_graph_path_model",
                           f"a compile-cache artifact is served next to the original weights, but {ref} is "
                           "not a model the container can fetch",
                           hint="plan with the Hugging Face id or the s3:// URL the container will load")
    return "neuronx-cache"


def _on_device_embedding(ctx: PlanContext, profile: NeuronProfile, layout: str) -> bool:
    """on_device_embedding as the serving release will pass it (``container_on_device_embedding``),
    so the NEFFs are compiled with it; presharded weights (the 0.30+ precompiled layout) load only
    with it on (transformers-neuronx base.py asserts)."""
    options = handler_options({key: item.value for key, item in ctx.options.values.items()})
    value, why = container_on_device_embedding(profile, layout, options)
    written = options.get("on_device_embedding")
    if written is not None and parse_bool(written) is None:
        ctx.findings.error("neuron_on_device_embedding", f"option.on_device_embedding={written} is not a boolean",
                           hint="write true or false")
    elif written is not None and not profile.on_device_embedding_option:
        ctx.findings.warn("neuron_on_device_embedding_ignored",
                          f"{profile.name} does not read option.on_device_embedding: it passes no "
                          "on_device_embedding to transformers-neuronx", hint="drop option.on_device_embedding")
    if layout == "neuronx-tnx" and profile.precompiled_on_device_embedding and not value:
        ctx.findings.error("neuron_on_device_embedding",
                           f"{profile.name} would load the presharded weights with on_device_embedding off "
                           f"({why}), and transformers-neuronx asserts \"on_device_embedding must be True to "
                           f"save and load presharded weights\" ({'; '.join(profile.on_device_embedding_sources)})",
                           hint="drop option.on_device_embedding=false")
    return value


def _check_startup(ctx: PlanContext, profile: NeuronProfile, build: NeuronxBuild, container_flags: str) -> None:
    """The release's start-up on the artifact this plan writes (``startup.evaluate``, which
    ``verify --for-container`` evaluates on the built one): every rule that makes it reject,
    recompile or serve otherwise than built is an error (refused options, RoPE scaling, and the
    rest on the keys the plan writes), a belief without a source a warning."""
    inputs = from_planned(*ctx.written_properties(), build, ctx.spec, container_flags)
    errors, warnings = outcome_messages(evaluate(profile, inputs))
    ctx.findings.add_errors(errors)
    ctx.findings.add_warnings(warnings)
