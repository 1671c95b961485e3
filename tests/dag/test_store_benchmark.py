"""benchmarks/store.py: its sqlite-utils contender searches the same text as opctx, CJK included."""

from __future__ import annotations

import random
import re

import pytest
from _benchmarks import load_benchmark

sqlite_utils = pytest.importorskip("sqlite_utils")
bench = load_benchmark("store")


@pytest.fixture(scope="module")
def databases(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("store-bench")
    nodes = bench.make_nodes(400)
    bench.append_opctx(nodes, 100, tmp / "opctx.db")
    bench.append_su(bench.su_records(nodes), 100, tmp / "sqlite-utils.db")
    store = bench.GraphStore(tmp / "opctx.db", bench.SID, create=False)
    db = sqlite_utils.Database(tmp / "sqlite-utils.db")
    yield store, db
    store.close()
    db.close()


def test_sqlite_utils_finds_what_opctx_finds_on_every_query_kind(databases):
    # The benchmark calls the comparison "the same work": with opctx's segmented text
    # and the query segmented the same way, sqlite-utils' own SQL finds the same nodes
    # (the CJK queries included, which unsegmented text would never match).
    store, db = databases
    kinds = bench.query_kinds(bench.TextMaker(7), random.Random(11))
    # Operator-laden text is quoted otherwise by sqlite-utils (one phrase from an
    # unbalanced quote to the end, where opctx makes a phrase of each word).
    del kinds["operators"]
    # 400 nodes are too few for random CJK pairs to occur: add runs taken from the text.
    runs = [m.group()[:3] for n in bench.make_nodes(400) for m in re.finditer(f"[{bench.CJK}]{{2,}}", n.output)]
    found = {}
    for kind, make in [*kinds.items(), ("CJK from the text", iter(runs[:: max(1, len(runs) // 8)]).__next__)]:
        for _ in range(8):
            q = make()
            ours = [h.node_id for h in store.search(q, limit=20, rank_window=None)]
            theirs = bench.su_search_with_snippet(db, db["nodes"], bench._segment_cjk(q), ["id"])
            if len(ours) < 20:  # a full page may cut ties differently
                assert sorted(ours) == sorted(r["id"] for r in theirs), (kind, q)
            found[kind] = found.get(kind, 0) + len(ours)
    assert found["CJK from the text"] > 0, "no CJK query found anything: the check would be empty"
    assert found["rare word"] > 0 and found["common word"] > 0


def test_plain_text_is_what_sqlite_utils_gets_without_segmentation():
    node = bench.make_nodes(1)[0]
    node.output = "上下文 context"
    [plain] = bench.su_records([node], plain=True)
    [segmented] = bench.su_records([node])
    assert plain["text"].startswith("上下文 context")
    assert segmented["text"] == bench.fts_text(node) != plain["text"]
