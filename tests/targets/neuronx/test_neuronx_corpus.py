"""The vendor's own Neuron configurations as a corpus (issue 21, Deliver item 2): every
transformers-neuronx entry of DJL Serving's integration tests (tests/integration/llm/prepare.py at
0.28.0-dlc, 0.29.0-dlc, 0.30.0-dlc) and the AOT tutorial's settings (0.30.0-dlc
serving/docs/lmi/tutorials/tnx_aot_tutorial.md), extracted by tests/vendor/djl/extract_neuron_corpus.py
into tests/fixtures/neuron-corpus/corpus.json. DJL runs these on its release images, so each one
must plan valid against that release's profile, keep the batching DJL asked for, and build through the
Neuron stand-in into an artifact that verify finds servable on that release and whose start-up model
says ``loads``; the entries lmi-build cannot build as the container loads them (REFUSED) are refused by
plan and build alike, with the vendor source that says why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lmi_build.artifact.manifest import load_manifest
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets.neuronx.batching import container_batching
from lmi_build.targets.neuronx.profiles import get_profile
from tests.cli_process import run_lmi_build
from tests.conftest import FIXTURE_CONFIGS
from tests.fixtures_neuronx import write_neuron_model
from tests.fixtures_planning import plan_for
from tests.paths import FIXTURES_DIR, VENDOR_DIR

CORPUS_DIR = FIXTURES_DIR / "neuron-corpus"
CORPUS: list[dict[str, Any]] = json.loads((CORPUS_DIR / "corpus.json").read_text())["entries"]
PROFILES = {"0.28.0-dlc": "lmi-0.28.0-neuronx-sdk2.18.2", "0.29.0-dlc": "lmi-0.29.0-neuronx-sdk2.19.1",
            "0.30.0-dlc": "lmi-0.30.0-neuronx-sdk2.20.1"}
# Out of lmi-build's scope, with the reason: not a causal LM transformers-neuronx builds.
NOT_LLM = {"stable-diffusion-2.1-neuron", "stable-diffusion-1.5-neuron", "stable-diffusion-xl-neuron"}
# Models the corpus names whose config.json is not among the fixtures (tests/fixtures/hf-configs, else
# neuron-corpus/hf-configs: transcriptions marked inferred, hf-configs/SOURCE.md); their entries are listed,
# not planned. None now.
NO_CONFIG: set[str] = set()
# Entries the plan refuses, with the vendor source that makes the refusal right: DJL loads a draft model and
# calls enable_speculative_decoder before it loads or compiles the NEFFs (model_loader.py@0.28.0-dlc:360-365,
# @0.29.0-dlc:366-371, @0.30.0-dlc:382-387), so the speculation kernels are compiled at start-up; lmi-build's
# driver builds none, and an artifact without them would recompile in the container (issue 21 finding 11).
SPECULATIVE_CITE = {"0.28.0-dlc": "0.28.0-dlc model_loader.py:360-365", "0.29.0-dlc": "0.29.0-dlc :366-371",
                    "0.30.0-dlc": "0.30.0-dlc engines/python/setup/djl_python/neuron_utils/model_loader.py:382-387"}
REFUSED = {"llama-speculative-rb": {"neuron_refused_option"},
           # and compiled_graph_path_model: this test plans from a local copy of config.json where DJL names
           # s3://djl-llm/llama-2-13b-hf/, and a compile-cache artifact must name weights the container fetches
           "llama-speculative-compiled-rb": {"neuron_refused_option", "compiled_graph_path_model"},
           # option.model_loader=vllm with option.rolling_batch=vllm: DJL loads nothing and hands the model id to
           # vLLM, which compiles at start-up; DJL refuses ahead-of-time partitioning for that loader itself
           "tiny-llama-rb-vllm": {"neuron_loader_compiles"}}
# Entries refused on one release only (by id): DJL's own 0.29 correctness run serves Llama-3.1-8B on
# transformers-neuronx 0.11.351, which ignores its llama3 rope_scaling (issue 42 item 8; its MMLU gate uses
# short prompts); 0.30's 0.12.313 scales it, and the same entry there plans.
REFUSED_ON = {"0.29.0-dlc/correctness_model_list/neuronx-llama3-1-8b": {"neuron_rope_scaling"}}
# Where each release defers loading to vLLM (transformers_neuronx.py load_model), cited in that refusal.
VLLM_LOADER_CITE = {"0.28.0-dlc": "0.28.0-dlc engines/python/setup/djl_python/transformers_neuronx.py:176-177",
                    "0.29.0-dlc": "0.29.0-dlc engines/python/setup/djl_python/transformers_neuronx.py:178-179",
                    "0.30.0-dlc": "0.30.0-dlc engines/python/setup/djl_python/transformers_neuronx.py:301-302"}
# Keys that name where the container finds things, replaced by the local model the test plans.
WHERE = {"option.model_id", "option.entryPoint"}
DJL_MIRROR = Path(os.environ.get("DJL_SERVING_GIT", "/work/.mirror/deepjavalibrary+djl-serving/repo"))


def _config(model: str) -> Path | None:
    for root in (FIXTURE_CONFIGS, CORPUS_DIR / "hf-configs"):
        path = root / model.replace("/", "--") / "config.json"
        if path.is_file():
            return path
    return None


def _planned() -> list[dict[str, Any]]:
    return [e for e in CORPUS if e["name"] not in NOT_LLM and _config(e["model"]) is not None]


def _properties(entry: dict[str, Any], directory: Path) -> Path:
    path = directory / "serving.properties.in"
    path.write_text("".join(f"{k}={v}\n" for k, v in entry["properties"].items() if k not in WHERE))
    return path


def _plan(entry: dict[str, Any], tmp_path: Path) -> BuildPlan:
    config = _config(entry["model"])
    assert config is not None
    model = tmp_path / "model"
    model.mkdir()
    shutil.copyfile(config, model / "config.json")
    # The fixture's placeholder tokenizer: a plan refuses a model without one (tokenizer_missing).
    shutil.copyfile(config.with_name("tokenizer.json"), model / "tokenizer.json")
    return plan_for("neuronx", model=str(model), properties=_properties(entry, tmp_path),
                    profile=PROFILES[entry["branch"]])


def test_every_entry_is_cited_and_accounted_for() -> None:
    assert len(CORPUS) >= 70
    for entry in CORPUS:
        assert entry["cite"].startswith("deepjavalibrary/djl-serving ") and f"@{entry['branch']}:" in entry["cite"]
        assert entry["branch"] in PROFILES and len(entry["commit"]) == 40
    llm = [e for e in CORPUS if e["name"] not in NOT_LLM]
    assert all(e["model"] for e in llm)  # each LLM entry names a Hub model (mapping marked inferred)
    assert {e["model"] for e in llm if _config(e["model"]) is None} == NO_CONFIG
    assert len(_planned()) >= 20
    tutorial = next(e for e in CORPUS if e["section"] == "tnx_aot_tutorial")
    assert tutorial["properties"]["option.tensor_parallel_degree"] == "24"  # tnx_aot_tutorial.md:59


@pytest.mark.skipif(not DJL_MIRROR.is_dir(), reason="no djl-serving clone at hand (DJL_SERVING_GIT)")
def test_corpus_is_what_the_vendor_source_says() -> None:
    script = VENDOR_DIR / "djl" / "extract_neuron_corpus.py"
    done = subprocess.run([sys.executable, str(script), str(DJL_MIRROR)], capture_output=True, text=True,
                          check=True, timeout=120)
    assert json.loads(done.stdout)["entries"] == CORPUS


def _default_n_positions(entry: dict[str, Any]) -> int:
    """option.n_positions as the entry's release resolves it when serving.properties has none: TnXProperties'
    128 before 0.30 (tnx_properties.py@0.29.0-dlc:91), else the smart default min(max_position_embeddings,
    4096) (NeuronSmartDefaultUtils.java@0.30.0-dlc:55-63, LmiUtils.java@0.30.0-dlc:585-587)."""
    if entry["branch"] in ("0.28.0-dlc", "0.29.0-dlc"):
        return 128
    config = _config(entry["model"])
    assert config is not None
    return min(int(json.loads(config.read_text())["max_position_embeddings"]), 4096)


def _refused(entry: dict[str, Any]) -> set[str] | None:
    """The plan error codes that refuse ``entry`` on its release (None: it plans)."""
    return REFUSED.get(entry["name"]) or REFUSED_ON.get(entry["id"])


def test_refusals_are_of_entries_in_the_corpus() -> None:
    names = {e["name"] for e in _planned()}
    assert set(REFUSED) <= names
    assert set(REFUSED_ON) <= {e["id"] for e in _planned()}


@pytest.mark.parametrize("entry", _planned(), ids=lambda e: e["id"])
def test_each_vendor_configuration_plans_valid_on_its_release(entry: dict[str, Any], tmp_path: Path) -> None:
    plan = _plan(entry, tmp_path)
    refused = _refused(entry)
    if refused is not None:
        assert {m.code for m in plan.errors} == refused, [(m.code, m.message) for m in plan.errors]
        if "neuron_rope_scaling" in refused:
            rope = next(m for m in plan.errors if m.code == "neuron_rope_scaling")
            assert "0.11.351 ignores llama's llama3 RoPE scaling" in rope.message and "lmi-0.30.0" in rope.hint
            return
        if "neuron_loader_compiles" in refused:
            compiles = next(m for m in plan.errors if m.code == "neuron_loader_compiles")
            assert "option.model_loader=vllm with option.rolling_batch=vllm" in compiles.message
            assert VLLM_LOADER_CITE[entry["branch"]] in compiles.message
            return
        speculative = next(m for m in plan.errors if m.code == "neuron_refused_option")
        assert "option.speculative_draft_model" in speculative.message
        assert SPECULATIVE_CITE[entry["branch"]] in speculative.message
        return
    assert plan.valid, (entry["cite"], [(m.code, m.message) for m in plan.errors])
    written = entry["properties"]
    knobs = plan.build
    assert knobs is not None
    if "option.tensor_parallel_degree" in written:
        assert knobs.tp == int(written["option.tensor_parallel_degree"])
    # n_positions as written, else as the release resolves it without one (the plan writes that value).
    if "option.n_positions" in written:
        assert plan.options["option.n_positions"] == written["option.n_positions"]
    else:
        assert plan.options["option.n_positions"] == str(_default_n_positions(entry))
    # The batching DJL asked for: rolling batch (as the release resolves option.rolling_batch, at the
    # max_rolling_batch_size written), else the static batch.
    asked = written.get("option.rolling_batch", "disable") != "disable" or "option.max_rolling_batch_size" in written
    if asked:
        assert plan.options["option.rolling_batch"] != "disable"
        resolved = container_batching({"engine": "Python", **written}, get_profile(PROFILES[entry["branch"]]))
        assert resolved.rolling
        assert plan.options["option.rolling_batch"] == resolved.rolling_batch
        if "option.max_rolling_batch_size" in written:
            assert plan.options["option.max_rolling_batch_size"] == written["option.max_rolling_batch_size"]
    else:
        assert plan.options["option.rolling_batch"] == "disable"
        # DJL's server batch: batch_size, else the older max_dynamic_batch_size (ModelInfo.java@0.30.0-dlc:864-867)
        batch = (written.get("option.batch_size") or written.get("batch_size") or written.get("max_dynamic_batch_size")
                 or "1")
        assert plan.options["option.batch_size"] == batch == plan.options["batch_size"]
    if written.get("option.quantize") == "static_int8":
        assert plan.quantization.method == "int8"


CC = {"0.28.0-dlc": "2.13.72.0", "0.29.0-dlc": "2.14.227.0", "0.30.0-dlc": "2.15.141.0"}  # each profile's neuronx-cc


def _written(out: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (out / "serving.properties").read_text().splitlines()
                if "=" in line and not line.startswith("#"))


@pytest.mark.parametrize("entry", _planned(), ids=lambda e: e["id"])
def test_each_vendor_configuration_builds_and_its_release_loads_it(entry: dict[str, Any], tmp_path: Path,
                                                                  neuron_standin: Callable[..., None]) -> None:
    """Every planned entry through the Neuron stand-in (in-process, the entry's own config.json with one tiny
    safetensors file: the stand-in compiles nothing, so the model's size does not matter), on its release's
    profile: a refused entry fails the build with the plan's cited refusal and writes nothing; every other one
    builds, and verify --for-container finds nothing but the stand-in between it and the release, whose
    start-up model says it loads."""
    profile = PROFILES[entry["branch"]]
    neuron_standin(neuronx_cc=CC[entry["branch"]])
    model = write_neuron_model(tmp_path / "model", config=_config(entry["model"]))
    out = tmp_path / "out"
    built = run_lmi_build("neuronx", "--model", str(model), "--properties",
                                     str(_properties(entry, tmp_path)), "--profile", profile, "--output", str(out),
                                     "--quiet")
    refused = _refused(entry)
    if refused is not None:
        assert built.returncode == 2, (built.stdout + built.stderr)
        codes = {line.split("[", 1)[1].split("]", 1)[0] for line in (built.stdout + built.stderr).splitlines()
                 if line.startswith("error: [")}
        assert codes == refused, (built.stdout + built.stderr)
        assert not out.exists()
        return
    assert built.returncode == 0, built.stdout + built.stderr
    verified = run_lmi_build("verify", str(out), "--for-container", profile, "--json")
    served = json.loads(verified.stdout)
    # The stand-in compiled nothing, and says so; nothing else stands between the artifact and the release.
    assert [e["code"] for e in served["errors"]] == ["stand_in"], served["errors"]
    # The release's start-up model: it loads the NEFFs the artifact ships, with the loader they were built for,
    # every rule it applied cited (a warning is a belief without a vendor source, which the rule says).
    startup: dict[str, Any] = served["startup"]
    assert startup["outcome"] == "loads", startup
    neffs = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.neff"))
    assert startup["loads"] == neffs and neffs
    built_for = load_manifest(out).plan["build"]["loader"]
    assert startup["profile"] == profile and startup["loader"] == built_for and startup["resolved"]["rolling_batch"]
    assert all(rule["effect"] in ("resolves", "warning") for rule in startup["rules"]), startup["rules"]
    assert all(rule["sources"] or rule["cites"] for rule in startup["rules"] if rule["effect"] == "resolves")
    properties = _written(out)
    written = entry["properties"]
    for key in ("option.tensor_parallel_degree", "option.n_positions", "option.max_rolling_batch_size"):
        if key in written:
            assert properties[key] == written[key]
    if "option.n_positions" not in written:
        assert properties["option.n_positions"] == str(_default_n_positions(entry))
    if written.get("option.rolling_batch", "disable") != "disable":
        resolved = container_batching({"engine": "Python", **written}, get_profile(profile))
        assert properties["option.rolling_batch"] == resolved.rolling_batch != "disable"
