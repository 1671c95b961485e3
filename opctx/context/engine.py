"""The context engine: the life cycle of a session's context, and its plug-in registry (spec §5).

``ContextEngine`` is the abstract base with every hook of §5.1:

=====================================  =================================================
``on_session_start(session_id)``       once when a session is opened: warm caches
``ingest(session_id, message)``        a message was stored (default: nothing)
``prepare(agent, session, history,     before every LLM call: returns a ``TurnPrep``
model, tools)``
``should_recommend(prep)``             ``budget_pct >= recommend_pct`` (0.70)
``should_auto_compact(prep)``          ``budget_pct >= auto_compact_pct`` (0.80) and
                                       auto-compaction not disabled for the session
``compact(agent, session_id, model,    fold the branch into a summary; ``CompactResult``
on_event, previous_summary,
user_initiated, cancel_event,
keep_recent_tokens)``
``after_turn(session_id, usage,        feed the provider's real usage back; emit
prep, on_event)``                      ``compaction_recommended``
``on_session_end(session_id)``         flush in-memory state
=====================================  =================================================

``DefaultContextEngine`` wires the hooks to six components, all injected
keyword-only (§5.2): ``usage_tracker`` (UsageTracker), ``budget_allocator``
(BudgetAllocator), ``ager`` (TurnAger), ``summarizer`` (Summarizer),
``persister`` (Persister), ``references`` (a ReferenceTracker, or a factory of
them: references are tracked per session), plus ``session_db``, the thresholds
(``recommend_pct`` / ``auto_compact_pct`` / ``emergency_pct``; when not given they
come from ``config``: ``recommend_pct`` / ``trigger_pct`` / ``emergency_pct``,
0.70 / 0.80 / 0.95 by default), ``config`` (a ``SummarizerConfig``: the cut and
summary parameters), a ``context_window`` override, an ``estimator`` and a
``clock``. Swap one component to change one dimension of behaviour; tests pass a
fake summariser to run compaction without a provider. ``aging=False`` runs
without a ``TurnAger`` (the "none" strategy of the lab).

prepare (the six steps)
=======================
1. system prompt: ``build_system_prompt(agent)`` (a ``str`` agent is the prompt
   itself, ``None`` means none);
2. references: the session's ``ReferenceTracker.update(history)``, incremental;
3. aging: ``TurnAger`` on the history with the reference map, on copies;
4. usage: the provider's last prompt count plus an estimate of what was
   appended since (``UsageTracker.hybrid_estimate``) when the tracker trusts it
   (``"usage:provider"``), else a local estimate (``"usage:estimate"``) from the
   engine's incremental per-message table. Aging savings are subtracted from
   the estimate; the provider figure saw the prompt aged as it was then, so only
   what changed inside its prefix since (a result cleared or restored, a new
   system prompt or tool set) is estimated and added to it (``prefix_delta``);
5. budget: ``BudgetAllocator.allocate`` with the counts above;
6. assemble: OpenAI-format ``agent_messages`` from the aged history, with the
   tool pairing repaired (a call without its result, or a result without its
   call, is turned into text instead of being sent broken; see
   ``opctx.context.provider_messages``); fit: the request as it will be sent
   (system prompt, tools, ``agent_messages``) is measured, and when it exceeds
   the input budget its oversized parts are truncated around a marker
   (``opctx.context.fit``: ``TurnPrep.request_tokens``, ``truncated_parts``, and
   ``overflow`` when even that cannot make it fit; the store keeps the
   originals); decide. The figures and the decision are those of the history
   before truncating, so that compaction still sees what it has to fold.

``decision_path`` records each step, for example
``["usage:provider", "aging:redacted=3", "budget:0.82", "auto_compact"]``
(``"fit:truncated=N"`` / ``"fit:overflow"`` follow the budget entry when the
request had to be truncated / cannot fit).
The last entry is one of ``"ok"``, ``"recommend"``, ``"auto_compact"``,
``"emergency"`` (at or over ``emergency_pct``: compaction goes straight to the
structural summary) or ``"auto_compact_disabled"``.

Estimates are for the call's ``model``: its tokenizer and the calibration scale
of its family (``tokens.FAMILY_PROFILES``; Claude counts ~1.2x cl100k), everywhere:
messages, system prompt, tools, aged copies, the counted-prefix delta. The aged
history is counted as its aged copies, so whatever a placeholder replaced
(images inside a cleared result too) leaves the figure.

Incremental cost: per session the engine keeps a ``MessageFacts`` table (token
estimates and tool pairing per message, extended when the history only grew), its
own copy of the engine's ``TurnAger`` (an ager remembers a few histories; shared by
many sessions, every call would be a full pass; any other ager is shared as given),
a ``ReferenceTracker`` (extended likewise) and a ``_ProviderCache``
(provider_messages.py: conversions per message plus the assembled provider
messages and tool-pairing state of the last call, patched where aging replaced a
message). The ``TurnAger`` remembers its decisions too (aging.py, "Speed"). After the first call a prepare on an
append-only history costs O(new messages) plus a few C-speed passes (identity,
then equality, checks of the list). Only ``compact`` re-reads the branch from
the store. Every cache is exact for a message replaced by a new dict, including a
node updated under its id with the same content length (each cached entry is
checked against the message it came from); what no cache can see is a dict
mutated in place after it was passed in, so pass a new one.

compact
=======
``compact`` is this sequence of steps, one method each:

1. ``_measure_branch``: re-read the active branch (``session_db.get_branch``) and
   count ``tokens_before`` = system + tools + the history aged as ``prepare``
   would send it, all *estimates* (the guard below compares like with like:
   never a provider prompt count against a messages-only estimate, a Hermes
   pitfall; and ``tokens_after`` is the new branch aged as the next ``prepare``
   will age it, by a copy of the session's ager, so folding results aging
   already cleared is not mistaken for a saving); the emergency rule uses the
   same aged figure;
2. ``_plan_cut``: ``find_cut_index`` with ``max_tail_tokens = tail_budget_share``
   (0.5) of the input budget left after system and tools, so that on small
   windows the kept tail cannot eat the whole budget (the 8K case); nothing to
   cut ends the run (``_nothing_to_cut``);
3. ``_summarise_folded``: summarise the folded range (``history[head:cut]``):
   UPDATE when there is a previous summary (the argument, else the summary node
   being folded, which is what ``extra_meta["_last_summary_text"]`` holds for this
   branch; the store's copy is not trusted blindly because after a fork or rewind
   it may describe another branch), FRESH otherwise. Emergency (``budget_pct >=
   emergency_pct``) or no room for a summary call: the structural summary at once;
4. ``_predict_tokens_after``: the new branch as the next ``prepare`` will count
   it; a summary that would not shrink the input ends the run (``_no_shrink``);
5. ``_persist_summary`` (``Persister.insert_summary_node``), then count the
   compaction in the usage tracker. The write is one transaction whose HEAD move
   is a compare-and-set: messages another writer appended while the summary was
   being made are carried onto the new branch; when another writer switched the
   branch itself (``BranchChanged``: a concurrent compaction, a fork, a rewind)
   nothing is written and steps 1-5 run again on the branch as it is now
   (``_compact_branch``, up to ``COMPACT_ATTEMPTS`` times); an automatic
   compaction whose re-read branch is under the threshold stops there
   (``_compacted_elsewhere``);
6. ``_account_for_saving``: the low-saving guard, and the session's caches start
   afresh (the new branch has new ids);
7. ``_finish_compaction``: the duration and the ``compaction_finished`` event
   (every run ends here, written or not).

Guards (compaction must not loop: docs/design.md)
-------------------------------------------------
* nothing to cut, or a summary that would not shrink the input: nothing is
  written; for an automatic compaction, auto-compaction is disabled for the
  session;
* saved under ``min_saving`` (10%) twice in a row: auto-compaction is disabled.
The result (``disabled_auto=True``, ``error``) and the ``compaction_finished``
event say so. It does not latch forever: it re-arms when the history estimate
has grown by ``rearm_fraction`` (25%) of the input budget since it was
disabled, or at once on a manual compaction (``user_initiated=True``).

Events
======
``on_event(name, payload)`` receives ``compaction_recommended`` (after_turn at or
above ``recommend_pct``, once per crossing), ``compaction_started`` and
``compaction_finished`` (payload: the ``CompactResult`` as a dict plus
``session_id``). A failing event handler is logged, never raised.

Registry
========
``register_engine(engine)`` files an engine under ``engine.name``;
``get_engine(name)`` returns it (``None`` gives the default engine; an unknown
name raises ``EngineError`` listing the registered names: a misconfigured
engine must be visible, never silently replaced by the default, an OpenClaw
pitfall); ``resolve_engine_for(agent, config=None)``: ``agent.context_engine``,
else ``config["context"]["engine"]`` (dict or attribute access), else the
default. ``default_engine()`` is the lazily built shared ``DefaultContextEngine``.
"""

from __future__ import annotations

import copy
import logging
import operator
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import compress
from typing import Any

from .aging import TurnAger
from .anthropic_messages import thinking_retention
from .budget import BudgetAllocator
from .fit import ContextOverflowError, FittedRequest, fit_request
from .persistence import BranchChanged, Persister
from .prompts import SUMMARY_PREFIX
from .provider_messages import _ProviderCache, to_provider_messages
from .references import ReferenceTracker
from .summarize import (
    MessageFacts,
    Summarizer,
    SummarizerConfig,
    find_cut_index,
    is_summary_message,
)
from .tokens import Estimator, default_estimator, real_context_window
from .types import (
    AgingReport,
    BudgetAllocation,
    CompactResult,
    CutPoint,
    ReferenceMap,
    SummaryResult,
    TurnPrep,
)
from .usage import UsageTracker

__all__ = [
    "ContextEngine",
    "DefaultContextEngine",
    "EngineError",
    "ContextOverflowError",  # re-exported from .fit, its home
    "EventHandler",
    "CONTEXT_ENGINE_REGISTRY",
    "register_engine",
    "unregister_engine",
    "get_engine",
    "resolve_engine_for",
    "default_engine",
    "to_provider_messages",  # re-exported from .provider_messages, its home
    "RECOMMEND_PCT",
    "AUTO_COMPACT_PCT",
    "EMERGENCY_PCT",
]

logger = logging.getLogger(__name__)

RECOMMEND_PCT = 0.70
AUTO_COMPACT_PCT = 0.80
EMERGENCY_PCT = 0.95
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


# --------------------------------------------------------------------------- base class


class ContextEngine(ABC):
    """The hooks of §5.1. Subclasses implement ``prepare`` and ``compact``."""

    name: str = "abstract"
    recommend_pct: float = RECOMMEND_PCT
    auto_compact_pct: float = AUTO_COMPACT_PCT
    emergency_pct: float = EMERGENCY_PCT

    def on_session_start(self, session_id: str) -> None:
        """A session was opened or created."""
        return None

    def ingest(self, session_id: str, message: dict) -> None:
        """A message was stored. The default engine needs nothing here."""
        return None

    @abstractmethod
    def prepare(
        self,
        agent: Any,
        session: Any,
        history: Sequence[dict],
        model: str | None,
        tools: Sequence[dict] | None,
    ) -> TurnPrep:
        """Assemble what the next LLM call sees."""

    def should_recommend(self, prep: TurnPrep) -> bool:
        return prep.budget_pct >= self.recommend_pct

    def should_auto_compact(self, prep: TurnPrep) -> bool:
        if "auto_compact_disabled" in prep.decision_path:
            return False
        return prep.budget_pct >= self.auto_compact_pct

    @abstractmethod
    def compact(
        self,
        agent: Any,
        session_id: str,
        model: str | None,
        on_event: EventHandler | None = None,
        previous_summary: str | None = None,
        user_initiated: bool = False,
        cancel_event: threading.Event | None = None,
        keep_recent_tokens: int | None = None,
    ) -> CompactResult:
        """Fold part of the active branch into a summary."""

    def after_turn(
        self,
        session_id: str,
        usage: Any,
        prep: TurnPrep,
        on_event: EventHandler | None = None,
    ) -> None:
        """The LLM answered; ``usage`` is what the provider reported."""
        return None

    def on_session_end(self, session_id: str) -> None:
        """The session is being closed."""
        return None


# --------------------------------------------------------------------------- default engine


@dataclass
class _Guard:
    """Anti-thrash state of one session."""

    disabled: bool = False
    reason: str | None = None
    low_saving_streak: int = 0
    disabled_at_tokens: int = 0


@dataclass
class _SessionState:
    facts: MessageFacts
    references: Any
    ager: Any = None  # this session's own ager (a copy of the engine's TurnAger), or the shared one
    ager_source: Any = None  # the engine's ager it was made from (a later change is followed)
    facts_model: str | None = None  # the model the facts' token estimates are for
    # position -> (the aged copy there, its estimate): see _aged_history_tokens
    aged_tokens: dict[int, tuple[Any, int]] = field(default_factory=dict)
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
    # one prepare/compact at a time per session: the caches above are extended in place
    lock: Any = field(default_factory=threading.RLock)


@dataclass
class _BranchFigures:
    """The active branch as ``compact`` measured it: what the later steps work from.

    Every figure is an estimate of the prompt as ``prepare`` would send it (aged), so
    that before and after compare like with like.
    """

    history: list[dict]
    window: int
    system_tokens: int
    tools_tokens: int
    facts: MessageFacts
    table: Any  # facts.table(history)
    deltas: dict[int, int]  # position -> what aging changed there (see _aging_deltas)
    aged_history: int  # the history's tokens, aged
    budget: BudgetAllocation

    @property
    def tokens_before(self) -> int:
        return self.system_tokens + self.tools_tokens + self.aged_history

    @property
    def pct(self) -> float:
        return self.budget.input_used_pct


@dataclass
class _CompactRequest:
    """What one ``compact`` call was asked to do (kept for its retries)."""

    session_id: str
    db: Any
    agent: Any
    model: str | None
    tools: Sequence[dict] | None
    why: str
    trigger: str | None
    previous_summary: str | None
    keep_recent_tokens: int | None
    provider_call: Callable[..., Any] | None
    cancel_event: threading.Event | None


def _compaction_reason(reason: str | None, user_initiated: bool) -> str:
    """``auto``, ``manual`` or ``recovered``: the reason given, else by who asked."""
    why = reason or ("manual" if user_initiated else "auto")
    if why not in ("auto", "manual", "recovered"):
        raise ValueError(f"compaction reason must be auto, manual or recovered, got {why!r}")
    return why


def _result_fields(
    branch: _BranchFigures, cut: CutPoint, summary: SummaryResult, why: str
) -> dict[str, Any]:
    """The ``CompactResult`` fields a compaction that got a summary reports, written or not."""
    return dict(
        summary_text=summary.text,
        summarised_count=summary.summarised_count,
        summarised_tokens=summary.summarised_tokens,
        tokens_before=branch.tokens_before,
        used_previous_summary=summary.used_previous_summary,
        reason=why,
        fell_back_to_structural=summary.fell_back_to_structural,
        cut_index=cut.index,
        kept_count=len(branch.history) - cut.index + len(cut.pinned),
        protected_count=cut.protected_head,
    )


def _agent_attr(agent: Any, name: str, default: Any = None) -> Any:
    if agent is None:
        return default
    if isinstance(agent, dict):
        return agent.get(name, default)
    return getattr(agent, name, default)


class _ConfigDefault(float):
    """A threshold left at its default: the value in the engine's ``config`` applies.

    A ``float`` so that introspection (the lab's tuner reads ``__init__`` defaults)
    still sees the specification's number.
    """


class DefaultContextEngine(ContextEngine):
    """The specification's engine: the six components wired to the hooks (module docstring)."""

    def __init__(
        self,
        *,
        usage_tracker: UsageTracker | None = None,
        budget_allocator: BudgetAllocator | None = None,
        ager: Any = None,
        summarizer: Summarizer | None = None,
        persister: Persister | None = None,
        references: ReferenceTracker | Callable[[], Any] | None = None,
        session_db: Any = None,
        recommend_pct: float = _ConfigDefault(RECOMMEND_PCT),
        auto_compact_pct: float = _ConfigDefault(AUTO_COMPACT_PCT),
        emergency_pct: float = _ConfigDefault(EMERGENCY_PCT),
        context_window: int | None = None,
        clock: Callable[[], float] = time.time,
        config: SummarizerConfig | None = None,
        estimator: Estimator | None = None,
        name: str = "default",
        tail_budget_share: float = 0.5,
        min_saving: float = 0.10,
        rearm_fraction: float = 0.25,
        aging: bool = True,
    ):
        self.config = config or getattr(summarizer, "config", None) or SummarizerConfig()
        # thresholds not given here come from the config (recommend_pct, trigger_pct,
        # emergency_pct), whose defaults are the specification's 0.70 / 0.80 / 0.95
        if isinstance(recommend_pct, _ConfigDefault):
            recommend_pct = self.config.recommend_pct
        if isinstance(auto_compact_pct, _ConfigDefault):
            auto_compact_pct = self.config.trigger_pct
        if isinstance(emergency_pct, _ConfigDefault):
            emergency_pct = self.config.emergency_pct
        if not 0 < recommend_pct <= auto_compact_pct <= emergency_pct:
            raise ValueError(
                "thresholds must satisfy 0 < recommend_pct <= auto_compact_pct <= emergency_pct, got "
                f"{recommend_pct}, {auto_compact_pct}, {emergency_pct}"
            )
        if context_window is not None and (
            not isinstance(context_window, int) or context_window <= 0
        ):
            raise ValueError(
                f"context_window must be a positive int or None, got {context_window!r}"
            )
        if not 0 < tail_budget_share <= 1:
            raise ValueError(f"tail_budget_share must be in (0, 1], got {tail_budget_share!r}")
        self.name = name
        self.clock = clock
        self.session_db = session_db
        self.estimator = estimator or default_estimator()
        self.usage_tracker = usage_tracker or UsageTracker(
            session_db, clock=clock, estimator=self.estimator
        )
        self.budget_allocator = budget_allocator or BudgetAllocator(estimator=self.estimator)
        self.ager = (
            ager if ager is not None else (_default_ager(clock, self.estimator) if aging else None)
        )
        self.summarizer = summarizer or Summarizer(None, config=self.config)
        self.persister = persister or Persister(session_db, clock=clock)
        self._references = references
        self.recommend_pct = recommend_pct
        self.auto_compact_pct = auto_compact_pct
        self.emergency_pct = emergency_pct
        self.context_window = context_window
        self.tail_budget_share = tail_budget_share
        self.min_saving = min_saving
        self.rearm_fraction = rearm_fraction
        self._sessions: dict[str, _SessionState] = {}
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ state
    def _estimate(self, msg: dict, model: str | None = None) -> int:
        return self.estimator.message_tokens(msg, model)

    def _facts(self, state: _SessionState, model: str | None) -> MessageFacts:
        """The session's per-message facts, estimated for ``model`` (its tokenizer and scale)."""
        if state.facts_model != model:
            state.facts = MessageFacts(lambda msg: self.estimator.message_tokens(msg, model))
            state.facts_model = model
            state.aged_tokens.clear()
        return state.facts

    def _session_ager(self, state: _SessionState) -> Any:
        """The session's ager, following ``self.ager`` (replaced, or its settings changed).

        A TurnAger remembers the histories it has seen (a few at a time): shared by
        more sessions than that, every call would be a full pass, one session at a
        time behind its lock. Each session gets its own copy (same settings, same
        estimator cache); any other ager is shared as given.
        """
        source = self.ager
        own = state.ager
        if state.ager_source is not source or (
            isinstance(source, TurnAger)
            and (own._signature() != source._signature() or own.clock is not source.clock)
        ):
            own = source.copy() if isinstance(source, TurnAger) else source
            state.ager, state.ager_source = own, source
        return own

    def _new_references(self) -> Any:
        refs = self._references
        if refs is None:
            return ReferenceTracker(clock=self.clock)
        if isinstance(refs, ReferenceTracker) or hasattr(refs, "update"):
            return refs  # one shared tracker: it rebuilds when the session changes
        return refs()

    def _state(self, session_id: str) -> _SessionState:
        with self._lock:
            state = self._sessions.get(session_id)
            if state is None:
                state = _SessionState(
                    facts=MessageFacts(self._estimate), references=self._new_references()
                )
                self._sessions[session_id] = state
            return state

    def window_for(self, model: str | None) -> int:
        return self.context_window or real_context_window(model)

    def guard_state(self, session_id: str) -> dict:
        """The anti-thrash state of a session (for UIs and tests)."""
        return asdict(self._state(session_id).guard)

    # ------------------------------------------------------------------ hooks
    def on_session_start(self, session_id: str) -> None:
        self.usage_tracker.on_session_start(session_id)
        self._state(session_id)

    def on_session_end(self, session_id: str) -> None:
        self.usage_tracker.on_session_end(session_id)
        with self._lock:
            self._sessions.pop(session_id, None)

    def system_prompt_for(self, agent: Any) -> str:
        if agent is None:
            return ""
        if isinstance(agent, str):
            return agent
        try:
            from .system_prompt import build_system_prompt
        except ImportError:  # pragma: no cover - the module ships with opctx
            return str(_agent_attr(agent, "system_prompt", "") or "")
        return build_system_prompt(agent)

    def prepare(
        self,
        agent: Any,
        session: Any,
        history: Sequence[dict],
        model: str | None,
        tools: Sequence[dict] | None,
    ) -> TurnPrep:
        sid = _session_id(session)
        state = self._state(sid)
        with state.lock:
            history = list(history)
            path: list[str] = []
            window = self.window_for(model)
            # 1. system prompt
            system_prompt = self.system_prompt_for(agent)
            # 2. references (incremental on an append-only history)
            refmap = (
                state.references.update(history)
                if history
                else ReferenceMap(last_built_at=self.clock())
            )
            # 3. aging, on copies
            aged, report = self._age(state, history, refmap)
            # 4. usage: provider prefix + appended estimate, or the local estimate
            table = self._facts(state, model).table(history)
            usage_state = self.usage_tracker.get(sid)
            raw_system = (
                self.estimator.message_tokens({"role": "system", "content": system_prompt}, model)
                if system_prompt
                else 0
            )
            raw_tools = self.estimator.tools_tokens(list(tools), model) if tools else 0
            system_tokens, tools_tokens = raw_system, raw_tools
            aged_estimate = self._aged_history_tokens(state, history, aged, table, model)
            history_tokens = aged_estimate
            source = "estimate"
            delta = (
                self._counted_prefix_delta(
                    state, aged, usage_state.last_history_len, raw_system, raw_tools, model
                )
                if usage_state.source == "provider"
                and 0 < usage_state.last_history_len <= len(history)
                else None
            )
            if delta is not None:
                hybrid = self.usage_tracker.hybrid_estimate(
                    sid, aged, system_prompt, tools, model, prefix_delta=delta
                )
                if hybrid.source == "provider":
                    source = "provider"
                    system_tokens, tools_tokens, history_tokens = (
                        hybrid.system,
                        hybrid.tools,
                        hybrid.history,
                    )
            path.append(f"usage:{source}")
            path.append(f"aging:redacted={report.redacted}")
            # 5. budget
            budget = self.budget_allocator.allocate(
                window, system_tokens, history_tokens, tools_tokens, model
            )
            pct = budget.input_used_pct
            path.append(f"budget:{pct:.2f}")
            # 6. assemble, fit into the window, and decide
            agent_messages = to_provider_messages(aged, state.provider_cache)
            fitted = self._fit_request(
                state, system_prompt, agent_messages, tools, raw_system, raw_tools,
                budget.input_budget, model,
            )
            if fitted.truncated:
                path.append(f"fit:truncated={fitted.truncated}")
            if not fitted.fits:
                path.append("fit:overflow")
            # aged, like the figure compact disabled it at
            self._maybe_rearm(state, aged_estimate, budget.input_budget)
            guard = state.guard
            if pct >= self.auto_compact_pct and guard.disabled:
                path.append("auto_compact_disabled")
            elif pct >= self.emergency_pct:
                path.append("emergency")
            elif pct >= self.auto_compact_pct:
                path.append("auto_compact")
            elif pct >= self.recommend_pct:
                path.append("recommend")
            else:
                path.append("ok")
            prep = TurnPrep(
                system_prompt=fitted.system_prompt,
                agent_messages=fitted.messages,
                history_dicts=aged,
                budget=budget,
                usage=usage_state,
                tool_results_redacted=report.redacted,
                tokens_freed_by_aging=report.tokens_freed,
                references_protected=report.references_protected,
                summary_id=_summary_id(history),
                decision_path=path,
                budget_pct=pct,
                context_window=window,
                request_tokens=fitted.tokens,
                truncated_parts=fitted.truncated,
                overflow=fitted.overflow,
            )
            with self._lock:
                state.last_prep = prep
                state.system_tokens, state.tools_tokens = raw_system, raw_tools
                state.input_budget = budget.input_budget
            return prep

    def _fit_request(
        self,
        state: _SessionState,
        system_prompt: str,
        agent_messages: list[dict],
        tools: Sequence[dict] | None,
        system_tokens: int,
        tools_tokens: int,
        input_budget: int,
        model: str | None,
    ) -> FittedRequest:
        """Step 6b: the request as it will be sent, measured, and its oversized parts
        truncated when it exceeds the input budget (``opctx.context.fit``).

        The provider messages are measured per position and remembered with the
        message object they were measured on: the assembly hands back the very dicts
        of messages that did not change (a changed message is a new dict), so after
        the first call only new or changed positions are estimated (an identity pass
        at C speed finds them)."""
        sent, sent_tokens, sent_model = state.sent
        if sent_model != model:
            sent, sent_tokens = [], []
        k = min(len(sent), len(agent_messages))
        tokens = sent_tokens[:k]
        estimate = self.estimator.message_tokens
        for i in compress(range(k), map(operator.is_not, agent_messages, sent)):
            tokens[i] = estimate(agent_messages[i], model)
        tokens.extend(estimate(m, model) for m in agent_messages[k:])
        state.sent = (agent_messages, tokens, model)
        return fit_request(
            system_prompt,
            agent_messages,
            tools,
            input_budget,
            model=model,
            estimator=self.estimator,
            system_tokens=system_tokens,
            tools_tokens=tools_tokens,
            message_tokens=tokens,
        )

    def _counted_prefix_delta(
        self,
        state: _SessionState,
        aged: list[dict],
        covered: int,
        system: int,
        tools: int,
        model: str | None,
    ) -> int | None:
        """Estimated change of the provider-counted prefix since it was sent (None: the
        provider figure is for another model and is not used).

        Aging goes on after the provider counted a prompt: a result inside the counted
        prefix may be cleared now (or restored, when a new message cites it), and the
        system prompt or tool set may have changed. The provider figure still counts
        them as they were, so the difference is estimated here, message by message where
        the aged copy differs from the one sent (C-speed identity, then equality, checks).
        """
        counted = state.counted
        if counted is None or len(counted[0]) != covered:
            return 0  # the recorded usage is not for a prompt this engine prepared
        sent, sent_system, sent_tools, sent_model = counted
        if sent_model != model:
            # counted for another model: its tokenizer differs, no estimate of the
            # difference is trustworthy; the whole prompt is estimated instead
            return None
        delta = (system - sent_system) + (tools - sent_tools)
        now = aged[:covered]
        if not all(map(operator.is_, now, sent)):
            estimate = self.estimator.message_tokens
            for i in compress(range(covered), map(operator.ne, now, sent)):
                delta += estimate(now[i], model) - estimate(sent[i], model)
        return delta

    def _aged_history_tokens(
        self,
        state: _SessionState,
        history: list[dict],
        aged: list[dict],
        table: Any,
        model: str | None,
    ) -> int:
        """Estimate of the aged history: the table's total, with each message aging
        replaced counted as its aged copy (see :meth:`_aging_deltas`)."""
        deltas = self._aging_deltas(state, history, aged, table, model)
        if deltas is None:  # an ager that changed the number of messages
            return sum(self.estimator.message_tokens(m, model) for m in aged)
        return max(0, table.counted_tokens(thinking_retention(model)) + sum(deltas.values()))

    def _predicted_aged_tokens(
        self, state: _SessionState, layout: list[dict], model: str | None
    ) -> int | None:
        """Estimate of the history ``layout`` (a compaction's new branch) as the next
        ``prepare`` will send it: aged by a copy of the session's ager, which sees the
        new branch afresh (its first messages are protected, its references are its
        own). None when the ager cannot be copied."""
        ager = self._session_ager(state)
        estimate = self.estimator.message_tokens
        if ager is not None:
            try:
                probe = copy.deepcopy(ager)
            except Exception:  # a custom ager holding something uncopyable
                return None
            tracker = ReferenceTracker(clock=self.clock)
            layout, _ = _run_ager(probe, layout, tracker.build(layout))
        # counted like the branch before it (display-only lines, thinking the model drops)
        table = MessageFacts(lambda m: estimate(m, model)).table(layout)
        return table.counted_tokens(thinking_retention(model))

    def _aging_deltas(
        self,
        state: _SessionState,
        history: list[dict],
        aged: list[dict],
        table: Any,
        model: str | None,
    ) -> dict[int, int] | None:
        """Per position aging changed: its aged copy's estimate minus the original's.

        Counting the copies (not subtracting the ager's ``tokens_freed``) keeps one
        estimator and one scale for the whole figure, and sees everything a
        placeholder replaced: images inside a cleared result too. An ager hands back
        the messages it did not touch as the very objects it was given, so the copies
        are found by identity at C speed (an equal copy counts as untouched). Their
        estimates are remembered by position, and reused while the copy there is the
        same or an equal one (the branch re-read from the store gets new, equal aged
        copies), so the cache never outgrows the history. None when the ager changed
        the number of messages (positions do not line up).
        """
        if aged is history:
            return {}
        if len(aged) != len(history):
            return None
        estimate = self.estimator.message_tokens
        cache = state.aged_tokens
        deltas: dict[int, int] = {}
        for i in compress(range(len(history)), map(operator.is_not, aged, history)):
            copy_ = aged[i]
            if copy_ == history[i]:
                continue
            hit = cache.get(i)
            if hit is None or not (hit[0] is copy_ or hit[0] == copy_):
                hit = cache[i] = (copy_, estimate(copy_, model))
            deltas[i] = hit[1] - table.tokens_at(i)
        return deltas

    def _age(
        self, state: _SessionState, history: list[dict], refmap: ReferenceMap
    ) -> tuple[list[dict], AgingReport]:
        ager = self._session_ager(state)
        if ager is None or not history:
            return history, AgingReport()
        return _run_ager(ager, history, refmap)

    def _maybe_rearm(self, state: _SessionState, history_tokens: int, input_budget: int) -> None:
        guard = state.guard
        if (
            guard.disabled
            and history_tokens >= guard.disabled_at_tokens + self.rearm_fraction * input_budget
        ):
            logger.info(
                "context engine: re-enabling auto-compaction (history grew since it was disabled)"
            )
            state.guard = _Guard()

    def after_turn(
        self,
        session_id: str,
        usage: Any,
        prep: TurnPrep,
        on_event: EventHandler | None = None,
    ) -> None:
        history = prep.history_dicts
        anchor = history[-1].get("id") if history else None
        new_state = self.usage_tracker.record(session_id, usage, len(history), anchor_id=anchor)
        state = self._state(session_id)
        with state.lock:
            if usage is not None:
                if state.last_prep is prep:
                    state.counted = (
                        history, state.system_tokens, state.tools_tokens, state.facts_model
                    )
                else:  # a prep this engine did not just make: no baseline to compare with
                    state.counted = None
            budget = prep.budget.input_budget or 1
            pct = prep.budget_pct
            if (
                usage is not None
                and new_state.source == "provider"
                and new_state.last_prompt_tokens
            ):
                pct = new_state.last_prompt_tokens / budget
            if pct >= self.recommend_pct:
                if not state.recommended:
                    state.recommended = True
                    emit(
                        on_event,
                        "compaction_recommended",
                        {
                            "session_id": session_id,
                            "budget_pct": pct,
                            "threshold": self.recommend_pct,
                            "auto_compact_disabled": state.guard.disabled,
                            "reason": state.guard.reason,
                        },
                    )
            else:
                state.recommended = False

    # ------------------------------------------------------------------ compaction
    def compact(
        self,
        agent: Any,
        session_id: str,
        model: str | None,
        on_event: EventHandler | None = None,
        previous_summary: str | None = None,
        user_initiated: bool = False,
        cancel_event: threading.Event | None = None,
        keep_recent_tokens: int | None = None,
        *,
        tools: Sequence[dict] | None = None,
        reason: str | None = None,
        trigger: str | None = None,
        session_db: Any = None,
        provider_call: Callable[..., Any] | None = None,
    ) -> CompactResult:
        started = time.perf_counter()
        why = _compaction_reason(reason, user_initiated)
        db = self._compaction_db(session_db)
        state = self._state(session_id)
        with state.lock:
            if user_initiated and state.guard.disabled:
                state.guard = _Guard()  # a manual compaction re-arms auto-compaction
            emit(
                on_event,
                "compaction_started",
                {"session_id": session_id, "reason": why, "trigger": trigger},
            )

            def finish(result: CompactResult) -> CompactResult:
                return self._finish_compaction(result, session_id, started, on_event)

            request = _CompactRequest(
                session_id, db, agent, model, tools, why, trigger, previous_summary,
                keep_recent_tokens, provider_call, cancel_event,
            )
            conflict: BranchChanged | None = None
            for attempt in range(1, COMPACT_ATTEMPTS + 1):
                try:
                    return finish(self._compact_branch(state, request, retry=attempt > 1))
                except BranchChanged as exc:
                    # another compaction (or a fork, a rewind) switched the branch
                    # while this one summarised: nothing was written; read it again
                    logger.info("context engine %r: %s (attempt %d)", self.name, exc, attempt)
                    conflict = exc
            return finish(
                CompactResult(
                    ok=False,
                    reason=why,
                    error=f"{conflict}; gave up after {COMPACT_ATTEMPTS} attempts",
                )
            )

    def _compact_branch(
        self, state: _SessionState, run: _CompactRequest, *, retry: bool
    ) -> CompactResult:
        """Steps 1-6 on the branch as it is now; raises ``BranchChanged`` when another
        writer switched the branch before this one was written (nothing written). On a
        retry, an automatic compaction first checks it is still needed."""
        why = run.why
        branch = self._measure_branch(
            state, run.db, run.session_id, run.agent, run.model, run.tools
        )
        if retry and why == "auto" and branch.pct < self.auto_compact_pct:
            return self._compacted_elsewhere(why, branch)
        cut = self._plan_cut(branch, run.keep_recent_tokens)
        if not cut.ok:
            return self._nothing_to_cut(state, why, branch, cut)
        summary = self._summarise_folded(
            branch, cut, run.previous_summary, run.model, run.provider_call, run.cancel_event
        )
        tokens_after, summary_tokens = self._predict_tokens_after(
            state, branch, cut, summary, run.model
        )
        fields = _result_fields(branch, cut, summary, why)
        if tokens_after >= branch.tokens_before:
            return self._no_shrink(state, why, branch, summary_tokens, tokens_after, fields)
        persisted = self._persist_summary(
            run.session_id, run.db, branch, cut, summary, why, run.trigger, tokens_after
        )
        self.usage_tracker.record_compaction(run.session_id)
        error, disabled = self._account_for_saving(
            state, why, branch, tokens_after, summary.error
        )
        carried = getattr(persisted, "carried_ids", None) or []
        if carried:
            fields["kept_count"] += len(carried)
        return CompactResult(
            ok=True,
            summary_id=persisted.summary_id,
            tokens_after=tokens_after,
            error=error,
            new_head_id=persisted.new_head_id,
            disabled_auto=disabled,
            **fields,
        )

    def _compacted_elsewhere(self, why: str, branch: _BranchFigures) -> CompactResult:
        """An automatic compaction that lost the race to another writer's: the branch it
        reads now is under the threshold, so it ends without writing (guard untouched)."""
        return CompactResult(
            ok=False,
            reason=why,
            error=(
                "the branch was compacted by another writer meanwhile and is now at "
                f"{branch.pct:.0%} of the budget; nothing more to do"
            ),
            tokens_before=branch.tokens_before,
            tokens_after=branch.tokens_before,
        )

    def _compaction_db(self, session_db: Any) -> Any:
        """The store ``compact`` reads and writes: the argument, else the engine's own."""
        db = session_db if session_db is not None else self.session_db
        if db is None:
            raise EngineError(
                f"context engine {self.name!r} has no session_db: pass session_db=... to compact"
            )
        return db

    def _measure_branch(
        self,
        state: _SessionState,
        db: Any,
        session_id: str,
        agent: Any,
        model: str | None,
        tools: Sequence[dict] | None,
    ) -> _BranchFigures:
        """Step 1: re-read the active branch and count it as ``prepare`` would send it.

        The system prompt is rebuilt when an agent is given (or no prepare ran yet),
        else the last prepare's estimate is reused; the same for the tools.
        """
        history = db.get_branch(session_id)
        window = self.window_for(model)
        system_prompt = (
            self.system_prompt_for(agent)
            if agent is not None or state.last_prep is None
            else None
        )
        if system_prompt is not None:
            system_tokens = (
                self.estimator.message_tokens(
                    {"role": "system", "content": system_prompt}, model
                )
                if system_prompt
                else 0
            )
        else:
            system_tokens = state.system_tokens
        tools_tokens = (
            self.estimator.tools_tokens(list(tools), model) if tools else state.tools_tokens
        )
        facts = self._facts(state, model)
        table = facts.table(history)
        # measured on the prompt as prepare sends it, aged: a history whose old results
        # aging already cleared is no emergency, and folding results that are already
        # placeholders saves less than their stored size
        refmap = state.references.update(history) if history else ReferenceMap()
        aged, _ = self._age(state, history, refmap)
        deltas = self._aging_deltas(state, history, aged, table, model)
        if deltas is None:  # an ager that changed the message count: no positions
            deltas = {}
        aged_history = max(0, table.counted_tokens(thinking_retention(model)) + sum(deltas.values()))
        budget = self.budget_allocator.allocate(
            window, system_tokens, aged_history, tools_tokens, model
        )
        return _BranchFigures(
            history=history,
            window=window,
            system_tokens=system_tokens,
            tools_tokens=tools_tokens,
            facts=facts,
            table=table,
            deltas=deltas,
            aged_history=aged_history,
            budget=budget,
        )

    def _plan_cut(self, branch: _BranchFigures, keep_recent_tokens: int | None) -> CutPoint:
        """Step 2: where to cut. The kept tail may use at most ``tail_budget_share`` of the
        input budget left after system and tools (unless ``keep_recent_tokens`` is given),
        so that on a small window the tail cannot eat the whole budget."""
        room = max(1, branch.budget.input_budget - branch.system_tokens - branch.tools_tokens)
        max_tail = (
            None
            if keep_recent_tokens is not None
            else max(1, int(room * self.tail_budget_share))
        )
        return find_cut_index(
            branch.history,
            branch.window,
            self.config,
            keep_recent_tokens,
            facts=branch.facts,
            max_tail_tokens=max_tail,
        )

    def _nothing_to_cut(
        self, state: _SessionState, why: str, branch: _BranchFigures, cut: CutPoint
    ) -> CompactResult:
        """No cut possible: nothing is written; an automatic run disables auto-compaction."""
        disabled = self._no_progress(
            state, why, branch.aged_history, f"no compaction possible: {cut.reason}"
        )
        return CompactResult(
            ok=False,
            reason=why,
            error=cut.reason,
            tokens_before=branch.tokens_before,
            tokens_after=branch.tokens_before,
            cut_index=None,
            protected_count=cut.protected_head,
            disabled_auto=disabled,
        )

    def _summarise_folded(
        self,
        branch: _BranchFigures,
        cut: CutPoint,
        previous_summary: str | None,
        model: str | None,
        provider_call: Callable[..., Any] | None,
        cancel_event: threading.Event | None,
    ) -> SummaryResult:
        """Step 3: summarise ``history[head:cut]`` (pinned requests excepted).

        UPDATE from the previous summary (the argument, else the summary node being
        folded), FRESH otherwise; the structural summary at once in an emergency
        (``budget_pct >= emergency_pct``). The summariser falls back to the structural
        summary by itself when the LLM call fails.
        """
        history, head_n, cut_idx, pinned = branch.history, cut.protected_head, cut.index, cut.pinned
        # a pinned request (CutPoint.pinned) is kept verbatim after the summary
        folded = [m for i, m in enumerate(history[head_n:cut_idx], head_n) if i not in pinned]
        if previous_summary is None:
            previous_summary = _latest_summary_text(folded)
        pct, window = branch.pct, branch.window
        force = None
        if pct >= self.emergency_pct:
            force = (
                f"Emergency: input at {pct:.0%} of the budget (>= {self.emergency_pct:.0%}); "
                "no room for an LLM summary call"
            )
        output_room = min(self.config.summary_output_tokens, window // 4)
        max_prompt = window - output_room
        summarizer = self.summarizer
        if getattr(summarizer, "provider_call", True) is None and provider_call is not None:
            # no summariser provider configured: summarise with the agent's own provider
            summarizer = Summarizer(
                provider_call, model, self.config, count_tokens=summarizer.count_tokens
            )
        return summarizer.summarise(
            folded,
            previous_summary,
            cancel_event,
            None,
            max_prompt_tokens=max_prompt,
            force_structural=force,
            estimate=branch.facts.tokens,
        )

    def _predict_tokens_after(
        self,
        state: _SessionState,
        branch: _BranchFigures,
        cut: CutPoint,
        summary: SummaryResult,
        model: str | None,
    ) -> tuple[int, int]:
        """Step 4: ``(tokens_after, summary_tokens)``: the new branch (head, summary,
        pinned requests, tail) as the next ``prepare`` will send it, aged by a copy of
        the session's ager; with an ager that cannot be copied, each kept message
        counts as it is aged now."""
        history, head_n, cut_idx, pinned = branch.history, cut.protected_head, cut.index, cut.pinned
        table = branch.table
        summary_msg = {"role": "system", "content": f"{SUMMARY_PREFIX}\n{summary.text}"}
        summary_tokens = self._estimate(summary_msg, model)
        layout = (
            history[:head_n]
            + [summary_msg]
            + [history[i] for i in sorted(pinned)]
            + history[cut_idx:]
        )
        predicted = self._predicted_aged_tokens(state, layout, model)
        if predicted is None:  # an ager that cannot be tried on a copy: keep aged as now
            kept = lambda i: i < head_n or i >= cut_idx or i in pinned  # noqa: E731
            predicted = (
                table.prefix_tokens[head_n]
                + summary_tokens
                + table.tail_tokens(cut_idx)
                + sum(table.tokens_at(i) for i in pinned)
                + sum(d for i, d in branch.deltas.items() if kept(i))
            )
        return branch.system_tokens + branch.tools_tokens + predicted, summary_tokens

    def _no_shrink(
        self,
        state: _SessionState,
        why: str,
        branch: _BranchFigures,
        summary_tokens: int,
        tokens_after: int,
        fields: dict[str, Any],
    ) -> CompactResult:
        """The summary would not shrink the input: nothing is written (guard as for no cut)."""
        tokens_before = branch.tokens_before
        msg = (
            f"no progress: the summary ({summary_tokens} tokens) would not shrink the input "
            f"({tokens_before} -> {tokens_after} tokens); nothing was written"
        )
        disabled = self._no_progress(state, why, branch.aged_history, msg)
        return CompactResult(
            ok=False,
            tokens_after=tokens_before,
            error=msg,
            disabled_auto=disabled,
            **{**fields, "summary_text": ""},
        )

    def _persist_summary(
        self,
        session_id: str,
        db: Any,
        branch: _BranchFigures,
        cut: CutPoint,
        summary: SummaryResult,
        why: str,
        trigger: str | None,
        tokens_after: int,
    ) -> Any:
        """Step 5: write the summary node and the new branch (``Persister.insert_summary_node``)."""
        pinned = cut.pinned
        return self.persister.insert_summary_node(
            session_id,
            summary.text,
            cut.index,
            branch.history,
            cut.protected_head,
            reason=why,
            trigger=trigger,
            pre_tokens=branch.tokens_before,
            tokens_after=tokens_after,
            fell_back_to_structural=summary.fell_back_to_structural,
            session_db=db,
            **({"pinned": pinned} if pinned else {}),  # custom persisters predate pinning
        )

    def _account_for_saving(
        self,
        state: _SessionState,
        why: str,
        branch: _BranchFigures,
        tokens_after: int,
        error: str | None,
    ) -> tuple[str | None, bool]:
        """Step 6, after a written compaction: ``(error, disabled_auto)``.

        Two automatic compactions in a row that saved under ``min_saving`` disable
        auto-compaction (the message is added to ``error``); the session's caches
        start afresh, since the new branch has new ids.
        """
        tokens_before = branch.tokens_before
        saved = (tokens_before - tokens_after) / tokens_before if tokens_before else 0.0
        disabled = False
        with self._lock:
            guard = state.guard
            if saved < self.min_saving:
                guard.low_saving_streak += 1
                if guard.low_saving_streak >= 2 and why != "manual":
                    msg = (
                        f"auto-compaction disabled: two compactions in a row saved under "
                        f"{self.min_saving:.0%} ({saved:.1%} this time)"
                    )
                    self._disable(
                        state, msg, tokens_after - branch.system_tokens - branch.tools_tokens
                    )
                    disabled = True
                    error = f"{error}; {msg}" if error else msg
            else:
                guard.low_saving_streak = 0
            self._forget_branch_caches(state)
        return error, disabled

    def _forget_branch_caches(self, state: _SessionState) -> None:
        """The per-session caches of a branch that compaction replaced (new ids)."""
        state.facts, state.facts_model = MessageFacts(self._estimate), None
        state.aged_tokens.clear()
        state.references = self._new_references()
        state.provider_cache = _ProviderCache()
        state.counted = None
        state.sent = ([], [], None)
        state.recommended = False

    def _finish_compaction(
        self,
        result: CompactResult,
        session_id: str,
        started: float,
        on_event: EventHandler | None,
    ) -> CompactResult:
        """Step 7: time the compaction, emit ``compaction_finished``, log a run that did not happen."""
        result.duration_ms = (time.perf_counter() - started) * 1000
        emit(on_event, "compaction_finished", {"session_id": session_id, **asdict(result)})
        if result.error and not result.ok:
            logger.info(
                "context engine %r: compaction of %s did not run: %s",
                self.name,
                session_id,
                result.error,
            )
        return result

    def _disable(self, state: _SessionState, reason: str, history_tokens: int) -> None:
        state.guard.disabled = True
        state.guard.reason = reason
        state.guard.disabled_at_tokens = history_tokens
        logger.warning("context engine %r: %s", self.name, reason)

    def _no_progress(
        self, state: _SessionState, why: str, history_tokens: int, reason: str
    ) -> bool:
        """A compaction that could not shrink anything: disable auto-compaction (auto runs only)."""
        if why == "manual":
            return False
        with self._lock:
            self._disable(state, f"auto-compaction disabled: {reason}", history_tokens)
        return True


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


def _default_ager(clock: Callable[[], float], estimator: Estimator) -> Any:
    return TurnAger(clock=clock, estimator=estimator)


def _summary_id(history: Sequence[dict]) -> str | None:
    """Id of the active summary node: it sits right after the protected head."""
    for msg in history[:64]:
        if is_summary_message(msg):
            found = msg.get("id")
            break
    else:
        return None
    return found


def _latest_summary_text(messages: Sequence[dict]) -> str | None:
    for msg in reversed(messages):
        if is_summary_message(msg):
            text = msg.get("content")
            if isinstance(text, str):
                return (
                    text[len(SUMMARY_PREFIX) :].lstrip("\n")
                    if text.startswith(SUMMARY_PREFIX)
                    else text
                )
    return None


# --------------------------------------------------------------------------- registry

CONTEXT_ENGINE_REGISTRY: dict[str, ContextEngine] = {}
_registry_lock = threading.Lock()
_default: DefaultContextEngine | None = None


def register_engine(engine: ContextEngine, *, replace: bool = False) -> ContextEngine:
    """File ``engine`` under ``engine.name``. A different engine under a taken name needs ``replace=True``."""
    if not isinstance(engine, ContextEngine):
        raise TypeError(f"register_engine expects a ContextEngine, got {type(engine).__name__}")
    name = getattr(engine, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise ValueError("a context engine needs a non-empty str name to be registered")
    with _registry_lock:
        current = CONTEXT_ENGINE_REGISTRY.get(name)
        if current is not None and current is not engine and not replace:
            raise ValueError(
                f"a context engine named {name!r} is already registered (pass replace=True)"
            )
        CONTEXT_ENGINE_REGISTRY[name] = engine
    return engine


def unregister_engine(name: str) -> bool:
    with _registry_lock:
        return CONTEXT_ENGINE_REGISTRY.pop(name, None) is not None


def default_engine() -> DefaultContextEngine:
    """The shared default engine (no session_db: give one to ``compact`` users via their own engine)."""
    global _default
    with _registry_lock:
        if _default is None:
            _default = DefaultContextEngine()
        engine = _default
    if "default" not in CONTEXT_ENGINE_REGISTRY:
        register_engine(engine)
    return engine


def get_engine(name: str | None = None) -> ContextEngine:
    """The engine registered as ``name``; ``None`` or ``"default"`` gives the default engine."""
    if name is None or (name == "default" and "default" not in CONTEXT_ENGINE_REGISTRY):
        return default_engine()
    engine = CONTEXT_ENGINE_REGISTRY.get(name)
    if engine is None:
        known = ", ".join(sorted(set(CONTEXT_ENGINE_REGISTRY) | {"default"}))
        raise EngineError(f"unknown context engine {name!r}; registered engines: {known}")
    return engine


def _config_engine_name(config: Any) -> str | None:
    if config is None:
        return None
    context = (
        config.get("context") if isinstance(config, dict) else getattr(config, "context", None)
    )
    if context is None:
        return None
    name = context.get("engine") if isinstance(context, dict) else getattr(context, "engine", None)
    return name or None


def resolve_engine_for(agent: Any, config: Any = None) -> ContextEngine:
    """``agent.context_engine`` -> ``config.context.engine`` -> the default engine.

    A name that is set but unknown raises ``EngineError``: it is never quietly
    replaced by the default.
    """
    name = _agent_attr(agent, "context_engine")
    if isinstance(name, ContextEngine):
        return name
    if name:
        return get_engine(str(name))
    name = _config_engine_name(config)
    if name:
        return get_engine(str(name))
    return default_engine()
