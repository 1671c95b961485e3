"""Benchmark of the SQLite substrate (opctx.dag.store) on 100,000 realistic nodes.

Measures, side by side:

* append throughput: ``GraphStore.append_many`` versus raw ``sqlite3.executemany``
  of the very same rows (same pk, JSON and FTS text) into the same schema, both in
  batches of the same size, each batch one transaction. Two baselines are shown:
  executemany of pre-built rows (the strict one; the ratio target is <= 2x) and
  executemany including building the rows (JSON + FTS text) in Python.
* ``GraphStore.load()`` time (target < 1.5 s) against a bare
  ``SELECT ... ; json.loads`` of the same rows.
* FTS search latency median / p95 (target < 20 ms) for one-word, two-word,
  rare-word, CJK and operator-laden literal queries; and, for comparison, the
  common words ranked over every match (``rank_window=None``; see "Rank window"
  in opctx/dag/store.py).

The text is synthetic but shaped like agent transcripts: log-normal lengths from a
few words to tens of KB, prose from a Zipf vocabulary, code blocks, tool output
(file listings, tracebacks), CJK prose, tool calls in metadata.

Run: ``.venv/bin/python benchmarks/store.py [--nodes 100000] [--batch 1000] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opctx.dag.nodes import Call  # noqa: E402
from opctx.dag.store import (  # noqa: E402
    GraphStore,
    _node_data_json,
    connect,
    fts_text,
)

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


def bench_append(nodes: list[Call], batch: int, tmp: Path, tag: str) -> tuple[float, float, float, float]:
    # Store
    copies = fresh_copies(nodes)
    path = tmp / f"store-{tag}.db"
    store = GraphStore(path, "bench")
    t = time.perf_counter()
    for i in range(0, len(copies), batch):
        store.append_many(copies[i : i + batch])
    t_store = time.perf_counter() - t
    store.close()

    # Rows exactly as the store writes them.
    def build_rows(nodes_):
        rows, fts = [], []
        for pk, n in enumerate(nodes_, start=1):
            rows.append((pk, n.id, "bench", n.role, n.predecessor, n.caller, n.created_at, pk - 1, _node_data_json(n)))
            fts.append((pk, fts_text(n), "bench", n.id))
        return rows, fts

    def raw_insert(path_, rows, fts):
        conn = connect(path_)
        conn.execute(
            "INSERT INTO sessions(id, created_at, updated_at) VALUES ('bench', 0, 0)"
        )
        t_ = time.perf_counter()
        for i in range(0, len(rows), batch):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO nodes(pk, id, session_id, type, predecessor, caller, created_at, seq, "
                "data_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows[i : i + batch],
            )
            conn.executemany(
                "INSERT INTO nodes_fts(rowid, text, session_id, node_id) VALUES (?, ?, ?, ?)",
                fts[i : i + batch],
            )
            conn.execute("COMMIT")
        dt = time.perf_counter() - t_
        conn.close()
        return dt

    rows, fts = build_rows(nodes)
    t_raw = raw_insert(tmp / f"raw-{tag}.db", rows, fts)

    t = time.perf_counter()
    rows2, fts2 = build_rows(nodes)
    t_build = time.perf_counter() - t
    t_raw_built = t_build + raw_insert(tmp / f"rawb-{tag}.db", rows2, fts2)
    return t_store, t_raw, t_raw_built, t_build


def bench_load(path: Path, repeat: int) -> tuple[list[float], list[float], int]:
    store = GraphStore(path, "bench", create=False)
    loads, raws = [], []
    n = 0
    for _ in range(repeat):
        t = time.perf_counter()
        g = store.load()
        loads.append(time.perf_counter() - t)
        n = len(g)
        del g
        t = time.perf_counter()
        rows = store.connection.execute(
            "SELECT id, type, predecessor, caller, created_at, seq, data_json FROM nodes "
            "WHERE session_id = 'bench' ORDER BY seq"
        ).fetchall()
        decoded = [json.loads(r[6]) for r in rows]
        raws.append(time.perf_counter() - t)
        del rows, decoded
    store.close()
    return loads, raws, n


def bench_search(path: Path, maker: TextMaker, n_queries: int) -> dict[str, list[float]]:
    store = GraphStore(path, "bench", create=False)
    rng = random.Random(11)
    kinds = {
        "common word": lambda: maker.vocab[rng.randint(0, 20)],
        "mid word": lambda: maker.vocab[rng.randint(100, 2000)],
        "rare word": lambda: maker.vocab[rng.randint(10000, 19999)],
        "two words": lambda: f"{maker.vocab[rng.randint(0, 500)]} {maker.vocab[rng.randint(0, 500)]}",
        "CJK 2-4 chars": lambda: "".join(rng.choice(CJK) for _ in range(rng.randint(2, 4))),
        "operators": lambda: f'"{maker.vocab[rng.randint(0, 300)]} AND NEAR( -x *',
    }
    out: dict[str, list[float]] = {}
    for name, make in kinds.items():
        times = []
        for _ in range(n_queries):
            q = make()
            t = time.perf_counter()
            store.search(q, limit=20)
            times.append(time.perf_counter() - t)
        out[name] = times
    # For comparison, not in "all": the same common words ranked over every match
    # (rank_window=None), which is what the default window saves.
    times = []
    for _ in range(max(5, n_queries // 5)):
        q = maker.vocab[rng.randint(0, 20)]
        t = time.perf_counter()
        store.search(q, limit=20, rank_window=None)
        times.append(time.perf_counter() - t)
    out[EXHAUSTIVE] = times
    store.close()
    return out


EXHAUSTIVE = "common, no window"


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(round(0.95 * len(xs))) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--queries", type=int, default=100)
    args = ap.parse_args()

    t = time.perf_counter()
    nodes = make_nodes(args.nodes)
    chars = sum(len(n.output) for n in nodes)
    print(f"generated {len(nodes):,} nodes, {chars / 1e6:.1f} M chars of output "
          f"in {time.perf_counter() - t:.1f} s")

    with tempfile.TemporaryDirectory(prefix="opctx-bench-") as d:
        tmp = Path(d)
        store_t, raw_t, rawb_t, build_t = [], [], [], []
        for r in range(args.repeat):
            a, b, c, e = bench_append(nodes, args.batch, tmp, str(r))
            store_t.append(a)
            raw_t.append(b)
            rawb_t.append(c)
            build_t.append(e)
            if r < args.repeat - 1:
                for f in tmp.glob(f"*-{r}.db*"):
                    os.remove(f)
        ms, mr, mb = statistics.median(store_t), statistics.median(raw_t), statistics.median(rawb_t)
        n = len(nodes)
        print(f"\nappend, batches of {args.batch} (median of {args.repeat}):")
        print(f"  GraphStore.append_many          {ms:7.2f} s  {n / ms:9,.0f} nodes/s")
        print(f"  raw executemany, rows pre-built {mr:7.2f} s  {n / mr:9,.0f} nodes/s   ratio store/raw = {ms / mr:.2f}x (target <= 2x)")
        print(f"  raw executemany + building rows {mb:7.2f} s  {n / mb:9,.0f} nodes/s   ratio store/raw = {ms / mb:.2f}x"
              f"   (row building alone {statistics.median(build_t):.2f} s)")

        path = tmp / f"store-{args.repeat - 1}.db"
        size = sum(f.stat().st_size for f in tmp.glob(f"store-{args.repeat - 1}.db*"))
        print(f"  database size {size / 1e6:.0f} MB")

        loads, raws, count = bench_load(path, args.repeat)
        print(f"\nload {count:,} nodes (median of {args.repeat}):")
        print(f"  GraphStore.load()               {statistics.median(loads):7.3f} s (target < 1.5 s)")
        print(f"  bare SELECT + json.loads        {statistics.median(raws):7.3f} s   ratio {statistics.median(loads) / statistics.median(raws):.2f}x")

        res = bench_search(path, TextMaker(7), args.queries)
        print(f"\nsearch, limit 20, {args.queries} queries per kind (target median < 20 ms):")
        allt = []
        for name, times in res.items():
            if name != EXHAUSTIVE:
                allt += times
            print(f"  {name:18s} median {statistics.median(times) * 1e3:6.2f} ms   p95 {p95(times) * 1e3:6.2f} ms")
        print(f"  {'all':18s} median {statistics.median(allt) * 1e3:6.2f} ms   p95 {p95(allt) * 1e3:6.2f} ms")


if __name__ == "__main__":
    main()
