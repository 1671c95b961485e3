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
``compact`` (``_compaction.py``) is this sequence of steps, one method each:

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

import operator
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict
from itertools import compress
from typing import Any

from ._compaction import _CompactionSteps
from ._engine_state import (
    COMPACT_ATTEMPTS,
    EngineError,
    EventHandler,
    _agent_attr,
    _Guard,
    _run_ager,
    _session_id,
    _SessionState,
    _summary_id,
    emit,
    logger,
)
from .aging import TurnAger
from .anthropic_messages import thinking_retention
from .budget import BudgetAllocator
from .fit import ContextOverflowError, FittedRequest, fit_request
from .persistence import Persister
from .provider_messages import to_provider_messages
from .references import ReferenceTracker
from .summarize import MessageFacts, Summarizer, SummarizerConfig
from .tokens import Estimator, default_estimator, real_context_window
from .types import (
    AgingReport,
    CompactResult,
    ReferenceMap,
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
    "COMPACT_ATTEMPTS",
]

RECOMMEND_PCT = 0.70
AUTO_COMPACT_PCT = 0.80
EMERGENCY_PCT = 0.95


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


# --------------------------------------------------------------------------- default engine


class _ConfigDefault(float):
    """A threshold left at its default: the value in the engine's ``config`` applies.

    A ``float`` so that introspection (the lab's tuner reads ``__init__`` defaults)
    still sees the specification's number.
    """


class DefaultContextEngine(_CompactionSteps, ContextEngine):
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


def _default_ager(clock: Callable[[], float], estimator: Estimator) -> Any:
    return TurnAger(clock=clock, estimator=estimator)




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
