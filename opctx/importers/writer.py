"""Persist parsed sessions: each ``ImportedSession`` all or nothing.

``write_session(imported, db)`` creates the session row and appends every node with
``GraphStore.append_many`` (one transaction), then sets HEAD and the final meta.

Atomicity. The store creates a session row in its own transaction, before the nodes'
transaction, so "one transaction" is kept by a marker: the row is created with
``extra_meta["_import_state"] = "incomplete"``; the nodes go in with one
``append_many``; HEAD and the final meta (marker removed) are written last. If anything
fails in between, the session is deleted again before the error propagates. If the
process dies in between, the marker stays: ``opctx sessions`` flags such a session and
the next import of the same recording replaces it (``session_is_incomplete``). No
reader ever mistakes a partial import for a complete one.

Re-import. Session ids are derived from the recording (``cc-<sessionId>``,
``codex-<id>``, ``<format>-<sha1 of the file>``), so importing the same file twice is
recognised: the second time the session is left alone (``"exists"``) unless
``replace=True``.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from .base import ImportedSession

__all__ = ["write_session", "session_exists", "session_is_incomplete", "IMPORT_STATE_KEY"]

IMPORT_STATE_KEY = "_import_state"


def session_exists(db: str | os.PathLike | sqlite3.Connection, session_id: str) -> bool:
    from opctx.dag.session import DagSessionManager

    with DagSessionManager(db) as mgr:
        return mgr.exists(session_id)


def session_is_incomplete(db: Any, session_id: str) -> bool:
    """A session whose import was interrupted (see the module docstring)."""
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
    """Write one parsed session. Returns ``"written"``, ``"replaced"`` or ``"exists"``."""
    from opctx.dag.session import DagSessionManager
    from opctx.dag.store import GraphStore

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
    with DagSessionManager(db) as mgr:
        if mgr.exists(sid):
            if not (replace or mgr.get_extra_meta(sid).get(IMPORT_STATE_KEY) == "incomplete"):
                return "exists"
            mgr.delete(sid)
            status = "replaced"
        store = GraphStore(mgr.connection, sid, create=True, title=imported.title,
                           model=imported.model, agent_id=imported.agent_id,
                           source=imported.source, extra_meta={**meta, IMPORT_STATE_KEY: "incomplete"})
        try:
            store.append_many(imported.calls)
            store.set_head(imported.head)
            mgr.update_extra_meta(sid, remove=[IMPORT_STATE_KEY])
        except BaseException:
            if mgr.exists(sid):
                mgr.delete(sid)
            raise
        finally:
            store.close()
    return status
