"""The streamed TensorRT-LLM checkpoint writer against ModelOpt's real exporter.

Every case saves a small model with random weights, exports it with ModelOpt's
``export_tensorrt_llm_checkpoint`` (the model loaded, as before) and with the streamed writer, and
requires the same files, the same JSON bytes and every tensor of every rank equal.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_planning import plan_for
from tests.fixtures_quantize import make_build_plan

pytestmark = pytest.mark.slow

LMI_DTYPE = {"float16": "fp16", "bfloat16": "bf16"}
SMALL = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 4}


def _save_model(out_dir: Path, config_class: str, dtype: str, **overrides: Any) -> Path:
    import torch
    import transformers

    config = getattr(transformers, config_class)(**{**SMALL, **overrides})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_()  # layernorms too: a swapped norm must show
    model.save_pretrained(out_dir)
    (out_dir / "tokenizer.json").write_text("{}")  # a placeholder: a plan refuses a model without tokenizer files
    return out_dir


def _save_zero_model(out_dir: Path, **overrides: Any) -> Path:
    """A fp16 Llama of real tensor shapes and zero weights: for what a writer holds in memory, where the
    values do not matter (a random init of a 0.2 GB model cost ~12 s of CPU)."""
    import torch
    import transformers
    from safetensors.torch import save_file

    config = transformers.LlamaConfig(**{**SMALL, **overrides}, architectures=["LlamaForCausalLM"])
    config.torch_dtype = torch.float16
    with torch.device("meta"):
        shapes = {name: tensor.shape for name, tensor in
                  transformers.AutoModelForCausalLM.from_config(config).state_dict().items()}
    out_dir.mkdir(parents=True)
    save_file({name: torch.zeros(shape, dtype=torch.float16) for name, shape in shapes.items()},
              str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out_dir)
    (out_dir / "tokenizer.json").write_text("{}")
    return out_dir


def _modelopt_export(model_dir: Path, out_dir: Path, decoder: str, dtype: str, tp: int, pp: int) -> None:
    import torch
    from modelopt.torch.export import export_tensorrt_llm_checkpoint
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    export_tensorrt_llm_checkpoint(model, decoder, getattr(torch, dtype), export_dir=out_dir,
                                   inference_tensor_parallel=tp, inference_pipeline_parallel=pp)


def _assert_same_checkpoint(expected: Path, actual: Path) -> None:
    import torch
    from safetensors.torch import load_file

    assert sorted(p.name for p in expected.iterdir()) == sorted(p.name for p in actual.iterdir())
    for json_file in expected.glob("*.json"):
        assert (actual / json_file.name).read_text() == json_file.read_text(), json_file.name
    for rank_file in expected.glob("rank*.safetensors"):
        want, got = load_file(rank_file), load_file(actual / rank_file.name)
        assert sorted(got) == sorted(want), rank_file.name
        for name, tensor in want.items():
            assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), f"{rank_file.name}: {name}"


CASES = [
    # config class, architecture, decoder, saved dtype, export dtype, tp, pp, overrides
    pytest.param("LlamaConfig", "LlamaForCausalLM", "llama", "bfloat16", "float16", 2, 1,
                 {"vocab_size": 1001}, id="llama-tp2-vocab-padded-bf16-to-fp16"),
    pytest.param("LlamaConfig", "LlamaForCausalLM", "llama", "float16", "float16", 1, 2,
                 {"vocab_size": 1000, "tie_word_embeddings": True}, id="llama-pp2-tied-lm-head"),
    pytest.param("LlamaConfig", "LlamaForCausalLM", "llama", "float16", "bfloat16", 2, 2,
                 {"vocab_size": 1000}, id="llama-tp2-pp2-fp16-to-bf16"),
    pytest.param("MistralConfig", "MistralForCausalLM", "llama", "float16", "float16", 4, 1,
                 {"vocab_size": 1000}, id="mistral-tp4"),
    pytest.param("Qwen2Config", "Qwen2ForCausalLM", "qwen", "bfloat16", "bfloat16", 2, 1,
                 {"vocab_size": 1003}, id="qwen2-tp2-qkv-bias"),
]


@pytest.mark.parametrize(("config_class", "architecture", "decoder", "saved", "dtype", "tp", "pp", "overrides"), CASES)
def test_streamed_checkpoint_equals_modelopt_export(tmp_path: Path, config_class: str, architecture: str,
                                                    decoder: str, saved: str, dtype: str, tp: int, pp: int,
                                                    overrides: dict[str, Any]) -> None:
    from lmi_build.quantize.trtllm_stream import write_streamed_checkpoint

    model_dir = _save_model(tmp_path / "hf", config_class, saved, architectures=[architecture], **overrides)
    _modelopt_export(model_dir, tmp_path / "modelopt", decoder, dtype, tp, pp)
    (tmp_path / "streamed").mkdir()
    written = write_streamed_checkpoint(model_dir, tmp_path / "streamed", architecture=architecture,
                                        decoder=decoder, dtype=dtype, tp=tp, pp=pp).weight_bytes
    _assert_same_checkpoint(tmp_path / "modelopt", tmp_path / "streamed")
    # The plan's weights (the progress bar's total) are what is written: a tied LM head too (its own tensor,
    # share_embedding_table false); exactly without tensor parallelism, which replicates the norms and pads
    # the vocabulary to a multiple of tp (a fraction of a percent here)
    planned = plan_for("trtllm", model=str(model_dir), tp=str(tp), pp=pp, dtype=LMI_DTYPE[dtype]).expected_weight_bytes()
    config = json.loads((tmp_path / "streamed" / "config.json").read_text())
    assert config["share_embedding_table"] is False
    assert planned == written if tp == 1 else planned == pytest.approx(written, rel=0.01)
    assert written == sum((tmp_path / "streamed" / f"rank{r}.safetensors").stat().st_size for r in range(tp * pp)) \
        - sum(8 + int.from_bytes((tmp_path / "streamed" / f"rank{r}.safetensors").read_bytes()[:8], "little")
              for r in range(tp * pp))


def test_a_layout_the_map_cannot_make_writes_nothing(tmp_path: Path) -> None:
    """GQA with more ranks than KV heads: ModelOpt gives every rank a copy of a KV head, which the
    tensor map does not model; the mismatch is found from shapes alone, before any file exists."""
    from lmi_build.quantize.trtllm_stream import LayoutMismatch, write_streamed_checkpoint

    model_dir = _save_model(tmp_path / "hf", "LlamaConfig", "float16", architectures=["LlamaForCausalLM"],
                            vocab_size=1000, num_key_value_heads=2)
    (tmp_path / "out").mkdir()
    with pytest.raises(LayoutMismatch, match=r"attention\.qkv\.weight of rank 0: the tensor map makes \[48, 128\], "
                                             r"ModelOpt writes \[64, 128\]"):
        write_streamed_checkpoint(model_dir, tmp_path / "out", architecture="LlamaForCausalLM", decoder="llama",
                                  dtype="float16", tp=4, pp=1)
    assert list((tmp_path / "out").iterdir()) == []


def test_the_build_step_falls_back_to_modelopt_and_says_why(tmp_path: Path) -> None:
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    model_dir = _save_model(tmp_path / "hf", "LlamaConfig", "float16", architectures=["LlamaForCausalLM"],
                            vocab_size=1000, num_key_value_heads=2)
    plan = make_build_plan(model_dir, tp=4, writer="stream")
    result = build_trtllm_checkpoint(plan, model_dir, tmp_path / "ckpt")
    assert any("streamed writer not used" in note and "ModelOpt's exporter loaded the model" in note
               for note in result.notes)
    _modelopt_export(model_dir, tmp_path / "modelopt", "llama", "float16", 4, 1)
    _assert_same_checkpoint(tmp_path / "modelopt", tmp_path / "ckpt")


def test_the_planner_streams_unquantized_llama_only(tmp_path: Path) -> None:

    model_dir = _save_model(tmp_path / "hf", "LlamaConfig", "float16", architectures=["LlamaForCausalLM"],
                            vocab_size=1000)
    plain = plan_for("trtllm", model=str(model_dir), tp="2")
    quantized = plan_for("trtllm", model=str(model_dir), tp="2", quantize="fp8")
    assert plain.valid and quantized.valid, (plain.errors, quantized.errors)
    assert plain.build.checkpoint_writer == "stream"  # type: ignore[union-attr]
    assert quantized.build.checkpoint_writer == "modelopt"  # type: ignore[union-attr]


def test_the_build_step_streams_and_the_checkpoint_passes_its_checks(tmp_path: Path) -> None:
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    model_dir = _save_model(tmp_path / "hf", "LlamaConfig", "bfloat16", architectures=["LlamaForCausalLM"],
                            vocab_size=1000)
    plan = make_build_plan(model_dir, tp=2, writer="stream")
    result = build_trtllm_checkpoint(plan, model_dir, tmp_path / "ckpt")
    assert result.notes == ["ModelOpt's layout written tensor by tensor (float16), the model never loaded"]
    assert result.placement is not None and result.placement.device == "cpu"
    assert result.files == ["config.json", "quant_cfg.json", "rank0.safetensors", "rank1.safetensors"]
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["mapping"]["tp_size"] == 2


def test_the_layout_is_computed_once_per_config_and_knobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ModelOpt's layout is cached by config.json, knobs and exporter versions: the second build
    of the same model reads it back (no exporter call), a changed config or knob computes it
    again, and a damaged entry is a miss."""
    import modelopt.torch.export.model_config_export as exporter

    from lmi_build.quantize import trtllm_stream

    monkeypatch.setenv("LMI_BUILD_CACHE", str(tmp_path / "cache"))
    model_dir = _save_model(tmp_path / "hf", "LlamaConfig", "float16", architectures=["LlamaForCausalLM"],
                            vocab_size=1000)
    calls: list[tuple[int, int]] = []
    real = exporter.torch_to_tensorrt_llm_checkpoint

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append((kwargs["inference_tensor_parallel"], kwargs["inference_pipeline_parallel"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(exporter, "torch_to_tensorrt_llm_checkpoint", counted)
    first = trtllm_stream.modelopt_layout(model_dir, "llama", "float16", 2, 1).ranks
    again = trtllm_stream.modelopt_layout(model_dir, "llama", "float16", 2, 1).ranks
    assert again == first and calls == [(2, 1)]
    trtllm_stream.modelopt_layout(model_dir, "llama", "float16", 1, 1)  # another knob: another entry
    assert calls == [(2, 1), (1, 1)]
    entries = sorted((tmp_path / "cache" / "layouts").iterdir())
    assert len(entries) == 2
    for entry in entries:
        entry.write_text('[{"rank": 0, "config": ')  # damaged: a miss, computed and written again
    assert trtllm_stream.modelopt_layout(model_dir, "llama", "float16", 2, 1).ranks == first and len(calls) == 3
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    assert len(trtllm_stream.modelopt_layout(model_dir, "llama", "float16", 2, 1).ranks[0].tensors) \
        < len(first[0].tensors)
    assert len(calls) == 4


_MEASURE = textwrap.dedent("""
    import json, sys
    from pathlib import Path

    def high_water():  # this process's own peak (VmHWM), not an inherited ru_maxrss
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

    import torch  # the conversion's own import belongs to the baseline (a cached layout imports nothing)
    from lmi_build.quantize.trtllm_stream import modelopt_layout, write_streamed_checkpoint
    model_dir, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    modelopt_layout(model_dir, "llama", "float16", 2, 1)  # imports and the weightless model: the baseline
    before = high_water()
    write_streamed_checkpoint(model_dir, out_dir, architecture="LlamaForCausalLM", decoder="llama",
                              dtype="float16", tp=2, pp=1)
    print(json.dumps({"before": before, "after": high_water()}))
""")


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="VmHWM is read from /proc (Linux)")
def test_host_memory_is_a_few_tensors_not_the_model(tmp_path: Path) -> None:
    """A 0.2 GB model (fp16, 24 layers): ModelOpt's exporter peaks at ~1.5-1.9x the model above the
    interpreter; the streamed writer holds one layer's tensors and their pieces."""
    from lmi_build.quantize.trtllm_stream import modelopt_layout

    model_dir = _save_zero_model(tmp_path / "hf", hidden_size=512, intermediate_size=1536, num_hidden_layers=24,
                                 num_attention_heads=8, num_key_value_heads=8, vocab_size=8000)
    disk = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    (tmp_path / "out").mkdir()
    # The layout, computed here once, is cached: the measured process imports no ModelOpt (its import
    # alone cost ~20 s of CPU there), as a build whose layout is cached does not.
    modelopt_layout(model_dir, "llama", "float16", 2, 1)
    measured = subprocess.run([sys.executable, "-c", _MEASURE, str(model_dir), str(tmp_path / "out")],
                              capture_output=True, text=True, check=True, timeout=600)
    peaks = json.loads(measured.stdout.strip().splitlines()[-1])
    above = peaks["after"] - peaks["before"]
    assert disk > 150 * 2**20
    assert above < 0.25 * disk, f"{above / 2**20:.0f} MiB above the baseline for a {disk / 2**20:.0f} MiB model"


@pytest.mark.parametrize("writer", ["stream", "modelopt"])
def test_a_qwen2_checkpoint_carries_what_tensorrt_llms_qwen_model_reads(tmp_path: Path, writer: str) -> None:
    """ModelOpt's qwen export writes no qwen_type, which TensorRT-LLM's QWen model reads from 0.11 on
    (models/qwen/model.py @9691e12b:65, @a681853d:79): both writers complete config.json as TensorRT-LLM's
    own quantize.py does (quantize_by_modelopt.py @a681853d:501-514), and say so."""
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    model_dir = _save_model(tmp_path / "hf", "Qwen2Config", "float16", architectures=["Qwen2ForCausalLM"],
                            vocab_size=1000, rms_norm_eps=1e-5, rope_theta=1000000.0)
    plan = make_build_plan(model_dir, tp=2, writer=writer, decoder="qwen")
    result = build_trtllm_checkpoint(plan, model_dir, tmp_path / "ckpt")
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert config["qwen_type"] == "qwen2"
    assert (config["intermediate_size"], config["norm_epsilon"], config["rotary_base"]) == (256, 1e-5, 1000000.0)
    assert any("qwen_type=qwen2" in note for note in result.notes), result.notes
    assert result.writer == writer


@pytest.mark.parametrize("split", ["replicate", "columns", "rows_each", "rows"])
def test_piece_shapes_are_the_shapes_cut_gives_without_torchs_meta_ops(split: str) -> None:
    """The writer checks each piece's shape before reading any weight; it computed the shapes with
    ``cut`` on meta tensors, whose ``torch.cat`` imported torch._dynamo into every conversion."""
    import torch

    from lmi_build.quantize.tensor_map import TensorRule
    from lmi_build.quantize.trtllm_stream import cut, piece_shape

    rule = TensorRule(trtllm="x", hf=["a", "b"], split=split)
    for rows, columns, second_rows in [(8, 6, 4), (7, 5, 3), (1, 3, 2), (13, 16, 5)]:
        tensors = [torch.zeros(rows, columns), torch.zeros(second_rows, columns)]
        for tp in (1, 2, 4):
            for rank in range(tp):
                try:
                    expected: tuple[int, ...] | None = tuple(cut(rule, tensors, tp, rank).shape)
                except IndexError:
                    expected = None
                try:
                    actual: tuple[int, ...] | None = piece_shape(rule, [t.shape for t in tensors], tp, rank)
                except IndexError:
                    actual = None
                assert actual == expected, (split, rows, columns, second_rows, tp, rank)
