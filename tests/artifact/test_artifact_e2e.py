"""End to end with real parts: a tiny Llama from transformers, a ModelOpt SmoothQuant unified HF
export, packaged as hf artifacts, verified, inspected, and loaded back by transformers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmi_build.artifact.files import MANIFEST_NAME
from lmi_build.artifact.manifest import load_manifest
from lmi_build.artifact.packager import package
from lmi_build.artifact.verify import verify_local
from lmi_build.planning.plan import QuantizationPlan
from lmi_build.targets import TARGETS
from lmi_build.targets.hf.knobs import HfBuild
from tests.cli_process import run_lmi_build
from tests.fixtures_artifact import CHAT_TEMPLATE, HF, HF_LAYOUT, make_plan, make_record, write_tokenizer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("tiny-llama")
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=256, max_position_embeddings=256,
                         bos_token_id=0, eos_token_id=1)
    LlamaForCausalLM(config).to(torch.float16).save_pretrained(directory, safe_serialization=True)
    write_tokenizer(directory)
    (directory / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return directory


@pytest.fixture(scope="module")
def smoothquant_export(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    generator = torch.Generator().manual_seed(1)

    def calibrate(m: torch.nn.Module) -> None:
        for _ in range(2):
            m(torch.randint(0, 256, (1, 16), generator=generator))

    model = mtq.quantize(model, mtq.INT8_SMOOTHQUANT_CFG, calibrate)
    export_dir = tmp_path_factory.mktemp("sq-export")
    export_hf_checkpoint(model, dtype=torch.float16, export_dir=export_dir)
    return export_dir


def test_tiny_llama_artifact_loads_in_transformers(tiny_llama: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = package(make_plan("hf"), target=HF, layout=HF_LAYOUT, produced=tiny_llama, source_dir=tiny_llama,
                  output_dir=tmp_path / "artifact", record=make_record())
    report = verify_local(out, TARGETS)
    assert report.valid, report.errors

    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = tokenizer("the quick brown fox", return_tensors="pt").input_ids
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "<|user|>hi"
    original = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    packaged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    with torch.no_grad():
        assert torch.equal(original(ids).logits, packaged(ids).logits)

    result = run_lmi_build("inspect", str(out), "--json")
    assert result.returncode == 0, (result.stdout + result.stderr)
    assert json.loads(result.stdout)["what"]["architecture"] == "LlamaForCausalLM"


def test_modelopt_export_artifact(tiny_llama: Path, smoothquant_export: Path, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secretvalue123")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMIK7MDENGbPxRfiCYsecretkey")
    plan = make_plan("hf", quantization=QuantizationPlan(method="smoothquant", quant_algo="W8A8_SQ_PER_CHANNEL"),
                     build=HfBuild(tp=1, dtype="float16", export_format="modelopt_hf"))  # as the planner makes it
    out = package(plan, target=HF, layout=HF_LAYOUT, produced=smoothquant_export, source_dir=tiny_llama,
                  output_dir=tmp_path / "artifact", record=make_record())
    names = {p.name for p in out.iterdir()}
    assert {"hf_quant_config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= names
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "modelopt"  # the produced config, not the source's
    assert verify_local(out, TARGETS).valid
    assert load_manifest(out).plan["quantization"]["quant_algo"] == "W8A8_SQ_PER_CHANNEL"

    forbidden = [str(tmp_path.parent), str(tiny_llama), str(smoothquant_export), str(Path.home()),
                 str(Path.cwd()), "hf_secretvalue123", "wJalrXUtnFEMIK7MDENGbPxRfiCYsecretkey"]
    for path in out.rglob("*"):
        data = path.read_bytes()
        for needle in forbidden:
            assert needle.encode() not in data, f"{needle} found in {path.name}"

    (out / "hf_quant_config.json").unlink()
    messages = [e.message for e in verify_local(out, TARGETS).errors]
    assert any(m.startswith("missing file hf_quant_config.json") for m in messages)
    assert "config.json says quant_method=modelopt but hf_quant_config.json is missing" in messages
    assert (out / MANIFEST_NAME).is_file()
