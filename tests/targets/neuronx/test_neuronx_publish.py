"""A Neuron artifact through the build's shared S3 cache, publish, pull, inspect and verify, on a
real SeaweedFS server.

No Neuron compile can run here, and stand-in artifacts are never cached or published. So the
compiled directory is TEST DATA this file writes: random bytes under transformers-neuronx's file
names (``<sha256[:20]>.neff``, presharded safetensors, ``config.json`` with
``is_presharded_checkpoint``, ``VERSION`` = the profile's neuronx-cc). It enters through
``--compiled-dir``, the packaging path of a ``build-neffs.sh`` result, and is not a compile: the
test checks storage and layout handling, never what a NEFF contains.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import pytest

from lmi_build.artifact.manifest import load_manifest
from lmi_build.storage.build_cache import RemoteBuildCache
from lmi_build.storage.remote import verify_remote
from tests.fixtures_neuronx import write_neuron_model
from tests.fixtures_s3 import S3Server, tree_bytes
from tests.test_pipeline_build import as_json, lmi_build

pytestmark = [pytest.mark.s3]

ARGS = ["--tp", "2", "--n-positions", "4096", "--context-length-estimate", "256,512,1024,2048"]
PROFILE = "lmi-0.30.0-neuronx-sdk2.20.1"


def _safetensors(path: Path, name: str) -> None:
    data = os.urandom(64)
    header = json.dumps({name: {"dtype": "F16", "shape": [32], "data_offsets": [0, len(data)]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def compiled_test_data(directory: Path, neuronx_cc: str = "2.15.141.0") -> Path:
    """A compiled/ directory shaped like TNX's save(sharded_weights=True) output (test data)."""
    directory.mkdir(parents=True)
    for bucket in (256, 512, 1024, 2048):
        name = hashlib.sha256(f"test data, bucket {bucket}".encode()).hexdigest()[:20]
        (directory / f"{name}.neff").write_bytes(os.urandom(4096))
    _safetensors(directory / "DecoderLMHead.safetensors", "lm_head.weight")
    _safetensors(directory / "decoder_layer_0.safetensors", "layers.0.weight")
    (directory / "config.json").write_text(json.dumps({"model_type": "llama", "is_presharded_checkpoint": True}))
    (directory / "VERSION").write_text(neuronx_cc)
    return directory


def test_neuron_artifact_cache_publish_pull_inspect_verify(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    model = write_neuron_model(tmp_path / "llama")
    compiled = compiled_test_data(tmp_path / "compiled")
    cache = f"s3://{s3_bucket}/lmi-build-cache"
    url = f"s3://{s3_bucket}/models/llama-inf2"
    host_a = {"LMI_BUILD_CACHE": str(tmp_path / "host-a-cache")}
    built = lmi_build("neuronx", "--model", str(model), *ARGS, "--compiled-dir", str(compiled),
                      "--output", str(tmp_path / "a"), "--cache", cache, "--publish", url, "--json", env=host_a)
    assert built.returncode == 0, built.stderr
    result = as_json(built)
    assert result["status"] == "artifact"
    manifest = load_manifest(tmp_path / "a")
    assert manifest.layout == "neuronx-tnx" and "stand_in" not in manifest.toolchain.found
    assert {f"compiled/{p.name}" for p in compiled.glob("*.neff")} <= {f.path for f in manifest.files}
    assert verify_remote(url) == []
    assert RemoteBuildCache(cache).lookup(result["cache_key"]) is not None

    pulled = tmp_path / "pulled"
    done = lmi_build("pull", url, str(pulled), "--json")
    assert done.returncode == 0, done.stderr
    assert tree_bytes(pulled) == tree_bytes(tmp_path / "a")
    verified = lmi_build("verify", str(pulled), "--for-container", PROFILE, "--json")
    assert as_json(verified)["valid"] is True, verified.stdout
    inspected = lmi_build("inspect", url, "--json")
    assert inspected.returncode == 0, inspected.stderr
    assert '"neuronx-tnx"' in inspected.stdout and "2.15.141.0" in inspected.stdout

    # Another host reuses the shared cache entry instead of packaging again.
    host_b = {"LMI_BUILD_CACHE": str(tmp_path / "host-b-cache")}
    reused = lmi_build("neuronx", "--model", str(model), *ARGS, "--compiled-dir", str(compiled),
                       "--output", str(tmp_path / "b"), "--cache", cache, "--json", env=host_b)
    assert reused.returncode == 0, reused.stderr
    assert as_json(reused)["status"] == "cached"
    assert load_manifest(tmp_path / "b").content_digest == manifest.content_digest


def test_a_pulled_artifact_from_another_compiler_fails_verify(s3_env: S3Server, s3_bucket: str,
                                                             tmp_path: Path) -> None:
    """verify names both sides when the published NEFFs' compiler is not the serving container's."""
    model = write_neuron_model(tmp_path / "llama")
    url = f"s3://{s3_bucket}/models/llama-inf2"
    built = lmi_build("neuronx", "--model", str(model), *ARGS, "--compiled-dir",
                      str(compiled_test_data(tmp_path / "compiled")), "--output", str(tmp_path / "a"),
                      "--publish", url, "--json")
    assert built.returncode == 0, built.stderr
    assert lmi_build("pull", url, str(tmp_path / "pulled")).returncode == 0
    verified = as_json(lmi_build("verify", str(tmp_path / "pulled"), "--for-container",
                                 "lmi-0.33.0-neuronx-sdk2.21.1", "--json"))
    assert verified["valid"] is False
    messages = " ".join(e["message"] for e in verified["errors"])
    assert "2.15.141.0" in messages and "2.16.372.0" in messages
