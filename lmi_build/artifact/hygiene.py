"""What must never leave the build host inside an artifact: secrets and host paths.

An artifact is copied between machines and accounts; a token or an absolute path of the build host
inside it is a leak (secrets) or a silent dependency on that host (paths). The packager runs these
checks on everything it writes itself (manifest, serving.properties) before writing it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from lmi_build.core.redaction import REDACTED, environment_secrets, is_secret_key, redact

__all__ = ["REDACTED", "host_path_leaks", "host_roots", "is_secret_key", "redact_tree", "secret_values"]

def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of credential environment variables (HF_TOKEN, AWS_SECRET_ACCESS_KEY, ...), longest first."""
    return environment_secrets(environ)


def redact_tree(data: Any, secrets: list[str], key: str = "") -> Any:
    """A copy of a JSON-like tree with credentials redacted: values of secret-named keys, values
    that look like tokens, and any occurrence of a credential of the environment."""
    if isinstance(data, str):
        return redact(key, data, secrets)
    if isinstance(data, Mapping):
        return {name: redact_tree(value, secrets, str(name)) for name, value in data.items()}
    if isinstance(data, list | tuple):
        return [redact_tree(item, secrets, key) for item in data]
    return data


def host_roots(*extra: Path) -> list[str]:
    """Absolute directories of this host that must not appear in an artifact: home, tmp, cwd, ...

    Both the given and the symlink-resolved spelling of each are returned (``/tmp`` vs
    ``/private/tmp``). The filesystem root itself is excluded: it prefixes every path.
    """
    candidates: list[Path] = [Path.home(), Path(tempfile.gettempdir()), Path.cwd(), *extra]
    roots: set[str] = set()
    for candidate in candidates:
        for spelling in (candidate.absolute(), candidate.resolve()):
            text = str(spelling).rstrip("/")
            if text:
                roots.add(text)
    return sorted(roots, key=len, reverse=True)


def starts_with_root(value: str, roots: list[str]) -> str | None:
    for root in roots:
        if value == root or value.startswith(root + "/"):
            return root
    return None


def iter_strings(data: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every (json path, string) of a JSON-like tree, keys included."""
    if isinstance(data, str):
        yield where, data
    elif isinstance(data, Mapping):
        for key, value in data.items():
            yield f"{where}.{key}", str(key)
            yield from iter_strings(value, f"{where}.{key}")
    elif isinstance(data, list | tuple):
        for index, item in enumerate(data):
            yield from iter_strings(item, f"{where}[{index}]")


def host_path_leaks(data: Any, roots: list[str]) -> list[str]:
    """JSON paths of the strings in ``data`` that are absolute paths under a host root."""
    return [where for where, text in iter_strings(data) if starts_with_root(text, roots)]
