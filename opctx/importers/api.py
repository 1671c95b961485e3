"""The importers' front door: parse a file, walk folders, import into a database.

``parse_path(path, format=None, on_error="stop") -> list[ImportedSession]``
    One file (format detected from content unless given), or a folder of one run's
    OpenHands completion logs (rebuilt as one run). Pure: no database.
``iter_transcript_files(paths)``
    Expands folders (a whole ``~/.claude/projects`` tree, a corpus folder): files ending
    ``.jsonl``, ``.json``, ``.traj`` or ``.md`` (the latter only with an Aider header),
    sorted, minus the side files a Claude Code session file reads itself (its
    ``subagents/``, flat ``agent-*.jsonl`` and ``tool-results/``), so nothing is imported
    twice, and minus hidden folders *below* the walked one (``.git``, ``.venv``; walk
    ``~/.claude/projects`` itself to import Claude Code's folder). Each folder is listed
    once (a flat folder of 10,000 sessions is found in well under a second); which side
    files a session owns is decided per file from the walk (``side_file_owner``). A folder
    holding two or more OpenHands completion logs (checked by content) is yielded once,
    as the folder: its files are the calls of one run.
    Folders that cannot be read go to ``problems`` (``ImportReport.unreadable``): never
    skipped silently. FIFOs and devices are not candidates: opening one would block.
``import_paths(paths, db, ...) -> ImportReport``
    Parse and write, session by session (each one atomic, see ``writer``), with an
    optional tqdm progress bar on stderr, shown from the start (while folders are walked).

Errors (``on_error``):
    ``"stop"``: the first file that cannot be imported ends the run (sessions already
    written stay; that file contributes nothing) and ``ImportReport.stopped`` is set.
    ``"skip"``: bad lines are skipped and listed, a file that cannot be imported at all
    is listed in ``failed`` and the run goes on.
    A file named on the command line whose content is not a transcript is a failure; one
    met while walking a folder (a README, a manifest) is only listed in ``ignored``:
    walking a folder means "import the transcripts in it". A parser that raises anything
    but ``TranscriptError`` (a bug) fails that file, never the run.
    The database itself refusing writes (read-only, full, damaged) is no transcript's
    fault: ``ImportDatabaseError`` ends the run at once, with one message.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opctx.dag.store import StoreError

from .base import ON_ERROR_MODES, ImportedSession, Issue, TranscriptError, UnknownFormatError
from .detect import NOT_REGULAR, sniff

__all__ = [
    "PARSERS",
    "FORMATS",
    "parse_path",
    "iter_transcript_files",
    "import_paths",
    "import_path",
    "ImportReport",
    "ImportDatabaseError",
]


def _parsers() -> dict[str, Callable[..., list[ImportedSession]]]:
    from . import aider, claude_code, codex, message_lists, openhands, openhands_completions

    return {
        "claude_code": lambda p, on_error, parsed: claude_code.parse_claude_code(p, on_error=on_error),
        "claude_code_hook": lambda p, on_error, parsed: claude_code.parse_claude_code_hook_json(
            p, on_error=on_error, data=parsed),
        "codex": lambda p, on_error, parsed: codex.parse_codex(p, on_error=on_error),
        "openai": lambda p, on_error, parsed: message_lists.parse_openai(p, on_error=on_error, parsed=parsed),
        "anthropic": lambda p, on_error, parsed: message_lists.parse_anthropic(
            p, on_error=on_error, parsed=parsed),
        "hermes": lambda p, on_error, parsed: message_lists.parse_hermes(p, on_error=on_error),
        "swe_agent": lambda p, on_error, parsed: message_lists.parse_swe_agent(
            p, on_error=on_error, parsed=parsed),
        "mini_swe_agent": lambda p, on_error, parsed: message_lists.parse_mini_swe_agent(
            p, on_error=on_error, parsed=parsed),
        "openhands": lambda p, on_error, parsed: openhands.parse_openhands(p, on_error=on_error, parsed=parsed),
        "openhands_completions": lambda p, on_error, parsed: openhands_completions.parse_openhands_completions(
            p, on_error=on_error, parsed=parsed),
        "opctx_jsonl": lambda p, on_error, parsed: message_lists.parse_opctx_jsonl(p, on_error=on_error),
        "aider": lambda p, on_error, parsed: aider.parse_aider(p, on_error=on_error),
    }


PARSERS = _parsers()
FORMATS = tuple(PARSERS)


def parse_path(path: str | os.PathLike, format: str | None = None, *,
               on_error: str = "stop") -> list[ImportedSession]:
    """Parse one recording into sessions (no database involved)."""
    if on_error not in ON_ERROR_MODES:
        raise ValueError(f"on_error must be one of {ON_ERROR_MODES}, got {on_error!r}")
    path = str(path)
    parsed: Any = None
    if format is None:
        format, parsed = sniff(path)
        if format == "directory":
            if not _completions_folder(path):
                raise TranscriptError(path, None, "is a directory: use import_paths to walk it")
            format = "openhands_completions"  # one instance's logged calls: one run
    elif format not in PARSERS:
        raise ValueError(f"unknown format {format!r}; known: {', '.join(FORMATS)}")
    elif format == "openhands_completions" and os.path.isdir(path):
        pass
    elif not os.path.isfile(path):
        raise TranscriptError(path, None, NOT_REGULAR if os.path.exists(path) else "no such file")
    elif os.path.getsize(path) == 0:
        raise TranscriptError(path, None, "file is empty")
    # forced: the caller named the format (a folder of calls was detected, not forced)
    forced = parsed is None and not os.path.isdir(path)
    try:
        sessions = PARSERS[format](path, on_error, parsed)
    except TranscriptError as exc:
        actual = _actual_format(path) if forced else format
        if actual not in (format, None):
            raise TranscriptError(
                path, exc.line, f"{exc.reason}; the content looks like {actual!r}, not {format!r}"
            ) from None
        raise
    except RecursionError:
        raise TranscriptError(path, None, "nesting too deep to parse") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        # A record of the right format with a field of the wrong type: say where.
        raise TranscriptError(path, None, f"unexpected {format} content ({type(exc).__name__}: {exc})") from exc
    if not any(s.calls for s in sessions):
        # e.g. a Codex rollout forced through --format claude_code: every line was
        # "unknown" and kept nowhere useful. Say so instead of writing empty sessions.
        actual = _actual_format(path) or "unrecognised"
        hint = f" (its content looks like {actual!r})" if actual != format else ""
        raise TranscriptError(path, None, f"no {format} conversation found in the file{hint}")
    return sessions


def _actual_format(path: str) -> str | None:
    try:
        return sniff(path)[0]
    except TranscriptError:
        return None


_CANDIDATE_SUFFIXES = (".jsonl", ".json", ".traj", ".md")


def iter_transcript_files(paths: Iterable[str | os.PathLike], *,
                          problems: list[tuple[str, str]] | None = None,
                          ignored: list[tuple[str, str]] | None = None) -> Iterator[tuple[str, bool]]:
    """(file, named explicitly) for every candidate file under ``paths``.

    One pass over each folder tree (``os.scandir``), so a flat folder of 10,000 sessions
    is listed once, not once per file. Folders that cannot be read are not skipped
    silently: each is added to ``problems`` as ``(folder, reason)``. Only regular files
    (or links to them) are candidates: a FIFO or a device named like a transcript would
    block the import, so it is never opened and goes to ``ignored`` with the reason.
    """
    from .claude_code import side_file_owner
    from .openhands_completions import is_completion_name

    for raw in paths:
        p = Path(raw).expanduser()
        if not p.is_dir():
            yield str(p), True
            continue
        files = sorted(_walk(str(p), problems, ignored))
        sessions = {f for f in files if f.endswith(".jsonl")}
        runs = _completion_runs(files)
        for f in files:
            folder = os.path.dirname(f)
            if folder in runs and is_completion_name(os.path.basename(f)):
                if runs[folder]:  # a folder of one run's logged calls is imported as one
                    runs[folder] = False
                    yield folder, False
                continue
            owner = side_file_owner(f, sessions)
            if owner is not None:
                continue
            if f.endswith(".md") and not _is_aider(f):
                continue
            yield f, False


def _completions_folder(path: str) -> bool:
    from .openhands_completions import calls_folder

    return bool(calls_folder(path))


def _completion_runs(files: list[str]) -> dict[str, bool]:
    """Folders holding two or more OpenHands completion logs of one model (one run's
    calls), checked by content.

    The value says whether the folder is still to be yielded; a folder of one log is not
    listed (its file is imported as it is: one call is already the whole trajectory).
    """
    from .openhands_completions import is_completion_name, log_prefix

    prefixes: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for f in files:
        name = os.path.basename(f)
        if is_completion_name(name):
            folder = os.path.dirname(f)
            prefixes.setdefault(folder, set()).add(log_prefix(name))
            counts[folder] = counts.get(folder, 0) + 1
    # only a folder whose logs all come from one model: a walk never leaves a call out
    return {d: True for d, n in counts.items()
            if n >= 2 and len(prefixes[d]) == 1 and _completions_folder(d)}


def _walk(top: str, problems: list[tuple[str, str]] | None,
          ignored: list[tuple[str, str]] | None = None) -> Iterator[str]:
    """Candidate files under ``top``; hidden folders below it (.git, .venv) are left out."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError as exc:
            if problems is not None:
                problems.append((folder, f"folder not readable ({exc.strerror or exc})"))
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not entry.name.startswith("."):
                        stack.append(entry.path)
                elif entry.name.endswith(_CANDIDATE_SUFFIXES):
                    if entry.is_file():
                        yield entry.path
                    elif ignored is not None:
                        ignored.append((entry.path, NOT_REGULAR if os.path.exists(entry.path)
                                        else "a link to a file that does not exist"))
            except OSError as exc:  # a dangling or unreadable entry
                if problems is not None:
                    problems.append((entry.path, f"not readable ({exc.strerror or exc})"))


def _is_aider(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(64).lstrip().startswith(b"# aider chat started at")
    except OSError:
        return False


class ImportDatabaseError(StoreError):
    """The database cannot take the import (read-only, full, damaged, locked): not the
    transcripts' fault, so the whole import stops with this one error."""


# sqlite3 errors that are about the database file, not about the session being written
_DATABASE_PROBLEMS = ("readonly", "read-only", "disk i/o", "disk is full", "not a database",
                      "malformed", "unable to open", "is locked", "no such table")


def _database_problem(exc: BaseException) -> bool:
    while exc is not None:
        if isinstance(exc, sqlite3.Error) and not isinstance(exc, sqlite3.IntegrityError):
            return any(p in str(exc).lower() for p in _DATABASE_PROBLEMS)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


@dataclass
class ImportReport:
    """What an import did. ``ok`` is False when anything failed, was skipped or unreadable.

    ``candidates``: transcript files found (0: nothing to import). ``unreadable``:
    folders (or entries) the walk could not read, as ``(path, reason)``.
    """

    written: list[dict] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    candidates: int = 0
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    stopped: bool = False

    @property
    def ok(self) -> bool:
        return not self.failed and not self.issues and not self.unreadable

    @property
    def sessions(self) -> int:
        return len(self.written)


def import_paths(
    paths: Iterable[str | os.PathLike],
    db: str | os.PathLike | sqlite3.Connection,
    *,
    format: str | None = None,
    on_error: str = "stop",
    replace: bool = False,
    progress: bool = False,
) -> ImportReport:
    """Import every recording under ``paths`` into ``db`` (see the module docstring).

    Raises ``ImportDatabaseError`` (a ``StoreError``) when the database itself refuses
    the writes (read-only, full, damaged): sessions written before stay.
    """
    if on_error not in ON_ERROR_MODES:
        raise ValueError(f"on_error must be one of {ON_ERROR_MODES}, got {on_error!r}")
    report = ImportReport()
    started = time.perf_counter()
    bar = None
    if progress:
        from tqdm import tqdm

        # shown while the folders are walked, before the number of files is known
        bar = tqdm(total=None, unit="file", desc="finding transcripts", leave=False, disable=None)
    owns = False
    conn: Any = db
    try:
        files = list(iter_transcript_files(paths, problems=report.unreadable, ignored=report.ignored))
        report.candidates = len(files)
        if bar is not None:
            bar.reset(total=len(files))
            bar.set_description_str("importing", refresh=False)
        if not isinstance(db, sqlite3.Connection):
            from opctx.dag.store import connect

            conn = connect(db)
            owns = True
        for path, explicit in files:
            if bar is not None:
                bar.set_postfix_str(os.path.basename(path)[-40:], refresh=False)
            try:
                _import_file(path, explicit, conn, report, format=format, on_error=on_error,
                             replace=replace)
            finally:
                if bar is not None:
                    bar.update(1)
            if report.stopped:
                break
    finally:
        if bar is not None:
            bar.close()
        if owns:
            conn.close()
    report.seconds = time.perf_counter() - started
    return report


def _import_file(path: str, explicit: bool, conn: Any, report: ImportReport, *,
                 format: str | None, on_error: str, replace: bool) -> None:
    """Parse one file and write its sessions, recording the outcome in ``report``."""
    from .writer import write_session

    def fail(message: str) -> None:
        report.failed.append((path, message))
        if on_error == "stop":
            report.stopped = True

    try:
        sessions = parse_path(path, format, on_error=on_error)
    except UnknownFormatError as exc:
        if explicit:
            fail(str(exc))
        else:
            report.ignored.append((path, f"not a recognised transcript ({exc.reason})"))
        return
    except (TranscriptError, OSError) as exc:
        fail(str(exc) if isinstance(exc, TranscriptError) else f"{path}: {exc}")
        return
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as exc:  # a parser bug: this file fails, the import goes on
        fail(f"{path}: internal error while parsing ({type(exc).__name__}: {exc}); please report it")
        return
    report.files += 1
    try:
        report.bytes += os.path.getsize(path)
    except OSError:
        pass
    for s in sessions:
        report.issues.extend(s.skipped)
        try:
            status = write_session(s, conn, replace=replace)
        except Exception as exc:  # the session was rolled back by write_session
            if _database_problem(exc):
                raise ImportDatabaseError(f"cannot write to the database: {exc}") from exc
            fail(f"{path}: session {s.session_id}: {exc}")
            if report.stopped:
                return
            continue
        finally:
            report.warnings.extend(s.warnings)
        if status == "exists":
            report.existing.append(s.session_id)
        else:
            report.written.append({"session_id": s.session_id, "title": s.title,
                                   "format": s.format, "nodes": len(s.calls),
                                   "path": path, "status": status})


def import_path(path: str | os.PathLike, db: Any, **kw: Any) -> ImportReport:
    """``import_paths([path], db, **kw)``."""
    return import_paths([path], db, **kw)
