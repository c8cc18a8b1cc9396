"""Publishing and pulling against a real SeaweedFS under hostile conditions: never silently replace,
never follow a link, refuse stand-ins, fail read-only credentials before the build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures_s3 import S3Server
from tests.hostile import World, make_world

pytestmark = pytest.mark.s3


@pytest.fixture
def world(tmp_path: Path, s3_env: S3Server) -> World:
    made = make_world(tmp_path)
    # The server's real credentials are secrets of this world too: they must never be shown.
    made.secrets = {**s3_env.env()}
    made.secrets = {k: v for k, v in made.secrets.items() if k == "AWS_SECRET_ACCESS_KEY"}
    made.env = s3_env.env()
    return made


def _build(world: World, name: str, *extra: str) -> Path:
    result = world.run("hf", "--model", "./model", "--output", name, "--no-cache", *extra)
    assert result.returncode == 0, result.stderr
    return world.cwd / name


def _keys(s3_env: S3Server, bucket: str, prefix: str) -> set[str]:
    listing = s3_env.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {item["Key"] for item in listing.get("Contents", [])}


def test_publishing_over_a_different_artifact_is_refused(world: World, s3_bucket: str, s3_env: S3Server) -> None:
    first = _build(world, "a")
    second = _build(world, "b", "-o", "option.max_rolling_batch_size=16")
    url = f"s3://{s3_bucket}/model"
    assert world.run("publish", str(first), url).returncode == 0
    manifest_before = s3_env.client().get_object(Bucket=s3_bucket, Key="model/lmi-build.json")["Body"].read()
    before = world.snapshot()
    result = world.run("publish", str(second), url)
    world.expect(result, code=1, before=before, says="different artifact")
    after = s3_env.client().get_object(Bucket=s3_bucket, Key="model/lmi-build.json")["Body"].read()
    assert after == manifest_before, "the published artifact is untouched"


def test_overwrite_commits_then_removes_stale_objects(world: World, s3_bucket: str, s3_env: S3Server) -> None:
    first = _build(world, "a")
    (first / "extra.txt").write_text("only in the first artifact\n")
    # re-manifest the first artifact with its extra file, as a different artifact
    from lmi_build.artifact.files import list_files
    from lmi_build.artifact.manifest import load_manifest, write_manifest
    from lmi_build.core.hashing import tree_digest

    manifest = load_manifest(first)
    entries = list_files(first)
    write_manifest(first, manifest.model_copy(update={
        "files": entries, "total_bytes": sum(e.size for e in entries),
        "content_digest": tree_digest((e.path, e.sha256) for e in entries)}))
    second = _build(world, "b")
    url = f"s3://{s3_bucket}/model"
    assert world.run("publish", str(first), url).returncode == 0
    assert "model/extra.txt" in _keys(s3_env, s3_bucket, "model/")
    result = world.run("publish", str(second), url, "--overwrite")
    assert result.returncode == 0, result.stderr
    assert "model/extra.txt" not in _keys(s3_env, s3_bucket, "model/"), "stale object removed"
    verified = world.run("verify", url, "--json")
    assert verified.returncode == 0, verified.stdout


def test_verify_flags_objects_the_manifest_does_not_list(world: World, s3_bucket: str, s3_env: S3Server) -> None:
    artifact = _build(world, "a")
    url = f"s3://{s3_bucket}/model"
    assert world.run("publish", str(artifact), url).returncode == 0
    s3_env.client().put_object(Bucket=s3_bucket, Key="model/planted.bin", Body=b"not listed")
    result = world.run("verify", url, "--json")
    assert result.returncode == 2
    codes = [e["code"] for e in json.loads(result.stdout)["errors"]]
    assert "remote_unlisted" in codes and "planted.bin" in result.stdout


def test_standalone_publish_refuses_a_stand_in_artifact(world: World, s3_bucket: str, s3_env: S3Server) -> None:
    artifact = _build(world, "a")
    from lmi_build.artifact.manifest import load_manifest, write_manifest

    manifest = load_manifest(artifact)
    toolchain = manifest.toolchain.model_copy(update={"found": {**manifest.toolchain.found, "stand_in": "true"}})
    write_manifest(artifact, manifest.model_copy(update={"toolchain": toolchain}))
    before = world.snapshot()
    result = world.run("publish", str(artifact), f"s3://{s3_bucket}/model")
    world.expect(result, code=1, before=before, says="STAND-IN")
    assert not _keys(s3_env, s3_bucket, "model/")


@pytest.mark.parametrize("where", ["dir", "file", "delete-local"])
def test_publish_refuses_symbolic_links(world: World, s3_bucket: str, s3_env: S3Server, where: str) -> None:
    artifact = _build(world, "a")
    target = artifact
    args: list[str] = []
    if where in ("dir", "delete-local"):
        target = world.cwd / "alias"
        target.symlink_to(artifact)
        args = ["--delete-local"] if where == "delete-local" else []
    else:
        (artifact / "tokenizer_config.json").rename(world.root / "moved.json")
        (artifact / "tokenizer_config.json").symlink_to(world.root / "moved.json")
    before = world.snapshot()
    result = world.run("publish", str(target), f"s3://{s3_bucket}/model", *args)
    world.expect(result, code=1, before=before, says="symbolic link")
    assert not _keys(s3_env, s3_bucket, "model/")


def test_read_only_credentials_fail_before_the_build(world: World, s3_bucket: str, s3_env: S3Server) -> None:
    before = world.snapshot()
    result = world.run("hf", "--model", "./model", "--output", "out", "--no-cache", "--publish",
                       f"s3://{s3_bucket}/model", env=s3_env.env(reader=True))
    world.expect(result, code=1, before=before)
    assert not (world.cwd / "out").exists(), "nothing was built"
    assert "access denied" in result.error_lines[0].lower()


def test_symlinked_pull_destination_is_refused(world: World, s3_bucket: str, s3_env: S3Server) -> None:
    artifact = _build(world, "a")
    url = f"s3://{s3_bucket}/model"
    assert world.run("publish", str(artifact), url).returncode == 0
    (world.root / "elsewhere").mkdir()
    (world.cwd / "dest").symlink_to(world.root / "elsewhere")
    before = world.snapshot()
    result = world.run("pull", url, "dest")
    world.expect(result, code=1, before=before, says="symbolic link")


@pytest.mark.parametrize("dest", ["afile/sub", "model", "."])
def test_pull_into_a_bad_destination_is_one_line(world: World, s3_bucket: str, s3_env: S3Server, dest: str) -> None:
    artifact = _build(world, "a")
    url = f"s3://{s3_bucket}/model"
    assert world.run("publish", str(artifact), url).returncode == 0
    (world.cwd / "afile").write_text("a file\n")
    before = world.snapshot()
    result = world.run("pull", url, dest)
    world.expect(result, code=1, before=before)


def _multipart_put(client: object, bucket: str, key: str, data: bytes) -> None:
    """An object without a whole-object checksum (multipart ETag "<md5>-1"), as large uploads are."""
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)  # type: ignore[attr-defined]
    part = client.upload_part(Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1,  # type: ignore[attr-defined]
                              Body=data)
    client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload["UploadId"],  # type: ignore[attr-defined]
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})


def test_changed_s3_object_of_the_same_size_is_not_reused(world: World, s3_bucket: str, s3_env: S3Server) -> None:
    client = s3_env.client()
    for path in world.model.iterdir():
        if path.name != "model.safetensors":
            client.put_object(Bucket=s3_bucket, Key=f"m/{path.name}", Body=path.read_bytes())
    weights = (world.model / "model.safetensors").read_bytes()
    _multipart_put(client, s3_bucket, "m/model.safetensors", weights)
    first = world.run("hf", "--model", f"s3://{s3_bucket}/m", "--output", "a", "--json")
    assert first.returncode == 0, first.stderr
    # Same size, other bytes (the tensor data changes, the header stays valid).
    changed = weights[:-16] + bytes(16)
    assert len(changed) == len(weights) and changed != weights
    _multipart_put(client, s3_bucket, "m/model.safetensors", changed)
    second = world.run("hf", "--model", f"s3://{s3_bucket}/m", "--output", "b", "--json")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["status"] == "artifact", "not the stale cached artifact"
    assert json.loads(first.stdout)["cache_key"] != json.loads(second.stdout)["cache_key"]
    assert (world.cwd / "b" / "model.safetensors").read_bytes() == changed, "not the stale mirror"


# ---- 1 and 8: a hostile tarball is refused, bounded by the manifest, and leaves nothing ----

def _tar_gz(members: dict[str, bytes]) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _replace_tarball(s3_env: S3Server, bucket: str, prefix: str, body: bytes) -> None:
    """Put a hostile model.tar.gz and record its sha256 on the manifest object, as a hostile
    publisher would: the archive's own checksum then matches and only its content can be judged."""
    import hashlib

    client = s3_env.client()
    client.put_object(Bucket=bucket, Key=f"{prefix}/model.tar.gz", Body=body)
    manifest = client.get_object(Bucket=bucket, Key=f"{prefix}/lmi-build.json")
    metadata = {**manifest["Metadata"], "tarball-sha256": hashlib.sha256(body).hexdigest()}
    client.put_object(Bucket=bucket, Key=f"{prefix}/lmi-build.json", Body=manifest["Body"].read(), Metadata=metadata)


HOSTILE_TARBALLS = {
    # 64 MiB of zeros under a listed name: a few KiB compressed, far beyond the listed size.
    "oversized_member": lambda listed: _tar_gz({"config.json": bytes(64 * 1024 * 1024)}),
    "unlisted_member": lambda listed: _tar_gz({"evil.sh": b"#!/bin/sh\n"}),
    "escaping_member": lambda listed: _tar_gz({"../escaped.txt": b"out\n"}),
    "not_gzip": lambda listed: b"not a gzip stream at all" * 100,
    "truncated": lambda listed: _tar_gz(listed)[:200],
}


@pytest.mark.parametrize("case", list(HOSTILE_TARBALLS))
def test_hostile_tarball_pull_is_one_line_and_leaves_nothing(world: World, s3_bucket: str, s3_env: S3Server,
                                                             case: str) -> None:
    artifact = _build(world, "a")
    url = f"s3://{s3_bucket}/tarred"
    published = world.run("publish", str(artifact), url, "--tarball")
    assert published.returncode == 0, published.stderr
    listed = {p.name: p.read_bytes() for p in artifact.iterdir() if p.is_file()}
    _replace_tarball(s3_env, s3_bucket, "tarred", HOSTILE_TARBALLS[case](listed))
    before = world.snapshot()
    result = world.run("pull", url, "dest")
    world.expect(result, code=1, before=before)
    assert not (world.cwd / "dest").exists()
    assert not (world.root / "escaped.txt").exists() and not (world.cwd / "escaped.txt").exists()


def _rehash_consistently(artifact: Path, *, edit_record: bool) -> tuple[bytes, bytes]:
    """The attack: turn on trust_remote_code in serving.properties and write its new hash (and the
    manifest's content digest) into the manifest, optionally its record of the values too."""
    import hashlib

    from lmi_build.core.hashing import tree_digest

    properties = artifact / "serving.properties"
    text = properties.read_bytes() + b"option.trust_remote_code=true\n"
    properties.chmod(0o644)
    properties.write_bytes(text)
    manifest = json.loads((artifact / "lmi-build.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == "serving.properties":
            entry.update(size=len(text), sha256=hashlib.sha256(text).hexdigest())
    manifest["content_digest"] = tree_digest((e["path"], e["sha256"]) for e in manifest["files"])
    if edit_record:
        manifest["serving_properties"]["option.trust_remote_code"] = "true"
    encoded = json.dumps(manifest, indent=2).encode()
    (artifact / "lmi-build.json").write_bytes(encoded)
    return text, encoded


@pytest.mark.parametrize("edit_record, code", [(False, "serving_properties_edited"),
                                               (True, "trust_remote_code_edited")])
def test_a_consistent_rehash_of_serving_properties_does_not_verify(
        world: World, s3_bucket: str, s3_env: S3Server, edit_record: bool, code: str) -> None:
    import hashlib

    from lmi_build.storage.transfer import SHA256_META

    artifact = _build(world, "a")
    url = f"s3://{s3_bucket}/model"
    assert world.run("publish", str(artifact), url).returncode == 0
    properties, manifest = _rehash_consistently(artifact, edit_record=edit_record)
    local = world.run("verify", str(artifact), "--json")
    assert local.returncode == 2 and code in [e["code"] for e in json.loads(local.stdout)["errors"]], local.stdout
    # The same edit made to the published objects, their recorded checksums kept consistent.
    client = s3_env.client()
    for key, body in (("model/serving.properties", properties), ("model/lmi-build.json", manifest)):
        client.put_object(Bucket=s3_bucket, Key=key, Body=body,
                          Metadata={SHA256_META: hashlib.sha256(body).hexdigest()})
    remote = world.run("verify", url, "--json")
    assert remote.returncode == 2 and code in [e["code"] for e in json.loads(remote.stdout)["errors"]], remote.stdout


def test_publish_without_overwrite_never_replaces_a_hand_upload(world: World, s3_bucket: str,
                                                                 s3_env: S3Server) -> None:
    """A prefix holding a hand-uploaded model (objects, no manifest) at the artifact's own keys: without
    --overwrite nothing is replaced (issue 32 item 10); with it, the publish replaces them."""
    artifact = _build(world, "a")
    client = s3_env.client()
    hand = {"model/config.json": b'{"hand": "uploaded"}\n', "model/model.safetensors": b"hand-uploaded weights"}
    for key, body in hand.items():
        client.put_object(Bucket=s3_bucket, Key=key, Body=body)
    url = f"s3://{s3_bucket}/model"
    before = world.snapshot()
    result = world.run("publish", str(artifact), url)
    world.expect(result, code=1, before=before, says="already holds")
    assert "--overwrite" in result.error_lines[0]
    for key, body in hand.items():
        assert client.get_object(Bucket=s3_bucket, Key=key)["Body"].read() == body, f"{key} was replaced"
    assert _keys(s3_env, s3_bucket, "model/") == set(hand), "nothing was written"
    assert world.run("publish", str(artifact), url, "--overwrite").returncode == 0
    assert world.run("verify", url).returncode == 0


def test_publish_resumes_over_its_own_unfinished_upload(world: World, s3_bucket: str, s3_env: S3Server) -> None:
    """The refusal is for other content only: objects an interrupted publish of this artifact left
    (no manifest yet) are kept and skipped, without --overwrite."""
    artifact = _build(world, "a")
    url = f"s3://{s3_bucket}/model"
    assert world.run("publish", str(artifact), url).returncode == 0
    s3_env.client().delete_object(Bucket=s3_bucket, Key="model/lmi-build.json")  # killed before the commit
    result = world.run("publish", str(artifact), url, "--json")
    assert result.returncode == 0, result.stderr
    assert world.run("verify", url).returncode == 0
