"""``matrix --executor ray`` with a Ray address that is wrong, dead, hostile or secret-bearing, or a
temporary directory Ray cannot put its sockets in: one ``error:`` line within a bound, before Ray
is started, never a traceback or a password (issue 32 item 5).

Most cases need no Ray cluster: the address is checked before ``ray.init``. The garbage port is a
real socket server on 127.0.0.1 (``tests/hostile_servers.py``); the one case that starts Ray (its
token-auth banner must stay off stdout) starts a real local Ray.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from lmi_build.fleet.ray_address import PROBE_SECONDS
from tests.cli_process import run_lmi_build
from tests.fixtures_artifact import write_source_model
from tests.fixtures_s3 import S3Server
from tests.hostile_servers import garbage_server

pytest.importorskip("ray", reason="the fleet extra is not installed: pip install -e '.[fleet]'")
pytestmark = pytest.mark.s3
PASSWORD = "hunter2-ray-secret-value"


@pytest.fixture
def matrix(tmp_path: Path, s3_env: S3Server, s3_bucket: str) -> Path:
    """One hf build of a local model (planned in a fraction of a second, without torch), and a real
    cache bucket: the run gets as far as Ray, as a user's would."""
    model = tmp_path / "model"
    write_source_model(model, remote_code=False)
    (model / "pytorch_model.bin").unlink()
    path = tmp_path / "builds.toml"
    path.write_text(f'[[build]]\ntarget = "hf"\nmodel = "{model}"\n')
    (tmp_path / "cache-url").write_text(f"s3://{s3_bucket}/cache")
    return path


def _matrix(matrix: Path, *extra: str, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[float, subprocess.CompletedProcess[str]]:
    environment = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    started = time.monotonic()
    cache = (matrix.parent / "cache-url").read_text()
    result = run_lmi_build("matrix", str(matrix), "--cache", cache, "--executor", "ray", *extra,
                           cwd=matrix.parent, env={**environment, **(env or {})}, timeout=timeout)
    return time.monotonic() - started, result


def _one_line(result: subprocess.CompletedProcess[str], says: str) -> str:
    stderr = result.stderr
    output = result.stdout + stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output and PASSWORD not in output, output
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], stderr
    return errors[0]


def test_a_port_that_speaks_garbage_fails_within_the_probe_bound(matrix: Path) -> None:
    with garbage_server() as server:
        seconds, result = _matrix(matrix, "--ray-address", server.address)
    line = _one_line(result, "does not speak Ray's protocol")
    assert server.address in line
    assert seconds < PROBE_SECONDS + 10, f"took {seconds:.1f} s"


def test_a_closed_port_fails_at_once(matrix: Path) -> None:
    with garbage_server() as server:
        address = server.address
    seconds, result = _matrix(matrix, "--ray-address", address)
    _one_line(result, "cannot connect to --ray-address")
    assert seconds < 15, f"took {seconds:.1f} s"


@pytest.mark.skipif(importlib.util.find_spec("grpc") is not None, reason="ray[client] is installed here")
def test_a_ray_client_address_without_ray_client_says_what_to_install(matrix: Path) -> None:
    _, result = _matrix(matrix, env={"RAY_ADDRESS": "ray://127.0.0.1:10001"})
    line = _one_line(result, "RAY_ADDRESS ray://127.0.0.1:10001 is a Ray client address")
    assert "ray[client]" in line


@pytest.mark.parametrize("address", [f"http://admin:{PASSWORD}@127.0.0.1:8265", f"admin:{PASSWORD}@127.0.0.1:6379",
                                     f"ray://admin:{PASSWORD}@127.0.0.1:10001", "127.0.0.1:notaport"])
def test_a_bad_address_is_refused_without_showing_its_password(matrix: Path, address: str) -> None:
    _, result = _matrix(matrix, "--ray-address", address)
    _one_line(result, "--ray-address")


def test_a_temp_dir_too_long_for_ray_sockets_says_to_set_ray_tmpdir(matrix: Path, tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    seconds, result = _matrix(matrix, env={"TMPDIR": str(deep)})
    line = _one_line(result, "socket path")
    assert "RAY_TMPDIR" in line
    assert seconds < 15, f"took {seconds:.1f} s: Ray was started"


@pytest.mark.slow
def test_ray_banners_stay_off_stdout(matrix: Path, s3_bucket: str) -> None:
    """A local Ray for the run (it logs a token-authentication banner when it starts): stdout is
    the JSON report and nothing else."""
    environment = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    # A Ray temp dir of its own (short: its sockets must fit): no Ray another test started is found.
    ray_tmp = tempfile.mkdtemp(prefix="lmi-ray-", dir="/tmp")
    try:
        result = run_lmi_build("matrix", str(matrix), "--cache", f"s3://{s3_bucket}/cache", "--executor", "ray",
                               "--json", cwd=matrix.parent, env={**environment, "RAY_TMPDIR": ray_tmp}, timeout=300)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)  # nothing but the JSON document
    assert report["succeeded"], report
    assert "Token authentication" not in result.stdout + result.stderr, "Ray's banner goes to --debug only"
