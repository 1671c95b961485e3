"""Where to cut, and what to write in place of what is cut (spec §4.1-§4.6).

Two pieces live here:

* :func:`find_cut_index` decides which messages of the active branch are folded
  into a summary and which are kept verbatim.
* :class:`Summarizer` turns the folded messages into a summary: an LLM summary
  (FRESH, or UPDATE chained on the previous summary, ``prompts.py``), or, on any
  failure, a deterministic *structural* summary that lists every folded message.

Parameters (``SummarizerConfig``, spec §4 table)
================================================
``trigger_pct`` 0.80, ``emergency_pct`` 0.95, ``recommend_pct`` 0.70,
``keep_min_tokens`` 8,000, ``keep_max_tokens`` 40,000, ``keep_ratio`` 0.10,
``keep_min_messages`` 5, ``protect_first_n`` 3, ``protect_last_n`` 20,
``min_prompt_budget`` 8,000, ``min_prompt_ratio`` 0.25. Additions, all about the
summary *call*: ``max_message_chars`` (how much of one folded message goes into
the summary prompt), ``structural_head_chars`` (60, §4.5), ``summary_output_tokens``
(what the engine reserves for the summary reply), ``timeout`` (seconds).

The cut (§4.2, with the SPEC-NOTES invariants)
==============================================
The six steps of the specification, over a precomputed table of per-message
facts (tokens, "has a text block", "is a user request", tool-call ids,
tool-result ids):

1. ``desired = clamp(window * keep_ratio, keep_min_tokens, keep_max_tokens)``.
2. ``min_prompt = min(min_prompt_budget, window * min_prompt_ratio)``;
   ``max_safe = window - min_prompt``; ``effective = min(desired, max_safe)``.
   ``keep_recent_tokens=N`` (§4.3) replaces steps 1-2 by ``effective = N``.
   ``max_tail_tokens`` (an addition the engine uses) caps ``effective`` further:
   on an 8K window the specification's own table keeps 6K of a 6K input budget,
   so a compaction could never fold anything and would loop (the OpenClaw
   pitfall). The engine passes half the input budget; the cap is recorded in
   ``CutPoint.steps``.
3. Walk back from the end accumulating tokens and text-block messages; the
   cut is the *last* index where both gates hold (``tokens >= effective`` and
   ``text messages >= keep_min_messages``). Suffix sums are monotone, so this is
   a bisection over prefix sums kept by a :class:`FactsTable`. When the text
   gate cannot be met within the ceiling (below) the token gate alone decides
   and the step says "text gate relaxed": an autonomous run of tool calls with
   empty assistant text would otherwise keep everything and never compact. If
   even the token gate never closes, everything after the head fits the keep
   budget: ``ok=False``, nothing to fold.
4. ``protect_last_n`` is a floor of the tail: the cut is no later than
   ``len - protect_last_n``. It is *bounded*: the floor never forces more tail
   tokens than the ceiling (``min(max_safe, max_tail_tokens)``, or ``N`` with an
   override), because twenty messages of 6K-token tool output do not fit a 32K
   window and a floor that makes compaction useless is worse than no floor.
5. The cut is no earlier than the protected head. The head is
   ``protect_first_n`` messages, extended forward until it does not split a tool
   call from its results. (Computed first: every other step needs it.)
6. Snap. The specification snaps *forward* to a user message; the public
   reference code let that carry the cut past ``len - protect_last_n`` and past
   the latest user message (SPEC-NOTES defect). Here, in order of preference:
   (a) forward to the first user request in ``[cut, min(floor, latest user
   request)]``; (b) *backward* to the nearest earlier user request, if the tail
   then still fits the ceiling; (c) the nearest boundary that keeps tool groups
   whole (forward within the same bound, else backward within the ceiling): the
   tail then starts mid-turn, after a complete tool exchange; (d) the earlier
   user request even over the ceiling. **Pinning** (an addition): when the
   latest user request lies between the head and the cut, snapping back to it
   keeps everything after it. In an autonomous run (one request, hundreds of tool
   calls: most Claude Code and Codex sessions) that folds next to nothing, and
   compaction stops for lack of progress. So if (b) would fold less than half of
   what cutting at the nearest tool-group boundary folds, the cut stays there and
   the request is *pinned*: kept verbatim, as a copy, right after the summary
   (``CutPoint.pinned``). The request is still on the new branch, word for word,
   which is what SPEC-NOTES' "latest user request in the kept tail" protects; Codex
   keeps recent user messages after its summary the same way. A cut that folds nothing returns
   ``CutPoint(ok=False, reason=...)``. The forward snap of (a) may give back the
   one assistant message in front of the user request that the gates counted;
   that is the specification's behaviour and is kept.

A boundary ``b`` is *valid* when no tool result at ``>= b`` answers a call at
``< b``. It is maintained per boundary as messages are appended: each result is
paired with the most recent earlier call carrying its id (ids are reused by some
providers), and every pair forbids the boundaries between them. A result whose
call does not exist is an orphan already; it forbids nothing. Parallel tool
calls are one assistant message with several ids; its results all pair with it,
so the group is never split. The latest user request (``role == "user"`` and not
a tool-result wrapper) is always at or after the cut, unless it is inside the
protected head, which is kept verbatim anyway.

Speed: per-message facts come from a :class:`MessageFacts` cache keyed by
``(id, role, content length)`` and checked against the message it was computed
from (so a node updated under its id is recomputed), and its
:meth:`MessageFacts.table` extends the previous table when the history only grew
(same objects, or equal copies). With a
warm table ``find_cut_index`` on 10,000 messages is two bisections and a few
short loops, well under a millisecond (``benchmarks/engine.py``).

The summary (§4.4-§4.6)
=======================
``Summarizer.summarise(messages, previous_summary=None, cancel_event=None,
timeout=None)``: UPDATE when a previous summary is given, else FRESH. The folded
messages are rendered one per line as ``[role] text`` (tool calls as
``name(arguments)``, results as ``[tool name] ...``), each cut to
``max_message_chars`` with a marker saying how much was left out. If the whole
transcript is larger than ``max_prompt_tokens``, the *oldest* messages are
rendered as structural one-liners instead, so that nothing is dropped silently.
A previous summary node inside the folded range is not repeated when its text
is passed as ``previous_summary``.

Fallback: any exception from the provider, an empty reply, a timeout, a
cancellation (``cancel_event`` is checked before the call, while waiting for it,
and after it), or no provider at all gives the structural summary with
``fell_back_to_structural=True`` and ``error="Type: message"``. The structural
summary keeps the previous summary at the top and lists **every** folded message
as ``[role] first 60 characters``: tool calls as ``[assistant] -> name(args)``,
tool results as ``[tool name]`` (``[tool name error]`` for failures), empty
messages as ``(empty)``. With a timeout or a cancel event the provider runs in a
daemon worker thread; a call that outlives its timeout is abandoned, not killed
(Python cannot kill a thread); its late answer is ignored.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from opctx.dag.messages import (
    has_text_block,
    is_tool_result,
    message_text,
    tool_result_ids,
    tool_use_ids,
)

from . import prompts
from .types import CutPoint, SummaryResult

__all__ = [
    "SummarizerConfig",
    "MessageFacts",
    "FactsTable",
    "keep_budget",
    "find_cut_index",
    "Summarizer",
    "SummaryCancelled",
    "SummaryTimeout",
    "render_transcript",
    "structural_summary",
    "structural_line",
    "PromptTooLarge",
    "is_summary_message",
]

Estimate = Callable[[dict], int]


class SummaryCancelled(Exception):
    """The summary call was cancelled through ``cancel_event``."""


class SummaryTimeout(Exception):
    """The summary call did not answer within its timeout."""


@dataclass
class SummarizerConfig:
    """Every parameter of the §4 table, plus the summary-call settings (additions)."""

    trigger_pct: float = 0.80
    emergency_pct: float = 0.95
    recommend_pct: float = 0.70
    keep_min_tokens: int = 8_000
    keep_max_tokens: int = 40_000
    keep_ratio: float = 0.10
    keep_min_messages: int = 5
    protect_first_n: int = 3
    protect_last_n: int = 20
    min_prompt_budget: int = 8_000
    min_prompt_ratio: float = 0.25
    # additions: the summary call itself
    max_message_chars: int = 4_000
    structural_head_chars: int = 60
    summary_output_tokens: int = 4_096
    timeout: float | None = 120.0

    def __post_init__(self) -> None:
        for name in (
            "trigger_pct",
            "emergency_pct",
            "recommend_pct",
            "keep_ratio",
            "min_prompt_ratio",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"SummarizerConfig.{name} must be within [0, 1], got {value!r}")
        for name in (
            "keep_min_tokens",
            "keep_max_tokens",
            "keep_min_messages",
            "protect_first_n",
            "protect_last_n",
            "min_prompt_budget",
            "max_message_chars",
            "structural_head_chars",
            "summary_output_tokens",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"SummarizerConfig.{name} must be a non-negative int, got {value!r}"
                )
        if self.keep_min_tokens > self.keep_max_tokens:
            raise ValueError(
                f"SummarizerConfig.keep_min_tokens ({self.keep_min_tokens}) exceeds "
                f"keep_max_tokens ({self.keep_max_tokens})"
            )
        if not self.recommend_pct <= self.trigger_pct <= self.emergency_pct:
            raise ValueError(
                "SummarizerConfig thresholds must satisfy recommend_pct <= trigger_pct <= emergency_pct, "
                f"got {self.recommend_pct}, {self.trigger_pct}, {self.emergency_pct}"
            )
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(
                f"SummarizerConfig.timeout must be positive or None, got {self.timeout!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SummarizerConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d or {}) - known
        if unknown:
            raise ValueError(f"unknown SummarizerConfig field(s): {', '.join(sorted(unknown))}")
        return cls(**(d or {}))


def keep_budget(
    context_window: int, config: SummarizerConfig | None = None
) -> tuple[int, int, int]:
    """Steps 1-2 of §4.2: ``(desired_keep, max_safe_keep, effective_keep)`` for a window."""
    cfg = config or SummarizerConfig()
    if context_window <= 0:
        raise ValueError(f"context_window must be positive, got {context_window!r}")
    desired = int(
        min(max(context_window * cfg.keep_ratio, cfg.keep_min_tokens), cfg.keep_max_tokens)
    )
    min_prompt = min(cfg.min_prompt_budget, context_window * cfg.min_prompt_ratio)
    max_safe = max(0, int(context_window - min_prompt))
    return desired, max_safe, min(desired, max_safe)


# --------------------------------------------------------------------------- facts


def is_summary_message(msg: dict) -> bool:
    """A compaction summary node (ours or a recorded one) as a message dict."""
    if msg.get("type") == "compactionSummary":
        return True
    extra = msg.get("extra")
    return isinstance(extra, dict) and extra.get("compaction") is True


# (tokens, has_text_block, is_user_request, call ids, result ids)
Facts = tuple[int, bool, bool, tuple[str, ...], tuple[str, ...]]


def _default_estimate(msg: dict) -> int:
    from .tokens import estimate_message_tokens

    return estimate_message_tokens(msg)


def _compute_facts(msg: dict, estimate: Estimate) -> Facts:
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


def find_cut_index(
    messages: Sequence[dict],
    context_window: int,
    config: SummarizerConfig | None = None,
    keep_recent_tokens: int | None = None,
    estimate: Estimate | None = None,
    *,
    max_tail_tokens: int | None = None,
    facts: MessageFacts | None = None,
) -> CutPoint:
    """Where to cut ``messages`` (§4.2): ``messages[:index]`` minus the head is folded.

    ``estimate(msg) -> int`` counts tokens (default ``tokens.estimate_message_tokens``);
    ``facts`` is a warm :class:`MessageFacts` cache (it brings its own estimate).
    ``keep_recent_tokens`` overrides steps 1-2 (§4.3); ``max_tail_tokens`` caps the
    kept tail (the engine passes a share of the input budget). See the module
    docstring for the invariants. Never raises on odd histories; an impossible cut
    is ``ok=False`` with a ``reason``.
    """
    cfg = config or SummarizerConfig()
    if keep_recent_tokens is not None and keep_recent_tokens < 0:
        raise ValueError(f"keep_recent_tokens must be >= 0, got {keep_recent_tokens!r}")
    if max_tail_tokens is not None and max_tail_tokens < 0:
        raise ValueError(f"max_tail_tokens must be >= 0, got {max_tail_tokens!r}")
    desired, max_safe, effective = keep_budget(context_window, cfg)
    steps: list[str] = []
    if keep_recent_tokens is not None:
        effective = ceiling = int(keep_recent_tokens)
        steps.append(f"1-2:override keep_recent_tokens={effective}")
    else:
        steps.append(f"1:desired={desired}")
        steps.append(f"2:max_safe={max_safe} effective={effective}")
        ceiling = max_safe
        if max_tail_tokens is not None:
            ceiling = min(ceiling, max_tail_tokens)
            if effective > max_tail_tokens:
                effective = max_tail_tokens
                steps.append(f"2:capped by max_tail_tokens={max_tail_tokens}")

    if facts is None:
        facts = MessageFacts(estimate)
    table = facts.table(messages)
    n = len(table)

    def result(
        index: int, ok: bool, reason: str | None, head_end: int = 0, pinned: tuple[int, ...] = ()
    ) -> CutPoint:
        return CutPoint(
            pinned=pinned,
            index=index,
            desired_keep=desired,
            max_safe_keep=max_safe,
            effective_keep=effective,
            tail_tokens=(table.tail_tokens(index) + sum(table.tokens_at(i) for i in pinned))
            if n
            else 0,
            tail_text_messages=table.tail_text(index) if n else 0,
            protected_head=head_end,
            steps=steps,
            ok=ok,
            reason=reason,
        )

    if n == 0:
        return result(0, False, "empty history: nothing to fold")

    forbid, users = table.forbid, table.users
    tail_tokens, tail_text = table.tail_tokens, table.tail_text
    # step 5 first, because every later step needs the head: protect_first_n,
    # extended to the first boundary that keeps a tool group whole
    head_end = min(cfg.protect_first_n, n)
    while head_end < n and forbid[head_end]:
        head_end += 1
    if head_end > min(cfg.protect_first_n, n):
        steps.append(f"5:head extended to {head_end} to keep a tool group whole")
    last_user = users[-1] if users else None

    # step 3: the last index in [head_end, n) where the gates hold (suffix sums are
    # monotone, so a bisection finds it). Both gates first; when the text gate cannot
    # be met within the ceiling (an autonomous run of tool calls has no text), the
    # token gate alone decides, so that such a run can still be compacted.
    def last_meeting(min_text: int) -> int | None:
        lo, hi = head_end, n  # bisect for the first index where the gates fail
        while lo < hi:
            mid = (lo + hi) // 2
            if tail_tokens(mid) >= effective and tail_text(mid) >= min_text:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1 if lo > head_end else None

    token_gate = last_meeting(0)
    if token_gate is None:
        steps.append("3:gates never met: everything after the head fits the keep budget")
        return result(
            head_end,
            False,
            f"nothing to fold: the {n - head_end} message(s) after the protected head fit the "
            f"keep budget ({tail_tokens(head_end)} < {effective} tokens)",
            head_end,
        )
    gate = last_meeting(cfg.keep_min_messages)
    if gate is not None and (gate == token_gate or tail_tokens(gate) <= ceiling):
        cut = gate
        steps.append(f"3:gates met at {cut} (tokens={tail_tokens(cut)}, text={tail_text(cut)})")
    else:
        cut = token_gate
        steps.append(
            f"3:text gate relaxed ({cfg.keep_min_messages} text messages do not fit the ceiling "
            f"{ceiling}); token gate met at {cut} (tokens={tail_tokens(cut)})"
        )

    # step 4: protect_last_n floor, bounded by the token ceiling
    floor = max(0, n - cfg.protect_last_n)
    if tail_tokens(floor) > ceiling:
        lo, hi = floor, n  # first index whose suffix fits the ceiling
        while lo < hi:
            mid = (lo + hi) // 2
            if tail_tokens(mid) > ceiling:
                lo = mid + 1
            else:
                hi = mid
        steps.append(f"4:protect_last_n floor {floor} moved to {lo}: tail over ceiling {ceiling}")
        floor = lo
    if cut > floor:
        steps.append(f"4:cut {cut} -> {floor} (protect_last_n)")
        cut = floor
    if cut < head_end:
        steps.append(f"5:cut {cut} -> {head_end} (protected head)")
        cut = head_end

    # step 6: snap. The tail should start with a user request (spec), but the cut never
    # moves past the floor or the latest user request (SPEC-NOTES defect), and a backward
    # snap that would blow the tail past the ceiling is a last resort, not the default.
    if last_user is not None and last_user >= head_end:
        upper = min(max(floor, head_end), last_user)
    else:
        upper = min(max(floor, head_end), n - 1)
    limit = max(ceiling, effective)
    chosen: int | None = None
    # (a) forward: the first user request in [cut, upper]
    for b in users[bisect.bisect_left(users, cut) : bisect.bisect_right(users, upper)]:
        if not forbid[b]:
            chosen = b
            if b != cut:
                steps.append(f"6:snapped forward {cut} -> {b}")
            break
    backward_user: int | None = None
    if chosen is None:
        hi_user = bisect.bisect_right(users, min(cut - 1, upper))
        lo_user = bisect.bisect_right(users, head_end)
        backward_user = next((b for b in reversed(users[lo_user:hi_user]) if not forbid[b]), None)
        # (b) backward: the nearest earlier user request, if the tail still fits the ceiling
        if backward_user is not None and tail_tokens(backward_user) <= limit:
            chosen = backward_user
            steps.append(
                f"6:snapped backward {cut} -> {chosen} (forward would cross the floor or the latest user request)"
            )
    if last_user is not None and (chosen is None or chosen == backward_user):
        # the gates cut past the latest request: snap back to it (b) only if that
        # still folds at least half of what pinning it would
        pin = _pin_latest_request(table, head_end, cut, floor, last_user, chosen)
        if pin is not None:
            pin_cut, folded_back, folded_pinned = pin
            steps.append(
                f"6:latest user request {last_user} pinned after the summary; cut at {pin_cut} "
                f"(snapping back would fold {folded_back} tokens, pinning folds {folded_pinned})"
            )
            return result(pin_cut, True, None, head_end, (last_user,))
    if chosen is None:
        # (c) no user request fits: the nearest boundary that keeps tool groups whole,
        # forward first (a smaller tail), then backward within the ceiling
        start = min(cut, upper)
        found = next((b for b in range(start, upper + 1) if not forbid[b]), None)
        if found is None or found <= head_end:
            found = None
            for b in range(start - 1, head_end, -1):
                if tail_tokens(b) > limit:
                    break
                if not forbid[b]:
                    found = b
                    break
        if found is not None and found > head_end:
            chosen = found
            steps.append(f"6:no user request fits; cut at tool-group boundary {chosen}")
    if chosen is None and backward_user is not None:
        # (d) last resort: the earlier user request even though the tail exceeds the ceiling
        chosen = backward_user
        steps.append(f"6:snapped backward {cut} -> {chosen}; tail {tail_tokens(chosen)} exceeds ceiling {limit}")
    if chosen is None or chosen <= head_end:
        reason = (
            "nothing can be folded: the protected head, the latest user request and the "
            f"kept tail cover the whole history ({n} messages, head {head_end})"
        )
        return result(head_end, False, reason, head_end)
    return result(chosen, True, None, head_end)


def _pin_latest_request(
    table: Any, head_end: int, cut: int, floor: int, last_user: int, snapped: int | None
) -> tuple[int, int, int] | None:
    """``(cut, tokens folded by snapping back, tokens folded by pinning)`` when pinning wins.

    ``snapped`` is the backward snap of step 6 (b), or ``None`` when it was refused
    (its tail would exceed the ceiling).

    Pinning the latest request ``u`` means folding ``[head_end, pin_cut)`` minus ``u``
    and keeping ``u`` verbatim after the summary. It needs ``u`` to stand alone (no
    tool exchange runs across it) and a tool-group boundary after it near the gates'
    cut: forward up to the floor, else backward down to ``u + 2``.
    """
    forbid, prefix = table.forbid, table.prefix_tokens
    n = len(table)
    if not head_end < last_user < cut or forbid[last_user] or forbid[last_user + 1]:
        return None
    bound = max(floor, last_user + 2)
    pin_cut = next((b for b in range(cut, min(bound, n - 1) + 1) if not forbid[b]), None)
    if pin_cut is None:
        pin_cut = next((b for b in range(cut - 1, last_user + 1, -1) if not forbid[b]), None)
    if pin_cut is None:
        return None
    folded_back = prefix[snapped] - prefix[head_end] if snapped is not None else 0
    folded_pinned = prefix[pin_cut] - prefix[head_end] - table.tokens_at(last_user)
    if folded_pinned <= 0 or 2 * folded_back >= folded_pinned:
        return None
    return pin_cut, folded_back, folded_pinned


# --------------------------------------------------------------------------- rendering


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def _call_summaries(msg: dict) -> list[str]:
    out = []
    for tc in msg.get("tool_calls") or ():
        if isinstance(tc, dict):
            fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
            name = tc.get("name") or fn.get("name") or "?"
            args = tc.get("arguments", fn.get("arguments"))
            out.append(f"{name}({_args_text(args)})")
    for b in _blocks(msg):
        if b.get("type") == "tool_use":
            out.append(f"{b.get('name') or '?'}({_args_text(b.get('input'))})")
    return out


def _args_text(args: Any) -> str:
    from opctx.dag.messages import as_text

    return as_text(args)


def _blocks(msg: dict) -> list[dict]:
    extra = msg.get("extra")
    found = extra.get("blocks") if isinstance(extra, dict) else None
    return [b for b in found if isinstance(b, dict)] if isinstance(found, list) else []


def _label(msg: dict) -> str:
    if is_summary_message(msg):
        return "summary"
    if is_tool_result(msg):
        failed = bool(msg.get("is_error")) or any(
            b.get("type") == "tool_result" and b.get("is_error") for b in _blocks(msg)
        )
        label = f"tool {msg.get('name') or ''}".strip()
        return f"{label} error" if failed else label
    return str(msg.get("role") or "?")


def _content_text(msg: dict) -> str:
    """Text of a message without its tool-call lines (those are listed separately)."""
    has_calls = bool(msg.get("tool_calls")) or any(
        b.get("type") == "tool_use" for b in _blocks(msg)
    )
    if not has_calls:
        return message_text(msg)
    content = msg.get("content")
    parts = [content] if isinstance(content, str) and content else []
    for b in _blocks(msg):
        if b.get("type") == "text" and b.get("text") and b.get("text") != content:
            parts.append(str(b["text"]))
    return "\n".join(parts)


def structural_line(msg: dict, head_chars: int = 60) -> str:
    """One line per message: ``[role] first N characters`` (§4.5), tool calls included."""
    text = _one_line(_content_text(msg), head_chars)
    calls = _call_summaries(msg)
    parts = [f"[{_label(msg)}]"]
    if text:
        parts.append(text)
    for c in calls:
        parts.append("-> " + _one_line(c, head_chars))
    if len(parts) == 1:
        parts.append("(empty)")
    return " ".join(parts)


def structural_summary(
    messages: Sequence[dict],
    previous_summary: str | None = None,
    *,
    head_chars: int = 60,
    error: str | None = None,
    max_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> str:
    """The deterministic summary: previous summary on top, then every folded message.

    ``max_tokens`` bounds it (the engine passes ``summary_output_tokens``, the budget an
    LLM summary gets). Without a bound, chained structural summaries grow with every
    compaction (each one restates the previous) until a compaction no longer shrinks the
    input and auto-compaction stops. Over the bound, the previous summary is clipped to a
    third of it (its start and end stay), and the *oldest* folded messages are collapsed
    into one line that counts them by role and names the first and last id: nothing is
    dropped silently, and the originals stay in the store under those ids.
    """
    count = count_tokens or _default_text_tokens
    header = f"Structural summary of {len(messages)} folded message(s)"
    if error:
        header += f" (LLM summary unavailable: {_one_line(error, 200)})"
    header += ":"
    listing = [
        "[summary] (previous summary, kept above)"
        if previous_summary and is_summary_message(msg)
        else structural_line(msg, head_chars)
        for msg in messages
    ]
    previous = previous_summary.strip() if previous_summary else ""

    def assemble(prev: str, collapsed: str | None, lines: Sequence[str]) -> str:
        out = ["Earlier summary:", prev, ""] if prev else []
        out.append(header)
        if collapsed:
            out.append(collapsed)
        out.extend(lines)
        return "\n".join(out)

    text = assemble(previous, None, listing)
    if max_tokens is None or count(text) <= max_tokens:
        return text

    if previous:
        prev_budget = max_tokens // 3
        if count(previous) > prev_budget:
            # characters per token of this text, so CJK and ASCII clip alike
            ratio = max(1.0, len(previous) / max(1, count(previous)))
            previous = _clip(previous, int(prev_budget * ratio))
    room = max_tokens - count(assemble(previous, "[... 0000 earlier ...]", [])) - 40
    kept: list[str] = []
    used = 0
    for line in reversed(listing):
        cost = count(line) + 1
        if used + cost > room:
            break
        kept.append(line)
        used += cost
    kept.reverse()
    omitted = messages[: len(messages) - len(kept)]
    if not omitted:
        return assemble(previous, None, kept)
    roles: dict[str, int] = {}
    for msg in omitted:
        label = _label(msg).split(" ")[0]
        roles[label] = roles.get(label, 0) + 1
    by_role = ", ".join(f"{n} {role}" for role, n in roles.items())
    first, last = omitted[0].get("id"), omitted[-1].get("id")
    span = f" (ids {first} .. {last})" if first and last else ""
    collapsed = (
        f"[{len(omitted)} earlier folded message(s) not listed to stay within "
        f"{max_tokens} tokens: {by_role}{span}; the originals are kept in the store]"
    )
    return assemble(previous, collapsed, kept)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters omitted ...]\n{text[-tail:]}"


def _full_line(msg: dict, max_chars: int) -> str:
    label = _label(msg)
    body = _clip(_content_text(msg), max_chars)
    calls = _call_summaries(msg)
    lines = [f"[{label}] {body}".rstrip()]
    lines.extend("-> call " + _clip(c, max_chars) for c in calls)
    return "\n".join(lines)


def render_transcript(
    messages: Sequence[dict],
    *,
    max_message_chars: int = 4_000,
    max_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    skip_summaries: bool = False,
    head_chars: int = 60,
) -> str:
    """The folded messages as prompt text; oldest ones fall back to one-liners to fit ``max_tokens``."""
    count = count_tokens or _default_text_tokens
    rendered: list[str] = []
    brief: list[str] = []
    for msg in messages:
        if skip_summaries and is_summary_message(msg):
            rendered.append("[summary] (previous summary, given separately)")
            brief.append(rendered[-1])
            continue
        rendered.append(_full_line(msg, max_message_chars))
        brief.append(structural_line(msg, head_chars))
    if max_tokens is None:
        return "\n\n".join(rendered)
    costs = [count(r) + 2 for r in rendered]
    brief_costs = [count(b) + 1 for b in brief]
    total = sum(costs)
    shortened = 0
    while total > max_tokens and shortened < len(rendered):
        total += brief_costs[shortened] - costs[shortened]
        shortened += 1
    if total > max_tokens:
        raise PromptTooLarge(
            f"the folded transcript needs about {total} tokens even as one-liners; "
            f"the summary call allows {max_tokens}"
        )
    if not shortened:
        return "\n\n".join(rendered)
    note = f"(The {shortened} oldest message(s) are listed in brief to fit the summary call.)"
    return "\n".join([note, *brief[:shortened]]) + "\n\n" + "\n\n".join(rendered[shortened:])


class PromptTooLarge(Exception):
    """The folded messages cannot fit the summary call, even in brief."""


def _default_text_tokens(text: str) -> int:
    from .tokens import estimate_text_tokens

    return estimate_text_tokens(text)


# --------------------------------------------------------------------------- summariser


ProviderCallable = Callable[..., Any]


class Summarizer:
    """LLM summary with a structural fallback (§4.4-§4.6).

    ``provider_call(messages, model, system, tools) -> Reply | str`` (the
    ``opctx.dag.providers.ProviderCall`` shape). ``None`` means: always
    structural (``fell_back_to_structural=True``, ``error`` says why).
    """

    def __init__(
        self,
        provider_call: ProviderCallable | None = None,
        model: str | None = None,
        config: SummarizerConfig | None = None,
        *,
        count_tokens: Callable[[str], int] | None = None,
    ):
        self.provider_call = provider_call
        self.model = model
        self.config = config or SummarizerConfig()
        self.count_tokens = count_tokens or _default_text_tokens

    def build_prompt(
        self,
        messages: Sequence[dict],
        previous_summary: str | None = None,
        *,
        max_prompt_tokens: int | None = None,
    ) -> str:
        """The FRESH or UPDATE prompt for ``messages`` (raises ``PromptTooLarge``)."""
        budget = None
        if max_prompt_tokens is not None:
            fixed = self.count_tokens(prompts.SYSTEM) + self.count_tokens(
                prompts.render_update("", previous_summary)
                if previous_summary
                else prompts.render_fresh("")
            )
            budget = max_prompt_tokens - fixed
            if budget <= 0:
                raise PromptTooLarge(
                    f"the summary prompt template alone needs {fixed} tokens; the call allows {max_prompt_tokens}"
                )
        transcript = render_transcript(
            messages,
            max_message_chars=self.config.max_message_chars,
            max_tokens=budget,
            count_tokens=self.count_tokens,
            skip_summaries=bool(previous_summary),
            head_chars=self.config.structural_head_chars,
        )
        if previous_summary:
            return prompts.render_update(transcript, previous_summary.strip())
        return prompts.render_fresh(transcript)

    def structural(
        self,
        messages: Sequence[dict],
        previous_summary: str | None = None,
        error: str | None = None,
    ) -> str:
        return structural_summary(
            messages,
            previous_summary,
            head_chars=self.config.structural_head_chars,
            error=error,
            max_tokens=self.config.summary_output_tokens or None,
            count_tokens=self.count_tokens,
        )

    def summarise(
        self,
        messages_to_fold: Sequence[dict],
        previous_summary: str | None = None,
        cancel_event: threading.Event | None = None,
        timeout: float | None = None,
        *,
        max_prompt_tokens: int | None = None,
        force_structural: str | None = None,
        estimate: Estimate | None = None,
    ) -> SummaryResult:
        """Summarise the folded messages. Never raises for provider trouble.

        ``force_structural``: a reason to skip the LLM (the engine's emergency path);
        it becomes ``error``. ``timeout`` defaults to ``config.timeout``.
        """
        messages = list(messages_to_fold)
        est = estimate or _default_estimate
        summarised_tokens = sum(int(est(m)) for m in messages)
        prompt = ""
        error: str | None = None
        text: str | None = None
        try:
            if force_structural:
                raise _Forced(force_structural)
            if self.provider_call is None:
                raise _Forced("NoProvider: no summariser provider configured")
            prompt = self.build_prompt(
                messages, previous_summary, max_prompt_tokens=max_prompt_tokens
            )
            text = self._call(
                prompt, cancel_event, self.config.timeout if timeout is None else timeout
            )
            if not text or not text.strip():
                raise ValueError("the provider returned an empty summary")
            text = text.strip()
        except _Forced as exc:
            error = str(exc)
        except Exception as exc:  # any provider failure becomes the structural fallback (§4.5)
            error = f"{type(exc).__name__}: {exc}"
        if error is not None:
            return SummaryResult(
                text=self.structural(messages, previous_summary, error),
                fell_back_to_structural=True,
                error=error,
                used_previous_summary=bool(previous_summary),
                prompt=prompt,
                summarised_count=len(messages),
                summarised_tokens=summarised_tokens,
            )
        return SummaryResult(
            text=text or "",
            fell_back_to_structural=False,
            error=None,
            used_previous_summary=bool(previous_summary),
            prompt=prompt,
            summarised_count=len(messages),
            summarised_tokens=summarised_tokens,
        )

    # -- the call
    def _invoke(self, prompt: str) -> str:
        reply = self.provider_call(
            [{"role": "user", "content": prompt}], self.model or "", prompts.SYSTEM, None
        )
        if isinstance(reply, str):
            return reply
        text = getattr(reply, "text", None)
        if text is None and isinstance(reply, dict):
            text = reply.get("text") or reply.get("content")
        if text is None:
            raise TypeError(
                f"the provider returned a {type(reply).__name__}, expected a Reply or str"
            )
        return str(text)

    def _call(
        self, prompt: str, cancel_event: threading.Event | None, timeout: float | None
    ) -> str:
        if cancel_event is not None and cancel_event.is_set():
            raise SummaryCancelled("cancelled before the summary call")
        if cancel_event is None and timeout is None:
            return self._invoke(prompt)
        box: dict[str, Any] = {}
        done = threading.Event()

        def worker() -> None:
            try:
                box["text"] = self._invoke(prompt)
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=worker, name="opctx-summary", daemon=True).start()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done.is_set():
            if cancel_event is not None and cancel_event.is_set():
                raise SummaryCancelled("cancelled during the summary call")
            wait = 0.05
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SummaryTimeout(f"no summary within {timeout:g}s")
                wait = min(wait, remaining)
            done.wait(wait)
        if cancel_event is not None and cancel_event.is_set():
            raise SummaryCancelled("cancelled after the summary call returned")
        if "error" in box:
            raise box["error"]
        return box["text"]


class _Forced(Exception):
    """Internal: skip the LLM on purpose."""
