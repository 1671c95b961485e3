"""The data types of the context orchestration layer (spec §7).

Plain dataclasses, shared by every component so that a custom component (a
``BudgetAllocator`` subclass, a fake ``Summarizer`` in a test) only has to speak
these shapes. Field names and meanings follow the specification; additions are
marked as such.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Literal

__all__ = [
    "UsageState",
    "BudgetAllocation",
    "ReferenceMap",
    "AgingReport",
    "CutPoint",
    "SummaryResult",
    "TurnPrep",
    "CompactResult",
    "Decision",
    "DecisionKind",
    "CompactRequest",
]

UsageSource = Literal["estimate", "provider", "cached"]
CompactReason = Literal["auto", "manual", "recovered"]


@dataclass
class UsageState:
    """What the provider last reported for a session, plus running totals (§2.4)."""

    last_prompt_tokens: int = 0
    last_cache_read_tokens: int = 0
    cumulative_prompt_tokens: int = 0
    cumulative_completion_tokens: int = 0
    turn_count: int = 0
    compaction_count: int = 0
    source: UsageSource = "estimate"
    # additions: needed for the hybrid estimate and cache-aware cost
    last_cache_write_tokens: int = 0
    last_completion_tokens: int = 0
    # how many history messages the last provider count covered
    last_history_len: int = 0
    updated_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> UsageState:
        """A state from its persisted form; a field of the wrong type gets its default.

        The dict comes from a session's ``extra_meta``, which anything may have written:
        one bad field must not make every later ``record`` fail.
        """
        if not d:
            return cls()
        if not isinstance(d, dict):
            raise TypeError(f"usage state must be a dict, got {type(d).__name__}")
        fields: dict[str, Any] = {}
        for name in cls.__dataclass_fields__:
            if name not in d:
                continue
            value = d[name]
            if name == "source":
                if value in ("provider", "estimate", "cached"):
                    fields[name] = value
            elif name == "updated_at":
                if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                    fields[name] = float(value)
            elif isinstance(value, float) and value.is_integer() and value >= 0:
                fields[name] = int(value)  # a JSON writer that has no integers
            elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                fields[name] = value
        return cls(**fields)


@dataclass
class BudgetAllocation:
    """How a context window is split for one request (§2.3). All figures in tokens."""

    context_window: int
    system_prompt: int
    history: int
    tools_schema: int
    output_reserve: int
    input_used: int
    input_budget: int
    input_used_pct: float
    headroom: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ReferenceMap:
    """Which older messages later messages still refer to (§3.3)."""

    cited_tool_use_ids: set[str] = field(default_factory=set)
    quoted_snippets_by_msg: dict[str, set[str]] = field(default_factory=dict)
    last_built_at: float = 0.0
    # addition: ids of every cited message (tool results and plain messages alike)
    cited_message_ids: set[str] = field(default_factory=set)

    def is_cited(self, msg_id: str | None = None, tool_use_id: str | None = None) -> bool:
        return _member(msg_id, self.cited_message_ids) or _member(tool_use_id, self.cited_tool_use_ids)


def _member(value: object, ids: set) -> bool:
    # ids come from transcripts: an unhashable one (a list) is never in a set of strings
    try:
        return value is not None and value in ids
    except TypeError:
        return False


@dataclass
class AgingReport:
    """What one aging pass did (§3)."""

    redacted: int = 0
    tokens_freed: int = 0
    references_protected: int = 0
    redacted_ids: list[str] = field(default_factory=list)
    #: assistant messages whose thinking was cleared (``thinking_clearing``; not in ``redacted``,
    #: which counts tool results)
    thinking_cleared: int = 0


@dataclass
class CutPoint:
    """Where ``find_cut_index`` would cut, and why (§4.2). Addition for research use."""

    index: int
    desired_keep: int
    max_safe_keep: int
    effective_keep: int
    tail_tokens: int
    tail_text_messages: int
    protected_head: int
    steps: list[str] = field(default_factory=list)
    ok: bool = True
    reason: str | None = None
    #: Addition: positions before ``index`` (and at or after ``protected_head``) kept
    #: verbatim right after the summary, in order, ahead of the tail. Two kinds: the
    #: latest user request, when snapping back to it would give up most of the fold; and,
    #: when the cut lies inside a thinking unit larger than the ceiling (one assistant
    #: turn that thought, then a tool loop past every budget), that unit's first tool
    #: group (the assistant message with the thinking block, then its results), so the
    #: loop kept in the tail still opens with its thinking (``summarize``, "Thinking units").
    pinned: tuple[int, ...] = ()


@dataclass
class SummaryResult:
    """What ``Summarizer.summarise`` produced (§4.4-4.6)."""

    text: str
    fell_back_to_structural: bool = False
    error: str | None = None
    used_previous_summary: bool = False
    prompt: str = ""
    summarised_count: int = 0
    summarised_tokens: int = 0


class DecisionKind(StrEnum):
    """What a prepare decided for the request (``Decision.kind``).

    ``none``: under every threshold; ``age``: under every threshold, with tool results
    cleared by aging in this request (aging alone keeps it there); ``recommend``: at or
    above the recommend threshold; ``compact``: at or above the automatic threshold;
    ``emergency``: at or above the emergency threshold (the compaction uses the
    structural summary at once); ``disabled``: at or above the automatic threshold while
    the anti-thrash guard has automatic compaction disabled.
    """

    NONE = "none"
    AGE = "age"
    RECOMMEND = "recommend"
    COMPACT = "compact"
    EMERGENCY = "emergency"
    DISABLED = "disabled"


# the telemetry word of each kind in ``TurnPrep.decision_path`` (kept as it always was)
_PATH_WORDS = {
    DecisionKind.NONE: "ok",
    DecisionKind.AGE: "ok",
    DecisionKind.RECOMMEND: "recommend",
    DecisionKind.COMPACT: "auto_compact",
    DecisionKind.EMERGENCY: "emergency",
    DecisionKind.DISABLED: "auto_compact_disabled",
}


@dataclass(frozen=True)
class Decision:
    """The engine's decision for one request, with the figures it was taken on.

    ``budget_pct`` is the share of the input budget the decision compared, against the
    thresholds ``recommend_pct`` / ``auto_pct`` / ``emergency_pct`` (``math.inf``: never);
    ``redacted`` counts the tool results aging cleared in the request; ``reason`` says
    why automatic compaction is disabled (``disabled`` only). ``fired``: the count trigger
    that fired (``"trigger.turns"``, ``"trigger.messages"``, ``"trigger.tokens"``:
    ``TriggerPolicy.fired``), which makes it a compaction whatever the share. ``compacts``:
    whether the turn loop should compact now.

    >>> Decision.of(0.1, (0.7, 0.8, 0.95), fired="trigger.turns").kind
    <DecisionKind.COMPACT: 'compact'>
    """

    kind: DecisionKind
    budget_pct: float
    recommend_pct: float
    auto_pct: float
    emergency_pct: float
    redacted: int = 0
    reason: str | None = None
    fired: str | None = None

    @property
    def compacts(self) -> bool:
        return self.kind in (DecisionKind.COMPACT, DecisionKind.EMERGENCY)

    @property
    def recommends(self) -> bool:
        return self.budget_pct >= self.recommend_pct

    @property
    def path_word(self) -> str:
        """The word ``decision_path`` records for it (telemetry only)."""
        return _PATH_WORDS[self.kind]

    @classmethod
    def of(
        cls,
        budget_pct: float,
        thresholds: tuple[float, float, float],
        *,
        auto_disabled: bool = False,
        redacted: int = 0,
        reason: str | None = None,
        fired: str | None = None,
    ) -> Decision:
        """The decision at ``budget_pct`` for ``(recommend, auto, emergency)`` thresholds,
        and the count trigger that ``fired`` (if any)."""
        recommend, auto, emergency = thresholds
        if (budget_pct >= auto or fired) and auto_disabled:
            kind = DecisionKind.DISABLED
        elif budget_pct >= emergency:
            kind = DecisionKind.EMERGENCY
        elif budget_pct >= auto or fired:
            kind = DecisionKind.COMPACT
        elif budget_pct >= recommend:
            kind = DecisionKind.RECOMMEND
        else:
            kind = DecisionKind.AGE if redacted else DecisionKind.NONE
        return cls(kind, budget_pct, recommend, auto, emergency, redacted,
                   reason if kind is DecisionKind.DISABLED else None, fired)


@dataclass
class TurnPrep:
    """Everything ``ContextEngine.prepare`` assembled for one request (§7)."""

    system_prompt: str
    agent_messages: list[dict]
    history_dicts: list[dict]
    budget: BudgetAllocation
    usage: UsageState
    tool_results_redacted: int = 0
    tokens_freed_by_aging: int = 0
    references_protected: int = 0
    summary_id: str | None = None
    decision_path: list[str] = field(default_factory=list)
    budget_pct: float = 0.0
    context_window: int = 0
    # additions (opctx.context.fit): the estimate of the request as it will be sent
    # (system prompt + tools + agent_messages after truncating oversized parts; None
    # when the engine did not fit it), how many parts were truncated, and why the
    # request cannot fit even truncated (None when it fits)
    request_tokens: int | None = None
    truncated_parts: int = 0
    overflow: str | None = None
    # addition: the decision, typed (decision_path is telemetry; nothing parses it).
    # None from an engine that does not decide (ContextEngine.should_auto_compact then
    # compares budget_pct with its threshold)
    decision: Decision | None = None


@dataclass
class CompactResult:
    """The outcome of one compaction (§7)."""

    ok: bool
    summary_text: str = ""
    summary_id: str | None = None
    summarised_count: int = 0
    summarised_tokens: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    duration_ms: float = 0.0
    used_previous_summary: bool = False
    reason: CompactReason = "auto"
    error: str | None = None
    fell_back_to_structural: bool = False
    # additions: what the research toolkit needs to replay and diff
    cut_index: int | None = None
    kept_count: int = 0
    protected_count: int = 0
    new_head_id: str | None = None
    disabled_auto: bool = False


@dataclass(frozen=True)
class CompactRequest:
    """What the turn loop (or any caller) asks ``ContextEngine.compact`` to do.

    ``reason``: ``"auto"``, ``"manual"`` or ``"recovered"``; ``None`` means ``"manual"``
    when ``user_initiated`` else ``"auto"``. ``user_initiated``: a person asked (the
    ``/compact`` command); a manual compaction re-arms automatic compaction and never
    disables it. ``trigger``: a free label recorded on the summary node (a replay puts
    the recording's reason there). ``keep_recent_tokens``: keep exactly this many tokens
    of tail (spec §4.3) instead of the policy's clamps. ``previous_summary``: UPDATE from
    this text instead of the summary being folded. ``tools``: the tool schemas the
    request carries (counted like the system prompt). ``session_db``: the store to
    read and write (default: the engine's). ``provider_call``: summarise with this
    provider when the engine's summariser has none. ``on_event``: receives
    ``compaction_started`` / ``compaction_finished``. ``cancel_event``: set to abandon the
    summary call (the structural summary is used).
    """

    session_id: str
    agent: Any = None
    model: str | None = None
    reason: CompactReason | None = None
    user_initiated: bool = False
    trigger: str | None = None
    keep_recent_tokens: int | None = None
    previous_summary: str | None = None
    tools: Sequence[dict] | None = None
    session_db: Any = None
    provider_call: Callable[..., Any] | None = None
    on_event: Callable[[str, dict], Any] | None = None
    cancel_event: threading.Event | None = None

    @property
    def why(self) -> CompactReason:
        """``reason``, else ``manual`` or ``auto`` by who asked; anything else is a ``ValueError``."""
        why = self.reason or ("manual" if self.user_initiated else "auto")
        if why not in ("auto", "manual", "recovered"):
            raise ValueError(f"compaction reason must be auto, manual or recovered, got {why!r}")
        return why  # type: ignore[return-value]

    @classmethod
    def from_arguments(
        cls,
        agent: Any,
        session_id: str,
        model: str | None,
        on_event: Callable[[str, dict], Any] | None = None,
        previous_summary: str | None = None,
        user_initiated: bool = False,
        cancel_event: threading.Event | None = None,
        keep_recent_tokens: int | None = None,
        *,
        tools: Sequence[dict] | None = None,
        reason: CompactReason | None = None,
        trigger: str | None = None,
        session_db: Any = None,
        provider_call: Callable[..., Any] | None = None,
    ) -> CompactRequest:
        """The request of the older ``compact(agent, session_id, model, ...)`` arguments."""
        return cls(
            session_id, agent=agent, model=model, reason=reason, user_initiated=user_initiated,
            trigger=trigger, keep_recent_tokens=keep_recent_tokens,
            previous_summary=previous_summary, tools=tools, session_db=session_db,
            provider_call=provider_call, on_event=on_event, cancel_event=cancel_event,
        )
