"""A comparable dump of what an import writes: to check that a change to the importers
leaves the imported databases identical.

Each file is imported (``import_paths``, what ``opctx import FILE`` does) into a fresh
database, and every row of ``sessions``, ``nodes`` (with its edges, ``predecessor`` and
``caller``), ``nodes_fts`` and ``node_tokens`` is written out as JSON lines, in ``pk`` /
id order. What differs between two imports of the same file by construction is
normalised: node ids are fresh random ids (``u_``/``l_``/``c_``/``k_`` + 16 hex digits), so
each is replaced by the order in which it first appears in the dump (``#1``, ``#2``,
...), wherever it occurs (columns, JSON payloads, FTS text); the session row's
``created_at``/``updated_at`` are the time of the import and are left out.

Usage: run it before and after a change, then compare::

    .venv/bin/python benchmarks/import_dump.py --out /tmp/before FILE...
    .venv/bin/python benchmarks/import_dump.py --out /tmp/after FILE...
    diff -r /tmp/before /tmp/after && echo identical

One ``<n>-<file name>.jsonl`` per file, and its SHA-256 printed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sqlite3
import sys
import tempfile
from pathlib import Path

from opctx.importers import import_paths

_NODE_ID = re.compile(r"\b[a-z]_[0-9a-f]{16}\b")
_QUERIES = {
    "sessions": "SELECT id, title, model, agent_id, source, extra_json, last_node_id, next_seq "
                "FROM sessions ORDER BY id",
    "nodes": "SELECT pk, id, session_id, type, predecessor, caller, created_at, seq, data_json "
             "FROM nodes ORDER BY pk",
    "nodes_fts": "SELECT rowid, text, session_id, node_id FROM nodes_fts ORDER BY rowid",
    "node_tokens": "SELECT pk, estimator, tokens, thinking, shape FROM node_tokens ORDER BY pk, estimator",
}


def dump(path: str) -> list[str]:
    """The normalised rows of a fresh import of ``path``, one JSON text per row."""
    names: dict[str, str] = {}

    def rename(m: re.Match) -> str:
        return names.setdefault(m.group(), f"#{len(names) + 1}")

    with tempfile.TemporaryDirectory() as d:
        db = str(Path(d) / "dump.db")
        report = import_paths([path], db)
        if not report.ok:
            raise SystemExit(f"import of {path} failed: {report.failed}")
        conn = sqlite3.connect(db)
        lines = []
        # nodes first: ids are numbered in the order the store wrote them
        for table in ("nodes", "sessions", "nodes_fts", "node_tokens"):
            for row in conn.execute(_QUERIES[table]):
                text = json.dumps([table, *row], ensure_ascii=False)
                lines.append(_NODE_ID.sub(rename, text))
        conn.close()
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the dumps")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(args.files):
        text = "\n".join(dump(f)) + "\n"
        target = out / f"{i:02d}-{Path(f).name}.jsonl"
        target.write_text(text, encoding="utf-8")
        print(f"{hashlib.sha256(text.encode()).hexdigest()[:16]}  {text.count(chr(10)):7d} rows  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
