"""Issue 39: the container profiles against the facts extracted from the release branches and the
published image lists (tests/vendor/djl/container_facts.json, written by
tests/vendor/djl/extract_container_facts.py, which says what it read, with branch, commit and line).

- Each profile read from a branch's Dockerfile (``FROM_BRANCH``) has that branch's TensorRT-LLM,
  TensorRT, CUDA and Python.
- A profile's ``dlc`` is a tag the image lists publish, and its ``dlc_source`` cites the list entries
  (file and line) that name it; a profile without ``dlc`` is of a release no list publishes for its
  target.
- Each target's default profile is its newest published one; Neuron ends where the branches say.
"""

import json
import os
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from lmi_build.core.container_profiles import ContainerRelease
from lmi_build.core.errors import UnsupportedTarget
from lmi_build.core.versions import parse_lmi_version
from lmi_build.targets.hf import profiles as hf_profiles
from lmi_build.targets.neuronx import profiles as neuronx_profiles
from lmi_build.targets.trtllm import profiles as trtllm_profiles
from tests.cli_process import run_lmi_build
from tests.paths import REPO_ROOT

FACTS = REPO_ROOT / "tests" / "vendor" / "djl" / "container_facts.json"
# profile -> the branch its versions were read from
FROM_BRANCH = {"lmi-0.30.0-trtllm-0.12.0": "0.30.0-dlc", "lmi-0.31.0-trtllm-0.12.0": "0.31.0-dlc",
               "lmi-0.32.0-trtllm-0.12.0": "0.32.0-dlc", "lmi-0.34.0-trtllm-0.12.0": "0.34.0-dlc",
               "lmi-0.35.0-trtllm-1.0.0": "0.35.0-dlc", "lmi-0.35.1-trtllm-1.0.0": "0.35.1-dlc",
               "lmi-0.36.0-trtllm-1.0.0": "v0.36.0"}
# target -> the image-list engines of its images (the DLC docs' "engine", the SDK file)
ENGINE_WORDS = {"trtllm": ("TensorRT-LLM", "djl-tensorrtllm.json", "tensorrtllm"),
                "neuronx": ("Neuron", "djl-neuronx.json", "neuronx")}
CITE = re.compile(r"(?P<repo>aws/[\w-]+) (?P<path>[\w./-]+):(?P<line>\d+) @ (?P<commit>[0-9a-f]+)")


@cache
def _facts() -> dict[str, Any]:
    facts: dict[str, Any] = json.loads(FACTS.read_text())
    return facts


def _branch(name: str) -> dict[str, Any]:
    return next(b for b in _facts()["djl_serving"]["branches"] if b["branch"] == name)


def _published_entries() -> list[dict[str, Any]]:
    """Every published djl-inference tag with the file, line and commit that list it."""
    dlc, sdk = _facts()["deep_learning_containers"], _facts()["sagemaker_python_sdk"]
    entries = [{"tag": d["tag"], "repo": dlc["repo"], "path": d["path"], "line": d["line"], "commit": dlc["commit"]}
               for d in dlc["docs"]]
    table = dlc["available_images"]
    entries += [{"tag": u["uri"].split(":")[-1], "repo": dlc["repo"], "path": table["path"], "line": u["line"],
                 "commit": table["commit"]} for u in table["uris"]]
    entries += [{"tag": v["tag_prefix"], "repo": sdk["repo"], "path": f["path"], "line": v["line"], "commit": sdk["commit"]}
                for f in sdk["files"] for v in f["versions"].values()]
    return entries


def _all_profiles() -> list[tuple[str, ContainerRelease]]:
    return ([("trtllm", p) for p in trtllm_profiles.load_profiles()]
            + [("neuronx", p) for p in neuronx_profiles.load_profiles()]
            + [("hf", p) for p in hf_profiles.load_profiles()])


@pytest.mark.parametrize("name", sorted(FROM_BRANCH))
def test_versions_are_the_branch_dockerfiles(name: str) -> None:
    profile = trtllm_profiles.get_profile(name)
    branch = _branch(FROM_BRANCH[name])
    args = {key: fact["value"] for key, fact in branch["tensorrt_llm_dockerfile"]["args"].items()}
    assert profile.tensorrt_llm == args["trtllm_version"].lstrip("v")
    assert profile.cuda == f"{args['cuda_version'][2:-1]}.{args['cuda_version'][-1]}"
    assert profile.python == args["python_version"]
    if "tensorrtlibs_version" in args:  # 1.0 installs TensorRT with the tensorrt_llm wheel
        assert profile.tensorrt == args["tensorrtlibs_version"]
    commit = branch["commit"][:8]
    assert any(commit in source for source in profile.sources), f"{name} cites {FROM_BRANCH[name]} ({commit})"


def test_0_32_has_another_tensorrt_than_0_30() -> None:
    """The issue's case: the same TensorRT-LLM 0.12.0, TensorRT 10.3.0 at 0.30 and 10.1.0 at 0.32."""
    p030, p032 = (trtllm_profiles.get_profile(f"lmi-0.3{n}.0-trtllm-0.12.0") for n in (0, 2))
    assert p030.tensorrt_llm == p032.tensorrt_llm and (p030.tensorrt, p032.tensorrt) == ("10.3.0", "10.1.0")


@pytest.mark.parametrize(("kind", "profile"), _all_profiles(), ids=lambda value: getattr(value, "name", value))
def test_dlc_is_a_published_tag_cited_by_its_list_entries(kind: str, profile: ContainerRelease) -> None:
    published = _published_entries()
    if profile.dlc is None:
        if kind in ENGINE_WORDS:  # no list publishes an image of this target for this release
            word = ENGINE_WORDS[kind][2]
            assert not [e for e in published if e["tag"].startswith(f"{profile.lmi_version}-{word}")], profile.name
        return
    tag = profile.dlc.split(":")[-1]
    naming = [e for e in published if e["tag"] == tag]
    assert naming, f"{profile.name}: {tag} is in no image list"
    assert profile.dlc_source is not None
    cited = [m.groupdict() for m in CITE.finditer(profile.dlc_source)]
    assert cited, profile.dlc_source
    for cite in cited:
        assert any(e["repo"] == cite["repo"] and e["path"] == cite["path"] and e["line"] == int(cite["line"])
                   and e["commit"].startswith(cite["commit"]) for e in naming), f"{profile.name}: {cite}"
    if isinstance(profile, (trtllm_profiles.ContainerProfile, neuronx_profiles.NeuronProfile)):
        assert profile.image == profile.dlc  # the image built for is the published one


def test_every_published_image_of_a_profiled_release_is_its_profiles_dlc() -> None:
    for kind, (_, _, word) in ENGINE_WORDS.items():
        profiles = [p for k, p in _all_profiles() if k == kind]
        versions = {p.lmi_version for p in profiles}
        for entry in _published_entries():
            version = entry["tag"].split("-")[0]
            if entry["tag"].startswith(f"{version}-{word}") and version in versions:
                assert any(p.dlc and p.dlc.endswith(":" + entry["tag"]) for p in profiles), entry


def test_the_0_27_neuron_image_is_the_published_sdk2_18_1_tag() -> None:
    profile = neuronx_profiles.get_profile("lmi-0.27.0-neuronx-sdk2.18.0")
    assert profile.image.endswith(":0.27.0-neuronx-sdk2.18.1") and profile.neuron_sdk == "2.18.1"
    assert _branch("0.27.0-dlc")["neuron_dockerfile"]["args"]["neuronsdk_version"]["value"] == "2.18.1"


def test_each_default_is_the_newest_published_profile() -> None:
    newest_trtllm = [p for p in trtllm_profiles.load_profiles() if p.published and p.engine_capable][-1]
    assert trtllm_profiles.get_profile(None) == newest_trtllm
    newest_neuron = max((p for p in neuronx_profiles.load_profiles() if p.published),
                        key=lambda p: parse_lmi_version(p.lmi_version))
    assert neuronx_profiles.get_profile(None) == newest_neuron
    # Newer, unpublished releases exist for both: the default is not simply the newest.
    assert not trtllm_profiles.get_profile("lmi-0.36.0-trtllm-1.0.0").published
    assert not neuronx_profiles.get_profile("lmi-0.34.0-neuronx-sdk2.21.1").published


def test_neuron_ends_at_0_34() -> None:
    removed = _facts()["djl_serving"]["neuron_removed"]
    assert not removed["neuron_dockerfile_left"] and not removed["tnx_properties_left"]
    with_neuron = [b["branch"] for b in _facts()["djl_serving"]["branches"] if b["neuron_dockerfile"]]
    assert with_neuron[-1] == "0.34.0-dlc" and not _branch("0.35.0-dlc")["neuron_dockerfile"]
    end = neuronx_profiles.neuron_end()
    assert end.last_release == "0.34.0" and end.removed_in == "0.35.0" and removed["commit"][:8] in end.removed_by
    for name in ("lmi-0.35.0-neuronx-sdk2.24.0", "lmi-0.36.0-neuronx-anything"):
        with pytest.raises(UnsupportedTarget) as refused:
            neuronx_profiles.get_profile(name)
        assert "removed Neuron in 0.35.0" in refused.value.message and "1132e3ab" in refused.value.message
        assert "transformers-neuronx support ended upstream" in refused.value.message
        assert "LMI 0.34.0 (--profile lmi-0.34.0-neuronx-sdk2.21.1" in refused.value.hint


def test_profiles_list_and_show_say_published_or_djl_only() -> None:
    listed = json.loads(run_lmi_build("profiles", "--json", "list").stdout)
    by_name = {row["name"]: row for row in listed}
    assert by_name["lmi-0.32.0-trtllm-0.12.0"]["published"] and not by_name["lmi-0.34.0-trtllm-0.12.0"]["published"]
    assert by_name["lmi-0.32.0-trtllm-0.12.0"]["dlc"].endswith(":0.32.0-tensorrtllm0.12.0-cu125")
    assert {row["name"] for row in listed if row["newest"] and row["kind"] != "hf"} == {
        "lmi-0.36.0-trtllm-1.0.0", "lmi-0.30.0-neuronx-sdk2.20.1"}
    assert {row["name"] for row in listed if row["default"]} == {"lmi-0.33.0-trtllm-0.21.0", "lmi-0.30.0-neuronx-sdk2.20.1"}
    text = run_lmi_build("profiles", "list", env={**os.environ, "COLUMNS": "200"}).stdout
    line = next(line for line in text.splitlines() if "lmi-0.36.0-trtllm-1.0.0" in line)
    assert "DJL, newest" in line
    shown = run_lmi_build("profiles", "show", "lmi-0.35.1-trtllm-1.0.0").stdout
    assert "published: no DLC; DJL's own build only (deepjavalibrary/djl-serving:0.35.1-tensorrt-llm)" in shown


def test_a_configured_neuron_profile_after_0_34_names_the_last_release(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[neuronx]\nprofile = "lmi-0.35.0-neuronx-sdk2.24.0"\n')
    done = run_lmi_build("plan", "neuronx", "--model", "demo:tiny-llama", env={**os.environ, "LMI_BUILD_CONFIG": str(config)})
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
    assert "LMI 0.35.0 has no Neuron container" in done.stderr and "lmi-0.34.0-neuronx-sdk2.21.1" in done.stderr
