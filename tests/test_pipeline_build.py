"""End to end through the CLI: plan -> fetch -> steps -> artifact -> cache, on the demo models.

Quantization and conversion are real (torch, transformers, ModelOpt on CPU). Only the vendor
engine compiler is replaced, in the tests that say so, by ``tests/standins/trtllm-build``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lmi_build.artifact.manifest import load_manifest
from tests.cli_process import run_lmi_build
from tests.paths import STANDINS_DIR

STANDINS = STANDINS_DIR
PROFILE = "lmi-0.33.0-trtllm-0.21.0"
pytestmark = pytest.mark.slow


def lmi_build(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_lmi_build(*args, env={**os.environ, **(env or {})}, cwd=cwd, timeout=600)


def as_json(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.stdout.strip(), result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def no_gpu_path() -> str:
    """PATH without any trtllm-build / nvidia-smi of this host (the tests decide what exists)."""
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not (Path(p) / "trtllm-build").exists() and not (Path(p) / "nvidia-smi").exists())


def test_hf_build_then_cache_hit(tmp_path: Path) -> None:
    # A cache of its own: the session's cache may already hold this plan's artifact (another test
    # file on the same worker built it), and the first build here must be a real one.
    cache = {"LMI_BUILD_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "artifact"
    first = lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(out), "--json", env=cache)
    assert first.returncode == 0, first.stderr
    built = as_json(first)
    assert built["status"] == "artifact"
    manifest = load_manifest(out)
    assert manifest.target == "hf" and manifest.cache_key == built["cache_key"]
    assert (out / "tokenizer.json").is_file() and (out / "serving.properties").is_file()
    assert lmi_build("verify", str(out), env=cache).returncode == 0

    again = lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(tmp_path / "second"), "--json", env=cache)
    assert again.returncode == 0, again.stderr
    assert as_json(again)["status"] == "cached"
    assert load_manifest(tmp_path / "second").content_digest == manifest.content_digest

    # A build-relevant change is a different cache key: never a stale artifact.
    bf16 = lmi_build("hf", "--model", "demo:tiny-llama", "--dtype", "bf16", "--output", str(tmp_path / "bf16"),
                     "--json", env=cache)
    assert bf16.returncode == 0, bf16.stderr
    result = as_json(bf16)
    assert result["status"] == "artifact" and result["cache_key"] != built["cache_key"]
    config = json.loads((tmp_path / "bf16" / "config.json").read_text())
    assert config.get("torch_dtype", config.get("dtype")) == "bfloat16"


def test_existing_output_is_refused_and_kept(tmp_path: Path) -> None:
    out = tmp_path / "artifact"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(out), "--no-cache")
    assert result.returncode == 1
    assert "not empty" in result.stderr and "Traceback" not in result.stderr
    assert (out / "keep.txt").read_text() == "mine"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no staging or work dir left behind"


def test_invalid_plan_builds_nothing(tmp_path: Path) -> None:
    out = tmp_path / "artifact"
    result = lmi_build("trtllm", "--model", "demo:tiny-llama", "--tp", "3", "--output", str(out), "--json")
    assert result.returncode == 2
    plan = as_json(result)
    assert plan["valid"] is False and any(e["code"] == "tp_heads" for e in plan["errors"])
    assert not out.exists()


def test_trtllm_until_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "ckpt"
    result = lmi_build("trtllm", "--model", "demo:tiny-mistral", "--tp", "2", "--until", "checkpoint",
                       "--output", str(out), "--json")
    assert result.returncode == 0, result.stderr
    assert as_json(result)["status"] == "checkpoint"
    config = json.loads((out / "config.json").read_text())
    assert config["mapping"]["tp_size"] == 2 and config["architecture"] == "MistralForCausalLM"
    assert sorted(p.name for p in out.glob("rank*.safetensors")) == ["rank0.safetensors", "rank1.safetensors"]


def test_trtllm_without_toolchain_stops_after_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "ckpt"
    result = lmi_build("trtllm", "--model", "demo:tiny-llama", "--output", str(out), "--json",
                       env={"PATH": no_gpu_path()})
    assert result.returncode == 3, result.stderr
    outcome = as_json(result)
    assert outcome["status"] == "checkpoint"
    assert "trtllm-build not found" in outcome["message"]
    assert outcome["message"].startswith("stopped after the TensorRT-LLM checkpoint")  # converted here: it is there
    # The finishing command executes the saved plan (issue "the plan is the contract"), not re-typed flags.
    assert "--checkpoint" in outcome["next_command"] and f"--plan {out}/plan.json" in outcome["next_command"]
    assert (out / "rank0.safetensors").is_file()


def test_trtllm_script_runner_writes_checkpoint_and_script(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    result = lmi_build("trtllm", "--model", "demo:tiny-llama", "--runner", "script", "--profile", PROFILE,
                       "--output", str(out), "--json")
    assert result.returncode == 0, result.stderr
    assert as_json(result)["status"] == "script"
    script = out / "build-engines.sh"
    text = script.read_text()
    assert os.access(script, os.X_OK) and "trtllm-build" in text and "--checkpoint_dir /work/checkpoint" in text
    assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0
    assert (out / "checkpoint" / "rank0.safetensors").is_file()
    assert json.loads((out / "plan.json").read_text())["plan"]["toolchain"]["profile"] == PROFILE


@pytest.mark.s3
def test_trtllm_with_standin_engine_build(tmp_path: Path, s3_bucket: str) -> None:
    """The whole trtllm pipeline, the engine compiler being the STAND-IN: the artifact says so."""
    env = {"PATH": f"{STANDINS}{os.pathsep}{no_gpu_path()}", "STANDIN_TRTLLM_VERSION": "0.21.0rc1"}
    profile_version = lmi_build("profiles", "show", PROFILE, "--json")
    env["STANDIN_TRTLLM_VERSION"] = json.loads(profile_version.stdout)["tensorrt_llm"]
    out = tmp_path / "artifact"
    result = lmi_build("trtllm", "--model", "demo:tiny-llama", "--profile", PROFILE, "--output", str(out),
                       "--json", env=env)
    assert result.returncode == 0, result.stderr
    outcome = as_json(result)
    assert outcome["status"] == "artifact" and outcome["stand_in"] is True
    assert "STAND-IN" in outcome["message"]
    manifest = load_manifest(out)
    assert manifest.toolchain.found.get("stand_in") == "true"
    assert manifest.hardware.gpu_sm == "sm90"
    assert (out / "rank0.engine").is_file() and (out / "tokenizer.json").is_file()
    assert (out / "build-logs" / "engine.log").is_file()
    # verify: intact and complete (a warning says stand-in), never servable on a serving target.
    intact = lmi_build("verify", str(out), "--json")
    assert intact.returncode == 0 and [w["code"] for w in as_json(intact)["warnings"]] == ["stand_in"]
    report = as_json(lmi_build("verify", str(out), "--gpu", "sm90", "--json"))
    assert [e["code"] for e in report["errors"]] == ["stand_in"]
    wrong_gpu = lmi_build("verify", str(out), "--gpu", "sm80", "--json")
    assert wrong_gpu.returncode == 2
    assert {e["code"] for e in as_json(wrong_gpu)["errors"]} >= {"stand_in"}
    assert "sm80" in wrong_gpu.stdout and "sm90" in wrong_gpu.stdout

    # Stand-in engines are never cached and never published.
    again = lmi_build("trtllm", "--model", "demo:tiny-llama", "--profile", PROFILE, "--output",
                      str(tmp_path / "again"), "--json", "--publish", f"s3://{s3_bucket}/x", env=env)
    assert again.returncode != 0 and "STAND-IN" in again.stderr and "Traceback" not in again.stderr


@pytest.mark.s3
def test_hf_build_publish_and_pull(tmp_path: Path, s3_bucket: str) -> None:
    """Build, publish to a real S3-compatible server (SeaweedFS), pull back: byte-identical."""
    url = f"s3://{s3_bucket}/tiny-llama/"
    out = tmp_path / "artifact"
    built = lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(out), "--publish", url, "--json")
    assert built.returncode == 0, built.stderr
    assert as_json(built)["published"]["objects"] >= 5
    pulled = lmi_build("pull", url, str(tmp_path / "copy"))
    assert pulled.returncode == 0, pulled.stderr
    for path in out.rglob("*"):
        if path.is_file():
            assert (tmp_path / "copy" / path.relative_to(out)).read_bytes() == path.read_bytes()


def test_publish_target_is_checked_before_building(tmp_path: Path) -> None:
    out = tmp_path / "artifact"
    result = lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(out), "--no-cache",
                       "--publish", "s3://lmi-build-missing/x", "--endpoint-url", "http://127.0.0.1:9",
                       env={"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_trtllm_smoothquant_checkpoint_with_user_calibration_data(tmp_path: Path) -> None:
    calib = tmp_path / "prompts.jsonl"
    calib.write_text("\n".join(json.dumps({"text": f"Sample {i}: the quick brown fox jumps over the lazy dog."})
                               for i in range(8)) + "\n")
    out = tmp_path / "ckpt"
    result = lmi_build("trtllm", "--model", "demo:tiny-llama", "--dtype", "bf16", "--quantize", "smoothquant",
                       "--calib-data", str(calib), "-o", "calib_size=4", "-o", "calib_max_seq_len=32",
                       "--until", "checkpoint", "--output", str(out), "--json")
    assert result.returncode == 0, result.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"]["quant_algo"] == "W8A8_SQ_PER_CHANNEL" and config["dtype"] == "bfloat16"
    plan = as_json(lmi_build("plan", "trtllm", "--model", "demo:tiny-llama", "--dtype", "bf16", "--quantize",
                             "smoothquant", "--calib-data", str(calib), "-o", "calib_size=4", "--json"))
    assert plan["quantization"]["calibration"]["dataset"] == "file:prompts.jsonl"
    assert not any(w["code"] == "unknown_option" for w in plan["warnings"])


def test_trtllm_step_timeout_kills_the_tool_and_leaves_nothing(tmp_path: Path) -> None:
    """STAND-IN trtllm-build that hangs: --step-timeout kills it, one-line error, no output dir."""
    env = {"PATH": f"{STANDINS}{os.pathsep}{no_gpu_path()}", "STANDIN_MODE": "hang",
           "STANDIN_TRTLLM_VERSION": json.loads(lmi_build("profiles", "show", PROFILE, "--json").stdout)["tensorrt_llm"]}
    out = tmp_path / "artifact"
    result = lmi_build("trtllm", "--model", "demo:tiny-llama", "--profile", PROFILE, "--output", str(out),
                       "--step-timeout", "3", "--no-cache", env=env)
    assert result.returncode == 1
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "timed out after 3s" in error[0] and "Traceback" not in result.stderr
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "work dir removed"


def test_existing_checkpoint_is_reused_by_script_and_toolchain_stop(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    made = lmi_build("trtllm", "--model", "demo:tiny-llama", "--until", "checkpoint", "--output", str(ckpt))
    assert made.returncode == 0, made.stderr

    # --runner script with --checkpoint: the bundle is self-contained (checkpoint inside it).
    bundle = tmp_path / "bundle"
    scripted = lmi_build("trtllm", "--model", "demo:tiny-llama", "--checkpoint", str(ckpt), "--runner", "script",
                         "--output", str(bundle), "--json")
    assert scripted.returncode == 0, scripted.stderr
    assert (bundle / "checkpoint" / "rank0.safetensors").read_bytes() == (ckpt / "rank0.safetensors").read_bytes()
    assert (ckpt / "rank0.safetensors").is_file(), "the user's checkpoint is left in place"

    # No toolchain: the user's checkpoint stays where it is (nothing is copied), --output gets only the
    # saved plan, and the finishing command runs that plan on the user's checkpoint.
    out = tmp_path / "engine"
    stopped = lmi_build("trtllm", "--model", "demo:tiny-llama", "--checkpoint", str(ckpt), "--output", str(out),
                        "--json", env={"PATH": no_gpu_path()})
    assert stopped.returncode == 3, stopped.stderr
    outcome = as_json(stopped)
    assert outcome["output"] == str(out) and f"--checkpoint {ckpt}" in outcome["next_command"]
    assert sorted(p.name for p in out.iterdir()) == ["plan.json"]
    assert f"--plan {out}/plan.json" in outcome["next_command"]
