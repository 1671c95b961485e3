"""What a replay's summariser read and wrote, compaction by compaction.

A compaction's cost is the agent's requests *and* the summariser's own call. The engine
asks its summariser for text only (``Summarizer`` keeps the words, not the reply's usage),
so ``replay`` hands the engine its summariser wrapped in a ``SummaryMeter``: a provider
call with the same shape that keeps each reply's token counts in the *slot* of the
compaction that asked. The replay opens a slot (``begin``) before each compaction and
reads it (``usage``) after, so a call that outlives the engine's timeout (the engine has
fallen back to the structural summary by then) never lands on a later compaction.

Token counts: the reply's ``usage`` (opctx's convention: ``input_tokens`` is the whole
prompt, cached part included), or, when the provider reports none (a plain string), opctx's
estimate of the request and of the text, flagged ``estimated``. A summary served by
``LLMSummaries``' cache carries the counts measured when it was made (``cached``): what
the strategy costs, even though this run paid nothing for it.

>>> meter = SummaryMeter(lambda messages, model, system, tools: "the user fixed calc.py")
>>> slot = meter.begin()
>>> meter([{"role": "user", "content": "summarise: fix calc.py"}], "m", "You summarise.", None)
'the user fixed calc.py'
>>> u = meter.usage(slot)
>>> (u.calls, u.ok, u.estimated, u.input_tokens > 0, u.output_tokens > 0)
(1, True, True, True, True)
>>> meter.usage(meter.begin()) is None
True
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["SummaryUsage", "SummaryMeter"]

_TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


@dataclass(frozen=True)
class SummaryUsage:
    """The summariser's calls for one compaction, added up."""

    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    calls: int = 0  # summariser calls the compaction made (a failed one included)
    ok: bool = False  # the last call gave a summary
    cached: bool = False  # every answer came from the summary cache (no endpoint call now)
    estimated: bool = False  # some count is opctx's estimate (the provider reported none)


def _text_tokens(text: str) -> int:
    from opctx.context.tokens import estimate_text_tokens

    return int(estimate_text_tokens(text)) if text else 0


def _request_text(messages: Any, system: str | None) -> str:
    parts = [system or ""]
    for msg in messages or ():
        content = msg.get("content") if isinstance(msg, dict) else msg
        parts.append(content if isinstance(content, str) else str(content or ""))
    return "\n".join(parts)


def _entry(reply: Any, model: str | None, messages: Any, system: str | None) -> dict[str, Any]:
    """One successful call's counts, from the reply's usage or estimated."""
    usage = getattr(reply, "usage", None)
    raw = getattr(reply, "raw", None)
    entry: dict[str, Any] = {"model": getattr(reply, "model", None) or model, "ok": True,
                             "cached": bool(getattr(raw, "cached", False)),
                             "estimated": bool(getattr(raw, "estimated", False))}
    counts = {k: int(getattr(usage, k, 0) or 0) for k in _TOKEN_FIELDS} if usage is not None else {}
    if not (counts.get("input_tokens") or counts.get("output_tokens")):
        text = reply if isinstance(reply, str) else str(getattr(reply, "text", "") or "")
        counts = {"input_tokens": _text_tokens(_request_text(messages, system)), "output_tokens": _text_tokens(text),
                  "cache_read_tokens": 0, "cache_write_tokens": 0}
        entry["estimated"] = True
    return {**entry, **counts}


class SummaryMeter:
    """A provider call that keeps what each call of the one it wraps cost, per slot."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call = call
        self._lock = threading.Lock()
        self._slot = 0
        self._entries: dict[int, list[dict[str, Any]]] = {}

    def begin(self) -> int:
        """Open the slot of the next compaction; calls made from now on are counted there."""
        with self._lock:
            self._slot += 1
            return self._slot

    def __call__(self, messages: Any, model: Any = None, system: Any = None, tools: Any = None) -> Any:
        with self._lock:
            slot = self._slot
        try:
            reply = self.call(messages, model, system, tools)
        except Exception:
            self._add(slot, {"model": getattr(self.call, "model", None) or model, "ok": False})
            raise
        self._add(slot, _entry(reply, getattr(self.call, "model", None) or model, messages, system))
        return reply

    def _add(self, slot: int, entry: dict[str, Any]) -> None:
        with self._lock:
            self._entries.setdefault(slot, []).append(entry)

    def usage(self, slot: int) -> SummaryUsage | None:
        """What the calls of ``slot`` cost (``None``: no call, the structural summary)."""
        with self._lock:
            entries = list(self._entries.get(slot, ()))
        if not entries:
            return None
        answered = [e for e in entries if e["ok"]]
        return SummaryUsage(
            model=next((e["model"] for e in reversed(entries) if e.get("model")), None),
            **{k: sum(int(e.get(k, 0)) for e in answered) for k in _TOKEN_FIELDS},
            calls=len(entries), ok=entries[-1]["ok"],
            cached=bool(answered) and len(answered) == len(entries) and all(e["cached"] for e in answered),
            estimated=any(e.get("estimated") for e in answered),
        )

    def fields(self, slot: int) -> dict[str, Any]:
        """``slot`` under ``ReplayCompaction``'s ``summary_*`` names (empty: no call)."""
        usage = self.usage(slot)
        if usage is None:
            return {}
        return {"summary_model": usage.model, **{f"summary_{k}": getattr(usage, k) for k in _TOKEN_FIELDS},
                "summary_calls": usage.calls, "summary_cached": usage.cached,
                "summary_tokens_estimated": usage.estimated}

    def apply(self, slot: int, compaction: Any) -> None:
        """Set a ``ReplayCompaction``'s ``summary_*`` fields from ``slot``."""
        for name, value in self.fields(slot).items():
            setattr(compaction, name, value)
