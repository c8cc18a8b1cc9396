"""The Neuron SDK pin of the LMI Neuron container (``data/neuron_sdk.toml``) as a model."""

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from lmi_build.core.tables import load_table
from lmi_build.core.types import PlanMessage, Record

SDK_FILE = Path(__file__).resolve().parent / "data" / "neuron_sdk.toml"
NeuronPlatform = Literal["inf2", "trn1"]


class NeuronCompiler(Record):
    container_flags: str  # the image's NEURON_CC_FLAGS
    required_flags: tuple[str, ...]  # appended by transformers-neuronx when their key is absent, in this order
    required_flags_sources: tuple[str, ...] = Field(min_length=1)


class GqaRules(Record):
    """Where transformers-neuronx's GQA configuration is read (the rules are ``plan.effective_gqa``)."""

    sources: tuple[str, ...] = Field(min_length=1)


class NeuronDefaults(Record):
    max_n_positions: int = Field(gt=0)
    first_bucket: int = Field(gt=0)
    context_buckets_sources: tuple[str, ...] = Field(min_length=1)  # a given estimate list is compiled as given
    continuous_batching_model_types: tuple[str, ...]
    continuous_batching_first_large_bucket: int = Field(gt=0)


class LoaderRules(Record):
    optimum_model_types: tuple[str, ...]
    optimum_needs_rolling_batch: tuple[str, ...]
    tnx_only_options: tuple[str, ...]
    optimum_model_types_026: tuple[str, ...]
    tnx_true_options_026: tuple[str, ...]
    optimum_partition_schema: str
    vllm_loader_model_types: tuple[str, ...]
    vllm_loader_sources: tuple[str, ...] = Field(min_length=1)


class TpRules(Record):
    """What transformers-neuronx does when tp does not divide the attention heads or the experts."""

    pad_heads_model_types: tuple[str, ...]  # heads padded up to a multiple of tp
    pad_heads_sources: tuple[str, ...] = Field(min_length=1)
    experts_model_types: tuple[str, ...]  # tp must divide the experts or be a multiple of them
    experts_sources: tuple[str, ...] = Field(min_length=1)


class UnbuiltLoader(Record):
    """Why lmi-build refuses to build the artifact of one DJL model loader, with what was read."""

    reason: str = Field(min_length=1, pattern=r"^[^\n]*$")  # shown as the refusal's one line
    sources: tuple[str, ...] = Field(min_length=1)  # repo, ref, path:lines of what was read
    missing: str  # what could not be read and an exact build would need ("" when nothing is)
    # What the release's start-up does with an artifact served under this loader when it resolves
    # option.rolling_batch to ``startup_rolling_batch``, one line ("": it would load one lmi-build could
    # build), the fix, and where that is read: the start-up model's rule neuron_loader_compiles.
    startup: str = Field(default="", pattern=r"^[^\n]*$")
    startup_rolling_batch: str | None = None
    startup_hint: str = ""
    startup_sources: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _startup_cited(self) -> "UnbuiltLoader":
        if self.startup and not (self.startup_sources and self.startup_rolling_batch and self.startup_hint):
            raise ValueError("an unbuilt loader's start-up behaviour needs startup_rolling_batch, startup_hint "
                             "and startup_sources")
        return self


class RefusedOption(Record):
    """An option the neuronx plan refuses, with why (one line) and what was read."""

    reason: str = Field(min_length=1, pattern=r"^[^\n]*$")
    sources: tuple[str, ...] = Field(min_length=1)


class StartupSources(Record):
    """Citations of the start-up rules that are not a profile's own (``targets/neuronx/startup.py``)."""

    neff_lookup_sources: tuple[str, ...] = Field(min_length=1)
    optimum_block_sources: tuple[str, ...] = Field(min_length=1)
    cache_flags_sources: tuple[str, ...] = Field(min_length=1)
    server_batch_sources: tuple[str, ...] = Field(min_length=1)
    loader_sources: tuple[str, ...] = Field(min_length=1)


class NeuronSdk(Record):
    name: str
    image: str  # empty while the exact LMI image tag is unknown
    versions: dict[str, str]
    compiler: NeuronCompiler
    gqa: GqaRules
    tp_degrees: dict[NeuronPlatform, tuple[int, ...]]
    tp_rules: TpRules
    defaults: NeuronDefaults
    loader_rules: LoaderRules
    split_classes: dict[str, str]  # model type -> transformers_neuronx "<module>.<class>" (0.27 split layout)
    unbuilt_loaders: dict[str, UnbuiltLoader]  # DJL model loader -> why its artifact is not built
    refused_options: dict[str, RefusedOption] = {}  # full option key -> why the plan refuses it
    startup: StartupSources


def refused_option_messages(is_set: Callable[[str], bool]) -> list[PlanMessage]:
    """The options whose container behaviour lmi-build's driver does not build (``refused_options``),
    among those ``is_set`` says are given: one error each, for plan and ``verify --for-container`` alike."""
    return [refused_option_message(key, refused) for key, refused in sdk().refused_options.items() if is_set(key)]


def refused_option_message(key: str, refused: RefusedOption) -> PlanMessage:
    return PlanMessage(code="neuron_refused_option", message=f"{key}: {refused.reason} ({'; '.join(refused.sources)})",
                       hint=f"drop {key} (lmi-build builds the target model's NEFFs only)")


def sdk() -> NeuronSdk:
    """The SDK pin, read once."""
    return load_table(SDK_FILE, NeuronSdk)
