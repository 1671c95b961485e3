"""The importers' front door: parse a file, walk folders, import into a database.

``parse_path(path, format=None, on_error="stop") -> list[ImportedSession]``
    One file (format detected from content unless given). Pure: no database.
``iter_transcript_files(paths)``
    Expands folders (a whole ``~/.claude/projects`` tree, a corpus folder): files ending
    ``.jsonl``, ``.json``, ``.traj`` or ``.md`` (the latter only with an Aider header),
    sorted, minus the side files a Claude Code session file reads itself (its
    ``subagents/``, flat ``agent-*.jsonl`` and ``tool-results/``), so nothing is imported
    twice, and minus hidden folders *below* the walked one (``.git``, ``.venv``; walk
    ``~/.claude/projects`` itself to import Claude Code's folder).
``import_paths(paths, db, ...) -> ImportReport``
    Parse and write, session by session (each one atomic, see ``writer``), with an
    optional tqdm progress bar on stderr.

Errors (``on_error``):
    ``"stop"``: the first file that cannot be imported ends the run (sessions already
    written stay; that file contributes nothing) and ``ImportReport.stopped`` is set.
    ``"skip"``: bad lines are skipped and listed, a file that cannot be imported at all
    is listed in ``failed`` and the run goes on.
    A file named on the command line whose content is not a transcript is a failure; one
    met while walking a folder (a README, a manifest) is only listed in ``ignored``:
    walking a folder means "import the transcripts in it".
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import ON_ERROR_MODES, ImportedSession, Issue, TranscriptError, UnknownFormatError
from .detect import sniff

__all__ = [
    "PARSERS",
    "FORMATS",
    "parse_path",
    "iter_transcript_files",
    "import_paths",
    "import_path",
    "ImportReport",
]


def _parsers() -> dict[str, Callable[..., list[ImportedSession]]]:
    from . import aider, claude_code, codex, message_lists, openhands

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
            raise TranscriptError(path, None, "is a directory: use import_paths to walk it")
    elif format not in PARSERS:
        raise ValueError(f"unknown format {format!r}; known: {', '.join(FORMATS)}")
    elif not os.path.isfile(path):
        raise TranscriptError(path, None, "no such file")
    elif os.path.getsize(path) == 0:
        raise TranscriptError(path, None, "file is empty")
    forced = parsed is None
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


def iter_transcript_files(paths: Iterable[str | os.PathLike]) -> Iterator[tuple[str, bool]]:
    """(file, named explicitly) for every candidate file under ``paths``."""
    from .claude_code import owned_side_files

    for raw in paths:
        p = Path(raw).expanduser()
        if not p.is_dir():
            yield str(p), True
            continue
        files = sorted(
            str(f) for f in p.rglob("*")
            if f.is_file() and f.name.endswith(_CANDIDATE_SUFFIXES)
            and not any(part.startswith(".") and part not in (".", "..") for part in f.relative_to(p).parts[:-1])
        )
        owned: set[str] = set()
        for f in files:
            name = os.path.basename(f)
            if name.endswith(".jsonl") and not name.startswith("agent-"):
                owned |= owned_side_files(f)
        for f in files:
            if os.path.normpath(f) in owned:
                continue
            if f.endswith(".md") and not _is_aider(f):
                continue
            yield f, False


def _is_aider(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(64).lstrip().startswith(b"# aider chat started at")
    except OSError:
        return False


@dataclass
class ImportReport:
    """What an import did. ``ok`` is False when anything failed or was skipped."""

    written: list[dict] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    stopped: bool = False

    @property
    def ok(self) -> bool:
        return not self.failed and not self.issues

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
    """Import every recording under ``paths`` into ``db`` (see the module docstring)."""
    from .writer import write_session

    if on_error not in ON_ERROR_MODES:
        raise ValueError(f"on_error must be one of {ON_ERROR_MODES}, got {on_error!r}")
    report = ImportReport()
    started = time.perf_counter()
    files = list(iter_transcript_files(paths))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(files), unit="file", desc="importing", leave=False,
                   disable=None)
    owns = False
    conn: Any = db
    if not isinstance(db, sqlite3.Connection):
        from opctx.dag.store import connect

        conn = connect(db)
        owns = True
    try:
        for path, explicit in files:
            if bar is not None:
                bar.set_postfix_str(os.path.basename(path)[-40:], refresh=False)
            try:
                sessions = parse_path(path, format, on_error=on_error)
            except UnknownFormatError as exc:
                if not explicit:
                    report.ignored.append((path, exc.reason))
                else:
                    report.failed.append((path, str(exc)))
                    if on_error == "stop":
                        report.stopped = True
                        break
                continue
            except (TranscriptError, OSError) as exc:
                report.failed.append((path, str(exc)))
                if on_error == "stop":
                    report.stopped = True
                    break
                continue
            finally:
                if bar is not None:
                    bar.update(1)
            report.files += 1
            try:
                report.bytes += os.path.getsize(path)
            except OSError:
                pass
            for s in sessions:
                report.issues.extend(s.skipped)
                report.warnings.extend(s.warnings)
                try:
                    status = write_session(s, conn, replace=replace)
                except Exception as exc:  # the session was rolled back by write_session
                    report.failed.append((path, f"{path}: session {s.session_id}: {exc}"))
                    if on_error == "stop":
                        report.stopped = True
                        break
                    continue
                if status == "exists":
                    report.existing.append(s.session_id)
                else:
                    report.written.append({"session_id": s.session_id, "title": s.title,
                                           "format": s.format, "nodes": len(s.calls),
                                           "path": path, "status": status})
            if report.stopped:
                break
    finally:
        if bar is not None:
            bar.close()
        if owns:
            conn.close()
    report.seconds = time.perf_counter() - started
    return report


def import_path(path: str | os.PathLike, db: Any, **kw: Any) -> ImportReport:
    """``import_paths([path], db, **kw)``."""
    return import_paths([path], db, **kw)
