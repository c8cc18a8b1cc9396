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
from tests.paths import STANDINS_DIR

STANDINS = STANDINS_DIR
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


EXAMPLE_SCRIPT_STANDIN = STANDINS / "trtllm-example-script"
# The scripts lmi-build's steps call, under each recipe example's directory (0.7.x: llama only).
_CONVERTERS = ("convert_checkpoint.py",)
_LEGACY_SCRIPTS = ("build.py", "hf_llama_convert.py")


def standin_examples(directory: Path, version: str) -> Path:
    """A fake ``examples/`` tree of TensorRT-LLM ``version`` whose scripts are all links to the
    STAND-IN (tests/standins/trtllm-example-script), at the paths that version has them."""
    from lmi_build.recipes.registry import load_recipes
    from lmi_build.targets.trtllm.flags import flag_table

    table = flag_table(version)
    examples = {r.targets["trtllm"].trtllm_example for r in load_recipes() if "trtllm" in r.targets}
    scripts = [(table.example_dir(name), script) for name in sorted(e for e in examples if e)
               for script in _CONVERTERS]
    scripts += [("llama", script) for script in _LEGACY_SCRIPTS] + [("quantization", "quantize.py")]
    for folder, script in scripts:
        (directory / folder).mkdir(parents=True, exist_ok=True)
        link = directory / folder / script
        if not link.exists():
            link.symlink_to(EXAMPLE_SCRIPT_STANDIN)
    return directory
