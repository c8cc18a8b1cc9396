"""The hf target's checkpoint on this host: the source converted to the plan's dtype (tensor by
tensor), quantized with ModelOpt into the format the serving engine loads (ModelOpt's unified HF
checkpoint, AutoAWQ, AutoGPTQ v1 or compressed-tensors FP8), or a pre-quantized input passed
through. What was written is checked against the plan before it is moved into place."""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType
from typing import Any

from safetensors import safe_open

from lmi_build.core.errors import StepError
from lmi_build.core.fs import staged_directory
from lmi_build.planning.plan import BuildPlan
from lmi_build.quantize import awq_format, compressed_tensors_format, gptq_format
from lmi_build.quantize.calibration import CalibrationSummary
from lmi_build.quantize.convert import convert_checkpoint
from lmi_build.quantize.export import (
    output_files,
    pass_through,
    peak_rss,
    prepare_model,
    quiet_libraries,
    read_json,
    through_cache,
    write_json,
)
from lmi_build.quantize.placement import Placement
from lmi_build.quantize.result import CheckpointResult
from lmi_build.reporting import output
from lmi_build.targets.hf.knobs import HfBuild

# hf export formats written by lmi-build's own packers (module ``lmi_build.quantize.<name>_format``).
PACKED_WRITERS = ("gptq", "awq")


def build_hf_checkpoint(plan: BuildPlan, model_dir: Path, out_dir: Path, *,
                        calib_file: Path | None = None, use_cache: bool = False) -> CheckpointResult:
    """A unified HF checkpoint (ModelOpt ``hf_quant_config.json``) when quantizing (GPTQ: the
    ``quant_method: gptq`` format); otherwise the model converted to the plan's dtype; a
    pre-quantized input is passed through unchanged (links: never cached). Tokenizer files are not
    copied: the artifact packager carries them."""
    build = plan.knobs(HfBuild)
    cacheable = use_cache and plan.quantization.pre_quantized is None
    return through_cache(plan, model_dir, out_dir, f"hf:{build.export_format}", checkpoint_shaping(build), cacheable,
                         lambda: _export_hf(plan, model_dir, out_dir, calib_file), dtype=build.dtype)


def checkpoint_shaping(build: HfBuild) -> dict[str, Any]:
    """The knobs that shape the checkpoint (its cache key's)."""
    return {"dtype": build.dtype, "tp": build.tp, "pp": 1, "decoder": None, "export_format": build.export_format,
            "writer": None}


def _export_hf(plan: BuildPlan, model_dir: Path, out_dir: Path, calib_file: Path | None) -> CheckpointResult:
    build = plan.knobs(HfBuild)
    started = time.perf_counter()
    quant = plan.quantization
    calibration: CalibrationSummary | None = None
    where: Placement | None = None
    notes: list[str] = []
    with staged_directory(out_dir) as staging:
        if quant.pre_quantized is not None:
            pass_through(model_dir, staging)
            notes.append(f"pre-quantized ({quant.pre_quantized.method}) weights passed through unchanged")
        elif quant.method is None:
            with output.current().watch_written("converting the checkpoint", staging,
                                                total=plan.expected_weight_bytes()):
                convert_checkpoint(model_dir, staging, build.dtype)  # one tensor at a time: no model in memory
            notes.append(f"converted to {build.dtype} tensor by tensor")
            where = Placement(device="cpu", gpus=0, load_dtype=build.dtype, export_dtype=build.dtype)
        else:
            packed = build.export_format in PACKED_WRITERS
            model, calibration, where = prepare_model(plan, model_dir, build.dtype, calib_file, cast=not packed)
            import torch

            if packed:
                with output.current().watch_written("writing the packed checkpoint", staging, total=plan.expected_weight_bytes()), quiet_libraries():
                    notes = _packed_layout(build.export_format).write_checkpoint(
                        model, where, quant.group_size or 128, staging)
            else:
                from modelopt.torch.export import export_hf_checkpoint

                with output.current().watch_written("exporting the checkpoint", staging, total=plan.expected_weight_bytes()), quiet_libraries():
                    export_hf_checkpoint(model, dtype=getattr(torch, build.dtype), export_dir=staging)
                notes = _fix_missing_pre_quant_scale_hf(staging)
                if build.export_format == "compressed_tensors":

                    notes += compressed_tensors_format.describe_modelopt_fp8(staging)
        _check_hf(staging, plan, build)
    return CheckpointResult(
        format="hf",
        out_dir=out_dir,
        files=output_files(out_dir),
        quant_algo=quant.quant_algo,
        kv_cache_quant_algo=quant.kv_cache_quant_algo,
        dtype=build.dtype,
        tp=build.tp,
        seconds=round(time.perf_counter() - started, 3),
        peak_rss_bytes=peak_rss(),
        calibration=calibration,
        pre_quantized=quant.pre_quantized is not None,
        notes=notes,
        placement=where,
    )


def _check_hf(staging: Path, plan: BuildPlan, build: HfBuild) -> None:
    config = read_json(staging / "config.json")
    problems: list[str] = []
    if not list(staging.glob("*.safetensors")):
        problems.append("no *.safetensors written")
    quant = plan.quantization
    if quant.method is not None and build.export_format in PACKED_WRITERS:
        problems += _packed_problems(staging, config, build.export_format, quant.group_size)
    elif quant.method is not None and build.export_format == "compressed_tensors":

        problems += compressed_tensors_format.problems(staging, config)
    elif quant.method is not None:
        qcfg = config.get("quantization_config") or {}
        if qcfg.get("quant_method") != "modelopt":
            problems.append(f"config.json quantization_config.quant_method={qcfg.get('quant_method')!r} "
                            "(expected 'modelopt')")
        hf_quant = read_json(staging / "hf_quant_config.json").get("quantization", {})
        if hf_quant.get("quant_algo") != quant.quant_algo:
            problems.append(f"hf_quant_config.json quant_algo={hf_quant.get('quant_algo')} (planned {quant.quant_algo})")
        if hf_quant.get("kv_cache_quant_algo") != quant.kv_cache_quant_algo:
            problems.append(f"hf_quant_config.json kv_cache_quant_algo={hf_quant.get('kv_cache_quant_algo')} "
                            f"(planned {quant.kv_cache_quant_algo})")
    elif quant.pre_quantized is None and config.get("torch_dtype", config.get("dtype")) != build.dtype:
        problems.append(f"config.json torch_dtype={config.get('torch_dtype')} (planned {build.dtype})")
    if problems:
        raise StepError("the exported Hugging Face checkpoint does not match the plan: " + "; ".join(problems),
                        hint="this is a toolchain mismatch (ModelOpt/transformers version); report it with --debug output")


def _packed_layout(export_format: str) -> ModuleType:
    """The module that writes and describes a packed format (``PACKED_WRITERS``)."""
    if export_format == "awq":
        return awq_format
    return gptq_format


def _packed_problems(staging: Path, config: dict[str, Any], export_format: str, group_size: int | None) -> list[str]:
    """The config says what the engine's loader expects, and every packed linear has its tensors."""

    layout = _packed_layout(export_format)
    problems = []
    expected = layout.quantization_config(group_size or 128)
    written = config.get("quantization_config") or {}
    for key, value in expected.items():
        if written.get(key) != value:
            problems.append(f"quantization_config.{key}={written.get(key)!r} (expected {value!r})")
    names: set[str] = set()
    for shard in staging.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as handle:
            names.update(handle.keys())
            if export_format == "awq" and any(k.endswith("pre_quant_scale") for k in handle.keys()):  # noqa: SIM118
                problems.append("a pre_quant_scale tensor is left (AutoAWQ loaders ignore it)")
    packed = {n.rsplit(".", 1)[0] for n in names if n.endswith(".qweight")}
    if not packed:
        problems.append(f"no {export_format}-packed (qweight) tensors")
    for layer in sorted(packed):
        missing = [s for s in layout.PACKED_SUFFIXES if f"{layer}.{s}" not in names]
        if missing or f"{layer}.weight" in names:
            problems.append(f"{layer}: missing {missing}" if missing else f"{layer}: an unpacked weight is left")
    return problems


def _fix_missing_pre_quant_scale_hf(staging: Path) -> list[str]:

    path = staging / "hf_quant_config.json"
    data = read_json(path)
    quantization = data.get("quantization") or {}
    if not quantization.get("pre_quant_scale"):
        return []
    for shard in staging.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as handle:
            if any(k.endswith("pre_quant_scale") for k in handle.keys()):  # noqa: SIM118
                return []
    quantization["pre_quant_scale"] = False
    write_json(path, data)
    return ["set hf_quant_config.json pre_quant_scale=false: no pre_quant_scale tensors were exported"]
