"""``GraphStore``: the DAG of one session, persisted in SQLite with FTS5 (spec §0.2).

One SQLite file holds any number of sessions. Tables (docs/ARCHITECTURE.md):

``sessions(id, title, created_at, updated_at, model, agent_id, source, extra_json, last_node_id, next_seq)``
    one row per session; ``last_node_id`` is HEAD, ``extra_json`` a free JSON object.
``nodes(pk, id, session_id, type, predecessor, caller, created_at, seq, data_json)``
    one row per ``Call``. ``type`` is the role, ``predecessor`` the *real*
    conversation predecessor, ``caller`` the nesting edge (indexed for the lab);
    ``data_json`` packs ``name / input / output / reads / metadata``.
``nodes_fts``
    FTS5 table ``(text, session_id UNINDEXED, node_id UNINDEXED)`` whose rowid is
    ``nodes.pk``.
``schema_migrations(version, name, applied_at)``
    which migrations have run.

Choices, where the specification and SPEC-NOTES leave room:

* **Identity.** A node id is unique *within its session*
  (``UNIQUE(session_id, id)``): two sessions may import the same transcript.
  ``nodes.pk`` (``INTEGER PRIMARY KEY``) is an addition to the documented columns:
  it is the stable rowid that links a node to its FTS row (an implicit rowid may
  change on ``VACUUM``), so an ``update`` touches one FTS row instead of scanning.
* **seq.** Allocated inside the write transaction (``BEGIN IMMEDIATE`` takes the
  write lock first, so two processes can never read the same maximum):
  ``seq = max(sessions.next_seq, MAX(seq) + 1)``. A node that already carries a
  larger seq keeps it (saving an in-memory ``Graph`` keeps its gaps); a smaller
  or negative one is replaced and written back on the ``Call`` you passed.
  ``sessions.next_seq`` (migration 4) means a seq freed by ``delete`` is never
  handed out again, so seq stays strictly increasing over the session's life.
  Append to the store *before* adding a node to a ``Graph`` (``DagSession.append``
  does this) so the graph indexes the final seq.
* **HEAD** (``sessions.last_node_id``) is where the conversation continues. It
  moves only when an appended node extends it, evaluated node by node inside
  the transaction, or by ``set_head`` (SPEC-NOTES "Storage"):

  - with a head: the node extends it iff ``node.predecessor == head``, whatever
    its ``caller``. The conversation is the ``predecessor`` chain (§0.1); a
    node that names the head as its predecessor *is* the next conversational
    step (a tool result with ``caller`` = the llm call that asked for it, an LLM
    call that ``DagRuntime`` made inside an ``@agentic_function`` frame), and
    ``get_branch`` (§0.4) walks exactly that chain. A sibling, a new root or a
    nested call without predecessor (agentic llm nodes, function placeholders
    below a frame: §0.7) never moves it.
  - without a head (an empty session, or after ``set_head(None)``): the first
    node with no ``caller`` becomes HEAD. A node with a caller is a subcall
    inside some frame (§0.7 hangs it off ``_call_id`` by ``caller``); making it
    HEAD would chain the next chat turn onto the inside of a function, so it
    does not; HEAD waits for a top-level node (``DagRuntime`` likewise starts
    from the newest top-level node).
* **JSON.** ``input``, ``output``, ``metadata`` and ``reads`` must be JSON
  (``allow_nan=False``: the stored text is standard JSON that ``json_extract``,
  pandas or another language can read). Anything else is a ``StoreError`` naming
  the node and the field. Round trip is JSON's: tuples come back as lists.
* **FTS text.** ``name``, the output, the text of tool calls and content blocks
  carried in metadata, and the input (for ``llm`` nodes minus ``input["system"]``:
  a system prompt repeated on every LLM call would match every query and multiply
  the index). Structured values, and strings that are a JSON object or array (tool
  arguments on the OpenAI wire), are flattened to ``key: value`` lines by
  ``search_text``: in JSON text a word after an escaped newline is glued to the
  escape (``\\nmake``) and cannot be found. The text is cut at
  ``FTS_TEXT_LIMIT`` characters (64 Ki): search finds a 50 MB tool output by its
  head, and the index stays proportional to the conversation, not to its
  attachments. The node itself is stored whole.
* **CJK.** The ``unicode61`` tokenizer sees a run of Han/Kana/Hangul as one
  token, so "上下文" could not be found inside "上下文管理". Indexed text gets a
  zero-width space after each CJK character (one token per character) and queries
  get the same treatment, so a CJK query is a phrase of adjacent characters, i.e.
  a substring match. Snippets have the zero-width spaces removed again.
* **Search** is literal by default: the query is split on whitespace, each piece
  with any letter or digit becomes one quoted FTS5 phrase (``"`` doubled), and the
  phrases are ANDed. ``"``, ``*``, ``AND``, ``-``, ``NEAR(`` and unbalanced
  parentheses are therefore just text: they never raise and never widen a search.
  A query with no searchable text returns ``[]``. ``raw=True`` passes FTS5 syntax
  through; a syntax error becomes a ``StoreError``. ``SearchHit.rank`` is FTS5's
  bm25 ``rank`` (more negative = better); hits come best first.
* **Rank window.** Ranking costs ~1.5 µs per matching row and a word found in
  half of 100,000 nodes took ~90 ms to rank, so when a query matches more than
  ``SEARCH_RANK_WINDOW`` (2,000) rows of the database, only the 2,000 newest
  matches are ranked (one cheap ``ORDER BY rowid DESC ... OFFSET`` finds where
  they start); bm25 still uses the whole index's statistics. If the session has
  fewer than ``limit`` hits among them, every match is ranked after all, so a
  search never comes back short. For a word that common, "best among the recent"
  is what a transcript search wants; ``rank_window=None`` ranks every match.
* **Durability.** WAL, ``synchronous=NORMAL`` (a committed transaction survives
  a killed process; the last ones may be lost on power failure), foreign keys on,
  ``busy_timeout`` 30 s. A file that is not an SQLite database, or is damaged,
  is a ``StoreError`` naming the path, never a bare ``sqlite3`` error.
* **":memory:"** gives one private database per ``connect``. To share one
  in-memory database between a ``DagSessionManager`` and its stores, pass the
  connection from ``connect()`` as ``db_path``; a store never closes a
  connection it did not open.
* **Threads.** Every connection carries an ``RLock``; each store operation holds
  it, so one connection may be shared between threads.
* **Transactions.** Every write method is one transaction on its own.
  ``transaction(conn)`` (also ``GraphStore.transaction()`` and
  ``DagSessionManager.transaction()``) groups any number of them, session
  creation included, into one: commit at the end of the block, roll back
  everything on an exception. Inside it each write is a SAVEPOINT, so a failed
  step that the block catches undoes only itself. This is what an importer uses
  instead of an "incomplete" marker: a crash or error mid-import leaves no
  session at all (tested with SIGKILL).
"""

from __future__ import annotations

import gc
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .messages import as_text
from .nodes import ROLES, Call, Graph

__all__ = [
    "StoreError",
    "SessionNotFound",
    "NodeNotFound",
    "SearchHit",
    "GraphStore",
    "connect",
    "connect_readonly",
    "search_across_sessions",
    "transaction",
    "literal_fts_query",
    "fts_text",
    "search_text",
    "set_text_index",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "FTS_TEXT_LIMIT",
    "SEARCH_RANK_WINDOW",
    "SESSION_FIELDS",
]

FTS_TEXT_LIMIT = 65536
SEARCH_RANK_WINDOW = 2000
BUSY_TIMEOUT_MS = 30_000
SNIPPET_OPEN, SNIPPET_CLOSE, SNIPPET_ELLIPSIS = "«", "»", "…"
SNIPPET_TOKENS = 16
SESSION_FIELDS = ("title", "model", "agent_id", "source")
_SQLITE_HEADER = b"SQLite format 3\x00"
_ZWSP = "\u200b"

Clock = Callable[[], float]


class StoreError(Exception):
    """A storage problem explained: bad file, duplicate id, value not JSON, bad query."""


class SessionNotFound(StoreError, KeyError):
    """No session with that id in this database (also a ``KeyError``)."""

    def __str__(self) -> str:  # KeyError would repr-quote the message
        return str(self.args[0]) if self.args else "session not found"


class NodeNotFound(StoreError, KeyError):
    """No node with that id in this session (also a ``KeyError``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "node not found"


@dataclass
class SearchHit:
    """One full-text hit. ``rank`` is bm25 (lower is better); ``snippet`` marks terms «so»."""

    session_id: str
    node_id: str
    role: str
    name: str
    snippet: str
    rank: float
    seq: int


# -- connection -----------------------------------------------------------------


class _Connection(sqlite3.Connection):
    """An sqlite3 connection that remembers its path and carries a lock."""

    opctx_path: str
    opctx_lock: threading.RLock
    opctx_depth: int
    opctx_undo: list[Callable[[], None]]


def _describe(db_path: str | os.PathLike) -> str:
    return str(db_path)


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


def connect(db_path: str | os.PathLike) -> sqlite3.Connection:
    """Open (or create) a database: WAL, foreign keys, busy timeout, migrations applied.

    Raises ``StoreError`` naming the path when the file is not an SQLite database,
    is damaged, or cannot be opened.
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
    conn.opctx_index_text = True  # see set_text_index
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        if path != ":memory:":
            mode = _switch_to_wal(conn)
            if str(mode).lower() != "wal":
                raise StoreError(f"{path}: could not switch the database to WAL (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        _migrate(conn)
    except sqlite3.DatabaseError as e:
        conn.close()
        raise StoreError(f"{path}: not a usable SQLite database ({e})") from e
    except BaseException:
        conn.close()
        raise
    return conn


def connect_readonly(db_path: str | os.PathLike) -> sqlite3.Connection:
    """Open an existing opctx database for reading only (SQLite ``mode=ro``).

    Nothing is created, migrated or switched to WAL, so reading never changes a
    file. Usable with ``GraphStore(conn, sid, create=False)`` and
    ``search_across_sessions``. Raises ``StoreError`` naming the path when the file
    is missing, is not SQLite, has no opctx tables, or has another schema version.
    """
    from pathlib import Path

    path = os.fspath(db_path)
    if not os.path.isfile(path):
        problem = "not a regular file" if os.path.exists(path) else "no such database file"
        raise StoreError(f"{path}: {problem}")
    _check_header(path)
    try:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True,
                               isolation_level=None, check_same_thread=False,
                               timeout=BUSY_TIMEOUT_MS / 1000, factory=_Connection)
    except sqlite3.Error as e:
        raise StoreError(f"{path}: cannot open database ({e})") from e
    conn.opctx_path, conn.opctx_lock, conn.opctx_depth, conn.opctx_undo = path, threading.RLock(), 0, []
    conn.opctx_index_text = True
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"sessions", "nodes", "schema_migrations"} <= tables:
            raise StoreError(f"{path}: not an opctx database (it has no opctx tables)")
        version = _applied_version(conn)
        if version != SCHEMA_VERSION:
            raise StoreError(f"{path}: opctx schema version {version}, this opctx reads "
                             f"{SCHEMA_VERSION} (opening it for writing migrates it)")
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


# -- schema migrations ------------------------------------------------------------
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


MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("core_tables", _m0001_core_tables),
    ("fts", _m0002_fts),
    ("edge_indexes", _m0003_edge_indexes),
    ("session_next_seq", _m0004_session_next_seq),
    ("flattened_search_text", _m0005_flattened_search_text),
]
SCHEMA_VERSION = len(MIGRATIONS)


def _applied_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    return row[0] or 0


def _migrate(conn: sqlite3.Connection) -> None:
    path = conn.opctx_path  # type: ignore[attr-defined]
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    current = _applied_version(conn)
    if current > SCHEMA_VERSION:
        raise StoreError(
            f"{path}: schema version {current} is newer than this opctx knows "
            f"({SCHEMA_VERSION}); upgrade opctx"
        )
    if current == SCHEMA_VERSION:
        return
    for version, (name, migration) in enumerate(MIGRATIONS, start=1):
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


# -- serialisation ------------------------------------------------------------------

_DUMPS_KW = {"ensure_ascii": False, "separators": (",", ":"), "allow_nan": False}
# A run of Han / Kana / Hangul characters (see "CJK" in the module doc).
_CJK_RUN = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002fa1f]+"
)
_HAS_TOKEN = re.compile(r"[^\W_]")


def _node_data_json(node: Call) -> str:
    data: dict[str, Any] = {"name": node.name, "input": node.input, "output": node.output}
    if node.reads:
        data["reads"] = node.reads
    if node.metadata:
        data["metadata"] = node.metadata
    try:
        return json.dumps(data, **_DUMPS_KW)
    except (TypeError, ValueError):
        pass
    for field in ("input", "output", "metadata", "reads", "name"):
        try:
            json.dumps(getattr(node, field), **_DUMPS_KW)
        except (TypeError, ValueError) as e:
            raise StoreError(
                f"node {node.id!r}: field {field!r} is not JSON-serialisable ({e})"
            ) from None
    raise StoreError(f"node {node.id!r}: not JSON-serialisable")  # pragma: no cover


def _zwsp_after_each(match: re.Match[str]) -> str:
    return _ZWSP.join(match.group()) + _ZWSP


def _segment_cjk(text: str) -> str:
    """``text`` with a zero-width space after every CJK character.

    Why this shape: a template replacement per character (``sub(r"\\1" + ZWSP)``)
    cost ~6 µs a character, half of an import of a CJK transcript. Matching whole
    runs and joining each run in C is ~25x faster; ASCII text (most text) is
    returned after one C-level ``isascii`` check. The result is the same string.
    """
    if text.isascii():
        return text
    return _CJK_RUN.sub(_zwsp_after_each, text)


# Strings longer than this are indexed as they are, never parsed as JSON: the index
# keeps only the first FTS_TEXT_LIMIT characters, and parsing a megabyte of tool output
# on every append would cost more than the whole rest of the write.
_JSON_PARSE_LIMIT = 4 * FTS_TEXT_LIMIT


def search_text(value: Any) -> str:
    r"""The text of a stored value as the index should see it (see module doc).

    A string is itself, unless it is a JSON object or array (tool arguments as the
    OpenAI wire format keeps them); structures are flattened into their keys and
    values, one ``key: value`` per line, so the words of a multi-line argument are
    separate tokens instead of one token glued to an escape (``\nmake``). Text
    blocks give their text; base64 payloads (images) give nothing.

    >>> print(search_text('{"command": "cd repo\\nmake test", "timeout": 30}'))
    command: cd repo
    make test
    timeout: 30
    >>> print(search_text([{"type": "text", "text": "2 passed"}]))
    2 passed
    """
    if isinstance(value, str):
        parsed = _parse_json_text(value)
        if parsed is None:
            return value
        value = parsed
    if value is None:
        return ""
    out: list[str] = []
    # an explicit stack, not recursion: nesting depth is the transcript's to choose
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, label = stack.pop()
        if isinstance(item, dict):
            kind = item.get("type")
            if kind == "text" and isinstance(item.get("text"), str):
                out.append(label + item["text"])
            elif kind != "base64":
                stack.extend((v, f"{k}: ") for k, v in reversed(item.items()))
        elif isinstance(item, list | tuple):
            stack.extend((v, label) for v in reversed(item))
        elif isinstance(item, str):
            parsed = _parse_json_text(item)
            if parsed is None:
                out.append(label + item)
            else:
                stack.append((parsed, label))
        elif item is not None:
            out.append(label + (json.dumps(item) if isinstance(item, bool) else str(item)))
    return "\n".join(out)


_LEADING_SPACE = re.compile(r"\s*")


def _parse_json_text(text: str) -> Any:
    # most text is no JSON: its first non-space character says so before the whole
    # (possibly megabytes of) tool output is copied by strip()
    start = _LEADING_SPACE.match(text).end()
    if text[start : start + 1] not in ("{", "["):
        return None
    stripped = text.strip()
    if len(stripped) < 2 or len(stripped) > _JSON_PARSE_LIMIT:
        return None
    if (stripped[0], stripped[-1]) not in (("{", "}"), ("[", "]")):
        return None
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        return None


def _blocks_text(blocks: Any) -> list[str]:
    parts: list[str] = []
    if not isinstance(blocks, list):
        return parts
    for b in blocks:
        if not isinstance(b, dict):
            continue
        kind = b.get("type")
        if kind == "text":
            parts.append(as_text(b.get("text")))
        elif kind == "tool_use":
            parts.append(as_text(b.get("name")))
            parts.append(search_text(b.get("input")))
        elif kind == "tool_result":
            parts.append(search_text(b.get("content")))
    return parts


def fts_text(node: Call, limit: int = FTS_TEXT_LIMIT) -> str:
    """The searchable text of a node, at most ``limit`` characters (see module doc)."""
    # Output first so that snippets open on the content; the name (model, tool,
    # "user") goes last but keeps its room, so it stays searchable on huge outputs.
    name = node.name[:256]
    parts = [search_text(node.output)]
    meta = node.metadata
    if meta:
        for tc in meta.get("tool_calls") or ():
            if isinstance(tc, dict):
                parts.append(as_text(tc.get("name")))
                parts.append(search_text(tc.get("arguments")))
        extra = meta.get("extra")
        if isinstance(extra, dict):
            parts.extend(_blocks_text(extra.get("blocks")))
    inp = node.input
    if node.role == "llm" and isinstance(inp, dict):
        inp = {k: v for k, v in inp.items() if k != "system" and v is not None} or None
    parts.append(search_text(inp))
    out: list[str] = []
    budget = limit - len(name) - 1
    for part in parts:
        if budget <= 0:
            break
        if not part:
            continue
        if len(part) > budget:
            part = part[:budget]
        out.append(part)
        budget -= len(part) + 1
    if name:
        out.append(name)
    return _segment_cjk("\n".join(out))


def literal_fts_query(text: str) -> str:
    """User text as an FTS5 query that means exactly the words typed (see module doc).

    Returns ``""`` when nothing in ``text`` is searchable.
    """
    phrases = []
    for piece in str(text).split():
        if not _HAS_TOKEN.search(piece):
            continue
        phrases.append('"' + _segment_cjk(piece).replace('"', '""') + '"')
    return " ".join(phrases)


def _row_to_call(row: tuple) -> Call:
    """Build a Call from a trusted row without re-running Call.__init__'s checks."""
    nid, role, pred, caller, created_at, seq, data_json = row
    data = json.loads(data_json)
    node = Call.__new__(Call)
    node.id = nid
    node.seq = seq
    node.created_at = created_at
    node.role = role
    node.name = data.get("name", "")
    node.input = data.get("input")
    node.output = data.get("output")
    node._caller = caller
    node._predecessor = pred
    node.reads = data.get("reads") or []
    node.metadata = data.get("metadata") or {}
    return node


# The payload fields of a Call, and the slot descriptors that hold their values.
_PAYLOAD_SLOTS = {name: Call.__dict__[name] for name in ("name", "input", "output", "reads", "metadata")}


class _StoredCall(Call):
    """A ``Call`` read by ``load()`` whose JSON payload is decoded on first use.

    Why: on real transcripts the payload (tool outputs, code) is ~1-2 KB a node,
    and ``json.loads`` of it dominates loading a large session, while a chat turn
    or a compaction touches only the nodes it renders. The edges, ``seq``, ``id``,
    ``role`` and ``created_at`` are plain columns and set eagerly; ``name``,
    ``input``, ``output``, ``reads`` and ``metadata`` decode together on the first
    read or write of any of them. It is a ``Call`` in every respect
    (``isinstance``, ``==``, ``copy``, pickling, ``Graph.update``).
    """

    __slots__ = ("_payload",)

    def _decode(self) -> None:
        payload = self._payload
        if payload is None:
            return
        data = json.loads(payload)
        slots = _PAYLOAD_SLOTS
        slots["name"].__set__(self, data.get("name", ""))
        slots["input"].__set__(self, data.get("input"))
        slots["output"].__set__(self, data.get("output"))
        slots["reads"].__set__(self, data.get("reads") or [])
        slots["metadata"].__set__(self, data.get("metadata") or {})
        self._payload = None


def _lazy_payload_field(slot_name: str) -> property:
    slot = _PAYLOAD_SLOTS[slot_name]

    def fget(self: _StoredCall) -> Any:
        if self._payload is not None:
            self._decode()
        return slot.__get__(self, Call)

    def fset(self: _StoredCall, value: Any) -> None:
        if self._payload is not None:
            self._decode()  # decode first so the other fields are not lost
        slot.__set__(self, value)

    return property(fget, fset, doc=f"Call.{slot_name}, decoded on first use")


for _name in _PAYLOAD_SLOTS:
    setattr(_StoredCall, _name, _lazy_payload_field(_name))
del _name


def _row_to_lazy_call(row: tuple) -> Call:
    nid, role, pred, caller, created_at, seq, data_json = row
    node = _StoredCall.__new__(_StoredCall)
    node._payload = data_json
    node.id = nid
    node.seq = seq
    node.created_at = created_at
    node.role = role
    node._caller = caller
    node._predecessor = pred
    return node


def _graph_from_sorted(nodes: list[Call]) -> Graph:
    """A Graph of nodes already in strictly increasing seq order with unique ids.

    Fills the same indexes ``Graph.add`` keeps, without its per-node checks
    (the database's UNIQUE constraints already guarantee them). Tested against
    a graph built with ``Graph.add``.
    """
    graph = Graph()
    children: dict[str | None, list[str]] = {}
    callees: dict[str | None, list[str]] = {}
    for node in nodes:
        children.setdefault(node._predecessor, []).append(node.id)
        callees.setdefault(node._caller, []).append(node.id)
    graph.nodes = {n.id: n for n in nodes}
    graph._by_seq = {n.seq: n for n in nodes}
    graph._seqs = [n.seq for n in nodes]
    graph._children = children
    graph._callees = callees
    graph._next_seq = nodes[-1].seq + 1 if nodes else 0
    return graph


_NODE_COLUMNS = "id, type, predecessor, caller, created_at, seq, data_json"


def _extends_head(node: Call, head: str | None) -> bool:
    """Whether appending ``node`` moves HEAD (see "HEAD" in the module doc)."""
    if head is None:
        return node.caller is None
    return node.predecessor == head


def _restore(nodes: list[Call], seqs: list[int], preds: list[str | None]) -> None:
    for node, seq, pred in zip(nodes, seqs, preds, strict=True):
        node.seq = seq
        node.predecessor = pred


# -- sessions table helpers (shared with session.py / session_db.py) ----------------


def _session_row(conn: sqlite3.Connection, session_id: str) -> tuple | None:
    cur = conn.execute(
        "SELECT id, title, created_at, updated_at, model, agent_id, source, extra_json, "
        "last_node_id, next_seq FROM sessions WHERE id = ?",
        (session_id,),
    )
    return cur.fetchone()


def _insert_session(
    conn: sqlite3.Connection,
    session_id: str,
    now: float,
    *,
    title: str = "",
    model: str = "",
    agent_id: str = "",
    source: str = "",
    extra_meta: dict | None = None,
) -> None:
    try:
        extra = json.dumps(extra_meta or {}, **_DUMPS_KW)
    except (TypeError, ValueError) as e:
        raise StoreError(f"session {session_id!r}: extra_meta is not JSON-serialisable ({e})") from None
    conn.execute(
        "INSERT INTO sessions(id, title, created_at, updated_at, model, agent_id, source, "
        "extra_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (session_id, title or "", now, now, model or "", agent_id or "", source or "", extra),
    )


def _delete_session_rows(conn: sqlite3.Connection, session_id: str) -> bool:
    """Delete a session, its nodes and their FTS rows; inside a write transaction."""
    conn.execute(
        "DELETE FROM nodes_fts WHERE rowid IN (SELECT pk FROM nodes WHERE session_id = ?)",
        (session_id,),
    )
    conn.execute("DELETE FROM nodes WHERE session_id = ?", (session_id,))
    cur = conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
    return cur.rowcount > 0


def _search(
    conn: sqlite3.Connection,
    query: str,
    limit: int,
    raw: bool,
    session_id: str | None,
    rank_window: int | None = SEARCH_RANK_WINDOW,
) -> list[SearchHit]:
    if limit is None or limit <= 0:
        return []
    query = query.replace("\x00", " ")  # SQLite ends a query's text at a NUL: a separator
    fts_query = _segment_cjk(query) if raw else literal_fts_query(query)
    if not fts_query.strip():
        return []
    scope = " AND nodes_fts.session_id = ?" if session_id is not None else ""
    scope_params: list[Any] = [session_id] if session_id is not None else []
    sql = (
        "SELECT n.session_id, n.id, n.type, json_extract(n.data_json, '$.name'), "
        f"snippet(nodes_fts, 0, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', '{SNIPPET_ELLIPSIS}', "
        f"{SNIPPET_TOKENS}), nodes_fts.rank, n.seq "
        "FROM nodes_fts JOIN nodes n ON n.pk = nodes_fts.rowid "
        f"WHERE nodes_fts MATCH ?{scope}"
    )
    ranked = " ORDER BY nodes_fts.rank LIMIT ?"
    with conn.opctx_lock:  # type: ignore[attr-defined]
        try:
            boundary = None
            if rank_window is not None and rank_window > 0:
                # The rowid of the rank_window-th newest match of the whole
                # database (no session filter: that one costs a lookup per row).
                row = conn.execute(
                    "SELECT rowid FROM nodes_fts WHERE nodes_fts MATCH ? "
                    "ORDER BY rowid DESC LIMIT 1 OFFSET ?",
                    (fts_query, max(int(rank_window), int(limit)) - 1),
                ).fetchone()
                boundary = row[0] if row is not None else None
            rows: list = []
            if boundary is not None:
                rows = conn.execute(
                    sql + " AND nodes_fts.rowid >= ?" + ranked,
                    [fts_query, *scope_params, boundary, int(limit)],
                ).fetchall()
            if boundary is None or len(rows) < limit:
                # Few matches, or this session has too few of them among the
                # newest: rank every match.
                rows = conn.execute(sql + ranked, [fts_query, *scope_params, int(limit)]).fetchall()
        except sqlite3.OperationalError as e:
            msg = str(e)
            if raw and not any(w in msg for w in ("locked", "busy", "disk", "malformed", "no such table")):
                raise StoreError(f"invalid FTS5 query {query!r}: {msg}") from None
            path = getattr(conn, "opctx_path", "?")
            raise StoreError(f"{path}: search for {query!r} failed: {msg}") from e
        except sqlite3.Error as e:
            path = getattr(conn, "opctx_path", "?")
            raise StoreError(f"{path}: search for {query!r} failed: {e}") from e
    return [
        SearchHit(
            session_id=r[0],
            node_id=r[1],
            role=r[2],
            name=r[3] or "",
            snippet=(r[4] or "").replace(_ZWSP, ""),
            rank=float(r[5]),
            seq=r[6],
        )
        for r in rows
    ]


def search_across_sessions(
    db_path: str | os.PathLike | sqlite3.Connection,
    query: str,
    limit: int = 20,
    *,
    raw: bool = False,
    rank_window: int | None = SEARCH_RANK_WINDOW,
) -> list[SearchHit]:
    """Full-text search over every session of a database, best hits first.

    ``rank_window``: see "Search" in the module doc (``None`` ranks every match).
    """
    if isinstance(db_path, _Connection):
        return _search(db_path, query, limit, raw, None, rank_window)
    conn = connect(db_path)
    try:
        return _search(conn, query, limit, raw, None, rank_window)
    finally:
        conn.close()


# -- the store ----------------------------------------------------------------------


class GraphStore:
    """The persisted DAG of one session (spec §0.2). See the module docstring.

    ``db_path`` is a path, ``":memory:"``, or a connection from :func:`connect`
    (shared; ``close`` leaves it open). With ``create=True`` an unknown session is
    created with ``session_fields`` (``title``, ``model``, ``agent_id``, ``source``,
    ``extra_meta``); those fields are ignored for an existing session. With
    ``create=False`` an unknown session raises :class:`SessionNotFound`.
    """

    def __init__(
        self,
        db_path: str | os.PathLike | sqlite3.Connection,
        session_id: str,
        *,
        create: bool = True,
        clock: Clock = time.time,
        **session_fields: Any,
    ) -> None:
        unknown = set(session_fields) - set(SESSION_FIELDS) - {"extra_meta"}
        if unknown:
            raise TypeError(f"unknown session field(s): {', '.join(sorted(unknown))}")
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty str")
        if isinstance(db_path, _Connection):
            self._conn: sqlite3.Connection = db_path
            self._owns_conn = False
        elif isinstance(db_path, sqlite3.Connection):
            raise TypeError("pass a connection made by opctx.dag.store.connect(), or a path")
        else:
            self._conn = connect(db_path)
            self._owns_conn = True
        self.db_path: str = self._conn.opctx_path  # type: ignore[attr-defined]
        self.session_id = session_id
        self.clock = clock
        try:
            with _guard(self._conn):
                if _session_row(self._conn, session_id) is None:
                    if not create:
                        raise SessionNotFound(f"no session {session_id!r} in {self.db_path}")
                    with _write(self._conn):
                        if _session_row(self._conn, session_id) is None:
                            _insert_session(self._conn, session_id, clock(), **session_fields)
        except BaseException:
            self.close()
            raise

    # -- plumbing ---------------------------------------------------------------------
    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def close(self) -> None:
        """Close the connection if this store opened it."""
        if self._owns_conn and self._conn is not None:
            self._conn.close()
            self._owns_conn = False

    def __enter__(self) -> GraphStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GraphStore({self.db_path!r}, {self.session_id!r})"

    @contextmanager
    def transaction(self) -> Iterator[GraphStore]:
        """Make the writes inside the block one transaction; see :func:`transaction`."""
        with transaction(self._conn):
            yield self

    def _require_session(self) -> tuple:
        row = _session_row(self._conn, self.session_id)
        if row is None:
            raise SessionNotFound(f"session {self.session_id!r} no longer exists in {self.db_path}")
        return row

    # -- writes -------------------------------------------------------------------------
    def append(self, node: Call, *, follow_head: bool = False) -> Call:
        """Append one node; its seq is allocated in the write transaction.

        ``follow_head=True`` attaches a node without predecessor to the current
        HEAD, read inside the same transaction (chat semantics, race-free).
        Returns ``node`` with ``seq`` (and perhaps ``predecessor``) filled in.
        """
        return self._append([node], [follow_head])[0]

    def append_many(self, nodes: Iterable[Call], *, follow_head: bool = False) -> list[Call]:
        """Append several nodes in one transaction: all of them or none."""
        nodes = list(nodes)
        return self._append(nodes, [follow_head] * len(nodes))

    def _append(self, nodes: list[Call], follow_head: Sequence[bool]) -> list[Call]:
        if not nodes:
            return []
        seen: set[str] = set()
        for node in nodes:
            if not isinstance(node, Call):
                raise TypeError(f"GraphStore.append takes Call objects, got {type(node).__name__}")
            if node.role not in ROLES:
                raise StoreError(
                    f"node {node.id!r}: unknown role {node.role!r} "
                    f"(a Call's role is one of {', '.join(ROLES)})"
                )
            if node.id in seen:
                raise StoreError(
                    f"duplicate node id {node.id!r} within one append to session {self.session_id!r}"
                )
            seen.add(node.id)
        # Serialise before taking the write lock: a bad value fails fast, and the
        # lock is held only for the inserts themselves.
        payloads = [_node_data_json(n) for n in nodes]
        conn = self._conn
        indexing = conn.opctx_index_text
        texts = [fts_text(n) for n in nodes] if indexing else [""] * len(nodes)
        sid = self.session_id
        with _guard(conn), _write(conn):
            srow = self._require_session()
            head = srow[8]
            next_seq = srow[9]
            max_seq = conn.execute(
                "SELECT MAX(seq) FROM nodes WHERE session_id = ?", (sid,)
            ).fetchone()[0]
            if max_seq is not None:
                next_seq = max(next_seq, max_seq + 1)
            pk = (conn.execute("SELECT MAX(pk) FROM nodes").fetchone()[0] or 0) + 1
            rows = []
            fts_rows = []
            old_seqs = [n.seq for n in nodes]
            old_preds = [n.predecessor for n in nodes]
            try:
                for node, data_json, text, follow in zip(
                    nodes, payloads, texts, follow_head, strict=True
                ):
                    if follow and node.predecessor is None and head is not None:
                        node.predecessor = head
                    if node.seq < next_seq:
                        node.seq = next_seq
                    next_seq = node.seq + 1
                    if _extends_head(node, head):
                        head = node.id
                    rows.append(
                        (pk, node.id, sid, node.role, node.predecessor, node.caller,
                         node.created_at, node.seq, data_json)
                    )
                    fts_rows.append((pk, text, sid, node.id))
                    pk += 1
                try:
                    conn.executemany(
                        "INSERT INTO nodes(pk, id, session_id, type, predecessor, caller, "
                        "created_at, seq, data_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        rows,
                    )
                except sqlite3.IntegrityError as e:
                    raise self._explain_integrity(nodes, e, rows[0][0]) from None
                if indexing:
                    conn.executemany(
                        "INSERT INTO nodes_fts(rowid, text, session_id, node_id) "
                        "VALUES (?, ?, ?, ?)",
                        fts_rows,
                    )
                conn.execute(
                    "UPDATE sessions SET last_node_id = ?, next_seq = ?, updated_at = ? "
                    "WHERE id = ?",
                    (head, next_seq, self.clock(), sid),
                )
            except BaseException:
                # The transaction rolls back; leave the caller's Calls as they were.
                _restore(nodes, old_seqs, old_preds)
                raise
            # Inside a transaction() a later step may still roll this back.
            _on_rollback(conn, lambda: _restore(nodes, old_seqs, old_preds))
        return nodes

    def _explain_integrity(
        self, nodes: list[Call], err: sqlite3.IntegrityError, first_new_pk: int
    ) -> StoreError:
        ids = [n.id for n in nodes]
        existing: list[str] = []
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            existing += [
                r[0]
                for r in self._conn.execute(
                    # Still inside the failed transaction: rows of this batch that
                    # went in before the failure (pk >= first_new_pk) are not dups.
                    f"SELECT id FROM nodes WHERE session_id = ? AND pk < ? AND id IN ({marks})",
                    [self.session_id, first_new_pk, *chunk],
                )
            ]
        if existing:
            shown = ", ".join(repr(i) for i in existing[:5])
            more = f" and {len(existing) - 5} more" if len(existing) > 5 else ""
            return StoreError(
                f"duplicate node id {shown}{more}: already in session {self.session_id!r} "
                "(nodes are append-only; use update() to change one)"
            )
        return StoreError(f"session {self.session_id!r}: constraint violated on append ({err})")

    def update(self, node_id: str, **fields: Any) -> Call:
        """Change one node in place, with ``Graph.update`` semantics; refreshes its FTS row.

        Known fields are replaced, ``metadata`` is merged, other keywords land in
        ``metadata``; ``id``/``seq``/``role`` cannot change. HEAD is not touched.
        """
        conn = self._conn
        with _guard(conn), _write(conn):
            row = conn.execute(
                f"SELECT pk, {_NODE_COLUMNS} FROM nodes WHERE session_id = ? AND id = ?",
                (self.session_id, node_id),
            ).fetchone()
            if row is None:
                raise NodeNotFound(f"no node {node_id!r} in session {self.session_id!r}")
            pk = row[0]
            node = _row_to_call(tuple(row[1:]))
            Graph([node]).update(node_id, **fields)
            data_json = _node_data_json(node)
            conn.execute(
                "UPDATE nodes SET predecessor = ?, caller = ?, created_at = ?, data_json = ? "
                "WHERE pk = ?",
                (node.predecessor, node.caller, node.created_at, data_json, pk),
            )
            if conn.opctx_index_text:
                conn.execute("DELETE FROM nodes_fts WHERE rowid = ?", (pk,))
                conn.execute(
                    "INSERT INTO nodes_fts(rowid, text, session_id, node_id) VALUES (?, ?, ?, ?)",
                    (pk, fts_text(node), self.session_id, node_id),
                )
            conn.execute(
                "UPDATE sessions SET updated_at = ? WHERE id = ?", (self.clock(), self.session_id)
            )
        return node

    def set_head(self, node_id: str | None) -> None:
        """Point HEAD at ``node_id`` (which must be in this session), or clear it with ``None``."""
        conn = self._conn
        with _guard(conn), _write(conn):
            self._require_session()
            if node_id is not None and not conn.execute(
                "SELECT 1 FROM nodes WHERE session_id = ? AND id = ?", (self.session_id, node_id)
            ).fetchone():
                raise NodeNotFound(f"no node {node_id!r} in session {self.session_id!r}")
            conn.execute(
                "UPDATE sessions SET last_node_id = ?, updated_at = ? WHERE id = ?",
                (node_id, self.clock(), self.session_id),
            )

    def delete_subtree(self, node_id: str) -> list[str]:
        """Delete ``node_id``, everything below it, and their FTS rows; one transaction.

        "Below" is the closure over both edges: predecessor children (the branch
        tail) and callees (the calls a deleted node made). With one predecessor per
        node, nothing below ``node_id`` belongs to another branch, so every kept
        branch stays whole. If HEAD is deleted it moves to the predecessor of
        ``node_id``; when that is gone too (``node_id`` was a root), to the newest
        remaining leaf, or ``None``. Returns the deleted ids in seq order. Seqs are
        never reused afterwards (``sessions.next_seq``). ``reads`` of surviving
        nodes that named a deleted node are left as they are (history of what an
        LLM call read).
        """
        conn = self._conn
        sid = self.session_id
        with _guard(conn), _write(conn):
            srow = self._require_session()
            root = conn.execute(
                "SELECT predecessor FROM nodes WHERE session_id = ? AND id = ?", (sid, node_id)
            ).fetchone()
            if root is None:
                raise NodeNotFound(f"no node {node_id!r} in session {sid!r}")
            doomed = {node_id}
            frontier = [node_id]
            while frontier:
                nxt: list[str] = []
                for i in range(0, len(frontier), 400):
                    chunk = frontier[i : i + 400]
                    marks = ",".join("?" * len(chunk))
                    for (child,) in conn.execute(
                        f"SELECT id FROM nodes WHERE session_id = ? AND (predecessor IN ({marks}) "
                        f"OR caller IN ({marks}))",
                        [sid, *chunk, *chunk],
                    ):
                        if child not in doomed:
                            doomed.add(child)
                            nxt.append(child)
                frontier = nxt
            ids = list(doomed)
            ordered: list[tuple[int, str]] = []
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                marks = ",".join("?" * len(chunk))
                params = [sid, *chunk]
                ordered += conn.execute(
                    f"SELECT seq, id FROM nodes WHERE session_id = ? AND id IN ({marks})", params
                ).fetchall()
                conn.execute(
                    "DELETE FROM nodes_fts WHERE rowid IN (SELECT pk FROM nodes "
                    f"WHERE session_id = ? AND id IN ({marks}))",
                    params,
                )
                conn.execute(f"DELETE FROM nodes WHERE session_id = ? AND id IN ({marks})", params)
            head = srow[8]
            if head in doomed:
                head = root[0] if root[0] not in doomed else None
                if head is None or not conn.execute(
                    "SELECT 1 FROM nodes WHERE session_id = ? AND id = ?", (sid, head)
                ).fetchone():
                    leaf = conn.execute(
                        "SELECT n.id FROM nodes n WHERE n.session_id = ? AND NOT EXISTS ("
                        "SELECT 1 FROM nodes c WHERE c.session_id = n.session_id "
                        "AND c.predecessor = n.id) ORDER BY n.seq DESC LIMIT 1",
                        (sid,),
                    ).fetchone()
                    head = leaf[0] if leaf else None
            conn.execute(
                "UPDATE sessions SET last_node_id = ?, updated_at = ? WHERE id = ?",
                (head, self.clock(), sid),
            )
        return [i for _, i in sorted(ordered)]

    # -- reads --------------------------------------------------------------------------
    def head(self) -> str | None:
        """HEAD: the node the conversation continues from (``sessions.last_node_id``)."""
        with _guard(self._conn):
            return self._require_session()[8]

    def get(self, node_id: str) -> Call | None:
        with _guard(self._conn):
            row = self._conn.execute(
                f"SELECT {_NODE_COLUMNS} FROM nodes WHERE session_id = ? AND id = ?",
                (self.session_id, node_id),
            ).fetchone()
        return _row_to_call(tuple(row)) if row is not None else None

    def get_many(self, node_ids: Sequence[str]) -> list[Call]:
        """The nodes with these ids that exist, in the order asked."""
        found: dict[str, Call] = {}
        ids = list(node_ids)
        with _guard(self._conn):
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                marks = ",".join("?" * len(chunk))
                for row in self._conn.execute(
                    f"SELECT {_NODE_COLUMNS} FROM nodes WHERE session_id = ? AND id IN ({marks})",
                    [self.session_id, *chunk],
                ):
                    found[row[0]] = _row_to_call(tuple(row))
        return [found[i] for i in ids if i in found]

    def iter_nodes(self) -> Iterator[Call]:
        """Every node of the session in seq order (materialised under the lock)."""
        with _guard(self._conn):
            rows = self._conn.execute(
                f"SELECT {_NODE_COLUMNS} FROM nodes WHERE session_id = ? ORDER BY seq",
                (self.session_id,),
            ).fetchall()
        return map(_row_to_call, rows)

    def load(self, *, lazy: bool = True) -> Graph:
        """The whole session as an in-memory ``Graph`` (one SELECT, in seq order).

        ``lazy`` (default) decodes each node's JSON payload on first use (see
        ``_StoredCall``); ``lazy=False`` decodes everything now.
        """
        with _guard(self._conn):
            rows = self._conn.execute(
                f"SELECT {_NODE_COLUMNS} FROM nodes WHERE session_id = ? ORDER BY seq",
                (self.session_id,),
            ).fetchall()
        make = _row_to_lazy_call if lazy else _row_to_call
        # Tens of thousands of new containers would trigger the cyclic GC over
        # and over while nothing here can form a cycle; pause it for the build.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            nodes = [make(r) for r in rows]
            del rows
            return _graph_from_sorted(nodes)
        finally:
            if gc_was_enabled:
                gc.enable()

    def count(self) -> int:
        with _guard(self._conn):
            return self._conn.execute(
                "SELECT COUNT(*) FROM nodes WHERE session_id = ?", (self.session_id,)
            ).fetchone()[0]

    def edges(self) -> list[tuple[str, str | None, str | None, int]]:
        """``(id, predecessor, caller, seq)`` of every node, seq order, without decoding JSON."""
        with _guard(self._conn):
            return [
                tuple(r)
                for r in self._conn.execute(
                    "SELECT id, predecessor, caller, seq FROM nodes WHERE session_id = ? "
                    "ORDER BY seq",
                    (self.session_id,),
                )
            ]

    def chain_ids(self, head_id: str) -> list[str]:
        """Ids on the predecessor chain ending at ``head_id``, root first (one recursive query)."""
        with _guard(self._conn):
            bound = self._conn.execute(
                "SELECT COUNT(*) FROM nodes WHERE session_id = ?", (self.session_id,)
            ).fetchone()[0]
            rows = self._conn.execute(
                "WITH RECURSIVE chain(id, pred, depth) AS ("
                " SELECT id, predecessor, 0 FROM nodes WHERE session_id = :sid AND id = :head"
                " UNION ALL"
                " SELECT n.id, n.predecessor, c.depth + 1 FROM chain c"
                " JOIN nodes n ON n.session_id = :sid AND n.id = c.pred"
                " WHERE c.depth < :bound)"
                " SELECT id FROM chain ORDER BY depth DESC",
                {"sid": self.session_id, "head": head_id, "bound": bound},
            ).fetchall()
        if not rows:
            raise NodeNotFound(f"no node {head_id!r} in session {self.session_id!r}")
        ids = [r[0] for r in rows]
        if len(ids) > bound or len(set(ids)) != len(ids):
            raise StoreError(f"session {self.session_id!r}: predecessor cycle through {head_id!r}")
        return ids

    def descendant_ids(self, node_id: str) -> list[str]:
        """Ids of every node reachable from ``node_id`` through predecessor children, seq order."""
        with _guard(self._conn):
            rows = self._conn.execute(
                "WITH RECURSIVE below(id) AS ("
                " SELECT n.id FROM nodes n WHERE n.session_id = :sid AND n.predecessor = :root"
                " UNION"
                " SELECT n.id FROM below b JOIN nodes n"
                " ON n.session_id = :sid AND n.predecessor = b.id)"
                " SELECT n.id FROM below b JOIN nodes n ON n.session_id = :sid AND n.id = b.id"
                " ORDER BY n.seq",
                {"sid": self.session_id, "root": node_id},
            ).fetchall()
        return [r[0] for r in rows if r[0] != node_id]

    def search(
        self,
        query: str,
        limit: int = 20,
        *,
        raw: bool = False,
        rank_window: int | None = SEARCH_RANK_WINDOW,
    ) -> list[SearchHit]:
        """Full-text search within this session; literal unless ``raw=True``.

        ``rank_window``: see "Search" in the module doc (``None`` ranks every match).
        """
        return _search(self._conn, query, limit, raw, self.session_id, rank_window)
