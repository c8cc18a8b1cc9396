"""The SeaweedFS fixture starts even when a port it picked is taken before weed binds it (another test
worker's server, a benchmark's or Ray's can start at the same moment)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests import fixtures_s3

pytestmark = pytest.mark.s3


def test_a_port_taken_before_weed_binds_it_is_picked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        picks = iter([port])
        real = fixtures_s3._free_port
        # The first pick (the master's port) is one another process holds; every later pick is free.
        monkeypatch.setattr(fixtures_s3, "_free_port", lambda: next(picks, None) or real())
        server = fixtures_s3.start_seaweedfs(tmp_path / "weed")
        try:
            assert server.ports["master"] != port
            server.client().create_bucket(Bucket="after-a-taken-port")
        finally:
            server.stop()
