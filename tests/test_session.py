"""SessionMeta, DagSession and DagSessionManager (spec §0.3)."""

from __future__ import annotations

import itertools

import pytest

from opctx.dag.nodes import FunctionCall, ModelCall, UserMessage
from opctx.dag.session import DagSession, DagSessionManager, SessionMeta
from opctx.dag.store import GraphStore, SessionNotFound, StoreError


@pytest.fixture
def ticking():
    counter = itertools.count(1000)
    return lambda: float(next(counter))


@pytest.fixture
def manager(db_path, ticking):
    m = DagSessionManager(db_path, clock=ticking)
    yield m
    m.close()


def test_create_returns_a_session_with_meta_graph_store_and_runtime_slot(manager):
    s = manager.create(title="Debugging", model="gpt-4o", agent_id="coder", source="cli", extra_meta={"k": 1})
    assert isinstance(s, DagSession) and isinstance(s.store, GraphStore)
    assert s.runtime is None
    assert s.meta == SessionMeta(
        id=s.id, title="Debugging", created_at=s.meta.created_at, updated_at=s.meta.updated_at,
        model="gpt-4o", agent_id="coder", source="cli", extra_meta={"k": 1}, head=None,
    )
    assert s.id.startswith("s_") and len(s.graph) == 0
    assert manager.exists(s.id) and not manager.exists("nope")
    with pytest.raises(StoreError, match="already exists"):
        manager.create(session_id=s.id)


def test_append_goes_to_store_and_graph_with_the_same_seq(manager):
    s = manager.create(title="t")
    u = s.append(UserMessage("hi"))
    m = s.append(ModelCall("m", output="yo"), follow_head=True)
    assert m.predecessor == u.id and s.head() == m.id
    s.append_many([FunctionCall("f", called_by=m.id), UserMessage("next", predecessor=m.id)])
    assert [n.seq for n in s.graph] == [0, 1, 2, 3]
    again = manager.load(s.id)
    assert [n.to_dict() for n in again.graph] == [n.to_dict() for n in s.graph]
    assert again.meta.head == s.graph.by_seq(3).id
    s.update(m.id, output="edited", status="ok")
    assert s.graph[m.id].output == "edited" and manager.load(s.id).graph[m.id].metadata == {"status": "ok"}
    s.set_head(u.id)
    assert manager.get(s.id).head == u.id


def test_reload_sees_another_writer(manager, db_path):
    s = manager.create()
    other = GraphStore(db_path, s.id, create=False)
    other.append(UserMessage("from elsewhere"))
    other.close()
    assert len(s.graph) == 0
    assert [n.output for n in s.reload()] == ["from elsewhere"]


def test_list_is_newest_updated_first(manager):
    a = manager.create(title="a")
    b = manager.create(title="b")
    c = manager.create(title="c")
    assert [m.title for m in manager.list()] == ["c", "b", "a"]
    a.append(UserMessage("touch a"))
    assert [m.title for m in manager.list()] == ["a", "c", "b"]
    manager.rename(b.id, "b2")
    assert [m.title for m in manager.list()] == ["b2", "a", "c"]
    assert [m.title for m in manager.list(limit=1)] == ["b2"]
    assert c.id in {m.id for m in manager.list()}


def test_rename_update_fields_and_unknown_sessions(manager):
    s = manager.create(title="old")
    manager.rename(s.id, "new")
    manager.update_fields(s.id, model="m2", source="import:x")
    meta = manager.get(s.id)
    assert (meta.title, meta.model, meta.source) == ("new", "m2", "import:x")
    with pytest.raises(TypeError, match="colour"):
        manager.update_fields(s.id, colour="red")
    for call in (
        lambda: manager.load("ghost"),
        lambda: manager.get("ghost"),
        lambda: manager.rename("ghost", "x"),
        lambda: manager.delete("ghost"),
        lambda: manager.get_extra_meta("ghost"),
        lambda: manager.set_extra_meta("ghost", {}),
        lambda: manager.update_extra_meta("ghost", a=1),
    ):
        with pytest.raises(SessionNotFound, match="ghost"):
            call()


def test_delete_removes_nodes_and_fts_rows_of_that_session_only(manager):
    keep = manager.create(title="keep")
    drop = manager.create(title="drop")
    keep.append(UserMessage("common words here"))
    drop.append_many([UserMessage("common words there"), UserMessage("more")])
    manager.delete(drop.id)
    assert not manager.exists(drop.id)
    conn = manager.connection
    assert conn.execute("SELECT COUNT(*) FROM nodes WHERE session_id = ?", (drop.id,)).fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM nodes_fts WHERE session_id = ?", (drop.id,)).fetchone()[0] == 0
    assert [h.session_id for h in keep.store.search("common")] == [keep.id]
    assert [m.id for m in manager.list()] == [keep.id]


def test_extra_meta_get_set_update(manager):
    s = manager.create(extra_meta={"a": 1})
    assert manager.get_extra_meta(s.id) == {"a": 1}
    manager.set_extra_meta(s.id, {"b": [1, 2], "_last_summary_text": "sum"})
    assert manager.get_extra_meta(s.id) == {"b": [1, 2], "_last_summary_text": "sum"}
    merged = manager.update_extra_meta(s.id, c={"d": None}, remove=["b"])
    assert merged == {"_last_summary_text": "sum", "c": {"d": None}}
    assert manager.get_extra_meta(s.id) == merged
    with pytest.raises(StoreError, match="not JSON"):
        manager.set_extra_meta(s.id, {"x": object()})
    with pytest.raises(TypeError):
        manager.set_extra_meta(s.id, [1, 2])  # type: ignore[arg-type]
    assert manager.get_extra_meta(s.id) == merged


def test_two_managers_merging_extra_meta_keys_both_win(db_path):
    m1, m2 = DagSessionManager(db_path), DagSessionManager(db_path)
    sid = m1.create().id
    m1.update_extra_meta(sid, from_one=1)
    m2.update_extra_meta(sid, from_two=2)
    assert m1.get_extra_meta(sid) == {"from_one": 1, "from_two": 2}
    m1.close()
    m2.close()


def test_memory_manager_shares_one_database():
    with DagSessionManager(":memory:") as m:
        s = m.create(title="mem")
        s.append(UserMessage("kept in memory"))
        assert [n.output for n in m.load(s.id).graph] == ["kept in memory"]
        assert [x.title for x in m.list()] == ["mem"]
