"""Claude Code's microcompaction: the client's own clearing of old tool results, modelled.

What Claude Code does
=====================
Before every request of its main loop Claude Code may *clear* the content of old tool
results (no LLM call, no summary); then it checks its auto-compaction trigger. The rule,
read in the client itself (``package/cli.js`` of the npm package
``@anthropic-ai/claude-code``: 1.0.59, 1.0.60, 1.0.61, 1.0.70, 1.0.71, 1.0.77, 1.0.85,
1.0.100, 2.0.0, 2.0.74, 2.0.76, 2.1.0-2.1.9, 2.1.19-2.1.21, 2.1.50, 2.1.62, 2.1.67; the
function that reads ``DISABLE_MICROCOMPACT``):

1. the candidates are the ``tool_use`` ids of the allowlisted tools in the messages since
   the last compaction, **in tool-call order**, less the ids cleared before;
2. a result's size is what the message holds, per text block ``Math.round(len / 4)`` and 2,000
   per image, cached per id when first seen (a result that was spilled to
   ``tool-results/<id>.txt`` counts as the inline preview the model saw);
3. the last 3 candidates (with or without a result yet) are kept; walking the others
   oldest first, a candidate is cleared while ``total - cleared so far > 40,000``;
4. nothing happens unless the last response's usage (prompt + output, the same figure
   the trigger reads) is **at least** the warning threshold (``>=``) and the clearing saves
   at least 20,000.

The warning threshold comes from the client's trigger rule
(``opctx.lab.client_rules``): the auto-compaction threshold minus 20,000 (1.0.71 and
later), 0.8 of it (1.0.51-1.0.70); with auto-compaction off, the effective window minus
20,000. At 200K with a 32,000 max output: 135,000 (2.0-2.1.20, auto-compaction on),
148,000 (off), 147,000 / 160,000 from 2.1.21. ``preTokens`` of the recorded line is the
candidates' total (step 3), ``tokensSaved`` what was cleared; memory attachments are
dropped with them (``clearedAttachmentUUIDs``, not modelled).

=================  ==========================================  =====================
versions           clears                                      recorded
=================  ==========================================  =====================
1.0.59-1.0.72      Read, Bash, Grep, Glob, LS, WebSearch,       nothing (the next
                   WebFetch                                     request's usage drops)
1.0.73-2.1.7       the same and Edit, MultiEdit, Write          nothing
2.1.8-2.1.62       the same                                     a ``microcompact_boundary``
                                                                line
=================  ==========================================  =====================

Before 1.0.59 the client has no such clearing; after 2.1.62 the rule above is gone from
the builds read (2.1.64, 2.1.69, 2.1.75, 2.1.101 clear by time and cache state instead;
2.1.67 still had it) and is not modelled. A client before 2.1.8 clears without writing a
line, but with the feature flag ``tengu_compact_mc_files`` it saves each cleared result to
``<session>/tool-results/<id>.txt`` (the importer keeps the path): such a file with no
recorded clearing and the same text as the result marks a silent clearing
(``opctx.lab.aging_fidelity``).

The corpus check (``benchmarks/aging_fidelity.py``): with these numbers and the
recordings' own settings, the predicted clearing falls on the recorded request with the
recorded ids for the 2.1.9-2.1.19 boundaries; its sessions ran with auto-compaction off
(they pass 155,000 without compacting and never clear between 135,000 and 148,000).

Pieces
======
* ``MicrocompactRule``: the numbers above (all overridable); ``rule_for_version`` gives a
  version's rule (``None``: the client has no such clearing), ``rule_for(window)`` the
  2.1.21+ default at a window.
* ``plan_clearing(candidates, context_tokens, rule)``: the decision for one request. Pure.
* ``candidates(messages, rule, cleared)``: the candidates of a stream, in tool-call order.
* ``ClaudeCodeMicrocompactor``: the same rule as an engine ager, used by the
  ``claude-code`` preset for the versions that have it (``microcompactor_for``).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opctx.context.types import AgingReport

from .client_rules import js_round
from .history import parse_version, provider_prompt_tokens

__all__ = [
    "CLEARABLE_TOOLS",
    "CLEARED_TEXT",
    "MICROCOMPACT_VERSIONS",
    "MicrocompactRule",
    "MicrocompactVersions",
    "MicrocompactEvent",
    "ClaudeCodeMicrocompactor",
    "records_microcompaction",
    "versions_for",
    "rule_for",
    "rule_for_version",
    "plan_clearing",
    "result_tokens",
    "is_clearable",
    "candidates",
    "clearable_results",
    "microcompactor_for",
]

_CLI = "npm @anthropic-ai/claude-code package/cli.js"
CLEARABLE_TOOLS = frozenset({"Read", "Bash", "Grep", "Glob", "LS", "WebSearch", "WebFetch", "Edit", "MultiEdit",
                             "Write"})
# the text Claude Code puts in place of a cleared result (cli.js 1.0.59-2.1.62)
CLEARED_TEXT = "[Old tool result content cleared]"


@dataclass(frozen=True)
class MicrocompactVersions:
    """The versions that clear with one allowlist, and whether they write a line."""

    first: str
    last: str
    clearable: frozenset[str]
    writes_boundary: bool
    source: str

    def covers(self, version: Any) -> bool:
        parsed = parse_version(version)
        return parsed is not None and parse_version(self.first) <= parsed <= parse_version(self.last)


MICROCOMPACT_VERSIONS: tuple[MicrocompactVersions, ...] = (
    MicrocompactVersions("1.0.59", "1.0.72", frozenset({"Read", "Bash", "Grep", "Glob", "LS", "WebSearch", "WebFetch"}),
                         False, f"{_CLI} 1.0.59, 1.0.60, 1.0.61, 1.0.70, 1.0.71, 1.0.72 (1.0.58 has none)"),
    MicrocompactVersions("1.0.73", "2.1.7", CLEARABLE_TOOLS, False,
                         f"{_CLI} 1.0.73, 1.0.77, 1.0.85, 1.0.100 (MultiEdit), 2.0.0, 2.0.74, 2.0.76, 2.1.0-2.1.7 "
                         "(no line written)"),
    MicrocompactVersions("2.1.8", "2.1.62", CLEARABLE_TOOLS, True,
                         f"{_CLI} 2.1.8, 2.1.9, 2.1.19, 2.1.20, 2.1.21, 2.1.50, 2.1.62 (microcompact_boundary written; "
                         "2.1.7 writes none; 2.1.64, 2.1.69, 2.1.75, 2.1.101 have another clearing)"),
)


def versions_for(version: Any) -> MicrocompactVersions | None:
    """The row of ``MICROCOMPACT_VERSIONS`` for a Claude Code version, or None (no such clearing).

    >>> versions_for("2.0.74").writes_boundary, versions_for("2.1.9").writes_boundary
    (False, True)
    >>> versions_for("1.0.58") is None, versions_for("2.1.101") is None
    (True, True)
    """
    return next((row for row in MICROCOMPACT_VERSIONS if row.covers(version)), None)


def records_microcompaction(version: Any) -> bool:
    """Does Claude Code ``version`` write a line for each clearing (2.1.8-2.1.62)?"""
    row = versions_for(version)
    return row is not None and row.writes_boundary


@dataclass(frozen=True)
class MicrocompactRule:
    """When Claude Code clears tool results, and which (module docstring: sources)."""

    warning_tokens: int = 147_000
    keep_tokens: int = 40_000
    min_savings: int = 20_000
    keep_recent: int = 3
    chars_per_token: float = 4.0
    image_tokens: int = 2_000
    clearable: frozenset[str] = CLEARABLE_TOOLS


def rule_for(context_window: int = 200_000, *, max_output_reserve: int = 20_000, **overrides: Any) -> MicrocompactRule:
    """The 2.1.21+ rule with auto-compaction on at ``context_window``: warning = window - reserve - 33,000.

    >>> rule_for(200_000).warning_tokens
    147000
    """
    warning = int(context_window) - min(int(max_output_reserve), 20_000) - 13_000 - 20_000
    return MicrocompactRule(**{"warning_tokens": warning, **overrides})


def rule_for_version(version: Any, *, context_window: int = 200_000, model: str | None = None,
                     auto_compact: bool | None = None, **settings: Any) -> MicrocompactRule | None:
    """The rule of Claude Code ``version`` (None where it has no such clearing).

    The warning threshold is the version's (``opctx.lab.client_rules``) for the window,
    model and settings (``auto_compact=False``: auto-compaction off).

    >>> rule_for_version("2.0.74").warning_tokens, rule_for_version("2.1.19", auto_compact=False).warning_tokens
    (135000, 148000)
    >>> rule_for_version("1.0.58") is None
    True
    """
    from .client_rules import resolve_client_trigger

    row = versions_for(version)
    if row is None:
        return None
    res = resolve_client_trigger("claude-code", context_window=context_window, model=model, client_version=version,
                                 auto_compact=auto_compact, **settings)
    return MicrocompactRule(warning_tokens=res.warning_tokens, clearable=row.clearable)


def is_clearable(name: Any, rule: MicrocompactRule | None = None) -> bool:
    """Is a result of tool ``name`` one Claude Code may clear?

    >>> is_clearable("Read"), is_clearable("Task"), is_clearable("mcp__x__y")
    (True, False, False)
    """
    return isinstance(name, str) and name in (rule or MicrocompactRule()).clearable


def _blocks_tokens(content: Any, rule: MicrocompactRule) -> int:
    if isinstance(content, str):
        return js_round(len(content) / rule.chars_per_token)
    if isinstance(content, list):
        total = 0
        for block in content:
            if isinstance(block, str):
                total += js_round(len(block) / rule.chars_per_token)
            elif isinstance(block, dict) and block.get("type") == "text":
                total += js_round(len(block.get("text") or "") / rule.chars_per_token)
            elif isinstance(block, dict) and block.get("type") == "image":
                total += rule.image_tokens
        return total
    return 0


def result_tokens(msg: dict, rule: MicrocompactRule | float | None = None) -> int:
    """A tool result's size as Claude Code counts it: per text block ``Math.round(len / 4)``
    (halves up), 2,000 per image; a spilled result at its inline preview (what the model saw).

    >>> result_tokens({"role": "tool", "content": "x" * 402})
    101
    >>> result_tokens({"role": "tool", "content": "y" * 9000, "inline_output": "preview" * 4})
    7
    """
    if not isinstance(rule, MicrocompactRule):
        rule = MicrocompactRule(chars_per_token=float(rule)) if rule else MicrocompactRule()
    inline = msg.get("inline_output")
    if inline is not None:
        return _blocks_tokens(inline, rule)
    blocks = msg.get("content_blocks")
    if isinstance(blocks, list) and any(isinstance(b, dict) and b.get("type") == "image" for b in blocks):
        return _blocks_tokens(blocks, rule)
    content = msg.get("content")
    if content is None or isinstance(content, (str, list)):
        return _blocks_tokens(content, rule)
    import json

    return _blocks_tokens(json.dumps(content, ensure_ascii=False), rule)


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

    ``results``: ``(tool_call_id, tokens)`` of the candidates not cleared yet, in tool-call
    order (a call still waiting for its result counts 0 tokens but holds its place among
    the last ``keep_recent``). Below the warning threshold nothing happens; at or above it
    the oldest candidates are cleared while more than ``keep_tokens`` remain, and only if
    that saves at least ``min_savings``.

    >>> rule = MicrocompactRule()
    >>> plan_clearing([("a", 30_000), ("b", 20_000), ("c", 5_000), ("d", 1), ("e", 1), ("f", 1)], 150_000, rule)
    (['a'], 55003, 30000)
    >>> plan_clearing([("a", 30_000)] * 6, 140_000, rule) is None
    True
    """
    if context_tokens < rule.warning_tokens or not results:
        return None
    pre = sum(tokens for _, tokens in results)
    older = results[: max(0, len(results) - rule.keep_recent)]
    saved, ids = 0, []
    for tool_call_id, tokens in older:
        if pre - saved > rule.keep_tokens:
            ids.append(tool_call_id)
            saved += tokens
    if saved < rule.min_savings:
        return None
    return ids, pre, saved


def candidates(messages: Iterable[dict], rule: MicrocompactRule, cleared: Iterable[str] = ()) -> list[tuple[str, int]]:
    """``(tool_call_id, tokens)`` of the clearable calls among ``messages``, in tool-call order.

    The calls are read off the assistant messages (``tool_calls``); a call whose result
    is not in ``messages`` yet counts 0 tokens. Calls in ``cleared`` are left out.
    """
    done = {str(c) for c in cleared}
    order: list[str] = []
    sizes: dict[str, int] = {}
    seen: set[str] = set()
    results: list[dict] = []
    for msg in messages:
        role = msg.get("role")
        if role == "assistant":
            for call in msg.get("tool_calls") or ():
                cid = call.get("id") if isinstance(call, dict) else None
                if cid is not None and is_clearable(call.get("name"), rule) and str(cid) not in done \
                        and str(cid) not in seen:
                    seen.add(str(cid))
                    order.append(str(cid))
        elif role == "tool" and msg.get("tool_call_id") is not None:
            results.append(msg)
    for msg in results:
        cid = str(msg["tool_call_id"])
        if cid in seen and cid not in sizes:
            sizes[cid] = result_tokens(msg, rule)
    # a result without its call in view (a stream cut before it) falls back on its own name
    for msg in results:
        cid = str(msg["tool_call_id"])
        if cid not in seen and cid not in done and is_clearable(msg.get("name"), rule):
            seen.add(cid)
            order.append(cid)
            sizes[cid] = result_tokens(msg, rule)
    return [(cid, sizes.get(cid, 0)) for cid in order]


def clearable_results(messages: Iterable[dict], rule: MicrocompactRule, cleared: set[str]) -> list[tuple[str, int]]:
    """The candidates of ``messages`` that have a result (``candidates`` without pending calls)."""
    have = {str(m.get("tool_call_id")) for m in messages if m.get("role") == "tool"}
    return [(c, t) for c, t in candidates(messages, rule, cleared) if c in have]


def _cleared_copy(msg: dict) -> dict:
    cleared = copy.copy(msg)
    cleared["content"] = CLEARED_TEXT
    cleared.pop("inline_output", None)
    extra = msg.get("extra")
    if isinstance(extra, dict) and isinstance(extra.get("blocks"), list):
        cleared["extra"] = {**extra, "blocks": [
            {**b, "content": CLEARED_TEXT} if isinstance(b, dict) and b.get("type") == "tool_result" else b
            for b in extra["blocks"]
        ]}
    cleared["_microcompacted"] = True
    return cleared


def last_response_total(messages: Sequence[dict]) -> int | None:
    """Prompt + output of the last response in ``messages`` since the last compaction summary."""
    for msg in reversed(messages):
        if msg.get("compaction") is not None:
            return None
        if msg.get("role") == "assistant":
            prompt = provider_prompt_tokens(msg)
            if prompt is not None:
                return prompt + int((msg.get("usage") or {}).get("output_tokens") or 0)
    return None


@dataclass
class ClaudeCodeMicrocompactor:
    """The rule as an engine ager: ``age(history, references) -> (aged, AgingReport)``.

    The client's count is the last response's prompt + output as the provider reported it
    (a live session or a recording: what Claude Code itself reads); where no message since
    the last compaction carries one, the engine's estimate of the previous request as sent
    plus ``overhead_tokens`` (system prompt and tool schemas that transcripts do not hold;
    0 unless told). A result cleared once stays cleared (the same copy object in every
    later request, so prefix comparisons and per-message caches hold). ``events``: one
    ``MicrocompactEvent`` per clearing, ``request`` = how many requests (``age`` calls on
    a longer history) came before.
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
        self._last_tokens: int | None = None  # the estimate at the previous request
        self._tokens_now: int | None = None
        self._lock = threading.Lock()
        self._memo: dict[int, tuple[dict, int, int]] = {}  # id(message) -> (message, size, tokens)
        self.estimates = 0  # messages estimated (work counter: bounded per request)
        self._summed: tuple[list[dict], int] = ([], 0)  # the last history summed, its total

    def __deepcopy__(self, memo: dict) -> ClaudeCodeMicrocompactor:
        # the same settings, nothing seen yet
        return ClaudeCodeMicrocompactor(self.rule, self.estimate, self.overhead_tokens)

    def _tokens(self, msg: dict) -> int:
        # Memoised per message object: every request sums the whole history, and
        # estimating each message again made a replay quadratic (a 200-request session
        # paid ~125 estimates per request). The content's size is checked too, so a
        # message edited in place is estimated again.
        content = msg.get("content")
        size = len(content) if isinstance(content, str | list) else -1
        hit = self._memo.get(id(msg))
        if hit is not None and hit[0] is msg and hit[1] == size:
            return hit[2]
        if self.estimate is not None:
            tokens = int(self.estimate(msg))
        else:
            from opctx.context.tokens import estimate_message_tokens

            tokens = estimate_message_tokens(msg)
        self.estimates += 1
        self._memo[id(msg)] = (msg, size, tokens)
        return tokens

    def _history_tokens(self, aged: list[dict]) -> int:
        # The history only grew since the last request (the same objects, compared at C
        # speed): add the new messages; a clearing or a compaction sums it again.
        prev, total = self._summed
        k = len(prev)
        if k and k <= len(aged) and aged[k - 1] is prev[-1] and aged[:k] == prev:
            total += sum(self._tokens(m) for m in aged[k:])
        else:
            total = sum(self._tokens(m) for m in aged)
        self._summed = (aged, total)
        return total

    def _bound_memo(self, live: int) -> None:
        # the memo holds the messages it describes (so an id is never reused under it);
        # dropped whole when it outgrows the history, e.g. after compactions replaced it
        if len(self._memo) > 2 * live + 1_024:
            self._memo.clear()

    def _client_count(self, aged: list[dict]) -> int:
        counted = last_response_total(aged)
        if counted is not None:
            return counted
        if self._last_tokens is None:
            return self.overhead_tokens + sum(self._tokens(m) for m in aged)
        return self._last_tokens

    def age(self, history: Sequence[dict], references: Any = None) -> tuple[list[dict], AgingReport]:
        with self._lock:
            if len(history) != self._last_len:
                if self._last_len >= 0:
                    self._requests += 1
                    self._last_tokens = self._tokens_now
                self._last_len = len(history)
            aged = [self._cleared.get(str(m.get("tool_call_id")), m) if m.get("role") == "tool" else m for m in history]
            self._bound_memo(len(aged))
            since = _since_last_compaction(aged)
            plan = plan_clearing(candidates(aged[since:], self.rule, self._cleared), self._client_count(aged), self.rule)
            if plan is not None:
                ids, pre, saved = plan
                wanted = set(ids)
                for i, original in enumerate(aged):
                    cid = str(original.get("tool_call_id"))
                    if original.get("role") == "tool" and cid in wanted and cid not in self._cleared:
                        cleared = _cleared_copy(original)
                        self._cleared[cid] = cleared
                        self._freed[cid] = max(0, self._tokens(original) - self._tokens(cleared))
                        aged[i] = cleared
                self.events.append(MicrocompactEvent(self._requests, list(ids), pre, saved,
                                                     int(self._client_count(aged))))
            self._tokens_now = self.overhead_tokens + self._history_tokens(aged)
            present = [m.get("tool_call_id") for m in aged if m.get("_microcompacted")]
            report = AgingReport(
                redacted=len(present),
                tokens_freed=sum(self._freed.get(str(t), 0) for t in present),
                redacted_ids=[m.get("id") for m in aged if m.get("_microcompacted")],
            )
            return aged, report


def _since_last_compaction(messages: Sequence[dict]) -> int:
    """Index of the first message after the last compaction summary (0 without one)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("compaction") is not None:
            return i + 1
    return 0


def microcompactor_for(client_version: Any, microcompact: bool | MicrocompactRule | None,
                       context_window: int, *, model: str | None = None,
                       auto_compact: bool | None = None) -> ClaudeCodeMicrocompactor | None:
    """The ager the ``claude-code`` preset runs for a recording of ``client_version``, or None.

    ``microcompact``: ``None`` (default) = the version's rule (``rule_for_version``: None
    before 1.0.59 and after 2.1.62), ``True`` = that rule whatever the version (the 2.1.21+
    rule at the window where the version has none), ``False`` = never, a
    ``MicrocompactRule`` = that rule. ``auto_compact`` (the client's setting) moves the
    warning threshold.
    """
    if isinstance(microcompact, MicrocompactRule):
        return ClaudeCodeMicrocompactor(microcompact)
    if microcompact is False:
        return None
    rule = rule_for_version(client_version, context_window=context_window, model=model, auto_compact=auto_compact)
    if rule is None and microcompact is True:
        rule = rule_for(context_window)
    return ClaudeCodeMicrocompactor(rule) if rule is not None else None
