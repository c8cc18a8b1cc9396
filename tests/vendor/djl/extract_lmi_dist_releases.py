"""Extract, from DJL Serving's release branches and the published image lists, what each LMI release with
LMI-Dist pins and how its handler starts LMI-Dist: the facts of the hf profiles
lmi_build/targets/hf/data/profiles/lmi-*-lmi-dist-*.toml (lmi_dist_releases.json), which
tests/targets/hf/test_hf_lmi_dist_releases.py compares with the profiles.

    python tests/vendor/djl/extract_lmi_dist_releases.py /path/to/djl-serving.git \
        /path/to/deep-learning-containers.git /path/to/sagemaker-python-sdk.git \
        > tests/vendor/djl/lmi_dist_releases.json

Read per branch (each with its commit, path and line):
- the image's build file: serving/docker/deepspeed.Dockerfile (0.26-0.27: LMI-Dist shipped in the DeepSpeed
  image), serving/docker/lmi.Dockerfile (0.28-0.31), serving/docker/requirements-lmi.txt and
  lmi-container-requirements-common.txt (0.32: LMI-Dist in its own virtualenv): the lmi_dist wheel, the vLLM
  it is installed with, the transformers pin.
- engines/python/setup/djl_python/properties_manager/lmi_dist_rb_properties.py: the option.quantize
  choices (LmiDistQuantizeMethods; from 0.31 a free string), pipeline_parallel_degree (a field from 0.29:
  before, the key is not read), gpu_memory_utilization, max_rolling_batch_prefill_tokens and
  enable_chunked_prefill defaults.
- engines/python/setup/djl_python/rolling_batch/lmi_dist_rolling_batch.py: the engine it builds
  (``VllmEngineArgs``, from 0.27; 0.26 ``lmi_dist.models.get_model``), the warmup prefill it passes when
  max_rolling_batch_prefill_tokens is unset (``_WARMUP_PREFILL_TOKENS``, 0.27-0.29), pipeline_parallel_size;
  0.26 (LMI-Dist 8's own models, not vLLM's engine) the warmup call that sizes its KV cache on a prefill of
  max_rolling_batch_prefill_tokens, and huggingface.py's ``LMI_DIST_ADV_MODEL`` (the architectures DJL routes to
  LMI-Dist): keys only that branch has.
And the published image: aws/sagemaker-python-sdk sagemaker-core/src/sagemaker/core/image_uri_config/
djl-lmi.json (0.28 on) or djl-deepspeed.json (0.26-0.27) ``tag_prefix`` of the release, and the row of
aws/deep-learning-containers available_images.md at DLC_REF (the last commit that has the file).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

DOCKER = "serving/docker"
PROPERTIES = "engines/python/setup/djl_python/properties_manager/lmi_dist_rb_properties.py"
ROLLING_BATCH = "engines/python/setup/djl_python/rolling_batch/lmi_dist_rolling_batch.py"
HUGGINGFACE = "engines/python/setup/djl_python/huggingface.py"
SDK_DIR = "sagemaker-core/src/sagemaker/core/image_uri_config"
DLC_REF = "bbf69f1f93"  # available_images.md's last version (later commits moved the list to docs/src/data)
# branch -> (the build files that pin the wheels, the SDK image list of its release)
BRANCHES: dict[str, tuple[tuple[str, ...], str]] = {
    "0.26.0-dlc": ((f"{DOCKER}/deepspeed.Dockerfile",), "djl-deepspeed.json"),
    "0.27.0-dlc": ((f"{DOCKER}/deepspeed.Dockerfile",), "djl-deepspeed.json"),
    "0.28.0-dlc": ((f"{DOCKER}/lmi.Dockerfile",), "djl-lmi.json"),
    "0.29.0-dlc": ((f"{DOCKER}/lmi.Dockerfile",), "djl-lmi.json"),
    "0.30.0-dlc": ((f"{DOCKER}/lmi.Dockerfile",), "djl-lmi.json"),
    "0.31.0-dlc": ((f"{DOCKER}/lmi.Dockerfile",), "djl-lmi.json"),
    "0.32.0-dlc": ((f"{DOCKER}/requirements-lmi.txt", f"{DOCKER}/lmi-container-requirements-common.txt"),
                   "djl-lmi.json"),
}


def _git(git: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git}", *args], capture_output=True, text=True, check=True).stdout


def _show(git: Path, ref: str, path: str) -> list[str]:
    done = subprocess.run(["git", f"--git-dir={git}", "show", f"{ref}:{path}"], capture_output=True, text=True)
    return done.stdout.splitlines() if done.returncode == 0 else []


def _find(files: dict[str, list[str]], pattern: str) -> dict[str, object] | None:
    """The first line of ``files`` (path -> lines, in order) matching ``pattern``: its first group (or the
    line), the path and the line number."""
    for path, lines in files.items():
        for number, line in enumerate(lines, 1):
            match = re.search(pattern, line)
            if match:
                return {"value": match.group(1) if match.groups() else line.strip(), "path": path, "line": number}
    return None


def _enum(lines: list[str], name: str) -> dict[str, object] | None:
    """The string values of ``class <name>(str, Enum)`` and the lines they are on."""
    start = next((i for i, line in enumerate(lines) if line.startswith(f"class {name}(")), None)
    if start is None:
        return None
    values, end = [], start
    for index in range(start + 1, len(lines)):
        if lines[index].strip().startswith("#"):
            continue
        match = re.match(r"^    \w+ = '([^']+)'$", lines[index])
        if not match:
            break
        values.append(match.group(1))
        end = index
    return {"value": values, "path": PROPERTIES, "line": start + 1, "end_line": end + 1}


def _pins(files: dict[str, list[str]]) -> dict[str, object]:
    lmi_dist = _find(files, r"lmi_dist-([^-/]+)-py3-none-any\.whl")
    if lmi_dist is not None:
        lmi_dist["value"] = str(lmi_dist["value"]).replace("%2B", "+")
    vllm = (_find(files, r"^ARG vllm_version=(\S+)$")
            or _find(files, r"/vllm-([^-/]+?)(?:%2B|\+)cu\d+-cp")
            or _find(files, r"/vllm-([^-/]+?)-cp"))
    transformers = _find(files, r"^ARG transformers_version=(\S+)$") or _find(files, r"^transformers==(\S+)$")
    return {"lmi_dist": lmi_dist, "vllm": vllm, "transformers": transformers}


def _handler(properties: list[str], rolling: list[str]) -> dict[str, object]:
    props, batch = {PROPERTIES: properties}, {ROLLING_BATCH: rolling}
    return {
        "quantize_methods": _enum(properties, "LmiDistQuantizeMethods"),
        "quantize_free": _find(props, r"^    (quantize: Optional\[str\] = None)$"),
        "pipeline_parallel_degree": _find(props, r"^    (pipeline_parallel_degree: int = 1)$"),
        "gpu_memory_utilization": _find(props, r"^    gpu_memory_utilization: Optional\[float\] = ([0-9.]+)$"),
        "prefill_tokens_default": _find(props, r"^    max_rolling_batch_prefill_tokens: Optional\[int\] = (\w+)$"),
        "enable_chunked_prefill": _find(props, r"^    enable_chunked_prefill: Optional\[bool\] = (\w+)$"),
        "engine_args": _find(batch, r"^(from lmi_dist\.arg_utils import VllmEngineArgs)$"),
        "get_model": _find(batch, r"^(from lmi_dist\.models import get_model)$"),
        "warmup_tokens": _find(batch, r"^_WARMUP_PREFILL_TOKENS = (\d+)$"),
        "warmup_passed": _find(batch, r"(kwargs\[\"warmup_prefill_tokens\"\] = _WARMUP_PREFILL_TOKENS)"),
        "pipeline_parallel_size": _find(batch, r"(pipeline_parallel_size=self\.lmi_dist_config\.)"),
        "max_num_batched_tokens": _find(batch, r"(max_num_batched_tokens=self\.lmi_dist_config\.)"),
    }


def _own_engine(huggingface: list[str], rolling: list[str]) -> dict[str, object]:
    """For a handler that builds LMI-Dist's own models (``get_model``, 0.26: not vLLM's engine), how it starts
    them: the warmup call that sizes the KV cache and the architectures DJL routes to LMI-Dist
    (``LMI_DIST_ADV_MODEL``); nothing for the vLLM-based ones, whose entries stay as they were."""
    if _find({ROLLING_BATCH: rolling}, r"^(from lmi_dist\.models import get_model)$") is None:
        return {}
    start = next((i for i, line in enumerate(huggingface) if line.startswith("LMI_DIST_ADV_MODEL = {")), None)
    models = None
    if start is not None:
        end = next(i for i in range(start, len(huggingface)) if huggingface[i].startswith("}"))
        names = [re.match(r'^    "(\w+)",$', line) for line in huggingface[start + 1:end]]
        models = {"value": [m.group(1) for m in names if m], "path": HUGGINGFACE, "line": start + 1,
                  "end_line": end + 1}
    return {
        "warmup_call": _find({ROLLING_BATCH: rolling}, r"(max_batch_total_tokens = self\.model\.warmup\(batch\))"),
        "warmup_prefill_read": _find({ROLLING_BATCH: rolling},
                                     r"(max_batch_prefill_tokens = self\.lmi_dist_configs\.max_rolling_batch_prefill_tokens)"),
        "lmi_dist_models": models,
    }


def _sdk_image(sdk: Path, name: str, version: str) -> dict[str, object] | None:
    path = f"{SDK_DIR}/{name}"
    lines = _show(sdk, "HEAD", path)
    start = next((i for i, line in enumerate(lines) if line.strip() == f'"{version}": {{'), None)
    if start is None:
        return None
    found = _find({path: lines[start:]}, r"\"tag_prefix\": \"([^\"]+)\"")
    registry = _find({path: lines[start:]}, r"\"us-west-2\": \"(\d+)\"")
    for entry in (found, registry):
        if entry is not None:
            entry["line"] = int(str(entry["line"])) + start
    return {"tag_prefix": found, "us_west_2": registry}


def _listed(dlc: Path, tag: str) -> dict[str, object] | None:
    """The available_images.md row (at DLC_REF) naming the image ``tag``, and its description."""
    found = _find({"available_images.md": _show(dlc, DLC_REF, "available_images.md")},
                  rf"^\| ([^|]+?) +\|.*djl-inference:{re.escape(tag)} +\|$")
    return found


def _branch(djl: Path, dlc: Path, sdk: Path, branch: str) -> dict[str, object]:
    build_files, sdk_file = BRANCHES[branch]
    version = branch.split("-")[0]
    image = _sdk_image(sdk, sdk_file, version)
    tag = image["tag_prefix"]["value"] if image and image["tag_prefix"] else None
    return {
        "commit": _git(djl, "rev-parse", branch).strip(),
        **_pins({path: _show(djl, branch, path) for path in build_files}),
        "handler": {**_handler(_show(djl, branch, PROPERTIES), _show(djl, branch, ROLLING_BATCH)),
                    **_own_engine(_show(djl, branch, HUGGINGFACE), _show(djl, branch, ROLLING_BATCH))},
        "sdk_image": image,
        "available_images": _listed(dlc, str(tag)) if tag else None,
    }


def main() -> None:
    djl, dlc, sdk = (Path(arg) for arg in sys.argv[1:4])
    out = {
        "generated_by": "tests/vendor/djl/extract_lmi_dist_releases.py",
        "dlc": {"ref": DLC_REF, "commit": _git(dlc, "rev-parse", DLC_REF).strip()},
        "sdk": {"commit": _git(sdk, "rev-parse", "HEAD").strip()},
        "branches": {branch: _branch(djl, dlc, sdk, branch) for branch in BRANCHES},
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
