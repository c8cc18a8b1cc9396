"""The example-script STAND-IN (tests/standins/trtllm-example-script, for examples/<family>/convert_checkpoint.py,
quantization/quantize.py, 0.7's llama/build.py and hf_llama_convert.py) checks argv against the argparse
extracted from each TensorRT-LLM release's own source (tests/vendor/trtllm: script_flags.json,
build_flags.json, converter_flags.json), per script path and release, never against lmi-build's
flags.toml, so a wrong belief in flags.toml is caught instead of shared (issue 22, Deliver 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import STANDINS_DIR, VENDOR_DIR

STANDIN = STANDINS_DIR / "trtllm-example-script"


def _run(tmp_path: Path, version: str, script: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run the stand-in linked as ``examples/<script>`` of a fake tree, as lmi-build's steps call it."""
    link = tmp_path / "examples" / script
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(STANDIN)
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    env = {**os.environ, "STANDIN_TRTLLM_VERSION": version}
    return subprocess.run([sys.executable, str(link), *argv], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def _convert(tmp_path: Path, version: str, script: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return _run(tmp_path, version, script, "--model_dir", str(tmp_path / "model"),
                "--output_dir", str(tmp_path / "ckpt"), *extra)


def test_flag_the_converter_lacks_at_that_release_is_refused(tmp_path: Path) -> None:
    # examples/phi/convert_checkpoint.py @250d9c29 (v0.9.0) parses only --model_dir --dtype --output_dir
    # (lines 25-33); lmi-build's table lets every converter take --tp_size.
    done = _convert(tmp_path, "0.9.0", "phi/convert_checkpoint.py", "--tp_size", "1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "convert_checkpoint.py: error: unrecognized arguments: --tp_size 1" in done.stderr
    assert not (tmp_path / "ckpt" / "config.json").exists()


def test_choice_the_converter_lacks_is_refused_as_argparse_does(tmp_path: Path) -> None:
    # examples/llama/convert_checkpoint.py @5955b8af (v0.8.0): --weight_only_precision int8|int4|int4_gptq.
    done = _convert(tmp_path, "0.8.0", "llama/convert_checkpoint.py", "--use_weight_only",
                    "--weight_only_precision", "int4_awq")
    assert done.returncode == 2
    assert ("convert_checkpoint.py: error: argument --weight_only_precision: invalid choice: 'int4_awq' "
            "(choose from 'int8', 'int4', 'int4_gptq')") in done.stderr


def test_quantize_choice_is_checked(tmp_path: Path) -> None:
    # examples/quantization/quantize.py @5955b8af: --qformat fp8|int8_sq|int4_awq|w4a8_awq|int8_wo|int4_wo|full_prec.
    done = _run(tmp_path, "0.8.0", "quantization/quantize.py", "--model_dir", str(tmp_path / "model"),
                "--output_dir", str(tmp_path / "ckpt"), "--qformat", "int4_gptq")
    assert done.returncode == 2
    assert "quantize.py: error: argument --qformat: invalid choice: 'int4_gptq'" in done.stderr


def test_0_7_quantize_export_path_and_hf_llama_convert_storage_type(tmp_path: Path) -> None:
    # v0.7.1 (80bc0751): quantize.py takes --export_path (no --output_dir); hf_llama_convert.py's
    # --storage-type/-t takes fp32|fp16.
    done = _run(tmp_path, "0.7.1", "quantization/quantize.py", "--model_dir", str(tmp_path / "model"),
                "--output_dir", str(tmp_path / "ckpt"))
    assert done.returncode == 2
    assert "quantize.py: error: unrecognized arguments: --output_dir" in done.stderr
    done = _run(tmp_path, "0.7.1", "llama/hf_llama_convert.py", "-i", str(tmp_path / "model"),
                "-o", str(tmp_path / "ckpt"), "--storage-type", "bf16")
    assert done.returncode == 2
    assert "argument --storage-type/-t: invalid choice: 'bf16' (choose from 'fp32', 'fp16')" in done.stderr


def test_required_argument_missing_is_refused(tmp_path: Path) -> None:
    done = _run(tmp_path, "0.8.0", "quantization/quantize.py", "--output_dir", str(tmp_path / "ckpt"))
    assert done.returncode == 2
    assert "quantize.py: error: the following arguments are required: --model_dir" in done.stderr


def test_script_the_release_does_not_have_fails_as_python_does(tmp_path: Path) -> None:
    # examples/gpt @5955b8af (v0.8.0) has build.py and hf_gpt_convert.py, no convert_checkpoint.py.
    done = _convert(tmp_path, "0.8.0", "gpt/convert_checkpoint.py", "--gpt_variant", "gpt2")
    assert done.returncode == 2
    assert "can't open file" in done.stderr and "not in TensorRT-LLM 0.8.0's tree" in done.stderr


def test_legacy_build_checks_against_the_0_7_1_extract(tmp_path: Path) -> None:
    # examples/llama/build.py @80bc0751 has --ft_model_dir (line 141); the 0.7-era copy's --bin_model_dir is not there.
    done = _run(tmp_path, "0.7.1", "llama/build.py", "--bin_model_dir", str(tmp_path / "model"),
                "--output_dir", str(tmp_path / "engine"))
    assert done.returncode == 2
    assert "build.py: error: unrecognized arguments: --bin_model_dir" in done.stderr


def test_accepted_argv_runs_and_says_what_it_was_checked_against(tmp_path: Path) -> None:
    done = _convert(tmp_path, "0.9.0", "llama/convert_checkpoint.py", "--dtype", "float16", "--tp_size", "1",
                    "--smoothquant", "0.5", "--per_token", "--per_channel", "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert "argv checked against script_flags.json 0.9.0 @250d9c29" in done.stdout
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["stand_in"] is True


def test_release_without_a_tree_uses_the_hand_read_copy(tmp_path: Path) -> None:
    # No 0.21 tree was read: converter_flags.json's models/core/gpt copy (7edbcccb, names and choices) stands in.
    done = _convert(tmp_path, "0.21.0rc1", "models/core/gpt/convert_checkpoint.py", "--model_version", "gpt2")
    assert done.returncode == 2
    assert "unrecognized arguments: --model_version gpt2" in done.stderr
    done = _convert(tmp_path, "0.21.0rc1", "models/core/gpt/convert_checkpoint.py", "--gpt_variant", "gpt3")
    assert done.returncode == 2
    assert "argument --gpt_variant: invalid choice: 'gpt3'" in done.stderr


@pytest.mark.parametrize("version", ["0.21.0rc1", "1.0.0"])
def test_script_no_extract_covers_runs_unchecked_with_a_warning(tmp_path: Path, version: str) -> None:
    done = _convert(tmp_path, version, "models/core/llama/convert_checkpoint.py", "--tp_size", "1")
    assert done.returncode == 0, done.stderr
    assert "argv NOT checked: no argparse extract for examples/models/core/llama/convert_checkpoint.py" in done.stdout


def test_the_stand_in_does_not_read_lmi_builds_tables() -> None:
    assert "lmi_build" not in STANDIN.read_text()
    assert "lmi_build" not in (STANDIN.parent / "vendor_argparse.py").read_text()


def test_hand_read_converter_copies_agree_with_the_extract_where_both_exist() -> None:
    # converter_flags.json (read by hand from stored copies, 'tags' the releases it is held for) against
    # script_flags.json (extracted at the release's commit): the same flag names and choices wherever
    # both cover a (release, script), so the fallback the stand-in uses for 0.21/1.0 is no weaker a source.
    vendor = VENDOR_DIR / "trtllm"
    hand = json.loads((vendor / "converter_flags.json").read_text())["converters"]
    extract = json.loads((vendor / "script_flags.json").read_text())["releases"]
    compared = 0
    for key, copy in hand.items():
        for tag in copy["tags"]:
            release = extract.get(tag, {"missing": True})
            if release.get("missing") or copy["path"] not in release["scripts"]:
                continue
            flags = release["scripts"][copy["path"]]["flags"]
            assert {name.replace("-", "_") for name in flags} == set(copy["flags"]), (key, tag)
            for name, choices in copy.get("choices", {}).items():
                given = {c for c in flags[name].get("choices", choices) if c is not None}  # None: the default only
                assert given == set(choices), (key, tag, name)
            compared += 1
    assert compared >= 10
