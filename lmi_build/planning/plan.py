"""The build plan: every knob resolved, validated, with a memory estimate and a cache key.

A plan is computed without heavy imports and without touching weights; steps only execute a plan.
``plan --json`` prints ``BuildPlan.model_dump(mode="json")`` (the output contract CI relies on).
"""

from typing import Any, Generic, Literal, TypeVar

from pydantic import model_validator

from lmi_build.core.errors import InvalidPlan
from lmi_build.core.redaction import environment_secrets, redact, redact_key, redact_text
from lmi_build.core.types import FrozenModel, ModelIdentity, PlanMessage, Record, TargetName
from lmi_build.model.spec import ModelSpec, PreQuantization


class CalibrationPlan(FrozenModel):
    dataset: str  # "builtin:<name>" or "file:<basename>"
    dataset_digest: str  # sha256 of the calibration text, so a changed file changes the cache key
    size: int  # number of samples
    max_seq_len: int
    batch_size: int = 1
    seed: int = 1234


class QuantizationPlan(FrozenModel):
    method: str | None = None  # None: no quantization step (fp16/bf16 conversion only)
    quant_algo: str | None = None  # TensorRT-LLM / ModelOpt QuantAlgo string, e.g. "W4A16_AWQ"
    kv_cache_quant_algo: str | None = None  # "FP8" | "INT8" | None
    group_size: int | None = None
    smoothquant_alpha: float | None = None
    per_token: bool | None = None
    per_channel: bool | None = None
    multi_query_mode: bool | None = None
    calibration: CalibrationPlan | None = None
    pre_quantized: PreQuantization | None = None  # the input is already quantized: no re-quantization


class TargetKnobs(Record):
    """What every target's build knobs have. Each target package declares its own subclass (its
    ``knobs`` model, with ``target`` as the literal discriminator); shared layers read only these
    fields, never a target's own."""

    target: TargetName
    tp: int

    @property
    def world_size(self) -> int:
        """The devices one copy of the model runs on."""
        return self.tp

    def summary(self) -> dict[str, str]:
        """tp, pp and the weights' dtype as text (a matrix build's name and publish template use them)."""
        return {"tp": str(self.tp), "pp": "1", "dtype": ""}


KnobsT = TypeVar("KnobsT", bound=TargetKnobs)
K = TypeVar("K", bound=TargetKnobs)


class MemoryEstimate(FrozenModel):
    """What the model needs on each device (``planning/memory.py`` has the rules). For a paged KV cache
    (TensorRT-LLM) ``per_device_bytes`` is what must fit to load (weights, activations, runtime) and the
    ``kv_cache_*`` fields say what the runtime then allocates; otherwise it includes the whole KV cache."""

    num_parameters: int
    weight_bytes: int  # after quantization, whole model
    kv_bytes_per_token: int  # all layers, at the KV cache dtype
    kv_cache_bytes: int  # max_batch_size x max_seq_len (or n_positions) tokens: a cap when paged
    devices: int  # tp * pp
    per_device_bytes: int  # weights/devices + runtime overhead + (paged) activations or (else) the KV cache
    device_memory_bytes: int | None = None  # from --instance-type
    instance_type: str | None = None
    fits: bool | None = None  # None when no instance type was given; paged: whether it loads
    # Peak host RAM of the convert/quantize step: this host's step estimate (checkpoint_step.host_ram_bytes, the
    # same number) when the plan has one, else the general bound (the model loaded + its export + 2 GiB).
    host_ram_bytes: int | None = None
    # A paged KV cache (None otherwise):
    activation_bytes: int | None = None  # the engine's activations on one device (estimate)
    kv_free_fraction: float | None = None  # of the memory free after loading, given to the KV cache
    kv_fraction_source: str | None = None  # the release default's citation, or the option set
    device_kv_bytes_per_token: int | None = None  # one device's share of a token's KV cache
    kv_cache_device_bytes: int | None = None  # KV cache memory on one device (needs an instance type)
    kv_cache_tokens: int | None = None  # tokens of KV cache the runtime allocates (needs an instance type)
    max_seq_len: int | None = None
    max_batch_size: int | None = None
    full_length_sequences: int | None = None  # kv_cache_tokens // max_seq_len
    # vLLM / LMI-Dist (None otherwise): the share of the device's memory the engine takes
    # (``gpu_memory_utilization``); the KV cache is that less weights, activations and runtime
    # (``kv_cache_device_bytes``), and the engine refuses to start unless one max_model_len sequence
    # fits (``kv_cache_needed_bytes``); ``max_model_len_fits``: the largest that does.
    gpu_memory_utilization: float | None = None
    kv_cache_needed_bytes: int | None = None
    max_model_len_fits: int | None = None
    cudagraph_bytes: int | None = None  # CUDA graph memory subtracted first (releases that do; estimate)
    # whether the engine refuses a max_model_len sequence that does not fit (False: LMI-Dist 8, whose start-up
    # check is its warmup prefill; ``fits`` then says whether that passes)
    sequence_checked: bool | None = None


class CheckpointStepEstimate(FrozenModel):
    """Where the convert/quantize step is expected to run and what it costs, from the rates in
    ``lmi_build/data/quantize_rates.toml`` (measured; see its ``[source]``). Not part of the cache
    key: the build records the device it really used in the manifest's step entry."""

    device: Literal["cpu", "cuda"]  # what this host offers at plan time
    gpus: int  # visible CUDA devices (0 on CPU)
    detected: str  # how the device was found, e.g. "/proc/driver/nvidia/gpus: 4"
    load_dtype: str  # the dtype the model is loaded (and calibrated) in
    method: str | None  # the quantization method; None: an unquantized conversion
    calibration_tokens: int = 0  # estimated from the planned samples (characters per token)
    seconds: float | None = None  # None: no measured rate for this device and method
    host_ram_bytes: int  # peak resident memory of the step's process
    gpu_bytes_per_device: int | None = None  # only with device cuda
    basis: list[str] = []  # one line per number: which measured rate or factor it comes from


class ToolchainRef(FrozenModel):
    target: TargetName
    profile: str | None = None  # container profile name (trtllm) or SDK pin (neuronx)
    image: str | None = None
    versions: dict[str, str] = {}  # {"tensorrt_llm": "0.8.0", "tensorrt": "9.2.0", "cuda": "12.2"}


class BuildPlan(Record, Generic[KnobsT]):
    """The plan of one build. Generic in its target's knobs: ``BuildPlan[TrtllmBuild]`` in the trtllm
    target; a saved plan is read as ``BuildPlan[PlanKnobs]``, the union of every target's knobs
    discriminated on ``target`` (``lmi_build.targets``)."""

    schema_version: int = 1
    target: TargetName
    recipe: str
    recipe_version: int
    model: ModelIdentity
    spec: ModelSpec
    options: dict[str, str]  # serving.properties keys/values the artifact will carry
    option_sources: dict[str, str]  # key -> Source value ("cli", "env", ...)
    build: KnobsT | None = None  # None only when invalid early
    quantization: QuantizationPlan = QuantizationPlan()
    memory: MemoryEstimate | None = None
    checkpoint_step: CheckpointStepEstimate | None = None  # None: no convert/quantize step on this host
    toolchain: ToolchainRef
    cache_key: str  # "sha256:<hex>" over every build-relevant field (see planning.cache_key)
    valid: bool
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []

    @model_validator(mode="after")
    def _knobs_of_this_target(self) -> "BuildPlan[KnobsT]":
        if self.build is not None and self.build.target != self.target:
            raise ValueError(f"the build knobs are {self.build.target}'s, the plan is for {self.target}")
        return self

    def knobs(self, kind: type[K]) -> K:
        """The build knobs as the calling target's own type; a plan of another target, or one made
        invalid before any knobs, is refused (a saved plan is read by its ``target``)."""
        if not isinstance(self.build, kind):
            raise InvalidPlan(f"this {self.target} plan has no {kind.__name__} knobs",
                              hint="plan it again for this target: lmi-build plan <target> ... --save plan.json")
        return self.build

    def expected_weight_bytes(self) -> int | None:
        """The weights' size after the planned conversion or quantization: the total a checkpoint
        step's progress bar shows (None when the plan has no memory estimate)."""
        return self.memory.weight_bytes if self.memory is not None else None

    def redacted(self, secrets: list[str] | None = None) -> "BuildPlan[KnobsT]":
        """This plan as it may be shown or saved: secret-named option values, token-like values, URL
        passwords and every value of a credential variable of the environment replaced by ``***``
        (``lmi_build.core.redaction``). A plan holding a credential can never be built (the packager
        refuses to write one into serving.properties), so hiding the values loses nothing."""
        known = environment_secrets() if secrets is None else secrets

        def message(item: PlanMessage) -> PlanMessage:
            hint = redact_text(item.hint, known) if item.hint else item.hint
            return item.model_copy(update={"message": redact_text(item.message, known), "hint": hint})

        return self.model_copy(update={
            "options": {redact_key(key, known): redact(key, value, known) for key, value in self.options.items()},
            "errors": [message(m) for m in self.errors],
            "warnings": [message(m) for m in self.warnings],
            "model": self.model.model_copy(update={"id": redact_text(self.model.id, known)}),
        })

    def event_fields(self) -> dict[str, Any]:
        """What the ``plan`` event says of this plan (docs/EVENTS.md): the build's identity, whether it
        is valid, and the estimate of its convert/quantize step."""
        step = self.checkpoint_step
        return {"target": self.target, "model": self.model.id, "profile": self.toolchain.profile,
                "cache_key": self.cache_key, "valid": self.valid, "errors": [m.message for m in self.errors],
                "warnings": len(self.warnings), "quantize": self.quantization.method,
                "checkpoint_estimate_s": step.seconds if step is not None else None}

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["spec"].pop("raw", None)  # the raw config is large and in the artifact anyway
        return data
