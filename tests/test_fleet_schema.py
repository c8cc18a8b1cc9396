"""The matrix file schema: the README documents every key, the example expands, templates fail
early. No Ray, no S3, no builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmi_build.fleet.matrix import BuildEntry, MatrixError, expand, plan_matrix, read_matrix

REPO = Path(__file__).resolve().parents[1]


def test_readme_documents_every_matrix_key() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### `lmi-build matrix")[1].split("\n### ")[0]
    missing = [name for name in BuildEntry.model_fields if f"`{name}`" not in section]
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
    ("[[build]\n", "not readable TOML"),
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
