"""Observation masking and tool-use clearing: agers that replace old observations by a placeholder.

An *observation* is what the environment answered the agent: a tool result, and for
agents that send environment output as a user message (SWE-agent, mini-swe-agent,
OpenHands without function calling) that user message, marked ``is_observation`` at
import by the format's own markers (``opctx.importers.observations``). Demonstrations
(``is_demo``) are never observations; ``drop_demos`` leaves them out of the request.

:class:`ObservationMasker` ("The Complexity Trap", Lindenbauer et al., 2025: masking is
as good as LLM summarisation at a fraction of the cost; M = 10 performed best) keeps the
last ``keep_last`` observations verbatim and masks the older ones, in every request:
``aging.kind = "masking"`` in a ``CompactionPolicy``. :class:`ToolUseClearer` is the
context-editing rule of Anthropic's ``clear_tool_uses_20250919`` and LangChain's
``ClearToolUsesEdit``: only once the history passes ``trigger_tokens``, clear old
observations (oldest first, the last ``keep_last`` kept, ``exclude_tools`` never), stop
once ``clear_at_least`` tokens are cleared, clear nothing when everything clearable
frees less (Anthropic's rule; LangChain clears what it can), and with ``clear_inputs``
empty the cleared calls' parameters: ``aging.kind = "clear-tool-uses"``.

Both are engine agers (``age(history, references) -> (aged, AgingReport)``, like
``TurnAger``). The placeholder is a template with ``{tokens}`` (the estimate of what it
replaced) and ``{lines}`` (its lines of text); ``MASK_PLACEHOLDER`` is opctx's own
(assumed wording); the strategy presets name their source's. ``observations_seen`` and
``acted`` say whether a session gave the strategy anything to act on (the replay
reports a session where it found nothing).

>>> m = ObservationMasker(1, placeholder="Old environment output: ({lines} lines omitted)")
>>> hist = [{"role": "user", "content": "task"},
...         {"role": "user", "content": "a\\nb", "is_observation": True, "id": "o1"},
...         {"role": "user", "content": "c", "is_observation": True, "id": "o2"}]
>>> aged, report = m.age(hist)
>>> aged[1]["content"], aged[2]["content"], report.redacted
('Old environment output: (2 lines omitted)', 'c', 1)
"""

from __future__ import annotations

import copy
import operator
import threading
from collections.abc import Callable, Sequence
from itertools import compress
from typing import Any

from opctx.dag.messages import blocks, is_tool_result, message_text, tool_result_ids

from .tokens import estimate_message_tokens
from .types import AgingReport, ReferenceMap

__all__ = ["ObservationMasker", "ToolUseClearer", "MASK_PLACEHOLDER", "is_observation"]

MASK_PLACEHOLDER = "[Old tool result omitted to save context ({tokens} tokens)]"


def is_observation(msg: dict) -> bool:
    """A tool result, or a user message marked ``is_observation``; never a demonstration."""
    if msg.get("is_demo") is True:
        return False
    return is_tool_result(msg) or (msg.get("role") == "user" and msg.get("is_observation") is True)


class _Placeholders:
    """What both agers share: the estimate, the placeholder, masked copies cached per id."""

    def __init__(
        self, keep_last: int, estimate: Callable[[dict], int] | None, placeholder: str | None, drop_demos: bool
    ) -> None:
        if not isinstance(keep_last, int) or keep_last < 0:
            raise ValueError(f"keep_last must be an int >= 0, got {keep_last!r}")
        self.keep_last = keep_last
        self._estimate = estimate
        self.placeholder = placeholder or MASK_PLACEHOLDER
        self.drop_demos = bool(drop_demos)
        self._masked: dict[str, tuple[dict, int]] = {}
        self.observations_seen = 0
        self.acted = False

    def _tokens(self, msg: dict) -> int:
        if self._estimate is not None:
            return int(self._estimate(msg))
        return estimate_message_tokens(msg)

    def _mask(self, msg: dict) -> tuple[dict, int]:
        """A copy of ``msg`` whose observation text is the placeholder, and the tokens freed;
        the same copy for the same id every time (prefix-cache comparisons rely on it)."""
        key = msg.get("id")
        hit = self._masked.get(key) if key else None
        if hit is not None:
            return hit
        before = self._tokens(msg)
        text = self.placeholder.format(tokens=before, lines=len(message_text(msg).splitlines()))
        masked = copy.copy(msg)
        if msg.get("role") == "tool" or not (is_tool_result(msg) or isinstance(msg.get("content"), list)):
            masked["content"] = text  # a tool message, or a user observation's text
        extra = msg.get("extra")
        if isinstance(extra, dict) and isinstance(extra.get("blocks"), list):
            masked["extra"] = {**extra, "blocks": _masked_blocks(extra["blocks"], text, msg)}
        elif isinstance(msg.get("content"), list):
            masked["content"] = _masked_blocks(msg["content"], text, msg)
        masked["_masked"] = True
        freed = max(0, before - self._tokens(masked))
        result = (masked, freed)
        if key:
            self._masked[key] = result
        return result

    def _without_demos(self, aged: list[dict]) -> list[dict]:
        if not self.drop_demos:
            return aged
        return [m for m in aged if m.get("is_demo") is not True]


def _masked_blocks(parts: list, text: str, msg: dict) -> list:
    """Tool-result blocks carry the placeholder; a user observation's text blocks become one."""
    if is_tool_result(msg):
        return [
            {**b, "content": text, "_redacted": True} if isinstance(b, dict) and b.get("type") == "tool_result" else b
            for b in parts
        ]
    kept = [b for b in parts if not (isinstance(b, dict) and b.get("type") == "text")]
    return [{"type": "text", "text": text}, *kept]


def _replaced(history: Sequence[dict], seen: Sequence[dict]) -> list[int] | None:
    """Positions where ``history`` holds another object than the message an ager took in
    there last time (``seen``); None when ``history`` is shorter, so not an extension.

    An aging step before the ager (thinking clearing) hands a copy where it changed a
    message, and the very same objects elsewhere: one identity pass, at C speed, finds
    them, so an ager need not take the whole history in again on every request."""
    if len(history) < len(seen):
        return None
    return list(compress(range(len(seen)), map(operator.is_not, history, seen)))


class ObservationMasker(_Placeholders):
    """An ager: keep the last ``keep_last`` observations, mask the older ones (module docstring).

    Masked copies are cached per message id so that a message masked once is the same
    object in every later request (prefix-cache comparisons and the engine's
    per-message caches rely on it). Work per call is proportional to the messages
    appended since the last call (the positions of observations are kept), plus one
    list copy.
    """

    def __init__(
        self,
        keep_last: int = 10,
        *,
        estimate: Callable[[dict], int] | None = None,
        placeholder: str | None = None,
        drop_demos: bool = False,
    ):
        super().__init__(keep_last, estimate, placeholder, drop_demos)
        self._positions: list[int] = []
        self._seen: list[dict] = []  # the messages taken in, by position
        self._aged: list[dict] = []
        self._n_masked = 0
        self._freed = 0
        self._ids: list[Any] = []
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> ObservationMasker:
        # the same settings, nothing seen yet (a lock cannot be copied, nor need be)
        return ObservationMasker(self.keep_last, estimate=self._estimate, placeholder=self.placeholder,
                                 drop_demos=self.drop_demos)

    def age(self, history: Sequence[dict], references: ReferenceMap | None = None) -> tuple[list[dict], AgingReport]:
        with self._lock:
            n = len(history)
            seen = self._seen
            changed = _replaced(history, seen)
            if changed and any(is_observation(history[i]) or is_observation(seen[i]) for i in changed):
                changed = None  # an observation changed: its position or its mask may differ
            if changed is None:  # not an extension of the history seen last time: start over
                self._positions, self._seen, self._aged = [], [], []
                self._n_masked, self._freed, self._ids = 0, 0, []
                seen = self._seen
            for i in changed or ():  # another message, not an observation: sent as it now is
                seen[i] = self._aged[i] = history[i]
            scanned = len(seen)
            seen.extend(history[scanned:n])
            self._aged.extend(history[scanned:n])
            for i in range(scanned, n):
                if is_observation(history[i]):
                    self._positions.append(i)
            self.observations_seen = max(self.observations_seen, len(self._positions))
            # positions that fell out of the window since the last call get masked, once
            n_old = max(0, len(self._positions) - self.keep_last)
            for i in self._positions[self._n_masked:n_old]:
                masked, freed = self._mask(history[i])
                self._aged[i] = masked
                self._freed += freed
                self._ids.append(history[i].get("id"))
            self._n_masked = max(self._n_masked, n_old)
            self.acted = self.acted or self._n_masked > 0
            report = AgingReport(redacted=self._n_masked, tokens_freed=self._freed, redacted_ids=list(self._ids))
            return self._without_demos(list(self._aged)), report


class ToolUseClearer(_Placeholders):
    """An ager: Anthropic's / LangChain's tool-use clearing past a token trigger (module docstring).

    Each request is edited afresh from the originals, as both APIs do: what is cleared
    depends only on the history given. What a history is made of (the tool name of each
    call, the positions of its observations, its total size) is kept from one call to the
    next while the history only grows, with any message another step replaced taken in
    again (``_replaced``), so a request costs the messages appended since, one identity
    pass and one step per old observation, not a pass over every message.
    """

    def __init__(
        self,
        keep_last: int = 3,
        *,
        trigger_tokens: int | None = 100_000,
        clear_at_least: int = 0,
        exclude_tools: Sequence[str] = (),
        clear_inputs: bool = False,
        estimate: Callable[[dict], int] | None = None,
        placeholder: str | None = None,
        drop_demos: bool = False,
    ):
        super().__init__(keep_last, estimate, placeholder, drop_demos)
        self.trigger_tokens = trigger_tokens
        self.clear_at_least = int(clear_at_least)
        self.exclude_tools = frozenset(exclude_tools)
        self.clear_inputs = bool(clear_inputs)
        self._sizes: dict[Any, tuple[dict, int]] = {}
        self._lock = threading.Lock()
        self._start_over()

    def _start_over(self) -> None:
        self._names: dict[str, str] = {}  # tool name per call id
        self._positions: list[int] = []  # of the observations
        self._calls: list[int] = []  # of the assistant messages that make tool calls
        self._total = 0
        self._seen: list[dict] = []  # the messages taken in, by position
        self._at: list[int] = []  # and their sizes

    def __deepcopy__(self, memo: dict) -> ToolUseClearer:
        return ToolUseClearer(
            self.keep_last, trigger_tokens=self.trigger_tokens, clear_at_least=self.clear_at_least,
            exclude_tools=tuple(self.exclude_tools), clear_inputs=self.clear_inputs, estimate=self._estimate,
            placeholder=self.placeholder, drop_demos=self.drop_demos,
        )

    def _size(self, msg: dict) -> int:
        key = msg.get("id") or id(msg)
        hit = self._sizes.get(key)
        if hit is None or hit[0] is not msg:
            hit = self._sizes[key] = (msg, self._tokens(msg))
        return hit[1]

    def _scan(self, history: Sequence[dict]) -> None:
        """Take in the messages appended since the last call, and those another step
        replaced (all of them when the history is not an extension of the one seen last,
        or a replaced message is or was an observation or names other calls)."""
        seen = self._seen
        changed = _replaced(history, seen)
        for i in changed or ():
            old, new = seen[i], history[i]
            if is_observation(old) or is_observation(new) or _call_names_of(old) != _call_names_of(new):
                changed = None
                break
            size = self._size(new)
            self._total += size - self._at[i]
            seen[i], self._at[i] = new, size
        if changed is None:
            self._start_over()
            seen = self._seen
        for i in range(len(seen), len(history)):
            msg = history[i]
            if msg.get("role") == "assistant" and _add_call_names(msg, self._names):
                self._calls.append(i)
            if is_observation(msg):
                self._positions.append(i)
            size = self._size(msg)
            self._total += size
            seen.append(msg)
            self._at.append(size)

    def age(self, history: Sequence[dict], references: ReferenceMap | None = None) -> tuple[list[dict], AgingReport]:
        with self._lock:
            self._scan(history)
            aged = list(history)
            positions = self._positions
            self.observations_seen = max(self.observations_seen, len(positions))
            if self.trigger_tokens is not None and self._total <= self.trigger_tokens:
                return self._without_demos(aged), AgingReport()
            old = positions[: max(0, len(positions) - self.keep_last)]
            if self.exclude_tools:
                old = [i for i in old if not (set(_result_names(history[i], self._names)) & self.exclude_tools)]
            plan, freed = [], 0
            for i in old:
                masked, saved = self._mask(history[i])
                plan.append((i, masked))
                freed += saved
                if self.clear_at_least and freed >= self.clear_at_least:
                    break
            if not plan or freed < self.clear_at_least:
                return self._without_demos(aged), AgingReport()
            for i, masked in plan:
                aged[i] = masked
            if self.clear_inputs:
                _clear_inputs(aged, {rid for i, _ in plan for rid in tool_result_ids(history[i])}, self._calls)
            self.acted = True
            report = AgingReport(redacted=len(plan), tokens_freed=freed,
                                 redacted_ids=[history[i].get("id") for i, _ in plan])
            return self._without_demos(aged), report


def _call_names_of(msg: dict) -> dict[str, str]:
    out: dict[str, str] = {}
    if msg.get("role") == "assistant":
        _add_call_names(msg, out)
    return out


def _add_call_names(msg: dict, out: dict[str, str]) -> bool:
    """Add the tool name of each call an assistant message makes to ``out``; whether it
    makes any."""
    found = False
    for tc in msg.get("tool_calls") or ():
        if isinstance(tc, dict) and tc.get("id"):
            out[tc["id"]] = str(tc.get("name") or (tc.get("function") or {}).get("name") or "")
            found = True
    for b in _blocks(msg):
        if b.get("type") == "tool_use" and b.get("id"):
            out[b["id"]] = str(b.get("name") or "")
            found = True
    return found


def _blocks(msg: dict) -> list[dict]:
    return [b for b in blocks(msg) if isinstance(b, dict)]


def _result_names(msg: dict, names: dict[str, str]) -> list[str]:
    found = [names.get(rid, "") for rid in tool_result_ids(msg)]
    if msg.get("role") == "tool" and msg.get("name"):
        found.append(str(msg["name"]))
    return found


def _clear_inputs(aged: list[dict], ids: set[str], callers: Sequence[int]) -> None:
    """Empty the parameters of the calls ``ids`` (``clear_inputs``), on copies; ``callers``:
    the positions of the messages that make tool calls."""
    for i in callers:
        msg = aged[i]
        calls = msg.get("tool_calls")
        hits = [tc for tc in calls or () if isinstance(tc, dict) and tc.get("id") in ids]
        block_hits = [b for b in _blocks(msg) if b.get("type") == "tool_use" and b.get("id") in ids]
        if not hits and not block_hits:
            continue
        new = copy.copy(msg)
        if hits:
            new["tool_calls"] = [{**tc, "arguments": "{}"} if tc in hits else tc for tc in calls]
        if block_hits:
            fresh = [{**b, "input": {}} if b in block_hits else b for b in _blocks(msg)]
            extra = msg.get("extra")
            if isinstance(extra, dict) and isinstance(extra.get("blocks"), list):
                new["extra"] = {**extra, "blocks": fresh}
            else:
                new["content"] = fresh
        aged[i] = new
