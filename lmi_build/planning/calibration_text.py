"""Calibration text: the shipped set and user files, as plain strings (no torch).

Both the planner (sample counts, digests for the cache key) and the calibration step read text
through here, so they always agree on what a "sample" is:

- ``.txt``: one sample per paragraph (blocks separated by blank lines); a file without blank
  lines is one sample per non-empty line.
- ``.jsonl``: one JSON object per line with a string ``text`` field.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from lmi_build.core.errors import OptionError, SourceError
from lmi_build.core.hashing import sha256_file
from lmi_build.core.reading import BadFile, parse_json, read_regular_text

BUILTIN_NAME = "lmi-mixed-v1"
BUILTIN_DIR = Path(__file__).resolve().parents[1] / "data" / "calibration"
SUFFIXES = (".txt", ".jsonl")


@dataclass(frozen=True)
class CalibText:
    dataset: str  # "builtin:<name>" or "file:<basename>"
    digest: str  # "sha256:<hex>" of the file's bytes
    samples: tuple[str, ...]


def builtin_path(name: str = BUILTIN_NAME) -> Path:
    return BUILTIN_DIR / f"{name}.txt"


def load_builtin(name: str = BUILTIN_NAME) -> CalibText:
    path = builtin_path(name)
    if not path.is_file():
        available = sorted(p.stem for p in BUILTIN_DIR.glob("*.txt"))
        raise OptionError(
            f"unknown built-in calibration set '{name}'",
            hint=f"use one of: {', '.join(available) or '(none shipped)'}, or --calib-data FILE",
        )
    return CalibText(f"builtin:{name}", "sha256:" + sha256_file(path), tuple(_parse(path)))


# Calibration uses a few hundred samples; a file this size is a mistake, not a corpus.
MAX_CALIBRATION_BYTES = 256 * 1024 * 1024


def load_file(path: Path) -> CalibText:
    """Read a user calibration file; a missing, unreadable or empty file is a one-line error."""
    if not path.exists():
        raise SourceError(
            f"calibration file not found: {path}",
            hint="pass an existing .txt or .jsonl file to --calib-data",
        )
    if path.suffix.lower() not in SUFFIXES:
        raise OptionError(
            f"calibration file {path.name} has an unsupported extension '{path.suffix}'",
            hint="use .txt (one sample per paragraph) or .jsonl (a 'text' field per line)",
        )
    samples = _parse(path)
    if not samples:
        raise OptionError(
            f"calibration file {path.name} has no text samples",
            hint="write one sample per paragraph (.txt) or one {\"text\": ...} object per line (.jsonl)",
        )
    return CalibText(f"file:{path.name}", "sha256:" + sha256_file(path), tuple(samples))


def load(calib_file: Path | None) -> CalibText:
    return load_builtin() if calib_file is None else load_file(calib_file)


def select(samples: tuple[str, ...] | list[str], size: int, seed: int) -> list[str]:
    """``size`` samples chosen by ``seed`` alone; order is part of the result (it is the batch order)."""
    count = min(size, len(samples))
    indices = random.Random(seed).sample(range(len(samples)), count)
    return [samples[i] for i in indices]


def _parse(path: Path) -> list[str]:
    try:
        text = read_regular_text(path, limit=MAX_CALIBRATION_BYTES, what="calibration file")
    except BadFile as exc:
        raise SourceError(exc.message, hint=exc.hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(
            f"cannot read calibration file {path.name}: {exc}",
            hint="the file must be readable UTF-8 text",
        ) from exc
    if path.suffix.lower() == ".jsonl":
        return _parse_jsonl(text, path.name)
    return _parse_txt(text)


def _parse_txt(text: str) -> list[str]:
    text = text.replace("\r\n", "\n").strip()
    # A line holding only spaces still separates paragraphs.
    blocks = re.split(r"\n[ \t]*\n", text) if re.search(r"\n[ \t]*\n", text) else text.split("\n")
    return [block.strip() for block in blocks if block.strip()]


def _parse_jsonl(text: str, name: str) -> list[str]:
    samples: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = parse_json(line, what=f"line {number} of {name}")
        except BadFile as exc:
            raise OptionError(
                f"{name}:{number} is not valid JSON ({exc.message})",
                hint="write one JSON object per line with a 'text' field",
            ) from exc
        value = record.get("text") if isinstance(record, dict) else None
        if not isinstance(value, str):
            raise OptionError(
                f"{name}:{number} has no string 'text' field",
                hint="write one JSON object per line with a 'text' field",
            )
        if value.strip():
            samples.append(value.strip())
    return samples
