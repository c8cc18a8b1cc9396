"""verify and inspect of a published artifact on a real S3-compatible server (SeaweedFS)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_process import run_lmi_build
from tests.fixtures_s3 import S3Server

pytestmark = pytest.mark.s3


def test_verify_and_inspect_s3(hf_artifact: Path, s3_bucket: str) -> None:
    from lmi_build.storage.publish import publish

    url = f"s3://{s3_bucket}/models/tiny-llama/hf"
    publish(hf_artifact, url)

    result = run_lmi_build("verify", url, "--gpu", "sm80", "--json")
    assert result.returncode == 0, (result.stdout + result.stderr)
    report = json.loads(result.stdout)
    assert report["valid"] is True and report["artifact"]["location"] == url
    assert report["artifact"]["files"] == len(list(hf_artifact.iterdir())) - 1

    info = json.loads(run_lmi_build("inspect", url, "--json").stdout)
    assert info["from"]["id"] == "tiny-org/tiny-llama" and info["what"]["layout"] == "hf"

    missing = run_lmi_build("verify", f"s3://{s3_bucket}/models/nothing-here", "--json")
    assert missing.returncode == 2
    assert "no lmi-build.json" in json.loads(missing.stdout)["errors"][0]["message"]


def test_verify_s3_detects_a_replaced_object(hf_artifact: Path, s3_bucket: str, s3_env: S3Server) -> None:
    from lmi_build.storage.publish import publish

    url = f"s3://{s3_bucket}/tampered"
    publish(hf_artifact, url)
    client = s3_env.client()
    client.put_object(Bucket=s3_bucket, Key="tampered/tokenizer.json", Body=b"{}")
    result = run_lmi_build("verify", url, "--json")
    assert result.returncode == 2
    errors = json.loads(result.stdout)["errors"]
    assert any("tokenizer.json" in error["message"] for error in errors)
