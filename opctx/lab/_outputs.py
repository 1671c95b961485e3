"""Output files that appear whole or not at all.

Every file the lab writes for a user (``sweep(out=...)``, ``write_parquet`` behind
``opctx export-frames``) is written under a temporary name *in the same folder*
(``.<name>.<pid>-<random>.tmp``: hidden, and on the same file system, so the final
rename is atomic) and renamed to its real name only once it is complete and synced.
A process killed or interrupted mid-write leaves at most a temporary file, which the
next writer of the same output removes; a reader never opens a file that looks
complete and is not, and never a file that has no Parquet footer.

Errors are one line naming the path and the reason (``OutputError``, an ``OSError``):
a folder that cannot be created or written, a target that is a directory or a FIFO, a
full disk.
"""

from __future__ import annotations

import errno as errno_codes
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

__all__ = ["OutputError", "temp_name", "remove_leftovers", "check_target", "publish", "discard",
           "output_error", "sync"]


class OutputError(OSError):
    """An output that cannot be written: one line, with the path."""


def output_error(path: str | os.PathLike, exc: BaseException) -> OutputError:
    """``exc`` (an ``OSError`` from Python or pyarrow) as one line naming ``path``."""
    code = getattr(exc, "errno", None)
    reason = os.strerror(code) if isinstance(code, int) and code else (str(exc).splitlines() or [""])[0]
    out = OutputError(f"cannot write {path}: {reason}")
    out.errno = code if isinstance(code, int) else errno_codes.EIO
    return out


def temp_name(final: str | os.PathLike) -> Path:
    """A fresh temporary name for ``final``, in its folder."""
    final = Path(final)
    return final.with_name(f".{final.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


def remove_leftovers(final: str | os.PathLike, *older: str) -> None:
    """Delete the temporary files of ``final`` that killed writers left (and ``final``
    plus each suffix in ``older``: names earlier versions used, such as ``.partial``)."""
    final = Path(final)
    doomed = list(final.parent.glob(f".{final.name}.*.tmp")) + [Path(f"{final}{s}") for s in older]
    discard(doomed)


def check_target(path: str | os.PathLike) -> None:
    """``OutputError`` when ``path`` exists and is not a regular file (a directory, a
    FIFO, a device): a rename onto it would fail or replace the wrong thing."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise output_error(path, exc) from None
    if stat.S_ISDIR(mode):
        raise OutputError(f"cannot write {path}: it is a directory")
    if not stat.S_ISREG(mode):
        raise OutputError(f"cannot write {path}: it is not a regular file (a FIFO, device or socket)")


def sync(path: str | os.PathLike) -> None:
    """Flush ``path`` to the disk (a rename after a crash must not reveal an empty file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(pairs: Iterable[tuple[Path, Path]]) -> None:
    """Rename each complete temporary file to its final name, after syncing them all."""
    pairs = list(pairs)
    for tmp, final in pairs:
        try:
            sync(tmp)
        except OSError as exc:
            raise output_error(final, exc) from None
    for tmp, final in pairs:
        try:
            os.replace(tmp, final)
        except OSError as exc:
            raise output_error(final, exc) from None


def discard(paths: Iterable[str | os.PathLike]) -> None:
    """Remove files, ignoring those already gone (a clean-up must not raise over the real error)."""
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass
