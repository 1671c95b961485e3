"""The connection rules of the store: opening a database and writing to it.

* :func:`_open` checks the file header, opens with the busy timeout, switches to
  WAL (retrying the switch while another process holds the new file), sets
  ``synchronous=NORMAL`` and foreign keys, then runs the migrations it is given;
  any failure closes the connection and becomes a ``StoreError`` naming the path.
* Every connection is a :class:`_Connection`: it carries its path, an ``RLock``
  that each store operation holds (one connection may be shared by threads), its
  depth of open write transactions and the undo actions of the Python side.
* :func:`_write` is one write transaction (``BEGIN IMMEDIATE``), or a SAVEPOINT
  inside an open one; :func:`transaction` is the public block that groups writes;
  :func:`_guard` turns ``sqlite3`` errors into ``StoreError``.

The why of each rule ("Durability", "Threads", "Transactions") is in the
``opctx.dag.store`` docstring. ``connect`` (the public entry) lives in
``store.py``: it is ``_open`` with the store's migrations.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ._errors import StoreError

__all__ = ["transaction", "flat_transaction", "set_text_index", "BUSY_TIMEOUT_MS"]

BUSY_TIMEOUT_MS = 30_000
_SQLITE_HEADER = b"SQLite format 3\x00"


class _Connection(sqlite3.Connection):
    """An sqlite3 connection that remembers its path and carries a lock."""

    opctx_path: str
    opctx_lock: threading.RLock
    opctx_depth: int
    opctx_undo: list[Callable[[], None]]
    opctx_flat: bool  # inside ``flat_transaction``: steps take no savepoints


def _check_header(path: str) -> None:
    if path == ":memory:" or path.startswith("file:"):
        return
    if os.path.isdir(path):
        raise StoreError(f"{path}: is a directory, not an SQLite database file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as e:
        raise StoreError(f"{path}: cannot read database file ({e})") from e
    if head and head != _SQLITE_HEADER:
        raise StoreError(f"{path}: not an SQLite database (the file header is not 'SQLite format 3')")


def _open(
    db_path: str | os.PathLike, migrate: Callable[[sqlite3.Connection], None]
) -> sqlite3.Connection:
    """Open (or create) a database: WAL, foreign keys, busy timeout, then ``migrate(conn)``.

    The body of :func:`opctx.dag.store.connect`, which passes the store's migrations.
    """
    path = os.fspath(db_path)
    _check_header(path)
    try:
        conn = sqlite3.connect(
            path,
            isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
            check_same_thread=False,
            timeout=BUSY_TIMEOUT_MS / 1000,
            factory=_Connection,
            uri=path.startswith("file:"),
        )
    except sqlite3.Error as e:
        raise StoreError(f"{path}: cannot open database ({e})") from e
    conn.opctx_path = path
    conn.opctx_lock = threading.RLock()
    conn.opctx_depth = 0  # open write transactions of ours (see _write)
    conn.opctx_undo = []  # undo actions for the Python side (see _on_rollback)
    conn.opctx_flat = False  # see flat_transaction
    conn.opctx_index_text = True  # see set_text_index
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        if path != ":memory:":
            mode = _switch_to_wal(conn)
            if str(mode).lower() != "wal":
                raise StoreError(f"{path}: could not switch the database to WAL (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        migrate(conn)
    except sqlite3.DatabaseError as e:
        conn.close()
        raise StoreError(f"{path}: not a usable SQLite database ({e})") from e
    except BaseException:
        conn.close()
        raise
    return conn


def _switch_to_wal(conn: sqlite3.Connection) -> str:
    # Switching a new database to WAL needs a moment of exclusive access, and SQLite
    # reports "database is locked" at once, without its busy handler, when another
    # process is opening the same new file: retry within the busy timeout.
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.001
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def set_text_index(conn: sqlite3.Connection, enabled: bool) -> None:
    """Turn full-text indexing of new and updated nodes on or off for this connection.

    For scratch databases only: the lab's replays write every compaction into an
    in-memory database that nobody searches, and building the search text is about a
    tenth of a replay's cost. Nodes written while it is off are not found by
    ``search``; a database meant to be kept should never turn it off.
    """
    conn.opctx_index_text = bool(enabled)


@contextmanager
def _write(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction, taken with the write lock up front (BEGIN IMMEDIATE).

    Inside an open one (``transaction()``, or another ``_write`` of this thread)
    it is a SAVEPOINT instead: the step joins the outer transaction, and a step
    that fails undoes only itself before its error propagates.
    """
    with conn.opctx_lock:  # type: ignore[attr-defined]
        depth = conn.opctx_depth  # type: ignore[attr-defined]
        if depth and conn.opctx_flat:  # type: ignore[attr-defined]
            # inside ``flat_transaction``: the step takes no savepoint of its own
            conn.opctx_depth = depth + 1  # type: ignore[attr-defined]
            try:
                yield conn
            finally:
                conn.opctx_depth = depth  # type: ignore[attr-defined]
            return
        if depth:
            name = f"opctx_{depth}"
            mark = len(conn.opctx_undo)  # type: ignore[attr-defined]
            conn.execute(f"SAVEPOINT {name}")
            conn.opctx_depth = depth + 1  # type: ignore[attr-defined]
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute(f"ROLLBACK TO {name}")
                    conn.execute(f"RELEASE {name}")
                _run_undo(conn, mark)
                raise
            else:
                conn.execute(f"RELEASE {name}")
            finally:
                conn.opctx_depth = depth  # type: ignore[attr-defined]
            return
        conn.execute("BEGIN IMMEDIATE")
        conn.opctx_depth = 1  # type: ignore[attr-defined]
        try:
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                _run_undo(conn, 0)
                raise
        finally:
            conn.opctx_depth = 0  # type: ignore[attr-defined]
            conn.opctx_undo.clear()  # type: ignore[attr-defined]


def _on_rollback(conn: sqlite3.Connection, undo: Callable[[], None]) -> None:
    """Run ``undo`` if the enclosing transaction (or savepoint) is rolled back.

    Why: ``append`` writes seq / predecessor back onto the caller's ``Call``
    objects; when a later step of the same ``transaction()`` fails, those values
    name rows that never existed, so they are put back as they were.
    """
    if conn.opctx_depth:  # type: ignore[attr-defined]
        conn.opctx_undo.append(undo)  # type: ignore[attr-defined]


def _run_undo(conn: sqlite3.Connection, mark: int) -> None:
    undo = conn.opctx_undo  # type: ignore[attr-defined]
    while len(undo) > mark:
        undo.pop()()


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """Make every store / session write on ``conn`` inside the block one transaction.

    ``conn`` is a connection from :func:`connect` (``GraphStore.connection``,
    ``DagSessionManager.connection``). The write lock is taken on entry
    (``BEGIN IMMEDIATE``); creating a session, ``append_many``, ``set_head``,
    ``update``, extra-meta writes and deletes made through this connection
    join the transaction. Leaving the block normally commits; an exception
    rolls everything back (the database is as before the block, and no other
    connection ever saw any of it) and propagates. A step that raises and is
    caught inside the block undoes only itself. Nested ``transaction()`` blocks
    are savepoints. Calls whose seq / predecessor ``append`` filled in get them
    back on rollback; other Python objects made inside the block (a
    ``DagSession``'s in-memory graph) are not rolled back: discard them.

    Example: an all-or-nothing import::

        with DagSessionManager(db) as mgr, mgr.transaction():
            if mgr.exists(sid):
                mgr.delete(sid)
            mgr.create(title=..., session_id=sid, extra_meta=meta, nodes=calls, head=head_id)
    """
    with _guard(conn), _write(conn):
        yield conn


@contextmanager
def flat_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """:func:`transaction` whose steps take no savepoint of their own.

    For a writer that never catches a failed step, so the block is all or nothing
    anyway (``opctx.importers.writer``: one session, one transaction). Why: SQLite's
    FTS5 writes its pending index out as a new segment at every savepoint, so a session
    written 256 nodes at a time left a segment per batch (and the merging of them) to
    the same transaction; without the savepoints the index is written as one bulk
    insert writes it. A step that fails still rolls the whole block back (its error
    leaves the block; nested in another transaction, the block is its savepoint).
    """
    with transaction(conn):
        before = conn.opctx_flat  # type: ignore[attr-defined]
        conn.opctx_flat = True  # type: ignore[attr-defined]
        try:
            yield conn
        finally:
            conn.opctx_flat = before  # type: ignore[attr-defined]


@contextmanager
def _guard(conn: sqlite3.Connection) -> Iterator[None]:
    """Turn sqlite3 errors into StoreErrors that name the database file."""
    try:
        with conn.opctx_lock:  # type: ignore[attr-defined]
            yield
    except StoreError:
        raise
    except sqlite3.Error as e:
        path = getattr(conn, "opctx_path", "?")
        raise StoreError(f"{path}: database error: {e}") from e
