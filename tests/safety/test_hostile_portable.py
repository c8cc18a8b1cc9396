"""Absolute model paths and host paths in options: the artifact never records the build host.

A model given by its absolute path builds (quantized too) into a manifest that names the model
without the host path; an option whose value is a path of the build host is a plan error, reported
before any quantization or compilation, not by the packager after minutes of work.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.hostile import World, make_world


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def _real_model_outside_the_cwd(world: World, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo tiny Llama (real weights and tokenizer transformers can load), copied to an
    absolute path outside the current directory: under the tmp root, which the manifest must
    never name."""
    from lmi_build.sources.demo import ensure_demo_model

    monkeypatch.setenv("LMI_BUILD_CACHE", str(world.cache))
    generated = ensure_demo_model("tiny-llama", with_weights=True)
    return Path(shutil.copytree(generated, world.root / "models" / "tiny-llama"))


@pytest.mark.slow
def test_absolute_model_path_with_fp8_builds_a_portable_manifest(world: World,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    model = _real_model_outside_the_cwd(world, monkeypatch)
    before = world.snapshot()
    result = world.run("hf", "--model", str(model), "--quantize", "fp8", "--output", "out", "--no-cache",
                       "-o", "calib_size=6", "-o", "calib_max_seq_len=64", "--json", timeout=600)
    world.expect(result, code=0, before=before, allowed=("work/out",))
    assert json.loads(result.stdout)["status"] == "artifact"
    text = (world.cwd / "out" / "lmi-build.json").read_text()
    for host in (str(world.root), str(model), str(world.home)):
        assert host not in text, f"the manifest names the build host's {host}"
    manifest = json.loads(text)
    assert manifest["source"]["kind"] == "local" and manifest["source"]["id"] == "tiny-llama"
    assert [step["name"] for step in manifest["steps"]][:2] == ["fetch", "quantize"]
    assert manifest["plan"]["quantization"]["method"] == "fp8"


def test_absolute_model_path_plans_without_host_paths(world: World) -> None:
    result = world.run("plan", "hf", "--model", str(world.model), "--quantize", "fp8", "--json")
    assert result.returncode == 0, result.stderr
    assert str(world.root) not in result.stdout
    assert json.loads(result.stdout)["model"]["id"] == "model"


@pytest.mark.parametrize("value", ["{root}/template.jinja", "{home}/draft", "{cwd}/extra.py", "{cwd}"])
def test_option_holding_a_host_path_is_a_plan_error(world: World, value: str) -> None:
    path = value.format(root=world.root, home=world.home, cwd=world.cwd)
    before = world.snapshot()
    result = world.run("plan", "hf", "--model", str(world.model), "-o", f"option.chat_template={path}")
    world.expect(result, code=2, before=before)
    assert "[host_path] option.chat_template=" in result.stderr


def test_host_path_stops_a_quantized_build_before_it_quantizes(world: World) -> None:
    """Without the plan-time check the packager refused the manifest after the quantization."""
    before = world.snapshot()
    result = world.run("hf", "--model", str(world.model), "--quantize", "fp8", "--output", "out", "--no-cache",
                       "-o", f"option.chat_template={world.root / 'template.jinja'}", timeout=120)
    world.expect(result, code=2, before=before)
    assert "host_path" in result.stderr
    assert "quantizing with" not in result.stderr, "no quantization may start"
    assert not (world.cwd / "out").exists()


def test_container_paths_and_urls_are_not_host_paths(world: World) -> None:
    for value in ("/opt/ml/model/template.jinja", "s3://bucket/prefix/", "--logfile /tmp/compile.log"):
        result = world.run("plan", "hf", "--model", str(world.model), "-o", f"option.chat_template={value}")
        assert result.returncode == 0, result.stderr
        assert "host_path" not in result.stderr
