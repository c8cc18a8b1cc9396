"""lmi_build.core.tables: every bundled TOML table validates against its model; a malformed one is a
one-line error naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from lmi_build.core.tables import DATA_DIR, TableError, load_table, read_table
from lmi_build.planning.instances import InstancesFile, load_instances
from lmi_build.targets.neuronx.sdk import SDK_FILE, NeuronSdk, sdk
from lmi_build.targets.trtllm.flags import FLAGS_FILE, FlagsFile, flags_file


def _broken_copy(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    text = source.read_text(encoding="utf-8")
    assert old in text, f"{old!r} is not in {source.name}"
    broken = tmp_path / source.name
    broken.write_text(text.replace(old, new, 1), encoding="utf-8")
    return broken


def _refused(path: Path, model: type[BaseModel]) -> str:
    with pytest.raises(TableError) as caught:
        read_table(path, model)
    line = caught.value.one_line()
    assert "\n" not in line and line.startswith(f"{path.name}: ")
    assert str(path) in line  # the hint says which file to fix
    return line


def test_the_bundled_tables_load() -> None:
    assert sdk().compiler.required_flags == ("--model-type=transformer", "--auto-cast=none")
    assert sdk().tp_degrees["inf2"][-1] == 24
    assert load_instances()["g5.12xlarge"].accelerator.name == "a10g"
    assert flags_file().series["0.9"].inherit == "0.8"


@pytest.mark.parametrize(("old", "new", "field"), [
    ("first_bucket = 128", 'first_bucket = "small"', "field defaults.first_bucket: Input should be a valid integer"),
    ("trn1 = [1, 2, 8, 32]", "trn2 = [1, 2, 8, 32]", "field tp_degrees.trn2.[key]: Input should be 'inf2' or 'trn1'"),
    ('name = "neuron-sdk-2.21.1"\n', "", "field name: Field required"),
    ("[compiler]\n", "[compiler]\nverbose = true\n", "field compiler.verbose: Extra inputs are not permitted"),
])
def test_a_malformed_neuron_sdk_table_is_refused(tmp_path: Path, old: str, new: str, field: str) -> None:
    line = _refused(_broken_copy(tmp_path, SDK_FILE, old, new), NeuronSdk)
    assert line.startswith(f"neuron_sdk.toml: {field}"), line


@pytest.mark.parametrize(("old", "new", "field"), [
    ('accelerator = "a10g"', 'accelerator = "a10x"', "instance g5.xlarge names unknown accelerator a10x"),
    ("memory_gib = 24.0", "memory_gib = []", "field accelerators.a10g.memory_gib: Input should be a valid number"),
    ('kind = "gpu"', 'kind = "tpu"', "field accelerators.a10g.kind: Input should be 'gpu' or 'neuron'"),
])
def test_a_malformed_instances_table_is_refused(tmp_path: Path, old: str, new: str, field: str) -> None:
    assert field in _refused(_broken_copy(tmp_path, DATA_DIR / "instances.toml", old, new), InstancesFile)


@pytest.mark.parametrize(("old", "new", "field"), [
    ('model_dir = "value"', 'model_dir = "path"', "field series.0.7.legacy_build.model_dir: Input should be"),
    ('inherit = "0.8"', 'inherit = "0.6"', "series 0.9 inherits unknown series 0.6"),
    ('min = "0.9.0"', 'min = "0.7.5"', "series 0.9 inherits 0.8, which is not older"),
    ('min = "0.9.0"', 'min = "nine"', "field series.0.9.min: Value error, Invalid version: 'nine'"),
    ('max_output_len = { kind = "error"', 'max_output_len = { kind = "fatal"',
     "field series.0.12.removed.max_output_len.kind"),
])
def test_a_malformed_flags_table_is_refused(tmp_path: Path, old: str, new: str, field: str) -> None:
    assert field in _refused(_broken_copy(tmp_path, FLAGS_FILE, old, new), FlagsFile)


def test_invalid_toml_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "instances.toml"
    path.write_text("[accelerators\n", encoding="utf-8")
    assert "instances.toml: invalid TOML:" in _refused(path, InstancesFile)
    assert "cannot read" in _refused(tmp_path / "missing.toml", InstancesFile)


def test_a_table_is_read_once(tmp_path: Path) -> None:
    path = tmp_path / "neuron_sdk.toml"
    path.write_text(SDK_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    first = load_table(path, NeuronSdk)
    path.write_text("not toml at all [", encoding="utf-8")
    assert load_table(path, NeuronSdk) is first
