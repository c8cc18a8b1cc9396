"""Execute DJL Serving's properties managers (issue 31, Deliver 1) on DJL's own integration-test
configurations: the TensorRT-LLM and transformers-neuronx handler lists of each branch's
tests/integration/llm/prepare.py and, from 0.29.0-dlc, its SageMaker Neo lists (trtllm_neo_list,
transformers_neuronx_neo_list: what DJL's CI compiles ahead of time, lmi-build's own job), and record each
verdict (accepted, or the exception text) and the resolved values as facts with branch, commit, the list
(each branch record's ``configurations``) and the line of each configuration:
tests/vendor/djl/integration_verdicts.json.

    .venv/bin/python -m tests.vendor.djl.execute_integration_configs /path/to/djl-serving.git \
        --pydantic1-python /tmp/venv-pyd1/bin/python > tests/vendor/djl/integration_verdicts.json

(the pydantic<2 virtualenv of execute_properties.py, for 0.26.0-dlc). Every branch lmi-build has a
TensorRT-LLM or Neuron profile for (execute_properties.BRANCHES) is executed, each list its prepare.py has;
``java_fills`` follows the release (0.26.0-dlc has no LmiConfigRecommender; 0.28/0.29 read an unset
rolling batch on Neuron as disable).

The serving.properties of a configuration is what the branch's own ``build_<handler>_model`` writes:
prepare.py (standard library only) is executed from the branch, with ``write_model_artifacts``
replaced by a function that keeps the properties it is given (as it writes them: ``f"{key}={value}"``).
A Neo list's builder calls the branch's own ``create_neo_input_model``, which writes the Neo input,
models/uncompiled/serving.properties (every key but option.model_id), under the working directory: it runs
in a temporary one, with its download of the weights (``subprocess.check_call`` of s5cmd or aws s3 sync)
replaced by nothing, and the file it wrote is read back. Neo compiles that input in the same image and
serves it with the same keys (TensorRT-LLM: the toolkit's create_model_repo, then those keys and
engine=MPI, sm_neo_trt_llm_partition.py@0.30.0-dlc:42-67; Neuron: the handler's partition mode, which
requires option.tensor_parallel_degree, then the keys again, sm_neo_neuron_partition.py@0.30.0-dlc:200-216,
229-264): the properties manager executed on the input is what the container then reads. Not executed:
the Neo partition scripts themselves (the toolkit is not in djl-serving; the Neuron partition loads the
model).

The properties manager is executed exactly as execute_properties.py does for lmi-build's outputs
(same recorders, same keys filled for the Java front-end, ``execute_properties.java_fills``; keys
without ``option.`` other than ``engine``, such as ``batch_size`` or ``model_loading_timeout``, stay with
the Java front-end, which passes only the ``option.`` keys to the Python engine: ModelInfo.java@0.30.0-dlc
:589-594). Not executed: the recommender's "is it a text-generation model" (its rolling batch "disable"
for the stable-diffusion entries where an unset one is not disable already; it reads the model's
config.json) and its tensor_parallel_degree "max". Nothing of DJL is copied into the repository: the facts
are.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from tests.vendor.djl.execute_properties import BRANCHES, PYDANTIC_1, RECORDED, execute_branch

PREPARE = "tests/integration/llm/prepare.py"
# (prepare.py's dict of configurations, the function that writes one, the image's rolling batch, prepare.py's
# handler argument)
ConfigurationList = tuple[str, str, str, str]
TRTLLM = ("trtllm_handler_list", "build_trtllm_handler_model", "trtllm", "trtllm")
# the Neuron image's recommender picks tnx for a text-generation model (isTnxEnabled, 0.30.0-dlc
# LmiConfigRecommender.java:63-69): lmi-build's outputs always name one, these configurations often not
NEURON = ("transformers_neuronx_handler_list", "build_transformers_neuronx_handler_model", "tnx",
          "transformers_neuronx")
# SageMaker Neo's configurations (prepare.py from 0.29.0-dlc): the compiled model is served by the same image
TRTLLM_NEO = ("trtllm_neo_list", "build_trtllm_neo_model", "trtllm", "trtllm_neo")
NEURON_NEO = ("transformers_neuronx_neo_list", "build_transformers_neuronx_neo_model", "tnx",
              "transformers_neuronx_neo")
# execute_properties.BRANCHES key -> the lists executed there (a list the branch's prepare.py lacks is
# skipped): every branch lmi-build has a TensorRT-LLM or Neuron profile for
HANDLER_LISTS: dict[str, tuple[ConfigurationList, ConfigurationList]] = {
    key: (TRTLLM, TRTLLM_NEO) if key.endswith("#trtllm") else (NEURON, NEURON_NEO)
    for key, (_, target, *_rest) in BRANCHES.items() if target in ("trtllm", "neuronx")}
NEO_INPUT = Path("models", "uncompiled", "serving.properties")


def configuration_lines(source: str, list_name: str) -> dict[str, int]:
    """Each configuration of prepare.py's ``list_name`` and its line (none where the branch lacks the list)."""
    lines: dict[str, int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == list_name for t in node.targets):
            assert isinstance(node.value, ast.Dict)
            lines = {ast.literal_eval(key): key.lineno for key in node.value.keys if key is not None}
    return lines


def written_configurations(source: str, list_name: str, build_name: str, handler: str) -> list[dict[str, Any]]:
    """Each configuration of ``list_name`` with its line, as prepare.py's ``build_name`` writes it."""
    lines = configuration_lines(source, list_name)
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
    # create_neo_input_model's download of the weights (s5cmd or aws s3 sync) is not run
    namespace["subprocess"] = types.SimpleNamespace(check_call=lambda command: None)
    entries = []
    for name, line in lines.items():
        with tempfile.TemporaryDirectory() as work:  # create_neo_input_model writes under the working directory
            cwd = os.getcwd()
            os.chdir(work)
            try:
                namespace[build_name](name)
                properties = written.pop() if written else _read_properties(Path(work, NEO_INPUT).read_text())
            finally:
                os.chdir(cwd)
        entries.append({"model": name, "fields": {}, "source": f"{PREPARE}:{line}", "properties": properties})
    return entries


def _read_properties(text: str) -> dict[str, str]:
    """serving.properties as create_neo_input_model writes it: ``f"{key}={value}\\n"``."""
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("repo")
    parser.add_argument("--pydantic1-python", required=True,
                        help="the interpreter of a pydantic<2 venv, for PYDANTIC_1 branches (execute_properties.py)")
    args = parser.parse_args()
    facts: dict[str, Any] = {"source": "deepjavalibrary/djl-serving",
                             "extracted_by": "tests/vendor/djl/execute_integration_configs.py",
                             "recorders": list(RECORDED), "branches": []}
    for key, lists in HANDLER_LISTS.items():
        profile, target, class_name, module, _ = BRANCHES[key]
        branch = key.split("#")[0]
        git = ["git", f"--git-dir={args.repo}"]
        commit = subprocess.run([*git, "rev-parse", branch], capture_output=True, text=True, check=True).stdout.strip()
        source = subprocess.run([*git, "show", f"{branch}:{PREPARE}"], capture_output=True, text=True,
                                check=True).stdout
        for list_name, build_name, rolling_batch, handler in lists:
            if not configuration_lines(source, list_name):
                continue
            entries = written_configurations(source, list_name, build_name, handler)
            executed = execute_branch(args.repo, branch, class_name, module, rolling_batch, entries,
                                      args.pydantic1_python if branch in PYDANTIC_1 else sys.executable, branch)
            written_by = f"{build_name} ({NEO_INPUT})" if list_name.endswith("_neo_list") else build_name
            facts["branches"].append({"branch": branch, "commit": commit, "profile": profile, "target": target,
                                      "configurations": f"{PREPARE} {list_name}, written by {written_by}",
                                      "executed": f"djl_python.properties_manager.{module}.{class_name}",
                                      "pydantic": executed["pydantic"], "entries": entries})
    json.dump(facts, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
