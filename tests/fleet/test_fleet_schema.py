"""The matrix file schema: the README documents every key, the example expands, templates fail
early. No Ray, no S3, no builds."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from lmi_build.fleet.matrix import BuildEntry, MatrixError, expand, plan_matrix, read_matrix
from lmi_build.targets import every_knob, parse_plan_text
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
PLAN_KNOBS = [declared.name for declared, _ in every_knob()]



def _table_keys() -> list[str]:
    """Every key a matrix build table takes: BuildEntry's own fields and the PlanRequest knobs."""
    return [name for name in BuildEntry.model_fields if name != "knobs"] + list(PLAN_KNOBS)


def test_readme_documents_every_matrix_key() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### `lmi-build matrix")[1].split("\n### ")[0]
    missing = [name for name in _table_keys() if f"`{name}`" not in section]
    assert missing == []


def test_example_matrix_expands() -> None:
    builds, problems = expand(read_matrix(REPO / "examples" / "builds.toml"))
    assert problems == []
    assert len(builds) == 9  # 2 models x 2 tp x 2 quantizations, and one hf build
    labels = [label for label, _, _ in builds]
    assert labels[0] == "build[0] (model=meta-llama/Llama-2-7b-hf, tp=1, quantize=awq)"
    assert all(entry.publish and "{model}" in entry.publish for _, entry, _ in builds)


@pytest.mark.parametrize(("text", "expected"), [
    ("[[build]]\ntarget = 'hf'\nmodel = 'demo:tiny-llama'\n[build.matrix]\ndtype = []\n", "non-empty list"),
    ("[[build]]\ntarget = 'hf'\nmodel = 'demo:tiny-llama'\nname = '{nope}'\n", "nope"),
    ("[[build]]\nmodel = 'demo:tiny-llama'\n", "target is missing"),
    ("[defaults]\nmodel = 'demo:tiny-llama'\n", "no [[build]] tables"),
    ("[[build]\n", "not valid TOML"),
    ("[[build]]\ntarget = 'hf'\nmodel = 'demo:tiny-llama'\nbogus_knob = 1\n", "bogus_knob: Extra inputs"),
    ("[[build]]\ntarget = 'hf'\nmodel = 'demo:tiny-llama'\npp = 'two'\n", "pp: Input should be a valid integer"),
    ("[[build]]\ntarget = 'hf'\nmodel = 'demo:tiny-llama'\n[[build]]\ntarget = 'hf'\nmodel = 'demo:tiny-llama'\n",
     "plans the same artifact as build[0]"),
])
def test_bad_matrices_name_the_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "builds.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MatrixError) as raised:
        plan_matrix(path, cache=None)
    assert any(expected in problem for problem in raised.value.problems), raised.value.problems
    assert raised.value.exit_code == 2


def test_saved_plan_entry_is_built_as_planned(tmp_path: Path) -> None:
    import os

    from lmi_build.planner.make import plan_request
    from lmi_build.planning.request import PlanRequest
    from lmi_build.targets import get_target

    saved = plan_request(PlanRequest(model="demo:tiny-llama", dtype="bf16", env=dict(os.environ)), get_target("hf"))
    saved.save(tmp_path / "plan.json")
    path = tmp_path / "builds.toml"
    # The defaults' knobs shape the flag builds only; the saved plan keeps its own.
    path.write_text("[defaults]\nmodel = 'demo:tiny-llama'\nmax_input_len = 128\n\n"
                    "[[build]]\nplan = 'plan.json'\nname = 'saved'\n\n[[build]]\ntarget = 'hf'\n", encoding="utf-8")
    jobs = {job.name: job for job in plan_matrix(path, cache=None)}
    assert jobs["saved"].cache_key == saved.plan.cache_key
    assert jobs["saved"].saved_plan == saved.dumps()
    assert jobs["hf-tiny-llama"].cache_key != saved.plan.cache_key


def test_saved_plan_entry_refuses_its_own_knobs(tmp_path: Path) -> None:
    path = tmp_path / "builds.toml"
    path.write_text("[[build]]\nplan = 'missing.json'\ntp = 2\n", encoding="utf-8")
    with pytest.raises(MatrixError) as raised:
        plan_matrix(path, cache=None)
    assert raised.value.problems == ["build[0]: tp cannot be combined with plan: the saved plan fixes every knob"]


def test_build_keys_are_the_plan_request_knobs(tmp_path: Path) -> None:
    """A matrix build takes the build commands' knobs with PlanRequest's types: TOML numbers stand
    for the text flags, lists for the repeatable ones."""
    path = tmp_path / "builds.toml"
    path.write_text("[[build]]\ntarget = 'neuronx'\nmodel = 'demo:tiny-llama'\ntp = 2\nn_positions = 512\n"
                    "context_length_estimate = 128\noption = ['option.batch_size=2']\n", encoding="utf-8")
    (_, entry, _), = expand(read_matrix(path))[0]
    assert entry.knobs == {"model": "demo:tiny-llama", "tp": "2", "n_positions": 512,
                           "context_length_estimate": "128", "option": ("option.batch_size=2",)}
    defaults = {declared.name: declared.default for declared, _ in every_knob()}
    assert BuildEntry.from_table(defaults).knobs == defaults  # each knob taken, as given
    for not_a_knob in ("env", "endpoint_url"):  # PlanRequest fields a matrix build does not set
        with pytest.raises(ValidationError, match=not_a_knob):
            BuildEntry.from_table({not_a_knob: None})


def _config_dir(directory: Path, fixture: str) -> Path:
    """A plannable model directory: a fixture's config.json and a tokenizer file."""
    from tests.conftest import FIXTURE_CONFIGS

    directory.mkdir(parents=True)
    (directory / "config.json").write_text((FIXTURE_CONFIGS / fixture / "config.json").read_text())
    (directory / "tokenizer.json").write_text("{}")
    return directory


def test_a_relative_model_is_relative_to_the_matrix_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README: relative paths are relative to the matrix file, the model's too (issue 42 item 9: it was the
    current directory's, so a matrix run from elsewhere planned another model, or none)."""
    suite = tmp_path / "suite"
    _config_dir(suite / "model", "meta-llama--Llama-2-7b-hf")
    _config_dir(suite / "plain", "mistralai--Mistral-7B-v0.1")
    elsewhere = tmp_path / "elsewhere"
    _config_dir(elsewhere / "model", "facebook--opt-125m")  # a decoy where the command runs
    (suite / "builds.toml").write_text("[[build]]\ntarget = 'hf'\nmodel = './model'\nname = 'dotted'\n\n"
                                       "[[build]]\ntarget = 'hf'\nmodel = 'plain'\nname = 'plain'\n\n"
                                       "[[build]]\ntarget = 'hf'\nmodel = 'demo:tiny-llama'\nname = 'demo'\n",
                                       encoding="utf-8")
    monkeypatch.chdir(elsewhere)
    jobs = {job.name: parse_plan_text(job.saved_plan, job.name)
            for job in plan_matrix(Path("../suite/builds.toml"), cache=None)}
    assert jobs["dotted"].inputs.model == str((suite / "model").absolute())
    assert jobs["dotted"].plan.spec.model_type == "llama"  # not the decoy's opt
    assert jobs["plain"].inputs.model == str((suite / "plain").absolute())
    assert jobs["demo"].inputs.model == "demo:tiny-llama"


def test_a_build_name_that_steers_the_terminal_is_refused_and_shown_escaped(tmp_path: Path) -> None:
    """A name holding ESC, CR or LF reached the terminal as it was and forged an "error:" line (issue 42
    item 9). It is an invalid matrix, and the message shows it escaped: one error line, no ESC byte."""
    from tests.cli_process import run_lmi_build

    model = _config_dir(tmp_path / "model", "meta-llama--Llama-2-7b-hf")
    (tmp_path / "builds.toml").write_text(f'[[build]]\ntarget = "hf"\nmodel = "{model}"\n'
                                          'name = "x\\u001b[2K\\rerror: forged\\nerror: second\\u202e"\n',
                                          encoding="utf-8")
    result = run_lmi_build("matrix", str(tmp_path / "builds.toml"), "--cache", "s3://bucket/prefix/")
    assert result.returncode == 2, result.stderr
    assert "\x1b" not in result.stderr and "\r" not in result.stderr and "\u202e" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        f"error: {tmp_path / 'builds.toml'}: 1 error(s), nothing was built (fix every listed build, then run the "
        "matrix again)"]
    assert "the name x\\x1b[2K\\rerror: forged\\nerror: second\\u202e holds control characters" in result.stderr
