"""A recent-events view: every request sends the first messages and the latest ones.

Some published condensers do not compact at all: OpenHands V0's ``RecentEventsCondenser``
(OpenHands/OpenHands at d6fab190, ``openhands/memory/condenser/impl/
recent_events_condenser.py``) returns, at every step, a ``View`` of the first
``keep_first`` events and the last ``max_events - keep_first``; the event history keeps
everything, and nothing is written. Modelled as a compaction, each request past the limit
persisted a new branch of a hundred copies and counted a compaction the client never
makes. :class:`RecentEvents` is that view as an engine ager (``aging.kind =
"recent-events"``: ``aging.protect_first_n`` first messages, ``aging.keep_last`` last
ones): the stored history is untouched, and what the request leaves out is counted in
``AgingReport.tokens_freed``.

Details of the same source it keeps:

* the initial user message is sent whatever the view left out (``keep_initial_request``,
  the policy's ``cut.keep_initial_request``): V0's ``ConversationMemory.process_events``
  (``openhands/memory/conversation_memory.py``, ``_ensure_initial_user_message``) puts it
  back after the system message, so the head reaches the first user request;
* tool results whose call was left out are left out too (``_filter_unmatched_tool_calls``
  in the same file): the tail is the latest messages, so such results come before its
  first tool call (a client's hook lines may stand between). A call of the head whose
  results were left out is sent as the head holds it: the request's assembly drops an
  unanswered call (``opctx.context.provider_messages``), as the source's filter does.

One it does not: when the history is shorter than the view, the source's slices repeat its
first events (``view[:keep_first] + view[-(max_events - keep_first):]``, the second slice
the whole view). The source's own test calls that case "equivalent to a NoOpCondenser"
(``tests/unit/memory/condenser/test_condenser.py``, ``test_recent_events_condenser``), and
the view sends such a history whole.

>>> view = RecentEvents(1, 2)
>>> hist = [{"role": "user", "content": f"m{i}"} for i in range(5)]
>>> aged, report = view.age(hist)
>>> [m["content"] for m in aged], view.acted
(['m0', 'm3', 'm4'], True)
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Sequence
from itertools import compress
from typing import Any

from opctx.dag.messages import is_tool_result, tool_result_ids, tool_use_ids

from ._cut import _head_count
from .tokens import estimate_message_tokens
from .types import AgingReport

__all__ = ["RecentEvents"]


class RecentEvents:
    """An ager that sends the first ``keep_first`` and the last ``keep_last`` messages
    (module docstring). The messages it sends are the very objects it was given.

    Per request it costs a pass at C speed over the history (the identity check of what
    it saw before) and the estimate of the messages appended since: the tokens left out
    are a difference of running sums, not a sum over the growing gap.
    """

    def __init__(
        self,
        keep_first: int,
        keep_last: int,
        *,
        keep_initial_request: bool = False,
        estimate: Callable[[dict], int] | None = None,
    ) -> None:
        for name, value in (("keep_first", keep_first), ("keep_last", keep_last)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        self.keep_first = keep_first
        self.keep_last = keep_last
        self.keep_initial_request = bool(keep_initial_request)
        self._estimate = estimate or estimate_message_tokens
        self._lock = threading.Lock()
        # the history last seen and the running sums of its estimates (_sums[i]: messages < i)
        self._seen: list[dict] = []
        self._sums: list[int] = [0]
        self.longest = 0  # the longest history seen (for the replay's "nothing to do" note)
        self.acted = False

    def age(self, history: Sequence[dict], references: Any = None) -> tuple[list[dict], AgingReport]:
        """``(view, report)``: the view of ``history`` and the tokens it left out."""
        with self._lock:
            if not isinstance(history, list):
                history = list(history)
            n = len(history)
            self.longest = max(self.longest, n)
            head = min(n, _head_count(history, self.keep_first, self.keep_initial_request, []))
            start = max(head, n - self.keep_last)
            if start <= head:
                return history, AgingReport()
            orphans = _orphan_results(history, head, start)
            sums = self._running_sums(history)
            self.acted = True
            freed = sums[start] - sums[head] + sum(sums[i + 1] - sums[i] for i in orphans)
            tail = history[start:]
            if orphans:
                tail = [m for i, m in enumerate(tail, start) if i not in orphans]
            return history[:head] + tail, AgingReport(tokens_freed=freed)

    def idle_reason(self) -> str | None:
        """Why the view never left anything out, or None when it did."""
        if self.acted:
            return None
        return (f"the history never held more than the first {self.keep_first} and last "
                f"{self.keep_last} messages (at most {self.longest})")

    def _running_sums(self, history: list[dict]) -> list[int]:
        """Running sums of the estimates of ``history``, reusing those of the history seen
        last up to the first position that holds another object."""
        seen, sums = self._seen, self._sums
        k = min(len(seen), len(history))
        changed = next(compress(range(k), map(operator.is_not, seen, history)), k)
        del sums[changed + 1:]
        total = sums[-1]
        estimate = self._estimate
        for msg in history[changed:]:
            total += int(estimate(msg))
            sums.append(total)
        self._seen = list(history)  # the caller's list may grow in place
        return sums


def _orphan_results(history: list[dict], head: int, start: int) -> set[int]:
    """Positions of the tail's tool results whose call is not in the view: those before the
    tail's first call, unless the head made the call."""
    head_calls = {cid for m in history[:head] for cid in tool_use_ids(m)}
    orphans: set[int] = set()
    for i in range(start, len(history)):
        msg = history[i]
        if tool_use_ids(msg):
            break
        if is_tool_result(msg) and not head_calls.intersection(tool_result_ids(msg)):
            orphans.add(i)
    return orphans
