"""Persist a compaction into the DAG by re-parenting (spec §4.7, §4.8).

Layout (docs/ARCHITECTURE.md, "Compaction layout"), for an active branch
``m0 .. m{n-1}`` cut at ``cut`` with a protected head of ``p`` messages::

    m0 - ... - m{p-1} - m{p} ... m{cut-1} - m{cut} ... m{n-1}     original, untouched
    c0 - ... - c{p-1} - S - k{cut} - ... - k{n-1}                 new branch, HEAD = k{n-1}

When the cut pins messages (``CutPoint.pinned``, all in ``p <= i < cut``, see
``find_cut_index``), their copies go right after the summary, in branch order:
``c0 - ... - c{p-1} - S - k{u} - k{cut} - ... - k{n-1}`` for the latest user
request ``m{u}``. A cut inside a thinking unit larger than the keep ceiling also pins
that unit's first tool group (the assistant message carrying the thinking block and
its results, ``m{s} .. m{g-1}``), so the loop continued in the tail still starts with
its thinking: ``S - k{u} - k{s} - ... - k{g-1} - k{cut} - ...``. Pinned messages are
not in ``folded_ids``, they head ``kept_ids`` and are named in ``pinned_ids``; a call
and its results are pinned together, so adjacency holds on the new branch.

* ``c*`` / ``k*`` are copies with fresh ids ``k_<hex>`` and
  ``copied_from = <original id>``, chained by ``parent_id``; the first node of
  the new branch has ``parent_id=None``, so that walking the new branch back
  from HEAD never re-enters the folded range (the reason §4.7 gives for a
  parentless summary; with a protected head it is the first head copy that is
  the root, and the summary follows it).
* ``S`` is the summary: ``role="system"``, ``content="[Previous conversation
  summary]\\n<text>"``, ``type="compactionSummary"``, ``source="compaction"``,
  ``extra={"compaction": True}``, and ``compaction={folded_ids, folded_range,
  protected_ids, kept_ids, reason, trigger, pre_tokens, tokens_after,
  fell_back_to_structural, recorded: False, format: None}``. The ``*_ids`` name
  the nodes of the branch as it was before this compaction (which may
  themselves be copies made by an earlier one).
* Its timestamp is one microsecond before the first kept message (§4.7), so
  even a timestamp-ordered view puts it in front of the tail; order on the
  branch comes from the chain, not from timestamps (docs/design.md).

Atomicity and concurrency: the writes (every new node in one
``append_messages`` call, the HEAD move, ``extra_meta["_last_summary_text"]``)
run inside one ``session_db.transaction()``, which holds the write lock from
its start, so either all of them happen or none (a failure raises
:class:`PersistError` naming the step, and the session carries on exactly as
before). HEAD is moved by compare-and-set: inside that transaction it must
still be where the compaction read the branch (``history[-1]``). Another
connection or process may have written the session meanwhile (a summary call
takes seconds):

* HEAD moved on along the branch (messages appended after the read): the newer
  messages are carried onto the new branch as copies, after the kept tail, in
  their order on the branch (which is their append order); the summary's
  ``kept_ids`` ends with them and ``carried_ids`` names them. Nothing is dropped.
* HEAD moved anywhere else (another compaction switched branches, a fork, a
  rewind): :class:`BranchChanged` is raised and nothing is written; the caller
  re-reads the branch and compacts again (``DefaultContextEngine.compact``
  does, a few times) or gives up, losing nothing either way.

What the persister needs of a session database is :class:`SessionStore` (a
``typing.Protocol``; ``DagSessionDB`` is one): the branch and HEAD, ``set_head`` with a
compare-and-set ``expected``, one-call ``append_messages``, the session's extra
metadata, and ``transaction()``.

Copies are new message dicts minus ``id``/``parent_id`` (``copy_message``), so every
other key (tool calls, blocks, model, usage, timestamps) is preserved verbatim.

``Persister.insert_summary_node`` reads as its steps: ``_split_branch`` (check the
range, split head / folded / kept), ``_compaction_record`` (the summary's
``compaction`` field), ``Persister._new_branch`` (the copies and the summary,
chained), then ``_write_branch``, ``_move_head`` and ``_save_summary_text``, each
raising its own :class:`PersistError`; ``_carry_newer`` (the check of HEAD above)
runs first inside the transaction.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from opctx.dag._text import replace_lone_surrogates
from opctx.dag.nodes import new_id
from opctx.dag.session_db import HeadMoved

from .prompts import SUMMARY_PREFIX

__all__ = [
    "Persister",
    "PersistResult",
    "PersistError",
    "BranchChanged",
    "SessionStore",
    "LAST_SUMMARY_KEY",
    "summary_message",
    "copy_message",
    "COPY_IDENTITY_KEYS",
    "same_but_identity",
    "new_copy_id",
    "new_summary_id",
]

LAST_SUMMARY_KEY = "_last_summary_text"


@runtime_checkable
class SessionStore(Protocol):
    """What the persister and the engine read and write of a session database.

    ``DagSessionDB`` (``opctx.dag.session_db``) implements it; so must a test double
    or another store. ``set_head(..., expected=...)`` is a compare-and-set: it raises
    ``HeadMoved`` (or moves nothing) when HEAD is not ``expected`` inside the write
    transaction. ``transaction()`` is one write transaction holding the write lock from
    its start; everything called inside it joins it.
    """

    def get_branch(self, session_id: str, head_msg_id: str | None = None) -> list[dict[str, Any]]: ...

    def get_head(self, session_id: str) -> str | None: ...

    def set_head(self, session_id: str, msg_id: str | None, *, expected: Any = ...) -> None: ...

    def append_messages(self, session_id: str, msgs: Sequence[dict]) -> list[dict[str, Any]]: ...

    def get_extra_meta(self, session_id: str) -> dict[str, Any] | None: ...

    def set_extra_meta(self, session_id: str, meta: dict[str, Any]) -> None: ...

    def transaction(self) -> contextlib.AbstractContextManager[Any]: ...


class PersistError(Exception):
    """Writing a compaction to the store failed; the message names the step."""


class BranchChanged(PersistError):
    """HEAD left the branch the compaction read (another compaction, a fork, a rewind)
    before the compaction was written; nothing was written. Re-read and compact again."""


def new_copy_id() -> str:
    return new_id("k")  # a uuid4's first 16 hex digits, without building a UUID per copy


def new_summary_id() -> str:
    return "summary_" + uuid.uuid4().hex[:10]


# what a copy changes of the message it copies (copy_message): everything else is equal
COPY_IDENTITY_KEYS = frozenset(("id", "parent_id", "seq", "copied_from"))


def same_but_identity(msg: dict, other: dict) -> bool:
    """Whether ``msg`` and ``other`` are equal but for ``COPY_IDENTITY_KEYS``: a copy and
    its original, so whatever is worked out of a message's content (its tokens, its
    facts) holds for both."""
    # two shallow copies less the identity keys, compared at C speed: a dict comparison
    # takes a value shared by both (a copy shares its original's) as equal without
    # comparing it deeply
    a, b = dict(msg), dict(other)
    for key in COPY_IDENTITY_KEYS:
        a.pop(key, None)
        b.pop(key, None)
    return a == b


def copy_message(msg: dict, parent_id: str | None) -> dict:
    """A copy of ``msg`` for the new branch: fresh id, new parent, ``copied_from`` set.

    A new dict whose values are the original's own objects (content blocks, tool calls,
    usage), not copies of them: a copy differs from its original only in the top-level
    keys set here, which are the new dict's. ``DagSessionDB`` serialises every value as
    it writes the node, so the stored copy shares nothing with the stored original;
    ``MemorySessionDB`` keeps them shared, which is safe because nothing changes a
    message in place: ``append_messages`` builds its ``Call`` from the dict and a store
    that renames ids (the lab's replay) sets top-level keys only. A deep copy of every
    kept message was the largest single cost of a compaction on a long branch.
    """
    out = dict(msg)  # then the identity keys moved to the end, as the copy's own
    for key in ("id", "parent_id", "seq"):
        out.pop(key, None)
    out["id"] = new_copy_id()
    out["parent_id"] = parent_id
    out["copied_from"] = msg.get("id")
    return out


def summary_message(
    summary_text: str,
    *,
    summary_id: str | None = None,
    parent_id: str | None = None,
    timestamp: float | None = None,
    compaction: dict[str, Any] | None = None,
) -> dict:
    """The summary node as a message dict (layout above)."""
    msg: dict[str, Any] = {
        "id": summary_id or new_summary_id(),
        "role": "system",
        "content": f"{SUMMARY_PREFIX}\n{summary_text}",
        "parent_id": parent_id,
        "type": "compactionSummary",
        "source": "compaction",
        "extra": {"compaction": True},
        "compaction": compaction or {},
    }
    if timestamp is not None:
        msg["timestamp"] = timestamp
    return msg


@dataclass
class PersistResult:
    """What :meth:`Persister.insert_summary_node` wrote."""

    summary_id: str
    new_head_id: str
    protected_copy_ids: list[str] = field(default_factory=list)
    kept_copy_ids: list[str] = field(default_factory=list)
    branch: list[dict] = field(default_factory=list)  # the new active branch, as written
    # messages another writer appended after the branch was read, carried onto the new one
    carried_ids: list[str] = field(default_factory=list)


class Persister:
    """Writes compactions through a ``DagSessionDB``-like object (message-dict API)."""

    def __init__(self, session_db: SessionStore | None = None, *, clock: Callable[[], float] = time.time):
        self.session_db = session_db
        self.clock = clock

    def _db(self, session_db: Any) -> Any:
        db = session_db if session_db is not None else self.session_db
        if db is None:
            raise PersistError(
                "Persister has no session_db: pass one to Persister(...) or to the call"
            )
        return db

    def insert_summary_node(
        self,
        session_id: str,
        summary_text: str,
        cut_idx: int,
        history: Sequence[dict],
        protect_first_n: int = 3,
        *,
        reason: str = "auto",
        trigger: str | None = None,
        pre_tokens: int | None = None,
        tokens_after: int | None = None,
        fell_back_to_structural: bool = False,
        session_db: Any = None,
        extra_compaction: dict[str, Any] | None = None,
        pinned: Sequence[int] = (),
    ) -> PersistResult:
        """Write head copies, the summary and tail copies; move HEAD; save the summary text.

        ``history`` is the active branch as read from the store (every message has
        an id); ``history[protect_first_n:cut_idx]`` is folded, except the positions
        in ``pinned`` (``CutPoint.pinned``: the latest user request, and the first tool
        group of a thinking unit the cut lies inside), which are copied
        right after the summary, ahead of the tail, and listed first in ``kept_ids``
        (and in ``pinned_ids``). Messages another writer appended to the branch
        since it was read are carried after the tail (``carried_ids``); a branch
        switched meanwhile raises :class:`BranchChanged` (module docstring).
        """
        db = self._db(session_db)
        pinned_set = set(pinned)
        head, folded, kept = _split_branch(history, protect_first_n, cut_idx, pinned_set)
        with db.transaction():
            head_now, newer = _carry_newer(db, session_id, history[-1]["id"])
            compaction = _compaction_record(
                head,
                folded,
                kept + newer,
                pinned_ids=[history[i]["id"] for i in sorted(pinned_set)],
                carried_ids=[m["id"] for m in newer],
                reason=reason,
                trigger=trigger,
                pre_tokens=pre_tokens,
                tokens_after=tokens_after,
                fell_back_to_structural=fell_back_to_structural,
                extra_compaction=extra_compaction,
            )
            new_branch = self._new_branch(head, kept + newer, summary_text, compaction)
            # the summary dict itself: a store may rename ids in place while writing
            # (the lab's replay does), so its id is read after the write
            summary = new_branch[len(head)]
            new_branch = _write_branch(db, session_id, new_branch)
            new_head = new_branch[-1]["id"]
            _move_head(db, session_id, new_head, head_now)
            _save_summary_text(db, session_id, summary_text)
        return PersistResult(
            summary_id=summary["id"],
            new_head_id=new_head,
            protected_copy_ids=[m["id"] for m in new_branch[: len(head)]],
            kept_copy_ids=[m["id"] for m in new_branch[len(head) + 1 :]],
            branch=new_branch,
            carried_ids=[m["id"] for m in newer],
        )

    def _new_branch(
        self, head: list[dict], kept: list[dict], summary_text: str, compaction: dict[str, Any]
    ) -> list[dict]:
        """The new branch as message dicts: head copies, the summary, kept copies, chained
        by ``parent_id`` from a parentless first node (layout above). The summary is
        stamped one microsecond before the first kept message (else now)."""
        new_branch: list[dict] = []
        parent: str | None = None
        for m in head:
            c = copy_message(m, parent)
            new_branch.append(c)
            parent = c["id"]
        first_kept_ts = _timestamp(kept[0]) if kept else None
        summary_ts = first_kept_ts - 1e-6 if first_kept_ts is not None else self.clock()
        summary = summary_message(
            summary_text, parent_id=parent, timestamp=summary_ts, compaction=compaction
        )
        new_branch.append(summary)
        parent = summary["id"]
        for m in kept:
            c = copy_message(m, parent)
            new_branch.append(c)
            parent = c["id"]
        return new_branch

    def last_summary_text(self, session_id: str, session_db: Any = None) -> str | None:
        """``extra_meta["_last_summary_text"]`` of the session, or ``None``."""
        db = self._db(session_db)
        meta = db.get_extra_meta(session_id) or {}
        text = meta.get(LAST_SUMMARY_KEY)
        return text if isinstance(text, str) and text else None


def _timestamp(msg: dict) -> float | None:
    ts = msg.get("timestamp")
    return float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else None


def _split_branch(
    history: Sequence[dict], protect_first_n: int, cut_idx: int, pinned: set[int]
) -> tuple[list[dict], list[dict], list[dict]]:
    """``(head, folded, kept)`` of a compaction, after checking the range: the pinned
    positions lead ``kept``, ahead of the tail. Raises :class:`PersistError` on a range
    that is invalid or folds nothing, or on a message without an id."""
    n = len(history)
    if not 0 <= protect_first_n <= cut_idx <= n:
        raise PersistError(
            f"invalid compaction range: protect_first_n={protect_first_n}, cut_idx={cut_idx}, "
            f"history of {n} messages (need 0 <= protect_first_n <= cut_idx <= len)"
        )
    if cut_idx == protect_first_n:
        raise PersistError("nothing to fold: cut_idx equals protect_first_n")
    missing = [i for i, m in enumerate(history) if not m.get("id")]
    if missing:
        raise PersistError(
            f"history messages without an id at positions {missing[:5]}: read it from the store"
        )
    if any(not protect_first_n <= i < cut_idx for i in pinned):
        raise PersistError(
            f"pinned positions {sorted(pinned)} must lie in the folded range "
            f"[{protect_first_n}, {cut_idx})"
        )
    head = history[:protect_first_n]
    folded = [m for i, m in enumerate(history[protect_first_n:cut_idx], protect_first_n)
              if i not in pinned]
    kept = [history[i] for i in sorted(pinned)] + list(history[cut_idx:])
    if not folded:
        raise PersistError("nothing to fold: every message of the range is pinned")
    return list(head), folded, kept


def _compaction_record(
    head: list[dict],
    folded: list[dict],
    kept: list[dict],
    *,
    pinned_ids: list[str],
    carried_ids: list[str],
    reason: str,
    trigger: str | None,
    pre_tokens: int | None,
    tokens_after: int | None,
    fell_back_to_structural: bool,
    extra_compaction: dict[str, Any] | None,
) -> dict[str, Any]:
    """The summary node's ``compaction`` field (layout above); ``pinned_ids`` and
    ``carried_ids`` only when there are some, ``extra_compaction`` merged last."""
    compaction = {
        "kind": "summary",
        "folded_ids": [m["id"] for m in folded],
        "folded_range": [folded[0]["id"], folded[-1]["id"]],
        "protected_ids": [m["id"] for m in head],
        "kept_ids": [m["id"] for m in kept],
        "reason": reason,
        "trigger": trigger,
        "pre_tokens": pre_tokens,
        "tokens_after": tokens_after,
        "fell_back_to_structural": bool(fell_back_to_structural),
        "recorded": False,
        "format": None,
    }
    if pinned_ids:
        compaction["pinned_ids"] = pinned_ids
    if carried_ids:
        compaction["carried_ids"] = carried_ids
    if extra_compaction:
        compaction.update(extra_compaction)
    return compaction


def _write_branch(db: Any, session_id: str, new_branch: list[dict]) -> list[dict]:
    """Write every new node in one ``append_messages`` call (one transaction); the
    branch as the store returned it when it returned one dict per node."""
    try:
        written = db.append_messages(session_id, new_branch)
    except Exception as exc:
        raise PersistError(
            f"writing the compacted branch failed: {type(exc).__name__}: {exc}"
        ) from exc
    if (
        isinstance(written, list)
        and len(written) == len(new_branch)
        and all(isinstance(w, dict) for w in written)
    ):
        return written
    return new_branch


def _carry_newer(db: Any, session_id: str, read_head: str) -> tuple[str, list[dict]]:
    """``(head, newer)``: HEAD now, and the messages on its branch after ``read_head``
    (where the compaction read the branch), oldest first; none when HEAD has not moved.
    Raises :class:`BranchChanged` when ``read_head`` is not on HEAD's branch any more."""
    try:
        head = db.get_head(session_id)
        if head == read_head:
            return head, []
        branch = db.get_branch(session_id, head) if head is not None else []
    except Exception as exc:
        raise PersistError(
            f"reading HEAD before writing the compaction failed: {type(exc).__name__}: {exc}"
        ) from exc
    for i in range(len(branch) - 1, -1, -1):
        if branch[i].get("id") == read_head:
            return head, branch[i + 1 :]
    raise BranchChanged(
        f"session {session_id!r}: HEAD moved from {read_head!r} to {head!r}, off the branch "
        "the compaction read (another compaction, a fork or a rewind); nothing was written"
    )


def _move_head(db: SessionStore, session_id: str, new_head: str, expected: str) -> None:
    """Point HEAD at the new branch, if it is still ``expected`` (compare-and-set); on
    failure the old branch stays active."""
    try:
        db.set_head(session_id, new_head, expected=expected)
    except Exception as exc:
        if isinstance(exc, HeadMoved):
            raise BranchChanged(
                f"session {session_id!r}: HEAD moved while the compaction was written "
                f"({exc}); nothing was written"
            ) from exc
        raise PersistError(
            f"moving HEAD to the compacted branch ({new_head}) failed "
            f"({type(exc).__name__}: {exc}); the old branch is still active"
        ) from exc


def _save_summary_text(db: SessionStore, session_id: str, summary_text: str) -> None:
    """Keep the summary text in ``extra_meta["_last_summary_text"]`` for the next UPDATE
    (inside the write transaction: a failure writes nothing)."""
    try:
        meta = dict(db.get_extra_meta(session_id) or {})
        meta[LAST_SUMMARY_KEY] = replace_lone_surrogates(summary_text)[0]  # storable
        db.set_extra_meta(session_id, meta)
    except Exception as exc:
        raise PersistError(
            f"saving the summary text failed ({type(exc).__name__}: {exc}); "
            "the compaction is not written"
        ) from exc
