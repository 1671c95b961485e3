"""One user turn through the context engine (spec "总体流程", the overall flow).

``process_user_turn(session_db, session_id, user_text, *, agent, provider_call,
model, tools=None, engine=None, on_event=None, max_iterations=8) -> TurnResult``:

1. ``engine.on_session_start(session_id)``: warm the usage cache;
2. store the user message, read the active branch, ``engine.prepare(...)``;
3. if ``engine.should_auto_compact(prep)`` (``budget_pct >= 0.80``), compact
   inline (``user_initiated=False``) and prepare again;
4. call the provider with ``prep.agent_messages`` (system prompt and tool
   schemas alongside), store the assistant message; run the tool calls it
   asked for and store their results; repeat up to ``max_iterations`` LLM calls;
5. ``engine.after_turn(session_id, usage, prep, on_event)`` after every LLM call
   with the provider's real usage: the engine emits ``compaction_recommended``
   at or above 0.70;
6. ``trigger_compaction(...)`` is the ``/compact`` command
   (``user_initiated=True``, reason ``manual``).

Choices where the specification is open
=======================================
* **The budget is checked before every LLM call of the turn, not only before
  the first.** A tool loop can append several large results inside one turn;
  checking once would let the second call of the turn overflow. ``prepare`` is
  incremental, so the extra checks are cheap.
* **The history is kept in memory during the turn** (the branch is read once,
  then extended with the stored messages themselves), so the engine's
  per-message caches hit by identity. After a compaction the branch is read
  again from the store.
* **A context-length error from the provider** (HTTP 400/413 whose message says
  the prompt is too long) triggers one compaction with reason ``recovered`` and
  one retry of the same call; any other provider error propagates (there is no
  answer to record, and the stored messages are consistent up to that point).
* **Tool failures are results.** Tools run through ``opctx.dag.chat.ToolRegistry``:
  unknown tools, bad arguments and exceptions come back to the model as error
  results (``is_error=True``); every tool call gets a result message, so the
  stored branch never holds an unanswered call.
* **Engine failures are visible.** A failing ``prepare`` raises ``EngineError``
  naming the engine (the turn cannot be assembled without it; it is never
  replaced by the default engine). A failing ``compact`` or ``after_turn`` is
  logged and reported in ``TurnResult.errors`` and the turn goes on with the
  uncompacted context.
* **The agent's provider summarises** when the engine's summariser has no
  provider of its own (the shared default engine): ``compact`` receives
  ``provider_call`` and uses it with the turn's model.
* ``tools`` is a dict ``name -> callable``, a list of callables, or a
  ``ToolRegistry``; schemas are derived from signatures (``chat.tool_schema``).
  With no tools, JSON in a reply's text is never taken for a call.
"""

from __future__ import annotations

import inspect
import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opctx.dag.chat import ToolRegistry, parse_tool_call
from opctx.dag.messages import as_text
from opctx.dag.providers import Reply, Usage, call_provider

from .engine import ContextEngine, EngineError, EventHandler, emit, resolve_engine_for
from .types import CompactResult, TurnPrep

__all__ = [
    "TurnResult",
    "LLMCallRecord",
    "process_user_turn",
    "trigger_compaction",
    "is_context_length_error",
]

logger = logging.getLogger(__name__)

_CONTEXT_ERROR = re.compile(
    r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long|"
    r"input is too long|reduce the length|context_length_exceeded",
    re.IGNORECASE,
)


def is_context_length_error(exc: BaseException) -> bool:
    """Whether a provider error says the prompt did not fit the model's window."""
    status = getattr(exc, "status", None)
    if status is not None and status not in (400, 413, 422):
        return False
    return bool(_CONTEXT_ERROR.search(str(exc)))


@dataclass
class LLMCallRecord:
    """What one LLM call of the turn was given (for tests, replays and UIs)."""

    budget_pct: float
    input_used: int
    input_budget: int
    context_window: int
    decision_path: list[str]
    message_count: int
    usage: dict | None = None

    @classmethod
    def of(cls, prep: TurnPrep) -> LLMCallRecord:
        return cls(
            budget_pct=prep.budget_pct,
            input_used=prep.budget.input_used,
            input_budget=prep.budget.input_budget,
            context_window=prep.context_window,
            decision_path=list(prep.decision_path),
            message_count=len(prep.agent_messages),
        )


@dataclass
class TurnResult:
    """The outcome of :func:`process_user_turn`."""

    session_id: str
    text: str
    stop_reason: str = "final"  # "final" | "max_iterations"
    iterations: int = 0
    user_message_id: str | None = None
    message_ids: list[str] = field(default_factory=list)  # every message stored by the turn
    tool_results: list[dict] = field(
        default_factory=list
    )  # {"id", "name", "is_error", "message_id"}
    compactions: list[CompactResult] = field(default_factory=list)
    calls: list[LLMCallRecord] = field(default_factory=list)
    total_usage: Usage | None = None
    errors: list[str] = field(default_factory=list)
    last_prep: TurnPrep | None = None

    @property
    def compacted(self) -> bool:
        return any(c.ok for c in self.compactions)


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _registry(tools: Any) -> ToolRegistry:
    if isinstance(tools, ToolRegistry):
        return tools
    return ToolRegistry(tools)


def _compact(
    engine: ContextEngine,
    session_db: Any,
    session_id: str,
    *,
    agent: Any,
    model: str | None,
    on_event: EventHandler | None,
    user_initiated: bool,
    reason: str | None = None,
    tools: Sequence[dict] | None = None,
    keep_recent_tokens: int | None = None,
    previous_summary: str | None = None,
    cancel_event: threading.Event | None = None,
    provider_call: Callable[..., Any] | None = None,
) -> CompactResult:
    kwargs: dict[str, Any] = {}
    if provider_call is not None and _accepts(engine.compact, "provider_call"):
        kwargs["provider_call"] = provider_call
    if _accepts(engine.compact, "session_db"):
        kwargs["session_db"] = session_db
    if reason is not None and _accepts(engine.compact, "reason"):
        kwargs["reason"] = reason
    if tools is not None and _accepts(engine.compact, "tools"):
        kwargs["tools"] = tools
    return engine.compact(
        agent,
        session_id,
        model,
        on_event,
        previous_summary,
        user_initiated,
        cancel_event,
        keep_recent_tokens,
        **kwargs,
    )


def _prepare(
    engine: ContextEngine,
    agent: Any,
    session_id: str,
    history: list[dict],
    model: str | None,
    schemas: list[dict] | None,
) -> TurnPrep:
    try:
        return engine.prepare(agent, session_id, history, model, schemas)
    except EngineError:
        raise
    except Exception as exc:
        logger.exception("context engine %r failed in prepare", getattr(engine, "name", "?"))
        raise EngineError(
            f"context engine {getattr(engine, 'name', type(engine).__name__)!r} failed in prepare: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def process_user_turn(
    session_db: Any,
    session_id: str,
    user_text: str,
    *,
    agent: Any,
    provider_call: Callable[..., Any],
    model: str,
    tools: Any = None,
    engine: ContextEngine | None = None,
    on_event: EventHandler | None = None,
    max_iterations: int = 8,
) -> TurnResult:
    """Run one user turn (module docstring); returns a :class:`TurnResult`."""
    if max_iterations < 1:
        raise ValueError(f"max_iterations must be >= 1, got {max_iterations}")
    if not isinstance(user_text, str):
        raise TypeError(f"user_text must be a str, got {type(user_text).__name__}")
    engine = engine or resolve_engine_for(agent)
    registry = _registry(tools)
    schemas = registry.schemas() or None
    result = TurnResult(session_id=session_id, text="")

    engine.on_session_start(session_id)  # 1
    stored = session_db.append_message(session_id, {"role": "user", "content": user_text})
    result.user_message_id = stored["id"]
    result.message_ids.append(stored["id"])
    engine.ingest(session_id, stored)
    history = session_db.get_branch(session_id)

    def compact_inline(reason: str | None = None) -> bool:
        nonlocal history
        try:
            res = _compact(
                engine,
                session_db,
                session_id,
                agent=agent,
                model=model,
                on_event=on_event,
                user_initiated=False,
                reason=reason,
                tools=schemas,
                provider_call=provider_call,
            )
        except Exception as exc:
            logger.exception("context engine %r failed in compact", getattr(engine, "name", "?"))
            result.errors.append(
                f"compact failed in engine {getattr(engine, 'name', '?')!r}: {type(exc).__name__}: {exc}"
            )
            return False
        result.compactions.append(res)
        if res.error:
            result.errors.append(f"compaction ({res.reason}): {res.error}")
        if res.ok:
            history = session_db.get_branch(session_id)
        return res.ok

    reply: Reply | None = None
    for iteration in range(1, max_iterations + 1):
        prep = _prepare(engine, agent, session_id, history, model, schemas)  # 2
        if engine.should_auto_compact(prep) and compact_inline():  # 3
            prep = _prepare(engine, agent, session_id, history, model, schemas)
        record = LLMCallRecord.of(prep)
        try:  # 4
            reply = call_provider(
                provider_call, prep.agent_messages, model, prep.system_prompt or None, schemas
            )
        except Exception as exc:
            if not is_context_length_error(exc):
                raise
            logger.warning(
                "provider rejected the prompt as too long; compacting and retrying once: %s", exc
            )
            result.errors.append(f"provider: {type(exc).__name__}: {exc}")
            if not compact_inline("recovered"):
                raise
            prep = _prepare(engine, agent, session_id, history, model, schemas)
            record = LLMCallRecord.of(prep)
            reply = call_provider(
                provider_call, prep.agent_messages, model, prep.system_prompt or None, schemas
            )
        result.iterations = iteration
        result.last_prep = prep
        if reply.usage is not None:
            record.usage = reply.usage.to_dict()
            result.total_usage = (
                reply.usage if result.total_usage is None else result.total_usage + reply.usage
            )
        result.calls.append(record)

        calls = parse_tool_call(reply) if registry.tools else list(reply.tool_calls)
        assistant: dict[str, Any] = {"role": "assistant", "content": reply.text or ""}
        if reply.model or model:
            assistant["model"] = reply.model or model
        if calls:
            assistant["tool_calls"] = [c.to_dict() for c in calls]
        if reply.usage is not None:
            assistant["usage"] = reply.usage.to_dict()
        stored = session_db.append_message(session_id, assistant)
        history.append(stored)
        result.message_ids.append(stored["id"])
        engine.ingest(session_id, stored)

        try:  # 5
            engine.after_turn(session_id, reply.usage, prep, on_event)
        except Exception as exc:
            logger.exception("context engine %r failed in after_turn", getattr(engine, "name", "?"))
            result.errors.append(
                f"after_turn failed in engine {getattr(engine, 'name', '?')!r}: {type(exc).__name__}: {exc}"
            )

        if not calls:
            result.text = reply.text or ""
            result.stop_reason = "final"
            break
        tool_messages = []
        for call in calls:
            output, is_error = registry.run(call)
            tool_messages.append(
                {
                    "role": "tool",
                    "name": call.name,
                    "arguments": call.arguments,
                    "tool_call_id": call.id,
                    "content": as_text(output),
                    "is_error": bool(is_error),
                }
            )
        stored_tools = session_db.append_messages(session_id, tool_messages)
        for call, msg in zip(calls, stored_tools, strict=True):
            history.append(msg)
            result.message_ids.append(msg["id"])
            result.tool_results.append(
                {
                    "id": call.id,
                    "name": call.name,
                    "is_error": msg["is_error"],
                    "message_id": msg["id"],
                }
            )
            engine.ingest(session_id, msg)
    else:
        result.stop_reason = "max_iterations"
        result.text = reply.text if reply is not None and reply.text else ""
    emit(
        on_event,
        "turn_finished",
        {
            "session_id": session_id,
            "iterations": result.iterations,
            "stop_reason": result.stop_reason,
            "compactions": len([c for c in result.compactions if c.ok]),
        },
    )
    return result


def trigger_compaction(
    session_db: Any,
    session_id: str,
    keep_recent_tokens: int | None = None,
    *,
    agent: Any = None,
    model: str | None = None,
    engine: ContextEngine | None = None,
    on_event: EventHandler | None = None,
    previous_summary: str | None = None,
    cancel_event: threading.Event | None = None,
    tools: Sequence[dict] | None = None,
    provider_call: Callable[..., Any] | None = None,
) -> CompactResult:
    """The ``/compact`` command: ``engine.compact(user_initiated=True)``, reason ``manual``.

    ``provider_call`` summarises when the engine's summariser has no provider of its own.
    """
    engine = engine or resolve_engine_for(agent)
    engine.on_session_start(session_id)
    return _compact(
        engine,
        session_db,
        session_id,
        agent=agent,
        model=model,
        on_event=on_event,
        user_initiated=True,
        tools=tools,
        keep_recent_tokens=keep_recent_tokens,
        previous_summary=previous_summary,
        cancel_event=cancel_event,
        provider_call=provider_call,
    )
