"""The context engine: the life cycle of a session's context, and its plug-in registry (spec §5).

``ContextEngine`` is the abstract base with every hook of §5.1:

=====================================  =================================================
``on_session_start(session_id)``       once when a session is opened: warm caches
``ingest(session_id, message)``        a message was stored (default: nothing)
``prepare(agent, session, history,     before every LLM call: returns a ``TurnPrep``
model, tools)``
``should_recommend(prep)``             ``budget_pct >= recommend_pct`` (0.70)
``should_auto_compact(prep)``          ``prep.decision`` says compact: ``budget_pct >=
                                       auto_compact_pct`` (0.80) and auto-compaction not
                                       disabled for the session
``compact(request)``                   fold the branch into a summary, as a
                                       ``CompactRequest`` asks; ``CompactResult``
``after_turn(session_id, usage,        feed the provider's real usage back; emit
prep, on_event)``                      ``compaction_recommended``
``on_session_end(session_id)``         flush in-memory state
=====================================  =================================================

``DefaultContextEngine(policy=...)`` reads every number from one
``CompactionPolicy`` (``opctx.context.policy``: thresholds, the cut, aging, the
budget, the anti-thrash guard, the summary call; ``engine.policy``) and wires the
hooks to six components, all injected keyword-only (§5.2): ``usage_tracker``
(UsageTracker), ``budget_allocator`` (BudgetAllocator), ``ager`` (TurnAger),
``summarizer`` (Summarizer), ``persister`` (Persister), ``references`` (a
ReferenceTracker, or a factory of them: references are tracked per session), plus
``session_db``, an ``estimator`` and a ``clock``. A component not given is built from
the policy (the ager from ``aging.kind``: ``turns``, ``masking`` or ``none``; the
budget from ``budget``). Swap one component to change one dimension of behaviour;
tests pass a fake summariser to run compaction without a provider. The engine's
``recommend_pct`` / ``auto_compact_pct`` / ``emergency_pct`` (``math.inf`` for
never), ``tail_budget_share``, ``min_saving``, ``rearm_fraction``, ``context_window``
and ``config`` (the ``SummarizerConfig`` view the cut and the summariser read) are
read-only views of the policy.

The older keyword arguments (``recommend_pct``, ``auto_compact_pct``,
``emergency_pct``, ``config``, ``context_window``, ``tail_budget_share``,
``min_saving``, ``rearm_fraction``, ``aging``) still build a policy, with a
``DeprecationWarning``; with neither, the policy is the summariser's ``config``
viewed as a policy, else the default policy.

prepare (the six steps)
=======================
1. system prompt: ``build_system_prompt(agent)`` (a ``str`` agent is the prompt
   itself, ``None`` means none);
2. references: the session's ``ReferenceTracker.update(history)``, incremental;
3. aging: ``TurnAger`` on the history with the reference map, on copies (the
   thinking of old turns cleared first when ``aging.keep_thinking_turns`` is set);
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

The decision is ``TurnPrep.decision`` (``opctx.context.types.Decision``): its kind
(``none``, ``age``, ``recommend``, ``compact``, ``emergency``: at or over
``emergency_pct``, compaction goes straight to the structural summary; ``disabled``:
over the trigger while the guard holds automatic compaction off) with the share of the
budget and the thresholds it was taken on (``ContextEngine.decide``). Callers read it
(``should_auto_compact``, the lab's replay); ``decision_path`` is telemetry only, for
people and logs: each step, for example
``["usage:provider", "aging:redacted=3", "budget:0.82", "auto_compact"]``
(``"fit:truncated=N"`` / ``"fit:overflow"`` follow the budget entry when the
request had to be truncated / cannot fit; the last entry is the decision's word:
``"ok"``, ``"recommend"``, ``"auto_compact"``, ``"emergency"`` or
``"auto_compact_disabled"``).

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
2. ``_plan_cut``: ``find_cut_index`` with ``max_tail_tokens = cut.tail_budget_share``
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
* saved under ``guard.min_saving`` (10%) ``guard.low_saving_streak`` (2) times in a
  row: auto-compaction is disabled.
The result (``disabled_auto=True``, ``error``) and the ``compaction_finished``
event say so. It does not latch forever: it re-arms when the history estimate
has grown by ``guard.rearm_fraction`` (25%) of the input budget since it was
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

import math
import operator
import threading
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict
from itertools import compress
from typing import Any

from ._compaction import _CompactionSteps
from ._cut_facts import _without_thinking
from ._engine_state import (
    COMPACT_ATTEMPTS,
    EngineError,
    EventHandler,
    _agent_attr,
    _Guard,
    _MessageEstimates,
    _run_ager,
    _session_id,
    _SessionState,
    _summary_id,
    emit,
    fit_for_session,
    logger,
    rebased_on_counted,
)
from ._structural import is_summary_message
from .aging import TurnAger
from .anthropic_messages import thinking_retention
from .budget import BudgetAllocator
from .fit import ContextOverflowError, FittedRequest
from .masking import ObservationMasker, ToolUseClearer
from .persistence import Persister
from .policy import CompactionPolicy
from .provider_messages import to_provider_messages
from .recent import RecentEvents
from .references import ReferenceTracker
from .summarize import MessageFacts, Summarizer, SummarizerConfig
from .thinking_clearing import joined, thinking_clearer_for
from .tokens import Estimator, default_estimator, real_context_window
from .types import (
    AgingReport,
    CompactRequest,
    CompactResult,
    Decision,
    ReferenceMap,
    TurnPrep,
    UsageState,
)
from .usage import UsageTracker

__all__ = [
    "ContextEngine",
    "DefaultContextEngine",
    "EngineError",
    "ContextOverflowError",  # re-exported from .fit, its home
    "EventHandler",
    "CompactRequest",  # re-exported from .types, its home
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

_DEFAULT_POLICY = CompactionPolicy()
# the specification's thresholds (their home: the policy's trigger part)
RECOMMEND_PCT, AUTO_COMPACT_PCT, EMERGENCY_PCT = _DEFAULT_POLICY.trigger.thresholds()
# the engine's older keyword arguments, each a policy field (or, for aging, its kind)
_LEGACY_ARGUMENTS = {
    "recommend_pct": "trigger.recommend_pct",
    "auto_compact_pct": "trigger.auto_pct",
    "emergency_pct": "trigger.emergency_pct",
    "context_window": "budget.context_window",
    "tail_budget_share": "cut.tail_budget_share",
    "min_saving": "guard.min_saving",
    "rearm_fraction": "guard.rearm_fraction",
}


# --------------------------------------------------------------------------- base class


class ContextEngine(ABC):
    """The hooks of §5.1. Subclasses implement ``prepare`` and ``compact``.

    ``compact`` receives a :class:`~opctx.context.types.CompactRequest` (the turn loop
    builds one); an engine written for the older positional ``compact(agent,
    session_id, model, ...)`` turns it back with ``CompactRequest.from_arguments`` or
    reads the request's fields. ``decide`` is the decision rule on the engine's
    thresholds, for engines and callers that take the decision on another figure.
    """

    name: str = "abstract"
    recommend_pct: float = RECOMMEND_PCT
    auto_compact_pct: float = AUTO_COMPACT_PCT
    emergency_pct: float = EMERGENCY_PCT
    policy: CompactionPolicy | None = None

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

    def decide(
        self, budget_pct: float, *, auto_disabled: bool = False, redacted: int = 0, reason: str | None = None,
        fired: str | None = None,
    ) -> Decision:
        """The decision at ``budget_pct`` on this engine's thresholds (``Decision.of``), with
        the count trigger that ``fired`` (``TriggerPolicy.fired``), if any."""
        thresholds = (self.recommend_pct, self.auto_compact_pct, self.emergency_pct)
        return Decision.of(budget_pct, thresholds, auto_disabled=auto_disabled, redacted=redacted, reason=reason,
                           fired=fired)

    def should_recommend(self, prep: TurnPrep) -> bool:
        return prep.budget_pct >= self.recommend_pct

    def should_auto_compact(self, prep: TurnPrep) -> bool:
        """Whether to compact before this request: ``prep.decision`` when the engine
        decided, else ``budget_pct`` against ``auto_compact_pct``."""
        if prep.decision is not None:
            return prep.decision.compacts
        return prep.budget_pct >= self.auto_compact_pct

    @abstractmethod
    def compact(self, request: CompactRequest) -> CompactResult:
        """Fold part of the active branch into a summary, as ``request`` asks."""

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


def _engine_policy(
    policy: CompactionPolicy | None, legacy: dict[str, Any], summarizer: Any
) -> CompactionPolicy:
    """The engine's policy: ``policy``, or one built from the older keyword arguments
    (a ``DeprecationWarning``), else the summariser's ``config``, else the defaults."""
    unknown = sorted(set(legacy) - set(_LEGACY_ARGUMENTS) - {"config", "aging"})
    if unknown:
        raise TypeError(f"DefaultContextEngine got unexpected keyword argument(s) {unknown}")
    if policy is not None:
        if legacy:
            raise TypeError(
                f"pass policy= or the older keyword arguments {sorted(legacy)}, not both "
                "(policy.replace(...) sets any field)"
            )
        if not isinstance(policy, CompactionPolicy):
            raise TypeError(f"policy must be a CompactionPolicy, got {type(policy).__name__}")
        return policy
    if legacy:
        warnings.warn(
            f"DefaultContextEngine({', '.join(sorted(legacy))}=...) is deprecated: pass "
            "policy=CompactionPolicy(...) (opctx.context.policy)",
            DeprecationWarning,
            stacklevel=3,
        )
    config = legacy.get("config") or getattr(summarizer, "config", None)
    base = config.to_policy() if isinstance(config, SummarizerConfig) else _DEFAULT_POLICY
    changes = {_LEGACY_ARGUMENTS[k]: v for k, v in legacy.items() if k in _LEGACY_ARGUMENTS}
    for key in ("trigger.recommend_pct", "trigger.auto_pct", "trigger.emergency_pct"):
        if changes.get(key) == math.inf:
            changes[key] = None  # the older spelling of "never"
    if legacy.get("aging") is False:
        changes["aging.kind"] = "none"
    try:
        return base.replace(**changes)
    except ValueError as exc:
        raise ValueError(f"engine thresholds and settings: {exc}") from None


class DefaultContextEngine(_CompactionSteps, ContextEngine):
    """The specification's engine: the six components wired to the hooks, every number
    from ``policy`` (module docstring)."""

    def __init__(
        self,
        *,
        policy: CompactionPolicy | None = None,
        usage_tracker: UsageTracker | None = None,
        budget_allocator: BudgetAllocator | None = None,
        ager: Any = None,
        summarizer: Summarizer | None = None,
        persister: Persister | None = None,
        references: ReferenceTracker | Callable[[], Any] | None = None,
        session_db: Any = None,
        clock: Callable[[], float] = time.time,
        estimator: Estimator | None = None,
        name: str = "default",
        **legacy: Any,
    ):
        policy = _engine_policy(policy, legacy, summarizer)
        unresolved = policy.client_decides()
        if unresolved:
            raise ValueError(
                f"the policy's {', '.join(unresolved)} still say 'client': build the engine for a "
                "window with the client's rules (opctx.lab.presets.build_engine)"
            )
        self.policy = policy
        self.config = SummarizerConfig.from_policy(policy)
        self._thresholds = policy.trigger.thresholds()
        self.name = name
        self.clock = clock
        self.session_db = session_db
        self.estimator = estimator or default_estimator()
        self.usage_tracker = usage_tracker or UsageTracker(
            session_db, clock=clock, estimator=self.estimator
        )
        budget = policy.budget
        self.budget_allocator = budget_allocator or BudgetAllocator(
            output_reserve=budget.output_reserve,  # type: ignore[arg-type]
            reserve_policy=budget.reserve_policy,  # type: ignore[arg-type]
            estimator=self.estimator,
        )
        self.ager = ager if ager is not None else _policy_ager(policy, clock, self.estimator)
        # aging.keep_thinking_turns: runs before any ager (thinking_clearing), None when off
        self.thinking_clearer = thinking_clearer_for(policy, self.estimator.message_tokens)
        self.summarizer = summarizer or Summarizer(None, config=self.config)
        self.persister = persister or Persister(session_db, clock=clock)
        self._references = references
        self._sessions: dict[str, _SessionState] = {}
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ the policy, as numbers
    @property
    def recommend_pct(self) -> float:  # type: ignore[override]
        return self._thresholds[0]

    @property
    def auto_compact_pct(self) -> float:  # type: ignore[override]
        return self._thresholds[1]

    @property
    def emergency_pct(self) -> float:  # type: ignore[override]
        return self._thresholds[2]

    @property
    def context_window(self) -> int | None:
        return self.policy.budget.context_window

    @property
    def tail_budget_share(self) -> float:
        return self.policy.cut.tail_budget_share

    @property
    def min_saving(self) -> float:
        return self.policy.guard.min_saving

    @property
    def rearm_fraction(self) -> float:
        return self.policy.guard.rearm_fraction

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
        *,
        assemble: bool = True,
    ) -> TurnPrep:
        """What the next LLM call sees (steps 1-6 of the class docstring).

        ``assemble=False``: the figures and the decision only, for a caller that reads
        them and sends nothing (a replay, the tuner): the request as sent is neither
        assembled nor fitted, so ``agent_messages`` is empty, ``system_prompt`` is not
        truncated, ``request_tokens`` is None and the decision path has no ``fit:`` entry.
        Everything else is what ``assemble=True`` gives."""
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
            aged, report = self._age(state, history, refmap, model)
            # 4. usage: provider prefix + appended estimate, or the local estimate
            usage = self._usage_figures(state, sid, history, aged, system_prompt, tools, model)
            path.append(f"usage:{usage.source}")
            path.append(f"aging:redacted={report.redacted}")
            if report.thinking_cleared:
                path.append(f"aging:thinking_cleared={report.thinking_cleared}")
            # 5. budget
            budget = self.budget_allocator.allocate(
                window, usage.system, usage.history, usage.tools, model
            )
            pct = budget.input_used_pct
            path.append(f"budget:{pct:.2f}")
            # 6. assemble, fit into the window, and decide
            if assemble:
                agent_messages = to_provider_messages(aged, state.provider_cache)
                fitted = fit_for_session(  # the cuts earlier requests were sent with: fit.CarriedCuts
                    state, self.estimator, self.policy.budget.fit_headroom, system_prompt, agent_messages,
                    tools, usage.raw_system, usage.raw_tools, budget.input_budget, model,
                )
            else:
                fitted = FittedRequest(system_prompt, [], 0, budget.input_budget)  # nothing assembled
            if fitted.truncated:
                path.append(f"fit:truncated={fitted.truncated}")
            if not fitted.fits:
                path.append("fit:overflow")
            # aged, like the figure compact disabled it at
            self._maybe_rearm(state, usage.aged_estimate, budget.input_budget)
            guard = state.guard
            decision = self.decide(
                pct, auto_disabled=guard.disabled, redacted=report.redacted + report.thinking_cleared,
                reason=guard.reason,
                fired=self._count_trigger(
                    aged, usage.aged_estimate if self.policy.trigger.tokens_of == "history" else budget.input_used
                ),
            )
            path.append(decision.path_word)
            prep = TurnPrep(
                system_prompt=fitted.system_prompt,
                agent_messages=fitted.messages,
                history_dicts=aged,
                budget=budget,
                usage=usage.state,
                tool_results_redacted=report.redacted,
                tokens_freed_by_aging=report.tokens_freed,
                references_protected=report.references_protected,
                summary_id=_summary_id(history),
                decision_path=path,
                budget_pct=pct,
                context_window=window,
                request_tokens=fitted.tokens if assemble else None,
                truncated_parts=fitted.truncated,
                overflow=fitted.overflow,
                decision=decision,
            )
            with self._lock:
                state.last_prep = prep
                state.system_tokens, state.tools_tokens = usage.raw_system, usage.raw_tools
                state.input_budget = budget.input_budget
            return prep

    def _count_trigger(self, history: Sequence[dict], input_tokens: int) -> str | None:
        """The count trigger of the policy that fires on ``history`` (``TriggerPolicy.fired``):
        ``tokens`` (the request's or the history's, ``trigger.tokens_of``), messages, agent turns
        since the latest summary."""
        trigger = self.policy.trigger
        if trigger.tokens is None and trigger.messages is None and trigger.turns is None:
            return None
        turns = 0
        if trigger.turns is not None:
            for msg in reversed(history):
                if is_summary_message(msg):
                    break
                turns += msg.get("role") == "assistant"
        return trigger.fired(tokens=input_tokens, messages=len(history), turns=turns)

    def _usage_figures(
        self,
        state: _SessionState,
        sid: str,
        history: list[dict],
        aged: list[dict],
        system_prompt: str,
        tools: Sequence[dict] | None,
        model: str | None,
    ) -> _UsageFigures:
        """Step 4: the figures the budget splits: the provider's count of the prefix plus an
        estimate of what changed since when the tracker trusts it, else local estimates."""
        facts = self._facts(state, model)
        table = facts.table(history)
        usage_state = self.usage_tracker.get(sid)
        raw_system = (
            self.estimator.message_tokens({"role": "system", "content": system_prompt}, model)
            if system_prompt
            else 0
        )
        raw_tools = self.estimator.tools_tokens(list(tools), model) if tools else 0
        if state.estimates is None:
            state.estimates = _MessageEstimates(self.estimator)
        estimates = state.estimates.start(self.estimator, model, len(aged), facts)
        aged_estimate = self._aged_history_tokens(state, history, aged, table, model)
        figures = _UsageFigures(usage_state, raw_system, raw_tools, aged_estimate,
                                raw_system, raw_tools, aged_estimate, "estimate")
        delta = (
            self._counted_prefix_delta(
                state, aged, usage_state.last_history_len, raw_system, raw_tools, model, estimates
            )
            if usage_state.source == "provider"
            and 0 < usage_state.last_history_len <= len(history)
            else None
        )
        counted_history = aged
        if delta is not None and len(aged) != len(history):
            rebased = rebased_on_counted(state, aged, raw_system, raw_tools, model)
            if rebased is not None:
                counted_history, delta = rebased
        if delta is not None:
            hybrid = self.usage_tracker.hybrid_estimate(
                sid, counted_history, system_prompt, tools, model, prefix_delta=delta,
                message_tokens=estimates,
            )
            if hybrid.source == "provider":
                figures.source = "provider"
                figures.system, figures.tools, figures.history = (
                    hybrid.system, hybrid.tools, hybrid.history,
                )
        return figures

    def _counted_prefix_delta(
        self,
        state: _SessionState,
        aged: list[dict],
        covered: int,
        system: int,
        tools: int,
        model: str | None,
        estimate: Callable[..., int],
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
            return state.estimates.total(aged)
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
        # thinking the model drops anyway (before the last turn) is not in the table's total:
        # a copy without it must not subtract it again (table.counted_tokens)
        dropped = table.turn_start if thinking_retention(model) == "last_turn" else 0
        for i in compress(range(len(history)), map(operator.is_not, aged, history)):
            copy_ = aged[i]
            if copy_ == history[i]:
                continue
            hit = cache.get(i)
            if hit is None or not (hit[0] is copy_ or hit[0] == copy_):
                hit = cache[i] = (copy_, estimate(copy_, model))
            deltas[i] = hit[1] - table.tokens_at(i)
            if i < dropped and _without_thinking(copy_) is None:
                deltas[i] += table.prefix_thinking[i + 1] - table.prefix_thinking[i]
        return deltas

    def _age(
        self, state: _SessionState, history: list[dict], refmap: ReferenceMap, model: str | None = None
    ) -> tuple[list[dict], AgingReport]:
        clearer, cleared = self.thinking_clearer, None
        if clearer is not None and history:  # first (the order the docs list them; assumed)
            history, cleared = clearer.age(history, refmap, retention=thinking_retention(model))
        ager = self._session_ager(state)
        aged, report = (history, AgingReport()) if ager is None or not history else _run_ager(ager, history, refmap)
        return (aged, report) if cleared is None else (aged, joined(cleared, report))

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


class _UsageFigures:
    """Step 4's figures: what the budget splits, and the estimates behind them."""

    __slots__ = ("state", "raw_system", "raw_tools", "aged_estimate", "system", "tools", "history", "source")

    def __init__(self, state: UsageState, raw_system: int, raw_tools: int, aged_estimate: int,
                 system: int, tools: int, history: int, source: str) -> None:
        self.state = state
        self.raw_system, self.raw_tools, self.aged_estimate = raw_system, raw_tools, aged_estimate
        self.system, self.tools, self.history, self.source = system, tools, history, source


def _policy_ager(policy: CompactionPolicy, clock: Callable[[], float], estimator: Estimator) -> Any:
    """The ager ``aging.kind`` names, with the policy's settings (None for ``none``).

    ``microcompact`` and ``client`` are Claude Code's own clearing: the toolkit builds
    that component (``opctx.lab.presets.build_engine``) and passes it as ``ager``.
    """
    aging = policy.aging
    if aging.kind == "turns":
        return TurnAger(
            keep_recent_turns=aging.keep_recent_turns,
            keep_recent_seconds=aging.keep_recent_seconds,
            min_tokens=aging.min_tokens,
            protect_first_n=aging.protect_first_n,
            clock=clock,
            estimator=estimator,
        )
    if aging.kind == "masking":
        return ObservationMasker(aging.keep_last, estimate=estimator.message_tokens,
                                 placeholder=aging.placeholder, drop_demos=aging.drop_demos)
    if aging.kind == "clear-tool-uses":
        return ToolUseClearer(
            aging.keep_last, trigger_tokens=aging.trigger_tokens, clear_at_least=aging.clear_at_least,
            exclude_tools=aging.exclude_tools, clear_inputs=aging.clear_inputs,
            estimate=estimator.message_tokens, placeholder=aging.placeholder, drop_demos=aging.drop_demos,
        )
    if aging.kind == "recent-events":
        return RecentEvents(aging.protect_first_n, aging.keep_last, estimate=estimator.message_tokens,
                            keep_initial_request=policy.cut.keep_initial_request)
    if aging.kind == "none":
        return None
    raise ValueError(
        f"aging.kind {aging.kind!r} is Claude Code's clearing: pass the ager component "
        "(opctx.lab.presets.build_engine builds it)"
    )



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
