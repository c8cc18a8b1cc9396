"""Every command answers --help with its examples, without loading torch or transformers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

COMMANDS = [
    ["trtllm"], ["hf"], ["plan"], ["verify"], ["inspect"], ["publish"], ["pull"],
    ["config", "show"], ["config", "options"], ["recipes", "list"], ["recipes", "show"],
    ["profiles", "list"], ["profiles", "show"],
]
PROBE = """
import json, sys
from typer.testing import CliRunner
from lmi_build.cli import app
result = CliRunner().invoke(app, sys.argv[1:] + ["--help"], terminal_width=200)
print(json.dumps({"code": result.exit_code, "text": result.output,
                  "heavy": sorted(m for m in ("torch", "transformers", "modelopt") if m in sys.modules)}))
"""


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_has_examples_and_stays_light(command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, *command], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    assert found["code"] == 0
    assert "Example" in found["text"] and "lmi-build " + " ".join(command[:1]) in found["text"]
    assert found["heavy"] == []


def test_unknown_command_is_one_line_error() -> None:
    done = subprocess.run([sys.executable, "-m", "lmi_build", "bogus"], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr and "bogus" in done.stderr
