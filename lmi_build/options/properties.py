"""``serving.properties`` read and written the way the DJL container reads it.

The container loads the file with ``java.util.Properties.load``. This module implements the same
grammar: ``#``/``!`` comment lines, blank lines, ``=``/``:``/whitespace separators, line
continuations with a trailing backslash (leading whitespace of the next line dropped), the
escapes ``\\t \\n \\r \\f \\uXXXX`` and ``\\<any>``, and any of ``\\n``, ``\\r\\n``, ``\\r`` as line ends.
Two deliberate differences, both reported as warnings: a UTF-8 byte order mark is dropped (Java
would make it part of the first key), and a duplicate key keeps the last value like Java but
names both lines.

The writer escapes only what Java needs, so simple line-splitting readers (DJL's Python side
splits on the first ``=``) read the same values: ``s3://bucket`` stays readable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lmi_build.core.errors import OptionError
from lmi_build.core.fs import atomic_write_text
from lmi_build.core.reading import BadFile, check_text, read_regular_bytes
from lmi_build.core.types import PlanMessage
from lmi_build.reporting import github
from lmi_build.reporting.output import current

_WHITESPACE = " \t\f"
_LINE_END = re.compile(r"\r\n|\r|\n")
_BOM = "\ufeff"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


@dataclass(frozen=True)
class PropertyLine:
    key: str
    value: str
    line: int  # 1-based number of the line the entry starts on
    origin: str = "serving.properties"

    @property
    def where(self) -> str:
        return f"{self.origin}:{self.line}"


@dataclass(frozen=True)
class PropertiesFile:
    """The entries of one file, last value per key, with what the reader noticed."""

    values: dict[str, PropertyLine]
    warnings: list[PlanMessage] = field(default_factory=list)

    def as_dict(self) -> dict[str, str]:
        return {key: entry.value for key, entry in self.values.items()}


# ---------------------------------------------------------------------------------- reading
def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join continuation lines; drop blank and comment lines. Returns (first line number, raw)."""
    natural = _LINE_END.split(text)
    logical: list[tuple[int, str]] = []
    index = 0
    while index < len(natural):
        start = index
        line = natural[index].lstrip(_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue  # a comment line never continues, even when it ends with a backslash
        while _continues(line):
            line = line[:-1]
            if index >= len(natural):
                break
            line += natural[index].lstrip(_WHITESPACE)
            index += 1
        logical.append((start + 1, line))
    return logical


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _unescape(raw: str, where: str) -> str:
    if "\\" not in raw:
        return raw  # nothing escaped: the text itself was checked when the file was read
    out: list[str] = []
    index = 0
    while index < len(raw):
        char = raw[index]
        index += 1
        if char != "\\" or index >= len(raw):
            out.append(char)
            continue
        escaped = raw[index]
        index += 1
        if escaped == "u":
            digits = raw[index : index + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise OptionError(
                    f"{where}: malformed \\uXXXX escape '\\u{digits}'",
                    hint="write four hex digits after \\u, or a literal backslash as \\\\",
                )
            out.append(chr(int(digits, 16)))
            index += 4
        else:
            out.append(_SIMPLE_ESCAPES.get(escaped, escaped))
    # Java works in UTF-16 code units: \uD83D\uDE00 is one character. Join surrogate pairs; a lone
    # surrogate is no character at all and could be written nowhere (not even to the terminal).
    joined = "".join(out).encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
    try:
        check_text(joined, what=where)
    except BadFile:
        raise OptionError(f"{where}: a \\u escape makes a lone UTF-16 surrogate (\\uD800-\\uDFFF unpaired)",
                          hint="write the character itself, or a complete surrogate pair") from None
    return joined


def _split(line: str) -> tuple[str, str]:
    """Java's key/value split: the key ends at the first unescaped '=', ':' or whitespace."""
    key_end = len(line)
    value_start = len(line)
    has_separator = False
    backslash = False
    for position, char in enumerate(line):
        if not backslash and char in "=:":
            key_end, value_start, has_separator = position, position + 1, True
            break
        if not backslash and char in _WHITESPACE:
            key_end, value_start = position, position + 1
            break
        backslash = (not backslash) if char == "\\" else False
    while value_start < len(line):
        char = line[value_start]
        if char in _WHITESPACE:
            value_start += 1
        elif not has_separator and char in "=:":
            has_separator = True
            value_start += 1
        else:
            break
    return line[:key_end], line[value_start:]


def parse_properties(text: str, origin: str = "serving.properties") -> list[PropertyLine]:
    """Every entry of a properties text in file order (duplicates included)."""
    text = text.removeprefix(_BOM)
    entries: list[PropertyLine] = []
    for number, line in _logical_lines(text):
        raw_key, raw_value = _split(line)
        where = f"{origin}:{number}"
        entries.append(PropertyLine(_unescape(raw_key, where), _unescape(raw_value, where), number, origin))
    return entries


def collect_properties(
    entries: list[PropertyLine], *, had_bom: bool = False, origin: str = "serving.properties"
) -> PropertiesFile:
    """Last value wins per key, like Java; every overridden line and empty key is reported."""
    values: dict[str, PropertyLine] = {}
    warnings: list[PlanMessage] = []
    if had_bom:
        warnings.append(
            PlanMessage(
                code="properties_bom",
                message=f"{origin} starts with a UTF-8 byte order mark, which the DJL container "
                "reads as part of the first key",
                hint="save the file as UTF-8 without BOM; lmi-build ignores the mark and never writes one",
            )
        )
    for entry in entries:
        if not entry.key:
            warnings.append(
                PlanMessage(
                    code="properties_empty_key",
                    message=f"{entry.where}: a line without a key is ignored",
                    hint="write key=value",
                )
            )
            continue
        previous = values.get(entry.key)
        if previous is not None:
            warnings.append(
                PlanMessage(
                    code="duplicate_key",
                    message=f"{entry.key} is set twice: {previous.where} and {entry.where}; "
                    f"the last one ({entry.where}) wins",
                    hint=f"delete one of the two lines of {entry.key}",
                )
            )
        values[entry.key] = entry
    return PropertiesFile(values=values, warnings=warnings)


# A serving.properties is a few KiB; /dev/zero or a multi-GB file given by mistake must be refused
# before it is read into memory.
MAX_PROPERTIES_BYTES = 1024 * 1024


def _read_text(path: Path) -> str:
    if not path.exists():
        raise OptionError(f"properties file not found: {path}", hint="check the --properties path")
    try:
        data = read_regular_bytes(path, limit=MAX_PROPERTIES_BYTES, what="properties file")
    except BadFile as error:
        raise OptionError(error.message, hint="check the --properties path") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise OptionError(
            f"{path} is not UTF-8 text (invalid byte at offset {error.start})",
            hint="save serving.properties as UTF-8 (non-ASCII characters may be written as \\uXXXX)",
        ) from None


def read_properties_with_lines(path: Path) -> PropertiesFile:
    """The file's values with the line each came from (for source tracking) and reader warnings."""
    text = _read_text(path)
    origin = path.name
    github.note_source(path)  # a finding that names "serving.properties:7" is annotated on that line
    entries = parse_properties(text, origin=origin)
    return collect_properties(entries, had_bom=text.startswith(_BOM), origin=origin)


def read_properties(path: Path) -> dict[str, str]:
    """The file's values, last one per key; reader warnings go to the output's stderr."""
    parsed = read_properties_with_lines(path)
    for warning in parsed.warnings:
        current().warn(warning.message)
    return parsed.as_dict()


# ---------------------------------------------------------------------------------- writing
def _escape(text: str, *, is_key: bool) -> str:
    out: list[str] = []
    for position, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == "\t":
            out.append("\\t")
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\f":
            out.append("\\f")
        elif char == " " and (is_key or position == 0):
            out.append("\\ ")
        elif is_key and (char in "=:" or (position == 0 and char in "#!")):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) > 0x7E:
            # ASCII only: Java reads the file as ISO-8859-1 or UTF-8 depending on the caller,
            # \uXXXX means the same in both.
            for unit in range(0, len(encoded := char.encode("utf-16-be", "surrogatepass")), 2):
                out.append(f"\\u{int.from_bytes(encoded[unit : unit + 2], 'big'):04x}")
        else:
            out.append(char)
    return "".join(out)


def _order(key: str) -> tuple[int, str]:
    if key == "engine":
        return (0, key)
    if not key.startswith("option."):
        return (1, key)
    return (2, key)


def format_properties(values: Mapping[str, str], *, header: str | None = None) -> str:
    """Properties text in a stable order: ``engine``, other top-level keys, then ``option.*``
    (each group sorted). ``parse_properties`` and Java read back exactly ``values``."""
    lines = [f"# {line}" for line in header.splitlines()] if header else []
    for key in sorted(values, key=_order):
        lines.append(f"{_escape(key, is_key=True)}={_escape(values[key], is_key=False)}")
    return "\n".join(lines) + "\n" if lines else ""


def write_properties(path: Path, values: Mapping[str, str], *, header: str | None = None) -> Path:
    """Write atomically: a temporary file in the same directory is read back and compared
    before it replaces ``path``, so a failed write never leaves a half-written file."""
    text = format_properties(values, header=header)

    def _reads_back(temp: Path) -> None:
        if read_properties_with_lines(temp).as_dict() != dict(values):
            raise OptionError(
                f"writing {path} did not read back the same values",
                hint="report this as a bug in lmi-build, with the values you wrote",
            )

    atomic_write_text(path, text, encoding="ascii", check=_reads_back)
    return path
