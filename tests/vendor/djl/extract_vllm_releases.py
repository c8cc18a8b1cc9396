"""Extract, from DJL Serving's release branches and the AWS Deep Learning Containers image list, what each
LMI vLLM release pins and how its handler starts vLLM: the facts of the hf profiles
lmi_build/targets/hf/data/profiles/lmi-*-vllm-*.toml (vllm_releases.json), which
tests/targets/hf/test_hf_vllm_releases.py compares with the profiles.

    python tests/vendor/djl/extract_vllm_releases.py /path/to/djl-serving.git /path/to/deep-learning-containers.git \
        > tests/vendor/djl/vllm_releases.json

Read per branch (each with its commit, path and line):
- serving/docker/lmi-container-requirements.txt: the vllm pin (a release, ``vllm==X``, or a wheel URL, whose
  file name is a development build ``X.devN+gHASH``) and the transformers pin. 0.32.0-dlc has none: its
  vllm rolling batch runs in a virtualenv of serving/docker/requirements-vllm.txt (the vllm pin) over the
  system packages of serving/docker/lmi-container-requirements-common.txt (the transformers pin).
- engines/python/setup/djl_python/properties_manager/vllm_rb_properties.py: the pipeline-parallel refusal,
  the three DJL/vLLM name conflicts, the pass-through of other keys to vLLM's engine arguments.
- engines/python/setup/djl_python/lmi_vllm/vllm_async_service.py: AsyncLLMEngine.from_engine_args (no usage
  context given: vLLM's default); 0.32.0-dlc rolling_batch/vllm_rolling_batch.py: LLMEngine.from_engine_args.
And, from aws/deep-learning-containers docs/src/data/djl-inference/<version>-lmi<N>.0.0-gpu.yml: the image
tag and its "engine" line; docs/src/global.yml the ECR account and example region.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

# branch -> the image list file of its published DLC (None: none published)
BRANCHES: dict[str, str | None] = {
    "0.32.0-dlc": "0.32-lmi14.0.0-gpu.yml", "0.33.0-dlc": "0.33-lmi15.0.0-gpu.yml", "0.34.0-dlc": "0.34-lmi16.0.0-gpu.yml",
    "0.36.0-lmi18-dlc": "0.36-lmi18.0.0-gpu.yml", "0.36.0-lmi19-dlc": "0.36-lmi19.0.0-gpu.yml",
    "0.36.0-lmi20-dlc": "0.36-lmi20.0.0-gpu.yml", "0.36.0-lmi21-dlc": "0.36-lmi21.0.0-gpu.yml",
    "0.36.0-lmi22-dlc": "0.36-lmi22.0.0-gpu.yml", "0.36.0-lmi23-dlc": "0.36-lmi23.0.0-gpu.yml",
    "0.36.0-lmi24-dlc": "0.36-lmi24.0.0-gpu.yml", "0.36.0-lmi25-dlc": "0.36-lmi25.0.0-gpu.yml",
    "0.36.0-lmi26-dlc": "0.36-lmi26.0.0-gpu.yml", "0.36.0-lmi27-dlc": "0.36-lmi27.0.0-gpu.yml",
}
# image lists with no DJL branch (lmi28: vLLM 0.26 is in the DLC data only)
UNBRANCHED = ("0.36-lmi28.0.0-gpu.yml",)
REQUIREMENTS = "serving/docker/lmi-container-requirements.txt"
# 0.32.0-dlc: the vllm virtualenv's requirements, and the system packages it sees
VLLM_REQUIREMENTS = ("serving/docker/requirements-vllm.txt", "serving/docker/lmi-container-requirements-common.txt")
PROPERTIES = "engines/python/setup/djl_python/properties_manager/vllm_rb_properties.py"
SERVICE = "engines/python/setup/djl_python/lmi_vllm/vllm_async_service.py"
ROLLING_BATCH = "engines/python/setup/djl_python/rolling_batch/vllm_rolling_batch.py"
DLC_DIR = "docs/src/data/djl-inference"


def _show(git: Path, ref: str, path: str) -> list[str]:
    done = subprocess.run(["git", f"--git-dir={git}", "show", f"{ref}:{path}"], capture_output=True, text=True)
    return done.stdout.splitlines() if done.returncode == 0 else []


def _find(lines: list[str], pattern: str, path: str) -> dict[str, object] | None:
    for number, line in enumerate(lines, 1):
        match = re.search(pattern, line)
        if match:
            return {"value": match.group(1) if match.groups() else line.strip(), "path": path, "line": number}
    return None


def _vllm_pin(lines: list[str], path: str = REQUIREMENTS) -> dict[str, object] | None:
    found = _find(lines, r"^(?:vllm\s*==\s*|vllm @ )?(\S*vllm[-=]\S+)$", path)
    if found is None:
        return None
    text = str(found["value"])
    release = re.match(r"vllm==(\S+)$", text)
    wheel = re.search(r"/vllm-([^/]+?)-cp\d+", text)
    version = release.group(1) if release else (wheel.group(1).replace("%2B", "+") if wheel else None)
    return {**found, "version": version, "wheel": None if release else text}


def _branch(git: Path, branch: str) -> dict[str, object]:
    commit = subprocess.run(["git", f"--git-dir={git}", "rev-parse", branch], capture_output=True,
                            text=True, check=True).stdout.strip()
    requirements = _show(git, branch, REQUIREMENTS)
    properties = _show(git, branch, PROPERTIES)
    service, service_path = _show(git, branch, SERVICE), SERVICE
    vllm, transformers = _vllm_pin(requirements), _find(requirements, r"^(transformers\s*[=<>!].*)$", REQUIREMENTS)
    if not requirements:  # 0.32.0-dlc: a virtualenv per engine, the vllm rolling batch on LLMEngine
        venv, common = VLLM_REQUIREMENTS
        vllm = _vllm_pin(_show(git, branch, venv), venv)
        transformers = _find(_show(git, branch, common), r"^(transformers\s*[=<>!].*)$", common)
        service, service_path = _show(git, branch, ROLLING_BATCH), ROLLING_BATCH
    # validate_potential_lmi_vllm_config_conflict("<DJL key>",\n "<vLLM name>"): the vLLM name's line
    conflicts = [found for name in ("tensor_parallel_size", "pipeline_parallel_size", "max_num_seqs")
                 if (found := _find(properties, rf"^\s+\"({name})\"\)$", PROPERTIES))]
    return {
        "commit": commit,
        "vllm": vllm,
        "transformers": transformers,
        "pipeline_parallel_refused": _find(properties, r"(Pipeline parallelism is not supported)", PROPERTIES),
        "conflicts": conflicts,
        "passthrough": _find(properties, r"(if k in EngineArgs\.__annotations__)", PROPERTIES),
        "from_engine_args": _find(service, r"((?:Async)?LLMEngine\.from_engine_args\()", service_path),
    }


def _image(dlc: Path, name: str) -> dict[str, object]:
    path = f"{DLC_DIR}/{name}"
    lines = _show(dlc, "HEAD", path)
    tag = _find(lines, r"^\s+- \"([^\"]+)\"$", path)
    return {"file": path, "tag": tag, "engine": _find(lines, r"^engine: \"([^\"]+)\"$", path)}


def main() -> None:
    djl, dlc = Path(sys.argv[1]), Path(sys.argv[2])
    dlc_commit = subprocess.run(["git", f"--git-dir={dlc}", "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    global_lines = _show(dlc, "HEAD", "docs/src/global.yml")
    out = {
        "generated_by": "tests/vendor/djl/extract_vllm_releases.py",
        "dlc": {"commit": dlc_commit,
                "account": _find(global_lines, r"^example_ecr_account: \"(\d+)\"", "docs/src/global.yml"),
                "region": _find(global_lines, r"^example_region: \"([\w-]+)\"", "docs/src/global.yml"),
                "unbranched": {name: _image(dlc, name) for name in UNBRANCHED}},
        "branches": {branch: {**_branch(djl, branch), "image": _image(dlc, image) if image else None}
                     for branch, image in BRANCHES.items()},
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
