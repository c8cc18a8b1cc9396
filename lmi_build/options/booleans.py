"""The one boolean vocabulary of option values, for every reader of option text.

DJL's Java side reads serving.properties booleans with ``Boolean.parseBoolean``: ``true`` in any
case is true and every other text is false. So ``yes``, ``1`` or ``on`` would be *false* in the
container while a Python reader might take them as true. lmi-build therefore accepts exactly
``true`` and ``false`` (any case, surrounding blanks ignored) and writes them lower-case, so the
artifact means the same to both sides of the container.
"""

from __future__ import annotations

TRUE = "true"
FALSE = "false"
SPELLING = f"{TRUE} or {FALSE}"  # how messages name the vocabulary


def parse_bool(text: str) -> bool | None:
    """``True``/``False`` for a boolean option text, ``None`` when it is not one."""
    return {TRUE: True, FALSE: False}.get(text.strip().lower())


def bool_text(value: bool) -> str:
    """The serving.properties spelling of a boolean."""
    return TRUE if value else FALSE
