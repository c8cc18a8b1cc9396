"""Every route whose checkpoint is converted by TensorRT-LLM's own scripts (in the container), driven
end to end to a packaged artifact through the CLI: local runner, script bundle (run as printed with
RUNNER=local), and the exit-3 stop's finishing command. The vendor scripts and trtllm-build are the
STAND-INs of tests/standins (they say so, and the artifacts are marked stand-in); the demo models,
the planner, the runners and the packager are real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lmi_build.artifact.manifest import load_manifest
from lmi_build.runners import docker_argv
from lmi_build.targets.trtllm.profiles import get_profile
from lmi_build.targets.trtllm.steps import plan_steps, trtllm_paths
from tests.cli_process import run_lmi_build
from tests.fixtures_trtllm import STANDINS, TrtllmPlanner, standin_examples

pytestmark = pytest.mark.slow
FLAT = "lmi-0.33.0-trtllm-0.21.0"
TOOLKIT = "lmi-0.30.0-trtllm-0.12.0"
LEGACY = "lmi-0.26.0-trtllm-0.7.1"


def _host_path(*, gpu: bool) -> str:
    """PATH with this venv's python3 first; with ``gpu`` the trtllm-build/nvidia-smi stand-ins too."""
    keep = [p for p in os.environ["PATH"].split(os.pathsep)
            if not (Path(p) / "trtllm-build").exists() and not (Path(p) / "nvidia-smi").exists()]
    return os.pathsep.join([*([str(STANDINS)] if gpu else []), str(Path(sys.executable).parent), *keep])


def _env(profile: str, *, gpu: bool = True) -> dict[str, str]:
    return {**os.environ, "PATH": _host_path(gpu=gpu), "STANDIN_TRTLLM_VERSION": get_profile(profile).tensorrt_llm}


def lmi_build(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_lmi_build(*args, env=env, cwd=cwd, timeout=600)


def _outcome(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stdout.strip(), result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _assert_stand_in_artifact(out: Path, profile: str) -> None:
    manifest = load_manifest(out)
    assert manifest.toolchain.found.get("stand_in") == "true"
    assert manifest.toolchain.profile == profile
    properties = (out / "serving.properties").read_text()
    assert "engine=" in properties and "option.tensor_parallel_degree=1" in properties


@pytest.mark.parametrize(("model", "profile", "flags", "engine_file"), [
    ("demo:tiny-gpt2", FLAT, (), "rank0.engine"),  # gpt: examples/models/core/gpt/convert_checkpoint.py
    ("demo:tiny-llama", LEGACY, (), "tensorrt_llm/1/llama_float16_tp1_rank0.engine"),  # 0.7.1 build.py
    ("demo:tiny-llama", LEGACY, ("--quantize", "smoothquant"),  # hf_llama_convert.py -> build.py --ft_model_dir
     "tensorrt_llm/1/llama_float16_tp1_rank0.engine"),
    ("demo:tiny-llama", TOOLKIT, ("--quantize", "smoothquant", "--option", "smoothquant_per_token=true",
                                  "--option", "smoothquant_per_channel=true"),  # convert_checkpoint --per_token
     "tensorrt_llm/1/rank0.engine"),
], ids=["gpt2-flat", "llama-0.7.1", "smoothquant-0.7.1", "smoothquant-per-token-0.12"])
def test_container_conversion_with_the_local_runner(model: str, profile: str, flags: tuple[str, ...],
                                                    engine_file: str, tmp_path: Path) -> None:
    examples = standin_examples(tmp_path / "examples", get_profile(profile).tensorrt_llm)
    out = tmp_path / "artifact"
    result = lmi_build("trtllm", "--model", model, "--profile", profile, "--tp", "1", *flags,
                       "--trtllm-examples", str(examples), "--output", str(out), "--json", env=_env(profile))
    assert result.returncode == 0, result.stderr
    outcome = _outcome(result)
    assert outcome["status"] == "artifact" and outcome["stand_in"] is True
    assert (out / engine_file).is_file()
    logs = (out / "build-logs" / "checkpoint.log").read_text() if (out / "build-logs" / "checkpoint.log").exists() \
        else (out / "build-logs" / "engine.log").read_text()
    assert "[STAND-IN]" in logs
    _assert_stand_in_artifact(out, profile)


def test_script_bundle_runs_as_printed_and_packages(tmp_path: Path) -> None:
    profile = FLAT
    bundle = tmp_path / "bundle"
    result = lmi_build("trtllm", "--model", "demo:tiny-gpt2", "--profile", profile, "--tp", "1", "--runner", "script",
                       "--output", str(bundle), "--json", env=_env(profile, gpu=False))
    assert result.returncode == 0, result.stderr
    outcome = _outcome(result)
    script = (bundle / "build-engines.sh").read_text()
    assert "models/core/gpt/convert_checkpoint.py" in script and "trtllm-build" in script
    assert not (bundle / "checkpoint").exists()  # converted on the GPU host, by the script
    assert "runs examples/models/core/gpt/convert_checkpoint.py of TensorRT-LLM 0.21.0rc1" in outcome["message"]
    assert "TRTLLM_EXAMPLES" in outcome["message"]
    # The model travels in the bundle (hard links where possible) and the script reads it there by
    # default, never from this host's path (issue 24 item 5).
    cache = os.environ.get("LMI_BUILD_CACHE", str(Path.home() / ".cache" / "lmi-build"))  # where the model is here
    assert (bundle / "model" / "config.json").is_file() and any((bundle / "model").glob("*.safetensors"))
    assert 'MODEL_DIR="$BUNDLE_DIR"/model' in script and cache not in script and str(tmp_path) not in script
    # On the "GPU host": the stand-ins on PATH, a TensorRT-LLM checkout where the script expects it.
    standin_examples(bundle / "TensorRT-LLM" / "examples", get_profile(profile).tensorrt_llm)
    gpu_env = {**_env(profile), "RUNNER": "local"}
    finished = subprocess.run(["sh", "-c", outcome["next_command"].replace("lmi-build ", f"{sys.executable} -m lmi_build ")],
                              cwd=bundle, env=gpu_env, capture_output=True, text=True, timeout=600, check=False)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    artifact = tmp_path / "bundle-artifact"
    assert (artifact / "rank0.engine").is_file()
    _assert_stand_in_artifact(artifact, profile)


def test_exit_3_names_the_conversion_and_its_command_finishes_on_a_gpu_host(tmp_path: Path) -> None:
    profile = FLAT
    out = tmp_path / "stopped"
    result = lmi_build("trtllm", "--model", "demo:tiny-gpt2", "--profile", profile, "--tp", "1", "--output", str(out),
                       "--json", env=_env(profile, gpu=False))
    assert result.returncode == 3, result.stderr
    outcome = _outcome(result)
    assert "examples/models/core/gpt/convert_checkpoint.py of TensorRT-LLM 0.21.0rc1" in outcome["message"]
    assert "--trtllm-examples ./TensorRT-LLM/examples" in outcome["next_command"]
    assert sorted(p.name for p in out.iterdir()) == ["plan.json"]
    # Only plan.json was written: no claim of a checkpoint; where the next command runs is said.
    assert "stopped after the TensorRT-LLM checkpoint" not in outcome["message"]
    assert "only plan.json was written" in outcome["message"]
    assert "a GPU host with TensorRT-LLM 0.21.0rc1" in outcome["next_host"]
    assert "--runner docker" in outcome["next_host"] and "--runner script" in outcome["next_host"]
    assert outcome["next_command"].endswith(f"--output {tmp_path / 'stopped-artifact'}")
    host = tmp_path / "gpu-host"
    standin_examples(host / "TensorRT-LLM" / "examples", get_profile(profile).tensorrt_llm)
    # The finishing command run where trtllm-build is missing: exit 3 again, nothing written, and the
    # same command (the same --output, never "stopped-artifact-artifact") is the one to run elsewhere.
    again = subprocess.run(["sh", "-c", outcome["next_command"].replace("lmi-build ", f"{sys.executable} -m lmi_build ")
                            + " --json"], cwd=host, env=_env(profile, gpu=False), capture_output=True, text=True,
                           timeout=600, check=False)
    assert again.returncode == 3, again.stderr
    repeated = _outcome(again)
    assert repeated["next_command"].startswith(f"lmi-build trtllm --plan {out / 'plan.json'} ")
    assert repeated["next_command"].endswith(f"--output {tmp_path / 'stopped-artifact'}")
    assert "artifact-artifact" not in again.stdout
    assert "nothing written" in repeated["message"] and repeated["output"] == str(out)
    assert not (tmp_path / "stopped-artifact").exists()
    finished = subprocess.run(["sh", "-c", outcome["next_command"].replace("lmi-build ", f"{sys.executable} -m lmi_build ")],
                              cwd=host, env=_env(profile), capture_output=True, text=True, timeout=600, check=False)
    assert finished.returncode == 0, finished.stderr
    _assert_stand_in_artifact(tmp_path / "stopped-artifact", profile)


def test_prequantized_gptq_reads_the_single_safetensors_file(tmp_path: Path) -> None:
    """An AutoGPTQ-style model (quantization_config + model.safetensors): the converter is pointed at
    the FILE; the stand-in, like the real one, fails when that file is missing."""
    profile = TOOLKIT
    made = lmi_build("trtllm", "--model", "demo:tiny-llama", "--until", "checkpoint", "--output",
                     str(tmp_path / "unused"), env=_env(profile, gpu=False))
    assert made.returncode == 0, made.stderr  # the demo model is now in the cache
    cache = Path(os.environ.get("LMI_BUILD_CACHE", Path.home() / ".cache" / "lmi-build")) / "demo"
    source = next(p for p in cache.glob("tiny-llama-*") if (p / "model.safetensors").is_file())
    model = tmp_path / "gptq-model"
    shutil.copytree(source, model)
    config = json.loads((model / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}
    (model / "config.json").write_text(json.dumps(config))
    examples = standin_examples(tmp_path / "examples", get_profile(profile).tensorrt_llm)
    out = tmp_path / "artifact"
    result = lmi_build("trtllm", "--model", str(model), "--profile", profile, "--tp", "1", "--trtllm-examples",
                       str(examples), "--output", str(out), "--json", env=_env(profile))
    assert result.returncode == 0, result.stderr
    log = (out / "build-logs" / "checkpoint.log").read_text()
    assert f"--quant_ckpt_path {model}/model.safetensors" in log
    _assert_stand_in_artifact(out, profile)
    (model / "model.safetensors").rename(model / "gptq_model-4bit-128g.safetensors")
    missing = lmi_build("trtllm", "--model", str(model), "--profile", profile, "--tp", "1", "--trtllm-examples",
                        str(examples), "--output", str(tmp_path / "missing"), env=_env(profile))
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    error = [line for line in missing.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "gptq_model-4bit-128g.safetensors" in error[0] and "one model.safetensors" in error[0]


def test_prequantized_gptq_builds_with_0_7_build_py(tmp_path: Path) -> None:
    """Issue 22 finding 9: TensorRT-LLM 0.7.1's build.py takes a pre-quantized GPTQ model (--quant_ckpt_path
    FILE --weight_only_precision int4_gptq --per_group, build.py @80bc0751:143,334); the stand-in build.py,
    like the real one, needs the file."""
    profile = LEGACY
    made = lmi_build("trtllm", "--model", "demo:tiny-llama", "--until", "checkpoint", "--output",
                     str(tmp_path / "unused"), env=_env(profile, gpu=False))
    assert made.returncode == 0, made.stderr
    cache = Path(os.environ.get("LMI_BUILD_CACHE", Path.home() / ".cache" / "lmi-build")) / "demo"
    source = next(p for p in cache.glob("tiny-llama-*") if (p / "model.safetensors").is_file())
    model = tmp_path / "gptq-model"
    shutil.copytree(source, model)
    config = json.loads((model / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": False}
    (model / "config.json").write_text(json.dumps(config))
    examples = standin_examples(tmp_path / "examples", get_profile(profile).tensorrt_llm)
    out = tmp_path / "artifact"
    result = lmi_build("trtllm", "--model", str(model), "--profile", profile, "--tp", "1", "--trtllm-examples",
                       str(examples), "--output", str(out), "--json", env=_env(profile))
    assert result.returncode == 0, result.stderr
    log = (out / "build-logs" / "engine.log").read_text()
    assert f"--quant_ckpt_path {model}/model.safetensors" in log and "--weight_only_precision int4_gptq" in log
    assert "--group_size 64" in log
    _assert_stand_in_artifact(out, profile)


def test_docker_runner_mounts_the_examples_for_the_conversion(trtllm_plan: TrtllmPlanner, tmp_path: Path) -> None:
    plan = trtllm_plan(FLAT, model="openai-community--gpt2", tp="1")
    step = plan_steps(plan, get_profile(FLAT)).steps[0]
    examples = standin_examples(tmp_path / "examples", get_profile(FLAT).tensorrt_llm)
    (tmp_path / "model").mkdir()
    paths = trtllm_paths(model=tmp_path / "model", checkpoint=tmp_path / "ckpt", engine=tmp_path / "engine",
                         examples=examples)
    argv = docker_argv(step, paths, get_profile(FLAT).image, workers=1)
    assert f"{examples.resolve()}:/work/trtllm-examples:ro" in argv
    image_at = argv.index(get_profile(FLAT).image)
    assert argv[image_at + 1:image_at + 3] == ["python3", "/work/trtllm-examples/models/core/gpt/convert_checkpoint.py"]
