"""Persisted token counts: identity, no tokenizer pass when counts exist, write-back rules."""

from __future__ import annotations

import pytest

from opctx.context import token_counts as tc
from opctx.context._cut import find_cut_index
from opctx.context._cut_facts import MessageFacts
from opctx.context.tokens import Estimator
from opctx.dag.session_db import DagSessionDB
from opctx.dag.store import connect_readonly
from opctx.lab.synthetic_history import make_history


class CountingEstimator(Estimator):
    """An Estimator that counts its message estimates (the tokenizer passes)."""

    calls = 0

    def message_tokens(self, msg, model=None, method=None):  # noqa: ANN001, ANN201
        type(self).calls += 1
        return super().message_tokens(msg, model, method)


@pytest.fixture
def session(tmp_path):
    db = DagSessionDB(str(tmp_path / "t.db"))
    sid = db.create_session(session_id="s")
    msgs = make_history(120, seed=4)
    for m in msgs:
        m.pop("parent_id", None)
    db.append_messages(sid, msgs)
    yield db, sid
    db.close()


def _fresh() -> CountingEstimator:
    CountingEstimator.calls = 0
    return CountingEstimator()


def test_cold_cut_from_persisted_counts_runs_no_estimate(session):
    db, sid = session
    written = tc.persist_token_counts(db, sid, "claude-sonnet-4-5", estimator=_fresh())
    assert written == len(db.get_messages(sid))
    est = _fresh()
    loaded = tc.load_counted_branch(db, sid, "claude-sonnet-4-5", estimator=est)
    assert CountingEstimator.calls == 0
    assert loaded.persisted == len(loaded.messages) and loaded.estimated == 0
    cut = find_cut_index(loaded.messages, 20_000, facts=loaded.facts)
    # the same cut as estimating every message afresh
    fresh = MessageFacts(lambda m: Estimator().message_tokens(m, "claude-sonnet-4-5"))
    again = find_cut_index(loaded.messages, 20_000, facts=fresh)
    assert cut.ok and cut == again
    assert loaded.facts.table(loaded.messages).total_tokens == fresh.table(loaded.messages).total_tokens
    assert CountingEstimator.calls == 0


def test_a_count_of_another_estimator_identity_is_never_used(session):
    db, sid = session
    tc.persist_token_counts(db, sid, "claude-sonnet-4-5", estimator=Estimator("heuristic"))
    ids = {tc.estimator_identity(Estimator("heuristic"), "claude-sonnet-4-5"),
           tc.estimator_identity(Estimator("auto"), "claude-sonnet-4-5"),
           tc.estimator_identity(Estimator("auto"), "gpt-4o")}
    assert len(ids) == 3
    est = _fresh()
    loaded = tc.load_counted_branch(db, sid, "claude-sonnet-4-5", estimator=est)
    assert loaded.persisted == 0 and loaded.estimated == len(loaded.messages)
    assert CountingEstimator.calls >= len(loaded.messages)


def test_identity_changes_with_the_constants(monkeypatch):
    before = tc.estimator_identity(Estimator(), "claude-sonnet-4-5")
    monkeypatch.setattr(tc, "COUNT_RULES_VERSION", tc.COUNT_RULES_VERSION + 1)
    assert tc.estimator_identity(Estimator(), "claude-sonnet-4-5") != before


def test_write_back_only_when_asked_and_never_read_only(session, tmp_path):
    db, sid = session
    model = "claude-sonnet-4-5"
    identity = tc.estimator_identity(Estimator(), model)
    tc.load_counted_branch(db, sid, model)
    assert db.token_counts(sid, identity) == {}  # a reader does not write by default
    ro = DagSessionDB(connect_readonly(str(tmp_path / "t.db")))
    loaded = tc.load_counted_branch(ro, sid, model, write_back=True)
    assert loaded.written == 0 and db.token_counts(sid, identity) == {}
    loaded = tc.load_counted_branch(db, sid, model, write_back=True)
    assert loaded.written == len(loaded.messages)
    assert len(db.token_counts(sid, identity)) == len(loaded.messages)
    # idempotent: a second writer of the same counts writes nothing and fails nothing
    assert tc.persist_token_counts(db, sid, model) == len(db.get_messages(sid)) - len(loaded.messages)
    assert tc.persist_token_counts(db, sid, model) == 0


def test_a_count_of_data_changed_since_it_was_read_is_not_written(session):
    db, sid = session
    model = "claude-sonnet-4-5"
    identity = tc.estimator_identity(Estimator(), model)
    branch = db.get_branch(sid)
    target = branch[-1]
    db.update_message(sid, target["id"], content="changed after the read")
    written = db.put_token_counts(sid, identity, [(target, 999, 0, ""), (branch[0], 5, 0, "")])
    assert written == 1
    assert target["id"] not in db.token_counts(sid, identity)


def test_an_update_drops_the_counts_of_the_node(session):
    db, sid = session
    model = "claude-sonnet-4-5"
    identity = tc.estimator_identity(Estimator(), model)
    tc.persist_token_counts(db, sid, model)
    node = db.get_branch(sid)[-1]
    db.update_message(sid, node["id"], content="a new text")
    counts = db.token_counts(sid, identity)
    assert node["id"] not in counts and len(counts) == len(db.get_messages(sid)) - 1
    loaded = tc.load_counted_branch(db, sid, model)
    assert loaded.estimated == 1


def test_coverage_per_identity(session):
    db, sid = session
    tc.persist_token_counts(db, sid, "gpt-4o")
    coverage = tc.token_count_coverage(db.connection)
    n = len(db.get_messages(sid))
    assert coverage == {"nodes": n, "estimators": {tc.estimator_identity(None, "gpt-4o"): n}}
    db.delete_session(sid)
    assert tc.token_count_coverage(db.connection) == {"nodes": 0, "estimators": {}}


def test_shape_round_trip_and_ids_it_cannot_encode():
    from opctx.context._cut_facts import decode_shape, encode_shape

    facts = (12, True, False, ("call_1", "call_2"), (), 1, 3)
    assert decode_shape((12, 3, encode_shape(facts))) == facts
    bare = (4, False, True, (), ("r",), 0, 0)
    assert decode_shape((4, 0, encode_shape(bare))) == bare
    assert encode_shape((1, True, False, ("a\x1eb",), (), 0, 0)) == ""
    assert decode_shape((1, 0, "")) is None


def test_seeded_facts_equal_computed_facts(session):
    db, sid = session
    model = "claude-sonnet-4-5"
    tc.persist_token_counts(db, sid, model)
    loaded = tc.load_counted_branch(db, sid, model)
    fresh = MessageFacts(lambda m: Estimator().message_tokens(m, model))
    assert [loaded.facts.get(m) for m in loaded.messages] == [fresh.get(m) for m in loaded.messages]
