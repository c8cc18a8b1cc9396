"""Check an argv the way TensorRT-LLM's own argparse would, from tests/vendor/trtllm/build_flags.json
(extracted from TensorRT-LLM source by tests/vendor/trtllm/extract_build_flags.py), never from
lmi-build's flags.toml: a stand-in that checked against lmi-build's table would share its mistakes.

``check(version, argv)`` returns None when the release's argparse accepts argv, else the error
line argparse prints (``<prog>: error: ...``, exit status 2). A release the extract marks missing
is not checked (``missing_reason`` says why); a release it does not list at all is an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BUILD_FLAGS = Path(__file__).resolve().parents[1] / "vendor" / "trtllm" / "build_flags.json"


def release(version: str) -> dict[str, Any]:
    versions: dict[str, Any] = json.loads(BUILD_FLAGS.read_text())["versions"]
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
    flags: dict[str, Any] = entry["flags"]
    options = _option_index(flags)
    unrecognized: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if not token.startswith("-") or token == "-":
            unrecognized.append(token)
            continue
        found = _lookup(options, token.split("=", 1)[0])
        if isinstance(found, list):
            return f"{prog}: error: ambiguous option: {token} could match {', '.join(found)}"
        if found is None:
            unrecognized.append(token)
            continue
        flag = flags[found]
        option = "/".join(flag["options"])
        if flag.get("action") in ("store_true", "store_false"):
            if "=" in token:
                return f"{prog}: error: argument {option}: ignored explicit argument '{token.split('=', 1)[1]}'"
            continue
        nargs = flag.get("nargs")
        if "=" in token:
            values = [token.split("=", 1)[1]]
        else:
            following = []
            while index < len(argv) and not argv[index].startswith("--"):
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
    if unrecognized:
        return f"{prog}: error: unrecognized arguments: {' '.join(unrecognized)}"
    return None
