"""``verify --for-container`` on a Neuron artifact reports the serving release's RoPE-scaling outcome
(issue 21 finding 8) and the options lmi-build refuses (finding 11) with the very rules and messages
plan uses (``rope.rope_message``, ``sdk.refused_option_messages``): an artifact built for a release
that applies llama3 scaling is not servable on one that rejects it or would load it unscaled."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from lmi_build.artifact.manifest import Manifest, load_manifest
from lmi_build.artifact.verify import check_compatibility, serving_target
from lmi_build.core.types import PlanMessage
from lmi_build.targets import TARGETS
from tests.cli_process import run_lmi_build
from tests.fixtures_neuronx import write_neuron_model
from tests.fixtures_planning import plan_for

P028, P029, P030, P032, P033 = ("lmi-0.28.0-neuronx-sdk2.18.2", "lmi-0.29.0-neuronx-sdk2.19.1",
                                "lmi-0.30.0-neuronx-sdk2.20.1", "lmi-0.32.0-neuronx-sdk2.21.1",
                                "lmi-0.33.0-neuronx-sdk2.21.1")
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
          "rope_type": "llama3"}  # meta-llama/Llama-3.1-8B config.json's rope_scaling
SPECULATIVE = "option.speculative_draft_model"


def _llama3(tmp_path: Path) -> Path:
    model = write_neuron_model(tmp_path / "llama3")
    config = json.loads((model / "config.json").read_text())
    config.update(rope_scaling=LLAMA3, max_position_embeddings=131072)
    (model / "config.json").write_text(json.dumps(config))
    return model


def _build(tmp_path: Path, model: Path, profile: str) -> Manifest:
    out = tmp_path / "out"
    result = run_lmi_build("neuronx", "--model", str(model), "--tp", "2", "--n-positions", "1024",
                                      "--profile", profile, "--output", str(out), "--quiet")
    assert result.returncode == 0, (result.stdout + result.stderr)
    return load_manifest(out)


def _verify(manifest: Manifest, container: str) -> tuple[dict[str, PlanMessage], dict[str, PlanMessage]]:
    errors, warnings = check_compatibility(manifest, TARGETS["neuronx"], serving_target(TARGETS, container=container))
    return {e.code: e for e in errors}, {w.code: w for w in warnings}


def test_verify_reports_each_release_rope_outcome_as_plan_does(tmp_path: Path,
                                                                neuron_standin: Callable[..., None]) -> None:
    neuron_standin(neuronx_cc="2.16.372.0")
    model = _llama3(tmp_path)
    manifest = _build(tmp_path, model, P032)  # 0.32's transformers-neuronx applies llama3 scaling
    assert set(_verify(manifest, P032)[0]) == {"stand_in"}
    assert set(_verify(manifest, P033)[0]) == {"stand_in"}
    assert "neuron_rope_scaling" not in _verify(manifest, P030)[0]  # 0.30's transformers-neuronx 0.12.313 applies it too
    for profile, words in ((P028, "two fields"), (P029, "unscaled RoPE")):  # 4.36 cannot parse it; 0.11.351 ignores it
        errors, warnings = _verify(manifest, profile)
        planned = next(e for e in plan_for("neuronx", model=str(model), profile=profile, n_positions="1024").errors
                       if e.code == "neuron_rope_scaling")
        assert errors["neuron_rope_scaling"] == planned  # the one evaluator: the same message and hint
        assert words in errors["neuron_rope_scaling"].message and "neuron_rope_scaling_unchecked" not in warnings


def test_verify_reports_a_refused_option_in_the_artifact_properties(tmp_path: Path,
                                                                     neuron_standin: Callable[..., None]) -> None:
    neuron_standin()
    model = write_neuron_model(tmp_path / "llama")
    manifest = _build(tmp_path, model, P030)
    assert "neuron_refused_option" not in _verify(manifest, P030)[0]
    # An artifact whose serving.properties asks for a draft model (written by hand, or by an older lmi-build).
    edited = manifest.model_copy(update={"serving_properties": {**manifest.serving_properties,
                                                                SPECULATIVE: "s3://bucket/draft/"}})
    refused = _verify(edited, P030)[0]["neuron_refused_option"]
    planned = next(e for e in plan_for("neuronx", model=str(model), profile=P030, n_positions="1024",
                                       option=(f"{SPECULATIVE}=s3://bucket/draft/",)).errors
                   if e.code == "neuron_refused_option")
    assert refused == planned and "enable_speculative_decoder" in refused.message
