"""Every command line of every README block, run the way a new user on a CPU host would run it.

The Hub lines run twice: as written with ``HF_HUB_OFFLINE=1`` (each must stop with one line saying
the model is not reachable offline), and with the Hub model replaced by a local copy of the tiny
Llama shaped as Llama-2-7B's config (4,096 positions) and ``s3://bucket`` by a bucket of the test's
SeaweedFS. Each line has its expected outcome on this host in ``EXPECTED``: 0, or the documented
stop (exit 3 without a TensorRT-LLM toolchain, exit 2 for an unfinished build, the bundle's check
naming what is missing). A README line with no entry fails the test, so a new line gets an
expectation, and a line that stops working fails it too. A plain ``lmi-build`` line runs through the
console script's entry point in this process, as the CLI tests do; the offline Hub lines (the
environment huggingface_hub reads at import) and the lines with shell syntax run in bash.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli_process import run_command_line
from tests.fixtures_hub import OfflineHub
from tests.fixtures_s3 import S3Server
from tests.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
pytestmark = [pytest.mark.slow, pytest.mark.s3]

HUB_MODEL = "meta-llama/Llama-2-7b-hf"
LOCAL_MODEL = "./llama-2-7b"  # the README's own name for a local copy of it
# Where a README command may start: the CLI, or the bundle's script on the GPU host.
COMMAND_START = ("lmi-build ", "./bundle/", "(cd ./bundle")

# Per line as written: (exit status on a host without GPU, Docker or Neuron SDK, text on stderr or
# stdout that says why). Lines that stop here stop as the README says they do.
EXPECTED: dict[str, tuple[int, str]] = {
    "lmi-build plan trtllm --model meta-llama/Llama-2-7b-hf --tp 2 --max-input-len 2048 --quantize awq "
    "--instance-type g5.12xlarge --save plan.json": (0, "plan saved to plan.json"),
    "lmi-build trtllm --plan plan.json --output ./out/llama2-awq": (3, "stopped after the TensorRT-LLM checkpoint"),
    "lmi-build trtllm --model meta-llama/Llama-2-7b-hf --tp 2 --quantize awq --runner docker "
    "--output ./out/llama2-awq-docker": (3, "docker"),
    "lmi-build trtllm --model ./llama-2-7b --until checkpoint --output ./ckpt": (0, "checkpoint written"),
    "lmi-build trtllm --model ./llama-2-7b --runner script --output ./bundle": (0, "build-engines.sh"),
    "./bundle/build-engines.sh --check": (1, "missing"),
    "(cd ./bundle && ./build-engines.sh) && lmi-build trtllm --plan ./bundle/plan.json --engine-dir ./bundle/engine "
    "--output ./bundle-artifact": (1, "missing"),
    "lmi-build hf --model demo:tiny-llama --quantize awq --output ./out/tiny-awq": (0, "artifact"),
    "lmi-build verify ./out/llama2-awq --for-container lmi-0.33.0-trtllm-0.21.0 --gpu sm86 --devices 2":
        (2, "unfinished trtllm build"),
    "lmi-build inspect ./out/llama2-awq": (2, "unfinished trtllm build"),
    "lmi-build publish ./out/llama2-awq s3://bucket/llama2-7b-awq-tp2/": (2, "unfinished trtllm build"),
    "lmi-build pull s3://bucket/llama2-7b-awq-tp2/ ./serving-copy": (1, "lmi-build.json"),
    "lmi-build neuronx --model meta-llama/Llama-2-7b-hf --tp 2 --n-positions 4096 --context-length-estimate "
    "256,512,1024,2048 --output ./out/llama2-inf2": (1, "needs the Neuron SDK"),
    "lmi-build matrix builds.toml --cache s3://team-bucket/lmi-build-cache/": (1, "Llama-2-7b-hf"),
}
# On a host with the artifact the lines name, publish and pull work: run on the hf artifact above.
FINISHED_STAND_IN = {"./out/llama2-awq": "./out/tiny-awq"}


def readme_commands() -> list[str]:
    """Every command of every fenced block after the Quick start (which its own test runs), one
    logical line each (backslash continuations joined, comments and `[optional]` parts dropped)."""
    text = README.read_text(encoding="utf-8")
    text = text[text.index("## Quick start"):]
    blocks = re.findall(r"```\n(.*?)```", text, re.S)[1:]
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+", " ", re.sub(r"\[[^\]]*\]", "", line.split("  #")[0])).strip()
            if line.startswith(COMMAND_START):
                commands.append(line)
    return commands


def _local_copy(text: str, bucket: str) -> str:
    text = text.replace(HUB_MODEL, LOCAL_MODEL)
    return re.sub(r"s3://(?:team-)?bucket/", f"s3://{bucket}/", text)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory holding ``./llama-2-7b``: the tiny demo Llama with Llama-2-7B's 4,096 positions,
    and the matrix example next to it."""
    from lmi_build.sources.demo import ensure_demo_model

    model = tmp_path / LOCAL_MODEL
    shutil.copytree(ensure_demo_model("tiny-llama", with_weights=True), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 4096}))
    shutil.copy(README.parent / "examples" / "builds.toml", tmp_path / "builds.toml")
    return tmp_path


def _run_in_shell(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
                          check=False)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPTION_", "AWS_", "HF_TOKEN"))}
    # Small calibration: the lines are the README's, the cost is a test's.
    return {**env, "HF_HUB_OFFLINE": "1", "OPTION_AWQ_CALIB_SIZE": "2", "OPTION_CALIB_MAX_SEQ_LEN": "32", **extra}


def test_every_readme_command_has_an_expectation() -> None:
    commands = readme_commands()
    assert len(commands) >= len(EXPECTED), commands
    unknown = [line for line in commands if line not in EXPECTED]
    assert not unknown, f"README lines without an expected outcome here (add them to EXPECTED): {unknown}"


def test_hub_lines_say_so_offline(tmp_path: Path) -> None:
    # Each in a process of its own: huggingface_hub reads HF_HUB_OFFLINE when it is imported.
    for line in (line for line in readme_commands() if HUB_MODEL in line):
        result = _run_in_shell(line, tmp_path, _env())
        assert result.returncode == 1, f"{line}\n{result.stderr[-2000:]}"
        assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr, result.stderr
        assert "local cache" in result.stderr and "HF_HUB_OFFLINE" in result.stderr, result.stderr


def test_every_readme_line_does_what_the_readme_says(workdir: Path, s3_server: S3Server, offline_hub: OfflineHub,
                                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    bucket = s3_server.new_bucket("readme")
    env = _env(**s3_server.env(), LMI_BUILD_CACHE=str(tmp_path_factory.mktemp("readme-cache")))
    for line in readme_commands():
        code, says = EXPECTED[line]
        result = run_command_line(_local_copy(line, bucket), cwd=workdir, env=env, timeout=900)
        shown = result.stdout + result.stderr
        assert result.returncode == code and says in shown, f"{line}\nexit {result.returncode}\n{shown[-3000:]}"
        assert "Traceback" not in shown, shown[-3000:]
    # The same check/publish/pull lines on an artifact this host can finish: S3 for real.
    for line in readme_commands():
        if line.startswith(("lmi-build inspect", "lmi-build publish", "lmi-build pull")):
            for unfinished, finished in FINISHED_STAND_IN.items():
                line = line.replace(unfinished, finished)
            line = _local_copy(line, bucket).replace("./serving-copy", "./serving-copy-2")
            result = run_command_line(line, cwd=workdir, env=env, timeout=900)
            assert result.returncode == 0, f"{line}\n{result.stderr[-3000:]}"
    pulled = workdir / "serving-copy-2"
    assert (pulled / "lmi-build.json").is_file() and (pulled / "serving.properties").is_file()
