"""The replay's session database serves the active branch from its last read (the branch
mirror, ``opctx.lab._replay_db._ReplaySessionDB``): what it returns must be exactly
what the stored branch reads back as, after every kind of write."""

from __future__ import annotations

import json

from opctx.context.persistence import Persister
from opctx.lab._replay_db import _ReplaySessionDB
from opctx.lab.replay import ReplayClock


def _exact(msgs: list[dict]) -> str:
    # json tells 1 from 1.0 and keeps key order: the comparison is of values and types
    return json.dumps(msgs)


def _recorded(db: _ReplaySessionDB, sid: str, start: int, n: int, parent: str | None) -> str | None:
    msgs = []
    for i in range(start, start + n):
        role = "user" if i % 2 == 0 else "assistant"
        # int timestamps: the store keeps REAL, so a read gives floats back
        msgs.append({"id": f"m{i}", "role": role, "content": f"message {i} " * 20,
                     "parent_id": parent, "timestamp": 1_000 + i, "extra_key": [i, (i, "t")]})
        parent = f"m{i}"
    db.append_recorded(sid, msgs)
    return parent


def _stored(db: _ReplaySessionDB, sid: str) -> list[dict]:
    return db._db.get_branch(sid)


def test_the_branch_is_what_the_store_reads_back_after_every_write():
    db = _ReplaySessionDB(ReplayClock(0.0))
    sid = db.create_session(title="t")
    head = _recorded(db, sid, 0, 12, None)
    assert _exact(db.get_branch(sid)) == _exact(_stored(db, sid))
    persister = Persister(db, clock=ReplayClock(5.0))
    for round_ in range(3):
        branch = db.get_branch(sid)
        persister.insert_summary_node(sid, f"summary {round_}", cut_idx=6, history=branch,
                                      protect_first_n=1, pinned=[4])
        mirrored = db.get_branch(sid)
        assert _exact(mirrored) == _exact(_stored(db, sid))
        assert mirrored[0]["parent_id"] is None and any(m.get("copied_from") for m in mirrored)
        assert db.get_branch(sid)[-1] is mirrored[-1]  # served from memory, not decoded again
        head = _recorded(db, sid, 100 * (round_ + 1), 5, mirrored[-1]["id"])
        assert db.get_branch(sid)[-1]["id"] == head
        assert _exact(db.get_branch(sid)) == _exact(_stored(db, sid))


def test_a_moved_head_or_an_unfollowed_write_is_read_from_the_store():
    db = _ReplaySessionDB(ReplayClock(0.0))
    sid = db.create_session(title="t")
    _recorded(db, sid, 0, 6, None)
    before = db.get_branch(sid)
    db.append_message(sid, {"id": "m6", "role": "user", "content": "one more"})  # not followed
    assert db.get_branch(sid)[-1]["id"] == "m6"
    db.set_head(sid, "m2")
    assert [m["id"] for m in db.get_branch(sid)] == ["m0", "m1", "m2"]
    db.set_head(sid, "m5")
    assert _exact(db.get_branch(sid)) == _exact(_stored(db, sid)) == _exact(before)


def test_a_write_that_is_not_on_the_branch_leaves_it_to_the_store():
    db = _ReplaySessionDB(ReplayClock(0.0))
    sid = db.create_session(title="t")
    _recorded(db, sid, 0, 4, None)
    db.get_branch(sid)
    # a side branch from m1: HEAD stays at m3
    db.append_recorded(sid, [{"id": "x1", "role": "user", "content": "aside", "parent_id": "m1",
                              "timestamp": 9.0}])
    db.set_head(sid, "m3")
    assert [m["id"] for m in db.get_branch(sid)] == ["m0", "m1", "m2", "m3"]
    db.set_head(sid, "x1")
    assert [m["id"] for m in db.get_branch(sid)] == ["m0", "m1", "x1"]
    assert _exact(db.get_branch(sid)) == _exact(_stored(db, sid))
