"""transformers-neuronx / DJL rules the neuronx target reproduces (pure functions)."""

from __future__ import annotations

import hashlib

import pytest

from lmi_build.targets.neuronx.knobs import NeuronxBuild
from lmi_build.targets.neuronx.plan import (
    continuous_batching_contexts,
    effective_gqa,
    half_buckets,
    sdk,
    token_buckets,
)
from lmi_build.targets.neuronx.serving import compiler_flags
from tests.fixtures_planning import Planner

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
    ("requested", "batch", "tp", "heads", "kv", "head_dim", "expected"),
    [
        ("shard-over-heads", 1, 8, 32, 8, 128, "shard-over-heads"),
        ("shard-over-batch", 4, 8, 32, 8, 128, "shard-over-heads"),  # batch % tp != 0
        ("shard-over-batch", 8, 8, 32, 8, 128, "shard-over-batch"),
        ("all-gather-heads", 1, 8, 32, 8, 128, "all-gather-heads"),
        ("all-gather-heads", 1, 3, 3, 3, 5, "all-gather-heads"),
        ("shard-over-heads", 1, 2, 8, 1, 256, "replicated-heads"),  # MQA (gemma)
        ("replicated-heads", 1, 8, 32, 8, 128, "replicated-heads"),
        # issue 21 finding 13: TNX's early returns keep a strategy whatever the KV heads
        ("shard-over-batch", 8, 8, 32, 4, 128, "shard-over-batch"),  # kv 4 % tp 8, yet kept
        ("all-gather-heads", 1, 8, 32, 4, 128, "all-gather-heads"),  # tp divides the heads: kept
        ("all-gather-heads", 1, 24, 32, 8, 128, "shard-over-heads"),  # (8 x 128) % 24, padding 16 % 8 == 0
        ("all-gather-heads", 1, 12, 32, 8, 128, "replicated-heads"),  # padding 4 % 8 != 0, then kv % tp
        (None, 1, 8, 12, 12, 64, "shard-over-heads"),  # MHA (GPT-2 at tp 8): no GQA, nothing replicated
        (None, 1, 24, 32, 8, 128, "replicated-heads"),  # GQA unset: shard-over-heads, then kv % tp
    ],
)
def test_gqa_fallbacks(requested: str | None, batch: int, tp: int, heads: int, kv: int, head_dim: int,
                       expected: str) -> None:
    """aws-neuron/transformers-neuronx 1ade6d7 decoder.py:112-176 (neuron_sdk.toml [gqa])."""
    assert effective_gqa(requested, batch_size=batch, tp=tp, heads=heads, kv_heads=kv, head_dim=head_dim) == expected


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


def test_required_flags_are_matched_as_substrings_of_the_stripped_flags() -> None:
    """transformers-neuronx get_compiler_flags (1ade6d7 compiler.py:89-105): a key already in the flags
    keeps its own value; the flags are stripped and joined by one space (issue 21 finding 13)."""
    assert compiler_flags("--auto-cast=all", None, False, False) == "--auto-cast=all --model-type=transformer"
    assert compiler_flags("--model-type=unet-inference", 1, False, False) == "--model-type=unet-inference -O1 --auto-cast=none"
    assert compiler_flags("--auto-cast all --model-type transformer", None, False, False) == (
        "--auto-cast all --model-type transformer")
    assert compiler_flags(" --logfile x ", None, False, False) == "--logfile x --model-type=transformer --auto-cast=none"


def test_plan_reports_the_strategy_tnx_settles_on(plan_model: Planner) -> None:
    """GPT-2 (12 heads, MHA) at tp 8: TNX configures no GQA (its heads are padded), so nothing is
    replicated and there is no fallback to warn about."""
    plan = plan_model("neuronx", "openai-community--gpt2", tp="8", n_positions="1024", instance_type="inf2.24xlarge")
    assert plan.knobs(NeuronxBuild).gqa_effective == "shard-over-heads"
    assert "gqa_fallback" not in {w.code for w in plan.warnings}
