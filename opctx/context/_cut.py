"""Where to cut (spec §4.2): :func:`find_cut_index` and its budget, :func:`keep_budget`.

``find_cut_index`` decides which messages of the active branch are folded into
a summary and which are kept verbatim, over the :class:`FactsTable` of
``_cut_facts.py``. Its parameters are ``SummarizerConfig``'s (``opctx.context.summarize``
lists them); what becomes of the folded messages is ``Summarizer``'s.

The cut (§4.2, with the invariants of docs/design.md)
=====================================================
The six steps of the specification, over a precomputed table of per-message
facts (tokens, "has a text block", "is a user request", tool-call ids,
tool-result ids):

1. ``desired = clamp(window * keep_ratio, keep_min_tokens, keep_max_tokens)``.
2. ``min_prompt = min(min_prompt_budget, window * min_prompt_ratio)``;
   ``max_safe = window - min_prompt``; ``effective = min(desired, max_safe)``.
   ``keep_recent_tokens=N`` (§4.3) replaces steps 1-2 by ``effective = N``.
   ``max_tail_tokens`` (an addition the engine uses) caps ``effective`` further:
   on an 8K window the specification's own table keeps 6K of a 6K input budget,
   so a compaction could never fold anything and would loop (the OpenClaw
   pitfall). The engine passes half the input budget; the cap is recorded in
   ``CutPoint.steps``.
3. Walk back from the end accumulating tokens and text-block messages; the
   cut is the *last* index where both gates hold (``tokens >= effective`` and
   ``text messages >= keep_min_messages``). Suffix sums are monotone, so this is
   a bisection over prefix sums kept by a :class:`FactsTable`. When the text
   gate cannot be met within the ceiling (below) the token gate alone decides
   and the step says "text gate relaxed": an autonomous run of tool calls with
   empty assistant text would otherwise keep everything and never compact. If
   even the token gate never closes, everything after the head fits the keep
   budget: ``ok=False``, nothing to fold.
4. ``protect_last_n`` is a floor of the tail: the cut is no later than
   ``len - protect_last_n``. It is *bounded*: the floor never forces more tail
   tokens than the ceiling (``min(max_safe, max_tail_tokens)``, or ``N`` with an
   override), because twenty messages of 6K-token tool output do not fit a 32K
   window and a floor that makes compaction useless is worse than no floor.
5. The cut is no earlier than the protected head. The head is
   ``protect_first_n`` messages, extended forward until it does not split a tool
   call from its results. (Computed first: every other step needs it.)
6. Snap. The specification snaps *forward* to a user message; the public
   reference code let that carry the cut past ``len - protect_last_n`` and past
   the latest user message (a defect of the reference code: docs/design.md). Here, in order of preference:
   (a) forward to the first user request in ``[cut, min(floor, latest user
   request)]``; (b) *backward* to the nearest earlier user request, if the tail
   then still fits the ceiling; (c) the nearest boundary that keeps tool groups
   whole (forward within the same bound, else backward within the ceiling): the
   tail then starts mid-turn, after a complete tool exchange; (c') inside a
   thinking unit larger than the ceiling, its first tool group pinned ("Thinking
   units" below); (d) the earlier
   user request even over the ceiling; (e) any boundary after the head that keeps
   tool groups whole, backward from the cut first, else forward past the floor (up
   to the latest request): when the final tool group alone exceeds the ceiling, or
   one straddles the floor, no boundary fits the ceiling, and declining would leave
   the agent to overflow; the tail keeps the oversized group and the rest is
   folded. **Pinning** (an addition): when the latest user request lies between
   the head and the cut (the first message after the head included), snapping
   back to it keeps everything after it. In an autonomous run (one request, hundreds of tool
   calls: most Claude Code and Codex sessions) that folds next to nothing, and
   compaction stops for lack of progress. So if (b) would fold less than half of
   what cutting at the nearest tool-group boundary folds, the cut stays there and
   the request is *pinned*: kept verbatim, as a copy, right after the summary
   (``CutPoint.pinned``). The request is still on the new branch, word for word,
   which is what the design's "latest user request in the kept tail" protects; Codex
   keeps recent user messages after its summary the same way. A cut that folds nothing returns
   ``CutPoint(ok=False, reason=...)``. The forward snap of (a) may give back the
   one assistant message in front of the user request that the gates counted;
   that is the specification's behaviour and is kept.

Folding the current turn (an addition)
======================================
``fold_current_turn=True`` replaces steps 3-6: everything after the protected head
is folded except the latest user request, which is pinned after the summary, and the
kept tail is empty (``CutPoint.index == len(messages)``). The running tool loop is
folded whole (calls, results and thinking together), so no pair and no unit is
split. This is the layout of a client that summarises the whole conversation and
continues from the summary (Claude Code: its first request after a compaction holds
the system prompt, tools, summary and re-attached files only); the pinned request
keeps the design's "latest user request present". When a tool exchange runs across
the request, or nothing but it would be folded, the ordinary steps decide.

Thinking units
==============
An assistant message with thinking blocks, the tool results and the tool calls that
continue its loop, up to the first other message, is one *unit* (``_cut_facts``;
Anthropic rejects a running tool loop whose first assistant message lost its
thinking). The cut keeps units whole: the kept tail starts where a unit starts or
outside any (``FactsTable.tail_may_start``), and step 5 extends the protected head to
the end of the unit it ends in, so the fold never begins inside the head's unit.

One exception, documented here and recorded in ``CutPoint.steps``: a unit larger than
the ceiling (one turn that thought once, then a tool loop far past every budget).
Keeping it whole keeps everything and folding it whole drops the running loop, so
the cut goes inside it, at a tool-group boundary, and the unit's *first tool group*
(the message carrying the thinking block, with its results) is kept: in the head when
the head already holds it (step 5 then stops after that group instead of extending
over the unit: "over the ceiling"), else pinned after the summary with the latest
request (step 6 (c'), ``CutPoint.pinned``). The Anthropic request built after such a
compaction opens the unfinished loop with its thinking block, and every
``tool_result`` still follows its ``tool_use`` (tests/context/test_cut_units.py).

A boundary ``b`` is *valid* when no tool result at ``>= b`` answers a call at
``< b``. It is maintained per boundary as messages are appended: each result is
paired with the most recent earlier call carrying its id (ids are reused by some
providers), and every pair forbids the boundaries between them. A result whose
call does not exist is an orphan already; it forbids nothing. Parallel tool
calls are one assistant message with several ids; its results all pair with it,
so the group is never split. The latest user request (``role == "user"`` and not
a tool-result wrapper) is always at or after the cut, unless it is inside the
protected head, which is kept verbatim anyway.

Speed: per-message facts come from a :class:`MessageFacts` cache keyed by
``(id, role, content length)`` and checked against the message it was computed
from (so a node updated under its id is recomputed), and its
:meth:`MessageFacts.table` extends the previous table when the history only grew
(same objects, or equal copies). With a
warm table ``find_cut_index`` on 10,000 messages is two bisections and a few
short loops, well under a millisecond (``benchmarks/engine.py``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opctx.dag.messages import is_tool_result

from ._cut_facts import Estimate, FactsTable, MessageFacts
from ._summary_config import SummarizerConfig
from .types import CutPoint

__all__ = ["keep_budget", "find_cut_index", "counted_cut"]


def keep_budget(
    context_window: int, config: SummarizerConfig | None = None
) -> tuple[int, int, int]:
    """Steps 1-2 of §4.2: ``(desired_keep, max_safe_keep, effective_keep)`` for a window."""
    cfg = config or SummarizerConfig()
    if context_window <= 0:
        raise ValueError(f"context_window must be positive, got {context_window!r}")
    desired = int(
        min(max(context_window * cfg.keep_ratio, cfg.keep_min_tokens), cfg.keep_max_tokens)
    )
    min_prompt = min(cfg.min_prompt_budget, context_window * cfg.min_prompt_ratio)
    max_safe = max(0, int(context_window - min_prompt))
    return desired, max_safe, min(desired, max_safe)


@dataclass(frozen=True)
class _KeepLimits:
    """The token limits of one cut, from steps 1-2 (see :func:`_keep_limits`)."""

    desired: int  # step 1
    max_safe: int  # step 2
    effective: int  # what the tail must reach (step 3's token gate)
    ceiling: int  # the most tail that a later step may force on it (steps 3, 4 and 6)


def find_cut_index(
    messages: Sequence[dict],
    context_window: int,
    config: SummarizerConfig | None = None,
    keep_recent_tokens: int | None = None,
    estimate: Estimate | None = None,
    *,
    max_tail_tokens: int | None = None,
    facts: MessageFacts | None = None,
) -> CutPoint:
    """Where to cut ``messages`` (§4.2): ``messages[:index]`` minus the head is folded.

    ``estimate(msg) -> int`` counts tokens (default ``tokens.estimate_message_tokens``);
    ``facts`` is a warm :class:`MessageFacts` cache (it brings its own estimate).
    ``keep_recent_tokens`` overrides steps 1-2 (§4.3); ``max_tail_tokens`` caps the
    kept tail (the engine passes a share of the input budget). See the module
    docstring for the invariants. Never raises on odd histories; an impossible cut
    is ``ok=False`` with a ``reason``.

    The steps, in the order they run: :func:`_keep_limits` (1-2),
    :func:`_protected_head` (5: every later step needs it), :func:`_gate_cut` (3),
    :func:`_tail_floor` and :func:`_clamp_cut` (4-5), :func:`_snap` (6), and
    :func:`_nothing_to_fold` when no boundary after the head is left.
    """
    cfg = config or SummarizerConfig()
    steps: list[str] = []
    limits = _keep_limits(context_window, cfg, keep_recent_tokens, max_tail_tokens, steps)
    if facts is None:
        facts = MessageFacts(estimate)
    table = facts.table(messages)
    if len(table) == 0:
        return _cut_point(table, limits, steps, 0, False, "empty history: nothing to fold")

    first_n = _head_count(messages, cfg.protect_first_n, cfg.keep_initial_request, steps)
    head_end = _protected_head(table, first_n, max(limits.ceiling, limits.effective), steps)
    if cfg.fold_current_turn:
        whole = _fold_current_turn(table, head_end, steps)
        if whole is not None:
            return _cut_point(table, limits, steps, len(table), True, None, head_end, whole)
    cut = _gate_cut(table, head_end, limits, cfg.keep_min_messages, steps)
    if cut is None:
        reason = (
            f"nothing to fold: the {len(table) - head_end} message(s) after the protected head "
            f"fit the keep budget ({table.tail_tokens(head_end)} < {limits.effective} tokens)"
        )
        return _cut_point(table, limits, steps, head_end, False, reason, head_end)
    floor = _tail_floor(table, cfg.protect_last_n, limits.ceiling, steps)
    cut = _clamp_cut(cut, floor, head_end, steps)
    chosen, pinned = _snap(table, cut, head_end, floor, limits, steps)
    if chosen is None or chosen <= head_end:
        return _nothing_to_fold(table, limits, steps, head_end)
    return _cut_point(table, limits, steps, chosen, True, None, head_end, pinned)


def _fold_current_turn(table: FactsTable, head_end: int, steps: list[str]) -> tuple[int, ...] | None:
    """``SummarizerConfig.fold_current_turn``: everything after the head is folded but the
    latest user request, pinned after the summary; the pinned positions, or ``None``.

    The kept tail is empty, so no tool pair and no thinking unit can be split: the
    running tool loop is folded whole, calls, results and thinking together (a client
    that summarises the whole conversation, Claude Code, continues from its summary the
    same way). The latest request stays on the branch, pinned; a request inside the head
    is kept there. ``None`` (the ordinary steps decide) when the request cannot stand
    alone (a tool exchange runs across it) or nothing but it would be folded.
    """
    n, users = len(table), table.users
    last_user = users[-1] if users else None
    if last_user is None or last_user < head_end:
        pinned: tuple[int, ...] = ()
    elif not _stands_alone(table, last_user):
        steps.append("6:fold_current_turn: a tool exchange runs across the latest request; ordinary cut")
        return None
    else:
        pinned = (last_user,)
    if n - head_end - len(pinned) <= 0:
        return None
    steps.append(
        f"6:fold_current_turn: cut at {n} (empty tail); "
        + (f"latest user request {last_user} pinned after the summary" if pinned else "no request after the head")
    )
    return pinned


def _stands_alone(table: FactsTable, index: int) -> bool:
    """Can message ``index`` be kept (pinned) on its own: no tool exchange runs across it?"""
    return not (table.forbid[index] or table.forbid[index + 1])


def _cut_point(
    table: FactsTable,
    limits: _KeepLimits,
    steps: list[str],
    index: int,
    ok: bool,
    reason: str | None,
    head_end: int = 0,
    pinned: tuple[int, ...] = (),
) -> CutPoint:
    """The :class:`CutPoint` at ``index``, with the limits and the steps that led there."""
    n = len(table)
    return CutPoint(
        pinned=pinned,
        index=index,
        desired_keep=limits.desired,
        max_safe_keep=limits.max_safe,
        effective_keep=limits.effective,
        tail_tokens=(table.tail_tokens(index) + sum(table.tokens_at(i) for i in pinned))
        if n
        else 0,
        tail_text_messages=table.tail_text(index) if n else 0,
        protected_head=head_end,
        steps=steps,
        ok=ok,
        reason=reason,
    )


def _keep_limits(
    context_window: int,
    cfg: SummarizerConfig,
    keep_recent_tokens: int | None,
    max_tail_tokens: int | None,
    steps: list[str],
) -> _KeepLimits:
    """Steps 1-2: the tail the gates must reach (``effective``) and the ``ceiling``.

    ``keep_recent_tokens`` (§4.3) replaces both steps and is its own ceiling;
    otherwise the ceiling is ``max_safe``, and ``max_tail_tokens`` caps both.
    """
    if keep_recent_tokens is not None and keep_recent_tokens < 0:
        raise ValueError(f"keep_recent_tokens must be >= 0, got {keep_recent_tokens!r}")
    if max_tail_tokens is not None and max_tail_tokens < 0:
        raise ValueError(f"max_tail_tokens must be >= 0, got {max_tail_tokens!r}")
    desired, max_safe, effective = keep_budget(context_window, cfg)
    if keep_recent_tokens is not None:
        effective = ceiling = int(keep_recent_tokens)
        steps.append(f"1-2:override keep_recent_tokens={effective}")
    else:
        steps.append(f"1:desired={desired}")
        steps.append(f"2:max_safe={max_safe} effective={effective}")
        ceiling = max_safe
        if max_tail_tokens is not None:
            ceiling = min(ceiling, max_tail_tokens)
            if effective > max_tail_tokens:
                effective = max_tail_tokens
                steps.append(f"2:capped by max_tail_tokens={max_tail_tokens}")
    return _KeepLimits(desired, max_safe, effective, ceiling)


def _head_count(messages: Sequence[dict], protect_first_n: int, keep_initial_request: bool, steps: list[str]) -> int:
    """The messages step 5 protects before it extends the head: ``protect_first_n``, or
    with ``keep_initial_request`` at least up to the first user request. OpenHands keeps
    ``keep_first`` events and its conversation memory puts the initial user message back
    after the system message when a condenser left it out; in a history that opens with a
    system message, that is the head reaching the task."""
    if not keep_initial_request:
        return protect_first_n
    first = next((i for i, m in enumerate(messages) if _is_request(m)), None)
    if first is None or first < protect_first_n:
        return protect_first_n
    steps.append(f"5:head extended to {first + 1} to keep the initial request")
    return first + 1


def _protected_head(table: FactsTable, protect_first_n: int, limit: int, steps: list[str]) -> int:
    """Step 5's head: ``protect_first_n`` messages, extended until no tool group is split,
    then to the end of the thinking unit it ends in, when the rest of that unit fits ``limit``.

    A unit whose rest exceeds ``limit`` (a loop that thought once and ran on) would make
    the head keep everything: the head then ends after the unit's first tool group, which
    carries the thinking block, and the rest of the unit is folded like any run (the
    documented exception, "Thinking units" in the ``summarize`` docstring). Computed
    first, because every later step needs it.
    """
    n, forbid = len(table), table.forbid
    head_end = min(protect_first_n, n)
    while head_end < n and forbid[head_end]:
        head_end += 1
    if head_end > min(protect_first_n, n):
        steps.append(f"5:head extended to {head_end} to keep a tool group whole")
    if head_end < n and table.inside_unit[head_end]:
        end, prefix = head_end, table.prefix_tokens
        # stops as soon as the rest is over the limit: a loop of 10,000 steps is not walked
        while end < n and (forbid[end] or table.inside_unit[end]) and prefix[end] - prefix[head_end] <= limit:
            end += 1
        rest = prefix[end] - prefix[head_end]
        if rest <= limit and not (end < n and (forbid[end] or table.inside_unit[end])):
            steps.append(f"5:head extended to {end} to keep a thinking unit whole")
            head_end = end
        else:
            steps.append(
                f"5:head ends at {head_end} inside a thinking unit whose rest is over the ceiling "
                f"{limit}: the unit's first tool group, with its thinking, stays in the head"
            )
    return head_end


def _last_meeting(table: FactsTable, head_end: int, min_tokens: int, min_text: int) -> int | None:
    """The last index in ``[head_end, n)`` whose tail holds both gates, or ``None``.

    Suffix sums are monotone, so a bisection finds it.
    """
    lo, hi = head_end, len(table)  # bisect for the first index where the gates fail
    while lo < hi:
        mid = (lo + hi) // 2
        if table.tail_tokens(mid) >= min_tokens and table.tail_text(mid) >= min_text:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1 if lo > head_end else None


def _gate_cut(
    table: FactsTable, head_end: int, limits: _KeepLimits, keep_min_messages: int, steps: list[str]
) -> int | None:
    """Step 3: the last index where the gates hold; ``None`` when even the token gate never does.

    Both gates first; when the text gate cannot be met within the ceiling (an
    autonomous run of tool calls has no text), the token gate alone decides, so
    that such a run can still be compacted.
    """
    token_gate = _last_meeting(table, head_end, limits.effective, 0)
    if token_gate is None:
        steps.append("3:gates never met: everything after the head fits the keep budget")
        return None
    gate = _last_meeting(table, head_end, limits.effective, keep_min_messages)
    if gate is not None and (gate == token_gate or table.tail_tokens(gate) <= limits.ceiling):
        steps.append(
            f"3:gates met at {gate} (tokens={table.tail_tokens(gate)}, text={table.tail_text(gate)})"
        )
        return gate
    steps.append(
        f"3:text gate relaxed ({keep_min_messages} text messages do not fit the ceiling "
        f"{limits.ceiling}); token gate met at {token_gate} (tokens={table.tail_tokens(token_gate)})"
    )
    return token_gate


def _tail_floor(table: FactsTable, protect_last_n: int, ceiling: int, steps: list[str]) -> int:
    """Step 4: the ``protect_last_n`` floor, moved later while its tail exceeds the ceiling."""
    n = len(table)
    floor = max(0, n - protect_last_n)
    if table.tail_tokens(floor) > ceiling:
        lo, hi = floor, n  # first index whose suffix fits the ceiling
        while lo < hi:
            mid = (lo + hi) // 2
            if table.tail_tokens(mid) > ceiling:
                lo = mid + 1
            else:
                hi = mid
        steps.append(f"4:protect_last_n floor {floor} moved to {lo}: tail over ceiling {ceiling}")
        floor = lo
    return floor


def _clamp_cut(cut: int, floor: int, head_end: int, steps: list[str]) -> int:
    """Steps 4-5 on the gates' cut: no later than the floor, no earlier than the head."""
    if cut > floor:
        steps.append(f"4:cut {cut} -> {floor} (protect_last_n)")
        cut = floor
    if cut < head_end:
        steps.append(f"5:cut {cut} -> {head_end} (protected head)")
        cut = head_end
    return cut


def _snap(
    table: FactsTable, cut: int, head_end: int, floor: int, limits: _KeepLimits, steps: list[str]
) -> tuple[int | None, tuple[int, ...]]:
    """Step 6: the boundary the kept tail starts at, and the pinned request, if any.

    The tail should start with a user request (spec), but the cut never moves past
    the floor or the latest user request (a defect of the reference code: docs/design.md), and a backward snap
    that would blow the tail past the ceiling is a last resort, not the default.
    In order: (a) forward to a user request, (b) back to one within the ceiling,
    or pin the latest request when that folds more than twice as much, (c) the
    nearest tool-group boundary, (c') inside a thinking unit larger than the ceiling,
    pinning its first tool group (:func:`_inside_oversized_unit`), (d) back to a request
    over the ceiling, (e) any boundary after the head, keeping an oversized final group
    (:func:`_any_boundary`). ``None`` when none of them is found.
    """
    users = table.users
    last_user = users[-1] if users else None
    if last_user is not None and last_user >= head_end:
        upper = min(max(floor, head_end), last_user)
    else:
        upper = min(max(floor, head_end), len(table) - 1)
    limit = max(limits.ceiling, limits.effective)
    chosen = _forward_to_request(table, cut, upper, steps)
    backward_user: int | None = None
    if chosen is None:
        backward_user = _earlier_request(table, cut, upper, head_end)
        # (b) backward: the nearest earlier user request, if the tail still fits the ceiling
        if backward_user is not None and table.tail_tokens(backward_user) <= limit:
            chosen = backward_user
            steps.append(
                f"6:snapped backward {cut} -> {chosen} (forward would cross the floor or the latest user request)"
            )
    if last_user is not None and (chosen is None or chosen == backward_user):
        # the gates cut past the latest request: snap back to it (b) only if that
        # still folds at least half of what pinning it would
        pin = _pin_latest_request(table, head_end, cut, floor, last_user, chosen)
        if pin is not None:
            pin_cut, folded_back, folded_pinned = pin
            steps.append(
                f"6:latest user request {last_user} pinned after the summary; cut at {pin_cut} "
                f"(snapping back would fold {folded_back} tokens, pinning folds {folded_pinned})"
            )
            return pin_cut, (last_user,)
    if chosen is None:
        chosen = _tool_group_boundary(table, cut, upper, head_end, limit, steps)
    if chosen is None and table.inside_unit[cut]:
        inside = _inside_oversized_unit(table, cut, head_end, floor, last_user, limit, steps)
        if inside is not None:
            return inside
    if chosen is None and backward_user is not None:
        # (d) last resort: the earlier user request even though the tail exceeds the ceiling
        chosen = backward_user
        steps.append(
            f"6:snapped backward {cut} -> {chosen}; tail {table.tail_tokens(chosen)} exceeds ceiling {limit}"
        )
    if chosen is None:
        chosen = _any_boundary(table, cut, upper, head_end, last_user, limit, steps)
    return chosen, ()


def _forward_to_request(table: FactsTable, cut: int, upper: int, steps: list[str]) -> int | None:
    """Step 6 (a): the first user request in ``[cut, upper]`` where the tail may start."""
    starts, users = table.tail_may_start, table.users
    for b in users[bisect.bisect_left(users, cut) : bisect.bisect_right(users, upper)]:
        if starts(b):
            if b != cut:
                steps.append(f"6:snapped forward {cut} -> {b}")
            return b
    return None


def _earlier_request(table: FactsTable, cut: int, upper: int, head_end: int) -> int | None:
    """The candidate of step 6 (b) and (d): the nearest valid user request before the cut.

    After the head and no later than ``upper``; whether it is taken depends on its tail.
    """
    starts, users = table.tail_may_start, table.users
    hi_user = bisect.bisect_right(users, min(cut - 1, upper))
    lo_user = bisect.bisect_right(users, head_end)
    return next((b for b in reversed(users[lo_user:hi_user]) if starts(b)), None)


def _tool_group_boundary(
    table: FactsTable, cut: int, upper: int, head_end: int, limit: int, steps: list[str]
) -> int | None:
    """Step 6 (c), when no user request fits: the nearest boundary keeping tool groups whole.

    Forward first (a smaller tail), then backward within the ceiling ``limit``.
    """
    starts, tail_tokens = table.tail_may_start, table.tail_tokens
    start = min(cut, upper)
    found = next((b for b in range(start, upper + 1) if starts(b)), None)
    if found is None or found <= head_end:
        found = None
        for b in range(start - 1, head_end, -1):
            if tail_tokens(b) > limit:
                break
            if starts(b):
                found = b
                break
    if found is not None and found > head_end:
        steps.append(f"6:no user request fits; cut at tool-group boundary {found}")
        return found
    return None


def _inside_oversized_unit(
    table: FactsTable,
    cut: int,
    head_end: int,
    floor: int,
    last_user: int | None,
    limit: int,
    steps: list[str],
) -> tuple[int, tuple[int, ...]] | None:
    """Step 6 (c'): the cut lies inside a thinking unit larger than the ceiling ``limit``.

    One assistant turn thought, then ran a tool loop far past every budget: the only
    boundaries that keep the unit whole keep all of it (or fold all of it, unfinished
    loop included). The cut goes inside the unit instead, at the nearest tool-group
    boundary (forward up to the floor first, else backward), and the unit's first tool
    group (the message with the thinking block and its results) is *pinned* after the
    summary with the latest request, so the request still carries the thinking of the
    running loop, where Anthropic requires it. When the head holds that group already
    (step 5's exception) nothing of the unit is pinned. ``(cut, pinned)``, or ``None``
    when the unit is not that large or no boundary inside it folds anything.
    """
    n, forbid, prefix = len(table), table.forbid, table.prefix_tokens
    start, end = table.unit_start(cut), table.unit_end(cut)
    size = prefix[end] - prefix[start]
    if size <= limit:
        return None  # a unit that fits is kept whole by (d) or (e)
    # (rare: the walks of unit_start and unit_end run only when no boundary outside a unit fits)
    first_group = table.group_end(start)
    pinned: list[int] = []
    if start >= head_end:
        if last_user is not None and head_end <= last_user < start:
            if not _stands_alone(table, last_user):
                return None  # a tool exchange runs across the request: it cannot stand alone
            pinned.append(last_user)
        pinned.extend(range(start, first_group))
    lowest = max(first_group, head_end) + 1  # the tail starts after the first group and the head
    highest = n - 1
    if last_user is not None and last_user >= lowest:
        highest = min(highest, last_user)  # a request after the unit stays in the tail
    bound = min(max(floor, lowest), highest)
    chosen = next((b for b in range(max(cut, lowest), bound + 1) if not forbid[b]), None)
    if chosen is None:
        chosen = next((b for b in range(min(cut, highest + 1) - 1, lowest - 1, -1) if not forbid[b]), None)
    if chosen is None:
        return None
    held = "pinned after the summary" if start >= head_end else "kept in the head"
    steps.append(
        f"6:cut at {chosen} inside the thinking unit {start}..{end - 1} ({size} tokens, over the "
        f"ceiling {limit}); its first tool group {start}..{first_group - 1}, with the thinking "
        f"block, is {held}" + (f", with the latest request {last_user}" if last_user in pinned else "")
    )
    return chosen, tuple(pinned)


def _any_boundary(
    table: FactsTable,
    cut: int,
    upper: int,
    head_end: int,
    last_user: int | None,
    limit: int,
    steps: list[str],
) -> int | None:
    """Step 6 (e), before declining: any boundary after the head that keeps tool groups whole.

    Reached when no boundary fits the ceiling (a final tool group larger than the
    ceiling, or one straddling the floor). Declining would leave the agent to
    overflow, so the tail keeps that oversized group and everything before it is
    folded: backward from the cut first (the nearest boundary, so the least tail
    over the ceiling), else forward past the floor, never past the latest user
    request and never the empty tail.
    """
    starts = table.tail_may_start
    start = min(cut, upper)
    found = next((b for b in range(start, head_end, -1) if starts(b)), None)
    if found is None:
        # the latest request stays in the tail (when it is not inside the head)
        bound = last_user if last_user is not None and last_user >= head_end else len(table) - 1
        found = next((b for b in range(start + 1, bound + 1) if starts(b)), None)
    if found is None or found <= head_end:
        return None
    steps.append(
        f"6:no boundary fits the ceiling {limit}; cut at {found} keeps a tail of "
        f"{table.tail_tokens(found)} tokens and folds the rest"
    )
    return found


def _nothing_to_fold(
    table: FactsTable, limits: _KeepLimits, steps: list[str], head_end: int
) -> CutPoint:
    """Decline: the head, the latest request and the kept tail leave nothing to fold."""
    reason = (
        "nothing can be folded: the protected head, the latest user request and the "
        f"kept tail cover the whole history ({len(table)} messages, head {head_end})"
    )
    return _cut_point(table, limits, steps, head_end, False, reason, head_end)


def _pin_latest_request(
    table: Any, head_end: int, cut: int, floor: int, last_user: int, snapped: int | None
) -> tuple[int, int, int] | None:
    """``(cut, tokens folded by snapping back, tokens folded by pinning)`` when pinning wins.

    ``snapped`` is the backward snap of step 6 (b), or ``None`` when it was refused
    (its tail would exceed the ceiling).

    Pinning the latest request ``u`` means folding ``[head_end, pin_cut)`` minus ``u``
    and keeping ``u`` verbatim after the summary; ``u`` may be the first message after
    the head (``u == head_end``), where snapping back would fold nothing. It needs ``u``
    to stand alone (no tool exchange runs across it) and a boundary after it where the
    tail may start near the gates' cut: forward up to the floor, else backward down to
    ``u + 2``.
    """
    starts = table.tail_may_start
    prefix = table.prefix_tokens
    n = len(table)
    # the request may be the first message after the head: then snapping back to it
    # folds nothing at all, and pinning is the only way to fold the run that follows
    if not head_end <= last_user < cut or not _stands_alone(table, last_user):
        return None
    bound = max(floor, last_user + 2)
    pin_cut = next((b for b in range(cut, min(bound, n - 1) + 1) if starts(b)), None)
    if pin_cut is None:
        pin_cut = next((b for b in range(cut - 1, last_user + 1, -1) if starts(b)), None)
    if pin_cut is None:
        return None
    folded_back = prefix[snapped] - prefix[head_end] if snapped is not None else 0
    folded_pinned = prefix[pin_cut] - prefix[head_end] - table.tokens_at(last_user)
    if folded_pinned <= 0 or 2 * folded_back >= folded_pinned:
        return None
    return pin_cut, folded_back, folded_pinned


def counted_cut(
    messages: Sequence[dict], facts: MessageFacts, keep: tuple[str, int], protect_first_n: int,
    *, keep_initial_request: bool = False, fold_at_least: int | None = None,
) -> CutPoint:
    """The cut of a "keep" by count (``CutPolicy.keep``: the last N messages, agent turns,
    tool uses, or N tokens of tail), as LangChain's ``SummarizationMiddleware`` and the
    count-based condensers cut: the tail starts where the count says, moved *back* to the
    nearest boundary that splits no tool pair and no thinking unit (so it keeps at least
    N), never into the protected head. None of the specification's token clamps, text
    gate or forward snap to a user request apply. The latest user request (not a tool
    result, observation or demonstration) is never folded: when it lies in the folded
    range it is pinned after the summary, as every opctx cut does.

    ``fold_at_least`` (tokens): the folded range must hold at least this much, however many
    the count keeps; such a tail starts at the next boundary *after* the point (the OpenHands
    SDK condenser's token reduction, which moves its forgetting end forward to a boundary).

    >>> msgs = [{"role": "user", "content": "task"}] + [
    ...     {"role": r, "content": f"m{i}", "is_observation": r == "user"}
    ...     for i, r in enumerate(["assistant", "user"] * 3)]
    >>> cut = counted_cut(msgs, MessageFacts(lambda m: 10), ("messages", 2), 0)
    >>> cut.index, cut.pinned
    (5, (0,))
    """
    steps: list[str] = []
    table = facts.table(messages)
    n = len(table)
    first_n = _head_count(messages, protect_first_n, keep_initial_request, steps)
    head_end = _protected_head(table, first_n, table.total_tokens, steps)
    start = _count_start(messages, table, keep)
    cut = max(start, head_end)
    reduced = _reduction_start(table, head_end, fold_at_least)
    if reduced > cut:
        cut = next((b for b in range(reduced, n + 1) if table.tail_may_start(b)), n)
        steps.append(f"count:fold at least {fold_at_least} tokens: tail at {cut}, not {start}")
    while cut > head_end and not table.tail_may_start(cut):
        cut -= 1
    steps.append(f"count:keep {keep[1]} {keep[0]} from {start}, tail at {cut}")
    kept = table.tail_tokens(cut) if n else 0
    limits = _KeepLimits(kept, kept, kept, kept)
    if cut <= head_end:
        reason = f"nothing to fold: the last {keep[1]} {keep[0]} reach into the protected head ({head_end})"
        return _cut_point(table, limits, steps, head_end, False, reason, head_end)
    requests = [i for i, m in enumerate(messages) if _is_request(m)]
    latest = requests[-1] if requests else None
    pinned = (latest,) if latest is not None and head_end <= latest < cut else ()
    return _cut_point(table, limits, steps, cut, True, None, head_end, pinned)


def _reduction_start(table: FactsTable, head_end: int, tokens: int | None) -> int:
    """The first boundary at or after ``head_end`` with at least ``tokens`` before it (after
    the head); ``head_end`` for none, the end when the whole range holds less."""
    if not tokens or tokens <= 0:
        return head_end
    goal = table.prefix_tokens[head_end] + tokens
    return min(len(table), bisect.bisect_left(table.prefix_tokens, goal, lo=head_end))


def _is_request(msg: dict) -> bool:
    """A user's request: a user message that is no tool result, observation or demonstration."""
    return (
        msg.get("role") == "user"
        and not is_tool_result(msg)
        and msg.get("is_observation") is not True
        and msg.get("is_demo") is not True
    )


def _count_start(messages: Sequence[dict], table: FactsTable, keep: tuple[str, int]) -> int:
    """Where the last N messages / agent turns / tool uses / tokens start (0: all of them)."""
    unit, count = keep
    n = len(table)
    if unit == "messages":
        return max(0, n - count)
    if unit == "tokens":
        start = n
        while start > 0 and table.tail_tokens(start - 1) <= count:
            start -= 1
        return start
    start, seen = n, 0
    while start > 0 and seen < count:
        start -= 1
        if unit == "turns":
            seen += messages[start].get("role") == "assistant"
        else:
            seen += len(table.facts[start][3])  # the calls of (tokens, text, user, calls, ...)
    return start if seen >= count else 0
