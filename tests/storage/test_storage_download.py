"""The downloader behind ``pull`` (ranged GETs hashed while they land) against a real SeaweedFS:
out-of-order parts, a corrupted multi-part object, a connection cut mid-body, an interrupted pull."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmi_build.core.errors import PublishError
from lmi_build.reporting.output import Mode, Output
from lmi_build.storage import transfer
from lmi_build.storage.publish import publish
from lmi_build.storage.pull import pull
from tests.fixtures_s3 import S3Server, make_artifact, tree_bytes

pytestmark = pytest.mark.s3
QUIET = Output(mode=Mode.QUIET)
SMALL_PART = 64 * 1024  # many parts per file, finishing out of order over 8 workers


def _files() -> dict[str, bytes]:
    return {
        "weights/rank0.safetensors": os.urandom(SMALL_PART * 7 + 123),
        "weights/rank1.safetensors": os.urandom(SMALL_PART * 5),
        "config.json": b'{"architecture": "LlamaForCausalLM"}',
        "empty.txt": b"",
    }


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.name.endswith(".lmi-build-download"))


def test_parts_hashed_out_of_order_round_trip(tmp_path: Path, s3_env: S3Server, s3_bucket: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    artifact = make_artifact(tmp_path / "art", _files())
    url = f"s3://{s3_bucket}/parts"
    publish(artifact, url, output=QUIET)
    monkeypatch.setattr(transfer, "PART_SIZE", SMALL_PART)
    summary = pull(url, tmp_path / "out", workers=8, output=Output(mode=Mode.HUMAN))  # with the progress bar
    assert tree_bytes(tmp_path / "out") == tree_bytes(artifact)
    assert summary.bytes >= sum(len(v) for v in _files().values())
    assert _leftovers(tmp_path) == []


def test_corrupted_multipart_object_is_refused_and_nothing_lands(tmp_path: Path, s3_env: S3Server, s3_bucket: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    files = _files()
    artifact = make_artifact(tmp_path / "art", files)
    url = f"s3://{s3_bucket}/bad"
    publish(artifact, url, output=QUIET)
    # Same size, one byte changed in a middle part, written behind lmi-build's back.
    changed = bytearray(files["weights/rank0.safetensors"])
    changed[SMALL_PART * 3 + 5] ^= 0xFF
    s3_env.client().put_object(Bucket=s3_bucket, Key="bad/weights/rank0.safetensors", Body=bytes(changed))
    monkeypatch.setattr(transfer, "PART_SIZE", SMALL_PART)
    with pytest.raises(PublishError, match=r"rank0\.safetensors does not match the manifest"):
        pull(url, tmp_path / "out", output=QUIET)
    assert not (tmp_path / "out").exists()
    partial = tmp_path / ".out.lmi-build-partial"
    assert not (partial / "weights/rank0.safetensors").exists(), "a file that failed its hash must not get its name"
    assert _leftovers(tmp_path) == []
    # The good files that did land are kept; publishing again repairs the prefix and the pull completes.
    publish(artifact, url, output=QUIET)
    pull(url, tmp_path / "out", output=QUIET)
    assert tree_bytes(tmp_path / "out") == tree_bytes(artifact)


class _CuttingProxy:
    """A TCP proxy in front of the S3 server that cuts the first ``cuts`` responses carrying
    a body after ``after`` bytes: a real connection reset in the middle of a GET."""

    def __init__(self, upstream: str, *, cuts: int, after: int) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.cuts, self.after = cuts, after
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, downstream: bool) -> None:
        sent = 0
        cut = False
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if downstream and not cut and sent + len(data) > self.after:
                    with self.lock:
                        if self.cuts > 0:
                            self.cuts -= 1
                            cut = True
                    if cut:
                        sink.sendall(data[: max(0, self.after - sent)])
                        break
                sink.sendall(data)
                sent += len(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def cutting_proxy(s3_env: S3Server) -> Iterator[_CuttingProxy]:
    proxy = _CuttingProxy(s3_env.endpoint, cuts=3, after=200_000)
    try:
        yield proxy
    finally:
        proxy.close()


def test_connection_cut_mid_body_is_retried(tmp_path: Path, s3_env: S3Server, s3_bucket: str,
                                            cutting_proxy: _CuttingProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    big = {"weights/rank0.safetensors": os.urandom(3 * 1024 * 1024)}
    artifact = make_artifact(tmp_path / "art", big)
    url = f"s3://{s3_bucket}/cut"
    publish(artifact, url, output=QUIET)
    monkeypatch.setattr(transfer, "PART_SIZE", 1024 * 1024)
    pull(url, tmp_path / "out", endpoint_url=cutting_proxy.endpoint, workers=2, output=QUIET)
    assert cutting_proxy.cuts == 0, "the proxy should have cut connections"
    assert tree_bytes(tmp_path / "out") == tree_bytes(artifact)


def test_killed_pull_leaves_no_named_partial_file_and_resumes(tmp_path: Path, s3_env: S3Server,
                                                              s3_bucket: str) -> None:
    files = {f"shard{i}.safetensors": os.urandom(1024 * 1024) for i in range(4)}
    artifact = make_artifact(tmp_path / "art", files)
    url = f"s3://{s3_bucket}/slow"
    publish(artifact, url, output=QUIET)
    dest = tmp_path / "out"
    partial = tmp_path / ".out.lmi-build-partial"
    env = {**os.environ, "LMI_BUILD_S3_MAX_BANDWIDTH": str(512 * 1024)}  # ~8 s for the whole artifact
    proc = subprocess.Popen([sys.executable, "-m", "lmi_build", "pull", url, str(dest), "--workers", "1", "--quiet"],
                            env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (partial.is_dir() and any(
            p.is_file() and not p.name.startswith(".") for p in partial.iterdir())):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not dest.exists()
    named = {p.name for p in partial.iterdir() if not p.name.startswith(".")}
    assert named and named < set(files), named  # some files finished, not all
    for name in named:  # whatever has its name is complete and correct
        assert (partial / name).read_bytes() == files[name]
    summary = pull(url, dest, output=QUIET)
    assert summary.skipped == len(named)
    assert tree_bytes(dest) == tree_bytes(artifact)
    assert _leftovers(tmp_path) == []


def test_file_the_disk_cannot_hold_is_an_error_and_leaves_nothing(tmp_path: Path, s3_env: S3Server,
                                                                  s3_bucket: str) -> None:
    """The file's blocks are reserved before it is mapped: a file that cannot be written (here over a
    real RLIMIT_FSIZE, as on a full disk) fails as an OSError, not a crash, and no partial file stays."""
    import hashlib
    import resource

    body = os.urandom(3 * 1024 * 1024)
    s3_env.client().put_object(Bucket=s3_bucket, Key="big.bin", Body=body)
    item = transfer.Download("big.bin", tmp_path / "out" / "big.bin", len(body), hashlib.sha256(body).hexdigest())
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the default kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024 * 1024, hard))
    try:
        with pytest.raises(OSError):
            transfer.download_all(s3_env.client(), s3_bucket, [item], workers=2, output=QUIET)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []
    transfer.download_all(s3_env.client(), s3_bucket, [item], workers=2, output=QUIET)  # and works with room
    assert (tmp_path / "out" / "big.bin").read_bytes() == body


def test_two_pulls_into_one_destination_never_share_its_partial_directory(tmp_path: Path, s3_env: S3Server,
                                                                          s3_bucket: str) -> None:
    """A second pull while the first is downloading fails at once with one line; the first finishes
    and what it wrote verifies (issue 32 item 7: they shared the partial files, SIGBUS or EFAULT)."""
    files = {f"shard{i}.safetensors": os.urandom(512 * 1024) for i in range(4)}
    artifact = make_artifact(tmp_path / "art", files)
    url = f"s3://{s3_bucket}/twice"
    publish(artifact, url, output=QUIET)
    dest = tmp_path / "out"
    partial = tmp_path / ".out.lmi-build-partial"
    # ~10 s for the whole artifact: the second pull starts (a few seconds) while the first downloads.
    slow = {**os.environ, "LMI_BUILD_S3_MAX_BANDWIDTH": str(200 * 1024)}
    command = [sys.executable, "-m", "lmi_build", "pull", url, str(dest), "--workers", "2"]
    first = subprocess.Popen(command, env=slow, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (partial.is_dir() and any(partial.iterdir())):
        time.sleep(0.02)
    assert first.poll() is None, "the first pull is still downloading"
    second = subprocess.run(command, env=slow, capture_output=True, text=True, timeout=60)
    assert second.returncode == 1, second.stderr
    errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "another lmi-build is writing" in errors[0], second.stderr
    assert "Traceback" not in second.stderr
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    assert tree_bytes(dest) == tree_bytes(artifact)
    assert second.returncode == 1 and not partial.exists() and _leftovers(tmp_path) == []
    assert not (tmp_path / ".out.lock").exists()


def test_pulls_started_together_end_with_the_artifact(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> None:
    """Started at the same moment, rounds over: each pull either gets the artifact or fails with one
    line, never a crash, and the destination always holds the artifact, verified."""
    files = {f"shard{i}.safetensors": os.urandom(2 * 1024 * 1024) for i in range(3)}
    artifact = make_artifact(tmp_path / "art", files)
    url = f"s3://{s3_bucket}/together"
    publish(artifact, url, output=QUIET)
    for round_number in range(3):
        dest = tmp_path / f"out{round_number}"
        command = [sys.executable, "-m", "lmi_build", "pull", url, str(dest)]
        processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for _ in range(2)]
        outcomes = [(process.wait(timeout=120), process.communicate()[1]) for process in processes]
        for code, stderr in outcomes:
            assert code in (0, 1) and "Traceback" not in stderr, stderr
            if code == 1:
                assert [line for line in stderr.splitlines() if line.startswith("error:")] == \
                    [line for line in stderr.splitlines() if "another lmi-build is writing" in line], stderr
        assert any(code == 0 for code, _ in outcomes)
        assert tree_bytes(dest) == tree_bytes(artifact)
