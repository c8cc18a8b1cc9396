"""The trtllm target's checkpoint on this host: ModelOpt's TensorRT-LLM checkpoint export (quantized
as planned), or the same layout streamed tensor by tensor for unquantized models
(``lmi_build.quantize.trtllm_stream``). What was written is checked against the plan's knobs before
it is moved into place (an existing ``out_dir`` is replaced only after the new one passed)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from safetensors import safe_open

from lmi_build.core.errors import StepError, UnsupportedTarget
from lmi_build.core.fs import staged_directory
from lmi_build.core.reading import BadFile, read_json_file
from lmi_build.planning.plan import BuildPlan
from lmi_build.quantize.export import (
    output_files,
    peak_rss,
    prepare_model,
    quiet_libraries,
    read_json,
    through_cache,
    write_json,
)
from lmi_build.quantize.placement import Placement
from lmi_build.quantize.result import CheckpointResult
from lmi_build.quantize.safetensors_files import read_header
from lmi_build.quantize.tensor_map import lm_head_written
from lmi_build.quantize.trtllm_model_check import model_problems
from lmi_build.quantize.trtllm_stream import LayoutMismatch, evict_layout, write_streamed_checkpoint
from lmi_build.reporting import output
from lmi_build.targets.trtllm.knobs import TrtllmBuild


def build_trtllm_checkpoint(plan: BuildPlan, model_dir: Path, out_dir: Path, *,
                            calib_file: Path | None = None, use_cache: bool = False,
                            layout_cache: bool = True) -> CheckpointResult:
    """Quantize (if planned) and export a TensorRT-LLM checkpoint with the plan's TP/PP sharding.
    ``use_cache``: the checkpoint cache; ``layout_cache``: the streamed writer's cache of ModelOpt's
    layout (``--no-cache`` turns both off: neither is read nor written)."""
    build = plan.knobs(TrtllmBuild)
    return through_cache(plan, model_dir, out_dir, "trtllm", checkpoint_shaping(build), use_cache,
                         lambda: _export_trtllm(plan, model_dir, out_dir, calib_file, layout_cache), dtype=build.dtype)


def checkpoint_shaping(build: TrtllmBuild) -> dict[str, Any]:
    """The knobs that shape the checkpoint (its cache key's; engine knobs such as lengths do not)."""
    shaping: dict[str, Any] = {"dtype": build.dtype, "tp": build.tp, "pp": build.pp, "decoder": build.modelopt_decoder,
                               "export_format": None, "writer": build.checkpoint_writer}
    if build.modelopt_decoder == "qwen":
        shaping["qwen_fields"] = 1  # cached qwen checkpoints from before _complete_qwen_config lack qwen_type
    return shaping


def _export_trtllm(plan: BuildPlan, model_dir: Path, out_dir: Path, calib_file: Path | None,
                   layout_cache: bool) -> CheckpointResult:
    build = plan.knobs(TrtllmBuild)
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
        streamed = _stream_trtllm(plan, build, model_dir, out_dir, started, layout_cache)
        if isinstance(streamed, CheckpointResult):
            return streamed
        fallback.append(streamed)
    model, calibration, where = prepare_model(plan, model_dir, build.dtype, calib_file)

    import torch
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    with staged_directory(out_dir) as staging:
        try:
            with output.current().watch_written("exporting the checkpoint", staging, total=plan.expected_weight_bytes()), quiet_libraries():
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
        except (AssertionError, ValueError, RuntimeError) as exc:
            # ModelOpt states its preconditions with assert (e.g. "Weights with shape 256 cannot be split
            # into 3 ranks"): a one-line error, not a traceback.
            raise StepError(f"ModelOpt refused the TensorRT-LLM export of {plan.spec.architecture} "
                            f"(tp {build.tp}, pp {build.pp}): {str(exc).strip() or type(exc).__name__}",
                            hint="plan again (lmi-build plan trtllm ...): the plan's tp/pp must split the model's "
                                 "layers and heads; --debug shows the traceback") from exc
        notes = [*fallback, *_fix_missing_pre_quant_scale(staging, build.world_size),
                 *_complete_qwen_config(staging, plan, build)]
        config = _check_trtllm(staging, plan, build, model_dir)
    return CheckpointResult(
        format="trtllm",
        out_dir=out_dir,
        files=output_files(out_dir),
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
                   started: float, layout_cache: bool) -> CheckpointResult | str:
    """The unquantized checkpoint written tensor by tensor, or why not (one line for the step's
    notes) when the tensor map does not reproduce ModelOpt's layout for this model. A checkpoint
    written from a cached layout that fails its checks evicts the entry and is written again from
    a layout computed now: only a fresh layout's failure is a failure of the build."""
    assert build.modelopt_decoder is not None  # checked by the caller
    try:
        try:
            qwen_notes, config = _write_streamed(plan, build, model_dir, out_dir, layout_cache, refresh=False)
        except _FromCachedLayout as failed:
            evict_layout(failed.entry, failed.error.message)
            qwen_notes, config = _write_streamed(plan, build, model_dir, out_dir, layout_cache, refresh=True)
    except LayoutMismatch as mismatch:
        reason = f"streamed writer not used ({mismatch}); ModelOpt's exporter loaded the model"
        output.current().warn(reason)
        return reason
    return CheckpointResult(
        format="trtllm", out_dir=out_dir, files=output_files(out_dir), quant_algo=None, kv_cache_quant_algo=None,
        dtype=config["dtype"], tp=build.tp, pp=build.pp, seconds=round(time.perf_counter() - started, 3),
        peak_rss_bytes=peak_rss(),
        notes=[f"ModelOpt's layout written tensor by tensor ({build.dtype}), the model never loaded", *qwen_notes],
        writer="stream",
        placement=Placement(device="cpu", gpus=0, load_dtype=build.dtype, export_dtype=build.dtype),
    )


class _FromCachedLayout(Exception):
    """A checkpoint written from a cached layout failed its checks."""

    def __init__(self, entry: Path, error: StepError) -> None:
        super().__init__(error.message)
        self.entry = entry
        self.error = error


def _write_streamed(plan: BuildPlan, build: TrtllmBuild, model_dir: Path, out_dir: Path, layout_cache: bool, *,
                    refresh: bool) -> tuple[list[str], dict[str, Any]]:
    assert build.modelopt_decoder is not None  # checked by the caller
    with staged_directory(out_dir) as staging:
        with output.current().counting_bytes("writing the checkpoint", total=plan.expected_weight_bytes()) as bar, \
                quiet_libraries():
            streamed = write_streamed_checkpoint(model_dir, staging, architecture=plan.spec.architecture,
                                                 decoder=build.modelopt_decoder, dtype=build.dtype, tp=build.tp,
                                                 pp=build.pp, use_cache=layout_cache, refresh=refresh, progress=bar)
        qwen_notes = _complete_qwen_config(staging, plan, build)
        try:
            config = _check_trtllm(staging, plan, build, model_dir)
        except StepError as error:
            if streamed.layout_entry is None:
                raise
            raise _FromCachedLayout(streamed.layout_entry, error) from None
    return qwen_notes, config


def _check_trtllm(staging: Path, plan: BuildPlan, build: TrtllmBuild, model_dir: Path) -> dict[str, Any]:
    """What was written must match the plan and the model's own config.json, whichever writer
    wrote it and wherever its layout came from; a mismatch is never silent."""
    config = read_json(staging / "config.json")
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
    if build.modelopt_decoder == "qwen":
        problems += [f"{key}={config.get(key)!r} (TensorRT-LLM's QWen model needs {value!r})"
                     for key, value in _qwen_fields(plan).items() if config.get(key) != value]
    missing = [f"rank{r}.safetensors" for r in range(build.world_size) if not (staging / f"rank{r}.safetensors").is_file()]
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    else:
        tensors = _rank_tensors(staging, build.world_size)
        problems += model_problems(config, tensors, _model_config(model_dir),
                                   tp=build.tp, pp=build.pp, uniform_layers=plan.quantization.method is None)
        problems += _lm_head_problems(tensors, plan, build)
    if problems:
        raise StepError(
            "the exported TensorRT-LLM checkpoint does not match the plan: " + "; ".join(problems),
            hint="this is a toolchain mismatch (ModelOpt/transformers version); report it with --debug output",
        )
    return config


def _lm_head_problems(tensors: dict[int, set[str]], plan: BuildPlan, build: TrtllmBuild) -> list[str]:
    """The last rank holds lm_head.weight exactly when the plan's rule says (tensor_map.lm_head_written):
    the plan's weight estimate and the progress total counted the LM head by it."""
    planned = lm_head_written(tied=plan.spec.tie_word_embeddings, route="modelopt", decoder=build.modelopt_decoder,
                              example=build.trtllm_example)
    written = "lm_head.weight" in tensors[build.world_size - 1]
    if written == planned:
        return []
    return [f"lm_head.weight {'is' if written else 'is not'} written (planned: {'' if planned else 'not '}written, "
            f"the embedding {'not ' if planned else ''}shared; data/trtllm_tensor_map.toml [tied_lm_head])"]


def _rank_tensors(staging: Path, world_size: int) -> dict[int, set[str]]:
    """Each rank file's tensor names, from its header alone."""
    tensors: dict[int, set[str]] = {}
    for rank in range(world_size):
        header, _ = read_header(staging / f"rank{rank}.safetensors")
        tensors[rank] = {name for name in header if name != "__metadata__"}
    return tensors


def _model_config(model_dir: Path) -> dict[str, Any]:
    try:
        config = read_json_file(model_dir / "config.json", what="model config")
    except BadFile as error:
        raise StepError(error.message, hint="fix or re-download the model") from None
    return config if isinstance(config, dict) else {}


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


def _qwen_fields(plan: BuildPlan) -> dict[str, Any]:
    """The config.json fields TensorRT-LLM's QWen model reads that ModelOpt's TensorRT-LLM export of decoder
    "qwen" does not write (nvidia-modelopt 0.47.0 torch/export/tensorrt_llm_utils.py:140-178, 240-241: no
    qwen_type): TensorRT-LLM's own quantize.py adds them after ModelOpt's export, "Workaround for qwen
    version" (tensorrt_llm/quantization/quantize_by_modelopt.py @9691e12b:495-508, @a681853d:501-514):
    qwen_type = the HF model_type; for qwen2 norm_epsilon = rms_norm_eps and rotary_base = rope_theta;
    intermediate_size = the HF intermediate_size (Qwen v1 states twice its per-branch width, which
    TensorRT-LLM halves: models/qwen/model.py @250d9c29:61, @a681853d:96-101). From 0.11 the QWen model reads
    config.qwen_type unconditionally (models/qwen/model.py @9691e12b:65, @a681853d:79, 97): without it
    trtllm-build stops with AttributeError."""
    raw = plan.spec.raw
    fields: dict[str, Any] = {"qwen_type": plan.spec.model_type}
    if raw.get("intermediate_size") is not None:
        fields["intermediate_size"] = raw["intermediate_size"]
    if plan.spec.model_type == "qwen2":
        for key, source in (("norm_epsilon", "rms_norm_eps"), ("rotary_base", "rope_theta")):
            if raw.get(source) is not None:
                fields[key] = raw[source]
    return fields


def _complete_qwen_config(staging: Path, plan: BuildPlan, build: TrtllmBuild) -> list[str]:
    """ModelOpt's "qwen" export, completed as TensorRT-LLM's own quantize.py completes it (``_qwen_fields``)."""
    if build.modelopt_decoder != "qwen":
        return []
    config_path = staging / "config.json"
    config = read_json(config_path)
    fields = _qwen_fields(plan)
    changed = {key: value for key, value in fields.items() if config.get(key) != value}
    if not changed:
        return []
    config.update(changed)
    write_json(config_path, config)
    return ["set " + ", ".join(f"{key}={value}" for key, value in changed.items()) + " in config.json, as "
            "TensorRT-LLM's quantize.py does after ModelOpt's qwen export (its QWen model reads them)"]


def _fix_missing_pre_quant_scale(staging: Path, world_size: int) -> list[str]:
    """ModelOpt 0.47 labels every INT4 block export ``pre_quant_scale: true``, also for GPTQ and
    round-to-nearest INT4 where it writes no ``prequant_scaling_factor`` tensors; TensorRT-LLM
    would then look for tensors that do not exist. Say what was written."""

    config_path = staging / "config.json"
    config = read_json(config_path)
    quantization = config.get("quantization") or {}
    if not quantization.get("pre_quant_scale"):
        return []
    for rank in range(world_size):
        with safe_open(str(staging / f"rank{rank}.safetensors"), "pt") as handle:
            if any(k.endswith("prequant_scaling_factor") for k in handle.keys()):  # noqa: SIM118
                return []
    quantization["pre_quant_scale"] = False
    write_json(config_path, config)
    return ["set quantization.pre_quant_scale=false: no prequant_scaling_factor tensors were exported"]


def _vendor_hint(plan: BuildPlan, build: TrtllmBuild) -> str:
    example = build.trtllm_example or plan.spec.model_type
    return (f"build it inside the TensorRT-LLM container with the vendor converter "
            f"(examples/{example}/convert_checkpoint.py); lmi-build's trtllm steps run it for you")
