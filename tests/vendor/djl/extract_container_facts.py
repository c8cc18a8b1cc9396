"""Extract, from the release branches and the published image lists, the container facts the TensorRT-LLM
and Neuron profiles state (issue 39): tests/vendor/djl/container_facts.json. Nothing here reads
lmi-build's own profiles; tests/targets/test_container_facts.py compares them with this file.

    .venv/bin/python tests/vendor/djl/extract_container_facts.py \\
        --djl /path/to/djl-serving.git --dlc /path/to/deep-learning-containers.git \\
        --sdk /path/to/sagemaker-python-sdk.git > tests/vendor/djl/container_facts.json

Read with ``git show <commit>:<path>`` (each fact with its branch, commit, path and line):

- deepjavalibrary/djl-serving, per release branch: every ``ARG name=value`` of
  serving/docker/tensorrt-llm.Dockerfile and serving/docker/pytorch-inf2.Dockerfile (a release without
  the file is recorded as such), the ``pip install tensorrt_llm==`` line, gradle/libs.versions.toml's
  ``djl`` and ``serving`` versions, and the Docker Hub tag DJL's own publishing gives the release's
  images (serving/docker/scripts/push_image_from_ECR.sh ``base_tag``, called from
  .github/workflows/docker_publish.yml with the version variable that workflow reads) and the
  tensorrt-llm image name of serving/docker/docker-compose.yml; and the commit
  that removed Neuron (1132e3ab: its subject, date, and whether pytorch-inf2.Dockerfile is left).
- aws/deep-learning-containers: each docs/src/data/djl-inference/*.yml (version, engine, first tag)
  at HEAD, and every djl-inference URI of available_images.md at the last commit that still held the
  table (the parent of ba15380d4c, "point available_images.md to website").
- aws/sagemaker-python-sdk: the ``tag_prefix`` of every version in
  sagemaker-core/src/sagemaker/core/image_uri_config/djl-{tensorrtllm,neuronx,lmi,deepspeed}.json at HEAD (deepspeed:
  the 0.26-0.27 images that held LMI-Dist), and
  the us-west-2 registry account.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from typing import Any

TRTLLM_DOCKERFILE = "serving/docker/tensorrt-llm.Dockerfile"
NEURON_DOCKERFILE = "serving/docker/pytorch-inf2.Dockerfile"
VERSIONS_FILE = "gradle/libs.versions.toml"
PUSH_SCRIPT = "serving/docker/scripts/push_image_from_ECR.sh"
PUBLISH_WORKFLOW = ".github/workflows/docker_publish.yml"
COMPOSE_FILE = "serving/docker/docker-compose.yml"
# The release branches read (v0.36.0: the release tag; its TensorRT-LLM files are master's)
BRANCHES = ("0.26.0-dlc", "0.27.0-dlc", "0.28.0-dlc", "0.29.0-dlc", "0.30.0-dlc", "0.31.0-dlc", "0.32.0-dlc",
            "0.33.0-dlc", "0.34.0-dlc", "0.35.0-dlc", "0.35.1-dlc", "v0.36.0")
NEURON_REMOVED = "1132e3ab0332f5165e2815811e1830a6742b3c5c"
DLC_DOCS = "docs/src/data/djl-inference"
DLC_TABLE_COMMIT = "ba15380d4c"  # its parent is the last available_images.md with the table
SDK_CONFIGS = "sagemaker-core/src/sagemaker/core/image_uri_config"
SDK_FILES = ("djl-tensorrtllm.json", "djl-neuronx.json", "djl-lmi.json", "djl-deepspeed.json")  # deepspeed: 0.26-0.27 LMI-Dist


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={repo}", *args], capture_output=True, text=True, check=True).stdout


def show(repo: str, commit: str, path: str) -> str | None:
    done = subprocess.run(["git", f"--git-dir={repo}", "show", f"{commit}:{path}"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def lines_matching(text: str, pattern: str) -> list[tuple[int, re.Match[str]]]:
    return [(number, match) for number, line in enumerate(text.splitlines(), 1)
            if (match := re.search(pattern, line))]


def dockerfile_facts(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    args = {m.group(1): {"value": m.group(2).strip('"'), "line": n}
            for n, m in lines_matching(text, r"^ARG ([A-Za-z_]+)=(.*)$")}
    pip = [{"text": m.group(0).strip(), "line": n} for n, m in lines_matching(text, r"pip install tensorrt_llm==\S+")]
    return {"args": args, "pip_tensorrt_llm": pip}


def publish_facts(repo: str, commit: str) -> dict[str, Any] | None:
    """The Docker Hub tag DJL's own publishing gives the release's images, when the branch has it."""
    script, workflow = show(repo, commit, PUSH_SCRIPT), show(repo, commit, PUBLISH_WORKFLOW)
    if script is None or workflow is None:
        return None
    base = lines_matching(script, r'^base_tag="(.*)"$')
    calls = lines_matching(workflow, r"push_image_from_ECR\.sh \$(\w+) deepjavalibrary/djl-serving")
    if not base or not calls:
        return None
    variable = calls[0][1].group(1)
    reads = lines_matching(workflow, rf"{variable}=\$\(awk -F '=' '/(\w+) /")
    return {"base_tag": {"value": base[0][1].group(1), "line": base[0][0], "path": PUSH_SCRIPT},
            "version_variable": {"value": variable, "line": calls[0][0], "path": PUBLISH_WORKFLOW},
            "version_key": ({"value": reads[0][1].group(1), "line": reads[0][0], "path": PUBLISH_WORKFLOW}
                            if reads else None)}


def djl_facts(repo: str) -> dict[str, Any]:
    branches = []
    for branch in BRANCHES:
        commit = git(repo, "rev-parse", f"{branch}^{{commit}}").strip()
        versions = show(repo, commit, VERSIONS_FILE) or ""
        gradle = {m.group(1): {"value": m.group(2), "line": n}
                  for n, m in lines_matching(versions, r'^(djl|serving) = "([^"]+)"')}
        compose = lines_matching(show(repo, commit, COMPOSE_FILE) or "", r'image: "(deepjavalibrary/djl-serving:\S*tensorrt-llm\S*)"')
        branches.append({"branch": branch, "commit": commit,
                         "compose_tensorrt_llm_image": ({"value": compose[0][1].group(1), "line": compose[0][0],
                                                         "path": COMPOSE_FILE} if compose else None),
                         "tensorrt_llm_dockerfile": dockerfile_facts(show(repo, commit, TRTLLM_DOCKERFILE)),
                         "neuron_dockerfile": dockerfile_facts(show(repo, commit, NEURON_DOCKERFILE)),
                         "versions": gradle, "docker_hub": publish_facts(repo, commit)})
    subject, date = git(repo, "show", "-s", "--format=%s%n%ad", "--date=short", NEURON_REMOVED).splitlines()[:2]
    removed = {"commit": NEURON_REMOVED, "subject": subject, "date": date,
               "neuron_dockerfile_left": show(repo, NEURON_REMOVED, NEURON_DOCKERFILE) is not None,
               "tnx_properties_left": show(repo, NEURON_REMOVED, "engines/python/setup/djl_python/properties_manager/"
                                                                 "tnx_properties.py") is not None}
    return {"repo": "deepjavalibrary/djl-serving", "branches": branches, "neuron_removed": removed}


def dlc_facts(repo: str) -> dict[str, Any]:
    head = git(repo, "rev-parse", "HEAD").strip()
    docs = []
    for name in sorted(git(repo, "ls-tree", "--name-only", f"HEAD:{DLC_DOCS}").split()):
        text = show(repo, head, f"{DLC_DOCS}/{name}") or ""
        fields = {m.group(1): m.group(2).strip('"') for _, m in lines_matching(text, r'^(\w+): (.*)$')}
        tags = lines_matching(text, r'^  - "([^"]+)"$')
        docs.append({"path": f"{DLC_DOCS}/{name}", "version": fields.get("version"), "engine": fields.get("engine"),
                     "accelerator": fields.get("accelerator"),
                     "tag": tags[0][1].group(1) if tags else None, "line": tags[0][0] if tags else None})
    table_commit = git(repo, "rev-parse", f"{DLC_TABLE_COMMIT}~1").strip()
    table = show(repo, table_commit, "available_images.md") or ""
    uris = [{"uri": m.group(1), "line": n}
            for n, m in lines_matching(table, r"(\d+\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com/djl-inference:[\w.-]+)")]
    return {"repo": "aws/deep-learning-containers", "commit": head, "docs": docs,
            "available_images": {"commit": table_commit, "path": "available_images.md", "uris": uris}}


def sdk_facts(repo: str) -> dict[str, Any]:
    head = git(repo, "rev-parse", "HEAD").strip()
    files = []
    for name in SDK_FILES:
        path = f"{SDK_CONFIGS}/{name}"
        text = show(repo, head, path) or ""
        config = json.loads(text)
        prefixes = {m.group(1): n for n, m in lines_matching(text, r'"tag_prefix": "([^"]+)"')}
        versions = config.get("versions", {})
        registries = {version: facts.get("registries", {}).get("us-west-2") for version, facts in versions.items()}
        files.append({"path": path, "versions": {version: {"tag_prefix": facts["tag_prefix"],
                                                           "line": prefixes.get(facts["tag_prefix"]),
                                                           "us_west_2_account": registries[version]}
                                                 for version, facts in versions.items() if "tag_prefix" in facts}})
    return {"repo": "aws/sagemaker-python-sdk", "commit": head, "files": files}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--djl", required=True, help="a git directory of deepjavalibrary/djl-serving")
    parser.add_argument("--dlc", required=True, help="a git directory of aws/deep-learning-containers")
    parser.add_argument("--sdk", required=True, help="a git directory of aws/sagemaker-python-sdk")
    args = parser.parse_args()
    facts = {"extracted_by": "tests/vendor/djl/extract_container_facts.py", "djl_serving": djl_facts(args.djl),
             "deep_learning_containers": dlc_facts(args.dlc), "sagemaker_python_sdk": sdk_facts(args.sdk)}
    json.dump(facts, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
