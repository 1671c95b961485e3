"""One user turn through the context engine (spec "总体流程", the overall flow).

``process_user_turn(session_db, session_id, user_text, *, agent, provider_call,
model, tools=None, engine=None, on_event=None, max_iterations=8) -> TurnResult``:

1. ``engine.on_session_start(session_id)``: warm the usage cache;
2. store the user message, read the active branch, ``engine.prepare(...)``;
3. if ``engine.should_auto_compact(prep)`` (``budget_pct >= 0.80``), compact
   inline (``user_initiated=False``) and prepare again;
4. make sure the request fits the window (``opctx.context.fit``: the engine
   truncated its oversized parts; when even that cannot make it fit, compact
   once more, else raise ``ContextOverflowError`` without calling the provider),
   call the provider with ``prep.agent_messages`` (system prompt and tool
   schemas alongside), store the assistant message; run the tool calls it
   asked for and store their results; repeat up to ``max_iterations`` LLM calls;
5. ``engine.after_turn(session_id, usage, prep, on_event)`` after every LLM call
   with the provider's real usage: the engine emits ``compaction_recommended``
   at or above 0.70;
6. ``trigger_compaction(...)`` is the ``/compact`` command
   (``user_initiated=True``, reason ``manual``).

``process_user_turn`` reads as that loop; a private ``_Turn`` holds the running
turn (the history kept in memory, the ``TurnResult`` being filled) with one
method per step: ``start`` (1), ``prepare_call`` (2-3, compacting through
``compact_inline``), ``call_llm`` (4, with the context-length retry),
``record_call`` and ``store_reply``, ``after_turn`` (5), ``run_tools``, and
``finish`` (the ``turn_finished`` event).

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
* **Every request fits the window, or is not sent.** An engine that does not fit
  its own requests (``TurnPrep.request_tokens is None``: not the default engine)
  has its request fitted here, with the engine's estimator. A request that
  cannot fit even truncated (tool schemas, or the fixed cost of too many
  messages, exceed the input budget) triggers one compaction with reason
  ``recovered``; if it still cannot fit, ``ContextOverflowError`` is raised before
  the provider is called (the user message stays stored, as with any provider
  error).
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
  provider of its own (the shared default engine): the ``CompactRequest`` carries
  ``provider_call`` and the engine uses it with the turn's model.
* **One call to compact.** Every compaction is ``engine.compact(CompactRequest(...))``
  (``ContextEngine.compact``): the request names the session, the reason, the tools,
  the store, the provider and the event handler; an engine reads what it needs.
* ``tools`` is a dict ``name -> callable``, a list of callables, or a
  ``ToolRegistry``; schemas are derived from signatures (``chat.tool_schema``).
  With no tools, JSON in a reply's text is never taken for a call.
* **The DAG is installed for the turn** (§0.7, "turn entry"): ``_store`` is the
  session's ``GraphStore`` (``session_db.store(session_id)``, on the same
  connection) for the whole turn, and while the tools of an assistant message
  run ``_call_id`` is that message's id, so an ``@agentic_function`` tool records
  its running placeholder and its inner LLM calls below the call that asked for
  it (as ``chat_turn`` does). Both are reset in ``finally``, also when the turn
  raises. The graph is not loaded up front: ``current_graph()`` loads it on the
  first agentic use. A ``session_db`` without ``store()`` installs nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from opctx.dag.agentic import _call_id, _store
from opctx.dag.chat import ToolRegistry, parse_tool_call
from opctx.dag.messages import as_text
from opctx.dag.providers import Reply, ToolCall, Usage, call_provider

from .engine import ContextEngine, EngineError, EventHandler, emit, resolve_engine_for
from .fit import ContextOverflowError, fit_request
from .tokens import Estimator
from .types import CompactRequest, CompactResult, TurnPrep

__all__ = [
    "TurnResult",
    "LLMCallRecord",
    "process_user_turn",
    "trigger_compaction",
    "is_context_length_error",
    "ContextOverflowError",
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
    # the estimate of the request as sent (after truncating oversized parts)
    request_tokens: int | None = None

    @classmethod
    def of(cls, prep: TurnPrep) -> LLMCallRecord:
        return cls(
            budget_pct=prep.budget_pct,
            input_used=prep.budget.input_used,
            input_budget=prep.budget.input_budget,
            context_window=prep.context_window,
            decision_path=list(prep.decision_path),
            message_count=len(prep.agent_messages),
            request_tokens=prep.request_tokens,
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


def _estimator_of(engine: Any) -> Estimator | None:
    """The engine's token estimator, when it has one of opctx's (else the default)."""
    estimator = getattr(engine, "estimator", None)
    return estimator if isinstance(estimator, Estimator) else None


def _registry(tools: Any) -> ToolRegistry:
    if isinstance(tools, ToolRegistry):
        return tools
    return ToolRegistry(tools)


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
    turn = _Turn(
        session_db,
        session_id,
        engine or resolve_engine_for(agent),
        agent=agent,
        provider_call=provider_call,
        model=model,
        registry=_registry(tools),
        on_event=on_event,
    )
    result = turn.result
    with _dag_installed(session_db, session_id):
        turn.start(user_text)  # 1
        reply: Reply | None = None
        for iteration in range(1, max_iterations + 1):
            prep = turn.prepare_call()  # 2, 3
            prep, record, reply = turn.call_llm(prep)  # 4
            turn.record_call(iteration, prep, record, reply)
            calls = turn.store_reply(reply)
            turn.after_turn(reply, prep)  # 5
            if not calls:
                result.text = reply.text or ""
                result.stop_reason = "final"
                break
            turn.run_tools(calls)
        else:
            result.stop_reason = "max_iterations"
            result.text = reply.text if reply is not None and reply.text else ""
        turn.finish()
    return result


@contextlib.contextmanager
def _dag_installed(session_db: Any, session_id: str) -> Iterator[None]:
    """§0.7's turn entry: ``_store`` is the session's GraphStore for the turn (reset in
    ``finally``); nothing is installed for a ``session_db`` without ``store()``."""
    store_of = getattr(session_db, "store", None)
    store = None
    if callable(store_of):
        try:
            store = store_of(session_id)
        except Exception:  # an unknown session: the turn's first write says so
            store = None
    if store is None:
        yield
        return
    token = _store.set(store)
    try:
        yield
    finally:
        _store.reset(token)


class _Turn:
    """One running :func:`process_user_turn`: its inputs, the history kept in memory
    and the :class:`TurnResult` being filled, with one method per step."""

    def __init__(
        self,
        session_db: Any,
        session_id: str,
        engine: ContextEngine,
        *,
        agent: Any,
        provider_call: Callable[..., Any],
        model: str,
        registry: ToolRegistry,
        on_event: EventHandler | None,
    ) -> None:
        self.session_db = session_db
        self.session_id = session_id
        self.engine = engine
        self.agent = agent
        self.provider_call = provider_call
        self.model = model
        self.registry = registry
        self.schemas = registry.schemas() or None
        self.on_event = on_event
        self.result = TurnResult(session_id=session_id, text="")
        self.history: list[dict] = []
        self.asking_id: str | None = None  # the assistant message whose tool calls run now

    def _engine_name(self) -> str:
        return getattr(self.engine, "name", "?")

    def start(self, user_text: str) -> None:
        """Step 1 and the start of 2: warm the engine, store the user message, read the branch."""
        engine, sid = self.engine, self.session_id
        engine.on_session_start(sid)
        stored = self.session_db.append_message(sid, {"role": "user", "content": user_text})
        self.result.user_message_id = stored["id"]
        self.result.message_ids.append(stored["id"])
        engine.ingest(sid, stored)
        self.history = self.session_db.get_branch(sid)

    def prepare(self) -> TurnPrep:
        return _prepare(
            self.engine, self.agent, self.session_id, self.history, self.model, self.schemas
        )

    def prepare_call(self) -> TurnPrep:
        """Steps 2-3: prepare the next LLM call; over the auto-compaction threshold,
        compact inline and prepare again."""
        prep = self.prepare()
        if self.engine.should_auto_compact(prep) and self.compact_inline():
            prep = self.prepare()
        return prep

    def compact_inline(self, reason: str | None = None) -> bool:
        """Compact during the turn (``user_initiated=False``); re-read the branch when
        it was written. A failure is logged and reported in ``errors``, never raised."""
        result = self.result
        request = CompactRequest(
            self.session_id,
            agent=self.agent,
            model=self.model,
            reason=reason,  # type: ignore[arg-type]
            user_initiated=False,
            tools=self.schemas,
            session_db=self.session_db,
            provider_call=self.provider_call,
            on_event=self.on_event,
        )
        try:
            res = self.engine.compact(request)
        except Exception as exc:
            logger.exception("context engine %r failed in compact", self._engine_name())
            result.errors.append(
                f"compact failed in engine {self._engine_name()!r}: {type(exc).__name__}: {exc}"
            )
            return False
        result.compactions.append(res)
        if res.error:
            result.errors.append(f"compaction ({res.reason}): {res.error}")
        if res.ok:
            self.history = self.session_db.get_branch(self.session_id)
        return res.ok

    def call_llm(self, prep: TurnPrep) -> tuple[TurnPrep, LLMCallRecord, Reply]:
        """Step 4: call the provider with ``prep``, once it fits (:meth:`fitting`). A
        context-length error compacts (reason ``recovered``) and retries once; any
        other error propagates."""
        prep = self.fitting(prep)
        record = LLMCallRecord.of(prep)
        try:
            reply = self._call(prep)
        except Exception as exc:
            if not is_context_length_error(exc):
                raise
            logger.warning(
                "provider rejected the prompt as too long; compacting and retrying once: %s", exc
            )
            self.result.errors.append(f"provider: {type(exc).__name__}: {exc}")
            if not self.compact_inline("recovered"):
                raise
            prep = self.fitting(self.prepare())
            record = LLMCallRecord.of(prep)
            reply = self._call(prep)
        return prep, record, reply

    def fitting(self, prep: TurnPrep) -> TurnPrep:
        """``prep`` with a request that fits the window: fitted here when the engine did
        not (``request_tokens is None``); one compaction (``recovered``) when it cannot
        fit even truncated; else :class:`ContextOverflowError`, before any provider call."""
        prep = self._fitted(prep)
        if prep.overflow is None:
            return prep
        self.result.errors.append(f"request too large: {prep.overflow}")
        if self.compact_inline("recovered"):
            prep = self._fitted(self.prepare())
        if prep.overflow is not None:
            raise ContextOverflowError(f"{prep.overflow}; nothing was sent to the provider")
        return prep

    def _fitted(self, prep: TurnPrep) -> TurnPrep:
        if prep.request_tokens is not None:
            return prep  # the engine measured and fitted it
        fitted = fit_request(
            prep.system_prompt or "",
            prep.agent_messages,
            self.schemas,
            prep.budget.input_budget,
            model=self.model,
            estimator=_estimator_of(self.engine),
        )
        return dataclasses.replace(
            prep,
            system_prompt=fitted.system_prompt,
            agent_messages=fitted.messages,
            request_tokens=fitted.tokens,
            truncated_parts=fitted.truncated,
            overflow=fitted.overflow,
        )

    def _call(self, prep: TurnPrep) -> Reply:
        return call_provider(
            self.provider_call,
            prep.agent_messages,
            self.model,
            prep.system_prompt or None,
            self.schemas,
        )

    def record_call(
        self, iteration: int, prep: TurnPrep, record: LLMCallRecord, reply: Reply
    ) -> None:
        """Count the call in the result: iterations, the last prep, the usage."""
        result = self.result
        result.iterations = iteration
        result.last_prep = prep
        if reply.usage is not None:
            record.usage = reply.usage.to_dict()
            result.total_usage = (
                reply.usage if result.total_usage is None else result.total_usage + reply.usage
            )
        result.calls.append(record)

    def store_reply(self, reply: Reply) -> list[ToolCall]:
        """Store the assistant message; returns the tool calls it asks for (none are
        read from its text when the turn has no tools)."""
        calls = parse_tool_call(reply) if self.registry.tools else list(reply.tool_calls)
        assistant: dict[str, Any] = {"role": "assistant", "content": reply.text or ""}
        if reply.model or self.model:
            assistant["model"] = reply.model or self.model
        if calls:
            assistant["tool_calls"] = [c.to_dict() for c in calls]
        if reply.usage is not None:
            assistant["usage"] = reply.usage.to_dict()
        stored = self.session_db.append_message(self.session_id, assistant)
        self.history.append(stored)
        self.result.message_ids.append(stored["id"])
        self.engine.ingest(self.session_id, stored)
        self.asking_id = stored["id"]
        return calls

    def after_turn(self, reply: Reply, prep: TurnPrep) -> None:
        """Step 5: the provider's real usage to the engine (it may emit
        ``compaction_recommended``); a failure is reported in ``errors``."""
        try:
            self.engine.after_turn(self.session_id, reply.usage, prep, self.on_event)
        except Exception as exc:
            logger.exception("context engine %r failed in after_turn", self._engine_name())
            self.result.errors.append(
                f"after_turn failed in engine {self._engine_name()!r}: {type(exc).__name__}: {exc}"
            )

    def run_tools(self, calls: list[ToolCall]) -> None:
        """Run the tool calls and store one result message per call, in one write."""
        registry, result = self.registry, self.result
        tool_messages = []
        for call in calls:
            # an @agentic_function tool records its frame below the message that asked
            token = _call_id.set(self.asking_id)
            try:
                output, is_error = registry.run(call)
            finally:
                _call_id.reset(token)
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
        stored_tools = self.session_db.append_messages(self.session_id, tool_messages)
        for call, msg in zip(calls, stored_tools, strict=True):
            self.history.append(msg)
            result.message_ids.append(msg["id"])
            result.tool_results.append(
                {
                    "id": call.id,
                    "name": call.name,
                    "is_error": msg["is_error"],
                    "message_id": msg["id"],
                }
            )
            self.engine.ingest(self.session_id, msg)

    def finish(self) -> None:
        """Emit ``turn_finished``."""
        result = self.result
        emit(
            self.on_event,
            "turn_finished",
            {
                "session_id": self.session_id,
                "iterations": result.iterations,
                "stop_reason": result.stop_reason,
                "compactions": len([c for c in result.compactions if c.ok]),
            },
        )


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
    return engine.compact(
        CompactRequest(
            session_id,
            agent=agent,
            model=model,
            user_initiated=True,
            tools=tools,
            keep_recent_tokens=keep_recent_tokens,
            previous_summary=previous_summary,
            session_db=session_db,
            provider_call=provider_call,
            on_event=on_event,
            cancel_event=cancel_event,
        ),
    )
