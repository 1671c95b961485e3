"""What the context engine keeps per session, and the small pieces its modules share.

``DefaultContextEngine`` (``engine.py``) and its compaction steps (``_compaction.py``)
both work on a session's :class:`_SessionState` (caches, the anti-thrash :class:`_Guard`)
and report through :func:`emit`; an ager of any shape runs through :func:`_run_ager`.
Every public name is re-exported by ``opctx.context.engine``.
"""

from __future__ import annotations

import logging
import operator
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

from .fit import CarriedCuts, FittedRequest, fit_request
from .provider_messages import _ProviderCache
from .summarize import MessageFacts, is_summary_message
from .types import AgingReport, ReferenceMap, TurnPrep

__all__ = ["EngineError", "EventHandler", "emit", "COMPACT_ATTEMPTS"]

logger = logging.getLogger("opctx.context.engine")  # one logger for the engine's records

# tries of one compaction when another writer switches the branch under it (BranchChanged)
COMPACT_ATTEMPTS = 3

EventHandler = Callable[[str, dict], Any]

class EngineError(Exception):
    """A context engine is unknown, misconfigured, or failed."""


def emit(on_event: EventHandler | None, name: str, payload: dict) -> None:
    """Call an event handler; a failing handler is logged, never raised."""
    if on_event is None:
        return
    try:
        on_event(name, payload)
    except Exception:  # an observer must not break the turn
        logger.exception("context engine: event handler failed on %r", name)


def _session_id(session: Any) -> str:
    if isinstance(session, str):
        return session
    if isinstance(session, dict) and session.get("id"):
        return str(session["id"])
    for attr in ("id", "session_id"):
        value = getattr(session, attr, None)
        if isinstance(value, str) and value:
            return value
    meta = getattr(session, "meta", None)
    if meta is not None and getattr(meta, "id", None):
        return str(meta.id)
    raise EngineError(
        f"cannot tell the session id of {type(session).__name__}: pass the id as a str"
    )


@dataclass
class _Guard:
    """Anti-thrash state of one session."""

    disabled: bool = False
    reason: str | None = None
    low_saving_streak: int = 0
    disabled_at_tokens: int = 0


class _MessageEstimates:
    """Estimates of one session's messages, remembered by message object.

    The engine's other caches go by position in the history, which an ager that leaves
    messages out (a view of the last messages, dropped demonstrations) shifts on every
    request: its request was estimated message by message, three times, each time afresh.
    The messages it sends are the history's very objects, so they are remembered by
    identity (the engine's contract: a message is not changed in place once given). The
    memo keeps a reference to each message it holds, is for one model, and is emptied
    when it outgrows the messages of a few requests.
    """

    __slots__ = ("estimator", "model", "memo", "facts")

    def __init__(self, estimator: Any) -> None:
        self.estimator = estimator
        self.model: str | None = None
        self.memo: dict[int, tuple[Any, int]] = {}
        self.facts: MessageFacts | None = None

    def start(
        self, estimator: Any, model: str | None, request_len: int, facts: MessageFacts | None = None
    ) -> _MessageEstimates:
        """Ready for a request of ``request_len`` messages for ``model``. ``facts``: the
        session's facts for the same estimator and model, whose counts are taken where they
        describe the very message (the request's new messages were just counted there)."""
        if estimator is not self.estimator or model != self.model or len(self.memo) > 4 * request_len + 256:
            self.estimator = estimator
            self.memo.clear()
            self.model = model
        self.facts = facts
        return self

    def __call__(self, msg: Any, model: str | None = None) -> int:
        """The estimate of ``msg`` for the model of the request (``model`` is ignored: the
        estimator's signature)."""
        hit = self.memo.get(id(msg))
        if hit is None or hit[0] is not msg:
            tokens = self.facts.known_tokens(msg) if self.facts is not None else None
            if tokens is None:
                tokens = self.estimator.message_tokens(msg, self.model)
            hit = self.memo[id(msg)] = (msg, tokens)
        return hit[1]

    def total(self, msgs: Any, model: str | None = None) -> int:
        return sum(map(self, msgs))


@dataclass
class _SessionState:
    facts: MessageFacts
    references: Any
    ager: Any = None  # this session's own ager (a copy of the engine's TurnAger), or the shared one
    ager_source: Any = None  # the engine's ager it was made from (a later change is followed)
    facts_model: str | None = None  # the model the facts' token estimates are for
    # position -> (the aged copy there, its estimate): see _aged_history_tokens
    aged_tokens: dict[int, tuple[Any, int]] = field(default_factory=dict)
    # message object -> its estimate, for agers that change the number of messages
    estimates: _MessageEstimates | None = None
    provider_cache: _ProviderCache = field(default_factory=_ProviderCache)
    guard: _Guard = field(default_factory=_Guard)
    recommended: bool = False
    last_prep: TurnPrep | None = None
    system_tokens: int = 0
    tools_tokens: int = 0
    input_budget: int = 0
    # the prompt the provider last counted: (aged history as sent, system and tools
    # estimates, model); the next prepare estimates how its prefix has changed since
    counted: tuple[list[Any], int, int, str | None] | None = None
    # the provider messages last sent, their estimates and the model (see _fit_request)
    sent: tuple[list[dict], list[int], str | None] = ([], [], None)
    # after a compaction, until the next _fit_request: the last request's estimates by
    # message object, ({id: (provider message, tokens)}, model); its copies send the same
    # provider messages (_ProviderCache.after_compaction), at new positions
    sent_before: tuple[dict[int, tuple[dict, int]], str | None] | None = None
    # the cuts this session's requests were last sent with (fit.CarriedCuts), for the model
    fit_cuts: tuple[CarriedCuts, str | None] | None = None
    # one prepare/compact at a time per session: the caches above are extended in place
    lock: Any = field(default_factory=threading.RLock)


def rebased_on_counted(
    state: _SessionState,
    aged: list[dict],
    system: int,
    tools: int,
    model: str | None,
) -> tuple[list[dict], int] | None:
    """``(history, prefix delta)`` for the hybrid figure when the ager left messages out.

    A view of the last messages drops one from the front as one is appended, so the
    prompt the provider counted is no prefix of this one and the usage tracker's
    anchor (the last message it counted, at the same position) never matches: every
    request was estimated without what the provider counts and no transcript holds.
    The counted prompt plus what came after its last message, with the change of
    everything up to that message as the delta, gives the tracker the figure it
    gives an unchanged prefix: provider count + estimate now - estimate then. None
    when the counted prompt is not this engine's last request for ``model``, or its
    last message is not in this one. ``state.estimates`` is ready for this request.
    """
    counted = state.counted
    if counted is None or not counted[0] or state.estimates is None:
        return None
    sent, sent_system, sent_tools, sent_model = counted
    if sent_model != model:
        return None
    last = sent[-1]
    at = next((i for i in range(len(aged) - 1, -1, -1) if aged[i] is last or aged[i] == last), None)
    if at is None:
        return None
    estimate = state.estimates
    delta = (system - sent_system) + (tools - sent_tools) + estimate.total(aged[: at + 1]) - estimate.total(sent)
    return sent + aged[at + 1:], delta


def _agent_attr(agent: Any, name: str, default: Any = None) -> Any:
    if agent is None:
        return default
    if isinstance(agent, dict):
        return agent.get(name, default)
    return getattr(agent, name, default)


def _run_ager(
    ager: Any, history: list[dict], refmap: ReferenceMap
) -> tuple[list[dict], AgingReport]:
    """Run a TurnAger-like component on ``history`` with the reference map.

    Accepted shapes: a method ``age`` (else ``apply``, else the object called)
    taking ``(history, references)``, returning ``(aged_history, AgingReport)``,
    an object with ``history``/``messages`` and ``report`` attributes, or a bare
    list (no report).
    """
    fn = getattr(ager, "age", None) or getattr(ager, "apply", None) or ager
    if not callable(fn):
        raise EngineError(f"ager {type(ager).__name__} has no age(history, references) method")
    result = fn(history, refmap)
    if isinstance(result, tuple) and len(result) == 2:
        aged, report = result
    elif isinstance(result, list):
        aged, report = result, AgingReport()
    else:
        aged = getattr(result, "history", None) or getattr(result, "messages", None)
        report = getattr(result, "report", None)
        if aged is None:
            raise EngineError(
                f"ager {type(ager).__name__} returned {type(result).__name__}: expected (history, report)"
            )
    if not isinstance(report, AgingReport):
        report = AgingReport(
            redacted=int(getattr(report, "redacted", 0) or 0),
            tokens_freed=int(getattr(report, "tokens_freed", 0) or 0),
            references_protected=int(getattr(report, "references_protected", 0) or 0),
            redacted_ids=list(getattr(report, "redacted_ids", []) or []),
        )
    return list(aged), report


def _summary_id(history: Sequence[dict]) -> str | None:
    """Id of the active summary node: it sits right after the protected head."""
    for msg in history[:64]:
        if is_summary_message(msg):
            found = msg.get("id")
            break
    else:
        return None
    return found


def fit_for_session(
    state: _SessionState,
    estimator: Any,
    headroom: float,
    system_prompt: str,
    agent_messages: list[dict],
    tools: Sequence[dict] | None,
    system_tokens: int,
    tools_tokens: int,
    input_budget: int,
    model: str | None,
) -> FittedRequest:
    """The request as it will be sent, measured, and its oversized parts truncated when it
    exceeds the input budget (``opctx.context.fit``), with what ``state`` kept of the
    session's earlier requests.

    The provider messages are measured per position and remembered with the message
    object they were measured on: the assembly hands back the very dicts of messages that
    did not change (a changed message is a new dict), so after the first call only new or
    changed positions are estimated (an identity pass at C speed finds them). The cuts a
    request was sent with are kept for the next ones while they fit with them
    (``fit.CarriedCuts``; ``headroom`` is ``budget.fit_headroom``, 0: off)."""
    sent, sent_tokens, sent_model = state.sent
    if sent_model != model:
        sent, sent_tokens = [], []
    k = min(len(sent), len(agent_messages))
    tokens = sent_tokens[:k]
    estimate = estimator.message_tokens
    before = state.sent_before
    if before is not None and before[1] == model:
        # the first request after a compaction: its copies' provider messages are the
        # very objects the last request sent (at other positions), estimated already
        known = before[0]

        def estimate(m: dict, model: str | None, _est: Any = estimate) -> int:
            hit = known.get(id(m))
            return hit[1] if hit is not None and hit[0] is m else _est(m, model)

    state.sent_before = None
    for i in compress(range(k), map(operator.is_not, agent_messages, sent)):
        tokens[i] = estimate(agent_messages[i], model)
    tokens.extend(estimate(m, model) for m in agent_messages[k:])
    state.sent = (agent_messages, tokens, model)
    carried = None
    if headroom:
        if state.fit_cuts is None or state.fit_cuts[1] != model or state.fit_cuts[0].headroom != headroom:
            state.fit_cuts = (CarriedCuts(headroom), model)  # its sizes are the model's estimates
        carried = state.fit_cuts[0]
    return fit_request(
        system_prompt, agent_messages, tools, input_budget, model=model, estimator=estimator,
        system_tokens=system_tokens, tools_tokens=tools_tokens, message_tokens=tokens, carried=carried,
    )
