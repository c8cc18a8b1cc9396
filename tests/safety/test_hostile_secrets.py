"""No secret anywhere: plan output, saved plans, S3 errors, URL credentials; S3 faults are one line.

Real CLI processes (``tests/hostile.py``); the frozen server is a real TCP socket that accepts and
never answers.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile import SECRETS, World, make_world

URL_PASSWORD = "urlPassword0123456789"


@pytest.fixture
def world(tmp_path: Path) -> World:
    made = make_world(tmp_path)
    made.secrets["URL_PASSWORD"] = URL_PASSWORD
    return made


SECRET_OPTIONS = [
    ("option.hf_token", SECRETS["HF_TOKEN"]),
    ("option.hf_token", "hf_" + "a" * 34),
    ("option.api_key", "plain-value-of-a-key-123"),
    ("option.aws_secret_access_key", "x" * 20),
    ("option.some_value", SECRETS["AWS_SECRET_ACCESS_KEY"]),
    ("option.model_id", f"https://bob:{URL_PASSWORD}@models.example.com/llama"),
    ("option.s3_url", f"s3://bucket/path?x={SECRETS['AWS_SESSION_TOKEN']}"),
    ("option.password", "hunter2hunter2"),
]


@pytest.mark.parametrize(("key", "value"), SECRET_OPTIONS)
@pytest.mark.parametrize("mode", ["table", "json", "save"])
def test_plan_never_shows_a_secret(world: World, key: str, value: str, mode: str) -> None:
    world.secrets["TEST_OPTION_SECRET"] = value
    args = ["plan", "hf", "--model", "./model", "-o", f"{key}={value}"]
    if mode == "json":
        args.append("--json")
    if mode == "save":
        args += ["--save", "plan.json"]
    before = world.snapshot()
    result = world.run(*args)
    world.expect(result, code=result.returncode, before=before, allowed=("work/plan.json",))
    if mode == "save":
        saved = (world.cwd / "plan.json").read_text()
        assert value not in saved, "the saved plan holds the secret"
        assert json.loads(saved)["plan"]["options"].get(key, "***").count("***") >= 1


def test_build_with_a_secret_option_is_refused_without_echoing_it(world: World) -> None:
    world.secrets["TEST_OPTION_SECRET"] = "hf_" + "b" * 34
    before = world.snapshot()
    result = world.run("hf", "--model", "./model", "-o", f"option.hf_token={'hf_' + 'b' * 34}", "--output", "out",
                       "--no-cache")
    world.expect(result, code=1, before=before)


def test_secret_in_a_properties_file_is_not_shown(world: World) -> None:
    (world.cwd / "serving.properties").write_text(f"option.hf_token={SECRETS['HF_TOKEN']}\n"
                                                  f"option.other={SECRETS['AWS_SECRET_ACCESS_KEY']}\n")
    before = world.snapshot()
    result = world.run("plan", "hf", "--model", "./model", "--properties", "serving.properties")
    world.expect(result, code=result.returncode, before=before)


def test_secret_from_option_environment_is_not_shown(world: World) -> None:
    before = world.snapshot()
    result = world.run("plan", "hf", "--model", "./model", "--json",
                       env={"OPTION_HF_TOKEN": SECRETS["HF_TOKEN"]})
    world.expect(result, code=result.returncode, before=before)


# ---- S3: credentials in URLs, partial credentials, a frozen server ----

ENDPOINT_COMMANDS = [
    ("publish", "{artifact}", "s3://bucket-a/x"),
    ("pull", "s3://bucket-a/x", "pulled"),
    ("verify", "s3://bucket-a/x"),
    ("inspect", "s3://bucket-a/x"),
    ("plan", "hf", "--model", "s3://bucket-a/model"),
]
# An endpoint that cannot be reached is an error for every command (exit 1), never a verdict on an
# artifact: verify and inspect gave 2, "invalid", before issue 42 item 9.
EXIT = {"publish": 1, "pull": 1, "verify": 1, "inspect": 1, "plan": 1}


@pytest.fixture
def artifact(world: World) -> Path:
    built = world.run("hf", "--model", "./model", "--output", "art", "--no-cache")
    assert built.returncode == 0, built.stderr
    return world.cwd / "art"


@pytest.mark.parametrize("command", ENDPOINT_COMMANDS, ids=lambda c: c[0])
def test_endpoint_url_password_is_never_echoed(world: World, artifact: Path, command: tuple[str, ...]) -> None:
    args = [part.format(artifact=artifact) for part in command]
    before = world.snapshot()
    result = world.run(*args, "--endpoint-url", f"http://user:{URL_PASSWORD}@127.0.0.1:9", timeout=120)
    world.expect(result, code=EXIT[command[0]], before=before)


@pytest.mark.parametrize("command", ENDPOINT_COMMANDS, ids=lambda c: c[0])
def test_empty_secret_key_is_one_line(world: World, artifact: Path, command: tuple[str, ...]) -> None:
    args = [part.format(artifact=artifact) for part in command]
    world.secrets.pop("AWS_SECRET_ACCESS_KEY")
    before = world.snapshot()
    result = world.run(*args, "--endpoint-url", "http://127.0.0.1:9",
                       env={"AWS_ACCESS_KEY_ID": "AKIAHOSTILE000000001", "AWS_SECRET_ACCESS_KEY": ""})
    world.expect(result, code=1, before=before, says="incomplete AWS credentials")


@pytest.fixture
def frozen_server() -> Iterator[str]:
    """A TCP server that accepts connections and never answers (a hung S3 endpoint)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


@pytest.mark.parametrize("command", ENDPOINT_COMMANDS, ids=lambda c: c[0])
def test_frozen_s3_server_is_a_one_line_timeout(world: World, artifact: Path, frozen_server: str,
                                                command: tuple[str, ...]) -> None:
    args = [part.format(artifact=artifact) for part in command]
    before = world.snapshot()
    started = time.monotonic()
    result = world.run(*args, "--endpoint-url", frozen_server, env={"LMI_BUILD_S3_TIMEOUT": "1"}, timeout=120)
    world.expect(result, code=EXIT[command[0]], before=before)
    assert time.monotonic() - started < 60


def test_bad_timeout_setting_is_one_line(world: World, artifact: Path) -> None:
    before = world.snapshot()
    result = world.run("pull", "s3://bucket-a/x", "pulled", "--endpoint-url", "http://127.0.0.1:9",
                       env={"LMI_BUILD_S3_TIMEOUT": "soon"})
    world.expect(result, code=1, before=before, says="LMI_BUILD_S3_TIMEOUT")
