"""The per-message facts the cut needs, and their two caches.

A message's facts are ``(tokens, has a text block, is a user request, tool-call
ids, tool-result ids, unit role, thinking tokens)``; a display-only line (never
sent, see ``provider_messages.is_display_only``) has none: 0 tokens, no text, no
request.

:class:`FactsTable` keeps them for one history in the columns ``find_cut_index``
reads (prefix sums, user positions, and for every boundary the number of tool
call/result pairs it would split), growing by :meth:`FactsTable.append`.
:class:`MessageFacts` caches the facts per message (keyed by id, role and content
length, checked against the message) and extends the last table when the history
only grew; :meth:`MessageFacts.probe_table` counts another history (a compaction's
predicted branch) from the same cache without changing it. See "Speed" in the
``opctx.context.summarize`` docstring.

Two more ways facts arrive without a tokenizer pass: :meth:`MessageFacts.seed` enters
counts persisted in the database (``opctx.context.token_counts``; the other facts come
as a short ``shape`` text, :func:`encode_shape`), and a compaction's copy of a message
(``copied_from``, every other field equal) takes its original's facts.

Thinking units. The unit role places the message in a *thinking unit*
(``anthropic_messages``: an assistant message with thinking blocks, then the tool
results and tool-call messages that continue its loop, up to the first other
message): ``_STARTS`` a unit, ``_CONTINUES`` one (or is invisible inside it: a
display-only line, an empty message), or ends it (``_ENDS``; ``_ANSWERS`` for the
assistant's answer). The kept tail may start where a unit starts, never inside one
(``FactsTable.inside_unit``): Anthropic rejects a running tool loop whose first
assistant message lost its thinking. The one exception, a unit larger than the
ceiling, is cut inside with its first tool group kept (:meth:`FactsTable.unit_start`,
:meth:`FactsTable.group_end`; "Thinking units" in the ``summarize`` docstring).

Thinking as the model keeps it. The thinking tokens (what the estimate counts for a
message's thinking blocks) and ``FactsTable.turn_start`` (where the last assistant
turn starts) let the engine count thinking as the model holds it
(``anthropic_messages.thinking_retention``): a model that keeps only the last
turn's thinking does not hold the rest (``FactsTable.counted_tokens``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

from opctx.dag.messages import blocks, has_text_block, is_tool_result, tool_result_ids, tool_use_ids

from .persistence import same_but_identity
from .provider_messages import is_display_only, thinking_blocks

__all__ = ["MessageFacts", "FactsTable", "encode_shape", "decode_shape"]

Estimate = Callable[[dict], int]

# (tokens, has_text_block, is_user_request, call ids, result ids, unit role, thinking tokens)
Facts = tuple[int, bool, bool, tuple[str, ...], tuple[str, ...], int, int]

# a message's place in a thinking unit (module docstring); an assistant answer ends a
# unit like any other message, but also ends the assistant turn of a tool loop
_ENDS, _STARTS, _CONTINUES, _ANSWERS = 0, 1, 2, 3


def _default_estimate(msg: dict) -> int:
    from .tokens import estimate_message_tokens

    return estimate_message_tokens(msg)


def _compute_facts(msg: dict, estimate: Estimate, counted: tuple[int, int] | None = None) -> Facts:
    """The facts of ``msg``; ``counted`` is its ``(tokens, thinking)`` when already known
    (a count persisted by the same estimator identity: no tokenizer pass)."""
    if is_display_only(msg):
        # never sent (provider_messages): it costs the request nothing and asks nothing
        return (0, False, False, (), (), _CONTINUES, 0)
    is_user = msg.get("role") == "user" and not is_tool_result(msg)
    calls = tuple(tool_use_ids(msg))
    if counted is not None:
        tokens, thinking = counted
    else:
        tokens = int(estimate(msg))
        bare = _without_thinking(msg)
        thinking = max(0, tokens - int(estimate(bare))) if bare is not None else 0
    return (
        tokens,
        has_text_block(msg),
        is_user,
        calls,
        tuple(tool_result_ids(msg)),
        _unit_role(msg, calls, is_user),
        thinking,
    )


def _without_thinking(msg: dict) -> dict | None:
    """``msg`` without its thinking (``thinking`` and thinking blocks), or None when it has none."""
    if msg.get("role") != "assistant":
        return None
    kinds = ("thinking", "redacted_thinking")
    out = None
    if msg.get("thinking"):
        out = {k: v for k, v in msg.items() if k != "thinking"}
    for key in ("content", "extra"):
        holder = msg.get(key)
        listed = holder.get("blocks") if key == "extra" and isinstance(holder, dict) else holder
        if isinstance(listed, list) and any(isinstance(b, dict) and b.get("type") in kinds for b in listed):
            kept = [b for b in listed if not (isinstance(b, dict) and b.get("type") in kinds)]
            out = dict(out or msg)
            out[key] = {**holder, "blocks": kept} if key == "extra" else kept
    return out


def _unit_role(msg: dict, calls: tuple[str, ...], is_user: bool) -> int:
    role = msg.get("role")
    if role == "assistant":
        if thinking_blocks(msg):
            return _STARTS
        if calls or not (msg.get("content") or blocks(msg)):
            return _CONTINUES  # the loop's next call, or an empty placeholder (never sent)
        return _ANSWERS
    if role == "tool" or (not is_user and is_tool_result(msg)):
        return _CONTINUES
    return _ENDS


_FIELD, _ID = "\x1e", "\x1f"


def encode_shape(facts: Facts) -> str:
    """The facts of a message other than its token counts, as one short text (stored
    beside a persisted count): ``""`` when an id cannot be encoded (then recomputed)."""
    _, text, user, calls, results, unit, _ = facts
    ids = (*calls, *results)
    if any(not isinstance(i, str) or not i or _FIELD in i or _ID in i for i in ids):
        return ""
    return f"{int(text)}{int(user)}{unit}{_FIELD}{_ID.join(calls)}{_FIELD}{_ID.join(results)}"


def decode_shape(row: Sequence) -> Facts | None:
    """``(tokens, thinking, shape)`` as facts, or ``None`` without a shape."""
    shape = row[2] if len(row) > 2 else ""
    if not shape:
        return None
    head, calls, results = shape.split(_FIELD)
    return (
        row[0], head[0] == "1", head[1] == "1",
        tuple(calls.split(_ID)) if calls else (), tuple(results.split(_ID)) if results else (),
        int(head[2:]), row[1],
    )


class FactsTable:
    """The per-message facts of one history, in the columns the cut needs.

    Grows by :meth:`append` in O(1) amortised per message: prefix sums of tokens
    and text-block messages, the positions of user requests, and for every
    boundary ``b`` (0..n) a count of the tool call/result pairs it would split
    (``forbid[b] == 0`` means the boundary is valid) and whether it lies inside a
    thinking unit (``inside_unit[b]``: the kept tail cannot start there). A result
    pairs with the most recent earlier call carrying its id.
    """

    __slots__ = (
        "facts", "prefix_tokens", "prefix_text", "prefix_thinking", "users", "forbid", "inside_unit",
        "turn_start", "turn_starts", "_last_call", "_in_unit", "_after_results",
    )

    def __init__(self) -> None:
        self.facts: list[Facts] = []
        self.prefix_tokens: list[int] = [0]
        self.prefix_text: list[int] = [0]
        self.users: list[int] = []
        self.forbid: list[int] = [0]
        self.inside_unit: list[bool] = [False]
        self.prefix_thinking: list[int] = [0]
        # where the last assistant turn starts: after the last request that does not share
        # a user turn with tool results (a tool loop is one turn, anthropic_messages)
        self.turn_start = 0
        # where every assistant turn starts, by the same rule (thinking_clearing keeps the last N)
        self.turn_starts: list[int] = []
        self._last_call: dict[str, int] = {}
        self._in_unit = False
        self._after_results = False

    def __len__(self) -> int:
        return len(self.facts)

    def append(self, facts: Facts) -> None:
        i = len(self.facts)
        tokens, text, user, calls, results, unit, thinking = facts
        self.facts.append(facts)
        self.prefix_tokens.append(self.prefix_tokens[-1] + tokens)
        self.prefix_thinking.append(self.prefix_thinking[-1] + thinking)
        if user and not self._after_results:
            self.turn_start = i
            self.turn_starts.append(i)
        if results:
            self._after_results = True
        elif calls or unit in (_STARTS, _ANSWERS):
            self._after_results = False
        self.prefix_text.append(self.prefix_text[-1] + (1 if text else 0))
        self.forbid.append(0)  # boundary i+1 (after this message)
        # boundary i (before this message) is inside a unit when this message continues one
        self.inside_unit[i] = unit == _CONTINUES and self._in_unit
        self.inside_unit.append(False)
        if unit != _CONTINUES:
            self._in_unit = unit == _STARTS
        if user:
            self.users.append(i)
        forbid = self.forbid
        for rid in results:
            c = self._last_call.get(rid)
            if c is not None and c < i:
                # boundaries c+1 .. i would separate call c from result i
                for b in range(c + 1, i + 1):
                    forbid[b] += 1
        for cid in calls:
            self._last_call[cid] = i

    @property
    def total_tokens(self) -> int:
        return self.prefix_tokens[-1]

    def counted_tokens(self, retention: str = "all") -> int:
        """The total as the model holds it: with ``retention="last_turn"``
        (``thinking_retention``) the thinking before the last assistant turn is not counted."""
        if retention == "last_turn":
            return self.total_tokens - self.prefix_thinking[self.turn_start]
        return self.total_tokens

    def tail_may_start(self, b: int) -> bool:
        """Boundary ``b`` splits no tool pair and no thinking unit: the kept tail may start there."""
        return self.forbid[b] == 0 and not self.inside_unit[b]

    def tail_tokens(self, i: int) -> int:
        return self.prefix_tokens[-1] - self.prefix_tokens[i]

    def unit_start(self, b: int) -> int:
        """The message that starts the thinking unit boundary ``b`` lies inside
        (``inside_unit[b]``); ``b`` itself when it splits no unit."""
        inside = self.inside_unit
        if not inside[b]:
            return b
        while inside[b - 1]:  # inside_unit[0] is False: the walk stops
            b -= 1
        return b - 1

    def unit_end(self, b: int) -> int:
        """The first boundary at or after ``b`` that splits no thinking unit (``len`` at most)."""
        inside = self.inside_unit
        while inside[b]:  # inside_unit[len] is False
            b += 1
        return b

    def group_end(self, b: int) -> int:
        """The first boundary after ``b`` that splits no tool pair: the end of the tool
        group that starts at ``b`` (``len`` at most)."""
        n, forbid = len(self.facts), self.forbid
        b += 1
        while b < n and forbid[b]:
            b += 1
        return min(b, n)

    def tokens_at(self, i: int) -> int:
        return self.prefix_tokens[i + 1] - self.prefix_tokens[i]

    def tail_text(self, i: int) -> int:
        return self.prefix_text[-1] - self.prefix_text[i]

    def is_user(self, i: int) -> bool:
        return self.facts[i][2]


class MessageFacts:
    """Per-message facts for the cut, cached two ways.

    * By message: keyed by ``(id, role, content length)``, and a hit counts only
      when the cached message equals the one asked about (identity first, then
      ``==`` at C speed): a node updated in place under the same id and length
      (``GraphStore.update``) is recomputed, never served stale. Messages with no id
      are computed every time. Bounded LRU (``max_entries``).
    * By history: :meth:`table` remembers the last history it saw. When the next
      one is the same list grown at the end (the same objects, or equal copies as
      re-read from the store), only the new messages are looked at.
    """

    def __init__(self, estimate: Estimate | None = None, max_entries: int = 200_000):
        self.estimate: Estimate = estimate or _default_estimate
        self.max_entries = max_entries
        # key -> (the message the facts were computed from, its facts)
        self._cache: OrderedDict[tuple, tuple[dict, Facts]] = OrderedDict()
        self._lock = threading.Lock()
        self._table: FactsTable | None = None
        self._seen: list[dict] = []

    @staticmethod
    def _key(msg: dict) -> tuple | None:
        mid = msg.get("id")
        if not mid:
            return None
        content = msg.get("content")
        size = len(content) if isinstance(content, str | list) else -1
        return (mid, msg.get("role"), size)

    def get(self, msg: dict) -> Facts:
        return self._get(msg, self._key(msg))

    def _get(self, msg: dict, key: tuple | None) -> Facts:
        if key is None:
            return _compute_facts(msg, self.estimate)
        try:
            hit = self._cache.get(key)
        except TypeError:  # an unhashable id from a malformed transcript: not cached
            return _compute_facts(msg, self.estimate)
        if hit is not None and (hit[0] is msg or hit[0] == msg):
            return hit[1]
        facts = self._copied(msg, key) or _compute_facts(msg, self.estimate)
        with self._lock:
            self._cache[key] = (msg, facts)
            if len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return facts

    def table(self, messages: Sequence[dict]) -> FactsTable:
        """The :class:`FactsTable` of ``messages``, extended incrementally when possible."""
        with self._lock:
            table, seen = self._table, self._seen
        n, k = len(messages), len(seen)
        reuse = 0
        # list == compares element by element at C speed, identity first
        if table is not None and k <= n and k and messages[:k] == seen:
            reuse = k
        if reuse == 0 or table is None:
            table = FactsTable()
        for m in messages[reuse:]:
            table.append(self._get(m, self._key(m)))
        with self._lock:
            self._table, self._seen = table, list(messages)
        return table

    def probe_table(self, messages: Sequence[dict]) -> FactsTable:
        """A :class:`FactsTable` of ``messages`` that changes nothing here: cached facts
        where a message has them (checked as in :meth:`get`), the others computed and
        not kept, and the last history's table left as it is.

        For a history that is not the branch (a compaction's predicted new branch, its
        messages aged by a probe): its aged copies must not displace their originals'
        entries, and the branch's own messages are not estimated again (a fresh cache
        did that for every kept message of every compaction)."""
        table = FactsTable()
        for m in messages:
            table.append(self.probe(m))
        return table

    def probe(self, msg: dict) -> Facts:
        """The facts of ``msg``: cached ones where they were made from it (checked as in
        :meth:`get`), else computed and not kept (:meth:`probe_table`)."""
        hit = self._entry(msg)
        if hit is not None and (hit[0] is msg or hit[0] == msg):
            return hit[1]
        return _compute_facts(msg, self.estimate)

    def _entry(self, msg: dict) -> tuple[dict, Facts] | None:
        """The cache entry under ``msg``'s key (the message it was made from, its facts)."""
        key = self._key(msg)
        try:
            return self._cache.get(key) if key is not None else None
        except TypeError:  # an unhashable id from a malformed transcript
            return None

    def _copied(self, msg: dict, key: tuple) -> Facts | None:
        """The facts of the message ``msg`` is a copy of (``copied_from``: a compaction's
        new branch), when the two differ only in identity; else None.

        Every compaction copies the kept tail under fresh ids, and estimating each copy
        again was a third of a compaction-dense replay."""
        origin = msg.get("copied_from")
        if not origin or not isinstance(origin, str):
            return None
        hit = self._cache.get((origin, *key[1:]))
        if hit is None:
            return None
        return hit[1] if same_but_identity(msg, hit[0]) else None

    def seed(self, messages: Sequence[dict], counts: Mapping[str, Sequence]) -> int:
        """Enter the facts of ``messages`` whose ``(tokens, thinking[, shape])`` are in
        ``counts`` (by message id) without estimating them; the number entered.

        ``shape`` (:func:`encode_shape`) carries the other facts, so a seeded message is
        not even walked; without it they are computed from the message (no tokenizer).
        The entries are keyed and checked like any other (the message object they were
        made from is kept), so a message changed afterwards is recounted, never served
        a count that described something else. When every message is seeded into an
        empty cache the table of ``messages`` is built on the way. ``counts`` must come
        from this cache's own estimate (``opctx.context.token_counts`` checks the
        estimator identity).
        """
        entered = 0
        with self._lock:
            cache = self._cache
            table: FactsTable | None = FactsTable() if not cache and self._table is None else None
            for msg in messages:
                mid = msg.get("id")
                try:
                    row = counts.get(mid) if mid else None
                except TypeError:  # an unhashable id from a malformed transcript: not cached
                    row = None
                if row is None:
                    table = None  # table() computes what is missing
                    continue
                facts = decode_shape(row) or _compute_facts(msg, self.estimate, (row[0], row[1]))
                cache[self._key(msg)] = (msg, facts)
                entered += 1
                if table is not None:
                    table.append(facts)
            if table is not None:
                self._table, self._seen = table, list(messages)
            while len(cache) > self.max_entries:
                cache.popitem(last=False)
        return entered

    def tokens(self, msg: dict) -> int:
        return self.get(msg)[0]

    def known_tokens(self, msg: dict) -> int | None:
        """The estimate of ``msg`` when this cache holds facts made from this very object,
        else None (nothing is computed). Not for a display-only line: its facts count
        nothing, where the estimator counts its text."""
        if is_display_only(msg):
            return None
        hit = self._entry(msg)
        return hit[1][0] if hit is not None and hit[0] is msg else None

    def forget_table(self) -> None:
        """Drop the history table (a compaction replaced the branch); the per-message
        facts stay, for the messages and copies of them that come back."""
        with self._lock:
            self._table, self._seen = None, []

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._table, self._seen = None, []

    def __len__(self) -> int:
        return len(self._cache)
