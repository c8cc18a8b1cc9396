"""Every command answers --help with its examples, without loading torch or transformers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.cli_process import run_lmi_build

COMMANDS = [
    ["trtllm"], ["hf"], ["plan"], ["verify"], ["inspect"], ["publish"], ["pull"],
    ["config", "show"], ["config", "options"], ["recipes", "list"], ["recipes", "show"],
    ["profiles", "list"], ["profiles", "show"], ["matrix"],
]
PROBE = """
import json, sys
from typer.testing import CliRunner
from lmi_build.cli import app
result = CliRunner().invoke(app, sys.argv[1:] + ["--help"], terminal_width=200)
print(json.dumps({"code": result.exit_code, "text": result.output,
                  "heavy": sorted(m for m in ("torch", "transformers", "modelopt", "ray") if m in sys.modules)}))
"""


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_has_examples_and_stays_light(command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, *command], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    assert found["code"] == 0
    assert "Example" in found["text"] and "lmi-build " + " ".join(command[:1]) in found["text"]
    assert found["heavy"] == []


def test_unknown_command_is_one_line_error() -> None:
    done = run_lmi_build("bogus")
    assert done.returncode != 0 and "Traceback" not in done.stderr and "bogus" in done.stderr


def _first_paragraph(text: str) -> str:
    return " ".join(text.strip().split("\n\n")[0].split())


def test_static_top_level_help_says_what_the_commands_say() -> None:
    """`lmi-build --help` is printed from a static table (no typer, no rich, for start-up time):
    it must list every command, in order, with the help its typer command has."""
    import typer.main

    from lmi_build.cli import app, commands

    group = typer.main.get_command(app)
    registered = {name: _first_paragraph(command.help or "") for name, command in group.commands.items()}
    assert {c.name: _first_paragraph(c.help) for c in commands.COMMANDS} == registered
    assert [c.name for c in commands.COMMANDS] == list(registered)
    assert [(" ".join(p.opts), p.help) for p in group.params if p.opts[0] != "--help"] == \
        [(flags, text) for flags, text in commands.ROOT_OPTIONS if flags.split()[0] != "--help"]
    assert app.info.help == commands.APP_HELP


@pytest.mark.parametrize("args", [["--help"], ["-h"], []], ids=["--help", "-h", "no-args"])
def test_top_level_help_lists_every_command_without_typer(args: list[str]) -> None:
    probe = (
        "import sys\n"
        "from lmi_build.cli import main\n"
        "sys.argv = ['lmi-build', *sys.argv[1:]]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exit_:\n"
        "    code = exit_.code\n"
        "print(code, sorted(m for m in ('typer', 'rich', 'pydantic', 'torch', 'boto3') if m in sys.modules),"
        " file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, check=True,
                          env={**os.environ, "COLUMNS": "100"})
    from lmi_build.cli.commands import COMMANDS

    for command in COMMANDS:
        assert f"│ {command.name} " in done.stdout
    assert "Usage: lmi-build [OPTIONS] COMMAND [ARGS]..." in done.stdout
    assert done.stderr.strip() == f"{0 if args else 1} []"  # no command: a usage error, exit 1 (README)


def test_a_command_loads_only_its_own_module() -> None:
    probe = (
        "import sys\n"
        "from lmi_build.cli import main\n"
        "sys.argv = ['lmi-build', 'profiles', 'list', '--json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exit_:\n"
        "    assert not exit_.code\n"
        "print(sorted(m for m in sys.modules if m.startswith('lmi_build.cli.') and m.endswith('_cmd')), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)  # the command ran
    assert done.stderr.strip() == "['lmi_build.cli.profiles_cmd']"
