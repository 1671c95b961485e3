"""``MemorySessionDB`` keeps ``DagSessionDB``'s rules: every test runs on both, and a
random sequence of writes reads back alike from the two."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.persistence import Persister
from opctx.dag.memory_db import MemorySessionDB
from opctx.dag.session_db import DagSessionDB, HeadMoved
from opctx.dag.store import NodeNotFound, SessionNotFound, StoreError


def _clock() -> float:
    return 100.0


def _make(kind: str):
    clock = _clock
    return DagSessionDB(":memory:", clock=clock) if kind == "sqlite" else MemorySessionDB(clock=clock)


@pytest.fixture(params=["sqlite", "memory"])
def db(request):
    made = _make(request.param)
    yield made
    made.close()


def _ids(msgs: list[dict]) -> list[str]:
    return [m["id"] for m in msgs]


def test_messages_chain_on_head_and_an_explicit_parent_makes_a_side_branch(db):
    sid = db.create_session(title="t")
    a = db.append_message(sid, {"id": "a", "role": "user", "content": "hi"})
    b = db.append_message(sid, {"id": "b", "role": "assistant", "content": "hello"})
    assert a["parent_id"] is None and b["parent_id"] == "a" and db.get_head(sid) == "b"
    assert b["timestamp"] == 100.0  # from the clock
    side = db.append_message(sid, {"id": "s", "role": "user", "content": "aside", "parent_id": "a"})
    assert side["parent_id"] == "a" and db.get_head(sid) == "b"  # HEAD stays
    db.append_messages(sid, [{"id": "c", "role": "user", "content": "1"},
                             {"id": "d", "role": "assistant", "content": "2"}])
    assert _ids(db.get_branch(sid)) == ["a", "b", "c", "d"]
    assert _ids(db.get_branch(sid, "s")) == ["a", "s"]
    assert _ids(db.get_messages(sid)) == ["a", "b", "s", "c", "d"]
    assert db.get_message(sid, "s")["content"] == "aside" and db.get_message(sid, "zz") is None
    generated = db.append_message(sid, {"role": "user", "content": "no id"})
    assert generated["id"] and db.get_head(sid) == generated["id"]


def test_a_batch_with_a_duplicate_or_a_bad_role_writes_nothing(db):
    sid = db.create_session()
    db.append_message(sid, {"id": "a", "role": "user", "content": "hi"})
    with pytest.raises(StoreError, match="duplicate node id"):
        db.append_messages(sid, [{"id": "b", "role": "user", "content": "x"},
                                 {"id": "a", "role": "user", "content": "again"}])
    with pytest.raises(StoreError, match="duplicate node id"):
        db.append_messages(sid, [{"id": "c", "role": "user", "content": "x"},
                                 {"id": "c", "role": "user", "content": "twice"}])
    with pytest.raises(ValueError, match="unknown message role"):
        db.append_messages(sid, [{"id": "d", "role": "user", "content": "x"},
                                 {"id": "e", "role": "robot", "content": "?"}])
    assert _ids(db.get_messages(sid)) == ["a"] and db.get_head(sid) == "a"


def test_set_head_is_a_compare_and_set(db):
    sid = db.create_session()
    db.append_messages(sid, [{"id": "a", "role": "user", "content": "1"},
                             {"id": "b", "role": "assistant", "content": "2"}])
    with pytest.raises(HeadMoved) as err:
        db.set_head(sid, "a", expected="a")
    assert err.value.actual == "b" and db.get_head(sid) == "b"
    db.set_head(sid, "a", expected="b")
    assert db.get_head(sid) == "a"
    with pytest.raises(NodeNotFound):
        db.set_head(sid, "nope")
    db.set_head(sid, None)
    assert db.get_branch(sid) == []
    with pytest.raises(NodeNotFound):
        db.get_branch(sid, "nope")


def test_a_failed_transaction_leaves_no_trace(db):
    sid = db.create_session(extra_meta={"k": 1})
    db.append_message(sid, {"id": "a", "role": "user", "content": "1"})
    with pytest.raises(RuntimeError), db.transaction():
        db.append_message(sid, {"id": "b", "role": "assistant", "content": "2"})
        with db.transaction():  # joins the outer one
            db.set_extra_meta(sid, {"k": 2})
        db.set_head(sid, "b", expected="b")
        raise RuntimeError("the summary failed")
    assert _ids(db.get_messages(sid)) == ["a"] and db.get_head(sid) == "a"
    assert db.get_extra_meta(sid) == {"k": 1}
    # the seq and the ids are free again
    db.append_message(sid, {"id": "b", "role": "assistant", "content": "2 again"})
    assert _ids(db.get_branch(sid)) == ["a", "b"]


def test_extra_meta_is_a_copy_each_way(db):
    sid = db.create_session(extra_meta={"list": [1]})
    got = db.get_extra_meta(sid)
    got["list"].append(2)
    assert db.get_extra_meta(sid) == {"list": [1]}
    assert db.update_extra_meta(sid, more="x") == {"list": [1], "more": "x"}


def test_an_unknown_session_is_an_error(db):
    with pytest.raises(SessionNotFound):
        db.append_message("nope", {"role": "user", "content": "x"})
    with pytest.raises(SessionNotFound):
        db.get_head("nope")


def test_a_compaction_writes_the_same_branch_on_both():
    branches = []
    for kind in ("sqlite", "memory"):
        db = _make(kind)
        sid = db.create_session()
        db.append_messages(sid, [
            {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
            for i in range(10)
        ])
        result = Persister(db, clock=_clock).insert_summary_node(
            sid, "the summary", cut_idx=6, history=db.get_branch(sid), protect_first_n=1)
        branch = db.get_branch(sid)
        assert branch[-1]["id"] == result.new_head_id == db.get_head(sid)
        assert db.get_extra_meta(sid)["_last_summary_text"] == "the summary"
        assert _ids(db.get_messages(sid))[:10] == [f"m{i}" for i in range(10)]  # originals kept
        branches.append([(m["role"], m["content"], m.get("copied_from"), m["timestamp"]) for m in branch])
    assert branches[0] == branches[1]


_op = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 3), st.integers(-1, 30)),
    st.tuples(st.just("head"), st.integers(-1, 30), st.booleans()),
    st.tuples(st.just("fail"), st.integers(1, 3)),
)


def _pick(ids: list[str], k: int) -> str | None:
    """The ``k``-th id (wrapping), or None for a negative ``k`` or no ids."""
    return ids[k % len(ids)] if ids and k >= 0 else None


@settings(max_examples=60, deadline=None)
@given(st.lists(_op, max_size=25))
def test_any_sequence_of_writes_reads_back_alike(ops):
    dbs = [_make("sqlite"), _make("memory")]
    sids = [d.create_session(session_id="s") for d in dbs]
    counter = itertools.count()
    for op in ops:
        outcomes = []
        ids = _ids(dbs[0].get_messages(sids[0]))
        for db, sid in zip(dbs, sids, strict=True):
            try:
                if op[0] == "append":  # n messages; parent: HEAD (-1) or a chosen one
                    batch = []
                    for j in range(op[1]):
                        msg = {"id": f"n{len(ids)}_{j}", "role": "user", "content": str(j)}
                        if op[2] >= 0 and j == 0:
                            msg["parent_id"] = _pick(ids, op[2])
                        batch.append(msg)
                    db.append_messages(sid, batch)
                elif op[0] == "head":
                    target = _pick(ids, op[1])
                    if op[2]:
                        db.set_head(sid, target, expected=db.get_head(sid))
                    else:
                        db.set_head(sid, target)
                else:
                    with db.transaction():
                        db.append_messages(sid, [{"id": f"t{next(counter)}", "role": "user", "content": "t"}
                                                 for _ in range(op[1])])
                        raise RuntimeError("rolled back")
                outcomes.append("ok")
            except (StoreError, RuntimeError) as exc:
                outcomes.append(type(exc).__name__)
        assert outcomes[0] == outcomes[1]
        views = [
            (db.get_head(sid), _ids(db.get_branch(sid)),
             [(m["id"], m["parent_id"], m["content"]) for m in db.get_messages(sid)])
            for db, sid in zip(dbs, sids, strict=True)
        ]
        assert views[0] == views[1]
