"""Neuron container profiles: data for every LMI Neuron release, listed beside the TensorRT-LLM
ones, and part of the plan and its cache key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmi_build.core.errors import UnknownName
from lmi_build.targets import TARGETS
from lmi_build.targets.neuronx.profiles import get_profile, load_profiles
from lmi_build.targets.neuronx.sdk import UnbuiltLoader, sdk
from tests.cli_process import run_lmi_build
from tests.fixtures_planning import ModelDirFactory, Planner

LLAMA = "meta-llama--Llama-2-7b-hf"


def test_one_profile_per_release_in_the_facts_table() -> None:
    profiles = load_profiles()
    assert [p.lmi_version for p in profiles] == ["0.26.0", "0.27.0", "0.28.0", "0.29.0", "0.30.0",
                                                  "0.32.0", "0.33.0", "0.34.0"]
    unreleased = {p.lmi_version for p in profiles if not p.released}
    assert unreleased == {"0.32.0", "0.33.0", "0.34.0"}
    assert all(not p.image for p in profiles if not p.released)
    assert all(p.neuron_cc_flags == "--logfile /tmp/compile.log --temp-dir=/tmp" for p in profiles)
    assert all(p.sources for p in profiles)


def test_default_is_the_newest_published_image() -> None:
    default = get_profile(None)
    assert default.name == "lmi-0.30.0-neuronx-sdk2.20.1"
    assert (default.neuron_sdk, default.neuronx_cc, default.transformers_neuronx) == ("2.20.1", "2.15.141.0", "0.12.313")
    assert default.image.endswith("djl-inference:0.30.0-neuronx-sdk2.20.1")


def test_cache_directory_carries_the_compiler_commit_where_known() -> None:
    assert get_profile("lmi-0.27.0-neuronx-sdk2.18.0").cache_dir_name == "neuronxcc-2.13.68.0+6dfecc895"
    assert get_profile("lmi-0.30.0-neuronx-sdk2.20.1").cache_dir_name == "neuronxcc-2.15.141.0"


def test_loader_era_of_each_profile() -> None:
    eras = {p.lmi_version: (p.default_loader, p.tnx_switch) for p in load_profiles()}
    assert eras["0.26.0"] == ("optimum", "rolling_batch")
    assert eras["0.27.0"] == ("optimum", "model_type_or_option")
    assert eras["0.28.0"] == ("tnx", "none")  # 0.28.0-dlc transformers_neuronx.py:50
    assert eras["0.30.0"] == ("tnx", "none")
    layouts = {p.lmi_version: p.layout for p in load_profiles()}
    assert layouts["0.27.0"] == "neuronx-split" and layouts["0.29.0"] == "neuronx-legacy"
    assert layouts["0.30.0"] == "neuronx-tnx"
    accepted = {p.lmi_version: p.model_loaders for p in load_profiles()}
    assert accepted["0.26.0"] == () and "nxdi" not in accepted["0.30.0"] and "nxdi" in accepted["0.32.0"]


def test_every_loader_a_profile_accepts_is_built_or_has_a_sourced_refusal() -> None:
    accepted = {loader for p in load_profiles() for loader in p.model_loaders}
    unbuilt = sdk().unbuilt_loaders
    assert accepted - {"tnx", "optimum"} == set(unbuilt) == {"vllm", "nxdi"}
    nxdi = unbuilt["nxdi"]
    # What was read (DJL's loader, the wheel pin and its PR, the public fork, NxDI 0.1.1) and what was not.
    assert any("model_loader.py:894-922" in s for s in nxdi.sources)
    assert any("PR #2688" in s and "Dockerfile:40" in s for s in nxdi.sources)
    assert any(s.startswith("aws-neuron/upstreaming-to-vllm v0.6.x-neuron 22c56ee") for s in nxdi.sources)
    assert any(s.startswith("aws-neuron/neuronx-distributed-inference v0.1.1") for s in nxdi.sources)
    assert "internal wheel" in nxdi.missing and "vllm_neuronx-0.6.2+neuron216" in nxdi.missing
    shown = run_lmi_build("profiles", "show", "lmi-0.33.0-neuronx-sdk2.21.1", "--json")
    assert set(json.loads(shown.stdout)["unbuilt_loaders"]) == {"vllm", "nxdi"}
    shown = run_lmi_build("profiles", "show", "lmi-0.33.0-neuronx-sdk2.21.1")
    assert "not built: option.model_loader=nxdi: DJL's nxdi partition only starts vLLM" in shown.stdout


def test_a_refusal_reason_must_be_one_line() -> None:
    with pytest.raises(ValueError, match="pattern"):
        UnbuiltLoader(reason="first\nsecond", sources=("somewhere",), missing="")
    with pytest.raises(ValueError, match="at least 1"):
        UnbuiltLoader(reason="why", sources=(), missing="")


def test_unknown_profile_is_named() -> None:
    with pytest.raises(UnknownName, match="nope"):
        get_profile("nope")


def test_verify_knows_the_neuron_containers() -> None:
    assert TARGETS["neuronx"].container_profiles()["lmi-0.30.0-neuronx-sdk2.20.1"].versions["neuronx_cc"] == "2.15.141.0"


def test_profiles_list_shows_every_kind() -> None:
    listed = run_lmi_build("profiles", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    kinds = {row["kind"] for row in rows}
    assert kinds == {"trtllm", "neuronx", "hf"}  # hf: the vLLM/LMI-Dist containers (serving formats)
    defaults = {row["kind"]: row["name"] for row in rows if row["default"]}
    assert defaults["neuronx"] == "lmi-0.30.0-neuronx-sdk2.20.1"
    shown = run_lmi_build("profiles", "show", "lmi-0.27.0-neuronx-sdk2.18.0", "--json")
    assert json.loads(shown.stdout)["cache_dir"] == "neuronxcc-2.13.68.0+6dfecc895"


def test_profile_is_in_the_plan_and_the_cache_key(plan_model: Planner, model_dir: ModelDirFactory) -> None:
    llama: Path = model_dir(LLAMA)
    default = plan_model("neuronx", llama, tp="2")
    assert default.toolchain.profile == "lmi-0.30.0-neuronx-sdk2.20.1"
    assert default.toolchain.versions["neuronx_cc"] == "2.15.141.0"
    older = plan_model("neuronx", llama, tp="2", profile="lmi-0.29.0-neuronx-sdk2.19.1")
    assert older.toolchain.versions["neuronx_cc"] == "2.14.227.0"
    assert older.cache_key != default.cache_key
