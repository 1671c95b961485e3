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

The client that recorded a session and its version come from the importer's
session metadata: Claude Code lines carry ``version`` (kept once in
``meta.claude_code``; a line whose version differs keeps it in
``metadata.source_fields``, so ``version_at(index)`` follows an upgrade in the
middle of a session), Codex rollouts carry ``session_meta.cli_version`` (kept in
``meta.codex``). ``RecordedHistory.client`` is ``"claude-code"``, ``"codex"`` or
``""``; ``client_version`` is ``None`` where the recording does not say. The
client presets (``opctx.lab.presets``) resolve their trigger from them.

``resume_after(k)`` is the recording as the real agent continued it after its
``k``-th compaction: the protected head, the recorded summary, then the stream
from that point on (the kept tail is already there: kept copies resolve to
originals emitted right after the compaction point). Resynchronised fidelity
(``opctx.lab.fidelity``) replays each such segment on its own, so one early miss
does not decide every later compaction. ``original_index(j)`` maps a segment's
message index back to the stream of the whole session.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opctx.dag.messages import call_to_message
from opctx.dag.nodes import Call

__all__ = [
    "CLIENT_OF_FORMAT",
    "SessionSpec",
    "RecordedCompaction",
    "RecordedHistory",
    "recorded_stream",
    "load_history",
    "as_history",
    "recorded_branches",
    "provider_prompt_tokens",
    "parse_version",
    "shared_key_roots",
    "open_readonly",
]


# importer format -> the client preset family that models it
CLIENT_OF_FORMAT = {"claude_code": "claude-code", "claude_code_hook": "claude-code", "codex": "codex"}


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
    # ids of the stream messages the compaction kept verbatim (copies resolved to originals)
    kept_ids: list[str] = field(default_factory=list)
    protected_ids: list[str] = field(default_factory=list)
    # the recording's own ids of the compaction (Claude Code boundary / summary line uuids)
    source_ids: list[str] = field(default_factory=list)
    # where pre_tokens comes from: "client" (the client's own figure, Claude Code
    # preTokens) or "provider" (the importer's total of the last usage report, Codex)
    pre_tokens_source: str | None = None
    # the summary node as the user message the agent saw after the compaction
    summary_message: dict | None = None


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
    # the importer's session metadata (``meta.claude_code``, ``meta.codex``, source ids ...)
    meta: dict = field(default_factory=dict)
    # a segment made by ``resume_after``: the stream index of its first recorded message and
    # how many messages (protected head + summary) precede it
    stream_start: int = 0
    prefix_len: int = 0
    # compactions another history of the same session already holds (a branch that shares
    # them with the main one): they stay in the stream but are not scored twice
    scored_elsewhere: frozenset = frozenset()

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
        meta: dict | None = None,
    ) -> RecordedHistory:
        """A history from ``Call`` nodes and the head of the active branch (default: the last node)."""
        meta = dict(meta or {})
        by_id = {c.id: c for c in calls}
        if not by_id:
            return cls(messages=[], model=model, session_id=session_id, format=fmt, title=title, meta=meta)
        if head is None:
            head = max(by_id.values(), key=lambda c: c.seq).id
        messages, compactions = recorded_stream(by_id, head)
        if not model:
            model = _majority_model(messages)
        return cls(messages, compactions, model=model, format=fmt, session_id=session_id, title=title, meta=meta)

    @property
    def n_requests(self) -> int:
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def client(self) -> str:
        """The agent that recorded the session: ``"claude-code"``, ``"codex"`` or ``""``."""
        return CLIENT_OF_FORMAT.get(self.format, "")

    @property
    def client_version(self) -> str | None:
        """The client version the recording names (session level), ``None`` if it names none."""
        for key, field_name in (("claude_code", "version"), ("codex", "cli_version")):
            block = self.meta.get(key)
            value = block.get(field_name) if isinstance(block, dict) else None
            if isinstance(value, str) and value.strip():
                return value.strip()
        return None

    def version_at(self, index: int) -> str | None:
        """The client version in force at stream ``index`` (a line that names another one wins)."""
        for j in range(min(index, len(self.messages) - 1), -1, -1):
            fields_ = self.messages[j].get("source_fields")
            value = fields_.get("version") if isinstance(fields_, dict) else None
            if isinstance(value, str) and value.strip():
                return value.strip()
        return self.client_version

    @property
    def source_session_ids(self) -> list[str]:
        """The recording's own session ids (a session saved in two files shares them)."""
        ids = self.meta.get("source_session_ids")
        out = [str(i) for i in ids if i] if isinstance(ids, list) else []
        for key, field_name in (("claude_code", "sessionId"), ("codex", "id")):
            block = self.meta.get(key)
            value = block.get(field_name) if isinstance(block, dict) else None
            if value and str(value) not in out:
                out.append(str(value))
        return out

    def original_index(self, index: int) -> int | None:
        """The stream index of the whole session that message ``index`` of this history is.

        ``None`` for the protected head and summary a ``resume_after`` segment starts with.
        """
        if index < self.prefix_len:
            return None
        return self.stream_start + index - self.prefix_len

    def resume_after(self, k: int) -> RecordedHistory:
        """The recording as the agent continued it after recorded compaction ``k``.

        Messages: the compaction's protected head, its summary (a user message, as
        the clients send it), then the stream from the compaction point on. Later
        recorded compactions keep their places (shifted), so a replay with
        ``feed_usage=True`` stops feeding recorded counts where the recording
        compacted again. ``original_index`` maps the segment back.
        """
        comp = self.compactions[k]
        start = comp.stream_index
        by_id = {m.get("id"): m for m in self.messages[:start]}
        head = [by_id[i] for i in comp.protected_ids if i in by_id]
        summary = dict(comp.summary_message) if comp.summary_message else {
            "id": comp.node_id, "role": "user", "content": comp.summary_text,
        }
        prefix = [*head, summary]
        shift = len(prefix) - start
        later = [
            RecordedCompaction(**{**c.__dict__, "stream_index": c.stream_index + shift})
            for c in self.compactions[k + 1:]
        ]
        segment = RecordedHistory(
            messages=prefix + self.messages[start:],
            compactions=later,
            model=self.model,
            format=self.format,
            session_id=self.session_id,
            source=self.source,
            title=self.title,
            context_window=self.context_window,
            meta=self.meta,
            stream_start=self.original_index(start) or 0,
            prefix_len=len(prefix),
            scored_elsewhere=self.scored_elsewhere,
        )
        return segment


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

    def original_id(node_id: str) -> str:
        node = nodes.get(node_id)
        return original(node).id if node is not None else node_id

    # the originals a later summary protects (Codex keeps the user messages around its
    # summary): the summary emits them in their place among what it folded, not before it
    position = {nid: k for k, nid in enumerate(nodes)}  # creation order (dict order, or seq from a database)
    first_seen: dict[str, int] = {}

    def first_position(call: Call) -> int:
        """Where the earliest message a node stands for was created (a summary: what it folded)."""
        call = original(call)
        if call.id not in first_seen:
            first_seen[call.id] = position.get(call.id, 0)  # a cycle stops here
            comp = call.metadata.get("compaction")
            if isinstance(comp, dict):
                inner = [nodes[i] for i in (*(comp.get("folded_ids") or ()), *(comp.get("protected_ids") or ()))
                         if i in nodes]
                first_seen[call.id] = min((first_position(c) for c in inner), default=first_seen[call.id])
        return first_seen[call.id]
    protected_later = {
        original_id(pid) for node in branch if isinstance(node.metadata.get("compaction"), dict)
        for pid in node.metadata["compaction"].get("protected_ids") or ()
    }

    def emit(call: Call, *, from_summary: bool = False) -> None:
        call = original(call)
        if call.id in emitted or (call.id in protected_later and not from_summary):
            return
        comp = call.metadata.get("compaction")
        if isinstance(comp, dict):
            if call.id in expanding:
                return
            expanding.add(call.id)
            inner = [nodes[i] for i in (*(comp.get("folded_ids") or ()), *(comp.get("protected_ids") or ()))
                     if i in nodes]
            for folded in sorted(inner, key=first_position):
                emit(folded, from_summary=True)
            emitted.add(call.id)
            source_ids = call.metadata.get("source_ids")
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
                    kept_ids=[original_id(i) for i in comp.get("kept_ids") or ()],
                    protected_ids=[original_id(i) for i in comp.get("protected_ids") or ()],
                    source_ids=[str(i) for i in source_ids if i] if isinstance(source_ids, list) else [],
                    pre_tokens_source=None if comp.get("pre_tokens") is None
                    else "provider" if comp.get("pre_tokens_usage") is not None else "client",
                    # the clients send their summary as a user message
                    summary_message={**call_to_message(call), "role": "user"},
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


def _load_nodes(db_path: str | os.PathLike, session_id: str) -> tuple[dict[str, Call], str | None, dict, tuple]:
    """The nodes of a session (creation order), its head, its metadata and its row."""
    conn = open_readonly(db_path)
    try:
        row = conn.execute(
            "SELECT id, title, model, source, last_node_id, extra_json FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            raise KeyError(f"{db_path}: no session {session_id!r}")
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
    head = row[4]
    if head is None and nodes:
        head = max(nodes.values(), key=lambda c: c.seq).id
    try:
        meta = json.loads(row[5] or "{}")
    except ValueError:
        meta = {}
    return nodes, head, meta if isinstance(meta, dict) else {}, row


def load_history(db_path: Any, session_id: str | None = None, head: str | None = None) -> RecordedHistory:
    """The expanded stream of ``session_id`` in the database at ``db_path`` (read-only);
    ``head``: another leaf than the session's HEAD (``recorded_branches``).

    ``load_history(db, sid)`` and ``load_history((db, sid))`` are the same call: the pair
    is what ``replay((db, sid))`` and ``sweep`` take, so either spelling works everywhere.
    """
    if session_id is None:
        if not (isinstance(db_path, tuple) and len(db_path) == 2):
            raise TypeError("load_history needs (db_path, session_id), as two arguments or one pair")
        db_path, session_id = db_path
    nodes, main_head, meta, row = _load_nodes(db_path, session_id)
    _, title, model, source, _, _ = row
    fmt = source[len("import:"):] if source and source.startswith("import:") else (source or "")
    hist = RecordedHistory.from_calls(
        nodes.values(), head or main_head, model="", session_id=session_id, fmt=fmt, title=title or "", meta=meta,
    )
    hist.model = model or hist.model
    hist.source = str(db_path)
    return hist


def _branch_leaves(nodes: dict[str, Call], head: str, known: set[str]) -> list[str]:
    """Leaves other than ``head`` whose branch holds a recorded compaction ``known`` (the ones the
    main history holds, expanded) does not: the folded originals a summary left behind end in
    leaves too, but what they hold the main history already holds."""
    def chain(leaf: str) -> list[str]:
        out, seen, node = [], set(), nodes.get(leaf)
        while node is not None and node.id not in seen:
            seen.add(node.id)
            out.append(node.id)
            node = nodes.get(node.predecessor) if node.predecessor else None
        return out

    def compactions(ids: Iterable[str]) -> set[str]:
        return {i for i in ids if isinstance(nodes[i].metadata.get("compaction"), dict)
                and nodes[i].metadata["compaction"].get("recorded")}

    parents = {n.predecessor for n in nodes.values() if n.predecessor}
    leaves = [nid for nid in nodes if nid not in parents and nid != head]
    return [leaf for leaf in leaves if compactions(chain(leaf)) - known]


def recorded_branches(obj: Any) -> list[RecordedHistory]:
    """The history to HEAD, then one per other branch that holds a recorded compaction of its own.

    A user who resumes a session from a point before a compaction leaves the branch that
    compacted behind and starts another from the earlier point (the importer builds each
    from its real parent); both are what the client did. Each extra branch is named
    ``<session>#branch-<n>``; compactions it shares with an earlier history are in its
    ``scored_elsewhere`` (scored once). A ``RecordedHistory`` or a message list is its own
    only branch.
    """
    if isinstance(obj, SessionSpec) or (isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[1], str)):
        db_path, session_id = (obj.db_path, obj.session_id) if isinstance(obj, SessionSpec) else obj
        nodes, head, _, _ = _load_nodes(db_path, session_id)
        main = load_history(db_path, session_id)

        def make(leaf: str) -> RecordedHistory:
            return load_history(db_path, session_id, head=leaf)
    elif hasattr(obj, "calls") and hasattr(obj, "head") and not isinstance(obj, RecordedHistory):
        nodes = {c.id: c for c in obj.calls}
        head = obj.head if obj.head in nodes else (max(nodes.values(), key=lambda c: c.seq).id if nodes else None)
        main = as_history(obj)

        def make(leaf: str) -> RecordedHistory:
            return RecordedHistory.from_calls(
                obj.calls, leaf, model=getattr(obj, "model", "") or "", session_id=getattr(obj, "session_id", "") or "",
                fmt=getattr(obj, "format", "") or "", title=getattr(obj, "title", "") or "",
                meta=getattr(obj, "meta", None))
    else:
        return [as_history(obj)]
    out = [main]
    if head is None:
        return out
    seen = {c.node_id for c in main.compactions}
    for n, leaf in enumerate(_branch_leaves(nodes, head, set(seen)), start=1):
        branch = make(leaf)
        branch.session_id = f"{branch.session_id}#branch-{n}"
        branch.scored_elsewhere = frozenset(c.node_id for c in branch.compactions if c.node_id in seen)
        seen.update(c.node_id for c in branch.compactions)
        out.append(branch)
    return out


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
            title=getattr(obj, "title", "") or "", meta=getattr(obj, "meta", None),
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


def shared_key_roots(keys_per_item: Sequence[Iterable[str]]) -> list[int]:
    """For items that each carry keys, the index of a representative item per item: items
    sharing a key, directly or through others, get the same one (union-find). Recordings
    left out together (a session saved twice, two files sharing a boundary) are grouped so.

    >>> shared_key_roots([["a"], ["b"], ["a", "c"], ["c"]])
    [0, 1, 0, 0]
    """
    parent = list(range(len(keys_per_item)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, keys in enumerate(keys_per_item):
        for key in keys:
            if key in owner:
                parent[find(i)] = find(owner[key])
            else:
                owner[key] = i
    return [find(i) for i in range(len(keys_per_item))]


_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(version: Any) -> tuple[int, int, int] | None:
    """A client version as a comparable tuple: ``"2.0.76"`` -> ``(2, 0, 76)``; anything
    without a leading ``N.N`` -> ``None``.

    >>> parse_version("2.1.9"), parse_version("v0.77"), parse_version(None)
    ((2, 1, 9), (0, 77, 0), None)
    """
    if not isinstance(version, str):
        return None
    m = _VERSION.match(version)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


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
