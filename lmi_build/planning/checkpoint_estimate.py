"""Where the convert/quantize step will run and what it will cost, at plan time (no torch).

The device is what this host offers: CUDA when an NVIDIA driver reports GPUs (``/proc/driver/nvidia``,
else ``nvidia-smi -L``), ``CUDA_VISIBLE_DEVICES`` allows them and the installed torch is not a CPU-only
build (read from its distribution version, ``+cpu``, without importing it); CPU otherwise. The
build decides again with torch and records the device it really used in the manifest.

Time and memory come from rates measured with ``benchmarks/quantize.py`` and kept, with the command,
the date and the library versions, in ``lmi_build/data/quantize_rates.toml``:

    seconds  = fixed + per_param x params + calibration_rate[method] x tokens x params   (CPU, fp32)
    host RAM = baseline + factor[target.method] x params x bytes(load dtype)

Calibration tokens are estimated from the planned samples themselves (the same seed-driven selection
the step makes), at the table's characters per token, capped at ``calib_max_seq_len``. No CUDA rate
has been measured, so on a GPU host the time is unknown (None) and the GPU memory is an inferred
factor; each number's ``basis`` line says which it is.
"""

import functools
import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal, cast

from lmi_build.core.errors import LmiBuildError
from lmi_build.core.tables import bundled_table
from lmi_build.core.types import Record
from lmi_build.model.spec import ModelSpec
from lmi_build.planning import calibration_text
from lmi_build.planning.findings import Findings
from lmi_build.planning.instances import GIB
from lmi_build.planning.plan import CheckpointStepEstimate, QuantizationPlan

CPU_CALIBRATION_DTYPE = "float32"
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")
StepKind = Literal["quantize", "convert_hf", "convert_trtllm", "stream_trtllm"]


class RateSource(Record):
    command: str
    host: str  # the kind of host, in neutral words ("a 2-core x86-64 CPU host"): printed by `plan`
    libraries: str  # the versions the rates were measured with
    measured: str  # date
    notes: str = ""


class StepRates(Record):
    fixed_seconds: float  # whatever the size: imports, tokenizer, config, checks
    seconds_per_param: float  # loading, quantizer set-up and export, per parameter


class CalibrationRate(Record):
    per_token: float  # seconds per calibration token, whatever the size (per-call overheads)
    per_token_param: float  # seconds per calibration token x parameter (the matmuls), fp32
    sizes: int  # model sizes it was fitted on (1: all of it in per_token_param, an over-estimate)


class CpuRates(Record):
    chars_per_token: float  # of the calibration text, to estimate tokens at plan time
    load_average: str  # the host's load while measuring (the rates scale with it)
    steps: dict[StepKind, StepRates]
    calibration: dict[str, CalibrationRate]  # method -> rate


class HostMemory(Record):
    baseline_gib: float  # python + torch + transformers + ModelOpt imported, nothing loaded
    factor: dict[str, float]  # "<target>.<method|none>" -> peak above baseline / loaded weight bytes
    # The streamed TensorRT-LLM writer: peak above baseline / the largest tensor group it reads at once.
    stream_group_factor: float


class CudaMemory(Record):
    status: str  # "inferred": nothing here was measured on a GPU
    gpu_factor: float  # GPU bytes per weight byte (in the target dtype), per device share
    gpu_activation_gib: float  # calibration activations, KV and workspace per device
    host_factor: float  # host RAM per target-dtype weight byte (the export gathers weights on the host)


class RatesFile(Record):
    source: RateSource
    cpu: CpuRates
    host_memory: HostMemory
    cuda: CudaMemory


def rates() -> RatesFile:
    return bundled_table("quantize_rates.toml", RatesFile)


@dataclass(frozen=True)
class BuildDevice:
    device: Literal["cpu", "cuda"]
    gpus: int
    detected: str  # how it was found, one line


def calibration_load_dtype(device: str, export_dtype: str, *, runs_forward: bool) -> str:
    """The dtype a checkpoint step loads the model in: the target dtype on GPUs; float32 on CPU when
    it runs a forward pass (fp16/bf16 matmul is ~8x slower there, see quantize/placement.py)."""
    return CPU_CALIBRATION_DTYPE if device == "cpu" and runs_forward else export_dtype


def detect_build_device(*, env: dict[str, str] | None = None, proc_dir: Path = NVIDIA_PROC,
                        torch_version: str | None = None, use_nvidia_smi: bool = True) -> BuildDevice:
    """CUDA when this host has NVIDIA GPUs that torch could use; CPU otherwise (never imports torch).
    The keyword arguments replace what is read from the host (for tests)."""
    env = dict(os.environ) if env is None else env
    version = torch_version if torch_version is not None else _torch_version()
    if version is None:
        return BuildDevice("cpu", 0, "torch is not installed")
    if "+cpu" in version:
        return BuildDevice("cpu", 0, f"torch {version} is a CPU-only build")
    gpus, how = _driver_gpus(proc_dir, use_nvidia_smi)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if gpus and visible is not None:
        listed = [part for part in visible.split(",") if part.strip()]
        if not listed or listed[0].strip() == "-1":
            return BuildDevice("cpu", 0, f"{how}: {gpus}, hidden by CUDA_VISIBLE_DEVICES={visible!r}")
        gpus = min(gpus, len(listed))
        how += f", CUDA_VISIBLE_DEVICES={visible}"
    if gpus:
        return BuildDevice("cuda", gpus, f"{how}: {gpus}")
    return BuildDevice("cpu", 0, how)


@functools.cache  # a metadata lookup scans site-packages (~5 ms); the installed torch does not change
def _torch_version() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _driver_gpus(proc_dir: Path, use_nvidia_smi: bool) -> tuple[int, str]:
    if proc_dir.is_dir():
        return sum(1 for entry in proc_dir.iterdir() if entry.is_dir()), str(proc_dir)
    smi = shutil.which("nvidia-smi") if use_nvidia_smi else None
    if smi is None:
        return 0, "no NVIDIA driver"
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0, "nvidia-smi did not answer"
    return sum(1 for line in listing.splitlines() if line.startswith("GPU ")), "nvidia-smi -L"


@dataclass(frozen=True)
class CheckpointWork:
    """The convert/quantize step a target runs on this host, as the estimate needs it (the target
    decides whether there is one and what it is; the rates are keyed by ``family``)."""

    family: str  # the target whose rows of quantize_rates.toml apply (convert_<family>, <family>.<method>)
    dtype: str  # the export dtype
    # Written tensor by tensor without loading the model (the streamed TensorRT-LLM writer).
    streamed: bool = False
    # Why the step runs on the CPU whatever this host offers (None: it uses a GPU when there is one).
    cpu_only: str | None = None


def estimate_checkpoint_step(work: CheckpointWork | None, quantization: QuantizationPlan, spec: ModelSpec,
                             calib_file: Path | None,
                             device: BuildDevice | None = None) -> CheckpointStepEstimate | None:
    """The estimate for the plan's checkpoint step, or None when this host runs none."""
    if work is None:
        return None
    where = device or detect_build_device()
    if work.cpu_only is not None:
        where = BuildDevice("cpu", 0, work.cpu_only)
    table = rates()
    method = quantization.method
    runs_forward = method is not None and quantization.calibration is not None
    load_dtype = calibration_load_dtype(where.device, work.dtype, runs_forward=runs_forward)
    params = spec.num_parameters
    tokens = _calibration_tokens(quantization, calib_file, table.cpu.chars_per_token) if runs_forward else 0
    basis = [f"rates: quantize_rates.toml, measured {table.source.measured} on {table.source.host} "
             f"({table.source.libraries})"]

    if work.streamed and method is None:
        return _stream_estimate(table, spec, work.dtype, basis)

    seconds: float | None = None
    if where.device == "cpu":
        kind = cast(StepKind, "quantize" if method else f"convert_{work.family}")
        step = table.cpu.steps[kind]
        seconds = step.fixed_seconds + step.seconds_per_param * params
        basis.append(f"time: {step.fixed_seconds:g} s + {step.seconds_per_param:.3g} s per parameter ({kind}), "
                     f"measured at load average {table.cpu.load_average}")
        if runs_forward:
            rate = table.cpu.calibration.get(method or "")
            if rate is None:
                seconds = None
                basis.append(f"time: no measured CPU calibration rate for {method}")
            else:
                seconds += tokens * (rate.per_token + rate.per_token_param * params)
                basis.append(f"calibration: {tokens} tokens (estimated) x ({rate.per_token:.3g} s + "
                             f"{rate.per_token_param:.3g} s per parameter), fp32, fitted on {rate.sizes} size(s)")
    else:
        basis.append("time: unknown, no calibration rate has been measured on CUDA")

    gpu_bytes: int | None = None
    if where.device == "cpu":
        key = f"{work.family}.{method or 'none'}"
        factor = table.host_memory.factor.get(key)
        if factor is None:
            factor = max(table.host_memory.factor.values())
            basis.append(f"host RAM: {key} not measured; the largest measured factor, {factor:g}")
        else:
            basis.append(f"host RAM: {table.host_memory.baseline_gib:g} GiB + {factor:g} x weights in {load_dtype} ({key})")
        host = table.host_memory.baseline_gib * GIB + factor * params * _DTYPE_BYTES[load_dtype]
    else:
        weights = params * _DTYPE_BYTES[load_dtype]
        host = table.host_memory.baseline_gib * GIB + table.cuda.host_factor * weights
        gpu_bytes = int(table.cuda.gpu_factor * weights / where.gpus + table.cuda.gpu_activation_gib * GIB)
        basis.append(f"GPU and host memory on CUDA: {table.cuda.status}")
    return CheckpointStepEstimate(
        device=where.device, gpus=where.gpus, detected=where.detected, load_dtype=load_dtype, method=method,
        calibration_tokens=tokens, seconds=round(seconds, 1) if seconds is not None else None,
        host_ram_bytes=int(host), gpu_bytes_per_device=gpu_bytes, basis=basis,
    )


def _stream_estimate(table: RatesFile, spec: ModelSpec, dtype: str, basis: list[str]) -> CheckpointStepEstimate:
    """The streamed writer (quantize/trtllm_stream.py) holds the tensors of one group at a time (the
    embedding, the q/k/v of a layer, one MLP matrix) with their rank pieces, on the CPU."""
    step = table.cpu.steps["stream_trtllm"]
    seconds = step.fixed_seconds + step.seconds_per_param * spec.num_parameters
    basis.append(f"time: {step.fixed_seconds:g} s + {step.seconds_per_param:.3g} s per parameter (stream_trtllm), "
                 f"measured at load average {table.cpu.load_average}")
    source_bytes = _DTYPE_BYTES.get(spec.torch_dtype or "float16", 2)
    rows = max(spec.vocab_size, spec.intermediate_size or 0,
               spec.num_attention_heads * spec.head_dim + 2 * spec.num_kv_heads * spec.head_dim)
    group = rows * spec.hidden_size * source_bytes
    factor = table.host_memory.stream_group_factor
    host = table.host_memory.baseline_gib * GIB + factor * group
    basis.append(f"host RAM: {table.host_memory.baseline_gib:g} GiB + {factor:g} x the largest tensor group "
                 f"({group / GIB:.2f} GiB), streamed tensor by tensor")
    return CheckpointStepEstimate(
        device="cpu", gpus=0, detected="the streamed TensorRT-LLM writer runs on the CPU", load_dtype=dtype,
        method=None, calibration_tokens=0, seconds=round(seconds, 1), host_ram_bytes=int(host),
        gpu_bytes_per_device=None, basis=basis,
    )


def _calibration_tokens(quantization: QuantizationPlan, calib_file: Path | None, chars_per_token: float) -> int:
    """Tokens of the planned samples: each sample's length / characters per token, at most max_seq_len."""
    plan = quantization.calibration
    if plan is None:
        return 0
    try:
        text = calibration_text.load_builtin(plan.dataset.removeprefix("builtin:")) \
            if plan.dataset.startswith("builtin:") else calibration_text.load(calib_file)
    except LmiBuildError:
        return 0  # reported by the planner's calibration checks
    samples = calibration_text.select(text.samples, plan.size, plan.seed)
    return sum(min(plan.max_seq_len, math.ceil(len(sample) / chars_per_token)) for sample in samples)


def host_memory_bytes() -> int | None:
    """This host's physical memory (None where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_host_ram(step: CheckpointStepEstimate, work: CheckpointWork, quantization: QuantizationPlan, spec: ModelSpec,
                   calib_file: Path | None, findings: Findings, *, host_bytes: int | None = None) -> None:
    """Warn when the checkpoint step's peak host RAM is more than this host has: the build would run out of
    memory here. The plan stays valid: it says what to build, not where, and a saved plan builds on any host
    (``--save``, then ``<target> --plan`` there), so the warning names the RAM a host needs, and what a GPU host
    (the weights loaded in the export dtype, not float32) would need."""
    total = host_memory_bytes() if host_bytes is None else host_bytes
    if total is None or step.host_ram_bytes <= total:
        return
    what = "quantize" if step.method else "convert"
    hint = (f"build this plan on a host with at least {math.ceil(step.host_ram_bytes / GIB)} GiB of RAM "
            "(plan it with --save plan.json, then run the build with --plan plan.json there)")
    if step.device == "cpu" and work.cpu_only is None:
        on_gpu = estimate_checkpoint_step(work, quantization, spec, calib_file, BuildDevice("cuda", 1, "a GPU host"))
        if on_gpu is not None and on_gpu.host_ram_bytes < step.host_ram_bytes:
            hint += (f", e.g. a GPU host, where the weights load in {on_gpu.load_dtype} and the step needs about "
                     f"{on_gpu.host_ram_bytes / GIB:.1f} GiB")
    findings.warn("host_ram", f"the {what} step needs about {step.host_ram_bytes / GIB:.1f} GiB of host RAM at its "
                  f"peak ({step.device}, weights in {step.load_dtype}); this host has {total / GIB:.1f} GiB: "
                  "the build would run out of memory here", hint=hint)
