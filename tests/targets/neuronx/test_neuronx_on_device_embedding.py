"""on_device_embedding as each release passes it (issue 21 finding 12): on 0.30+ a written
option.on_device_embedding=false wins over the smart default, and the presharded weights of the
precompiled layout then assert on load (transformers-neuronx 1ade6d7 base.py:101), so the plan
refuses it instead of ignoring it; the NEFFs are compiled with the value the release will pass, and
verify reports an artifact whose serving.properties makes the container pass another one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lmi_build.artifact.manifest import load_manifest
from lmi_build.artifact.verify import check_compatibility, serving_target
from lmi_build.targets import TARGETS
from lmi_build.targets.neuronx.knobs import NeuronxBuild
from lmi_build.targets.neuronx.profiles import get_profile, load_profiles
from lmi_build.targets.neuronx.serving import container_on_device_embedding
from tests.cli_process import run_lmi_build
from tests.fixtures_neuronx import write_neuron_model
from tests.fixtures_planning import Planner, codes, warning_codes

LLAMA = "meta-llama--Llama-2-7b-hf"
P027, P028, P030, P032 = ("lmi-0.27.0-neuronx-sdk2.18.0", "lmi-0.28.0-neuronx-sdk2.18.2",
                          "lmi-0.30.0-neuronx-sdk2.20.1", "lmi-0.32.0-neuronx-sdk2.21.1")


def test_030_refuses_on_device_embedding_false_with_presharded_weights(plan_model: Planner) -> None:
    for profile in (P030, P032):
        plan = plan_model("neuronx", LLAMA, profile=profile, n_positions="1024",
                          option=("option.on_device_embedding=false",))
        error = next(e for e in plan.errors if e.code == "neuron_on_device_embedding")
        assert "presharded" in error.message and "base.py:43, 101" in error.message


def test_030_default_and_true_compile_with_it(plan_model: Planner) -> None:
    for option in ((), ("option.on_device_embedding=true",)):
        plan = plan_model("neuronx", LLAMA, profile=P030, n_positions="1024", option=option)
        assert plan.valid and isinstance(plan.build, NeuronxBuild)
        assert plan.build.neuron_config.get("on_device_embedding") is True
        assert "unknown_option" not in warning_codes(plan)


def test_load_split_model_turns_it_on_whatever_is_written(plan_model: Planner) -> None:
    plan = plan_model("neuronx", LLAMA, profile=P030, n_positions="1024",
                      option=("option.on_device_embedding=false", "option.load_split_model=true"))
    assert "neuron_on_device_embedding" not in codes(plan)
    assert isinstance(plan.build, NeuronxBuild) and plan.build.neuron_config["on_device_embedding"] is True


def test_027_reads_the_option_and_028_ignores_it(plan_model: Planner) -> None:
    on = plan_model("neuronx", LLAMA, profile=P027, n_positions="1024", option=("option.on_device_embedding=true",))
    assert isinstance(on.build, NeuronxBuild) and on.build.neuron_config.get("on_device_embedding") is True
    ignored = plan_model("neuronx", LLAMA, profile=P028, n_positions="1024",
                         option=("option.on_device_embedding=true",))
    assert isinstance(ignored.build, NeuronxBuild) and "on_device_embedding" not in ignored.build.neuron_config
    assert "neuron_on_device_embedding_ignored" in warning_codes(ignored)


def test_the_rule_per_release_and_layout() -> None:
    for profile in load_profiles():
        served, _ = container_on_device_embedding(profile, profile.layout, {})
        assert served is profile.precompiled_on_device_embedding
        if profile.on_device_embedding_option or profile.precompiled_on_device_embedding:
            assert profile.on_device_embedding_sources, profile.name
    assert container_on_device_embedding(get_profile(P030), "neuronx-tnx", {"on_device_embedding": "false"})[0] is False


def test_verify_names_an_artifact_whose_properties_turn_it_off(tmp_path: Path,
                                                               neuron_standin: Callable[..., None]) -> None:
    neuron_standin()
    out = tmp_path / "out"
    model = write_neuron_model(tmp_path / "llama")
    result = run_lmi_build("neuronx", "--model", str(model), "--tp", "2", "--n-positions", "2048",
                                      "--output", str(out), "--quiet")
    assert result.returncode == 0, (result.stdout + result.stderr)
    serving = TARGETS["neuronx"]
    manifest = load_manifest(out)
    errors, _ = check_compatibility(manifest, serving, serving_target(TARGETS, container=P030))
    assert "neuron_on_device_embedding" not in {e.code for e in errors}
    manifest.serving_properties["option.on_device_embedding"] = "false"
    errors, _ = check_compatibility(manifest, serving, serving_target(TARGETS, container=P030))
    problem = next(e.message for e in errors if e.code == "neuron_on_device_embedding")
    assert "asserts on the presharded weights" in problem
