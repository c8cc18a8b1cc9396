"""FP8 checkpoints in the compressed-tensors ``float-quantized`` format (static per-tensor W8A8):
what vLLM 0.5.3.post1 (LMI 0.29, LMI-Dist 11) loads FP8 from, having no ModelOpt loader.

ModelOpt's unified HF export of an FP8 model already has the tensors that format wants: per
quantized Linear an ``[out, in]`` ``float8_e4m3fn`` ``weight`` with float32 scalar ``weight_scale``
and ``input_scale``, lm_head and embeddings unquantized. Only its description differs
(``quant_method: modelopt``, config groups without ``strategy``/``symmetric``, which vLLM's
``_is_fp8_w8a8`` requires), so the writer replaces the description and checks every tensor. Facts
with their vLLM source lines: ``targets/hf/data/serving_formats.toml`` (format ``compressed_tensors``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors import safe_open

from lmi_build.core.errors import StepError

# vLLM 0.5.3.post1 schemes/compressed_tensors_w8a8_fp8.py:68-93 creates exactly these per Linear;
# models/llama.py load_weights has no place for anything else (a zero point raises KeyError).
QUANTIZED_SUFFIXES = ("weight", "weight_scale", "input_scale")
_FP8 = "F8_E4M3"
_SCALE_SHAPES: tuple[list[int], ...] = ([], [1])  # both load: layers/linear.py:44-64 (fused) and 211-218/318-322/762-766
_ARGS = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor", "dynamic": False}


def quantization_config() -> dict[str, Any]:
    """config.json ``quantization_config``: only keys both vLLM 0.5.3.post1's own schema and the
    compressed-tensors 0.12.2 library vLLM 0.11.1 validates with (``extra="forbid"``) accept."""
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": dict(_ARGS),
                                      "input_activations": dict(_ARGS)}},
        "ignore": ["lm_head"],  # must be present (0.5.3 iterates it); lm_head is never quantized anyway
    }


def describe_modelopt_fp8(staging: Path) -> list[str]:
    """Rewrite ModelOpt's FP8 export in ``staging`` as a compressed-tensors checkpoint."""
    hf_quant = staging / "hf_quant_config.json"
    quantization = json.loads(hf_quant.read_text()).get("quantization", {}) if hf_quant.is_file() else {}
    if quantization.get("quant_algo") != "FP8" or quantization.get("kv_cache_quant_algo"):
        raise StepError(f"compressed-tensors is written from ModelOpt's FP8 export without KV-cache scales, "
                        f"not quant_algo={quantization.get('quant_algo')} / "
                        f"kv_cache_quant_algo={quantization.get('kv_cache_quant_algo')}",
                        hint="this is a planning error; report it with --debug output")
    config_path = staging / "config.json"
    config = json.loads(config_path.read_text())
    config["quantization_config"] = quantization_config()
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    hf_quant.unlink()  # its description would contradict config.json's
    return ["FP8 weights and scales from ModelOpt, described as compressed-tensors float-quantized "
            "(static per-tensor W8A8)"]


def problems(staging: Path, config: dict[str, Any]) -> list[str]:
    """What vLLM's compressed-tensors FP8 loader would reject in the written checkpoint."""
    found = []
    if config.get("quantization_config") != quantization_config():
        found.append("config.json quantization_config is not the compressed-tensors FP8 description")
    if (staging / "hf_quant_config.json").exists():
        found.append("hf_quant_config.json is left beside a compressed-tensors config")
    tensors: dict[str, tuple[str, list[int]]] = {}
    for shard in staging.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open handles are not iterable
                sliced = handle.get_slice(name)
                tensors[name] = (sliced.get_dtype(), list(sliced.get_shape()))
    quantized = {name.rsplit(".", 1)[0] for name in tensors if name.endswith(".weight_scale")}
    if not quantized:
        found.append("no quantized (weight_scale) linear layers")
    for layer in sorted(quantized):
        weight = tensors.get(f"{layer}.weight")
        if weight is None or weight[0] != _FP8:
            found.append(f"{layer}.weight is {weight[0] if weight else 'missing'}, not {_FP8}")
        for scale in ("weight_scale", "input_scale"):
            dtype, shape = tensors.get(f"{layer}.{scale}", ("missing", []))
            if dtype != "F32" or shape not in _SCALE_SHAPES:
                found.append(f"{layer}.{scale} is {dtype} {shape}, not a float32 scalar")
    for name, (dtype, _) in tensors.items():
        module, suffix = name.rsplit(".", 1)
        if module in quantized and suffix not in QUANTIZED_SUFFIXES:
            found.append(f"{name}: vLLM's FP8 layer has no such parameter")
        elif module not in quantized and dtype == _FP8:
            found.append(f"{name} is {_FP8} without scales")
    return found
