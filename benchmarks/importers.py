"""Benchmark: importing large transcripts and the whole real corpus, against baselines.

**Large files** (first). A Claude Code session and a Codex rollout of ``--mb`` MB each,
written in a temporary folder by the generators of ``import_memory.py`` (never kept),
and the largest Claude Code and Codex files of the corpus. Each is imported ``--repeat``
times, interleaved with a minimal baseline, and the median of each is compared:

* ``opctx``: ``import_paths([file], fresh database)``, what ``opctx import FILE`` does;
* ``baseline``: ``json.loads`` of every line of the file (and of the side files its
  import reads: subagents, spilled tool results), then ONE transaction that inserts,
  with ``executemany``, the same session, node and FTS rows as opctx wrote them (read
  back once from an opctx import: no row is built in the timed part) into a fresh
  database of opctx's schema (``connect``).

Target: opctx / baseline <= 1.5x (wall; CPU time is printed beside it, and the load
average: other processes inflate the wall clock). Peak memory is
``import_memory.py``'s. Under each file, where opctx's CPU time goes (the fastest of
``--repeat`` runs of each stage alone): the decoding of the lines (orjson where it
is installed, ``json`` for what it refuses: ``dag/_fastjson.py``), the rest of the parse, the nodes' JSON (``data_json``), their search text (``fts_text``, of which CJK
segmentation), and the SQL writes the baseline makes too: the stages beyond the
baseline's are what the ratio pays for.

**The whole corpus** (``../shared/corpus`` or $OPCTX_CORPUS). Three things are timed
side by side, each ``--repeat`` times (median and p95 printed):

* ``json baseline``: only ``json.loads`` of every line / document of every transcript:
  the floor any importer pays;
* ``parse``: detection + ``parse_path`` of every file (pure, no database);
* ``import``: ``import_paths`` into a fresh SQLite file, i.e. what ``opctx import``
  does: parse, then per session ONE write transaction (``write_session``: session row,
  nodes with their FTS rows, HEAD and meta, a single ``COMMIT``; earlier versions
  committed four times per session and marked the row meanwhile).

Reported: MB/s and sessions/s of each, and the ratios parse/baseline and
import/parse. Target: the whole corpus imports in under 10 s.

Usage: ``.venv/bin/python benchmarks/importers.py [--repeat 5] [--mb 20] [--corpus DIR]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from import_memory import claude_code_lines, codex_lines, write  # noqa: E402

from opctx.dag.store import connect  # noqa: E402
from opctx.importers import detect, import_paths, iter_transcript_files, parse_path  # noqa: E402
from opctx.importers.base import UnknownFormatError, iter_jsonl, load_json  # noqa: E402
from opctx.importers.claude_code import owned_side_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 10.0
TARGET_RATIO = 1.5


# -- large files against the minimal baseline ----------------------------------------------

_TABLES = {  # the rows an import writes, in the order they go in
    "sessions": "id, title, created_at, updated_at, model, agent_id, source, extra_json, "
                "last_node_id, next_seq",
    "nodes": "pk, id, session_id, type, predecessor, caller, created_at, seq, data_json",
    "nodes_fts": "rowid, text, session_id, node_id",
}


def written_rows(path: Path, work: Path) -> dict[str, list[tuple]]:
    """The rows of every table as an opctx import of ``path`` writes them (read back)."""
    db = work / "rows.db"
    report = import_paths([path], db)
    if not report.ok:
        raise SystemExit(f"import of {path} failed: {report.failed}")
    conn = sqlite3.connect(db)
    rows = {t: conn.execute(f"SELECT {cols} FROM {t} ORDER BY 1").fetchall() for t, cols in _TABLES.items()}
    conn.close()
    remove_db(db)
    return rows


def load_lines(path: Path) -> None:
    """``json.loads`` of every line the import of ``path`` reads (side files too)."""
    for f in [str(path), *side_files(path)]:
        with open(f, "rb") as fh:
            if f.endswith(".jsonl"):
                records = [json.loads(line) for line in fh if line.strip()]
            elif f.endswith(".json"):
                records = json.load(fh)
            else:
                records = fh.read()
        del records


def decode_lines(path: Path) -> None:
    """The importers' decoding of every line ``load_lines`` reads (``iter_jsonl``, ``load_json``)."""
    for f in [str(path), *side_files(path)]:
        if f.endswith(".jsonl"):
            records = [jl.value for jl in iter_jsonl(f)]
        elif f.endswith(".json"):
            records = load_json(f)
        else:
            records = Path(f).read_bytes()
        del records


def baseline(path: Path, rows: dict[str, list[tuple]], db: Path) -> None:
    """``json.loads`` of every line the import reads, then the same rows in one transaction."""
    load_lines(path)
    conn = connect(db)
    conn.execute("BEGIN IMMEDIATE")
    for table, cols in _TABLES.items():
        marks = ", ".join("?" * len(cols.split(",")))
        conn.executemany(f"INSERT INTO {table}({cols}) VALUES ({marks})", rows[table])
    conn.execute("COMMIT")
    conn.close()


def side_files(path: Path) -> list[str]:
    """The files beside ``path`` that its import reads (subagents, spilled outputs)."""
    return sorted(f for f in owned_side_files(str(path)) if os.path.isfile(f))


def import_one(path: Path, db: Path) -> None:
    report = import_paths([path], db)
    if not report.ok:
        raise SystemExit(f"import of {path} failed: {report.failed}")


def remove_db(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def timed_run(fn, *args) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of one call, the cyclic GC collected first."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def large_files(work: Path, mb: float, corpus: Path) -> list[tuple[str, Path]]:
    """Generated Claude Code and Codex files of ``mb`` MB, and the corpus's largest of each."""
    target = int(mb * 1e6)
    cc = work / "5e55a0e0-0000-4000-8000-000000000075.jsonl"
    codex = work / "rollout-2026-01-05T00-00-00-019c0000-0000-7000-8000-000000000075.jsonl"
    write(cc, claude_code_lines(target))
    write(codex, codex_lines(target))
    files = [("claude_code, generated", cc), ("codex, generated", codex)]
    if (corpus / "manifest.json").is_file():
        for fmt in ("claude_code", "codex"):
            found = [Path(f) for f, _ in iter_transcript_files([corpus]) if f.endswith(".jsonl")
                     and _format_of(f) == fmt]
            if found:
                files.append((f"{fmt}, corpus's largest", max(found, key=lambda p: p.stat().st_size)))
    return files


def _format_of(path: str) -> str | None:
    try:
        return detect(path)
    except UnknownFormatError:
        return None


def bench_large(files: list[tuple[str, Path]], work: Path, repeat: int) -> bool:
    print(f"{'file':<28} {'MB':>6} {'nodes':>6} {'opctx s':>8} {'base s':>7} {'ratio':>6} "
          f"{'cpu ratio':>9} {'opctx MB/s':>10} {'base MB/s':>9}")
    ok = True
    for label, path in files:
        size = (path.stat().st_size + sum(os.path.getsize(f) for f in side_files(path))) / 1e6
        rows = written_rows(path, work)
        runs: dict[str, list[tuple[float, float]]] = {"opctx": [], "baseline": []}
        contenders = {"opctx": lambda db, p=path: import_one(p, db),
                      "baseline": lambda db, p=path, r=rows: baseline(p, r, db)}
        for i in range(repeat):
            for name in (("opctx", "baseline") if i % 2 == 0 else ("baseline", "opctx")):
                db = work / f"{name}.db"
                remove_db(db)
                runs[name].append(timed_run(contenders[name], db))
                remove_db(db)
        wall = {k: statistics.median(w for w, _ in v) for k, v in runs.items()}
        cpu = {k: statistics.median(c for _, c in v) for k, v in runs.items()}
        ratio = wall["opctx"] / wall["baseline"]
        ok &= ratio <= TARGET_RATIO
        print(f"{label:<28} {size:6.1f} {len(rows['nodes']):6d} {wall['opctx']:8.2f} {wall['baseline']:7.2f} "
              f"{ratio:5.2f}x {cpu['opctx'] / cpu['baseline']:8.2f}x {size / wall['opctx']:10.1f} "
              f"{size / wall['baseline']:9.1f}")
        stages = cpu_stages(path, repeat)
        print("    cpu s: " + ", ".join(f"{k} {v:.3f}" for k, v in stages.items())
              + f"; baseline {cpu['baseline']:.3f}")
    print(f"target: opctx / baseline <= {TARGET_RATIO}x (median of {repeat} interleaved runs; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores): {'OK' if ok else 'MISSED'}")
    return ok


def cpu_stages(path: Path, repeat: int) -> dict[str, float]:
    """The CPU seconds of each stage of an import of ``path``, each the fastest of ``repeat``."""
    from opctx.dag import _search
    from opctx.dag._rows import _node_data_json

    calls = [c for s in parse_path(str(path)) for c in s.calls]
    # the search texts before segmentation (near enough for timing it)
    texts = [_search.fts_text(c).replace("\u200b", "") for c in calls]
    stages = {"decoding": lambda: decode_lines(path), "parse": lambda: parse_path(str(path)),
              "node JSON": lambda: [_node_data_json(c) for c in calls],
              "FTS text": lambda: [_search.fts_text(c) for c in calls],
              "CJK": lambda: [_search._segment_cjk(t) for t in texts]}
    best = {}
    for name, fn in stages.items():
        best[name] = min(timed_run(fn)[1] for _ in range(repeat))
    best["parse"] -= best["decoding"]  # what the importer adds to the decoding
    best["CJK"] = min(best["CJK"], best["FTS text"])  # (of which) CJK segmentation
    return {"decoding": best["decoding"], "rest of parse": best["parse"],
            "node JSON": best["node JSON"], "FTS text": best["FTS text"],
            "of which CJK": best["CJK"]}


# -- the whole corpus ---------------------------------------------------------------------------


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
    ap.add_argument("--mb", type=float, default=20.0, help="size of each generated file")
    ap.add_argument("--corpus", default=os.environ.get("OPCTX_CORPUS", str(ROOT.parent / "shared" / "corpus")))
    args = ap.parse_args()
    corpus = Path(args.corpus)
    work = Path(tempfile.mkdtemp(prefix="opctx-import-bench-"))
    try:
        large_ok = bench_large(large_files(work, args.mb, corpus), work, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not (corpus / "manifest.json").is_file():
        print(f"corpus not found at {corpus}: no whole-corpus figures (set OPCTX_CORPUS)")
        return 0 if large_ok else 1
    return 0 if bench_corpus(corpus, args.repeat) and large_ok else 1


def bench_corpus(corpus: Path, repeat: int) -> bool:
    files = [f for f, _ in iter_transcript_files([corpus]) if not f.endswith("manifest.json")]
    # side files read by their session (subagents, spilled outputs) count towards the bytes
    total_bytes = sum(p.stat().st_size for p in corpus.rglob("*")
                      if p.is_file() and p.name not in ("manifest.json", "README.md"))
    mb = total_bytes / 1e6
    print(f"\ncorpus: {corpus} ({len(files)} transcript files, {mb:.1f} MB incl. side files)")
    rows = []
    for name, fn in (("json baseline", lambda: json_baseline(files)),
                     ("parse", lambda: parse_all(files)),
                     ("import", lambda: import_all(corpus))):
        times, n = timed(fn, repeat)
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
    return full < TARGET_SECONDS


if __name__ == "__main__":
    sys.exit(main())
