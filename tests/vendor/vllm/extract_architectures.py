"""Extract, from vLLM's own source, the architectures each version's model registry loads, for the
tests' expectations of which Hugging Face checkpoints an hf container profile can serve
(architectures.json).

Run where vLLM's source is at hand, either a clone (its release tags) or the release wheels from PyPI
(``pip download vllm==X --no-deps``; a wheel holds the Python source as released, and its
``vllm/commit_id.py`` or ``vllm/_version.py`` names the commit it was built from):

    python tests/vendor/vllm/extract_architectures.py --git /path/to/vllm > tests/vendor/vllm/architectures.json
    python tests/vendor/vllm/extract_architectures.py --wheels /dir/of/wheels > tests/vendor/vllm/architectures.json

Some versions only (the others kept as the committed JSON has them):

    python tests/vendor/vllm/extract_architectures.py --sources DIR --only 0.3.3 0.4.2 \
        --keep tests/vendor/vllm/architectures.json > /tmp/architectures.json

What is read, per version (the vLLM of each hf profile in lmi_build/targets/hf/data/serving_formats.toml):
- 0.3.x-0.4.x: vllm/model_executor/models/__init__.py, the ``_MODELS`` dict literal (its keys are the
  config.json ``architectures`` the engine resolves; ``ModelRegistry.load_model_cls``).
- 0.5.x-0.6.2: the same file's ``_GENERATION_MODELS`` (and 0.6.2's ``_MULTIMODAL_MODELS``); its
  ``_MODELS`` there merges the tables (``**``) and is not read.
- later: vllm/model_executor/models/registry.py, ``_TEXT_GENERATION_MODELS`` and ``_MULTIMODAL_MODELS``
  (both generate text), and whether the registry falls back to the Transformers backend for an
  architecture outside them (``def _try_resolve_transformers``).

And the RoPE scaling types the version builds a rotary embedding for (``rope``): the string literals
``scaling_type`` is compared with (``==``, ``in``) in vllm/model_executor/layers/rotary_embedding.py
``get_rope``, any other type raising there ("Unknown RoPE scaling type"); recorded for the versions
extracted with ``--sources`` or ``--wheels`` (``None`` where not read).

Nothing here reads lmi-build's own tables.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

VERSIONS = ["0.3.3", "0.4.2", "0.5.3.post1", "0.6.2", "0.6.3.post1", "0.7.3", "0.8.4", "0.10.2", "0.11.1", "0.12.0", "0.14.0", "0.15.0", "0.16.0", "0.17.0", "0.18.0", "0.19.0",
            "0.20.1", "0.22.0", "0.23.0"]
PATHS = ["vllm/model_executor/models/registry.py", "vllm/model_executor/models/__init__.py"]
TABLES = ["_MODELS", "_GENERATION_MODELS", "_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS"]
FALLBACK = "_try_resolve_transformers"
ROPE = "vllm/model_executor/layers/rotary_embedding.py"


def _tables(source: str) -> dict[str, dict[str, object]]:
    found: dict[str, dict[str, object]] = {}
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        value = getattr(node, "value", None)
        for name in names:
            if name in TABLES and isinstance(value, ast.Dict):
                if name == "_MODELS" and any(k is None for k in value.keys):
                    continue  # 0.5.x-0.6.2: {**_GENERATION_MODELS, ...}, the tables above merged
                if not all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
                    raise SystemExit(f"{name} at line {node.lineno} has a key that is not a string literal")
                keys = sorted({k.value for k in value.keys if isinstance(k, ast.Constant)})
                found[name] = {"lines": f"{node.lineno}-{node.end_lineno}", "architectures": keys}
    return found


def _fallback_line(source: str) -> int | None:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == FALLBACK:
            return node.lineno
    return None


def _rope_types(source: str | None) -> dict[str, object] | None:
    """The scaling types ``get_rope`` compares ``scaling_type`` with (== and in), and its line range."""
    if source is None:
        return None
    node = next((n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "get_rope"),
                None)
    if node is None:
        return None
    types: set[str] = set()
    for compare in ast.walk(node):
        if not (isinstance(compare, ast.Compare) and isinstance(compare.left, ast.Name)
                and compare.left.id == "scaling_type"):
            continue
        for op, right in zip(compare.ops, compare.comparators, strict=True):
            if isinstance(op, ast.Eq) and isinstance(right, ast.Constant):
                types.add(str(right.value))
            elif isinstance(op, ast.In) and isinstance(right, (ast.Set, ast.Tuple, ast.List)):
                types.update(str(e.value) for e in right.elts if isinstance(e, ast.Constant))
    return {"path": ROPE, "lines": f"{node.lineno}-{node.end_lineno}", "types": sorted(types)}


def _entry(version: str, path: str, source: str, commit: str, how: str,
           rope: str | None = None) -> dict[str, object]:
    return {"tag": f"v{version}", "commit": commit, "commit_source": how, "path": path,
            "source": f"vllm-project/vllm v{version} ({commit[:9]}) {path}",
            "tables": _tables(source), "transformers_fallback_line": _fallback_line(source),
            "rope": _rope_types(rope)}


def from_git(repo: str) -> dict[str, object]:
    versions = {}
    for version in VERSIONS:
        tag = f"v{version}"
        commit = subprocess.run(["git", "-C", repo, "rev-parse", f"{tag}^{{commit}}"], capture_output=True,
                                text=True, check=True).stdout.strip()
        for path in PATHS:
            done = subprocess.run(["git", "-C", repo, "show", f"{tag}:{path}"], capture_output=True, text=True,
                                  check=False)
            if done.returncode == 0 and any(f"{t} =" in done.stdout for t in TABLES):
                versions[version] = _entry(version, path, done.stdout, commit, f"git rev-parse {tag}")
                break
    return versions


def _wheel_commit(wheel: zipfile.ZipFile) -> tuple[str, str]:
    names = set(wheel.namelist())
    if "vllm/commit_id.py" in names:
        text = wheel.read("vllm/commit_id.py").decode()
        found = re.search(r'__commit__ = "([0-9a-f]+)"', text)
        if found:
            return found.group(1), "the wheel's vllm/commit_id.py __commit__"
    if "vllm/_version.py" not in names:  # 0.3.x-0.6.2 wheels name no commit
        raise SystemExit("no vllm/commit_id.py or vllm/_version.py in the wheel")
    text = wheel.read("vllm/_version.py").decode()
    found = re.search(r"commit_id = '?g?([0-9a-f]+)'?", text)
    if not found:
        raise SystemExit("no commit in the wheel's vllm/_version.py")
    return found.group(1), "the wheel's vllm/_version.py commit_id (setuptools-scm, abbreviated)"


def from_wheels(folder: str) -> dict[str, object]:
    versions = {}
    for version in VERSIONS:
        wheels = sorted(Path(folder).glob(f"vllm-{version}-*.whl"))
        if not wheels:
            raise SystemExit(f"no vllm-{version}-*.whl in {folder}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            commit, how = _wheel_commit(wheel)
            names = set(wheel.namelist())
            for path in PATHS:
                if path in names:
                    source = wheel.read(path).decode()
                    if any(f"{t} =" in source for t in TABLES):
                        rope = wheel.read(ROPE).decode() if ROPE in names else None
                        versions[version] = _entry(version, path, source, commit, f"{wheels[0].name}: {how}", rope)
                        break
    return versions


class _Unpacked:
    """A wheel unpacked to a folder (``unzip vllm-X-*.whl 'vllm/*' -d DIR/X``, its file name in DIR/X/WHEEL),
    read as the zip it came from."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def namelist(self) -> list[str]:
        return [str(p.relative_to(self.root)) for p in (self.root / "vllm").rglob("*.py")]

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()


def from_sources(folder: str) -> dict[str, object]:
    versions = {}
    for version in VERSIONS:
        root = Path(folder) / version
        if not (root / "vllm").is_dir():
            raise SystemExit(f"no {root}/vllm")
        unpacked = _Unpacked(root)
        try:
            commit, how = _wheel_commit(unpacked)  # type: ignore[arg-type]
        except SystemExit:  # 0.3.x-0.6.2 and 0.7.x-0.8.x wheels name no commit: the release tag stands for it
            commit, how = f"v{version}", "no commit in the wheel's vllm/_version.py: the release tag"
        wheel_name = (root / "WHEEL").read_text().strip()
        for path in PATHS:
            if (root / path).exists():
                source = (root / path).read_text()
                if any(f"{t} =" in source for t in TABLES):
                    rope = (root / ROPE).read_text() if (root / ROPE).exists() else None
                    versions[version] = _entry(version, path, source, commit, f"{wheel_name}: {how}", rope)
                    break
    return versions


def _kept(path: str | None, versions: dict[str, object]) -> dict[str, object]:
    """``versions`` with those of the JSON at ``path`` that were not extracted this time (their sources
    not at hand) kept as that JSON has them; the re-extracted ones replace theirs."""
    if path is None:
        return versions
    return {**json.loads(Path(path).read_text())["versions"], **versions}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--git", help="a clone of vllm-project/vllm with its release tags")
    where.add_argument("--wheels", help="a folder with the vllm release wheels of each version")
    where.add_argument("--sources", help="a folder with each version's wheel unpacked in <version>/")
    parser.add_argument("--only", nargs="+", help="extract these versions only (with --keep: the others as kept)")
    parser.add_argument("--keep", help="an earlier architectures.json whose other versions are kept as they are")
    args = parser.parse_args(argv)
    if args.only:
        VERSIONS[:] = [v for v in VERSIONS if v in args.only]
    versions = (from_git(args.git) if args.git else from_wheels(args.wheels) if args.wheels
                else from_sources(args.sources))
    missing = [v for v in VERSIONS if v not in versions]
    if missing:
        raise SystemExit(f"no model registry found for {', '.join(missing)}")
    json.dump({"generated_by": "tests/vendor/vllm/extract_architectures.py", "versions": _kept(args.keep, versions)},
              sys.stdout,
              indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
