"""Shared fixtures. Tests that read the real corpus skip cleanly where it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("OPCTX_CORPUS", ROOT.parent / "shared" / "corpus"))


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    if not (CORPUS / "manifest.json").is_file():
        pytest.skip(f"real-transcript corpus not found at {CORPUS} (set OPCTX_CORPUS)")
    return CORPUS


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "opctx.db"
