"""The per-message facts the cut needs, and their two caches.

A message's facts are ``(tokens, has a text block, is a user request, tool-call
ids, tool-result ids)``; a display-only line (never sent, see
``provider_messages.is_display_only``) has none: 0 tokens, no text, no request. :class:`FactsTable` keeps them for one history in the
columns ``find_cut_index`` reads (prefix sums, user positions, and for every
boundary the number of tool call/result pairs it would split), growing by
:meth:`FactsTable.append`. :class:`MessageFacts` caches the facts per message
(keyed by id, role and content length, checked against the message) and
extends the last table when the history only grew. See "Speed" in the
``opctx.context.summarize`` docstring.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from opctx.dag.messages import has_text_block, is_tool_result, tool_result_ids, tool_use_ids

from .provider_messages import is_display_only

__all__ = ["MessageFacts", "FactsTable"]

Estimate = Callable[[dict], int]

# (tokens, has_text_block, is_user_request, call ids, result ids)
Facts = tuple[int, bool, bool, tuple[str, ...], tuple[str, ...]]


def _default_estimate(msg: dict) -> int:
    from .tokens import estimate_message_tokens

    return estimate_message_tokens(msg)


def _compute_facts(msg: dict, estimate: Estimate) -> Facts:
    if is_display_only(msg):
        # never sent (provider_messages): it costs the request nothing and asks nothing
        return (0, False, False, (), ())
    is_user = msg.get("role") == "user" and not is_tool_result(msg)
    return (
        int(estimate(msg)),
        has_text_block(msg),
        is_user,
        tuple(tool_use_ids(msg)),
        tuple(tool_result_ids(msg)),
    )


class FactsTable:
    """The per-message facts of one history, in the columns the cut needs.

    Grows by :meth:`append` in O(1) amortised per message: prefix sums of tokens
    and text-block messages, the positions of user requests, and for every
    boundary ``b`` (0..n) a count of the tool call/result pairs it would split
    (``forbid[b] == 0`` means the boundary is valid). A result pairs with the
    most recent earlier call carrying its id.
    """

    __slots__ = ("facts", "prefix_tokens", "prefix_text", "users", "forbid", "_last_call")

    def __init__(self) -> None:
        self.facts: list[Facts] = []
        self.prefix_tokens: list[int] = [0]
        self.prefix_text: list[int] = [0]
        self.users: list[int] = []
        self.forbid: list[int] = [0]
        self._last_call: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.facts)

    def append(self, facts: Facts) -> None:
        i = len(self.facts)
        tokens, text, user, calls, results = facts
        self.facts.append(facts)
        self.prefix_tokens.append(self.prefix_tokens[-1] + tokens)
        self.prefix_text.append(self.prefix_text[-1] + (1 if text else 0))
        self.forbid.append(0)  # boundary i+1 (after this message)
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

    def valid(self, b: int) -> bool:
        return self.forbid[b] == 0

    def tail_tokens(self, i: int) -> int:
        return self.prefix_tokens[-1] - self.prefix_tokens[i]

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
        facts = _compute_facts(msg, self.estimate)
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

    def tokens(self, msg: dict) -> int:
        return self.get(msg)[0]

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._table, self._seen = None, []

    def __len__(self) -> int:
        return len(self._cache)
