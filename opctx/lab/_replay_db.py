"""The replay's in-memory world: its clock, its session database and the provider call that
answers with a recorded summary (``opctx.lab.replay`` uses them; ``ReplayClock`` is re-exported
there)."""

from __future__ import annotations

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
    """``DagSessionDB(":memory:")`` whose compaction copies get deterministic ids.

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
    """

    def __init__(self, clock: ReplayClock) -> None:
        from opctx.dag.session_db import DagSessionDB
        from opctx.dag.store import set_text_index

        self._db = DagSessionDB(":memory:", clock=clock)
        set_text_index(self._db.connection, False)  # a scratch database nobody searches
        self._minted = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def _mint(self, old: str) -> str:
        prefix, sep, tail = old.rpartition("_")
        if not sep:
            prefix, tail = "n", old
        self._minted += 1
        digest = hashlib.sha1(f"opctx-replay:{self._minted}".encode()).hexdigest()
        return f"{prefix}_{digest[: max(8, min(len(tail), 40))]}"

    def append_recorded(self, session_id: str, msgs: Sequence[dict]) -> list[dict]:
        return self._db.append_messages(session_id, msgs)

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
        return self._db.append_messages(session_id, batch)
