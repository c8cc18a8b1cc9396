"""Bounded work for unbounded input: huge properties files, thousands of keys, endless files."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from tests.hostile import World, make_world


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def _child_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.parametrize("json_mode", [False, True])
def test_eight_thousand_keys_plan_in_linear_time(world: World, json_mode: bool) -> None:
    (world.cwd / "big.properties").write_text("".join(f"option.k{i}=v{i}\n" for i in range(8000)))
    baseline_start = _child_cpu_seconds()
    plain = world.run("plan", "hf", "--model", "./model", "--json")
    baseline = _child_cpu_seconds() - baseline_start
    assert plain.returncode == 0, plain.stderr
    before = world.snapshot()
    start = _child_cpu_seconds()
    result = world.run("plan", "hf", "--model", "./model", "--properties", "big.properties",
                       *(["--json"] if json_mode else []))
    spent = _child_cpu_seconds() - start
    world.expect(result, code=0, before=before)
    # 8k keys used to cost 80 s of CPU (quadratic de-duplication): now well under a second more.
    assert spent - baseline < 2.0, f"{spent:.2f}s of CPU for 8000 keys (plain plan: {baseline:.2f}s)"
    if not json_mode:
        assert len(result.stderr.splitlines()) < 100, "thousands of warnings are summarised"
        assert len(result.stdout.splitlines()) < 400, "thousands of options are summarised"


@pytest.mark.parametrize("source", ["/dev/zero", "big", "/dev/urandom"])
def test_endless_or_huge_properties_file_is_refused_by_size(world: World, source: str) -> None:
    if source == "big":
        with open(world.cwd / "big.properties", "wb") as stream:
            stream.truncate(3 * 1024 * 1024 * 1024)  # sparse: 3 GiB that occupy no disk
        source = "big.properties"
    before = world.snapshot()
    result = world.run("plan", "hf", "--model", "./model", "--properties", source, timeout=60)
    world.expect(result, code=1, before=before, says="larger than")


@pytest.mark.parametrize("content", [
    b"\xff\xfe\x00garbage",
    b"option.tensor_parallel_degree=\\",
    b"=value-without-key\n",
    b"option.a=1\n" * 10 + b"\x00\x00",
    b"\\u12",
    b"option.x=\\uZZZZ\n",
])
def test_malformed_properties_are_one_line(world: World, content: bytes) -> None:
    (world.cwd / "bad.properties").write_bytes(content)
    before = world.snapshot()
    result = world.run("plan", "hf", "--model", "./model", "--properties", "bad.properties")
    assert "Traceback" not in result.stderr
    world.expect(result, code=result.returncode, before=before)
    assert result.returncode in (0, 1, 2)


def test_properties_path_is_a_directory(world: World) -> None:
    (world.cwd / "props").mkdir()
    before = world.snapshot()
    result = world.run("plan", "hf", "--model", "./model", "--properties", "props")
    world.expect(result, code=1, before=before)
