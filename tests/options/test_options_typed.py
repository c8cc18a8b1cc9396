"""Typed options: each value is parsed once, at resolution, by its table entry; a value that does
not parse is one error naming its key; readers downstream get typed values and never parse."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from lmi_build.options.booleans import bool_text, parse_bool
from lmi_build.options.resolve import (
    OptionInputs,
    option_spec,
    resolve_options,
    resolved_value,
    written_options,
)
from lmi_build.options.resolved import ResolvedOptions, Source
from lmi_build.planning.context import read_options
from lmi_build.planning.options import CommonOptions
from lmi_build.targets.hf.options import HfOptions
from lmi_build.targets.trtllm.options import TrtllmOptions
from tests.fixtures_planning import Planner

LLAMA = "meta-llama--Llama-2-7b-hf"

# One option of each table type with a value that does not parse, and the target it applies to.
UNPARSEABLE = [
    pytest.param("int", "option.max_input_len", "12k", "trtllm", id="int"),
    pytest.param("float", "option.kv_cache_free_gpu_mem_fraction", "most", "trtllm", id="float"),
    pytest.param("bool", "option.enable_kv_cache_reuse", "maybe", "trtllm", id="bool"),
    pytest.param("enum", "option.dtype", "half", "hf", id="enum"),
    pytest.param("int_list", "option.context_length_estimate", "256,,512", "neuronx", id="int_list"),
    pytest.param("int_or_max", "option.tensor_parallel_degree", "all", "hf", id="int_or_max"),
]


def _resolve(cli: dict[str, str], target: str = "trtllm") -> Any:
    inputs = OptionInputs(cli={key: (value, f"--option {key}") for key, value in cli.items()})
    return resolve_options(inputs, target=target)


@pytest.mark.parametrize(("kind", "key", "value", "target"), UNPARSEABLE)
def test_a_value_that_does_not_parse_is_one_resolution_error(kind: str, key: str, value: str, target: str) -> None:
    assert option_spec(key).type == kind  # type: ignore[union-attr]
    resolution = _resolve({key: value}, target)
    (error,) = resolution.errors
    assert error.code == "invalid_value" and error.message.startswith(f"{key}={value}: ")
    assert error.hint is not None and key in error.hint
    item = resolution.options.values[key]
    assert item.typed is None and item.value == value  # read as unset downstream; the text is kept


@pytest.mark.parametrize(("kind", "key", "value", "target"), UNPARSEABLE)
def test_the_planner_reports_it_once(plan_model: Planner, kind: str, key: str, value: str, target: str) -> None:
    # A real plan: resolution reports the value; no target or check reports it again.
    plan = plan_model(target, LLAMA, tp="8" if target == "neuronx" else None, option=(f"{key}={value}",))
    assert [m.code for m in plan.errors] == ["invalid_value"], plan.errors
    assert plan.errors[0].message.startswith(f"{key}={value}: ")


@pytest.mark.parametrize(("key", "text", "typed"), [
    ("option.max_input_len", " 2048 ", 2048),
    ("option.smoothquant_alpha", "1", 1.0),
    ("option.trust_remote_code", " TRUE", True),
    ("option.context_length_estimate", "256, 512", (256, 512)),
    ("option.tensor_parallel_degree", "max", "max"),
    ("option.tensor_parallel_degree", "4", 4),
    ("option.dtype", "bf16", "bf16"),
    ("option.revision", "main", "main"),
    ("option.custom_key", "01", "01"),  # not in the table: passed through as text
])
def test_resolution_carries_the_typed_value_beside_the_written_text(key: str, text: str, typed: Any) -> None:
    resolution = _resolve({key: text})
    item = resolution.options.values[key]
    assert item.typed == typed and type(item.typed) is type(typed)
    expected_text = {"option.max_input_len": "2048", "option.trust_remote_code": "true",
                     "option.context_length_estimate": "256,512"}.get(key, text)
    assert item.value == expected_text  # what serving.properties gets, as before typing


def test_table_defaults_are_typed_too() -> None:
    options = _resolve({}, "trtllm").options
    assert options.values["option.max_input_len"].source is Source.DEFAULT
    typed = read_options(options, TrtllmOptions)
    assert typed.max_input_len == 1024 and typed.trust_remote_code is False and typed.tensor_parallel_degree == "max"


# ------------------------------------------------------------------------------ booleans
@pytest.mark.parametrize(("text", "flag"), [
    ("true", True), ("TRUE", True), ("True", True), (" true\t", True),
    ("false", False), ("FALSE", False), ("False", False), (" fAlSe ", False),
    ("yes", None), ("no", None), ("1", None), ("0", None), ("on", None), ("off", None),
    ("t", None), ("y", None), ("", None), ("truee", None),
])
def test_one_boolean_vocabulary(text: str, flag: bool | None) -> None:
    """true/false in any case, as Java's Boolean.parseBoolean reads them: "yes", "1" or "on"
    would be false in the container's Java side, so they are refused everywhere, the same way."""
    assert parse_bool(text) == flag
    spec = option_spec("trust_remote_code")
    assert spec is not None
    assert (spec.problem(text) is None) == (flag is not None)
    resolution = _resolve({"option.trust_remote_code": text})
    if flag is None:
        assert [e.code for e in resolution.errors] == ["invalid_value"]
        assert "expected true or false" in resolution.errors[0].message
    else:
        assert resolution.ok and read_options(resolution.options, CommonOptions).trust_remote_code is flag
        assert resolution.options.get("trust_remote_code") == bool_text(flag)  # written lower-case
    # The environment translation (ENABLE_CUDA_GRAPHS -> option.enforce_eager, inverted) reads the same words.
    env = resolve_options(OptionInputs(env={"ENABLE_CUDA_GRAPHS": text}), target="hf") if text else None
    if env is not None:
        if flag is None:
            assert [e.code for e in env.errors] == ["invalid_value"]
        else:
            assert env.ok and read_options(env.options, HfOptions).enforce_eager is (not flag)


# ------------------------------------------------------------------------------ readers
class _MisTyped(BaseModel):
    """A reader that disagrees with the table about max_input_len's type (an int)."""

    model_config = ConfigDict(strict=True)
    max_input_len: bool | None = None


def test_readers_check_the_type_and_never_parse() -> None:
    options = _resolve({"option.max_input_len": "2048", "option.custom_flag": "true"}).options
    assert read_options(options, TrtllmOptions).max_input_len == 2048
    with pytest.raises(ValidationError, match="max_input_len"):
        read_options(options, _MisTyped)  # the reader disagrees with the table: a bug, said loudly
    assert options.value("custom_flag") == "true"  # an unknown key stays text: nobody parses it downstream
    assert options.value("no_such_key") is None


def test_derived_and_written_values_are_typed_by_the_table() -> None:
    assert resolved_value("async_mode", "true", Source.DERIVED).typed is True
    assert resolved_value("option.tensor_parallel_degree", "8", Source.DERIVED).typed == 8
    with pytest.raises(ValueError, match="expected an integer"):
        resolved_value("tokens_per_block", "sixty-four", Source.DERIVED)
    written = written_options({"option.max_input_len": "512", "option.dtype": "bf16", "engine": "MPI"},
                              {"option.max_input_len": "cli"})
    assert isinstance(written, ResolvedOptions)
    typed = read_options(written, CommonOptions)
    assert typed.max_input_len == 512 and typed.dtype == "bf16"
    assert written.source_of("max_input_len") is Source.CLI and written.source_of("dtype") is Source.DERIVED


def test_a_saved_plan_reads_back_typed(plan_model: Planner) -> None:
    plan = plan_model("trtllm", LLAMA, tp="2", max_input_len=2048, trust_remote_code=True)
    options = written_options(plan.options, plan.option_sources)
    typed = read_options(options, CommonOptions)
    assert typed.tensor_parallel_degree == 2 and typed.max_input_len == 2048 and typed.trust_remote_code is True
    assert {k: v.value for k, v in options.values.items()} == plan.options  # typing never changes the written text


def test_a_recipe_version_option_is_reported_once(plan_model: Planner) -> None:
    baichuan = "baichuan-inc--Baichuan2-13B-Chat"
    assert plan_model("trtllm", baichuan, trust_remote_code=True).valid
    plan = plan_model("trtllm", baichuan, trust_remote_code=True, option=("option.baichuan_model_version=v9",))
    assert [m.code for m in plan.errors] == ["invalid_value"]  # not model_version_invalid as well
