"""``CompactionPolicy``: one typed value for everything that decides when and how a
history is compacted or aged.

A policy is frozen and made of parts, each a small frozen dataclass:

============  ========================================================================
``trigger``   when to recommend a compaction, compact, and compact at once with the
              structural summary (shares of the input budget)
``cut``       what a compaction keeps verbatim: protected head, kept tail, floors
``aging``     which ager clears old tool output between compactions, and its gates
``budget``    the window and the output reserve the input budget is split from
``guard``     the anti-thrash guard: when automatic compaction stops, and re-arms
``summary``   the summary call: prompt sizes, reply reserve, timeout
``client``    the client a preset models (Claude Code, Codex): its version and its
              own settings, resolved into the parts above when an engine is built
============  ========================================================================

Every field states its default once, with its source, in its metadata
(:func:`policy_fields` lists them: ``name`` (dotted), ``default``, ``kind``, ``doc``,
``source``, ``legacy`` (the older flat names), ``choices``). The engine
(``DefaultContextEngine(policy)``), the presets (``opctx.lab.presets``: every preset *is*
a policy), the tuner's sliders, ``sweep`` grids, ``ReplayResult.policy`` and ``opctx
presets show`` all read this one value; ``docs/design.md`` ("The compaction policy")
lists the fields.

>>> p = CompactionPolicy()
>>> p.trigger.auto_pct, p.cut.keep_ratio
(0.8, 0.1)
>>> q = p.replace(**{"cut.keep_ratio": 0.2, "trigger.auto_pct": 0.9})
>>> [(c.name, c.old, c.new) for c in p.diff(q)]
[('trigger.auto_pct', 0.8, 0.9), ('cut.keep_ratio', 0.1, 0.2)]
>>> CompactionPolicy.from_dict(q.to_dict()) == q
True
>>> p.replace(**{"cut.keep_ratio": 1.5})
Traceback (most recent call last):
...
ValueError: cut.keep_ratio must be a fraction in [0, 1], got 1.5

Conventions
===========
* **Never is ``None``.** A trigger threshold of ``None`` never fires (the masking and
  ``none`` strategies compact never); it is not a percentage outside 0-1.
* **Thresholds are shares of the input budget** (``BudgetAllocation.input_used_pct``:
  ``input_used / (window - output_reserve)``), above 0. A share may exceed 1: past the
  budget, into the output reserve (Codex's blocking tier sits at the full window).
* **``"client"`` means "from the client's rules".** A client preset states its
  thresholds (and Claude Code its output reserve, and its ager) as the client's own:
  tokens before the window, per client version and model (``opctx.lab.presets``,
  ``TRIGGER_RULES``). Those fields hold the marker ``"client"`` until an engine is built
  for a window, model and version; the built engine's policy (``engine.policy``,
  ``ReplayResult.policy``) holds the resolved numbers. ``DefaultContextEngine`` refuses
  an unresolved policy.
* **Counts beside shares.** The trigger part also holds count conditions
  (``trigger.tokens``, ``trigger.messages``, ``trigger.turns``: ``None`` = off; the first
  condition that fires decides, ``TriggerPolicy.fired``), and the cut "keep" by count
  (``cut.keep_messages`` / ``keep_turns`` / ``keep_tool_uses`` / ``keep_tokens``, at most
  one; ``CutPolicy.keep``) instead of its token clamps: what LangChain's
  ``SummarizationMiddleware(trigger=..., keep=...)``, the OpenHands condensers and "The
  Complexity Trap" state. ``aging.kind`` names the ager, whose settings are fields of
  ``aging`` (``clear-tool-uses``: Anthropic's and LangChain's tool-use clearing);
  ``summary.source`` says what a compaction summarises with (``llm``, ``structural``,
  ``forget``). *Who*
  summarises (a provider call, an endpoint with its cache) is a resource, not a value to
  compare and store as JSON, so it stays the engine's ``summarizer_provider`` (a replay's
  ``summaries``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, NamedTuple

__all__ = [
    "CompactionPolicy",
    "TriggerPolicy",
    "CutPolicy",
    "AgingPolicy",
    "BudgetPolicy",
    "GuardPolicy",
    "SummaryPolicy",
    "ClientPolicy",
    "PolicyField",
    "PolicyChange",
    "policy_fields",
    "FROM_CLIENT",
    "AGING_KINDS",
    "RESERVE_POLICIES",
    "SUMMARY_SOURCES",
    "COUNT_TRIGGERS",
    "TOKEN_TRIGGER_BASES",
    "KEEP_FIELDS",
    "PARTS",
]

#: The marker of a value the client's rules decide when an engine is built (module docstring).
FROM_CLIENT = "client"
#: What ``aging.kind`` may name (``AgingPolicy``).
AGING_KINDS = ("turns", "masking", "clear-tool-uses", "recent-events", "microcompact", "client", "none")
#: What ``summary.source`` may name (``SummaryPolicy``).
SUMMARY_SOURCES = ("llm", "structural", "forget")
#: The count triggers of ``TriggerPolicy`` (the first that fires decides) and the "keep"
#: fields of ``CutPolicy`` (at most one set).
COUNT_TRIGGERS = ("trigger.tokens", "trigger.messages", "trigger.turns")
#: What ``trigger.tokens`` counts (``trigger.tokens_of``): the request, or the history alone.
TOKEN_TRIGGER_BASES = ("request", "history")
KEEP_FIELDS = ("cut.keep_messages", "cut.keep_turns", "cut.keep_tool_uses", "cut.keep_tokens")
#: The output reserve rules of ``BudgetAllocator`` (``budget.reserve_policy``).
RESERVE_POLICIES = ("cap", "floor")

Threshold = float | Literal["client"] | None


def _setting(
    default: Any,
    *,
    kind: str,
    doc: str,
    source: str,
    legacy: tuple[str, ...] = (),
    choices: tuple[Any, ...] = (),
    optional: bool = False,
    positive: bool = False,
    maximum: float | None = None,
    from_client: bool = False,
    all_is_none: bool = False,
) -> Any:
    """A policy field: its default and, in its metadata, what it means and where it comes from.

    ``kind`` decides the check and the control a UI gives it: ``threshold`` (a share of
    the input budget above 0, ``None`` = never, ``"client"`` = from the client's rules),
    ``fraction`` (0-1), ``tokens`` / ``count`` / ``chars`` (integers >= 0), ``seconds``,
    ``percent`` (1-100), ``choice`` (one of ``choices``), ``flag`` (bool), ``text``,
    ``names`` (a tuple of names; JSON lists come back as tuples).
    ``from_client``: the field may hold ``"client"`` (the client's rules decide it).
    ``all_is_none``: ``"all"`` is accepted for ``None`` (a keep count whose source spells
    "keep everything" ``"all"``) and stored as ``None``.
    """
    return field(
        default=default,
        metadata={
            "kind": kind,
            "doc": doc,
            "source": source,
            "legacy": legacy,
            "choices": choices,
            "optional": optional,
            "positive": positive,
            "maximum": maximum,
            "from_client": from_client or kind == "threshold",
            "all_is_none": all_is_none,
        },
    )


# -- checks -------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _checked(name: str, value: Any, meta: Mapping[str, Any]) -> Any:
    """``value`` as stored (shares and fractions as floats), or a ``ValueError`` naming ``name``."""
    kind = meta["kind"]
    if meta["all_is_none"] and isinstance(value, str) and value == "all":
        value = None
    if value is None and (meta["optional"] or kind == "threshold"):
        return None
    if meta["from_client"] and value == FROM_CLIENT:
        return value
    if kind == "threshold":
        if not _is_number(value) or not math.isfinite(value) or value <= 0:
            raise ValueError(
                f"{name} must be a share of the input budget above 0 (None: never, "
                f"{FROM_CLIENT!r}: from the client's rules), got {value!r}"
            )
        return float(value)
    if kind == "fraction":
        low_ok = (lambda v: v > 0) if meta["positive"] else (lambda v: v >= 0)
        if not _is_number(value) or not math.isfinite(value) or not low_ok(value) or value > 1:
            span = "(0, 1]" if meta["positive"] else "[0, 1]"
            raise ValueError(f"{name} must be a fraction in {span}, got {value!r}")
        return float(value)
    if kind in ("tokens", "count", "chars"):
        if _is_number(value) and isinstance(value, float) and value.is_integer():
            value = int(value)  # a JSON writer without integers
        if not isinstance(value, int) or isinstance(value, bool) or value < (1 if meta["positive"] else 0):
            what = "a positive int" if meta["positive"] else "an int >= 0"
            raise ValueError(f"{name} must be {what}{' or None' if meta['optional'] else ''}, got {value!r}")
        return value
    if kind in ("seconds", "percent"):
        maximum = meta["maximum"]
        if (
            not _is_number(value)
            or not math.isfinite(value)
            or (value <= 0 if meta["positive"] else value < 0)
            or (maximum is not None and value > maximum)
        ):
            span = f"in (0, {maximum:g}]" if maximum is not None else ("> 0" if meta["positive"] else ">= 0")
            raise ValueError(f"{name} must be a number {span}{' or None' if meta['optional'] else ''}, got {value!r}")
        return value
    if kind == "choice":
        if value not in meta["choices"]:
            raise ValueError(f"{name} must be one of {', '.join(map(repr, meta['choices']))}, got {value!r}")
        return value
    if kind == "flag":
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be a bool, got {value!r}")
        return value
    if kind == "names":
        if isinstance(value, str) or not isinstance(value, list | tuple) or not all(
            isinstance(v, str) and v for v in value
        ):
            raise ValueError(f"{name} must be a list of non-empty names, got {value!r}")
        return tuple(value)
    if kind == "text":
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty str{' or None' if meta['optional'] else ''}, got {value!r}")
        return value
    raise AssertionError(f"unknown policy field kind {kind!r}")  # pragma: no cover


class _Part:
    """What every part shares: checks by field metadata, ``to_dict``, its dotted names."""

    PART: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            value = _checked(f"{self.PART}.{f.name}", getattr(self, f.name), f.metadata)
            object.__setattr__(self, f.name, value)
        self._check()

    def _check(self) -> None:
        """Rules across the fields of one part."""

    def to_dict(self) -> dict[str, Any]:
        # names as lists, as JSON gives them back (the check turns them into tuples again)
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in fields(self)}  # type: ignore[arg-type]


# -- the parts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TriggerPolicy(_Part):
    """When to recommend a compaction, compact, and compact with the structural summary at once.

    Each threshold is a share of the input budget (above 1: past it), ``None`` for never,
    ``"client"`` for the client's own (module docstring). The engine compacts at or above
    ``auto_pct``; at or above ``emergency_pct`` it uses the structural summary at once (no
    room for a summary call); from ``recommend_pct`` it emits ``compaction_recommended``.
    Those given must satisfy ``recommend_pct <= auto_pct <= emergency_pct``.
    """

    PART: ClassVar[str] = "trigger"

    recommend_pct: Threshold = _setting(
        0.70, kind="threshold", legacy=("recommend_pct",),
        doc="share of the input budget from which compaction is recommended (an event, no action)",
        source="spec §4 parameter table (recommend_pct), §4.1 (the two-tier trigger)",
    )
    auto_pct: Threshold = _setting(
        0.80, kind="threshold", legacy=("auto_compact_pct", "trigger_pct"),
        doc="share of the input budget at or above which the engine compacts automatically",
        source="spec §4 parameter table (trigger_pct), §4.1",
    )
    emergency_pct: Threshold = _setting(
        0.95, kind="threshold", legacy=("emergency_pct",),
        doc="share of the input budget at or above which a compaction uses the structural summary at once",
        source="spec §4 parameter table (emergency_pct)",
    )

    tokens: int | None = _setting(
        None, kind="tokens", optional=True, positive=True,
        doc="compact when this many tokens are reached: of the request (system, tools and history, as "
            "the budget counts them) or of the history alone, as tokens_of says (None: off)",
        source="LangChain SummarizationMiddleware trigger ('tokens', N); Anthropic context editing "
               "trigger {type: input_tokens}",
    )
    tokens_of: str = _setting(
        "request", kind="choice", choices=TOKEN_TRIGGER_BASES,
        doc="what trigger.tokens counts: request (as the budget counts it, with the provider's count "
            "where there is one) or history (the messages alone, by opctx's estimate: no system "
            "prompt, no tool schemas)",
        source="LangChain v1 SummarizationMiddleware.before_model counts state['messages'] with its "
               "token_counter (langchain 1.5.2, agents/middleware/summarization.py); 'request': opctx's",
    )
    messages: int | None = _setting(
        None, kind="count", optional=True, positive=True,
        doc="compact when the history holds this many messages (a summary counts as one; None: off)",
        source="LangChain SummarizationMiddleware trigger ('messages', N); OpenHands condensers' max_size",
    )
    turns: int | None = _setting(
        None, kind="count", optional=True, positive=True,
        doc="compact when this many agent turns (assistant messages) follow the latest summary (None: off)",
        source="The Complexity Trap (Lindenbauer et al. 2025, §3.1): summarise when the turns since the "
               "last summary reach N+M",
    )

    def fired(self, *, tokens: int, messages: int, turns: int) -> str | None:
        """The dotted name of the first count trigger that fires on these figures, or None.

        >>> TriggerPolicy(auto_pct=None, recommend_pct=None, turns=31).fired(tokens=0, messages=90, turns=31)
        'trigger.turns'
        """
        for name, value in (("tokens", tokens), ("messages", messages), ("turns", turns)):
            limit = getattr(self, name)
            if limit is not None and value >= limit:
                return f"trigger.{name}"
        return None

    def _check(self) -> None:
        order = [(n, getattr(self, n)) for n in ("recommend_pct", "auto_pct", "emergency_pct")]
        given = [(n, v) for n, v in order if _is_number(v)]
        for (a, x), (b, y) in zip(given, given[1:], strict=False):
            if x > y:
                raise ValueError(f"trigger.{a} ({x}) must not exceed trigger.{b} ({y})")

    def thresholds(self) -> tuple[float, float, float]:
        """``(recommend, auto, emergency)`` as numbers: never is ``math.inf``."""
        out = []
        for name in ("recommend_pct", "auto_pct", "emergency_pct"):
            value = getattr(self, name)
            if value == FROM_CLIENT:
                raise ValueError(f"trigger.{name} is {FROM_CLIENT!r}: resolve the policy for a window first")
            out.append(math.inf if value is None else float(value))
        return out[0], out[1], out[2]


@dataclass(frozen=True)
class CutPolicy(_Part):
    """What a compaction keeps verbatim (``find_cut_index``, spec §4.2; ``opctx.context.summarize``)."""

    PART: ClassVar[str] = "cut"

    keep_ratio: float = _setting(
        0.10, kind="fraction", legacy=("keep_ratio",),
        doc="the kept tail as a share of the window, before the token clamps",
        source="spec §4 parameter table",
    )
    keep_min_tokens: int = _setting(
        8_000, kind="tokens", legacy=("keep_min_tokens",),
        doc="lower clamp of the kept tail (tokens)", source="spec §4 parameter table",
    )
    keep_max_tokens: int = _setting(
        40_000, kind="tokens", legacy=("keep_max_tokens",),
        doc="upper clamp of the kept tail (tokens)", source="spec §4 parameter table",
    )
    keep_min_messages: int = _setting(
        5, kind="count", legacy=("keep_min_messages",),
        doc="messages with real text the kept tail must hold (one huge tool result is not a tail)",
        source="spec §4 parameter table",
    )
    protect_first_n: int = _setting(
        3, kind="count", legacy=("protect_first_n",),
        doc="first messages copied verbatim before the summary (the task)",
        source="spec §4 parameter table (from Hermes)",
    )
    protect_last_n: int = _setting(
        20, kind="count", legacy=("protect_last_n",),
        doc="last messages never folded (a floor of the tail, bounded by the tail's ceiling)",
        source="spec §4 parameter table (from Hermes)",
    )
    min_prompt_budget: int = _setting(
        8_000, kind="tokens", legacy=("min_prompt_budget",),
        doc="tokens always left free by the kept tail: min(min_prompt_budget, window x min_prompt_ratio)",
        source="spec §4 parameter table",
    )
    min_prompt_ratio: float = _setting(
        0.25, kind="fraction", legacy=("min_prompt_ratio",),
        doc="share of the window always left free by the kept tail (with min_prompt_budget)",
        source="spec §4 parameter table",
    )
    fold_current_turn: bool = _setting(
        False, kind="flag", legacy=("fold_current_turn",),
        doc="fold the running turn too, keeping only the latest user request verbatim (Claude Code)",
        source="opctx addition (summarize, 'Folding the current turn'); the claude-code preset sets it",
    )
    keep_initial_request: bool = _setting(
        False, kind="flag", legacy=("keep_initial_request",),
        doc="the protected head reaches at least the first user request (the task), however few "
            "messages protect_first_n counts (OpenHands re-inserts the initial user message); the "
            "recent-events view's head too",
        source="OpenHands/OpenHands at d6fab190, openhands/memory/conversation_memory.py "
               "(ConversationMemory._ensure_initial_user_message); the OpenHands V0 presets set it",
    )
    tail_budget_share: float = _setting(
        0.5, kind="fraction", positive=True, legacy=("tail_budget_share",),
        doc="the kept tail is at most this share of the input budget left after system prompt and tools",
        source="spec §4 min_prompt_ratio / small-window cap (OpenClaw); the 0.5 assumed",
    )

    keep_messages: int | None = _setting(
        None, kind="count", optional=True,
        doc="keep the last N messages verbatim (instead of the token clamps; snapped so tool pairs stay whole)",
        source="LangChain SummarizationMiddleware keep=('messages', N); OpenHands condensers' kept tail",
    )
    keep_turns: int | None = _setting(
        None, kind="count", optional=True,
        doc="keep the last N agent turns (an assistant message and what answers it) verbatim",
        source="The Complexity Trap (§3.1): the last M turns are kept",
    )
    keep_tool_uses: int | None = _setting(
        None, kind="count", optional=True,
        doc="keep the last N tool uses (call and result) verbatim",
        source="Anthropic context editing keep {type: tool_uses}; LangChain ClearToolUsesEdit keep",
    )
    keep_tokens: int | None = _setting(
        None, kind="tokens", optional=True,
        doc="keep exactly this many tokens of tail (instead of the clamps of keep_ratio)",
        source="LangChain SummarizationMiddleware keep=('tokens', N); spec §4.3 keep_recent_tokens",
    )
    overflow_keep_share: float | None = _setting(
        None, kind="fraction", optional=True, positive=True,
        doc="with a count keep: when the request that compacts is at or past trigger.auto_pct, fold "
            "at least what brings it down to this share of the input budget, however many messages "
            "the count keeps (None: the count alone)",
        source="OpenHands SDK LLMSummarizingCondenser._get_forgotten_events, Reason.TOKENS: "
               "tokens_to_reduce = total_tokens - max_tokens // 2 (a share of 0.5)",
    )

    def keep(self) -> tuple[str, int] | None:
        """``(unit, N)`` of the "keep" field that is set (``"messages"``, ``"turns"``,
        ``"tool_uses"``, ``"tokens"``), or None: the token clamps decide."""
        for unit in ("messages", "turns", "tool_uses", "tokens"):
            value = getattr(self, f"keep_{unit}")
            if value is not None:
                return unit, value
        return None

    def _check(self) -> None:
        given = [f"cut.keep_{u}" for u in ("messages", "turns", "tool_uses", "tokens")
                 if getattr(self, f"keep_{u}") is not None]
        if len(given) > 1:
            raise ValueError(f"{given[1]} and {given[0]} are both set: keep by one unit only")
        if self.keep_min_tokens > self.keep_max_tokens:
            raise ValueError(
                f"cut.keep_min_tokens ({self.keep_min_tokens}) must not exceed "
                f"cut.keep_max_tokens ({self.keep_max_tokens})"
            )


@dataclass(frozen=True)
class AgingPolicy(_Part):
    """Which ager clears old tool output before every request, and its settings.

    ``kind``: ``"turns"`` (``TurnAger``: the specification's three gates, §3),
    ``"masking"`` (observation masking: keep the last ``keep_last`` results, mask the
    rest), ``"clear-tool-uses"`` (Anthropic's and LangChain's context editing: past
    ``trigger_tokens``, clear all but the last ``keep_last``; ``opctx.context.masking``),
    ``"recent-events"`` (a view: every request sends the first ``protect_first_n`` and
    the last ``keep_last`` messages, with the first user request when
    ``cut.keep_initial_request`` is set; nothing is stored; ``opctx.context.recent``),
    ``"microcompact"`` (Claude Code's own clearing, ``opctx.lab.microcompact``),
    ``"client"`` (the client's clearing for the recording's version: Claude Code's
    microcompaction from 2.1.0, none for an older known version, ``turns`` without a
    version; resolved when an engine is built) or ``"none"``.

    ``keep_thinking_turns`` is apart from the kind: with any ager (``"none"`` included),
    thinking blocks of assistant turns older than the last N are cleared before the ager
    runs (Anthropic's ``clear_thinking_20251015``; the order is assumed;
    ``opctx.context.thinking_clearing``). ``None`` (``"all"`` is accepted) keeps every
    block: off.
    """

    PART: ClassVar[str] = "aging"

    kind: str = _setting(
        "turns", kind="choice", choices=AGING_KINDS,
        doc="the ager: turns (spec §3), masking, clear-tool-uses, recent-events (a view of the first and "
            "last messages), microcompact, client (per client version) or none",
        source="spec §3.1-3.2 (tool-result aging in every turn)",
    )
    keep_recent_turns: int = _setting(
        4, kind="count", legacy=("aging_keep_recent_turns",),
        doc="turns aging: a result is cleared only after this many assistant turns",
        source="spec §3.1",
    )
    keep_recent_seconds: float = _setting(
        60, kind="seconds", legacy=("aging_keep_recent_seconds",),
        doc="turns aging: a result is cleared only when at least this old on the (injectable) clock",
        source="spec §3.1",
    )
    min_tokens: int = _setting(
        800, kind="tokens", legacy=("aging_min_tokens",),
        doc="turns aging: results smaller than this are not worth the placeholder",
        source="spec §3.2",
    )
    protect_first_n: int = _setting(
        2, kind="count", legacy=("aging_protect_first_n",),
        doc="turns aging: the first messages are never cleared (the task statement); recent-events: "
            "the first messages every request sends",
        source="spec §3.1",
    )
    keep_last: int = _setting(
        10, kind="count", legacy=("keep_last",),
        doc="masking / clear-tool-uses: the last M observations (tool results, and user messages "
            "marked is_observation) kept verbatim, older ones masked; recent-events: the last N "
            "messages sent",
        source="Lindenbauer et al. 2025, 'The Complexity Trap' (M=10 performed best)",
    )
    placeholder: str | None = _setting(
        None, kind="text", optional=True,
        doc="masking / clear-tool-uses: the text that replaces an observation ({tokens}, {lines}: "
            "what it held; None: opctx's own, opctx.context.masking.MASK_PLACEHOLDER)",
        source="assumed (opctx's own wording); the strategy presets name their source's",
    )
    drop_demos: bool = _setting(
        False, kind="flag",
        doc="masking / clear-tool-uses: leave demonstrations (messages marked is_demo) out of the request",
        source="SWE-agent configs without demonstrations ('default_no_demo', The Complexity Trap §3.2)",
    )
    trigger_tokens: int | None = _setting(
        None, kind="tokens", optional=True, positive=True,
        doc="clear-tool-uses: clear only when the history exceeds this many tokens (None: always)",
        source="Anthropic context editing clear_tool_uses_20250919 trigger; LangChain ClearToolUsesEdit trigger",
    )
    clear_at_least: int = _setting(
        0, kind="tokens",
        doc="clear-tool-uses: clear oldest first until at least this many tokens are cleared; when "
            "everything clearable frees less, clear nothing",
        source="Anthropic context editing clear_at_least; LangChain ClearToolUsesEdit clear_at_least",
    )
    exclude_tools: tuple[str, ...] = _setting(
        (), kind="names",
        doc="clear-tool-uses: tool names whose uses and results are never cleared",
        source="Anthropic context editing exclude_tools; LangChain ClearToolUsesEdit exclude_tools",
    )
    clear_inputs: bool = _setting(
        False, kind="flag",
        doc="clear-tool-uses: clear the cleared calls' parameters too",
        source="Anthropic context editing clear_tool_inputs; LangChain ClearToolUsesEdit clear_tool_inputs",
    )
    keep_thinking_turns: int | None = _setting(
        None, kind="count", optional=True, positive=True, all_is_none=True,
        doc="any ager: keep the thinking of the last N assistant turns, clear it from older ones "
            "(before the ager; a tool loop is one turn; None or 'all': keep all, off)",
        source="Anthropic context editing clear_thinking_20251015 keep {type: thinking_turns, value: N} "
               "('all': keep all)",
    )


@dataclass(frozen=True)
class BudgetPolicy(_Part):
    """The window and the output reserve (``BudgetAllocator``, spec §2.3, docs/design.md)."""

    PART: ClassVar[str] = "budget"

    context_window: int | None = _setting(
        None, kind="tokens", optional=True, positive=True, legacy=("context_window",),
        doc="the window the budget splits (None: the model's real window, tokens.real_context_window)",
        source="docs/design.md ('the window is the model's real context window')",
    )
    output_reserve: int | str | None = _setting(
        None, kind="tokens", optional=True, positive=True, from_client=True, legacy=("output_reserve",),
        doc="the base output reserve (None: the model's max output, else 16,384; 'client': the client's own)",
        source="docs/design.md (budget: min(max output or 16,384, 25% of the window), never below 1,024)",
    )
    reserve_policy: str = _setting(
        "cap", kind="choice", choices=RESERVE_POLICIES, legacy=("reserve_policy",),
        doc="cap: min(base, 25% of the window); floor: the literal 'at least 25%', capped",
        source="docs/design.md (decisions: the literal floor breaks 8K and 1M windows)",
    )
    fit_headroom: float = _setting(
        0.10, kind="fraction",
        doc="a request over the input budget is cut to this share below it, and the cuts are kept "
            "while later requests fit with them (0: off, every request is cut to the budget afresh)",
        source="assumed (opctx addition, fit.CarriedCuts: clients cut a long tool output once, "
               "when it is made, and send the cut from then on)",
    )



@dataclass(frozen=True)
class GuardPolicy(_Part):
    """The anti-thrash guard: compaction must not loop (docs/design.md)."""

    PART: ClassVar[str] = "guard"

    min_saving: float = _setting(
        0.10, kind="fraction", legacy=("min_saving",),
        doc="an automatic compaction saving less than this share counts toward disabling",
        source="docs/design.md (a compaction saving under 10% twice in a row stops auto-compaction)",
    )
    low_saving_streak: int = _setting(
        2, kind="count", positive=True,
        doc="automatic compactions in a row under min_saving that disable auto-compaction",
        source="docs/design.md (twice in a row)",
    )
    enabled: bool = _setting(
        True, kind="flag",
        doc="False: compactions that save little or nothing never disable automatic compaction "
            "(the strategies of the literature have no such guard)",
        source="docs/design.md (the guard is opctx's); the strategy presets turn it off",
    )
    rearm_fraction: float = _setting(
        0.25, kind="fraction", legacy=("rearm_fraction",),
        doc="auto-compaction re-arms when the history grew by this share of the input budget",
        source="assumed (the guard must not latch off forever: docs/design.md, peers' pitfalls)",
    )


@dataclass(frozen=True)
class SummaryPolicy(_Part):
    """The summary call (``Summarizer``; additions to the specification)."""

    PART: ClassVar[str] = "summary"

    max_message_chars: int = _setting(
        4_000, kind="chars", legacy=("max_message_chars",),
        doc="characters of one folded message that go into the summary prompt",
        source="assumed (opctx addition)",
    )
    structural_head_chars: int = _setting(
        60, kind="chars", legacy=("structural_head_chars",),
        doc="opening characters of each message in the structural summary",
        source="spec §4.5",
    )
    summary_output_tokens: int = _setting(
        4_096, kind="tokens", legacy=("summary_output_tokens",),
        doc="tokens reserved for the summary reply (at most a quarter of the window)",
        source="assumed (opctx addition)",
    )
    timeout: float | None = _setting(
        120.0, kind="seconds", optional=True, positive=True, legacy=("timeout",),
        doc="seconds a summary call may take before the structural fallback (None: no limit)",
        source="assumed (opctx addition)",
    )
    source: str = _setting(
        "llm", kind="choice", choices=SUMMARY_SOURCES,
        doc="llm: the summary call (structural when no provider is given or it fails); structural: "
            "the structural summary always; forget: fold without a summary (a one-line marker)",
        source="spec §4.5 (the structural fallback); OpenHands' forgetting condensers (no summary)",
    )


@dataclass(frozen=True)
class ClientPolicy(_Part):
    """The client a preset models, and its own settings (``opctx.lab.presets``, "Client versions").

    The context layer only carries these; the toolkit's client rules turn them into
    thresholds, an output reserve and an ager when an engine is built.
    """

    PART: ClassVar[str] = "client"

    name: str | None = _setting(
        None, kind="text", optional=True,
        doc="the client whose rules apply (claude-code, codex), None for none",
        source="opctx.lab.presets TRIGGER_RULES",
    )
    version: str | None = _setting(
        None, kind="text", optional=True, legacy=("client_version",),
        doc="the recording's client version (picks the client's rule row)",
        source="the recording (RecordedHistory.version_at)",
    )
    auto_compact: bool | None = _setting(
        None, kind="flag", optional=True, legacy=("auto_compact",),
        doc="Claude Code's autoCompactEnabled (False: the client never compacts by itself; None: on)",
        source="Claude Code settings (read off recordings: opctx.lab.client_settings)",
    )
    max_output_tokens: int | None = _setting(
        None, kind="tokens", optional=True, positive=True, legacy=("max_output_tokens",),
        doc="Claude Code's CLAUDE_CODE_MAX_OUTPUT_TOKENS", source="Claude Code settings",
    )
    auto_compact_window: int | None = _setting(
        None, kind="tokens", optional=True, positive=True, legacy=("auto_compact_window",),
        doc="Claude Code's CLAUDE_CODE_AUTO_COMPACT_WINDOW (the window the trigger is computed from)",
        source="Claude Code settings",
    )
    autocompact_pct_override: float | None = _setting(
        None, kind="percent", optional=True, positive=True, maximum=100, legacy=("autocompact_pct_override",),
        doc="Claude Code's CLAUDE_AUTOCOMPACT_PCT_OVERRIDE (percent of the effective window; only lowers)",
        source="Claude Code settings (anthropics/claude-code#31806)",
    )
    auto_compact_token_limit: int | None = _setting(
        None, kind="tokens", optional=True, positive=True, legacy=("auto_compact_token_limit",),
        doc="Codex's model_auto_compact_token_limit", source="Codex config",
    )
    trigger_before_window: int | None = _setting(
        None, kind="tokens", optional=True, positive=True, legacy=("trigger_before_window",),
        doc="a calibrated trigger: tokens before the window (opctx.lab.calibrate)",
        source="calibrated on recordings",
    )
    trigger_window_fraction: float | None = _setting(
        None, kind="fraction", optional=True, positive=True, legacy=("trigger_window_fraction",),
        doc="a calibrated trigger: a fraction of the window (opctx.lab.calibrate)",
        source="calibrated on recordings",
    )
    post_compaction_tokens: int = _setting(
        0, kind="tokens", legacy=("post_compaction_tokens",),
        doc="tokens the client adds after each compaction that no history holds (files it re-reads); "
            "replays count them",
        source="measured per client (the claude-code preset: benchmarks/fidelity.py --post)",
    )

    #: the client's own settings: they mean nothing without a client
    SETTINGS: ClassVar[tuple[str, ...]] = (
        "auto_compact", "max_output_tokens", "auto_compact_window", "autocompact_pct_override",
        "auto_compact_token_limit", "trigger_before_window", "trigger_window_fraction",
    )

    def _check(self) -> None:
        if self.name is None:
            for setting in self.SETTINGS:
                if getattr(self, setting) is not None:
                    raise ValueError(
                        f"client.{setting} applies to the client presets (client.name claude-code "
                        "or codex), not to a policy without a client"
                    )


#: The parts of a policy, in order: name -> class.
PARTS: dict[str, type[_Part]] = {
    "trigger": TriggerPolicy,
    "cut": CutPolicy,
    "aging": AgingPolicy,
    "budget": BudgetPolicy,
    "guard": GuardPolicy,
    "summary": SummaryPolicy,
    "client": ClientPolicy,
}


class PolicyField(NamedTuple):
    """One leaf field of a policy, as :func:`policy_fields` lists it."""

    name: str  # dotted: "cut.keep_ratio"
    default: Any
    kind: str
    doc: str
    source: str
    legacy: tuple[str, ...]
    choices: tuple[Any, ...]
    optional: bool
    positive: bool = False  # 0 is refused (a fraction in (0, 1], an int >= 1)


class PolicyChange(NamedTuple):
    """One difference between two policies (:meth:`CompactionPolicy.diff`)."""

    name: str
    old: Any
    new: Any


def policy_fields() -> list[PolicyField]:
    """Every leaf field of a policy with its default and metadata, in declaration order."""
    out = []
    for part, cls in PARTS.items():
        for f in fields(cls):  # type: ignore[arg-type]
            m = f.metadata
            out.append(PolicyField(f"{part}.{f.name}", f.default, m["kind"], m["doc"], m["source"],
                                   tuple(m["legacy"]), tuple(m["choices"]), bool(m["optional"]),
                                   bool(m["positive"])))
    return out


_FIELDS = {pf.name: pf for pf in policy_fields()}
#: older flat names (engine keyword arguments, ``SummarizerConfig`` fields, preset parameters) -> dotted
LEGACY_NAMES: dict[str, str] = {old: pf.name for pf in _FIELDS.values() for old in pf.legacy}


def _unknown(name: str) -> ValueError:
    close = difflib.get_close_matches(name, list(_FIELDS) + list(LEGACY_NAMES), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown policy field {name!r}{hint} (fields: opctx.context.policy.policy_fields())")


@dataclass(frozen=True)
class CompactionPolicy:
    """Everything that decides when and how a history is compacted or aged (module docstring)."""

    trigger: TriggerPolicy = field(default_factory=TriggerPolicy)
    cut: CutPolicy = field(default_factory=CutPolicy)
    aging: AgingPolicy = field(default_factory=AgingPolicy)
    budget: BudgetPolicy = field(default_factory=BudgetPolicy)
    guard: GuardPolicy = field(default_factory=GuardPolicy)
    summary: SummaryPolicy = field(default_factory=SummaryPolicy)
    client: ClientPolicy = field(default_factory=ClientPolicy)

    def __post_init__(self) -> None:
        for part, cls in PARTS.items():
            value = getattr(self, part)
            if not isinstance(value, cls):
                raise ValueError(f"{part} must be a {cls.__name__}, got {type(value).__name__}")
        # no check of the keep clamps against budget.context_window: the cut caps the tail
        # by the window itself (spec §4.2 step 2), and the default 8K floor at a 4K what-if
        # window is the specification's own case, not an error; keeping more than the
        # window is refused where it is stated as a share (cut.keep_ratio <= 1)
        if self.client.name is None:
            for name in self.client_decides():
                raise ValueError(f"{name} is {FROM_CLIENT!r} but client.name is None: name the client")

    # -- reading ----------------------------------------------------------------------------
    def get(self, name: str) -> Any:
        """The value of a dotted field (``"cut.keep_ratio"``)."""
        if name not in _FIELDS:
            raise _unknown(name)
        part, leaf = name.split(".", 1)
        return getattr(getattr(self, part), leaf)

    def flat(self) -> dict[str, Any]:
        """``{dotted name: value}`` of every leaf field."""
        return {name: self.get(name) for name in _FIELDS}

    def client_decides(self) -> list[str]:
        """The dotted fields still holding ``"client"`` (empty once resolved for a window)."""
        return [name for name, value in self.flat().items() if value == FROM_CLIENT]

    @property
    def resolved(self) -> bool:
        """Whether every field holds a value (no ``"client"`` marker left)."""
        return not self.client_decides()

    # -- changing ---------------------------------------------------------------------------
    def replace(self, **changes: Any) -> CompactionPolicy:
        """A copy with ``changes``: dotted names (``"cut.keep_ratio"``) or whole parts
        (``cut=CutPolicy(...)``, or a dict of that part's fields). Invalid values raise one
        ``ValueError`` naming the field."""
        parts: dict[str, Any] = {}
        leaves: dict[str, dict[str, Any]] = {}
        for name, value in changes.items():
            if name in PARTS:
                parts[name] = value if isinstance(value, PARTS[name]) else _part_from(name, value)
            elif name in _FIELDS:
                part, leaf = name.split(".", 1)
                leaves.setdefault(part, {})[leaf] = value
            else:
                raise _unknown(name)
        new = {}
        for part in PARTS:
            current = parts.get(part, getattr(self, part))
            if part in leaves:
                current = dataclasses.replace(current, **leaves[part])
            new[part] = current
        return CompactionPolicy(**new)

    def with_params(self, params: Mapping[str, Any]) -> CompactionPolicy:
        """This policy with parameters given by dotted name or by an older flat name
        (``auto_compact_pct`` / ``trigger_pct``, ``keep_ratio``, ``aging_min_tokens``,
        ``client_version`` ...: each field's ``legacy`` names).

        Thresholds that ``params`` does not name give way to the automatic one it names
        (``recommend_pct`` no higher, never-recommend included; ``emergency_pct`` no
        lower, never-emergency stays never), so moving the trigger alone stays a valid
        policy; a threshold still ``"client"`` gives way when it is resolved.
        """
        dotted: dict[str, Any] = {}
        for name, value in params.items():
            key = name if name in _FIELDS else LEGACY_NAMES.get(name)
            if key is None:
                raise _unknown(name)
            if key in dotted and dotted[key] != value:
                raise ValueError(f"{name!r} and another name both set {key}")
            dotted[key] = value
        auto = dotted.get("trigger.auto_pct")
        if _is_number(auto):
            rec, em = self.trigger.recommend_pct, self.trigger.emergency_pct
            # a recommendation that never fired comes with the trigger now set (as it
            # always has for the masking and none strategies given a trigger)
            if "trigger.recommend_pct" not in dotted and (rec is None or _is_number(rec) and rec > auto):
                dotted["trigger.recommend_pct"] = auto
            if "trigger.emergency_pct" not in dotted and _is_number(em) and em < auto:
                dotted["trigger.emergency_pct"] = auto
        return self.replace(**dotted)

    def diff(self, other: CompactionPolicy) -> list[PolicyChange]:
        """What differs from ``other``: ``(dotted name, value here, value there)`` in field order."""
        mine, theirs = self.flat(), other.flat()
        return [PolicyChange(n, mine[n], theirs[n]) for n in _FIELDS if _differs(mine[n], theirs[n])]

    # -- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, dict[str, Any]]:
        """``{part: {field: value}}``, JSON-safe (``json.dumps`` works: never is ``None``)."""
        return {part: getattr(self, part).to_dict() for part in PARTS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> CompactionPolicy:
        """The policy of ``to_dict``'s output; parts or fields left out keep their defaults.
        Unknown parts or fields raise ``ValueError`` naming them."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ValueError(f"a policy must be a dict of parts, got {type(data).__name__}")
        unknown = [k for k in data if k not in PARTS]
        if unknown:
            raise _unknown(str(unknown[0]))
        return cls(**{part: _part_from(part, value) for part, value in data.items()})

    def to_json(self) -> str:
        """The policy as compact, key-sorted JSON (what frames and Parquet files carry)."""
        import json

        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))


def _part_from(part: str, value: Any) -> Any:
    cls = PARTS[part]
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{part} must be a {cls.__name__} or a dict of its fields, got {type(value).__name__}")
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    for key in value:
        if key not in known:
            raise _unknown(f"{part}.{key}")
    return cls(**value)


def _differs(a: Any, b: Any) -> bool:
    return bool(a != b)
