"""The trtllm-build STAND-IN (tests/standins) checks argv against the argparse extracted from each
TensorRT-LLM release's source (tests/vendor/trtllm/build_flags.json), not against lmi-build's own
flags.toml, so a wrong belief in flags.toml is caught instead of shared (issue 22, Deliver 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import STANDINS_DIR

STANDIN = STANDINS_DIR / "trtllm-build"


def _run(tmp_path: Path, version: str, *extra: str) -> subprocess.CompletedProcess[str]:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir(exist_ok=True)
    (checkpoint / "config.json").write_text(json.dumps({"mapping": {"world_size": 1}}))
    argv = ["--checkpoint_dir", str(checkpoint), "--output_dir", str(tmp_path / "engine"), *extra]
    env = {**os.environ, "STANDIN_TRTLLM_VERSION": version}
    return subprocess.run([sys.executable, str(STANDIN), *argv], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def test_plugin_dtype_choice_the_release_lacks_is_refused_as_argparse_does(tmp_path: Path) -> None:
    # 0.8.0's plugin flags take float16|float32|bfloat16|disable (plugin/plugin.py @5955b8af
    # plugin_options); flags.toml's "dtype" kind also allows "auto", which argparse refuses.
    done = _run(tmp_path, "0.8.0", "--gemm_plugin", "auto")
    assert done.returncode == 2, done.stdout + done.stderr
    assert ("trtllm-build: error: argument --gemm_plugin: invalid choice: 'auto' "
            "(choose from 'float16', 'float32', 'bfloat16', 'disable')") in done.stderr
    assert not (tmp_path / "engine" / "config.json").exists()


def test_unknown_flag_is_refused_with_argparse_message(tmp_path: Path) -> None:
    done = _run(tmp_path, "0.9.0", "--max_seq_len", "2048")  # --max_seq_len exists from 0.11
    assert done.returncode == 2
    assert "trtllm-build: error: unrecognized arguments: --max_seq_len 2048" in done.stderr


def test_flag_the_release_has_and_flags_toml_does_not_is_accepted(tmp_path: Path) -> None:
    # --max_draft_len is in 0.9.0's parse_arguments (commands/build.py @250d9c29); lmi-build's
    # table does not list it, and the stand-in no longer asks lmi-build's table.
    done = _run(tmp_path, "0.9.0", "--max_draft_len", "4", "--use_paged_context_fmha", "enable")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "engine" / "config.json").read_text())["stand_in"] is True


@pytest.mark.parametrize(("version", "argv", "error"), [
    ("0.11.0", ["--max_batch_size", "many"], "argument --max_batch_size: invalid int value: 'many'"),
    ("0.12.0", ["--context_fmha", "on"], "argument --context_fmha: invalid choice: 'on'"),
    ("0.12.0", ["--max_output_len", "512"], "unrecognized arguments: --max_output_len 512"),
    ("0.8.0", ["--workers"], "argument --workers: expected one argument"),
])
def test_values_are_checked_as_argparse_does(tmp_path: Path, version: str, argv: list[str], error: str) -> None:
    done = _run(tmp_path, version, *argv)
    assert done.returncode == 2
    assert f"trtllm-build: error: {error}" in done.stderr


def test_release_without_an_extract_says_argv_was_not_checked(tmp_path: Path) -> None:
    done = _run(tmp_path, "0.21.0rc1", "--max_batch_size", "8")
    assert done.returncode == 0, done.stderr
    assert "argv NOT checked: no argparse extract for TensorRT-LLM 0.21.0rc1" in done.stdout


def test_release_not_in_the_extract_is_refused(tmp_path: Path) -> None:
    done = _run(tmp_path, "0.99.0")
    assert done.returncode == 2
    assert "0.99.0 is not in build_flags.json" in done.stderr
