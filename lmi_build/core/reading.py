"""Bounded reading of files and values lmi-build did not write (or that may have been edited since).

Every file a user, a model repository, a cache or a bucket hands us is read through here: a FIFO or
device is refused instead of blocking forever, sizes are capped before anything is read, JSON is
parsed with a nesting and an integer-digit limit (Python's own limits surface as RecursionError or a
ValueError deep inside the parser), and text is checked for lone surrogates. Each failure is one
``BadFile`` line naming the file, which is also a ``ValueError`` so callers that treat a bad cache
entry as a miss keep doing so.

The standard library is used as it is; only the limits are ours: ``json`` has no depth option and
``int()``'s digit limit raises a message that names no file.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from lmi_build.core.errors import LmiBuildError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Far above any real config, manifest, plan or index (a 1,000-shard weight index is ~100 KiB).
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
# Real documents nest a handful of levels (a manifest or a saved plan: under 10).
MAX_DEPTH = 64
# An integer with more digits is no size, count or id lmi-build knows (2**63 has 19).
MAX_INT_DIGITS = 40


class BadFile(LmiBuildError, ValueError):
    """A file or value that cannot be what it claims to be (not regular, too large, too deep)."""

    code = "bad_file"


def read_regular_bytes(path: Path, *, limit: int = MAX_DOCUMENT_BYTES, what: str = "file",
                       follow: bool = True) -> bytes:
    """The bytes of ``path`` (symlinks followed unless ``follow`` is false: then a link is refused) if
    it is a regular file of at most ``limit`` bytes. Opened non-blocking, so a FIFO named in its
    place fails at once instead of waiting for a writer."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        handle = os.open(path, flags if follow else flags | getattr(os, "O_NOFOLLOW", 0))
    except OSError as error:
        raise BadFile(f"cannot read the {what} {path}: {error.strerror or error}",
                      hint="check the path and its permissions") from None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise BadFile(f"the {what} {path} is not a regular file (a pipe, device or socket)",
                          hint="pass a regular file")
        if info.st_size > limit:
            raise BadFile(f"the {what} {path} is {info.st_size:,} bytes, more than the {limit:,} allowed",
                          hint="pass the right file; this one is far larger than any valid one")
        chunks: list[bytes] = []
        remaining = limit + 1
        while remaining > 0:
            chunk = os.read(handle, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    finally:
        os.close(handle)
    data = b"".join(chunks)
    if len(data) > limit:  # it grew while we read it
        raise BadFile(f"the {what} {path} grew beyond {limit:,} bytes while being read", hint="retry")
    return data


def read_regular_text(path: Path, *, limit: int = MAX_DOCUMENT_BYTES, what: str = "file") -> str:
    """``read_regular_bytes`` decoded as strict UTF-8."""
    data = read_regular_bytes(path, limit=limit, what=what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadFile(f"the {what} {path} is not UTF-8 text (byte {error.start})",
                      hint="save it as UTF-8") from None


def _bounded_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(digits)} digits")
    return int(text)


def check_depth(value: Any, *, limit: int = MAX_DEPTH) -> int:
    """The nesting depth of a parsed document; ValueError past ``limit`` (iterative: no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                raise ValueError(f"nested more than {limit} levels deep")
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def check_text(value: str, *, what: str) -> str:
    """``value`` if it can be written as UTF-8 (no lone surrogates from a broken escape)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadFile(f"the {what} holds an invalid character (a lone UTF-16 surrogate)",
                      hint="fix the escape sequence or the file's encoding") from None
    return value


def _check_strings(value: Any, what: str) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            check_text(item, what=what)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


# On the UTF-8 text of a JSON document (tests/safety/test_bounded_json.py holds these to the walks
# over the parsed value): an escape pair; the characters that delimit strings and nest values; a string
# token once escapes are gone; an empty innermost pair; and the two ways a lone surrogate gets into a
# parsed string: a \uD800-\uDFFF escape, or the bytes of one (json decodes bytes with "surrogatepass").
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_STRING = re.compile(rb'"[^"]*"')
_INNERMOST_PAIR = re.compile(rb"\[\]|\{\}")
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def check_depth_of_text(raw: bytes, *, limit: int = MAX_DEPTH) -> int:
    """``check_depth`` on the UTF-8 text of a document that parsed, with C-speed passes where the
    walk visits each of millions of values in Python (a 200k-file manifest: 1.2 s against 0.1 s).
    Strings are dropped first, so a bracket inside one does not count: escapes go, then everything
    but brackets and quotes, then each pair of adjacent quotes (an empty string, or the end of one
    string and the start of the next: the merged string still holds only string content), then the
    few strings left; each pass over what remains removes one level of innermost pairs."""
    unescaped = _ESCAPE.sub(b"", raw) if b"\\" in raw else raw
    brackets = _STRING.sub(b"", unescaped.translate(None, _NOT_STRUCTURE).replace(b'""', b""))
    depth = 0
    while brackets:
        depth += 1
        if depth > limit:
            raise ValueError(f"nested more than {limit} levels deep")
        brackets = _INNERMOST_PAIR.sub(b"", brackets)
    return depth


def parse_json(text: str | bytes, *, what: str = "JSON document") -> Any:
    """``json.loads`` with the depth, integer-size and character limits of this module."""
    try:
        value = json.loads(text, parse_int=_bounded_int)
        raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        if isinstance(text, str) or json.detect_encoding(raw) == "utf-8":
            check_depth_of_text(raw)
            if _SURROGATE.search(raw):  # only then can a string hold one: find it, name it
                _check_strings(value, what)
        else:  # UTF-16 or -32, or a byte-order mark: the walks over the parsed value
            check_depth(value)
            _check_strings(value, what)
    except RecursionError:
        raise BadFile(f"the {what} is nested too deeply", hint="this is not a valid file; replace it") from None
    except BadFile:
        raise
    except json.JSONDecodeError as error:
        raise BadFile(f"the {what} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})",
                      hint="this is not a valid file; replace it") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise BadFile(f"the {what} is not valid JSON ({str(error)[:120]})",
                      hint="this is not a valid file; replace it") from None
    return value


def read_json_file(path: Path, *, limit: int = MAX_DOCUMENT_BYTES, what: str = "JSON file",
                   follow: bool = True) -> Any:
    """A JSON file read with every limit of this module (``follow``: as ``read_regular_bytes``)."""
    return parse_json(read_regular_bytes(path, limit=limit, what=what, follow=follow), what=f"{what} {path}")


def parse_toml(text: str, *, what: str = "TOML document") -> dict[str, Any]:
    """``tomllib.loads`` with the depth and integer limits of this module."""
    try:
        value = tomllib.loads(text, parse_float=float)
        check_depth(value)
        _check_big_ints(value)
        _check_strings(value, what)
    except RecursionError:
        raise BadFile(f"the {what} is nested too deeply", hint="this is not a valid file; replace it") from None
    except BadFile:
        raise
    except (tomllib.TOMLDecodeError, ValueError) as error:
        raise BadFile(f"the {what} is not valid TOML: {str(error)[:120]}", hint="fix the file") from None
    return value


def _check_big_ints(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and abs(item) >= 10 ** MAX_INT_DIGITS:
            raise ValueError("an integer with more than 40 digits")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
