"""The hf profiles of LMI's LMI-Dist releases against what tests/vendor/djl/extract_lmi_dist_releases.py read
from each DJL branch and the published image lists (lmi_dist_releases.json): the LMI-Dist wheel, the vLLM
it is installed with, the transformers pin, the option.quantize choices, pipeline parallelism, the
warmup prefill the handler passes and the image, each at the line the profile cites."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lmi_build.targets.hf.profiles import HfProfile, load_profiles

RELEASES = json.loads((Path(__file__).resolve().parents[2] / "vendor" / "djl" / "lmi_dist_releases.json").read_text())
PROFILES = {p.name: p for p in load_profiles() if p.engine == "lmi-dist"}
# 0.29 cites the v0.29.0 tag for its pins and 0.29.0-dlc for its start-up: the same release
TAGS = {"v0.29.0": "0.29.0-dlc"}


def _branch_of(profile: HfProfile) -> str:
    match = re.match(r"djl-serving (\S+) ", profile.sources[0])
    assert match, profile.sources[0]
    return TAGS.get(match.group(1), match.group(1))


def _at(found: dict[str, object]) -> str:
    return f"{found['path']}:{found['line']}"


def _cites(text: str, found: dict[str, object]) -> bool:
    """``text`` names ``found``'s line after its file's name: as ``:line`` or in a ``:first-last`` range."""
    name, line = Path(str(found["path"])).name, int(str(found["line"]))
    for part in text.split(name)[1:]:
        # up to the next file named: its lines are not this file's
        lines = re.split(r"[\w/.-]+\.(?:py|txt|md|Dockerfile|json|yml)\b", part)[0]
        if any(int(first) <= line <= int(last or first) for first, last in re.findall(r":(\d+)(?:-(\d+))?", lines)):
            return True
    return False


def test_every_extracted_release_has_a_profile() -> None:
    assert set(RELEASES["branches"]) == {_branch_of(p) for p in PROFILES.values()}
    # 0.26's LMI-Dist 8 is not built on vLLM (lmi_dist.models.get_model): its profile's memory check is its warmup
    own = {b for b, found in RELEASES["branches"].items() if found["handler"]["get_model"]}
    assert own == {"0.26.0-dlc"} and not RELEASES["branches"]["0.26.0-dlc"]["handler"]["engine_args"]
    assert {_branch_of(p) for p in PROFILES.values() if p.vllm_memory.check == "warmup"} == own


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_is_the_branch_it_cites(name: str) -> None:
    profile, found = PROFILES[name], RELEASES["branches"][_branch_of(PROFILES[name])]
    cited = " ".join(profile.sources)
    assert found["vllm"]["value"] == profile.vllm and _cites(cited, found["vllm"])
    assert found["transformers"]["value"] == profile.transformers and _cites(cited, found["transformers"])
    assert profile.name.endswith(f"-lmi-dist-{str(found['lmi_dist']['value']).split('+')[0]}")
    assert _cites(cited, found["lmi_dist"])
    if "+" in str(found["lmi_dist"]["value"]):  # a development wheel: said so
        assert any(str(found["lmi_dist"]["value"]) in i for i in profile.inferred)
    handler = found["handler"]
    if handler["quantize_methods"] is not None:
        assert list(profile.quantize_values) == handler["quantize_methods"]["value"]
        assert f"{Path(str(handler['quantize_methods']['path'])).name}:{handler['quantize_methods']['line']}" in cited
    else:  # a free string: any value
        assert handler["quantize_free"] is not None and profile.quantize_values == ()
    startup = " ".join(profile.startup_sources)
    if handler["pipeline_parallel_degree"] is not None:
        assert profile.pipeline_parallel and _cites(startup, handler["pipeline_parallel_degree"])
        assert _cites(startup, handler["pipeline_parallel_size"])
    else:  # the key is not a field there: not read, the engine is built without pipeline parallelism
        assert not profile.pipeline_parallel and handler["pipeline_parallel_size"] is None
    assert profile.engine_arg_conflicts == {}


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_memory_facts_are_the_handlers(name: str) -> None:
    """The prefill LMI-Dist profiles at start-up: DJL's 4,096-token warmup (0.27-0.29), or vLLM's own
    default (0.30 on: no warmup_prefill_tokens); DJL's gpu_memory_utilization default."""
    profile, handler = PROFILES[name], RELEASES["branches"][_branch_of(PROFILES[name])]["handler"]
    memory = profile.vllm_memory
    sources = " ".join(memory.sources)
    if handler["get_model"] is not None:  # LMI-Dist 8's own warmup
        _assert_warmup_facts(profile, handler)
        return
    assert memory.gpu_memory_utilization == float(str(handler["gpu_memory_utilization"]["value"]))
    assert _cites(sources, handler["gpu_memory_utilization"])
    assert handler["prefill_tokens_default"]["value"] == "None"
    if handler["warmup_tokens"] is not None:
        assert memory.max_num_batched_tokens == int(str(handler["warmup_tokens"]["value"]))
        assert memory.unchunked_batched_tokens is None and memory.chunked_above is None
        assert _cites(sources, handler["warmup_tokens"]) and _cites(sources, handler["warmup_passed"])
    else:
        assert handler["warmup_passed"] is None and memory.unchunked_batched_tokens is not None
        chunked = handler["enable_chunked_prefill"]
        assert chunked is not None and chunked["value"] == "None" and _cites(sources, chunked)


def _assert_warmup_facts(profile: HfProfile, handler: dict[str, dict[str, object]]) -> None:
    """0.26: the handler warms LMI-Dist 8 up on a prefill of max_rolling_batch_prefill_tokens (its default read
    from the properties manager) and reads no gpu_memory_utilization; what the wheel does then is inferred."""
    memory, cited = profile.vllm_memory, " ".join(profile.vllm_memory.sources)
    assert memory.check == "warmup" and _cites(memory.check_source, handler["warmup_call"])
    assert memory.max_num_batched_tokens == int(str(handler["prefill_tokens_default"]["value"]))
    assert _cites(cited, handler["prefill_tokens_default"]) and _cites(cited, handler["warmup_prefill_read"])
    assert _cites(cited, handler["warmup_call"])
    assert handler["gpu_memory_utilization"] is None and memory.gpu_memory_utilization == 1.0
    assert any("gpu_memory_utilization 1.0" in i for i in memory.inferred)
    assert any("block" in i for i in memory.inferred) and not memory.cudagraph_in_budget
    assert memory.unchunked_batched_tokens is None and memory.chunked_above is None


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_published_image(name: str) -> None:
    profile, found = PROFILES[name], RELEASES["branches"][_branch_of(PROFILES[name])]
    sdk = found["sdk_image"]
    assert profile.dlc == (f"{sdk['us_west_2']['value']}.dkr.ecr.us-west-2.amazonaws.com/"
                           f"djl-inference:{sdk['tag_prefix']['value']}")
    assert profile.dlc_source is not None and _at(sdk["tag_prefix"]) in profile.dlc_source
    listed = found["available_images"]
    if listed is None:  # 0.26-0.27: the DeepSpeed image, in the SDK's list only
        assert "not in aws/deep-learning-containers available_images.md" in profile.dlc_source
    else:
        assert f"available_images.md:{listed['line']} @ {RELEASES['dlc']['ref']}" in profile.dlc_source
