"""The store's schema: the migrations, in order, and the function that runs them.

sqlite-utils style: ``MIGRATIONS`` is an append-only list of small named
functions, each with a comment saying why it exists; a migration's version is
its 1-based position, recorded in ``schema_migrations`` with its name.
``_migrate`` runs the missing ones at ``connect``, each in its own write
transaction (re-checked under the write lock, so two processes opening one new
file do not run one twice), and refuses a database from a newer opctx.
The tables themselves are described in the ``opctx.dag.store`` docstring.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence

from ._connection import _write
from ._errors import StoreError
from ._rows import _row_to_call
from ._search import fts_text

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

# Append-only. Each migration is a small function run in its own transaction; its
# version is its 1-based position. Never edit or reorder a released one.


def _m0001_core_tables(conn: sqlite3.Connection) -> None:
    # Why: the §0.2 tables. nodes.pk is the stable rowid that the FTS row shares;
    # (session_id, id) and (session_id, seq) are unique per session.
    conn.execute(
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            title TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            model TEXT NOT NULL DEFAULT '',
            agent_id TEXT NOT NULL DEFAULT '',
            source TEXT NOT NULL DEFAULT '',
            extra_json TEXT NOT NULL DEFAULT '{}',
            last_node_id TEXT
        )"""
    )
    conn.execute(
        """CREATE TABLE nodes (
            pk INTEGER PRIMARY KEY,
            id TEXT NOT NULL,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            type TEXT NOT NULL,
            predecessor TEXT,
            caller TEXT,
            created_at REAL NOT NULL,
            seq INTEGER NOT NULL,
            data_json TEXT NOT NULL,
            UNIQUE (session_id, id),
            UNIQUE (session_id, seq)
        )"""
    )


def _m0002_fts(conn: sqlite3.Connection) -> None:
    # Why: full-text search (§0.2). A separate migration so that a build of SQLite
    # without FTS5 fails here with a clear message, after the core tables exist.
    conn.execute(
        "CREATE VIRTUAL TABLE nodes_fts USING fts5("
        "text, session_id UNINDEXED, node_id UNINDEXED, "
        "tokenize = 'unicode61 remove_diacritics 2')"
    )


def _m0003_edge_indexes(conn: sqlite3.Connection) -> None:
    # Why: children of a node (branches, descendants, list_branches) and callees
    # (the lab's caller graph) are looked up by edge, never by scanning a session.
    conn.execute("CREATE INDEX nodes_predecessor ON nodes(session_id, predecessor)")
    conn.execute("CREATE INDEX nodes_caller ON nodes(session_id, caller)")
    conn.execute("CREATE INDEX sessions_updated ON sessions(updated_at)")


def _m0004_session_next_seq(conn: sqlite3.Connection) -> None:
    # Why: MAX(seq)+1 would hand a deleted tail's seqs out again; a per-session
    # high-water mark keeps seq strictly increasing over the session's whole life.
    conn.execute("ALTER TABLE sessions ADD COLUMN next_seq INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        "UPDATE sessions SET next_seq = "
        "COALESCE((SELECT MAX(seq) + 1 FROM nodes WHERE nodes.session_id = sessions.id), 0)"
    )


def _m0005_flattened_search_text(conn: sqlite3.Connection) -> None:
    # Why: tool arguments and structured outputs used to be indexed as JSON text, where
    # a word after an escaped newline ("cd repo\nmake") became one token with the
    # escape and could not be found. Re-index every node that has a text row with
    # search_text's flattening (nodes of scratch databases, never indexed, stay so).
    select = (
        "SELECT n.pk, n.id, n.type, n.predecessor, n.caller, n.created_at, n.seq, n.data_json "
        "FROM nodes n JOIN nodes_fts f ON f.rowid = n.pk WHERE n.pk > ? ORDER BY n.pk LIMIT 2000"
    )
    last = -1
    while rows := conn.execute(select, (last,)).fetchall():
        conn.executemany(
            "UPDATE nodes_fts SET text = ? WHERE rowid = ?",
            [(fts_text(_row_to_call(tuple(r[1:]))), r[0]) for r in rows],
        )
        last = rows[-1][0]


def _m0006_node_token_counts(conn: sqlite3.Connection) -> None:
    # Why: deciding a cut on a history just read from disk used to run the tokenizer
    # over every message (14-16x the cost of LangChain's whole decision); a count kept
    # per node and per estimator identity (encoding, family constants, their version:
    # opctx.context.token_counts) makes that read a column. WITHOUT ROWID keyed by
    # (pk, estimator): one B-tree, no second index. ``shape`` is the rest of what the
    # cut reads of a message (its tool ids, its role in a turn), encoded by the context
    # layer, so a cold cut does not walk the messages either. The counts follow the node: a
    # delete cascades, and a trigger drops them when the node's data changes (an
    # in-place update), so a count always describes the data beside it. IF NOT EXISTS: a
    # database whose record of this step was lost (a copy, a hand edit) migrates again.
    conn.execute(
        """CREATE TABLE IF NOT EXISTS node_tokens (
            pk INTEGER NOT NULL REFERENCES nodes(pk) ON DELETE CASCADE,
            estimator TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            thinking INTEGER NOT NULL DEFAULT 0,
            shape TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (pk, estimator)
        ) WITHOUT ROWID"""
    )
    conn.execute(
        "CREATE TRIGGER IF NOT EXISTS node_tokens_stale AFTER UPDATE OF data_json, type ON nodes "
        "BEGIN DELETE FROM node_tokens WHERE pk = old.pk; END"
    )


def _m0007_partial_caller_index(conn: sqlite3.Connection) -> None:
    # Why: most nodes have no caller (every message of a chat or an imported transcript),
    # so the caller index held nearly every node of a session under the one key
    # (session, NULL), and keeping it up cost about as much as the rest of inserting a
    # node. Callees are looked up by a caller that exists, so only nodes that have one
    # are indexed (a lookup ``caller = ?`` implies ``caller IS NOT NULL``: SQLite uses
    # the partial index for it).
    conn.execute("DROP INDEX IF EXISTS nodes_caller")
    conn.execute("CREATE INDEX nodes_caller ON nodes(session_id, caller) WHERE caller IS NOT NULL")


MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("core_tables", _m0001_core_tables),
    ("fts", _m0002_fts),
    ("edge_indexes", _m0003_edge_indexes),
    ("session_next_seq", _m0004_session_next_seq),
    ("flattened_search_text", _m0005_flattened_search_text),
    ("node_token_counts", _m0006_node_token_counts),
    ("partial_caller_index", _m0007_partial_caller_index),
]
SCHEMA_VERSION = len(MIGRATIONS)


def _applied_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    return row[0] or 0


def _migrate(
    conn: sqlite3.Connection,
    migrations: Sequence[tuple[str, Callable[[sqlite3.Connection], None]]] = MIGRATIONS,
) -> None:
    """Run the ``migrations`` this database has not had yet, each in its own transaction.

    The schema version they bring it to is their number (``SCHEMA_VERSION`` for
    ``MIGRATIONS``); ``opctx.dag.store.connect`` passes its own ``MIGRATIONS``.
    """
    path = conn.opctx_path  # type: ignore[attr-defined]
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    latest = len(migrations)
    current = _applied_version(conn)
    if current > latest:
        raise StoreError(
            f"{path}: schema version {current} is newer than this opctx knows "
            f"({latest}); upgrade opctx"
        )
    if current == latest:
        return
    for version, (name, migration) in enumerate(migrations, start=1):
        with _write(conn):
            # Re-checked under the write lock: another process may have just run it.
            if conn.execute(
                "SELECT 1 FROM schema_migrations WHERE version = ?", (version,)
            ).fetchone():
                continue
            try:
                migration(conn)
            except sqlite3.OperationalError as e:
                if name == "fts" and "fts5" in str(e).lower():
                    raise StoreError(
                        f"{path}: this SQLite build has no FTS5 module ({e})"
                    ) from e
                raise
            conn.execute(
                "INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)",
                (version, f"{version:04d}_{name}", time.time()),
            )
