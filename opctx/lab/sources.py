"""One path in, an opctx database out: what lets a notebook run on a user's own folder.

Every notebook sets one data path at the top. A researcher should be able to point it
at whatever they have - an opctx database, one recorded transcript, or a folder of them
(``~/.claude/projects``, ``~/.codex/sessions``, a SWE-agent run) - and run the notebook
unchanged. ``open_database(path)`` makes that true:

* an SQLite file is returned as it is (it is an opctx database, or the first reader will
  say clearly that it is not);
* anything else is imported with ``opctx.importers`` into a cache database and that is
  returned. The cache is keyed by the resolved path and a fingerprint of the candidate
  files (path, size, mtime), so running the notebook again costs a directory walk, and
  a transcript that changed is imported afresh. The cache lives in
  ``$OPCTX_CACHE_DIR`` or ``~/.cache/opctx``; the user's files are only read.

A malformed transcript does not stop the notebook: lines that cannot be read are
skipped (``on_error="skip"``) and reported through ``logging`` with file and line, as
the importers word them. A path that holds no transcript at all is an error.

``default_database()`` is the one switch behind every notebook and CLI command: the
environment variable ``OPCTX_DB`` names a database, a transcript file or a folder of
transcripts (opened with ``open_database``); without it, the project's sample database
``data/sample.db`` is used (found from the working folder upwards, then beside the
installed package), so the same notebook runs on the samples in CI and on a user's own
recordings with ``OPCTX_DB=~/.claude/projects``.

>>> from opctx.lab.sources import open_database, default_database
>>> db = open_database("data/sample.db")  # doctest: +SKIP
>>> db = open_database("~/.claude/projects")  # doctest: +SKIP
>>> db = default_database()  # OPCTX_DB, else data/sample.db  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

__all__ = [
    "open_database", "default_database", "sample_database", "cache_dir", "is_sqlite_file", "ENV_VAR",
]

log = logging.getLogger(__name__)

_SQLITE_MAGIC = b"SQLite format 3\x00"

ENV_VAR = "OPCTX_DB"
_SAMPLE = Path("data") / "sample.db"


def cache_dir() -> Path:
    """Where imported folders are cached: ``$OPCTX_CACHE_DIR`` or ``~/.cache/opctx``."""
    return Path(os.environ.get("OPCTX_CACHE_DIR") or Path.home() / ".cache" / "opctx")


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


def _fingerprint(path: Path) -> tuple[str, int]:
    """A digest of (file, size, mtime) of every transcript the importers would read."""
    from opctx.importers.api import iter_transcript_files

    digest = hashlib.sha256(str(path).encode())
    count = 0
    for name, _explicit in iter_transcript_files([path]):
        stat = os.stat(name)
        digest.update(f"\0{name}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
        count += 1
    return digest.hexdigest()[:20], count


def open_database(path: str | os.PathLike, *, cache: str | os.PathLike | None = None) -> Path:
    """An opctx database for ``path``: the file itself, or a cached import of it.

    ``path`` is an opctx database, a transcript file or a folder of transcripts in any
    format the importers detect. ``cache`` overrides the cache folder.
    """
    source = Path(path).expanduser().resolve()
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file or folder")
    if not (source.is_file() or source.is_dir()):
        # a FIFO or device: opening it would wait for a writer, or never end
        raise ValueError(f"{source}: not a regular file or folder")
    if is_sqlite_file(source):
        return source
    key, count = _fingerprint(source)
    if count == 0:
        raise FileNotFoundError(f"{source}: no transcript files found here")
    folder = Path(cache) if cache is not None else cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{source.name or 'root'}-{key}.db"
    if target.is_file():
        return target
    from opctx.importers import import_paths

    partial = target.with_suffix(".importing.db")
    for leftover in folder.glob(partial.name + "*"):  # a killed earlier run
        leftover.unlink()
    report = import_paths([source], partial, on_error="skip")
    for issue in report.issues:
        log.warning("%s", issue)
    for name, error in report.failed:
        log.warning("%s: not imported: %s", name, error)
    if not report.sessions and not report.existing:
        for leftover in folder.glob(partial.name + "*"):
            leftover.unlink()
        raise ValueError(f"{source}: none of its {count} candidate file(s) could be imported")
    _checkpoint(partial)
    os.replace(partial, target)  # only a finished import gets the cache name
    return target


def _checkpoint(db: Path) -> None:
    """Fold the WAL into the main file, so renaming the file alone moves everything."""
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        conn.close()


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
