"""Checkpoint export: TensorRT-LLM checkpoints and unified Hugging Face checkpoints, on CPU.

Both builders write into a hidden sibling directory, check what was written against the plan,
and only then move it into place (an existing ``out_dir`` is replaced only after the new one
passed its checks). ``tensorrt_llm`` is never imported: ModelOpt writes the checkpoint itself.
"""

from __future__ import annotations

import contextlib
import json
import math
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from lmi_build import output
from lmi_build.errors import InvalidPlan, StepError, UnsupportedTarget
from lmi_build.fs import link_or_copy, staged_directory
from lmi_build.planning.plan import BuildPlan, HfBuild, TrtllmBuild
from lmi_build.quantize.calibration import CalibrationSummary
from lmi_build.quantize.placement import Placement, cast_for_export, choose_placement

# hf export formats written by lmi-build's own packers (module ``lmi_build.quantize.<name>_format``).
PACKED_WRITERS = ("gptq", "awq")
# Files of a pre-quantized HF checkpoint that carry weights or their description.
_PASSTHROUGH_SUFFIXES = (".safetensors",)
_PASSTHROUGH_NAMES = ("config.json", "generation_config.json", "model.safetensors.index.json",
                      "hf_quant_config.json", "quant_config.json", "quantize_config.json")


class CheckpointResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    format: Literal["trtllm", "hf"]
    out_dir: Path
    files: list[str]  # relative paths, sorted
    quant_algo: str | None = None
    kv_cache_quant_algo: str | None = None
    dtype: str
    tp: int = 1
    pp: int = 1
    seconds: float
    peak_rss_bytes: int  # this process's peak resident set so far (includes loading the model)
    calibration: CalibrationSummary | None = None
    pre_quantized: bool = False  # the input was already quantized and passed through unchanged
    notes: list[str] = []  # adjustments made to what ModelOpt wrote, one line each
    placement: Placement | None = None  # where the model was loaded/calibrated; None: passed through
    cached: bool = False  # restored from the checkpoint cache (verified), nothing was recomputed
    # trtllm: who wrote the tensors (a planned stream may fall back to ModelOpt's exporter); None: hf
    writer: Literal["modelopt", "stream"] | None = None


def run_checkpoint_step(plan: BuildPlan, model_dir: Path, work_dir: Path, *,
                        calib_file: Path | None = None, use_cache: bool = False) -> CheckpointResult:
    """The pipeline's checkpoint step: ``<work_dir>/trtllm-checkpoint`` or ``<work_dir>/hf-checkpoint``;
    ``use_cache``: reuse (and keep) the checkpoint in the checkpoint cache."""
    if not plan.valid:
        raise InvalidPlan("the plan has errors; no checkpoint was built", hint="run `lmi-build plan` to see them")
    if plan.target == "trtllm":
        return build_trtllm_checkpoint(plan, model_dir, work_dir / "trtllm-checkpoint", calib_file=calib_file,
                                       use_cache=use_cache)
    if plan.target == "hf":
        return build_hf_checkpoint(plan, model_dir, work_dir / "hf-checkpoint", calib_file=calib_file,
                                   use_cache=use_cache)
    raise UnsupportedTarget(f"the checkpoint step does not apply to target {plan.target}",
                            hint="neuronx compiles from the Hugging Face weights directly")


def build_trtllm_checkpoint(plan: BuildPlan, model_dir: Path, out_dir: Path, *,
                            calib_file: Path | None = None, use_cache: bool = False) -> CheckpointResult:
    """Quantize (if planned) and export a TensorRT-LLM checkpoint with the plan's TP/PP sharding."""
    return _through_cache(plan, model_dir, out_dir, "trtllm", use_cache,
                          lambda: _export_trtllm(plan, model_dir, out_dir, calib_file))


def _export_trtllm(plan: BuildPlan, model_dir: Path, out_dir: Path, calib_file: Path | None) -> CheckpointResult:
    build = plan.build
    if not isinstance(build, TrtllmBuild):
        raise StepError("a TensorRT-LLM checkpoint needs a trtllm plan", hint="plan with --target trtllm")
    vendor_hint = _vendor_hint(plan, build)
    if plan.quantization.pre_quantized is not None:
        raise UnsupportedTarget(
            f"ModelOpt cannot re-export the pre-quantized ({plan.quantization.pre_quantized.method}) checkpoint",
            hint=vendor_hint,
        )
    if build.checkpoint_route == "vendor" or not build.modelopt_decoder:
        raise UnsupportedTarget(f"ModelOpt cannot export {plan.spec.architecture} to a TensorRT-LLM checkpoint",
                                hint=vendor_hint)
    started = time.perf_counter()
    fallback: list[str] = []  # why a planned stream went to ModelOpt's exporter
    if build.checkpoint_writer == "stream" and plan.quantization.method is None:
        streamed = _stream_trtllm(plan, build, model_dir, out_dir, started)
        if isinstance(streamed, CheckpointResult):
            return streamed
        fallback.append(streamed)
    model, calibration, where = _prepare_model(plan, model_dir, build.dtype, calib_file)

    import torch
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    with staged_directory(out_dir) as staging:
        try:
            with _quiet_libraries():
                export_tensorrt_llm_checkpoint(
                    model,
                    build.modelopt_decoder,
                    getattr(torch, build.dtype),
                    export_dir=staging,
                    inference_tensor_parallel=build.tp,
                    inference_pipeline_parallel=build.pp,
                )
        except NotImplementedError as exc:
            if "Cannot pack weight" in str(exc):
                raise StepError(f"INT4 packing failed: {exc}",
                                hint="each rank's input dimension must be a multiple of the group size; "
                                     "lower the tensor parallel degree") from exc
            raise UnsupportedTarget(
                f"ModelOpt cannot export {plan.spec.architecture} to a TensorRT-LLM checkpoint ({exc})",
                hint=vendor_hint,
            ) from exc
        notes = [*fallback, *_fix_missing_pre_quant_scale(staging, build.world_size)]
        config = _check_trtllm(staging, plan, build)
    return CheckpointResult(
        format="trtllm",
        out_dir=out_dir,
        files=_files(out_dir),
        quant_algo=config["quantization"].get("quant_algo"),
        kv_cache_quant_algo=config["quantization"].get("kv_cache_quant_algo"),
        dtype=config["dtype"],
        tp=build.tp,
        pp=build.pp,
        seconds=round(time.perf_counter() - started, 3),
        peak_rss_bytes=peak_rss(),
        calibration=calibration,
        notes=notes,
        placement=where,
        writer="modelopt",
    )


def _stream_trtllm(plan: BuildPlan, build: TrtllmBuild, model_dir: Path, out_dir: Path,
                   started: float) -> CheckpointResult | str:
    """The unquantized checkpoint written tensor by tensor, or why not (one line for the step's
    notes) when the tensor map does not reproduce ModelOpt's layout for this model."""
    from lmi_build.quantize.trtllm_stream import LayoutMismatch, write_streamed_checkpoint

    assert build.modelopt_decoder is not None  # checked by the caller
    try:
        with staged_directory(out_dir) as staging:
            with _quiet_libraries():
                write_streamed_checkpoint(model_dir, staging, architecture=plan.spec.architecture,
                                          decoder=build.modelopt_decoder, dtype=build.dtype, tp=build.tp, pp=build.pp)
            config = _check_trtllm(staging, plan, build)
    except LayoutMismatch as mismatch:
        reason = f"streamed writer not used ({mismatch}); ModelOpt's exporter loaded the model"
        output.current().warn(reason)
        return reason
    return CheckpointResult(
        format="trtllm", out_dir=out_dir, files=_files(out_dir), quant_algo=None, kv_cache_quant_algo=None,
        dtype=config["dtype"], tp=build.tp, pp=build.pp, seconds=round(time.perf_counter() - started, 3),
        peak_rss_bytes=peak_rss(),
        notes=[f"ModelOpt's layout written tensor by tensor ({build.dtype}), the model never loaded"], writer="stream",
        placement=Placement(device="cpu", gpus=0, load_dtype=build.dtype, export_dtype=build.dtype),
    )


def build_hf_checkpoint(plan: BuildPlan, model_dir: Path, out_dir: Path, *,
                        calib_file: Path | None = None, use_cache: bool = False) -> CheckpointResult:
    """A unified HF checkpoint (ModelOpt ``hf_quant_config.json``) when quantizing (GPTQ: the
    ``quant_method: gptq`` format); otherwise the model converted to the plan's dtype; a
    pre-quantized input is passed through unchanged (links: never cached). Tokenizer files are not
    copied: the artifact packager carries them."""
    build = plan.build
    if not isinstance(build, HfBuild):
        raise StepError("a Hugging Face checkpoint needs an hf plan", hint="plan with --target hf")
    cacheable = use_cache and plan.quantization.pre_quantized is None
    return _through_cache(plan, model_dir, out_dir, f"hf:{build.export_format}", cacheable,
                          lambda: _export_hf(plan, model_dir, out_dir, calib_file))


def _through_cache(plan: BuildPlan, model_dir: Path, out_dir: Path, checkpoint_format: str, use_cache: bool,
                   produce: Callable[[], CheckpointResult]) -> CheckpointResult:
    """``produce()``, or its cached result when an entry for exactly these inputs verifies."""
    if not use_cache:
        return produce()
    from lmi_build.quantize.checkpoint_cache import CheckpointCache, checkpoint_key

    cache = CheckpointCache()
    # Calibration on a GPU (in the export dtype) and on the CPU (in float32) give slightly different
    # scales: the placement this host would use is part of what decides the checkpoint.
    calibrated = plan.quantization.method is not None and plan.quantization.calibration is not None
    dtype = str(getattr(plan.build, "dtype", "") or "")
    key, material = checkpoint_key(plan, model_dir, checkpoint_format,
                                   calibrated_on=_placement(plan, dtype) if calibrated and dtype else None)
    hit = cache.restore(key, out_dir)
    if hit is not None:
        output.current().info(f"reused the cached checkpoint {key[:19]}… (verified)")
        return hit
    result = produce()
    cache.store(key, material, result)
    return result


def _export_hf(plan: BuildPlan, model_dir: Path, out_dir: Path, calib_file: Path | None) -> CheckpointResult:
    build = plan.build
    if not isinstance(build, HfBuild):
        raise StepError("a Hugging Face checkpoint needs an hf plan", hint="plan with --target hf")
    started = time.perf_counter()
    quant = plan.quantization
    calibration: CalibrationSummary | None = None
    where: Placement | None = None
    notes: list[str] = []
    with staged_directory(out_dir) as staging:
        if quant.pre_quantized is not None:
            _pass_through(model_dir, staging)
            notes.append(f"pre-quantized ({quant.pre_quantized.method}) weights passed through unchanged")
        elif quant.method is None:
            from lmi_build.quantize.convert import convert_checkpoint

            convert_checkpoint(model_dir, staging, build.dtype)  # one tensor at a time: no model in memory
            notes.append(f"converted to {build.dtype} tensor by tensor")
            where = Placement(device="cpu", gpus=0, load_dtype=build.dtype, export_dtype=build.dtype)
        else:
            packed = build.export_format in PACKED_WRITERS
            model, calibration, where = _prepare_model(plan, model_dir, build.dtype, calib_file, cast=not packed)
            import torch

            if packed:
                with _quiet_libraries():
                    notes = _packed_layout(build.export_format).write_checkpoint(
                        model, where, quant.group_size or 128, staging)
            else:
                from modelopt.torch.export import export_hf_checkpoint

                with _quiet_libraries():
                    export_hf_checkpoint(model, dtype=getattr(torch, build.dtype), export_dir=staging)
                notes = _fix_missing_pre_quant_scale_hf(staging)
                if build.export_format == "compressed_tensors":
                    from lmi_build.quantize import compressed_tensors_format

                    notes += compressed_tensors_format.describe_modelopt_fp8(staging)
        _check_hf(staging, plan, build)
    return CheckpointResult(
        format="hf",
        out_dir=out_dir,
        files=_files(out_dir),
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


def _placement(plan: BuildPlan, dtype: str) -> Placement:
    quant = plan.quantization
    return choose_placement(dtype, runs_forward=quant.method is not None and quant.calibration is not None)


def _prepare_model(plan: BuildPlan, model_dir: Path, dtype: str, calib_file: Path | None, *,
                   cast: bool = True) -> tuple[Any, CalibrationSummary | None, Placement]:
    """Load, quantize as planned, and return the model in the export dtype ``dtype`` (``cast=False``:
    still in the calibration dtype, for an exporter that casts itself). Where it is calibrated (GPU
    in ``dtype``, or CPU in float32 then cast) is ``placement.choose_placement``'s choice: exported
    dtypes and norms are ``dtype`` either way."""
    from lmi_build.options.resolve import written_options
    from lmi_build.quantize import calibration as calib
    from lmi_build.quantize import modelopt_quant

    trust = bool(written_options(plan.options).bool_value("trust_remote_code"))
    quant = plan.quantization
    where = _placement(plan, dtype)
    modelopt_quant.set_deterministic(quant.calibration.seed if quant.calibration else 1234)
    with _quiet_libraries():  # "Loading checkpoint shards", deprecation notices
        model = modelopt_quant.load_model(model_dir, where.load_dtype, trust, device_map=where.device_map)
    if quant.method is None:
        return model, None, where
    batches = None
    if quant.calibration is not None:
        with _quiet_libraries():
            tokenizer = calib.load_tokenizer(model_dir, trust)
        batches = calib.build_batches(quant.calibration, tokenizer, calib_file)
    output.current().info(f"quantizing with {quant.method} ({quant.quant_algo}) on {where.describe()}")
    with _quiet_libraries():
        modelopt_quant.quantize(model, quant, batches)
    summary = batches.summary() if batches is not None else None
    return (cast_for_export(model, where) if cast else model), summary, where


def _check_trtllm(staging: Path, plan: BuildPlan, build: TrtllmBuild) -> dict[str, Any]:
    """What ModelOpt wrote must match the plan; a mismatch is a toolchain problem, never silent."""
    config = _read_json(staging / "config.json")
    problems: list[str] = []
    mapping = config.get("mapping", {})
    expected_mapping = {"world_size": build.world_size, "tp_size": build.tp, "pp_size": build.pp}
    for key, value in expected_mapping.items():
        if mapping.get(key) != value:
            problems.append(f"mapping.{key}={mapping.get(key)} (planned {value})")
    if config.get("dtype") != build.dtype:
        problems.append(f"dtype={config.get('dtype')} (planned {build.dtype})")
    quantization = config.get("quantization") or {}
    for key, planned in (("quant_algo", plan.quantization.quant_algo),
                         ("kv_cache_quant_algo", plan.quantization.kv_cache_quant_algo)):
        if quantization.get(key) != planned:
            problems.append(f"quantization.{key}={quantization.get(key)} (planned {planned})")
    if plan.quantization.group_size is not None and quantization.get("group_size") != plan.quantization.group_size:
        problems.append(f"quantization.group_size={quantization.get('group_size')} "
                        f"(planned {plan.quantization.group_size})")
    problems += _rope_problems(config, plan)
    missing = [f"rank{r}.safetensors" for r in range(build.world_size) if not (staging / f"rank{r}.safetensors").is_file()]
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if problems:
        raise StepError(
            "the exported TensorRT-LLM checkpoint does not match the plan: " + "; ".join(problems),
            hint="this is a toolchain mismatch (ModelOpt/transformers version); report it with --debug output",
        )
    return config


def _rope_problems(config: dict[str, Any], plan: BuildPlan) -> list[str]:
    rope = plan.spec.rope
    if rope is None or plan.spec.position_embedding != "rope":
        return []
    problems = []
    base = config.get("rotary_base", 10000.0)
    if not math.isclose(float(base), rope.theta, rel_tol=1e-6):
        problems.append(f"rotary_base={config.get('rotary_base')} (model rope_theta {rope.theta})")
    if rope.raw_scaling:
        exported = config.get("rotary_scaling") or {}
        for key, value in rope.raw_scaling.items():
            if key == "type" and "rope_type" in exported:
                key = "rope_type"
            if exported.get(key) != value:
                problems.append(f"rotary_scaling.{key}={exported.get(key)!r} (model rope_scaling {value!r})")
    return problems


def _check_hf(staging: Path, plan: BuildPlan, build: HfBuild) -> None:
    config = _read_json(staging / "config.json")
    problems: list[str] = []
    if not list(staging.glob("*.safetensors")):
        problems.append("no *.safetensors written")
    quant = plan.quantization
    if quant.method is not None and build.export_format in PACKED_WRITERS:
        problems += _packed_problems(staging, config, build.export_format, quant.group_size)
    elif quant.method is not None and build.export_format == "compressed_tensors":
        from lmi_build.quantize import compressed_tensors_format

        problems += compressed_tensors_format.problems(staging, config)
    elif quant.method is not None:
        qcfg = config.get("quantization_config") or {}
        if qcfg.get("quant_method") != "modelopt":
            problems.append(f"config.json quantization_config.quant_method={qcfg.get('quant_method')!r} "
                            "(expected 'modelopt')")
        hf_quant = _read_json(staging / "hf_quant_config.json").get("quantization", {})
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
        from lmi_build.quantize import awq_format

        return awq_format
    from lmi_build.quantize import gptq_format

    return gptq_format


def _packed_problems(staging: Path, config: dict[str, Any], export_format: str, group_size: int | None) -> list[str]:
    """The config says what the engine's loader expects, and every packed linear has its tensors."""
    from safetensors import safe_open

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


def _fix_missing_pre_quant_scale(staging: Path, world_size: int) -> list[str]:
    """ModelOpt 0.47 labels every INT4 block export ``pre_quant_scale: true``, also for GPTQ and
    round-to-nearest INT4 where it writes no ``prequant_scaling_factor`` tensors; TensorRT-LLM
    would then look for tensors that do not exist. Say what was written."""
    from safetensors import safe_open

    config_path = staging / "config.json"
    config = _read_json(config_path)
    quantization = config.get("quantization") or {}
    if not quantization.get("pre_quant_scale"):
        return []
    for rank in range(world_size):
        with safe_open(str(staging / f"rank{rank}.safetensors"), "pt") as handle:
            if any(k.endswith("prequant_scaling_factor") for k in handle.keys()):  # noqa: SIM118
                return []
    quantization["pre_quant_scale"] = False
    _write_json(config_path, config)
    return ["set quantization.pre_quant_scale=false: no prequant_scaling_factor tensors were exported"]


def _fix_missing_pre_quant_scale_hf(staging: Path) -> list[str]:
    from safetensors import safe_open

    path = staging / "hf_quant_config.json"
    data = _read_json(path)
    quantization = data.get("quantization") or {}
    if not quantization.get("pre_quant_scale"):
        return []
    for shard in staging.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as handle:
            if any(k.endswith("pre_quant_scale") for k in handle.keys()):  # noqa: SIM118
                return []
    quantization["pre_quant_scale"] = False
    _write_json(path, data)
    return ["set hf_quant_config.json pre_quant_scale=false: no pre_quant_scale tensors were exported"]


def _pass_through(model_dir: Path, staging: Path) -> None:
    for source in sorted(model_dir.iterdir()):
        if source.is_file() and (source.suffix in _PASSTHROUGH_SUFFIXES or source.name in _PASSTHROUGH_NAMES):
            link_or_copy(source, staging / source.name)  # same bytes, no copy; the source is never modified


def _vendor_hint(plan: BuildPlan, build: TrtllmBuild) -> str:
    example = build.trtllm_example or plan.spec.model_type
    return (f"build it inside the TensorRT-LLM container with the vendor converter "
            f"(examples/{example}/convert_checkpoint.py); lmi-build's trtllm steps run it for you")


def _quiet_libraries() -> contextlib.AbstractContextManager[None]:
    """ModelOpt and transformers print, log and warn as they work (ranks, quantizer counts,
    deprecations, tied weights): all of it goes to the debug log (--debug), never to stdout, which
    belongs to results (``--json``), nor to the console."""
    return output.current().library_output()


def _files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def peak_rss() -> int:
    """This process's peak resident set so far, in bytes.

    On Linux the memory map's own high-water mark (VmHWM): ru_maxrss keeps the peak of the process
    that forked us across exec, so a build started by a large parent (a test runner, a fleet worker)
    would report the parent's peak."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    # ru_maxrss is KiB on Linux, bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise StepError(f"the export wrote no {path.name}", hint="report this with --debug output")
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=4) + "\n")
