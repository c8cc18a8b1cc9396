"""`lmi-build recipes list|show`, run as a user runs them (a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.paths import REPO_ROOT


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lmi_build", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120, check=False)


def test_list_json_has_every_recipe_and_support_matrix() -> None:
    result = _run("recipes", "list", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    by_name = {r["name"]: r for r in data["recipes"]}
    assert {"llama", "qwen", "chatglm", "t5"} <= set(by_name)
    assert by_name["llama"]["targets"]["trtllm"]["quantize"] == ["smoothquant", "awq", "fp8", "gptq", "int8_wo", "int4_wo"]
    assert "neuronx" not in by_name["qwen"]["targets"]
    assert by_name["qwen"]["targets"]["trtllm"]["options_refused"] == ["multi_block_mode"]


def test_list_human_table() -> None:
    result = _run("recipes", "list")
    assert result.returncode == 0, result.stderr
    for text in ("recipe", "trtllm", "neuronx", "baichuan", "smoothquant"):
        assert text in result.stdout


def test_show_human_and_json() -> None:
    human = _run("recipes", "show", "baichuan")
    assert human.returncode == 0, human.stderr
    assert "option.baichuan_model_version" in human.stdout and "v2_13b" in human.stdout
    data = json.loads(_run("recipes", "show", "chatglm", "--json").stdout)
    assert data["version_options"][0]["key"] == "option.chatglm_model_version"
    assert data["version_options"][0]["required"] is True


def test_show_unknown_recipe_is_a_clean_error() -> None:
    result = _run("recipes", "show", "lama")
    assert result.returncode == 1  # an unknown name is bad input, not an invalid plan (2)
    assert result.stdout == ""
    assert "no recipe named 'lama'" in result.stderr and "llama" in result.stderr
    assert "Traceback" not in result.stderr


def test_recipes_commands_do_not_import_heavy_libraries() -> None:
    code = (
        "import sys\n"
        "from lmi_build.cli import app\n"
        "for args in (['recipes', 'list', '--json'], ['recipes', 'show', 'llama', '--json']):\n"
        "    app(args, standalone_mode=False)\n"
        "heavy = [m for m in ('torch', 'transformers', 'modelopt', 'boto3') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stderr


def test_help_has_examples() -> None:
    for command in ("list", "show"):
        result = _run("recipes", command, "--help")
        assert result.returncode == 0
        assert "Examples" in result.stdout and f"lmi-build recipes {command}" in result.stdout
