"""Extract, from TensorRT-LLM's own source, the argparse flags of the example scripts lmi-build's
steps call in the container, per release and script path, into ``script_flags.json``, for the
example-script stand-in (tests/standins/trtllm-example-script). Nothing here reads lmi-build's own tables.

Scripts: every ``examples/*/convert_checkpoint.py`` and ``examples/quantization/quantize.py`` the
release's tree has, and (0.7.1, whose Llama builds with examples/llama/build.py, extracted in
build_flags.json) ``examples/llama/hf_llama_convert.py``. A script's flags are its ``add_argument``
calls (in ``parse_arguments()`` or the ``__main__`` block), in build_flags.json's form (option strings,
type, default, choices, action, nargs, const, required, line). Run where a git copy of NVIDIA/TensorRT-LLM
(or a fork holding the commits) is at hand:

    python tests/vendor/trtllm/extract_script_flags.py /path/to/TensorRT-LLM > tests/vendor/trtllm/script_flags.json

or ``--files DIR`` with single files saved as ``DIR/<commit>/<path>`` (extract_build_flags.py's FilesSource:
there a release's scripts are the files saved under its commit's ``examples``).

The releases and the commits read are extract_build_flags.py's RELEASES: a release whose tag commit is
not in the copy is read at the commit named there (``inferred``), one with none is ``missing``; the
stand-in then runs its scripts unchecked, with a printed warning. Nothing is filled in from anywhere else.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from extract_build_flags import RELEASES, TAG_PROBES, Source, _argument, _literal, source

PATTERNS = ("examples/*/convert_checkpoint.py", "examples/quantization/quantize.py",
            "examples/llama/hf_llama_convert.py")


def _flags(source: str) -> dict[str, dict[str, Any]]:
    """Every ``<parser>.add_argument(...)`` call of a script, in source order."""
    tree = ast.parse(source)
    calls = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"),
                   key=lambda n: n.lineno)
    flags: dict[str, dict[str, Any]] = {}
    for node in calls:
        name, entry = _argument(node)
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        for key in ("const", "required"):
            if key in keywords:
                known, value = _literal(keywords[key])
                entry[key if known else f"{key}_expr"] = value
        if name in flags:
            raise ValueError(f"--{name} is added twice (line {flags[name]['line']} and {node.lineno})")
        flags[name] = {**entry, "line": node.lineno}
    return flags


def extract(src: Source) -> dict[str, Any]:
    releases: dict[str, Any] = {}
    for release, _tool, tag_commit, commit, why in RELEASES:
        entry: dict[str, Any] = {"tag_commit": tag_commit, "why": why}
        if commit is None:
            releases[release] = {**entry, "missing": True}
            continue
        if not src.has(commit):
            releases[release] = {**entry, "missing": True, "why": f"{why}; {commit[:8]} not in {src.name}"}
            continue
        tree = src.paths(commit, "examples")
        scripts: dict[str, Any] = {}
        for path in sorted(p for p in tree if any(fnmatch.fnmatchcase(p, pattern) for pattern in PATTERNS)):
            read_at_tag = TAG_PROBES.get(release, {}).get("read", {}).get(path)
            try:
                scripts[path] = {**({"tag_read": read_at_tag} if read_at_tag else {}),
                                 "flags": _flags(src.show(commit, path))}
            except (SyntaxError, ValueError) as error:
                scripts[path] = {"missing": True, "why": f"not extracted: {error}"}
        probe = {"tag_probe": TAG_PROBES[release]["probe"]} if release in TAG_PROBES else {}
        releases[release] = {**entry, "commit": commit, "inferred": commit != tag_commit, **probe,
                             "scripts": scripts}
    return {"generated_by": "tests/vendor/trtllm/extract_script_flags.py",
            "about": "argparse of TensorRT-LLM's example scripts (convert_checkpoint.py per family, "
                     "quantization/quantize.py, 0.7's llama/hf_llama_convert.py) per release, read from "
                     "NVIDIA/TensorRT-LLM source at the commit named; never from lmi-build's flags.toml",
            "releases": releases}


def main(argv: list[str]) -> int:
    src = source(argv)
    if src is None:
        print(__doc__, file=sys.stderr)
        return 2
    json.dump(extract(src), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
