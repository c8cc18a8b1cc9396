"""Publish never removes or mixes what it does not own, and S3 verification proves content.

Against the real SeaweedFS server. Each case failed before: ``--overwrite`` to ``s3://b/team``
deleted the artifact at ``s3://b/team/llama``; publishing to a prefix holding a hand upload mixed
the two; an object rewritten with its size and ``x-amz-meta-sha256`` kept passed ``verify``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lmi_build.core.errors import PublishError
from lmi_build.reporting.output import Mode, Output
from lmi_build.storage.build_cache import RemoteBuildCache
from lmi_build.storage.publish import publish, verify_remote
from lmi_build.storage.transfer import SHA256_META
from tests.fixtures_s3 import S3Server, make_artifact

pytestmark = pytest.mark.s3
QUIET = Output(mode=Mode.QUIET)


KEY = "sha256:" + "ab" * 32


def _artifact(root: Path, marker: bytes) -> Path:
    return make_artifact(root, {"config.json": b'{"a": 1}', "weights.safetensors": marker * 1000}, cache_key=KEY)


def _keys(s3: S3Server, bucket: str) -> set[str]:
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {item["Key"] for page in pages for item in page.get("Contents", [])}


def test_overwrite_never_deletes_an_artifact_below_the_prefix(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    publish(_artifact(tmp_path / "llama", b"L"), f"s3://{s3_bucket}/team/llama", output=QUIET)
    before = _keys(s3_env, s3_bucket)
    with pytest.raises(PublishError, match="another artifact below it"):
        publish(_artifact(tmp_path / "team", b"T"), f"s3://{s3_bucket}/team", output=QUIET, overwrite=True)
    assert _keys(s3_env, s3_bucket) == before
    assert verify_remote(f"s3://{s3_bucket}/team/llama") == []


@pytest.mark.parametrize("overwrite", [False, True])
def test_hand_uploaded_objects_are_never_mixed_or_deleted(tmp_path: Path, s3_env: S3Server, s3_bucket: str,
                                                          overwrite: bool) -> None:
    client = s3_env.client()
    client.put_object(Bucket=s3_bucket, Key="models/x/pytorch_model.bin", Body=b"someone else's model")
    with pytest.raises(PublishError, match="belong to no lmi-build artifact"):
        publish(_artifact(tmp_path / "a", b"A"), f"s3://{s3_bucket}/models/x", output=QUIET, overwrite=overwrite)
    assert _keys(s3_env, s3_bucket) == {"models/x/pytorch_model.bin"}


def test_overwrite_replaces_exactly_the_old_artifact(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/m"
    old = make_artifact(tmp_path / "v1", {"config.json": b"{}", "old-only.bin": b"old"})
    publish(old, url, output=QUIET)
    with pytest.raises(PublishError, match="different artifact"):
        publish(_artifact(tmp_path / "v2", b"2"), url, output=QUIET)
    publish(_artifact(tmp_path / "v2", b"2"), url, output=QUIET, overwrite=True)
    assert _keys(s3_env, s3_bucket) == {"m/config.json", "m/weights.safetensors", "m/lmi-build.json"}
    assert verify_remote(url) == []


def test_verify_hashes_content_not_the_recorded_checksum(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/t"
    publish(_artifact(tmp_path / "a", b"A"), url, output=QUIET)
    client = s3_env.client()
    key = "t/weights.safetensors"
    head = client.head_object(Bucket=s3_bucket, Key=key)
    # Same size, same x-amz-meta-sha256, other bytes.
    client.put_object(Bucket=s3_bucket, Key=key, Body=b"B" * 1000, Metadata={SHA256_META: head["Metadata"][SHA256_META]})
    problems = verify_remote(url)
    assert [p.code for p in problems] == ["remote_content"], problems
    assert key in problems[0].message


def test_a_tampered_shared_cache_entry_is_a_miss(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    from lmi_build.artifact.manifest import load_manifest

    artifact = _artifact(tmp_path / "a", b"A")
    key = load_manifest(artifact).cache_key
    cache = RemoteBuildCache(f"s3://{s3_bucket}/cache", output=QUIET)
    entry = cache.store(key, artifact)
    assert cache.lookup(key) == entry
    client = s3_env.client()
    weights = entry.url.removeprefix(f"s3://{s3_bucket}/") + "/weights.safetensors"
    sha = client.head_object(Bucket=s3_bucket, Key=weights)["Metadata"][SHA256_META]
    client.put_object(Bucket=s3_bucket, Key=weights, Body=b"X" * 1000, Metadata={SHA256_META: sha})
    assert cache.lookup(key) is None


@pytest.mark.parametrize("attempt", ["..", "a/b", "../../other", ""])
def test_a_cache_pointer_naming_another_place_is_a_miss(tmp_path: Path, s3_env: S3Server, s3_bucket: str,
                                                        attempt: str) -> None:
    import json

    from lmi_build.artifact.manifest import load_manifest
    from lmi_build.storage.build_cache import cache_digest

    artifact = _artifact(tmp_path / "a", b"A")
    key = load_manifest(artifact).cache_key
    cache = RemoteBuildCache(f"s3://{s3_bucket}/cache", output=QUIET)
    s3_env.client().put_object(Bucket=s3_bucket, Key=f"cache/{cache_digest(key)}/entry.json",
                               Body=json.dumps({"attempt": attempt, "cache_key": key}).encode())
    assert cache.lookup(key) is None
