"""Observation masking: keep the last M tool results verbatim, mask the older ones.

"The Complexity Trap" (Lindenbauer et al., 2025) compares LLM summarisation with simply
replacing old tool observations by a placeholder and finds masking as good at a fraction
of the cost; M = 10 performed best there. :class:`ObservationMasker` is that strategy as
an engine ager (``age(history, references) -> (aged, AgingReport)``, like ``TurnAger``):
``aging.kind = "masking"`` in a ``CompactionPolicy`` (``aging.keep_last`` is M). The
placeholder says how many tokens were omitted (``MASK_PLACEHOLDER``, assumed wording).
It never summarises: the masking preset's triggers are off (``None``).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from typing import Any

from opctx.dag.messages import is_tool_result

from .tokens import estimate_message_tokens
from .types import AgingReport, ReferenceMap

__all__ = ["ObservationMasker", "MASK_PLACEHOLDER"]

MASK_PLACEHOLDER = "[Old tool result omitted to save context ({tokens} tokens)]"


class ObservationMasker:
    """An ager component: keep the last ``keep_last`` tool results, mask the older ones.

    ``age(history, references) -> (aged, AgingReport)`` like ``TurnAger``. A masked
    message is a copy whose result text is ``MASK_PLACEHOLDER``; copies are cached
    per message id so that a message masked once is the same object in every later
    request (prefix-cache comparisons and the engine's per-message caches rely on
    it). Work per call is proportional to the messages appended since the last
    call (the positions of tool results are kept), plus one list copy.
    """

    def __init__(self, keep_last: int = 10, *, estimate: Callable[[dict], int] | None = None):
        if not isinstance(keep_last, int) or keep_last < 0:
            raise ValueError(f"keep_last must be an int >= 0, got {keep_last!r}")
        self.keep_last = keep_last
        self._estimate = estimate
        self._masked: dict[str, tuple[dict, int]] = {}
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
        return ObservationMasker(self.keep_last, estimate=self._estimate)

    def _tokens(self, msg: dict) -> int:
        if self._estimate is not None:
            return int(self._estimate(msg))
        return estimate_message_tokens(msg)

    def _mask(self, msg: dict) -> tuple[dict, int]:
        key = msg.get("id")
        hit = self._masked.get(key) if key else None
        if hit is not None:
            return hit
        before = self._tokens(msg)
        masked = copy.copy(msg)
        text = MASK_PLACEHOLDER.format(tokens=before)
        if msg.get("role") == "tool":
            masked["content"] = text
        extra = msg.get("extra")
        if isinstance(extra, dict) and isinstance(extra.get("blocks"), list):
            new_blocks = []
            for b in extra["blocks"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    b = {**b, "content": text, "_redacted": True}
                new_blocks.append(b)
            masked["extra"] = {**extra, "blocks": new_blocks}
        elif isinstance(msg.get("content"), list):
            masked["content"] = [
                {**b, "content": text, "_redacted": True} if isinstance(b, dict) and b.get("type") == "tool_result" else b
                for b in msg["content"]
            ]
        masked["_masked"] = True
        freed = max(0, before - self._tokens(masked))
        result = (masked, freed)
        if key:
            self._masked[key] = result
        return result

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
                if is_tool_result(history[i]):
                    self._positions.append(i)
            self._scanned = n
            self._anchor = (n, history[-1] if n else None)
            # positions that fell out of the window since the last call get masked, once
            n_old = max(0, len(self._positions) - self.keep_last)
            for i in self._positions[self._n_masked:n_old]:
                masked, freed = self._mask(history[i])
                self._aged[i] = masked
                self._freed += freed
                self._ids.append(history[i].get("id"))
            self._n_masked = max(self._n_masked, n_old)
            report = AgingReport(redacted=self._n_masked, tokens_freed=self._freed, redacted_ids=list(self._ids))
            return list(self._aged), report
