"""The TensorRT-LLM argparse extractors (tests/vendor/trtllm/extract_*_flags.py) read single saved files
(``--files DIR``, ``DIR/<commit>/<path>``) as well as a git copy: NVIDIA/TensorRT-LLM is too big to copy
whole here, so the sources of 0.21.0rc1 and 1.0.0 can only come as single files (issue 22, Deliver 4).
The files written below are small stand-in sources in TensorRT-LLM's shape, not vendor code."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path
from types import ModuleType

from tests.paths import VENDOR_DIR

EXTRACT_DIR = VENDOR_DIR / "trtllm"

BUILD_PY = '''
import argparse
from tensorrt_llm.plugin import add_plugin_argument


def parse_arguments():
    parser = argparse.ArgumentParser()
    parser.add_argument('--max_batch_size', type=int, default=2048)
    parser.add_argument('--log_level', type=str, default='info', choices=severity_map.keys())
    plugin_config_parser = parser.add_argument_group("Plugin config arguments")
    add_plugin_argument(plugin_config_parser)
    return parser
'''

PLUGIN_PY = '''
DEFAULT_PLUGIN_DTYPE_OPTIONS = ["auto", "float16", None]
PLUGIN_DTYPE_OPTIONS_MAP = {"gemm_plugin": ["auto", "float16", "fp8", None]}


class PluginConfig:
    _gemm_plugin: Optional[str] = field(default=None)
    _context_fmha: bool = field(default=True)
    _tokens_per_block: int = field(default=32)
    _not_on_the_cli: bool = field(default=False)


cli_plugin_args = ["gemm_plugin", "context_fmha", "tokens_per_block"]


def add_plugin_argument(parser):
    for field in DEFAULT_PLUGIN_DTYPE_OPTIONS:
        parser.add_argument(field, default=None if x else "disable")
'''

CONVERT_PY = '''
import argparse


def parse_arguments():
    parser = argparse.ArgumentParser()
    parser.add_argument('--model_dir', type=str, required=True)
    parser.add_argument('--dtype', type=str, default='auto', choices=['auto', 'float16'])
    return parser.parse_args()
'''


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(EXTRACT_DIR))
    try:
        spec = importlib.util.spec_from_file_location(name, EXTRACT_DIR / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(EXTRACT_DIR))


def _run(module: ModuleType, argv: list[str]) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        assert module.main(argv) == 0
    return json.loads(out.getvalue())


def _commit_of(module: ModuleType, release: str) -> str:
    commit = next(c for r, _tool, _tag, c, _why in module.RELEASES if r == release)
    assert commit is not None
    return commit


def test_build_flags_are_read_from_saved_single_files(tmp_path: Path) -> None:
    module = _load("extract_build_flags")
    commit = _commit_of(module, "0.12.0")
    for path, text in (("tensorrt_llm/commands/build.py", BUILD_PY), ("tensorrt_llm/plugin/plugin.py", PLUGIN_PY)):
        (tmp_path / commit / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / commit / path).write_text(text)

    versions = _run(module, ["--files", str(tmp_path)])["versions"]

    read = versions["0.12.0"]
    assert read["commit"] == commit and not read.get("missing")
    flags = read["flags"]
    assert flags["max_batch_size"]["default"] == 2048
    assert flags["log_level"]["choices_expr"] == "severity_map.keys()"
    assert flags["gemm_plugin"]["choices"] == ["auto", "float16", "fp8", "disable"]
    assert flags["context_fmha"]["choices"] == ["enable", "disable"]
    assert flags["tokens_per_block"] == {"options": ["--tokens_per_block"], "from": "plugin", "type": "int",
                                         "default": 32}
    assert "not_on_the_cli" not in flags
    # A release whose commit has no directory is missing, with where it was looked for.
    assert versions["0.9.0"]["missing"] and str(tmp_path) in versions["0.9.0"]["why"]


def test_script_flags_are_read_from_saved_single_files(tmp_path: Path) -> None:
    module = _load("extract_script_flags")
    commit = _commit_of(module, "0.12.0")
    script = tmp_path / commit / "examples" / "llama" / "convert_checkpoint.py"
    script.parent.mkdir(parents=True)
    script.write_text(CONVERT_PY)
    (tmp_path / commit / "examples" / "llama" / "README.md").write_text("not a script\n")

    releases = _run(module, ["--files", str(tmp_path)])["releases"]

    scripts = releases["0.12.0"]["scripts"]
    assert list(scripts) == ["examples/llama/convert_checkpoint.py"]
    flags = scripts["examples/llama/convert_checkpoint.py"]["flags"]
    assert flags["model_dir"]["required"] is True
    assert flags["dtype"]["choices"] == ["auto", "float16"]


def test_a_wrong_command_line_prints_the_usage() -> None:
    module = _load("extract_build_flags")
    assert module.main([]) == 2
    assert module.main(["--files"]) == 2


def test_the_0_21_0rc1_tag_commit_is_the_rc1_submodule_pointer() -> None:
    # triton-inference-server/tensorrtllm_backend d07ec318 "chore: update tensorrt llm to 0.21.0rc1"
    # (2025-06-11) sets its tensorrt_llm submodule to 9c012d5b; b4b1185a is the v0.21.0 tag's pointer.
    module = _load("extract_build_flags")
    tag = next(t for r, _tool, t, _c, _why in module.RELEASES if r == "0.21.0rc1")
    assert tag == "9c012d5bf8936b040b3822b35c823460e8f63a75"
    extract = json.loads((EXTRACT_DIR / "build_flags.json").read_text())
    assert extract["versions"]["0.21.0rc1"]["tag_commit"] == tag
