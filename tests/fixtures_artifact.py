"""Fixtures of the artifact tests: real safetensors checkpoints, a real trained tokenizer, plans.

The fast checkpoints are written with ``safetensors.numpy`` (no torch); the end-to-end fixture
builds a real tiny Llama with transformers (marked slow by the tests that use it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lmi_build.artifact.layout import Layout
from lmi_build.artifact.manifest import BuildRecord, HardwareTarget, StepTiming
from lmi_build.core.types import ModelIdentity
from lmi_build.model.spec import ModelSpec
from lmi_build.planning.plan import BuildPlan, QuantizationPlan, ToolchainRef
from lmi_build.targets import TARGETS
from lmi_build.targets.hf.knobs import HfBuild
from lmi_build.targets.trtllm.knobs import TrtllmBuild

HF = TARGETS["hf"]
HF_LAYOUT = HF.layouts()["hf"]

LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "torch_dtype": "float16",
}
CHAT_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"


def tiny_spec() -> ModelSpec:
    return ModelSpec(model_type="llama", architectures=("LlamaForCausalLM",), hidden_size=64, num_layers=2,
                     num_attention_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=128, vocab_size=256,
                     max_position_embeddings=512, torch_dtype="float16", num_parameters=70_000)


def make_plan(target: str = "hf", **overrides: Any) -> BuildPlan:
    """A valid BuildPlan as the planner would produce it (constructed directly: it is plain data)."""
    builds: dict[str, Any] = {
        "hf": HfBuild(tp=1, dtype="float16"),
        "trtllm": TrtllmBuild(tp=2, pp=1, dtype="float16", max_input_len=256, max_output_len=256, max_seq_len=512,
                              max_batch_size=8),
    }
    toolchains = {
        "hf": ToolchainRef(target="hf"),
        "trtllm": ToolchainRef(target="trtllm", profile="lmi-0.27.0-trtllm-0.8.0",
                               image="763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.27.0-tensorrtllm0.8.0-cu122",
                               versions={"tensorrt_llm": "0.8.0", "tensorrt": "9.2.0.post12.dev5", "cuda": "12.2"}),
    }
    fields: dict[str, Any] = {
        "target": target,
        "recipe": "llama",
        "recipe_version": 1,
        "model": ModelIdentity(kind="hf", id="tiny-org/tiny-llama", revision="0" * 40, digest="sha256:" + "a" * 64),
        "spec": tiny_spec(),
        "options": {"engine": "Python", "option.model_id": "tiny-org/tiny-llama", "option.dtype": "fp16",
                    "option.tensor_parallel_degree": "1", "option.max_rolling_batch_size": "8",
                    "option.rolling_batch": "auto"},
        "option_sources": {"option.model_id": "cli", "option.dtype": "default"},
        "build": builds[target],
        "quantization": QuantizationPlan(),
        "toolchain": toolchains[target],
        "cache_key": "sha256:" + "b" * 64,
        "valid": True,
    }
    fields.update(overrides)
    return BuildPlan(**fields)


def make_record(**overrides: Any) -> BuildRecord:
    fields: dict[str, Any] = {"steps": [StepTiming(name="convert", seconds=1.25, detail="fp16")]}
    fields.update(overrides)
    return BuildRecord(**fields)


def write_weights(directory: Path, *, shards: int = 1, seed: int = 0) -> list[str]:
    """Real safetensors shards (numpy), with an index when there is more than one."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    names = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
             "model.layers.1.mlp.down_proj.weight", "model.norm.weight", "lm_head.weight"]
    files = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)] if shards > 1 else [
        "model.safetensors"]
    weight_map: dict[str, str] = {}
    for index, file_name in enumerate(files):
        tensors = {name: rng.standard_normal((16, 16)).astype(np.float16)
                   for i, name in enumerate(names) if i % len(files) == index}
        save_file(tensors, str(directory / file_name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(tensors, file_name))
    if shards > 1:
        (directory / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}, indent=2))
    return files


def write_tokenizer(directory: Path) -> None:
    """A byte-level BPE tokenizer trained offline with `tokenizers`, saved as transformers does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256, special_tokens=["<s>", "</s>", "<unk>"], show_progress=False)
    tokenizer.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 20, trainer=trainer)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
         "unk_token": "<unk>", "model_max_length": 512}))
    (directory / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))


def write_source_model(directory: Path, *, shards: int = 1, remote_code: bool = True) -> Path:
    """A complete HF model directory: config, weights, tokenizer, chat template, generation config,
    custom code, plus files that must NOT be carried (README, a .bin)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({**LLAMA_CONFIG, "source_marker": "hf"}, indent=2))
    write_weights(directory, shards=shards)
    write_tokenizer(directory)
    (directory / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
    (directory / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (directory / "README.md").write_text("# tiny llama\n")
    (directory / "pytorch_model.bin").write_bytes(b"not carried")
    if remote_code:
        (directory / "modeling_tiny.py").write_text("# custom modeling code\n")
        (directory / "configuration_tiny.py").write_text("# custom config code\n")
    return directory


@pytest.fixture
def source_model(tmp_path: Path) -> Path:
    return write_source_model(tmp_path / "src" / "tiny-llama")


@pytest.fixture
def hf_artifact(tmp_path: Path, source_model: Path) -> Path:
    """An hf-layout artifact packaged from ``source_model`` (produced = the source checkpoint)."""
    from lmi_build.artifact.packager import package

    return package(make_plan("hf"), target=HF, layout=HF_LAYOUT, produced=source_model, source_dir=source_model,
                   output_dir=tmp_path / "out" / "artifact", record=make_record())


@pytest.fixture
def make_artifact(tmp_path: Path) -> Callable[..., Path]:
    """Package any plan/layout into a fresh output dir under tmp_path."""
    from lmi_build.artifact.packager import package

    counter = iter(range(1000))

    def build(plan: BuildPlan, target: Any, layout: Layout, produced: Path, source: Path, *,
              hardware: HardwareTarget | None = None, toolchain: dict[str, str] | None = None) -> Path:
        record = make_record(hardware=hardware or HardwareTarget(), toolchain=toolchain or {})
        return package(plan, target=target, layout=layout, produced=produced, source_dir=source,
                       output_dir=tmp_path / "out" / f"artifact-{next(counter)}", record=record)

    return build


@dataclass(frozen=True)
class TargetWithLayouts:
    """A target with test layouts added to its own, as a target package would declare them."""

    base: Any
    extra: tuple[Layout, ...]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def layouts(self) -> dict[str, Layout]:
        return {**self.base.layouts(), **{layout.name: layout for layout in self.extra}}


def produced_as(source: Path, out: Path, *, architectures: tuple[str, ...] | None = None,
                quant_method: str | None = None, modelopt_algo: str | None = None) -> Path:
    """A copy of ``source`` whose files say what a plan records (verify reads the architecture and
    the checkpoint format from config.json / hf_quant_config.json, never from the manifest alone)."""
    import shutil

    shutil.copytree(source, out)
    config = json.loads((out / "config.json").read_text())
    if architectures is not None:
        config["architectures"] = list(architectures)
    if quant_method is not None:
        config["quantization_config"] = {"quant_method": quant_method}
    if modelopt_algo is not None:
        (out / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": modelopt_algo}}))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out
