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
    from opctx.dag.runtime import DagRuntime

    s = manager.create(title="Debugging", model="gpt-4o", agent_id="coder", source="cli", extra_meta={"k": 1})
    assert isinstance(s, DagSession) and isinstance(s.store, GraphStore)
    assert isinstance(s.runtime, DagRuntime) and s.runtime.graph is s.graph
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


# -- atomic creation and transactions --------------------------------------------------


def _chat(n: int) -> list:
    nodes, prev = [], None
    for i in range(n):
        if i % 2 == 0:
            node = UserMessage(f"turn {i}", predecessor=prev)
        else:
            node = ModelCall("m", output=f"turn {i}", predecessor=prev)
        nodes.append(node)
        prev = node.id
    return nodes


def test_create_with_nodes_and_head_writes_them_in_one_go(manager):
    nodes = _chat(4)
    s = manager.create(title="imported", source="import:x", session_id="imp",
                       extra_meta={"format": "x"}, nodes=nodes, head=nodes[1].id)
    assert [n.seq for n in s.graph] == [0, 1, 2, 3] and s.graph[nodes[0].id] is nodes[0]
    assert s.meta.head == nodes[1].id == manager.get("imp").head
    again = manager.load("imp")
    assert [n.to_dict() for n in again.graph] == [n.to_dict() for n in s.graph]
    assert manager.get_extra_meta("imp") == {"format": "x"}
    # without head=: HEAD follows the chain the nodes extend; head=None clears it
    assert manager.create(session_id="follow", nodes=_chat(3)).meta.head == manager.get("follow").head
    assert manager.get("follow").head is not None
    assert manager.create(session_id="nohead", nodes=_chat(2), head=None).meta.head is None
    assert manager.create(session_id="empty", nodes=[]).graph.nodes == {}


@pytest.mark.parametrize(
    ("spoil", "error"),
    [
        (lambda nodes: nodes.append(UserMessage("dup", id=nodes[0].id)), "duplicate node id"),
        (lambda nodes: nodes.append(FunctionCall("f", {"bad": object()}, None)), "not JSON"),
        (lambda nodes: None, "no node 'nowhere'"),
    ],
)
def test_create_that_fails_midway_leaves_no_session_at_all(manager, spoil, error):
    nodes = _chat(5)
    spoil(nodes)
    head = "nowhere" if error.startswith("no node") else None
    with pytest.raises(StoreError, match=error):
        manager.create(session_id="half", title="t", extra_meta={"k": 1}, nodes=nodes, head=head)
    assert not manager.exists("half") and manager.list() == []
    conn = manager.connection
    assert conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM nodes_fts").fetchone()[0] == 0
    assert all(n.seq == -1 for n in nodes), "the Calls are as they were, ready for a retry"
    manager.create(session_id="half", nodes=nodes[:5])  # and the id is free again


def test_manager_transaction_replaces_a_session_all_or_nothing(manager, db_path):
    manager.create(session_id="rec", title="old", nodes=_chat(3), extra_meta={"v": 1})
    before = [n.to_dict() for n in manager.load("rec").graph]
    with pytest.raises(StoreError, match="duplicate node id"):
        with manager.transaction():
            manager.delete("rec")
            bad = _chat(4)
            s = manager.create(session_id="rec", title="new", nodes=bad)
            s.append_many([UserMessage("x", id=bad[0].id)])  # fails: the whole block goes
    assert manager.get("rec").title == "old" and manager.get_extra_meta("rec") == {"v": 1}
    assert [n.to_dict() for n in manager.load("rec").graph] == before
    with manager.transaction():
        manager.delete("rec")
        manager.create(session_id="rec", title="new", nodes=_chat(4))
        manager.update_extra_meta("rec", v=2)
        other = DagSessionManager(db_path)  # another connection: still the old one
        assert other.get("rec").title == "old"
        other.close()
    assert manager.get("rec").title == "new" and len(manager.load("rec").graph) == 4
    assert manager.get_extra_meta("rec") == {"v": 2}


def test_a_loaded_session_has_its_runtime(db_path):
    """``load`` gives a session whose ``runtime`` is a ``DagRuntime`` over its own graph and
    store (it was None): with the manager's provider it continues the conversation; without
    one it records, and calling the model says what is missing."""
    from opctx.dag.chat import chat_turn
    from opctx.dag.providers import ProviderError, ScriptedProvider
    from opctx.dag.runtime import DagRuntime

    with DagSessionManager(db_path) as mgr:
        sid = mgr.create(title="t", model="m-1").id
        loaded = mgr.load(sid)
        rt = loaded.runtime
        assert isinstance(rt, DagRuntime) and rt.graph is loaded.graph and rt.store is loaded.store
        assert rt.default_model == "m-1" and loaded.runtime is rt
        rt.add_user_message("recorded without a provider")
        with pytest.raises(ProviderError, match="provider_call"):
            rt.exec()
    with DagSessionManager(db_path, provider_call=ScriptedProvider(["hello again"])) as mgr:
        loaded = mgr.load(sid)
        result = chat_turn("and now?", loaded, [])
        assert result.text == "hello again"
        assert [n.output for n in mgr.load(sid).graph if n.role != "code"][-2:] == ["and now?", "hello again"]
