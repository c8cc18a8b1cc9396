"""Extract DJL Serving's own Neuron configurations (issue 21, Deliver item 2) into
tests/fixtures/neuron-corpus/corpus.json: every transformers-neuronx entry of the integration tests'
tests/integration/llm/prepare.py and the AOT tutorial's serving.properties, at each LMI Neuron
release branch, with its serving.properties keys and where it is written (path@branch:line).

Run where a clone (or bare mirror) of deepjavalibrary/djl-serving is at hand:

    python tests/vendor/djl/extract_neuron_corpus.py /path/to/djl-serving.git > tests/fixtures/neuron-corpus/corpus.json

Nothing here reads lmi-build's own tables. The one belief added here is MODELS: which public
Hugging Face model each s3://djl-llm/ path holds (the bucket is DJL's own; its names are read as the
Hub model they spell, so every such mapping says ``inferred``).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from typing import Any

BRANCHES = ["0.28.0-dlc", "0.29.0-dlc", "0.30.0-dlc"]
PREPARE = "tests/integration/llm/prepare.py"
# prepare.py's dicts of transformers-neuronx configurations; correctness_model_list also holds GPU
# entries, of which only the "neuronx-" ones are taken.
SECTIONS = ["transformers_neuronx_handler_list", "transformers_neuronx_aot_handler_list",
            "transformers_neuronx_neo_list", "correctness_model_list"]
TUTORIAL = ("0.30.0-dlc", "serving/docs/lmi/tutorials/tnx_aot_tutorial.md")
TUTORIAL_MODEL = "meta-llama/Llama-2-70b-hf"  # the tutorial's model_name (tnx_aot_tutorial.md:81)

# model reference as written -> (Hugging Face id, inferred?)
MODELS: dict[str, tuple[str, bool]] = {
    "gpt2": ("openai-community/gpt2", False),
    "s3://djl-llm/gpt2/": ("openai-community/gpt2", True),
    "s3://djl-llm/opt-1.3b/": ("facebook/opt-1.3b", True),
    "s3://djl-llm/gpt-j-6b/": ("EleutherAI/gpt-j-6b", True),
    "s3://djl-llm/pythia-2.8b/": ("EleutherAI/pythia-2.8b", True),
    "s3://djl-llm/bloom-7b1/": ("bigscience/bloom-7b1", True),
    "s3://djl-llm/mistral-7b/": ("mistralai/Mistral-7B-v0.1", True),
    "s3://djl-llm/mistral-7b-instruct-v02/": ("mistralai/Mistral-7B-Instruct-v0.2", True),
    "s3://djl-llm/mixtral-8x7b/": ("mistralai/Mixtral-8x7B-v0.1", True),
    "s3://djl-llm/mixtral-8x22b/": ("mistralai/Mixtral-8x22B-v0.1", True),
    "s3://djl-llm/llama-2-7b-split-inf2/split-model/": ("meta-llama/Llama-2-7b-hf", True),
    "s3://djl-llm/llama-2-13b-hf/": ("meta-llama/Llama-2-13b-hf", True),
    "s3://djl-llm/llama-3-8b-hf/": ("meta-llama/Meta-Llama-3-8B", True),
    "s3://djl-llm/llama-3.1-8b-hf/": ("meta-llama/Llama-3.1-8B", True),
    "s3://djl-llm/tinyllama-1.1b-chat/": ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", True),
    "s3://djl-llm/codellama-34b/": ("codellama/CodeLlama-34b-hf", True),
    "bullerwins/Codestral-22B-v0.1-hf": ("bullerwins/Codestral-22B-v0.1-hf", False),
}


def _show(repo: str, ref: str, path: str) -> str:
    return subprocess.run(["git", f"--git-dir={repo}", "show", f"{ref}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def _commit(repo: str, ref: str) -> str:
    return subprocess.run(["git", f"--git-dir={repo}", "rev-parse", ref], capture_output=True, text=True,
                          check=True).stdout.strip()


def _value(node: ast.expr) -> Any:
    return ast.literal_eval(node)


def _text(value: Any) -> str:
    """A serving.properties value as DJL's prepare.py writes it (str() of the Python value)."""
    return str(value)


def _entry(section: str, name: str, line: int, branch: str, commit: str, properties: dict[str, Any]) -> dict[str, Any]:
    reference = str(properties.get("option.model_id", ""))
    model, inferred = MODELS.get(reference, ("", True))
    return {"id": f"{branch}/{section}/{name}", "branch": branch, "commit": commit, "section": section,
            "name": name, "cite": f"deepjavalibrary/djl-serving {PREPARE}@{branch}:{line}",
            "model_reference": reference, "model": model, "model_inferred": inferred,
            "properties": {key: _text(value) for key, value in properties.items()}}


def prepare_entries(repo: str, branch: str) -> list[dict[str, Any]]:
    commit = _commit(repo, branch)
    tree = ast.parse(_show(repo, branch, PREPARE))
    entries = []
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in SECTIONS and isinstance(node.value, ast.Dict)):
            continue
        section = node.targets[0].id
        for key, value in zip(node.value.keys, node.value.values, strict=True):
            assert key is not None
            name = _value(key)
            if section == "correctness_model_list" and not name.startswith("neuronx-"):
                continue
            entries.append(_entry(section, name, key.lineno, branch, commit, _value(value)))
    return entries


def tutorial_entry(repo: str) -> dict[str, Any]:
    """The first serving.properties block of the AOT tutorial (the one the partition job reads)."""
    branch, path = TUTORIAL
    lines = _show(repo, branch, path).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("engine="))
    properties: dict[str, str] = {}
    for line in lines[start:]:
        found = re.fullmatch(r"([A-Za-z_.]+)=(.*)", line.strip())
        if found is None:
            break
        properties[found.group(1)] = found.group(2)
    entry = _entry("tnx_aot_tutorial", "llama-2-70b", start + 1, branch, _commit(repo, branch), properties)
    entry["cite"] = f"deepjavalibrary/djl-serving {path}@{branch}:{start + 1}-{start + len(properties)}"
    entry["model"], entry["model_inferred"] = TUTORIAL_MODEL, False
    return entry


def main(repo: str) -> None:
    entries = [entry for branch in BRANCHES for entry in prepare_entries(repo, branch)]
    entries.append(tutorial_entry(repo))
    json.dump({"source": "deepjavalibrary/djl-serving", "extracted_by": "tests/vendor/djl/extract_neuron_corpus.py",
               "entries": entries}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
