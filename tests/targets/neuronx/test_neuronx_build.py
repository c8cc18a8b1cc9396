"""``lmi-build neuronx`` through the shared runners, with the Neuron SDK stand-in
(tests/standins/neuron-python): it compiles nothing, and the artifact says so everywhere."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lmi_build.artifact.manifest import load_manifest
from lmi_build.runners import docker_argv
from lmi_build.targets.neuronx.profiles import get_profile
from lmi_build.targets.neuronx.steps import compile_step, host_neuron_devices, neuronx_paths
from tests.cli_process import run_lmi_build
from tests.fixtures_hub import OfflineHub, tiny_model_files
from tests.fixtures_neuronx import STANDIN_PYTHON, write_neuron_model

ARGS = ["--tp", "2", "--n-positions", "4096", "--context-length-estimate", "256,512,1024,2048"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The real console entry (one-line errors, exit codes), in a child process."""
    return run_lmi_build("neuronx", *args, timeout=300)


def _run(*args: str) -> tuple[int, str]:
    done = _cli(*args)
    return done.returncode, done.stdout + done.stderr


def _verify(artifact: Path, *extra: str) -> dict[str, object]:
    result = run_lmi_build("verify", str(artifact), "--json", *extra)
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_standin_build_packages_the_tnx_layout_and_is_marked(tmp_path: Path,
                                                            neuron_standin: Callable[..., None]) -> None:
    neuron_standin()
    model = write_neuron_model(tmp_path / "llama")
    out = tmp_path / "out"
    code, output = _run("--model", str(model), *ARGS, "--output", str(out))
    assert code == 0, output
    assert "STAND-IN" in output and "removed unusable compile-cache entry" in output
    neffs = sorted((out / "compiled").glob("*.neff"))
    assert len(neffs) == 4  # one per context bucket
    neuron = json.loads((out / "config.json").read_text())["neuron"]
    assert neuron == {"auto_cast_type": "f16", "batch_size": 1, "checkpoint_id": None, "checkpoint_revision": None,
                      "compiler_type": "neuronx-cc", "compiler_version": "2.15.141.0", "num_cores": 2,
                      "sequence_length": 4096}
    assert "option.n_positions=4096" in (out / "serving.properties").read_text()
    manifest = load_manifest(out)
    assert manifest.layout == "neuronx-tnx"
    assert manifest.toolchain.found == {"neuronx_cc": "2.15.141.0", "stand_in": "true"}
    assert manifest.plan["build"]["compiler_flags"].endswith("--model-type=transformer --auto-cast=none")
    assert {f.path for f in manifest.files} >= {f"compiled/{p.name}" for p in neffs}  # each NEFF hashed
    plain = _verify(out)
    assert plain["valid"] is True
    served = _verify(out, "--for-container", "lmi-0.30.0-neuronx-sdk2.20.1")
    assert served["valid"] is False
    assert any(e["code"] == "stand_in" for e in served["errors"])  # type: ignore[union-attr, index]
    # Never cached: the same build again compiles again instead of restoring the stand-in's output.
    again = tmp_path / "again"
    done = _cli("--model", str(model), *ARGS, "--output", str(again), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "artifact"


def test_compile_failure_leaves_nothing(tmp_path: Path, neuron_standin: Callable[..., None]) -> None:
    neuron_standin("fail")
    out = tmp_path / "out"
    code, output = _run("--model", str(write_neuron_model(tmp_path / "llama")), *ARGS, "--output", str(out))
    assert code != 0
    assert "compile" in output and "Traceback" not in output
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no work directory left


def test_timeout_kills_the_compile(tmp_path: Path, neuron_standin: Callable[..., None]) -> None:
    neuron_standin("hang")
    start = time.monotonic()
    code, output = _run("--model", str(write_neuron_model(tmp_path / "llama")), *ARGS, "--step-timeout", "2",
                        "--output", str(tmp_path / "out"))
    assert code != 0 and "Traceback" not in output
    assert time.monotonic() - start < 60


def test_local_without_the_sdk_is_refused_before_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LMI_BUILD_NEURON_PYTHON", raising=False)  # lmi-build's own python: no Neuron SDK
    code, output = _run("--model", str(write_neuron_model(tmp_path / "llama")), *ARGS, "--output", str(tmp_path / "o"))
    assert code == 1
    assert "--runner local needs the Neuron SDK" in output and "--runner docker" in output
    assert len(output.strip().splitlines()) == 1


def test_local_with_another_compiler_is_refused(tmp_path: Path, neuron_standin: Callable[..., None]) -> None:
    neuron_standin(neuronx_cc="2.16.372.0")
    code, output = _run("--model", str(write_neuron_model(tmp_path / "llama")), *ARGS, "--output", str(tmp_path / "o"))
    assert code == 1
    assert "neuronx-cc 2.16.372.0 here" in output and "2.15.141.0" in output


def test_docker_needs_a_published_image(tmp_path: Path) -> None:
    code, output = _run("--model", str(write_neuron_model(tmp_path / "llama")), *ARGS, "--runner", "docker",
                        "--profile", "lmi-0.33.0-neuronx-sdk2.21.1", "--output", str(tmp_path / "o"))
    assert code == 1 and "no published container image" in output


def test_split_and_non_tnx_loader_layouts_are_refused_not_faked(tmp_path: Path) -> None:
    """Refused at plan time, the build's own verdict (exit 2, the plan's error; issue 32 item 3)."""
    model = write_neuron_model(tmp_path / "llama")
    # 0.26 (TNX with rolling batch): its split partition is not reproduced; its optimum class is DJL's own.
    code, output = _run("--model", str(model), "--tp", "2", "--max-batch-size", "4", "--profile",
                        "lmi-0.26.0-neuronx-sdk2.16.0", "--output", str(tmp_path / "o"))
    assert code == 2 and "error: [neuron_unbuilt]" in output and "another neuron block" in output
    code, output = _run("--model", str(model), "--tp", "2", "--profile", "lmi-0.26.0-neuronx-sdk2.16.0",
                        "--output", str(tmp_path / "o"))
    assert code == 2 and "NeuronXModelAdapter" in output
    code, output = _run("--model", str(model), *ARGS, "--profile", "lmi-0.33.0-neuronx-sdk2.21.1",
                        "--option", "option.model_loader=nxdi", "--output", str(tmp_path / "o"))
    assert code == 2 and "error: [neuron_unbuilt]" in output and "nxdi loader" in output
    assert "internal wheel (djl-serving PR #2688)" in output and "cannot reproduce it exactly" in output
    # model_loader=vllm is vLLM's loader only under rolling_batch=vllm, where vLLM compiles at start-up.
    code, output = _run("--model", str(model), *ARGS, "--option", "option.model_loader=vllm", "--option",
                        "option.rolling_batch=vllm", "--max-batch-size", "4", "--output", str(tmp_path / "o"))
    assert code == 2 and "error: [neuron_loader_compiles]" in output and "validate_partition_model_loader" in output
    assert not (tmp_path / "o").exists()


def test_standin_build_packages_the_028_legacy_layout(tmp_path: Path, neuron_standin: Callable[..., None]) -> None:
    neuron_standin(neuronx_cc="2.13.72.0")
    model = write_neuron_model(tmp_path / "llama")
    out = tmp_path / "out"
    code, output = _run("--model", str(model), *ARGS, "--profile", "lmi-0.28.0-neuronx-sdk2.18.2",
                        "--output", str(out))
    assert code == 0, output
    assert sorted(p.name for p in (out / "checkpoint").iterdir()) == ["config.json", "model.safetensors"]
    assert len(list((out / "compiled").glob("*.neff"))) == 4
    assert (out / "compiled" / "VERSION").read_text() == "2.13.72.0"
    assert not list((out / "compiled").glob("*.safetensors"))  # no presharded weights in 0.28/0.29
    assert not list(out.glob("*.safetensors"))  # DJL would otherwise compile the directory as a plain model
    assert json.loads((out / "config.json").read_text())["neuron"]["compiler_version"] == "2.13.72.0"
    manifest = load_manifest(out)
    assert manifest.layout == "neuronx-legacy" and manifest.toolchain.found["stand_in"] == "true"
    assert "on_device_embedding" not in manifest.plan["build"]["neuron_config"]  # 0.28 does not set it
    assert _verify(out)["valid"] is True
    served = _verify(out, "--for-container", "lmi-0.28.0-neuronx-sdk2.18.2")
    assert [e["code"] for e in served["errors"]] == ["stand_in"]  # type: ignore[attr-defined]
    # Weights at the top level are named: the container would compile them instead.
    (out / "model.safetensors").write_bytes((out / "checkpoint" / "model.safetensors").read_bytes())
    assert "neuron_top_level_weights" in {e["code"] for e in _verify(out)["errors"]}  # type: ignore[union-attr, index]


def test_docker_without_neuron_devices_is_refused(tmp_path: Path) -> None:
    code, output = _run("--model", str(write_neuron_model(tmp_path / "llama")), *ARGS, "--runner", "docker",
                        "--output", str(tmp_path / "o"))
    assert code == 1 and "Neuron devices (/dev/neuron*)" in output  # this host has none


def test_docker_runner_devices_mounts_and_image(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("neuron1", "neuron0", "null"):
        (dev / name).touch()
    devices = host_neuron_devices(dev)
    assert devices == (f"--device={dev}/neuron0", f"--device={dev}/neuron1")
    paths = neuronx_paths(driver=tmp_path / "driver", model=tmp_path / "model", compiled=tmp_path / "compiled",
                          cache=tmp_path / "cache")
    argv = docker_argv(compile_step("python3"), paths, "djl-inference:0.30.0-neuronx-sdk2.20.1", workers=1,
                       devices=devices)
    assert "--gpus" not in argv and argv[3:5] == list(devices)
    assert f"{tmp_path / 'model'}:/work/model:ro" in argv and f"{tmp_path / 'compiled'}:/work/compiled" in argv
    image = argv.index("djl-inference:0.30.0-neuronx-sdk2.20.1")
    assert argv[image + 1:] == ["python3", "/work/driver/lmi_neuronx_compile.py", "--kwargs",
                                "/work/driver/compile.json", "--model", "/work/model", "--output", "/work/compiled",
                                "--cache", "/work/neuron-cache"]


def test_script_bundle_runs_and_its_finish_command_packages(tmp_path: Path) -> None:
    model = write_neuron_model(tmp_path / "llama")
    bundle = tmp_path / "bundle"
    result = run_lmi_build("neuronx", "--model", str(model), *ARGS, "--runner", "script",
                                      "--output", str(bundle), "--json")
    assert result.returncode == 0, (result.stdout + result.stderr)
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "script"
    assert {p.name for p in bundle.iterdir()} == {"build-neffs.sh", "plan.json", "driver", "model"}
    spec = json.loads((bundle / "driver" / "compile.json").read_text())
    assert spec["tnx_kwargs"]["context_length_estimate"] == [256, 512, 1024, 2048]
    # Run it as printed, on a "Neuron host" whose python3 is the stand-in.
    host_bin = tmp_path / "bin"
    host_bin.mkdir()
    wrapper = host_bin / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(STANDIN_PYTHON))} "$@"\n')
    wrapper.chmod(0o755)
    run_script, package = outcome["next_command"].rsplit(" && ", 1)
    env = {**os.environ, "PATH": f"{host_bin}{os.pathsep}{os.environ['PATH']}", "RUNNER": "local",
           "NEURON_DOCKER_DEVICES": f"--device={tmp_path / 'no-such-neuron0'}"}
    # No Neuron device: the script's host check stops it before the compile, naming the device and the fix.
    refused = subprocess.run(run_script, shell=True, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 1 and "[STAND-IN]" not in refused.stdout
    assert "missing  the Neuron devices" in refused.stdout and "fix: run on an inf2/trn1 host" in refused.stdout
    assert not (bundle / "compiled").exists()
    device = tmp_path / "neuron0"  # a stand-in for /dev/neuron0: the check only asks that it exists
    device.touch()
    env["NEURON_DOCKER_DEVICES"] = f"--device={device}"
    done = subprocess.run(run_script, shell=True, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "ok       the Neuron devices" in done.stdout and "ok       the model directory MODEL_DIR" in done.stdout
    assert "[STAND-IN]" in done.stdout
    argv = shlex.split(package)
    assert argv[:2] == ["lmi-build", "neuronx"]
    # NEFFs from another compiler are refused, naming both versions; nothing is written.
    version = bundle / "compiled" / "VERSION"
    version.write_text("2.16.372.0")
    code, output = _run(*argv[2:])
    assert code == 1 and "neuronx-cc 2.16.372.0, lmi-0.30.0-neuronx-sdk2.20.1 has 2.15.141.0" in output
    assert not Path(argv[argv.index("--output") + 1]).exists()
    version.write_text("2.15.141.0")
    packaged = run_lmi_build(*argv[1:])
    assert packaged.returncode == 0, (packaged.stdout + packaged.stderr)
    artifact = Path(argv[argv.index("--output") + 1])
    assert load_manifest(artifact).toolchain.found["stand_in"] == "true"
    assert _verify(artifact)["valid"] is True


def test_cache_tree_layout_for_an_s3_compiled_graph_path(tmp_path: Path, neuron_standin: Callable[..., None],
                                                         offline_hub: OfflineHub) -> None:
    neuron_standin()
    offline_hub.add_repo("lmi-test/tiny-llama", {**tiny_model_files(), "tokenizer.json": b"{}"})
    out = tmp_path / "cache-artifact"
    graph = "s3://models/tiny-llama-neffs/"
    code, output = _run("--model", "lmi-test/tiny-llama", "--tp", "2", "--n-positions", "256",
                        "--option", f"option.compiled_graph_path={graph}", "--output", str(out))
    assert code == 0, output
    modules = sorted(out.glob("neuronxcc-2.15.141.0/MODULE_*"))
    assert modules and all((m / "model.neff").is_file() and (m / "model.done").is_file() for m in modules)
    assert all(m.name.endswith("+ede6753c") for m in modules)  # the container's flags string
    assert not (out / "compiled").exists() and not (out / "config.json").exists()
    properties = (out / "serving.properties").read_text()
    assert "option.model_id=lmi-test/tiny-llama" in properties
    assert f"option.compiled_graph_path={graph}" in properties
    assert load_manifest(out).layout == "neuronx-cache"
    assert _verify(out)["valid"] is True


def test_local_compiled_graph_path_and_local_models_are_plan_errors(tmp_path: Path) -> None:
    model = write_neuron_model(tmp_path / "llama")
    code, output = _run("--model", str(model), *ARGS, "--option", "option.compiled_graph_path=/opt/ml/neffs",
                        "--output", str(tmp_path / "o"))
    assert code == 2 and "is a local directory" in output
    code, output = _run("--model", str(model), *ARGS, "--option", "option.compiled_graph_path=s3://b/p/",
                        "--output", str(tmp_path / "o"))
    assert code == 2 and "not a model the container can fetch" in output


@pytest.mark.parametrize(
    ("profile", "options", "neuronx_cc"),
    [("lmi-0.27.0-neuronx-sdk2.18.0", (), "2.13.68.0"),  # 0.27's default loader for llama with rolling batch
     ("lmi-0.30.0-neuronx-sdk2.20.1", ("option.model_loader=optimum", "option.partition_schema=optimum"),
      "2.15.141.0")],
)
def test_standin_build_packages_the_optimum_export(tmp_path: Path, neuron_standin: Callable[..., None],
                                                   profile: str, options: tuple[str, ...], neuronx_cc: str) -> None:
    neuron_standin(neuronx_cc=neuronx_cc, optimum_neuron=get_profile(profile).optimum_neuron)
    model = write_neuron_model(tmp_path / "llama")
    out = tmp_path / "out"
    flags = [arg for option in options for arg in ("--option", option)]
    code, output = _run("--model", str(model), "--tp", "2", "--n-positions", "2048", "--max-batch-size", "4",
                        "--profile", profile, *flags, "--output", str(out))
    assert code == 0, output
    manifest = load_manifest(out)
    assert manifest.layout == "neuronx-optimum" and manifest.plan["build"]["loader"] == "optimum"
    assert manifest.plan["build"]["optimum_kwargs"] == {"export": True, "num_cores": 2, "auto_cast_type": "f16",
                                                        "task": "text-generation", "batch_size": 4,
                                                        "sequence_length": 2048}
    neuron = json.loads((out / "config.json").read_text())["neuron"]
    assert (neuron["batch_size"], neuron["num_cores"], neuron["sequence_length"]) == (4, 2, 2048)
    assert neuron["compiler_version"] == neuronx_cc == manifest.toolchain.found["neuronx_cc"]
    assert list((out / "compiled").glob("*.neff")) and list((out / "checkpoint").glob("*.safetensors"))
    properties = (out / "serving.properties").read_text()
    assert "option.max_rolling_batch_size=4" in properties and "option.n_positions=2048" in properties
    assert _verify(out)["valid"] is True
    # DJL compares the block with serving.properties before loading: a different batch is named.
    (out / "serving.properties").write_text(properties.replace("max_rolling_batch_size=4", "max_rolling_batch_size=8"))
    errors = _verify(out)["errors"]
    assert any("batch_size=4" in e["message"] and "=8" in e["message"] for e in errors)  # type: ignore[attr-defined]


def test_local_optimum_export_needs_the_profiles_optimum_neuron(tmp_path: Path,
                                                               neuron_standin: Callable[..., None]) -> None:
    neuron_standin(neuronx_cc="2.13.68.0", optimum_neuron="0.0.24")
    code, output = _run("--model", str(write_neuron_model(tmp_path / "llama")), "--tp", "2", "--max-batch-size", "4",
                        "--profile", "lmi-0.27.0-neuronx-sdk2.18.0", "--output", str(tmp_path / "o"))
    assert code == 1 and "optimum-neuron 0.0.24 here" in output and "0.0.20" in output


def test_standin_build_packages_the_027_split_layout(tmp_path: Path, neuron_standin: Callable[..., None]) -> None:
    """0.27 loads llama without rolling batch with TNX, from checkpoint/ in TNX's split format."""
    neuron_standin(neuronx_cc="2.13.68.0")
    model = write_neuron_model(tmp_path / "llama")
    out = tmp_path / "out"
    code, output = _run("--model", str(model), *ARGS, "--profile", "lmi-0.27.0-neuronx-sdk2.18.0",
                        "--output", str(out))
    assert code == 0, output
    manifest = load_manifest(out)
    assert manifest.layout == "neuronx-split" and manifest.plan["build"]["loader"] == "tnx"
    assert manifest.plan["build"]["split_class"] == "llama.model.LlamaForSampling"
    assert (out / "checkpoint" / "pytorch_model.bin" / "key_to_filename.json").is_file()
    assert len(list((out / "compiled").glob("*.neff"))) == 4 and not list(out.glob("*.safetensors"))
    assert _verify(out)["valid"] is True
    (out / "checkpoint" / "pytorch_model.bin" / "key_to_filename.json").unlink()
    assert "neuron_checkpoint" in {e["code"] for e in _verify(out)["errors"]}  # type: ignore[attr-defined]
