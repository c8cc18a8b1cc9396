"""Registration of every command module, and the static table that answers ``lmi-build --help``.

Start-up time is part of the interface (benchmarks/startup.py): ``lmi-build --help`` is printed
from the table below without importing typer or rich, and any other command line imports only
the module of the command it names. ``tests/cli/test_cli_help.py`` checks that the table says exactly
what the typer commands say, so the two cannot drift apart.
"""

from __future__ import annotations

import os
import sys
import textwrap
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

from lmi_build.target_names import TARGET_NAMES

if TYPE_CHECKING:
    import typer


class Command(NamedTuple):
    name: str
    module: str  # lmi_build.cli.<module> registers it
    help: str  # the first paragraph of its help, as typer shows it in the command list


# Each target's build command, as its package declares it (``Target.command``), in the registry's order
# (``TARGET_NAMES``); its first paragraph is repeated here so `--help` imports no target
# (tests/cli/test_cli_help.py checks the copy).
BUILD_HELP = (
    "Build TensorRT-LLM engines for the LMI TensorRT-LLM container (checkpoint on this host, engines by the profile's "
    "TensorRT-LLM).",
    "Compile NEFFs for the LMI Neuron container (transformers-neuronx, exactly as the container would) and package the "
    "precompiled layout it loads without compiling.",
    "Build a Hugging Face checkpoint artifact (optionally quantized with ModelOpt).",
)
# In the order `--help` lists them.
COMMANDS = (
    *(Command(name, "build_cmd", text) for name, text in zip(TARGET_NAMES, BUILD_HELP, strict=True)),
    Command("plan", "plan_cmd", "Resolve every build knob, validate it against the model, estimate memory and "
                                "compute the cache key, without reading weights or building anything."),
    Command("verify", "artifact_cmd", "Check an artifact is intact, complete, and fits where it will be served."),
    Command("inspect", "artifact_cmd", "Describe an artifact: what, from where, for what, how big, how long, by whom."),
    Command("publish", "storage_cmd", "Upload an artifact to S3, verified, with its manifest last (the commit marker)."),
    Command("pull", "storage_cmd", "Download a published artifact, verify every file against its manifest, then move "
                                   "it into place."),
    Command("matrix", "matrix_cmd", "Build a matrix of artifacts (models x tp x quantization ...) on this host or a "
                                    "Ray cluster, sharing an S3 build cache."),
    Command("config", "config_cmd", "Show how LMI options resolve, and the option reference."),
    Command("recipes", "recipes_cmd", "Supported architectures: targets, quantization, restricted options."),
    Command("profiles", "profiles_cmd", "LMI container profiles, TensorRT-LLM, Neuron and hf (image, versions, layout, "
                                        "defaults)."),
    Command("demo", "demo_cmd", "The demo models lmi-build generates itself (--model demo:NAME, offline)."),
)
COMMAND_MODULES = tuple(dict.fromkeys(command.module for command in COMMANDS))

APP_HELP = ("Compile LLMs ahead of time and package them for the LMI (DJL Serving) containers.\n\n"
            "Inputs are the ones the container takes (serving.properties, OPTION_* env, HF ids, s3://).")
# (flags, help) of the root options, as declared in lmi_build/cli/app.py (root_callback); the
# output options are the ones every command takes, here before the command name.
ROOT_OPTIONS = (
    ("--json", "Print one JSON object on stdout (for CI); an error is {\"error\": {code, message, hint}}."),
    ("--quiet -q", "Print nothing but errors."),
    ("--debug", "Show tracebacks and what libraries print (also LMI_BUILD_DEBUG=1)."),
    ("--version", "Print the version and exit."),
    ("--install-completion", "Install completion for the current shell."),
    ("--show-completion", "Show completion for the current shell, to copy it or customize the installation."),
    ("--help -h", "Show this message and exit."),
)


def modules_for(args: list[str]) -> tuple[str, ...]:
    """The command modules a command line needs: the named command's only, or all of them when
    no known command is named (typer then lists them or says which name is unknown)."""
    name = next((arg for arg in args if not arg.startswith("-")), None)
    for command in COMMANDS:
        if command.name == name:
            return (command.module,)
    return COMMAND_MODULES


def register(app: typer.Typer, modules: tuple[str, ...] = COMMAND_MODULES) -> None:
    for name in modules:
        command_module(name).register(app)


def command_module(name: str) -> ModuleType:
    """The command module ``name``, imported here (not at start-up: only the named command's loads).
    Plain imports, so readers, IDEs and the layer contract see every edge."""
    if name == "build_cmd":
        from lmi_build.cli import build_cmd

        return build_cmd
    if name == "plan_cmd":
        from lmi_build.cli import plan_cmd

        return plan_cmd
    if name == "artifact_cmd":
        from lmi_build.cli import artifact_cmd

        return artifact_cmd
    if name == "storage_cmd":
        from lmi_build.cli import storage_cmd

        return storage_cmd
    if name == "matrix_cmd":
        from lmi_build.cli import matrix_cmd

        return matrix_cmd
    if name == "config_cmd":
        from lmi_build.cli import config_cmd

        return config_cmd
    if name == "recipes_cmd":
        from lmi_build.cli import recipes_cmd

        return recipes_cmd
    if name == "profiles_cmd":
        from lmi_build.cli import profiles_cmd

        return profiles_cmd
    if name == "demo_cmd":
        from lmi_build.cli import demo_cmd

        return demo_cmd
    raise KeyError(f"no command module {name!r}")


def prog_name() -> str:
    """The program name as click shows it (``python -m lmi_build`` when run as a module)."""
    base = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "lmi-build"
    return "python -m lmi_build" if base == "__main__.py" else base


def _panel(title: str, rows: list[tuple[str, str]], width: int) -> list[str]:
    """One of typer's boxed help panels, drawn with the same characters, for plain text output."""
    left = max(len(key) for key, _ in rows) + 2
    inner = width - 4  # "│ " and " │"
    lines = ["╭─ " + title + " " + "─" * max(0, width - len(title) - 5) + "╮"]
    for key, text in rows:
        wrapped = textwrap.wrap(text, max(20, inner - left)) or [""]
        for index, part in enumerate(wrapped):
            cell = (key if index == 0 else "").ljust(left) + part
            lines.append("│ " + cell.ljust(inner) + " │")
    lines.append("╰" + "─" * (width - 2) + "╯")
    return lines


def top_level_help() -> str:
    """``lmi-build --help``: the layout typer prints, from the static table (no typer, no rich)."""
    try:
        columns = os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError):
        columns = 80
    width = max(60, min(int(os.environ.get("COLUMNS", columns) or columns), 120))
    lines = ["", f" Usage: {prog_name()} [OPTIONS] COMMAND [ARGS]...", ""]
    for paragraph in APP_HELP.split("\n\n"):
        lines += [" " + line for line in textwrap.wrap(paragraph, width - 2)] + [""]
    lines += _panel("Options", [(flags, text) for flags, text in ROOT_OPTIONS], width)
    lines += _panel("Commands", [(command.name, command.help) for command in COMMANDS], width)
    lines.append(f" Run '{prog_name()} COMMAND --help' for a command's options and examples.")
    return "\n".join(lines) + "\n"
