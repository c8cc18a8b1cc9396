"""Load a Hugging Face model and quantize it with NVIDIA Model Optimizer, as the plan says.

Everything here is a pure function of (weights, plan, calibration text): seeds are fixed,
deterministic algorithms are requested and samples are fed in the plan's order, so two runs
produce byte-identical checkpoints.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from lmi_build.core.errors import MissingDependency, StepError
from lmi_build.planning.plan import QuantizationPlan
from lmi_build.planning.quantization import METHODS
from lmi_build.quantize.calibration import CalibrationBatches

# ModelOpt preset for INT8 KV-cache scales (it ships only an FP8 one); same quantizer names.
_INT8_KV_ENTRY: dict[str, Any] = {"quantizer_name": "*[kv]_bmm_quantizer", "cfg": {"num_bits": 8, "axis": None}}


def set_deterministic(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def load_model(model_dir: Path, dtype: str, trust_remote_code: bool, *, device_map: str | None = None) -> Any:
    """The causal LM in ``dtype``, from safetensors only (never pickled .bin weights); on the
    devices ``device_map`` names (accelerate; None: CPU)."""
    import torch
    from transformers import AutoModelForCausalLM

    if not any(model_dir.glob("*.safetensors")):
        raise StepError(
            f"{model_dir.name} has no *.safetensors weights; lmi-build loads safetensors only",
            hint="convert the checkpoint to safetensors first (e.g. save_pretrained(safe_serialization=True))",
        )
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(model_dir),
            dtype=getattr(torch, dtype),
            use_safetensors=True,
            trust_remote_code=trust_remote_code,
            low_cpu_mem_usage=True,
            device_map=device_map,
        )
    except (OSError, ValueError) as exc:
        raise StepError(
            f"cannot load the model from {model_dir.name}: {exc}",
            hint="check that the directory holds a complete Hugging Face causal-LM checkpoint",
        ) from exc
    model.eval()
    return model


def quantize_config(plan: QuantizationPlan) -> dict[str, Any]:
    """The ModelOpt quantize config for the plan: the method's preset with the plan's knobs."""
    mtq = _mtq()
    if plan.method is None or plan.method not in METHODS:
        raise StepError(f"no ModelOpt quantization for method {plan.method!r}",
                        hint=f"use one of: {', '.join(METHODS)}")
    entry = METHODS[plan.method]
    config: dict[str, Any] = copy.deepcopy(getattr(mtq, entry.modelopt_config))
    if entry.name == "smoothquant":
        config["algorithm"] = {"method": "smoothquant", "alpha": plan.smoothquant_alpha}
    elif entry.algorithm is not None:
        config["algorithm"] = {"method": entry.algorithm}
    if plan.group_size is not None:
        _set_weight_block_size(config, plan.group_size)
    if plan.kv_cache_quant_algo == "FP8":
        config["quant_cfg"] = [*config["quant_cfg"], *copy.deepcopy(mtq.FP8_KV_CFG["quant_cfg"])]
    elif plan.kv_cache_quant_algo == "INT8":
        config["quant_cfg"] = [*config["quant_cfg"], copy.deepcopy(_INT8_KV_ENTRY)]
    return config


def quantize(model: Any, plan: QuantizationPlan, batches: CalibrationBatches | None) -> Any:
    """Quantize ``model`` in place (fake-quant modules with calibrated scales) and return it."""
    mtq = _mtq()
    config = quantize_config(plan)
    entry = METHODS[plan.method or ""]
    needs_data = entry.calibration or plan.kv_cache_quant_algo is not None
    if needs_data and batches is None:
        raise StepError(f"{entry.name} needs calibration data but the plan has none",
                        hint="re-run the plan; it chooses the calibration set")
    loop = batches.forward_loop if (needs_data and batches is not None) else None
    if plan.calibration is not None:
        set_deterministic(plan.calibration.seed)
    return mtq.quantize(model, config, forward_loop=loop)


def _set_weight_block_size(config: dict[str, Any], group_size: int) -> None:
    for entry in config["quant_cfg"]:
        if entry.get("quantizer_name") == "*weight_quantizer" and isinstance(entry.get("cfg"), dict):
            blocks = entry["cfg"].get("block_sizes")
            if isinstance(blocks, dict):
                for key in [k for k in blocks if str(k) == "-1"]:
                    blocks[key] = group_size


def _mtq() -> Any:
    try:
        import modelopt.torch.quantization as mtq
    except ImportError as exc:
        raise MissingDependency.for_module("nvidia-modelopt", "convert") from exc
    return mtq
