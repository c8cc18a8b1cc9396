"""Which model types and architecture classes transformers implements natively.

A config whose model_type or architecture transformers lacks can only be loaded with remote code
(``trust_remote_code``). The lists are data (``data/transformers_native.json``), generated from the
transformers version lmi-build pins, so ``plan`` never imports transformers. Regenerate with
``python -m lmi_build.model.native`` after changing the pin; a test checks they still agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA_FILE = Path(__file__).with_name("data") / "transformers_native.json"


@dataclass(frozen=True)
class NativeNames:
    transformers_version: str
    model_types: frozenset[str]
    architectures: frozenset[str]


@lru_cache(maxsize=1)
def native_names() -> NativeNames:
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return NativeNames(
        transformers_version=data["transformers_version"],
        model_types=frozenset(data["model_types"]),
        architectures=frozenset(data["architectures"]),
    )


def collect_from_transformers() -> NativeNames:
    """Read the names from the installed transformers (imports it: tests and regeneration only)."""
    import transformers
    from transformers.models.auto import configuration_auto, modeling_auto

    architectures: set[str] = set()
    for attr in dir(modeling_auto):
        if attr.startswith("MODEL") and attr.endswith("MAPPING_NAMES"):
            for value in getattr(modeling_auto, attr).values():
                architectures.update([value] if isinstance(value, str) else value)
    return NativeNames(
        transformers_version=transformers.__version__,
        model_types=frozenset(configuration_auto.CONFIG_MAPPING_NAMES),
        architectures=frozenset(architectures),
    )


if __name__ == "__main__":
    names = collect_from_transformers()
    data = {
        "transformers_version": names.transformers_version,
        "model_types": sorted(names.model_types),
        "architectures": sorted(names.architectures),
    }
    DATA_FILE.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {DATA_FILE}")
