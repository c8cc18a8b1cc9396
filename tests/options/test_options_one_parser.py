"""Option text is parsed in lmi_build/options alone: no other module reads a boolean out of a string
(the old per-module vocabularies: TRUE_WORDS, ``in ("true", "1", "yes")``, ``.lower() == "true"``)."""

from __future__ import annotations

import re

import pytest

from tests.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "lmi_build"
OPTIONS = PACKAGE / "options"

_BOOL_WORD = r"""["'](?:true|false|1|0|yes|no|on|off)["']"""
BOOLEAN_PARSING = re.compile("|".join([
    r"""(?:==|!=)\s*["'](?:true|false)["']""",  # text == "true"
    r"""["'](?:true|false)["']\s*(?:==|!=)""",  # "true" == text
    rf"""\bin\s*[(\[{{]\s*{_BOOL_WORD}""",  # text in ("true", "1", "yes")
    r"""\b(?:TRUE|FALSE)_WORDS\b""",
    r"""\bstrtobool\b""",
]), re.IGNORECASE)

# Strings that are not option values, each read with its owner's own vocabulary.
NOT_OPTIONS = {
    ("artifact/verify.py", 'manifest.toolchain.found.get("stand_in") == "true"'):
        "a manifest field lmi-build writes itself, not an option",
    ("reporting/github.py", 'os.environ.get("GITHUB_ACTIONS", "") == "true"'):
        "the Actions runner's own variable, set to exactly this word (its documentation), not an option",
}


def _boolean_parses(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if BOOLEAN_PARSING.search(line.split("#", 1)[0])]


@pytest.mark.parametrize("old", [
    'TRUE_WORDS = frozenset({"true", "1", "yes", "on"})',
    '    if lowered in ("true", "1", "yes"):',
    '    trust = (plan.options.get("option.trust_remote_code") or "").lower() == "true"',
    '            (options.get(key) or "").strip().lower() == "true"',
    '    return {"true": True, "false": False}.get(lowered) if "true" == lowered else None',
])
def test_the_pattern_catches_the_old_parsers(old: str) -> None:
    assert _boolean_parses(old) == [old.strip()]


def test_no_module_outside_options_parses_booleans() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if OPTIONS in path.parents:
            continue
        relative = path.relative_to(PACKAGE).as_posix()
        found += [(relative, line) for line in _boolean_parses(path.read_text(encoding="utf-8"))
                  if not any(relative == where and snippet in line for where, snippet in NOT_OPTIONS)]
    assert found == [], "read option values through lmi_build.options (typed values, booleans.parse_bool)"


def test_the_exceptions_still_exist() -> None:
    # A stale exception would silently allow a new parser on the same line elsewhere.
    for relative, line in NOT_OPTIONS:
        assert line in (PACKAGE / relative).read_text(encoding="utf-8"), relative


def test_the_options_package_has_one_vocabulary() -> None:
    """Inside lmi_build/options only booleans.py spells the boolean words."""
    spelled = {path.name for path in OPTIONS.glob("*.py")
               if re.search(r"""["'](?:true|false)["']""", path.read_text(encoding="utf-8"))}
    assert spelled == {"booleans.py"}
