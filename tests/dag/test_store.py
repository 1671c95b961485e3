"""GraphStore: schema and migrations, append/seq/HEAD, update, load, search, bad input."""

from __future__ import annotations

import copy
import json
import math
import pickle
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opctx.dag import store as store_mod
from opctx.dag.nodes import Call, FunctionCall, Graph, ModelCall, UserMessage
from opctx.dag.store import (
    FTS_TEXT_LIMIT,
    MIGRATIONS,
    SCHEMA_VERSION,
    GraphStore,
    NodeNotFound,
    SessionNotFound,
    StoreError,
    connect,
    fts_text,
    literal_fts_query,
    search_across_sessions,
    search_text,
)


@pytest.fixture
def store(db_path):
    s = GraphStore(db_path, "s1", title="test")
    yield s
    s.close()


def _fts_row_count(store: GraphStore) -> int:
    return store.connection.execute(
        "SELECT COUNT(*) FROM nodes_fts WHERE session_id = ?", (store.session_id,)
    ).fetchone()[0]


# -- schema and migrations -----------------------------------------------------------------


def test_schema_tables_pragmas_and_recorded_migrations(db_path):
    conn = connect(db_path)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table')")}
    assert {"sessions", "nodes", "nodes_fts", "schema_migrations"} <= names
    cols = [r[1] for r in conn.execute("PRAGMA table_info(nodes)")]
    assert cols == ["pk", "id", "session_id", "type", "predecessor", "caller", "created_at", "seq", "data_json"]
    scols = [r[1] for r in conn.execute("PRAGMA table_info(sessions)")]
    for c in ("id", "title", "created_at", "updated_at", "model", "agent_id", "source", "extra_json", "last_node_id"):
        assert c in scols
    applied = conn.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    assert [v for v, _ in applied] == list(range(1, SCHEMA_VERSION + 1))
    assert [n for _, n in applied] == [f"{i:04d}_{name}" for i, (name, _) in enumerate(MIGRATIONS, 1)]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
    indexes = {r[1] for r in conn.execute("PRAGMA index_list(nodes)")}
    assert {"nodes_caller", "nodes_predecessor"} <= indexes
    conn.close()
    # reopening applies nothing twice
    conn = connect(db_path)
    assert conn.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_a_failing_migration_leaves_nothing_behind(db_path, monkeypatch):
    connect(db_path).close()

    def broken(conn):
        conn.execute("CREATE TABLE half_done (x)")
        raise sqlite3.OperationalError("boom in the middle")

    monkeypatch.setattr(store_mod, "MIGRATIONS", [*MIGRATIONS, ("broken", broken)])
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", len(MIGRATIONS) + 1)
    with pytest.raises(StoreError, match="boom in the middle"):
        connect(db_path)
    monkeypatch.undo()
    conn = connect(db_path)
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'half_done'").fetchone() is None
    assert conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_a_database_from_a_newer_opctx_is_refused(db_path):
    conn = connect(db_path)
    conn.execute("INSERT INTO schema_migrations VALUES (?, 'future', 0)", (SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(StoreError, match="newer than this opctx"):
        connect(db_path)


def _old_database(db_path, version: int) -> sqlite3.Connection:
    """A database as an opctx with the first ``version`` migrations left it, with session 'old'."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    for number, (name, fn) in enumerate(MIGRATIONS[:version], 1):
        fn(conn)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 0)", (number, name))
    conn.execute("INSERT INTO sessions(id, created_at, updated_at) VALUES ('old', 0, 0)")
    return conn


def test_migration_four_backfills_next_seq_on_an_old_database(db_path):
    conn = _old_database(db_path, version=3)
    conn.execute(
        "INSERT INTO nodes(id, session_id, type, created_at, seq, data_json) VALUES ('a', 'old', 'user', 0, 7, '{}')"
    )
    conn.close()
    s = GraphStore(db_path, "old", create=False)
    assert s.append(UserMessage("next")).seq == 8
    s.close()


def test_migration_seven_indexes_only_nodes_with_a_caller(db_path):
    conn = _old_database(db_path, version=6)
    conn.execute(
        "INSERT INTO nodes(id, session_id, type, caller, created_at, seq, data_json) "
        "VALUES ('a', 'old', 'user', NULL, 0, 0, '{}'), ('b', 'old', 'code', 'a', 0, 1, '{}')"
    )
    conn.close()
    s = GraphStore(db_path, "old", create=False)
    conn = s.connection
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'nodes_caller'").fetchone()[0]
    assert "WHERE caller IS NOT NULL" in sql
    assert conn.execute("SELECT COUNT(*) FROM nodes INDEXED BY nodes_caller WHERE caller = 'a'").fetchone()[0] == 1
    plan = " ".join(str(r) for r in conn.execute(
        "EXPLAIN QUERY PLAN SELECT id FROM nodes WHERE session_id = 'old' AND caller = 'a'"))
    assert "nodes_caller" in plan  # a lookup by caller still uses it
    s.close()


# -- bad files ---------------------------------------------------------------------------


def test_a_file_that_is_not_sqlite_is_a_clear_error_naming_it(tmp_path):
    bad = tmp_path / "notes.db"
    bad.write_text("these are my notes, not a database\n" * 50)
    with pytest.raises(StoreError, match=r"notes\.db.*not an SQLite database"):
        GraphStore(bad, "s")
    assert bad.read_text().startswith("these are my notes"), "the file must not be touched"


def test_a_damaged_sqlite_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "damaged.db"
    bad.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4096)
    with pytest.raises(StoreError, match=r"damaged\.db"):
        GraphStore(bad, "s")


def test_directory_and_unreachable_paths_are_clear_errors(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        connect(tmp_path)
    with pytest.raises(StoreError, match="cannot open"):
        connect(tmp_path / "no" / "such" / "dir" / "x.db")


# -- append, seq, HEAD --------------------------------------------------------------------


def test_append_assigns_seq_and_persists_every_field(store, db_path):
    u = store.append(UserMessage("hi", created_at=1.0))
    m = store.append(ModelCall("gpt", reads=[u.id], output="yo", predecessor=u.id, metadata={"usage": {"input_tokens": 3}}))
    f = store.append(FunctionCall("grep", {"p": "x"}, ["l1"], called_by=m.id, predecessor=m.id))
    assert [u.seq, m.seq, f.seq] == [0, 1, 2]
    again = GraphStore(db_path, "s1", create=False)
    assert again.get(m.id) == m and again.get(f.id) == f and again.get(u.id) == u
    assert again.get("missing") is None
    assert again.count() == 3
    row = again.connection.execute("SELECT type, predecessor, caller FROM nodes WHERE id = ?", (f.id,)).fetchone()
    assert row == ("code", m.id, m.id)
    again.close()


def test_duplicate_ids_are_refused_clearly_and_nothing_is_written(store):
    a = store.append(UserMessage("a", id="same"))
    with pytest.raises(StoreError, match=r"duplicate node id 'same'.*already in session 's1'"):
        store.append(UserMessage("b", id="same"))
    fresh = UserMessage("c", id="fresh")
    with pytest.raises(StoreError, match="duplicate node id 'same'"):
        store.append_many([fresh, UserMessage("d", id="same")])
    assert fresh.seq == -1, "a failed append leaves the caller's Call as it was"
    with pytest.raises(StoreError, match="duplicate node id 'x' within one append"):
        store.append_many([UserMessage("1", id="x"), UserMessage("2", id="x")])
    assert store.count() == 1 and _fts_row_count(store) == 1
    assert store.get("same") == a


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("output", {"output": object()}),
        ("input", {"input": {"when": {1, 2}}}),
        ("metadata", {"metadata": {"blob": b"bytes"}}),
        ("output", {"output": math.nan}),
    ],
)
def test_values_that_are_not_json_are_refused_naming_node_and_field(store, field, kwargs):
    node = Call(id="bad1", role="code", **kwargs)
    with pytest.raises(StoreError, match=rf"node 'bad1': field '{field}' is not JSON-serialisable"):
        store.append(node)
    with pytest.raises(StoreError, match="bad1"):
        store.append_many([UserMessage("fine"), node])
    assert store.count() == 0


def test_head_moves_only_when_an_append_extends_it(store):
    a = store.append(UserMessage("a"))
    assert store.head() == a.id, "the first node of a session becomes HEAD"
    b = store.append(ModelCall("m", predecessor=a.id))
    assert store.head() == b.id
    sibling = store.append(ModelCall("m", predecessor=a.id))  # a retry: a fork
    assert store.head() == b.id
    store.append(UserMessage("new root"))
    store.append(FunctionCall("nested", called_by=b.id))
    assert store.head() == b.id
    c = store.append(UserMessage("c", predecessor=b.id))
    assert store.head() == c.id
    store.set_head(sibling.id)
    d = store.append(UserMessage("d", predecessor=sibling.id))
    assert store.head() == d.id
    with pytest.raises(NodeNotFound, match="nope"):
        store.set_head("nope")
    store.set_head(None)
    assert store.head() is None


def test_a_batch_moves_head_along_the_chain_it_extends(store):
    a = store.append(UserMessage("a"))
    b1 = UserMessage("b1", predecessor=a.id)
    b2 = ModelCall("m", predecessor=b1.id)
    side = ModelCall("m", predecessor=a.id)
    store.append_many([b1, side, b2])
    assert store.head() == b2.id


def test_follow_head_attaches_to_head_inside_the_transaction(store):
    a = store.append(UserMessage("a"))
    b = store.append(UserMessage("b"), follow_head=True)
    assert b.predecessor == a.id and store.head() == b.id
    root = store.append(UserMessage("explicit root"))
    assert root.predecessor is None and store.head() == b.id


def test_seq_rules_keep_larger_replace_smaller_and_never_reuse(store):
    a = store.append(Call(role="user", seq=10))
    assert a.seq == 10
    b = store.append(Call(role="user", seq=3, predecessor=a.id))
    assert b.seq == 11
    c = store.append(Call(role="user", predecessor=b.id))
    assert c.seq == 12
    assert store.delete_subtree(b.id) == [b.id, c.id]
    assert store.append(Call(role="user")).seq == 13, "deleted seqs are not handed out again"


def test_update_has_graph_update_semantics_and_refreshes_search(store):
    a = store.append(UserMessage("a"))
    f = store.append(FunctionCall("tool", {"q": 1}, None, metadata={"status": "running", "doc": "d"}, predecessor=a.id))
    store.append(UserMessage("b", predecessor=f.id))
    head = store.head()
    assert store.search("zanzibar") == []
    updated = store.update(f.id, output="zanzibar result", status="ok", metadata={"expose": "full"})
    assert updated.output == "zanzibar result"
    assert updated.metadata == {"status": "ok", "doc": "d", "expose": "full"}
    assert store.get(f.id) == updated
    assert [h.node_id for h in store.search("zanzibar")] == [f.id]
    store.update(f.id, output="something else")
    assert store.search("zanzibar") == []
    assert _fts_row_count(store) == 3
    assert store.head() == head
    store.update(f.id, called_by=a.id)
    assert store.get(f.id).caller == a.id
    for key in ("id", "seq", "role"):
        with pytest.raises(ValueError, match=key):
            store.update(f.id, **{key: "x"})
    with pytest.raises(NodeNotFound):
        store.update("missing", output=1)
    with pytest.raises(StoreError, match="'output' is not JSON"):
        store.update(f.id, output=object())
    assert store.get(f.id).output == "something else"


def test_unknown_session_without_create(db_path):
    with pytest.raises(SessionNotFound, match="no session 'ghost'") as info:
        GraphStore(db_path, "ghost", create=False)
    assert isinstance(info.value, KeyError)
    assert str(info.value).startswith("no session")


def test_session_fields_are_validated_and_stored(db_path):
    with pytest.raises(TypeError, match="colour"):
        GraphStore(db_path, "s", colour="red")
    s = GraphStore(db_path, "s", title="T", model="m", agent_id="ag", source="src", extra_meta={"k": 1})
    row = s.connection.execute("SELECT title, model, agent_id, source, extra_json FROM sessions").fetchone()
    assert row == ("T", "m", "ag", "src", '{"k":1}')
    s.close()


def test_memory_database_and_a_shared_connection():
    conn = connect(":memory:")
    a = GraphStore(conn, "a")
    b = GraphStore(conn, "b")
    a.append(UserMessage("in a"))
    b.append(UserMessage("in b"))
    assert a.count() == 1 and b.count() == 1
    a.close()  # does not close the shared connection
    assert b.load().last.output == "in b"
    assert len(search_across_sessions(conn, "in")) == 2
    solo = GraphStore(":memory:", "x")
    solo.append(UserMessage("alone"))
    assert solo.load().last.output == "alone"
    solo.close()


# -- chain, descendants, delete ---------------------------------------------------------------


def test_chain_descendants_and_delete_subtree(store):
    a = store.append(UserMessage("a"))
    b = store.append(ModelCall("m", predecessor=a.id))
    tool = store.append(FunctionCall("t", called_by=b.id))  # a callee, no predecessor
    c = store.append(UserMessage("c", predecessor=b.id))
    b2 = store.append(ModelCall("m", predecessor=a.id))
    assert store.chain_ids(c.id) == [a.id, b.id, c.id]
    assert store.descendant_ids(a.id) == [b.id, c.id, b2.id]
    with pytest.raises(NodeNotFound):
        store.chain_ids("missing")
    assert store.head() == c.id
    assert store.delete_subtree(b.id) == [b.id, tool.id, c.id]
    assert store.head() == a.id, "HEAD falls back to the deleted node's predecessor"
    assert store.count() == 2 and _fts_row_count(store) == 2
    assert store.delete_subtree(a.id) == [a.id, b2.id]
    assert store.head() is None and store.count() == 0
    with pytest.raises(NodeNotFound):
        store.delete_subtree(a.id)


def test_deleting_a_root_moves_head_to_the_newest_remaining_leaf(store):
    r1 = store.append(UserMessage("r1"))
    x = store.append(UserMessage("x", predecessor=r1.id))
    r2 = store.append(UserMessage("r2"))
    y = store.append(UserMessage("y", predecessor=r2.id))
    assert store.head() == x.id
    store.delete_subtree(r1.id)
    assert store.head() == y.id


# -- load ---------------------------------------------------------------------------------------


def test_load_lazy_and_eager_give_equal_graphs_with_correct_indexes(store):
    a = store.append(UserMessage("a", metadata={"k": [1]}))
    b = store.append(ModelCall("m", output={"x": "é中"}, predecessor=a.id, reads=[a.id]))
    store.append(FunctionCall("f", {"p": 1}, "r", called_by=b.id, predecessor=b.id))
    lazy, eager = store.load(), store.load(lazy=False)
    assert [n.to_dict() for n in lazy] == [n.to_dict() for n in eager]
    rebuilt = Graph(n.copy() for n in eager)
    for g in (lazy, eager):
        assert g._seqs == rebuilt._seqs and g.next_seq == rebuilt.next_seq
        assert g._children == rebuilt._children and g._callees == rebuilt._callees
        assert g.last.id == rebuilt.last.id
    assert len(Graph()) == 0 and len(GraphStore(store.connection, "empty").load()) == 0


def test_a_lazily_loaded_call_behaves_like_any_call(store):
    stored = store.append(ModelCall("m", output="out", input={"system": "s"}, metadata={"a": 1}, reads=["r"]))
    g = store.load()
    node = g[stored.id]
    assert isinstance(node, Call) and node == stored
    assert pickle.loads(pickle.dumps(store.load()[stored.id])) == stored
    assert copy.deepcopy(store.load()[stored.id]) == stored
    assert store.load()[stored.id].copy(id="k") .name == "m"
    fresh = store.load()[stored.id]
    fresh.output = "changed before any read"
    assert (fresh.name, fresh.metadata, fresh.reads, fresh.output) == ("m", {"a": 1}, ["r"], "changed before any read")
    g.update(stored.id, status="ok")
    assert g[stored.id].metadata == {"a": 1, "status": "ok"}
    assert "out" in repr(store.load()[stored.id])


_json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)


@st.composite
def graphs(draw):
    g = Graph()
    n = draw(st.integers(0, 25))
    ids: list[str] = []
    for i in range(n):
        role = draw(st.sampled_from(["user", "llm", "code"]))
        pred = draw(st.none() | st.sampled_from(ids)) if ids else None
        caller = draw(st.none() | st.sampled_from(ids)) if ids else None
        reads = draw(st.lists(st.sampled_from(ids), max_size=3)) if ids else []
        node = Call(
            id=f"n{i}_" + draw(st.text("abc", max_size=3)),
            role=role,
            name=draw(st.text(max_size=10)),
            input=draw(_json),
            output=draw(_json),
            caller=caller,
            predecessor=pred,
            reads=reads,
            metadata=draw(st.dictionaries(st.text(min_size=1, max_size=6), _json, max_size=3)),
            created_at=draw(st.floats(0, 2e9, allow_nan=False)),
        )
        gap = draw(st.integers(0, 3))
        node.seq = g.next_seq + gap
        g.add(node)
        ids.append(node.id)
    return g


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_any_graph_survives_store_then_load_unchanged(graph):
    conn = connect(":memory:")
    s = GraphStore(conn, "prop")
    s.append_many(n.copy() for n in graph)
    for loaded in (s.load(), s.load(lazy=False)):
        assert [n.to_dict() for n in loaded] == [n.to_dict() for n in graph]
        for node in graph:
            assert [c.id for c in loaded.children(node.id)] == [c.id for c in graph.children(node.id)]
            assert [c.id for c in loaded.callees(node.id)] == [c.id for c in graph.callees(node.id)]
        assert loaded.next_seq == graph.next_seq
    conn.close()


# -- search -----------------------------------------------------------------------------------------


@pytest.fixture
def searchable(store):
    docs = {
        "and": 'Rock AND roll, said the "quoted" band',
        "near": "call NEAR(x, y) with care",
        "paren": "an (unbalanced paren in the text",
        "minus": "use -v for verbose and foo-bar here",
        "star": "foobar is not foo",
        "foo": "just foo",
        "cjk": "我们讨论上下文管理的设计",
        "code": "def parse_tool_call(text): return None",
    }
    for nid, text in docs.items():
        store.append(UserMessage(text, id=nid))
    return store


def _ids(hits):
    return sorted(h.node_id for h in hits)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ('"quoted', ["and"]),
        ("AND", ["and", "minus"]),
        ("rock AND", ["and"]),
        ("NEAR(", ["near"]),
        ("NEAR(x", ["near"]),
        ("(unbalanced", ["paren"]),
        ("paren)", ["paren"]),
        ("-v", ["minus"]),
        ("foo*", ["foo", "minus", "star"]),  # not a prefix search: "foobar" alone is no hit
        ("foo-bar", ["minus"]),
        ("上下文", ["cjk"]),
        ("下文管", ["cjk"]),
        ("parse_tool_call", ["code"]),
        ("roll said", ["and"]),
        ("OR foo", []),  # literal: OR is a word, and no document has both
        ("", []),
        ('" * - ( ) :', []),
    ],
)
def test_literal_search_treats_operators_as_text(searchable, query, expected):
    assert _ids(searchable.search(query)) == expected


def test_literal_query_text_is_quoted_for_fts5():
    assert literal_fts_query('say "hi" NEAR(') == '"say" """hi""" "NEAR("'
    assert literal_fts_query("*** ---") == ""


def test_raw_search_is_opt_in_and_syntax_errors_are_store_errors(searchable):
    assert _ids(searchable.search("foo*", raw=True)) == ["foo", "minus", "star"]
    assert "star" in _ids(searchable.search("foob*", raw=True))
    assert _ids(searchable.search("rock OR verbose", raw=True)) == ["and", "minus"]
    for bad in ('"unbalanced', "NEAR(", "foo AND", "(x"):
        with pytest.raises(StoreError, match="invalid FTS5 query"):
            searchable.search(bad, raw=True)


def test_search_leaves_no_transaction_open_and_joins_the_callers(searchable):
    # A search reads in one transaction of its own, ended on every way out (errors
    # included); inside the caller's transaction it reads that one, own writes and all.
    conn = searchable.connection
    assert _ids(searchable.search("foo")) == ["foo", "minus", "star"] and not conn.in_transaction
    with pytest.raises(StoreError):
        searchable.search('"unbalanced', raw=True)
    assert not conn.in_transaction
    with searchable.transaction():
        searchable.append(UserMessage("foo again", id="later"))
        assert "later" in _ids(searchable.search("foo"))
        assert conn.in_transaction
    assert "later" in _ids(search_across_sessions(conn, "foo")) and not conn.in_transaction


def test_hits_carry_snippet_rank_and_are_best_first(store):
    a = store.append(UserMessage("needle " * 30))
    b = store.append(UserMessage("one needle among hay " + "hay " * 200))
    hits = store.search("needle")
    assert [h.node_id for h in hits] == [a.id, b.id]
    assert hits[0].rank <= hits[1].rank
    assert "«needle»" in hits[1].snippet and hits[1].seq == b.seq and hits[1].role == "user"
    assert hits[1].name == "user" and hits[1].session_id == "s1"
    assert len(store.search("needle", limit=1)) == 1
    assert store.search("needle", limit=0) == []


def test_search_is_scoped_to_the_session_and_search_across_sessions_is_not(db_path):
    one = GraphStore(db_path, "one")
    two = GraphStore(db_path, "two")
    one.append(UserMessage("shared word alpha"))
    two.append(UserMessage("shared word beta"))
    assert [h.session_id for h in one.search("shared")] == ["one"]
    assert sorted(h.session_id for h in search_across_sessions(db_path, "shared")) == ["one", "two"]
    assert search_across_sessions(db_path, "beta")[0].session_id == "two"
    with pytest.raises(StoreError):
        search_across_sessions(db_path, "(", raw=True)
    one.close()
    two.close()


def _one_pass_hits(conn, fts_query, session_id, limit):
    """What search returned when the ranking query built every snippet itself."""
    return [tuple(r) for r in conn.execute(
        "SELECT n.session_id, n.id, n.type, json_extract(n.data_json, '$.name'), "
        "snippet(nodes_fts, 0, '«', '»', '…', 16), nodes_fts.rank, n.seq "
        "FROM nodes_fts JOIN nodes n ON n.pk = nodes_fts.rowid "
        "WHERE nodes_fts MATCH ? AND nodes_fts.session_id = ? ORDER BY nodes_fts.rank LIMIT ?",
        (fts_query, session_id, limit))]


@pytest.mark.parametrize("sessions", [1, 2])
def test_hits_built_for_the_returned_rows_only_equal_the_one_pass_query(db_path, sessions):
    # Ranking runs first and snippets are built for the rows it keeps; the hits must be
    # those the single ranking-and-snippet query gave, with one session (no filter
    # needed) and with two interleaved ones.
    stores = [GraphStore(db_path, f"s{i}") for i in range(sessions)]
    for i in range(60):
        words = " ".join(["needle"] * (1 + i % 7) + ["hay"] * (i % 13) + ["上下文管理"] * (i % 2))
        stores[i % sessions].append(UserMessage(f"row {i}: {words} tail"))
        stores[i % sessions].append(FunctionCall("grep", {"q": "other"}, "no match here"))
    # a name longer than the head of data_json that search reads it from
    stores[0].append(FunctionCall("tool_" + "é" * 2000, {}, "needle with a long name"))
    conn = stores[0].connection
    for query, limit in (("needle", 5), ("needle", 100), ("needle hay", 7), ("上下文", 3), ("tail", 1)):
        got = [(h.session_id, h.node_id, h.role, h.name, h.snippet, h.rank, h.seq)
               for h in stores[0].search(query, limit=limit, rank_window=None)]
        want = [(*r[:4], r[4].replace("\u200b", ""), r[5], r[6])
                for r in _one_pass_hits(conn, literal_fts_query(query), "s0", limit)]
        assert sorted(got, key=lambda h: (h[5], h[6])) == sorted(want, key=lambda h: (h[5], h[6])), query
        assert [h[5] for h in got] == sorted(h[5] for h in got), "best first"
    for s in stores:
        s.close()


def test_a_session_written_between_the_only_session_check_and_the_search_is_left_out(
        db_path, monkeypatch):
    # In a database of one session the filter is skipped; if another connection adds a
    # session in between, its hits show and the search runs again with the filter.
    from opctx.dag import _search

    one = GraphStore(db_path, "one")
    one.append(UserMessage("needle in one"))
    two = GraphStore(db_path, "two")
    two.append(UserMessage("needle needle in two"))
    monkeypatch.setattr(_search, "_only_session", lambda conn, sid: True)
    assert [h.session_id for h in one.search("needle")] == ["one"]
    two.close()
    one.close()


def test_fts_text_is_bounded_and_the_node_is_stored_whole(store):
    huge = "headword " + ("filler " * 200_000) + "tailword"
    node = store.append(FunctionCall("bash", {"cmd": "cat big.log"}, huge))
    text = store.connection.execute("SELECT text FROM nodes_fts").fetchone()[0]
    assert len(text) <= FTS_TEXT_LIMIT + 16
    assert [h.node_id for h in store.search("headword")] == [node.id]
    assert store.search("tailword") == []
    assert [h.node_id for h in store.search("bash")] == [node.id], "the name stays searchable"
    assert store.get(node.id).output == huge


def test_fts_text_covers_tool_calls_and_blocks_but_not_the_system_prompt():
    llm = ModelCall(
        "gpt", output="", system_prompt="SYSTEMSECRET instructions",
        metadata={"tool_calls": [{"id": "c", "name": "grep", "arguments": {"pattern": "needleword"}}],
                  "extra": {"blocks": [{"type": "tool_use", "name": "read", "input": {"path": "x.py"}},
                                       {"type": "text", "text": "blocktext"}]}},
    )
    text = fts_text(llm)
    assert "needleword" in text and "grep" in text and "blocktext" in text and "x.py" in text
    assert "SYSTEMSECRET" not in text
    code = FunctionCall("ls", {"dir": "srcdir"}, "a.py")
    assert "srcdir" in fts_text(code) and "a.py" in fts_text(code)
    assert "\u200b" in fts_text(UserMessage("中文"))


def test_words_of_multiline_tool_arguments_are_found(store):
    # JSON text glues a word to the escape before it ("\\nmake"); search_text flattens it
    as_dict = store.append(ModelCall("gpt", output="", metadata={"tool_calls": [
        {"id": "c1", "name": "bash", "arguments": {"command": "cd repo\nmake widgets\tdone"}}]}))
    as_json = store.append(ModelCall("gpt", output="", metadata={"tool_calls": [
        {"id": "c2", "name": "bash", "arguments": json.dumps({"command": "ls\nfrobnicate"})}]}))
    in_blocks = store.append(ModelCall("gpt", output="", metadata={"extra": {"blocks": [
        {"type": "tool_use", "name": "edit", "input": {"new": "a\nquuxword"}},
        {"type": "tool_result", "content": [{"type": "text", "text": "ok\nzorpword"},
                                             {"type": "image", "source": {"type": "base64", "data": "QUJDRA=="}}]},
    ]}}))
    code = store.append(FunctionCall("run", {"argv": ["x", "y"]}, {"stdout": "line\nplughword", "rc": 0}))
    for word, node in [("make", as_dict), ("done", as_dict), ("frobnicate", as_json),
                       ("quuxword", in_blocks), ("zorpword", in_blocks), ("plughword", code)]:
        assert [h.node_id for h in store.search(word)] == [node.id], word
    assert store.search("QUJDRA") == [], "base64 payloads are not indexed"
    text = fts_text(store.get(as_json.id))
    assert "command: ls\nfrobnicate" in text and "\\n" not in text


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, ""),
        ("plain {text}", "plain {text}"),
        ("{not json", "{not json"),
        ('{"a": [1, true, null, {"b": "c"}]}', "a: 1\na: true\nb: c"),
        ('"a string"', '"a string"'),
        ({"outer": '{"inner": "x"}'}, "inner: x"),
        ([{"type": "text", "text": "t"}, {"type": "base64", "data": "AAAA"}], "t"),
    ],
)
def test_search_text_flattens_structures_and_json_text(value, expected):
    assert search_text(value) == expected


def test_search_text_survives_deep_nesting():
    deep: object = "bottomword"
    for _ in range(5000):
        deep = [deep]
    assert "bottomword" in search_text(deep)


def test_migration_five_reindexes_an_old_database(db_path):
    conn = _old_database(db_path, version=4)
    data = {"name": "gpt", "output": "", "metadata": {"tool_calls": [
        {"id": "c", "name": "bash", "arguments": {"command": "cd repo\nmake widgets"}}]}}
    old_text = 'bash\n{"command": "cd repo\\nmake widgets"}\ngpt'
    for pk, nid in [(1, "indexed"), (2, "scratch")]:
        conn.execute(
            "INSERT INTO nodes(pk, id, session_id, type, created_at, seq, data_json) "
            "VALUES (?, ?, 'old', 'llm', 0, ?, ?)",
            (pk, nid, pk, json.dumps(data)),
        )
    conn.execute("INSERT INTO nodes_fts(rowid, text, session_id, node_id) VALUES (1, ?, 'old', 'indexed')", (old_text,))
    assert conn.execute("SELECT COUNT(*) FROM nodes_fts WHERE nodes_fts MATCH 'make'").fetchone()[0] == 0
    conn.close()
    s = GraphStore(db_path, "old", create=False)
    assert [h.node_id for h in s.search("make")] == ["indexed"]
    assert s.connection.execute("SELECT COUNT(*) FROM nodes_fts").fetchone()[0] == 1, "unindexed nodes stay so"
    s.close()


def test_closed_or_vanished_session_errors_are_clear(db_path):
    s = GraphStore(db_path, "gone")
    s.connection.execute("DELETE FROM sessions WHERE id = 'gone'")
    with pytest.raises(SessionNotFound, match="no longer exists"):
        s.append(UserMessage("x"))
    s.close()


def test_unknown_role_is_refused_by_the_store_naming_node_and_roles(store):
    node = UserMessage("x", id="odd")
    node.role = "assistant"  # a Call refuses it at construction; the store checks again
    with pytest.raises(StoreError, match=r"node 'odd': unknown role 'assistant'.*user, llm, code"):
        store.append(node)
    assert store.count() == 0


# -- CJK segmentation -------------------------------------------------------------------

_CJK_RANGES = [(0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),
               (0xAC00, 0xD7AF), (0x20000, 0x2FA1F)]


def _segment_reference(text: str) -> str:
    """The definition: a zero-width space after every CJK character, nothing else changed."""
    return "".join(
        ch + "\u200b" if any(lo <= ord(ch) <= hi for lo, hi in _CJK_RANGES) else ch for ch in text
    )


_mixed_text = st.text(
    alphabet=st.one_of(
        st.characters(min_codepoint=0x20, max_codepoint=0x7E),
        st.sampled_from("上下文管理の設計カタカナ한국어\U00020001ÉéßПривет\u200b\n "),
        st.characters(min_codepoint=0x3000, max_codepoint=0x9FFF),
    ),
    max_size=60,
)


@given(_mixed_text)
def test_cjk_segmentation_puts_a_zero_width_space_after_each_cjk_character(text):
    assert store_mod._segment_cjk(text) == _segment_reference(text)


def test_cjk_segmentation_of_long_cjk_text():
    # 200,000 characters: the template-string version took over a second here; the
    # run-based one is timed by benchmarks/importers.py, this checks it stays exact.
    text = ("上下文管理的设计と実装" * 20_000)[:200_000]
    assert store_mod._segment_cjk(text) == _segment_reference(text)


def test_cjk_substrings_are_found_in_mixed_text(store):
    node = store.append(UserMessage("Log: 错误发生在上下文管理模块 (context_manager.py) ハンドラ"))
    for query in ("上下文", "管理模块", "context_manager.py", "ハンドラ", "错误 ハンドラ"):
        assert [h.node_id for h in store.search(query)] == [node.id], query
    assert store.search("上文下") == []
    assert "上下文" in store.search("上下文")[0].snippet.replace("«", "").replace("»", "")


# -- HEAD and callers ---------------------------------------------------------------------


def test_a_nested_call_never_becomes_the_first_head(store):
    # §0.7: a run path sets _call_id to a command node, so the first nodes of a
    # fresh session may all hang below it by caller, with no predecessor.
    frame = store.append(FunctionCall("program", {}, None, called_by="cmd-1"))
    store.append(ModelCall("m", called_by=frame.id))
    assert store.head() is None, "a subcall inside a frame does not start the conversation"
    user = store.append(UserMessage("hi"))
    assert store.head() == user.id, "the first top-level node does"


def test_a_call_with_a_caller_moves_head_when_it_extends_it(store):
    user = store.append(UserMessage("list files"))
    llm = store.append(ModelCall("m", predecessor=user.id))
    # a tool result answers the llm call (caller) and continues the chat (predecessor)
    tool = store.append(FunctionCall("ls", {}, "a.py", called_by=llm.id, predecessor=llm.id))
    assert store.head() == tool.id
    # an llm call DagRuntime makes inside an agentic frame is on the chain too
    inner = store.append(ModelCall("m", called_by="frame-1", predecessor=tool.id))
    assert store.head() == inner.id
    # nested calls off the chain never move it
    store.append(ModelCall("m", called_by=inner.id))
    store.append(FunctionCall("f", {}, None, called_by=inner.id, predecessor=user.id))
    assert store.head() == inner.id
    # after set_head(None) the same rule starts a new conversation
    store.set_head(None)
    store.append(ModelCall("m", called_by=inner.id))
    assert store.head() is None
    root = store.append(UserMessage("again"))
    assert store.head() == root.id


# -- search rank window --------------------------------------------------------------------


def test_rank_window_ranks_the_newest_matches_and_never_comes_back_short(db_path):
    one = GraphStore(db_path, "one")
    best_old = one.append(UserMessage("needle " * 50))  # the best hit, and the oldest
    for i in range(30):
        one.append(UserMessage(f"filler text number {i} with one needle in hay " + "hay " * 40))
    exhaustive = one.search("needle", limit=5, rank_window=None)
    assert exhaustive[0].node_id == best_old.id
    windowed = one.search("needle", limit=5, rank_window=10)
    assert len(windowed) == 5 and best_old.id not in {h.node_id for h in windowed}
    newest10 = {n for n, in one.connection.execute(
        "SELECT id FROM nodes WHERE session_id = 'one' ORDER BY seq DESC LIMIT 10")}
    assert {h.node_id for h in windowed} <= newest10
    assert [h.rank for h in windowed] == sorted(h.rank for h in windowed)
    # window below the corpus size but above the matches: same as exhaustive
    assert [h.node_id for h in one.search("needle", limit=5, rank_window=1000)] == [
        h.node_id for h in exhaustive]
    # another session's newer matches fill the window: this one still gets its hits
    two = GraphStore(one.connection, "two")
    for i in range(20):
        two.append(UserMessage(f"needle from the other session {i}"))
    scoped = one.search("needle", limit=5, rank_window=10)
    assert len(scoped) == 5 and {h.session_id for h in scoped} == {"one"}
    assert scoped[0].node_id == best_old.id, "fell back to ranking every match of the session"
    across = search_across_sessions(one.connection, "needle", limit=5, rank_window=10)
    assert {h.session_id for h in across} == {"two"}, "the 10 newest matches are all in 'two'"
    assert search_across_sessions(one.connection, "needle", limit=5, rank_window=None)[0].node_id == best_old.id
    assert len(search_across_sessions(one.connection, "needle", limit=50, rank_window=10)) == 50, (
        "a limit above the window widens it: never fewer hits than exist")
    two.close()
    one.close()


def test_rank_window_edge_a_window_of_exactly_the_matches_ranks_them_all(db_path):
    # The window is counted first (forwards) and located only when it is full: with as
    # many matches as the window, or more, or fewer, the ranked rows are the newest
    # window of them.
    one = GraphStore(db_path, "one")
    best_old = one.append(UserMessage("needle " * 50))
    for i in range(30):
        one.append(UserMessage(f"filler {i} with one needle in hay " + "hay " * 40))
    for window in (30, 31, 32):
        hits = one.search("needle", limit=3, rank_window=window)
        assert (hits[0].node_id == best_old.id) == (window >= 31), window
    one.close()


def test_the_ranked_query_lets_fts5_sort_so_snippets_are_built_for_returned_rows_only(store):
    # With a sorter of SQLite's own, every result column (the snippet among them) would be
    # computed for every match before the LIMIT; FTS5 taking ORDER BY rank over avoids it.
    from opctx.dag import _search

    for extra in ("", " AND n.session_id = ?", " AND n.session_id = ? AND nodes_fts.rowid >= ?"):
        sql = _search._RANKED_SQL + extra + " ORDER BY nodes_fts.rank LIMIT ?"
        plan = " ".join(r[3] for r in store.connection.execute(
            "EXPLAIN QUERY PLAN " + sql, ["x"] * sql.count("?")))
        assert "TEMP B-TREE" not in plan and "VIRTUAL TABLE" in plan, plan


def test_rank_window_applies_to_raw_queries_and_keeps_syntax_errors_clear(searchable):
    assert _ids(searchable.search("rock OR verbose", raw=True, rank_window=1)) == ["and", "minus"]
    with pytest.raises(StoreError, match="invalid FTS5 query"):
        searchable.search('"unbalanced', raw=True, rank_window=1)


# -- transactions ---------------------------------------------------------------------------


def _sessions(conn) -> list[str]:
    return [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY id")]


def test_transaction_makes_session_creation_nodes_and_meta_one_unit(db_path):
    conn = connect(db_path)
    nodes = [UserMessage("first"), ModelCall("m", output="second")]
    nodes[1].predecessor = nodes[0].id
    with pytest.raises(StoreError, match="not JSON"):
        with store_mod.transaction(conn):
            store = GraphStore(conn, "imp", title="import", extra_meta={"format": "x"})
            store.append_many(nodes)
            store.set_head(nodes[0].id)
            assert store.count() == 2, "the block sees its own writes"
            other = connect(db_path)
            assert _sessions(other) == [], "no other connection sees them before commit"
            other.close()
            store.append(FunctionCall("bad", {"x": {1, 2}}, None))  # a set is not JSON
    assert _sessions(conn) == [], "a failure anywhere leaves no session at all"
    assert conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM nodes_fts").fetchone()[0] == 0
    assert [n.seq for n in nodes] == [-1, -1], "seqs of the rolled-back append are given back"
    assert nodes[1].predecessor == nodes[0].id

    with store_mod.transaction(conn):
        store = GraphStore(conn, "imp", title="import")
        store.append_many(nodes)
    assert _sessions(conn) == ["imp"] and [n.seq for n in nodes] == [0, 1]
    assert GraphStore(conn, "imp", create=False).head() == nodes[1].id
    conn.close()


def test_a_flat_transaction_takes_no_savepoints_and_stays_all_or_nothing(db_path):
    conn = connect(db_path)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    nodes = [UserMessage("first"), UserMessage("second"), UserMessage("third")]
    with pytest.raises(StoreError):
        with store_mod.flat_transaction(conn):
            store = GraphStore(conn, "imp", title="import")
            store.append_many(nodes[:2])
            store.append(nodes[2])
            store.set_head(nodes[1].id)
            store.append(UserMessage("again", id=nodes[0].id))  # fails in SQLite, after writes
    assert not [s for s in statements if s.startswith(("SAVEPOINT", "RELEASE", "ROLLBACK TO"))]
    assert _sessions(conn) == [] and conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM nodes_fts").fetchone()[0] == 0
    assert [n.seq for n in nodes] == [-1, -1, -1], "seqs of the rolled-back steps are given back"
    assert conn.opctx_flat is False, "the connection's later transactions take savepoints again"

    # nested in an ordinary transaction, the flat block is one savepoint, its steps none
    statements.clear()
    with store_mod.transaction(conn):
        GraphStore(conn, "kept", title="kept").append(UserMessage("k"))
        with pytest.raises(RuntimeError):
            with store_mod.flat_transaction(conn):
                GraphStore(conn, "gone", title="gone").append_many([UserMessage("g")])
                raise RuntimeError("a later step failed")
    assert _sessions(conn) == ["kept"]
    assert sum(s.startswith("SAVEPOINT") for s in statements) == 3  # kept's create and append, the block
    conn.close()


def test_a_step_caught_inside_a_transaction_undoes_only_itself(store):
    a = UserMessage("kept")
    dup = UserMessage("dup", id="same")
    with store.transaction():
        store.append(a)
        store.append(UserMessage("first", id="same", predecessor=a.id))
        with pytest.raises(StoreError, match="duplicate node id 'same'"):
            store.append_many([UserMessage("would be lost"), dup])
        with store.transaction():  # nested: a savepoint
            store.append(UserMessage("nested", predecessor="same"))
    assert store.count() == 3
    assert dup.seq < 0, "the failed step's Calls are as they were"
    assert _fts_row_count(store) == 3


def test_a_rolled_back_transaction_gives_calls_their_seq_and_predecessor_back(store):
    head = store.append(UserMessage("head"))
    batch = [UserMessage("x"), UserMessage("y")]
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.append_many(batch, follow_head=True)
            assert batch[0].predecessor == head.id and batch[0].seq == 1
            raise RuntimeError("a later step of the import failed")
    assert [(n.seq, n.predecessor) for n in batch] == [(-1, None), (-1, None)]
    assert store.head() == head.id and store.count() == 1
    store.append_many(batch, follow_head=True)  # the same Calls can be written again
    assert [n.seq for n in batch] == [1, 2] and store.head() == batch[1].id


_head_ops = st.lists(
    st.tuples(
        st.sampled_from(["append", "append", "append", "batch", "set_head", "clear_head"]),
        st.integers(0, 10**6), st.integers(0, 10**6), st.booleans(),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_head_ops)
def test_head_follows_the_rule_for_any_sequence_of_appends(operations):
    """HEAD = a plain model of the documented rule, whatever the edges of the appended nodes."""
    conn = connect(":memory:")
    s = GraphStore(conn, "heads")
    ids: list[str] = []
    head: str | None = None

    def model_append(node: Call) -> None:
        nonlocal head
        if (node.caller is None) if head is None else (node.predecessor == head):
            head = node.id

    def make(i: int, a: int, b: int, nested: bool) -> Call:
        pred = ids[a % len(ids)] if ids and a % 3 else (head if a % 2 else None)
        caller = ids[b % len(ids)] if nested and ids else ("outside-frame" if nested else None)
        return Call(id=f"n{i}", role="code" if nested else "user", predecessor=pred, caller=caller)

    for i, (op, a, b, nested) in enumerate(operations):
        if op == "append":
            node = make(i, a, b, nested)
            s.append(node)
            model_append(node)
            ids.append(node.id)
        elif op == "batch":
            batch = []
            for j in range(1 + a % 4):
                node = make(i * 10 + j + 10_000, a + j, b + j, nested and j % 2 == 0)
                batch.append(node)
                ids.append(node.id)
            s.append_many(batch)
            for node in batch:
                model_append(node)
        elif op == "set_head" and ids:
            head = ids[a % len(ids)]
            s.set_head(head)
        elif op == "clear_head":
            head = None
            s.set_head(None)
        assert s.head() == head
    conn.close()


def test_text_index_can_be_turned_off_for_scratch_databases():
    from opctx.dag.store import set_text_index

    store = GraphStore(":memory:", "scratch")
    store.append(UserMessage("indexed needle", id="a"))
    set_text_index(store.connection, False)
    store.append(UserMessage("unindexed needle", id="b"))
    store.update("a", output="changed while off")
    assert [h.node_id for h in store.search("needle")] == ["a"]  # stale, as documented
    assert store.load().get("b").content == "unindexed needle"
    set_text_index(store.connection, True)
    store.append(UserMessage("indexed again needle", id="c"))
    assert sorted(h.node_id for h in store.search("needle")) == ["a", "c"]
