"""A comparable snapshot of search hits: does a change to search keep every hit the same?

Runs the query set of ``benchmarks/store.py`` (its six kinds, ``--queries`` of each,
the same generator and seeds) over a database of its synthetic nodes and writes every
hit of every call as canonical JSON (session, node id, role, name, snippet, rank as
``repr``, seq; an error as its message). The calls: ``GraphStore.search`` and
``search_across_sessions`` as the speed benchmark makes them, ``rank_window=None``,
a small window with a small limit, a raw ``OR`` query, and the search of a second,
smaller session, so that the session-filtered path runs too (the speed benchmark's
database has one session).

The database is built on the first run (``--db``) and reused, so that two revisions
search the very same rows. ``--code DIR`` searches with the ``opctx`` package of
another checkout (for example the main branch's) instead of this one.

Run::

    .venv/bin/python benchmarks/search_snapshot.py --db /tmp/s.db --code ../main --out old.json
    .venv/bin/python benchmarks/search_snapshot.py --db /tmp/s.db --compare old.json

``--compare FILE`` prints the first differences against ``FILE`` (exit status 1 when
there is any, 0 otherwise). Without ``--db`` a temporary database is built and dropped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAIN_SID, OTHER_SID = "bench", "other"


def build(db: Path, size: int) -> None:
    import store as bench

    from opctx.dag.store import GraphStore

    nodes = bench.make_nodes(size)
    main = GraphStore(db, MAIN_SID)
    for i in range(0, len(nodes), 1000):
        main.append_many(nodes[i : i + 1000])
    main.close()
    # A second session of other text from the same vocabulary: its hits compete
    # with the first session's, and the first session's search must filter them out.
    other = bench.make_nodes(max(1, size // 5), seed=8)
    store = GraphStore(db, OTHER_SID)
    for i in range(0, len(other), 1000):
        store.append_many(other[i : i + 1000])
    store.close()


def snapshot(db: Path, n_queries: int) -> list:
    import store as bench

    from opctx.dag.store import GraphStore, StoreError, search_across_sessions

    main = GraphStore(db, MAIN_SID, create=False)
    other = GraphStore(db, OTHER_SID, create=False)
    conn = main.connection
    calls = {
        "search": lambda q: main.search(q, limit=20),
        "across": lambda q: search_across_sessions(conn, q, limit=20),
        "search window=None": lambda q: main.search(q, limit=20, rank_window=None),
        "search limit=5 window=50": lambda q: main.search(q, limit=5, rank_window=50),
        "other session": lambda q: other.search(q, limit=20),
        "raw OR": lambda q: main.search(" OR ".join(q.split()) or q, limit=20, raw=True),
    }
    out = []
    for kind, make in bench.query_kinds(bench.TextMaker(7), random.Random(11)).items():
        for _ in range(n_queries):
            q = make()
            for label, call in calls.items():
                try:
                    got = [[h.session_id, h.node_id, h.role, h.name, h.snippet, repr(h.rank), h.seq]
                           for h in call(q)]
                except StoreError as e:
                    got = f"StoreError: {e}"
                out.append([kind, q, label, got])
    main.close()
    other.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, help="database to search (built on the first run)")
    ap.add_argument("--size", type=int, default=10_000, help="nodes of the first session when building")
    ap.add_argument("--queries", type=int, default=60, help="queries per kind")
    ap.add_argument("--code", type=Path, help="checkout whose opctx package searches (default: this one)")
    ap.add_argument("--out", type=Path, help="write the snapshot here")
    ap.add_argument("--compare", type=Path, help="compare with this snapshot")
    args = ap.parse_args()
    # opctx is imported from --code before store.py (which puts this checkout first
    # on the path) imports it, so that the benchmark's generator searches with it.
    sys.path.insert(0, str((args.code or HERE.parent).resolve()))
    import opctx.dag.store

    sys.path.insert(0, str(HERE))
    print(f"opctx from {Path(opctx.dag.store.__file__).resolve().parents[2]}")
    tmp = None
    db = args.db
    if db is None:
        tmp = Path(tempfile.mkdtemp(prefix="opctx-search-snapshot-"))
        db = tmp / "search.db"
    try:
        if not db.exists():
            build(db, args.size)
        snap = snapshot(db, args.queries)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(snap, ensure_ascii=False, sort_keys=True)
    hits = sum(len(r[3]) for r in snap if isinstance(r[3], list))
    print(f"{len(snap)} calls, {hits} hits, sha256 {hashlib.sha256(text.encode()).hexdigest()[:16]}")
    if args.out:
        args.out.write_text(text)
    if args.compare:
        old = json.loads(args.compare.read_text())
        diffs = [(a, b) for a, b in zip(old, snap, strict=False) if a != b]
        if len(old) != len(snap):
            print(f"different numbers of calls: {len(old)} in {args.compare}, {len(snap)} now")
        for a, b in diffs[:5]:
            print(f"differs: {a[:3]}\n  was {a[3]!r:.300}\n  now {b[3]!r:.300}")
        print(f"{len(diffs)} of {len(snap)} calls differ from {args.compare}")
        return 1 if diffs or len(old) != len(snap) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
