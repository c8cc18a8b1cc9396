"""The real NEFF compile of demo:tiny-llama, loaded back the way the LMI container loads the
precompiled layout. Runs only where the Neuron SDK (transformers-neuronx, neuronx-cc) and Neuron
devices exist; skips with the reason elsewhere (no Neuron SDK is installable on this CI)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from lmi_build.targets.neuronx.profiles import load_profiles
from lmi_build.targets.neuronx.steps import host_neuron_devices
from tests.cli_process import run_lmi_build


def _installed_profile() -> tuple[str | None, str | None]:
    """(profile name matching the installed neuronx-cc, reason to skip)."""
    if os.environ.get("LMI_BUILD_NEURON_PYTHON"):
        return None, "LMI_BUILD_NEURON_PYTHON is set (a stand-in or another python): not this host's SDK"
    if importlib.util.find_spec("transformers_neuronx") is None or importlib.util.find_spec("neuronxcc") is None:
        return None, "the Neuron SDK (transformers-neuronx, neuronx-cc) is not importable here"
    if not host_neuron_devices():
        return None, "no Neuron devices (/dev/neuron*)"
    import neuronxcc

    matching = [p.name for p in load_profiles() if p.neuronx_cc == neuronxcc.__version__ and p.layout == "neuronx-tnx"]
    if not matching:
        return None, f"no LMI profile has this host's neuronx-cc {neuronxcc.__version__}"
    return matching[-1], None


@pytest.mark.neuron
@pytest.mark.slow
def test_real_compile_of_tiny_llama_loads_without_compiling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile, reason = _installed_profile()
    if profile is None:
        pytest.skip(reason or "no Neuron SDK")
    out = tmp_path / "artifact"
    result = run_lmi_build("neuronx", "--model", "demo:tiny-llama", "--tp", "1", "--n-positions", "128",
                                      "--profile", profile, "--runner", "local", "--output", str(out), "--json")
    assert result.returncode == 0, (result.stdout + result.stderr)
    assert json.loads(result.stdout)["stand_in"] is False
    verified = run_lmi_build("verify", str(out), "--for-container", profile, "--json")
    assert json.loads(verified.stdout)["valid"] is True, verified.stdout

    # Load it back as DJL does (model.load(compiled) + to_neuron()) with an empty compile cache:
    # nothing may be compiled again.
    empty_cache = tmp_path / "cache"
    empty_cache.mkdir()
    monkeypatch.setenv("NEURON_COMPILE_CACHE_URL", str(empty_cache))
    from transformers_neuronx import NeuronAutoModelForCausalLM

    plan = json.loads((out / "lmi-build.json").read_text())["plan"]["build"]
    model = NeuronAutoModelForCausalLM.from_pretrained(str(out / "compiled"), **plan["tnx_kwargs"])
    model.load(str(out / "compiled"))
    model.to_neuron()
    assert not any(empty_cache.rglob("model.neff")), "loading the artifact compiled NEFFs again"
