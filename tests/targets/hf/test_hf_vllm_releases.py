"""The hf profiles of LMI's vLLM releases against what tests/vendor/djl/extract_vllm_releases.py read from
each DJL branch and the DLC image list (vllm_releases.json): the vLLM and transformers pins, the start-up
refusals and the published image, each at the line the profile cites."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lmi_build.targets.hf.profiles import HfProfile, load_profiles

RELEASES = json.loads((Path(__file__).resolve().parents[2] / "vendor" / "djl" / "vllm_releases.json").read_text())
PROFILES = {p.name: p for p in load_profiles()}


def _branch_of(profile: HfProfile) -> str | None:
    """The branch whose pins the profile's first source cites (v0.36.0's profile cites the tag: not one)."""
    match = re.match(r"djl-serving (\S+-dlc) ", profile.sources[0])
    found = match.group(1) if match and match.group(1) in RELEASES["branches"] else None
    return found if profile.engine == "vllm" else None  # 0.32.0-dlc's LMI-Dist: test_hf_lmi_dist_releases.py


EXTRACTED = {name: branch for name, p in PROFILES.items() if (branch := _branch_of(p))}


def test_every_extracted_release_but_the_shared_one_has_a_profile() -> None:
    # 0.36.0-lmi22-dlc pins v0.36.0's vLLM wheel: lmi-0.36.0-vllm-0.17.0, which cites the v0.36.0 tag
    assert set(RELEASES["branches"]) - set(EXTRACTED.values()) == {"0.36.0-lmi22-dlc"}


@pytest.mark.parametrize("name", sorted(EXTRACTED))
def test_profile_is_the_branch_it_cites(name: str) -> None:
    profile, found = PROFILES[name], RELEASES["branches"][EXTRACTED[name]]
    cited = " ".join(profile.sources)
    pin, transformers = found["vllm"], found["transformers"]
    assert f"{pin['path']}:{pin['line']}" in cited and f"{transformers['path']}:{transformers['line']}" in cited
    version = pin["version"]
    if pin["wheel"] is None:
        assert profile.vllm == version
    else:  # a development build: the facts are the release it follows, said so
        assert version.startswith(profile.vllm.rsplit(".", 1)[0]) and any(version in i for i in profile.inferred)
    pinned = transformers["value"].replace(" ", "")
    # where the vLLM requires a newer transformers than the image's pin (0.32's virtualenv), the profile
    # says what vLLM requires and why, naming the pin
    assert pinned.endswith(profile.transformers.replace(" ", "")) or any(
        pinned.split("==")[-1] in i and "transformers" in i for i in profile.inferred), (pinned, profile.inferred)
    startup = " ".join(profile.startup_sources)
    assert not profile.pipeline_parallel and f":{found['pipeline_parallel_refused']['line']} " in startup
    assert [c["value"] for c in found["conflicts"]] == ["tensor_parallel_size", "pipeline_parallel_size", "max_num_seqs"]
    assert set(profile.engine_arg_conflicts) == {c["value"] for c in found["conflicts"]}
    for conflict in found["conflicts"]:
        assert f"{conflict['path']}:{conflict['line']}" in startup
    image = found["image"]
    dlc = RELEASES["dlc"]
    assert profile.dlc == (f"{dlc['account']['value']}.dkr.ecr.{dlc['region']['value']}.amazonaws.com/"
                           f"djl-inference:{image['tag']['value']}")
    assert profile.dlc_source is not None and f"{image['tag']['path']}:{image['tag']['line']}" in profile.dlc_source


def test_the_shared_releases_start_up_is_cited_at_its_own_branch() -> None:
    """lmi-0.36.0-vllm-0.17.0 cites the v0.36.0 tag for its pins, and its image's branch, 0.36.0-lmi22-dlc, for
    its start-up refusals, at the lines extracted from that branch (it cited lmi27's before)."""
    profile, found = PROFILES["lmi-0.36.0-vllm-0.17.0"], RELEASES["branches"]["0.36.0-lmi22-dlc"]
    startup = " ".join(profile.startup_sources)
    assert startup.startswith(f"djl-serving 0.36.0-lmi22-dlc ({found['commit'][:8]})")
    refused = found["pipeline_parallel_refused"]
    assert f"{refused['path']}:{refused['line']} " in startup
    for conflict in found["conflicts"]:
        assert f"{conflict['path']}:{conflict['line']}" in startup
    assert profile.dlc is not None and "lmi22" in profile.dlc


def test_lmi28_is_in_the_dlc_list_only() -> None:
    only = RELEASES["dlc"]["unbranched"]["0.36-lmi28.0.0-gpu.yml"]
    assert only["engine"]["value"] == "LMI 28.0.0, vLLM 0.26.0"
    assert not any(p.vllm.startswith("0.26") for p in PROFILES.values())
