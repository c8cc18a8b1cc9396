"""The Triton ``config.pbtxt`` of the toolkit layouts (LMI 0.26-0.30): the tensorrtllm_backend
``inflight_batcher_llm/tensorrt_llm`` model config of the profile's backend release, with its
parameters filled from the plan.

Triton refuses a request tensor the config does not declare, so every input and output the
backend template of that release declares is written (DJL's runtime sends ``streaming``,
``temperature``, ``runtime_top_k``, ``random_seed``, ... and reads ``cum_log_probs``). The tensors
come from ``data/triton_config.toml``, extracted per tag with its source lines.
"""

from functools import lru_cache
from pathlib import Path

from lmi_build.core.errors import StepError
from lmi_build.core.tables import load_table
from lmi_build.core.types import Record
from lmi_build.planning.context import read_text
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.options import TrtllmOptions, written_or
from lmi_build.targets.trtllm.profiles import get_profile

TRITON_FILE = Path(__file__).with_name("data") / "triton_config.toml"
# LMI's documented default; the 0.7.1 backend would turn it on when the parameter is absent.
ENABLE_TRT_OVERLAP_DEFAULT = "false"


class Tensor(Record):
    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False
    reshape: tuple[int, ...] | None = None
    allow_ragged_batch: bool = False


class BackendConfig(Record):
    """One backend release's model config facts."""

    source: str
    parameters: tuple[str, ...]
    input: tuple[Tensor, ...]
    output: tuple[Tensor, ...]


class TritonFile(Record):
    backend: dict[str, BackendConfig]


@lru_cache(maxsize=1)
def _triton_file() -> TritonFile:
    return load_table(TRITON_FILE, TritonFile)


def backend_config(version: str) -> BackendConfig:
    """The model config facts of tensorrtllm_backend ``v<version>`` (the profile's TensorRT-LLM version)."""
    found = _triton_file().backend.get(version)
    if found is None:
        raise StepError(f"no tensorrtllm_backend model config known for TensorRT-LLM {version}",
                        hint=f"add it to {TRITON_FILE.name} (known: {', '.join(sorted(_triton_file().backend))})")
    return found


def _parameters(plan: BuildPlan, build: TrtllmBuild, gpt_model_path: str, known: tuple[str, ...]) -> dict[str, str]:
    given = read_text(plan.options, TrtllmOptions)
    wanted = {
        "max_beam_width": str(build.max_beam_width),
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": gpt_model_path,
        "batch_scheduler_policy": written_or(given.batch_scheduler_policy, "max_utilization"),
        # The profile's default when unset: the share the plan sized the KV cache with (planning/memory.py).
        "kv_cache_free_gpu_mem_fraction": written_or(given.kv_cache_free_gpu_mem_fraction,
                                              str(get_profile(plan.toolchain.profile).kv_cache.free_fraction)),
        "enable_kv_cache_reuse": "true" if build.enable_kv_cache_reuse else "false",
        "exclude_input_in_output": "true",
        "enable_trt_overlap": written_or(given.enable_trt_overlap, ENABLE_TRT_OVERLAP_DEFAULT),
    }
    optional = {"max_tokens_in_paged_kv_cache": given.max_tokens_in_paged_kv_cache,
                "max_num_sequences": given.max_num_sequences,
                "max_attention_window_size": given.max_attention_window_size,
                "enable_chunked_context": given.enable_chunked_context, "normalize_log_probs": given.normalize_log_probs}
    wanted.update({key: value for key, value in optional.items() if value is not None})  # only where set
    # Only what this release's template has: an unknown parameter is at best ignored.
    return {key: value for key, value in wanted.items() if key in known}



def _shape(values: tuple[int, ...]) -> str:
    return f"[ {', '.join(map(str, values))} ]" if values else "[ ]"


def _tensor(tensor: Tensor) -> str:
    lines = [f'    name: "{tensor.name}"', f"    data_type: {tensor.data_type}", f"    dims: {_shape(tensor.dims)}"]
    if tensor.reshape is not None:
        lines.append(f"    reshape: {{ shape: {_shape(tensor.reshape)} }}")
    if tensor.optional:
        lines.append("    optional: true")
    if tensor.allow_ragged_batch:
        lines.append("    allow_ragged_batch: true")
    return "  {\n" + "\n".join(lines) + "\n  }"


def config_pbtxt(plan: BuildPlan, gpt_model_path: str, backend_version: str) -> str:
    build = plan.knobs(TrtllmBuild)
    facts = backend_config(backend_version)
    lines = [f"# tensorrtllm_backend v{backend_version} inflight_batcher_llm/tensorrt_llm model config, written by "
             "lmi-build", 'name: "tensorrt_llm"', 'backend: "tensorrtllm"', f"max_batch_size: {build.max_batch_size}",
             "", "model_transaction_policy {", "  decoupled: true", "}", "",
             "dynamic_batching {", f"    preferred_batch_size: [ {build.max_batch_size} ]",
             "    max_queue_delay_microseconds: 0", "}", ""]
    for section, tensors in (("input", facts.input), ("output", facts.output)):
        lines += [f"{section} [", ",\n".join(_tensor(t) for t in tensors), "]"]
    lines += ["instance_group [", "  {", "    count: 1", "    kind: KIND_CPU", "  }", "]"]
    for key, value in _parameters(plan, build, gpt_model_path, facts.parameters).items():
        lines.append(f'parameters: {{\n  key: "{key}"\n  value: {{\n    string_value: "{value}"\n  }}\n}}')
    return "\n".join(lines) + "\n"
