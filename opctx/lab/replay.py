"""Replay a recorded history through a context engine, request by request.

``replay(history, "default")`` answers: *had this engine been running, what
would each request of this recorded session have looked like?* The recording
is stepped through in order (``opctx.lab.history`` expands compactions the
recording made, so the replay sees everything that happened). Every recorded
assistant message is one request; the engine sees the history that existed
just before it, exactly as a live agent loop would call it:

1. ``engine.prepare(agent, session_id, active_history, model, tools)`` - aging,
   budget, ``budget_pct`` (with ``assemble=False`` where the engine has it: a replay
   reads the figures and the history, and sends nothing, so the request is neither
   assembled nor fitted; the figures are those of the history, even past the window);
2. the decision: ``emergency`` (``budget_pct >= emergency_pct``), ``auto``
   (``engine.should_auto_compact(prep)``), ``recommend``
   (``engine.should_recommend(prep)``) or ``none``; on ``auto``/``emergency``
   the real ``engine.compact`` runs on the replay's ``MemorySessionDB``
   (``opctx.dag.memory_db``: re-parenting, summary node, everything), the active branch is re-read and
   ``prepare`` runs again, so the step records the request as it would have
   been sent after the compaction;
3. the recorded assistant message (and then its tool results, the next user
   message ...) is appended to the in-memory session, and the loop moves on.

Choices
-------
* **Clock.** A ``ReplayClock`` set to each message's recorded ``created_at`` is
  injected into every preset's time-dependent parts (aging's wall-clock gate,
  usage timestamps), so a replay gives the same result on every run. The request
  for an assistant message happens "at" that message's timestamp.
* **Ids.** An import names messages with random ids, and a chained structural summary
  quotes some; in the replay's session such a message is named after its stream index
  (``_replay_db.replay_message_id``), so two parses of one transcript replay alike.
* **Provider usage is fed back where the recording has it** (``feed_usage=None``,
  the default: on when an assistant message of the recording carries the provider's
  prompt count, ``has_provider_usage``). A replay on estimates alone misses what no
  transcript holds (system prompt, tool schemas, re-attached files), and on real
  sessions that can reverse a comparison: a small trigger that the client's fixed part
  already fills looks cheap on estimates and compacts on every request with the
  provider's counts. ``feed_usage=True`` feeds a provider count for every request
  through ``engine.after_turn``: the recorded one while the replayed context is
  identical to the recording (``diverged`` is false), the replay's own request on the
  provider's scale after (next point). ``feed_usage=False`` is the estimate-only
  replay (comparable across recordings with and without usage). ``result.mode`` says
  which ran (``"provider usage"`` / ``"estimates"``), and ``metrics()`` carries it with
  ``opctx.lab.feasibility``'s verdict on whether the configuration can work at all.
* **Unseen overhead** (``feed_usage=True``). The provider's prompt count includes
  what transcripts do not hold (system prompt, tool schemas, files a client
  re-attaches after compacting, the context a continued session starts from). While
  the replay still knows what the recording sent (up to the recording's next
  compaction) every request measures ``overhead = provider count - estimate of the
  recorded context``; the replay then feeds the engine ``estimate of its own request
  + overhead`` as that request's count (identical to the recorded count while the
  two agree), so aging, a compaction of its own, or any other difference does not
  stop the engine from seeing what the provider would have counted: the hybrid
  estimate of the specification, carried past the first divergence. The part
  measured at the first counted request stays whatever the history becomes; the
  drift measured since scales with the history it was measured on (a compaction
  folds it too). After the recording compacts (``free`` replays) the last overhead
  is carried. After each of the replay's *own* compactions the engine's
  ``SummarizerConfig.post_compaction_tokens`` is added to it until the next one
  (what the client re-attaches after compacting, which no transcript holds: the
  ``claude-code`` preset's re-read files). A
  session that *starts* from a summary (a recorded compaction at stream index 0) is
  fed from its first request. See :meth:`_Replay._feed_usage`.
* **Following the recording** (``follow_recording=True``, with ``feed_usage``; the
  ``free`` mode of ``opctx.lab.fidelity`` turns it on for a client preset on its own
  client's recording, whose aging and compactions stand for the client's). The overhead
  is measured against the replay's *own* request: a clearing of old tool results that
  the replay and the client both made is then counted once (the recorded counts hold
  the client's; measured against the whole stream it came off twice: 2.1.19's 560343df,
  112,640 believed where the provider counted 160,832). A compaction of the replay's
  own ends the measuring (it no longer sends what the client sent: the last figure is
  carried), unless it falls on the very request where the recording compacted (the
  first request at or after the recorded point, with a count): then the replay has
  reached the client's state by itself, and what the client sent next (its LLM summary,
  the files, todo list and plan it re-attached, none of it in the transcript, all of it
  in the recorded counts) is what a replay of that client sends. It **rejoins** the
  recording: the overhead is measured afresh from that count (its structural summary
  standing for the client's; the preset's ``post_compaction_tokens`` is not added) until
  the recording compacts again, said in ``events`` (``"rejoined_recording"``).
  ``tokens_none`` keeps the overhead measured before the first rejoin.
* **Trigger check.** ``trigger_check="last-response"`` decides to compact the way
  Claude Code and Codex do: before a request, from the *last response's* count
  (its prompt, as fed or estimated, plus its output), not from the estimate of the
  request about to be sent (``"request"``, the engine's own check, which also
  counts the tool results appended since), plus what the client adds to that count
  (``client_rules.extra_check_tokens``: Claude Code 2.1.2+ its estimate of the messages
  after the last response, Codex its estimate of the older encrypted reasoning; the
  version's ``TRIGGER_RULES`` row says which). Default: ``"last-response"`` for the
  client presets replaying a recording of their own client, ``"request"``
  otherwise. The blocking (emergency) limit is checked on the same figure; the
  first request, with no response before it, uses the engine's own check.
* **Client version.** A client preset (``claude-code``, ``codex``, a calibrated
  preset) replaying a recording of its client gets ``client_version`` from the
  recording (``RecordedHistory.version_at``: the version in force where the
  replayed stream starts) unless the parameters name one; a recording of that
  client that names no version uses the default rule, said once per process.
* **Display-only lines** (``display_only``: shown by the client, never sent) cost
  nothing in the step figures (``tokens_none``, prefix accounting), as they cost
  nothing in the engine's budget.
* **Summaries.** ``summaries="structural"`` (default): no LLM, the Summarizer's
  deterministic structural fallback. ``summaries=<provider call>``: a real (or
  scripted) provider, such as ``opctx.lab.summaries.LLMSummaries`` (any endpoint,
  through its cache; named by its ``label``); a failed call falls back to the
  structural summary, and the compaction says so (``fell_back_to_structural``,
  ``error``); what each compaction's summariser read and wrote is on its record
  (``summary_input_tokens`` ... , ``ReplayResult.summary_requests()``). The
  summariser is an argument of the replay, not a field of the policy: it is a
  resource (an endpoint, a cache file), the policy a value compared and stored with
  every row. ``summaries="recorded"``: compactions are *forced* where
  the recording compacted, with the recording's own summary text (the
  recording's choice of moment and text, laid out by the engine's cut and
  persister); compactions the engine triggers elsewhere fall back to
  structural.
* **Incremental.** The active history is a Python list that grows by one
  message per recorded message; only a compaction re-reads the branch. With the
  engine's cached estimates the cost of a replay is about linear in the length
  of the history. Token figures of the request's prefix are carried from step to
  step (``prefix_kept_tokens``: tokens of the previous request that the next
  one still starts with).
* **Contexts.** ``keep_contexts=True`` keeps every step's request message list
  (shallow lists sharing the message dicts, so memory is one pointer per
  message per step). ``keep_contexts=False`` keeps none; ``context(step)`` and
  the metrics that need contexts (reference loss, tool pairs) then raise.

``ReplayResult``: ``steps_df`` (one row per request; ``tokens`` is the request as
sent, ``tokens_before_compaction`` the request before a compaction it triggered,
``check_tokens`` the figure the decision was taken on: the request itself, or the
last response's prompt + output), ``compactions`` (what
each compaction folded, kept, protected, its summary), ``recorded_compactions``
(from the recording), ``context(step)``, ``origin_of(msg)`` (the stream index a
request message comes from), ``metrics()`` (``opctx.lab.metrics.summarize``),
``policy`` (the exact ``CompactionPolicy`` the engine ran with, resolved for the window,
model and client version; ``steps_df`` and ``compactions_df()`` carry it as JSON in a
``policy`` column, so any figure can be traced to its configuration).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opctx.context.persistence import same_but_identity
from opctx.context.provider_messages import is_display_only
from opctx.dag.messages import is_tool_result

from ._replay_client import (
    TRIGGER_CHECKS,
    client_check_count,
    preset_client,
    resolve_trigger_check,
    with_client_version,
)
from ._replay_db import ReplayClock, _RecordedSummaryProvider, _ReplaySessionDB, replay_message_id
from ._replay_result import ReplayCompaction, ReplayResult
from ._summary_meter import SummaryMeter, SummaryUsage
from .feasibility import ESTIMATES, PROVIDER_USAGE, REPLAY_MODES
from .history import RecordedCompaction, RecordedHistory, as_history, provider_prompt_tokens
from .metrics import common_prefix_length, guard_counts

__all__ = [
    "ReplayClock",
    "ReplayCompaction",
    "ReplayResult",
    "SummaryMeter",
    "SummaryUsage",
    "replay",
    "guard_summary",
    "quiet_replays",
    "DECISIONS",
    "TRIGGER_CHECKS",
    "preset_client",
    "resolve_trigger_check",
    "with_client_version",
    "has_provider_usage",
    "client_check_count",
]

DECISIONS = ("none", "recommend", "auto", "emergency", "recorded")
# how the decision to compact is taken (module docstring, "Trigger check")

logger = logging.getLogger(__name__)

# -- the engine's notes during a replay ------------------------------------------------------
#
# The engine logs a WARNING each time its anti-thrash guard disables auto-compaction for a
# session (and INFO when it re-arms). In a live agent that is one line about one session. In
# a replay it is the *strategy* meeting this history: a preset whose trigger sits below what
# it must keep verbatim (protected head, the last ``protect_last_n`` messages, the tail
# budget) disables, re-arms after the history grows, disables again - a dozen lines per
# replay, hundreds per sweep, none saying which replay or what to change. So while a replay
# runs, the engine's records below ERROR from that thread are kept in ``ReplayResult.events``
# (``"engine_log"``) instead of being printed, and the replay logs ONE warning naming the
# session, the preset, the window, the counts and what to change. A sweep logs one warning
# for all its replays and reports the counts per row (``compactions_failed``,
# ``auto_compaction_disabled``). Errors from the engine always pass through.

_ENGINE_LOGGER = "opctx.context.engine"
_notes = threading.local()


class _EngineNotesFilter(logging.Filter):
    """Diverts the engine's sub-ERROR records of the replay running in this thread."""

    def filter(self, record: logging.LogRecord) -> bool:
        sink = getattr(_notes, "sink", None)
        if sink is None or record.levelno >= logging.ERROR:
            return True
        sink.append({"event": "engine_log", "level": record.levelname, "message": record.getMessage()})
        return False


def _install_notes_filter() -> None:
    engine_logger = logging.getLogger(_ENGINE_LOGGER)
    if not any(isinstance(f, _EngineNotesFilter) for f in engine_logger.filters):
        engine_logger.addFilter(_EngineNotesFilter())


_install_notes_filter()


def quiet_replays() -> Any:
    """A context manager: replays in this thread do not log their one-line summary.

    ``opctx.lab.sweep`` uses it and logs one summary for the whole sweep; the
    counts stay in every ``ReplayResult`` (``events``) and sweep row.
    """
    import contextlib

    @contextlib.contextmanager
    def manager() -> Any:
        before = getattr(_notes, "quiet", False)
        _notes.quiet = True
        try:
            yield
        finally:
            _notes.quiet = before

    return manager()


def _collecting_engine_notes(fn: Callable[..., ReplayResult]) -> Callable[..., ReplayResult]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> ReplayResult:
        outer = getattr(_notes, "sink", None)
        sink: list[dict] = []
        _notes.sink = sink
        try:
            result = fn(*args, **kwargs)
        finally:
            _notes.sink = outer
        result.events.extend(sink)
        if not getattr(_notes, "quiet", False):
            _log_guard_summary(result)
        return result

    return wrapper


def guard_summary(result: ReplayResult) -> str:
    """The one-line warning of a replay whose guard disabled auto-compaction ("" if it never did).

    The text a replay logs, and what the tuner shows beside the very replay it is about: it
    names the session, the preset, the window, the counts and what to change.
    """
    counts = guard_counts(result.events)
    if not counts["auto_compaction_disabled"]:
        return ""
    first = next((e.get("error") for e in result.events if e.get("event") == "auto_compaction_disabled"), None)
    return (
        f"replay of {result.history.session_id or result.history.title or 'a message list'} with "
        f"preset {result.preset!r} (window {result.context_window:,}): auto-compaction was disabled "
        f"{counts['auto_compaction_disabled']} time(s) (first: {first or 'see events'}); "
        f"{counts['compactions_failed']} compaction attempt(s) made no progress. What the strategy "
        "must keep verbatim (protected head, the last protect_last_n messages, the tail budget) "
        "leaves too little to fold below its trigger; a larger context_window or a smaller "
        "protect_last_n / keep_* lets it compact. Details: ReplayResult.events."
    )


def _log_guard_summary(result: ReplayResult) -> None:
    text = guard_summary(result)
    if text:
        logger.warning("%s", text)


def _post_compaction_tokens(engine: Any) -> int:
    """What the client adds after a compaction that no history holds
    (``client.post_compaction_tokens`` of the engine's policy)."""
    policy = getattr(engine, "policy", None)
    if policy is not None:
        return int(policy.client.post_compaction_tokens)
    return int(getattr(getattr(engine, "config", None), "post_compaction_tokens", 0) or 0)


def _is_request(msg: dict) -> bool:
    return msg.get("role") == "assistant"


@_collecting_engine_notes
def replay(
    session_or_history: Any,
    engine_or_preset: Any = "default",
    *,
    context_window: int | None = None,
    model: str | None = None,
    summaries: str | Callable[..., Any] = "structural",
    system_prompt: str = "",
    tools: list[dict] | None = None,
    keep_contexts: bool = True,
    feed_usage: bool | None = None,
    agent: Any = None,
    trigger_check: str | None = None,
    follow_recording: bool = False,
    **params: Any,
) -> ReplayResult:
    """Replay a recorded history through an engine (see the module docstring).

    ``session_or_history``: a message list, ``SessionSpec``, ``(db_path,
    session_id)``, ``RecordedHistory`` or an importer's ``ImportedSession``.
    ``engine_or_preset``: a preset name (``opctx.lab.presets``), a ``PresetSpec``, a
    ``CompactionPolicy`` or a ``ContextEngine`` *factory* ``f(session_db=..., clock=...,
    context_window=..., model=..., summarizer_provider=...)``; an engine instance is
    accepted too but then its clock and database are its own (not reproducible,
    documented). ``params`` set fields of the preset's policy, by dotted name
    (``**{"cut.keep_ratio": 0.2}``) or flat name (``trigger_pct=0.6``, ``keep_last=5``).
    ``context_window``: default the window the recording reported (Codex), else
    the model's (``opctx.context.tokens.real_context_window``). ``model``:
    default the recording's majority model. ``system_prompt`` / ``tools`` /
    ``agent``: what the engine counts besides the history (transcripts rarely
    hold them; ``agent`` wins over ``system_prompt``). ``keep_contexts`` and
    ``feed_usage``: see the module docstring (``None``: on where the recording has
    provider usage; ``result.mode`` says which ran). ``trigger_check``: ``"request"``,
    ``"last-response"`` or ``None`` (the client's own way for a client preset on a
    recording of its client, else ``"request"``; module docstring). ``follow_recording``:
    the replay stands for the recording's client: the overhead is measured against its
    own request, and a compaction of its own on the very request where the recording
    compacted rejoins the recording's counts (module docstring, "Following the
    recording"; ``feed_usage`` only).

    The steps: :func:`_load` (the history and the settings it is replayed with),
    :class:`_Replay` (the in-memory database, the engine and its driver),
    :meth:`_Replay.step` for each recorded message, :meth:`_Replay.result`.
    """
    started = time.perf_counter()
    history, setup = _load(session_or_history, context_window, model, summaries)
    params = with_client_version(history, engine_or_preset, params)
    check = resolve_trigger_check(history, engine_or_preset, trigger_check)
    if feed_usage is None:
        feed_usage = has_provider_usage(history)
    count = client_check_count(history, engine_or_preset, params) if check == "last-response" else "last-response"
    run = _Replay(
        history,
        setup,
        engine_or_preset,
        params,
        agent=agent,
        system_prompt=system_prompt,
        tools=tools,
        keep_contexts=keep_contexts,
        feed_usage=bool(feed_usage),
        trigger_check=check,
        check_count=count,
        follow_recording=follow_recording,
    )
    for index, msg in enumerate(history.messages):
        run.step(index, msg)
    return run.result(started, params)


def has_provider_usage(history: RecordedHistory) -> bool:
    """Whether an assistant message of ``history`` carries the provider's prompt count (what
    ``feed_usage=True`` feeds back): the default of ``replay``'s ``feed_usage``.

    >>> has_provider_usage(as_history([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]))
    False
    """
    return history.derived("has_provider_usage", lambda: any(
        provider_prompt_tokens(m, history.format, history.model) is not None
        for m in history.messages if m.get("role") == "assistant"))


@dataclass
class _Setup:
    """What a replay runs with, resolved from its arguments and the recording."""

    model: str
    window: int
    provider: Any  # the summariser's provider call, None for structural summaries
    recorded_provider: _RecordedSummaryProvider | None  # set for summaries="recorded"
    summaries_label: str
    meter: SummaryMeter | None = None  # what a real summariser's calls cost, per compaction

    def begin_summary(self) -> int:
        """Before a compaction: the summariser's calls from now on are this compaction's."""
        return self.meter.begin() if self.meter is not None else 0

    def count_summary(self, slot: int, record: ReplayCompaction | dict) -> None:
        """After it: the summariser's tokens on the compaction's record (or on the
        ``compaction_failed`` event of one that summarised, then made no progress)."""
        if self.meter is None:
            return
        if isinstance(record, dict):
            record.update(self.meter.fields(slot))
        else:
            self.meter.apply(slot, record)


def _load(
    session_or_history: Any,
    context_window: int | None,
    model: str | None,
    summaries: str | Callable[..., Any],
) -> tuple[RecordedHistory, _Setup]:
    """Step 1: the recorded history, and the model, window and summariser to replay it with."""
    from opctx.context.tokens import real_context_window

    history = as_history(session_or_history)
    model_name = model or history.model or ""
    window = int(context_window or history.context_window or real_context_window(model_name or None))
    if window <= 0:
        raise ValueError(f"context_window must be positive, got {window}")
    if isinstance(summaries, str) and summaries not in ("structural", "recorded"):
        raise ValueError(f"summaries must be 'structural', 'recorded' or a provider call, got {summaries!r}")
    recorded_provider = _RecordedSummaryProvider() if summaries == "recorded" else None
    meter = None if isinstance(summaries, str) else SummaryMeter(summaries)
    provider = recorded_provider if recorded_provider is not None else meter
    # a summariser with a label (LLMSummaries: "llm:<prompt>:<model>") is named by it
    summaries_label = summaries if isinstance(summaries, str) else str(getattr(summaries, "label", "provider"))
    return history, _Setup(model_name, window, provider, recorded_provider, summaries_label, meter)


class _Replay:
    """One replay in progress: the engine on its in-memory session, and what it recorded so far.

    ``__init__`` builds the engine and its driver (step 2), :meth:`step` takes one
    recorded message (step 3), :meth:`result` collects the ``ReplayResult`` (step 4).
    """

    def __init__(
        self,
        history: RecordedHistory,
        setup: _Setup,
        engine_or_preset: Any,
        params: dict[str, Any],
        *,
        agent: Any,
        system_prompt: str,
        tools: list[dict] | None,
        keep_contexts: bool,
        feed_usage: bool,
        trigger_check: str = "request",
        check_count: str = "last-response",
        follow_recording: bool = False,
    ) -> None:
        from opctx.context.tokens import Estimator

        from ._engine_driver import EngineDriver, instantiate

        self.history = history
        self.setup = setup
        self.feed_usage = feed_usage
        self.trigger_check = trigger_check
        # what the client adds to the last response's count before comparing (client_check_count)
        self.check_count = check_count
        # provider count minus the estimate of the recorded context (module docstring): the
        # part measured at the first counted request, and the drift since with the history
        # estimate it was measured at
        self.overhead: int | None = None
        self.overhead_base = 0
        self.overhead_drift = 0
        self.overhead_history = 0
        # "Following the recording" (module docstring): whether the replay follows it, and the
        # overhead before the first rejoin (the "none" baseline's; set once it rejoined)
        self.follow_recording = follow_recording
        self.none_overhead: tuple[int | None, int, int, int] | None = None
        # what the client re-attaches after each of the replay's own compactions (files it
        # re-reads: SummarizerConfig.post_compaction_tokens), carried until the next one
        self.reattached = 0
        # prompt + output of the previous request as the replay saw it ("last-response" check)
        self.last_response_total: int | None = None
        self.check_tokens = 0  # the figure this request's decision was taken on
        model_name = setup.model
        messages = history.messages
        first_time = next((m.get("timestamp") for m in messages if m.get("timestamp") is not None), 0.0)
        self.clock = clock = ReplayClock(first_time or 0.0)
        db = _ReplaySessionDB(clock)
        session_id = db.create_session(title=history.title or "replay", model=model_name, source="replay")
        self.preset_name, engine, self.engine_cfg = instantiate(
            engine_or_preset,
            session_db=db,
            clock=clock,
            context_window=setup.window,
            model=model_name,
            summarizer_provider=setup.provider,
            **params,
        )
        self.driver = EngineDriver(engine, db, session_id, model_name, setup.window, agent=agent,
                                           system_prompt=system_prompt, tools=tools)
        # the engine's own estimator (and its cache), so that every figure agrees with its budget
        self.estimator = estimator = self.driver.estimator or Estimator()
        self.fixed_tokens = self.driver.fixed_tokens(estimator)
        # per message object: unchanged messages are the same dicts from step to step;
        # the cache holds the object itself so its id() cannot be reused
        self.token_cache: dict[int, tuple[dict, int]] = {}
        # the same by message id: a compaction's copy (copied_from) has its original's tokens
        self.tokens_by_id: dict[str, tuple[dict, int]] = {}

        # per stream message token estimates, once: the "none" baseline
        self.origin_ids: dict[str, int] = {}
        self.active: list[dict] = []
        self.contexts: list[list[dict]] | None = [] if keep_contexts else None
        self.rows: list[dict[str, Any]] = []
        self.compactions: list[ReplayCompaction] = []
        self.events: list[dict] = []
        self.recorded = list(history.compactions)
        self.next_recorded = 0
        self.stream_tokens_sum = 0
        # per stream message, once per history and estimator method: every replay of a
        # sweep over this history shares it
        # (estimated for the replay's model, as the engine estimates: same tokenizer and scale)
        # (display-only lines are never sent: they cost nothing, as in the engine's budget)
        self.stream_tokens = history.derived(
            ("sent_tokens", getattr(estimator, "method", "auto"), model_name),
            lambda: [0 if is_display_only(m) else estimator.message_tokens(m, model_name or None) for m in messages],
        )
        self.turn = 0
        self.prev_ctx: list[dict] = []
        self.prev_cum: list[int] = [0]
        self.prev_total = 0
        self.diverged = False
        self.recording_diverged = False
        self.pending_recorded: RecordedCompaction | None = None
        self.pending_decision: str | None = None

    def est(self, msg: dict) -> int:
        """Tokens of ``msg`` by the engine's estimator, cached per message object; a copy
        a compaction made (equal to its original but for its identity) is not estimated
        again: every compaction copies the kept tail, and re-estimating it was most of
        the replay's own estimates on a compaction-dense replay."""
        hit = self.token_cache.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        origin = msg.get("copied_from")
        carried = self.tokens_by_id.get(origin) if isinstance(origin, str) else None
        if carried is not None and same_but_identity(msg, carried[0]):
            tokens = carried[1]
        else:
            tokens = 0 if is_display_only(msg) else self.estimator.message_tokens(msg, self.setup.model or None)
        self._remember(msg, tokens)
        return tokens

    def _remember(self, msg: dict, tokens: int) -> None:
        self.token_cache[id(msg)] = (msg, tokens)
        mid = msg.get("id")
        if isinstance(mid, str):
            self.tokens_by_id[mid] = (msg, tokens)

    def step(self, index: int, msg: dict) -> None:
        """Step 3, for one recorded message: compact where the recording did (with
        ``summaries="recorded"``), make the request if it is an assistant message,
        then append it to the in-memory session."""
        self.clock.set(msg.get("timestamp"))
        recorded = self.recorded
        while self.next_recorded < len(recorded) and recorded[self.next_recorded].stream_index <= index:
            if recorded[self.next_recorded].stream_index <= 0:
                # the session *starts* from a summary: nothing before it to fold, and the
                # recording's counts describe exactly what is replayed (plus what it
                # continued from, which the unseen overhead carries)
                self.next_recorded += 1
                continue
            self.recording_diverged = True
            self.pending_recorded = recorded[self.next_recorded]
            self.next_recorded += 1
        if self.pending_recorded is not None and self.setup.recorded_provider is not None and _is_request(msg):
            self._compact_as_recorded(index)
        if msg.get("role") == "user" and not is_tool_result(msg):
            self.turn += 1
        if _is_request(msg):
            self._request(index, msg)
        self._append(index, msg)

    def _compact_as_recorded(self, index: int) -> None:
        """The recording compacted before this request: do the same, with its text."""
        driver, recorded_provider = self.driver, self.setup.recorded_provider
        recorded_provider.text = self.pending_recorded.summary_text
        tokens_before_recorded = driver.tokens(driver.prepare(self.active))
        comp = driver.compact(reason="recorded", force_structural=False)
        recorded_provider.text = None
        self.pending_recorded = None
        if comp is not None and comp.ok:
            self.reattached = _post_compaction_tokens(driver.engine)
            self.active = driver.branch()
            _register_copies(self.active, self.origin_ids)
            self.diverged = True
            record = _compaction_record(comp, driver, len(self.rows), index, self.turn, "recorded", self.origin_ids)
            record.tokens_before = tokens_before_recorded
            record.tokens_after = driver.tokens(driver.prepare(self.active))
            self.compactions.append(record)
            self.pending_decision = "recorded"

    def _request(self, index: int, msg: dict) -> None:
        """One request: prepare, decide, compact if the decision says so, record the step."""
        driver = self.driver
        prep = driver.prepare(self.active)
        decision = self._decide(prep)
        tokens_before = driver.tokens(prep)
        compacted = False
        if self.pending_decision is not None:
            decision, compacted, self.pending_decision = self.pending_decision, True, None
            tokens_before = self.compactions[-1].tokens_before
            prep = self._with_overhead(prep)
        elif decision in ("auto", "emergency"):
            slot = self.setup.begin_summary()
            comp = driver.compact(reason=decision, force_structural=decision == "emergency")
            if comp is not None and comp.ok:
                compacted = True
                self.diverged = True
                self.reattached = _post_compaction_tokens(driver.engine)
                self.active = driver.branch()
                _register_copies(self.active, self.origin_ids)
                prep = driver.prepare(self.active)
                if self._coincides(index, msg):
                    self._rejoin(index)
                else:
                    if self.follow_recording:
                        # its own request stood for what the client sent; no longer
                        self.recording_diverged = True
                    prep = self._with_overhead(prep)
                record = _compaction_record(comp, driver, len(self.rows), index, self.turn, decision, self.origin_ids)
                record.tokens_before = tokens_before
                record.tokens_after = driver.tokens(prep)
                self.setup.count_summary(slot, record)
                self.compactions.append(record)
            elif comp is not None:
                failed = {"step": len(self.rows), "event": "compaction_failed", "error": comp.error}
                self.setup.count_summary(slot, failed)
                self.events.append(failed)
        self._record_step(index, msg, prep, decision, tokens_before, compacted)

    def _coincides(self, index: int, msg: dict) -> bool:
        """Whether the replay's own compaction falls on the request where the recording compacted
        (the first request at or after the recorded point, with the provider's count)."""
        pending = self.pending_recorded
        if not (self.follow_recording and self.feed_usage and pending is not None):
            return False
        if provider_prompt_tokens(msg, self.history.format, self.setup.model) is None:
            return False
        return not any(_is_request(m) for m in self.history.messages[pending.stream_index:index])

    def _rejoin(self, index: int) -> None:
        """After a compaction on the recording's own request: measure the overhead afresh, from
        this request's recorded count (module docstring, "Following the recording")."""
        if self.none_overhead is None:
            self.none_overhead = (self.overhead, self.overhead_base, self.overhead_drift, self.overhead_history)
        self.pending_recorded = None
        self.recording_diverged = False
        self.reattached = 0
        self.overhead, self.overhead_base, self.overhead_drift, self.overhead_history = None, 0, 0, 0
        self.events.append({"step": len(self.rows), "stream_index": index, "event": "rejoined_recording",
                            "message": "compacted on the recording's own compaction request: its counts are fed again"})

    # -- the client's trigger check and the unseen overhead (module docstring) -------------------

    def _decide(self, prep: Any) -> str:
        """The decision for this request: the engine's, or the client's "last-response" check."""
        if self.trigger_check != "last-response" or self.last_response_total is None:
            # the first request has no response before it: the engine's own check
            self.check_tokens = self.driver.tokens(prep)
            return self.driver.decide(prep)
        self.check_tokens = self.last_response_total
        if self.check_count != "last-response":
            from .client_rules import extra_check_tokens

            self.check_tokens += extra_check_tokens(self.driver.context(prep), self.check_count)
        return self._decide_on_last_response(prep)

    def _decide_on_last_response(self, prep: Any) -> str:
        """The engine's thresholds applied to the last response's prompt + output.

        The engine's ``prepare`` measures the request about to be sent (with the tool
        results appended since the last response); Claude Code and Codex compare the
        last response's reported total instead (``preTokens`` equals it on the
        corpus), for the blocking limit as for the trigger. The engine's guard
        (auto-compaction disabled, as the request's own decision says) still applies.
        """
        import dataclasses

        from opctx.context.types import DecisionKind

        if not dataclasses.is_dataclass(prep):
            return self.driver.decide(prep)
        budget = max(1, self.driver.input_budget(prep))
        pct = self.check_tokens / budget
        own = getattr(prep, "decision", None)
        disabled = own is not None and own.kind is DecisionKind.DISABLED
        # a count trigger (turns, messages) fired on the request itself, whatever the figure
        fired = getattr(own, "fired", None)
        decision = self.driver.engine.decide(pct, auto_disabled=disabled, fired=fired)
        view = dataclasses.replace(prep, budget_pct=pct, decision=decision)
        return self.driver.decide(view)

    def _measure_overhead(self, provider_tokens: int | None, request_estimate: int) -> None:
        """Provider count minus the estimate of the recorded context, while the replay knows it.

        The recorded context is everything appended so far (``stream_tokens_sum``:
        display-only lines cost nothing) until the recording's next compaction;
        after it, the last figure is carried. Following the recording (module docstring) it
        is the replay's own request (``request_estimate``), which stands for what the client
        sent.
        """
        if provider_tokens is not None and provider_tokens > 0 and not self.recording_diverged:
            sent = (max(0, int(request_estimate) - self.fixed_tokens) if self.follow_recording
                    else self.stream_tokens_sum)
            overhead = int(provider_tokens) - (self.fixed_tokens + sent)
            if self.overhead is None:
                self.overhead_base = overhead
            self.overhead = overhead
            self.overhead_drift = overhead - self.overhead_base
            self.overhead_history = sent

    def _overhead_for(self, request_estimate: int, state: tuple[int | None, int, int, int] | None = None) -> int:
        """The overhead carried to a request whose estimate is ``request_estimate``.

        Two parts: what the first counted request had beyond its estimate (system
        prompt, tool schemas, re-attached files, a continued session's earlier
        context: it stays whatever the history becomes), and the drift measured since
        (what the estimate misses of the content added since), which belongs to the
        history it was measured on and scales with it: a compaction that folds the
        history folds its drift too. While the replay sends what the recording sent,
        the sum is exactly the measured overhead. ``state``: another ``(overhead, base,
        drift, history)`` than the current one (the "none" baseline's, after a rejoin).
        """
        overhead, base, drift, measured_on = state or (
            self.overhead, self.overhead_base, self.overhead_drift, self.overhead_history)
        if overhead is None:
            return 0
        history = max(0, int(request_estimate) - self.fixed_tokens)
        if not drift or not measured_on or history == measured_on:
            return base + drift
        return base + int(round(drift * history / measured_on))

    def _request_estimate(self, prep: Any) -> int:
        """opctx's estimate of the request as the replay sends it (display-only lines excluded)."""
        return self.fixed_tokens + sum(self.est(m) for m in self.driver.context(prep))

    def _feed_usage(self, prep: Any, request_estimate: int, output_tokens: int) -> int | None:
        """Feed the engine this request's count: its estimate + the unseen overhead.

        While the replay sends what the recording sent this is exactly the recorded
        count; after any divergence it is what the provider would have counted for
        the replayed request. ``None`` (nothing fed) before any overhead is known.
        """
        if not self.feed_usage or self.overhead is None:
            return None
        prompt = max(0, int(request_estimate) + self._overhead_for(request_estimate) + self.reattached)
        self.driver.after_turn({"input_tokens": prompt, "output_tokens": int(output_tokens)}, prep)
        return prompt

    def _with_overhead(self, prep: Any) -> Any:
        """After a compaction, the request again with the overhead (the engine forgot its count)."""
        if not self.feed_usage or self.overhead is None:
            return prep
        self._feed_usage(prep, self._request_estimate(prep), 0)
        return self.driver.prepare(self.active)

    def _record_step(
        self, index: int, msg: dict, prep: Any, decision: str, tokens_before: int, compacted: bool
    ) -> None:
        """The row of ``steps_df`` for this request, with the prefix it shares with the previous one."""
        driver, rows = self.driver, self.rows
        model_name = self.setup.model
        ctx = driver.context(prep)
        tokens = driver.tokens(prep)
        redacted = driver.redacted(prep)
        if redacted:
            self.diverged = True
        # prefix carried from the previous request
        common = common_prefix_length(self.prev_ctx, ctx)
        cum = self.prev_cum[: common + 1]
        running = cum[-1]
        for m in ctx[common:]:
            running += self.est(m)
            cum.append(running)
        kept_tokens = min(self.prev_total, self.fixed_tokens + cum[common]) if rows else 0
        invalidated = self.prev_total - kept_tokens if rows else 0
        usage = msg.get("usage") if isinstance(msg.get("usage"), dict) else None
        provider_tokens = provider_prompt_tokens(msg, self.history.format, model_name)
        output_tokens = usage.get("output_tokens") if usage else None
        if output_tokens is None:
            output_tokens = self.est(msg)
        diverged = self.diverged or self.recording_diverged
        if self.feed_usage:
            self._measure_overhead(provider_tokens, self.fixed_tokens + cum[-1])
        # the "none" baseline as the provider would count it too, when counts are fed
        overhead = (self._overhead_for(self.fixed_tokens + self.stream_tokens_sum, self.none_overhead)
                    if self.feed_usage else 0)
        rows.append(
            {
                "step": len(rows),
                "stream_index": index,
                "node_id": msg.get("id"),
                "turn": self.turn,
                "timestamp": float(self.clock.now),
                "tokens": int(tokens),
                "tokens_none": int(self.fixed_tokens + self.stream_tokens_sum + overhead),
                "tokens_before_compaction": int(tokens_before),
                "check_tokens": int(self.check_tokens),
                "budget_pct": float(driver.budget_pct(prep)),
                "input_budget": int(driver.input_budget(prep)),
                "decision": decision,
                "compacted": compacted,
                "redacted": int(redacted),
                "tokens_freed_by_aging": int(getattr(prep, "tokens_freed_by_aging", 0) or 0),
                "context_messages": len(ctx),
                "prefix_kept_tokens": int(kept_tokens),
                "prefix_invalidated_tokens": int(invalidated),
                "provider_input_tokens": provider_tokens,
                "output_tokens": int(output_tokens),
                "diverged": bool(diverged),
            }
        )
        if self.contexts is not None:
            self.contexts.append(ctx)
        fed = self._feed_usage(prep, self.fixed_tokens + cum[-1], int(output_tokens))
        self.last_response_total = (fed if fed is not None else int(tokens)) + int(output_tokens)
        self.prev_ctx, self.prev_cum, self.prev_total = ctx, cum, int(tokens)

    def _append(self, index: int, msg: dict) -> None:
        """The recorded message joins the in-memory session and the active history."""
        active = self.active
        renamed = replay_message_id(msg.get("id"), index)
        if renamed != msg.get("id"):
            msg = {**msg, "id": renamed}  # an import's random id: a stable one (_replay_db.replay_message_id)
        stored = self.driver.append(msg, parent=active[-1]["id"] if active else None, now=self.clock.now, index=index)
        self.origin_ids[stored["id"]] = index
        active.append(stored)
        # the stored copy has the recorded message's tokens: seed the cache, skip the estimate
        self._remember(stored, self.stream_tokens[index])
        self.stream_tokens_sum += self.stream_tokens[index]

    def result(self, started: float, params: dict[str, Any]) -> ReplayResult:
        """Step 4: the ``ReplayResult`` (``steps_df`` built once, at the end); closes the driver."""
        policy = getattr(self.driver.engine, "policy", None)
        for idle in (_idle_strategy(self.driver.engine), _idle_thinking(self.driver.engine)):
            if idle is not None:
                self.events.append(idle)
        mode = PROVIDER_USAGE if self.feed_usage else ESTIMATES
        steps_df = _steps_frame(self.rows, policy.to_json() if policy is not None else None, mode)
        elapsed = time.perf_counter() - started
        setup = self.setup
        result = ReplayResult(
            history=self.history,
            preset=self.preset_name,
            params={**self.engine_cfg, **params, "trigger_check": self.trigger_check, "feed_usage": self.feed_usage},
            model=setup.model,
            context_window=setup.window,
            summaries=_summaries_used(setup.summaries_label, policy),
            steps_df=steps_df,
            compactions=self.compactions,
            contexts=self.contexts,
            origin_ids=self.origin_ids,
            elapsed_s=elapsed,
            events=self.events + self.driver.events,
            policy=policy,
            mode=mode,
        )
        self.driver.close()
        return result


def _summaries_used(label: str, policy: Any) -> str:
    """What the replay's compactions summarised with: the replay's summary source, unless
    the policy's ``summary.source`` overrides it (``forget``: no summary; ``structural``)."""
    source = getattr(getattr(policy, "summary", None), "source", "llm")
    return label if source == "llm" or label == "recorded" else source


def _idle_strategy(engine: Any) -> dict | None:
    """The ``strategy_idle`` event of a replay whose masking, clearing or view ager found
    nothing to act on in the whole session (no observation, or never more than it keeps, or
    never past its trigger): the strategy then equals no strategy on this history, which a
    figure must not hide."""
    ager = getattr(engine, "ager", None)
    if getattr(ager, "acted", True):
        return None
    kind = engine.policy.aging.kind if getattr(engine, "policy", None) is not None else type(ager).__name__
    if callable(getattr(ager, "idle_reason", None)):  # a view (recent-events) says why itself
        return {"event": "strategy_idle", "ager": kind, "observations": 0,
                "message": f"{kind}: nothing left out: {ager.idle_reason()}"}
    seen = int(getattr(ager, "observations_seen", 0))
    why = (
        "no observation (tool result, or user message marked is_observation) in the session"
        if not seen else f"{seen} observation(s), none past the last {ager.keep_last} kept"
        + (f" once the history passed {ager.trigger_tokens:,} tokens" if getattr(ager, "trigger_tokens", None) else "")
    )
    return {"event": "strategy_idle", "ager": kind, "observations": seen, "message": f"{kind}: nothing masked: {why}"}


def _idle_thinking(engine: Any) -> dict | None:
    """The ``strategy_idle`` event of a replay whose thinking clearing
    (``aging.keep_thinking_turns``) cleared nothing the model would have held: no thinking
    in the session, all of it in the turns kept, or only what the model drops anyway."""
    clearer = getattr(engine, "thinking_clearer", None)
    why = clearer.idle_reason() if clearer is not None else None
    if why is None:
        return None
    return {"event": "strategy_idle", "ager": "clear-thinking", "observations": int(clearer.thinking_seen),
            "message": f"clear-thinking: nothing cleared: {why}"}


def _register_copies(branch: list[dict], origin_ids: dict[str, int]) -> None:
    """Map the copies a compaction made to the stream index of what they copy."""
    for msg in branch:
        mid = msg.get("id")
        if mid in origin_ids:
            continue
        source = msg.get("copied_from")
        if source is not None and source in origin_ids:
            origin_ids[mid] = origin_ids[source]


def _compaction_record(comp: Any, driver: Any, step: int, index: int, turn: int, reason: str, origin_ids: dict[str, int]) -> ReplayCompaction:
    meta = driver.summary_meta(comp)
    return ReplayCompaction(
        step=step,
        stream_index=index,
        turn=turn,
        reason=reason,
        tokens_before=int(getattr(comp, "tokens_before", 0) or 0),
        tokens_after=int(getattr(comp, "tokens_after", 0) or 0),
        folded_ids=list(meta.get("folded_ids") or ()),
        kept_ids=list(meta.get("kept_ids") or ()),
        protected_ids=list(meta.get("protected_ids") or ()),
        summary_text=getattr(comp, "summary_text", "") or "",
        fell_back_to_structural=bool(getattr(comp, "fell_back_to_structural", False)),
        ok=bool(getattr(comp, "ok", True)),
        error=getattr(comp, "error", None),
        cut_index=getattr(comp, "cut_index", None),
        summary_id=getattr(comp, "summary_id", None),
        duration_ms=float(getattr(comp, "duration_ms", 0.0) or 0.0),
        folded_indices=[origin_ids.get(i) for i in meta.get("folded_ids") or ()],
        kept_indices=[origin_ids.get(i) for i in meta.get("kept_ids") or ()],
        protected_indices=[origin_ids.get(i) for i in meta.get("protected_ids") or ()],
    )


_INT_COLUMNS = (
    "step", "stream_index", "turn", "tokens", "tokens_none", "tokens_before_compaction", "check_tokens",
    "input_budget", "redacted", "tokens_freed_by_aging", "context_messages",
    "prefix_kept_tokens", "prefix_invalidated_tokens", "output_tokens",
)


def _steps_frame(rows: list[dict[str, Any]], policy: str | None = None, mode: str = ESTIMATES) -> Any:
    """``steps_df`` built column by column with its final dtypes (no per-column casts);
    ``policy`` (the policy's JSON, one category) and ``replay_mode`` (how the requests were
    counted) are its last columns."""
    import numpy as np
    import pandas as pd

    def col(name: str) -> list:
        return [r[name] for r in rows]

    timestamps = np.asarray(col("timestamp"), dtype="float64")
    data: dict[str, Any] = {}
    for name in ("step", "stream_index", "node_id", "turn", "timestamp", "time", "tokens", "tokens_none",
                 "tokens_before_compaction", "check_tokens", "budget_pct", "input_budget", "decision", "compacted",
                 "redacted", "tokens_freed_by_aging", "context_messages", "prefix_kept_tokens",
                 "prefix_invalidated_tokens", "provider_input_tokens", "output_tokens", "diverged"):
        if name in _INT_COLUMNS:
            data[name] = np.asarray(col(name), dtype="int64")
        elif name == "timestamp":
            data[name] = timestamps
        elif name == "time":
            data[name] = pd.to_datetime(timestamps, unit="s", utc=True)
        elif name == "budget_pct":
            data[name] = np.asarray(col(name), dtype="float64")
        elif name in ("compacted", "diverged"):
            data[name] = np.asarray(col(name), dtype=bool)
        elif name == "decision":
            data[name] = pd.Categorical(col(name), categories=DECISIONS)
        elif name == "provider_input_tokens":
            data[name] = pd.array(col(name), dtype="Int64")
        else:
            data[name] = col(name)
    data["policy"] = pd.Categorical([policy] * len(rows))
    data["replay_mode"] = pd.Categorical([mode] * len(rows), categories=REPLAY_MODES)
    return pd.DataFrame(data)
