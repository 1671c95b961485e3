"""Persist parsed sessions: each ``ImportedSession`` all or nothing.

``write_session(imported, db)`` writes one session in ONE transaction (one ``COMMIT``):
the existence check, the deletion of the session it replaces, the session row with its
final meta, every node (``append_many`` 256 nodes at a time, so that the JSON and search
text of a large transcript never exist all at once: seq allocated, FTS rows) and HEAD
all happen inside one ``flat_transaction`` (a ``transaction()`` whose steps take no
savepoints: nothing in it catches a failed step, and a savepoint per batch made SQLite's
full-text index write a segment per batch). Why one: a second connection must never see
a partial session (a row without its nodes, nodes without HEAD), and a failure or a
killed process must leave no trace; SQLite's rollback (or, after a crash, the WAL that
was never committed) gives both for free, where several commits would need a marker and
a clean-up. One commit per session is also what keeps the whole corpus fast: a commit
is the expensive step of a write.

Older databases. Imports made before this used several transactions and marked the
session row ``extra_meta["_import_state"] = "incomplete"`` until the last one. A process
killed in between left that marker; such a session is still recognised
(``session_is_incomplete``, flagged by ``opctx sessions``) and the next import of the
same recording replaces it, inside the same single transaction. New imports never
write the marker.

Text the store cannot encode. A lone surrogate (``"\\ud83d"`` is valid JSON) in the
session's title, id or fields is replaced with U+FFFD and counted in
``meta["replaced_surrogates"]``; the store does the same for nodes (``opctx.dag._text``).
Either adds a warning to the session.

Re-import. Session ids are derived from the recording (``cc-<sessionId>``,
``codex-<id>``, ``<format>-<sha1 of the file>``), so importing the same file twice is
recognised: the second time the session is left alone (``"exists"``) unless
``replace=True``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from typing import Any

from .base import ImportedSession

__all__ = ["write_session", "session_exists", "session_is_incomplete", "IMPORT_STATE_KEY"]

# The marker of an interrupted import in databases written by older versions (read only).
IMPORT_STATE_KEY = "_import_state"


def session_exists(db: str | os.PathLike | sqlite3.Connection, session_id: str) -> bool:
    from opctx.dag.session import DagSessionManager

    with DagSessionManager(db) as mgr:
        return mgr.exists(session_id)


def session_is_incomplete(db: Any, session_id: str) -> bool:
    """A session left half-written by an older version's import (see the module docstring)."""
    from opctx.dag.session import DagSessionManager
    from opctx.dag.store import SessionNotFound

    with DagSessionManager(db) as mgr:
        try:
            extra = mgr.get_extra_meta(session_id)
        except SessionNotFound:
            return False
    return extra.get(IMPORT_STATE_KEY) == "incomplete"


def write_session(imported: ImportedSession, db: str | os.PathLike | sqlite3.Connection, *,
                  replace: bool = False) -> str:
    """Write one parsed session in one transaction.

    Returns ``"written"``, ``"replaced"`` (``replace=True``, or an older import's
    interrupted session) or ``"exists"`` (nothing written). On any error nothing of the
    session is in the database (a replaced session is still there, unchanged) and the
    error propagates.
    """
    from opctx.dag.session import DagSessionManager
    from opctx.dag.store import flat_transaction

    _make_session_fields_storable(imported)
    sid = imported.session_id
    status = "written"
    meta = dict(imported.meta)
    meta.setdefault("format", imported.format)
    meta.setdefault("source_path", imported.source_path)
    meta["recorded_compactions"] = list(imported.recorded_compactions)
    if imported.calls:
        # the session row's own times are the import's; the recording's are kept here
        times = [c.created_at for c in imported.calls]
        meta.setdefault("recorded_started_at", min(times))
        meta.setdefault("recorded_ended_at", max(times))
    with DagSessionManager(db) as mgr, flat_transaction(mgr.connection):
        # checked inside the write transaction: a concurrent import of the same
        # recording waits for the lock and then sees this one's session
        if mgr.exists(sid):
            interrupted = mgr.get_extra_meta(sid).get(IMPORT_STATE_KEY) == "incomplete"
            if not (replace or interrupted):
                return "exists"
            mgr.delete(sid)
            status = "replaced"
        batches = _batches(imported.calls)
        session = mgr.create(title=imported.title, model=imported.model, agent_id=imported.agent_id,
                             source=imported.source, session_id=sid, extra_meta=meta,
                             nodes=next(batches, []))
        for batch in batches:
            session.store.append_many(batch)
        session.store.set_head(imported.head)
    _warn_replaced_surrogates(imported)
    return status


# Nodes are serialised a batch at a time (still one transaction): the JSON and search
# text of a whole 75 MB transcript at once would cost twice its size again in memory.
_BATCH_NODES = 256
_BATCH_CHARS = 4_000_000


def _batches(calls: list) -> Iterator[list]:
    batch: list = []
    chars = 0
    for call in calls:
        batch.append(call)
        chars += len(call.output) if isinstance(call.output, str) else 1000
        if len(batch) >= _BATCH_NODES or chars >= _BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _make_session_fields_storable(imported: ImportedSession) -> None:
    """Lone surrogates in the session's own fields -> U+FFFD, counted in ``meta``.

    The nodes are fixed by the store as it writes them (``opctx.dag._text``): the same
    rule, counted in each node's ``metadata["replaced_surrogates"]``.
    """
    from opctx.dag._text import REPLACED_SURROGATES_KEY, replace_lone_surrogates, scrub

    total = 0
    for name in ("session_id", "title", "model", "agent_id"):
        value, n = replace_lone_surrogates(getattr(imported, name) or "")
        if n:
            setattr(imported, name, value)
            total += n
    meta, n = scrub(imported.meta)
    if total + n:
        imported.meta = dict(meta)
        imported.meta[REPLACED_SURROGATES_KEY] = total + n
        imported.warnings.append(
            f"{imported.source_path}: session {imported.session_id}: {total + n} lone surrogate(s) "
            f"in its title, id or fields replaced with U+FFFD (meta.{REPLACED_SURROGATES_KEY})")


def _warn_replaced_surrogates(imported: ImportedSession) -> None:
    from opctx.dag._text import REPLACED_SURROGATES_KEY

    fixed = [c for c in imported.calls if c.metadata.get(REPLACED_SURROGATES_KEY)]
    if fixed:
        n = sum(c.metadata[REPLACED_SURROGATES_KEY] for c in fixed)
        imported.warnings.append(
            f"{imported.source_path}: session {imported.session_id}: {n} lone surrogate(s) in "
            f"{len(fixed)} node(s) replaced with U+FFFD (metadata.{REPLACED_SURROGATES_KEY})")
