"""Models stored under an S3 prefix, against the real SeaweedFS server."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lmi_build.core.errors import SourceError
from lmi_build.core.hashing import tree_digest
from lmi_build.sources.resolve import resolve_source
from tests.fixtures_hub import tiny_model_files
from tests.fixtures_s3 import S3Server

pytestmark = pytest.mark.s3


def _upload(server: S3Server, bucket: str, prefix: str, files: dict[str, bytes]) -> None:
    client = server.client()
    for rel, data in files.items():
        client.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=data)


def test_s3_model_downloads_verifies_and_resumes(s3_env: S3Server, s3_bucket: str) -> None:
    files = tiny_model_files(pickle_too=True)
    _upload(s3_env, s3_bucket, "models/tiny", files)
    url = f"s3://{s3_bucket}/models/tiny"
    planned = resolve_source(url, purpose="plan")
    assert sorted(p.name for p in planned.path.iterdir()) == ["config.json", "generation_config.json",
                                                              "tokenizer_config.json"]
    built = resolve_source(url, purpose="build")
    assert built.identity == planned.identity and built.identity.id == url
    build_files = ["config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"]
    # Single-part uploads: the MD5 ETag is the checksum the digest and the verification use.
    assert built.identity.digest == tree_digest((r, "md5:" + hashlib.md5(files[r]).hexdigest()) for r in build_files)
    for rel in build_files:
        assert (built.path / rel).read_bytes() == files[rel]
    assert not (built.path / "pytorch_model.bin").exists()

    weights = built.path / "model.safetensors"
    inode = weights.stat().st_ino
    resolve_source(url, purpose="build")
    assert weights.stat().st_ino == inode, "a verified file must not be downloaded again"
    # A damaged local copy (same size) is replaced.
    weights.write_bytes(b"\0" * len(files["model.safetensors"]))
    resolve_source(url, purpose="build")
    assert weights.read_bytes() == files["model.safetensors"]


def test_s3_source_errors(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"no config\.json"):
        resolve_source(f"s3://{s3_bucket}/empty", purpose="plan")
    with pytest.raises(SourceError, match="does not exist"):
        resolve_source("s3://no-such-bucket-abc/m", purpose="plan")
    _upload(s3_env, s3_bucket, "old", tiny_model_files(pickle_too=True, with_weights=False))
    with pytest.raises(SourceError, match="pickle"):
        resolve_source(f"s3://{s3_bucket}/old", purpose="build")
    with pytest.raises(SourceError, match="cannot connect"):
        resolve_source(f"s3://{s3_bucket}/old", purpose="plan", endpoint_url="http://127.0.0.1:9")


def test_path_escape_is_refused() -> None:
    from lmi_build.storage.paths import safe_relpath

    for bad in ("../x", "a/../../x", "/etc/passwd", "a//b", "C:\\x", "a\\..\\b", ""):
        with pytest.raises(SourceError, match="escape"):
            safe_relpath(bad, error=SourceError, where="test")
    assert safe_relpath("a/b.safetensors", error=SourceError, where="test") == "a/b.safetensors"
