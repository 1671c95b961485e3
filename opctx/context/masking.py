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
import threading
from collections.abc import Callable, Sequence
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
        self._scanned = 0
        self._anchor: tuple[int, Any] | None = None  # (len, last message object) last seen
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
            anchor = self._anchor
            if anchor is None or anchor[0] > n or (anchor[0] and history[anchor[0] - 1] is not anchor[1]):
                # not an extension of the history seen last time: start over
                self._positions, self._scanned, self._aged = [], 0, []
                self._n_masked, self._freed, self._ids = 0, 0, []
            self._aged.extend(history[self._scanned:n])
            for i in range(self._scanned, n):
                if is_observation(history[i]):
                    self._positions.append(i)
            self._scanned = n
            self._anchor = (n, history[-1] if n else None)
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

    Stateless across requests (each request is edited afresh from the originals, as
    both APIs do); estimates are cached per message id, so a request costs one pass.
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

    def age(self, history: Sequence[dict], references: ReferenceMap | None = None) -> tuple[list[dict], AgingReport]:
        with self._lock:
            aged = list(history)
            names = _call_names(history)
            positions = [i for i, m in enumerate(history) if is_observation(m)]
            self.observations_seen = max(self.observations_seen, len(positions))
            total = sum(self._size(m) for m in history)
            if self.trigger_tokens is not None and total <= self.trigger_tokens:
                return self._without_demos(aged), AgingReport()
            old = positions[: max(0, len(positions) - self.keep_last)]
            old = [i for i in old if not (set(_result_names(history[i], names)) & self.exclude_tools)]
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
                _clear_inputs(aged, {rid for i, _ in plan for rid in tool_result_ids(history[i])})
            self.acted = True
            report = AgingReport(redacted=len(plan), tokens_freed=freed,
                                 redacted_ids=[history[i].get("id") for i, _ in plan])
            return self._without_demos(aged), report


def _call_names(history: Sequence[dict]) -> dict[str, str]:
    """Tool name per call id, from the calls of the assistant messages."""
    out: dict[str, str] = {}
    for msg in history:
        if msg.get("role") != "assistant":
            continue
        for tc in msg.get("tool_calls") or ():
            if isinstance(tc, dict) and tc.get("id"):
                out[tc["id"]] = str(tc.get("name") or (tc.get("function") or {}).get("name") or "")
        for b in _blocks(msg):
            if b.get("type") == "tool_use" and b.get("id"):
                out[b["id"]] = str(b.get("name") or "")
    return out


def _blocks(msg: dict) -> list[dict]:
    return [b for b in blocks(msg) if isinstance(b, dict)]


def _result_names(msg: dict, names: dict[str, str]) -> list[str]:
    found = [names.get(rid, "") for rid in tool_result_ids(msg)]
    if msg.get("role") == "tool" and msg.get("name"):
        found.append(str(msg["name"]))
    return found


def _clear_inputs(aged: list[dict], ids: set[str]) -> None:
    """Empty the parameters of the calls ``ids`` (``clear_inputs``), on copies."""
    for i, msg in enumerate(aged):
        if msg.get("role") != "assistant":
            continue
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
