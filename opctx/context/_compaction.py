"""The compaction steps of ``DefaultContextEngine`` (the ``compact`` section of the
``opctx.context.engine`` docstring), one method each.

``_CompactionSteps`` is a mixin of ``DefaultContextEngine``: ``compact`` takes a
:class:`~opctx.context.types.CompactRequest` and runs ``_compact_branch`` (steps 1-6,
again when another writer switched the branch meanwhile), which reads as the steps:
``_measure_branch``, ``_plan_cut``, ``_summarise_folded``, ``_predict_tokens_after``,
``_persist_summary``, ``_account_for_saving``; ``_nothing_to_cut`` / ``_no_shrink`` /
``_compacted_elsewhere`` end a run that writes nothing, and ``_finish_compaction`` ends
every run. The numbers it applies (the tail's share of the budget, the low-saving guard)
come from the engine's ``policy`` (``opctx.context.policy``).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any

from ._cut import counted_cut
from ._cut_facts import Facts, FactsTable
from ._engine_state import (
    COMPACT_ATTEMPTS,
    EngineError,
    EventHandler,
    _Guard,
    _run_ager,
    _SessionState,
    emit,
    logger,
)
from .anthropic_messages import thinking_retention
from .persistence import BranchChanged
from .prompts import SUMMARY_PREFIX
from .references import ReferenceTracker
from .summarize import MessageFacts, Summarizer, find_cut_index, is_summary_message
from .types import (
    BudgetAllocation,
    CompactRequest,
    CompactResult,
    CutPoint,
    ReferenceMap,
    SummaryResult,
)


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



class _CompactionSteps:
    """``compact`` and its steps; mixed into ``DefaultContextEngine`` (module docstring)."""

    def compact(self, request: CompactRequest | Any = None, *args: Any, **kwargs: Any) -> CompactResult:
        """Fold part of the active branch into a summary, as ``request`` asks.

        The older call ``compact(agent, session_id, model, on_event, previous_summary,
        user_initiated, cancel_event, keep_recent_tokens, *, tools, reason, trigger,
        session_db, provider_call)`` is still accepted and turned into the same
        request (``CompactRequest.from_arguments``).
        """
        if not isinstance(request, CompactRequest):
            request = CompactRequest.from_arguments(request, *args, **kwargs)
        elif args or kwargs:
            raise TypeError("compact takes a CompactRequest, or the older arguments, not both")
        started = time.perf_counter()
        why = request.why
        db = self._compaction_db(request.session_db)
        session_id, on_event = request.session_id, request.on_event
        state = self._state(session_id)
        with state.lock:
            if request.user_initiated and state.guard.disabled:
                state.guard = _Guard()  # a manual compaction re-arms auto-compaction
            emit(
                on_event,
                "compaction_started",
                {"session_id": session_id, "reason": why, "trigger": request.trigger},
            )

            def finish(result: CompactResult) -> CompactResult:
                return self._finish_compaction(result, session_id, started, on_event)

            conflict: BranchChanged | None = None
            for attempt in range(1, COMPACT_ATTEMPTS + 1):
                try:
                    return finish(self._compact_branch(state, request, db, why, retry=attempt > 1))
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
        self, state: _SessionState, run: CompactRequest, db: Any, why: str, *, retry: bool
    ) -> CompactResult:
        """Steps 1-6 on the branch as it is now; raises ``BranchChanged`` when another
        writer switched the branch before this one was written (nothing written). On a
        retry, an automatic compaction first checks it is still needed."""
        branch = self._measure_branch(state, db, run.session_id, run.agent, run.model, run.tools)
        if retry and why == "auto" and branch.pct < self.auto_compact_pct:
            return self._compacted_elsewhere(why, branch)
        cut = self._plan_cut(branch, run.keep_recent_tokens, _overflow_reduction(self.policy, state.last_prep))
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
            run.session_id, db, branch, cut, summary, why, run.trigger, tokens_after
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

    def _plan_cut(
        self, branch: _BranchFigures, keep_recent_tokens: int | None, fold_at_least: int | None = None
    ) -> CutPoint:
        """Step 2: where to cut. The kept tail may use at most ``tail_budget_share`` of the
        input budget left after system and tools (unless ``keep_recent_tokens`` is given),
        so that on a small window the tail cannot eat the whole budget. A count keep folds
        at least ``fold_at_least`` tokens (``_overflow_reduction``)."""
        keep = self.policy.cut.keep()
        if keep_recent_tokens is None and keep is not None:
            cut = self.policy.cut
            return counted_cut(branch.history, branch.facts, keep, cut.protect_first_n,
                               keep_initial_request=cut.keep_initial_request, fold_at_least=fold_at_least)
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
        source = self.policy.summary.source
        if source == "forget":
            return SummaryResult(
                FORGOTTEN.format(n=len(folded)), summarised_count=len(folded),
                summarised_tokens=sum(branch.facts.tokens(m) for m in folded),
            )
        if source == "structural":
            force = "summary.source is 'structural'"
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
        # the facts of the messages it keeps, by position in the layout (the summary's not yet)
        facts = table.facts
        known = (
            facts[:head_n] + [None] + [facts[i] for i in sorted(pinned)] + facts[cut_idx:len(history)]
        )
        predicted = self._predicted_aged_tokens(state, layout, model, known)
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

        ``guard.low_saving_streak`` (2) compactions in a row that saved under
        ``guard.min_saving`` disable auto-compaction (the message is added to ``error``);
        the session's caches start afresh, since the new branch has new ids.
        """
        streak = self.policy.guard.low_saving_streak
        tokens_before = branch.tokens_before
        saved = (tokens_before - tokens_after) / tokens_before if tokens_before else 0.0
        disabled = False
        with self._lock:
            guard = state.guard
            if saved < self.min_saving and self.policy.guard.enabled:
                guard.low_saving_streak += 1
                if guard.low_saving_streak >= streak and why != "manual":
                    runs = "two" if streak == 2 else str(streak)
                    msg = (
                        f"auto-compaction disabled: {runs} compactions in a row saved under "
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
        # the per-message facts stay (checked against each message, never stale): the kept
        # tail's copies take their originals' facts instead of being estimated again. Facts
        # for no model (``facts_model`` None) are as good as any: they were dropped here, so a
        # session with no model name estimated its whole kept tail after every compaction.
        state.facts.forget_table()
        state.aged_tokens.clear()
        state.references = self._new_references()
        # the copies of the kept tail take their originals' conversions and estimates
        state.provider_cache = state.provider_cache.after_compaction()
        sent, sent_tokens, sent_model = state.sent
        state.sent_before = ({id(m): (m, t) for m, t in zip(sent, sent_tokens, strict=True)}, sent_model)
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
        if on_event is not None:
            # every field of a CompactResult is a scalar: its fields as they are make the
            # dict ``asdict`` would (which copies each one deeply, for nothing)
            fields_now = {f.name: getattr(result, f.name) for f in dataclass_fields(result)}
            emit(on_event, "compaction_finished", {"session_id": session_id, **fields_now})
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
        if why == "manual" or not self.policy.guard.enabled:
            return False
        with self._lock:
            self._disable(state, f"auto-compaction disabled: {reason}", history_tokens)
        return True


    def _predicted_aged_tokens(
        self,
        state: _SessionState,
        layout: list[dict],
        model: str | None,
        known: list[Facts | None] | None = None,
    ) -> int | None:
        """Estimate of the history ``layout`` (a compaction's new branch) as the next
        ``prepare`` will send it: aged by a copy of the session's ager, which sees the
        new branch afresh (its first messages are protected, its references are its
        own). None when the ager cannot be copied. ``known``: the facts of the layout's
        messages where the branch's table has them (None elsewhere), taken as they are
        when nothing ages the layout."""
        ager = self._session_ager(state)
        estimate = self.estimator.message_tokens
        facts = state.facts if state.facts is not None and state.facts_model == model else None
        if ager is None and self.thinking_clearer is None and facts is not None and known is not None:
            table = FactsTable()
            for msg, msg_facts in zip(layout, known, strict=True):
                table.append(msg_facts if msg_facts is not None else facts.probe(msg))
            return table.counted_tokens(thinking_retention(model))
        if self.thinking_clearer is not None:  # a fresh one: the session's keeps its own record
            layout, _ = copy.deepcopy(self.thinking_clearer).age(layout)
        if ager is not None:
            try:
                probe = copy.deepcopy(ager)
            except Exception:  # a custom ager holding something uncopyable
                return None
            tracker = ReferenceTracker(clock=self.clock)
            layout, _ = _run_ager(probe, layout, tracker.build(layout))
        # counted like the branch before it (display-only lines, thinking the model drops),
        # with the session's facts of the messages it keeps unchanged when they are
        # estimated for this model (the same estimate; _measure_branch just filled them)
        table = (
            facts.probe_table(layout)
            if facts is not None
            else MessageFacts(lambda m: estimate(m, model)).table(layout)
        )
        return table.counted_tokens(thinking_retention(model))



#: the one line a compaction without a summary (``summary.source = "forget"``) leaves where
#: the folded messages were: opctx's layout has a summary node after every compaction
#: (OpenHands' forgetting condensers leave nothing; assumed wording)
FORGOTTEN = "({n} earlier messages were forgotten)"


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


def _overflow_reduction(policy: Any, prep: Any) -> int | None:
    """Tokens a count keep must fold so the request comes down to ``cut.overflow_keep_share``
    of the input budget, when the request that led here was at or past ``trigger.auto_pct``
    (the OpenHands SDK condenser's token reason); None otherwise.

    Read off the last prepare's figures, the ones the decision compared (with the provider's
    count where there is one): the compaction's own measure is an estimate without it."""
    share, auto = policy.cut.overflow_keep_share, policy.trigger.auto_pct
    budget = getattr(prep, "budget", None)
    if share is None or budget is None or not isinstance(auto, int | float) or budget.input_used_pct < auto:
        return None
    return max(0, int(budget.input_used) - int(share * budget.input_budget))
