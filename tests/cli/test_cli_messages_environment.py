"""Messages name what the user gave and say what happened (issue 42, item 7 and 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_process import run_lmi_build


@pytest.mark.parametrize("output", ["/proc/x", "/proc/x/y/z"])
@pytest.mark.parametrize("command", ["trtllm", "hf"])
def test_an_output_that_cannot_be_created_is_named(command: str, output: str) -> None:
    """``--output /proc/x`` said "No such file or directory: /proc/.x.lock", a file never named."""
    result = run_lmi_build(command, "--model", "demo:tiny-llama", "--tp", "1", "--output", output)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert f"cannot write {output}:" in line and ".lock" not in line, result.stderr


def test_pull_into_a_place_that_cannot_be_created_is_named(tmp_path: Path) -> None:
    from lmi_build.core.errors import LmiBuildError
    from lmi_build.core.fs import directory_lock

    with pytest.raises(LmiBuildError, match=r"cannot write /proc/pulled: files cannot be created in /proc"), \
            directory_lock(Path("/proc/pulled")):
        pass


def test_a_deleted_current_directory_is_one_line_that_says_so(tmp_path: Path) -> None:
    """It said "No such file or directory", naming nothing."""
    import os
    import subprocess
    import sys

    (tmp_path / "gone").mkdir()
    result = subprocess.run(["bash", "-c", 'cd gone && rmdir ../gone && exec "$0" -m lmi_build plan hf --model '
                             "demo:tiny-llama", sys.executable], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, check=False, env={**os.environ, "LMI_BUILD_DEBUG": ""})
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "the current directory no longer exists" in result.stderr and "cd to a directory" in result.stderr


def test_a_stream_that_cannot_encode_a_name_gets_escapes(tmp_path: Path) -> None:
    """A latin-1 stdout and a CJK path was a UnicodeEncodeError traceback."""
    import os
    import shutil

    from tests.cli_process import run_lmi_build_process
    from tests.paths import FIXTURES_DIR

    (tmp_path / "模型").mkdir()
    shutil.copy(FIXTURES_DIR / "hf-configs" / "meta-llama--Llama-2-7b-hf" / "config.json", tmp_path / "模型")
    shutil.copy(FIXTURES_DIR / "hf-configs" / "meta-llama--Llama-2-7b-hf" / "tokenizer.json", tmp_path / "模型")
    env = {**os.environ, "PYTHONIOENCODING": "latin-1"}
    result = run_lmi_build_process("plan", "hf", "--model", "./模型", cwd=tmp_path, env=env)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "\\u6a21\\u578b (local)" in result.stdout, result.stdout
    missing = run_lmi_build_process("plan", "hf", "--model", "./nope模型", cwd=tmp_path, env=env)
    assert missing.stderr == "error: model directory nope\\u6a21\\u578b does not exist (check the path)\n"


@pytest.mark.slow  # four lmi-build processes and two builds: about 7 s
def test_a_non_ascii_model_directory_builds_under_the_c_locale(tmp_path: Path) -> None:
    """``LC_ALL=C`` without Python's UTF-8 mode keeps the directory name's bytes as lone surrogates:
    the manifest held them and the artifact failed its own staged verification."""
    import json
    import os

    from tests.cli_process import run_lmi_build_process
    from tests.fixtures_artifact import write_source_model

    write_source_model(tmp_path / "модель", remote_code=False)
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "LMI_BUILD_CACHE": str(tmp_path / "cache")}
    built = run_lmi_build_process("hf", "--model", "./модель", "--no-cache", "--output", "out", cwd=tmp_path, env=env)
    assert built.returncode == 0, built.stderr
    manifest = json.loads((tmp_path / "out" / "lmi-build.json").read_text(encoding="utf-8"))
    assert manifest["source"]["id"] == "модель", manifest["source"]
    assert run_lmi_build_process("verify", "out", cwd=tmp_path, env=env).returncode == 0
    # A saved plan names the directory: it is read back and built from (it held lone surrogates too).
    saved = run_lmi_build_process("plan", "hf", "--model", "./модель", "--save", "p.json", cwd=tmp_path, env=env)
    assert saved.returncode == 0 and "\\udc" not in (tmp_path / "p.json").read_text(encoding="utf-8")
    again = run_lmi_build_process("hf", "--plan", "p.json", "--no-cache", "--output", "again", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
