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


@pytest.mark.parametrize("args", [["--help"], ["-h"], []], ids=["--help", "-h", "no-args"])
def test_top_level_help_lists_every_command(args: list[str]) -> None:
    """typer draws `lmi-build --help` from the registered commands; no command given is a usage
    error (exit 1, README) that prints the same help."""
    import typer.main

    from lmi_build.cli import app

    done = run_lmi_build(*args, env={**os.environ, "COLUMNS": "100"})
    for name in typer.main.get_command(app).commands:  # type: ignore[attr-defined]
        assert f"│ {name} " in done.stdout
    assert "[OPTIONS] COMMAND [ARGS]..." in done.stdout
    assert "Run 'lmi-build COMMAND --help' for a command's options and examples." in done.stdout
    assert done.returncode == (0 if args else 1)


HELP_MODULES_PROBE = """
import json, sys
from lmi_build.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in ("typer.rich_utils", "lmi_build.cli.help_layout", "rich.markdown")
                        if m in sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize(("args", "loaded"), [
    (["plan", "hf", "--model", "demo:tiny-llama", "--json"], []),
    (["plan", "--help"], ["lmi_build.cli.help_layout", "rich.markdown", "typer.rich_utils"]),
], ids=["plan", "plan --help"])
def test_only_a_help_loads_the_help_layout(args: list[str], loaded: list[str]) -> None:
    """typer's rich_utils (and the rich modules it loads) are about 30 % of `hf --help`'s start-up
    (benchmarks/startup.py): a command that draws no help does not load them."""
    done = subprocess.run([sys.executable, "-c", HELP_MODULES_PROBE, *args], capture_output=True, text=True,
                          check=True)
    assert json.loads(done.stderr.strip().splitlines()[-1]) == loaded
