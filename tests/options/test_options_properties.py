"""serving.properties parsing and writing, checked against java.util.Properties itself."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lmi_build.core.errors import OptionError
from lmi_build.options.properties import (
    collect_properties,
    format_properties,
    parse_properties,
    read_properties,
    read_properties_with_lines,
    write_properties,
)
from tests.paths import TESTS_DIR

JAVA_DUMPER = TESTS_DIR / "options_java" / "PropertiesDump.java"
needs_java = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (java) on PATH")


def _parsed(text: str) -> dict[str, str]:
    return collect_properties(parse_properties(text)).as_dict()


# --------------------------------------------------------------------------- grammar
def test_comments_blank_lines_and_separators() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   \t \n"
        "engine=MPI\n"
        "option.a = spaced\n"
        "option.b: colon\n"
        "option.c whitespace separated\n"
        "   option.d=leading whitespace before the key\n"
        "option.e\n"
        "option.f=\n"
        "option.g = = starts with equals\n"
    )
    assert _parsed(text) == {
        "engine": "MPI",
        "option.a": "spaced",
        "option.b": "colon",
        "option.c": "whitespace separated",
        "option.d": "leading whitespace before the key",
        "option.e": "",
        "option.f": "",
        "option.g": "= starts with equals",
    }


def test_separators_inside_values_and_trailing_whitespace_kept() -> None:
    text = "option.model_id=s3://bucket/a=b:c#d!e\noption.x=value with trailing space  \n"
    assert _parsed(text) == {"option.model_id": "s3://bucket/a=b:c#d!e", "option.x": "value with trailing space  "}


def test_line_numbers_and_origin() -> None:
    entries = parse_properties("# c\n\nengine=MPI\noption.tensor_parallel_degree=4\n", origin="my.properties")
    assert [(e.key, e.line, e.where) for e in entries] == [
        ("engine", 3, "my.properties:3"),
        ("option.tensor_parallel_degree", 4, "my.properties:4"),
    ]


def test_crlf_and_lone_cr_line_ends() -> None:
    assert _parsed("engine=MPI\r\noption.a=1\r\noption.b=2\roption.c=3") == {
        "engine": "MPI",
        "option.a": "1",
        "option.b": "2",
        "option.c": "3",
    }


def test_continuation_lines() -> None:
    text = (
        "option.list=a,\\\n"
        "            b,\\\n"
        "   c\n"
        "option.even=ends with a backslash\\\\\n"
        "option.next=1\n"
        "# a comment does not continue \\\n"
        "option.after_comment=2\n"
        "option.hash=x\\\n"
        "#not a comment here\n"
        "option.eof=tail\\"
    )
    assert _parsed(text) == {
        "option.list": "a,b,c",
        "option.even": "ends with a backslash\\",
        "option.next": "1",
        "option.after_comment": "2",
        "option.hash": "x#not a comment here",
        "option.eof": "tail",
    }
    assert [e.line for e in parse_properties(text)] == [1, 4, 5, 7, 8, 10]


def test_escapes() -> None:
    text = "key\\ with\\ spaces\\=and\\:colon=tab\\there\\nnew\\u00e9\\uD83D\\uDE00\\q\n"
    assert _parsed(text) == {"key with spaces=and:colon": "tab\there\nnewé😀q"}


def test_malformed_unicode_escape_is_an_option_error() -> None:
    with pytest.raises(OptionError, match=r"serving.properties:2: malformed \\uXXXX escape"):
        parse_properties("engine=MPI\noption.x=\\u12G4\n")


def test_bom_is_dropped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "serving.properties"
    path.write_bytes("\ufeffengine=MPI\noption.a=1\n".encode())
    parsed = read_properties_with_lines(path)
    assert parsed.as_dict() == {"engine": "MPI", "option.a": "1"}
    assert [w.code for w in parsed.warnings] == ["properties_bom"]


def test_duplicate_keys_last_wins_and_both_lines_are_named(tmp_path: Path) -> None:
    path = tmp_path / "serving.properties"
    path.write_text("option.tensor_parallel_degree=2\nengine=MPI\noption.tensor_parallel_degree=8\n")
    parsed = read_properties_with_lines(path)
    assert parsed.as_dict()["option.tensor_parallel_degree"] == "8"
    assert parsed.values["option.tensor_parallel_degree"].line == 3
    (warning,) = parsed.warnings
    assert warning.code == "duplicate_key"
    assert "serving.properties:1" in warning.message and "serving.properties:3" in warning.message


def test_read_errors_are_clean(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="properties file not found"):
        read_properties(tmp_path / "missing.properties")
    bad = tmp_path / "latin1.properties"
    bad.write_bytes(b"option.x=caf\xe9\n")
    with pytest.raises(OptionError, match="is not UTF-8"):
        read_properties(bad)


# --------------------------------------------------------------------------- writing
def test_format_order_and_readability() -> None:
    text = format_properties(
        {
            "option.tensor_parallel_degree": "4",
            "job_queue_size": "100",
            "option.model_id": "s3://bucket/model",
            "engine": "MPI",
            "batch_size": "1",
        },
        header="written by lmi-build",
    )
    assert text == (
        "# written by lmi-build\n"
        "engine=MPI\n"
        "batch_size=1\n"
        "job_queue_size=100\n"
        "option.model_id=s3://bucket/model\n"
        "option.tensor_parallel_degree=4\n"
    )


def test_write_is_atomic_and_verified(tmp_path: Path) -> None:
    path = tmp_path / "out" / "serving.properties"
    values = {"engine": "MPI", "option.entryPoint": "djl_python.huggingface", "option.x": " lead\\ing"}
    write_properties(path, values)
    assert read_properties(path) == values
    assert [p.name for p in path.parent.iterdir()] == ["serving.properties"]  # no temp file left
    assert path.read_bytes().isascii()


_ALPHABET = [*"abcXYZ019_.-/", "=", ":", "#", "!", " ", "\t", "\\", "\n", "\r", "\f", "é", "漢", "😀", "\x00", "\u2028"]


def _hostile(rng: random.Random, *, minimum: int) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(minimum, 12)))


def _hostile_mappings(count: int) -> list[dict[str, str]]:
    rng = random.Random(20240521)
    fixed = {
        "engine": "MPI",
        "#not-a-comment": "#also not",
        "!bang": "!x",
        " lead": "  leading spaces",
        "option.unicode": "naïve 漢字 😀",
        "option.newlines": "a\nb\r\nc",
        "option.backslashes": "\\\\server\\share\\",
        "option.separators": "=:= : =",
    }
    mappings = [fixed]
    for _ in range(count):
        mappings.append({_hostile(rng, minimum=1): _hostile(rng, minimum=0) for _ in range(rng.randint(1, 6))})
    return mappings


def test_round_trip_of_hostile_values() -> None:
    for values in _hostile_mappings(400):
        text = format_properties(values)
        assert text.isascii()
        assert _parsed(text) == values, text


# --------------------------------------------------------------------------- the real Java
def _java_dump(paths: list[Path]) -> dict[Path, dict[str, dict[str, str]]]:
    result = subprocess.run(
        ["java", str(JAVA_DUMPER), *map(str, paths)], capture_output=True, text=True, timeout=120, check=True
    )
    dumps: dict[Path, dict[str, dict[str, str]]] = {}
    current: dict[str, dict[str, str]] = {}
    for line in result.stdout.splitlines():
        if line.startswith("FILE "):
            current = {"R": {}, "S": {}}
            dumps[Path(line[5:])] = current
            continue
        mode, key, value = line.split(" ")
        current[mode][_decode(key)] = _decode(value)
    return dumps


def _decode(escaped: str) -> str:
    units = bytes.fromhex("".join(re.findall(r"\\u([0-9a-f]{4})", escaped)))
    return units.decode("utf-16-be", "surrogatepass").encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


_JAVA_INPUTS = [
    "# comment\n! comment\n\n  \t\nengine=MPI\noption.a = spaced\noption.b: colon\noption.c whitespace sep\n",
    "option.e\noption.f=\noption.g = = equals\n  option.d=x\n",
    "option.model_id=s3://bucket/a=b:c#d!e\noption.x=trailing  \n",
    "engine=MPI\r\noption.a=1\r\noption.b=2\roption.c=3",
    "option.list=a,\\\n            b,\\\n   c\noption.even=x\\\\\noption.next=1\n# c \\\noption.z=2\n"
    "option.hash=x\\\n#not a comment\noption.eof=tail\\",
    "key\\ with\\ spaces\\=and\\:colon=tab\\there\\nnew\\u00e9\\uD83D\\uDE00\\q\n",
    "option.tp=2\nengine=MPI\noption.tp=8\n",
    "option.cont=a\\\n\noption.after_blank_continuation=1\n",
    "option.unicode=naïve 漢字\n",
]


@pytest.fixture(scope="module")
def java_reads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[object, dict[str, dict[str, str]]]]]:
    """One JVM start for every file (compiling the dumper takes seconds): the hostile input texts
    and the files our writer produced from hostile mappings."""
    folder = tmp_path_factory.mktemp("java")
    inputs: list[tuple[Path, object]] = []
    for index, text in enumerate(_JAVA_INPUTS):
        path = folder / f"input{index}.properties"
        path.write_bytes(text.encode("utf-8"))
        inputs.append((path, text))
    written: list[tuple[Path, object]] = []
    for index, values in enumerate(_hostile_mappings(60)):
        path = folder / f"written{index}.properties"
        write_properties(path, values)
        written.append((path, values))
    dumps = _java_dump([path for path, _ in inputs + written])
    return {
        "inputs": [(given, dumps[path]) for path, given in inputs],
        "written": [(given, dumps[path]) for path, given in written],
    }


@needs_java
def test_parser_agrees_with_java_properties(java_reads: dict[str, list[tuple[object, dict[str, dict[str, str]]]]]) -> None:
    assert len(java_reads["inputs"]) == len(_JAVA_INPUTS)
    for text, dump in java_reads["inputs"]:
        assert isinstance(text, str)
        assert _parsed(text) == dump["R"], text


@needs_java
def test_java_reads_back_what_we_write(java_reads: dict[str, list[tuple[object, dict[str, dict[str, str]]]]]) -> None:
    assert len(java_reads["written"]) == 61
    for values, dump in java_reads["written"]:
        # Both the Reader (UTF-8) and the InputStream (ISO-8859-1) loaders read the same values.
        assert dump["R"] == values
        assert dump["S"] == values
