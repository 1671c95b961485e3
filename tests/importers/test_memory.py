"""Importing a large transcript streams it: the memory the import
allocates stays under 3x the file size (the benchmark, benchmarks/import_memory.py,
measures the whole process at 75 MB; here tracemalloc counts what the import allocates
in Python for a 5 MB file of the same shape, which is deterministic)."""

from __future__ import annotations

import importlib.util
import sqlite3
import tracemalloc
from pathlib import Path

import pytest

from opctx.importers import import_paths

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("import_memory", ROOT / "benchmarks" / "import_memory.py")
generators = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generators)  # type: ignore[union-attr]


@pytest.mark.parametrize("name,lines", [
    ("5e55a0e0-0000-4000-8000-000000000075.jsonl", generators.claude_code_lines),
    ("rollout-2026-01-05T00-00-00-019c0000-0000-7000-8000-000000000075.jsonl", generators.codex_lines),
], ids=["claude_code", "codex"])
def test_import_allocates_less_than_three_times_the_file(tmp_path, name, lines):
    path = tmp_path / name
    size = generators.write(path, lines(5_000_000))
    tracemalloc.start()
    try:
        report = import_paths([path], tmp_path / "m.db")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.ok and report.sessions == 1, (report.failed, report.issues[:3])
    assert peak < 3 * size, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB file"
    # streamed and batched, still one complete session
    nodes = sqlite3.connect(tmp_path / "m.db").execute("SELECT count(*) FROM nodes").fetchone()[0]
    assert nodes == report.written[0]["nodes"] > 256  # more than one write batch
