"""Paths lmi-build creates next to user data are never followed into it (issue: symlink planting).

A pre-planted ``.out.lock`` link made the build write its lock into the link's target (a user file
overwritten); a pre-planted ``.dest.lmi-build-partial`` link made ``pull`` download into, and then
delete, a user directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.hostile import World, make_world


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def test_a_planted_lock_link_is_refused(world: World) -> None:
    victim = world.root / "outside.txt"
    os.symlink(victim, world.cwd / ".out.lock")
    before = world.snapshot()
    result = world.run("hf", "--model", "./model", "--output", "out", "--no-cache")
    world.expect(result, code=1, before=before, says="symbolic link")
    assert victim.read_text() == "keep me\n"


@pytest.mark.s3
def test_a_planted_partial_link_is_refused(world: World, s3_env: object, s3_bucket: str) -> None:
    built = world.run("hf", "--model", "./model", "--output", "out", "--no-cache")
    assert built.returncode == 0, built.stderr
    world.env.update({k: v for k, v in os.environ.items() if k.startswith("AWS_")})
    world.secrets.pop("AWS_SECRET_ACCESS_KEY", None)  # the test server's key is in the environment on purpose
    world.secrets.pop("AWS_SESSION_TOKEN", None)
    url = f"s3://{s3_bucket}/planted"
    published = world.run("publish", "out", url)
    assert published.returncode == 0, published.stderr
    users = world.root / "users-dir"
    users.mkdir()
    (users / "precious.txt").write_text("mine\n")
    os.symlink(users, world.cwd / ".dest.lmi-build-partial")
    before = world.snapshot()
    result = world.run("pull", url, "dest")
    world.expect(result, code=1, before=before, says="symbolic link")
    assert sorted(p.name for p in users.iterdir()) == ["precious.txt"]
