"""How the profile's runtime sizes the paged KV cache of a planned engine (``memory.PagedKvCache``): the
release's share of the GPU memory free after loading (``profiles/*.toml`` ``[kv_cache]``, cited), or the
value serving.properties sets under the key that release reads."""

from __future__ import annotations

import math

from lmi_build.planning.context import PlanContext
from lmi_build.planning.memory import PagedKvCache
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.profiles import ContainerProfile

# The option table's tokens_per_block default (data/options.toml), for a plan whose knob is left to the toolchain.
_DEFAULT_TOKENS_PER_BLOCK = 64


def paged_kv_cache(ctx: PlanContext, profile: ContainerProfile, build: TrtllmBuild) -> PagedKvCache:
    release = profile.kv_cache
    fraction, source = release.free_fraction, f"the {profile.name} default, cited in its profile's kv_cache table"
    key = f"option.{release.option}"
    item = ctx.options.values.get(key)
    if item is not None and item.value != "" and ctx.user_set(key):
        parsed = _fraction(item.value)
        if parsed is None:
            ctx.findings.error("kv_cache_fraction", f"{key}={item.value} is not a fraction in (0, 1]",
                               hint=f"set {key} to a number above 0 and at most 1")
        else:
            fraction, source = parsed, f"{key} as set"
    # the key of the other releases (0.26-0.30 read one, the 0.33+ LLM API service the other)
    for other in ("option.kv_cache_free_gpu_mem_fraction", "option.free_gpu_memory_fraction"):
        if key != other and ctx.user_set(other):
            ctx.findings.warn("kv_cache_fraction_unread",
                              f"{other} is not read by {profile.name}: its runtime takes the KV cache's share of the "
                              f"free GPU memory from {key} ({release.source.split(':')[0]})",
                              hint=f"set {key} instead")
    # Unset, one forward pass's tokens are bounded by the packed input of max_batch_size sequences of
    # max_input_len (TensorRT-LLM docs/source/reference/memory.md "Activation size").
    max_num_tokens = build.max_num_tokens or build.max_batch_size * build.max_input_len
    return PagedKvCache(free_fraction=fraction, fraction_source=source,
                        tokens_per_block=build.tokens_per_block or _DEFAULT_TOKENS_PER_BLOCK,
                        max_num_tokens=max_num_tokens)


def _fraction(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 < value <= 1.0 else None
