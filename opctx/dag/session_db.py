"""``DagSessionDB``: the legacy message-tree API over the DAG store (spec §0.4).

Chat front ends, importers and the context layer speak *message dicts*
(``opctx.dag.messages``): ``{"id", "role", "content", "timestamp", "parent_id", ...}``.
This adapter stores each message as one ``Call`` through ``message_to_call`` /
``call_to_message`` (user -> ``user``, assistant -> ``llm``, tool -> ``code``,
system -> ``llm`` with ``metadata.role = "system"``; every other key rides in
``metadata`` and is hoisted back). ``parent_id`` is the ``predecessor`` edge,
stored in the ``nodes.predecessor`` column. ``SessionDB`` is an alias.

Every method takes the session id first. One connection is kept open for the
object's life, so ``DagSessionDB(":memory:")`` works.

Semantics, where the specification is open:

* ``append_message(sid, msg)``: a message *without* a ``parent_id`` key continues
  the conversation: its parent is HEAD, read inside the write transaction (two
  writers never both attach to a stale head). An explicit ``parent_id`` (even
  ``None``, a new root) is kept as given. HEAD then moves only if the message
  extends it (docs/design.md), so appending under an old message records a sibling
  branch without switching to it. A missing ``id`` is generated, a missing
  ``timestamp`` comes from the injectable ``clock``. Returns the stored dict.
* ``append_messages(sid, msgs)``: one transaction, all or nothing; messages
  without ``parent_id`` chain on the running HEAD, i.e. on the previous message
  of the batch when that one extended HEAD.
* ``get_branch(sid, head_msg_id=None)``: walk ``predecessor`` from the head
  (default HEAD) to the root and reverse; never sorted by timestamp.
* ``set_head(sid, msg_id, expected=...)`` is a compare-and-set: inside the write
  transaction HEAD must still be ``expected`` (``None`` included), else
  :class:`HeadMoved` is raised and nothing changes. Read-then-move code (a
  compaction that read the branch before a slow summary call) uses it so that
  a message another process appended meanwhile is never left off the branch.
* ``transaction()``: every write through this object inside the block is one
  transaction (``BEGIN IMMEDIATE``: the write lock is held from the start, so
  what the block reads stays true until it commits); see
  :func:`opctx.dag.store.transaction`.
* ``fork_from(sid, msg_id)`` and ``rewind_to(sid, msg_id)`` both only move HEAD
  (nothing is deleted; the old tail stays a branch). They differ in intent and
  return value: ``fork_from`` returns ``msg_id`` (the next append starts a sibling
  branch beside the old tail); ``rewind_to`` returns the branch as it now reads
  (root .. ``msg_id``), for a UI that redraws the conversation.
* ``delete_branch_tail(sid, msg_id)`` is the one destructive operation besides
  ``delete_session``: it deletes ``msg_id`` and every message below it (its
  predecessor subtree plus the calls those nodes made). A node has one
  predecessor, so nothing below ``msg_id`` is part of any other branch and every
  other branch stays whole. If HEAD was deleted it moves to ``msg_id``'s parent.
  Returns the deleted ids.
* ``list_branches(sid)``: one entry per leaf (a message nobody continues), in
  seq order: ``head_id``, ``length`` (messages root .. leaf), ``last_role``,
  ``preview`` (first 120 characters of its text), ``timestamp``, ``seq``,
  ``is_head`` (the leaf is HEAD) and ``contains_head`` (HEAD lies on it).
* ``get_branch_token_stats(sid, head_msg_id=None)``: counts and token estimates
  per role over the branch, by opctx's estimator (``estimate_message_tokens``: the
  one every budget uses) unless ``token_estimator=`` is passed to the constructor or
  the call; the dict's ``estimator`` names the one used. The substrate imports no
  module of the context layer (imports point downward): the default is the public
  name ``opctx.estimate_message_tokens``, resolved through the package root, which
  re-exports every layer and imports each lazily, when the first figure is asked
  for. Where even that is missing (the substrate vendored on its own), it falls back
  to ``ceil(len(text) / 4)``, named ``"len/4"``.
* ``search_messages(query, session_id=None, limit=20, raw=False)``: literal FTS5
  search (``GraphStore.search``), best first; each hit is the message dict plus
  ``session_id``, ``snippet`` and ``rank``.
* Unknown session: ``SessionNotFound`` (a ``KeyError``); ``get_session`` and
  ``get_message`` return ``None`` instead, being look-ups. Unknown message in
  an operation: ``NodeNotFound`` (a ``KeyError``). Unknown role: ``ValueError``.
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .messages import as_text, call_to_message, message_text, message_to_call
from .nodes import Call
from .session import DagSessionManager
from .store import (
    Clock,
    GraphStore,
    NodeNotFound,
    SessionNotFound,
    StoreError,
    _delete_session_rows,
    _guard,
    _search,
    _write,
    read_token_counts,
    write_token_counts,
)

__all__ = ["DagSessionDB", "SessionDB", "HeadMoved", "PREVIEW_CHARS"]

PREVIEW_CHARS = 120

_ANY_HEAD = object()  # set_head without a compare-and-set


class HeadMoved(StoreError):
    """``set_head(..., expected=...)`` found HEAD somewhere else: another writer moved it.

    ``expected`` is what the caller read, ``actual`` what HEAD is now.
    """

    def __init__(self, session_id: str, expected: str | None, actual: str | None):
        super().__init__(
            f"session {session_id!r}: HEAD is {actual!r}, not {expected!r} as read; "
            "another writer moved it (nothing was changed)"
        )
        self.session_id = session_id
        self.expected = expected
        self.actual = actual

# Message keys that live in a Call field, per message role; every other key is metadata.
_FIELD_OF = {
    "user": {"content": "output", "name": "name", "timestamp": "created_at", "parent_id": "predecessor"},
    "assistant": {"content": "output", "model": "name", "timestamp": "created_at", "parent_id": "predecessor"},
    "system": {"content": "output", "model": "name", "timestamp": "created_at", "parent_id": "predecessor"},
    "tool": {
        "content": "output", "name": "name", "arguments": "input",
        "timestamp": "created_at", "parent_id": "predecessor",
    },
}


def _message_call(msg: dict, clock: Clock) -> tuple[Call, bool]:
    """``(call, follows_head)``: the ``Call`` a message is stored as (a missing timestamp
    from ``clock``), and whether its parent is HEAD (no ``parent_id`` key: module docstring).
    ``opctx.dag.memory_db`` stores messages by the same rule."""
    if not isinstance(msg, dict):
        raise TypeError(f"a message is a dict, got {type(msg).__name__}")
    default_time = clock() if msg.get("timestamp") is None else None
    return message_to_call(msg, default_time), "parent_id" not in msg


def _message_role(call: Call) -> str:
    if call.role == "user":
        return "user"
    if call.role == "code":
        return "tool"
    return "system" if call.metadata.get("role") == "system" else "assistant"


class DagSessionDB:
    """The message-tree API (spec §0.4) over ``GraphStore``; see the module docstring."""

    def __init__(
        self,
        db_path: str | os.PathLike | sqlite3.Connection,
        *,
        clock: Clock = time.time,
        token_estimator: Callable[[dict], int] | None = None,
    ):
        self.token_estimator = token_estimator
        self.manager = DagSessionManager(db_path, clock=clock)
        self._conn = self.manager.connection
        self.db_path = self.manager.db_path
        self.clock = clock
        self._stores: dict[str, GraphStore] = {}

    # -- plumbing -------------------------------------------------------------------
    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def close(self) -> None:
        self._stores.clear()
        self.manager.close()

    def __enter__(self) -> DagSessionDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DagSessionDB({self.db_path!r})"

    @contextmanager
    def transaction(self) -> Iterator[DagSessionDB]:
        """Make every write through this object inside the block one transaction.

        The write lock is taken on entry, so nothing another connection or process
        writes can land between what the block reads and what it writes. Example,
        a read-then-write that cannot race::

            with db.transaction():
                branch = db.get_branch(sid)
                db.append_message(sid, {"role": "user", "content": f"{len(branch)} before"})
        """
        with self.manager.transaction():
            yield self

    def store(self, session_id: str) -> GraphStore:
        """The ``GraphStore`` of an existing session, on this object's connection."""
        store = self._stores.get(session_id)
        if store is None:
            store = GraphStore(self._conn, session_id, create=False, clock=self.clock)
            self._stores[session_id] = store
        return store

    def _store_checked(self, session_id: str) -> GraphStore:
        # A cached store may outlive its session (deleted by another process).
        store = self.store(session_id)
        if not self.manager.exists(session_id):
            self._stores.pop(session_id, None)
            raise SessionNotFound(f"no session {session_id!r} in {self.db_path}")
        return store

    # -- sessions ---------------------------------------------------------------------
    def create_session(
        self,
        title: str = "",
        model: str = "",
        agent_id: str = "",
        source: str = "",
        session_id: str | None = None,
        extra_meta: dict | None = None,
    ) -> str:
        """Create an empty session; returns its id."""
        session = self.manager.create(
            title=title, model=model, agent_id=agent_id, source=source,
            session_id=session_id, extra_meta=extra_meta,
        )
        self._stores[session.id] = session.store
        return session.id

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """The session as a dict (with ``message_count``), or ``None`` if unknown."""
        try:
            meta = self.manager.get(session_id)
        except SessionNotFound:
            return None
        out = meta.to_dict()
        out["message_count"] = self.store(session_id).count()
        return out

    def list_sessions(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every session as a dict, most recently updated first."""
        return [m.to_dict() for m in self.manager.list(limit)]

    def rename_session(self, session_id: str, title: str) -> None:
        self.manager.rename(session_id, title)

    def update_session(self, session_id: str, **fields: Any) -> None:
        """Change ``title`` / ``model`` / ``agent_id`` / ``source``."""
        self.manager.update_fields(session_id, **fields)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session and all its messages. Returns whether it existed."""
        self._stores.pop(session_id, None)
        with _guard(self._conn), _write(self._conn):
            return _delete_session_rows(self._conn, session_id)

    def get_extra_meta(self, session_id: str) -> dict[str, Any]:
        return self.manager.get_extra_meta(session_id)

    def set_extra_meta(self, session_id: str, extra: dict[str, Any]) -> None:
        self.manager.set_extra_meta(session_id, extra)

    def update_extra_meta(self, session_id: str, **kv: Any) -> dict[str, Any]:
        return self.manager.update_extra_meta(session_id, **kv)

    # -- writing messages -----------------------------------------------------------------
    def _to_call(self, msg: dict) -> tuple[Call, bool]:
        return _message_call(msg, self.clock)

    def append_message(self, session_id: str, msg: dict) -> dict[str, Any]:
        """Store one message; see the module docstring for parent and HEAD rules."""
        call, follow = self._to_call(msg)
        self._store_checked(session_id)._append([call], [follow])
        return call_to_message(call)

    def append_messages(self, session_id: str, msgs: Iterable[dict]) -> list[dict[str, Any]]:
        """Store several messages in one transaction (all or nothing)."""
        pairs = [self._to_call(m) for m in msgs]
        calls = [c for c, _ in pairs]
        self._store_checked(session_id)._append(calls, [f for _, f in pairs])
        return [call_to_message(c) for c in calls]

    def update_message(self, session_id: str, msg_id: str, **fields: Any) -> dict[str, Any]:
        """Change a stored message. Keys map as in ``message_to_call``; ``role``/``id`` are fixed.

        Non-core keys are merged into the message (``extra`` is replaced whole).
        """
        for key in ("id", "role"):
            if key in fields:
                raise ValueError(f"update_message cannot change {key!r}")
        store = self._store_checked(session_id)
        current = store.get(msg_id)
        if current is None:
            raise NodeNotFound(f"no message {msg_id!r} in session {session_id!r}")
        mapping = _FIELD_OF[_message_role(current)]
        call_fields: dict[str, Any] = {}
        meta: dict[str, Any] = {}
        for key, value in fields.items():
            if key in mapping:
                call_fields[mapping[key]] = value
            else:
                meta[key] = value
        if "name" in call_fields and call_fields["name"] is None:
            call_fields["name"] = ""
        updated = store.update(msg_id, metadata=meta, **call_fields)
        return call_to_message(updated)

    # -- reading messages -----------------------------------------------------------------
    def get_message(self, session_id: str, msg_id: str) -> dict[str, Any] | None:
        call = self._store_checked(session_id).get(msg_id)
        return call_to_message(call) if call is not None else None

    def get_messages(self, session_id: str) -> list[dict[str, Any]]:
        """Every message of the session (all branches), in seq order."""
        return [call_to_message(c) for c in self._store_checked(session_id).iter_nodes()]

    def get_head(self, session_id: str) -> str | None:
        return self._store_checked(session_id).head()

    def set_head(
        self, session_id: str, msg_id: str | None, *, expected: Any = _ANY_HEAD
    ) -> None:
        """Point HEAD at ``msg_id`` (``None`` clears it: the next message starts a new root).

        With ``expected`` (an id or ``None``) it is a compare-and-set: if HEAD is not
        ``expected`` inside the write transaction, :class:`HeadMoved` is raised and HEAD
        stays where it is.
        """
        store = self._store_checked(session_id)
        if expected is _ANY_HEAD:
            store.set_head(msg_id)
            return
        with _guard(self._conn), _write(self._conn):
            actual = store.head()
            if actual != expected:
                raise HeadMoved(session_id, expected, actual)
            store.set_head(msg_id)

    def get_branch(self, session_id: str, head_msg_id: str | None = None) -> list[dict[str, Any]]:
        """The conversation ending at ``head_msg_id`` (default HEAD), root first."""
        store = self._store_checked(session_id)
        head = head_msg_id if head_msg_id is not None else store.head()
        if head is None:
            return []
        return [call_to_message(c) for c in store.get_many(store.chain_ids(head))]

    def token_counts(self, session_id: str, estimator: str) -> dict[str, tuple[int, int, str]]:
        """``{message id: (tokens, thinking, shape)}`` stored for ``estimator`` (an identity
        string, ``opctx.context.token_counts``); uncounted messages are absent."""
        self._store_checked(session_id)
        return read_token_counts(self._conn, session_id, estimator)

    def put_token_counts(
        self, session_id: str, estimator: str, counted: Iterable[tuple[dict, int, int, str]]
    ) -> int:
        """Store ``(message, tokens, thinking, shape)`` counts made by ``estimator`` (``shape``:
        the context layer's encoding of the message's other facts); the number written.

        A compare-and-set inside the write transaction: a count lands only when the
        stored message still equals the one counted (another writer may have updated
        it since it was read), and an existing count is kept. A read-only database
        writes nothing (0).
        """
        self._store_checked(session_id)
        counted = [c for c in counted if c[0].get("id")]
        if not counted or getattr(self._conn, "opctx_readonly", False):
            return 0
        expected = {c[0]["id"]: c[0] for c in counted}
        store = self.store(session_id)

        def unchanged(ids: Sequence[str]) -> set[str]:
            current = store.get_many(list(ids))
            return {c.id for c in current if call_to_message(c) == expected.get(c.id)}

        rows = [(m["id"], t, k, shape) for m, t, k, shape in counted]
        return write_token_counts(self._conn, session_id, estimator, rows, unchanged=unchanged)

    def get_descendants(self, session_id: str, msg_id: str) -> list[dict[str, Any]]:
        """Every message reachable below ``msg_id`` through parent links, in seq order."""
        store = self._store_checked(session_id)
        if store.get(msg_id) is None:
            raise NodeNotFound(f"no message {msg_id!r} in session {session_id!r}")
        return [call_to_message(c) for c in store.get_many(store.descendant_ids(msg_id))]

    def fork_from(self, session_id: str, msg_id: str) -> str:
        """Make ``msg_id`` HEAD so the next append starts a new branch there. Returns it."""
        self._store_checked(session_id).set_head(msg_id)
        return msg_id

    def rewind_to(self, session_id: str, msg_id: str) -> list[dict[str, Any]]:
        """Make ``msg_id`` HEAD (nothing deleted); returns the branch as it now reads."""
        self._store_checked(session_id).set_head(msg_id)
        return self.get_branch(session_id, msg_id)

    def delete_branch_tail(self, session_id: str, msg_id: str) -> list[str]:
        """Delete ``msg_id`` and everything below it; returns the deleted ids (seq order)."""
        return self._store_checked(session_id).delete_subtree(msg_id)

    def list_branches(self, session_id: str) -> list[dict[str, Any]]:
        """One entry per leaf message; see the module docstring for the keys."""
        store = self._store_checked(session_id)
        edges = store.edges()
        pred_of = {nid: pred for nid, pred, _caller, _seq in edges}
        has_child = {pred for _, pred, _c, _s in edges if pred is not None}
        leaves = [nid for nid, _p, _c, _s in edges if nid not in has_child]
        depth: dict[str, int] = {}

        def depth_of(nid: str) -> int:
            path = []
            cur: str | None = nid
            while cur is not None and cur not in depth and cur in pred_of:
                path.append(cur)
                if len(path) > len(pred_of):
                    raise StoreError(f"session {session_id!r}: predecessor cycle through {nid!r}")
                cur = pred_of[cur]
            base = depth.get(cur, 0) if cur is not None else 0
            for node_id in reversed(path):
                base += 1
                depth[node_id] = base
            return depth[nid]

        head = store.head()
        children: dict[str, list[str]] = {}
        for nid, pred, _c, _s in edges:
            if pred is not None:
                children.setdefault(pred, []).append(nid)
        below_head: set[str] = set()
        stack = [head] if head is not None else []
        while stack:
            nid = stack.pop()
            if nid not in below_head:
                below_head.add(nid)
                stack.extend(children.get(nid, ()))
        out = []
        for call in store.get_many(leaves):
            msg = call_to_message(call)
            text = message_text(msg) or as_text(msg.get("content"))
            out.append(
                {
                    "head_id": call.id,
                    "length": depth_of(call.id),
                    "last_role": msg["role"],
                    "preview": text[:PREVIEW_CHARS],
                    "timestamp": call.created_at,
                    "seq": call.seq,
                    "is_head": call.id == head,
                    "contains_head": call.id in below_head,
                }
            )
        return out

    def get_branch_token_stats(
        self,
        session_id: str,
        head_msg_id: str | None = None,
        *,
        token_estimator: Callable[[dict], int] | None = None,
    ) -> dict[str, Any]:
        """Message counts and token estimates per role along a branch (default HEAD's).

        ``token_estimator`` (here or on the constructor) maps a message dict to a
        token count; without one opctx's ``estimate_message_tokens`` is used (the
        module docstring says how the substrate reaches it).
        """
        branch = self.get_branch(session_id, head_msg_id)
        estimate = token_estimator or self.token_estimator or _default_estimator()
        estimator = "len/4" if estimate is _len4_estimate else getattr(estimate, "__qualname__", repr(estimate))
        by_role: dict[str, dict[str, int]] = {}
        total = 0
        for msg in branch:
            tokens = estimate(msg)
            entry = by_role.setdefault(msg["role"], {"count": 0, "tokens": 0})
            entry["count"] += 1
            entry["tokens"] += tokens
            total += tokens
        return {
            "session_id": session_id,
            "head_id": branch[-1]["id"] if branch else None,
            "message_count": len(branch),
            "total_tokens": total,
            "by_role": by_role,
            "estimator": estimator,
        }

    # -- search -------------------------------------------------------------------------
    def search_messages(
        self,
        query: str,
        session_id: str | None = None,
        limit: int = 20,
        *,
        raw: bool = False,
    ) -> list[dict[str, Any]]:
        """Full-text search (literal unless ``raw``), best first, in one session or all."""
        if session_id is not None:
            self._store_checked(session_id)
        hits = _search(self._conn, query, limit, raw, session_id)
        out = []
        for hit in hits:
            call = self.store(hit.session_id).get(hit.node_id)
            if call is None:  # deleted between the two reads
                continue
            msg = call_to_message(call)
            msg["session_id"] = hit.session_id
            msg["snippet"] = hit.snippet
            msg["rank"] = hit.rank
            out.append(msg)
        return out


def _default_estimator() -> Callable[[dict], int]:
    """opctx's message estimator, through the package root's lazy public names (no
    import of the context layer from here); len/4 where it cannot be had."""
    try:
        import opctx

        return opctx.estimate_message_tokens
    except (ImportError, AttributeError):
        return _len4_estimate


def _len4_estimate(msg: dict) -> int:
    """The fallback when opctx's estimator is not there: a token per four characters."""
    text = message_text(msg) or as_text(msg.get("content"))
    return math.ceil(len(text) / 4)


SessionDB = DagSessionDB
