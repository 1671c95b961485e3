"""The recorded history of a session as a replay sees it: one flat stream, compactions marked.

A session in the database is a DAG. After a compaction (opctx's own or a
recorded one, both laid out as docs/ARCHITECTURE.md "Compaction layout" says)
the active branch starts with copies of the protected head, then the summary
node ``S``, then copies of the kept tail; the folded originals live on the old
branch. A replay needs the opposite view: *everything that happened, once, in
order*, with the points where the recording compacted marked, so that any
strategy can be run over the uncompacted history.

``recorded_stream`` walks the active branch (HEAD back to the root, reversed)
and *expands* it:

* a copy (``metadata.copied_from``) stands for its original (followed through
  chains of copies); an original already emitted is not emitted again;
* a summary node stands for its ``folded_ids`` (expanded recursively, so a
  second compaction that folded the first summary yields the first one's folded
  originals too) and is recorded as a ``RecordedCompaction`` at the stream
  position right after what it folded;
* any other node is itself.

Nodes are converted to message dicts with ``opctx.dag.messages.call_to_message``.
Side branches (rewinds, forks) are not part of the stream: the stream is the
history that led to HEAD.

``RecordedHistory`` carries the stream, the recorded compactions, the session's
model and format, and is built from a database (``load_history(db_path,
session_id)``), from ``Call`` nodes (``from_calls``, e.g. an importer's parse
result, no database needed) or from a plain message list (``from_messages``).
``SessionSpec(db_path, session_id)`` is the picklable handle that sweeps pass to
worker processes.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opctx.dag.messages import call_to_message
from opctx.dag.nodes import Call

__all__ = [
    "SessionSpec",
    "RecordedCompaction",
    "RecordedHistory",
    "recorded_stream",
    "load_history",
    "as_history",
    "provider_prompt_tokens",
    "open_readonly",
]


@dataclass(frozen=True)
class SessionSpec:
    """A picklable reference to one session of one database."""

    db_path: str
    session_id: str

    def load(self) -> RecordedHistory:
        return load_history(self.db_path, self.session_id)

    @property
    def label(self) -> str:
        return f"{os.path.basename(self.db_path)}:{self.session_id}"


@dataclass
class RecordedCompaction:
    """A compaction the recording made, placed in the expanded stream."""

    stream_index: int  # index of the first stream message after the folded part
    node_id: str
    summary_text: str
    trigger: str | None = None
    pre_tokens: int | None = None
    reason: str | None = None
    folded: int = 0
    kept: int = 0
    protected: int = 0
    created_at: float | None = None
    recorded: bool = True


@dataclass
class RecordedHistory:
    """The expanded stream of a session plus what a replay needs to know about it."""

    messages: list[dict]
    compactions: list[RecordedCompaction] = field(default_factory=list)
    model: str = ""
    format: str = ""
    session_id: str = ""
    source: str = ""
    title: str = ""
    # the window the recording's agent reported (Codex ``model_context_window``), if any
    context_window: int | None = None

    def __post_init__(self) -> None:
        if self.context_window is None:
            self.context_window = _recorded_window(self.messages)
        # derived data shared by every replay of this history (texts, identifiers)
        self._derived: dict[str, Any] = {}

    def derived(self, key: str, compute: Any) -> Any:
        """``compute()`` once per history (replays of one history share it)."""
        if key not in self._derived:
            self._derived[key] = compute()
        return self._derived[key]

    def texts(self) -> list[str]:
        """``message_text`` of every stream message (cached)."""
        from opctx.dag.messages import message_text

        return self.derived("texts", lambda: [message_text(m) for m in self.messages])

    @classmethod
    def from_messages(cls, messages: Sequence[dict], *, model: str = "", session_id: str = "", fmt: str = "") -> RecordedHistory:
        """A history from a plain message list (no compactions unless summary messages are in it)."""
        msgs = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise TypeError(f"message {i} is a {type(m).__name__}, expected a message dict")
            if m.get("role") not in ("user", "assistant", "tool", "system"):
                raise ValueError(f"message {i} has unknown role {m.get('role')!r}")
            msgs.append(m)
        if not model:
            model = next((m.get("model") for m in msgs if m.get("role") == "assistant" and m.get("model")), "") or ""
        return cls(messages=msgs, model=model, session_id=session_id, format=fmt)

    @classmethod
    def from_calls(
        cls,
        calls: Iterable[Call],
        head: str | None = None,
        *,
        model: str = "",
        session_id: str = "",
        fmt: str = "",
        title: str = "",
    ) -> RecordedHistory:
        """A history from ``Call`` nodes and the head of the active branch (default: the last node)."""
        by_id = {c.id: c for c in calls}
        if not by_id:
            return cls(messages=[], model=model, session_id=session_id, format=fmt, title=title)
        if head is None:
            head = max(by_id.values(), key=lambda c: c.seq).id
        messages, compactions = recorded_stream(by_id, head)
        if not model:
            model = _majority_model(messages)
        return cls(messages, compactions, model=model, format=fmt, session_id=session_id, title=title)

    @property
    def n_requests(self) -> int:
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    def provider_usage(self, index: int) -> dict | None:
        usage = self.messages[index].get("usage")
        return usage if isinstance(usage, dict) else None


def _recorded_window(messages: Sequence[dict]) -> int | None:
    for m in reversed(messages):
        value = m.get("context_window") if m.get("role") == "assistant" else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _majority_model(messages: Sequence[dict]) -> str:
    counts: dict[str, int] = {}
    for m in messages:
        name = m.get("model")
        if m.get("role") == "assistant" and isinstance(name, str) and name and not name.startswith("<"):
            counts[name] = counts.get(name, 0) + 1
    return max(sorted(counts), key=lambda k: counts[k]) if counts else ""


def recorded_stream(nodes: dict[str, Call], head: str) -> tuple[list[dict], list[RecordedCompaction]]:
    """Expand the branch ending at ``head`` (see the module docstring)."""
    branch: list[Call] = []
    seen_chain: set[str] = set()
    node = nodes.get(head)
    if node is None:
        raise KeyError(f"head {head!r} is not a node of this session")
    while node is not None:
        if node.id in seen_chain:
            raise ValueError(f"predecessor cycle at node {node.id!r}")
        seen_chain.add(node.id)
        branch.append(node)
        node = nodes.get(node.predecessor) if node.predecessor else None
    branch.reverse()

    out: list[dict] = []
    emitted: set[str] = set()
    compactions: list[RecordedCompaction] = []
    expanding: set[str] = set()

    def original(call: Call) -> Call:
        hops = 0
        while call.metadata.get("copied_from") and call.metadata["copied_from"] in nodes and hops < 1000:
            call = nodes[call.metadata["copied_from"]]
            hops += 1
        return call

    def emit(call: Call) -> None:
        call = original(call)
        if call.id in emitted:
            return
        comp = call.metadata.get("compaction")
        if isinstance(comp, dict):
            if call.id in expanding:
                return
            expanding.add(call.id)
            for fid in comp.get("folded_ids") or ():
                folded = nodes.get(fid)
                if folded is not None:
                    emit(folded)
            emitted.add(call.id)
            compactions.append(
                RecordedCompaction(
                    stream_index=len(out),
                    node_id=call.id,
                    summary_text=_summary_text(call),
                    trigger=comp.get("trigger"),
                    pre_tokens=comp.get("pre_tokens"),
                    reason=comp.get("reason"),
                    folded=len(comp.get("folded_ids") or ()),
                    kept=len(comp.get("kept_ids") or ()),
                    protected=len(comp.get("protected_ids") or ()),
                    created_at=call.created_at,
                    recorded=bool(comp.get("recorded", False)),
                )
            )
            return
        emitted.add(call.id)
        out.append(call_to_message(call))

    for call in branch:
        emit(call)
    return out, compactions


def _summary_text(call: Call) -> str:
    text = call.output if isinstance(call.output, str) else json.dumps(call.output, ensure_ascii=False)
    prefix = "[Previous conversation summary]\n"
    return text[len(prefix):] if text.startswith(prefix) else text


def load_history(db_path: str | os.PathLike, session_id: str) -> RecordedHistory:
    """The expanded stream of ``session_id`` in the database at ``db_path`` (read-only)."""
    conn = open_readonly(db_path)
    try:
        row = conn.execute(
            "SELECT id, title, model, source, last_node_id FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            raise KeyError(f"{db_path}: no session {session_id!r}")
        _, title, model, source, head = row
        rows = conn.execute(
            "SELECT id, type, predecessor, caller, created_at, seq, data_json FROM nodes "
            "WHERE session_id = ? ORDER BY seq",
            (session_id,),
        ).fetchall()
    finally:
        conn.close()
    nodes = {}
    for nid, role, pred, caller, created_at, seq, data_json in rows:
        data = json.loads(data_json)
        nodes[nid] = Call(
            id=nid, seq=seq, created_at=created_at, role=role, name=data.get("name", ""),
            input=data.get("input"), output=data.get("output"), caller=caller, predecessor=pred,
            reads=data.get("reads") or [], metadata=data.get("metadata") or {},
        )
    fmt = source[len("import:"):] if source and source.startswith("import:") else (source or "")
    if head is None and nodes:
        head = max(nodes.values(), key=lambda c: c.seq).id
    hist = RecordedHistory.from_calls(
        nodes.values(), head, model="", session_id=session_id, fmt=fmt, title=title or ""
    )
    hist.model = model or hist.model
    hist.source = str(db_path)
    return hist


def as_history(obj: Any) -> RecordedHistory:
    """Anything a replay accepts, as a ``RecordedHistory``.

    A ``RecordedHistory``; a ``SessionSpec``; a ``(db_path, session_id)`` tuple;
    a list of message dicts; an importer's ``ImportedSession`` (anything with
    ``calls`` and ``head``).
    """
    if isinstance(obj, RecordedHistory):
        return obj
    if isinstance(obj, SessionSpec):
        return obj.load()
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[1], str):
        return load_history(obj[0], obj[1])
    if isinstance(obj, list):
        return RecordedHistory.from_messages(obj)
    if hasattr(obj, "calls") and hasattr(obj, "head"):
        return RecordedHistory.from_calls(
            obj.calls, obj.head, model=getattr(obj, "model", "") or "",
            session_id=getattr(obj, "session_id", "") or "", fmt=getattr(obj, "format", "") or "",
            title=getattr(obj, "title", "") or "",
        )
    raise TypeError(
        f"cannot replay a {type(obj).__name__}: pass a message list, a SessionSpec, "
        "(db_path, session_id), a RecordedHistory or an importer's ImportedSession"
    )


def provider_prompt_tokens(msg: dict, fmt: str = "", model: str = "") -> int | None:
    """The prompt size the provider reported for a recorded assistant message, or ``None``.

    opctx's importers store ``usage.input_tokens`` *exclusive* of cached input
    (Anthropic's convention; the Codex and OpenAI importers subtract the cached
    part), so the prompt is ``input + cache_read + cache_write``; an all-zero
    usage (Claude Code's ``<synthetic>`` messages) is ``None``. ``fmt`` and
    ``model`` are accepted for callers that know more; they do not change the rule.
    """
    usage = msg.get("usage")
    if not isinstance(usage, dict) or usage.get("input_tokens") is None:
        return None
    total = (
        int(usage.get("input_tokens") or 0)
        + int(usage.get("cache_read_tokens") or 0)
        + int(usage.get("cache_write_tokens") or 0)
    )
    # a real request is never empty: an all-zero usage is a client's synthetic message
    return total or None


def open_readonly(db_path: str | os.PathLike) -> sqlite3.Connection:
    """A read-only connection to an existing opctx database (``FileNotFoundError`` otherwise)."""
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"opctx database not found: {path}")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        conn.execute("SELECT id FROM sessions LIMIT 0")
        conn.execute("SELECT data_json FROM nodes LIMIT 0")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise ValueError(f"{path}: not an opctx database ({exc})") from None
    return conn
