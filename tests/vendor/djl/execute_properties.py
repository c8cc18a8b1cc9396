"""Execute DJL Serving's own Python properties managers (issue 31, Deliver 1) on a corpus of
serving.properties, and record each release's verdict (accepted, or the exception text) and the values
it resolves, as facts with branch and commit: tests/vendor/djl/verdicts.json.

    .venv/bin/python tests/vendor/djl/execute_properties.py /path/to/djl-serving.git > tests/vendor/djl/verdicts.json

The corpus is the serving.properties lmi-build writes (``lmi_build.artifact.packager.written_properties``
of a real plan) for every fixture config.json (tests/fixtures/hf-configs) x profile x option set below,
for the hf and neuronx targets: made in this process, which imports lmi-build. Each release branch is
then executed in a fresh interpreter (``--execute``): the branch's engines/python/setup is extracted
with ``git archive`` to a temporary directory, put first on sys.path, and these modules, only, are
replaced by call recorders (every attribute a recorder, every call recorded and answered by a
recorder): torch, transformers_neuronx, tensorrt_llm, vllm, lmi_dist, optimum, neuronx_distributed.
What the recorders cannot stand in for, said here:

- ``vllm.EngineArgs``: DJL reads three class defaults (quantization, max_num_batched_tokens,
  cpu_offload_gb: None/None/0, vLLM's own defaults) and ``EngineArgs.__annotations__`` membership,
  which the recorder answers "yes" for every key (vLLM's field list is not recorded; a key that is not
  a vLLM field would pass through to vLLM here).
- The Java front-end (``LmiConfigRecommender``) runs before the Python and is not executed: the keys
  it always fills are filled here as it does (and, in the GPU images, its rolling batch and lmi-dist's MPI mode) (0.35.0-dlc LmiConfigRecommender.java:88-136,
  0.30.0-dlc:84-140): tensor_parallel_degree (the written one), pipeline_parallel_degree 1,
  max_rolling_batch_size 32 (256 for rolling_batch vllm, trtllm, and lmi-dist before 0.33); its MPI mode
  is not applied, nor its tensor_parallel_degree "max" (the instance's device count) where none is written.
- Only the properties managers run (VllmRbProperties, LmiDistRbProperties, TransformerNeuronXProperties,
  TensorRtLlmProperties, and each one's ``get_engine_args`` / ``get_llm_kwargs`` where the release has it),
  not the handlers' model loading. For TensorRT-LLM the recorded ``KvCacheConfig(...)`` call names the
  keyword arguments the release derived from the properties (e.g. free_gpu_memory_fraction), not values.

Each branch's Python is run with the pydantic 2 of this interpreter (0.28.0-dlc on: ``field_validator``;
0.27.0-dlc: pydantic 2's ``pydantic.v1``), except ``PYDANTIC_1`` (0.26.0-dlc imports ``validator`` and
``root_validator`` from pydantic itself): those run with the interpreter of a pydantic<2 virtualenv
outside the repository, which needs only pydantic and numpy (djl_python/np_util.py imports it):

    python3 -m venv /tmp/venv-pyd1 && /tmp/venv-pyd1/bin/pip install 'pydantic<2' numpy
    .venv/bin/python tests/vendor/djl/execute_properties.py /path/to/djl-serving.git \
        --pydantic1-python /tmp/venv-pyd1/bin/python > tests/vendor/djl/verdicts.json

Some branches only, the others kept as recorded (the issue 39 LMI-Dist / 0.32 vLLM branches, on SMALL_CORPUS):

    .venv/bin/python tests/vendor/djl/execute_properties.py /path/to/djl-serving.git --only 0.27.0-dlc#lmi-dist \
        0.28.0-dlc#lmi-dist 0.30.0-dlc#lmi-dist 0.31.0-dlc#lmi-dist 0.32.0-dlc#lmi-dist 0.32.0-dlc#vllm \
        --keep tests/vendor/djl/verdicts.json > /tmp/verdicts.json

(recorded with pydantic 1.10.27 there, 2.14.4 here). LMI 0.26's LMI-Dist 8 (pydantic 1: PYDANTIC_1), the others kept:

    .venv/bin/python tests/vendor/djl/execute_properties.py /path/to/djl-serving.git --only 0.26.0-dlc#lmi-dist \
        --pydantic1-python /tmp/venv-pyd1/bin/python --keep tests/vendor/djl/verdicts.json > /tmp/verdicts.json

The issue 39 vLLM images from 0.33 and the TensorRT-LLM images
not executed before, on SMALL_CORPUS (the TensorRT-LLM ones with their own option sets: small_option_sets):

    .venv/bin/python tests/vendor/djl/execute_properties.py /path/to/djl-serving.git --only 0.33.0-dlc#vllm \
        0.34.0-dlc#vllm 0.36.0-lmi18-dlc#vllm 0.36.0-lmi19-dlc#vllm 0.36.0-lmi20-dlc#vllm 0.36.0-lmi21-dlc#vllm \
        0.36.0-lmi23-dlc#vllm 0.36.0-lmi24-dlc#vllm 0.36.0-lmi25-dlc#vllm 0.36.0-lmi26-dlc#vllm 0.36.0-lmi27-dlc#vllm \
        0.36.0-lmi22-dlc#vllm 0.31.0-dlc#trtllm 0.32.0-dlc#trtllm 0.34.0-dlc#trtllm 0.35.0-dlc#trtllm \
        0.35.1-dlc#trtllm v0.36.0#trtllm master#trtllm --keep tests/vendor/djl/verdicts.json > /tmp/verdicts.json

A key's branch may be any ref (a tag: v0.36.0); the commit recorded is the one it names.

Nothing here copies DJL code into the repository: the facts are.
"""

from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, ClassVar

REPO_ROOT = Path(__file__).resolve().parents[3]
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "hf-configs"
RECORDED = ("torch", "transformers_neuronx", "tensorrt_llm", "vllm", "lmi_dist", "optimum", "neuronx_distributed")

# branch -> (lmi-build profile, target, the DJL properties class the handler builds, module, the rolling
# batch the image's recommender picks when serving.properties has none: its SERVING_FEATURES engine,
# LmiConfigRecommender setRollingBatch, 0.29.0-dlc:100-115, 0.35.0-dlc:48-75; "" where lmi-build writes it)
BRANCHES: dict[str, tuple[str, str, str, str, str]] = {
    "0.28.0-dlc": ("lmi-0.28.0-neuronx-sdk2.18.2", "neuronx", "TransformerNeuronXProperties", "tnx_properties", ""),
    "0.29.0-dlc": ("lmi-0.29.0-neuronx-sdk2.19.1", "neuronx", "TransformerNeuronXProperties", "tnx_properties", ""),
    "0.30.0-dlc": ("lmi-0.30.0-neuronx-sdk2.20.1", "neuronx", "TransformerNeuronXProperties", "tnx_properties", ""),
    "0.29.0-dlc#lmi-dist": ("lmi-0.29.0-lmi-dist-11.0.0", "hf", "LmiDistRbProperties", "lmi_dist_rb_properties",
                            "lmi-dist"),
    "0.35.0-dlc": ("lmi-0.35.0-vllm-0.11.1", "hf", "VllmRbProperties", "vllm_rb_properties", "vllm"),
    "0.36.0-lmi27-dlc": ("lmi-0.36.0-vllm-0.17.0", "hf", "VllmRbProperties", "vllm_rb_properties", "vllm"),
    # the later Neuron releases lmi-build has a profile for (0.31.0-dlc has none: no Neuron or hf profile)
    "0.32.0-dlc": ("lmi-0.32.0-neuronx-sdk2.21.1", "neuronx", "TransformerNeuronXProperties", "tnx_properties", ""),
    "0.33.0-dlc": ("lmi-0.33.0-neuronx-sdk2.21.1", "neuronx", "TransformerNeuronXProperties", "tnx_properties", ""),
    "0.34.0-dlc": ("lmi-0.34.0-neuronx-sdk2.21.1", "neuronx", "TransformerNeuronXProperties", "tnx_properties", ""),
    # TensorRT-LLM (issue 31): the handler builds TensorRtLlmProperties from the properties (0.33.0-dlc
    # lmi_trtllm/trtllm_async_service.py:94); the image's recommender picks rolling batch trtllm.
    "0.30.0-dlc#trtllm": ("lmi-0.30.0-trtllm-0.12.0", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
    "0.33.0-dlc#trtllm": ("lmi-0.33.0-trtllm-0.21.0", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
    # the older releases (0.26-0.28: tensorrt_llm.py initialize builds TensorRtLlmProperties, 0.26.0-dlc:31,
    # 0.28.0-dlc:36; 0.26's Java sets rolling_batch trtllm itself, LmiUtils.java@0.26.0-dlc:107-109) and 0.29,
    # whose trt_properties.py is 0.30.0-dlc's but whose profile writes other properties; then the Neuron
    # releases before 0.28 (execute_neuron_handler.py runs 0.27's handler too; 0.26: properties only)
    "0.26.0-dlc#trtllm": ("lmi-0.26.0-trtllm-0.7.1", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
    "0.27.0-dlc#trtllm": ("lmi-0.27.0-trtllm-0.8.0", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
    "0.28.0-dlc#trtllm": ("lmi-0.28.0-trtllm-0.9.0", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
    "0.29.0-dlc#trtllm": ("lmi-0.29.0-trtllm-0.11.0", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
    "0.26.0-dlc": ("lmi-0.26.0-neuronx-sdk2.16.0", "neuronx", "TransformerNeuronXProperties", "tnx_properties", ""),
    "0.27.0-dlc": ("lmi-0.27.0-neuronx-sdk2.18.0", "neuronx", "TransformerNeuronXProperties", "tnx_properties", ""),
    # issue 39: the LMI-Dist releases 0.26-0.32 and 0.32's vllm rolling batch, on SMALL_CORPUS (0.26: no rolling
    # batch unless written; 0.27-0.28: the DeepSpeed / lmi image picks lmi-dist for listed model types; lmi-build
    # writes option.rolling_batch itself)
    "0.26.0-dlc#lmi-dist": ("lmi-0.26.0-lmi-dist-8.0.0", "hf", "LmiDistRbProperties", "lmi_dist_rb_properties",
                            "lmi-dist"),
    "0.27.0-dlc#lmi-dist": ("lmi-0.27.0-lmi-dist-9.0.0", "hf", "LmiDistRbProperties", "lmi_dist_rb_properties",
                            "lmi-dist"),
    "0.28.0-dlc#lmi-dist": ("lmi-0.28.0-lmi-dist-10.0.0", "hf", "LmiDistRbProperties", "lmi_dist_rb_properties",
                            "lmi-dist"),
    "0.30.0-dlc#lmi-dist": ("lmi-0.30.0-lmi-dist-12.0.0", "hf", "LmiDistRbProperties", "lmi_dist_rb_properties",
                            "lmi-dist"),
    "0.31.0-dlc#lmi-dist": ("lmi-0.31.0-lmi-dist-13.0.0", "hf", "LmiDistRbProperties", "lmi_dist_rb_properties",
                            "lmi-dist"),
    "0.32.0-dlc#lmi-dist": ("lmi-0.32.0-lmi-dist-13.0.0", "hf", "LmiDistRbProperties", "lmi_dist_rb_properties",
                            "lmi-dist"),
    "0.32.0-dlc#vllm": ("lmi-0.32.0-vllm-0.7.3", "hf", "VllmRbProperties", "vllm_rb_properties", "lmi-dist"),
    # issue 39: every vLLM image from 0.33 (the lmi image's engine is vllm: lmi-dist removed in 0.33) at its own
    # branch, on SMALL_CORPUS; lmi-0.36.0-vllm-0.17.0 is lmi22's image (v0.36.0 is 0.36.0-lmi22-dlc's commit),
    # executed here at its own branch besides the full corpus recorded at 0.36.0-lmi27-dlc above
    "0.33.0-dlc#vllm": ("lmi-0.33.0-vllm-0.8.4", "hf", "VllmRbProperties", "vllm_rb_properties", "vllm"),
    "0.34.0-dlc#vllm": ("lmi-0.34.0-vllm-0.10.2", "hf", "VllmRbProperties", "vllm_rb_properties", "vllm"),
    **{f"0.36.0-lmi{release}-dlc#vllm": (f"lmi-0.36.0-lmi{release}-vllm-{vllm}", "hf", "VllmRbProperties",
                                         "vllm_rb_properties", "vllm")
       for release, vllm in (("18", "0.12.0"), ("19", "0.14.0"), ("20", "0.15.0"), ("21", "0.16.0"), ("23", "0.18.0"),
                             ("24", "0.19.0"), ("25", "0.20.1"), ("26", "0.22.0"), ("27", "0.23.0"))},
    "0.36.0-lmi22-dlc#vllm": ("lmi-0.36.0-vllm-0.17.0", "hf", "VllmRbProperties", "vllm_rb_properties", "vllm"),
    # issue 39: the TensorRT-LLM images whose properties manager was not executed yet (0.31/0.32/0.34: TensorRT-LLM
    # 0.12.0, 0.30's trt_properties.py; 0.35/0.35.1/0.36: 1.0.0, the LLM API service), on SMALL_CORPUS. 0.36.0 has
    # no -dlc branch for this image: the release tag (v0.36.0, the commit 0.36.0-lmi22-dlc points at)
    "0.31.0-dlc#trtllm": ("lmi-0.31.0-trtllm-0.12.0", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
    "0.32.0-dlc#trtllm": ("lmi-0.32.0-trtllm-0.12.0", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
    "0.34.0-dlc#trtllm": ("lmi-0.34.0-trtllm-0.12.0", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
    "0.35.0-dlc#trtllm": ("lmi-0.35.0-trtllm-1.0.0", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
    "0.35.1-dlc#trtllm": ("lmi-0.35.1-trtllm-1.0.0", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
    "v0.36.0#trtllm": ("lmi-0.36.0-trtllm-1.0.0", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
    # the moving nightly tag: master, at the commit recorded (its profile's facts were read at master d21927c4)
    "master#trtllm": ("djl-nightly-trtllm-1.0.0", "trtllm", "TensorRtLlmProperties", "trt_properties", "trtllm"),
}
# The branches executed on a small corpus (a full one per branch costs the comparison test a plan per entry):
# two fixtures (Llama-2-7B, and Llama-3.2-3B's llama3 RoPE) x the option sets that reach the start-up rules
# (pp, a vLLM spelling, max_model_len, a quantization)
SMALL_CORPUS = ("meta-llama--Llama-2-7b-hf", "meta-llama--Llama-3.2-3B-Instruct")
SMALL_OPTION_SETS: list[dict[str, Any]] = [{}, {"pp": 2}, {"option": ("option.max_num_seqs=64",)},
                                           {"option": ("option.max_model_len=8192",)}, {"quantize": "awq"}]
# the branches on SMALL_CORPUS: the issue 39 ones (every branch recorded before issue 39 has the full corpus)
SMALL_TRTLLM = ("0.31.0-dlc#trtllm", "0.32.0-dlc#trtllm", "0.34.0-dlc#trtllm", "0.35.0-dlc#trtllm", "0.35.1-dlc#trtllm",
                "v0.36.0#trtllm", "master#trtllm")
SMALL = tuple(key for key in BRANCHES if key in SMALL_TRTLLM
              or (key.endswith(("#lmi-dist", "#vllm")) and not key.startswith("0.29.")))
# 0.27's recommender sets option.mpi_mode only with the engine it writes itself (setEngine,
# LmiConfigRecommender.java@0.27.0-dlc:95-114), 0.26's front-end only with engine DeepSpeed or MPI
# (ModelInfo.java@0.26.0-dlc:747-748), and lmi-build's hf artifacts name engine=Python
MPI_ONLY_WITH_ENGINE = ("0.26.0-dlc", "0.27.0-dlc")
# The branches written for pydantic 1 itself (``from pydantic import BaseModel, root_validator, validator``,
# properties_manager/properties.py@0.26.0-dlc:16), executed with --pydantic1-python. 0.27.0-dlc imports
# the same API as ``pydantic.v1`` (properties.py@0.27.0-dlc:16), which pydantic 2 ships: run like the rest.
PYDANTIC_1 = ("0.26.0-dlc",)
# The option sets each fixture is planned with (flags as PlanRequest fields; -o options).
OPTION_SETS: dict[str, list[dict[str, Any]]] = {
    "hf": [{}, {"pp": 2}, {"option": ("option.max_num_seqs=64",)}, {"option": ("option.tensor_parallel_size=4",)},
           {"option": ("option.tensor_parallel_size=2",)},  # equal to the written tp: refused too (str vs int)
           {"max_batch_size": 64}],
    "neuronx": [{}, {"max_batch_size": 4}, {"option": ("option.batch_size=4",)},
                {"max_batch_size": 4, "option": ("option.rolling_batch=vllm",)},
                {"max_batch_size": 4, "option": ("option.model_loader=vllm",)},
                {"max_batch_size": 4, "option": ("option.rolling_batch=lmi-dist",)}],
    # (an -o option.rolling_batch is not here: lmi-build writes rolling_batch=trtllm whatever is asked)
    "trtllm": [{}, {"pp": 2}, {"max_batch_size": 64}, {"option": ("option.kv_cache_free_gpu_mem_fraction=0.8",)},
               {"option": ("option.free_gpu_memory_fraction=0.8",)}],
}
# 0.26.0-dlc has no LmiConfigRecommender: its LmiUtils only names rolling batch trtllm in the TRT-LLM image
# (LmiUtils.java@0.26.0-dlc:94-109) and the Python default max_rolling_batch_size 32 stays
RECOMMENDER_BEFORE = ("0.26.0-dlc",)
# the Neuron releases whose recommender reads an unset option.rolling_batch as "disable" and sets nothing
# (only "auto" becomes tnx: LmiConfigRecommender.java@0.28.0-dlc:91-98, @0.29.0-dlc:105-112); from 0.30 unset
# is "auto"
TNX_UNSET_DISABLE = ("0.28.0-dlc", "0.29.0-dlc")
# the releases whose recommender leaves trtllm at 32 (0.27 fills 256 only with option.max_num_tokens,
# LmiConfigRecommender.java@0.27.0-dlc:147-165; 256 from 0.28.0-dlc:163-181)
TRTLLM_ROLLING_BATCH_32 = ("0.26.0-dlc", "0.27.0-dlc")
RESOLVED = ("rolling_batch", "model_loader", "batch_size", "max_rolling_batch_size", "n_positions",
            "context_length_estimate", "tensor_parallel_degree", "pipeline_parallel_degree", "dtype", "amp",
            "quantize")
# TensorRtLlmProperties' own fields (0.33.0-dlc trt_properties.py:38-66) and extras it reads
RESOLVED_TRTLLM = ("max_batch_size", "max_input_len", "max_output_len", "max_seq_len", "max_num_tokens",
                   "pipeline_parallel_size", "kv_cache_free_gpu_mem_fraction", "free_gpu_memory_fraction")


# ------------------------------------------------------------------ corpus (lmi-build's side)
def corpus(target: str, profile: str, small: bool = False) -> list[dict[str, Any]]:
    """The serving.properties lmi-build writes for every fixture x option set (``small``: SMALL_CORPUS x
    SMALL_OPTION_SETS; lmi-build's verdict on each is the comparison test's to compute:
    tests/targets/test_djl_verdicts.py)."""
    from lmi_build.artifact.packager import serving_properties
    from lmi_build.planner.make import plan_request
    from lmi_build.targets import get_target, request_for

    entries = []
    configs = [FIXTURES / name / "config.json" for name in SMALL_CORPUS] if small else sorted(FIXTURES.glob("*/config.json"))
    for config in configs:
        for fields in (small_option_sets(target) if small else OPTION_SETS[target]):
            request = request_for(target, {"model": str(config.parent), "profile": profile, "tp": "2", **fields}, env={})
            try:
                plan = plan_request(request, get_target(target)).plan
            except Exception:  # a model lmi-build does not plan at all: nothing is written
                continue
            try:
                properties = serving_properties(plan, written_layout(target, profile, plan))
            except Exception:  # no knobs (no recipe for the target): nothing is written
                continue
            entries.append({"model": config.parent.name, "fields": _shown(fields), "properties": properties})
    return entries


def small_option_sets(target: str) -> list[dict[str, Any]]:
    """SMALL_OPTION_SETS; for TensorRT-LLM its own option sets (pp, the batch size, both spellings of the KV
    cache's memory fraction: what its start-up rules read; an engine's max_model_len and quantization are
    fixed at compile time, which DJL's runtime properties do not take)."""
    return OPTION_SETS["trtllm"] if target == "trtllm" else SMALL_OPTION_SETS


def written_layout(target: str, profile: str, plan: Any) -> Any:
    """The layout lmi-build packages the plan in: the plan's (hf, neuronx), the profile's (trtllm:
    toolkit before LMI 0.33, flat from 0.33, as its build sets it, targets/trtllm/build.py)."""
    from lmi_build.targets import get_target
    from lmi_build.targets.trtllm.layouts import layout_for
    from lmi_build.targets.trtllm.profiles import get_profile

    if target == "trtllm":
        return layout_for(get_profile(profile).layout)
    layouts = get_target(target).layouts()
    return layouts.get(str(getattr(plan.build, "layout", "")), next(iter(layouts.values())))


def _shown(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: list(value) if isinstance(value, tuple) else value for key, value in fields.items()}


# ------------------------------------------------------------------ execution (the release's side)
class Recorder:
    """Any attribute is a recorder, any call is recorded and answered with a recorder."""

    calls: ClassVar[list[str]] = []

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Recorder:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return Recorder(f"{self._name}.{attribute}")

    def __call__(self, *args: Any, **kwargs: Any) -> Recorder:
        Recorder.calls.append(f"{self._name}({', '.join(sorted(kwargs))})")
        return Recorder(f"{self._name}()")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class EveryKey(dict):  # type: ignore[type-arg]
    def __contains__(self, key: object) -> bool:
        return True


class _EngineArgs:
    """vllm.EngineArgs as DJL's properties manager reads it (see the module docstring)."""

    quantization = None
    max_num_batched_tokens = None
    cpu_offload_gb = 0
    __annotations__ = EveryKey()

    @classmethod
    def add_cli_args(cls, parser: Any) -> Any:
        return parser

    @classmethod
    def from_cli_args(cls, args: Any) -> Any:
        return types.SimpleNamespace(**vars(args))


class _TorchDtype:
    """torch.dtype where a properties manager declares a field of that type (0.26.0-dlc lmi_dist_rb_properties.py:40
    ``torch_dtype: Optional[torch.dtype]``: pydantic 1 needs a class there, not a recorder), and its values."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __str__(self) -> str:
        return f"torch.{self._name}"


TORCH_DTYPES = ("float32", "float16", "bfloat16", "int8")


class _Parser:
    """vLLM's FlexibleArgumentParser as DJL uses it: ``--key value`` and (0.32) ``--key=value``; it holds no
    StoreBoolean actions (0.32's construct_vllm_args_list reads ``_actions``: every boolean is then written
    as a bare ``--flag`` when true, as vLLM's StoreBoolean-free flags are)."""

    _actions: ClassVar[list[Any]] = []

    def parse_args(self, args: list[str]) -> Any:
        parsed: dict[str, Any] = {}
        key = None
        for item in args:
            if item.startswith("--") and "=" in item:
                name, value = item[2:].split("=", 1)
                parsed[name.replace("-", "_")], key = value, None
            elif item.startswith("--"):
                key = item[2:]
                parsed[key] = True
            elif key is not None:
                parsed[key] = item if parsed[key] is True else [*([parsed[key]] if not isinstance(parsed[key], list)
                                                                    else parsed[key]), item]
        return types.SimpleNamespace(**parsed)


def install_recorders() -> None:
    import importlib.abc
    import importlib.machinery

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
            if name.split(".")[0] in RECORDED:
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec: Any) -> Any:
            module = types.ModuleType(spec.name)
            module.__path__ = []  # type: ignore[attr-defined]
            module.__getattr__ = lambda attribute: Recorder(f"{spec.name}.{attribute}")  # type: ignore[method-assign]
            if spec.name == "torch":
                module.dtype = _TorchDtype  # type: ignore[attr-defined]
                for name in TORCH_DTYPES:
                    setattr(module, name, _TorchDtype(name))
            if spec.name == "vllm":
                module.EngineArgs = module.AsyncEngineArgs = _EngineArgs  # type: ignore[attr-defined]
            if spec.name.endswith("argparse_utils") or spec.name == "vllm.utils":
                module.FlexibleArgumentParser = _Parser  # type: ignore[attr-defined]
            return module

        def exec_module(self, module: Any) -> None:
            return None

    sys.meta_path.insert(0, Finder())


def java_fills(properties: dict[str, str], rolling_batch: str = "", release: str = "") -> dict[str, str]:
    """serving.properties as the Python side receives them: option.* without the prefix, engine, and the
    keys the Java recommender always fills (module docstring). With the image's ``rolling_batch``, as its
    setRollingBatch does (0.30.0-dlc LmiConfigRecommender.java:52-69, 0.35.0-dlc:51-64): "disable" under
    dynamic batching (batch_size, or max_dynamic_batch_size, above 1: ModelInfo.java:863-868), the
    image's in place of none (0.28/0.29 Neuron: none stays the Python default, TNX_UNSET_DISABLE) or "auto"
    (Neuron's tnx becomes vllm at max_rolling_batch_size 12 or more),
    and its MPI mode for lmi-dist (setMpiMode, 0.29.0-dlc LmiConfigRecommender.java:132-140). ``release``
    (the branch; "" for any from 0.28) picks the older rules, RECOMMENDER_BEFORE."""
    given = {key.removeprefix("option."): value for key, value in properties.items()
             if key.startswith("option.") or key == "engine"}
    recommender = release not in RECOMMENDER_BEFORE
    unset_disables = rolling_batch == "tnx" and release in TNX_UNSET_DISABLE
    if rolling_batch and (recommender or rolling_batch == "trtllm"):
        if recommender and int(properties.get("batch_size", properties.get("max_dynamic_batch_size", "1"))) > 1:
            given["rolling_batch"] = "disable"
        elif given.get("rolling_batch", "disable" if unset_disables else "auto") == "auto":
            large = int(given.get("max_rolling_batch_size", "1")) >= 12
            given["rolling_batch"] = "vllm" if rolling_batch == "tnx" and large else rolling_batch
    if given.get("rolling_batch") == "lmi-dist" and rolling_batch == "lmi-dist" and release not in MPI_ONLY_WITH_ENGINE:
        given["mpi_mode"] = "true"  # only in the lmi-dist image: on Neuron it is the refusal (not executed)
    given.setdefault("model_dir", "/opt/ml/model")  # the model directory the front-end always passes
    given.setdefault("pipeline_parallel_degree", "1")
    # setRollingBatchSize (0.30.0-dlc LmiConfigRecommender.java:129-139, 0.35.0-dlc:122-132 without lmi-dist)
    trtllm_large = release not in TRTLLM_ROLLING_BATCH_32 or (release == "0.27.0-dlc" and "max_num_tokens" in given)
    # (no recommender, RECOMMENDER_BEFORE: the Python default 32 stays)
    large = (recommender and given.get("rolling_batch") in ("vllm", "lmi-dist")) or (
        given.get("rolling_batch") == "trtllm" and trtllm_large)
    given.setdefault("max_rolling_batch_size", "256" if large else "32")
    return given


def execute(setup: Path, class_name: str, module: str, rolling_batch: str,
            entries: list[dict[str, Any]], release: str = "") -> list[dict[str, Any]]:
    sys.path.insert(0, str(setup))
    install_recorders()
    import importlib

    properties_class = getattr(importlib.import_module(f"djl_python.properties_manager.{module}"), class_name)
    results = []
    for entry in entries:
        if "properties" not in entry:
            continue
        given = java_fills(entry["properties"], rolling_batch, release)
        Recorder.calls = []
        try:
            config = properties_class(**given)
            engine_args = None
            if hasattr(config, "get_engine_args"):
                # 0.35+ build the async engine's arguments; 0.32's LLMEngine handler takes no argument
                # (rolling_batch/vllm_rolling_batch.py@0.32.0-dlc:48)
                takes_async = "async_engine" in inspect.signature(config.get_engine_args).parameters
                args = config.get_engine_args(async_engine=True) if takes_async else config.get_engine_args()
                engine_args = {k: v for k, v in sorted(vars(args).items()) if v not in (None, False)}
            resolved = {key: _plain(getattr(config, key)) for key in RESOLVED if hasattr(config, key)}
            if class_name == "TensorRtLlmProperties":
                resolved |= {key: _plain(getattr(config, key)) for key in RESOLVED_TRTLLM if hasattr(config, key)}
            verdict: dict[str, Any] = {"accepted": True, "resolved": resolved}
            if engine_args is not None:
                verdict["engine_args"] = engine_args
            if hasattr(config, "get_llm_kwargs"):  # what the handler passes to tensorrt_llm's LLM (0.33.0-dlc on)
                llm = {k: _plain(v) for k, v in config.get_llm_kwargs().items()
                       if k in ("tensor_parallel_size", "pipeline_parallel_size", "dtype", "max_batch_size",
                                "max_input_len", "max_seq_len", "max_num_tokens", "backend")}
                verdict["llm_kwargs"] = llm
                verdict["kv_cache_config"] = [c for c in Recorder.calls if "KvCacheConfig" in c]
        except Exception as error:  # the release's own refusal is the fact recorded
            verdict = {"accepted": False, "error": _message(error)}
        results.append({"model": entry["model"], "fields": entry["fields"], "vendor": verdict})
    return results


def _message(error: Exception) -> str:
    """The exception as one line: pydantic's ValidationError by its errors' messages (without its URLs)."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        try:
            return "ValidationError: " + "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg')}"
                                                   for e in errors())[:300]
        except Exception:
            pass
    return f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"


def _plain(value: Any) -> Any:
    if hasattr(value, "value"):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def execute_branch(repo: str, branch: str, class_name: str, module: str, rolling_batch: str,
                   entries: list[dict[str, Any]], python: str, release: str = "") -> dict[str, Any]:
    """Execute ``branch``'s properties manager on ``entries`` in a fresh ``python`` (``--execute``) and
    set each entry's "vendor" verdict; returns the pydantic version it ran with."""
    with tempfile.TemporaryDirectory() as work:
        archive = subprocess.run(["git", f"--git-dir={repo}", "archive", branch, "engines/python/setup"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", work], input=archive, check=True)
        done = subprocess.run([python, __file__, "--execute", f"{work}/engines/python/setup", class_name,
                               module, rolling_batch, f"--release={release}"], input=json.dumps(entries), capture_output=True, text=True,
                              check=True)
    executed = json.loads(done.stdout)
    verdicts = {(r["model"], json.dumps(r["fields"], sort_keys=True)): r["vendor"] for r in executed["results"]}
    for entry in entries:
        entry["vendor"] = verdicts.get((entry["model"], json.dumps(entry["fields"], sort_keys=True)))
    return {"pydantic": str(executed["pydantic"])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("repo", nargs="?")
    parser.add_argument("--execute", nargs=4, metavar=("SETUP_DIR", "CLASS", "MODULE", "ROLLING_BATCH"))
    parser.add_argument("--pydantic1-python", help="the interpreter of a pydantic<2 venv, for PYDANTIC_1 branches")
    parser.add_argument("--release", default="", help="with --execute: the branch, for java_fills' older rules")
    parser.add_argument("--only", nargs="+", metavar="KEY", help="execute these BRANCHES keys only (with --keep)")
    parser.add_argument("--keep", help="an earlier verdicts.json whose other branches are kept as they are")
    args = parser.parse_args()
    keys = [key for key in BRANCHES if not args.only or key in args.only]
    if args.repo and not args.pydantic1_python and any(key.split("#")[0] in PYDANTIC_1 for key in keys):
        parser.error(f"--pydantic1-python is needed to execute {', '.join(PYDANTIC_1)} (see the module docstring)")
    if args.execute:
        setup, class_name, module, rolling_batch = args.execute
        import pydantic

        json.dump({"pydantic": pydantic.VERSION, "results": execute(Path(setup), class_name, module, rolling_batch,
                                                                    json.load(sys.stdin), args.release)}, sys.stdout)
        return
    facts: dict[str, Any] = {"source": "deepjavalibrary/djl-serving",
                             "extracted_by": "tests/vendor/djl/execute_properties.py",
                             "recorders": list(RECORDED), "branches": []}
    if args.keep:  # the branches not executed now, as recorded before
        executed_now = {(BRANCHES[key][0], key.split("#")[0]) for key in keys}
        facts["branches"] = [b for b in json.loads(Path(args.keep).read_text())["branches"]
                             if (b["profile"], b["branch"]) not in executed_now]
    for key in keys:
        profile, target, class_name, module, rolling_batch = BRANCHES[key]
        branch = key.split("#")[0]
        commit = subprocess.run(["git", f"--git-dir={args.repo}", "rev-parse", f"{branch}^{{commit}}"], capture_output=True,
                                text=True, check=True).stdout.strip()
        entries = corpus(target, profile, small=key in SMALL)
        python = args.pydantic1_python if branch in PYDANTIC_1 else sys.executable
        executed = execute_branch(args.repo, branch, class_name, module, rolling_batch, entries, python, branch)
        facts["branches"].append({"branch": branch, "commit": commit, "profile": profile, "target": target,
                                  "executed": f"djl_python.properties_manager.{module}.{class_name}",
                                  "pydantic": executed["pydantic"], "corpus": "small" if key in SMALL else "full",
                                  "entries": entries})
    json.dump(facts, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
