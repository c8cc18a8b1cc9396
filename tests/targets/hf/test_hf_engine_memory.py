"""The hf target's vLLM / LMI-Dist memory rule (planning/memory.py, targets/hf/engine_memory.py): a plan the
profile's engine would refuse at start-up (one max_model_len sequence's KV cache over what its
gpu_memory_utilization leaves) is invalid and names the max_model_len that fits; one that starts says how
many sequences of max_model_len fit at once. Each profile's facts are compared with those extracted from
its vLLM's own source (tests/vendor/vllm/memory.json). LMI-Dist 8 (LMI 0.26, check "warmup", not built on vLLM:
its facts are DJL's, tests/targets/hf/test_hf_lmi_dist_releases.py) fails to start only when its warmup prefill
and that batch's own KV cache do not fit, and warns when one sequence of the model's positions does not."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from lmi_build.planning.instances import GIB, get_instance
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets.hf.profiles import HfProfile, load_profiles
from tests.fixtures_planning import Planner, codes

MEMORY_JSON = Path(__file__).resolve().parents[2] / "vendor" / "vllm" / "memory.json"
EXTRACTED = json.loads(MEMORY_JSON.read_text())["versions"]
PROFILES = {p.name: p for p in load_profiles()}
# the hf profiles whose engine sizes its KV cache as vLLM does: vLLM's, and LMI-Dist 9-13's on the vLLM it is built on
ENGINE_PROFILES = sorted(n for n, p in PROFILES.items() if p.vllm_memory.check != "warmup")
LMI_DIST_8 = "lmi-0.26.0-lmi-dist-8.0.0"  # check "warmup": LMI-Dist 8's own warmup, no sequence length checked
LLAMA2_7B = "meta-llama--Llama-2-7b-hf"
# Llama-3.2's llama3 RoPE does not start on vLLM 0.3.3 / 0.4.2 (LMI 0.27-0.28: no such rotary embedding in
# get_rope, tests/vendor/vllm/architectures.json "rope"): there the plan says that as well
NO_LLAMA3_ROPE = {"lmi-0.27.0-lmi-dist-9.0.0", "lmi-0.28.0-lmi-dist-10.0.0"}
LLAMA32_3B = "meta-llama--Llama-3.2-3B-Instruct"  # the base model has the same config


def _facts_version(profile: HfProfile) -> str:
    """The vLLM version whose source the profile's [vllm_memory] was read from (its table's comment names it)."""
    match = re.search(r"vLLM v(\S+) ", profile.vllm_memory.check_source)
    assert match, profile.vllm_memory.check_source
    return match.group(1)


def _largest_fitting_len(available: int, block_bytes: int, block_size: int, max_model_len: int) -> int:
    """vLLM V1's estimate_max_model_len: binary search over 1..max_model_len of cdiv(len, block) x block bytes."""
    def fits(length: int) -> bool:
        return -(-length // block_size) * block_bytes <= available

    if not fits(1):
        return 0
    left, right, result = 1, max_model_len, 1
    while left <= right:
        mid = (left + right) // 2
        if fits(mid):
            result, left = mid, mid + 1
        else:
            right = mid - 1
    return result


@pytest.mark.parametrize("name", ENGINE_PROFILES)
def test_profile_memory_facts_are_the_extracted_ones(name: str) -> None:
    profile = PROFILES[name]
    facts = profile.vllm_memory
    found = EXTRACTED[_facts_version(profile)]
    assert facts.gpu_memory_utilization == found["gpu_memory_utilization"]["value"]
    assert found["block_size"] is None or facts.block_size == found["block_size"]["value"]
    check = found["check"][facts.check]
    assert check is not None, f"{name}: vLLM {_facts_version(profile)} has no {facts.check} check"
    assert f"{check['path']}:{check['line']} {check['function']}" in facts.check_source
    if facts.check == "v1":
        assert check["binary_search"] and check["per_layer_bytes"] is not None
        assert facts.max_num_batched_tokens == found["max_num_batched_tokens"]["value"]
        assert found["usage_context"]["value"] == "ENGINE_CONTEXT"
        assert facts.cudagraph_in_budget is found["cudagraph_in_budget"]["value"]
        assert facts.unchunked_batched_tokens is None
    elif facts.unchunked_batched_tokens is None:
        # the engine's own profiling pass (LMI-Dist's warmup_prefill_tokens), read in the DJL branch
        assert any(s.startswith("djl-serving") and f"= {facts.max_num_batched_tokens}" in s for s in facts.sources)
    else:
        prefill = found["v0_prefill"]
        assert facts.chunked_above == prefill["chunked_above"]["value"]
        assert facts.max_num_batched_tokens == prefill["chunked_tokens"]["value"]
        assert facts.unchunked_batched_tokens == prefill["unchunked_floor"]["value"]
    # every path:line the sources cite for this vLLM is one the extraction found
    cited = {f"{entry['path']}:{entry['line']}" for entry in _located(found)}
    for source in facts.sources:
        if source.startswith(f"vLLM v{_facts_version(profile)} "):
            first = re.search(r"(vllm/\S+\.py):(\d+)", source)
            assert first and f"{first.group(1)}:{first.group(2)}" in cited, source


def _located(found: dict[str, object]) -> list[dict[str, object]]:
    """Every extracted entry that has a path and a line (nested ones too)."""
    out: list[dict[str, object]] = []
    for value in found.values():
        if isinstance(value, dict):
            if "path" in value and "line" in value:
                out.append(value)
            out += _located(value)
    return out


def _plan(plan_model: Planner, model: str | Path, instance: str, profile: str, **options: object) -> BuildPlan:
    pairs = [f"{key}={value}" for key, value in options.items()]
    return plan_model("hf", model, instance_type=instance, profile=profile, option=pairs)


@pytest.mark.parametrize("profile", ENGINE_PROFILES)
def test_llama32_3b_full_length_on_g5_xlarge_is_refused_with_the_length_that_fits(plan_model: Planner,
                                                                                 profile: str) -> None:
    plan = _plan(plan_model, LLAMA32_3B, "g5.xlarge", profile)
    memory = plan.memory
    rope = {"hf_rope_scaling"} if profile in NO_LLAMA3_ROPE else set()
    assert memory is not None and codes(plan) == {"engine_kv_cache", *rope}
    assert memory.max_seq_len == 131072 and memory.fits is False
    # 28 layers x 2 x 8 KV heads x 128 x 2 B = 114,688 B a token: 14 GiB for 131,072 tokens
    assert memory.kv_cache_needed_bytes == 131072 * 114688
    fits = memory.max_model_len_fits
    block = PROFILES[profile].vllm_memory.block_size
    assert fits == _largest_fitting_len(memory.kv_cache_device_bytes or 0, 114688 * block, block, 131072)
    assert 0 < fits < 131072
    message = next(m for m in plan.errors if m.code == "engine_kv_cache")
    assert f"{fits:,}" in message.message and f"option.max_model_len={fits}" in (message.hint or "")


@pytest.mark.parametrize("profile", ENGINE_PROFILES)
def test_llama32_3b_at_8192_on_g5_xlarge_starts_and_says_how_many_fit(plan_model: Planner, profile: str) -> None:
    plan = _plan(plan_model, LLAMA32_3B, "g5.xlarge", profile, max_model_len=8192)
    memory = plan.memory
    assert memory is not None and memory.fits is True
    assert codes(plan) == ({"hf_rope_scaling"} if profile in NO_LLAMA3_ROPE else set())
    assert memory.max_seq_len == 8192
    assert memory.full_length_sequences == (memory.kv_cache_tokens or 0) // 8192 > 1


def test_the_budget_is_the_utilization_share_less_what_loading_takes(plan_model: Planner) -> None:
    plan = _plan(plan_model, LLAMA32_3B, "g5.xlarge", "lmi-0.35.0-vllm-0.11.1", max_model_len=8192)
    memory = plan.memory
    assert memory is not None
    instance = get_instance("g5.xlarge")
    requested = math.ceil(instance.usable_bytes_per_device * 0.9)
    assert memory.kv_cache_device_bytes == requested - memory.per_device_bytes
    # the blocks are whole: 16 tokens of 114,688 B
    assert memory.kv_cache_tokens == memory.kv_cache_device_bytes // (16 * 114688) * 16


def test_a_lower_utilization_set_by_the_user_is_read(plan_model: Planner) -> None:
    default = _plan(plan_model, LLAMA32_3B, "g5.xlarge", "lmi-0.35.0-vllm-0.11.1", max_model_len=8192).memory
    lower = _plan(plan_model, LLAMA32_3B, "g5.xlarge", "lmi-0.35.0-vllm-0.11.1", max_model_len=8192,
                  gpu_memory_utilization=0.5).memory
    assert default is not None and lower is not None
    assert lower.gpu_memory_utilization == 0.5
    assert (lower.kv_cache_tokens or 0) < (default.kv_cache_tokens or 0)
    assert lower.kv_fraction_source == "option.gpu_memory_utilization as set"


def test_no_room_at_all_names_gpu_memory_utilization(plan_model: Planner) -> None:
    # 0.3 of a g5.xlarge's 22 GiB is 6.6 GiB: Llama-3.2-3B's 6 GiB of weights and the runtime leave nothing
    plan = _plan(plan_model, LLAMA32_3B, "g5.xlarge", "lmi-0.35.0-vllm-0.11.1", gpu_memory_utilization=0.3)
    message = next(m for m in plan.errors if m.code == "engine_kv_cache")
    assert "No available memory for the cache blocks" in message.message


# (model, instance, tp, valid at the model's own max_model_len with the default utilization)
FIXTURE_CASES = [
    ("meta-llama--Llama-2-7b-hf", "g5.xlarge", 1, True),  # 4,096 positions: 2 GiB of KV cache
    ("meta-llama--Llama-3.1-8B-Instruct", "g5.xlarge", 1, False),  # 16 GiB for 131,072 tokens
    ("meta-llama--Llama-3.1-8B-Instruct", "g5.12xlarge", 4, True),  # 4 GiB a GPU at tp 4
    (LLAMA32_3B, "p4d.24xlarge", 1, True),  # A100 40 GB
    ("meta-llama--Llama-3.1-8B-Instruct", "p5.48xlarge", 1, True),  # H100 80 GB
]


@pytest.mark.parametrize(("model", "instance", "tp", "valid"), FIXTURE_CASES)
def test_fixture_configs_on_gpu_instances(plan_model: Planner, model: str, instance: str, tp: int,
                                          valid: bool) -> None:
    plan = plan_model("hf", model, instance_type=instance, profile="lmi-0.36.0-vllm-0.17.0", tp=tp)
    memory = plan.memory
    assert memory is not None and memory.devices == tp
    assert ("engine_kv_cache" not in codes(plan)) is valid
    assert memory.fits is valid
    if valid:
        assert (memory.full_length_sequences or 0) >= 1


def test_without_a_profile_the_whole_batch_estimate_stays(plan_model: Planner) -> None:
    plan = plan_model("hf", LLAMA32_3B, instance_type="g5.xlarge")
    assert plan.memory is not None and plan.memory.gpu_memory_utilization is None


def test_every_profile_is_sized_by_vllm_or_by_lmi_dist_8s_warmup() -> None:
    assert {n for n, p in PROFILES.items() if p.vllm_memory.check == "warmup"} == {LMI_DIST_8}


def test_lmi_dist_8_takes_what_loading_leaves_and_checks_no_length(plan_model: Planner) -> None:
    plan = _plan(plan_model, LLAMA2_7B, "g5.xlarge", LMI_DIST_8)
    memory = plan.memory
    assert memory is not None and plan.valid and codes(plan) == set()
    instance = get_instance("g5.xlarge")
    # no gpu_memory_utilization is read: the KV cache is all that the weights, the warmup prefill and the runtime leave
    assert memory.gpu_memory_utilization == 1.0 and memory.sequence_checked is False
    assert memory.kv_cache_device_bytes == instance.usable_bytes_per_device - memory.per_device_bytes
    # 32 layers x 2 x 32 KV heads x 128 x 2 B = 524,288 B a token, in blocks of 16
    assert memory.kv_cache_tokens == memory.kv_cache_device_bytes // (16 * 524288) * 16
    assert memory.max_seq_len == 4096 and (memory.full_length_sequences or 0) >= 1


def test_lmi_dist_8_ignores_the_vllm_options_it_has_no_field_for(plan_model: Planner) -> None:
    default = _plan(plan_model, LLAMA2_7B, "g5.xlarge", LMI_DIST_8).memory
    given = _plan(plan_model, LLAMA2_7B, "g5.xlarge", LMI_DIST_8, gpu_memory_utilization=0.5, max_model_len=1024).memory
    assert default is not None and given is not None
    assert (given.kv_cache_tokens, given.max_seq_len) == (default.kv_cache_tokens, default.max_seq_len)


def test_lmi_dist_8_refuses_a_warmup_that_leaves_too_little_cache(plan_model: Planner) -> None:
    # a T4's 14.5 GiB: 12.6 GiB of Llama-2-7B weights, the 4,096-token warmup and the runtime leave 0.7 GiB,
    # less than the warmup batch's 2 GiB of KV cache
    plan = _plan(plan_model, LLAMA2_7B, "g4dn.xlarge", LMI_DIST_8)
    memory = plan.memory
    assert memory is not None and memory.fits is False and codes(plan) == {"engine_kv_cache"}
    assert (memory.kv_cache_device_bytes or 0) < 4096 * 524288
    message = next(m for m in plan.errors if m.code == "engine_kv_cache")
    assert "warmup" in message.message and "4,096" in message.message and "lmi_dist_rolling_batch.py:106" in message.message
    assert "option.max_rolling_batch_prefill_tokens" in (message.hint or "")
    # a shorter warmup (the option LMI-Dist 8 reads) starts
    shorter = _plan(plan_model, LLAMA2_7B, "g4dn.xlarge", LMI_DIST_8, max_rolling_batch_prefill_tokens=512)
    assert shorter.memory is not None and shorter.memory.fits is True and "engine_kv_cache" not in codes(shorter)


def test_lmi_dist_8_warns_when_one_sequence_of_the_positions_does_not_fit(plan_model: Planner, tmp_path: Path) -> None:
    config = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "hf-configs" / LLAMA2_7B / "config.json").read_text())
    folder = tmp_path / "llama-2-7b-32k"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 32768}))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_text("{}")
    plan = _plan(plan_model, folder, "g5.xlarge", LMI_DIST_8)
    memory = plan.memory
    assert memory is not None and memory.fits is True and plan.valid
    # 32,768 tokens x 524,288 B = 16 GiB, more than the 8 GiB left: a warning, not a refusal
    assert memory.kv_cache_needed_bytes == 32768 * 524288 > (memory.kv_cache_device_bytes or 0) > 4 * GIB
    warning = next(m for m in plan.warnings if m.code == "engine_kv_cache_short")
    assert f"{memory.kv_cache_tokens:,} tokens" in warning.message and "32,768" in warning.message
