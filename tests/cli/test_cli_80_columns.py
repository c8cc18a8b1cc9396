"""At 80 columns (COLUMNS=80, also in a pipe) `plan`, `profiles list` and `recipes list` never cut an
identifier (issue 24 item 3): each option key and value, profile name, version, image URI, recipe,
architecture and method is on one line whole, or, when longer than a line can hold, folded into
consecutive pieces at one column; no header is split mid-word; no line is wider than 80."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.cli_process import run_lmi_build

WIDTH = 80
ON_ONE_LINE = 60  # an identifier this long or shorter fits on a line beside its label: never folded
SPLIT_HEADER = re.compile(r"\b(compil|runtim|workfl|architectur|architec|quantizat)\b")


def _cli(*args: str) -> str:
    """stdout of the command in a pipe (not a terminal), as `COLUMNS=80 lmi-build ... | less` sees it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPTION_", "HF_", "SM_"))}
    env["COLUMNS"] = str(WIDTH)
    result = run_lmi_build(*args, env=env, timeout=300)
    assert result.returncode in (0, 2), result.stderr
    return result.stdout


def _folded(lines: list[str], ident: str) -> bool:
    """``ident`` is in consecutive lines at one column, each piece ending at the column's edge."""
    for first, line in enumerate(lines):
        for column in range(len(line)):
            rest, at = ident, first
            while rest and at < len(lines):
                piece = lines[at][column:]
                size = 0
                while size < min(len(rest), len(piece)) and piece[size] == rest[size]:
                    size += 1
                if size == 0 or (size < len(rest) and size < len(piece) and piece[size] not in " │┃"):
                    break
                rest, at = rest[size:], at + 1
            if not rest:
                return True
    return False


def _check(text: str, identifiers: set[str]) -> None:
    lines = text.splitlines()
    assert lines
    wide = [line for line in lines if len(line) > WIDTH]
    assert not wide, wide
    assert "…" not in text
    assert not SPLIT_HEADER.search(text), [line for line in lines if SPLIT_HEADER.search(line)]
    cut = sorted(ident for ident in identifiers if ident and not any(ident in line for line in lines)
                 and (len(ident) <= ON_ONE_LINE or not _folded(lines, ident)))
    assert not cut, cut


def _tokens(value: str) -> set[str]:
    return {token.strip(",()") for token in value.split()}


@pytest.mark.parametrize("args", [
    ("plan", "trtllm", "--model", "demo:tiny-llama", "--quantize", "fp8"),
    ("plan", "trtllm", "--model", "demo:tiny-llama", "--profile", "lmi-0.30.0-trtllm-0.12.0"),
    ("plan", "hf", "--model", "demo:tiny-llama", "--quantize", "awq", "--profile", "lmi-0.35.0-vllm-0.11.1"),
    ("plan", "neuronx", "--model", "demo:tiny-llama", "--instance-type", "inf2.xlarge"),
])
def test_plan_at_80_columns_cuts_no_identifier(args: tuple[str, ...]) -> None:
    data = json.loads(_cli(*args, "--json"))
    identifiers = {*data["options"], *data["options"].values(), data["cache_key"], data["model"]["id"],
                   data["toolchain"]["profile"] or "", data["toolchain"]["image"] or ""}
    _check(_cli(*args), identifiers)


def test_profiles_list_at_80_columns() -> None:
    data = json.loads(_cli("profiles", "list", "--json"))
    identifiers = {profile["name"] for profile in data} | {profile.get("layout", "") for profile in data}
    for profile in data:
        for key in ("tensorrt_llm", "tensorrt", "cuda", "neuronx_cc", "neuron_sdk", "transformers_neuronx", "vllm"):
            if isinstance(profile.get(key), str):
                identifiers.add(profile[key])
    text = _cli("profiles", "list")
    _check(text, identifiers)
    assert len(text.splitlines()) <= 3 * len(data) + 2  # rows are at most three lines, not seven


def test_recipes_list_at_80_columns() -> None:
    data = json.loads(_cli("recipes", "list", "--json"))["recipes"]
    identifiers = {recipe["name"] for recipe in data}
    for recipe in data:
        identifiers |= set(recipe["architectures"] or recipe["model_types"])
        for support in recipe["targets"].values():
            identifiers |= set(support["quantize"])
    _check(_cli("recipes", "list"), identifiers)


def test_a_pipe_honours_columns() -> None:
    assert max(len(line) for line in _cli("profiles", "list").splitlines()) <= WIDTH


def test_the_option_reference_at_80_columns() -> None:
    from lmi_build.options.spec import all_option_specs

    _check(_cli("config", "options"), {spec.key for spec in all_option_specs()})
