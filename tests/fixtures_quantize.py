"""Tiny Hugging Face models for the quantize tests, created on the fly with transformers.

Hidden and intermediate sizes are multiples of 128 so INT4 groups of 128 apply to every linear
layer; the Llama uses Llama-3.1 rope (theta 500000 + llama3 scaling) so the export's rope
handling is checked; GPT-2 is the architecture ModelOpt cannot export to TensorRT-LLM.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

LLAMA3_ROPE: dict[str, Any] = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
VOCAB = 1024


def _train_tokenizer(out_dir: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from lmi_build.planning import calibration_text

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(calibration_text.load_builtin().samples, trainer)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|end_of_text|>",
        "model_max_length": 8192,
    }))


def make_tiny_llama3(out_dir: Path, *, hidden: int = 256, layers: int = 2, vocab: int = VOCAB,
                     intermediate: int = 512, seed: int = 0) -> Path:
    """A Llama-3.1-shaped model (GQA 8/4) saved in fp16 safetensors, with a trained tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        vocab_size=vocab,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        rope_scaling=dict(LLAMA3_ROPE),
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
        torch_dtype="float16",
    )
    model = LlamaForCausalLM(config)
    # A wider init than the default 0.02 gives logits with a real spread, so quantization error
    # is measurable relative to it.
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if param.dim() == 2:
                param.normal_(0.0, 0.08 if "embed" in name else 0.05)
    model.half().save_pretrained(out_dir, safe_serialization=True)
    if vocab == VOCAB:
        _train_tokenizer(out_dir)
    return out_dir


def make_tiny_gpt2(out_dir: Path) -> Path:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=512)
    GPT2LMHeadModel(config).half().save_pretrained(out_dir, safe_serialization=True)
    _train_tokenizer(out_dir)
    return out_dir


@pytest.fixture(scope="session")
def tiny_llama3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_llama3(tmp_path_factory.mktemp("tiny-llama3"))


@pytest.fixture(scope="session")
def narrow_llama3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_llama3 at half the width (hidden 128, intermediate 256), for GPTQ: ModelOpt's CPU GPTQ
    fake-quantizes the whole weight once per input column (calib_utils.gptq_blockwise_update), so
    its cost grows with in_features^2 x out_features; half the width is an eighth of the time
    (about 50 s to 6 s per GPTQ test on 2 cores) and still two 128-input groups per down_proj row."""
    return make_tiny_llama3(tmp_path_factory.mktemp("narrow-llama3"), hidden=128, intermediate=256)


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"))


def resolved_options(values: dict[str, str]) -> Any:
    """Options as resolution types them (a value that does not parse raises: resolution's to report)."""
    from lmi_build.options.resolve import written_options

    full = {k if k.startswith("option.") else f"option.{k}": v for k, v in values.items()}
    return written_options(full, dict.fromkeys(full, "cli"))


def make_build_plan(model_dir: Path, *, target: str = "trtllm", method: str | None = None,
                    options: dict[str, str] | None = None, tp: int = 1, pp: int = 1,
                    dtype: str = "float16", decoder: str | None = "llama", route: str = "modelopt",
                    calib_file: Path | None = None, writer: str = "modelopt") -> Any:
    """A BuildPlan as the planner would make it, with ``plan_quantization``'s real output."""
    from lmi_build.core.types import ModelIdentity
    from lmi_build.model.normalize import read_spec_file
    from lmi_build.planning.plan import BuildPlan, ToolchainRef
    from lmi_build.planning.quantization import plan_quantization, split_messages
    from lmi_build.targets import get_target
    from lmi_build.targets.hf.knobs import HfBuild
    from lmi_build.targets.trtllm.knobs import TrtllmBuild

    spec = read_spec_file(model_dir)
    resolved = resolved_options(options or {})
    quantization, messages = plan_quantization(method, resolved, spec, get_target(target).quantization, calib_file,
                                               checkpoint_route=route)  # type: ignore[arg-type]
    errors, _ = split_messages(messages)
    assert not errors, errors
    build: Any
    if target == "trtllm":
        build = TrtllmBuild(tp=tp, pp=pp, dtype=dtype, max_input_len=256, max_output_len=256, max_seq_len=512,
                            max_batch_size=4, modelopt_decoder=decoder, checkpoint_route=route,
                            checkpoint_writer=writer, trtllm_example=spec.model_type)
    else:
        from lmi_build.targets.hf.plan import export_format

        # no model type: AWQ stays in ModelOpt's unified format (the AutoAWQ writer's tests ask for it)
        build = HfBuild(tp=tp, dtype=dtype, export_format=export_format(quantization, model_type=None))
    return BuildPlan(
        target=target, recipe=spec.model_type, recipe_version=1,
        model=ModelIdentity(kind="local", id=model_dir.name), spec=spec,
        options={key: item.value for key, item in resolved.values.items()}, option_sources={}, build=build, quantization=quantization,
        toolchain=ToolchainRef(target=target), cache_key="sha256:test", valid=True,
    )


def run_checkpoint_step(plan: Any, model_dir: Path, work_dir: Path, **how: Any) -> Any:
    """The plan's target's checkpoint step into ``work_dir/<target>-checkpoint`` (as its build runs it)."""
    if plan.target == "hf":
        from lmi_build.targets.hf.checkpoint import build_hf_checkpoint

        return build_hf_checkpoint(plan, model_dir, work_dir / "hf-checkpoint", **how)
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    return build_trtllm_checkpoint(plan, model_dir, work_dir / "trtllm-checkpoint", **how)
