"""Quantization and checkpoint export with real torch/transformers/ModelOpt on tiny models."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from lmi_build.core.errors import StepError, UnsupportedTarget
from tests.fixtures_quantize import LLAMA3_ROPE, make_build_plan

pytestmark = pytest.mark.slow

# Small calibration keeps the whole file around a minute on 2 shared cores; the planner's
# defaults (32-64 samples of up to 512 tokens) are exercised by the benchmark instead.
FAST_CALIB = {"calib_size": "6", "calib_max_seq_len": "64"}

# Held-out prompts: written here, not taken from the calibration set (checked below).
HELD_OUT = (
    "A violin maker once told me that spruce from the north side of a slope sings differently.",
    "for key, value in sorted(settings.items()): print(key, '=', value)",
    "The ticket machine at the station only accepts exact change on Sundays.",
    "Warehouse inventory dropped by nine percent after the spring promotion ended.",
)

# Worst logit error relative to the fp logit range (max - min over all held-out positions; the
# reference itself runs in bf16). Why these bounds: INT8 weight-only rounds each weight to 1 of
# 255 levels per channel -> ~1.5% measured; W8A8 also rounds activations with ONE static scale per
# tensor, so rare large activations cost more -> ~6%; FP8 E4M3 keeps 3 mantissa bits (~6% relative
# rounding per value) -> ~8%; INT4 groups have only 15 levels -> ~20% for the single worst logit of
# this random-weight model (whose logit range is small, ~7). Bounds are ~1.4-2x the measured values
# (docs/notes/quantize.md): a wrong or missing scale gives errors of the order of the range itself.
MAX_REL_ERROR = {
    "smoothquant": 0.12,
    "int8_wo": 0.03,
    "fp8": 0.15,
    "awq": 0.35,
    "gptq": 0.35,
    "int4_wo": 0.35,
}

# Per-rank tensor layouts ModelOpt writes (out/in = the HF Linear's out/in features; "model" =
# the target dtype).
# INT4 packs two values per int8 along the output dimension and keeps one scale per group of 128
# inputs; SmoothQuant/INT8 weight-only keep one scale per output channel; FP8 one per tensor.
EXPECTED_QKV: dict[str | None, dict[str, tuple[str, tuple[int, ...]]]] = {  # hidden 256, 8 heads x 32 + 2 x 4 kv heads x 32 -> out 512, in 256
    None: {"weight": ("model", (512, 256))},
    "smoothquant": {"weight": ("int8", (512, 256)), "weights_scaling_factor": ("float32", (512,)),
                    "activation_scaling_factor": ("float32", (1,)), "prequant_scaling_factor": ("model", (256,))},
    "awq": {"weight": ("int8", (256, 256)), "weights_scaling_factor": ("float32", (512, 2)),
            "prequant_scaling_factor": ("model", (256,))},
    "int4_wo": {"weight": ("int8", (256, 256)), "weights_scaling_factor": ("float32", (512, 2))},
    "fp8": {"weight": ("float8_e4m3fn", (512, 256)), "weights_scaling_factor": ("float32", (1,)),
            "activation_scaling_factor": ("float32", (1,))},
    "int8_wo": {"weight": ("int8", (512, 256)), "weights_scaling_factor": ("float32", (512,))},
}
EXPECTED_ALGO = {None: None, "smoothquant": "W8A8_SQ_PER_CHANNEL", "awq": "W4A16_AWQ",
                 "int4_wo": "W4A16_AWQ", "fp8": "FP8", "int8_wo": "W8A16"}


# Methods measured on narrow_llama3 (half the width): ModelOpt's CPU GPTQ costs in_features^2 x
# out_features per Linear (see the fixture), 50 s a test at tiny_llama3's width.
NARROW = {"gptq"}


def _model_for(method: str | None, request: pytest.FixtureRequest) -> Path:
    return Path(request.getfixturevalue("narrow_llama3" if method in NARROW else "tiny_llama3"))


def _target_for(method: str) -> str:
    """The target whose plan carries ``method``'s quantization (only hf builds GPTQ)."""
    return "hf" if method == "gptq" else "trtllm"


@pytest.fixture(autouse=True)
def _fresh_output() -> None:
    # Output caches its rich Console (and so the sys.stderr of the test that created it); a fresh
    # one per test writes to this test's captured stderr, progress bar included.
    from lmi_build.reporting.output import Mode, set_mode

    set_mode(Mode.HUMAN)


def _tensors(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(path))


# No gptq: the trtllm target refuses it (TensorRT-LLM only converts GPTQ checkpoints; the hf test below
# writes one).
@pytest.mark.parametrize("method", [None, "smoothquant", "awq", "fp8", "int8_wo", "int4_wo"])
def test_trtllm_checkpoint_per_method(request: pytest.FixtureRequest, tmp_path: Path, method: str | None,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    tiny_llama3 = _model_for(method, request)

    # fp16 for the cheap paths; bfloat16 where calibration runs (fp16 matmuls of these tiny shapes
    # run ~19x slower than bf16 on CPU).
    dtype = "float16" if method in (None, "smoothquant", "int8_wo", "int4_wo") else "bfloat16"
    plan = make_build_plan(tiny_llama3, method=method, options=FAST_CALIB, dtype=dtype)
    result = build_trtllm_checkpoint(plan, tiny_llama3, tmp_path / "ckpt")

    assert capsys.readouterr().out == ""  # ModelOpt's prints must not reach stdout (--json)
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert config["architecture"] == "LlamaForCausalLM"
    assert config["dtype"] == dtype
    assert config["mapping"] == {"world_size": 1, "tp_size": 1, "pp_size": 1}
    assert config["quantization"]["quant_algo"] == EXPECTED_ALGO[method] == result.quant_algo
    assert config["rotary_base"] == 500000.0
    assert config["rotary_scaling"] == LLAMA3_ROPE
    if method in ("awq", "int4_wo"):
        assert config["quantization"]["group_size"] == 128
        # Only AWQ exports pre-quant scales; the flag must say so or TRT-LLM looks for missing tensors.
        assert config["quantization"]["pre_quant_scale"] is (method == "awq")
    assert not list(tmp_path.glob(".ckpt.*"))  # the staging directory was renamed into place
    assert "rank0.safetensors" in result.files
    assert (result.calibration is not None) == (method in ("smoothquant", "awq", "fp8"))

    tensors = _tensors(tmp_path / "ckpt" / "rank0.safetensors")
    for suffix, (dtype_name, shape) in EXPECTED_QKV[method].items():
        tensor = tensors[f"transformer.layers.0.attention.qkv.{suffix}"]
        assert str(tensor.dtype) == f"torch.{dtype if dtype_name == 'model' else dtype_name}", suffix
        assert tuple(tensor.shape) == shape, suffix
    # down_proj (mlp.proj) has 512 inputs (narrow: 256): 4 (2) groups of 128 per output channel.
    if method in ("awq", "int4_wo"):
        assert tuple(tensors["transformer.layers.0.mlp.proj.weights_scaling_factor"].shape) == (256, 4)
    norm = tensors["transformer.layers.0.input_layernorm.weight"]
    assert str(norm.dtype) == f"torch.{dtype}"  # calibrated in the target dtype: nothing left in fp32


def _logits(model: Any, tokenizer: Any) -> Any:
    import torch

    with torch.inference_mode():
        return torch.cat([model(**tokenizer(p, return_tensors="pt")).logits[0].float() for p in HELD_OUT])


@pytest.mark.parametrize("method", ["smoothquant", "awq", "gptq", "fp8", "int8_wo", "int4_wo"])
def test_fake_quantized_logits_stay_close(request: pytest.FixtureRequest, method: str) -> None:
    from lmi_build.planning import calibration_text
    from lmi_build.quantize import calibration, modelopt_quant

    tiny_llama3 = _model_for(method, request)

    samples = set(calibration_text.load_builtin().samples)
    assert not any(prompt in sample for prompt in HELD_OUT for sample in samples)

    plan = make_build_plan(tiny_llama3, target=_target_for(method), method=method, options=FAST_CALIB, dtype="bfloat16")
    model = modelopt_quant.load_model(tiny_llama3, "bfloat16", trust_remote_code=False)
    tokenizer = calibration.load_tokenizer(tiny_llama3, trust_remote_code=False)
    reference = _logits(model, tokenizer)
    batches = None
    if plan.quantization.calibration is not None:
        batches = calibration.build_batches(plan.quantization.calibration, tokenizer, None)
    modelopt_quant.quantize(model, plan.quantization, batches)
    quantized = _logits(model, tokenizer)

    spread = float(reference.max() - reference.min())
    error = float((quantized - reference).abs().max()) / spread
    print(f"{method}: max |dlogit| / logit range = {error:.4f} (range {spread:.2f})")
    assert 0 < error < MAX_REL_ERROR[method]  # > 0: the quantizers are really active


@pytest.mark.parametrize("method", ["smoothquant", "awq", "gptq", "fp8"])
def test_cpu_calibration_in_fp32_keeps_the_logit_bounds(request: pytest.FixtureRequest, method: str) -> None:
    """The CPU path (calibrate in float32, cast to the target dtype) is held to the same bounds as
    calibrating in the target dtype, measured in the target dtype against the same reference."""
    from lmi_build.quantize import calibration, modelopt_quant
    from lmi_build.quantize.placement import cast_for_export, choose_placement

    tiny_llama3 = _model_for(method, request)

    plan = make_build_plan(tiny_llama3, target=_target_for(method), method=method, options=FAST_CALIB, dtype="bfloat16")
    where = choose_placement("bfloat16", runs_forward=True, cuda_devices=0)
    assert (where.device, where.load_dtype, where.export_dtype) == ("cpu", "float32", "bfloat16")
    tokenizer = calibration.load_tokenizer(tiny_llama3, trust_remote_code=False)
    reference = _logits(modelopt_quant.load_model(tiny_llama3, "bfloat16", trust_remote_code=False), tokenizer)

    model = modelopt_quant.load_model(tiny_llama3, where.load_dtype, trust_remote_code=False)
    assert plan.quantization.calibration is not None
    batches = calibration.build_batches(plan.quantization.calibration, tokenizer, None)
    modelopt_quant.quantize(model, plan.quantization, batches)
    model = cast_for_export(model, where)
    import torch

    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    amaxes = [m._amax for m in model.modules() if getattr(m, "_amax", None) is not None]
    assert amaxes and {a.dtype for a in amaxes} == {torch.float32}  # calibrated scales are not rounded
    quantized = _logits(model, tokenizer)

    spread = float(reference.max() - reference.min())
    error = float((quantized - reference).abs().max()) / spread
    print(f"{method} (fp32 calibration): max |dlogit| / logit range = {error:.4f} (range {spread:.2f})")
    assert 0 < error < MAX_REL_ERROR[method]


def test_unquantized_tp2_shards_recombine_exactly(tiny_llama3: Path, tmp_path: Path) -> None:
    import torch

    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    plan = make_build_plan(tiny_llama3, tp=2, dtype="float16")
    result = build_trtllm_checkpoint(plan, tiny_llama3, tmp_path / "ckpt")
    assert result.files == ["config.json", "quant_cfg.json", "rank0.safetensors", "rank1.safetensors"]
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert config["mapping"] == {"world_size": 2, "tp_size": 2, "pp_size": 1}
    assert config["quantization"]["quant_algo"] is None

    original = _tensors(tiny_llama3 / "model.safetensors")
    ranks = [_tensors(tmp_path / "ckpt" / f"rank{r}.safetensors") for r in range(2)]
    heads, kv_heads, head_dim = 8, 4, 32

    def joined(name: str, dim: int) -> Any:
        return torch.cat([r[name] for r in ranks], dim=dim)

    assert torch.equal(joined("transformer.vocab_embedding.weight", 0), original["model.embed_tokens.weight"])
    assert torch.equal(joined("lm_head.weight", 0), original["lm_head.weight"])
    for layer in range(2):
        hf, trt = f"model.layers.{layer}.", f"transformer.layers.{layer}."
        # Fused QKV: each rank holds [its q heads | its k heads | its v heads].
        q_rows, kv_rows = heads * head_dim // 2, kv_heads * head_dim // 2
        parts: dict[str, list[Any]] = {"q": [], "k": [], "v": []}
        for rank in ranks:
            qkv = rank[trt + "attention.qkv.weight"]
            q, k, v = torch.split(qkv, [q_rows, kv_rows, kv_rows], dim=0)
            parts["q"].append(q)
            parts["k"].append(k)
            parts["v"].append(v)
        for name in ("q", "k", "v"):
            assert torch.equal(torch.cat(parts[name]), original[hf + f"self_attn.{name}_proj.weight"])
        assert torch.equal(joined(trt + "attention.dense.weight", 1), original[hf + "self_attn.o_proj.weight"])
        assert torch.equal(joined(trt + "mlp.fc.weight", 0), original[hf + "mlp.gate_proj.weight"])
        assert torch.equal(joined(trt + "mlp.gate.weight", 0), original[hf + "mlp.up_proj.weight"])
        assert torch.equal(joined(trt + "mlp.proj.weight", 1), original[hf + "mlp.down_proj.weight"])
        for rank in ranks:  # norms are replicated
            assert torch.equal(rank[trt + "input_layernorm.weight"], original[hf + "input_layernorm.weight"])
            assert torch.equal(rank[trt + "post_layernorm.weight"],
                               original[hf + "post_attention_layernorm.weight"])
    assert torch.equal(ranks[1]["transformer.ln_f.weight"], original["model.norm.weight"])


def test_two_runs_are_byte_identical(tiny_llama3: Path, tmp_path: Path) -> None:
    from lmi_build.core.hashing import sha256_file
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    plan = make_build_plan(tiny_llama3, method="awq", options=FAST_CALIB, dtype="bfloat16", tp=2)
    digests = []
    for run in ("a", "b"):
        result = build_trtllm_checkpoint(plan, tiny_llama3, tmp_path / run)
        digests.append({f: sha256_file(tmp_path / run / f) for f in result.files})
    assert set(digests[0]) == {"config.json", "rank0.safetensors", "rank1.safetensors"}
    assert digests[0] == digests[1]


def test_existing_output_kept_until_the_new_one_is_complete(tiny_llama3: Path, tiny_gpt2: Path,
                                                             tmp_path: Path) -> None:
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    out = tmp_path / "ckpt"
    out.mkdir()
    (out / "marker").write_text("previous build")
    # GPT-2 as decoder_type "gpt2": ModelOpt raises NotImplementedError after loading and while
    # exporting -> UnsupportedTarget naming the vendor converter, the old output untouched.
    gpt2_plan = make_build_plan(tiny_gpt2, decoder="gpt2", dtype="float16")
    with pytest.raises(UnsupportedTarget, match="ModelOpt cannot export GPT2LMHeadModel") as raised:
        build_trtllm_checkpoint(gpt2_plan, tiny_gpt2, out)
    assert "examples/gpt2/convert_checkpoint.py" in (raised.value.hint or "")
    assert (out / "marker").read_text() == "previous build"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no staging directory left behind

    build_trtllm_checkpoint(make_build_plan(tiny_llama3, dtype="float16"), tiny_llama3, out)
    assert not (out / "marker").exists()
    assert (out / "rank0.safetensors").is_file()


def test_vendor_route_is_refused_before_loading(tiny_llama3: Path, tmp_path: Path) -> None:
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    plan = make_build_plan(tiny_llama3, route="vendor", decoder=None, dtype="float16")
    with pytest.raises(UnsupportedTarget, match="ModelOpt cannot export LlamaForCausalLM") as raised:
        build_trtllm_checkpoint(plan, tiny_llama3, tmp_path / "ckpt")
    assert "examples/llama/convert_checkpoint.py" in (raised.value.hint or "")
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.parametrize("method", ["awq", "fp8"])
def test_hf_unified_checkpoint(tiny_llama3: Path, tmp_path: Path, method: str) -> None:
    from tests.fixtures_quantize import run_checkpoint_step

    plan = make_build_plan(tiny_llama3, target="hf", method=method,
                           options={**FAST_CALIB, "kv_cache_dtype": "fp8"}, dtype="bfloat16")
    result = run_checkpoint_step(plan, tiny_llama3, tmp_path)
    out = tmp_path / "hf-checkpoint"
    assert result.out_dir == out
    hf_quant = json.loads((out / "hf_quant_config.json").read_text())["quantization"]
    assert hf_quant["quant_algo"] == {"awq": "W4A16_AWQ", "fp8": "FP8"}[method]
    assert hf_quant["kv_cache_quant_algo"] == "FP8"
    qcfg = json.loads((out / "config.json").read_text())["quantization_config"]
    assert qcfg["quant_method"] == "modelopt"
    assert qcfg["quant_algo"] == hf_quant["quant_algo"]
    tensors = _tensors(out / "model.safetensors")
    weight = tensors["model.layers.0.self_attn.q_proj.weight"]
    assert str(weight.dtype) == {"awq": "torch.uint8", "fp8": "torch.float8_e4m3fn"}[method]
    assert "model.layers.0.self_attn.k_proj.k_scale" in tensors


def test_hf_plain_dtype_conversion(tiny_llama3: Path, tmp_path: Path) -> None:
    from tests.fixtures_quantize import run_checkpoint_step

    plan = make_build_plan(tiny_llama3, target="hf", dtype="bfloat16")
    result = run_checkpoint_step(plan, tiny_llama3, tmp_path)
    config = json.loads((result.out_dir / "config.json").read_text())
    assert config.get("torch_dtype", config.get("dtype")) == "bfloat16"
    assert "quantization_config" not in config
    weights = _tensors(result.out_dir / "model.safetensors")
    assert {str(t.dtype) for t in weights.values()} == {"torch.bfloat16"}
    assert result.calibration is None and result.quant_algo is None


def test_prequantized_input_passes_through(tiny_llama3: Path, tmp_path: Path) -> None:
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint
    from tests.fixtures_quantize import run_checkpoint_step

    # The bytes are not real AutoAWQ weights, but pass-through never reads them: it must not
    # re-quantize, and must hand over the very same files.
    source = tmp_path / "awq-model"
    shutil.copytree(tiny_llama3, source)
    config = json.loads((source / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128,
                                     "version": "gemm", "zero_point": True}
    (source / "config.json").write_text(json.dumps(config))

    plan = make_build_plan(source, target="hf", dtype="float16")
    assert plan.quantization.pre_quantized is not None and plan.quantization.method is None
    result = run_checkpoint_step(plan, source, tmp_path / "work")
    assert result.pre_quantized
    copied = result.out_dir / "model.safetensors"
    assert os.path.samefile(copied, source / "model.safetensors") or \
        copied.read_bytes() == (source / "model.safetensors").read_bytes()
    assert json.loads((result.out_dir / "config.json").read_text())["quantization_config"]["quant_method"] == "awq"

    trt_plan = make_build_plan(source, target="trtllm", dtype="float16")
    assert trt_plan.quantization.quant_algo == "W4A16_GPTQ"
    with pytest.raises(UnsupportedTarget, match="pre-quantized") as raised:
        build_trtllm_checkpoint(trt_plan, source, tmp_path / "ckpt")
    assert "convert_checkpoint.py" in (raised.value.hint or "")


def test_changed_calibration_file_is_refused(tiny_llama3: Path, tmp_path: Path) -> None:
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    calib = tmp_path / "calib.jsonl"
    calib.write_text("\n".join(json.dumps({"text": f"sample number {i} about invoices"}) for i in range(8)))
    plan = make_build_plan(tiny_llama3, method="smoothquant", options={"calib_size": "4"},
                           calib_file=calib, dtype="bfloat16")
    assert plan.quantization.calibration is not None
    assert plan.quantization.calibration.dataset == "file:calib.jsonl"
    result = build_trtllm_checkpoint(plan, tiny_llama3, tmp_path / "ok", calib_file=calib)
    assert result.calibration is not None and result.calibration.samples == 4

    calib.write_text(calib.read_text() + "\n" + json.dumps({"text": "one more"}))
    with pytest.raises(StepError, match="changed since the plan was made"):
        build_trtllm_checkpoint(plan, tiny_llama3, tmp_path / "changed", calib_file=calib)
    with pytest.raises(StepError, match="no calibration file was given"):
        build_trtllm_checkpoint(plan, tiny_llama3, tmp_path / "missing")


def test_pipeline_parallel_splits_layers(tiny_llama3: Path, tmp_path: Path) -> None:
    import torch

    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    plan = make_build_plan(tiny_llama3, pp=2, dtype="float16")
    build_trtllm_checkpoint(plan, tiny_llama3, tmp_path / "ckpt")
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert config["mapping"] == {"world_size": 2, "tp_size": 1, "pp_size": 2}
    original = _tensors(tiny_llama3 / "model.safetensors")
    ranks = [_tensors(tmp_path / "ckpt" / f"rank{r}.safetensors") for r in range(2)]
    # Each stage numbers its own layers from 0 (as convert_checkpoint.py does); embedding on the
    # first stage, final norm and lm_head on the last.
    for stage, rank in enumerate(ranks):
        assert torch.equal(rank["transformer.layers.0.mlp.proj.weight"],
                           original[f"model.layers.{stage}.mlp.down_proj.weight"])
    assert "transformer.vocab_embedding.weight" in ranks[0] and "lm_head.weight" not in ranks[0]
    assert "lm_head.weight" in ranks[1] and "transformer.ln_f.weight" in ranks[1]


def _dequantize_gptq(tensors: dict[str, Any], prefix: str) -> Any:
    """Dense [out, in] weight from the GPTQ v1 tensors, read the way the loaders read them
    (written here independently of lmi_build.quantize.gptq_format)."""
    import torch

    qweight, qzeros = tensors[f"{prefix}.qweight"], tensors[f"{prefix}.qzeros"]
    scales, g_idx = tensors[f"{prefix}.scales"].float(), tensors[f"{prefix}.g_idx"].long()
    shifts = torch.arange(0, 32, 4)
    values = ((qweight.long().unsqueeze(1) >> shifts.view(1, 8, 1)) & 15).reshape(-1, qweight.shape[1])
    zeros = ((qzeros.long().unsqueeze(-1) >> shifts.view(1, 1, 8)) & 15).reshape(qzeros.shape[0], -1) + 1
    return ((values - zeros[g_idx]) * scales[g_idx]).t()


def test_hf_gptq_checkpoint_is_in_the_gptq_format(narrow_llama3: Path, tmp_path: Path) -> None:
    """hf --quantize gptq: quant_method gptq (what vLLM/LMI-Dist load), never labelled W4A16_AWQ, and
    the packed weights dequantize to a model within the GPTQ logit bound."""
    import torch
    from transformers import AutoModelForCausalLM

    from lmi_build.quantize import calibration, modelopt_quant
    from tests.fixtures_quantize import run_checkpoint_step

    plan = make_build_plan(narrow_llama3, target="hf", method="gptq", options=FAST_CALIB, dtype="float16")
    assert plan.build.export_format == "gptq"
    assert plan.quantization.quant_algo == "W4A16_GPTQ"
    result = run_checkpoint_step(plan, narrow_llama3, tmp_path)
    out = result.out_dir
    assert result.quant_algo == "W4A16_GPTQ"
    assert not (out / "hf_quant_config.json").exists()
    config_text = (out / "config.json").read_text()
    assert "W4A16_AWQ" not in config_text and "modelopt" not in config_text
    qcfg = json.loads(config_text)["quantization_config"]
    assert {k: qcfg[k] for k in ("quant_method", "bits", "group_size", "desc_act", "sym")} == {
        "quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
    assert json.loads(config_text).get("torch_dtype", json.loads(config_text).get("dtype")) == "float16"

    tensors = _tensors(out / "model.safetensors")
    assert not [k for k in tensors if "_quantizer" in k]
    prefix = "model.layers.0.self_attn.q_proj"  # out 128, in 128 (narrow_llama3)
    assert f"{prefix}.weight" not in tensors
    shapes = {s: (str(tensors[f"{prefix}.{s}"].dtype), tuple(tensors[f"{prefix}.{s}"].shape))
              for s in ("qweight", "qzeros", "scales", "g_idx")}
    assert shapes == {"qweight": ("torch.int32", (16, 128)), "qzeros": ("torch.int32", (1, 16)),
                      "scales": ("torch.float16", (1, 128)), "g_idx": ("torch.int32", (128,))}
    assert str(tensors["model.layers.0.input_layernorm.weight"].dtype) == "torch.float16"

    # Load the dequantized weights into a plain model and compare logits with the unquantized one.
    tokenizer = calibration.load_tokenizer(narrow_llama3, trust_remote_code=False)
    reference = _logits(modelopt_quant.load_model(narrow_llama3, "float32", trust_remote_code=False), tokenizer)
    dense = {k: v.float() for k, v in tensors.items() if not k.endswith(("qweight", "qzeros", "scales", "g_idx"))}
    for layer in {k.rsplit(".", 1)[0] for k in tensors if k.endswith(".qweight")}:
        dense[f"{layer}.weight"] = _dequantize_gptq(tensors, layer)
    model = AutoModelForCausalLM.from_pretrained(str(narrow_llama3), dtype=torch.float32)
    missing, unexpected = model.load_state_dict(dense, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    error = float((_logits(model.eval(), tokenizer) - reference).abs().max()) / float(reference.max() - reference.min())
    print(f"gptq (GPTQ format, dequantized): max |dlogit| / logit range = {error:.4f}")
    assert 0 < error < MAX_REL_ERROR["gptq"]


def _dequantize_awq(tensors: dict[str, Any], prefix: str) -> Any:
    """Dense [out, in] weight from the AutoAWQ GEMM tensors, read the way vLLM reads them (v0.11.1
    awq_triton.py:54-101: nibble at shift 4 * [0, 4, 1, 5, 2, 6, 3, 7][c] holds column 8j + c of
    word j; (q - z) * s). Written here independently of lmi_build.quantize.awq_format."""
    import torch

    reverse_order = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])

    def unpack(words: Any) -> Any:  # [rows, cols/8] int32 -> [rows, cols]
        shifts = (reverse_order * 4).view(1, 1, 8)
        return ((words.long().unsqueeze(-1) >> shifts) & 15).reshape(words.shape[0], -1)

    qweight, qzeros, scales = tensors[f"{prefix}.qweight"], tensors[f"{prefix}.qzeros"], tensors[f"{prefix}.scales"]
    group = qweight.shape[0] // scales.shape[0]
    values, zeros = unpack(qweight), unpack(qzeros).repeat_interleave(group, dim=0)
    return ((values - zeros) * scales.float().repeat_interleave(group, dim=0)).t()


def test_hf_awq_checkpoint_is_in_the_autoawq_format(tiny_llama3: Path, tmp_path: Path) -> None:
    """hf --quantize awq for a vLLM profile: quant_method awq with AutoAWQ's GEMM packing and no
    pre_quant_scale; the packed weights dequantize (as vLLM reads them) to exactly ModelOpt's own
    quantized weights after the same folding, and to a model within the AWQ logit bound."""
    import torch
    from transformers import AutoModelForCausalLM

    from lmi_build.quantize import calibration, modelopt_quant
    from lmi_build.quantize.awq_format import fold_pre_quant_scales
    from tests.fixtures_quantize import run_checkpoint_step

    plan = make_build_plan(tiny_llama3, target="hf", method="awq", options=FAST_CALIB, dtype="float16")
    plan = plan.model_copy(update={"build": plan.build.model_copy(update={"export_format": "awq"})})
    result = run_checkpoint_step(plan, tiny_llama3, tmp_path)
    out = result.out_dir
    assert not (out / "hf_quant_config.json").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"] == {"quant_method": "awq", "bits": 4, "group_size": 128,
                                             "zero_point": True, "version": "gemm"}
    assert config.get("torch_dtype", config.get("dtype")) == "float16"
    assert "W4A16" not in (out / "config.json").read_text()

    tensors = _tensors(out / "model.safetensors")
    assert not [k for k in tensors if "_quantizer" in k or k.endswith("pre_quant_scale")]
    shapes = {f"{layer}.{s}": (str(tensors[f"model.layers.0.{layer}.{s}"].dtype),
                               tuple(tensors[f"model.layers.0.{layer}.{s}"].shape))
              for layer in ("self_attn.q_proj", "self_attn.k_proj") for s in ("qweight", "qzeros", "scales")}
    assert shapes == {  # q_proj: in 256, out 256; k_proj: in 256, out 4 kv heads x 32 = 128; group 128
        "self_attn.q_proj.qweight": ("torch.int32", (256, 32)), "self_attn.q_proj.qzeros": ("torch.int32", (2, 32)),
        "self_attn.q_proj.scales": ("torch.float16", (2, 256)),
        "self_attn.k_proj.qweight": ("torch.int32", (256, 16)), "self_attn.k_proj.qzeros": ("torch.int32", (2, 16)),
        "self_attn.k_proj.scales": ("torch.float16", (2, 128)),
    }
    assert str(tensors["model.layers.0.input_layernorm.weight"].dtype) == "torch.float16"
    packed = sorted(k.rsplit(".", 1)[0] for k in tensors if k.endswith(".qweight"))
    assert len(packed) == 2 * 7 and not [k for k in packed if f"{k}.weight" in tensors]
    assert all(int(_dequantize_awq(tensors, p).abs().max()) < 1e4 for p in packed)
    zeros = {int(z) for p in packed for z in torch.unique(tensors[f"{p}.qzeros"])}
    assert zeros == {0x88888888 - 2**32}  # eight zero points of 8 per word

    # ModelOpt's own quantized weights, calibrated the same way and folded the same way.
    tokenizer = calibration.load_tokenizer(tiny_llama3, trust_remote_code=False)
    modelopt_quant.set_deterministic(plan.quantization.calibration.seed)
    model = modelopt_quant.load_model(tiny_llama3, "float32", trust_remote_code=False)
    modelopt_quant.quantize(model, plan.quantization,
                            calibration.build_batches(plan.quantization.calibration, tokenizer, None))
    fold_pre_quant_scales(model)
    for prefix in packed:
        module = model.get_submodule(prefix)
        with torch.no_grad():
            expected = module.weight_quantizer(module.weight.float()).float()
        scale = tensors[f"{prefix}.scales"].float().t().repeat_interleave(128, dim=1)
        # The scales are stored in float16: the same integers times a scale rounded to 11 bits.
        assert torch.allclose(_dequantize_awq(tensors, prefix), expected, rtol=2e-3, atol=1e-3 * float(scale.max())), prefix
    folded_norm = model.get_submodule("model.layers.0.input_layernorm").weight.detach()
    assert torch.allclose(tensors["model.layers.0.input_layernorm.weight"].float(), folded_norm, rtol=1e-3)

    reference = _logits(modelopt_quant.load_model(tiny_llama3, "float32", trust_remote_code=False), tokenizer)
    dense = {k: v.float() for k, v in tensors.items() if not k.endswith(("qweight", "qzeros", "scales"))}
    for layer in packed:
        dense[f"{layer}.weight"] = _dequantize_awq(tensors, layer)
    plain = AutoModelForCausalLM.from_pretrained(str(tiny_llama3), dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(dense, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    error = float((_logits(plain.eval(), tokenizer) - reference).abs().max()) / float(reference.max() - reference.min())
    print(f"awq (AutoAWQ format, dequantized): max |dlogit| / logit range = {error:.4f}")
    assert 0 < error < MAX_REL_ERROR["awq"]


def test_hf_fp8_for_lmi_029_loads_with_compressed_tensors(tiny_llama3: Path, tmp_path: Path) -> None:
    """LMI 0.29 (vLLM 0.5.3.post1, no ModelOpt loader): FP8 as compressed-tensors float-quantized.
    Loaded back with the compressed-tensors library (the schema vLLM 0.11.1 validates with): the
    decompressed weights are the FP8 values times their scales, and the model it builds (static
    input scales applied) stays within the FP8 logit bound."""
    pytest.importorskip("compressed_tensors", reason="compressed-tensors (a dev dependency) is not installed")
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from transformers import AutoModelForCausalLM

    from lmi_build.quantize import calibration, modelopt_quant
    from lmi_build.quantize.compressed_tensors_format import quantization_config
    from lmi_build.targets.hf.checkpoint import build_hf_checkpoint

    plan = make_build_plan(tiny_llama3, target="hf", method="fp8", options=FAST_CALIB, dtype="float16")
    plan = plan.model_copy(update={"build": plan.build.model_copy(update={"export_format": "compressed_tensors"})})
    result = build_hf_checkpoint(plan, tiny_llama3, tmp_path / "ckpt")
    out = result.out_dir
    assert not (out / "hf_quant_config.json").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"] == quantization_config()
    tensors = _tensors(out / "model.safetensors")
    prefix = "model.layers.0.self_attn.k_proj"  # out 128 (4 kv heads x 32), in 256
    assert {s: (str(tensors[f"{prefix}.{s}"].dtype), tuple(tensors[f"{prefix}.{s}"].shape))
            for s in ("weight", "weight_scale", "input_scale")} == {
        "weight": ("torch.float8_e4m3fn", (128, 256)), "weight_scale": ("torch.float32", ()),
        "input_scale": ("torch.float32", ())}
    assert not [k for k in tensors if k.rsplit(".", 1)[-1] not in ("weight", "weight_scale", "input_scale", "bias")]
    assert str(tensors["lm_head.weight"].dtype) == "torch.float16"

    compressor = ModelCompressor.from_pretrained(str(out))
    assert compressor is not None and compressor.quantization_config is not None
    assert compressor.quantization_config.format == "float-quantized"
    model = AutoModelForCausalLM.from_pretrained(str(tiny_llama3), dtype=torch.float32)
    compressor.decompress(model_path=str(out), model=model)
    loaded = model.model.layers[0].self_attn.k_proj
    assert torch.equal(loaded.weight.float(), tensors[f"{prefix}.weight"].float() * tensors[f"{prefix}.weight_scale"])
    assert torch.equal(loaded.input_scale.float().reshape(()), tensors[f"{prefix}.input_scale"])
    tokenizer = calibration.load_tokenizer(tiny_llama3, trust_remote_code=False)
    reference = _logits(modelopt_quant.load_model(tiny_llama3, "float32", trust_remote_code=False), tokenizer)
    error = float((_logits(model.eval(), tokenizer) - reference).abs().max()) / float(reference.max() - reference.min())
    print(f"fp8 (compressed-tensors, loaded by compressed-tensors): max |dlogit| / logit range = {error:.4f}")
    assert 0 < error < MAX_REL_ERROR["fp8"]


def test_a_model_without_a_tokenizer_is_one_step_error(tmp_path: Path) -> None:
    """transformers raises AttributeError (not OSError) for a tokenizer_config.json with no vocabulary:
    that was a 92-line traceback out of calibration (issue 42 item 3); it is one StepError now."""
    from lmi_build.quantize import calibration

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizerFast"}))
    with pytest.raises(StepError, match="calibration needs the model's tokenizer") as raised:
        calibration.load_tokenizer(tmp_path, trust_remote_code=False)
    assert "\n" not in raised.value.message and len(raised.value.message) < 400
