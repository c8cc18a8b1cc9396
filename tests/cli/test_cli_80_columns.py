"""At 80 columns (COLUMNS=80, also in a pipe) `plan`, `profiles list` and `recipes list` never cut an
identifier (issue 24 item 3): each option key and value, profile name, version, image URI, recipe,
architecture and method is on one line whole, or, when longer than a line can hold, folded into
consecutive pieces at one column; no header is split mid-word; no line is wider than 80.

`plan` and every command's `--help` (found by walking the typer app) go further (issue 30 item 3): no
identifier is folded either. A line is wider than 80 only where one identifier longer than what is left
of it runs past the edge (a terminal wraps it softly, and it is copied whole); no flag, option key, path
or word of a help text is cut, and every example command line is printed whole."""

from __future__ import annotations

import itertools
import json
import os
import re

import pytest
import typer.main
from rich.text import Text

from lmi_build.cli import app
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


def _check(text: str, identifiers: set[str], *, fold: bool = True) -> None:
    """No identifier cut; with ``fold`` a long one may be folded at one column (tables), else each is
    on one line whole and only such a line runs past the edge, by that identifier alone."""
    lines = text.splitlines()
    assert lines
    wide = [line for line in lines if len(line) > WIDTH and (fold or not _runs_past_by_identifier(line, identifiers))]
    assert not wide, wide
    assert "…" not in text
    assert not SPLIT_HEADER.search(text), [line for line in lines if SPLIT_HEADER.search(line)]
    cut = sorted(ident for ident in identifiers if ident and not any(ident in line for line in lines)
                 and (not fold or len(ident) <= ON_ONE_LINE or not _folded(lines, ident)))
    assert not cut, cut


def _runs_past_by_identifier(line: str, identifiers: set[str]) -> bool:
    """``line`` ends in an identifier that starts within the width and could not fit on what is left."""
    head, _, last = line.rstrip().rpartition(" ")
    return last.rstrip(",") in identifiers and len(head) < WIDTH and len(last) > WIDTH - len(head) - 1


def _pairs(section: dict[str, object]) -> set[str]:
    """The ``key=value`` of each value of a mapping in a plan section (how the section shows it)."""
    return {f"{key}={item}" for value in section.values() if isinstance(value, dict)
            for key, item in value.items() if item is not None}


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
                   data["toolchain"]["profile"] or "", data["toolchain"]["image"] or "",
                   *_pairs(data["quantization"])}
    _check(_cli(*args), identifiers, fold=False)


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


def _walk(command: object, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], object]]:
    found = [(path, command)]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        found += _walk(sub, (*path, name))
    return found


# Every command and command group of the app, as `lmi-build ... --help` names them.
COMMANDS = _walk(typer.main.get_command(app), ())


def _plain(markup: str | None) -> str:
    return Text.from_markup(markup or "").plain


def _help_sources(command: object) -> list[str]:
    """What the command's --help prints from its declarations: its help and epilog, each parameter's
    names and help, and (a group) each subcommand's name and first paragraph."""
    texts = [_plain(getattr(command, "help", None)), _plain(getattr(command, "epilog", None))]
    for param in getattr(command, "params", []):
        texts += [" ".join(param.opts), _plain(getattr(param, "help", None))]
    for name, sub in getattr(command, "commands", {}).items():
        texts += [name, _plain((sub.help or "").split("\n\n")[0])]
    return texts


def _example_lines(texts: list[str]) -> list[str]:
    """The lines of the examples: a command (lmi-build, a variable, a pipe) or its continuation."""
    found: list[str] = []
    for text in texts:
        continued = False
        for line in text.splitlines():
            stripped = line.strip()
            if continued or stripped.startswith(("lmi-build ", "OPTION_", "| ", "# ")):
                found.append(stripped)
            continued = stripped.endswith("\\")
    return found


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=lambda path: " ".join(path) or "lmi-build")
def test_every_help_at_80_columns_cuts_nothing(path: tuple[str, ...]) -> None:
    command = dict(COMMANDS)[path]
    text = _cli(*path, "--help")
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH, [line for line in lines if len(line) > WIDTH]
    assert "…" not in text, [line for line in lines if "…" in line]
    printed = {word for line in lines for word in re.sub("[│╭╮╰╯─]", " ", line).split()}
    sources = _help_sources(command)
    cut = sorted({word for source in sources for word in source.split()} - printed)
    assert not cut, cut  # a flag, option key, path or word that is not printed whole
    wrapped = [line for line in _example_lines(sources) if not any(line in printed_line for printed_line in lines)]
    assert not wrapped, wrapped  # an example command broken across lines where it has no "\\"


def test_the_walk_finds_every_command() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"plan", "trtllm", "neuronx", "hf", "publish", "config show", "profiles list", "recipes show"} <= names


def _at_width(width: int, *args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPTION_", "HF_", "SM_"))}
    result = run_lmi_build(*args, env={**env, "COLUMNS": str(width)}, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.parametrize("width", [30, 40, 60])
def test_a_narrow_terminal_cuts_no_name_that_fits_a_line(width: int) -> None:
    """Issue 42: ``COLUMNS=30 recipes list`` / ``profiles list`` cut "aquila" after "aquil" and
    "lmi-0.26.0-neuronx-sdk2.16.0" after "sdk2.16": a name that fits a line is on one, whole."""
    recipes = json.loads(_cli("recipes", "list", "--json"))["recipes"]
    names = {recipe["name"] for recipe in recipes} | {a for recipe in recipes for a in recipe["architectures"] or []}
    profiles = {profile["name"] for profile in json.loads(_cli("profiles", "list", "--json"))}
    for args, wanted in ((("recipes", "list"), names), (("profiles", "list"), profiles)):
        lines = _at_width(width, *args)
        assert all(len(line) <= width for line in lines), [line for line in lines if len(line) > width]
        words = {word.strip("*;,") for line in lines for word in line.split()}
        cut = sorted(name for name in wanted if len(name) + 2 <= width and name not in words)
        assert not cut, (width, args, cut)


def _flag_rows(lines: list[str], command: object) -> list[str]:
    """The panel lines that start with a flag that takes no value (``--json``, ``--overwrite``)."""
    flags = {opt for param in getattr(command, "params", []) if getattr(param, "is_flag", False)
             for opt in (*param.opts, *param.secondary_opts)} | {"--help", "-h"}
    return [line for line in lines if (words := line.strip("│ ").split()) and words[0] in flags]


def _broken_early(lines: list[str], width: int) -> list[tuple[str, str]]:
    """Pairs of prose lines of the epilog (after the last panel, indented by the one-column padding)
    where the first ended although the next line's first word would have fitted on it."""
    epilog = lines[max((at for at, line in enumerate(lines) if line.startswith("╰")), default=-1) + 1:]
    prose = [line.rstrip() if line.startswith(" ") and not line.startswith("  ") else "" for line in epilog]
    return [(first, second) for first, second in itertools.pairwise(prose)
            if first and second and len(first) + 1 + len(second.split()[0]) <= width - 1]


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=lambda path: " ".join(path) or "lmi-build")
def test_every_help_shows_flags_without_a_value_and_epilogs_unbroken(path: tuple[str, ...]) -> None:
    """Issue 40: a flag showed ``<bool>`` (``--json <bool>``) as if it took a value; the matrix epilog
    broke its sentences at the source's line ends ("failed or" / "could not be planned" at 100 columns)."""
    command = dict(COMMANDS)[path]
    for width in (80, 100):
        lines = _at_width(width, *path, "--help")
        rows = _flag_rows(lines, command)
        assert any("--help" in row for row in rows), lines
        assert not [row for row in rows if "<bool>" in row], rows
        assert not _broken_early(lines, width), (width, _broken_early(lines, width))
