"""Hostile files: pipes, endless nesting, giant integers, broken characters, loops and lying weights.

Each case ran into a hang, a traceback or a wrong artifact before bounded reading
(``lmi_build/core/reading.py``), the model-directory checks (``sources/local.py``) and the safetensors
header check (``model/safetensors_header.py``). Every case must now end quickly with exactly one
error line and touch nothing outside the allowed paths (``tests/hostile.py``).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from lmi_build.sources.digest_cache import CACHE_DIR, cache_file_for
from tests.hostile import World, make_world

DEEP = "[" * 100_000 + "]" * 100_000
BIG = "9" * 5000


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def _fails(world: World, *args: str, code: int | tuple[int, int] = 1, says: str | None = None,
           timeout: float = 60) -> str:
    """``code``: the exit status, or either of two (a bad matrix file is an invalid matrix, 2, or
    an unreadable input, 1: the case is about ending at once with one line, not which)."""
    before = world.snapshot()
    result = world.run(*args, timeout=timeout)
    expected = result.returncode if isinstance(code, tuple) and result.returncode in code else code
    assert isinstance(expected, int), f"exit {result.returncode}, expected one of {code}: {result.stderr[-2000:]}"
    world.expect(result, code=expected, before=before)
    # The one error line, or the problem lines a matrix error lists under it.
    assert says is None or says in result.stderr, result.stderr[-2000:]
    return result.error_lines[0]


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


# ---- pipes where a file belongs: refused at once, never waited on -------------------------------

def test_fifo_as_properties(world: World) -> None:
    _fifo(world.cwd / "serving.properties")
    _fails(world, "plan", "hf", "--model", "./model", "--properties", "serving.properties", says="not a regular file")


def test_fifo_as_plan(world: World) -> None:
    _fifo(world.cwd / "plan.json")
    _fails(world, "hf", "--plan", "plan.json", "--output", "out", says="not a regular file")


def test_fifo_as_matrix_file(world: World) -> None:
    _fifo(world.cwd / "builds.toml")
    _fails(world, "matrix", "builds.toml", "--cache", str(world.cwd / "c"), code=(1, 2), says="not a regular file")


@pytest.mark.parametrize("name", ["tokenizer.json", "model.safetensors"])
def test_fifo_in_the_model_directory(world: World, name: str) -> None:
    (world.model / name).unlink()
    _fifo(world.model / name)
    _fails(world, "hf", "--model", "./model", "--output", "out", "--no-cache", says="not a regular file")


def test_calibration_file_that_is_a_pipe(world: World) -> None:
    _fifo(world.cwd / "calib.txt")
    _fails(world, "plan", "hf", "--model", "./model", "--quantize", "fp8", "--calib-data", "calib.txt", code=2,
           says="not a regular file")


# ---- nesting and integers past any real document ------------------------------------------------

@pytest.mark.parametrize("content", [DEEP, '{"hidden_size": ' + BIG + "}"])
def test_hostile_config_json(world: World, content: str) -> None:
    (world.model / "config.json").write_text(content)
    _fails(world, "plan", "hf", "--model", "./model", says="config.json")


def test_deeply_nested_plan(world: World) -> None:
    (world.cwd / "plan.json").write_text(DEEP)
    _fails(world, "hf", "--plan", "plan.json", "--output", "out")


def test_deeply_nested_manifest(world: World) -> None:
    built = world.run("hf", "--model", "./model", "--output", "out", "--no-cache")
    assert built.returncode == 0, built.stderr
    (world.cwd / "out" / "lmi-build.json").chmod(0o644)
    (world.cwd / "out" / "lmi-build.json").write_text(DEEP)
    _fails(world, "verify", "out", code=2)


def test_deeply_nested_weight_index(world: World) -> None:
    (world.model / "model.safetensors.index.json").write_text(DEEP)
    _fails(world, "hf", "--model", "./model", "--output", "out", "--no-cache", says="index")


def test_deeply_nested_matrix(world: World) -> None:
    (world.cwd / "builds.toml").write_text("x = " + "[" * 50_000 + "]" * 50_000 + "\n")
    _fails(world, "matrix", "builds.toml", "--cache", str(world.cwd / "c"), code=(1, 2))


def test_digest_cache_that_is_hostile_is_ignored(world: World) -> None:
    # Both homes a digest cache had: the one file of old, and the model directory's file of now.
    (world.cache / "file-digests.json").write_text(DEEP)
    ours = world.cache / CACHE_DIR / cache_file_for(world.model.resolve()).name
    ours.parent.mkdir(parents=True)
    ours.write_text(DEEP)
    before = world.snapshot()
    result = world.run("hf", "--model", "./model", "--output", "out", "--no-cache")
    world.expect(result, code=0, before=before, allowed=("work/out",))


def test_calibration_jsonl_nested_too_deep(world: World) -> None:
    (world.cwd / "calib.jsonl").write_text(DEEP + "\n")
    _fails(world, "plan", "hf", "--model", "./model", "--quantize", "fp8", "--calib-data", "calib.jsonl", code=2,
           says="calib.jsonl")


# ---- properties: broken characters and numbers DJL could never read ----------------------------

def test_lone_surrogate_in_properties(world: World) -> None:
    (world.cwd / "serving.properties").write_text("option.chat_template=a\\uD800b\n")
    _fails(world, "plan", "hf", "--model", "./model", "--properties", "serving.properties", says="surrogate")
    _fails(world, "config", "show", "--properties", "serving.properties", says="surrogate")


@pytest.mark.parametrize("value", [BIG, "10000000000000000000000"])
def test_integer_options_beyond_a_java_int(world: World, value: str) -> None:
    (world.cwd / "serving.properties").write_text(f"option.max_rolling_batch_size={value}\n")
    before = world.snapshot()
    result = world.run("plan", "hf", "--model", "./model", "--properties", "serving.properties")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and BIG not in result.stdout + result.stderr
    assert "option.max_rolling_batch_size" in result.stdout + result.stderr
    after = world.snapshot()
    assert {k: v for k, v in after.items() if not k.startswith("cache")} == \
        {k: v for k, v in before.items() if not k.startswith("cache")}


def test_impossible_model_sizes_are_plan_errors(world: World) -> None:
    config = json.loads((world.model / "config.json").read_text())
    for key, value in (("num_key_value_heads", 0), ("num_hidden_layers", -2)):
        (world.model / "config.json").write_text(json.dumps({**config, key: value}))
        result = world.run("plan", "hf", "--model", "./model")
        assert result.returncode in (1, 2), (key, result.stderr[-2000:])  # model error or invalid plan
        assert "Traceback" not in result.stderr and key in result.stdout + result.stderr


# ---- matrix files whose expansion or templates have no bound ------------------------------------

def test_matrix_template_width_is_refused(world: World) -> None:
    (world.cwd / "builds.toml").write_text(
        '[[build]]\ntarget = "hf"\nmodel = "./model"\nname = "{model:>400000000}"\n')
    _fails(world, "matrix", "builds.toml", "--cache", str(world.cwd / "c"), code=(1, 2), says="builds.toml", timeout=30)


def test_matrix_product_of_a_million_builds_is_refused(world: World) -> None:
    values = ", ".join(str(i) for i in range(1, 11))
    product = "\n".join(f"k{i} = [{values}]" for i in range(6))
    (world.cwd / "builds.toml").write_text(f'[[build]]\ntarget = "hf"\nmodel = "./model"\n[build.matrix]\n{product}\n')
    _fails(world, "matrix", "builds.toml", "--cache", str(world.cwd / "c"), code=(1, 2), says="builds.toml", timeout=30)


# ---- model directories that lie ----------------------------------------------------------------

def test_symlink_loop_in_the_model_directory(world: World) -> None:
    os.symlink("loop-b.json", world.model / "loop-a.json")
    os.symlink("loop-a.json", world.model / "loop-b.json")
    _fails(world, "plan", "hf", "--model", "./model", says="loop")


def test_file_name_that_is_not_utf8(world: World) -> None:
    (world.model / os.fsdecode(b"tokenizer-\xff.json")).write_text("{}")
    _fails(world, "plan", "hf", "--model", "./model", says="UTF-8")


def _rewrite_header(path: Path, change: dict[str, object]) -> None:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    name = next(key for key in header if key != "__metadata__")
    header[name] = {**header[name], **change}
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length:])


@pytest.mark.parametrize("change", [{"dtype": "EVIL"}, {"data_offsets": [-8, 0]}, {"data_offsets": [0, 8]}],
                         ids=["dtype", "negative", "overlap"])
def test_weights_that_break_the_safetensors_format(world: World, change: dict[str, object]) -> None:
    _rewrite_header(world.model / "model.safetensors", change)
    _fails(world, "hf", "--model", "./model", "--output", "out", "--no-cache", says="safetensors")


def test_weight_index_pointing_outside_the_model(world: World) -> None:
    (world.model / "model.safetensors").rename(world.cwd / "outside.safetensors")
    header_names = ["model.embed_tokens.weight"]
    (world.model / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {name: "../outside.safetensors" for name in header_names}}))
    (world.model / "model-00001-of-00001.safetensors").write_bytes((world.cwd / "outside.safetensors").read_bytes())
    _fails(world, "hf", "--model", "./model", "--output", "out", "--no-cache", says="outside.safetensors")
