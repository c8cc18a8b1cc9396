"""Environment variable translation, as the LMI container does it."""

from __future__ import annotations

import pytest

from lmi_build.options.env import env_key, translate_env


def _values(env: dict[str, str], target: str = "trtllm") -> dict[str, tuple[str, str]]:
    result = translate_env(env, target=target)
    assert result.errors == []
    return {key: (item.value, item.origin) for key, item in result.values.items()}


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("OPTION_TENSOR_PARALLEL_DEGREE", "option.tensor_parallel_degree"),
        ("OPTION_MAX_ROLLING_BATCH_SIZE", "option.max_rolling_batch_size"),
        ("OPTION_SOMETHING_NEW", "option.something_new"),  # unknown keys translate too
        ("OPTION_ENTRYPOINT", "option.entryPoint"),
        ("OPTION_entryPoint", "option.entryPoint"),
        ("OPTION_camelCase", "option.camelCase"),  # not all upper case: kept as written
        ("OPTION_ENGINE", "engine"),
        ("SERVING_ENGINE", "engine"),
        ("SERVING_JOB_QUEUE_SIZE", "job_queue_size"),
        ("SERVING_BATCH_SIZE", "batch_size"),
        ("SERVING_MINWORKERS", "minWorkers"),
        ("SERVING_OPTS", None),
        ("SERVING_LOAD_MODELS", None),
        ("SERVING_FAIL_FAST", None),
        ("OPTION_", None),
        ("PATH", None),
    ],
)
def test_env_key(name: str, key: str | None) -> None:
    assert env_key(name) == key


def test_lmi_variables() -> None:
    assert _values(
        {
            "OPTION_ROLLING_BATCH": "trtllm",
            "HF_MODEL_ID": "org/model",
            "HF_REVISION": "abc123",
            "HF_TASK": "text-generation",
            "TENSOR_PARALLEL_DEGREE": "max",
            "PIPELINE_PARALLEL_DEGREE": "2",
            "DJL_ENTRY_POINT": "djl_python.tensorrt_llm",
            "PATH": "/usr/bin",
        }
    ) == {
        "option.rolling_batch": ("trtllm", "OPTION_ROLLING_BATCH"),
        "option.model_id": ("org/model", "HF_MODEL_ID"),
        "option.revision": ("abc123", "HF_REVISION"),
        "option.task": ("text-generation", "HF_TASK"),
        "option.tensor_parallel_degree": ("max", "TENSOR_PARALLEL_DEGREE"),
        "option.pipeline_parallel_degree": ("2", "PIPELINE_PARALLEL_DEGREE"),
        "option.entryPoint": ("djl_python.tensorrt_llm", "DJL_ENTRY_POINT"),
    }


@pytest.mark.parametrize(
    ("fallback", "option_var", "key"),
    [
        ("HF_MODEL_ID", "OPTION_MODEL_ID", "option.model_id"),
        ("TENSOR_PARALLEL_DEGREE", "OPTION_TENSOR_PARALLEL_DEGREE", "option.tensor_parallel_degree"),
        ("PIPELINE_PARALLEL_DEGREE", "OPTION_PIPELINE_PARALLEL_DEGREE", "option.pipeline_parallel_degree"),
        ("DJL_ENTRY_POINT", "OPTION_ENTRYPOINT", "option.entryPoint"),
    ],
)
def test_option_variable_beats_its_fallback(fallback: str, option_var: str, key: str) -> None:
    result = translate_env({fallback: "2", option_var: "4"}, target="trtllm")
    assert (result.values[key].value, result.values[key].origin) == ("4", option_var)
    (warning,) = result.warnings
    assert warning.code == "env_conflict" and fallback in warning.message and option_var in warning.message


@pytest.mark.parametrize(
    ("compat", "value", "key", "expected", "target"),
    [
        ("HF_MODEL_QUANTIZE", "awq", "option.quantize", "awq", "trtllm"),
        ("HF_MODEL_TRUST_REMOTE_CODE", "true", "option.trust_remote_code", "true", "trtllm"),
        ("SM_NUM_GPUS", "8", "option.tensor_parallel_degree", "8", "trtllm"),
        ("MAX_CONCURRENT_REQUESTS", "64", "job_queue_size", "64", "trtllm"),
        ("MAX_BATCH_SIZE", "16", "option.max_rolling_batch_size", "16", "hf"),
        ("MAX_BATCH_PREFILL_TOKENS", "4096", "option.max_rolling_batch_prefill_tokens", "4096", "hf"),
        ("CUDA_MEMORY_FRACTION", "0.8", "option.kv_cache_free_gpu_mem_fraction", "0.8", "trtllm"),
        ("CUDA_MEMORY_FRACTION", "0.8", "option.gpu_memory_utilization", "0.8", "hf"),
        ("ENABLE_CUDA_GRAPHS", "true", "option.enforce_eager", "false", "hf"),
        ("ENABLE_CUDA_GRAPHS", "False", "option.enforce_eager", "true", "hf"),
    ],
)
def test_tgi_and_sagemaker_translations(compat: str, value: str, key: str, expected: str, target: str) -> None:
    assert _values({compat: value}, target) == {key: (expected, compat)}


@pytest.mark.parametrize(
    ("compat", "lmi_var", "key"),
    [
        ("HF_MODEL_QUANTIZE", "OPTION_QUANTIZE", "option.quantize"),
        ("HF_MODEL_TRUST_REMOTE_CODE", "OPTION_TRUST_REMOTE_CODE", "option.trust_remote_code"),
        ("SM_NUM_GPUS", "TENSOR_PARALLEL_DEGREE", "option.tensor_parallel_degree"),
        ("MAX_CONCURRENT_REQUESTS", "SERVING_JOB_QUEUE_SIZE", "job_queue_size"),
        ("MAX_BATCH_SIZE", "OPTION_MAX_ROLLING_BATCH_SIZE", "option.max_rolling_batch_size"),
        ("MAX_BATCH_PREFILL_TOKENS", "OPTION_MAX_ROLLING_BATCH_PREFILL_TOKENS", "option.max_rolling_batch_prefill_tokens"),
        ("CUDA_MEMORY_FRACTION", "OPTION_KV_CACHE_FREE_GPU_MEM_FRACTION", "option.kv_cache_free_gpu_mem_fraction"),
        ("ENABLE_CUDA_GRAPHS", "OPTION_ENFORCE_EAGER", "option.enforce_eager"),
    ],
)
def test_translations_apply_only_when_the_lmi_variable_is_unset(compat: str, lmi_var: str, key: str) -> None:
    values = _values({compat: "true", lmi_var: "7"})
    assert values[key] == ("7", lmi_var)
    assert all(origin != compat for _, origin in values.values())


def test_sm_num_gpus_loses_to_option_tensor_parallel_degree() -> None:
    assert _values({"SM_NUM_GPUS": "8", "OPTION_TENSOR_PARALLEL_DEGREE": "2"}) == {
        "option.tensor_parallel_degree": ("2", "OPTION_TENSOR_PARALLEL_DEGREE")
    }


def test_invalid_cuda_graphs_flag_is_an_error() -> None:
    result = translate_env({"ENABLE_CUDA_GRAPHS": "maybe"}, target="hf")
    (error,) = result.errors
    assert error.code == "invalid_value" and error.message == "ENABLE_CUDA_GRAPHS=maybe: expected true or false"
    assert result.values == {}


def test_empty_variables_count_as_unset() -> None:
    assert _values({"OPTION_QUANTIZE": "", "HF_MODEL_QUANTIZE": "awq"}) == {"option.quantize": ("awq", "HF_MODEL_QUANTIZE")}


def test_credentials_never_become_options() -> None:
    token = "hf_" + "x" * 34
    env = {
        "HF_TOKEN": token,
        "HUGGING_FACE_HUB_TOKEN": token,
        "AWS_ACCESS_KEY_ID": "AKIAABCDEFGHIJKLMNOP",
        "AWS_SECRET_ACCESS_KEY": "secret" * 6,
        "AWS_SESSION_TOKEN": "session" * 6,
        "OPTION_DTYPE": "bf16",
    }
    result = translate_env(env, target="trtllm")
    assert {key: item.value for key, item in result.values.items()} == {"option.dtype": "bf16"}
    shown = repr(result)
    assert token not in shown and "secret" * 6 not in shown and "AKIAABCDEFGHIJKLMNOP" not in shown
