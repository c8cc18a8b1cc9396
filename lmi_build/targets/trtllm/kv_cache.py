"""How the profile's runtime sizes the paged KV cache of a planned engine (``memory.PagedKvCache``): the
release's share of the GPU memory free after loading (``profiles/*.toml`` ``[kv_cache]``, cited), or the
value serving.properties sets under the key that release reads."""

from __future__ import annotations

from lmi_build.options.resolved import Source
from lmi_build.options.spec import full_key
from lmi_build.planning.context import PlanContext
from lmi_build.planning.memory import PagedKvCache
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.options import TrtllmOptions
from lmi_build.targets.trtllm.profiles import ContainerProfile, load_profiles

# The option table's tokens_per_block default (data/options.toml), for a plan whose knob is left to the toolchain.
_DEFAULT_TOKENS_PER_BLOCK = 64


def paged_kv_cache(ctx: PlanContext, profile: ContainerProfile, build: TrtllmBuild) -> PagedKvCache:
    release = profile.kv_cache
    fraction, source = release.free_fraction, f"the {profile.name} default, cited in its profile's kv_cache table"
    key = full_key(release.option)
    # Each field of the typed options is its key: the profile's [kv_cache] option names one of them. A value
    # outside (0, 1] is already refused by the option table (data/options.toml), so only a valid one reads here.
    given = ctx.user_options(TrtllmOptions).model_dump()
    if given[release.option] is not None:
        fraction, source = given[release.option], f"{key} as set"
    # the key of the other releases (0.26-0.30 read one, the 0.33+ LLM API service the other)
    for other in sorted({each.kv_cache.option for each in load_profiles()} - {release.option}):
        if given[other] is None and ctx.options.source_of(other) is Source.DEFAULT:
            # The option table's default of a key this release does not read (0.33+: kv_cache_free_gpu_mem_fraction
            # 0.95) is not shown beside the fraction the estimate uses: one number per quantity.
            ctx.withhold(other)
        if given[other] is not None:
            ctx.findings.warn("kv_cache_fraction_unread",
                              f"{full_key(other)} is not read by {profile.name}: its runtime takes the KV cache's share "
                              f"of the free GPU memory from {key} ({release.source.split(':')[0]})",
                              hint=f"set {key} instead")
    # Unset, one forward pass's tokens are bounded by the packed input of max_batch_size sequences of
    # max_input_len (TensorRT-LLM docs/source/reference/memory.md "Activation size").
    max_num_tokens = build.max_num_tokens or build.max_batch_size * build.max_input_len
    return PagedKvCache(free_fraction=fraction, fraction_source=source,
                        tokens_per_block=build.tokens_per_block or _DEFAULT_TOKENS_PER_BLOCK,
                        max_num_tokens=max_num_tokens)

