"""Full-text search of the store: what a node is indexed under, and how a query runs.

* Index side: :func:`fts_text` is the searchable text of a node (output, tool
  calls, content blocks, input without an llm node's system prompt; at most
  ``FTS_TEXT_LIMIT`` characters), :func:`search_text` flattens structured values
  and JSON strings into ``key: value`` lines, ``_segment_cjk`` puts a zero-width
  space after every CJK character.
* Query side: :func:`literal_fts_query` quotes user text into FTS5 phrases;
  ``_search`` runs a query (literal or raw) over one session or the whole
  database, with the rank window, and returns :class:`SearchHit` best first.

The choices ("FTS text", "CJK", "Search", "Rank window") are explained in the
``opctx.dag.store`` docstring; ``GraphStore.search`` and
``search_across_sessions`` are the public entries.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from ._errors import StoreError
from .messages import as_text
from .nodes import Call

__all__ = [
    "SearchHit",
    "search_text",
    "fts_text",
    "literal_fts_query",
    "FTS_TEXT_LIMIT",
    "SEARCH_RANK_WINDOW",
]

FTS_TEXT_LIMIT = 65536
SEARCH_RANK_WINDOW = 2000
SNIPPET_OPEN, SNIPPET_CLOSE, SNIPPET_ELLIPSIS = "«", "»", "…"
SNIPPET_TOKENS = 16
_ZWSP = "\u200b"


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


# Han / Kana / Hangul (see "CJK" in the module doc). A run is "[cjk][cjk]*", not
# "[cjk]+": a pattern that opens with a plain class lets the engine skip ahead to the
# next candidate character in C, where a leading repeat makes it try a match at every
# position (three times slower over the text between runs).
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002fa1f"
_CJK_RUN = re.compile(f"([{_CJK}][{_CJK}]*)")
_HAS_TOKEN = re.compile(r"[^\W_]")


def _segment_cjk_python(text: str) -> str:
    """``text`` with a zero-width space after every CJK character.

    The definition of ``_segment_cjk``: the compiled ``_segment.segment_cjk`` gives the
    same results (tests compare them) and is used where it was built.

    Why this shape: a template replacement per character (``sub(r"\\1" + ZWSP)``)
    cost ~6 µs a character, and a Python callback per run of ``sub`` ~1.5 µs a run;
    ``split`` finds the runs in C. The runs are then spaced all at once: joined by a
    newline (never part of a run), one ``join`` puts a space after every character, and
    splitting at "newline + space" gives each spaced run back. On text with many short
    runs (Chinese words between English ones) that is 0.8x the cost of a ``join`` per
    run, the same on long ones. ASCII text (most text) is returned after one C-level
    ``isascii`` check. The result is the same string.
    """
    if text.isascii():
        return text
    parts = _CJK_RUN.split(text)
    if len(parts) == 1:
        return text
    # the runs sit at the odd places
    spaced = _ZWSP.join("\n".join(parts[1::2])) + _ZWSP
    parts[1::2] = spaced.split(_RUN_BREAK)
    return "".join(parts)


_RUN_BREAK = "\n" + _ZWSP  # between two spaced runs (see ``_segment_cjk_python``)

try:  # the compiled segmentation (setup.py builds it where a C compiler is available)
    from ._segment import segment_cjk as _segment_cjk
except ImportError:  # pragma: no cover - exercised by installs without a compiler
    _segment_cjk = _segment_cjk_python


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
    # (possibly megabytes of) tool output is copied by strip(); most text opens on it,
    # so the first character is looked at before any regex runs
    first = text[:1]
    if first not in ("{", "["):
        if not first.isspace():
            return None
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
    limit = int(limit)
    with conn.opctx_lock:  # type: ignore[attr-defined]
        # One read transaction around every statement and name read of the search
        # (unless the caller's transaction already is one): on its own, each of
        # them begins and ends a WAL read transaction, and the ~20 blob reads of
        # the names cost twice as much for it. The counts, the ranking and the
        # names also see one snapshot of the database.
        own = not conn.in_transaction
        try:
            if own:
                conn.execute("BEGIN")
            if session_id is not None and _only_session(conn, session_id):
                # The filter would keep every row: skip its lookups. Should a
                # hit of another session show all the same (the check and the
                # search read one snapshot), the search runs again with the filter.
                hits = _hits(conn, _top(conn, fts_query, None, limit, rank_window))
                if all(hit.session_id == session_id for hit in hits):
                    return hits
            return _hits(conn, _top(conn, fts_query, session_id, limit, rank_window))
        except sqlite3.OperationalError as e:
            msg = str(e)
            if raw and not any(w in msg for w in ("locked", "busy", "disk", "malformed", "no such table")):
                raise StoreError(f"invalid FTS5 query {query!r}: {msg}") from None
            path = getattr(conn, "opctx_path", "?")
            raise StoreError(f"{path}: search for {query!r} failed: {msg}") from e
        except sqlite3.Error as e:
            path = getattr(conn, "opctx_path", "?")
            raise StoreError(f"{path}: search for {query!r} failed: {e}") from e
        finally:
            if own and conn.in_transaction:
                conn.execute("COMMIT")  # it only read: nothing to write back


def _only_session(conn: sqlite3.Connection, session_id: str) -> bool:
    """Is ``session_id`` the database's only session (so every node is one of its own)?

    Why ask: the session filter looks up each match's ``nodes`` row, a page read per
    match on a cold cache, which a database of one session (a chat's own file, an
    import of one transcript) never needs.
    """
    ids = conn.execute("SELECT id FROM sessions LIMIT 2").fetchall()
    return len(ids) == 1 and ids[0][0] == session_id


def _top(
    conn: sqlite3.Connection, fts_query: str, session_id: str | None, limit: int,
    rank_window: int | None,
) -> list[tuple]:
    """The rows (see :func:`_ranked`) of the best ``limit`` matches, best first (see "Rank window")."""
    boundary = None
    if rank_window is not None and rank_window > 0:
        window = max(int(rank_window), limit)
        # Are there window matches at all? Counting in rowid order costs half the
        # newest-first walk below (FTS5 reads its doclists forwards); most queries
        # have fewer matches and pay only this count.
        matches = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM nodes_fts WHERE nodes_fts MATCH ? LIMIT ?)",
            (fts_query, window),
        ).fetchone()[0]
        if matches == 0:
            # Nothing to rank: the ranking query would walk the same doclists again
            # (a CJK phrase of common characters, text found nowhere).
            return []
        if matches >= window:
            # The rowid of the window-th newest match of the whole
            # database (no session filter: that one costs a lookup per row).
            row = conn.execute(
                "SELECT rowid FROM nodes_fts WHERE nodes_fts MATCH ? "
                "ORDER BY rowid DESC LIMIT 1 OFFSET ?",
                (fts_query, window - 1),
            ).fetchone()
            boundary = row[0] if row is not None else None
    top: list = []
    if boundary is not None:
        top = _ranked(conn, fts_query, session_id, limit, boundary)
    if boundary is None or len(top) < limit:
        # Few matches, or this session has too few of them among the
        # newest: rank every match.
        top = _ranked(conn, fts_query, session_id, limit, None)
    return top


_RANKED_SQL = (
    "SELECT nodes_fts.rowid, nodes_fts.rank, n.session_id, n.id, n.type, n.seq, "
    f"snippet(nodes_fts, 0, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', '{SNIPPET_ELLIPSIS}', {SNIPPET_TOKENS}) "
    "FROM nodes_fts CROSS JOIN nodes n ON n.pk = nodes_fts.rowid WHERE nodes_fts MATCH ?"
)


def _ranked(
    conn: sqlite3.Connection, fts_query: str, session_id: str | None, limit: int,
    boundary: int | None,
) -> list[tuple]:
    """``(pk, rank, session_id, id, type, seq, snippet)`` of the best ``limit`` matches, best first.

    Why one query: FTS5 takes ``ORDER BY rank`` over (its plan sorts the matches'
    ``(rowid, rank)`` itself, no temporary b-tree), so SQLite steps the rows in
    rank order and computes the other result columns, the snippet among them, only
    for the rows it steps to: the ``limit`` it returns (and, with a session filter,
    the other sessions' rows it skips on the way read only ``nodes.session_id``).
    A separate snippet query for the returned rows parsed the query again and
    walked its doclists a second time, for the same snippets.
    ``tests/dag/test_store.py`` checks the plan has no sorter of its own.

    The session filter reads ``nodes.session_id`` by pk (a short row prefix) rather
    than the FTS row's own copy, which sits behind up to 64 Ki of text.
    """
    sql = _RANKED_SQL
    params: list[Any] = [fts_query]
    if session_id is not None:
        sql += " AND n.session_id = ?"
        params.append(session_id)
    if boundary is not None:
        sql += " AND nodes_fts.rowid >= ?"
        params.append(boundary)
    return conn.execute(sql + " ORDER BY nodes_fts.rank LIMIT ?", [*params, limit]).fetchall()


def _hits(conn: sqlite3.Connection, rows: list[tuple]) -> list[SearchHit]:
    """The :class:`SearchHit` of each row of :func:`_ranked`, in their order."""
    return [
        SearchHit(
            session_id=sid,
            node_id=nid,
            role=role,
            name=_stored_name(conn, pk),
            snippet=(snippet or "").replace(_ZWSP, ""),
            rank=float(rank),
            seq=seq,
        )
        for pk, rank, sid, nid, role, seq, snippet in rows
    ]


# ``data_json`` opens with the name (``_rows._node_data_json`` writes it first).
_NAME_HEAD = b'{"name":'
_NAME_READ = 1024
_NAME_DECODER = json.JSONDecoder()


def _stored_name(conn: sqlite3.Connection, pk: int) -> str:
    """A node's name, read from the first KiB of its ``data_json``.

    Why not ``json_extract(data_json, '$.name')``: it loads and parses the whole JSON
    of the node, outputs and all (megabytes for a large tool output), for a name of a
    few bytes at its start. A name longer than the read, or a row written otherwise,
    is extracted the slow way.
    """
    try:
        with conn.blobopen("nodes", "data_json", pk, readonly=True) as blob:
            head = blob.read(_NAME_READ)
    except sqlite3.OperationalError:  # the row went away since it was ranked
        head = b""
    if head.startswith(_NAME_HEAD):
        try:  # a multi-byte character cut at the end of the read is dropped ("ignore")
            name = _NAME_DECODER.raw_decode(head.decode("utf-8", "ignore"), len(_NAME_HEAD))[0]
        except ValueError:
            name = None
        if isinstance(name, str):
            return name
    row = conn.execute("SELECT json_extract(data_json, '$.name') FROM nodes WHERE pk = ?", (pk,)).fetchone()
    return (row[0] if row is not None else None) or ""
