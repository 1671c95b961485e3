"""Every file of the real corpus imports, and its counts match the manifest.

The manifest's statistics were counted independently of opctx (per file: user and
assistant lines, tool uses and results, compactions...). Where opctx's node count
legitimately differs from a line count, the test says why and checks the right number:

* Claude Code writes one ``assistant`` line per content block; lines sharing a
  ``message.id`` are ONE llm node. So: llm nodes == distinct message ids (counted here
  from the raw file), and the llm nodes' ``source_ids`` add up to the manifest's
  assistant line count.
* A Claude Code ``user`` line is a user message, a tool result (one ``tool_result``
  block per line in this corpus) or a compaction summary. So: user nodes + code nodes
  + compaction summaries == the manifest's user line count.
* The ``compact_boundary`` system line is folded into its summary node. So: system
  nodes == manifest system lines - boundaries.
* Codex ``messages`` counts response-item messages of every role: user nodes +
  system (developer) nodes + assistant message items merged into llm nodes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from opctx.importers import detect, import_paths, parse_path
from opctx.importers.openhands import OBSERVATIONS_SHOWN_AS_MESSAGES

pytestmark = pytest.mark.corpus


def _manifest(corpus_dir: Path) -> dict[str, dict]:
    return {e["file"]: e for e in json.loads((corpus_dir / "manifest.json").read_text())}


def _entries(corpus_dir: Path, entry: dict) -> list[dict]:
    path = corpus_dir / entry["file"]
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _message_starts(raw: list[dict]) -> int:
    """Assistant messages as the raw lines define them, counted without opctx.

    Claude Code writes one line per content block; a line continues a message when it
    has the same ``message.id`` and its parent is a line of that message or the result
    of one of its tool calls. Normally this is the number of distinct message ids; one
    corpus file (f84b640b) holds a resumed session that copied its earlier lines with
    new uuids (same message ids, other parents), so its copies are messages of their own.
    """
    by_uuid = {e.get("uuid"): e for e in raw if e.get("uuid")}
    tool_msg: dict[str, str] = {}
    starts = 0
    for e in raw:
        if e.get("type") != "assistant":
            continue
        mid = e["message"].get("id") or e["uuid"]
        parent = by_uuid.get(e.get("parentUuid")) or {}
        cont = parent.get("type") == "assistant" and (parent["message"].get("id") or parent["uuid"]) == mid
        if parent.get("type") == "user" and isinstance(parent["message"].get("content"), list):
            cont = cont or any(b.get("type") == "tool_result" and tool_msg.get(b.get("tool_use_id")) == mid
                               for b in parent["message"]["content"] if isinstance(b, dict))
        starts += not cont
        for b in e["message"].get("content") or []:
            if isinstance(b, dict) and b.get("type") == "tool_use":
                tool_msg[b["id"]] = mid
    return starts


def _own(sessions, path: Path):
    """The sessions parsed from ``path`` itself (not its subagent files)."""
    return [s for s in sessions if Path(s.source_path) == path]


def test_whole_corpus_imports(corpus_dir, db_path):
    report = import_paths([corpus_dir], db_path, on_error="stop")
    assert report.ok, (report.failed, report.issues)
    assert not report.failed
    assert not report.existing  # side files (subagents) were not imported a second time
    # every transcript of the manifest was read (side files come in with their session)
    transcripts = [e for e in _manifest(corpus_dir).values() if "kind" not in e["stats"]]
    read = {w["path"] for w in report.written}
    for e in transcripts:
        p = str(corpus_dir / e["file"])
        owned_by_parent = "/agent-" in p
        assert p in read or owned_by_parent, f"{e['file']} was not imported"
    assert [p for p, _ in report.ignored] == [str(corpus_dir / "manifest.json")]
    assert report.sessions >= 50


@pytest.mark.parametrize("fmt", ["claude_code_jsonl", "claude_code_hook_chat_json"])
def test_claude_code_counts_match_manifest(corpus_dir, fmt):
    entries = [e for e in _manifest(corpus_dir).values()
               if e["format"] == fmt and "user" in e["stats"]]
    assert entries
    for entry in entries:
        st = entry["stats"]
        path = corpus_dir / entry["file"]
        sessions = parse_path(path) if "/agent-" not in str(path) else None
        if sessions is None:  # a subagent file: parsed with its parent, check it alone
            from opctx.importers.claude_code import parse_claude_code_jsonl

            sessions = parse_claude_code_jsonl(str(path), with_subagents=False)
        own = _own(sessions, path)
        calls = [c for s in own for c in s.calls if not c.metadata.get("copied_from")]
        users = sum(c.role == "user" for c in calls)
        codes = [c for c in calls if c.role == "code"]
        summaries = [c for c in calls if "compaction" in c.metadata]
        systems = [c for c in calls if c.metadata.get("role") == "system" and "compaction" not in c.metadata]
        llms = [c for c in calls if c.role == "llm" and c.metadata.get("role") != "system"]
        raw = _entries(corpus_dir, entry)
        msg_ids = {e["message"].get("id") or e["uuid"] for e in raw if e.get("type") == "assistant"}
        starts = _message_starts(raw)
        where = entry["file"]
        assert users + len(codes) + len(summaries) == st["user"], where
        assert len(llms) == starts <= st["assistant"], where
        assert starts == len(msg_ids) or "f84b640b" in where, where
        assert sum(len(c.metadata["source_ids"]) for c in llms) == st["assistant"], where
        assert sum(len(c.metadata.get("tool_calls") or []) for c in llms) == st["tool_use"], where
        assert len(codes) == st["tool_result"], where
        assert not [c for c in codes if c.metadata.get("orphan_result")], where
        assert len(summaries) == max(st["compact_summary"], st["compact_boundary"]), where
        assert len(systems) == st["system"] - st["compact_boundary"], where
        # every llm node's usage counted once, with the four documented keys
        for c in llms:
            if "usage" in c.metadata:
                assert set(c.metadata["usage"]) == {"input_tokens", "output_tokens",
                                                    "cache_read_tokens", "cache_write_tokens"}
        if "<synthetic>" in st["models"]:
            assert any(c.metadata.get("synthetic") for c in llms), where


def test_codex_counts_match_manifest(corpus_dir):
    entries = [e for e in _manifest(corpus_dir).values() if e["format"] == "codex_rollout_jsonl"]
    assert len(entries) == 4
    for entry in entries:
        st = entry["stats"]
        (s,) = parse_path(corpus_dir / entry["file"])
        calls = [c for c in s.calls if not c.metadata.get("copied_from")
                 and not c.metadata.get("replacement_history")]
        items = Counter(i for c in calls for i in c.metadata.get("items", []))
        users = sum(c.role == "user" for c in calls)
        systems = sum(1 for c in calls if c.metadata.get("original_role") in ("developer", "system"))
        assert users + systems + items["message"] == st["messages"], entry["file"]
        assert items["reasoning"] == st["reasoning"]
        tool_calls = sum(len(c.metadata.get("tool_calls") or []) for c in calls)
        assert tool_calls == st["tool_calls"]
        outputs = [c for c in calls if c.role == "code" and not c.metadata.get("missing_output")]
        assert len(outputs) == st["tool_outputs"]
        assert len(s.recorded_compactions) == st["compacted"]
        assert s.model == st["model"]
        assert s.meta["codex"]["cli_version"] == st["cli_version"]
        # the usage of every model response was found in a token_count event
        llms = [c for c in calls if c.role == "llm" and "compaction" not in c.metadata
                and c.metadata.get("role") != "system"]
        assert all("usage" in c.metadata for c in llms)


def test_message_list_formats_match_manifest(corpus_dir):
    man = _manifest(corpus_dir)
    for entry in man.values():
        st = entry["stats"]
        path = corpus_dir / entry["file"]
        if entry["format"] == "swe_agent_traj":
            (s,) = parse_path(path)
            c = s.counts()
            assert c["system"] == st["roles"].get("system", 0), entry["file"]
            assert c["user"] == st["roles"].get("user", 0), entry["file"]
            assert c["llm"] == st["roles"].get("assistant", 0), entry["file"]
            assert c["code"] == st["roles"].get("tool", 0), entry["file"]
            assert c["tool_calls"] == st["tool_calls"], entry["file"]
            assert s.meta.get("info", {}).get("exit_status") == st["exit_status"]
        elif entry["format"] == "mini_swe_agent_traj":
            assert detect(path) == "mini_swe_agent"
            (s,) = parse_path(path)
            c = s.counts()
            assert (c["system"], c["user"], c["llm"]) == (
                st["roles"]["system"], st["roles"]["user"], st["roles"]["assistant"])
            assert c["user"] + c["llm"] + c["system"] == st["messages"]
            assert any("command" in n.metadata for n in s.calls)
        elif entry["format"] == "hermes_session_export":
            sessions = parse_path(path)
            assert len(sessions) == st["sessions"]
            # the system_prompt node is not one of the exported messages
            messages = [n for s in sessions for n in s.calls if n.metadata.get("from_field") != "system_prompt"]
            assert len(messages) == st["messages"]
            tool_calls = sum(len(n.metadata.get("tool_calls") or []) for n in messages)
            assert tool_calls == st["tool_calls"]
            assert max(len([n for n in s.calls if n.metadata.get("from_field") != "system_prompt"])
                       for s in sessions) == st["max_messages"]
            ends = Counter(str(s.meta.get("end_reason")).replace("None", "null") for s in sessions)
            assert dict(ends) == st["end_reasons"]


def _openhands_counts(sessions) -> tuple[int, int]:
    """(events accounted for, tool calls)."""
    events = 0
    tool_calls = 0
    for s in sessions:
        for n in s.calls:
            events += len(n.metadata.get("source_event_ids") or [])
            events += len(n.metadata.get("events") or [])
            tool_calls += len(n.metadata.get("tool_calls") or [])
        events += len(s.meta.get("events_before_first_node") or [])
    return events, tool_calls


def _expected_observations(history: list[dict]) -> tuple[list, list, list]:
    """Each observation of one history, classified from the file alone: (ids answering
    a tool call, ids the model sees as a user message, ids kept only in metadata).

    An observation answers a tool call when its ``tool_call_metadata`` or its ``cause``
    (an action that has ``tool_call_metadata``) names a call not answered yet. One that
    answers no call is a message to the model when OpenHands shows its kind and it has
    text (e.g. ``error``: a function call that failed validation, so no action was
    recorded). The rest (``null`` answers, ``agent_state_changed``, ``recall``, empty
    ones) the model never sees as such: they are kept in ``metadata.events``.
    """
    call_of_action = {e["id"]: e["tool_call_metadata"]["tool_call_id"]
                      for e in history if "action" in e and e.get("tool_call_metadata")}
    answered: set = set()
    results, messages, kept = [], [], []
    for e in history:
        if "observation" not in e:
            continue
        tid = (e.get("tool_call_metadata") or {}).get("tool_call_id") or call_of_action.get(e.get("cause"))
        if tid is not None and tid in call_of_action.values() and tid not in answered:
            answered.add(tid)
            results.append(e["id"])
        elif (tid is None and e["observation"] in OBSERVATIONS_SHOWN_AS_MESSAGES
              and str(e.get("content") or "").strip()):
            messages.append(e["id"])
        else:
            kept.append(e["id"])
    return results, messages, kept


def test_openhands_every_event_accounted_for(corpus_dir):
    for entry in _manifest(corpus_dir).values():
        if entry["format"] != "openhands":
            continue
        st = entry["stats"]
        path = corpus_dir / entry["file"]
        assert detect(path) == "openhands"
        sessions = parse_path(path)
        raw = _entries(corpus_dir, entry)
        if "instances" in st:
            assert len(sessions) == st["instances"]
            histories = [r["history"] for r in raw]
            assert [len(h) for h in histories] == st["history_events"]
        else:
            histories = [raw]
            assert len(raw) == st["events"]
        all_events = [e for h in histories for e in h]
        assert sum("action" in e for e in all_events) == st.get("actions")
        events, tool_calls = _openhands_counts(sessions)
        # every event is a node, part of one, or kept in metadata.events: none dropped
        assert events == len(all_events), entry["file"]
        with_tool = [e for e in all_events if "action" in e and e.get("tool_call_metadata")]
        assert tool_calls == len(with_tool)
        # every observation of the manifest: a code node, a user message, or kept
        observations = 0
        for s, history in zip(sessions, histories, strict=True):
            results, messages, kept = _expected_observations(history)
            observations += len(results) + len(messages) + len(kept)
            code_ids = [n.metadata["source_event_ids"][0] for n in s.calls
                        if n.role == "code" and not n.metadata.get("missing_output")]
            assert code_ids == results, entry["file"]
            shown = [n for n in s.calls if n.role == "user" and "observation" in n.metadata]
            assert [n.metadata["source_event_ids"][0] for n in shown] == messages, entry["file"]
            in_events = {e.get("id") for n in s.calls for e in n.metadata.get("events") or []}
            in_events |= {e.get("id") for e in s.meta.get("events_before_first_node") or []}
            assert set(kept) <= in_events, entry["file"]
        assert observations == st["observations"], entry["file"]


def test_aider_sessions_and_user_lines(corpus_dir):
    for entry in _manifest(corpus_dir).values():
        if entry["format"] != "aider_chat_history_md":
            continue
        st = entry["stats"]
        sessions = parse_path(corpus_dir / entry["file"])
        assert len(sessions) == st["sessions"]
        def lines(kind: str, sessions=sessions) -> int:
            return sum(n.metadata["source_line_count"] for s in sessions for n in s.calls
                       if (n.role == "user") == (kind == "user") and "source_line_count" in n.metadata)

        assert lines("user") == st["user_lines"], entry["file"]
        assert lines("console") == st["tool_output_lines"], entry["file"]
        # every "Tokens:" report line is kept, in its console node, and each one that
        # follows a reply of its own is that reply's usage (the lines named agree)
        reports = [r for s in sessions for n in s.calls for r in n.metadata.get("token_reports", ())]
        assert len(reports) == st["token_report_lines"], entry["file"]
        given = {r["reply"]: r["line"] for r in reports if r["reply"] is not None}
        with_usage = {n.id: n.metadata["aider_token_line"] for s in sessions for n in s.calls
                      if "usage" in n.metadata}
        assert given == with_usage, entry["file"]
