"""Long steps show progress (issue: `trtllm --until checkpoint` was silent for its whole run), and
``--quiet``/``--json`` keep it off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_process import run_lmi_build

pytestmark = pytest.mark.slow


def _build(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return run_lmi_build(*flags, "trtllm", "--model", "demo:tiny-llama", "--until", "checkpoint", "--no-cache",
                         "--output", str(tmp_path / "out"), timeout=600, env={**os.environ, "COLUMNS": "120"})


def test_the_checkpoint_step_shows_bytes_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The streamed writer moves its bar tensor by tensor (issue 42: it read 0.0 until the end, its
    files being preallocated), by exactly the bytes of weights it writes."""
    from lmi_build.quantize.safetensors_files import read_header
    from lmi_build.reporting import output

    added: list[int] = []
    count = output.ByteCount.add

    def add(bar: output.ByteCount, size: int) -> None:
        added.append(size)
        count(bar, size)

    monkeypatch.setattr(output.ByteCount, "add", add)
    result = _build(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "writing the checkpoint" in result.stderr
    assert "kB" in result.stderr or "MB" in result.stderr or "bytes" in result.stderr
    rank = next((tmp_path / "out").rglob("rank0.safetensors"))
    header, data_start = read_header(rank)
    assert len(added) == len([name for name in header if name != "__metadata__"]) > 10
    assert sum(added) == rank.stat().st_size - data_start


@pytest.mark.parametrize("flag", ["--quiet", "--json"])
def test_quiet_and_json_show_no_progress(tmp_path: Path, flag: str) -> None:
    result = _build(tmp_path, flag)
    assert result.returncode == 0, result.stderr
    assert "writing the checkpoint" not in result.stderr
    if flag == "--json":
        assert json.loads(result.stdout)["status"] == "checkpoint"


def test_watch_written_counts_what_appears(tmp_path: Path) -> None:
    import io
    import time

    from rich.console import Console

    from lmi_build.reporting.output import Mode, Output

    stream = io.StringIO()
    out = Output(mode=Mode.HUMAN)
    out._err = Console(file=stream, width=120)
    with out.watch_written("writing", tmp_path):
        (tmp_path / "a.bin").write_bytes(b"x" * 5000)
        time.sleep(0.7)
    assert "writing" in stream.getvalue() and "5.0" in stream.getvalue()


def test_calibration_progress_advances_per_decoder_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """One AWQ batch of a 7B model takes minutes: the bar moves per layer, and each pass is numbered."""
    import io

    import torch
    from rich.console import Console
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmi_build.planning.plan import CalibrationPlan
    from lmi_build.quantize.calibration import CalibrationBatches, decoder_layers
    from lmi_build.reporting import output
    from lmi_build.reporting.output import Mode, Output

    model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                         num_attention_heads=4, num_key_value_heads=4, vocab_size=64)).eval()
    assert len(decoder_layers(model)) == 3
    seen: list[int] = []
    model.model.layers[0].register_forward_hook(lambda *_: seen.append(1))
    stream = io.StringIO()
    out = Output(mode=Mode.HUMAN)
    out._err = Console(file=stream, width=120, force_terminal=False)
    monkeypatch.setattr(output, "_current", out)  # what current() returns, wherever it is imported
    batch = {"input_ids": torch.ones(1, 4, dtype=torch.long), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    plan = CalibrationPlan.model_construct(dataset="builtin:x", dataset_digest="d", size=2, max_seq_len=4,
                                           batch_size=1, seed=0)
    batches = CalibrationBatches(plan, [batch, batch], tokens=8)
    batches.forward_loop(model)
    batches.forward_loop(model)
    shown = stream.getvalue()
    assert "6/6 layers" in shown and "batch 2/2" in shown and "pass 2" in shown, shown
    assert len(seen) == 4  # the model ran; our hooks are gone after each pass (the user's stays)
    assert all(not layer._forward_hooks or layer is model.model.layers[0] for layer in model.model.layers)


def test_a_vendor_step_shows_its_elapsed_time_and_last_line(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """trtllm-build can print nothing for minutes: a live line says it runs, for how long, and what
    it printed last; the lines themselves still stream and reach the log."""
    import io

    from rich.console import Console

    from lmi_build.reporting import output
    from lmi_build.reporting.output import Mode, Output
    from lmi_build.runners.process import stream_process

    stream = io.StringIO()
    out = Output(mode=Mode.HUMAN)
    out._err = Console(file=stream, width=120, force_terminal=True)
    monkeypatch.setattr(output, "_current", out)  # what current() returns, wherever it is imported
    script = "import time; print('[TRT] building layer 1', flush=True); time.sleep(1.5); print('[TRT] done')"
    stream_process([sys.executable, "-c", script], name="trtllm-build", log_path=tmp_path / "log.txt",
                   timeout_s=60)
    shown = stream.getvalue()
    assert "trtllm-build running" in shown and "last: [TRT] building layer 1" in shown, shown
    assert "0:00:01" in shown  # the elapsed time advanced while the tool was silent
    assert "[trtllm-build] [TRT] done" in shown
    assert (tmp_path / "log.txt").read_text().splitlines()[1:] == ["[TRT] building layer 1", "[TRT] done"]
