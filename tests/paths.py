"""Where the repository and the tests' own data are, for test modules at any depth under tests/."""

from __future__ import annotations

from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
STANDINS_DIR = TESTS_DIR / "standins"
VENDOR_DIR = TESTS_DIR / "vendor"
FIXTURES_DIR = TESTS_DIR / "fixtures"
