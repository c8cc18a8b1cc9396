"""lmi_build.core.reading checks a JSON document's depth and strings on its text (a few C regex passes)
instead of walking every parsed value: the text checks must find what the walks find."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from lmi_build.core.reading import MAX_DEPTH, BadFile, check_depth, check_depth_of_text, parse_json

# Strings that look like structure or escapes: brackets, quotes, backslashes, a literal "\ud800".
TRICKY = ["[", "]", "{", "}", '"', "\\", '\\"[', "[[{{", "\\ud800", "}]\\", "é[", "😀{"]


def _document(rng: random.Random, depth: int) -> Any:
    kind = rng.random()
    if depth <= 0 or kind < 0.3:
        return rng.choice([*TRICKY, 0, 1.5, True, None, ""])
    children = [_document(rng, depth - rng.randint(1, 2)) for _ in range(rng.randint(0, 4))]
    if kind < 0.65:
        return children
    return {rng.choice(TRICKY) + str(i): child for i, child in enumerate(children)}


@pytest.mark.parametrize("seed", range(200))
def test_the_depth_of_the_text_is_the_depth_of_the_value(seed: int) -> None:
    rng = random.Random(seed)
    value = _document(rng, rng.randint(0, 12))
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1)):
        assert check_depth_of_text(text.encode()) == check_depth(value), text


def test_too_deep_is_refused_and_brackets_inside_strings_do_not_count() -> None:
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(BadFile, match="not valid JSON"):
        parse_json(deep)
    with pytest.raises(BadFile):
        parse_json(deep.encode("utf-16"))  # another encoding: the walks over the value
    assert parse_json(json.dumps({"k": deep})) == {"k": deep}
    at_limit = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert check_depth_of_text(at_limit.encode()) == MAX_DEPTH


@pytest.mark.parametrize("text", [b'{"a": "\\ud800"}', b'["x\\uDFFF"]', b'{"a": "\xed\xa0\x80"}',
                                  '{"a": "\ud800"}'], ids=["escape", "low-escape", "surrogate-bytes", "str"])
def test_a_lone_surrogate_is_refused_however_it_is_written(text: str | bytes) -> None:
    with pytest.raises(BadFile, match="lone UTF-16 surrogate"):
        parse_json(text, what="manifest")


@pytest.mark.parametrize("text", [b'["\\ud83d\\ude00"]', b'["\\\\ud800"]', '["\U0001F600"]'.encode()],
                         ids=["pair", "escaped-backslash", "emoji"])
def test_a_surrogate_pair_or_a_literal_backslash_u_is_accepted(text: bytes) -> None:
    assert parse_json(text) == json.loads(text)
