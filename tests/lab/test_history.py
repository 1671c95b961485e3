"""The recorded stream: compactions in the database are expanded back into the full history."""

from __future__ import annotations

import json

import pytest

from opctx.context.engine import DefaultContextEngine
from opctx.dag.session_db import DagSessionDB
from opctx.lab.history import (
    RecordedCompaction,
    RecordedHistory,
    SessionSpec,
    as_history,
    load_history,
)
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


def test_load_history_takes_the_pair_replay_takes(db_path):
    [sid] = build_scenario_sessions(db_path, n=1, n_turns=4)
    pair = (str(db_path), sid)
    assert [m["id"] for m in load_history(pair).messages] == [m["id"] for m in load_history(*pair).messages]
    with pytest.raises(TypeError):
        load_history(str(db_path))


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


# -- the recording's client, its version, and segments after a compaction --------------------------


def _claude_code_jsonl(path):
    """A small Claude Code session: a tool call, an automatic compaction, then a client upgrade."""
    sid = "11111111-2222-3333-4444-555555555555"
    base = {"sessionId": sid, "cwd": "/w", "version": "2.0.74", "userType": "external", "isSidechain": False}
    model = "claude-opus-4-5-20251101"
    lines = []

    def add(uuid, parent, kind, second, **kw):
        lines.append({**base, "type": kind, "uuid": uuid, "parentUuid": parent,
                      "timestamp": f"2026-01-01T00:00:{second:02d}Z", **kw})

    add("u1", None, "user", 1, message={"role": "user", "content": "fix the bug"})
    add("a1", "u1", "assistant", 2, message={
        "role": "assistant", "id": "m1", "model": model,
        "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "x.py"}}],
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 150_000, "output_tokens": 900}})
    add("r1", "a1", "user", 3, message={"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "print(1)"}]})
    add("b1", "r1", "system", 4, subtype="compact_boundary", content="Conversation compacted",
        compactMetadata={"trigger": "auto", "preTokens": 150_910}, logicalParentUuid="r1")
    add("s1", "b1", "user", 5, isCompactSummary=True, version="2.0.76",
        message={"role": "user", "content": "This session is being continued from a previous conversation."})
    add("a2", "s1", "assistant", 6, version="2.0.76", message={
        "role": "assistant", "id": "m2", "model": model, "content": [{"type": "text", "text": "done"}],
        "usage": {"input_tokens": 20_000, "output_tokens": 5}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return sid


def test_client_and_version_come_from_the_import(tmp_path, db_path):
    from opctx.importers import import_paths, parse_path

    path = tmp_path / "session.jsonl"
    sid = _claude_code_jsonl(path)
    [imported] = parse_path(path)
    import_paths([path], db_path)
    for hist in (as_history(imported), load_history(db_path, imported.session_id)):
        assert hist.client == "claude-code" and hist.client_version == "2.0.74"
        # the line that names another version wins from there on (an upgrade mid-session)
        assert hist.version_at(1) == "2.0.74" and hist.version_at(len(hist.messages)) == "2.0.76"
        assert hist.source_session_ids == [sid]
        [comp] = hist.compactions
        assert comp.trigger == "auto" and comp.pre_tokens == 150_910 and comp.pre_tokens_source == "client"
        assert comp.source_ids == ["b1", "s1"] and comp.summary_message["role"] == "user"
    assert RecordedHistory.from_messages([{"role": "user", "content": "x"}]).client_version is None


def test_resume_after_is_what_the_agent_continued_with():
    messages = [{"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
                for i in range(12)]
    comps = [
        RecordedCompaction(stream_index=4, node_id="s0", summary_text="first summary", trigger="auto",
                           protected_ids=["m0"], summary_message={"id": "s0", "role": "user", "content": "first summary"}),
        RecordedCompaction(stream_index=9, node_id="s1", summary_text="second summary", trigger="manual"),
    ]
    hist = RecordedHistory(messages=messages, compactions=comps, model="m", format="claude_code")
    seg = hist.resume_after(0)
    # protected head, the summary, then the stream from the compaction point on
    assert [m["id"] for m in seg.messages] == ["m0", "s0"] + [f"m{i}" for i in range(4, 12)]
    assert seg.prefix_len == 2 and seg.stream_start == 4
    assert [seg.original_index(j) for j in range(len(seg.messages))] == [None, None, *range(4, 12)]
    # the later compaction keeps its place in the segment
    [later] = seg.compactions
    assert seg.messages[later.stream_index]["id"] == "m9" and later.trigger == "manual"
    # a segment of a segment maps to the whole session too
    seg2 = seg.resume_after(0)
    assert seg2.messages[0]["content"] == "second summary" and seg2.messages[0]["role"] == "user"
    assert [seg2.original_index(j) for j in range(len(seg2.messages))] == [None, *range(9, 12)]


def test_protected_messages_keep_their_place_among_what_the_summary_folded():
    """Codex keeps the user messages around its summary: they stay where they were said."""
    from opctx.importers.base import SessionBuilder
    from opctx.lab.history import RecordedHistory

    b = SessionBuilder("codex", "made-up")
    u1 = b.add("user", output="first request")
    b.add("llm", output="working on it")
    u2 = b.add("user", output="second request")
    b.add("llm", output="done with that")
    b.record_compaction("summary", protected_ids=[u1.id, u2.id], trigger=None)
    b.add("user", output="third request")
    hist = RecordedHistory.from_calls(b.calls, b.head, fmt="codex")
    assert [m["content"] for m in hist.messages] == ["first request", "working on it", "second request",
                                                      "done with that", "third request"]
    (comp,) = hist.compactions
    assert comp.stream_index == 4 and hist.resume_after(0).messages[1]["content"] == "second request"


def test_each_branch_with_a_compaction_of_its_own_is_a_history(tmp_path):
    from _resumed_sample import write_resumed

    from opctx.importers.claude_code import parse_claude_code_jsonl
    from opctx.lab.history import recorded_branches

    session = parse_claude_code_jsonl(str(write_resumed(tmp_path)))[0]
    main, branch = recorded_branches(session)
    assert main.session_id == session.session_id and branch.session_id == f"{session.session_id}#branch-1"
    # the resumed branch holds the lines before the fork, then its own: not the abandoned summary
    assert "Summary one" not in " ".join(str(m.get("content")) for m in main.messages)
    assert "Summary one" in branch.compactions[0].summary_text
    assert not branch.scored_elsewhere and recorded_branches(main) == [main]
