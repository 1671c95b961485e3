"""Benchmark of the SQLite substrate (opctx.dag.store) against sqlite-utils, side by side.

Everything runs in one process, the contenders interleaved (their order alternates
from run to run) on the same rows, and every figure is a median; wall clock and CPU
time (``time.process_time``) are both printed, with the load average, because on a
shared machine the wall clock of one thread is inflated by other processes and its
CPU time much less.

* **append**, at each ``--sizes`` (default 10,000 and 100,000 nodes), ``--repeat``
  runs (default 5): ``GraphStore.append_many`` of the nodes in batches of
  ``--batch`` versus sqlite-utils ``Table.insert_all`` of the very same rows in the
  same batches, each batch one transaction on both sides. sqlite-utils gets the rows
  ready-made (outside its timer): the same ``pk``, columns and ``data_json`` text,
  the same searchable text (CJK segmented, see below), into a table with
  the same columns and indexes, FTS5 with the same tokenizer (its
  ``enable_fts(create_triggers=True)``), the same WAL / ``synchronous=NORMAL``.
  GraphStore's time includes everything it does: checks, the JSON, the search text
  with CJK segmentation, seq and HEAD. Target: ratio <= 1.1x at both sizes.
  ``--raw`` adds a raw ``executemany`` of opctx's own rows (the floor).
* **search**, on the databases of the last append run: for each query, in turn,
  ``GraphStore.search`` (one session), ``search_across_sessions`` and two
  sqlite-utils contenders, each returning at most 20 rows, best (bm25 rank) first:

  - ``sqlite-utils``: ``Table.search(q, limit=20, quote=True)`` returning the
    columns a hit carries (``session_id, id, type, seq`` and the rank), no snippet
    (``Table.search`` has none);
  - ``sqlite-utils + snippet``: the same, plus FTS5's ``snippet()`` with opctx's
    arguments: the SQL ``Table.search_sql`` builds (per call, as ``Table.search``
    does) with the snippet added to its select list, run with the query quoted by
    ``Database.quote_fts``, rows as dicts. This is the same work as opctx's
    (opctx also reads each hit's name out of the head of its stored JSON), so the
    target is against it.

  Query kinds: one common word, a mid-frequency word, a rare word, two words, 2-4
  CJK characters and operator-laden text. p50 and p95 per kind, the opctx /
  sqlite-utils + snippet ratios per kind (wall and CPU), and over all queries and
  over all but the CJK ones; target: all-queries p50 <= 1.1x sqlite-utils +
  snippet at both sizes.

  CJK: FTS5's tokenizer reads a run of CJK characters as one token, so opctx puts
  a zero-width space after each CJK character, in the indexed text and in the
  query (``_segment_cjk``), and a query of 2-4 characters is a phrase of 2-4
  tokens. sqlite-utils has no such step; left alone it looks the run up as one
  token and finds nothing (a lookup of a missing term, not a search). So that
  both sides do the same work, sqlite-utils indexes the very text opctx indexes
  and each sqlite-utils query is passed through the same ``_segment_cjk`` inside
  its timer (a no-op on text without CJK). ``--su-plain-text`` gives sqlite-utils
  the text and queries without segmentation instead (the comparison before this
  change: its CJK queries then do not do the same work, and the output says so).

  Rank window: a query with ``SEARCH_RANK_WINDOW`` (2,000) matches or more is
  not the same work either: opctx ranks only the newest 2,000 matches, sqlite-utils
  ranks them all (every common word at 100,000 nodes, some mid words and pairs);
  the output counts these queries per kind. Operator-laden text is quoted
  otherwise by ``quote_fts`` (an unbalanced quote makes one phrase of the rest;
  opctx makes a phrase of each word); neither finds anything here.
* **load** of the largest size: ``GraphStore.load()`` (target < 1.5 s) against a bare
  ``SELECT ... ; json.loads`` of the same rows.

The text is synthetic but shaped like agent transcripts: log-normal lengths from a
few words to tens of KB, prose from a Zipf vocabulary, code blocks, tool output
(file listings, tracebacks), CJK prose, tool calls in metadata.

Needs sqlite-utils (``pip install -e '.[bench]'``).
Run: ``.venv/bin/python benchmarks/store.py [--sizes 10000,100000] [--repeat 5] [--queries 60]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opctx.dag._search import (  # noqa: E402
    SEARCH_RANK_WINDOW,
    SNIPPET_CLOSE,
    SNIPPET_ELLIPSIS,
    SNIPPET_OPEN,
    SNIPPET_TOKENS,
    _segment_cjk,
)
from opctx.dag.nodes import Call  # noqa: E402
from opctx.dag.store import (  # noqa: E402
    GraphStore,
    _node_data_json,
    connect,
    fts_text,
    literal_fts_query,
    search_across_sessions,
)

try:
    import sqlite_utils
except ImportError:  # pragma: no cover - the bench extra is not installed
    sqlite_utils = None

TARGET_RATIO = 1.1
SID = "bench"
ZWSP = "\u200b"

CODE_LINES = [
    "def {w}(self, {v}: int) -> list[str]:",
    "    return [x for x in self.{v} if x.{w}()]",
    "for i, {v} in enumerate({w}):",
    "    if {v} is None: raise ValueError('{w} missing')",
    "import {w}.{v} as {v}",
    "class {W}({W}Base):",
    "    {v} = {w}.get('{v}', 0) + 1",
    "SELECT {v} FROM {w} WHERE id = ?;",
    "const {v} = await {w}({v}, {{ timeout: 30 }});",
]
CJK = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理府研质"
TOOLS = ["bash", "read_file", "edit_file", "grep", "list_dir", "python", "web_search"]


class TextMaker:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        syll = ["ka", "lo", "mi", "ren", "tas", "vor", "qui", "bel", "dra", "son", "pex", "ul"]
        vocab = set()
        while len(vocab) < 20000:
            vocab.add("".join(self.rng.choice(syll) for _ in range(self.rng.randint(2, 4))))
        self.vocab = sorted(vocab)
        # Zipf-like weights: a few words are everywhere, most are rare.
        self.weights = [1.0 / (i + 1) for i in range(len(self.vocab))]
        self.cum = list(_accumulate(self.weights))

    def words(self, n: int) -> str:
        picks = self.rng.choices(self.vocab, cum_weights=self.cum, k=n)
        return " ".join(picks)

    def code(self, lines: int) -> str:
        out = []
        for _ in range(lines):
            w, v = self.rng.choice(self.vocab), self.rng.choice(self.vocab)
            out.append(self.rng.choice(CODE_LINES).format(w=w, v=v, W=w.capitalize()))
        return "```python\n" + "\n".join(out) + "\n```"

    def cjk(self, chars: int) -> str:
        return "".join(self.rng.choice(CJK) for _ in range(chars)) + "。"

    def length(self) -> int:
        # log-normal in characters: median ~400, long tail to ~60 KB.
        return int(min(60_000, max(12, self.rng.lognormvariate(6.0, 1.4))))

    def text(self) -> str:
        target = self.length()
        parts: list[str] = []
        size = 0
        while size < target:
            kind = self.rng.random()
            if kind < 0.55:
                part = self.words(self.rng.randint(5, 60))
            elif kind < 0.8:
                part = self.code(self.rng.randint(2, 20))
            elif kind < 0.92:
                part = self.cjk(self.rng.randint(10, 120))
            else:
                part = "\n".join(
                    f"-rw-r--r-- 1 user staff {self.rng.randint(10, 99999)} src/{self.rng.choice(self.vocab)}.py"
                    for _ in range(self.rng.randint(3, 30))
                )
            parts.append(part)
            size += len(part) + 1
        return "\n".join(parts)


def _accumulate(weights):
    total = 0.0
    for w in weights:
        total += w
        yield total


def make_nodes(n: int, seed: int = 7) -> list[Call]:
    maker = TextMaker(seed)
    rng = maker.rng
    nodes: list[Call] = []
    prev: str | None = None
    t0 = 1_700_000_000.0
    for i in range(n):
        r = rng.random()
        nid = f"n{i:07d}"
        if r < 0.2:
            node = Call(id=nid, role="user", name="user", output=maker.text(), predecessor=prev)
        elif r < 0.6:
            meta = {"usage": {"input_tokens": rng.randint(100, 90000), "output_tokens": rng.randint(5, 4000)}}
            if rng.random() < 0.5:
                meta["tool_calls"] = [
                    {"id": f"call_{i}", "name": rng.choice(TOOLS), "arguments": {"cmd": maker.words(6)}}
                ]
            node = Call(
                id=nid, role="llm", name="gpt-4o", input={"system": "You are a helpful agent."},
                output=maker.text(), predecessor=prev, reads=[prev] if prev else [], metadata=meta,
            )
        else:
            node = Call(
                id=nid, role="code", name=rng.choice(TOOLS), input={"path": maker.words(3)},
                output=maker.text(), predecessor=prev,
                metadata={"tool_call_id": f"call_{i - 1}", "is_error": rng.random() < 0.05},
            )
        node.created_at = t0 + i
        nodes.append(node)
        # Occasional forks: a retry hangs off the node before the previous one.
        prev = nodes[-2].id if (len(nodes) > 2 and rng.random() < 0.02) else nid
    return nodes


def fresh_copies(nodes: list[Call]) -> list[Call]:
    out = []
    for n in nodes:
        c = Call.__new__(Call)
        for slot in Call.__slots__:
            setattr(c, slot, getattr(n, slot))
        c.seq = -1
        out.append(c)
    return out



# -- the rows every contender writes -------------------------------------------------------

_COLUMNS = ("pk", "id", "session_id", "type", "predecessor", "caller", "created_at", "seq", "data_json")


def node_rows(nodes: list[Call]) -> list[tuple]:
    """The ``nodes`` rows GraphStore writes for ``nodes`` appended to an empty session."""
    return [(pk, n.id, SID, n.role, n.predecessor, n.caller, n.created_at, pk - 1, _node_data_json(n))
            for pk, n in enumerate(nodes, start=1)]


def su_records(nodes: list[Call], plain: bool = False) -> list[dict]:
    """The same rows for sqlite-utils, the searchable text CJK segmented as opctx's
    (``plain``: without the segmentation)."""
    return [dict(zip(_COLUMNS, row, strict=True), text=fts_text(n).replace(ZWSP, "") if plain else fts_text(n))
            for row, n in zip(node_rows(nodes), nodes, strict=True)]


def su_database(path: Path):
    """A sqlite-utils table shaped like opctx's ``nodes``, FTS5 kept by its triggers."""
    db = sqlite_utils.Database(path)
    db.enable_wal()
    db.execute("PRAGMA synchronous = NORMAL")
    table = db["nodes"]
    table.create({"pk": int, "id": str, "session_id": str, "type": str, "predecessor": str,
                  "caller": str, "created_at": float, "seq": int, "data_json": str, "text": str},
                 pk="pk")
    table.create_index(["session_id", "id"], unique=True)
    table.create_index(["session_id", "seq"], unique=True)
    table.create_index(["session_id", "predecessor"])
    table.create_index(["session_id", "caller"])
    table.enable_fts(["text"], create_triggers=True, tokenize="unicode61 remove_diacritics 2")
    return db


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of ``fn()``, with the cyclic GC collected first."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


# -- append ----------------------------------------------------------------------------------


def append_opctx(nodes: list[Call], batch: int, path: Path) -> tuple[float, float]:
    copies = fresh_copies(nodes)
    store = GraphStore(path, SID)

    def run() -> None:
        for i in range(0, len(copies), batch):
            store.append_many(copies[i : i + batch])

    try:
        return timed(run)
    finally:
        store.close()


def append_su(records: list[dict], batch: int, path: Path) -> tuple[float, float]:
    db = su_database(path)
    table = db["nodes"]

    def run() -> None:
        for i in range(0, len(records), batch):
            with db.atomic():
                table.insert_all(records[i : i + batch])

    try:
        return timed(run)
    finally:
        db.close()


def append_raw(rows: list[tuple], fts: list[tuple], batch: int, path: Path) -> tuple[float, float]:
    conn = connect(path)
    conn.execute(f"INSERT INTO sessions(id, created_at, updated_at) VALUES ('{SID}', 0, 0)")

    def run() -> None:
        for i in range(0, len(rows), batch):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(f"INSERT INTO nodes({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * 9)})",
                             rows[i : i + batch])
            conn.executemany("INSERT INTO nodes_fts(rowid, text, session_id, node_id) VALUES (?, ?, ?, ?)",
                             fts[i : i + batch])
            conn.execute("COMMIT")

    try:
        return timed(run)
    finally:
        conn.close()


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def bench_append(nodes: list[Call], args: argparse.Namespace, tmp: Path) -> dict[str, list]:
    """Interleaved runs; the databases of the last run are kept for the search."""
    records = su_records(nodes, args.su_plain_text)
    raw = None
    if args.raw:
        raw = (node_rows(nodes), [(pk, fts_text(n), SID, n.id) for pk, n in enumerate(nodes, 1)])
    contenders = {
        "opctx": lambda p: append_opctx(nodes, args.batch, p),
        "sqlite-utils": lambda p: append_su(records, args.batch, p),
    }
    if raw is not None:
        contenders["raw executemany"] = lambda p: append_raw(*raw, args.batch, p)
    times: dict[str, list] = {name: [] for name in contenders}
    for r in range(args.repeat):
        order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
        for name in order:
            path = tmp / f"{name.split()[0]}.db"
            remove_db(path)
            times[name].append(contenders[name](path))
    return times


def print_append(n: int, times: dict[str, list], args: argparse.Namespace) -> float:
    print(f"\nappend {n:,} nodes, batches of {args.batch}, median of {args.repeat} interleaved runs:")
    base_wall = statistics.median(w for w, _ in times["sqlite-utils"])
    base_cpu = statistics.median(c for _, c in times["sqlite-utils"])
    for name, runs in times.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"  {name:<16} wall {wall:7.2f} s ({n / wall:7,.0f} nodes/s) {wall / base_wall:5.2f}x"
              f"   cpu {cpu:7.2f} s {cpu / base_cpu:5.2f}x")
    ratio = statistics.median(w for w, _ in times["opctx"]) / base_wall
    print(f"  opctx / sqlite-utils: {ratio:.2f}x wall (target <= {TARGET_RATIO}x): "
          f"{'OK' if ratio <= TARGET_RATIO else 'MISSED'}")
    return ratio


# -- search ----------------------------------------------------------------------------------


def query_kinds(maker: TextMaker, rng: random.Random) -> dict[str, Callable[[], str]]:
    v = maker.vocab
    return {
        "common word": lambda: v[rng.randint(0, 20)],
        "mid word": lambda: v[rng.randint(100, 2000)],
        "rare word": lambda: v[rng.randint(10000, 19999)],
        "two words": lambda: f"{v[rng.randint(0, 500)]} {v[rng.randint(0, 500)]}",
        "CJK 2-4 chars": lambda: "".join(rng.choice(CJK) for _ in range(rng.randint(2, 4))),
        "operators": lambda: f'"{v[rng.randint(0, 300)]} AND NEAR( -x *',
    }


def bench_search(tmp: Path, n_queries: int, plain: bool = False) -> tuple[dict[str, dict[str, list]], dict]:
    """``{contender: {kind: [(wall, cpu), ...]}}``, the contenders in turn on each query,
    and ``{kind: [has the query SEARCH_RANK_WINDOW matches or more, ...]}`` (counted untimed).

    The sqlite-utils contenders segment CJK in the query inside their timer, as
    opctx does (``plain``: they do not; see "CJK" in the module doc).
    """
    su_query = (lambda q: q) if plain else _segment_cjk
    store = GraphStore(tmp / "opctx.db", SID, create=False)
    db = sqlite_utils.Database(tmp / "sqlite-utils.db")
    table = db["nodes"]
    hit_columns = ["session_id", "id", "type", "seq"]

    def one(q):
        return lambda: store.search(q, limit=20)

    def across(q):
        return lambda: search_across_sessions(store.connection, q, limit=20)

    def su(q):
        return lambda: list(table.search(su_query(q), limit=20, quote=True, columns=hit_columns,
                                          include_rank=True))

    def su_snippet(q):
        return lambda: su_search_with_snippet(db, table, su_query(q), hit_columns)

    contenders = {"GraphStore.search": one, "search_across_sessions": across, "sqlite-utils": su,
                  SU_SNIPPET: su_snippet}
    out: dict[str, dict[str, list]] = {name: {} for name in contenders}
    windowed: dict[str, list[bool]] = {}
    for kind, make in query_kinds(TextMaker(7), random.Random(11)).items():
        windowed[kind] = []
        for i in range(n_queries):
            q = make()
            names = list(contenders) if i % 2 == 0 else list(reversed(contenders))
            for name in names:
                out[name].setdefault(kind, []).append(timed_query(contenders[name](q)))
            windowed[kind].append(many_matches(store, q))
    store.close()
    db.close()
    return out, windowed


def many_matches(store: GraphStore, q: str) -> bool:
    """Does opctx rank only the newest SEARCH_RANK_WINDOW matches of ``q`` (see "Rank window")?"""
    fts_query = literal_fts_query(q)
    if not fts_query:
        return False
    sql = "SELECT count(*) FROM (SELECT 1 FROM nodes_fts WHERE nodes_fts MATCH ? LIMIT ?)"
    return store.connection.execute(sql, (fts_query, SEARCH_RANK_WINDOW)).fetchone()[0] >= SEARCH_RANK_WINDOW


SU_SNIPPET = "sqlite-utils + snippet"
_SU_RANK = '"nodes_fts".rank rank'


def su_search_with_snippet(db, table, q: str, columns: list[str]) -> list[dict]:
    """``Table.search(q, limit=20, quote=True, columns=columns, include_rank=True)``
    with FTS5's ``snippet()`` (opctx's arguments) as one more column."""
    sql = table.search_sql(columns=columns, limit=20, include_rank=True)
    assert _SU_RANK in sql, "sqlite-utils changed the shape of its search SQL"
    sql = sql.replace(_SU_RANK, f"{_SU_RANK}, snippet(\"nodes_fts\", 0, '{SNIPPET_OPEN}', "
                      f"'{SNIPPET_CLOSE}', '{SNIPPET_ELLIPSIS}', {SNIPPET_TOKENS}) snippet", 1)
    cursor = db.execute(sql, {"query": db.quote_fts(q)})
    names = [c[0] for c in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor]


def timed_query(fn: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(round(0.95 * len(xs))) - 1)]


def print_search(n: int, res: dict[str, dict[str, list]], windowed: dict[str, list[bool]], n_queries: int,
                 plain: bool = False) -> list[float]:
    """Per kind and over all queries; returns the all-queries p50 ratios (wall) to sqlite-utils + snippet."""
    print(f"\nsearch over {n:,} nodes, limit 20, {n_queries} queries per kind, contenders in turn "
          "(ms, wall; cpu p50 in brackets):")
    if plain:
        print("  NOT THE SAME WORK on CJK (--su-plain-text): sqlite-utils indexes and queries CJK text "
              "unsegmented, looks each run up as one token and finds nothing; opctx matches a phrase "
              "of segmented characters. Compare on 'all but CJK'.")
    else:
        print("  CJK: the same work on both sides: sqlite-utils indexes opctx's searchable text (CJK "
              "segmented) and segments each query with opctx's _segment_cjk inside its timer.")
    print(f"  Not the same work on queries with {SEARCH_RANK_WINDOW:,} matches or more: opctx ranks only "
          f"the newest {SEARCH_RANK_WINDOW:,} (its rank window), sqlite-utils ranks them all. Such queries: "
          + ", ".join(f"{k} {sum(w)}/{n_queries}" for k, w in windowed.items()) + ".")
    base = res["sqlite-utils"]
    kinds = list(base)
    print(f"  {'':30}" + "".join(f"{k:>20}" for k in kinds) + f"{'all':>20}")
    ratios = []
    for name, by_kind in res.items():
        cells = []
        for k in [*kinds, "all"]:
            runs = [t for kk in kinds for t in by_kind[kk]] if k == "all" else by_kind[k]
            wall = statistics.median(w for w, _ in runs) * 1e3
            cpu = statistics.median(c for _, c in runs) * 1e3
            cells.append(f"{wall:8.2f} [{cpu:6.2f}]   ")
        print(f"  {name + ' p50':<30}" + "".join(f"{c:>20}" for c in cells))
        cells = [f"{p95([w for w, _ in (by_kind[k] if k != 'all' else [t for kk in kinds for t in by_kind[kk]])]) * 1e3:8.2f}"
                 for k in [*kinds, "all"]]
        print(f"  {name + ' p95':<30}" + "".join(f"{c:>20}" for c in cells))
    print(f"  opctx / {SU_SNIPPET}, p50 per kind, wall [cpu]:")
    for name in ("GraphStore.search", "search_across_sessions"):
        cells = []
        for k in [*kinds, "all"]:
            runs = [t for kk in kinds for t in res[name][kk]] if k == "all" else res[name][k]
            ref = [t for kk in kinds for t in res[SU_SNIPPET][kk]] if k == "all" else res[SU_SNIPPET][k]
            wall = statistics.median(w for w, _ in runs) / statistics.median(w for w, _ in ref)
            cpu = statistics.median(c for _, c in runs) / statistics.median(c for _, c in ref)
            cells.append(f"{wall:6.2f}x [{cpu:5.2f}x]   ")
        print(f"  {name:<30}" + "".join(f"{c:>20}" for c in cells))
    # The queries both sides do the same work on: under the rank window, and (with
    # --su-plain-text) not CJK.
    same = {k: [not w and not (plain and k.startswith("CJK")) for w in windowed[k]] for k in kinds}
    label_same = "same work only (under the rank window" + (", not CJK)" if plain else ")")
    for label, keep in (("all queries", None), (label_same, same)):
        every = {name: [t for k in kinds for i, t in enumerate(res[name][k]) if keep is None or keep[k][i]]
                 for name in res}
        for name in ("GraphStore.search", "search_across_sessions"):
            for base in (SU_SNIPPET, "sqlite-utils"):
                p50 = statistics.median(w for w, _ in every[name]) / statistics.median(w for w, _ in every[base])
                cpu = statistics.median(c for _, c in every[name]) / statistics.median(c for _, c in every[base])
                tail = p95([w for w, _ in every[name]]) / p95([w for w, _ in every[base]])
                line = (f"  {name} / {base}, {label}: p50 {p50:.2f}x wall, {cpu:.2f}x cpu; "
                        f"p95 {tail:.2f}x")
                if base == SU_SNIPPET and keep is None:
                    ratios.append(p50)
                    line += (f" (target p50 <= {TARGET_RATIO}x): "
                             f"{'OK' if p50 <= TARGET_RATIO else 'MISSED'}")
                print(line)
    return ratios


# -- load ------------------------------------------------------------------------------------


def bench_load(path: Path, repeat: int) -> None:
    store = GraphStore(path, SID, create=False)
    loads, raws = [], []
    count = 0
    for _ in range(repeat):
        t = time.perf_counter()
        graph = store.load()
        loads.append(time.perf_counter() - t)
        count = len(graph)
        del graph
        t = time.perf_counter()
        rows = store.connection.execute(
            "SELECT id, type, predecessor, caller, created_at, seq, data_json FROM nodes "
            f"WHERE session_id = '{SID}' ORDER BY seq").fetchall()
        decoded = [json.loads(r[6]) for r in rows]
        raws.append(time.perf_counter() - t)
        del rows, decoded
    store.close()
    load, raw = statistics.median(loads), statistics.median(raws)
    print(f"\nload {count:,} nodes (median of {repeat}):")
    print(f"  GraphStore.load()               {load:7.3f} s (target < 1.5 s)")
    print(f"  bare SELECT + json.loads        {raw:7.3f} s   ratio {load / raw:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="node counts, comma separated")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--queries", type=int, default=60, help="queries per kind")
    ap.add_argument("--raw", action="store_true", help="add a raw executemany of the same rows")
    ap.add_argument("--su-plain-text", action="store_true",
                    help="sqlite-utils indexes and queries text without CJK segmentation "
                         "(its CJK queries then find nothing: not the same work)")
    args = ap.parse_args()
    if sqlite_utils is None:
        print("sqlite-utils is not installed: pip install -e '.[bench]'")
        return 1
    sizes = sorted(int(s) for s in args.sizes.split(","))
    t = time.perf_counter()
    every = make_nodes(sizes[-1])
    print(f"generated {len(every):,} nodes, {sum(len(n.output) for n in every) / 1e6:.1f} M chars of "
          f"output in {time.perf_counter() - t:.1f} s; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores; sqlite-utils {sqlite_utils_version()}")
    ok = True
    tmp = Path(tempfile.mkdtemp(prefix="opctx-bench-"))
    try:
        for n in sizes:
            nodes = every[:n]
            ok &= print_append(n, bench_append(nodes, args, tmp), args) <= TARGET_RATIO
            res, windowed = bench_search(tmp, args.queries, args.su_plain_text)
            ratios = print_search(n, res, windowed, args.queries, args.su_plain_text)
            ok &= all(r <= TARGET_RATIO for r in ratios)
            if n == sizes[-1]:
                bench_load(tmp / "opctx.db", 3)
            print(f"  (load average now {os.getloadavg()[0]:.1f})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


def sqlite_utils_version() -> str:
    from importlib.metadata import version

    return version("sqlite-utils")


if __name__ == "__main__":
    sys.exit(main())
