"""Extract, from vLLM's own source, how each version sizes its KV cache at start-up and the check that
refuses to start when one sequence of max_model_len does not fit (memory.json), for the hf target's
vLLM memory rule (lmi_build/targets/hf/data/profiles/*.toml ``[vllm_memory]``).

Run where the release wheels' Python source is at hand (``pip download vllm==X --no-deps``, then
``unzip -q vllm-X-*.whl 'vllm/*' -d DIR/X``; a wheel holds the source as released and its
``vllm/_version.py`` or ``vllm/commit_id.py`` names the commit it was built from):

    python tests/vendor/vllm/extract_memory.py DIR > tests/vendor/vllm/memory.json
    python tests/vendor/vllm/extract_memory.py DIR --keep tests/vendor/vllm/memory.json > /tmp/memory.json

(the second: DIR holds some versions only, the others are kept as the committed JSON has them).

DIR holds one directory per version (``DIR/0.11.1/vllm/...``). What is read, per version, each with
its path and line:
- ``gpu_memory_utilization``: CacheConfig's default (config/cache.py), else EngineArgs' (engine/arg_utils.py).
- ``block_size``: the CUDA platform's block size when none is given (platforms/cuda.py, the first
  ``cache_config.block_size = N``; 0.5.x-0.6.x EngineArgs' default; 0.18+ CacheConfig.DEFAULT_BLOCK_SIZE,
  which platforms/interface.py may replace with the attention backend's preferred size).
- ``max_num_batched_tokens``: the scheduler's default (SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS,
  else ``_DEFAULT_MAX_NUM_BATCHED_TOKENS``); LMI's engines are built with the default usage context
  (``usage_context``: the default of AsyncLLM.from_engine_args), for which vLLM has no per-context entry.
- ``requested_memory``: the line multiplying the device's total memory by gpu_memory_utilization.
- ``check``: where a KV cache too small for one max_model_len sequence raises, and its message: V1
  ``check_enough_kv_cache_memory`` (v1/core/kv_cache_utils.py) with ``estimate_max_model_len`` (a
  binary search over 1..max_model_len of ``cdiv(len, block_size) * page_size_bytes`` per layer); V0
  ``raise_if_cache_size_invalid`` (worker/worker.py: max tokens = block_size x num_gpu_blocks; 0.3.x has it
  in engine/llm_engine.py ``_init_cache``).
- ``v1_default``: whether VLLM_USE_V1 defaults on (envs.py), i.e. which of the two checks runs.
- ``cudagraph_in_budget``: whether determine_available_memory (V1 gpu_worker.py) subtracts CUDA graph
  memory before the KV cache is sized (older versions capture the graphs afterwards, out of the
  (1 - gpu_memory_utilization) margin).

Nothing here reads lmi-build's own tables.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

Found = dict[str, object]


def _first(root: Path, paths: list[str], pattern: str) -> Found | None:
    for rel in paths:
        path = root / rel
        if not path.exists():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = re.search(pattern, line)
            if match:
                value: object = match.group(1) if match.groups() else line.strip()
                return {"value": value, "path": rel, "line": number}
    return None


def _two_lines(root: Path, paths: list[str], first: str, second: str) -> Found | None:
    """The first line matching ``first`` whose text, with the next line's, also matches ``second``."""
    for rel in paths:
        path = root / rel
        if not path.exists():
            continue
        lines = path.read_text().splitlines()
        for index, line in enumerate(lines):
            if re.search(first, line):
                joined = " ".join(part.strip() for part in lines[index:index + 2])
                match = re.search(second, joined)
                if match:
                    return {"value": match.group(1) if match.groups() else joined, "path": rel, "line": index + 1}
    return None


def _function(root: Path, rel: str, name: str) -> tuple[ast.FunctionDef, str] | None:
    path = root / rel
    if not path.exists():
        return None
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node, source
    return None


def _number(found: Found | None) -> Found | None:
    if found is None:
        return None
    value = str(found["value"])
    return {**found, "value": float(value) if "." in value else int(value)}


def _check(root: Path) -> Found:
    v1 = _function(root, "vllm/v1/core/kv_cache_utils.py", "check_enough_kv_cache_memory")
    estimate = _function(root, "vllm/v1/core/kv_cache_utils.py", "estimate_max_model_len")
    usage = _first(root, ["vllm/v1/kv_cache_interface.py"], r"return (cdiv\(max_model_len, self\.block_size\) \* self\.page_size_bytes)")
    message = _first(root, ["vllm/v1/core/kv_cache_utils.py"], r"(To serve at least one request with the models's max seq len)")
    v0_path, v0_name = "vllm/worker/worker.py", "raise_if_cache_size_invalid"
    v0 = _function(root, v0_path, v0_name)
    if v0 is None:  # 0.3.x: the engine checks it after sizing the cache (LLMEngine._init_cache)
        v0_path, v0_name = "vllm/engine/llm_engine.py", "_init_cache"
        v0 = _function(root, v0_path, v0_name)
    v0_message = _first(root, [v0_path], r"(is larger than the maximum number of tokens that can be)")
    return {
        "v1": None if v1 is None else {
            "path": "vllm/v1/core/kv_cache_utils.py", "function": "check_enough_kv_cache_memory",
            "line": v1[0].lineno, "estimate_max_model_len_line": estimate[0].lineno if estimate else None,
            "binary_search": bool(estimate and "while left <= right" in ast.get_source_segment(estimate[1], estimate[0])),
            "message_line": message["line"] if message else None, "per_layer_bytes": usage},
        "v0": None if v0 is None or v0_message is None else {
            "path": v0_path, "function": v0_name, "line": v0[0].lineno,
            "message_line": v0_message["line"] if v0_message else None},
    }


def _cudagraph_in_budget(root: Path) -> Found | None:
    found = _function(root, "vllm/v1/worker/gpu_worker.py", "determine_available_memory")
    if found is None:
        return None
    node, source = found
    body = ast.get_source_segment(source, node) or ""
    # The KV budget is requested_memory - non_kv_cache_memory; a version that counts CUDA graphs names them there.
    counted = bool(re.search(r"(cudagraph|cuda_graph)\w*(memory|estimate)", body, re.IGNORECASE))
    found: Found = {"value": counted, "path": "vllm/v1/worker/gpu_worker.py", "line": node.lineno,
                    "end_line": node.end_lineno}
    gate = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"
    if counted and gate in body:  # the estimate is applied only when this variable (its default) says so
        default = _two_lines(root, ["vllm/envs.py"], f"\"{gate}\": lambda", rf"os\.getenv\(\"{gate}\", \"(\d)\"\)")
        found["gate"] = default
        found["value"] = bool(default and default["value"] == "1")
    return found


def _capture(root: Path) -> Found | None:
    found = _first(root, ["vllm/config/vllm.py"], r"(max_num_seqs \* decode_query_len \* \d+, \d+)")
    if found is None:
        return None
    factor, most = re.findall(r"\d+", str(found["value"]))
    return {**found, "value": [int(factor), int(most)]}


def _quant_algos(root: Path) -> Found | None:
    """ModelOpt's quant_algo values the version's modelopt loader takes (QUANT_ALGOS, a list literal)."""
    rel = "vllm/model_executor/layers/quantization/modelopt.py"
    path = root / rel
    if not path.exists():
        return None
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "QUANT_ALGOS" for t in node.targets)
                and isinstance(node.value, ast.List)):
            values = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
            return {"value": values, "path": rel, "line": node.lineno, "end_line": node.end_lineno}
    return None


def _commit(root: Path) -> str | None:
    for rel, pattern in (("vllm/_version.py", r"commit_id = '([^']+)'"), ("vllm/commit_id.py", r"__commit__ = \"([^\"]+)\"")):
        found = _first(root, [rel], pattern)
        if found:
            return str(found["value"])
    return None


def extract(root: Path) -> Found:
    return {
        "commit": _commit(root),
        "gpu_memory_utilization": _number(_first(
            root, ["vllm/config/cache.py", "vllm/config.py", "vllm/engine/arg_utils.py"],
            r"gpu_memory_utilization: float = (?:Field\(default=)?([0-9.]+)")),
        "block_size": _number(_first(root, ["vllm/platforms/cuda.py"], r"cache_config\.block_size = (\d+)")
                              or _first(root, ["vllm/engine/arg_utils.py"], r"^    block_size: int = (\d+)")
                              # 0.18+: CacheConfig's default, which an attention backend's preference may replace
                              or _first(root, ["vllm/config/cache.py"], r"DEFAULT_BLOCK_SIZE: ClassVar\[int\] = (\d+)")),
        # V0 (config.py SchedulerConfig, engine/arg_utils.py): chunked prefill turns itself on above a
        # max_model_len, with its own max_num_batched_tokens; otherwise max(max_model_len, N)
        "v0_prefill": {
            "chunked_above": _number(_first(root, ["vllm/engine/arg_utils.py"], r"use_long_context = max_model_len > (\d+)")),
            "chunked_tokens": _number(_first(root, ["vllm/config.py"], r"^\s+(?:self\.)?max_num_batched_tokens = (\d+)$")),
            "unchunked_floor": _number(_first(root, ["vllm/config.py"],
                                              r"max_num_batched_tokens = max\((?:self\.)?max_model_len, (\d+)\)"))},
        "modelopt_quant_algos": _quant_algos(root),
        # the largest CUDA graph's tokens: min(max_num_seqs x decode_query_len x F, M) (config/vllm.py)
        "cudagraph_capture": _capture(root),
        "max_num_batched_tokens": _number(_first(
            root, ["vllm/config/scheduler.py", "vllm/utils/__init__.py", "vllm/config.py"],
            r"_?DEFAULT_MAX_NUM_BATCHED_TOKENS(?:: ClassVar\[int\])? = (\d+)")),
        "usage_context": _first(root, ["vllm/v1/engine/async_llm.py"],
                                r"usage_context: UsageContext = UsageContext\.(\w+)"),
        "requested_memory": {
            "v1": _two_lines(root, ["vllm/v1/worker/utils.py", "vllm/v1/worker/gpu_worker.py"], r"total_(?:gpu_)?memory( \*|$)",
                             r"(total_(?:gpu_)?memory \* (?:self\.)?cache_config\.gpu_memory_utilization)"),
            "v0": _two_lines(root, ["vllm/worker/worker.py"], r"total_gpu_memory \*",
                             r"(total_gpu_memory \* \\? ?(?:self\.cache_config\.)?gpu_memory_utilization)")},
        # absent: no V0 engine left, V1 always
        "v1_default": _number(_two_lines(root, ["vllm/envs.py"], r"\"VLLM_USE_V1\":",
                                         r"os\.getenv\(\"VLLM_USE_V1\", \"(\d)\"\)")),
        "check": _check(root),
        "cudagraph_in_budget": _cudagraph_in_budget(root),
    }


def main() -> None:
    top = Path(sys.argv[1])
    versions = sorted((p.name for p in top.iterdir() if (p / "vllm").is_dir()),
                      key=lambda v: [int(x) if x.isdigit() else x for x in re.split(r"[.]", v)])
    # --keep FILE: the versions of an earlier memory.json that DIR does not hold are kept as they are
    kept = json.loads(Path(sys.argv[3]).read_text())["versions"] if sys.argv[2:3] == ["--keep"] else {}
    out = {"generated_by": "tests/vendor/vllm/extract_memory.py (vLLM release wheels from PyPI)",
           "versions": {**kept, **{v: extract(top / v) for v in versions}}}
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
