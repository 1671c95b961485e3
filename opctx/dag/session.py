"""Sessions: ``SessionMeta``, ``DagSession`` and ``DagSessionManager`` (spec §0.3).

A ``DagSession`` bundles everything about one conversation: its metadata row
(``SessionMeta``), the in-memory ``Graph``, the ``GraphStore`` that persists it,
and its ``DagRuntime`` (``runtime``), whether the session was just created or
loaded back. ``DagRuntime.for_session(session, provider_call)`` puts one there;
otherwise the first read of ``session.runtime`` makes one over the session's graph
and store, calling the manager's ``provider_call`` (``DagSessionManager(db,
provider_call=...)``). Without a provider it still records user messages and
function calls; calling the model raises ``ProviderError`` saying how to give it one.

``DagSessionManager(db_path)`` manages every session of one SQLite file. It keeps
one connection open for its whole life, which is what makes ``":memory:"`` work:
every session it creates or loads shares that connection.

Choices where the specification is open:

* ``list()`` returns ``SessionMeta`` newest ``updated_at`` first; ``updated_at``
  moves on every append, update, head move, rename and extra-meta change. Ties
  (same clock reading) are broken by ``created_at`` then id, newest first.
* ``delete(id)`` removes the session row, every node and every FTS row in one
  transaction and returns nothing; an unknown id is ``SessionNotFound``.
* ``extra_meta`` is a JSON object per session (``sessions.extra_json``).
  ``set_extra_meta`` replaces it, ``update_extra_meta(**kv)`` merges keys inside
  one write transaction (so two processes updating different keys both win), and
  returns the merged dict. A key set to ``None`` is stored as ``null``, not removed;
  ``update_extra_meta`` removes keys listed in ``remove=(...)``.
* ``DagSession.append`` writes to the store first and then adds the node to the
  graph, so the graph indexes the seq the store allocated (spec: seq is assigned
  inside the write transaction).
* Every timestamp comes from the manager's injectable ``clock``.
* **Atomic writes across calls.** ``create(..., nodes=[...], head=...)`` writes a
  session together with its nodes and HEAD in one transaction, and
  ``with manager.transaction():`` makes any sequence of writes (delete, create,
  ``append_many``, ``set_head``, extra-meta changes, through the manager or its
  stores) one transaction: a failure anywhere leaves no trace of the block. An
  importer needs no "incomplete" marker. ``DagSession.append`` / ``append_many``
  add to the in-memory graph after the store write, so a graph used inside a
  block that rolls back must be discarded (``reload()``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .nodes import Call, Graph
from .store import (
    _DUMPS_KW,
    Clock,
    GraphStore,
    SessionNotFound,
    StoreError,
    _delete_session_rows,
    _guard,
    _insert_session,
    _session_row,
    _write,
    connect,
    transaction,
)

__all__ = ["SessionMeta", "DagSession", "DagSessionManager", "new_session_id"]


class _Unset:
    """Type of the "argument not given" marker (``head=None`` means "clear HEAD")."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


def new_session_id() -> str:
    """A fresh session id: ``s_`` + 16 hex digits."""
    return f"s_{uuid.uuid4().hex[:16]}"


@dataclass
class SessionMeta:
    """One row of the ``sessions`` table. ``head`` is ``last_node_id``."""

    id: str
    title: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    model: str = ""
    agent_id: str = ""
    source: str = ""
    extra_meta: dict[str, Any] = field(default_factory=dict)
    head: str | None = None

    @classmethod
    def from_row(cls, row: tuple) -> SessionMeta:
        sid, title, created_at, updated_at, model, agent_id, source, extra_json, head = row[:9]
        return cls(
            id=sid,
            title=title,
            created_at=created_at,
            updated_at=updated_at,
            model=model,
            agent_id=agent_id,
            source=source,
            extra_meta=_load_extra(extra_json, sid),
            head=head,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "model": self.model,
            "agent_id": self.agent_id,
            "source": self.source,
            "extra_meta": dict(self.extra_meta),
            "head": self.head,
        }


def _load_extra(extra_json: str | None, session_id: str) -> dict[str, Any]:
    if not extra_json:
        return {}
    try:
        value = json.loads(extra_json)
    except ValueError as e:
        raise StoreError(f"session {session_id!r}: extra_json is not valid JSON ({e})") from None
    return value if isinstance(value, dict) else {"value": value}


def _dump_extra(extra: dict[str, Any], session_id: str) -> str:
    if not isinstance(extra, dict):
        raise TypeError(f"extra meta must be a dict, got {type(extra).__name__}")
    try:
        return json.dumps(extra, **_DUMPS_KW)
    except (TypeError, ValueError) as e:
        raise StoreError(f"session {session_id!r}: extra meta is not JSON-serialisable ({e})") from None


def _no_provider(*_args: Any, **_kwargs: Any) -> Any:
    """The provider of a session runtime made without one: says how to give it one."""
    from .providers import ProviderError

    raise ProviderError(
        "this session's runtime has no provider: pass provider_call= to DagSessionManager, "
        "or call DagRuntime.for_session(session, provider_call)")


class DagSession:
    """One conversation: ``meta`` + ``graph`` + ``store`` + ``runtime`` (spec §0.3)."""

    def __init__(
        self, meta: SessionMeta, graph: Graph, store: GraphStore, runtime: Any = None, *,
        provider_call: Any = None, clock: Clock = time.time,
    ) -> None:
        self.meta = meta
        self.graph = graph
        self.store = store
        self._runtime = runtime
        self._provider_call = provider_call
        self._clock = clock

    @property
    def runtime(self) -> Any:
        """The session's ``DagRuntime``, made on first use when none was given (module docstring)."""
        if self._runtime is None:
            from .runtime import DagRuntime

            DagRuntime.for_session(self, self._provider_call or _no_provider, clock=self._clock)
        return self._runtime

    @runtime.setter
    def runtime(self, value: Any) -> None:
        self._runtime = value

    @property
    def id(self) -> str:
        return self.meta.id

    def head(self) -> str | None:
        """HEAD as stored now (another process may have moved it)."""
        head = self.store.head()
        self.meta.head = head
        return head

    def set_head(self, node_id: str | None) -> None:
        self.store.set_head(node_id)
        self.meta.head = node_id

    def append(self, node: Call, *, follow_head: bool = False) -> Call:
        """Persist ``node`` (seq allocated by the store), then add it to the graph."""
        self.store.append(node, follow_head=follow_head)
        self.graph.add(node)
        return node

    def append_many(self, nodes: Iterable[Call]) -> list[Call]:
        stored = self.store.append_many(nodes)
        for node in stored:
            self.graph.add(node)
        return stored

    def update(self, node_id: str, **fields: Any) -> Call:
        """Update the stored node and the graph's copy with the same ``Graph.update`` rules."""
        self.store.update(node_id, **fields)
        if node_id in self.graph:
            return self.graph.update(node_id, **fields)
        return self.store.get(node_id)  # type: ignore[return-value]

    def reload(self) -> Graph:
        """Re-read the graph from the database (picks up other writers' nodes)."""
        self.graph = self.store.load()
        self.meta.head = self.store.head()
        return self.graph

    def __repr__(self) -> str:
        return f"DagSession({self.meta.id!r}, title={self.meta.title!r}, {len(self.graph)} nodes)"


class DagSessionManager:
    """Every session of one SQLite file (spec §0.3). Keeps one connection open."""

    def __init__(self, db_path: str | os.PathLike | sqlite3.Connection, *, clock: Clock = time.time,
                 provider_call: Any = None):
        if isinstance(db_path, sqlite3.Connection):
            if not hasattr(db_path, "opctx_lock"):
                raise TypeError("pass a connection made by opctx.dag.store.connect(), or a path")
            self._conn = db_path
            self._owns_conn = False
        else:
            self._conn = connect(db_path)
            self._owns_conn = True
        self.db_path: str = self._conn.opctx_path  # type: ignore[attr-defined]
        self.clock = clock
        # the provider of the runtime of every session this manager creates or loads
        self.provider_call = provider_call

    # -- plumbing ------------------------------------------------------------------
    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def close(self) -> None:
        if self._owns_conn:
            self._conn.close()
            self._owns_conn = False

    def __enter__(self) -> DagSessionManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def store(self, session_id: str) -> GraphStore:
        """A ``GraphStore`` on this manager's connection for an existing session."""
        return GraphStore(self._conn, session_id, create=False, clock=self.clock)

    def _row(self, session_id: str) -> tuple:
        row = _session_row(self._conn, session_id)
        if row is None:
            raise SessionNotFound(f"no session {session_id!r} in {self.db_path}")
        return row

    # -- API -----------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[DagSessionManager]:
        """Every write of this manager (and of its stores) inside the block is one transaction.

        Commit on normal exit; on an exception everything is rolled back (no
        session, node, HEAD or extra-meta change of the block survives, and no
        other reader ever saw it) and the exception propagates. See
        :func:`opctx.dag.store.transaction` for the details (nesting, the
        Python side). Example, an all-or-nothing re-import::

            with mgr.transaction():
                if mgr.exists(sid):
                    mgr.delete(sid)
                mgr.create(title=t, session_id=sid, extra_meta=meta, nodes=calls, head=head_id)
        """
        with transaction(self._conn):
            yield self

    def create(
        self,
        title: str = "",
        model: str = "",
        agent_id: str = "",
        source: str = "",
        session_id: str | None = None,
        extra_meta: dict | None = None,
        *,
        nodes: Iterable[Call] | None = None,
        head: str | None | _Unset = _UNSET,
    ) -> DagSession:
        """A new session, created atomically with its first ``nodes``.

        The session row, the ``nodes`` (as ``GraphStore.append_many``: seq
        allocated, HEAD moved by the usual rule) and, when given, ``head``
        (``set_head``; ``None`` clears it) are written in one transaction: if
        any part fails (duplicate node id, a value that is not JSON, an unknown
        ``head``, an id that already exists), the database holds no trace of the
        session. Inside :meth:`transaction` it joins the enclosing transaction.
        The returned session's graph holds ``nodes`` (the same ``Call`` objects,
        with their seq), built without re-reading the database.
        """
        sid = session_id or new_session_id()
        batch = list(nodes) if nodes is not None else []
        with transaction(self._conn):
            if _session_row(self._conn, sid) is not None:
                raise StoreError(f"session {sid!r} already exists in {self.db_path}")
            _insert_session(
                self._conn, sid, self.clock(), title=title, model=model, agent_id=agent_id,
                source=source, extra_meta=extra_meta,
            )
            store = self.store(sid)
            store.append_many(batch)
            if not isinstance(head, _Unset):
                store.set_head(head)
            meta = SessionMeta.from_row(self._row(sid))
        graph = Graph()
        for node in batch:
            graph.add(node)
        return DagSession(meta, graph, store, provider_call=self.provider_call, clock=self.clock)

    def get(self, session_id: str) -> SessionMeta:
        """The metadata of one session (``SessionNotFound`` if unknown)."""
        with _guard(self._conn):
            return SessionMeta.from_row(self._row(session_id))

    def load(self, session_id: str, *, lazy: bool = True) -> DagSession:
        """The session with its whole graph loaded (see ``GraphStore.load``)."""
        store = self.store(session_id)
        meta = self.get(session_id)
        return DagSession(meta, store.load(lazy=lazy), store, provider_call=self.provider_call, clock=self.clock)

    def list(self, limit: int | None = None) -> list[SessionMeta]:
        """Every session, most recently updated first."""
        sql = (
            "SELECT id, title, created_at, updated_at, model, agent_id, source, extra_json, "
            "last_node_id FROM sessions ORDER BY updated_at DESC, created_at DESC, id DESC"
        )
        params: tuple = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (int(limit),)
        with _guard(self._conn):
            rows = self._conn.execute(sql, params).fetchall()
        return [SessionMeta.from_row(r) for r in rows]

    def exists(self, session_id: str) -> bool:
        # not the whole row: its extra_json holds the last summary text, and every write
        # through DagSessionDB checks that its session still exists
        with _guard(self._conn):
            return self._conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is not None

    def rename(self, session_id: str, title: str) -> None:
        with _guard(self._conn), _write(self._conn):
            self._row(session_id)
            self._conn.execute(
                "UPDATE sessions SET title = ?, updated_at = ? WHERE id = ?",
                (title or "", self.clock(), session_id),
            )

    def update_fields(self, session_id: str, **fields: Any) -> None:
        """Change ``title`` / ``model`` / ``agent_id`` / ``source`` of a session."""
        allowed = {"title", "model", "agent_id", "source"}
        bad = set(fields) - allowed
        if bad:
            raise TypeError(f"unknown session field(s): {', '.join(sorted(bad))}")
        if not fields:
            return
        sets = ", ".join(f"{k} = ?" for k in fields)
        with _guard(self._conn), _write(self._conn):
            self._row(session_id)
            self._conn.execute(
                f"UPDATE sessions SET {sets}, updated_at = ? WHERE id = ?",
                [*(v or "" for v in fields.values()), self.clock(), session_id],
            )

    def delete(self, session_id: str) -> None:
        """Delete a session with all its nodes and FTS rows (one transaction)."""
        with _guard(self._conn), _write(self._conn):
            if not _delete_session_rows(self._conn, session_id):
                raise SessionNotFound(f"no session {session_id!r} in {self.db_path}")

    def get_extra_meta(self, session_id: str) -> dict[str, Any]:
        with _guard(self._conn):
            return _load_extra(self._row(session_id)[7], session_id)

    def set_extra_meta(self, session_id: str, extra: dict[str, Any]) -> None:
        """Replace the session's extra meta with ``extra``."""
        text = _dump_extra(extra, session_id)
        with _guard(self._conn), _write(self._conn):
            self._row(session_id)
            self._conn.execute(
                "UPDATE sessions SET extra_json = ?, updated_at = ? WHERE id = ?",
                (text, self.clock(), session_id),
            )

    def update_extra_meta(
        self, session_id: str, *, remove: Iterable[str] = (), **kv: Any
    ) -> dict[str, Any]:
        """Merge ``kv`` into the extra meta (and drop ``remove`` keys) atomically."""
        with _guard(self._conn), _write(self._conn):
            extra = _load_extra(self._row(session_id)[7], session_id)
            extra.update(kv)
            for key in remove:
                extra.pop(key, None)
            self._conn.execute(
                "UPDATE sessions SET extra_json = ?, updated_at = ? WHERE id = ?",
                (_dump_extra(extra, session_id), self.clock(), session_id),
            )
        return extra

    def __repr__(self) -> str:
        return f"DagSessionManager({self.db_path!r})"
