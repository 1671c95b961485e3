"""Thinking clearing: the thinking of old assistant turns left out of the request.

Anthropic's context editing strategy ``clear_thinking_20251015``
(https://platform.claude.com/docs/en/build-with-claude/context-editing, section
"Thinking block clearing"; beta ``context-management-2025-06-27``) clears the thinking
blocks of earlier assistant turns: ``keep: {type: "thinking_turns", value: N}`` keeps the
thinking of the last N assistant turns, ``keep: "all"`` keeps every block. Without the
strategy the API keeps "only the thinking blocks from the last assistant turn
(equivalent to ``keep: {type: "thinking_turns", value: 1}``)" on the models that drop
earlier thinking. The strategy may be combined with ``clear_tool_uses_20250919`` ("each
strategy can be configured independently and applied together"); opctx clears thinking
first, then runs the ager (the order the page lists them in; the server's order is assumed).

:class:`ThinkingClearer` does this on the request the engine builds, before the ager
(``aging.keep_thinking_turns`` of a ``CompactionPolicy``; ``None`` or ``"all"``: off):
an assistant message older than the last N turns gets a copy without its thinking
(``thinking`` and ``thinking`` / ``redacted_thinking`` blocks: what the estimate counts
as thinking, ``_cut_facts``); everything else (text, tool calls, results) is left as it
is, so no tool pair is touched. The store is never modified.

Turns are counted as :func:`opctx.context.anthropic_messages.thinking_retention` counts
them (``FactsTable.turn_starts``): a turn starts at a user request, so a tool loop is one
turn and the running turn is the last one. ``keep 1`` is then exactly what a model that
keeps only the last turn's thinking holds, as the documentation says of the default.
That a turn without thinking still counts as one of the N ("Number of most recent
assistant turns to keep thinking blocks for", the SDKs' ``BetaClearThinking20251015Edit``)
is read from the wording; the server's count is not published.

Savings are claimed only for thinking the model would hold: a model that keeps only the
last turn's thinking (``thinking_retention(model) == "last_turn"``: Claude Opus 4.1 and
earlier, Sonnet 4.5 and earlier, Haiku 4.5 and earlier) never holds the blocks cleared
here, so clearing them frees nothing (``AgingReport.tokens_freed`` 0) and does not count
as acting (``acted``). ``thinking_seen`` and ``acted`` let a replay say when a session
gave the strategy nothing to act on, as the other clearing agers do.

>>> c = ThinkingClearer(1)
>>> hist = [{"role": "user", "content": "a", "id": "u1"},
...         {"role": "assistant", "content": "x", "id": "a1",
...          "thinking": [{"type": "thinking", "thinking": "plan", "signature": "s"}]},
...         {"role": "user", "content": "b", "id": "u2"},
...         {"role": "assistant", "content": "y", "id": "a2",
...          "thinking": [{"type": "thinking", "thinking": "more", "signature": "t"}]}]
>>> aged, report = c.age(hist)
>>> "thinking" in aged[1], "thinking" in aged[3], report.thinking_cleared, c.acted
(False, True, 1, True)
"""

from __future__ import annotations

import dataclasses
import threading
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any

from ._cut_facts import FactsTable, MessageFacts, _without_thinking
from .tokens import estimate_message_tokens
from .types import AgingReport, ReferenceMap

__all__ = ["ThinkingClearer", "thinking_clearer_for", "joined"]

RETENTIONS = ("all", "last_turn")


def _marks_thinking(msg: dict) -> int:
    """1 for a message carrying thinking, else 0: with it as the "estimate", a
    ``FactsTable``'s ``prefix_thinking`` counts the messages with thinking before each
    position (no tokenizer pass: only where turns start and who thinks is needed)."""
    return 1 if _without_thinking(msg) is not None else 0


class ThinkingClearer:
    """Clear the thinking of assistant turns older than the last ``keep_turns`` (module docstring).

    ``age(history, references=None, *, retention="all")`` returns ``(aged, AgingReport)``
    like the engine's agers; ``retention`` is ``thinking_retention(model)`` of the model
    the request is for (what the model would hold of earlier thinking). A cleared copy is
    cached per message, the same object while its source is the same (or an equal) one,
    so prefix comparisons and the engine's per-message caches see it unchanged.
    """

    def __init__(self, keep_turns: int = 1, *, estimate: Callable[[dict], int] | None = None):
        if isinstance(keep_turns, bool) or not isinstance(keep_turns, int) or keep_turns < 1:
            raise ValueError(f"keep_turns must be a positive int, got {keep_turns!r}")
        self.keep_turns = keep_turns
        self._estimate = estimate
        self._facts = MessageFacts(_marks_thinking)
        self._table: FactsTable | None = None
        self._positions: list[int] = []  # assistant messages carrying thinking, in order
        self._scanned = 0  # rows of the table the positions cover
        self._copies: dict[Any, tuple[dict, dict, int]] = {}  # id -> (source, copy, tokens freed)
        self.thinking_seen = 0  # most messages with thinking one request held
        self.acted = False  # cleared thinking the model would have held
        self.cleared_dropped = False  # cleared only thinking the model drops anyway
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> ThinkingClearer:
        # the same settings, nothing seen yet (a lock cannot be copied, nor need be)
        return ThinkingClearer(self.keep_turns, estimate=self._estimate)

    def _tokens(self, msg: dict) -> int:
        return int(self._estimate(msg)) if self._estimate is not None else estimate_message_tokens(msg)

    def _cleared(self, msg: dict) -> tuple[dict, int]:
        """``msg`` without its thinking, and the tokens that frees (cached per id)."""
        key = msg.get("id")
        try:
            hit = self._copies.get(key) if key else None
        except TypeError:  # an unhashable id from a malformed transcript: not cached
            key, hit = None, None
        if hit is not None and (hit[0] is msg or hit[0] == msg):
            return hit[1], hit[2]
        copy = _without_thinking(msg) or dict(msg)
        copy["_thinking_cleared"] = True
        freed = max(0, self._tokens(msg) - self._tokens(copy))
        if key:
            self._copies[key] = (msg, copy, freed)
        return copy, freed

    def age(
        self, history: Sequence[dict], references: ReferenceMap | None = None, *, retention: str = "all"
    ) -> tuple[list[dict], AgingReport]:
        if retention not in RETENTIONS:
            raise ValueError(f"retention must be one of {', '.join(RETENTIONS)}, got {retention!r}")
        with self._lock:
            history = list(history)
            table = self._facts.table(history)
            if table is not self._table:  # not an extension of the last history: scan afresh
                self._table, self._positions, self._scanned = table, [], 0
            marks, positions = table.prefix_thinking, self._positions
            positions.extend(i for i in range(self._scanned, len(table)) if marks[i + 1] > marks[i])
            self._scanned = len(table)
            self.thinking_seen = max(self.thinking_seen, len(positions))
            starts = table.turn_starts
            keep_from = starts[-self.keep_turns] if len(starts) >= self.keep_turns else 0
            old = positions[: bisect_left(positions, keep_from)]
            if not old:
                return history, AgingReport()
            # thinking the model holds: all of it, or (last_turn) only the running turn's,
            # which starts at or after keep_from: nothing cleared here is held then
            held_from = table.turn_start if retention == "last_turn" else 0
            freed = 0
            for i in old:
                history[i], saved = self._cleared(history[i])
                if i >= held_from:
                    freed += saved
            if retention == "all":
                self.acted = True
            else:
                self.cleared_dropped = True
            return history, AgingReport(tokens_freed=freed, thinking_cleared=len(old))

    def idle_reason(self) -> str | None:
        """Why the clearer never acted on the session (None when it did): what a replay
        reports as ``strategy_idle``."""
        if self.acted:
            return None
        if not self.thinking_seen:
            return "no thinking (thinking or redacted_thinking blocks) in the session"
        if self.cleared_dropped:
            return ("cleared only thinking the model drops anyway (it keeps only the last turn's "
                    "thinking: anthropic_messages.thinking_retention), nothing saved")
        return f"{self.thinking_seen} message(s) with thinking, none before the last {self.keep_turns} turn(s) kept"


def thinking_clearer_for(policy: Any, estimate: Callable[[dict], int] | None = None) -> ThinkingClearer | None:
    """The clearer ``policy.aging.keep_thinking_turns`` asks for, or None (off)."""
    keep = policy.aging.keep_thinking_turns
    return None if keep is None else ThinkingClearer(keep, estimate=estimate)


def joined(cleared: AgingReport, report: AgingReport) -> AgingReport:
    """The ager's ``report`` with what thinking clearing did before it (``cleared``): its
    tokens added to ``tokens_freed``, its count as ``thinking_cleared``; ``redacted`` and
    ``redacted_ids`` stay the tool results'."""
    return dataclasses.replace(report, tokens_freed=report.tokens_freed + cleared.tokens_freed,
                               thinking_cleared=cleared.thinking_cleared)
