"""Execute DJL Serving's properties managers (issue 31, Deliver 1) on DJL's own integration-test
configurations: the TensorRT-LLM and transformers-neuronx handler lists of each branch's
tests/integration/llm/prepare.py, and record each verdict (accepted, or the exception text) and the
resolved values as facts with branch, commit and the line of each configuration:
tests/vendor/djl/integration_verdicts.json.

    .venv/bin/python -m tests.vendor.djl.execute_integration_configs /path/to/djl-serving.git \
        --pydantic1-python /tmp/venv-pyd1/bin/python > tests/vendor/djl/integration_verdicts.json

(the pydantic<2 virtualenv of execute_properties.py, for 0.26.0-dlc). Every branch lmi-build has a
TensorRT-LLM or Neuron profile for (execute_properties.BRANCHES) is executed; ``java_fills`` follows the
release (0.26.0-dlc has no LmiConfigRecommender).

The serving.properties of a configuration is what the branch's own ``build_<handler>_model`` writes:
prepare.py (standard library only) is executed from the branch, with ``write_model_artifacts``
replaced by a function that keeps the properties it is given (as it writes them: ``f"{key}={value}"``).
The properties manager is then executed exactly as execute_properties.py does for lmi-build's outputs
(same recorders, same keys filled for the Java front-end, ``execute_properties.java_fills``; keys
without ``option.`` other than ``engine``, such as ``batch_size`` or ``model_loading_timeout``, stay with
the Java front-end, which passes only the ``option.`` keys to the Python engine: ModelInfo.java@0.30.0-dlc
:589-594). Not executed: the recommender's "is it a text-generation model" (its rolling batch "disable"
for the stable-diffusion entries; it reads the model's config.json) and its tensor_parallel_degree "max".
Nothing of DJL is copied into the repository: the facts are.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from typing import Any

from tests.vendor.djl.execute_properties import BRANCHES, PYDANTIC_1, RECORDED, execute_branch

PREPARE = "tests/integration/llm/prepare.py"
TRTLLM = ("trtllm_handler_list", "build_trtllm_handler_model", "trtllm", "trtllm")
# the Neuron image's recommender picks tnx for a text-generation model (isTnxEnabled, 0.30.0-dlc
# LmiConfigRecommender.java:63-69): lmi-build's outputs always name one, these configurations often not
NEURON = ("transformers_neuronx_handler_list", "build_transformers_neuronx_handler_model", "tnx",
          "transformers_neuronx")
# execute_properties.BRANCHES key -> (prepare.py's dict of configurations, the function that writes one,
# the image's rolling batch, prepare.py's handler argument): every branch lmi-build has a TensorRT-LLM or
# Neuron profile for
HANDLER_LISTS: dict[str, tuple[str, str, str, str]] = {
    key: TRTLLM if key.endswith("#trtllm") else NEURON for key, (_, target, *_rest) in BRANCHES.items()
    if target in ("trtllm", "neuronx")}


def written_configurations(source: str, list_name: str, build_name: str, handler: str) -> list[dict[str, Any]]:
    """Each configuration of ``list_name`` with its line, as prepare.py's ``build_name`` writes it."""
    lines: dict[str, int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == list_name for t in node.targets):
            assert isinstance(node.value, ast.Dict)
            lines = {ast.literal_eval(key): key.lineno for key in node.value.keys if key is not None}
    namespace: dict[str, Any] = {"__name__": "djl_integration_prepare"}
    # before 0.29 prepare.py parses its command line at module level: the one DJL's CI gives it
    argv, sys.argv = sys.argv, [PREPARE, handler, next(iter(lines))]
    try:
        exec(compile(source, PREPARE, "exec"), namespace)  # the branch's own prepare.py (standard library only)
    finally:
        sys.argv = argv
    written: list[dict[str, str]] = []
    namespace["write_model_artifacts"] = lambda properties, *_args, **_kwargs: written.append(
        {key: str(value) for key, value in properties.items()})
    entries = []
    for name, line in lines.items():
        namespace[build_name](name)
        entries.append({"model": name, "fields": {}, "source": f"{PREPARE}:{line}", "properties": written.pop()})
    return entries


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("repo")
    parser.add_argument("--pydantic1-python", required=True,
                        help="the interpreter of a pydantic<2 venv, for PYDANTIC_1 branches (execute_properties.py)")
    args = parser.parse_args()
    facts: dict[str, Any] = {"source": "deepjavalibrary/djl-serving",
                             "extracted_by": "tests/vendor/djl/execute_integration_configs.py",
                             "recorders": list(RECORDED), "branches": []}
    for key, (list_name, build_name, rolling_batch, handler) in HANDLER_LISTS.items():
        profile, target, class_name, module, _ = BRANCHES[key]
        branch = key.split("#")[0]
        git = ["git", f"--git-dir={args.repo}"]
        commit = subprocess.run([*git, "rev-parse", branch], capture_output=True, text=True, check=True).stdout.strip()
        source = subprocess.run([*git, "show", f"{branch}:{PREPARE}"], capture_output=True, text=True,
                                check=True).stdout
        entries = written_configurations(source, list_name, build_name, handler)
        executed = execute_branch(args.repo, branch, class_name, module, rolling_batch, entries,
                                  args.pydantic1_python if branch in PYDANTIC_1 else sys.executable, branch)
        facts["branches"].append({"branch": branch, "commit": commit, "profile": profile, "target": target,
                                  "configurations": f"{PREPARE} {list_name}, written by {build_name}",
                                  "executed": f"djl_python.properties_manager.{module}.{class_name}",
                                  "pydantic": executed["pydantic"], "entries": entries})
    json.dump(facts, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
