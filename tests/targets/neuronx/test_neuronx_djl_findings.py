"""Issue 31 items 3-5 and issue 32 item 3: Neuron start-up rules found by executing DJL's Python
(``tests/vendor/djl/verdicts.json``) where lmi-build's transcription had them otherwise.

- 32.3: what the build refuses (an unbuilt loader, 0.26's split layout) the plan refuses: one verdict.
- 3: ``option.model_loader=vllm`` is vLLM's loader only under ``option.rolling_batch=vllm``; otherwise DJL
  sets no loader class and keeps transformers-neuronx (transformers_neuronx.py@0.30.0-dlc:65, 134-139).
- 4: ``option.rolling_batch=lmi-dist`` (or trtllm) makes the 0.28-0.32 recommender turn on MPI mode, which
  finds no GPU on a Neuron host (LmiConfigRecommender.java@0.30.0-dlc:84-89, PyModel.java:216-240). 0.27 sets
  none for the engine=Python lmi-build writes (LmiConfigRecommender.java@049a929b:95-113): its artifact builds,
  for 0.27, and the later releases that share its layout (the optimum export) refuse it by verify.
- 5: on 0.28/0.29 ``option.rolling_batch=vllm`` compiles for continuous batching whatever the model type
  (model_loader.py@0.29.0-dlc:157-168): Mixtral included; an artifact compiled without it is not loaded."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from lmi_build.artifact.manifest import load_manifest
from lmi_build.artifact.verify import serving_target
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets import TARGETS
from lmi_build.targets.neuronx.knobs import NeuronxBuild
from tests.cli_process import run_lmi_build
from tests.fixtures_neuronx import write_neuron_model
from tests.fixtures_planning import plan_for

P026, P027 = "lmi-0.26.0-neuronx-sdk2.16.0", "lmi-0.27.0-neuronx-sdk2.18.0"
P028, P029, P030 = "lmi-0.28.0-neuronx-sdk2.18.2", "lmi-0.29.0-neuronx-sdk2.19.1", "lmi-0.30.0-neuronx-sdk2.20.1"
P032, P033 = "lmi-0.32.0-neuronx-sdk2.21.1", "lmi-0.33.0-neuronx-sdk2.21.1"


def _plan(model: Path, profile: str, *options: str, **fields: object) -> BuildPlan:
    return plan_for("neuronx", model=str(model), tp="2", n_positions="1024", profile=profile, option=options,
                    **fields)


def test_plan_refuses_what_the_build_refuses(tmp_path: Path, neuron_standin: Callable[..., None]) -> None:
    """Issue 32 item 3: plan said valid, the build exited 1."""
    neuron_standin()
    model = write_neuron_model(tmp_path / "llama")
    for profile, options in ((P026, ()), (P032, ("option.model_loader=nxdi",))):
        plan = _plan(model, profile, *options, max_batch_size=4)
        assert not plan.valid and "neuron_unbuilt" in {e.code for e in plan.errors}, (profile, plan.errors)
        flags = [arg for option in options for arg in ("--option", option)]
        built = run_lmi_build("neuronx", "--model", str(model), "--tp", "2", "--n-positions", "1024",
                                         "--max-batch-size", "4", "--profile", profile, *flags,
                                         "--output", str(tmp_path / f"out-{profile}"))
        assert built.returncode != 0 and "neuron_unbuilt" in (built.stdout + built.stderr), (built.stdout + built.stderr)


def test_vllm_model_loader_without_vllm_rolling_batch_is_transformers_neuronx(
        tmp_path: Path, neuron_standin: Callable[..., None]) -> None:
    neuron_standin()
    model = write_neuron_model(tmp_path / "llama")
    plan = _plan(model, P030, "option.model_loader=vllm", max_batch_size=4)
    assert plan.options["option.rolling_batch"] == "tnx"
    assert plan.knobs(NeuronxBuild).loader == "tnx" and plan.valid, plan.errors
    assert "neuron_model_loader_ignored" in {w.code for w in plan.warnings}
    # The build agrees, and the release loads what it built with its transformers-neuronx loader.
    out = tmp_path / "out"
    built = run_lmi_build("neuronx", "--model", str(model), "--tp", "2", "--n-positions", "1024",
                                     "--max-batch-size", "4", "--option", "option.model_loader=vllm",
                                     "--profile", P030, "--output", str(out), "--quiet")
    assert built.returncode == 0, (built.stdout + built.stderr)
    outcome = TARGETS["neuronx"].container_startup(load_manifest(out), serving_target(TARGETS, container=P030))
    assert outcome is not None and outcome.outcome == "loads" and outcome.loader == "tnx"


def test_vllm_model_loader_refused_for_model_types_djl_refuses(tmp_path: Path) -> None:
    mixtral = write_neuron_model(tmp_path / "mixtral", "mistralai--Mixtral-8x7B-v0.1")
    plan = _plan(mixtral, P030, "option.model_loader=vllm", "option.rolling_batch=vllm", max_batch_size=4)
    error = next(e for e in plan.errors if e.code == "neuron_model_loader")
    assert "VllmModelLoader does not support this config" in error.message


def test_lmi_dist_rolling_batch_refused_on_neuron(tmp_path: Path) -> None:
    model = write_neuron_model(tmp_path / "llama")
    for rolling in ("lmi-dist", "trtllm"):
        plan = _plan(model, P030, f"option.rolling_batch={rolling}", max_batch_size=4)
        error = next(e for e in plan.errors if e.code == "neuron_batching")
        assert "option.mpi_mode=true" in error.message and "LmiConfigRecommender.java:84-89" in error.message
    # 0.33 rewrites lmi-dist to vllm (and turns MPI mode off): no refusal there.
    rewritten = _plan(model, P033, "option.rolling_batch=lmi-dist", max_batch_size=4)
    assert rewritten.options["option.rolling_batch"] == "vllm"
    assert "neuron_batching" not in {e.code for e in rewritten.errors}


def test_lmi_dist_artifact_of_027_is_for_027_and_refused_by_the_later_releases_sharing_its_layout(
        tmp_path: Path, neuron_standin: Callable[..., None]) -> None:
    """The build's own verify read the optimum export's batching for every release that loads it and
    failed on 0.28's MPI mode: the artifact is 0.27's, the releases that refuse it outright are not claimed."""
    neuron_standin(neuronx_cc="2.13.68.0", optimum_neuron="0.0.20")  # 0.27's SDK
    model = write_neuron_model(tmp_path / "llama")
    out = tmp_path / "out"
    built = run_lmi_build("neuronx", "--model", str(model), "--tp", "2", "--max-batch-size", "4", "--option",
                          "option.rolling_batch=lmi-dist", "--profile", P027, "--output", str(out), "--quiet")
    assert built.returncode == 0, (built.stdout + built.stderr)
    manifest = load_manifest(out)
    assert manifest.toolchain.profile == P027 and manifest.layout == "neuronx-optimum"
    own = TARGETS["neuronx"].container_startup(manifest, serving_target(TARGETS, container=P027))
    assert own is not None and own.outcome == "loads" and own.loader == "optimum"
    verified = run_lmi_build("verify", str(out), "--for-container", P028, "--json")
    report = json.loads(verified.stdout)
    assert verified.returncode != 0 and report["startup"]["outcome"] == "rejected"
    refusal = next(e["message"] for e in report["errors"] if e["code"] == "neuron_batching")
    assert "option.mpi_mode=true" in refusal and "0.28.0-dlc wlm/src/main/java/ai/djl/serving/wlm/" \
        "LmiConfigRecommender.java:118-126" in refusal


def test_mixtral_vllm_rolling_batch_compiles_continuous_batching_on_029(tmp_path: Path,
                                                                         neuron_standin: Callable[..., None]) -> None:
    neuron_standin(neuronx_cc="2.14.227.0")  # 0.29's compiler
    mixtral = write_neuron_model(tmp_path / "mixtral", "mistralai--Mixtral-8x7B-v0.1")
    vllm = _plan(mixtral, P029, "option.rolling_batch=vllm", max_batch_size=4).knobs(NeuronxBuild)
    assert vllm.continuous_batching and vllm.neuron_config["continuous_batching"] == {"batch_size_for_shared_caches": 4}
    assert vllm.tnx_kwargs["n_positions"] == [1024] and vllm.tnx_kwargs["context_length_estimate"] == [1024]
    # verify --for-container: an artifact compiled under tnx rolling batch (no continuous batching for
    # Mixtral on 0.29), served with rolling_batch=vllm, is another graph: not loaded.
    out = tmp_path / "out"
    built = run_lmi_build("neuronx", "--model", str(mixtral), "--tp", "2", "--n-positions", "1024",
                                     "--max-batch-size", "4", "--option", "option.rolling_batch=tnx",
                                     "--profile", P029, "--output", str(out), "--quiet")
    assert built.returncode == 0, (built.stdout + built.stderr)
    manifest = load_manifest(out)
    assert manifest.plan["build"]["continuous_batching"] is False
    served = manifest.model_copy(update={"serving_properties": {**manifest.serving_properties,
                                                                "option.rolling_batch": "vllm"}})
    outcome = TARGETS["neuronx"].container_startup(served, serving_target(TARGETS, container=P029))
    assert outcome is not None and outcome.outcome == "rejected"
    assert outcome.deciding()[0].rule == "neuron_continuous_batching"
    as_built = TARGETS["neuronx"].container_startup(manifest, serving_target(TARGETS, container=P029))
    assert as_built is not None and as_built.outcome == "loads"
