"""Reading values out of a raw config by alias tables and dotted paths."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

_MISSING = object()


def get_path(config: Mapping[str, Any], path: str, default: Any = None) -> Any:
    """``get_path(cfg, "attn_config.kv_n_heads")``: walk nested mappings; ``default`` when absent."""
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def first_present(config: Mapping[str, Any], keys: Iterable[str]) -> tuple[str, Any] | None:
    """The first alias with a non-null value, as ``(key, value)``; ``None`` when none has one."""
    for key in keys:
        value = get_path(config, key, _MISSING)
        if value is not _MISSING and value is not None:
            return key, value
    return None


def values_equal(actual: Any, expected: Any) -> bool:
    """Equality that keeps ``True`` from matching ``1`` (bool is an int in Python); 4096 == 4096.0."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual == expected
    return bool(actual == expected)


def value_matches(actual: Any, expected: Any) -> bool:
    """``expected`` a list: ``actual`` is one of it; ``actual`` a list: it contains ``expected``."""
    if isinstance(expected, list | tuple):
        return any(value_matches(actual, item) for item in expected)
    if isinstance(actual, list | tuple):
        return any(values_equal(item, expected) for item in actual)
    return values_equal(actual, expected)


def matches(config: Mapping[str, Any], conditions: Iterable[tuple[str, Any]]) -> bool:
    """True when every ``(path, expected)`` condition holds in ``config`` (absent keys never match)."""
    for path, expected in conditions:
        actual = get_path(config, path, _MISSING)
        if actual is _MISSING or not value_matches(actual, expected):
            return False
    return True
