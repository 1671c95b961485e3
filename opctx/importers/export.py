"""Export a stored session: OpenAI chat-completions messages, or opctx's lossless JSONL.

``calls_to_openai(calls)``
    The conversation as the model saw it, in OpenAI's shape: ``system`` (system nodes,
    recorded and opctx compaction summaries included), ``user``, ``assistant`` (with
    ``tool_calls``: ``{"id", "type": "function", "function": {"name", "arguments":
    "<json text>"}}``) and ``tool`` (``tool_call_id``, ``content``). Display-only nodes
    (Claude Code hook/command lines, Aider console output) are left out: no model ever
    read them. A code node with no tool call id (an orphan result) gets
    ``call_<node id>``. A recorded tool call that never got a result stays in the export
    as recorded (a replay should see what happened); ``openai_problems(messages)`` lists
    such calls and orphan results for a caller that needs a strictly valid request.
``export_openai(db, session_id)``
    ``calls_to_openai`` over the active branch (the ``predecessor`` chain ending at HEAD).
``export_jsonl(db, session_id, out)``
    A header line ``{"opctx_export": 1, "session_id", "title", "model", "source",
    "head", "meta"}`` then every node of the session (all branches) as
    ``Call.to_dict()``, in ``seq`` order. ``opctx import`` reads it back (format
    ``opctx_jsonl``) with fresh node ids.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable
from typing import IO, Any

from opctx.dag.messages import as_text
from opctx.dag.nodes import Call

__all__ = [
    "calls_to_openai",
    "active_branch",
    "export_openai",
    "export_jsonl",
    "session_to_openai",
    "openai_problems",
    "session_info",
]


def active_branch(calls: Iterable[Call], head: str | None) -> list[Call]:
    """The ``predecessor`` chain ending at ``head``, root first."""
    by_id = {c.id: c for c in calls}
    out: list[Call] = []
    seen: set[str] = set()
    node = by_id.get(head) if head else None
    while node is not None and node.id not in seen:
        seen.add(node.id)
        out.append(node)
        node = by_id.get(node.predecessor) if node.predecessor else None
    out.reverse()
    return out


def calls_to_openai(calls: Iterable[Call], *, include_display_only: bool = False) -> list[dict]:
    out: list[dict] = []
    for c in calls:
        meta = c.metadata
        if meta.get("display_only") and not include_display_only:
            continue
        if c.role == "user":
            out.append({"role": "user", "content": as_text(c.output)})
        elif c.role == "code":
            tid = meta.get("tool_call_id") or f"call_{c.id}"
            msg = {"role": "tool", "tool_call_id": tid, "content": as_text(c.output)}
            if c.name:
                msg["name"] = c.name
            out.append(msg)
        elif meta.get("role") == "system":
            out.append({"role": "system", "content": as_text(c.output)})
        else:
            msg = {"role": "assistant", "content": as_text(c.output) or None}
            calls_meta = meta.get("tool_calls") or []
            if calls_meta:
                msg["tool_calls"] = [
                    {"id": tc.get("id"), "type": "function",
                     "function": {"name": tc.get("name", ""),
                                  "arguments": json.dumps(tc.get("arguments") or {}, ensure_ascii=False)}}
                    for tc in calls_meta
                ]
            out.append(msg)
    return out


def openai_problems(messages: list[dict]) -> list[str]:
    """Tool calls without a result and results without a call, as readable lines."""
    asked: dict[str, int] = {}
    answered: set[str] = set()
    problems = []
    for i, m in enumerate(messages):
        for tc in m.get("tool_calls") or ():
            asked[tc["id"]] = i
        if m.get("role") == "tool":
            if m["tool_call_id"] not in asked:
                problems.append(f"message {i}: tool result {m['tool_call_id']} answers no call")
            answered.add(m["tool_call_id"])
    problems += [f"message {i}: tool call {tid} has no result" for tid, i in asked.items()
                 if tid not in answered]
    return problems


def session_info(conn: sqlite3.Connection, session_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT id, title, model, source, extra_json, last_node_id, created_at, updated_at, agent_id "
        "FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        from opctx.dag.store import SessionNotFound

        raise SessionNotFound(f"no session {session_id!r}")
    try:
        extra = json.loads(row[4] or "{}")
    except ValueError:
        extra = {}
    return {"session_id": row[0], "title": row[1], "model": row[2], "source": row[3],
            "meta": extra, "head": row[5], "created_at": row[6], "updated_at": row[7],
            "agent_id": row[8]}


def _load(db: str | os.PathLike | sqlite3.Connection, session_id: str) -> tuple[list[Call], dict]:
    from opctx.dag.store import GraphStore

    with GraphStore(db, session_id, create=False) as store:
        graph = store.load()
        info = session_info(store.connection, session_id)
        info["head"] = store.head()
    return list(graph), info


def session_to_openai(db: Any, session_id: str, *, include_display_only: bool = False) -> list[dict]:
    calls, info = _load(db, session_id)
    return calls_to_openai(active_branch(calls, info["head"]), include_display_only=include_display_only)


export_openai = session_to_openai


def export_jsonl(db: Any, session_id: str, out: IO[str]) -> int:
    """Write the lossless export to ``out``; returns the number of nodes written."""
    calls, info = _load(db, session_id)
    header = {"opctx_export": 1, **{k: info[k] for k in ("session_id", "title", "model", "source", "head")},
              "meta": info["meta"]}
    out.write(json.dumps(header, ensure_ascii=False) + "\n")
    for c in calls:
        out.write(json.dumps(c.to_dict(), ensure_ascii=False) + "\n")
    return len(calls)
