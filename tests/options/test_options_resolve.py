"""Option resolution: precedence, aliases, deprecations, unknown keys, strict mode, defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmi_build.core.errors import OptionError
from lmi_build.options.resolve import (
    OptionInputs,
    OptionResolution,
    all_option_specs,
    cli_option_pairs,
    given_options,
    option_spec,
    resolve_given,
    resolve_options,
)
from lmi_build.options.resolved import Source

TP = "option.tensor_parallel_degree"


def _props(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "serving.properties"
    path.write_text(text, encoding="utf-8")
    return path


def _resolve(
    tmp_path: Path,
    *,
    cli: dict[str, str] | None = None,
    properties: str | None = None,
    env: dict[str, str] | None = None,
    recipe: dict[str, str] | None = None,
    target: str = "trtllm",
    strict: bool = False,
) -> OptionResolution:
    inputs = OptionInputs(
        cli={key: (value, f"--option {key}") for key, value in (cli or {}).items()},
        properties_file=_props(tmp_path, properties) if properties is not None else None,
        env=env or {},
        recipe_defaults=recipe or {},
    )
    return resolve_options(inputs, target=target, strict=strict)


def _codes(messages: list) -> list[str]:  # type: ignore[type-arg]
    return [message.code for message in messages]


# ------------------------------------------------------------------------------ precedence
@pytest.mark.parametrize(
    ("layers", "value", "source", "origin"),
    [
        ({"cli": "8", "properties": "4"}, "8", Source.CLI, f"--option {TP}"),
        ({"cli": "8", "env": "2"}, "8", Source.CLI, f"--option {TP}"),
        ({"properties": "4", "env": "2"}, "4", Source.PROPERTIES, "serving.properties:1"),
        ({"env": "2", "recipe": "1"}, "2", Source.ENV, "OPTION_TENSOR_PARALLEL_DEGREE"),
        ({"properties": "4", "recipe": "1"}, "4", Source.PROPERTIES, "serving.properties:1"),
        ({"recipe": "1"}, "1", Source.RECIPE, "recipe"),
        ({"env": "2"}, "2", Source.ENV, "OPTION_TENSOR_PARALLEL_DEGREE"),
        ({}, "max", Source.DEFAULT, "option table"),
        ({"cli": "8", "properties": "4", "env": "2", "recipe": "1"}, "8", Source.CLI, f"--option {TP}"),
    ],
)
def test_precedence(tmp_path: Path, layers: dict[str, str], value: str, source: Source, origin: str) -> None:
    resolution = _resolve(
        tmp_path,
        cli={TP: layers["cli"]} if "cli" in layers else None,
        properties=f"{TP}={layers['properties']}\n" if "properties" in layers else None,
        env={"OPTION_TENSOR_PARALLEL_DEGREE": layers["env"]} if "env" in layers else None,
        recipe={"tensor_parallel_degree": layers["recipe"]} if "recipe" in layers else None,
    )
    assert resolution.ok, resolution.errors
    item = resolution.options.values[TP]
    assert (item.value, item.source, item.origin) == (value, source, origin)


def test_short_cli_keys_and_top_level_keys(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, cli={"max_input_len": "2048", "job_queue_size": "10"})
    assert resolution.options.get("max_input_len") == "2048"
    assert resolution.options.values["job_queue_size"].source is Source.CLI


def test_defaults_depend_on_the_target(tmp_path: Path) -> None:
    trtllm = _resolve(tmp_path, target="trtllm").options
    neuronx = _resolve(tmp_path, target="neuronx").options
    hf = _resolve(tmp_path, target="hf").options
    assert (trtllm.get(TP), neuronx.get(TP), hf.get(TP)) == ("max", "1", "1")
    assert trtllm.get("engine") == "MPI" and neuronx.get("engine") == "Python"
    assert trtllm.get("rolling_batch") == "trtllm" and "option.rolling_batch" not in neuronx
    assert trtllm.get("max_input_len") == "1024" and "option.max_input_len" not in neuronx
    # "batch_size" alone is the top-level (server) key; the TNX batch size is option.batch_size.
    assert neuronx.get("option.batch_size") == "1" and "option.batch_size" not in trtllm
    assert hf.get("gpu_memory_utilization") == "0.9" and "option.gpu_memory_utilization" not in trtllm
    # Not materialised: no default (n_positions is derived from the model), or restricted options
    # (the recipe gives their defaults), or pass-through DeepSpeed keys.
    assert "option.n_positions" not in neuronx and "option.neuron_optimize_level" not in neuronx
    assert "option.use_fused_mlp" not in trtllm and "option.rotary_base" not in trtllm
    assert "option.triangular_masking" not in hf
    assert all(item.source is Source.DEFAULT for item in trtllm.values.values())


def test_default_engine_is_not_expanded(tmp_path: Path) -> None:
    options = _resolve(tmp_path).options
    assert options.get("engine") == "MPI" and "option.entryPoint" not in options


def test_recipe_defaults_for_restricted_options(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, recipe={"use_fused_mlp": "true", "rotary_base": "500000.0"})
    assert resolution.ok
    assert resolution.options.values["option.use_fused_mlp"].source is Source.RECIPE
    assert resolution.options.get("rotary_base") == "500000.0"


def test_active_when_defaults(tmp_path: Path) -> None:
    plain = _resolve(tmp_path).options
    assert "option.smoothquant_alpha" not in plain and "option.awq_calib_size" not in plain
    sq = _resolve(tmp_path, cli={"quantize": "smoothquant"}).options
    assert sq.get("smoothquant_alpha") == "0.8" and sq.get("smoothquant_per_token") == "false"
    awq = _resolve(tmp_path, cli={"quantize": "awq"}).options
    assert awq.get("awq_calib_size") == "32" and "option.smoothquant_alpha" not in awq


def test_inactive_option_warns(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, cli={"smoothquant_alpha": "0.5"})
    assert _codes(resolution.warnings) == ["option_inactive"]
    assert "unless option.quantize is smoothquant" in resolution.warnings[0].message


# ------------------------------------------------------------------------------ aliases
@pytest.mark.parametrize(
    ("engine", "entry_point"),
    [("MPI", "djl_python.huggingface"), ("DeepSpeed", "djl_python.deepspeed"), ("FasterTransformer", "djl_python.fastertransformer")],
)
def test_engine_aliases_expand(tmp_path: Path, engine: str, entry_point: str) -> None:
    resolution = _resolve(tmp_path, properties=f"engine={engine}\n")
    values = resolution.options.values
    assert values["engine"].value == "Python"
    assert values["option.mpi_mode"].value == "true"
    assert values["option.entryPoint"].value == entry_point
    for key in ("engine", "option.mpi_mode", "option.entryPoint"):
        assert values[key].source is Source.ALIAS
        assert values[key].origin == f"engine={engine} (serving.properties:1)"


def test_deprecated_engines_warn(tmp_path: Path) -> None:
    assert _codes(_resolve(tmp_path, properties="engine=MPI\n").warnings) == []
    assert _codes(_resolve(tmp_path, properties="engine=DeepSpeed\n").warnings) == ["deprecated_value"]
    assert _codes(_resolve(tmp_path, properties="engine=FasterTransformer\n").warnings) == ["deprecated_value"]


def test_explicit_values_beat_the_alias(tmp_path: Path) -> None:
    resolution = _resolve(
        tmp_path,
        properties="engine=MPI\n",
        env={"OPTION_ENTRYPOINT": "djl_python.tensorrt_llm"},
        recipe={"mpi_mode": "false"},
    )
    values = resolution.options.values
    assert (values["option.entryPoint"].value, values["option.entryPoint"].source) == ("djl_python.tensorrt_llm", Source.ENV)
    assert (values["option.mpi_mode"].value, values["option.mpi_mode"].source) == ("true", Source.ALIAS)


# ------------------------------------------------------------------------------ deprecations
@pytest.mark.parametrize(
    ("key", "value", "quantize"),
    [("load_in_8bit", "true", "bitsandbytes8"), ("load_in_4bit", "TRUE", "bitsandbytes4")],
)
def test_deprecated_keys_carry_over(tmp_path: Path, key: str, value: str, quantize: str) -> None:
    resolution = _resolve(tmp_path, properties=f"option.{key}={value}\n", target="hf")
    item = resolution.options.values["option.quantize"]
    assert (item.value, item.source) == (quantize, Source.PROPERTIES)
    assert item.origin == f"serving.properties:1 (option.{key})"
    assert f"option.{key}" not in resolution.options
    (warning,) = resolution.warnings
    assert warning.code == "deprecated_option" and f"option.quantize={quantize}" in warning.message


def test_deprecated_false_flag_is_dropped(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, properties="option.load_in_8bit=false\n", target="hf")
    assert "option.quantize" not in resolution.options and "option.load_in_8bit" not in resolution.options
    assert _codes(resolution.warnings) == ["deprecated_option"]


def test_load_in_8bit_is_a_real_option_for_neuronx(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, properties="option.load_in_8bit=true\n", target="neuronx")
    assert resolution.options.get("load_in_8bit") == "true" and resolution.warnings == []


def test_deprecated_key_in_a_higher_layer_beats_the_replacement_below(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, properties="option.load_in_8bit=true\n", env={"OPTION_QUANTIZE": "gptq"}, target="hf")
    assert resolution.options.get("quantize") == "bitsandbytes8"


def test_deprecated_key_conflicting_in_the_same_layer(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, properties="option.quantize=awq\noption.load_in_8bit=true\n", target="hf")
    assert resolution.options.get("quantize") == "awq"
    assert _codes(resolution.warnings) == ["conflicting_options"]


def test_deprecated_values(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, properties="option.quantize=bitsandbytes\n", target="hf")
    assert resolution.options.get("quantize") == "bitsandbytes8"
    assert _codes(resolution.warnings) == ["deprecated_value"]


def test_deprecated_key_without_replacement_is_kept(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, env={"MAX_BATCH_PREFILL_TOKENS": "4096"}, target="hf")
    assert resolution.options.get("max_rolling_batch_prefill_tokens") == "4096"
    assert _codes(resolution.warnings) == ["deprecated_option"]


# ------------------------------------------------------------------------------ validation
def test_invalid_value_message(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, properties="engine=Python\n\noption.tensor_parallel_degree=abc\n")
    (error,) = resolution.errors
    assert error.code == "invalid_value"
    assert error.message == 'option.tensor_parallel_degree=abc: expected an integer or "max" (from serving.properties:3)'
    assert error.hint and "max" in error.hint


def test_values_are_canonicalised(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, cli={"trust_remote_code": " True", "tensor_parallel_degree": " 4 "})
    assert resolution.options.get("trust_remote_code") == "true" and resolution.options.get(TP) == "4"


def test_unknown_keys_warn_and_pass_through(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, properties="option.tensor_paralel_degree=4\ntensor_parallel_degree=2\noption.custom=x\n")
    assert resolution.ok
    assert resolution.options.get("option.custom") == "x"
    assert resolution.options.values["tensor_parallel_degree"].value == "2"
    hints = {w.message.split()[2]: w.hint for w in resolution.warnings}
    assert _codes(resolution.warnings) == ["unknown_option"] * 3
    assert hints["option.tensor_paralel_degree"] == f"did you mean {TP}?"
    assert hints["tensor_parallel_degree"] is not None and "option. prefix" in hints["tensor_parallel_degree"]


def test_strict_turns_warnings_into_errors(tmp_path: Path) -> None:
    relaxed = _resolve(tmp_path, properties="option.custom=x\n")
    strict = _resolve(tmp_path, properties="option.custom=x\n", strict=True)
    assert relaxed.ok and _codes(relaxed.warnings) == ["unknown_option"]
    assert not strict.ok and _codes(strict.errors) == ["unknown_option"] and strict.warnings == []
    assert strict.options.get("option.custom") == "x"


def test_option_for_another_target_warns(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, cli={"n_positions": "2048"}, target="trtllm")
    assert _codes(resolution.warnings) == ["option_not_for_target"]
    assert resolution.options.get("n_positions") == "2048"


def test_duplicate_key_and_bom_warnings_reach_the_resolution(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, properties="\ufeffengine=Python\noption.dtype=fp16\noption.dtype=bf16\n")
    assert resolution.options.get("dtype") == "bf16"
    assert sorted(_codes(resolution.warnings)) == ["duplicate_key", "properties_bom"]


def test_env_errors_reach_the_resolution(tmp_path: Path) -> None:
    resolution = _resolve(tmp_path, env={"ENABLE_CUDA_GRAPHS": "sometimes"}, target="hf")
    assert _codes(resolution.errors) == ["invalid_value"]


def test_credentials_are_never_shown(tmp_path: Path) -> None:
    token = "hf_" + "Ab1" * 12
    resolution = _resolve(
        tmp_path,
        properties=f"option.hf_token={token}\noption.model_id=https://user:{token}@example.com/m\noption.tensor_parallel_degree={token}\n",
        env={"HF_TOKEN": token},
    )
    assert _codes(resolution.warnings) == ["secret_option", "unknown_option"]
    assert _codes(resolution.errors) == ["invalid_value"]
    for message in resolution.errors + resolution.warnings:
        assert token not in message.model_dump_json()
    assert "option.tensor_parallel_degree=***" in resolution.errors[0].message


def test_unknown_target_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="unknown target"):
        resolve_options(OptionInputs(), target="tpu")
    with pytest.raises(OptionError, match="properties file not found"):
        resolve_options(OptionInputs(properties_file=tmp_path / "nope.properties"), target="hf")


# ------------------------------------------------------------------------------ helpers
def test_cli_option_pairs() -> None:
    assert cli_option_pairs(["tensor_parallel_degree=4", "engine=MPI", "option.model_id=s3://b/m=1", "x="]) == {
        TP: ("4", "--option tensor_parallel_degree"),
        "engine": ("MPI", "--option engine"),
        "option.model_id": ("s3://b/m=1", "--option model_id"),
        "option.x": ("", "--option x"),
    }


@pytest.mark.parametrize("bad", ["novalue", "=4", "two words=1", " =x"])
def test_cli_option_pairs_rejects_malformed(bad: str) -> None:
    with pytest.raises(OptionError, match="expected key=value"):
        cli_option_pairs([bad])


def test_public_lookup_api() -> None:
    assert option_spec("tensor_parallel_degree") is option_spec(TP)
    assert len(all_option_specs()) >= 90


def test_the_given_options_are_layered_once_and_resolved_with_any_recipe(tmp_path: Path) -> None:
    """The planner reads the model from the options given, before it knows the recipe, then resolves those same
    layers once with the recipe's defaults (issue 41): the given layers hold no default, and resolving them
    does not change them."""
    inputs = OptionInputs(cli={"option.model_id": ("org/name", "--model")},
                          properties_file=_props(tmp_path, "option.tensor_parallel_degree=2\noption.dtype=bf16\n"),
                          env={"OPTION_REVISION": "main"})
    given = given_options(inputs, target="trtllm")
    assert (given.text("model_id"), given.text(TP), given.text("revision")) == ("org/name", "2", "main")
    assert given.text("option.max_input_len") is None  # the table's default is not given
    with_recipe = resolve_given(given, {"option.max_input_len": "4096"})
    without = resolve_given(given, {})
    assert with_recipe.options.get("option.max_input_len") == "4096"
    assert with_recipe.options.source_of("option.max_input_len") is Source.RECIPE
    assert without.options.source_of("option.max_input_len") is Source.DEFAULT
    assert given.text("option.max_input_len") is None and len(given.notes.warnings) == 0
    # One resolution of the given layers is the whole resolution of the inputs.
    assert resolve_given(given, {}).options == resolve_options(inputs, target="trtllm").options


def test_a_check_of_one_resolution_does_not_reach_another(tmp_path: Path) -> None:
    given = given_options(OptionInputs(cli={"option.no_such_key": ("1", "--option")}), target="trtllm")
    first, second = resolve_given(given, {}), resolve_given(given, {}, strict=True)
    assert [w.code for w in first.warnings] == ["unknown_option"]
    assert [e.code for e in second.errors] == ["unknown_option"] and second.warnings == []
    assert given.notes.warnings == []
