"""Benchmark: importing the whole real corpus (../shared/corpus, or $OPCTX_CORPUS).

Three things are timed side by side, each ``--repeat`` times (median and p95 printed):

* ``json baseline``: only ``json.loads`` of every line / document of every transcript:
  the floor any importer pays;
* ``parse``: detection + ``parse_path`` of every file (pure, no database);
* ``import``: ``import_paths`` into a fresh SQLite file, i.e. what ``opctx import``
  does: parse, then per session ONE write transaction (``write_session``: session row,
  nodes with their FTS rows, HEAD and meta, a single ``COMMIT``; earlier versions
  committed four times per session and marked the row meanwhile).

Reported: MB/s and sessions/s of each, and the ratios parse/baseline and
import/parse. Target: the whole corpus imports in under 10 s.

Usage: ``.venv/bin/python benchmarks/importers.py [--repeat 5] [--corpus DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from opctx.importers import import_paths, iter_transcript_files, parse_path
from opctx.importers.base import UnknownFormatError

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 10.0


def json_baseline(files: list[str]) -> int:
    n = 0
    for f in files:
        data = Path(f).read_bytes()
        try:
            json.loads(data)
            n += 1
            continue
        except ValueError:
            pass
        for line in data.splitlines():
            if line.strip():
                try:
                    json.loads(line)
                except ValueError:
                    pass
        n += 1
    return n


def parse_all(files: list[str]) -> int:
    sessions = 0
    for f in files:
        try:
            sessions += len(parse_path(f))
        except UnknownFormatError:
            pass
    return sessions


def import_all(corpus: Path) -> int:
    with tempfile.TemporaryDirectory() as d:
        report = import_paths([corpus], os.path.join(d, "bench.db"), on_error="skip")
        if report.failed:
            raise SystemExit(f"import failed: {report.failed}")
        return report.sessions


def timed(fn, repeat: int) -> tuple[list[float], int]:
    times = []
    result = 0
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return times, result


def p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--corpus", default=os.environ.get("OPCTX_CORPUS", str(ROOT.parent / "shared" / "corpus")))
    args = ap.parse_args()
    corpus = Path(args.corpus)
    if not (corpus / "manifest.json").is_file():
        print(f"corpus not found at {corpus}: nothing to benchmark (set OPCTX_CORPUS)")
        return 0
    files = [f for f, _ in iter_transcript_files([corpus]) if not f.endswith("manifest.json")]
    # side files read by their session (subagents, spilled outputs) count towards the bytes
    total_bytes = sum(p.stat().st_size for p in corpus.rglob("*")
                      if p.is_file() and p.name not in ("manifest.json", "README.md"))
    mb = total_bytes / 1e6
    print(f"corpus: {corpus} ({len(files)} transcript files, {mb:.1f} MB incl. side files)")
    rows = []
    for name, fn in (("json baseline", lambda: json_baseline(files)),
                     ("parse", lambda: parse_all(files)),
                     ("import", lambda: import_all(corpus))):
        times, n = timed(fn, args.repeat)
        med = statistics.median(times)
        rows.append((name, med, p95(times), n))
    print(f"{'stage':<14} {'median s':>9} {'p95 s':>8} {'MB/s':>8} {'sessions/s':>11}")
    for name, med, q95, n in rows:
        per = f"{n / med:11.1f}" if name != "json baseline" else f"{'-':>11}"
        print(f"{name:<14} {med:9.3f} {q95:8.3f} {mb / med:8.1f} {per}")
    base, parse, full = rows[0][1], rows[1][1], rows[2][1]
    print(f"ratio parse/json baseline: {parse / base:.2f}x; import/parse: {full / parse:.2f}x")
    verdict = "OK" if full < TARGET_SECONDS else "SLOWER THAN TARGET"
    print(f"whole-corpus import median {full:.2f} s (target < {TARGET_SECONDS:.0f} s): {verdict}")
    return 0 if full < TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
