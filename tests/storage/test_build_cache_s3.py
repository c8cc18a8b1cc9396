"""The shared S3 build cache (``--cache s3://...``) on a real SeaweedFS, with real demo-model builds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmi_build.artifact.manifest import load_manifest
from lmi_build.storage.build_cache import ENTRY_NAME, RemoteBuildCache, cache_digest
from lmi_build.storage.publish import publish
from lmi_build.storage.remote import verify_remote
from tests.fixtures_s3 import S3Server, make_artifact
from tests.test_pipeline_build import as_json, lmi_build

pytestmark = [pytest.mark.s3]


def _artifact_with_key(root: Path, key: str, payload: bytes) -> Path:
    """A real artifact directory whose manifest carries ``key`` (what a build of that plan writes)."""
    import json

    from lmi_build.artifact.files import MANIFEST_NAME

    make_artifact(root, {"config.json": b"{}", "model.safetensors": payload})
    manifest = json.loads((root / MANIFEST_NAME).read_text())
    manifest["cache_key"] = key
    (root / MANIFEST_NAME).write_text(json.dumps(manifest))
    return root


KEY = "sha256:" + "ab" * 32


def test_store_lookup_and_server_side_publish(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    cache = RemoteBuildCache(f"s3://{s3_bucket}/cache")
    assert cache.lookup(KEY) is None
    entry = cache.store(KEY, _artifact_with_key(tmp_path / "a", KEY, b"weights-a"))
    assert cache.lookup(KEY) == entry
    assert verify_remote(entry.url) == []

    copied = cache.copy_to(entry, f"s3://{s3_bucket}/published/model")
    assert copied == 2  # both files, then the manifest last
    assert verify_remote(f"s3://{s3_bucket}/published/model") == []
    assert cache.copy_to(entry, f"s3://{s3_bucket}/published/model") == 0  # already there: nothing copied


def test_copy_replaces_an_artifact_of_more_than_a_thousand_objects(s3_env: S3Server, s3_bucket: str,
                                                                  tmp_path: Path) -> None:
    # DeleteObjects takes at most 1000 keys a request; SeaweedFS, like S3, refuses a longer list
    # whole (InvalidArgument) and deletes nothing, so the replaced objects go in batches.
    target = f"s3://{s3_bucket}/published/model"
    old_files = {f"shards/{i:04d}.bin": b"%d" % i for i in range(1001)}
    publish(make_artifact(tmp_path / "old", old_files), target)
    cache = RemoteBuildCache(f"s3://{s3_bucket}/cache")
    entry = cache.store(KEY, _artifact_with_key(tmp_path / "new", KEY, b"weights"))
    keys_per_request: list[int] = []

    def count_keys(params: dict[str, Any], **_: Any) -> None:
        keys_per_request.append(len(params["Delete"]["Objects"]))

    cache.client.meta.events.register("before-parameter-build.s3.DeleteObjects", count_keys)
    assert cache.copy_to(entry, target, overwrite=True) == 2
    assert keys_per_request == [1000, 1]
    left = s3_env.client().list_objects_v2(Bucket=s3_bucket, Prefix="published/model/")
    assert sorted(o["Key"].rsplit("/", 1)[1] for o in left["Contents"]) == \
        ["config.json", "lmi-build.json", "model.safetensors"]
    assert verify_remote(target) == []


def test_concurrent_builders_first_commit_wins(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    first = RemoteBuildCache(f"s3://{s3_bucket}/cache")
    second = RemoteBuildCache(f"s3://{s3_bucket}/cache")
    won = first.store(KEY, _artifact_with_key(tmp_path / "a", KEY, b"built on host a"))
    # Host b finished the same key later (different bytes: builds are not reproducible).
    reused = second.store(KEY, _artifact_with_key(tmp_path / "b", KEY, b"built on host b, later"))
    assert reused == won
    client = s3_env.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket, Prefix="cache/")["Contents"]]
    attempts = {key.split("/")[2] for key in keys if not key.endswith(ENTRY_NAME)}
    assert attempts == {won.url.rsplit("/", 1)[1]}, "the loser's never-committed attempt is removed"


def test_corrupted_entry_is_a_miss(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    cache = RemoteBuildCache(f"s3://{s3_bucket}/cache")
    entry = cache.store(KEY, _artifact_with_key(tmp_path / "a", KEY, b"weights"))
    prefix = entry.url.removeprefix(f"s3://{s3_bucket}/")
    s3_env.client().put_object(Bucket=s3_bucket, Key=f"{prefix}/model.safetensors", Body=b"tampered")
    assert cache.lookup(KEY) is None
    fresh = cache.store(KEY, _artifact_with_key(tmp_path / "b", KEY, b"weights again"))
    assert fresh != entry and cache.lookup(KEY) == fresh


@pytest.mark.slow
def test_cli_build_reuses_another_hosts_entry(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    cache = f"s3://{s3_bucket}/lmi-build-cache"
    # Two "hosts": separate local caches, the same S3 cache.
    host_a = {"LMI_BUILD_CACHE": str(tmp_path / "host-a-cache")}
    host_b = {"LMI_BUILD_CACHE": str(tmp_path / "host-b-cache")}
    built = lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(tmp_path / "a"), "--cache", cache,
                      "--json", env=host_a)
    assert built.returncode == 0, built.stderr
    key = as_json(built)["cache_key"]
    assert RemoteBuildCache(cache).lookup(key) is not None

    reused = lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(tmp_path / "b"), "--cache", cache,
                       "--publish", f"s3://{s3_bucket}/models/tiny", "--json", env=host_b)
    assert reused.returncode == 0, reused.stderr
    result = as_json(reused)
    assert result["status"] == "cached" and "shared cache" in result["message"]
    assert result["published"]["copied_from"].startswith(f"{cache}/{cache_digest(key)}/")
    assert load_manifest(tmp_path / "b").content_digest == load_manifest(tmp_path / "a").content_digest
    assert verify_remote(f"s3://{s3_bucket}/models/tiny") == []
