"""``MemorySessionDB``: the message API of ``DagSessionDB`` over sessions kept in memory.

For a session nobody reads after the process: a replay of a recording under a
policy, a what-if, a test. The engine and the compaction persister speak to a
session through a few methods (``opctx.context.persistence.SessionStore``:
branch, HEAD, append, extra metadata, a transaction); a compaction-dense replay
spent most of each request in SQLite and JSON writing its scratch database, which
nothing ever searched or opened again. This object keeps the same rules without
either, so the engine behaves exactly as it does over ``DagSessionDB``:

* appending places a message as ``DagSessionDB`` does (the same functions:
  ``session_db._message_call``, ``store._attach``): without a ``parent_id`` key it
  continues HEAD, an explicit parent is kept, HEAD moves only if the message
  extends it; ``seq`` counts up per session; a batch is all or nothing;
* ``set_head(..., expected=...)`` is a compare-and-set raising ``HeadMoved``;
* ``transaction()`` makes the writes inside it one unit: an exception undoes every
  append, HEAD move and metadata change the block made. A lock held for the block
  keeps other threads' writes out of it; nothing outside the process can write.

What differs, on purpose: nothing is encoded, so a message's values are kept as
given, not as JSON gives them back. The dicts it returns share their values (a
content list, a tool call) with the message that was appended: the engine never
changes a message in place (it makes a changed copy), and neither may a caller.
It has no search, no token counts, no branch listing and no update in place: a
scratch session is only ever appended to.

>>> db = MemorySessionDB()
>>> sid = db.create_session(title="scratch")
>>> first = db.append_message(sid, {"role": "user", "content": "hi"})
>>> second = db.append_message(sid, {"role": "assistant", "content": "hello"})
>>> second["parent_id"] == first["id"], [m["content"] for m in db.get_branch(sid)]
(True, ['hi', 'hello'])
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .messages import call_to_message
from .nodes import Call
from .session_db import _ANY_HEAD, HeadMoved, _message_call
from .store import Clock, NodeNotFound, SessionNotFound, StoreError, _attach

__all__ = ["MemorySessionDB"]


def _copied(value: Any) -> Any:
    """A deep copy of metadata: JSON's containers copied by hand (``copy.deepcopy``'s
    memo and dispatch cost more than the copy), anything else by ``copy.deepcopy``."""
    if type(value) is dict:
        return {k: _copied(v) for k, v in value.items()}
    if type(value) is list:
        return [_copied(v) for v in value]
    if value is None or type(value) in (str, int, float, bool):
        return value
    return copy.deepcopy(value)


class _Session:
    """One session: its nodes by id and in seq order (a node's seq is its place in
    ``order``: nothing is ever removed but by a rollback, which cuts the end), HEAD and
    the extra metadata (replaced, never changed in place: a rollback restores the dict)."""

    __slots__ = ("calls", "order", "head", "extra")

    def __init__(self, extra: dict[str, Any]):
        self.calls: dict[str, Call] = {}
        self.order: list[str] = []
        self.head: str | None = None
        self.extra = extra


class MemorySessionDB:
    """The message API of ``DagSessionDB`` over in-memory sessions (module docstring)."""

    def __init__(self, *, clock: Clock = time.time):
        self.clock = clock
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.RLock()
        # inside a transaction: session id -> its state when the block first wrote to it
        self._undo: dict[str, tuple[int, str | None, dict[str, Any]]] | None = None

    def __repr__(self) -> str:
        return f"MemorySessionDB({len(self._sessions)} sessions)"

    def close(self) -> None:
        with self._lock:
            self._sessions.clear()

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
        """Create an empty session; returns its id. ``DagSessionDB``'s signature: the
        descriptive fields are accepted and not kept (nothing lists a scratch session)."""
        with self._lock:
            sid = session_id or uuid.uuid4().hex
            if sid in self._sessions:
                raise StoreError(f"session {sid!r} already exists")
            self._sessions[sid] = _Session(_copied(dict(extra_meta or {})))
            return sid

    def _session(self, session_id: str) -> _Session:
        try:
            return self._sessions[session_id]
        except (KeyError, TypeError):
            raise SessionNotFound(f"no session {session_id!r} in memory") from None

    def _writing(self, session_id: str) -> _Session:
        """The session, its state noted first inside a transaction (for ``transaction``'s undo)."""
        session = self._session(session_id)
        if self._undo is not None and session_id not in self._undo:
            self._undo[session_id] = (len(session.order), session.head, session.extra)
        return session

    def get_extra_meta(self, session_id: str) -> dict[str, Any]:
        return _copied(self._session(session_id).extra)

    def set_extra_meta(self, session_id: str, extra: dict[str, Any]) -> None:
        with self._lock:
            self._writing(session_id).extra = _copied(dict(extra))

    def update_extra_meta(self, session_id: str, **kv: Any) -> dict[str, Any]:
        with self._lock:
            session = self._writing(session_id)
            session.extra = {**session.extra, **_copied(kv)}
            return _copied(session.extra)

    @contextmanager
    def transaction(self) -> Iterator[MemorySessionDB]:
        """Every write inside the block is one unit: an exception undoes them all.
        A block inside another joins it."""
        with self._lock:
            if self._undo is not None:
                yield self
                return
            self._undo = {}
            try:
                yield self
            except BaseException:
                self._roll_back(self._undo)
                raise
            finally:
                self._undo = None

    def _roll_back(self, undo: dict[str, tuple[int, str | None, dict[str, Any]]]) -> None:
        for sid, (length, head, extra) in undo.items():
            session = self._sessions.get(sid)
            if session is None:
                continue
            for node_id in session.order[length:]:
                del session.calls[node_id]
            del session.order[length:]
            session.head, session.extra = head, extra

    # -- writing messages -----------------------------------------------------------------
    def append_message(self, session_id: str, msg: dict) -> dict[str, Any]:
        """Store one message (``DagSessionDB.append_message``'s rules)."""
        return self.append_messages(session_id, [msg])[0]

    def append_messages(self, session_id: str, msgs: Iterable[dict]) -> list[dict[str, Any]]:
        """Store several messages, all or nothing (``DagSessionDB.append_messages``'s rules)."""
        pairs = [_message_call(m, self.clock) for m in msgs]
        with self._lock:
            session = self._session(session_id)
            calls = session.calls
            seen: set[str] = set()
            for call, _ in pairs:
                if call.id in calls or call.id in seen:
                    raise StoreError(
                        f"duplicate node id {call.id!r}: already in session {session_id!r} "
                        "(nodes are append-only)"
                    )
                seen.add(call.id)
            session = self._writing(session_id)
            head, order = session.head, session.order
            for call, follow in pairs:
                head = _attach(call, follow, head)
                call.seq = len(order)  # a message carries no seq of its own (message_to_call)
                calls[call.id] = call
                order.append(call.id)
            session.head = head
        return [call_to_message(c) for c, _ in pairs]

    def set_head(self, session_id: str, msg_id: str | None, *, expected: Any = _ANY_HEAD) -> None:
        """Point HEAD at ``msg_id``; with ``expected``, a compare-and-set (``HeadMoved``)."""
        with self._lock:
            session = self._session(session_id)
            if msg_id is not None and msg_id not in session.calls:
                raise NodeNotFound(f"no node {msg_id!r} in session {session_id!r}")
            if expected is not _ANY_HEAD and session.head != expected:
                raise HeadMoved(session_id, expected, session.head)
            self._writing(session_id).head = msg_id

    # -- reading messages -----------------------------------------------------------------
    def get_head(self, session_id: str) -> str | None:
        return self._session(session_id).head

    def get_message(self, session_id: str, msg_id: str) -> dict[str, Any] | None:
        call = self._session(session_id).calls.get(msg_id)
        return call_to_message(call) if call is not None else None

    def get_messages(self, session_id: str) -> list[dict[str, Any]]:
        """Every message of the session (all branches), in seq order."""
        session = self._session(session_id)
        return [call_to_message(session.calls[i]) for i in session.order]

    def get_branch(self, session_id: str, head_msg_id: str | None = None) -> list[dict[str, Any]]:
        """The conversation ending at ``head_msg_id`` (default HEAD), root first."""
        with self._lock:
            session = self._session(session_id)
            node_id = head_msg_id if head_msg_id is not None else session.head
            if node_id is None:
                return []
            if node_id not in session.calls:
                raise NodeNotFound(f"no node {node_id!r} in session {session_id!r}")
            # as DagSessionDB's chain query: it ends where a parent is unknown, and a
            # cycle of explicit parents is an error
            chain: list[Call] = []
            while node_id is not None and node_id in session.calls:
                if len(chain) == len(session.calls):
                    raise StoreError(f"session {session_id!r}: predecessor cycle through {head_msg_id!r}")
                call = session.calls[node_id]
                chain.append(call)
                node_id = call.predecessor
        return [call_to_message(c) for c in reversed(chain)]
