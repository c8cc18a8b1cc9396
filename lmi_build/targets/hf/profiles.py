"""LMI containers that serve the hf target's checkpoints (one ``data/profiles/<name>.toml`` each), and
the quantized formats their engines load (``data/serving_formats.toml``), every fact with its source.
Read without heavy imports (``plan``, ``profiles list``)."""

from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from lmi_build.core import container_profiles
from lmi_build.core.container_profiles import ContainerRelease
from lmi_build.core.errors import UnknownName
from lmi_build.core.tables import load_table
from lmi_build.core.types import Record

FORMATS_FILE = Path(__file__).resolve().parent / "data" / "serving_formats.toml"
PROFILES_DIR = Path(__file__).resolve().parent / "data" / "profiles"
ExportFormat = Literal["hf", "modelopt_hf", "gptq", "awq", "compressed_tensors"]


class FormatFacts(Record):
    name: ExportFormat
    quant_method: str  # config.json quantization_config.quant_method
    description: str
    config: dict[str, Any]  # the quantization_config keys the loaders read (group_size: the default)
    tensors: tuple[str, ...]
    sources: tuple[str, ...]
    inferred: tuple[str, ...] = ()
    fold_model_types: tuple[str, ...] = ()  # awq: model types whose AWQ scales ModelOpt can fold


class ServingRule(Record):
    withhold_quantize: bool  # quantized checkpoints declare their method: no option.quantize
    sources: tuple[str, ...]
    lmi_dist_removed_in: str  # the first LMI release without the LMI-Dist rolling batch
    lmi_dist_removed_source: str


class VllmMemory(Record):
    """How the profile's engine sizes its KV cache at start-up and refuses one too small for a sequence of
    max_model_len (``planning/memory.py`` has the rule): its vLLM's defaults, read from that vLLM's source
    (``tests/vendor/vllm/memory.json``, which a test compares with these) and its DJL handler's engine args."""

    # V1 check_enough_kv_cache_memory, V0 raise_if_cache_size_invalid (one max_model_len sequence must fit);
    # "warmup": an engine not built on vLLM (LMI-Dist 8) that sizes its KV cache in a warmup prefill of
    # max_num_batched_tokens and checks no sequence length (it reads no gpu_memory_utilization or max_model_len)
    check: Literal["v1", "v0", "warmup"]
    check_source: str  # where that check is (version, path:line, function)
    gpu_memory_utilization: float  # the default when option.gpu_memory_utilization is unset
    block_size: int  # tokens per KV cache block on CUDA
    max_num_batched_tokens: int  # tokens of the profiled pass with chunked prefill, unset (LMI's usage context)
    # V0: chunked prefill is off unless max_model_len > chunked_above, and then the profiled pass is
    # max(max_model_len, unchunked_batched_tokens) tokens; None: always chunked (V1)
    unchunked_batched_tokens: int | None = None
    chunked_above: int | None = None
    cudagraph_in_budget: bool  # CUDA graph memory subtracted before the KV cache is sized
    # where it is: the largest graph's tokens are min(cudagraph_seqs_factor x max_num_seqs, cudagraph_max_tokens)
    cudagraph_seqs_factor: int | None = None
    cudagraph_max_tokens: int | None = None
    sources: tuple[str, ...]
    inferred: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _graphs_sized(self) -> "VllmMemory":
        if self.cudagraph_in_budget and (self.cudagraph_seqs_factor is None or self.cudagraph_max_tokens is None):
            raise ValueError("cudagraph_in_budget needs cudagraph_seqs_factor and cudagraph_max_tokens")
        return self


class HfProfile(ContainerRelease):
    engine: Literal["vllm", "lmi-dist"]
    vllm: str
    transformers: str
    # --quantize method -> the format this container loads; "" = none that lmi-build writes
    formats: dict[str, ExportFormat | Literal[""]]
    quantize_values: tuple[str, ...]  # option.quantize values the container accepts; () = any
    modelopt_algos: tuple[str, ...]  # ModelOpt quant_algo values its vLLM's modelopt loader takes
    sources: tuple[str, ...]
    inferred: tuple[str, ...] = ()
    # Its DJL handler's start-up: option.pipeline_parallel_degree > 1 accepted; vLLM engine-argument
    # spellings DJL refuses when they differ from its own key (vLLM name -> LMI key); the lines read.
    pipeline_parallel: bool
    engine_arg_conflicts: dict[str, str]
    startup_sources: tuple[str, ...]
    vllm_memory: VllmMemory
    # What the plan writes so that the image starts this engine where its Java front-end would not: the
    # option.rolling_batch (its recommender picks another engine, or none, for some model types) and
    # option.mpi_mode=true (0.27 sets it only when it writes engine itself); cited in start_sources.
    start_rolling_batch: Literal["vllm", "lmi-dist"] | None = None
    start_mpi_mode: bool = False
    start_sources: tuple[str, ...] = ()
    dlc: str | None = None  # the published DLC image's ECR URI
    dlc_source: str | None = None  # the image-list file and line it is read from

    @model_validator(mode="after")
    def _start_keys_cited(self) -> "HfProfile":
        if (self.start_rolling_batch or self.start_mpi_mode) and not self.start_sources:
            raise ValueError("start_rolling_batch and start_mpi_mode need start_sources")
        return self

    def versions(self) -> dict[str, str]:
        return {"lmi": self.lmi_version, "vllm": self.vllm, "transformers": self.transformers}

    @property
    def runs_on(self) -> str:
        """What its engine runs on, for messages: its vLLM, or (LMI-Dist 8, the "warmup" check) its own
        models beside an image's vLLM it does not use."""
        if self.vllm_memory.check == "warmup":
            return f"LMI-Dist models, vLLM {self.vllm} unused"
        return f"vLLM {self.vllm}"


class ServingFormats(Record):
    format: tuple[FormatFacts, ...]
    serving: ServingRule


def serving_formats() -> ServingFormats:
    return load_table(FORMATS_FILE, ServingFormats)


def load_profiles() -> list[HfProfile]:
    """Every hf container profile, oldest release first."""
    return container_profiles.load_profiles("hf", PROFILES_DIR, HfProfile)


def get_profile(name: str) -> HfProfile:
    profiles = load_profiles()
    for profile in profiles:
        if profile.name == name:
            return profile
    raise UnknownName(f"unknown hf container profile '{name}'",
                      hint=f"known hf profiles: {', '.join(p.name for p in profiles)} (lmi-build profiles list); "
                           "leave --profile out for the format the newest hf profile loads")


def format_facts(name: str) -> FormatFacts:
    return next(f for f in serving_formats().format if f.name == name)


def loads_format(profile: HfProfile, fmt: str, quant_algo: str | None) -> bool:
    """Whether ``profile``'s engine loads a checkpoint in ``fmt`` (a ModelOpt one only for the
    quant_algo values its vLLM's modelopt loader takes): the one rule the plan applies before the
    build and ``verify --for-container`` after it."""
    if fmt == "hf":
        return True
    if fmt == "modelopt_hf":
        return quant_algo in profile.modelopt_algos
    return fmt in profile.formats.values()


def format_words(fmt: str, quant_algo: str | None) -> str:
    """A checkpoint format as messages name it: "AutoAWQ (quant_method awq)", "ModelOpt FP8"."""
    if fmt == "modelopt_hf":
        return f"ModelOpt {quant_algo}" if quant_algo else "ModelOpt"
    if fmt == "hf":
        return "unquantized"
    names = {"awq": "AutoAWQ", "gptq": "AutoGPTQ"}
    method = format_facts(fmt).quant_method
    return f"{names[fmt]} (quant_method {method})" if fmt in names else method
