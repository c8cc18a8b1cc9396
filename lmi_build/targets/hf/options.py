"""The one mapping between serving.properties and the hf target's typed options, each way: the options
its planner reads (``HfOptions``, ``planning.context.read_options``) and the values it writes
(``HfServing``, ``PlanContext.write_options``), each field named as its key (``option.<field>``); and the text a
release's start-up reads (``HfText``, ``planning.context.read_text``)."""

from pydantic import BaseModel, ConfigDict

from lmi_build.core.types import Record
from lmi_build.planning.context import PlanContext


class HfOptions(BaseModel):
    """The options the hf planner reads; None: unset (or unparsable: resolution made that a plan error)."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    max_input_len: int | None = None
    max_output_len: int | None = None
    max_model_len: int | None = None
    max_rolling_batch_size: int | None = None


class EngineMemoryOptions(BaseModel):
    """The options the hf plan's vLLM memory rule reads as the user set them (``PlanContext.user_options``);
    None: unset, the profile's release default applies."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    gpu_memory_utilization: float | None = None
    max_rolling_batch_prefill_tokens: int | None = None
    max_model_len: int | None = None
    enforce_eager: bool | None = None


class HfServing(Record):
    """Values the plan writes into serving.properties, in the order written; None: not written here."""

    engine: str | None = None
    tensor_parallel_degree: int | None = None
    dtype: str | None = None
    rolling_batch: str | None = None
    mpi_mode: bool | None = None


class HfText(Record):
    """serving.properties text as a release's DJL handler reads it at start-up (``startup.py``); None: absent.
    The vLLM spellings are the keys a profile's ``engine_arg_conflicts`` names."""

    pipeline_parallel_degree: str | None = None
    rolling_batch: str | None = None
    max_num_seqs: str | None = None
    tensor_parallel_size: str | None = None
    pipeline_parallel_size: str | None = None


def withhold_quantize(ctx: PlanContext) -> None:
    """Keep option.quantize out of serving.properties: the checkpoint's config.json declares its quantization."""
    ctx.withhold("quantize")
