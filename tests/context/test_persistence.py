"""Persister: the compaction layout of docs/ARCHITECTURE.md, exactly."""

from __future__ import annotations

import pytest
from _compaction_fixtures import assistant, call, chat_turns, results, user
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.persistence import (
    COPY_IDENTITY_KEYS,
    LAST_SUMMARY_KEY,
    BranchChanged,
    Persister,
    PersistError,
    copy_message,
    same_but_identity,
)
from opctx.dag.session_db import DagSessionDB


@pytest.fixture
def db() -> DagSessionDB:
    return DagSessionDB(":memory:")


def store_history(db: DagSessionDB, msgs: list[dict]) -> tuple[str, list[dict]]:
    sid = db.create_session(title="persist")
    for m in msgs:
        db.append_message(sid, {k: v for k, v in m.items() if k != "id"})
    return sid, db.get_branch(sid)


def test_layout(db: DagSessionDB) -> None:
    c = call("read")
    sid, history = store_history(db, [user("task"), assistant("ok"), user("more"), *chat_turns(5), user("go"), c, *results(c), assistant("done")])
    snapshot = {m["id"]: dict(m) for m in db.get_messages(sid)}
    p, cut = 3, 9
    res = Persister(db).insert_summary_node(
        sid, "SUMMARY", cut, history, p, reason="manual", pre_tokens=1000, tokens_after=400
    )
    branch = db.get_branch(sid)
    n = len(history)
    assert len(branch) == p + 1 + (n - cut)
    assert db.get_head(sid) == res.new_head_id == branch[-1]["id"]
    # protected head copies, verbatim, first one is the root
    assert branch[0]["parent_id"] is None
    for copy_, orig in zip(branch[:p], history[:p], strict=True):
        assert copy_["id"].startswith("k_") and copy_["copied_from"] == orig["id"]
        assert copy_["content"] == orig["content"] and copy_["role"] == orig["role"]
    # the summary node
    s = branch[p]
    assert s["id"] == res.summary_id and s["id"].startswith("summary_")
    assert s["role"] == "system" and s["type"] == "compactionSummary" and s["source"] == "compaction"
    assert s["content"] == "[Previous conversation summary]\nSUMMARY"
    assert s["extra"] == {"compaction": True}
    assert s["parent_id"] == branch[p - 1]["id"]
    meta = s["compaction"]
    assert meta["folded_ids"] == [m["id"] for m in history[p:cut]]
    assert meta["folded_range"] == [history[p]["id"], history[cut - 1]["id"]]
    assert meta["protected_ids"] == [m["id"] for m in history[:p]]
    assert meta["kept_ids"] == [m["id"] for m in history[cut:]]
    assert meta["reason"] == "manual" and meta["pre_tokens"] == 1000 and meta["tokens_after"] == 400
    assert meta["recorded"] is False and meta["fell_back_to_structural"] is False
    assert s["timestamp"] < branch[p + 1]["timestamp"]
    # kept tail copies, tool pairing preserved
    for copy_, orig in zip(branch[p + 1 :], history[cut:], strict=True):
        assert copy_["copied_from"] == orig["id"]
        assert copy_.get("tool_calls") == orig.get("tool_calls")
        assert copy_.get("tool_call_id") == orig.get("tool_call_id")
    # nothing on the new branch points into the folded range
    folded_ids = set(meta["folded_ids"])
    assert not any(m["parent_id"] in folded_ids for m in branch)
    # originals untouched and reachable
    for mid, before in snapshot.items():
        assert db.get_message(sid, mid) == before
    reachable = {m["id"] for m in db.get_descendants(sid, history[0]["id"])}
    assert {m["id"] for m in history[1:]} <= reachable
    assert db.get_extra_meta(sid)[LAST_SUMMARY_KEY] == "SUMMARY"
    assert res.protected_copy_ids == [m["id"] for m in branch[:p]]
    assert res.kept_copy_ids == [m["id"] for m in branch[p + 1 :]]


def test_no_protected_head_makes_the_summary_the_root(db: DagSessionDB) -> None:
    sid, history = store_history(db, chat_turns(6))
    Persister(db).insert_summary_node(sid, "S", 4, history, 0)
    branch = db.get_branch(sid)
    assert branch[0]["type"] == "compactionSummary" and branch[0]["parent_id"] is None


def test_second_compaction_chains(db: DagSessionDB) -> None:
    sid, history = store_history(db, chat_turns(10))
    persister = Persister(db)
    persister.insert_summary_node(sid, "FIRST", 8, history, 3)
    branch = db.get_branch(sid)
    for m in chat_turns(4):
        db.append_message(sid, {k: v for k, v in m.items() if k != "id"})
    branch = db.get_branch(sid)
    persister.insert_summary_node(sid, "SECOND", 8, branch, 3)
    final = db.get_branch(sid)
    assert final[3]["content"].endswith("SECOND")
    assert final[3]["compaction"]["folded_ids"][0] == branch[3]["id"]  # the first summary was folded
    assert persister.last_summary_text(sid) == "SECOND"
    assert [m["copied_from"] for m in final[:3]] == [m["id"] for m in branch[:3]]


def test_bad_ranges_raise_clear_errors(db: DagSessionDB) -> None:
    sid, history = store_history(db, chat_turns(3))
    persister = Persister(db)
    with pytest.raises(PersistError, match="invalid compaction range"):
        persister.insert_summary_node(sid, "S", 2, history, 3)
    with pytest.raises(PersistError, match="nothing to fold"):
        persister.insert_summary_node(sid, "S", 3, history, 3)
    with pytest.raises(PersistError, match="without an id"):
        persister.insert_summary_node(sid, "S", 4, [{"role": "user", "content": "x"}] * 6, 1)
    with pytest.raises(PersistError, match="no session_db"):
        Persister().insert_summary_node(sid, "S", 4, history, 1)


def test_failed_write_leaves_the_session_as_it_was(db: DagSessionDB) -> None:
    sid, history = store_history(db, chat_turns(6))
    head_before = db.get_head(sid)

    class Failing:
        def __getattr__(self, name):
            return getattr(db, name)

        def append_messages(self, session_id, msgs):
            raise OSError("disk full")

    with pytest.raises(PersistError, match="writing the compacted branch failed: OSError: disk full"):
        Persister(Failing()).insert_summary_node(sid, "S", 8, history, 2)
    assert db.get_head(sid) == head_before
    assert [m["id"] for m in db.get_branch(sid)] == [m["id"] for m in history]


def test_a_pinned_request_is_copied_right_after_the_summary(db: DagSessionDB) -> None:
    msgs = [user("hello"), assistant("hi"), user("context"), user("refactor the parser")]
    for _ in range(6):
        c = call("edit")
        msgs += [c, *results(c)]
    sid, history = store_history(db, msgs)
    snapshot = {m["id"]: dict(m) for m in db.get_messages(sid)}
    p, u, cut = 3, 3, 10
    Persister(db).insert_summary_node(sid, "S", cut, history, p, pinned=[u])
    branch = db.get_branch(sid)
    assert [m.get("copied_from") for m in branch[:p]] == [m["id"] for m in history[:p]]
    assert branch[p]["type"] == "compactionSummary"
    assert branch[p + 1]["copied_from"] == history[u]["id"]
    assert branch[p + 1]["content"] == "refactor the parser"
    assert [m["copied_from"] for m in branch[p + 2 :]] == [m["id"] for m in history[cut:]]
    meta = branch[p]["compaction"]
    assert meta["pinned_ids"] == [history[u]["id"]]
    assert meta["kept_ids"][0] == history[u]["id"]
    assert meta["folded_ids"] == [m["id"] for m in history[p:cut] if m["id"] != history[u]["id"]]
    assert {m["id"]: m for m in db.get_messages(sid) if m["id"] in snapshot} == snapshot
    with pytest.raises(PersistError, match="pinned positions"):
        Persister(db).insert_summary_node(sid, "S", cut, history, p, pinned=[cut])


def test_messages_appended_after_the_read_are_carried_after_the_tail(db: DagSessionDB) -> None:
    sid, history = store_history(db, chat_turns(6))
    # another writer appends while the summary is being made
    late = [db.append_message(sid, {"role": r, "content": f"late {i}"})
            for i, r in enumerate(["user", "assistant", "user"])]
    res = Persister(db).insert_summary_node(sid, "S", 8, history, 2)
    branch = db.get_branch(sid)
    assert [m.get("copied_from") for m in branch[3:]] == [m["id"] for m in history[8:] + late]
    assert [m["content"] for m in branch[-3:]] == ["late 0", "late 1", "late 2"]
    assert db.get_head(sid) == res.new_head_id == branch[-1]["id"]
    meta = branch[2]["compaction"]
    assert meta["carried_ids"] == res.carried_ids == [m["id"] for m in late]
    assert meta["kept_ids"] == [m["id"] for m in history[8:] + late]
    # and the next message continues the new branch
    nxt = db.append_message(sid, {"role": "assistant", "content": "after"})
    assert nxt["parent_id"] == branch[-1]["id"]


def test_a_branch_switched_meanwhile_writes_nothing(db: DagSessionDB) -> None:
    sid, history = store_history(db, chat_turns(6))
    before = {m["id"] for m in db.get_messages(sid)}
    db.rewind_to(sid, history[4]["id"])  # HEAD left the branch's end: not a continuation
    with pytest.raises(BranchChanged, match="nothing was written"):
        Persister(db).insert_summary_node(sid, "S", 8, history, 2)
    assert {m["id"] for m in db.get_messages(sid)} == before
    assert db.get_head(sid) == history[4]["id"]
    assert LAST_SUMMARY_KEY not in db.get_extra_meta(sid)


def test_a_failure_after_the_branch_was_written_undoes_all_of_it(db: DagSessionDB) -> None:
    sid, history = store_history(db, chat_turns(6))
    before = {m["id"] for m in db.get_messages(sid)}

    class MetaFails:
        def __getattr__(self, name):
            return getattr(db, name)

        def set_extra_meta(self, session_id, extra):
            raise OSError("disk full")

    with pytest.raises(PersistError, match="saving the summary text failed.*not written"):
        Persister(MetaFails()).insert_summary_node(sid, "S", 8, history, 2)
    assert {m["id"] for m in db.get_messages(sid)} == before
    assert [m["id"] for m in db.get_branch(sid)] == [m["id"] for m in history]


def test_a_copy_is_a_new_dict_and_its_original_is_left_as_it_was() -> None:
    # copy_message: the original's values, a dict of its own (what the copy sets and a
    # store renaming ids in place touch is the copy's alone)
    from opctx.context.persistence import copy_message

    c = call("read")
    orig = {**assistant("ok"), "id": "m1", "parent_id": "m0", "seq": 4, "tool_calls": c["tool_calls"]}
    before = {k: v for k, v in orig.items()}
    copy_ = copy_message(orig, "p9")
    assert copy_ is not orig and copy_["copied_from"] == "m1" and copy_["parent_id"] == "p9"
    assert "seq" not in copy_ and copy_["id"].startswith("k_")
    copy_["id"], copy_["parent_id"] = "renamed", "renamed_parent"
    assert orig == before
    assert {k: v for k, v in copy_.items() if k not in ("id", "parent_id", "copied_from")} == {
        k: v for k, v in orig.items() if k not in ("id", "parent_id", "seq")
    }


def test_a_compaction_leaves_the_history_it_read_and_the_stored_originals_as_they_were(
    db: DagSessionDB,
) -> None:
    # the copies hold the history's own values; a store that renames the written ids in
    # place (as the lab's replay does) changes only the copies
    c = call("read")
    sid, history = store_history(db, [user("task"), *chat_turns(3), c, *results(c), assistant("done")])
    read = [dict(m) for m in history]
    append = db.append_messages

    def renaming(session_id: str, msgs: list[dict]) -> list[dict]:
        for m in msgs:
            m["id"] = "r_" + m["id"]
            if m.get("parent_id"):
                m["parent_id"] = "r_" + m["parent_id"]
        return append(session_id, msgs)

    db.append_messages = renaming
    res = Persister(db).insert_summary_node(sid, "S", 4, history, 1)
    assert history == read
    assert [db.get_message(sid, m["id"]) for m in read] == read
    assert all(m["id"].startswith("r_") for m in res.branch)
    assert [m["copied_from"] for m in db.get_branch(sid)[2:]] == [m["id"] for m in read[4:]]


def test_a_copy_is_its_original_but_for_identity():
    original = {"id": "m1", "parent_id": "m0", "role": "assistant", "content": [{"type": "text", "text": "hi"}],
                "tool_calls": [{"id": "c1", "name": "ls", "arguments": {"path": "."}}], "timestamp": 3.0}
    copy = copy_message(original, "s1")
    assert same_but_identity(copy, original) and same_but_identity(original, copy)
    assert same_but_identity(copy_message(copy, None), original)  # a copy of a copy
    assert not same_but_identity({**copy, "content": "changed"}, original)
    assert not same_but_identity({**copy, "extra": {"k": 1}}, original)  # a key more
    assert not same_but_identity({k: v for k, v in copy.items() if k != "tool_calls"}, original)


_keys = st.sampled_from(["id", "parent_id", "seq", "copied_from", "role", "content", "extra", "name"])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_keys, st.integers(0, 2)), st.dictionaries(_keys, st.integers(0, 2)))
def test_same_but_identity_is_equality_without_the_identity_keys(a, b):
    strip = lambda m: {k: v for k, v in m.items() if k not in COPY_IDENTITY_KEYS}  # noqa: E731
    assert same_but_identity(a, b) is (strip(a) == strip(b))
