"""Every long command, run the way a person runs it: at an 80-column pseudo-terminal, TERM set.

Each must finish, draw its progress with a total (and a rate or time left where the total is
knowable), print a bounded amount (a progress display that redraws itself without end floods the
terminal), and on Ctrl-C exit 130 within 5 s leaving no lock, work directory or partial output, an
``--overwrite`` target intact. Issue 30: piped, every one of these passed; at a terminal the build
commands hung, ignored Ctrl-C and once wrote 40 MB of progress bars.

These tests never run a command through a pipe: ``pty_session.run_in_terminal`` gives it a terminal.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures_s3 import S3Server
from tests.paths import REPO_ROOT
from tests.terminal.pty_session import TerminalRun, run_in_terminal

LMI_BUILD = str(Path(sys.executable).parent / "lmi-build")
# Output allowed: the final tables and messages, plus per second of work a progress display at 80
# columns redrawing a line a few times a second. The hang of issue 30 wrote megabytes a second.
FINAL_OUTPUT_BYTES = 16 * 1024
MAX_BYTES_PER_SECOND = 4096
# A bar with a total shows "done/total unit" (bytes: "1.2/6.3 MB"; items: "3/16 layers").
TOTAL = re.compile(r"\b\d+(\.\d+)?/\d+(\.\d+)? ?(bytes|[kMG]B|[A-Za-z]+)")
# ... and either a transfer rate or the time left (rich: "1.2 MB/s", "0:00:03").
RATE_OR_ETA = re.compile(r"[kMG]?B/s|\b\d:\d\d:\d\d\b")


@dataclass(frozen=True)
class LongCommand:
    name: str
    args: tuple[str, ...]  # after lmi-build; {out} is the output path
    progress: str  # the label of a bar that must show its total
    interrupt_at: str  # Ctrl-C is pressed once this text is on the screen
    overwrite: bool = True  # takes --overwrite
    # Also Ctrl-C of a first build (nothing may be left). Off where another command covers the same
    # code: every first build is interrupted by the same staged-output cleanup.
    interrupt_first: bool = True


DEMO_STEPS = REPO_ROOT / "Makefile"


@pytest.fixture(scope="module")
def terminal_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One lmi-build cache for the module (the demo models are generated once), and nothing of
    the test run's own terminal settings."""
    cache = tmp_path_factory.mktemp("terminal-cache")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST", "COLUMNS", "LINES"))}
    env.update({"LMI_BUILD_CACHE": str(cache), "PYTHONUNBUFFERED": "1"})
    yield env


def lmi_build(args: tuple[str, ...], out: Path) -> list[str]:
    return [LMI_BUILD, *(arg.replace("{out}", str(out)) for arg in args)]


def leftovers(directory: Path) -> list[str]:
    """Locks, work, staging and partial directories lmi-build makes beside an output."""
    found = []
    for path in directory.rglob("*"):
        name = path.name
        if name.endswith(".lock") or ".work-" in name or "staging" in name or name.endswith(".lmi-build-partial"):
            found.append(str(path.relative_to(directory)))
    return sorted(found)


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def assert_bounded(run: TerminalRun) -> None:
    allowed = FINAL_OUTPUT_BYTES + MAX_BYTES_PER_SECOND * run.seconds
    assert len(run.raw) <= allowed, f"{len(run.raw)} bytes in {run.seconds:.1f} s (at most {allowed:.0f})\n{run.describe()}"


def assert_finished_well(run: TerminalRun, progress: str) -> None:
    assert run.exit_code == 0, run.describe()
    assert_bounded(run)
    lines = [line for line in run.text.splitlines() if progress in line]
    assert lines, f"no progress line {progress!r}\n{run.describe()}"
    with_total = [line for line in lines if TOTAL.search(line) and "/?" not in line]
    assert with_total, f"{progress!r} never showed a total: {lines[-3:]}\n{run.describe()}"
    assert any(RATE_OR_ETA.search(line) for line in with_total), f"no rate or time left: {with_total[-3:]}"


def assert_interrupted_well(run: TerminalRun, workdir: Path, before: dict[str, bytes] | None = None,
                            target: Path | None = None) -> None:
    assert run.interrupted_at is not None, f"Ctrl-C was never pressed\n{run.describe()}"
    assert run.exit_code == 130, run.describe()
    after = run.seconds_after_interrupt
    assert after is not None and after < 5.0, f"exited {after:.1f} s after Ctrl-C\n{run.describe()}"
    assert leftovers(workdir) == [], run.describe()
    if target is not None:
        if before is None:
            assert not target.exists(), f"a partial {target.name} was left\n{run.describe()}"
        else:
            assert tree(target) == before, f"the --overwrite target {target.name} changed"
    assert_bounded(run)


BUILDS = [
    LongCommand("trtllm-script", ("trtllm", "--model", "demo:tiny-llama", "--tp", "1", "--runner", "script",
                                  "--output", "{out}"), progress="checkpoint", interrupt_at="checkpoint"),
    LongCommand("trtllm-checkpoint", ("trtllm", "--model", "demo:tiny-mistral", "--tp", "1", "--until",
                                      "checkpoint", "--no-cache", "--output", "{out}"),
                progress="checkpoint", interrupt_at="checkpoint"),
    LongCommand("hf", ("hf", "--model", "demo:tiny-llama", "--dtype", "bf16", "--output", "{out}"),
                progress="checkpoint", interrupt_at="checkpoint"),
    # Each run imports ModelOpt (~20 s of CPU here): calibration's Ctrl-C is pressed on the --overwrite
    # rebuild only; the hf command above interrupts a first hf build.
    LongCommand("hf-quantize", ("hf", "--model", "demo:tiny-llama", "--quantize", "awq", "-o", "option.calib_size=4",
                                "-o", "option.calib_max_seq_len=64", "--output", "{out}"),
                progress="calibrating", interrupt_at="calibrating", interrupt_first=False),
]


@pytest.mark.slow
@pytest.mark.parametrize("command", BUILDS, ids=lambda c: c.name)
def test_build_finishes_then_ctrl_c_leaves_nothing(command: LongCommand, terminal_env: dict[str, str],
                                                   tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_in_terminal(lmi_build(command.args, out), cwd=tmp_path, env=terminal_env, timeout=120)
    assert_finished_well(done, command.progress)
    assert leftovers(tmp_path) == []
    # Ctrl-C of a rebuild with --overwrite: the finished output stays as it was.
    before = tree(out)
    again = run_in_terminal(lmi_build((*command.args, "--overwrite", "--no-cache"), out), cwd=tmp_path,
                            env=terminal_env, timeout=120,
                            interrupt_when=lambda screen: command.interrupt_at in screen)
    assert_interrupted_well(again, tmp_path, before, out)
    if not command.interrupt_first:
        return
    # ... and of a first build: nothing at all.
    fresh = tmp_path / "fresh"
    first = run_in_terminal(lmi_build((*command.args, "--no-cache"), fresh), cwd=tmp_path, env=terminal_env, timeout=120,
                            interrupt_when=lambda screen: command.interrupt_at in screen)
    assert_interrupted_well(first, tmp_path, None, fresh)


def _demo_lines() -> list[list[str]]:
    """The Makefile's demo recipe, one argv per line, as `make demo` runs it."""
    text = DEMO_STEPS.read_text(encoding="utf-8")
    recipe = text.split("\ndemo:\n", 1)[1].split("\n\n", 1)[0]
    joined = recipe.replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line.strip())
        if words and words[0] == "$(BIN)/lmi-build":
            commands.append(words[1:])
    return commands


@pytest.mark.slow
def test_make_demo_steps_at_a_terminal(terminal_env: dict[str, str], tmp_path: Path) -> None:
    steps = _demo_lines()
    assert len(steps) >= 5, steps
    for step in steps:
        args = tuple(arg.replace("$(DEMO_MODEL)", "demo:tiny-llama").replace("$(OUT)", "{out}") for arg in step)
        run = run_in_terminal(lmi_build(args, tmp_path / "out"), cwd=tmp_path, env=terminal_env, timeout=120)
        assert run.exit_code == 0, run.describe()
        assert_bounded(run)
        assert "…" not in run.text, f"something was cut at 80 columns\n{run.describe()}"
    assert leftovers(tmp_path) == []


def write_sized_llama(directory: Path, layers: int = 6) -> Path:
    """A Llama model of ~150 MB (zero weights, the demo tokenizer's vocabulary size): large enough
    that a publish or pull to the local S3 server is still running when Ctrl-C is pressed."""
    import numpy as np
    from safetensors.numpy import save_file

    hidden, intermediate, vocab = 1024, 2816, 1024
    directory.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
              "intermediate_size": intermediate, "num_hidden_layers": layers, "num_attention_heads": 8,
              "num_key_value_heads": 8, "head_dim": 128, "vocab_size": vocab, "max_position_embeddings": 2048,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
              "torch_dtype": "float16", "bos_token_id": 1, "eos_token_id": 2}
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    tensors = {"model.embed_tokens.weight": np.zeros((vocab, hidden), np.float16),
               "lm_head.weight": np.zeros((vocab, hidden), np.float16),
               "model.norm.weight": np.ones(hidden, np.float16)}
    for layer in range(layers):
        prefix = f"model.layers.{layer}."
        for projection in ("q", "k", "v", "o"):
            tensors[f"{prefix}self_attn.{projection}_proj.weight"] = np.zeros((hidden, hidden), np.float16)
        tensors[f"{prefix}mlp.gate_proj.weight"] = np.zeros((intermediate, hidden), np.float16)
        tensors[f"{prefix}mlp.up_proj.weight"] = np.zeros((intermediate, hidden), np.float16)
        tensors[f"{prefix}mlp.down_proj.weight"] = np.zeros((hidden, intermediate), np.float16)
        tensors[f"{prefix}input_layernorm.weight"] = np.ones(hidden, np.float16)
        tensors[f"{prefix}post_attention_layernorm.weight"] = np.ones(hidden, np.float16)
    save_file(tensors, str(directory / "model.safetensors"))
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, "</s>": 2}, unk_token="<unk>")).save(
        str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
         "unk_token": "<unk>"}), encoding="utf-8")
    return directory


@pytest.mark.slow
@pytest.mark.s3
def test_publish_and_pull_at_a_terminal(s3_env: S3Server, s3_bucket: str, terminal_env: dict[str, str],
                                        tmp_path: Path) -> None:
    env = {**terminal_env, **s3_env.env()}
    artifact = tmp_path / "art"
    model = write_sized_llama(tmp_path / "model")
    built = run_in_terminal(lmi_build(("hf", "--model", str(model), "--output", "{out}"), artifact),
                            cwd=tmp_path, env=env, timeout=120)
    assert built.exit_code == 0, built.describe()
    url = f"s3://{s3_bucket}/tiny/"
    # Ctrl-C of a publish: nothing is half-published (no manifest), and a rerun publishes it whole.
    stopped = run_in_terminal(lmi_build(("publish", str(artifact), url), artifact), cwd=tmp_path, env=env,
                              timeout=60, interrupt_when=lambda screen: "publish s3://" in screen)
    assert_interrupted_well(stopped, tmp_path)
    # ... and it says so (issue 42: it said "the vendor tool was stopped and work directories removed").
    assert "reads as incomplete" in stopped.text and "rerun the same command to complete it" in stopped.text
    assert "vendor tool" not in stopped.text, stopped.describe()
    keys = [o["Key"] for o in s3_env.client().list_objects_v2(Bucket=s3_bucket).get("Contents", [])]
    assert "tiny/lmi-build.json" not in keys, keys
    published = run_in_terminal(lmi_build(("publish", str(artifact), url), artifact), cwd=tmp_path, env=env,
                                timeout=60)
    assert_finished_well(published, "publish s3://")
    # Ctrl-C of a pull: the destination never appears half-written. The hidden partial directory
    # is kept on purpose (README: an interrupted pull resumes), and the rerun resumes from it.
    pulled = tmp_path / "pulled"
    stopped_pull = run_in_terminal(lmi_build(("pull", url, str(pulled)), pulled), cwd=tmp_path, env=env,
                                   timeout=60, interrupt_when=lambda screen: "pull s3://" in screen)
    assert stopped_pull.exit_code == 130, stopped_pull.describe()
    assert stopped_pull.seconds_after_interrupt is not None and stopped_pull.seconds_after_interrupt < 5
    assert not pulled.exists()
    assert ".pulled.lmi-build-partial" in stopped_pull.text and "rerun the same command to resume" in stopped_pull.text
    assert "vendor tool" not in stopped_pull.text, stopped_pull.describe()
    assert [p for p in leftovers(tmp_path) if not p.endswith(".lmi-build-partial")] == []
    done = run_in_terminal(lmi_build(("pull", url, str(pulled)), pulled), cwd=tmp_path, env=env, timeout=60)
    assert done.exit_code == 0, done.describe()
    assert tree(pulled) == tree(artifact)
    assert leftovers(tmp_path) == []


@pytest.mark.slow
@pytest.mark.s3
def test_matrix_at_a_terminal(s3_env: S3Server, s3_bucket: str, terminal_env: dict[str, str], tmp_path: Path) -> None:
    env = {**terminal_env, **s3_env.env()}
    (tmp_path / "builds.toml").write_text(
        '[[build]]\ntarget = "hf"\nmodel = "demo:tiny-llama"\n[build.matrix]\ndtype = ["fp16", "bf16"]\n',
        encoding="utf-8")
    args = ("matrix", "builds.toml", "--cache", f"s3://{s3_bucket}/cache/", "--executor", "local")
    stopped = run_in_terminal(lmi_build(args, tmp_path), cwd=tmp_path, env=env, timeout=60,
                              interrupt_when=lambda screen: "running " in screen)
    assert stopped.exit_code == 130, stopped.describe()
    assert stopped.seconds_after_interrupt is not None and stopped.seconds_after_interrupt < 5
    done = run_in_terminal(lmi_build(args, tmp_path), cwd=tmp_path, env=env, timeout=180)
    assert done.exit_code == 0, done.describe()
    assert_bounded(done)
    assert re.search(r"\b2/2\b|2 of 2", done.text), done.describe()
    assert leftovers(tmp_path) == []


NEURON_STANDIN = REPO_ROOT / "tests" / "standins" / "neuron-python"


@pytest.mark.slow
def test_neuronx_at_a_terminal(terminal_env: dict[str, str], tmp_path: Path) -> None:
    """The compile's length cannot be known: a spinner with the time taken and the compiler's
    last line; Ctrl-C stops the compiler's process group too."""
    env = {**terminal_env, "LMI_BUILD_NEURON_PYTHON": str(NEURON_STANDIN), "STANDIN_NEURONX_CC": "2.15.141.0"}
    args = ("neuronx", "--model", "demo:tiny-llama", "--tp", "2", "--n-positions", "256", "--runner", "local",
            "--output", "{out}")
    out = tmp_path / "out"
    done = run_in_terminal(lmi_build(args, out), cwd=tmp_path, env=env, timeout=120)
    assert done.exit_code == 0, done.describe()
    assert "compile running" in done.text, done.describe()
    assert_bounded(done)
    before = tree(out)
    hung = {**env, "STANDIN_MODE": "hang"}
    stopped = run_in_terminal(lmi_build((*args, "--overwrite", "--no-cache"), out), cwd=tmp_path, env=hung,
                              timeout=60, interrupt_when=lambda screen: "compile running" in screen)
    assert_interrupted_well(stopped, tmp_path, before, out)
