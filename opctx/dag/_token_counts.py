"""Token counts kept beside the nodes: the ``node_tokens`` table (migration 6).

The store keeps numbers, not opinions: a row is ``(node pk, estimator identity,
tokens, thinking tokens, shape)``; what an identity means and what the ``shape`` text
encodes (the message's other cut facts) (which encoding, which
family constants, which version of them) is the context layer's business
(``opctx.context.token_counts``). The store guarantees only that a count describes
the node data beside it: deleting a node deletes its counts (``ON DELETE
CASCADE``), changing its data drops them (a trigger), and a write-back lands only
on a node whose data is still what was counted (:func:`write_token_counts` is a
compare-and-set run inside the write transaction).

Concurrent writers of the same counts: the insert is ``ON CONFLICT DO NOTHING``,
so two processes counting the same node with the same identity both succeed and
one row stays (the count is a pure function of the data and the identity, so
either row is the same number).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ._connection import _guard, _write

__all__ = ["read_token_counts", "write_token_counts", "token_count_coverage"]

# (node id, tokens, thinking tokens, shape)
CountRow = tuple[str, int, int, str]

_BATCH = 500  # SQLite's default limit on bound variables is 999 (older builds)


def read_token_counts(
    conn: sqlite3.Connection, session_id: str, estimator: str
) -> dict[str, tuple[int, int, str]]:
    """``{node id: (tokens, thinking, shape)}`` of the session's nodes counted by ``estimator``.

    One indexed pass: the session's ``(session_id, id)`` index gives each node's pk,
    and the count is a primary-key lookup. Nodes without a count are absent.
    """
    with _guard(conn):
        rows = conn.execute(
            "SELECT n.id, t.tokens, t.thinking, t.shape FROM nodes n "
            "JOIN node_tokens t ON t.pk = n.pk AND t.estimator = ? WHERE n.session_id = ?",
            (estimator, session_id),
        ).fetchall()
    return {row[0]: row[1:] for row in rows}


def write_token_counts(
    conn: sqlite3.Connection,
    session_id: str,
    estimator: str,
    rows: Iterable[CountRow],
    *,
    unchanged: Callable[[Sequence[str]], set[str]] | None = None,
) -> int:
    """Store counts of ``estimator`` for nodes of ``session_id``; the number written.

    ``unchanged(ids)`` runs inside the write transaction and returns the ids whose
    data is still what was counted (the compare of the compare-and-set); counts of
    the other ids are dropped. Without it every row is written (the caller counted
    inside the same transaction). An existing count is kept (idempotent upsert).
    """
    pending = list(rows)
    if not pending:
        return 0
    written = 0
    with _guard(conn), _write(conn):
        for start in range(0, len(pending), _BATCH):
            batch = pending[start:start + _BATCH]
            if unchanged is not None:
                keep = unchanged([r[0] for r in batch])
                batch = [r for r in batch if r[0] in keep]
            before = conn.total_changes
            conn.executemany(
                "INSERT INTO node_tokens(pk, estimator, tokens, thinking, shape) "
                "SELECT pk, ?, ?, ?, ? FROM nodes WHERE session_id = ? AND id = ? "
                "ON CONFLICT(pk, estimator) DO NOTHING",
                [(estimator, int(tokens), int(thinking), str(shape), session_id, node_id)
                 for node_id, tokens, thinking, shape in batch],
            )
            written += conn.total_changes - before
    return written


def token_count_coverage(conn: sqlite3.Connection) -> dict[str, Any]:
    """How many nodes carry a count, per estimator identity: ``{"nodes": N,
    "estimators": {identity: counted}}`` (a count per identity, never summed across)."""
    with _guard(conn):
        nodes = conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]
        counted = conn.execute(
            "SELECT estimator, COUNT(*) FROM node_tokens GROUP BY estimator ORDER BY estimator"
        ).fetchall()
    return {"nodes": nodes, "estimators": dict(counted)}
