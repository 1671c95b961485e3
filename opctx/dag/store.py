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
``node_tokens(pk, estimator, tokens, thinking)``
    a node's token count per estimator identity (``opctx.context.token_counts``
    says what an identity is and when counts are made); deleted with the node,
    dropped when its data changes.
``schema_migrations(version, name, applied_at)``
    which migrations have run.

Choices, where the specification leaves room (docs/design.md):

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
  the transaction, or by ``set_head`` (docs/design.md, "Storage"):

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
  bm25 ``rank`` (more negative = better); hits come best first. FTS5 ranks the
  matches itself and snippets and names are built for the rows returned only
  (``_search._ranked`` says why), and a session's search in a database that holds
  no other session skips the session filter. A search is one read transaction
  (or part of the caller's): one snapshot, and one WAL read lock, not one per
  statement and name read.
* **Rank window.** Ranking costs ~1.5 µs per matching row and a word found in
  half of 100,000 nodes took ~90 ms to rank, so when a query matches more than
  ``SEARCH_RANK_WINDOW`` (2,000) rows of the database, only the 2,000 newest
  matches are ranked (a count of the matches up to 2,000 says whether there are
  that many, then one ``ORDER BY rowid DESC ... OFFSET`` finds where they
  start); bm25 still uses the whole index's statistics. If the session has
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

Layout (inspect_ai style: private modules, public names re-exported here)
========================================================================

``store.py``
    ``GraphStore``, ``connect`` (open + migrate), ``search_across_sessions``,
    and the ``sessions`` table helpers that ``session.py`` / ``session_db.py`` share.
``_schema.py``
    the migrations (``MIGRATIONS``, ``SCHEMA_VERSION``) and ``_migrate``.
``_connection.py``
    opening a database, the per-connection lock, ``_write`` / ``transaction``.
``_search.py``
    the indexed text (``fts_text``, ``search_text``), ``literal_fts_query``, the
    ranked query ``_search`` and ``SearchHit``.
``_token_counts.py``
    the ``node_tokens`` table: persisted token counts per estimator identity
    (``read_token_counts``, ``write_token_counts``, ``token_count_coverage``).
``_rows.py``
    a ``Call`` to a ``nodes`` row and back (eager and lazy), ``Graph`` building.
``_errors.py``
    ``StoreError``, ``SessionNotFound``, ``NodeNotFound``.

Example
=======

>>> from opctx.dag.nodes import UserMessage
>>> store = GraphStore(":memory:", "demo", title="a demo")
>>> node = store.append(UserMessage("where is the config loader?"))
>>> node.seq, store.head() == node.id
(0, True)
>>> [(hit.node_id == node.id, hit.role) for hit in store.search("config loader")]
[(True, 'user')]
>>> store.search('loader" OR "anything')  # literal: quotes and OR are just text
[]
>>> store.close()
"""

from __future__ import annotations

import gc
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ._connection import BUSY_TIMEOUT_MS as BUSY_TIMEOUT_MS
from ._connection import (
    _check_header,
    _Connection,
    _guard,
    _on_rollback,
    _open,
    _write,
    flat_transaction,
    set_text_index,
    transaction,
)
from ._connection import _switch_to_wal as _switch_to_wal
from ._errors import NodeNotFound, SessionNotFound, StoreError
from ._rows import (
    _DUMPS_KW,
    _NODE_COLUMNS,
    _NODE_COLUMNS_BYTES,
    _graph_from_sorted,
    _node_data_json,
    _row_to_call,
    _row_to_lazy_call,
)
from ._schema import MIGRATIONS, SCHEMA_VERSION, _applied_version, _migrate
from ._search import (
    FTS_TEXT_LIMIT,
    SEARCH_RANK_WINDOW,
    SearchHit,
    _search,
    fts_text,
    literal_fts_query,
    search_text,
)
from ._search import _segment_cjk as _segment_cjk
from ._token_counts import read_token_counts, token_count_coverage, write_token_counts
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
    "flat_transaction",
    "literal_fts_query",
    "fts_text",
    "search_text",
    "set_text_index",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "FTS_TEXT_LIMIT",
    "SEARCH_RANK_WINDOW",
    "SESSION_FIELDS",
    "read_token_counts",
    "write_token_counts",
    "token_count_coverage",
]

SESSION_FIELDS = ("title", "model", "agent_id", "source")

Clock = Callable[[], float]


def connect(db_path: str | os.PathLike) -> sqlite3.Connection:
    """Open (or create) a database: WAL, foreign keys, busy timeout, migrations applied.

    Raises ``StoreError`` naming the path when the file is not an SQLite database,
    is damaged, or cannot be opened.
    """
    # MIGRATIONS is looked up here at each call, so that it is this module's list
    # that a database is brought up to (a test appends a failing one to it).
    return _open(db_path, lambda conn: _migrate(conn, MIGRATIONS))


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
    conn.opctx_flat = False
    conn.opctx_index_text = True
    conn.opctx_readonly = True  # writers that are optional (cached token counts) skip it
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


def _extends_head(node: Call, head: str | None) -> bool:
    """Whether appending ``node`` moves HEAD (see "HEAD" in the module doc)."""
    if head is None:
        return node.caller is None
    return node.predecessor == head


def _attach(node: Call, follow: bool, head: str | None) -> str | None:
    """Place ``node`` after ``head``: a node that follows HEAD and has no predecessor
    gets HEAD as its predecessor; the HEAD after it is returned (``_extends_head``).
    The rule of every append, here and in ``opctx.dag.memory_db``."""
    if follow and node.predecessor is None and head is not None:
        node.predecessor = head
    return node.id if _extends_head(node, head) else head


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


# -- search over every session (GraphStore.search is one session) --------------------


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
                    head = _attach(node, follow, head)
                    if node.seq < next_seq:
                        node.seq = next_seq
                    next_seq = node.seq + 1
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
                    f"SELECT {_NODE_COLUMNS_BYTES} FROM nodes WHERE session_id = ? AND id IN ({marks})",
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
