"""DagSessionDB: the message-tree API of spec §0.4 over the DAG store."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opctx.dag.session_db import DagSessionDB, HeadMoved, SessionDB
from opctx.dag.store import NodeNotFound, SessionNotFound, StoreError


@pytest.fixture
def db():
    counter = itertools.count(1)
    d = DagSessionDB(":memory:", clock=lambda: float(next(counter)))
    yield d
    d.close()


def _chat(db, sid, *contents):
    out = []
    for i, c in enumerate(contents):
        role = "user" if i % 2 == 0 else "assistant"
        out.append(db.append_message(sid, {"role": role, "content": c}))
    return out


def test_alias_and_session_lifecycle(db):
    assert SessionDB is DagSessionDB
    sid = db.create_session(title="first", model="gpt", source="cli", extra_meta={"a": 1})
    info = db.get_session(sid)
    assert info["title"] == "first" and info["model"] == "gpt" and info["message_count"] == 0
    assert info["extra_meta"] == {"a": 1} and info["head"] is None
    assert db.get_session("ghost") is None
    other = db.create_session(session_id="fixed-id", title="second")
    assert other == "fixed-id"
    assert [s["id"] for s in db.list_sessions()] == ["fixed-id", sid]
    db.rename_session(sid, "renamed")
    assert db.list_sessions()[0]["title"] == "renamed"
    db.update_session(sid, model="m2")
    assert db.get_session(sid)["model"] == "m2"
    db.set_extra_meta(sid, {"x": 1})
    assert db.update_extra_meta(sid, y=2) == {"x": 1, "y": 2}
    assert db.get_extra_meta(sid) == {"x": 1, "y": 2}
    assert db.delete_session(sid) is True
    assert db.delete_session(sid) is False
    with pytest.raises(SessionNotFound, match=sid):
        db.append_message(sid, {"role": "user", "content": "x"})


def test_append_message_defaults_parent_to_head_and_returns_the_stored_dict(db):
    sid = db.create_session()
    u = db.append_message(sid, {"role": "user", "content": "hi", "source": "web"})
    assert u["id"].startswith("u_") and u["timestamp"] == 2.0 and u["parent_id"] is None
    assert u["source"] == "web"
    a = db.append_message(sid, {"role": "assistant", "content": "hello", "model": "gpt"})
    assert a["parent_id"] == u["id"] and db.get_head(sid) == a["id"]
    root = db.append_message(sid, {"role": "user", "content": "separate", "parent_id": None})
    assert root["parent_id"] is None and db.get_head(sid) == a["id"], "an explicit root does not move HEAD"
    side = db.append_message(sid, {"role": "assistant", "content": "retry", "parent_id": u["id"]})
    assert db.get_head(sid) == a["id"], "a sibling does not collapse the current branch"
    assert db.get_message(sid, side["id"]) == side
    assert db.get_message(sid, "nope") is None
    assert [m["content"] for m in db.get_messages(sid)] == ["hi", "hello", "separate", "retry"]


def test_every_role_round_trips_through_the_database(db):
    sid = db.create_session()
    msgs = [
        {"id": "s0", "role": "system", "content": "rules", "timestamp": 1.0, "parent_id": None},
        {"id": "u1", "role": "user", "content": "do it", "timestamp": 2.0, "parent_id": "s0", "name": "ana"},
        {"id": "a2", "role": "assistant", "content": "", "model": "gpt", "timestamp": 3.0, "parent_id": "u1",
         "tool_calls": [{"id": "c1", "name": "grep", "arguments": {"p": "x"}}], "usage": {"input_tokens": 5}},
        {"id": "t3", "role": "tool", "content": "found", "name": "grep", "arguments": {"p": "x"},
         "tool_call_id": "c1", "is_error": False, "timestamp": 4.0, "parent_id": "a2"},
        {"id": "c4", "role": "system", "content": "[Previous conversation summary]\nS", "type": "compactionSummary",
         "source": "compaction", "extra": {"compaction": True}, "timestamp": 5.0, "parent_id": "t3"},
    ]
    assert db.append_messages(sid, msgs) == msgs
    assert db.get_branch(sid) == msgs
    assert db.get_messages(sid) == msgs


def test_append_messages_is_one_transaction_and_chains_on_head(db):
    sid = db.create_session()
    first = db.append_message(sid, {"role": "user", "content": "start"})
    batch = db.append_messages(sid, [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}])
    assert batch[0]["parent_id"] == first["id"] and batch[1]["parent_id"] == batch[0]["id"]
    assert db.get_head(sid) == batch[1]["id"]
    with pytest.raises(ValueError, match="unknown message role 'robot'"):
        db.append_messages(sid, [{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}])
    with pytest.raises(StoreError, match="not JSON-serialisable"):
        db.append_messages(sid, [{"role": "user", "content": "ok"}, {"role": "user", "content": {1, 2}}])
    with pytest.raises(StoreError, match="duplicate node id"):
        db.append_messages(sid, [{"role": "user", "content": "ok", "id": "new"}, {"role": "user", "id": first["id"]}])
    assert len(db.get_messages(sid)) == 3
    with pytest.raises(TypeError):
        db.append_message(sid, "just text")  # type: ignore[arg-type]


def test_update_message_maps_fields_and_merges_extras(db):
    sid = db.create_session()
    u, a = _chat(db, sid, "q", "answer")
    tool = db.append_message(sid, {"role": "tool", "content": "out", "name": "ls", "arguments": {"d": "."}})
    edited = db.update_message(sid, a["id"], content="better answer", model="m2", pinned=True)
    assert edited["content"] == "better answer" and edited["model"] == "m2" and edited["pinned"] is True
    assert db.get_message(sid, a["id"]) == edited
    t2 = db.update_message(sid, tool["id"], arguments={"d": "src"}, name="ls2", is_error=True)
    assert (t2["arguments"], t2["name"], t2["is_error"]) == ({"d": "src"}, "ls2", True)
    with pytest.raises(ValueError, match="role"):
        db.update_message(sid, a["id"], role="user")
    with pytest.raises(NodeNotFound):
        db.update_message(sid, "missing", content="x")
    assert [m["content"] for m in db.search_messages("better")] == ["better answer"]
    assert db.get_head(sid) == tool["id"]


def test_fork_rewind_descendants_and_branch_listing(db):
    sid = db.create_session()
    u1, a1, u2, a2 = _chat(db, sid, "q1", "a1", "q2", "a2")
    assert db.fork_from(sid, a1["id"]) == a1["id"]
    u2b = db.append_message(sid, {"role": "user", "content": "q2 alternative"})
    assert u2b["parent_id"] == a1["id"]
    assert [m["content"] for m in db.get_branch(sid)] == ["q1", "a1", "q2 alternative"]
    assert [m["content"] for m in db.get_branch(sid, a2["id"])] == ["q1", "a1", "q2", "a2"]
    assert [m["id"] for m in db.get_descendants(sid, a1["id"])] == [u2["id"], a2["id"], u2b["id"]]
    branches = db.list_branches(sid)
    assert [(b["head_id"], b["length"], b["last_role"], b["preview"]) for b in branches] == [
        (a2["id"], 4, "assistant", "a2"), (u2b["id"], 3, "user", "q2 alternative")
    ]
    assert [(b["is_head"], b["contains_head"]) for b in branches] == [(False, False), (True, True)]
    rewound = db.rewind_to(sid, u1["id"])
    assert [m["id"] for m in rewound] == [u1["id"]] and db.get_head(sid) == u1["id"]
    assert [b["contains_head"] for b in db.list_branches(sid)] == [True, True]
    assert len(db.get_messages(sid)) == 5, "fork and rewind delete nothing"
    with pytest.raises(NodeNotFound):
        db.fork_from(sid, "nope")
    with pytest.raises(NodeNotFound):
        db.get_descendants(sid, "nope")
    with pytest.raises(NodeNotFound):
        db.get_branch(sid, "nope")


def test_set_head_with_expected_is_a_compare_and_set(db):
    sid = db.create_session()
    u1, a1, u2 = _chat(db, sid, "q1", "a1", "q2")
    db.set_head(sid, u1["id"], expected=u2["id"])
    assert db.get_head(sid) == u1["id"]
    with pytest.raises(HeadMoved, match="another writer moved it") as caught:
        db.set_head(sid, a1["id"], expected=u2["id"])
    assert (caught.value.expected, caught.value.actual) == (u2["id"], u1["id"])
    assert db.get_head(sid) == u1["id"], "a failed compare-and-set changes nothing"
    db.set_head(sid, None, expected=u1["id"])
    db.set_head(sid, a1["id"], expected=None)
    assert db.get_head(sid) == a1["id"]


def test_transaction_makes_a_read_then_write_one_unit(db):
    sid = db.create_session()
    _chat(db, sid, "q1", "a1")
    with pytest.raises(RuntimeError), db.transaction():
        db.append_message(sid, {"role": "user", "content": "q2"})
        db.set_extra_meta(sid, {"x": 1})
        raise RuntimeError("changed my mind")
    assert [m["content"] for m in db.get_branch(sid)] == ["q1", "a1"]
    assert db.get_extra_meta(sid) == {}
    with db.transaction():
        head = db.get_head(sid)
        db.append_message(sid, {"role": "user", "content": "q2"})
    assert db.get_branch(sid)[-1]["parent_id"] == head


def test_delete_branch_tail_removes_only_that_subtree(db):
    sid = db.create_session()
    u1, a1, u2, a2 = _chat(db, sid, "q1", "a1", "q2", "a2")
    db.fork_from(sid, a1["id"])
    alt = db.append_message(sid, {"role": "user", "content": "alt"})
    db.set_head(sid, a2["id"])
    assert db.delete_branch_tail(sid, u2["id"]) == [u2["id"], a2["id"]]
    assert db.get_head(sid) == a1["id"]
    assert [m["content"] for m in db.get_branch(sid, alt["id"])] == ["q1", "a1", "alt"]
    assert [b["head_id"] for b in db.list_branches(sid)] == [alt["id"]]
    assert db.search_messages("q2") == []
    assert db.get_session(sid)["message_count"] == 3


def test_token_stats_per_role_default_and_injected_estimator(db):
    """By default the figures are opctx's estimator's (what every budget uses), not len/4."""
    from opctx.context.tokens import estimate_message_tokens

    sid = db.create_session()
    _chat(db, sid, "x" * 400, "y" * 40)
    stats = db.get_branch_token_stats(sid)
    assert stats["estimator"] == "estimate_message_tokens"
    assert stats["message_count"] == 2
    branch = db.get_branch(sid)
    assert stats["by_role"] == {
        "user": {"count": 1, "tokens": estimate_message_tokens(branch[0])},
        "assistant": {"count": 1, "tokens": estimate_message_tokens(branch[1])},
    }
    assert stats["total_tokens"] == sum(map(estimate_message_tokens, branch)) != 110  # len/4 would say 110

    from opctx.dag.session_db import _len4_estimate

    quarter = db.get_branch_token_stats(sid, token_estimator=_len4_estimate)
    assert quarter["estimator"] == "len/4" and quarter["total_tokens"] == 110
    empty = db.create_session()
    assert db.get_branch_token_stats(empty)["total_tokens"] == 0


def test_token_estimator_set_on_the_constructor(tmp_path):
    db = DagSessionDB(tmp_path / "e.db", token_estimator=lambda msg: 7)
    sid = db.create_session()
    _chat(db, sid, "a", "b", "c")
    assert db.get_branch_token_stats(sid)["total_tokens"] == 21
    db.close()


def test_search_messages_is_literal_and_scoped(db):
    one, two = db.create_session(), db.create_session()
    db.append_message(one, {"role": "user", "content": 'Use "AND" NEAR( the parser'})
    db.append_message(two, {"role": "assistant", "content": "the parser is fixed"})
    db.append_message(two, {"role": "system", "content": "system parser rules"})
    hits = db.search_messages("parser")
    assert len(hits) == 3 and all({"session_id", "snippet", "rank"} <= set(h) for h in hits)
    assert {h["role"] for h in hits} == {"user", "assistant", "system"}
    assert [h["session_id"] for h in db.search_messages("parser", session_id=one)] == [one]
    assert [h["session_id"] for h in db.search_messages('"AND" NEAR(')] == [one]
    assert len(db.search_messages("parser", limit=2)) == 2
    with pytest.raises(StoreError, match="invalid FTS5 query"):
        db.search_messages("NEAR(", raw=True)
    with pytest.raises(SessionNotFound):
        db.search_messages("x", session_id="ghost")


def test_file_database_persists_between_objects(db_path):
    with DagSessionDB(db_path) as d1:
        sid = d1.create_session(title="disk")
        _chat(d1, sid, "persisted question", "persisted answer")
    with DagSessionDB(db_path) as d2:
        assert [m["content"] for m in d2.get_branch(sid)] == ["persisted question", "persisted answer"]


def test_corrupt_file_is_a_clear_store_error(tmp_path):
    bad = tmp_path / "chat.db"
    bad.write_text("{not sqlite}")
    with pytest.raises(StoreError, match="chat.db"):
        DagSessionDB(bad)


# -- property: get_branch equals an in-memory model ------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 10**6)),
        st.tuples(st.just("append_under"), st.integers(0, 10**6)),
        st.tuples(st.just("append_root"), st.just(0)),
        st.tuples(st.just("fork"), st.integers(0, 10**6)),
        st.tuples(st.just("rewind"), st.integers(0, 10**6)),
        st.tuples(st.just("delete"), st.integers(0, 10**6)),
    ),
    max_size=40,
)


class _Model:
    """The message tree as a plain dict: parent by id, insertion order, HEAD."""

    def __init__(self):
        self.parent: dict[str, str | None] = {}
        self.head: str | None = None

    def chain(self, nid):
        out = []
        while nid is not None:
            out.append(nid)
            nid = self.parent[nid]
        return out[::-1]

    def append(self, nid, parent):
        self.parent[nid] = parent
        if self.head is None or parent == self.head:
            self.head = nid

    def delete(self, nid):
        doomed = {nid}
        changed = True
        while changed:
            changed = False
            for k, p in self.parent.items():
                if p in doomed and k not in doomed:
                    doomed.add(k)
                    changed = True
        root_parent = self.parent[nid]
        for k in doomed:
            del self.parent[k]
        if self.head in doomed:
            self.head = root_parent
            if self.head is None:
                leaves = [k for k in self.parent if k not in set(self.parent.values())]
                self.head = leaves[-1] if leaves else None
        return doomed


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_get_branch_matches_a_plain_dict_model(operations):
    db = DagSessionDB(":memory:")
    sid = db.create_session()
    model = _Model()
    for i, (op, pick) in enumerate(operations):
        ids = list(model.parent)
        if op == "append":
            msg = db.append_message(sid, {"role": "user", "content": f"m{i}", "id": f"m{i}"})
            model.append(f"m{i}", model.head)
            assert msg["parent_id"] == model.parent[f"m{i}"]
        elif op == "append_under" and ids:
            parent = ids[pick % len(ids)]
            db.append_message(sid, {"role": "assistant", "content": f"m{i}", "id": f"m{i}", "parent_id": parent})
            model.append(f"m{i}", parent)
        elif op == "append_root":
            db.append_message(sid, {"role": "user", "content": f"m{i}", "id": f"m{i}", "parent_id": None})
            model.append(f"m{i}", None)
        elif op in ("fork", "rewind") and ids:
            target = ids[pick % len(ids)]
            (db.fork_from if op == "fork" else db.rewind_to)(sid, target)
            model.head = target
        elif op == "delete" and ids:
            target = ids[pick % len(ids)]
            deleted = db.delete_branch_tail(sid, target)
            assert set(deleted) == model.delete(target)
        assert db.get_head(sid) == model.head
        expected = model.chain(model.head) if model.head is not None else []
        assert [m["id"] for m in db.get_branch(sid)] == expected
    for nid in model.parent:
        assert [m["id"] for m in db.get_branch(sid, nid)] == model.chain(nid)
    leaves = [k for k in model.parent if k not in set(model.parent.values())]
    assert [(b["head_id"], b["length"]) for b in db.list_branches(sid)] == [
        (k, len(model.chain(k))) for k in leaves
    ]
    db.close()
