"""Tool-result aging: clear old, large, unreferenced tool output without an LLM (spec §3.1-3.2).

``TurnAger.age(history, references=None)`` returns ``(aged_history, AgingReport)``. A
tool result is replaced by the placeholder
``[Old tool result content cleared (was N tokens)]`` only when it passes **all** of:

1. **turn distance**: at least ``keep_recent_turns`` (4) assistant messages come after it
   (an assistant message is one model turn; a system message never counts);
2. **wall clock**: it is at least ``keep_recent_seconds`` (60) old on the injectable
   ``clock`` (``timestamp`` of a message dict, ``created_at`` of a ``Call``). A message with
   no timestamp passes this gate: the turn gate still protects recent output, and a
   history without timestamps (an import) would otherwise never age;
3. **not cited**: the ``ReferenceMap`` does not mark its message id or its tool_use id as
   cited (``references.py``). Without a map, the ager keeps its own incremental
   ``ReferenceTracker`` over the history it is given;
4. **size**: its content is at least ``min_tokens`` (800) tokens; smaller ones are not
   worth the placeholder.

The first ``protect_first_n`` (2) messages are never touched (the task statement).

What counts as a tool result
============================
* a ``tool_result`` block in ``extra.blocks`` (or in a list ``content``) of a message
  dict: the block is copied with its ``content`` replaced and ``_redacted: True`` set;
* a ``role="tool"`` message dict: its ``content`` is replaced and ``_redacted: True`` set
  on the message (the message *is* the block in the OpenAI shape);
* a user message the importer marked ``is_observation`` (environment output that an agent
  without native tool calls sends as a user message: SWE-agent, mini-swe-agent, OpenHands),
  with text content and not a demonstration: cleared as a ``role="tool"`` message is;
* a ``Call`` with ``role="code"``: an aged copy (``Call.copy``) with the
  placeholder as ``output`` and ``metadata["_redacted"] = True``.

Anything already carrying ``_redacted`` is skipped, so aging is idempotent. The input is
never mutated: only the messages that change are copied (and within them only the
container path down to the changed block); every other element of the returned list is
the very object that was passed in, so callers can compare by identity.

``AgingReport``: ``redacted`` (blocks cleared), ``tokens_freed`` (old tokens minus
placeholder tokens), ``references_protected`` (blocks that passed gates 1, 2 and 4 but
were kept because cited), ``redacted_ids`` (tool_use ids, or the message id where the
result has none).

Speed: incremental across calls
===============================
The engine calls ``age`` before every LLM call with the same history grown by a
message or two, so a pass over the whole history each time (the first version) made
the per-turn cost grow with the session. The ager now keeps, per history it has seen
(a few at a time, for an engine serving several sessions), the tool results big enough
to matter (``_Slot``), the positions of the assistant messages, and its last decisions.
A call then costs:

* two C-speed checks that the previous history is a prefix of this one (by identity,
  else by equality: the turn loop re-reads the branch from the store once per turn);
* Python work only for the appended messages, for the tool results that cross the
  turn gate (the limit only moves forward) or the clock gate (a heap by timestamp),
  and for those whose citation changed (a set difference of the ``ReferenceMap``'s
  id sets against the last call's);
* a copy of the last output list with the changed messages patched in.

When the history is not a prefix-extension of a remembered one (after a compaction,
a rewind, an edited message, another session), when the clock went backwards, or when
a gate parameter was changed on the instance, that state is dropped and one full pass
rebuilds it, which gives the same result as a fresh ager: the incremental path is an
optimisation, never a different answer (``tests/context/test_aging.py`` checks this over random
sequences of appends, rewinds, compactions, re-reads and citation changes).

Threads: one ager may serve several sessions at once (``DefaultContextEngine`` shares
one and locks per session only); calls take turns on the ager's lock, since the
remembered histories and the token cache are shared.

Contract this relies on: a message is not mutated in place after it was given to the
ager (pass a new dict instead), the same contract as the engine's per-message caches.
Aged copies are reused from one call to the next while their source message is the
same object, so treat them as read-only. Token counts are also cached by ``(message
id, block, length and hash of the text)``, so a full pass after a rewind re-counts nothing.
"""

from __future__ import annotations

import copy
import heapq
import math
import operator
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opctx.dag.nodes import Call

from .policy import AgingPolicy
from .references import ReferenceTracker
from .tokens import Estimator, default_estimator
from .types import AgingReport, ReferenceMap

# the gates' defaults: their home (with their sources) is the policy's aging part
_DEFAULTS = AgingPolicy()

__all__ = ["TurnAger", "PLACEHOLDER_TEMPLATE", "placeholder_text"]

PLACEHOLDER_TEMPLATE = "[Old tool result content cleared (was {tokens} tokens)]"

# how many histories (sessions) one ager remembers incrementally
MAX_REMEMBERED_HISTORIES = 8

# where a slot stands with respect to the turn and clock gates
_PENDING, _WAITING, _ELIGIBLE = 0, 1, 2


def placeholder_text(tokens: int) -> str:
    return PLACEHOLDER_TEMPLATE.format(tokens=tokens)


def _result_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("type", "text") == "text"
        )
    return str(content)


@dataclass(eq=False)
class _Slot:
    """One tool result at least ``min_tokens`` long and not yet redacted: the only thing aging can change."""

    index: int  # position of its message in the history
    block: int  # position in the message's block list; -1 for a whole message (role="tool", a code Call)
    cite_id: str | None  # the message id as the citation gate sees it
    tool_use_id: Any
    ident: str  # what AgingReport.redacted_ids names
    tokens: int
    freed: int  # tokens - tokens of the placeholder (never negative)
    ts: Any  # the message's timestamp, None when it has none
    state: int = _PENDING
    redacted: bool = False
    protected: bool = False  # passed every gate but cited

    @property
    def key(self) -> tuple[int, int]:
        return (self.index, self.block)


@dataclass(eq=False)
class _HistoryState:
    """What the ager remembers about one history (module docstring, "Speed")."""

    signature: tuple
    seen: list[Any] = field(default_factory=list)  # the last history, as given
    out: list[Any] = field(default_factory=list)  # the last aged history
    now: float = -math.inf
    assistants: list[int] = field(default_factory=list)  # positions of assistant messages
    slots: list[_Slot] = field(default_factory=list)  # ordered by (index, block)
    by_message: dict[int, list[_Slot]] = field(default_factory=dict)
    by_cite_id: dict[str, list[_Slot]] = field(default_factory=dict)
    by_tool_use_id: dict[Any, list[_Slot]] = field(default_factory=dict)
    bad: list[int] = field(default_factory=list)  # positions of messages that are neither dict nor Call
    region: int = 0  # slots[:region] have passed the turn gate
    waiting: list[tuple[Any, int, _Slot]] = field(default_factory=list)  # heap by timestamp: held by the clock gate
    eligible: list[_Slot] = field(default_factory=list)  # passed turn, clock and size gates
    redacted_keys: list[tuple[int, int]] = field(default_factory=list)  # sorted (index, block)
    redacted_ids: list[str] = field(default_factory=list)  # in the order of redacted_keys
    tokens_freed: int = 0
    protected: int = 0
    cited_message_ids: set | None = None  # the ReferenceMap's sets as of the last call
    cited_tool_use_ids: set | None = None
    touched: set[int] = field(default_factory=set)  # messages whose aged copy must be rebuilt


def _fast_map(refs: Any) -> bool:
    """A plain ReferenceMap: citation changes can be found by a set difference."""
    return (
        isinstance(refs, ReferenceMap)
        and type(refs).is_cited is ReferenceMap.is_cited
        and isinstance(refs.cited_message_ids, set)
        and isinstance(refs.cited_tool_use_ids, set)
    )


class TurnAger:
    """Three-gate tool-result aging (module docstring)."""

    def __init__(
        self,
        keep_recent_turns: int = _DEFAULTS.keep_recent_turns,
        keep_recent_seconds: float = _DEFAULTS.keep_recent_seconds,
        min_tokens: int = _DEFAULTS.min_tokens,
        protect_first_n: int = _DEFAULTS.protect_first_n,
        clock: Callable[[], float] = time.time,
        *,
        estimator: Estimator | None = None,
        model: str | None = None,
    ):
        for name, value, kinds in (
            ("keep_recent_turns", keep_recent_turns, int),
            ("keep_recent_seconds", keep_recent_seconds, int | float),
            ("min_tokens", min_tokens, int | float),
            ("protect_first_n", protect_first_n, int),  # a count of messages: it indexes the history
        ):
            if isinstance(value, bool) or not isinstance(value, kinds) or value < 0:
                what = "an integer" if kinds is int else "a number"
                raise ValueError(f"{name} must be {what} >= 0, got {value!r}")
        self.keep_recent_turns = keep_recent_turns
        self.keep_recent_seconds = keep_recent_seconds
        self.min_tokens = min_tokens
        self.protect_first_n = protect_first_n
        self.clock = clock
        self.estimator = estimator or default_estimator()
        self.model = model
        self._forget_all()

    def _forget_all(self) -> None:
        # the tracker reads the ager's clock at each call, so a clock set later is seen
        self._tracker = ReferenceTracker(lambda: self.clock())
        self._token_cache: dict[tuple[Any, ...], int] = {}
        self._states: list[_HistoryState] = []  # most recently used first
        # an ager may serve several sessions at once (the engine locks per session
        # only): the remembered states and caches are shared, so calls take turns
        self._lock = threading.RLock()

    def copy(self) -> TurnAger:
        """The same settings, clock and estimator (whose cache is shared), nothing remembered.

        ``DefaultContextEngine`` gives each session its own copy of its ager; ``copy.deepcopy``
        gives the same (a deep copy of the estimator's cache and lock is neither possible
        nor useful).
        """
        clone = copy.copy(self)
        clone._forget_all()
        return clone

    def __deepcopy__(self, memo: dict) -> TurnAger:
        return self.copy()

    # ------------------------------------------------------------------ helpers
    def _tokens(self, key: tuple[Any, ...], text: str) -> int:
        # keyed by the text's length and hash, not the text: an edit of the same length
        # under the same id is counted again, and the cache does not keep every tool
        # output of every session alive (a str caches its hash, so this is cheap)
        cache_key = (*key, len(text), hash(text))
        try:
            n = self._token_cache.get(cache_key)
        except TypeError:  # an unhashable id (a list from a malformed transcript): count, do not cache
            return self.estimator.text_tokens(text, self.model)
        if n is None:
            if len(self._token_cache) > 200_000:
                self._token_cache.clear()
            n = self._token_cache[cache_key] = self.estimator.text_tokens(text, self.model)
        return n

    @staticmethod
    def _is_assistant(msg: Any) -> bool:
        if isinstance(msg, Call):
            return msg.role == "llm" and msg.metadata.get("role") != "system"
        return isinstance(msg, dict) and msg.get("role") == "assistant"

    @staticmethod
    def _timestamp(msg: Any) -> float | None:
        if isinstance(msg, Call):
            return msg.created_at
        ts = msg.get("timestamp") if isinstance(msg, dict) else None
        return ts if isinstance(ts, int | float) and not isinstance(ts, bool) else None

    def _signature(self) -> tuple:
        """The settings decisions depend on: a change on the instance drops the remembered state."""
        return (
            self.keep_recent_turns,
            self.keep_recent_seconds,
            self.min_tokens,
            self.protect_first_n,
            self.model,
            id(self.estimator),
        )

    # ------------------------------------------------------------------ aging
    def age(
        self,
        history: Sequence[Any],
        references: ReferenceMap | None = None,
        *,
        now: float | None = None,
    ) -> tuple[list[Any], AgingReport]:
        """Aged copy of ``history`` and what was done (see the module docstring)."""
        if isinstance(history, str | bytes | dict):
            raise TypeError(f"history must be a list of messages, got {type(history).__name__}")
        history = list(history)
        if not history:
            return history, AgingReport()
        with self._lock:
            refs = references if references is not None else self._tracker.update(history)
            now = self.clock() if now is None else now
            state, k, same_objects = self._state_for(history, now)
            try:
                out = self._advance(state, history, k, same_objects, refs, now)
            except BaseException:
                self._states.remove(state)  # half-updated: never reuse it
                raise
            return list(out), self._report(state)

    __call__ = age

    @staticmethod
    def _report(state: _HistoryState) -> AgingReport:
        return AgingReport(
            redacted=len(state.redacted_keys),
            tokens_freed=state.tokens_freed,
            references_protected=state.protected,
            redacted_ids=list(state.redacted_ids),
        )

    def _state_for(self, history: list[Any], now: float) -> tuple[_HistoryState, int, bool]:
        """A remembered state whose history is a prefix of ``history`` (moved to the front), else a new one.

        Returns ``(state, k, same_objects)``: the first ``k`` messages are already
        accounted for; ``same_objects`` says they are the very objects seen last time
        (else equal copies, whose aged copies must be rebuilt).
        """
        signature = self._signature()
        n = len(history)
        for pos, state in enumerate(self._states):
            k = len(state.seen)
            # `not now >= state.now`: the clock went backwards (or is NaN), decisions may flip back
            if k > n or state.signature != signature or not now >= state.now:
                continue
            if all(map(operator.is_, history, state.seen)):
                same = True
            else:
                try:
                    same = False if history[:k] == state.seen else None
                except Exception:  # an element whose == raises: not the same history
                    same = None
                if same is None:
                    continue
            del self._states[pos]
            self._states.insert(0, state)
            return state, k, same
        state = _HistoryState(signature)
        self._states.insert(0, state)
        del self._states[MAX_REMEMBERED_HISTORIES:]
        return state, 0, True

    def _advance(
        self, st: _HistoryState, history: list[Any], k: int, same_objects: bool, refs: Any, now: float
    ) -> list[Any]:
        n = len(history)
        if same_objects:
            out = st.out
            out.extend(history[k:])
        else:  # equal copies (a re-read branch): rebuild every aged copy from the new objects
            out = list(history)
            st.touched.update(key[0] for key in st.redacted_keys)
        # 1. the appended messages: assistant positions and big tool results
        is_assistant = self._is_assistant
        st.assistants.extend(i for i in range(k, n) if is_assistant(history[i]))
        for i in range(max(k, self.protect_first_n), n):
            self._add_slots(st, i, history[i])
        # 2. citations that changed since the last call, for results already past the gates
        fast = _fast_map(refs)
        if fast and st.cited_message_ids is not None:
            changed_messages = refs.cited_message_ids ^ st.cited_message_ids
            changed_tools = refs.cited_tool_use_ids ^ st.cited_tool_use_ids
            for ident in changed_messages:
                for slot in st.by_cite_id.get(ident, ()):
                    if slot.state == _ELIGIBLE:
                        self._decide(st, slot, refs)
            for ident in changed_tools:
                for slot in st.by_tool_use_id.get(ident, ()):
                    if slot.state == _ELIGIBLE:
                        self._decide(st, slot, refs)
        else:  # first call, or a map whose changes cannot be diffed: ask it about every one
            for slot in st.eligible:
                self._decide(st, slot, refs)
        if fast:
            if refs.cited_message_ids != st.cited_message_ids:
                st.cited_message_ids = set(refs.cited_message_ids)
            if refs.cited_tool_use_ids != st.cited_tool_use_ids:
                st.cited_tool_use_ids = set(refs.cited_tool_use_ids)
        else:
            st.cited_message_ids = st.cited_tool_use_ids = None
        # 3. the turn gate: only moves forward on a growing history
        limit = self._turn_limit(st.assistants, n)
        if st.bad and st.bad[0] < limit:
            i = st.bad[0]
            raise TypeError(f"message {i} is a {type(history[i]).__name__}, expected a dict or a Call")
        slots, seconds = st.slots, self.keep_recent_seconds
        while st.region < len(slots) and slots[st.region].index < limit:
            slot = slots[st.region]
            st.region += 1
            if slot.ts is not None and now - slot.ts < seconds:
                slot.state = _WAITING
                heapq.heappush(st.waiting, (slot.ts, st.region, slot))
            else:
                self._make_eligible(st, slot, refs)
        # 4. the clock gate: the oldest waiting results first
        waiting = st.waiting
        while waiting and not now - waiting[0][0] < seconds:
            self._make_eligible(st, heapq.heappop(waiting)[2], refs)
        # 5. patch the messages whose set of cleared results changed
        for i in st.touched:
            cleared = [slot for slot in st.by_message[i] if slot.redacted]
            out[i] = self._aged_copy(i, history[i], cleared) if cleared else history[i]
        st.touched.clear()
        st.seen, st.out, st.now = history, out, now
        return out

    def _turn_limit(self, assistants: list[int], n: int) -> int:
        """Messages before this index have at least ``keep_recent_turns`` assistant messages after them."""
        turns = self.keep_recent_turns
        if turns <= 0:
            return n
        if turns > len(assistants):
            return 0
        return assistants[len(assistants) - math.ceil(turns)]

    def _make_eligible(self, st: _HistoryState, slot: _Slot, refs: Any) -> None:
        slot.state = _ELIGIBLE
        st.eligible.append(slot)
        self._decide(st, slot, refs)

    def _decide(self, st: _HistoryState, slot: _Slot, refs: Any) -> None:
        """Gate 3 (citation) on a result that passed the others; keeps the totals in step."""
        if refs.is_cited(slot.cite_id, slot.tool_use_id):
            if slot.redacted:
                slot.redacted = False
                pos = bisect_left(st.redacted_keys, slot.key)
                del st.redacted_keys[pos], st.redacted_ids[pos]
                st.tokens_freed -= slot.freed
                st.touched.add(slot.index)
            if not slot.protected:
                slot.protected = True
                st.protected += 1
        elif not slot.redacted:
            if slot.protected:
                slot.protected = False
                st.protected -= 1
            slot.redacted = True
            pos = bisect_left(st.redacted_keys, slot.key)
            st.redacted_keys.insert(pos, slot.key)
            st.redacted_ids.insert(pos, slot.ident)
            st.tokens_freed += slot.freed
            st.touched.add(slot.index)

    # ------------------------------------------------------------------ tool results
    def _add_slots(self, st: _HistoryState, index: int, msg: Any) -> None:
        """Register the tool results of a new message that are big enough to be cleared one day."""
        found: list[tuple[int, Any, Any, tuple[Any, ...], str]] = []  # (block, msg id, tool_use_id, key, text)
        ts = None
        if isinstance(msg, Call):
            if msg.role == "code" and not msg.metadata.get("_redacted"):
                out = msg.output
                text = _result_text(out) if isinstance(out, str | list) else ("" if out is None else str(out))
                found.append((-1, msg.id, msg.metadata.get("tool_call_id"), (msg.id, "call"), text))
            ts = msg.created_at
        elif not isinstance(msg, dict):
            st.bad.append(index)
            return
        else:
            ts = self._timestamp(msg)
            msg_id = msg.get("id") or f"#{index}"
            if msg.get("role") == "tool" or _user_observation(msg):
                if not msg.get("_redacted"):
                    text = _result_text(msg.get("content"))
                    found.append((-1, msg_id, msg.get("tool_call_id"), (msg_id, "tool"), text))
            else:
                blocks = self._blocks(msg)[0]
                for b, block in enumerate(blocks or ()):
                    if not isinstance(block, dict) or block.get("type") != "tool_result" or block.get("_redacted"):
                        continue
                    tool_use_id = block.get("tool_use_id")
                    text = _result_text(block.get("content"))
                    found.append((b, msg_id, tool_use_id, (msg_id, b, tool_use_id), text))
        for b, msg_id, tool_use_id, key, text in found:
            tokens = self._tokens(key, text)
            if tokens < self.min_tokens:
                continue
            placeholder_tokens = self.estimator.text_tokens(placeholder_text(tokens), self.model)
            # the reference tracker keys a message by str(id) ("#<index>" without one)
            cite_id = msg_id if isinstance(msg_id, str) else str(msg_id)
            slot = _Slot(
                index, b, cite_id, tool_use_id, str(tool_use_id or msg_id), tokens,
                max(0, tokens - placeholder_tokens), ts,
            )
            st.slots.append(slot)
            st.by_message.setdefault(index, []).append(slot)
            if cite_id is not None:
                st.by_cite_id.setdefault(cite_id, []).append(slot)
            if tool_use_id is not None:
                try:
                    st.by_tool_use_id.setdefault(tool_use_id, []).append(slot)
                except TypeError:  # an unhashable id can never be in the cited set: no change to watch
                    pass

    @staticmethod
    def _blocks(msg: dict) -> tuple[list[Any] | None, bool]:
        """The block list that holds tool results (``extra.blocks``, else a list ``content``), and which."""
        extra = msg.get("extra")
        if isinstance(extra, dict) and isinstance(extra.get("blocks"), list):
            return extra["blocks"], True
        content = msg.get("content")
        return (content, False) if isinstance(content, list) else (None, False)

    def _aged_copy(self, index: int, msg: Any, cleared: list[_Slot]) -> Any:
        """``msg`` with the results of ``cleared`` replaced by placeholders; the input is not touched."""
        if isinstance(msg, Call):
            tokens = cleared[0].tokens
            return msg.copy(output=placeholder_text(tokens), metadata={**msg.metadata, "_redacted": True})
        if cleared[0].block == -1:  # role="tool": the message is the block
            new = dict(msg)
            new["content"] = placeholder_text(cleared[0].tokens)
            new["_redacted"] = True
            return new
        blocks, in_extra = self._blocks(msg)
        new_blocks = list(blocks)
        for slot in cleared:
            new_block = dict(blocks[slot.block])
            new_block["content"] = placeholder_text(slot.tokens)
            new_block["_redacted"] = True
            new_blocks[slot.block] = new_block
        new = dict(msg)
        if in_extra:
            new["extra"] = {**msg["extra"], "blocks": new_blocks}
            content = msg.get("content")
            if isinstance(content, list) and (content is blocks or content == blocks):
                # the legacy shape keeps the blocks as the content too (an equal copy once
                # stored): both must carry the placeholder, or the full result stays counted
                new["content"] = new_blocks
        else:
            new["content"] = new_blocks
        return new


def _user_observation(msg: dict) -> bool:
    """A user message marked ``is_observation`` with text content, not a demonstration."""
    return (
        msg.get("role") == "user"
        and msg.get("is_observation") is True
        and msg.get("is_demo") is not True
        and isinstance(msg.get("content"), str)
    )
