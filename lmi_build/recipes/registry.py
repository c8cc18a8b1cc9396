"""Load ``recipes/*.toml`` into a ``RecipeBook`` and match a ``ModelSpec`` to its recipe.

The recipes are data shipped with lmi-build: in a wheel they live in ``lmi_build/_bundled/recipes``
(hatch force-include), in a checkout in the repository's top-level ``recipes/``. A malformed
recipe, or two recipes claiming the same model type or architecture, fails at load with the file
and field named, so a bad recipe never reaches a plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from lmi_build.core.errors import LmiBuildError, UnknownName, UnsupportedTarget
from lmi_build.core.tables import read_table
from lmi_build.core.types import PlanMessage
from lmi_build.model.aliases import QUANT_METHODS
from lmi_build.model.spec import ModelSpec
from lmi_build.recipes.inference import infer_version_options
from lmi_build.recipes.schema import Recipe

__all__ = [
    "PlanMessage",
    "RecipeBook",
    "RecipeError",
    "infer_version_options",
    "load_recipes",
    "recipes_dir",
]

_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_BUNDLED = _PACKAGE_DIR / "_bundled" / "recipes"
_CHECKOUT = _PACKAGE_DIR.parent / "recipes"


# Methods lmi-build can apply (trtllm/hf: ModelOpt or the vendor converter; neuronx: TNX int8).
QUANTIZE_METHODS = frozenset({"smoothquant", "awq", "gptq", "fp8", "int8_wo", "int4_wo", "int8"})
PREQUANTIZED_METHODS = frozenset(QUANT_METHODS.values())


class RecipeError(LmiBuildError):
    """A recipe file is malformed or conflicts with another recipe."""

    code = "recipe"


def recipes_dir() -> Path:
    """The bundled recipes of an installed wheel, else the checkout's top-level ``recipes/``."""
    return _BUNDLED if _BUNDLED.is_dir() else _CHECKOUT


@dataclass(frozen=True)
class RecipeBook:
    """Every recipe, indexed by name, architecture and model type."""

    directory: Path
    recipes: tuple[Recipe, ...]
    _by_name: dict[str, Recipe] = field(default_factory=dict, repr=False)
    _by_architecture: dict[str, Recipe] = field(default_factory=dict, repr=False)
    _by_model_type: dict[str, Recipe] = field(default_factory=dict, repr=False)

    def all(self) -> tuple[Recipe, ...]:
        return self.recipes

    def __iter__(self) -> Iterator[Recipe]:
        return iter(self.recipes)

    def names(self) -> list[str]:
        return [recipe.name for recipe in self.recipes]

    def get(self, name: str) -> Recipe:
        recipe = self._by_name.get(name)
        if recipe is None:
            raise UnknownName(
                f"no recipe named '{name}'",
                hint=f"known recipes: {', '.join(self.names())} (see: lmi-build recipes list)",
            )
        return recipe

    def find(self, spec: ModelSpec) -> Recipe | None:
        """The recipe for ``spec``: by architecture first (it names the code that runs), then model type."""
        for architecture in spec.architectures:
            if architecture in self._by_architecture:
                return self._by_architecture[architecture]
        return self._by_model_type.get(spec.model_type)

    def match(self, spec: ModelSpec) -> Recipe:
        recipe = self.find(spec)
        if recipe is None:
            architectures = ", ".join(spec.architectures) or "none"
            raise UnsupportedTarget(
                f"no recipe for model_type '{spec.model_type}' (architectures: {architectures})",
                hint=f"supported families: {', '.join(self.names())}; see: lmi-build recipes list",
            )
        return recipe


def load_recipes(directory: Path | None = None) -> RecipeBook:
    """Load and validate every ``*.toml`` in ``directory`` (default: ``recipes_dir()``); cached."""
    return _load(Path(directory or recipes_dir()).resolve())


@lru_cache(maxsize=8)
def _load(directory: Path) -> RecipeBook:
    if not directory.is_dir():
        raise RecipeError(
            f"recipe directory {directory} does not exist",
            hint="reinstall lmi-build, or pass an existing directory of recipe .toml files",
        )
    files = sorted(directory.glob("*.toml"))
    if not files:
        raise RecipeError(f"no recipe files (*.toml) in {directory}", hint="reinstall lmi-build")
    recipes = tuple(_read_recipe(path) for path in files)
    by_name = {recipe.name: recipe for recipe in recipes}
    by_architecture = _index(recipes, "architectures", directory)
    by_model_type = _index(recipes, "model_types", directory)
    return RecipeBook(directory, recipes, by_name, by_architecture, by_model_type)


def _read_recipe(path: Path) -> Recipe:
    recipe = read_table(path, Recipe, error=RecipeError, hint=f"fix {path}")
    for target, support in recipe.targets.items():
        for attribute, known in (("quantize", QUANTIZE_METHODS), ("prequantized", PREQUANTIZED_METHODS)):
            unknown = sorted(set(getattr(support, attribute)) - known)
            if unknown:
                raise RecipeError(
                    f"{path.name}: field targets.{target}.{attribute}: unknown method(s) {', '.join(unknown)}",
                    hint=f"use one of: {', '.join(sorted(known))}",
                )
    if recipe.name != path.stem:
        raise RecipeError(
            f"{path.name}: name '{recipe.name}' differs from the file name",
            hint=f"rename the file to {recipe.name}.toml or set name = \"{path.stem}\"",
        )
    return recipe


def _index(recipes: tuple[Recipe, ...], attribute: str, directory: Path) -> dict[str, Recipe]:
    index: dict[str, Recipe] = {}
    for recipe in recipes:
        for key in getattr(recipe, attribute):
            other = index.get(key)
            if other is not None and other.name != recipe.name:
                raise RecipeError(
                    f"recipes '{other.name}' and '{recipe.name}' both claim {attribute[:-1]} '{key}'",
                    hint=f"keep '{key}' in one of {other.name}.toml, {recipe.name}.toml in {directory}",
                )
            index[key] = recipe
    return index


