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

Speed: the token count of each tool result is cached by ``(message id, block, length of
the content)``, so a prepare over a long history after the first costs one pass of dict
lookups; the reference tracker is incremental too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from opctx.dag.nodes import Call

from .references import ReferenceTracker
from .tokens import Estimator, default_estimator
from .types import AgingReport, ReferenceMap

__all__ = ["TurnAger", "PLACEHOLDER_TEMPLATE", "placeholder_text"]

PLACEHOLDER_TEMPLATE = "[Old tool result content cleared (was {tokens} tokens)]"


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


class TurnAger:
    """Three-gate tool-result aging (module docstring)."""

    def __init__(
        self,
        keep_recent_turns: int = 4,
        keep_recent_seconds: float = 60,
        min_tokens: int = 800,
        protect_first_n: int = 2,
        clock: Callable[[], float] = time.time,
        *,
        estimator: Estimator | None = None,
        model: str | None = None,
    ):
        for name, value in (
            ("keep_recent_turns", keep_recent_turns),
            ("keep_recent_seconds", keep_recent_seconds),
            ("min_tokens", min_tokens),
            ("protect_first_n", protect_first_n),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        self.keep_recent_turns = keep_recent_turns
        self.keep_recent_seconds = keep_recent_seconds
        self.min_tokens = min_tokens
        self.protect_first_n = protect_first_n
        self.clock = clock
        self.estimator = estimator or default_estimator()
        self.model = model
        self._tracker = ReferenceTracker(clock)
        self._token_cache: dict[tuple[Any, ...], int] = {}

    # ------------------------------------------------------------------ helpers
    def _tokens(self, key: tuple[Any, ...], text: str) -> int:
        cache_key = (*key, len(text))
        n = self._token_cache.get(cache_key)
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
        report = AgingReport()
        if not history:
            return history, report
        refs = references if references is not None else self._tracker.update(history)
        now = self.clock() if now is None else now
        # assistant messages after index i, for the turn gate
        later_turns = [0] * len(history)
        count = 0
        for i in range(len(history) - 1, -1, -1):
            later_turns[i] = count
            if self._is_assistant(history[i]):
                count += 1
        out = history  # copied lazily on the first change
        for i in range(self.protect_first_n, len(history)):
            if later_turns[i] < self.keep_recent_turns:
                break  # every later message is even more recent
            msg = history[i]
            ts = self._timestamp(msg)
            if ts is not None and now - ts < self.keep_recent_seconds:
                continue
            aged = self._age_message(i, msg, refs, report)
            if aged is not msg:
                if out is history:
                    out = list(history)
                out[i] = aged
        return out, report

    __call__ = age

    def _gate_and_size(
        self, key: tuple[Any, ...], text: str, msg_id: Any, tool_use_id: Any, refs: ReferenceMap, report: AgingReport
    ) -> int | None:
        """Token count if this result should be cleared, else None."""
        tokens = self._tokens(key, text)
        if tokens < self.min_tokens:
            return None
        if refs.is_cited(msg_id if isinstance(msg_id, str) else None, tool_use_id):
            report.references_protected += 1
            return None
        return tokens

    def _record(self, report: AgingReport, tokens: int, ident: Any) -> str:
        text = placeholder_text(tokens)
        report.redacted += 1
        report.tokens_freed += max(0, tokens - self.estimator.text_tokens(text, self.model))
        report.redacted_ids.append(str(ident))
        return text

    def _age_message(self, index: int, msg: Any, refs: ReferenceMap, report: AgingReport) -> Any:
        if isinstance(msg, Call):
            return self._age_call(msg, refs, report)
        if not isinstance(msg, dict):
            raise TypeError(f"message {index} is a {type(msg).__name__}, expected a dict or a Call")
        msg_id = msg.get("id") or f"#{index}"
        if msg.get("role") == "tool":
            if msg.get("_redacted"):
                return msg
            text = _result_text(msg.get("content"))
            tool_use_id = msg.get("tool_call_id")
            tokens = self._gate_and_size((msg_id, "tool"), text, msg_id, tool_use_id, refs, report)
            if tokens is None:
                return msg
            new = dict(msg)
            new["content"] = self._record(report, tokens, tool_use_id or msg_id)
            new["_redacted"] = True
            return new
        extra = msg.get("extra")
        in_extra = isinstance(extra, dict) and isinstance(extra.get("blocks"), list)
        blocks = extra["blocks"] if in_extra else msg.get("content")
        if not isinstance(blocks, list):
            return msg
        new_blocks: list[Any] | None = None
        for b, block in enumerate(blocks):
            if not isinstance(block, dict) or block.get("type") != "tool_result" or block.get("_redacted"):
                continue
            tool_use_id = block.get("tool_use_id")
            text = _result_text(block.get("content"))
            tokens = self._gate_and_size((msg_id, b, tool_use_id), text, msg_id, tool_use_id, refs, report)
            if tokens is None:
                continue
            if new_blocks is None:
                new_blocks = list(blocks)
            new_block = dict(block)
            new_block["content"] = self._record(report, tokens, tool_use_id or msg_id)
            new_block["_redacted"] = True
            new_blocks[b] = new_block
        if new_blocks is None:
            return msg
        new = dict(msg)
        if in_extra:
            new["extra"] = {**extra, "blocks": new_blocks}
        else:
            new["content"] = new_blocks
        return new

    def _age_call(self, call: Call, refs: ReferenceMap, report: AgingReport) -> Call:
        if call.role != "code" or call.metadata.get("_redacted"):
            return call
        text = _result_text(call.output) if isinstance(call.output, str | list) else ("" if call.output is None else str(call.output))
        tool_use_id = call.metadata.get("tool_call_id")
        tokens = self._gate_and_size((call.id, "call"), text, call.id, tool_use_id, refs, report)
        if tokens is None:
            return call
        placeholder = self._record(report, tokens, tool_use_id or call.id)
        return call.copy(output=placeholder, metadata={**call.metadata, "_redacted": True})
