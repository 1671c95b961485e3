"""The recorded stream: compactions in the database are expanded back into the full history."""

from __future__ import annotations

import pytest

from opctx.context.engine import DefaultContextEngine
from opctx.dag.session_db import DagSessionDB
from opctx.lab.history import SessionSpec, as_history, load_history
from opctx.lab.replay import replay
from opctx.lab.scenarios import build_scenario_sessions, generate_session


def _compact_in_db(db_path, session_id, times=2):
    """Compact a stored session with the real engine, `times` times (appending between)."""
    db = DagSessionDB(str(db_path))
    engine = DefaultContextEngine(session_db=db, context_window=30_000, aging=False)
    results = [engine.compact(None, session_id, None, user_initiated=True)]
    extra = generate_session(99, n_turns=6).messages
    for m in extra:
        db.append_message(session_id, {k: v for k, v in m.items() if k not in ("id", "parent_id")})
    for _ in range(times - 1):
        results.append(engine.compact(None, session_id, None, user_initiated=True))
    branch = db.get_branch(session_id)
    db.close()
    return results, extra, branch


def test_db_session_without_compaction_is_its_messages(db_path):
    [sid] = build_scenario_sessions(db_path, n=1, n_turns=6)
    hist = load_history(db_path, sid)
    original = generate_session(1, n_turns=6)
    assert [m["id"] for m in hist.messages] == [m["id"] for m in original.messages]
    assert [m["content"] for m in hist.messages] == [m["content"] for m in original.messages]
    assert hist.compactions == [] and hist.model == original.model
    assert hist.format == "scenario" and hist.source == str(db_path)


def test_compactions_are_expanded_back_into_the_stream(db_path):
    [sid] = build_scenario_sessions(db_path, n=1, n_turns=20)
    original = generate_session(1, n_turns=20).messages
    results, extra, branch = _compact_in_db(db_path, sid, times=2)
    assert all(r.ok for r in results), [r.error for r in results]
    # the active branch is short and starts with copies / a summary
    assert len(branch) < len(original) + len(extra)
    hist = load_history(db_path, sid)
    assert [m["content"] for m in hist.messages] == [m["content"] for m in original] + [m["content"] for m in extra]
    assert not any(m.get("copied_from") for m in hist.messages)
    assert len(hist.compactions) == 2
    first, second = hist.compactions
    assert 0 < first.stream_index <= len(original)
    assert first.stream_index <= second.stream_index <= len(hist.messages)
    assert not first.recorded and first.summary_text


def test_spec_tuple_and_list_inputs_agree(db_path):
    [sid] = build_scenario_sessions(db_path, n=1, n_turns=5)
    a = as_history(SessionSpec(str(db_path), sid))
    b = as_history((str(db_path), sid))
    assert [m["id"] for m in a.messages] == [m["id"] for m in b.messages]
    r1 = replay(SessionSpec(str(db_path), sid), "none")
    r2 = replay(generate_session(1, n_turns=5).messages, "none")
    assert list(r1.steps_df["tokens"]) == list(r2.steps_df["tokens"])


def test_missing_database_and_session_are_clear_errors(db_path, tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_history(tmp_path / "nope.db", "x")
    build_scenario_sessions(db_path, n=1, n_turns=2)
    with pytest.raises(KeyError, match="no session"):
        load_history(db_path, "missing")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ValueError, match="not an opctx database"):
        load_history(junk, "x")
