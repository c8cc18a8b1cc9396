"""The vendor's own Neuron configurations as a corpus (issue 21, Deliver item 2): every
transformers-neuronx entry of DJL Serving's integration tests (tests/integration/llm/prepare.py at
0.28.0-dlc, 0.29.0-dlc, 0.30.0-dlc) and the AOT tutorial's settings (0.30.0-dlc
serving/docs/lmi/tutorials/tnx_aot_tutorial.md), extracted by tests/vendor/djl/extract_neuron_corpus.py
into tests/fixtures/neuron-corpus/corpus.json. DJL runs these on its release images, so each one
must plan valid against that release's profile, keep the batching DJL asked for, and (a few small
ones) build through the Neuron stand-in into an artifact verify finds servable on that release."""

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
from typer.testing import CliRunner

from lmi_build.cli import app
from lmi_build.planning.plan import BuildPlan
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
# Models the corpus names whose real config.json is not among the fixtures yet (none was found
# byte-for-byte in a citable public copy); their entries are listed, not planned.
NO_CONFIG = {"facebook/opt-1.3b", "EleutherAI/pythia-2.8b", "bigscience/bloom-7b1", "meta-llama/Llama-2-13b-hf",
             "meta-llama/Meta-Llama-3-8B", "meta-llama/Llama-3.1-8B", "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
             "mistralai/Mixtral-8x22B-v0.1", "codellama/CodeLlama-34b-hf", "bullerwins/Codestral-22B-v0.1-hf",
             "meta-llama/Llama-2-70b-hf"}
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


@pytest.mark.parametrize("entry", _planned(), ids=lambda e: e["id"])
def test_each_vendor_configuration_plans_valid_on_its_release(entry: dict[str, Any], tmp_path: Path) -> None:
    plan = _plan(entry, tmp_path)
    assert plan.valid, (entry["cite"], [(m.code, m.message) for m in plan.errors])
    written = entry["properties"]
    knobs = plan.build
    assert knobs is not None
    assert knobs.tp == int(written["option.tensor_parallel_degree"])
    if "option.n_positions" in written:
        assert plan.options["option.n_positions"] == written["option.n_positions"]
    # The batching DJL asked for: rolling batch at max_rolling_batch_size, else the static batch.
    if "option.max_rolling_batch_size" in written:
        assert plan.options["option.rolling_batch"] != "disable"
        assert plan.options["option.max_rolling_batch_size"] == written["option.max_rolling_batch_size"]
    else:
        assert plan.options["option.rolling_batch"] == "disable"
        # DJL's server batch: batch_size, else the older max_dynamic_batch_size (ModelInfo.java@0.30.0-dlc:864-867)
        batch = (written.get("option.batch_size") or written.get("batch_size") or written.get("max_dynamic_batch_size")
                 or "1")
        assert plan.options["option.batch_size"] == batch == plan.options["batch_size"]
    if written.get("option.quantize") == "static_int8":
        assert plan.quantization.method == "int8"


SMALL = ["0.30.0-dlc/transformers_neuronx_handler_list/gpt2",
         "0.29.0-dlc/transformers_neuronx_handler_list/gpt2-quantize",
         "0.28.0-dlc/transformers_neuronx_aot_handler_list/gpt2"]


@pytest.mark.parametrize("entry_id", SMALL)
def test_small_vendor_configurations_build_through_the_standin(entry_id: str, tmp_path: Path,
                                                              neuron_standin: Callable[..., None]) -> None:
    entry = next(e for e in CORPUS if e["id"] == entry_id)
    profile = PROFILES[entry["branch"]]
    cc = {"0.28.0-dlc": "2.13.72.0", "0.29.0-dlc": "2.14.227.0", "0.30.0-dlc": "2.15.141.0"}[entry["branch"]]
    neuron_standin(neuronx_cc=cc)
    model = write_neuron_model(tmp_path / "gpt2", "openai-community--gpt2")
    out = tmp_path / "out"
    built = CliRunner().invoke(app, ["neuronx", "--model", str(model), "--properties",
                                     str(_properties(entry, tmp_path)), "--profile", profile, "--output", str(out),
                                     "--quiet"])
    assert built.exit_code == 0, built.output
    served = json.loads(CliRunner().invoke(app, ["verify", str(out), "--for-container", profile, "--json"]).stdout)
    # The stand-in compiled nothing, and says so; nothing else stands between the artifact and the release.
    assert [e["code"] for e in served["errors"]] == ["stand_in"], served["errors"]
    properties = (out / "serving.properties").read_text()
    for key in ("option.tensor_parallel_degree", "option.n_positions"):
        assert f"{key}={entry['properties'][key]}" in properties
