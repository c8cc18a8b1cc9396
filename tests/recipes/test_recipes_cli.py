"""`lmi-build recipes list|show`, run as a user runs them (a fresh interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.cli_process import run_lmi_build
from tests.paths import REPO_ROOT


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_lmi_build(*args, cwd=REPO_ROOT, timeout=120)


def test_list_json_has_every_recipe_and_support_matrix() -> None:
    result = _run("recipes", "list", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    by_name = {r["name"]: r for r in data["recipes"]}
    assert {"llama", "qwen", "chatglm", "t5"} <= set(by_name)
    assert by_name["llama"]["targets"]["trtllm"]["quantize"] == ["smoothquant", "awq", "fp8", "int8_wo", "int4_wo"]
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


# --- recipes list --profile (issue 22 Deliver 2), in-process -----------------------------------------


def _invoke(*args: str) -> tuple[int, str, str]:


    result = run_lmi_build("recipes", "list", *args, env={**os.environ, "COLUMNS": "200"})
    return result.returncode, result.stdout, result.stderr


def _on_profile(profile: str) -> dict[str, dict[str, object]]:
    code, out, err = _invoke("--profile", profile, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert (data["profile"], data["target"]) == (profile, "trtllm" if "trtllm" in profile else data["target"])
    return {r["name"]: r for r in data["recipes"]}


def test_list_profile_json_says_per_recipe_what_builds_and_by_which_route() -> None:
    recipes = _on_profile("lmi-0.29.0-trtllm-0.11.0")
    route = {name: r["on_profile"] for name, r in recipes.items()}
    assert route["phi3"] == {"builds": True, "route": "examples/phi/convert_checkpoint.py in the container, then "
                                                      "trtllm-build", "reason": None}
    assert route["qwen2_moe"]["builds"] and "examples/qwen/convert_checkpoint.py" in route["qwen2_moe"]["route"]
    assert route["llama"]["builds"] and "ModelOpt" in route["llama"]["route"]
    assert route["qwen2"]["builds"] and "examples/qwen/convert_checkpoint.py" in route["qwen2"]["route"]
    for name, first_release, first_profile in (("gemma2", "0.13.0", "lmi-0.33.0-trtllm-0.21.0"),
                                               ("deepseek_v2", "0.15.0", "lmi-0.33.0-trtllm-0.21.0")):
        assert not route[name]["builds"] and route[name]["route"] is None
        assert f"needs TensorRT-LLM {first_release} or newer" in route[name]["reason"]
        assert f"profile {first_profile} is the oldest that has it" in route[name]["reason"]
    assert "encoder-decoder" in route["t5"]["reason"]
    # the recipe's own fields are still there, beside what the profile offers
    assert recipes["qwen"]["targets"]["trtllm"]["options_refused"] == ["multi_block_mode"]


def test_list_profile_0_7_builds_only_the_legacy_llama_example() -> None:
    route = {name: r["on_profile"] for name, r in _on_profile("lmi-0.26.0-trtllm-0.7.1").items()}
    assert {name for name, r in route.items() if r["builds"]} == {"llama", "mistral", "mixtral"}
    assert "examples/llama/build.py" in route["llama"]["route"]
    assert "legacy builds support only llama" in route["falcon"]["reason"]


def test_list_profile_human_table() -> None:
    code, out, err = _invoke("--profile", "lmi-0.33.0-trtllm-0.21.0")
    assert code == 0, err
    assert "lmi-0.33.0-trtllm-0.21.0 (trtllm)" in out
    gemma2 = next(line for line in out.splitlines() if line.startswith("gemma2"))
    assert "yes" in gemma2 and "examples/models/core/gemma/convert_checkpoint.py" in gemma2
    aquila = next(line for line in out.splitlines() if line.startswith("aquila"))
    assert "no" in aquila and "no trtllm route" in aquila


def test_list_profile_of_other_targets() -> None:
    code, out, err = _invoke("--profile", "lmi-0.29.0-neuronx-sdk2.19.1", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["target"] == "neuronx"
    route = {r["name"]: r["on_profile"] for r in data["recipes"]}
    assert route["llama"]["builds"] and "neuronx-cc" in route["llama"]["route"]
    assert not route["qwen2_moe"]["builds"] and "no neuronx route" in route["qwen2_moe"]["reason"]


def test_list_without_profile_keeps_its_output() -> None:
    code, out, err = _invoke("--json")
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {"directory", "recipes"}
    assert all("on_profile" not in r for r in data["recipes"])


def test_list_unknown_profile_is_a_clean_error() -> None:
    result = run_lmi_build("recipes", "list", "--profile", "lmi-0.29.0-trtllm-0.11")
    assert result.returncode == 1, result.stderr
    [error] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "unknown container profile 'lmi-0.29.0-trtllm-0.11'" in error
    assert "did you mean lmi-0.29.0-trtllm-0.11.0?" in error
