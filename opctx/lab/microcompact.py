"""Claude Code's microcompaction: the client's own clearing of old tool results, modelled.

What Claude Code does
=====================
Before a request, Claude Code may *clear* the content of old tool results (no LLM
call, no summary). Clients 2.1.x record it in the transcript as a ``system`` line
with subtype ``microcompact_boundary`` (imported by ``opctx.importers.claude_code``
as a recorded aging event: ``metadata.microcompaction`` on the line's display-only
node, ``metadata.cleared_by`` on each cleared result). The rule modelled here,
each number with where it comes from:

=====================  ===========  ==================================================
what                   value        source
=====================  ===========  ==================================================
tool results cleared   ``Read``,    the compactable-tool allowlist of Claude Code's
                       ``Bash``,    ``microCompact`` as publicly reimplemented from
                       ``Grep``,    cli.js 2.0.76 (Read, Bash, Grep, Glob, WebSearch,
                       ``Glob``,    WebFetch, Edit, Write); Gitlawb/openclaude#348 (MCP
                       ``Web*``,    results are not in it). Corpus: every one of the 14
                       ``Edit``,    recorded boundaries cleared only Read, Write, Bash,
                       ``Write``    Glob, Edit, Grep; Task*, mcp__*, AskUserQuestion,
                                    ExitPlanMode were never cleared
token measure          chars / 4    cli.js estimate (same reimplementation notes);
                                    corpus: ``preTokens`` = the clearable results'
                                    characters / 4.00 and ``tokensSaved`` = the
                                    cleared results' characters / 4.00 (9 of 12 files
                                    exactly; the others hold earlier compactions)
kept                   40,000 tok   cli.js constant ``40000`` (reimplementation
                                    notes); corpus: 26-39K tokens of clearable
                                    results were left after every boundary, and
                                    clearing the oldest until at most 40K remain
                                    reproduces the recorded count in most rows
minimum saving         20,000 tok   cli.js constant ``20000``; corpus: every recorded
                                    ``tokensSaved`` >= 20,775
recent results kept    3            cli.js constant ``3`` (reimplementation notes)
when                   context >=   ``isAboveWarningThreshold``: the auto-compact
                       warning      threshold minus ``WARNING_THRESHOLD_BUFFER_TOKENS``
                       threshold    = 20,000 (autoCompact.ts as publicly
                                    reimplemented), i.e. window - min(max output,
                                    20,000) - 13,000 - 20,000 = 147,000 at 200K.
                                    Not fitted: on the corpus the smallest context
                                    before a recorded boundary is 148,579
order                  oldest first corpus (cleared ids are the oldest clearable ones)
count compared         the last     the prompt size the provider reported for the
                       request's    previous request, without what was added since
                       prompt       (``count_since_last_request=False``). Chosen by
                                    looking at the corpus, so say it: with it 10 of 13
                                    resync predictions land on the recorded request,
                                    5 of 13 when the results added since are counted
                                    (both 12 of 13 within one request)
=====================  ===========  ==================================================

Which clients: ``records_microcompaction(version)`` is true from 2.1.0. The corpus
has boundary lines from 2.1.9 to 2.1.19 and none in its 2.0.74-2.0.76 files, although
cli.js 2.0.76 already had the function (reimplementation notes) and those sessions show
unexplained drops of the provider's count (docs/lab.md); where between 2.0.76 and 2.1.9
the line appeared is not known (2.1.0 assumed). ``microcompact=True`` applies the
model to older versions too.

Pieces
======
* ``MicrocompactRule``: the numbers above (all overridable); ``rule_for(window)``.
* ``plan_clearing(results, context_tokens, rule)``: the decision for one request,
  given the clearable results still in context (oldest first) and the client's count
  of the context. Pure; ``opctx.lab.aging_fidelity`` drives it over recordings.
* ``ClaudeCodeMicrocompactor``: the same rule as an engine ager (``age(history,
  references) -> (aged, AgingReport)``), used by the ``claude-code`` preset for the
  versions that record microcompaction (``opctx.lab.presets.build_engine``). A cleared
  result keeps its place and its tool-call pairing; its content becomes
  ``CLEARED_TEXT``. Its ``events`` list what it cleared, request by request.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opctx.context.types import AgingReport
from opctx.dag.messages import message_text

from .history import parse_version, provider_prompt_tokens

__all__ = [
    "CLEARABLE_TOOLS",
    "CLEARED_TEXT",
    "RECORDS_SINCE",
    "MicrocompactRule",
    "MicrocompactEvent",
    "ClaudeCodeMicrocompactor",
    "records_microcompaction",
    "rule_for",
    "plan_clearing",
    "result_tokens",
    "is_clearable",
    "clearable_results",
    "microcompactor_for",
]

CLEARABLE_TOOLS = frozenset({"Read", "Bash", "Grep", "Glob", "WebSearch", "WebFetch", "Edit", "Write"})
# the text Claude Code puts in place of a cleared result (quoted verbatim by
# tetsuo-ai/agenc-core#463 from Claude Code's microCompact.ts)
CLEARED_TEXT = "[Old tool result content cleared]"
RECORDS_SINCE = (2, 1, 0)

def records_microcompaction(version: Any) -> bool:
    """Does Claude Code ``version`` record (and so, here, get modelled with) microcompaction?"""
    parsed = parse_version(version)
    return parsed is not None and parsed >= RECORDS_SINCE


@dataclass(frozen=True)
class MicrocompactRule:
    """When Claude Code clears tool results, and which (module docstring: sources)."""

    warning_tokens: int = 147_000
    keep_tokens: int = 40_000
    min_savings: int = 20_000
    keep_recent: int = 3
    chars_per_token: float = 4.0
    clearable: frozenset[str] = CLEARABLE_TOOLS
    count_since_last_request: bool = False


def rule_for(context_window: int = 200_000, *, max_output_reserve: int = 20_000, **overrides: Any) -> MicrocompactRule:
    """The rule at ``context_window``: warning threshold = window - reserve - 13,000 - 20,000.

    >>> rule_for(200_000).warning_tokens
    147000
    >>> rule_for(1_000_000).warning_tokens
    947000
    """
    warning = int(context_window) - min(int(max_output_reserve), 20_000) - 13_000 - 20_000
    return MicrocompactRule(**{"warning_tokens": warning, **overrides})


def is_clearable(name: Any, rule: MicrocompactRule | None = None) -> bool:
    """Is a result of tool ``name`` one Claude Code may clear?

    >>> is_clearable("Read"), is_clearable("Task"), is_clearable("mcp__x__y")
    (True, False, False)
    """
    return isinstance(name, str) and name in (rule or MicrocompactRule()).clearable


def result_tokens(msg: dict, chars_per_token: float = 4.0) -> int:
    """A tool result's size as Claude Code counts it: characters / 4, rounded up."""
    content = msg.get("content")
    text = content if isinstance(content, str) and content else message_text(msg)
    return math.ceil(len(text or "") / chars_per_token)


@dataclass
class MicrocompactEvent:
    """One clearing: before request ``request`` (its 0-based index among the requests)."""

    request: int
    tool_call_ids: list[str]
    pre_tokens: int
    tokens_saved: int
    context_tokens: int
    stream_index: int | None = None


def plan_clearing(
    results: Sequence[tuple[str, int]], context_tokens: float, rule: MicrocompactRule
) -> tuple[list[str], int, int] | None:
    """``(cleared ids, pre_tokens, tokens_saved)`` for one request, or None (nothing cleared).

    ``results``: ``(tool_call_id, tokens)`` of the clearable results still in context
    and not cleared yet, oldest first. Below the warning threshold nothing happens;
    above it the oldest results (never the last ``keep_recent``) are cleared until at
    most ``keep_tokens`` remain, and only if that saves at least ``min_savings``.

    >>> rule = MicrocompactRule()
    >>> plan_clearing([("a", 30_000), ("b", 20_000), ("c", 5_000), ("d", 1), ("e", 1), ("f", 1)], 150_000, rule)
    (['a'], 55003, 30000)
    >>> plan_clearing([("a", 30_000)] * 6, 140_000, rule) is None
    True
    """
    if context_tokens < rule.warning_tokens or not results:
        return None
    pre = sum(tokens for _, tokens in results)
    candidates = results[: max(0, len(results) - rule.keep_recent)]
    remaining, saved, ids = pre, 0, []
    for tool_call_id, tokens in candidates:
        if remaining <= rule.keep_tokens:
            break
        ids.append(tool_call_id)
        remaining -= tokens
        saved += tokens
    if saved < rule.min_savings:
        return None
    return ids, pre, saved


def _cleared_copy(msg: dict) -> dict:
    cleared = copy.copy(msg)
    cleared["content"] = CLEARED_TEXT
    extra = msg.get("extra")
    if isinstance(extra, dict) and isinstance(extra.get("blocks"), list):
        cleared["extra"] = {**extra, "blocks": [
            {**b, "content": CLEARED_TEXT} if isinstance(b, dict) and b.get("type") == "tool_result" else b
            for b in extra["blocks"]
        ]}
    cleared["_microcompacted"] = True
    return cleared


@dataclass
class ClaudeCodeMicrocompactor:
    """The rule as an engine ager: ``age(history, references) -> (aged, AgingReport)``.

    The client's count of the context is the provider's prompt count of the last
    request in the history (what Claude Code compares); where no message carries one,
    the engine's estimate of the previous request as sent (after its clearing) plus
    ``overhead_tokens`` (system prompt and tool schemas that transcripts do not hold;
    0 unless told); with ``rule.count_since_last_request`` what came after is added. A result cleared once stays cleared (same copy object in every
    later request, so prefix comparisons and per-message caches hold). ``events``:
    one ``MicrocompactEvent`` per clearing, ``request`` = how many requests (``age``
    calls on a longer history) came before.
    """

    rule: MicrocompactRule = field(default_factory=MicrocompactRule)
    estimate: Callable[[dict], int] | None = None
    overhead_tokens: int = 0
    events: list[MicrocompactEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._cleared: dict[str, dict] = {}  # tool_call_id -> cleared copy
        self._freed: dict[str, int] = {}
        self._requests = 0
        self._last_len = -1
        self._last_tokens: int | None = None  # the context at the previous request
        self._tokens_now: int | None = None
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> ClaudeCodeMicrocompactor:
        # the same settings, nothing seen yet
        return ClaudeCodeMicrocompactor(self.rule, self.estimate, self.overhead_tokens)

    def _tokens(self, msg: dict) -> int:
        if self.estimate is not None:
            return int(self.estimate(msg))
        from opctx.context.tokens import estimate_message_tokens

        return estimate_message_tokens(msg)

    def _client_count(self, aged: list[dict]) -> int:
        """What the client compares with its threshold (module docstring, "count compared").

        The provider's prompt count of the last request when the history holds one
        (a live session or a recording: what Claude Code itself uses), plus, with
        ``count_since_last_request``, the estimate of what came after it; else the
        estimate of the previous request as sent (or of this one) plus the overhead.
        A count from before the latest compaction summary is not used.
        """
        since = 0
        for msg in reversed(aged):
            if msg.get("compaction") is not None:
                break
            if msg.get("role") == "assistant":
                count = provider_prompt_tokens(msg)
                if count is not None:
                    return count + (since if self.rule.count_since_last_request else 0)
            since += self._tokens(msg)
        now = self.overhead_tokens + sum(self._tokens(m) for m in aged)
        if self.rule.count_since_last_request or self._last_tokens is None:
            return now
        return self._last_tokens

    def age(self, history: Sequence[dict], references: Any = None) -> tuple[list[dict], AgingReport]:
        with self._lock:
            if len(history) != self._last_len:
                if self._last_len >= 0:
                    self._requests += 1
                    self._last_tokens = self._tokens_now
                self._last_len = len(history)
            aged = [self._cleared.get(m.get("tool_call_id"), m) if m.get("role") == "tool" else m for m in history]
            context = self._client_count(aged)
            results = [
                (str(m["tool_call_id"]), result_tokens(m, self.rule.chars_per_token), i)
                for i, m in enumerate(aged)
                if m.get("role") == "tool" and m.get("tool_call_id") and not m.get("_microcompacted")
                and is_clearable(m.get("name"), self.rule)
            ]
            plan = plan_clearing([(t, n) for t, n, _ in results], context, self.rule)
            if plan is not None:
                ids, pre, saved = plan
                position = {t: i for t, _, i in results}
                for tool_call_id in ids:
                    original = aged[position[tool_call_id]]
                    cleared = _cleared_copy(original)
                    self._cleared[tool_call_id] = cleared
                    self._freed[tool_call_id] = max(0, self._tokens(original) - self._tokens(cleared))
                    aged[position[tool_call_id]] = cleared
                self.events.append(MicrocompactEvent(self._requests, list(ids), pre, saved, int(context)))
            self._tokens_now = self.overhead_tokens + sum(self._tokens(m) for m in aged)
            present = [m.get("tool_call_id") for m in aged if m.get("_microcompacted")]
            report = AgingReport(
                redacted=len(present),
                tokens_freed=sum(self._freed.get(t, 0) for t in present),
                redacted_ids=[m.get("id") for m in aged if m.get("_microcompacted")],
            )
            return aged, report


def clearable_results(messages: Iterable[dict], rule: MicrocompactRule, cleared: set[str]) -> list[tuple[str, int]]:
    """``(tool_call_id, tokens)`` of the clearable results among ``messages`` not in ``cleared``."""
    return [
        (str(m["tool_call_id"]), result_tokens(m, rule.chars_per_token))
        for m in messages
        if m.get("role") == "tool" and m.get("tool_call_id") and str(m["tool_call_id"]) not in cleared
        and is_clearable(m.get("name"), rule)
    ]


def microcompactor_for(client_version: Any, microcompact: bool | MicrocompactRule | None,
                       context_window: int) -> ClaudeCodeMicrocompactor | None:
    """The ager the ``claude-code`` preset runs for a recording of ``client_version``, or None.

    ``microcompact``: ``None`` (default) = for the versions that record microcompaction
    (``records_microcompaction``), ``True`` = whatever the version, ``False`` = never,
    a ``MicrocompactRule`` = that rule whatever the version (variants, fitted thresholds).
    The warning threshold follows the window (``rule_for``), not the preset's
    auto-compaction row: the corpus supports 147K at 200K for 2.1.9-2.1.19 (module
    docstring) whatever the compaction trigger of those versions is.
    """
    if isinstance(microcompact, MicrocompactRule):
        return ClaudeCodeMicrocompactor(microcompact)
    if microcompact is False or (microcompact is None and not records_microcompaction(client_version)):
        return None
    return ClaudeCodeMicrocompactor(rule_for(context_window))
