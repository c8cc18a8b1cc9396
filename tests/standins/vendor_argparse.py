"""Check an argv the way TensorRT-LLM's own argparse would, from the vendor extracts in
tests/vendor/trtllm (build_flags.json and script_flags.json, extracted from TensorRT-LLM source by
extract_build_flags.py and extract_script_flags.py; converter_flags.json, read by hand), never from
lmi-build's flags.toml: a stand-in that checked against lmi-build's table would share its mistakes.

``check(version, argv)`` returns None when the release's argparse accepts argv, else the error
line argparse prints (``<prog>: error: ...``, exit status 2). A release the extract marks missing
is not checked (``missing_reason`` says why); a release it does not list at all is an error.
``script_flags(version, script)`` finds an example script's flags for ``check_flags``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

VENDOR = Path(__file__).resolve().parents[1] / "vendor" / "trtllm"
BUILD_FLAGS = VENDOR / "build_flags.json"
SCRIPT_FLAGS = VENDOR / "script_flags.json"  # tests/vendor/trtllm/extract_script_flags.py
CONVERTER_FLAGS = VENDOR / "converter_flags.json"  # read by hand: flag names and choices per copy


@functools.cache  # the extracts do not change while a process runs; a test checks hundreds of argvs
def _extract(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def release(version: str) -> dict[str, Any]:
    versions: dict[str, Any] = _extract(BUILD_FLAGS)["versions"]
    if version not in versions:
        raise KeyError(f"TensorRT-LLM {version} is not in {BUILD_FLAGS.name} (known: {', '.join(versions)})")
    entry: dict[str, Any] = versions[version]
    return entry


def missing_reason(version: str) -> str | None:
    entry = release(version)
    return str(entry["why"]) if entry.get("missing") else None


def _option_index(flags: dict[str, Any]) -> dict[str, str]:
    return {option: name for name, flag in flags.items() for option in flag["options"]}


def _lookup(options: dict[str, str], token: str) -> str | list[str] | None:
    if token in options:
        return options[token]
    # argparse's allow_abbrev: a unique prefix of a long option is that option
    matches = sorted({o for o in options if o.startswith("--") and o.startswith(token)})
    if len(matches) == 1:
        return options[matches[0]]
    return matches or None


def _convert(flag: dict[str, Any], option: str, value: str) -> tuple[Any, str | None]:
    kind = flag.get("type")
    try:
        if kind == "int":
            return int(value), None
        if kind == "float":
            return float(value), None
    except ValueError:
        return None, f"argument {option}: invalid {kind} value: '{value}'"
    return value, None


def check(version: str, argv: list[str], prog: str = "trtllm-build") -> str | None:
    entry = release(version)
    if entry.get("missing"):
        return None
    return check_flags(entry["flags"], argv, prog)


def _is_option(token: str) -> bool:
    """argparse's view: a token starting with '-' is an option unless it reads as a negative number."""
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def check_flags(flags: dict[str, Any], argv: list[str], prog: str) -> str | None:
    """argv against one argparse's flags (build_flags.json / script_flags.json form). A flag with no
    known form (``"form": "unknown"``: converter_flags.json lists names and choices only) takes the
    token after it as its value when that token is not an option."""
    options = _option_index(flags)
    unrecognized: list[str] = []
    seen: set[str] = set()
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if not _is_option(token):
            unrecognized.append(token)
            continue
        found = _lookup(options, token.split("=", 1)[0])
        if isinstance(found, list):
            return f"{prog}: error: ambiguous option: {token} could match {', '.join(found)}"
        if found is None:
            unrecognized.append(token)
            continue
        flag = flags[found]
        seen.add(found)
        option = "/".join(flag["options"])
        if flag.get("action") in ("store_true", "store_false", "store_const", "count"):
            if "=" in token:
                return f"{prog}: error: argument {option}: ignored explicit argument '{token.split('=', 1)[1]}'"
            continue
        nargs = flag.get("nargs")
        if flag.get("form") == "unknown":
            nargs = "?"
        if "=" in token:
            values = [token.split("=", 1)[1]]
        else:
            following = []
            while index < len(argv) and not _is_option(argv[index]):
                following.append(argv[index])
                index += 1
            want = nargs if isinstance(nargs, int) else 1
            if nargs == "?":
                values, rest = following[:1], following[1:]
            elif nargs in ("+", "*"):
                values, rest = following, []
            else:
                values, rest = following[:want], following[want:]
            unrecognized.extend(rest)
            if nargs == "+" and not values:
                return f"{prog}: error: argument {option}: expected at least one argument"
            if nargs not in ("?", "+", "*") and len(values) < want:
                return (f"{prog}: error: argument {option}: expected one argument" if want == 1 else
                        f"{prog}: error: argument {option}: expected {want} arguments")
        for value in values:
            converted, problem = _convert(flag, option, value)
            if problem:
                return f"{prog}: error: {problem}"
            choices = flag.get("choices")
            if choices is not None and converted not in choices:
                listed = ", ".join(repr(c) for c in choices)
                return f"{prog}: error: argument {option}: invalid choice: {converted!r} (choose from {listed})"
    required = ["/".join(flag["options"]) for name, flag in flags.items() if flag.get("required") and name not in seen]
    if required:
        return f"{prog}: error: the following arguments are required: {', '.join(required)}"
    if unrecognized:
        return f"{prog}: error: unrecognized arguments: {' '.join(unrecognized)}"
    return None


def script_flags(version: str, script: str) -> tuple[dict[str, Any] | None, str]:
    """The argparse flags of example script ``script`` (a path under the tree's root, e.g.
    ``examples/llama/convert_checkpoint.py``) at TensorRT-LLM ``version``, and where they come from;
    ``(None, why)`` when no extract covers it (the stand-in then runs unchecked, saying so).
    Raises FileNotFoundError when the release's extracted tree has no such script, KeyError when the
    release is in no extract."""
    builds = _extract(BUILD_FLAGS)["versions"]
    build = builds.get(version)
    if build and build.get("tool") == "legacy_build" and script in build.get("paths", ()):
        return build["flags"], f"build_flags.json {version} @{build['commit'][:8]}"
    releases: dict[str, Any] = _extract(SCRIPT_FLAGS)["releases"]
    if version not in releases and build is None:
        raise KeyError(f"TensorRT-LLM {version} is not in {SCRIPT_FLAGS.name} (known: {', '.join(releases)})")
    entry = releases.get(version, {"missing": True, "why": "not in script_flags.json"})
    if not entry.get("missing"):
        scripts = entry["scripts"]
        if script not in scripts:
            raise FileNotFoundError(f"{script} is not in TensorRT-LLM {version}'s tree "
                                    f"(@{entry['commit'][:8]}, script_flags.json)")
        if scripts[script].get("missing"):
            return None, str(scripts[script]["why"])
        inferred = ", inferred" if entry.get("inferred") else ""
        return scripts[script]["flags"], f"script_flags.json {version} @{entry['commit'][:8]}{inferred}"
    # No tree read for this release: converter_flags.json's hand-read copies (names and choices only)
    converters: dict[str, Any] = _extract(CONVERTER_FLAGS)["converters"]
    base = version.split("rc", 1)[0]
    for key, converter in converters.items():
        if converter["path"] == script and (version in converter["tags"] or base in converter["tags"]):
            flags = {name: {"options": [f"--{name}"], "form": "unknown",
                            **({"choices": converter["choices"][name]} if name in converter.get("choices", {}) else {})}
                     for name in converter["flags"]}
            inferred = ", inferred" if converter.get("inferred") else ""
            return flags, (f"converter_flags.json '{key}' (flag names and choices only; held for {base}{inferred})")
    return None, f"no argparse extract for {script} at TensorRT-LLM {version} ({entry['why']})"
