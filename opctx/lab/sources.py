"""One path in, an opctx database out: what lets a notebook run on a user's own folder.

Every notebook sets one data path at the top. A researcher should be able to point it
at whatever they have - an opctx database, one recorded transcript, or a folder of them
(``~/.claude/projects``, ``~/.codex/sessions``, a SWE-agent run) - and run the notebook
unchanged. ``open_database(path)`` makes that true:

* an SQLite file is returned as it is (it is an opctx database, or the first reader will
  say clearly that it is not);
* anything else is imported with ``opctx.importers`` into a cache database and that is
  returned. The cache is keyed by the resolved path and a fingerprint (path, size,
  mtime, inode) of every file the import reads: each transcript and the side files its
  import reads too (a Claude Code session's ``subagents/agent-*.jsonl`` and their
  ``.meta.json``, flat ``agent-*.jsonl``, ``tool-results/*.txt``), so running the
  notebook again costs a directory walk, and a transcript or side file that changed is
  imported afresh. The user's files are only read.

Where the cache lives
---------------------
``$OPCTX_CACHE_DIR`` when set, else the platform's per-user cache folder:
``$XDG_CACHE_HOME/opctx`` (``~/.cache/opctx`` without it) on Linux and other Unixes,
``~/Library/Caches/opctx`` on macOS, ``%LOCALAPPDATA%\\opctx\\Cache`` on Windows.

Who may read it
---------------
A cache holds the text of the transcripts, so it is no more readable than they are.
Folders the cache creates are ``0700``. The database gets ``0600``, plus read for group
(others) only when every file it was imported from is readable by that class, through
every folder on its path (group read also needs the sources to share the cache file's
group). The default cache folder is tightened to ``0700`` when it is the user's own and
was left wider by an older version; a folder named by ``$OPCTX_CACHE_DIR`` is left as it
is (the database's own mode protects it). Scratch files are created ``0600`` before
SQLite opens them, so an import in progress is never readable by another user either.

Several processes at once
-------------------------
Two notebooks, or a notebook and the CLI, may open the same folder at the same moment.
One builds the cache, the others wait for it and say so (a ``logging`` warning naming
the builder's pid), then use what it installed:

* the builder holds ``<cache>.lock``, an OS lock (``flock``; a byte lock on Windows) on
  a file holding its pid. The OS drops the lock when the process ends, however it ends,
  so a killed builder never leaves a lock that has to be removed by hand: the next
  process takes it over (and removes the dead builder's scratch files);
* each build imports into a scratch file of its own (``<cache>.<pid>-<random>.importing.db``);
* the scratch file becomes the cache (``os.replace``, atomic) only after
  ``PRAGMA integrity_check`` says ``ok`` and it holds exactly the sessions and nodes the
  import report says were written: an interrupted, damaged or incomplete import is never
  installed, and a complete cache is never replaced by anything.

A malformed transcript does not stop the notebook: lines that cannot be read are
skipped (``on_error="skip"``) and reported through ``logging`` with file and line, as
the importers word them, and so are folders that cannot be read. A path that holds no
transcript at all is an error.

``default_database()`` is the one switch behind every notebook and CLI command: the
environment variable ``OPCTX_DB`` names a database, a transcript file or a folder of
transcripts (opened with ``open_database``); without it, the project's sample database
``data/sample.db`` is used (found from the working folder upwards, then beside the
installed package), so the same notebook runs on the samples in CI and on a user's own
recordings with ``OPCTX_DB=~/.claude/projects``.

``python -m opctx.lab.sources PATH`` prints the database ``PATH`` opens (importing it
into the cache when needed), or one line saying why it cannot (exit 1): what
``make lab DATA=PATH`` runs before it starts JupyterLab.

>>> from opctx.lab.sources import open_database, default_database
>>> db = open_database("data/sample.db")  # doctest: +SKIP
>>> db = open_database("~/.claude/projects")  # doctest: +SKIP
>>> db = default_database()  # OPCTX_DB, else data/sample.db  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import stat
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "open_database", "default_database", "sample_database", "cache_dir", "is_sqlite_file",
    "ENV_VAR", "CACHE_ENV_VAR", "CacheBuildError",
]

log = logging.getLogger(__name__)

_SQLITE_MAGIC = b"SQLite format 3\x00"

ENV_VAR = "OPCTX_DB"
CACHE_ENV_VAR = "OPCTX_CACHE_DIR"
_SAMPLE = Path("data") / "sample.db"
_PRIVATE_DIR = 0o700
_PRIVATE_FILE = 0o600
_POLL_SECONDS = 0.1  # how often a waiter retries a lock that cannot block (Windows)


class CacheBuildError(ValueError):
    """An import that did not produce a complete, intact cache (nothing was installed)."""


def cache_dir() -> Path:
    """Where imported folders are cached: ``$OPCTX_CACHE_DIR``, else the platform's
    per-user cache folder (module docstring)."""
    configured = os.environ.get(CACHE_ENV_VAR, "").strip()
    if configured:
        return Path(configured).expanduser()
    return _default_cache_dir()


def _default_cache_dir() -> Path:
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA", "").strip()
        return (Path(local) if local else Path.home() / "AppData" / "Local") / "opctx" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "opctx"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    # the XDG base directory specification: a relative path is invalid and ignored
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "opctx"


def is_sqlite_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file with SQLite's header (never opens a FIFO)."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        with path.open("rb") as fh:
            return fh.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


# -- what an import reads ---------------------------------------------------------------------


def _files_read(source: Path, problems: list[tuple[str, str]]) -> list[str]:
    """Every file an import of ``source`` reads: each transcript, then its side files."""
    from opctx.importers.api import iter_transcript_files
    from opctx.importers.claude_code import owned_side_files

    out: list[str] = []
    for name, _explicit in iter_transcript_files([source], problems=problems):
        out.append(name)
        if name.endswith(".jsonl"):
            out.extend(sorted(owned_side_files(name)))
    return out


def _fingerprint(source: Path, files: list[str]) -> str:
    """A digest of (file, size, mtime, inode) of every file the import reads."""
    digest = hashlib.sha256(str(source).encode())
    for name in files:
        try:
            st = os.stat(name)
            state = f"{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
        except OSError:  # a side file named but absent (a subagent without .meta.json)
            state = "-"
        digest.update(f"\0{name}\0{state}".encode())
    return digest.hexdigest()[:20]


def _shared_read_bits(source: Path, files: Iterable[str], gid: int) -> int:
    """The read bits (``0o040`` group, ``0o004`` others) that every source file grants,
    through every folder on its path; group only where the files' group is ``gid``."""
    bits = 0o044
    folders: dict[str, int] = {}

    def folder_mode(path: str) -> int:
        if path not in folders:
            try:
                folders[path] = os.stat(path).st_mode
            except OSError:
                folders[path] = 0
        return folders[path]

    for name in files:
        try:
            st = os.stat(name)
        except OSError:
            continue
        bits &= st.st_mode
        if st.st_gid != gid:
            bits &= ~0o040
        parent = os.path.dirname(os.path.abspath(name))
        while bits:
            mode = folder_mode(parent)
            bits &= (0o040 if mode & 0o010 else 0) | (0o004 if mode & 0o001 else 0)
            up = os.path.dirname(parent)
            if up == parent:
                break
            parent = up
        if not bits:
            break
    return bits & 0o044


# -- the cache folder and its lock -------------------------------------------------------------


def _private_folder(folder: Path, *, default: bool) -> None:
    """Create ``folder`` (and missing parents) ``0700``; tighten the default folder."""
    missing = []
    for p in (folder, *folder.parents):
        if p.exists():
            break
        missing.append(p)
    for p in reversed(missing):
        try:
            p.mkdir(mode=_PRIVATE_DIR)
        except FileExistsError:  # another process made it meanwhile
            pass
    if default:
        st = folder.stat()
        if st.st_uid == _euid() and st.st_mode & 0o077:
            folder.chmod(stat.S_IMODE(st.st_mode) & _PRIVATE_DIR)


def _euid() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else -1


class _BuildLock:
    """The one builder of a cache file (module docstring, "Several processes at once")."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self.fd: int | None = None

    def __enter__(self) -> _BuildLock:
        warned = False
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, _PRIVATE_FILE)
            try:
                if not _try_lock(fd):
                    if not warned:
                        log.warning("waiting for process %s, which is importing %s into the cache",
                                    _holder(fd), self.what)
                        warned = True
                    _wait_lock(fd)
                # the previous holder removes the file as it lets go: a lock on the removed
                # file is no lock at all, so try again on the file that is there now
                try:
                    current = os.stat(self.path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    current = False
            except BaseException:
                os.close(fd)
                raise
            if current:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.fd is None:
            return
        if sys.platform != "win32":  # an open file cannot be removed there; it stays, unlocked
            try:
                os.unlink(self.path)
            except OSError:
                pass
        os.close(self.fd)  # releases the lock
        self.fd = None


def _try_lock(fd: int) -> bool:
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _wait_lock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:
        while not _try_lock(fd):
            time.sleep(_POLL_SECONDS)
        return
    fcntl.flock(fd, fcntl.LOCK_EX)


def _holder(fd: int) -> str:
    """The pid the lock holder wrote (``?`` before it has written it)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except (OSError, AttributeError):
        text = ""
    return text if text.isdigit() else "?"


# -- building ----------------------------------------------------------------------------------


def open_database(path: str | os.PathLike, *, cache: str | os.PathLike | None = None) -> Path:
    """An opctx database for ``path``: the file itself, or a cached import of it.

    ``path`` is an opctx database, a transcript file or a folder of transcripts in any
    format the importers detect. ``cache`` overrides the cache folder. Raises
    ``FileNotFoundError`` (no such path, no transcript in it), ``ValueError`` (not a
    regular file or folder, nothing importable) or ``CacheBuildError`` (the import did
    not give a complete database; nothing was installed).
    """
    source = Path(path).expanduser().resolve()
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file or folder")
    if not (source.is_file() or source.is_dir()):
        # a FIFO or device: opening it would wait for a writer, or never end
        raise ValueError(f"{source}: not a regular file or folder")
    if is_sqlite_file(source):
        return source
    problems: list[tuple[str, str]] = []
    files = _files_read(source, problems)
    for folder, reason in problems:
        log.warning("%s: %s", folder, reason)
    if not files:
        raise FileNotFoundError(f"{source}: no transcript files found here")
    key = _fingerprint(source, files)
    folder = Path(cache).expanduser() if cache is not None else cache_dir()
    _private_folder(folder, default=cache is None and not os.environ.get(CACHE_ENV_VAR, "").strip())
    target = folder / f"{source.name or 'root'}-{key}.db"
    if target.is_file():
        return target
    with _BuildLock(folder / f"{target.name}.lock", str(source)):
        if not target.is_file():  # another process may have built it while this one waited
            _build(source, target, files)
    return target


def _build(source: Path, target: Path, files: list[str]) -> None:
    """Import ``source`` into a scratch file of this process; install it when complete."""
    from opctx.importers import import_paths

    _remove_scratch(target.parent.glob(f"{target.stem}.*importing.db*"))  # dead builders' files
    scratch = target.with_name(f"{target.stem}.{os.getpid()}-{secrets.token_hex(4)}.importing.db")
    os.close(os.open(scratch, os.O_CREAT | os.O_EXCL | os.O_WRONLY, _PRIVATE_FILE))
    try:
        report = import_paths([source], scratch, on_error="skip")
        for issue in report.issues:
            log.warning("%s", issue)
        for name, error in report.failed:
            log.warning("%s: not imported: %s", name, error)
        if not report.sessions:
            raise ValueError(f"{source}: none of its {report.candidates} candidate file(s) could be imported")
        _checkpoint(scratch)
        _check_complete(scratch, report)
        os.chmod(scratch, _PRIVATE_FILE | _shared_read_bits(source, files, os.stat(scratch).st_gid))
        os.replace(scratch, target)  # only a finished, checked import gets the cache name
    except BaseException:
        _remove_scratch([scratch])
        raise


def _remove_scratch(paths: Iterable[Path]) -> None:
    for path in list(paths):
        for name in (path, *(Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal"))):
            try:
                name.unlink()
            except FileNotFoundError:
                pass


def _checkpoint(db: Path) -> None:
    """Fold the WAL into the main file, so renaming the file alone moves everything."""
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        conn.close()


def _check_complete(db: Path, report: Any) -> None:
    """``CacheBuildError`` unless ``db`` is intact and holds exactly what ``report`` wrote."""
    import sqlite3

    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
        sessions = {r[0] for r in conn.execute("SELECT id FROM sessions")}
        nodes = conn.execute("SELECT count(*) FROM nodes").fetchone()[0]
    except sqlite3.Error as exc:
        raise CacheBuildError(f"{db}: the imported database cannot be read ({exc}); not installed") from None
    finally:
        conn.close()
    if verdict != "ok":
        raise CacheBuildError(f"{db}: the imported database is damaged ({verdict}); not installed")
    wanted = {w["session_id"] for w in report.written}
    wanted_nodes = sum(w["nodes"] for w in report.written)
    if sessions != wanted or nodes != wanted_nodes:
        raise CacheBuildError(
            f"{db}: the import is incomplete ({len(sessions)} of {len(wanted)} session(s), "
            f"{nodes} of {wanted_nodes} node(s)); not installed")


def sample_database(start: str | os.PathLike | None = None) -> Path | None:
    """The project's ``data/sample.db``: looked for from ``start`` (the working folder)
    upwards, then in the checkout the package was installed from; ``None`` if absent."""
    here = Path(start or os.getcwd()).resolve()
    package_root = Path(__file__).resolve().parents[2]
    for folder in (here, *here.parents, package_root):
        candidate = folder / _SAMPLE
        if candidate.is_file():
            return candidate
    return None


def default_database(*, cache: str | os.PathLike | None = None) -> Path:
    """The database a notebook or command works on when it is not told: ``$OPCTX_DB``
    (a database, transcript file or folder, see ``open_database``), else ``data/sample.db``.

    Raises ``FileNotFoundError`` naming both when neither exists.
    """
    chosen = os.environ.get(ENV_VAR, "").strip()
    if chosen:
        return open_database(chosen, cache=cache)
    sample = sample_database()
    if sample is None:
        raise FileNotFoundError(
            f"no database given: set {ENV_VAR} to a database, a transcript file or a folder "
            f"of transcripts, or build the samples with `make data` ({_SAMPLE})"
        )
    return sample


def main(argv: list[str] | None = None) -> int:
    """``python -m opctx.lab.sources [PATH]``: the database PATH (else ``$OPCTX_DB``,
    else the samples) opens, or one line saying why not (exit 1)."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING, format="opctx: %(message)s")
    try:
        db = open_database(args[0]) if args and args[0].strip() else default_database()
    except (OSError, ValueError) as exc:
        print(f"opctx: {exc}", file=sys.stderr)
        return 1
    print(f"data: {db}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
