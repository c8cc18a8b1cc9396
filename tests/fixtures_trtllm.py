"""Fixtures for the TensorRT-LLM tests: plans of real fixture configs, the trtllm-build stand-in on
PATH, and tiny on-disk checkpoints/models."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lmi_build.planning.plan import BuildPlan

STANDINS = Path(__file__).resolve().parent / "standins"
LLAMA = "meta-llama--Llama-2-7b-hf"
TrtllmPlanner = Callable[..., BuildPlan]


@pytest.fixture
def trtllm_plan(plan_model: Callable[..., BuildPlan]) -> TrtllmPlanner:
    """``trtllm_plan(profile, model=LLAMA, **request)`` -> a valid trtllm BuildPlan (real planner)."""

    def make(profile: str, model: str = LLAMA, **fields: Any) -> BuildPlan:
        plan = plan_model("trtllm", model, profile=profile, **fields)
        if not plan.valid:
            raise AssertionError(f"plan invalid: {[e.message for e in plan.errors]}")
        return plan

    return make


@pytest.fixture
def standin_path(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Put the trtllm-build stand-in first on PATH, speaking the given TensorRT-LLM version."""

    def use(version: str, mode: str = "ok") -> None:
        monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("STANDIN_TRTLLM_VERSION", version)
        monkeypatch.setenv("STANDIN_MODE", mode)

    return use


def write_checkpoint(directory: Path, *, tp: int, pp: int = 1) -> Path:
    """A TRT-LLM checkpoint directory's config.json (the stand-in reads only the mapping)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {"architecture": "LlamaForCausalLM", "dtype": "float16",
              "mapping": {"world_size": tp * pp, "tp_size": tp, "pp_size": pp}}
    (directory / "config.json").write_text(json.dumps(config))
    for rank in range(tp * pp):
        (directory / f"rank{rank}.safetensors").write_bytes(b"{}")
    return directory


def write_model_dir(directory: Path) -> Path:
    """A source model directory with an HF config and tokenizer files (no weights needed here)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    (directory / "tokenizer.json").write_text("{}")
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    (directory / "special_tokens_map.json").write_text("{}")
    (directory / "generation_config.json").write_text("{}")
    (directory / "chat_template.jinja").write_text("{{ messages }}")
    return directory
