"""The driver imports only what the transformers-neuronx of each profile has (issue 21 finding 5:
``from transformers_neuronx.config import GQA`` exists from 0.11 only, so every TNX build on LMI
0.27/0.28 crashed). The expectations are tests/vendor/tnx/names.json, extracted from the vendor's
source by tests/vendor/tnx/extract_names.py, never from lmi-build's tables."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lmi_build.targets.neuronx import driver
from lmi_build.targets.neuronx.profiles import NeuronProfile, load_profiles
from lmi_build.targets.neuronx.sdk import sdk
from tests.paths import VENDOR_DIR

VENDOR = json.loads((VENDOR_DIR / "tnx" / "names.json").read_text())["versions"]
# The profiles whose transformers-neuronx path lmi-build's driver runs (0.26's split layout is not built).
TNX_PROFILES = [p for p in load_profiles() if not p.split_layout_unbuilt]


def _driver_imports() -> list[tuple[str, str]]:
    """(module under transformers_neuronx, name) for every ``from transformers_neuronx... import`` in the driver."""
    found = []
    for node in ast.walk(ast.parse(Path(driver.__file__).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "transformers_neuronx":
            module = node.module.removeprefix("transformers_neuronx").lstrip(".") or "__init__"
            found += [(module, alias.name) for alias in node.names]
    return found


def _names(profile: NeuronProfile) -> dict[str, list[str]]:
    modules: dict[str, list[str]] = VENDOR[profile.transformers_neuronx]["modules"]
    return modules


def test_the_table_covers_every_profiles_tnx() -> None:
    assert {p.transformers_neuronx for p in load_profiles()} <= set(VENDOR)
    assert ("config", "GQA") not in _driver_imports()  # the crash of finding 5, as the source shows it
    assert "GQA" not in VENDOR["0.10.0.360"]["modules"]["config"] and "GQA" in VENDOR["0.11.351"]["modules"]["config"]


@pytest.mark.parametrize("profile", TNX_PROFILES, ids=lambda p: p.name)
def test_every_name_the_driver_imports_exists_in_the_profiles_tnx(profile: NeuronProfile) -> None:
    names = _names(profile)
    missing = [f"transformers_neuronx.{module}.{name}" for module, name in _driver_imports()
               if name not in names.get(module, [])]
    assert not missing, f"{profile.transformers_neuronx} ({VENDOR[profile.transformers_neuronx]['source']}) lacks {missing}"


@pytest.mark.parametrize("profile", [p for p in TNX_PROFILES if p.layout == "neuronx-split"], ids=lambda p: p.name)
def test_split_sampling_classes_exist(profile: NeuronProfile) -> None:
    names = _names(profile)
    for model_type, dotted in sdk().split_classes.items():
        module, name = dotted.rsplit(".", 1)
        assert name in names[module], (model_type, dotted)


def _fake_tnx(root: Path, modules: dict[str, list[str]]) -> None:
    """A transformers_neuronx package with exactly the version's module-level names, each a class
    that records its arguments."""
    body = "class _Recorded:\n    def __init__(self, *args, **kwargs):\n        self.args, self.kwargs = args, kwargs\n"
    for module, names in modules.items():
        path = root / "transformers_neuronx" / (module.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            if str(parent) != ".":
                (root / parent / "__init__.py").touch()
        lines = [body] + [f"class {name}(_Recorded):\n    pass\n" for name in names if name.isidentifier()]
        path.write_text("\n".join(lines), encoding="utf-8")


@pytest.mark.parametrize("profile", TNX_PROFILES, ids=lambda p: p.name)
def test_neuron_config_is_built_with_the_versions_names(profile: NeuronProfile, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tnx(tmp_path, _names(profile))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.split(".")[0] == "transformers_neuronx"]:
        monkeypatch.delitem(sys.modules, name)
    config: Any = driver._neuron_config({"group_query_attention": "shard-over-heads", "on_device_embedding": True,
                                         "continuous_batching": {"batch_size_for_shared_caches": 4},
                                         "quant": {"dequant_dtype": "f16"}})
    assert type(config).__name__ == "NeuronConfig"
    # DJL passes the string; NeuronConfig turns it into GQA itself (0.30.0-dlc model_loader.py:187-189).
    assert config.kwargs["group_query_attention"] == "shard-over-heads"
    assert type(config.kwargs["continuous_batching"]).__name__ == "ContinuousBatchingConfig"
    assert config.kwargs["continuous_batching"].kwargs == {"batch_size_for_shared_caches": 4}
    assert type(config.kwargs["quant"]).__name__ == "QuantizationConfig"
