"""Golden files: generated text compared with a reviewed copy under tests/golden/.

A golden never changes silently. On a difference the test fails with the unified diff. With
LMI_BUILD_UPDATE_GOLDEN=1 the new text is written, and the test still fails, saying so: the change is
then reviewed as a diff (``git diff tests/golden``) and the tests run again without the variable.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
UPDATE_VARIABLE = "LMI_BUILD_UPDATE_GOLDEN"


def check_golden(relative: str, data: str) -> None:
    path = GOLDEN_DIR / relative
    old = path.read_text(encoding="utf-8") if path.is_file() else None
    if old == data:
        return
    diff = "".join(difflib.unified_diff((old or "").splitlines(keepends=True), data.splitlines(keepends=True),
                                       fromfile=f"{relative} (golden)", tofile=f"{relative} (generated)"))
    if os.environ.get(UPDATE_VARIABLE) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data, encoding="utf-8")
        pytest.fail(f"golden {relative} rewritten; review `git diff tests/golden`, then rerun without "
                    f"{UPDATE_VARIABLE}:\n{diff}")
    what = "is missing" if old is None else "differs from the generated text"
    pytest.fail(f"golden {relative} {what} ({UPDATE_VARIABLE}=1 rewrites it for review):\n{diff}")
