"""The option table: every entry well formed, every seed-table key present, the documented defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lmi_build.core.tables import TableError
from lmi_build.core.target_names import TARGET_NAMES
from lmi_build.options.spec import (
    TABLE_PATH,
    alias_for,
    all_option_specs,
    canonical_key,
    load_table,
    option_spec,
)
from tests.conftest import SEEDS_DIR

SEED_TABLES = (
    "000_2207506988884426.txt",
    "001_f89e7386fb8914ba.txt",
    "002_3ebcd3e1f69f10e2.txt",
    "003_63406081a901a760.txt",  # the LMI-Dist guide's advanced table
)
_KEY = re.compile(r"\boption\.[A-Za-z0-9_]+")


def _seed_keys(path: Path) -> set[str]:
    """Keys in the first cell of the seed's table rows (markdown rows, or the plain-text rows of
    seed 001 that have no leading pipe)."""
    keys: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if "|" not in line:
            continue
        first_cell = line.strip().lstrip("|").split("|", 1)[0]
        keys.update(_KEY.findall(first_cell))
        bare = first_cell.strip()
        if bare in ("engine", "job_queue_size", "batch_size"):
            keys.add(bare)
    return keys


def test_seed_directory_is_present() -> None:
    assert SEEDS_DIR.is_dir(), f"the seed tables are expected at {SEEDS_DIR}"


@pytest.mark.parametrize("seed", SEED_TABLES)
def test_every_seed_table_key_is_in_the_option_table(seed: str) -> None:
    keys = _seed_keys(SEEDS_DIR / seed)
    assert len(keys) >= 10, f"parsed too few keys from {seed}: {sorted(keys)}"
    missing = sorted(key for key in keys if option_spec(key) is None)
    assert missing == [], f"{seed} documents keys the option table lacks: {missing}"


def test_seed_parser_sees_the_rotary_pair_row() -> None:
    keys = _seed_keys(SEEDS_DIR / SEED_TABLES[0])
    assert {"option.rotary_scaling_type", "option.rotary_scaling_factor", "engine", "job_queue_size"} <= keys


def test_every_entry_is_well_formed() -> None:
    specs = all_option_specs()
    assert len(specs) >= 90
    assert len({spec.key for spec in specs}) == len(specs)
    for spec in specs:
        assert spec.description.strip() and "\n" not in spec.description, spec.key
        assert spec.key == "engine" or spec.key.startswith("option.") or spec.is_top_level
        assert (spec.type == "enum") == bool(spec.choices), spec.key
        for target in TARGET_NAMES:
            default = spec.default_for(target)
            if default is not None:
                assert spec.problem(default) is None, f"{spec.key} default {default!r} for {target}"
                assert spec.normalize(default) == default, f"{spec.key}: default is not canonical"
        for value, deprecation in spec.deprecated_values.items():
            assert value in spec.choices
            assert deprecation.replacement is None or deprecation.replacement in spec.choices


def test_documented_defaults_per_target() -> None:
    tp = option_spec("tensor_parallel_degree")
    assert tp is not None
    assert (tp.default_for("trtllm"), tp.default_for("neuronx"), tp.default_for("hf")) == ("max", "1", "1")
    assert option_spec("max_rolling_batch_size").default == "32"  # type: ignore[union-attr]
    assert option_spec("max_input_len").default == "1024"  # type: ignore[union-attr]
    assert option_spec("max_output_len").default == "512"  # type: ignore[union-attr]
    assert option_spec("tokens_per_block").default == "64"  # type: ignore[union-attr]
    assert option_spec("rolling_batch").default_for("trtllm") == "trtllm"  # type: ignore[union-attr]
    assert option_spec("rolling_batch").default_for("neuronx") is None  # type: ignore[union-attr]
    # The optimize level must stay unset by default: DJL adds -O<n> only when it is set, and the
    # compiler flags are part of the NEFF cache key.
    assert option_spec("neuron_optimize_level").default is None  # type: ignore[union-attr]
    assert option_spec("n_positions").derived_default  # type: ignore[union-attr]


def test_restricted_and_build_relevant_flags() -> None:
    for key in ("use_fused_mlp", "rotary_dim", "rotary_base", "baichuan_model_version", "chatglm_model_version"):
        spec = option_spec(key)
        assert spec is not None and spec.restricted and spec.is_build_relevant("trtllm"), key
    for key in ("job_queue_size", "kv_cache_free_gpu_mem_fraction", "batch_scheduler_policy", "model_loading_timeout"):
        spec = option_spec(key)
        assert spec is not None and not spec.is_build_relevant("trtllm"), key
    rolling = option_spec("max_rolling_batch_size")
    assert rolling is not None and rolling.is_build_relevant("trtllm") and not rolling.is_build_relevant("hf")


def test_lookup_accepts_short_and_full_keys() -> None:
    assert option_spec("tensor_parallel_degree") is option_spec("option.tensor_parallel_degree")
    assert option_spec("engine") is not None and option_spec("engine").is_top_level  # type: ignore[union-attr]
    assert option_spec("job_queue_size") is not None
    assert option_spec("no_such_option") is None
    assert canonical_key("option.entrypoint") == "option.entryPoint"


def test_aliases_from_the_seed() -> None:
    mpi = alias_for("engine", "MPI")
    assert mpi is not None
    assert mpi.sets == {"engine": "Python", "option.mpi_mode": "true", "option.entryPoint": "djl_python.huggingface"}
    assert alias_for("engine", "DeepSpeed").sets["option.entryPoint"] == "djl_python.deepspeed"  # type: ignore[union-attr]
    assert alias_for("engine", "FasterTransformer").sets["option.entryPoint"] == "djl_python.fastertransformer"  # type: ignore[union-attr]
    assert alias_for("engine", "Python") is None


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("tensor_parallel_degree", "abc", 'expected an integer or "max"'),
        ("tensor_parallel_degree", "0", "positive integer"),
        ("tensor_parallel_degree", "max", None),
        ("tensor_parallel_degree", "-1", None),
        ("max_rolling_batch_size", "0", "must be at least 1"),
        ("kv_cache_free_gpu_mem_fraction", "1.5", "must be at most 1"),
        ("kv_cache_free_gpu_mem_fraction", "0", "must be greater than 0"),
        ("kv_cache_free_gpu_mem_fraction", "nan", "expected a number"),
        ("rotary_scaling_factor", "1.0", "must be greater than 1"),
        ("trust_remote_code", "TRUE", None),
        ("trust_remote_code", "yes", "expected true or false"),
        ("engine", "mpi", "expected MPI (values are case-sensitive)"),
        # DJL lower-cases it before validating (properties.py validate_enable_streaming, 0.28.0-dlc:71-76);
        # its own Neuron integration tests write Python's False (tests/fixtures/neuron-corpus).
        ("enable_streaming", "False", None),
        ("enable_streaming", "HuggingFace", None),
        ("enable_streaming", "no", "expected one of"),
        ("dtype", "float16", "expected one of: fp16, fp32, bf16, int8"),
        ("context_length_estimate", "256, 512,1024", None),
        ("context_length_estimate", "256,,1024", "comma"),
        ("model_id", "anything at all", None),
    ],
)
def test_value_checks(key: str, value: str, problem: str | None) -> None:
    spec = option_spec(key)
    assert spec is not None
    found = spec.problem(value)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


def test_typed_values() -> None:
    assert option_spec("trust_remote_code").parse(" True ") is True  # type: ignore[union-attr]
    assert option_spec("tensor_parallel_degree").parse("max") == "max"  # type: ignore[union-attr]
    assert option_spec("tensor_parallel_degree").parse("8") == 8  # type: ignore[union-attr]
    assert option_spec("context_length_estimate").parse("256,512") == (256, 512)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="expected a number"):
        option_spec("smoothquant_alpha").parse("high")  # type: ignore[union-attr]


def _table_with(tmp_path: Path, entry: str) -> Path:
    path = tmp_path / "options.toml"
    path.write_text(f"[[option]]\n{entry}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("entry", "complaint"),
    [
        ('key = "option.x"\ntype = "int"\ndefault = "abc"\nengines = ["common"]\ndescription = "d"', "expected an integer"),
        ('key = "option.x"\ntype = "enum"\nengines = ["common"]\ndescription = "d"', "choices are required"),
        ('key = "option.x"\ntype = "int"\nengines = ["common"]\ndescription = ""', "at least 1 character"),
        ('key = "option.x"\ntype = "int"\nengines = ["common"]', "description"),
        ('key = "x"\ntype = "int"\nengines = ["common"]\ndescription = "d"', "TOP_LEVEL_KEYS"),
        ('key = "option.x"\ntype = "bool"\ndefault = "yes"\nengines = ["common"]\ndescription = "d"', "true or false"),
        ('key = "option.x"\ntype = "int"\nengines = ["common"]\ndescription = "d"\nflavour = 1', "Extra inputs"),
    ],
)
def test_malformed_entries_fail_to_load(tmp_path: Path, entry: str, complaint: str) -> None:
    with pytest.raises(TableError, match=re.escape(complaint)) as caught:
        load_table(_table_with(tmp_path, entry))
    # One line that names the file and the offending entry.
    assert "\n" not in caught.value.one_line()
    assert caught.value.message.startswith("options.toml: field option.0")


def test_the_shipped_table_loads_from_its_file() -> None:
    table = load_table(TABLE_PATH)
    assert {spec.key for spec in table.option} == {spec.key for spec in all_option_specs()}
