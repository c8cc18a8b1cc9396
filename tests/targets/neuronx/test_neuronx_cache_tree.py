"""The compile-cache tree (option.compiled_graph_path=s3://..., issue 21 finding 9): its NEFFs are
compiled with on_device_embedding as the container passes it beside the original weights (0.30+:
off, no neuron block; the smart default is for precompiled models), 0.27 is refused (it model.load()s
the s3 URL), and build-neffs.sh gives docker an absolute neuron-cache directory even when it does not
exist yet (a relative -v source names a docker volume instead)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from lmi_build.planning.plan import BuildPlan
from lmi_build.targets.neuronx.knobs import NeuronxBuild
from tests.cli_process import run_lmi_build
from tests.fixtures_hub import OfflineHub, tiny_model_files
from tests.fixtures_neuronx import write_neuron_model
from tests.fixtures_planning import plan_for

GRAPH = "option.compiled_graph_path=s3://models/tiny-llama-neffs/"
P027, P028, P030, P032 = ("lmi-0.27.0-neuronx-sdk2.18.0", "lmi-0.28.0-neuronx-sdk2.18.2",
                          "lmi-0.30.0-neuronx-sdk2.20.1", "lmi-0.32.0-neuronx-sdk2.21.1")


def _plan(profile: str, *option: str) -> BuildPlan:
    return plan_for("neuronx", model="lmi-test/tiny-llama", tp="2", n_positions=256, profile=profile,
                    option=(GRAPH, *option))


@pytest.fixture
def hub_model(offline_hub: OfflineHub) -> None:
    offline_hub.add_repo("lmi-test/tiny-llama", {**tiny_model_files(), "tokenizer.json": b"{}"})


@pytest.mark.usefixtures("hub_model")
@pytest.mark.parametrize("profile", [P030, P032])
def test_cache_tree_compiles_without_on_device_embedding_on_030_and_newer(profile: str) -> None:
    plan = _plan(profile)
    assert plan.valid, [e.message for e in plan.errors]
    build = plan.knobs(NeuronxBuild)
    assert build.layout == "neuronx-cache" and "on_device_embedding" not in build.neuron_config
    assert build.on_device_embedding is False
    written = _plan(profile, "option.on_device_embedding=true").knobs(NeuronxBuild)  # the container passes it
    assert written.neuron_config.get("on_device_embedding") is True


@pytest.mark.usefixtures("hub_model")
def test_027_refuses_an_s3_compiled_graph_path_and_028_reads_it_as_the_cache() -> None:
    refused = _plan(P027, "option.model_loader=tnx")
    error = next(e for e in refused.errors if e.code == "compiled_graph_path_rejected")
    assert "model_loader.py:273-274, 285-289" in error.message and "base.py:124-126" in error.message
    assert "compiled_graph_path_rejected" not in {e.code for e in _plan(P028).errors}


DOCKER = """#!/bin/sh
# STAND-IN for docker, for lmi-build's tests only (tests/targets/neuronx/test_neuronx_cache_tree.py): it runs nothing.
case "$1" in
  info) echo "Server: STAND-IN" ;;
  image) exit 0 ;;
  run) shift; for arg in "$@"; do printf '%s\\n' "$arg"; done > "$STANDIN_DOCKER_ARGS" ;;
  *) exit 1 ;;
esac
"""


def test_script_bundle_mounts_an_absolute_cache_dir_that_did_not_exist(tmp_path: Path) -> None:
    model = write_neuron_model(tmp_path / "llama")
    bundle = tmp_path / "bundle"
    result = run_lmi_build("neuronx", "--model", str(model), "--tp", "2", "--n-positions", "1024",
                                      "--runner", "script", "--output", str(bundle), "--json")
    assert result.returncode == 0, (result.stdout + result.stderr)
    host_bin = tmp_path / "bin"
    host_bin.mkdir()
    (host_bin / "docker").write_text(DOCKER)
    (host_bin / "docker").chmod(0o755)
    device = tmp_path / "neuron0"
    device.touch()
    record = tmp_path / "docker-args"
    env = {**os.environ, "PATH": f"{host_bin}{os.pathsep}{os.environ['PATH']}", "RUNNER": "docker",
           "NEURON_DOCKER_DEVICES": f"--device={device}", "STANDIN_DOCKER_ARGS": str(record)}
    assert not (bundle / "neuron-cache").exists()
    done = subprocess.run(["sh", "build-neffs.sh"], cwd=bundle, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    args = record.read_text().splitlines()
    mounts = [args[i + 1] for i, arg in enumerate(args) if arg == "-v"]
    assert mounts and all(m.split(":", 1)[0].startswith("/") for m in mounts), shlex.join(mounts)
    cache = next(m.split(":", 1)[0] for m in mounts if m.endswith(":/work/neuron-cache"))
    assert Path(cache) == (bundle / "neuron-cache").resolve() and Path(cache).is_dir()
