"""The one mapping between serving.properties and the trtllm target's typed options, each way.

A field of ``TrtllmOptions`` is an option the target reads or writes, named as its key (``option.<field>``)
and typed as the option table parses it: read typed (``planning.context.read_options``,
``PlanContext.user_options``), written (``PlanContext.write_options``), read back from serving.properties text
(an artifact's, a saved plan's: ``planning.context.read_written``), or as text (``read_text``). Nothing else in the target
reads or writes an option by its key (tests/targets/trtllm/test_trtllm_typed_knobs.py), so mypy catches a mistyped one.
"""

from collections.abc import Mapping

from pydantic import Field

from lmi_build.options.resolved import Source
from lmi_build.planning.context import PlanContext, read_written
from lmi_build.planning.options import CommonOptions
from lmi_build.targets.trtllm.profiles import ContainerProfile


class TrtllmOptions(CommonOptions):
    """The options the trtllm target reads (its planner, its engine check, its release's start-up and
    config.pbtxt as text) and writes, the shared ones inherited; None: unset (or unparsable: resolution made
    that a plan error), or not written."""

    entry_point: str | None = Field(None, alias="entryPoint")
    async_mode: bool | None = None
    backend: str | None = None
    max_num_tokens: int | None = None
    max_beam_width: int | None = None
    tokens_per_block: int | None = None
    enable_kv_cache_reuse: bool | None = None
    use_paged_context_fmha: bool | None = None
    use_custom_all_reduce: bool | None = None
    use_fused_mlp: bool | None = None
    multi_block_mode: bool | None = None
    rotary_base: float | None = None
    rotary_dim: int | None = None
    kv_cache_free_gpu_mem_fraction: float | None = None
    free_gpu_memory_fraction: float | None = None
    batch_scheduler_policy: str | None = None
    enable_trt_overlap: bool | None = None
    max_tokens_in_paged_kv_cache: str | None = None  # not in the option table: read as text
    max_num_sequences: int | None = None
    max_attention_window_size: str | None = None  # not in the option table: read as text
    enable_chunked_context: str | None = None  # not in the option table: read as text
    normalize_log_probs: str | None = None  # not in the option table: read as text


def written_or(text: str | None, default: str) -> str:
    """An option's text (``read_text``) as written (an empty one too), else the reader's own default."""
    return default if text is None else text


def apply_release_defaults(ctx: PlanContext, profile: ContainerProfile) -> None:
    """The profile's ``[defaults]`` (cited there) for the options whose default changed between releases,
    where the user set none: a plain build equals the container's own JIT build, and serving.properties
    says what the engine has (max_rolling_batch_size becomes trtllm-build's --max_batch_size)."""
    for key in ("tokens_per_block", "max_num_tokens", "max_rolling_batch_size"):
        release_default = profile.defaults.get(key)
        if ctx.options.source_of(key) in (None, Source.DEFAULT) and release_default:
            ctx.derive(key, release_default, f"profile {profile.name} default")


def given_options(options: Mapping[str, str], sources: Mapping[str, str]) -> TrtllmOptions:
    """A saved plan's options (serving.properties text, key -> ``Source`` value) that neither the option table
    nor the recipe defaulted, typed: only dropping one of those from a vendor argv is news."""
    defaulted = (Source.DEFAULT.value, Source.RECIPE.value)
    return read_written({key: text for key, text in options.items()
                         if sources.get(key, Source.DEFAULT.value) not in defaulted}, TrtllmOptions)

