"""The replay's in-memory world: its clock, its session database and the provider call that
answers with a recorded summary (``opctx.lab.replay`` uses them; ``ReplayClock`` is re-exported
there)."""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence
from typing import Any

from opctx.dag.nodes import MINTED_ID, minted_id

__all__ = ["ReplayClock"]


def replay_message_id(recorded_id: Any, index: int) -> Any:
    """The id a recorded message has in the replay's session: its own, or a stable one.

    An importer names every message it reads with a fresh random id
    (``opctx.dag.nodes.new_id``), so the same transcript read by two processes has two
    sets of ids. A chained structural summary quotes the ids of the messages it folds
    (``opctx.context._structural``), and their token count varies with the hex digits:
    replays of one transcript differed by a few tokens from the second compaction on.
    An id of ``new_id``'s shape becomes one of the same shape derived from the stream
    index (a position in the recording is the same in every process); any other id (a
    recording's own, a test's ``m0``) is kept. The replay maps ids back to stream
    indices (``ReplayResult.origin_of``), never to the recorded ids.
    """
    match = MINTED_ID.fullmatch(recorded_id) if isinstance(recorded_id, str) else None
    if match is None:
        return recorded_id
    digest = hashlib.sha1(f"opctx-replay-recorded:{index}".encode()).hexdigest()
    return minted_id(match.group(1), digest)


class ReplayClock:
    """A settable clock: ``clock()`` returns ``clock.now`` (the recording's time)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = float(now)

    def __call__(self) -> float:
        return self.now

    def set(self, now: float | None) -> None:
        if now is not None and not (isinstance(now, float) and math.isnan(now)):
            # never run backwards: recordings sometimes have out-of-order stamps
            self.now = max(self.now, float(now))


class _RecordedSummaryProvider:
    """A provider call that answers with the recording's summary when one is armed."""

    def __init__(self) -> None:
        self.text: str | None = None

    def __call__(self, messages: Any, model: Any = None, system: Any = None, tools: Any = None) -> str:
        if self.text is None:
            raise RuntimeError("no recorded summary at this point of the recording")
        return self.text


class _ReplaySessionDB:
    """A ``MemorySessionDB`` whose compaction copies get deterministic ids.

    The replay's session is scratch: nobody searches it or opens it again, so it is
    kept in memory (``opctx.dag.memory_db``: the same append, HEAD and transaction
    rules as ``DagSessionDB``, nothing encoded). Over SQLite, writing each
    compaction's new branch was more than half of a compaction-dense replay.

    The persister names the copies and the summary node it writes with random
    ids (``k_<hex>``, ``summary_<hex>``), and a chained structural summary
    quotes the ids of the branch it folds, so random ids would change the
    summary's text, its token count and every figure after it: two replays of
    one history would differ by a few tokens (and a sweep would differ between
    executors). ``append_messages`` - the persister's one write - renames
    every message of the batch (and the parent links inside it), in place, to
    ids derived from a per-replay counter, keeping each id's prefix and length,
    so everything downstream sees the new ids. Recorded messages are written with ``append_recorded`` and keep
    the recording's ids.

    ``get_branch`` of the active branch is served from the last one where it can be
    (the branch mirror): a compaction-dense replay reads the whole branch twice per
    compaction (the engine before cutting, the replay after), and a read builds a
    dict of every node. The mirror is the branch as last read, or as the persister
    just wrote it (``append_messages`` returns each node as ``get_branch`` would
    give it back: built from the same ``Call``), plus the recorded messages appended
    since, read back by id (only those: they were never read). It is used only when
    it is one parent-linked chain from a root to the current HEAD, so a rolled-back
    write or a HEAD moved elsewhere falls back to the stored branch, and a write
    this object does not follow (``append_message``) drops it.
    """

    def __init__(self, clock: ReplayClock) -> None:
        from opctx.dag.memory_db import MemorySessionDB

        self._db = MemorySessionDB(clock=clock)
        self._minted = 0
        # the branch mirror (class docstring): session -> the branch as read or written,
        # and the ids of recorded messages appended after it, not read back yet
        self._mirror: dict[str, list[dict]] = {}
        self._unread: dict[str, list[str]] = {}

    def __getattr__(self, name: str) -> Any:
        if name in _MIRROR_BREAKERS:  # writes the mirror does not follow
            self._mirror.clear()
            self._unread.clear()
        return getattr(self._db, name)

    def get_branch(self, session_id: str, head_msg_id: str | None = None) -> list[dict[str, Any]]:
        """``DagSessionDB.get_branch``, from the branch mirror when it ends at HEAD (class
        docstring). The list is new; the message dicts are shared between reads."""
        if head_msg_id is not None:
            return self._db.get_branch(session_id, head_msg_id)
        head = self._db.get_head(session_id)
        mirror = self._mirror.pop(session_id, None)
        unread = self._unread.pop(session_id, None)
        if mirror and unread:
            mirror = _extended(mirror, self._read_ids(session_id, unread))
        if not mirror or mirror[-1].get("id") != head:
            mirror = self._db.get_branch(session_id)
        self._mirror[session_id] = mirror
        return list(mirror)

    def _read_ids(self, session_id: str, ids: list[str]) -> list[dict[str, Any]]:
        read = (self._db.get_message(session_id, i) for i in ids)
        return [m for m in read if m is not None]

    def _mint(self, old: str) -> str:
        prefix, sep, tail = old.rpartition("_")
        if not sep:
            prefix, tail = "n", old
        self._minted += 1
        return f"{prefix}_{_minted_digest(self._minted)[: max(8, min(len(tail), 40))]}"

    def append_recorded(self, session_id: str, msgs: Sequence[dict]) -> list[dict]:
        written = self._db.append_messages(session_id, msgs)
        self._unread.setdefault(session_id, []).extend(m["id"] for m in written)
        return written

    def append_messages(self, session_id: str, msgs: Sequence[dict]) -> list[dict]:
        # renamed in place: the persister's PersistResult.summary_id is read from its own
        # summary dict, not from the returned messages, so that dict must carry the new id
        renamed: dict[str, str] = {}
        batch = list(msgs)
        for msg in batch:
            old = msg.get("id")
            if old:
                renamed[old] = msg["id"] = self._mint(str(old))
            parent = msg.get("parent_id")
            if parent in renamed:
                msg["parent_id"] = renamed[parent]
        written = self._db.append_messages(session_id, batch)
        if _is_chain(written, None):  # a compaction's new branch: the mirror, if HEAD moves to it
            self._mirror[session_id] = written
            self._unread.pop(session_id, None)
        else:
            self._unread.setdefault(session_id, []).extend(m["id"] for m in written)
        return list(written)


@functools.lru_cache(maxsize=1 << 16)
def _minted_digest(n: int) -> str:
    """The digest the ``n``-th minted id of a replay is cut from: the same in every replay
    (a counter), so a sweep's replays share the work."""
    return hashlib.sha1(f"opctx-replay:{n}".encode()).hexdigest()


# What may add a node without this object seeing it: the branch mirror is dropped. A HEAD
# moved elsewhere (set_head) needs nothing: the mirror is used only when it ends at HEAD.
_MIRROR_BREAKERS = frozenset({"append_message"})


def _is_chain(msgs: Sequence[dict], root_parent: str | None) -> bool:
    """Whether ``msgs`` are linked parent to child, the first one's parent ``root_parent``."""
    parent = root_parent
    for m in msgs:
        if m.get("parent_id") != parent or not m.get("id"):
            return False
        parent = m["id"]
    return True


def _extended(mirror: list[dict], newer: list[dict]) -> list[dict] | None:
    """``mirror + newer`` when ``newer`` continues the chain from its last node, else None."""
    if not newer or not _is_chain(newer, mirror[-1].get("id")):
        return None
    return mirror + newer
