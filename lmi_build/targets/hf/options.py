"""The one mapping between serving.properties and the hf target's typed options, each way: ``HfOptions``,
each field named as its key (``option.<field>``), read typed (``planning.context.read_options``), written
(``PlanContext.write_options``) and read as the text a release's start-up reads (``planning.context.read_text``)."""

from lmi_build.planning.context import PlanContext
from lmi_build.planning.options import CommonOptions


class HfOptions(CommonOptions):
    """The options the hf target reads (its planner, its vLLM memory rule as the user set them, its releases'
    start-up as text) and writes, the shared ones inherited; None: unset (or unparsable: resolution made that
    a plan error), or not written. The vLLM spellings are the keys a profile's ``engine_arg_conflicts`` names."""

    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    max_rolling_batch_prefill_tokens: int | None = None
    enforce_eager: bool | None = None
    max_num_seqs: str | None = None  # not in the option table: read as text
    tensor_parallel_size: str | None = None  # not in the option table: read as text


def withhold_quantize(ctx: PlanContext) -> None:
    """Keep option.quantize out of serving.properties: the checkpoint's config.json declares its quantization."""
    ctx.withhold("quantize")
