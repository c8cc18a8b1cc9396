"""transformers-neuronx / DJL rules the neuronx target reproduces (pure functions)."""

from __future__ import annotations

import hashlib

import pytest

from lmi_build.targets.neuronx.plan import (
    compiler_flags,
    continuous_batching_contexts,
    effective_gqa,
    half_buckets,
    sdk,
    token_buckets,
)

CONTAINER = "--logfile /tmp/compile.log --temp-dir=/tmp"


def test_token_buckets_double_from_128() -> None:
    assert token_buckets(4096, 128) == (128, 256, 512, 1024, 2048, 4096)
    assert token_buckets(3000, 128) == (128, 256, 512, 1024, 2048, 3000)
    assert token_buckets(128, 128) == (128,)
    assert token_buckets(64, 128) == (64,)


def test_context_estimates_default_to_half_buckets() -> None:
    assert half_buckets((128, 256, 512, 1024, 2048, 4096)) == (64, 128, 256, 512, 1024, 2048)


def test_continuous_batching_contexts() -> None:
    assert continuous_batching_contexts(4096, 128, 1024) == (128, 1024, 2048, 4096)
    assert continuous_batching_contexts(8192, 128, 1024) == (128, 1024, 2048, 4096, 8192)
    assert continuous_batching_contexts(512, 128, 1024) == (128, 512)


@pytest.mark.parametrize(
    ("requested", "batch", "tp", "kv", "head_dim", "expected"),
    [
        ("shard-over-heads", 1, 8, 8, 128, "shard-over-heads"),
        ("shard-over-batch", 4, 8, 8, 128, "shard-over-heads"),  # batch % tp != 0
        ("shard-over-batch", 8, 8, 8, 128, "shard-over-batch"),
        ("all-gather-heads", 1, 24, 8, 128, "replicated-heads"),  # kv % tp != 0 wins last
        ("all-gather-heads", 1, 8, 8, 128, "all-gather-heads"),
        ("all-gather-heads", 1, 3, 3, 5, "all-gather-heads"),
        ("shard-over-heads", 1, 2, 1, 256, "replicated-heads"),  # MQA (gemma)
    ],
)
def test_gqa_fallbacks(requested: str, batch: int, tp: int, kv: int, head_dim: int, expected: str) -> None:
    assert effective_gqa(requested, batch_size=batch, tp=tp, kv_heads=kv, head_dim=head_dim) == expected


def test_compiler_flags_match_the_neff_cache_hashes() -> None:
    # md5(flags)[:8] is the second half of the NEFF cache's MODULE_ directory names (facts §5).
    default = compiler_flags(CONTAINER, None, False, False)
    assert default == f"{CONTAINER} --model-type=transformer --auto-cast=none"
    assert hashlib.md5(default.encode()).hexdigest()[:8] == "ede6753c"
    bare = compiler_flags("", None, False, False)
    assert hashlib.md5(bare.encode()).hexdigest()[:8] == "2c2d707e"
    assert sdk().compiler.container_flags == CONTAINER


def test_compiler_flags_djl_order() -> None:
    flags = compiler_flags(CONTAINER, 3, True, True)
    assert flags == (f"{CONTAINER} -O3 --enable-mixed-precision-accumulation --enable-saturate-infinity "
                     "--model-type=transformer --auto-cast=none")
    # A flag already present is not added twice.
    assert compiler_flags("--model-type=transformer", None, False, False) == "--model-type=transformer --auto-cast=none"
