"""TOML data tables validated by pydantic models: the option table, instance types, the Neuron SDK
pin, TensorRT-LLM flags, recipes and container profiles are all read through here.

A table that does not parse or does not match its model is one ``LmiBuildError`` line naming the
file and the first offending field, never a pydantic report of many lines.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from lmi_build.core.errors import LmiBuildError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

Model = TypeVar("Model", bound=BaseModel)

DATA_DIR = Path(__file__).resolve().parents[1] / "data"


class TableError(LmiBuildError):
    """A data table does not parse as TOML or does not match its schema."""

    code = "table"


def read_table(path: Path, model: type[Model], *, error: type[LmiBuildError] = TableError,
               hint: str | None = None) -> Model:
    """Parse ``path`` and validate it as ``model``. Failures raise ``error`` (one line, naming the
    file and the field) with ``hint``, by default: fix the file or reinstall lmi-build."""
    advice = hint or f"fix {path}, or reinstall lmi-build if you did not edit it"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"{path.name}: cannot read {path}: {exc.strerror or exc}", hint=advice) from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path.name}: invalid TOML: {_one_line(str(exc))}", hint=advice) from exc
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(f"{path.name}: {first_problem(exc)}", hint=advice) from exc


def first_problem(exc: ValidationError) -> str:
    """``field a.b.0: message (and N more)`` for the first of a pydantic error's problems."""
    problems = exc.errors()
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"field {where}: {_one_line(first['msg'])}{more}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


@cache
def _load(path: Path, model: type[BaseModel]) -> BaseModel:
    return read_table(path, model)


def load_table(path: Path, model: type[Model]) -> Model:
    """``read_table`` once per process and file: for the tables bundled with lmi-build."""
    table = _load(path, model)
    assert isinstance(table, model)
    return table


def bundled_table(name: str, model: type[Model]) -> Model:
    """``lmi_build/data/<name>`` as ``model``, read once."""
    return load_table(DATA_DIR / name, model)
