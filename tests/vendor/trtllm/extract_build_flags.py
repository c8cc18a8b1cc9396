"""Extract, from TensorRT-LLM's own source, the argparse flags of ``trtllm-build`` (and of 0.7.1's
``examples/llama/build.py``) per release, for the test stand-in and the flags.toml comparison
(``build_flags.json``). Nothing here reads lmi-build's own tables.

Run where a git copy of NVIDIA/TensorRT-LLM (or a fork holding the commits below) is at hand:

    python tests/vendor/trtllm/extract_build_flags.py /path/to/TensorRT-LLM > tests/vendor/trtllm/build_flags.json

or, where only single files could be had (the repository is too big to copy whole), with a directory
that holds each file read under the full commit it was read at, ``DIR/<commit>/<path>``:

    python tests/vendor/trtllm/extract_build_flags.py --files DIR > tests/vendor/trtllm/build_flags.json

It reads, with ``git show <commit>:<path>`` (or from ``DIR/<commit>/<path>``),
``tensorrt_llm/commands/build.py`` ``parse_arguments``
and the plugin flags ``add_plugin_argument`` adds from ``tensorrt_llm/plugin/plugin.py``
(``PluginConfig`` fields named in ``cli_plugin_args``: dtype fields take the plugin dtype options,
with None shown as "disable"; bool fields take enable|disable; others their own type). Each flag:
its option strings, type, default, choices, action and nargs, as the source writes them (an
expression it cannot evaluate, e.g. ``severity_map.keys()``, is kept as text under ``*_expr``).

A release whose tag commit is not in the copy is read at the nearest commit that is, marked
``inferred`` with why; a release with no such commit is written as ``missing`` with why, never
filled from anywhere else.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BUILD = "tensorrt_llm/commands/build.py"
PLUGIN = "tensorrt_llm/plugin/plugin.py"
LEGACY = "examples/llama/build.py"

# (release, tool, tag commit (tensorrtllm_backend's submodule pointer at that tag), commit read, why)
RELEASES: list[tuple[str, str, str, str | None, str]] = [
    ("0.7.1", "legacy_build", "80bc07510ac4ddf13c0d76ad295cdb2b75614618",
     "80bc07510ac4ddf13c0d76ad295cdb2b75614618", "tag v0.7.1"),
    ("0.8.0", "trtllm_build", "5955b8afbad2ddcc3156202b16c567e94c52248f",
     "5955b8afbad2ddcc3156202b16c567e94c52248f", "tag v0.8.0"),
    ("0.9.0", "trtllm_build", "250d9c293d5edbc2a45c20775b3150b1eb68b364",
     "250d9c293d5edbc2a45c20775b3150b1eb68b364", "tag v0.9.0"),
    ("0.11.0", "trtllm_build", "05316d3313360012536ace46c781518f5afae75e",
     "9691e12bce7ae1c126c435a049eb516eb119486c",
     "the tag commit (release branch) was not in the copy read: read at main 9691e12b (2024-06-25, "
     "version.py 0.11.0.dev2024062500, the last 0.11 dev snapshot on main before the release)"),
    ("0.12.0", "trtllm_build", "28fb9aacaa5a05494635194a9cbb264da9a744bd",
     "a681853d3803ee5893307e812530b5e7004bb6e1",
     "the tag commit (release branch) was not in the copy read: read at main a681853d (2024-07-30, "
     "version.py 0.12.0.dev2024073000, the newest 0.12 dev snapshot in the copy)"),
    # v0.21.0rc1: tensorrtllm_backend d07ec318 "chore: update tensorrt llm to 0.21.0rc1" (2025-06-11)
    # sets the tensorrt_llm submodule to 9c012d5b (b4b1185a, named here before, is tag v0.21.0).
    ("0.21.0rc1", "trtllm_build", "9c012d5bf8936b040b3822b35c823460e8f63a75", None,
     "no copy of the 0.21.0rc1 sources could be read: NVIDIA/TensorRT-LLM and the forks tried that hold "
     "2025 commits are over the 500 MiB snapshot limit, the forks that could be fetched end in 2024 "
     "(newest 0.17.0.dev2024121700), the code index holds build.py and plugin.py at commits of unknown "
     "date but not at 9c012d5b, b4b1185a, ae8270b7 or the four 2025-05/06 tensorrtllm_backend submodule "
     "pointers tried, and the PyPI package is a stub that downloads from pypi.nvidia.com (not reachable)"),
    ("1.0.0", "trtllm_build", "ae8270b713446948246f16fadf4e2a32e35d0f62", None,
     "no copy of the 1.0.0 sources could be read (as 0.21.0rc1; the index holds neither file at "
     "ae8270b7)"),
]


# Where a release was read at a snapshot rather than its tag commit: its tag commit's files probed one by one
# in the code index (read_file by repo, path and commit; issue 31 item 9). "probe" says what was asked and what
# was not stored there, so the snapshot's reading of those stays inferred; "read" names the files that were
# stored at the tag and what their reading showed against the snapshot's (hand-read, as converter_flags.json).
TAG_PROBES: dict[str, dict[str, Any]] = {
    "0.11.0": {
        "probe": "05316d33 asked for tensorrt_llm/commands/build.py, tensorrt_llm/plugin/plugin.py, "
                 "examples/{llama,chatglm}/convert_checkpoint.py and examples/quantization/quantize.py: only "
                 "examples/llama/convert_checkpoint.py is stored at the tag; trtllm-build's flags and the other "
                 "scripts stay the 9691e12b snapshot's (inferred)",
        "read": {"examples/llama/convert_checkpoint.py":
                 "the same parse_arguments flags and choices as 9691e12b (converter_flags.json llama@05316d33)"},
    },
    "0.12.0": {
        "probe": "28fb9aac asked for tensorrt_llm/commands/build.py, tensorrt_llm/models/__init__.py and "
                 "examples/{llama,gpt,falcon}/convert_checkpoint.py, examples/quantization/quantize.py: none is "
                 "stored at the tag; everything stays the a681853d snapshot's (inferred)",
        "read": {},
    },
}

def _literal(node: ast.AST | None) -> tuple[bool, Any]:
    if node is None:
        return True, None
    try:
        return True, ast.literal_eval(node)
    except ValueError:
        return False, ast.unparse(node)


def _argument(call: ast.Call, prefix: str = "") -> tuple[str, dict[str, Any]]:
    options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    dest = keywords.get("dest")
    name = str(dest.value) if isinstance(dest, ast.Constant) else next(
        (o for o in options if o.startswith("--")), options[0]).lstrip("-")
    entry: dict[str, Any] = {"options": options}
    if prefix:
        entry["from"] = prefix
    for key in ("type", "default", "choices", "action", "nargs"):
        node = keywords.get(key)
        if node is None:
            continue
        if key == "type":
            entry["type"] = ast.unparse(node)
            continue
        known, value = _literal(node)
        entry[key if known else f"{key}_expr"] = value
    return name, entry


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise SystemExit(f"no function {name}")


def _parse_arguments(source: str) -> tuple[dict[str, dict[str, Any]], bool]:
    """The add_argument calls of parse_arguments(), in order; and whether it calls add_plugin_argument."""
    function = _function(ast.parse(source), "parse_arguments")
    calls = sorted((node for node in ast.walk(function) if isinstance(node, ast.Call)), key=lambda n: n.lineno)
    flags: dict[str, dict[str, Any]] = {}
    plugins = False
    for node in calls:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "add_argument":
            name, entry = _argument(node)
            flags[name] = {**entry, "line": node.lineno}
        elif isinstance(func, ast.Name) and func.id == "add_plugin_argument":
            plugins = True
    return flags, plugins


def _module_value(tree: ast.Module, name: str) -> Any:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def _plugin_fields(tree: ast.Module) -> list[tuple[str, str, Any]]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "PluginConfig":
            fields = []
            for item in node.body:
                if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                    continue
                value = item.value
                if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "field":
                    value = next((k.value for k in value.keywords if k.arg == "default"), None)
                known, default = _literal(value)
                fields.append((item.target.id.lstrip("_"), ast.unparse(item.annotation),
                               default if known else f"<{default}>"))
            return fields
    raise SystemExit("no class PluginConfig")


def _plugin_arguments(source: str) -> dict[str, dict[str, Any]]:
    """What add_plugin_argument() adds: PluginConfig fields named in cli_plugin_args."""
    tree = ast.parse(source)
    rule = ast.unparse(_function(tree, "add_plugin_argument"))
    cli = _module_value(tree, "cli_plugin_args")
    if cli is None:
        raise SystemExit("plugin.py: no cli_plugin_args list")
    if "plugin_options" in rule:  # 0.8/0.9: one option list for every dtype field
        default_options = _module_value(tree, "plugin_options")
        option_map: dict[str, list[Any]] = {}
    elif "DEFAULT_PLUGIN_DTYPE_OPTIONS" in rule:  # 0.10 on: per-field lists, None shown as "disable"
        default_options = _module_value(tree, "DEFAULT_PLUGIN_DTYPE_OPTIONS")
        option_map = _module_value(tree, "PLUGIN_DTYPE_OPTIONS_MAP") or {}
    else:
        raise SystemExit("plugin.py: add_plugin_argument has a shape this script does not know")
    flags: dict[str, dict[str, Any]] = {}
    for name, annotation, default in _plugin_fields(tree):
        if name not in cli:
            continue
        entry: dict[str, Any] = {"options": [f"--{name}"], "from": "plugin"}
        if annotation in ("str", "Optional[str]"):
            options = option_map.get(name, default_options)
            entry.update(type="str", choices=[o if o else "disable" for o in options],
                         default=default if default else ("disable" if "else \"disable\"" in rule
                                                          or "else 'disable'" in rule else None))
        elif annotation == "bool":
            entry.update(type="str", choices=["enable", "disable"], default="enable" if default else "disable")
        else:
            entry.update(type=annotation, default=default)
        flags[name] = entry
    missing = [name for name in cli if name not in flags]
    if missing:
        raise SystemExit(f"plugin.py: cli_plugin_args names no PluginConfig field: {missing}")
    return flags


class GitSource:
    """Files of NVIDIA/TensorRT-LLM read from a git copy with ``git show <commit>:<path>``."""

    def __init__(self, repo: str) -> None:
        self.name = repo

    def has(self, commit: str) -> bool:
        return subprocess.run(["git", "-C", self.name, "cat-file", "-e", f"{commit}^{{commit}}"],
                              capture_output=True, check=False).returncode == 0

    def show(self, commit: str, path: str) -> str:
        return subprocess.run(["git", "-C", self.name, "show", f"{commit}:{path}"], capture_output=True,
                              text=True, check=True).stdout

    def paths(self, commit: str, under: str) -> list[str]:
        return subprocess.run(["git", "-C", self.name, "ls-tree", "-r", "--name-only", commit, under],
                              capture_output=True, text=True, check=True).stdout.split()


class FilesSource:
    """Single files saved as ``DIR/<full commit>/<path>``, for when no git copy can be had: a commit is
    present when its directory is, and a file missing under it is an error, never skipped."""

    def __init__(self, root: str) -> None:
        self.name = root
        self.root = Path(root)

    def has(self, commit: str) -> bool:
        return (self.root / commit).is_dir()

    def show(self, commit: str, path: str) -> str:
        return (self.root / commit / path).read_text(encoding="utf-8")

    def paths(self, commit: str, under: str) -> list[str]:
        base = self.root / commit
        return sorted(p.relative_to(base).as_posix() for p in (base / under).rglob("*") if p.is_file())


Source = GitSource | FilesSource


def source(argv: list[str]) -> Source | None:
    """``REPO`` (a git copy) or ``--files DIR``; None for anything else."""
    if len(argv) == 1 and not argv[0].startswith("-"):
        return GitSource(argv[0])
    if len(argv) == 2 and argv[0] == "--files":
        return FilesSource(argv[1])
    return None


def extract(src: Source) -> dict[str, Any]:
    versions: dict[str, Any] = {}
    for release, tool, tag_commit, commit, why in RELEASES:
        entry: dict[str, Any] = {"tool": tool, "tag_commit": tag_commit, "why": why}
        if commit is None:
            versions[release] = {**entry, "missing": True}
            continue
        if not src.has(commit):
            versions[release] = {**entry, "missing": True, "why": f"{why}; {commit[:8]} not in {src.name}"}
            continue
        if tool == "legacy_build":
            flags, _ = _parse_arguments(src.show(commit, LEGACY))
            paths = [LEGACY]
        else:
            flags, plugins = _parse_arguments(src.show(commit, BUILD))
            paths = [BUILD]
            if plugins:
                flags.update(_plugin_arguments(src.show(commit, PLUGIN)))
                paths.append(PLUGIN)
        versions[release] = {**entry, "commit": commit, "inferred": commit != tag_commit, "paths": paths,
                             **({"tag_probe": TAG_PROBES[release]["probe"]} if release in TAG_PROBES else {}),
                             "flags": flags}
    return {"generated_by": "tests/vendor/trtllm/extract_build_flags.py",
            "about": "argparse of trtllm-build (tensorrt_llm/commands/build.py parse_arguments + "
                     "plugin/plugin.py add_plugin_argument) and of 0.7.1's examples/llama/build.py, per "
                     "TensorRT-LLM release, read from NVIDIA/TensorRT-LLM source at the commit named; "
                     "never from lmi-build's flags.toml",
            "versions": versions}


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
