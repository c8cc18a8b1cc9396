"""Saved plans are the contract: `plan --save` round trips, `--plan` builds exactly that plan, and
the finishing commands printed by `--runner script` and exit 3 run as printed.

The engine compiler is the STAND-IN (tests/standins/trtllm-build); the checkpoints are real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lmi_build.options.properties import read_properties_with_lines
from lmi_build.planning.saved import SAVED_PLAN_FORMAT
from lmi_build.targets import load_saved_plan
from tests.test_pipeline_build import STANDINS, as_json, lmi_build, no_gpu_path

PROFILE = "lmi-0.33.0-trtllm-0.21.0"
pytestmark = pytest.mark.slow


def standin_env() -> dict[str, str]:
    version = json.loads(lmi_build("profiles", "show", PROFILE, "--json").stdout)["tensorrt_llm"]
    return {"PATH": f"{STANDINS}{os.pathsep}{no_gpu_path()}", "STANDIN_TRTLLM_VERSION": version}


def save_plan(tmp_path: Path, *args: str) -> Path:
    path = tmp_path / "plan.json"
    result = lmi_build("plan", *args, "--save", str(path), "--json")
    assert result.returncode == 0, result.stderr
    return path


@pytest.mark.parametrize("args", [
    ("trtllm", "--model", "demo:tiny-llama", "--tp", "1", "--max-input-len", "512", "--max-output-len", "256"),
    ("hf", "--model", "demo:tiny-llama", "--dtype", "bf16"),
    ("neuronx", "--model", "demo:tiny-llama", "--tp", "2", "--n-positions", "256"),
], ids=["trtllm", "hf", "neuronx"])
def test_saved_plan_round_trip(args: tuple[str, ...], tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    result = lmi_build("plan", *args, "--save", str(path), "--json")
    assert result.returncode == 0, result.stderr
    saved = load_saved_plan(path)
    assert json.loads(path.read_text())["format"] == SAVED_PLAN_FORMAT
    assert saved.plan.target == args[0] and saved.inputs.model == "demo:tiny-llama"
    # The saved plan is the plan `plan --json` reports, knob for knob (plus the raw config).
    assert saved.plan.to_json() == as_json(result)
    assert saved.dumps() == path.read_text()  # stable: loading and saving again changes nothing


def test_saved_plan_of_a_local_model_records_its_absolute_location(tmp_path: Path, tiny_llama3: Path) -> None:
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    relative = os.path.relpath(tiny_llama3, workdir)
    path = tmp_path / "plan.json"
    result = lmi_build("plan", "hf", "--model", relative, "--save", str(path), cwd=workdir)
    assert result.returncode == 0, result.stderr
    saved = load_saved_plan(path)
    assert saved.inputs.model == str(tiny_llama3)
    assert str(tiny_llama3) not in json.dumps(saved.plan.model_dump(mode="json"))  # the plan itself: no host path


@pytest.mark.parametrize("extra", [("--tp", "2"), ("-o", "option.max_rolling_batch_size=8"), ("--quantize", "fp8"),
                                   ("--dtype", "bf16"), ("--trust-remote-code",)])
def test_plan_refuses_shaping_flags(extra: tuple[str, ...], tmp_path: Path) -> None:
    plan = save_plan(tmp_path, "hf", "--model", "demo:tiny-llama")
    result = lmi_build("hf", "--plan", str(plan), *extra, "--output", str(tmp_path / "out"))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "cannot be combined with --plan" in result.stderr
    assert extra[0] in result.stderr or (extra[0] == "-o" and "--option" in result.stderr)
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_plan_refuses_another_target_and_a_non_plan_file(tmp_path: Path) -> None:
    plan = save_plan(tmp_path, "hf", "--model", "demo:tiny-llama")
    wrong = lmi_build("trtllm", "--plan", str(plan), "--output", str(tmp_path / "out"))
    assert wrong.returncode == 1 and "plan for the hf target" in wrong.stderr and "lmi-build hf --plan" in wrong.stderr
    report = tmp_path / "report.json"
    report.write_text(lmi_build("plan", "hf", "--model", "demo:tiny-llama", "--json").stdout)
    not_saved = lmi_build("hf", "--plan", str(report), "--output", str(tmp_path / "out"))
    assert not_saved.returncode == 1 and "is not a saved lmi-build plan" in not_saved.stderr
    assert "--save" in not_saved.stderr


def test_plan_refuses_a_changed_model_and_accepts_a_moved_one(tmp_path: Path, tiny_llama3: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_llama3, model)
    plan = save_plan(tmp_path, "hf", "--model", str(model))

    moved = tmp_path / "moved"
    shutil.copytree(model, moved)
    built = lmi_build("hf", "--plan", str(plan), "--model", str(moved), "--output", str(tmp_path / "a"), "--json")
    assert built.returncode == 0, built.stderr
    assert as_json(built)["cache_key"] == load_saved_plan(plan).plan.cache_key

    weights = next(model.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, different content
    weights.write_bytes(bytes(data))
    changed = lmi_build("hf", "--plan", str(plan), "--no-cache", "--output", str(tmp_path / "b"))
    assert changed.returncode == 1
    assert "is not the model that was planned" in changed.stderr and "content" in changed.stderr
    assert not (tmp_path / "b").exists()


def test_build_with_plan_equals_build_with_flags(tmp_path: Path) -> None:
    flags = ("--model", "demo:tiny-llama", "--dtype", "bf16")
    plan = save_plan(tmp_path, "hf", *flags)
    by_flags = lmi_build("hf", *flags, "--no-cache", "--output", str(tmp_path / "flags"), "--json")
    by_plan = lmi_build("hf", "--plan", str(plan), "--no-cache", "--output", str(tmp_path / "plan"), "--json")
    assert by_flags.returncode == 0 and by_plan.returncode == 0, by_plan.stderr
    assert as_json(by_flags)["cache_key"] == as_json(by_plan)["cache_key"]
    assert (tmp_path / "flags" / "serving.properties").read_text() == (tmp_path / "plan" / "serving.properties").read_text()


def _properties(artifact: Path) -> dict[str, str]:
    return read_properties_with_lines(artifact / "serving.properties").as_dict()


def test_script_bundle_finishing_command_runs_as_printed(tmp_path: Path) -> None:
    env = standin_env()
    args = ("--model", "demo:tiny-llama", "--profile", PROFILE, "--max-input-len", "512", "--max-output-len", "256")
    bundle = tmp_path / "bundle"
    scripted = lmi_build("trtllm", *args, "--runner", "script", "--output", str(bundle), "--json")
    assert scripted.returncode == 0, scripted.stderr
    finish = as_json(scripted)["next_command"]
    assert finish.startswith(f"(cd {bundle} && ./build-engines.sh) && lmi-build trtllm --plan {bundle}/plan.json")
    assert (bundle / "plan.json").is_file() and (bundle / "checkpoint" / "config.json").is_file()

    # On the "GPU host": the engine build runs with the tools on PATH (here the stand-in), as printed.
    done = subprocess.run(finish, shell=True, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, **env, "RUNNER": "local"})
    assert done.returncode == 0, done.stdout + done.stderr
    artifact = Path(f"{bundle}-artifact")
    direct = tmp_path / "direct"
    built = lmi_build("trtllm", *args, "--output", str(direct), "--json", env=env)
    assert built.returncode == 0, built.stderr
    # The packaged artifact is exactly what building the same plan in one go gives.
    assert _properties(artifact) == _properties(direct)
    assert _properties(artifact)["option.max_input_len"] == "512"
    assert lmi_build("verify", str(artifact)).returncode == 0


def test_script_bundle_of_tp2_packages_with_its_world_size(tmp_path: Path) -> None:
    env = standin_env()
    bundle = tmp_path / "bundle"
    scripted = lmi_build("trtllm", "--model", "demo:tiny-llama", "--profile", PROFILE, "--tp", "2",
                         "--runner", "script", "--output", str(bundle), "--json")
    assert scripted.returncode == 0, scripted.stderr
    done = subprocess.run(as_json(scripted)["next_command"], shell=True, capture_output=True, text=True,
                          timeout=600, check=False, env={**os.environ, **env, "RUNNER": "local", "WORKERS": "2"})
    assert done.returncode == 0, done.stdout + done.stderr
    artifact = Path(f"{bundle}-artifact")
    assert _properties(artifact)["option.tensor_parallel_degree"] == "2"
    assert sorted(p.name for p in artifact.glob("rank*.engine")) == ["rank0.engine", "rank1.engine"]


def test_exit_3_finishing_command_runs_as_printed(tmp_path: Path) -> None:
    out = tmp_path / "ckpt"
    stopped = lmi_build("trtllm", "--model", "demo:tiny-llama", "--profile", PROFILE, "--tp", "2",
                        "--max-input-len", "512", "--max-output-len", "256", "--output", str(out), "--json",
                        env={"PATH": no_gpu_path()})
    assert stopped.returncode == 3, stopped.stderr
    finish = as_json(stopped)["next_command"]
    assert finish.startswith(f"lmi-build trtllm --plan {out}/plan.json --checkpoint {out}")
    assert (out / "plan.json").is_file() and (out / "rank1.safetensors").is_file()

    done = subprocess.run(finish, shell=True, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, **standin_env()})
    assert done.returncode == 0, done.stdout + done.stderr
    artifact = Path(f"{out}-artifact")
    properties = _properties(artifact)
    assert properties["option.tensor_parallel_degree"] == "2" and properties["option.max_input_len"] == "512"


def test_checkpoint_is_checked_against_the_plan(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    made = lmi_build("trtllm", "--model", "demo:tiny-llama", "--tp", "2", "--until", "checkpoint",
                     "--output", str(ckpt))
    assert made.returncode == 0, made.stderr
    other = lmi_build("trtllm", "--model", "demo:tiny-llama", "--tp", "1", "--checkpoint", str(ckpt),
                      "--runner", "script", "--output", str(tmp_path / "bundle"))
    assert other.returncode == 1 and "not this plan's checkpoint" in other.stderr
    assert "world size 2 (the plan has 1)" in other.stderr and not (tmp_path / "bundle").exists()
    quantized = lmi_build("trtllm", "--model", "demo:tiny-llama", "--tp", "2", "--quantize", "fp8",
                          "--checkpoint", str(ckpt), "--runner", "script", "--output", str(tmp_path / "bundle"))
    assert quantized.returncode == 1 and "quant_algo None (the plan has FP8)" in quantized.stderr
    missing = lmi_build("trtllm", "--model", "demo:tiny-llama", "--checkpoint", str(tmp_path / "nope"),
                        "--runner", "script", "--output", str(tmp_path / "bundle"))
    assert missing.returncode == 1 and "is not a directory" in missing.stderr and "Traceback" not in missing.stderr


# ---- a saved plan is built as planned, never as edited (in-process: no build runs) ----

def _saved(tmp_path: Path, target: str = "trtllm", **fields: object) -> tuple[Path, dict[str, object]]:
    from lmi_build.planner.make import plan_request
    from lmi_build.targets import get_target, request_for
    from tests.conftest import FIXTURE_CONFIGS

    model = tmp_path / "llama"
    model.mkdir(exist_ok=True)
    shutil.copy(FIXTURE_CONFIGS / "meta-llama--Llama-2-7b-hf" / "config.json", model / "config.json")
    shutil.copy(FIXTURE_CONFIGS / "meta-llama--Llama-2-7b-hf" / "tokenizer.json", model / "tokenizer.json")
    saved = plan_request(request_for(target, {"model": str(model), **fields}, env={}), get_target(target))  # type: ignore[arg-type]
    path = tmp_path / "plan.json"
    saved.save(path)
    return path, json.loads(path.read_text())


def _write(path: Path, data: dict[str, object], *, redigest: bool) -> None:
    from lmi_build.planning.saved import DIGEST_FIELD, content_digest

    content = {key: value for key, value in data.items() if key != DIGEST_FIELD}
    if redigest:  # as a careful editor would: the digest recomputed over the edited content
        content[DIGEST_FIELD] = content_digest(content)
    else:
        content[DIGEST_FIELD] = data[DIGEST_FIELD]
    path.write_text(json.dumps(content, indent=2))


def _refusal(path: Path) -> str:
    from lmi_build.core.errors import OptionError

    with pytest.raises(OptionError) as refused:
        load_saved_plan(path)
    return refused.value.one_line()


def test_a_saved_plan_loads_as_written(tmp_path: Path) -> None:
    path, _ = _saved(tmp_path, tp="2")
    saved = load_saved_plan(path)
    assert saved.plan.valid and saved.plan.build is not None and saved.plan.build.tp == 2


@pytest.mark.parametrize("edit", ["tp3", "option", "cache_key", "valid"])
def test_an_edited_plan_is_refused(tmp_path: Path, edit: str) -> None:
    path, data = _saved(tmp_path, tp="2", **({"max_input_len": 100000} if edit == "valid" else {}))
    plan = data["plan"]
    assert isinstance(plan, dict)
    if edit == "tp3":
        plan["build"]["tp"] = 3
    elif edit == "option":
        plan["options"]["option.max_rolling_batch_size"] = "999"
    elif edit == "cache_key":
        plan["cache_key"] = "sha256:" + "0" * 64  # another plan's artifact would be served
    else:
        assert plan["valid"] is False and plan["errors"]
        plan["valid"], plan["errors"] = True, []
    _write(path, data, redigest=False)
    assert "was edited after it was saved" in _refusal(path)


@pytest.mark.parametrize("edit", ["tp3", "deleted", "extra", "cache_key", "valid_with_errors", "another_target"])
def test_an_edited_plan_with_a_recomputed_digest_is_still_refused(tmp_path: Path, edit: str) -> None:
    path, data = _saved(tmp_path, tp="2")
    plan = data["plan"]
    assert isinstance(plan, dict)
    build = plan["build"]
    if edit == "tp3":
        build["tp"] = 3  # the cache key is the content's: tp is in it
        expected = "cache key"
    elif edit == "deleted":
        del build["tokens_per_block"]  # never silently the default
        expected = "plan.build.tokens_per_block is missing"
    elif edit == "extra":
        build["max_beam_width_typo"] = 4
        expected = "invalid at plan.build.trtllm.max_beam_width_typo"
    elif edit == "cache_key":
        plan["cache_key"] = "sha256:" + "0" * 64
        expected = "cache key that is not its content's"
    elif edit == "valid_with_errors":
        plan["errors"] = [{"code": "x", "message": "m", "hint": None}]
        expected = "valid=True with 1 error(s)"
    else:
        build["target"] = "hf"  # a trtllm plan's knobs never load as another target's
        expected = "invalid at plan"
    _write(path, data, redigest=True)
    message = _refusal(path)
    assert expected in message and "\n" not in message, message
