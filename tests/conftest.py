"""Shared fixtures. Tests that read the real corpus skip cleanly where it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("OPCTX_CORPUS", ROOT.parent / "shared" / "corpus"))


# The corpus is a private set of real recordings beside the checkout, which a user of a clone
# does not have: its absence is one skip reason, the same for every test (pytest -ra then
# prints one line with the count), naming no path the user cannot have.
CORPUS_ABSENT = "optional corpus not present (real recordings; OPCTX_CORPUS=PATH points at one)"
# where corpus_dir skips (1-based, as pytest reports it)
_CORPUS_SKIP_LINE = 1 + next(i for i, line in enumerate(Path(__file__).read_text(encoding="utf-8").splitlines())
                             if line.strip() == "pytest.skip(CORPUS_ABSENT)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: ARG001 - pytest's hook signature
    """Every corpus skip reported at one place, so ``-ra`` folds them into one line."""
    outcome = yield
    report = outcome.get_result()
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and longrepr[2].endswith(CORPUS_ABSENT):
        report.longrepr = (__file__, _CORPUS_SKIP_LINE, longrepr[2])


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    if not (CORPUS / "manifest.json").is_file():
        pytest.skip(CORPUS_ABSENT)
    return CORPUS


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "opctx.db"
