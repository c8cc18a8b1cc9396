"""Fixtures for the Neuron build tests: a source model directory with a real (tiny) safetensors
file, and the Neuron SDK stand-in (tests/standins/neuron-python) as the local runner's python."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.paths import FIXTURES_DIR, STANDINS_DIR

STANDIN_PYTHON = STANDINS_DIR / "neuron-python"
HF_CONFIGS = FIXTURES_DIR / "hf-configs"


def write_neuron_model(directory: Path, fixture: str = "meta-llama--Llama-2-7b-hf", config: Path | None = None) -> Path:
    """The fixture's config.json (or ``config``), tokenizer files and one small valid safetensors file."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(config or HF_CONFIGS / fixture / "config.json", directory / "config.json")
    (directory / "tokenizer.json").write_text("{}")
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizerFast"}))
    header = json.dumps({"w": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    return directory


@pytest.fixture
def neuron_standin(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Make the Neuron SDK stand-in the local runner's python, in the given mode."""

    def use(mode: str = "ok", neuronx_cc: str = "2.15.141.0", optimum_neuron: str = "0.0.24") -> None:
        monkeypatch.setenv("LMI_BUILD_NEURON_PYTHON", str(STANDIN_PYTHON))
        monkeypatch.setenv("STANDIN_MODE", mode)
        monkeypatch.setenv("STANDIN_NEURONX_CC", neuronx_cc)
        monkeypatch.setenv("STANDIN_OPTIMUM_NEURON", optimum_neuron)

    return use
