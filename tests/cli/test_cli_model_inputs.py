"""Where a build's model comes from on the command line: ``--model s3://...`` with ``--endpoint-url``
(plan and build, against the real SeaweedFS server), and no ``--model`` at all (``option.model_id``
in ``--properties``, or ``HF_MODEL_ID``), as the container takes it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lmi_build.artifact.manifest import load_manifest
from tests.cli_process import run_lmi_build
from tests.fixtures_s3 import S3Server

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    """No S3 endpoint, model or option from the machine: only what the test gives."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPTION_", "HF_", "SM_", "AWS_"))}
    return {**env, **extra}


def lmi_build(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_lmi_build(*args, env=_env(**env), timeout=600)


def as_json(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.fixture
def s3_model(s3_server: S3Server) -> str:
    """The demo tiny Llama (config, tokenizer, safetensors) uploaded under a fresh bucket's prefix."""
    from lmi_build.sources.demo import ensure_demo_model

    model_dir = ensure_demo_model("tiny-llama", with_weights=True)
    bucket = s3_server.new_bucket("model")
    client = s3_server.client()
    for path in sorted(model_dir.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), bucket, f"models/tiny-llama/{path.relative_to(model_dir).as_posix()}")
    return f"s3://{bucket}/models/tiny-llama"


def _credentials(server: S3Server) -> dict[str, str]:
    """The server's credentials, without AWS_ENDPOINT_URL: only --endpoint-url can lead to it."""
    return {k: v for k, v in server.env().items() if k != "AWS_ENDPOINT_URL"}


@pytest.mark.s3
def test_plan_and_build_from_s3_model_with_endpoint_url(s3_model: str, s3_server: S3Server, tmp_path: Path) -> None:
    credentials = _credentials(s3_server)
    planned = as_json(lmi_build("plan", "hf", "--model", s3_model, "--endpoint-url", s3_server.endpoint, "--json",
                                "--save", str(tmp_path / "plan.json"), **credentials))
    assert planned["model"]["kind"] == "s3" and planned["model"]["id"] == s3_model and planned["valid"]

    out = tmp_path / "artifact"
    built = as_json(lmi_build("hf", "--model", s3_model, "--endpoint-url", s3_server.endpoint, "--output", str(out),
                              "--no-cache", "--json", **credentials))
    assert built["status"] == "artifact" and built["cache_key"] == planned["cache_key"]
    manifest = load_manifest(out)
    assert manifest.source.kind == "s3" and manifest.source.id == s3_model
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()

    # The saved plan builds with the endpoint given again (it says where the model is, not what it is).
    again = as_json(lmi_build("hf", "--plan", str(tmp_path / "plan.json"), "--endpoint-url", s3_server.endpoint,
                              "--output", str(tmp_path / "from-plan"), "--no-cache", "--json", **credentials))
    assert again["cache_key"] == planned["cache_key"]

    # Without the flag (and no AWS_ENDPOINT_URL) the planner does not reach this server: one clean error.
    elsewhere = lmi_build("plan", "hf", "--model", s3_model, "--endpoint-url", "http://127.0.0.1:1", "--json",
                          **credentials)
    assert elsewhere.returncode == 1 and json.loads(elsewhere.stdout)["error"]["code"] == "source"


@pytest.mark.s3
def test_build_takes_an_s3_model_id_from_properties(s3_model: str, s3_server: S3Server, tmp_path: Path) -> None:
    properties = tmp_path / "serving.properties"
    properties.write_text(f"option.model_id={s3_model}\n")
    out = tmp_path / "artifact"
    built = as_json(lmi_build("hf", "--properties", str(properties), "--endpoint-url", s3_server.endpoint,
                              "--output", str(out), "--no-cache", "--json", **_credentials(s3_server)))
    assert built["status"] == "artifact" and load_manifest(out).source.id == s3_model


def test_build_without_model_flag_uses_option_model_id_or_hf_model_id(tmp_path: Path) -> None:
    properties = tmp_path / "serving.properties"
    properties.write_text("option.model_id=demo:tiny-llama\noption.max_rolling_batch_size=8\n")
    out = tmp_path / "from-properties"
    built = as_json(lmi_build("hf", "--properties", str(properties), "--output", str(out), "--no-cache", "--json"))
    assert built["status"] == "artifact"
    manifest = load_manifest(out)
    assert manifest.source.kind == "demo" and manifest.source.id == "demo:tiny-llama"
    written = (out / "serving.properties").read_text()
    assert "option.max_rolling_batch_size=8" in written and "option.model_id" not in written

    from_env = tmp_path / "from-env"
    built = as_json(lmi_build("hf", "--output", str(from_env), "--no-cache", "--json", HF_MODEL_ID="demo:tiny-llama"))
    assert load_manifest(from_env).source.id == "demo:tiny-llama"

    checkpoint = as_json(lmi_build("trtllm", "--properties", str(properties), "--tp", "1", "--until", "checkpoint",
                                   "--output", str(tmp_path / "ckpt"), "--no-cache", "--json"))
    assert checkpoint["status"] == "checkpoint" and (tmp_path / "ckpt" / "config.json").is_file()

    none = lmi_build("hf", "--output", str(tmp_path / "none"), "--json")
    assert none.returncode == 1 and json.loads(none.stdout)["error"]["message"] == "no model given"
