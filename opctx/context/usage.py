"""Provider usage per session, and the hybrid prompt estimate (spec §2.4).

``UsageTracker`` keeps one ``UsageState`` per session in memory, behind a lock (the
dispatcher may record a turn's usage from one thread while the web UI reads it from
another). It persists into the session's ``extra_meta["_usage"]`` through anything with
``get_extra_meta(session_id) -> dict`` and ``set_extra_meta(session_id, dict)`` (both
``DagSessionDB`` and ``DagSessionManager`` have them; ``update_extra_meta(session_id,
**kv)`` is preferred when present, since it does not rewrite other keys). ``None`` means
purely in memory.

Life cycle
==========
* ``on_session_start(id)``: warm the cache from ``extra_meta["_usage"]``. A state that was
  persisted with ``source="provider"`` comes back as ``source="cached"``: the figure was
  real, but for a prompt this process did not build (the system prompt, memory or tools
  may have changed since), so the hybrid estimate does not trust it until the next
  ``record`` confirms a provider count.
* ``record(id, usage, history_len, anchor_id=None)``: after each LLM call. ``usage`` is an
  ``opctx.dag.providers.Usage``, an opctx usage dict, an OpenAI ``usage`` dict
  (``prompt_tokens``) or an Anthropic one (``input_tokens`` *excluding* cache, plus
  ``cache_read_input_tokens`` / ``cache_creation_input_tokens``: summed into the whole
  prompt). ``history_len`` is how many history messages that request's prompt held;
  ``anchor_id`` (optional) the id of the last of them, checked later so that a rewind
  or fork to a different branch of equal length is not mistaken for the same prefix.
  ``usage=None`` (the provider reported nothing) counts the turn and changes nothing else.
* ``record_compaction(id)``: a compaction changed the history; the provider's figure
  no longer describes any prefix of it, so the source drops back to ``"estimate"``.
* ``on_session_end(id)``: flush to the store and drop the session from memory.
  ``flush()`` writes every changed session. ``autosave=True`` writes on every change.
  A store that fails is logged, never raised: usage is a cache, losing it only costs
  one estimated turn.

Hybrid estimate
===============
``hybrid_estimate(id, history, system, tools, model)`` returns a ``HybridEstimate``. When
the state's source is ``"provider"``, ``0 < last_history_len <= len(history)`` and the
anchor (if recorded) still sits at ``history[last_history_len - 1]``, the provider's
``last_prompt_tokens`` is trusted for the prefix it covered, which *already includes the
system prompt and tool schemas*, and only ``history[last_history_len:]`` is estimated
and added; the first of those, when it is the assistant's reply to the counted request,
is counted at the output tokens the provider reported for it (``_reply_correction``).
System and tools are estimated too, but only to split the total into the budget's parts
(``history = total - system - tools``, both shrunk in proportion in the rare case they
exceed the provider's prefix figure); they are never added a second time (a defect of
the public reference code). A caller that knows the counted prefix has changed since
(``DefaultContextEngine``: aging cleared a result inside it, the system prompt or tool
set changed) passes the estimated difference as ``prefix_delta``; without it, tokens
that aging just freed would still be counted until the next provider figure. Otherwise
the whole prompt is estimated.

The provider figure also counts what the caller never estimates (a system prompt or tool
schemas it does not pass, files a client re-attaches, the context a continued session
started from): the *unseen overhead*, provider figure minus the full estimate. Replays
(``opctx.lab.replay`` with ``feed_usage=True``) measure it while they send what the
recording sent and keep feeding ``estimate + overhead`` as each request's count after
they diverge, so this estimate stays on the provider's scale.

All timestamps (``updated_at``) come from the injectable ``clock``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from .provider_messages import is_display_only
from .tokens import MESSAGE_OVERHEAD_TOKENS, Estimator, default_estimator
from .types import UsageState

__all__ = [
    "USAGE_META_KEY",
    "ExtraMetaStore",
    "HybridEstimate",
    "UsageTracker",
    "normalise_usage",
]

logger = logging.getLogger(__name__)

USAGE_META_KEY = "_usage"


@runtime_checkable
class ExtraMetaStore(Protocol):
    """What ``UsageTracker`` needs from a session database."""

    def get_extra_meta(self, session_id: str) -> dict | None: ...

    def set_extra_meta(self, session_id: str, meta: dict) -> Any: ...


@dataclass(frozen=True)
class NormalisedUsage:
    prompt_tokens: int
    completion_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


@dataclass(frozen=True)
class HybridEstimate:
    """A prompt-size figure and how it was obtained."""

    total: int  # system + tools + history
    system: int
    tools: int
    history: int  # total - system - tools
    source: str  # "provider" (hybrid) or "estimate"
    appended_messages: int  # messages estimated on top of the provider figure (hybrid only)
    appended_tokens: int

    def __int__(self) -> int:
        return self.total


def _int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def normalise_usage(usage: Any) -> NormalisedUsage:
    """One convention: ``prompt_tokens`` is the whole prompt, cache included."""
    if isinstance(usage, dict):
        get = usage.get
    elif hasattr(usage, "input_tokens"):
        def get(key: str, default: Any = None) -> Any:
            return getattr(usage, key, default)
    else:
        raise TypeError(f"usage must be a Usage, a dict or None, got {type(usage).__name__}")
    if get("prompt_tokens") is not None or get("completion_tokens") is not None:  # OpenAI
        details = get("prompt_tokens_details") or {}
        return NormalisedUsage(
            _int(get("prompt_tokens")),
            _int(get("completion_tokens")),
            _int(details.get("cached_tokens") if isinstance(details, dict) else 0),
            _int(get("cache_creation_input_tokens")),
        )
    if get("cache_read_input_tokens") is not None or get("cache_creation_input_tokens") is not None:
        # Anthropic: input_tokens excludes the cached parts
        read, write = _int(get("cache_read_input_tokens")), _int(get("cache_creation_input_tokens"))
        return NormalisedUsage(_int(get("input_tokens")) + read + write, _int(get("output_tokens")), read, write)
    return NormalisedUsage(  # opctx Usage / dict: input_tokens is the whole prompt
        _int(get("input_tokens")),
        _int(get("output_tokens")),
        _int(get("cache_read_tokens")),
        _int(get("cache_write_tokens")),
    )


class UsageTracker:
    """Thread-safe per-session usage cache persisted to ``extra_meta["_usage"]``."""

    def __init__(
        self,
        session_db_or_manager: ExtraMetaStore | None = None,
        clock: Callable[[], float] = time.time,
        *,
        estimator: Estimator | None = None,
        autosave: bool = False,
    ):
        if session_db_or_manager is not None and not (
            callable(getattr(session_db_or_manager, "get_extra_meta", None))
            and callable(getattr(session_db_or_manager, "set_extra_meta", None))
        ):
            raise TypeError(
                f"{type(session_db_or_manager).__name__} has no get_extra_meta/set_extra_meta: "
                "pass a DagSessionDB, a DagSessionManager, or None"
            )
        self.store = session_db_or_manager
        self.clock = clock
        self.estimator = estimator or default_estimator()
        self.autosave = autosave
        self._states: dict[str, UsageState] = {}
        self._anchors: dict[str, str | None] = {}
        self._dirty: set[str] = set()
        # bumped by every change: a flush clears "dirty" only if nothing changed while it wrote
        self._versions: dict[str, int] = {}
        self._lock = threading.RLock()
        # held across a flush's snapshot and its writes, so that two flushes never write
        # an older state over a newer one
        self._write_lock = threading.Lock()

    # ------------------------------------------------------------------ loading
    def _load(self, session_id: str) -> UsageState:
        persisted: dict | None = None
        if self.store is not None:
            try:
                meta = self.store.get_extra_meta(session_id) or {}
                raw = meta.get(USAGE_META_KEY) if isinstance(meta, dict) else None
                persisted = raw if isinstance(raw, dict) else None
            except Exception as exc:
                logger.warning("usage: could not read extra_meta of session %r: %s", session_id, exc)
        try:
            state = UsageState.from_dict(persisted)
        except TypeError as exc:
            logger.warning("usage: ignoring malformed extra_meta['_usage'] of %r: %s", session_id, exc)
            state = UsageState()
        if state.source == "provider":
            state.source = "cached"
        return state

    def _state(self, session_id: str) -> UsageState:
        state = self._states.get(session_id)
        if state is None:
            state = self._load(session_id)
            self._states[session_id] = state
        return state

    def on_session_start(self, session_id: str) -> UsageState:
        """Warm the cache for ``session_id``; returns a copy of its state."""
        with self._lock:
            return replace(self._state(session_id))

    def get(self, session_id: str) -> UsageState:
        """A copy of the session's state (loaded on first use)."""
        with self._lock:
            return replace(self._state(session_id))

    # ------------------------------------------------------------------ updates
    def record(
        self,
        session_id: str,
        usage: Any,
        history_len: int,
        *,
        anchor_id: str | None = None,
    ) -> UsageState:
        """Fold one LLM call's usage in; returns a copy of the new state."""
        if isinstance(history_len, bool) or not isinstance(history_len, int) or history_len < 0:
            raise ValueError(f"history_len must be an int >= 0, got {history_len!r}")
        norm = normalise_usage(usage) if usage is not None else None
        with self._lock:
            state = self._state(session_id)
            state.turn_count += 1
            state.updated_at = self.clock()
            if norm is not None:
                state.last_prompt_tokens = norm.prompt_tokens
                state.last_completion_tokens = norm.completion_tokens
                state.last_cache_read_tokens = norm.cache_read_tokens
                state.last_cache_write_tokens = norm.cache_write_tokens
                state.cumulative_prompt_tokens += norm.prompt_tokens
                state.cumulative_completion_tokens += norm.completion_tokens
                state.last_history_len = history_len
                state.source = "provider" if norm.prompt_tokens > 0 else "estimate"
                self._anchors[session_id] = anchor_id
            self._changed(session_id)
            snapshot = replace(state)
        if self.autosave:
            self.flush(session_id)
        return snapshot

    def record_compaction(self, session_id: str) -> UsageState:
        """Count a compaction; the provider figure no longer covers the new history."""
        with self._lock:
            state = self._state(session_id)
            state.compaction_count += 1
            state.source = "estimate"
            state.last_history_len = 0
            state.updated_at = self.clock()
            self._anchors.pop(session_id, None)
            self._changed(session_id)
            snapshot = replace(state)
        if self.autosave:
            self.flush(session_id)
        return snapshot

    def _changed(self, session_id: str) -> None:
        self._dirty.add(session_id)
        self._versions[session_id] = self._versions.get(session_id, 0) + 1

    def reset(self, session_id: str) -> None:
        """Forget a session's state in memory (the persisted copy is untouched)."""
        with self._lock:
            self._states.pop(session_id, None)
            self._anchors.pop(session_id, None)
            self._dirty.discard(session_id)

    # ------------------------------------------------------------------ persistence
    def flush(self, session_id: str | None = None) -> int:
        """Write changed states to the store; returns how many were written."""
        if self.store is None:
            with self._lock:
                self._dirty.clear() if session_id is None else self._dirty.discard(session_id)
            return 0
        with self._write_lock:
            with self._lock:
                ids = [session_id] if session_id is not None else sorted(self._dirty)
                todo = [
                    (sid, self._states[sid].to_dict(), self._versions.get(sid, 0))
                    for sid in ids
                    if sid in self._dirty and sid in self._states
                ]
            written = 0
            for sid, payload, version in todo:
                if self._persist(sid, payload):
                    written += 1
                    with self._lock:
                        if self._versions.get(sid, 0) == version:  # else a newer state waits
                            self._dirty.discard(sid)
            return written

    def _persist(self, session_id: str, payload: dict) -> bool:
        store = self.store
        try:
            update = getattr(store, "update_extra_meta", None)
            if callable(update):
                update(session_id, **{USAGE_META_KEY: payload})
            else:
                meta = dict(store.get_extra_meta(session_id) or {})
                meta[USAGE_META_KEY] = payload
                store.set_extra_meta(session_id, meta)
            return True
        except Exception as exc:
            logger.warning("usage: could not persist usage of session %r: %s", session_id, exc)
            return False

    def on_session_end(self, session_id: str) -> UsageState:
        """Flush the session's state and drop it from memory; returns its last state."""
        with self._lock:
            state = replace(self._state(session_id))
        self.flush(session_id)
        with self._lock:
            if session_id not in self._dirty:  # keep it if the write failed
                self._states.pop(session_id, None)
                self._anchors.pop(session_id, None)
        return state

    # ------------------------------------------------------------------ estimate
    def hybrid_estimate(
        self,
        session_id: str,
        history: Sequence[Any],
        system: str | None = None,
        tools: Sequence[dict] | None = None,
        model: str | None = None,
        *,
        prefix_delta: int = 0,
        message_tokens: Callable[[Any, str | None], int] | None = None,
    ) -> HybridEstimate:
        """Prompt size: provider figure + estimate of what was appended, or a full estimate.

        ``prefix_delta``: how much the counted prefix itself has changed since the
        provider counted it, by the caller's estimate (aging cleared a result inside
        it, the system prompt or the tool set changed); added to the provider figure.
        ``message_tokens(msg, model)``: the estimate of one message, when the caller
        remembers them (the engine's, by message object); default the estimator's.
        """
        est = self.estimator

        def count(msgs: list[Any]) -> int:
            if message_tokens is None:
                return est.history_tokens(msgs, model)
            return sum(message_tokens(m, model) for m in msgs)

        system_tokens = est.message_tokens({"role": "system", "content": system}, model) if system else 0
        tools_tokens = est.tools_tokens(list(tools), model) if tools else 0
        with self._lock:
            state = replace(self._state(session_id))
            anchor = self._anchors.get(session_id)
        covered = state.last_history_len
        trusted = (
            state.source == "provider"
            and state.last_prompt_tokens > 0
            and 0 < covered <= len(history)
            and (anchor is None or _message_id(history[covered - 1]) == anchor)
        )
        if trusted:
            appended = history[covered:]
            appended_tokens = count(_sent(appended))
            appended_tokens += self._reply_correction(state, appended, model, message_tokens)
            prefix = max(0, state.last_prompt_tokens + prefix_delta)
            total = prefix + appended_tokens
            system_part, tools_part = _fit_split(system_tokens, tools_tokens, prefix)
            return HybridEstimate(
                total=total,
                system=system_part,
                tools=tools_part,
                history=total - system_part - tools_part,
                source="provider",
                appended_messages=len(appended),
                appended_tokens=appended_tokens,
            )
        history_tokens = count(_sent(history))
        return HybridEstimate(
            total=system_tokens + tools_tokens + history_tokens,
            system=system_tokens,
            tools=tools_tokens,
            history=history_tokens,
            source="estimate",
            appended_messages=0,
            appended_tokens=0,
        )


    def _reply_correction(
        self,
        state: UsageState,
        appended: Sequence[Any],
        model: str | None,
        message_tokens: Callable[[Any, str | None], int] | None = None,
    ) -> int:
        """Count the reply to the last counted request at its reported output tokens.

        The first message after the counted prefix is normally the assistant's answer to
        that very request, and the provider told us how long it was. Text alone misses
        what the next prompt carries but the transcript does not show (reasoning that
        Claude Opus 4.5+ and OpenAI reasoning models keep; signatures): on the corpus,
        growth error falls from 11-15% to 3-7% (docs/tokens.md). A reported figure
        below half the text estimate is a partial one (some clients log
        ``output_tokens: 1`` for streamed replies) and is ignored.
        """
        reported = state.last_completion_tokens
        if reported <= 0 or not appended:
            return 0
        reply = appended[0]
        role = reply.get("role") if isinstance(reply, dict) else getattr(reply, "role", None)
        if role not in ("assistant", "llm"):
            return 0
        from_text = (message_tokens or self.estimator.message_tokens)(reply, model)
        if reported + MESSAGE_OVERHEAD_TOKENS < from_text / 2:
            return 0
        return reported + MESSAGE_OVERHEAD_TOKENS - from_text


def _fit_split(system: int, tools: int, prefix: int) -> tuple[int, int]:
    """System and tools parts that fit inside the provider-counted prefix.

    When the local estimate of system + tools exceeds what the provider counted for the
    whole prefix, the estimate is the one that is wrong: shrink both in proportion, so the
    parts always add up to the trusted total and the history part is never negative.
    """
    if system + tools <= prefix:
        return system, tools
    if system + tools == 0:
        return 0, 0
    ratio = prefix / (system + tools)
    system_part = int(system * ratio)
    return system_part, min(int(tools * ratio), prefix - system_part)


def _message_id(msg: Any) -> str | None:
    if isinstance(msg, dict):
        return msg.get("id")
    return getattr(msg, "id", None)


def _sent(history: Sequence[dict]) -> list[dict]:
    """The messages a request carries: display-only lines (shown, never sent) cost nothing."""
    return [m for m in history if not is_display_only(m)]
