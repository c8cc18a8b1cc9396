"""publish / pull against a real SeaweedFS server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from lmi_build.artifact.files import MANIFEST_NAME
from lmi_build.core.errors import LmiBuildError, PublishError, VerifyError
from lmi_build.reporting.events import SCHEMA_PATH
from lmi_build.reporting.output import Mode, Output
from lmi_build.storage.publish import publish, remote_manifest, verify_remote
from lmi_build.storage.pull import pull
from lmi_build.storage.transfer import PART_SIZE, delete_keys
from tests.cli_process import run_lmi_build, run_lmi_build_process
from tests.fixtures_s3 import S3Server, make_artifact, tree_bytes

pytestmark = pytest.mark.s3
QUIET = Output(mode=Mode.QUIET)
EVENTS_SCHEMA = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def _files(count: int = 4, size: int = 100_000) -> dict[str, bytes]:
    files = {f"weights/rank{i}.safetensors": os.urandom(size) for i in range(count)}
    files["config.json"] = b'{"architecture": "LlamaForCausalLM"}'
    files["tokenizer.json"] = b'{"version": "1.0"}'
    return files


def test_round_trip_is_byte_identical_and_republish_skips(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    # One file above the multipart threshold exercises per-part SHA-256 checksums as well.
    files = {**_files(), "big.safetensors": os.urandom(PART_SIZE + 1234)}
    artifact = make_artifact(tmp_path / "art", files)
    url = f"s3://{s3_bucket}/models/a"
    first = publish(artifact, url, output=QUIET)
    assert first.objects == len(files) + 1 and first.skipped == 0
    assert first.bytes >= sum(len(v) for v in files.values())
    assert verify_remote(url) == []
    manifest = remote_manifest(url)
    assert manifest is not None and {f.path for f in manifest.files} == set(files)

    again = publish(artifact, url, output=QUIET)
    assert (again.objects, again.bytes, again.skipped) == (0, 0, len(files) + 1)

    dest = tmp_path / "pulled"
    summary = pull(url, dest, output=QUIET)
    assert tree_bytes(dest) == tree_bytes(artifact)
    assert summary.objects == len(files) + 1
    assert not list(tmp_path.glob(".pulled*")), "the partial directory must be renamed away"
    # Pulling again into the same place verifies and transfers nothing.
    assert pull(url, dest, output=QUIET).objects == 0


def test_a_republish_counts_what_it_skipped_as_its_summary_does(tmp_path: Path, s3_env: S3Server,
                                                                  s3_bucket: str) -> None:
    """Issue 30 item 6: a republish said "7 of 7 objects already in place, skipped", then "published 0
    objects ..., skipped 8" (the manifest counted in one and not the other)."""
    files = _files()
    artifact = make_artifact(tmp_path / "art", files)
    url = f"s3://{s3_bucket}/recount"
    published = tmp_path / "publish.jsonl"
    assert run_lmi_build("publish", str(artifact), url, "--events", str(published)).returncode == 0
    again = run_lmi_build("publish", str(artifact), url)
    assert again.returncode == 0, again.stderr
    objects = len(files) + 1  # and the manifest
    said = again.stdout + again.stderr
    assert f"{objects} of {objects} objects already in place" in said and f"skipped {objects}," in said, said
    # Issue 40: the transfers' events (bytes done of the total), read back against their schema.
    pulled = tmp_path / "pull.jsonl"
    assert run_lmi_build("pull", url, str(tmp_path / "copy"), "--events", str(pulled)).returncode == 0
    payload = sum(len(data) for data in files.values())
    for path in (published, pulled):
        text = path.read_text(encoding="utf-8")
        assert os.environ["AWS_SECRET_ACCESS_KEY"] not in text
        found = [json.loads(line) for line in text.splitlines()]
        for event in found:
            jsonschema.validate(event, EVENTS_SCHEMA)
        final = [event for event in found if event["type"] == "bytes" and event["final"]]
        assert final and sum(event["done"] for event in final) >= payload, found
        assert all(event["done"] == event["total"] for event in final), final
        assert found[-1]["type"] == "result" and found[-1]["exit_code"] == 0


def test_changed_artifact_uncommits_then_replaces(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/m"
    files = _files()
    publish(make_artifact(tmp_path / "v1", files), url, output=QUIET)
    files["weights/rank0.safetensors"] = os.urandom(100_000)
    with pytest.raises(PublishError, match="different artifact"):  # issue 12: never silently replaced
        publish(make_artifact(tmp_path / "v2", files), url, output=QUIET)
    changed = publish(tmp_path / "v2", url, output=QUIET, overwrite=True)
    assert changed.objects == 2  # the changed shard and the new manifest
    pull(url, tmp_path / "out", output=QUIET)
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "v2")


def test_killed_publish_leaves_no_manifest_and_rerun_completes(tmp_path: Path, s3_env: S3Server,
                                                               s3_bucket: str) -> None:
    files = {f"shard{i:02d}.safetensors": os.urandom(512 * 1024) for i in range(16)}
    artifact = make_artifact(tmp_path / "art", files)
    url = f"s3://{s3_bucket}/killed"
    env = {**os.environ, "LMI_BUILD_S3_MAX_BANDWIDTH": str(1024 * 1024)}  # ~8 s for the whole artifact
    proc = subprocess.Popen([sys.executable, "-m", "lmi_build", "publish", str(artifact), url, "--workers", "1",
                             "--quiet"], env=env, start_new_session=True)
    client = s3_env.client()
    deadline = time.monotonic() + 60
    uploaded: list[str] = []
    while time.monotonic() < deadline and len(uploaded) < 3:
        time.sleep(0.1)
        uploaded = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket, Prefix="killed/").get("Contents", [])]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert 3 <= len(uploaded) < len(files), uploaded
    assert "killed/" + MANIFEST_NAME not in uploaded
    assert remote_manifest(url) is None
    assert [m.code for m in verify_remote(url)] == ["remote_manifest_missing"]
    with pytest.raises(PublishError, match="incomplete"):
        pull(url, tmp_path / "early", output=QUIET)

    rerun = publish(artifact, url, output=QUIET)
    assert rerun.skipped >= 3 and rerun.objects == len(files) + 1 - rerun.skipped
    pull(url, tmp_path / "out", output=QUIET)
    assert tree_bytes(tmp_path / "out") == tree_bytes(artifact)


def test_corrupted_object_fails_pull_and_verify(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    files = _files()
    url = f"s3://{s3_bucket}/c"
    publish(make_artifact(tmp_path / "art", files), url, output=QUIET)
    # Same size, other bytes, written behind lmi-build's back.
    s3_env.client().put_object(Bucket=s3_bucket, Key="c/weights/rank1.safetensors", Body=os.urandom(100_000))
    assert [m.code for m in verify_remote(url)] == ["remote_checksum"]
    with pytest.raises(PublishError, match=r"rank1\.safetensors does not match the manifest"):
        pull(url, tmp_path / "out", output=QUIET)
    assert not (tmp_path / "out").exists()
    # A shorter object is caught from the listing, before any download.
    publish(tmp_path / "art", f"s3://{s3_bucket}/short", output=QUIET)
    s3_env.client().put_object(Bucket=s3_bucket, Key="short/weights/rank2.safetensors", Body=b"short")
    with pytest.raises(PublishError, match="has 5 bytes"):
        pull(f"s3://{s3_bucket}/short", tmp_path / "out2", output=QUIET)
    # Publishing again repairs the prefix.
    publish(tmp_path / "art", url, output=QUIET)
    assert verify_remote(url) == []


def test_pull_resumes_from_partial_directory(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    files = _files()
    url = f"s3://{s3_bucket}/r"
    artifact = make_artifact(tmp_path / "art", files)
    publish(artifact, url, output=QUIET)
    partial = tmp_path / ".out.lmi-build-partial"
    (partial / "weights").mkdir(parents=True)
    (partial / "weights/rank0.safetensors").write_bytes(files["weights/rank0.safetensors"])  # good, kept
    (partial / "weights/rank1.safetensors").write_bytes(os.urandom(100_000))  # bad, fetched again
    (partial / "leftover.tmp").write_bytes(b"x")  # not in the manifest, removed
    summary = pull(url, tmp_path / "out", output=QUIET)
    assert summary.skipped == 1 and summary.objects == len(files)  # files - kept + manifest
    assert tree_bytes(tmp_path / "out") == tree_bytes(artifact)


def test_pull_refuses_to_overwrite_a_different_directory(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/o"
    publish(make_artifact(tmp_path / "art", _files(1)), url, output=QUIET)
    dest = tmp_path / "busy"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep me")
    with pytest.raises(PublishError, match="already exists"):
        pull(url, dest, output=QUIET)
    assert (dest / "mine.txt").read_text() == "keep me"


def test_publish_refuses_a_corrupted_local_artifact(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    artifact = make_artifact(tmp_path / "art", _files(2))
    (artifact / "weights/rank0.safetensors").write_bytes(os.urandom(100_000))
    with pytest.raises(PublishError, match="does not match its sha256"):
        publish(artifact, f"s3://{s3_bucket}/x", output=QUIET)
    assert "Contents" not in s3_env.client().list_objects_v2(Bucket=s3_bucket)


def test_delete_local_only_after_verified_upload(tmp_path: Path, s3_env: S3Server, s3_bucket: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    artifact = make_artifact(tmp_path / "art", _files(2))
    # A reader may not write: the upload fails and nothing local is deleted.
    for key, value in s3_env.env(reader=True).items():
        monkeypatch.setenv(key, value)
    with pytest.raises(PublishError, match="access denied"):
        publish(artifact, f"s3://{s3_bucket}/d", delete_local=True, output=QUIET)
    assert (artifact / MANIFEST_NAME).is_file()
    for key, value in s3_env.env().items():
        monkeypatch.setenv(key, value)
    publish(artifact, f"s3://{s3_bucket}/d", delete_local=True, output=QUIET)
    assert not artifact.exists()
    assert verify_remote(f"s3://{s3_bucket}/d") == []


def test_a_key_the_server_did_not_delete_is_an_error(s3_env: S3Server, s3_bucket: str) -> None:
    # DeleteObjects answers 200 even when it deletes nothing: SeaweedFS (as S3) lists each refused
    # key under "Errors" (here AccessDenied, for an identity that may only read).
    admin = s3_env.client()
    for key in ("old/a.bin", "old/b.bin"):
        admin.put_object(Bucket=s3_bucket, Key=key, Body=b"x")
    with pytest.raises(PublishError, match=rf"did not delete s3://{s3_bucket}/old/[ab]\.bin: AccessDenied.*\(\+1 more\)"):
        delete_keys(s3_env.client(reader=True), s3_bucket, {"old/b.bin", "old/a.bin"})
    assert [o["Key"] for o in admin.list_objects_v2(Bucket=s3_bucket)["Contents"]] == ["old/a.bin", "old/b.bin"]
    delete_keys(admin, s3_bucket, {"old/a.bin", "old/b.bin"})
    assert admin.list_objects_v2(Bucket=s3_bucket).get("KeyCount") == 0


def test_tarball_round_trip(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    files = _files(2)
    artifact = make_artifact(tmp_path / "art", files)
    url = f"s3://{s3_bucket}/tar"
    first = publish(artifact, url, tarball=True, output=QUIET)
    keys = sorted(o["Key"] for o in s3_env.client().list_objects_v2(Bucket=s3_bucket)["Contents"])
    assert keys == ["tar/lmi-build.json", "tar/model.tar.gz"]
    assert first.objects == 2
    assert publish(artifact, url, tarball=True, output=QUIET).objects == 0  # reproducible tarball: skipped
    assert verify_remote(url) == []
    pull(url, tmp_path / "out", output=QUIET)
    assert tree_bytes(tmp_path / "out") == tree_bytes(artifact)


def test_manifest_path_escape_is_refused(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    import json

    artifact = make_artifact(tmp_path / "art", {"a.txt": b"a"})
    data = json.loads((artifact / MANIFEST_NAME).read_text())
    data["files"][0]["path"] = "../escaped.txt"
    s3_env.client().put_object(Bucket=s3_bucket, Key=f"evil/{MANIFEST_NAME}", Body=json.dumps(data).encode())
    with pytest.raises((PublishError, VerifyError), match="escape"):  # refused when the manifest is read
        pull(f"s3://{s3_bucket}/evil", tmp_path / "out", output=QUIET)
    assert not (tmp_path / "escaped.txt").exists()


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # --quiet: progress and info lines are off, so stderr holds the error alone. A process of its own:
    # lmi-build turns the CRT off (BOTO_DISABLE_CRT) before botocore's first import, which is what
    # keeps a cancelled transfer's traceback off stderr, and only a fresh interpreter shows that.
    return run_lmi_build_process(*args, "--quiet", env=env, timeout=120)


def _assert_one_line_error(result: subprocess.CompletedProcess[str], expected: str, secrets: list[str]) -> None:
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert expected in lines[0], lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    for secret in secrets:
        assert secret not in result.stderr + result.stdout


def test_cli_errors_are_one_line(tmp_path: Path, s3_server: S3Server) -> None:
    artifact = make_artifact(tmp_path / "art", _files(1))
    bucket = s3_server.new_bucket()
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env = {**base, **s3_server.env()}
    secrets = [s3_server.secret_key]
    _assert_one_line_error(_cli(["publish", str(artifact), "s3://no-such-bucket-xyz/p"], env),
                           "bucket 'no-such-bucket-xyz' does not exist", secrets)
    _assert_one_line_error(_cli(["publish", str(artifact), f"s3://{bucket}/p", "--endpoint-url", "http://127.0.0.1:9"],
                                env), "cannot connect to the S3 endpoint http://127.0.0.1:9", secrets)
    no_creds = {**base, "AWS_ENDPOINT_URL": s3_server.endpoint, "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    _assert_one_line_error(_cli(["pull", f"s3://{bucket}/p", str(tmp_path / "o")], no_creds),
                           "no AWS credentials", secrets)
    wrong = {**env, "AWS_SECRET_ACCESS_KEY": "definitely-wrong-secret"}
    _assert_one_line_error(_cli(["publish", str(artifact), f"s3://{bucket}/p"], wrong), "", [*secrets, "definitely-wrong-secret"])
    reader = {**base, **s3_server.env(reader=True)}
    _assert_one_line_error(_cli(["publish", str(artifact), f"s3://{bucket}/p"], reader), "access denied",
                           [*secrets, s3_server.env(reader=True)["AWS_SECRET_ACCESS_KEY"]])
    _assert_one_line_error(_cli(["pull", f"s3://{bucket}/nothing", str(tmp_path / "o")], env), "incomplete", secrets)


def test_cli_json_summaries(tmp_path: Path, s3_server: S3Server) -> None:
    import json

    artifact = make_artifact(tmp_path / "art", _files(2))
    bucket = s3_server.new_bucket()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **s3_server.env()}
    published = run_lmi_build("publish", str(artifact), f"s3://{bucket}/j", "--json", env=env, timeout=120)
    assert published.returncode == 0, published.stderr
    data = json.loads(published.stdout)
    assert data["objects"] == 5 and data["skipped"] == 0 and data["bytes"] > 200_000
    pulled = run_lmi_build("pull", f"s3://{bucket}/j", str(tmp_path / "out"), "--json", env=env, timeout=120)
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["objects"] == 5


def test_bad_url_and_bandwidth_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LmiBuildError, match="not an S3 URL"):
        publish(tmp_path, "https://example.com/x", output=QUIET)
    monkeypatch.setenv("LMI_BUILD_S3_MAX_BANDWIDTH", "fast")
    from lmi_build.storage.transfer import transfer_config

    with pytest.raises(PublishError, match="LMI_BUILD_S3_MAX_BANDWIDTH"):
        transfer_config(4)


def test_classic_transfer_client_even_on_crt_optimized_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """On p4d/p5/trn1 boto3 would pick the CRT client on its own (it did on the CI host): never."""
    awscrt_s3 = pytest.importorskip("awscrt.s3", reason="awscrt (a dev dependency) is not installed")
    import boto3
    from boto3.s3.transfer import create_transfer_manager
    from s3transfer.manager import TransferManager

    from lmi_build.storage.transfer import transfer_config

    monkeypatch.setattr(awscrt_s3, "is_optimized_for_system", lambda: True)
    client = boto3.client("s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
                          aws_access_key_id="x", aws_secret_access_key="y")
    with create_transfer_manager(client, transfer_config(2)) as manager:
        assert type(manager) is TransferManager


def test_botocore_signs_without_the_crt() -> None:
    """With awscrt installed (the dev extra has it), botocore's CRT signers printed their own
    traceback when a cancelled upload's body read failed: the client opts out before botocore loads."""
    pytest.importorskip("awscrt", reason="awscrt (a dev dependency) is not installed")
    code = ("from lmi_build.storage.client import s3_client; s3_client('http://127.0.0.1:9'); "
            "import botocore.auth as a; print(a.AUTH_TYPE_MAPS['s3v4'].__module__)")
    env = {k: v for k, v in os.environ.items() if k != "BOTO_DISABLE_CRT"}
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert shown.stdout.strip() == "botocore.auth"
