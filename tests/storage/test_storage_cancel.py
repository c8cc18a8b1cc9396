"""Cancelling transfers against a real SeaweedFS (issue 42, item 9): Ctrl-C of a pull held under
``LMI_BUILD_S3_MAX_BANDWIDTH`` stops at once; the threads' bandwidth delays no longer have to run out
first (6.1-8.8 s measured at a terminal; README: within 5 s)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmi_build.reporting.output import Mode, Output
from lmi_build.storage.publish import publish
from lmi_build.storage.pull import pull
from tests.fixtures_s3 import S3Server, make_artifact

pytestmark = pytest.mark.s3
QUIET = Output(mode=Mode.QUIET)


@pytest.fixture
def default_sigint() -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_of_a_throttled_pull_stops_at_once(tmp_path: Path, s3_env: S3Server, s3_bucket: str,
                                                  monkeypatch: pytest.MonkeyPatch, default_sigint: None) -> None:
    files = {f"shard{i}.safetensors": os.urandom(1024 * 1024) for i in range(4)}
    url = f"s3://{s3_bucket}/throttled"
    publish(make_artifact(tmp_path / "art", files), url, output=QUIET)
    # 4 MiB at 256 KiB/s: each thread's first chunk leaves it about 16 s of delay to wait out.
    monkeypatch.setenv("LMI_BUILD_S3_MAX_BANDWIDTH", str(256 * 1024))
    sent: list[float] = []
    done = threading.Event()

    def interrupt_while_downloading() -> None:
        partial = tmp_path / ".out.lmi-build-partial"
        while not done.is_set() and not any(partial.rglob("*.lmi-build-download")):
            time.sleep(0.02)
        time.sleep(0.3)  # the first chunks are in: every thread waits out its share of the cap
        if not done.is_set():
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_while_downloading, daemon=True)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            pull(url, tmp_path / "out", output=QUIET, workers=4)
    finally:
        done.set()
    stopped_after = time.monotonic() - sent[0]
    assert stopped_after < 2.0, f"the pull stopped {stopped_after:.1f} s after Ctrl-C"
    assert not (tmp_path / "out").exists()


def _open_upload(client: object, bucket: str, key: str) -> str:
    """A multipart upload with one part sent and never completed: what a publish killed by SIGKILL
    in the middle of a large file leaves on the server."""
    upload_id: str = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]  # type: ignore[attr-defined]
    client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1,  # type: ignore[attr-defined]
                       Body=os.urandom(5 * 1024 * 1024))
    return upload_id


def _open_uploads(client: object, bucket: str) -> set[str]:
    listed = client.list_multipart_uploads(Bucket=bucket).get("Uploads") or []  # type: ignore[attr-defined]
    return {upload["Key"] for upload in listed}


def test_the_rerun_of_a_killed_publish_aborts_its_open_uploads_only(tmp_path: Path, s3_env: S3Server,
                                                                   s3_bucket: str) -> None:
    client = s3_env.client()
    ours = "models/a/rank0.safetensors"
    not_an_artifact_file = "models/a/notes.bin"  # under the prefix, but no file of this artifact
    elsewhere = "models/b/rank0.safetensors"
    for key in (ours, not_an_artifact_file, elsewhere):
        _open_upload(client, s3_bucket, key)
    artifact = make_artifact(tmp_path / "art", {"rank0.safetensors": os.urandom(64 * 1024)})
    publish(artifact, f"s3://{s3_bucket}/models/a", output=QUIET)
    assert _open_uploads(client, s3_bucket) == {not_an_artifact_file, elsewhere}
