"""Extract, from transformers-neuronx's own source, the module-level names each version defines or
re-exports, for the tests' expectations of what lmi-build's driver may import (names.json).

Run where a clone of aws-neuron/transformers-neuronx is at hand:

    python tests/vendor/tnx/extract_names.py /path/to/transformers-neuronx > tests/vendor/tnx/names.json

The public repository tags no release: each commit below is the public sync nearest a pinned
version (its src/transformers_neuronx/version.py says only "0.<minor>.x"), so the mapping is inferred
and says so. Nothing here reads lmi-build's own tables.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

# (pinned version of an LMI Neuron image, public commit, why this commit)
COMMITS = [
    ("0.9.474", "8b01968", "2024-01-02 sync of 12/28 (version.py 0.9.x); SDK 2.16 (LMI 0.26)"),
    ("0.10.0.360", "0623de2", "2024-04-15 sync (version.py 0.10.x); SDK 2.18 (LMI 0.27/0.28)"),
    ("0.11.351", "c8d6bdc", "2024-07-03 sync of 06/28 (version.py 0.10.x); SDK 2.19 (LMI 0.29)"),
    ("0.12.313", "6c0b875", "release-2.20 branch head, 2024-08-23 (version.py 0.12.x); SDK 2.20 (LMI 0.30)"),
    ("0.13.380", "1ade6d7", "2024-12-26 sync of 12/12 (version.py 0.13.x); SDK 2.21 (LMI 0.32-0.34)"),
]
MODULES = ["__init__", "config", "constants", "module", "modeling_auto", "bloom/model", "gpt2/model",
           "gptj/model", "gptneox/model", "llama/model", "mistral/model", "mixtral/model", "opt/model"]


def _names(source: str) -> list[str]:
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return sorted(names)


def _show(repo: str, commit: str, path: str) -> str | None:
    done = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, text=True,
                          check=False)
    return done.stdout if done.returncode == 0 else None


def main(repo: str) -> int:
    versions = {}
    for version, commit, why in COMMITS:
        full = subprocess.run(["git", "-C", repo, "rev-parse", commit], capture_output=True, text=True,
                              check=True).stdout.strip()
        modules = {}
        for module in MODULES:
            source = _show(repo, commit, f"src/transformers_neuronx/{module}.py")
            if source is not None:
                modules[module.replace("/", ".")] = _names(source)
        versions[version] = {"commit": full, "inferred": True, "why": why,
                             "source": f"aws-neuron/transformers-neuronx {full[:7]} src/transformers_neuronx/",
                             "modules": modules}
    json.dump({"generated_by": "tests/vendor/tnx/extract_names.py", "versions": versions}, sys.stdout, indent=1,
              sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
