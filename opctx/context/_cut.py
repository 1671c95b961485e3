"""Where to cut (spec §4.2): :func:`find_cut_index` and its budget, :func:`keep_budget`.

``find_cut_index`` decides which messages of the active branch are folded into
a summary and which are kept verbatim, over the :class:`FactsTable` of
``_cut_facts.py``. The steps, the invariants and the choices where the
specification leaves room (the bounded ``protect_last_n`` floor, the snap
order, pinning the latest request) are in the ``opctx.context.summarize``
docstring ("The cut").
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from ._cut_facts import Estimate, MessageFacts
from ._summary_config import SummarizerConfig
from .types import CutPoint

__all__ = ["keep_budget", "find_cut_index"]


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
    """
    cfg = config or SummarizerConfig()
    if keep_recent_tokens is not None and keep_recent_tokens < 0:
        raise ValueError(f"keep_recent_tokens must be >= 0, got {keep_recent_tokens!r}")
    if max_tail_tokens is not None and max_tail_tokens < 0:
        raise ValueError(f"max_tail_tokens must be >= 0, got {max_tail_tokens!r}")
    desired, max_safe, effective = keep_budget(context_window, cfg)
    steps: list[str] = []
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

    if facts is None:
        facts = MessageFacts(estimate)
    table = facts.table(messages)
    n = len(table)

    def result(
        index: int, ok: bool, reason: str | None, head_end: int = 0, pinned: tuple[int, ...] = ()
    ) -> CutPoint:
        return CutPoint(
            pinned=pinned,
            index=index,
            desired_keep=desired,
            max_safe_keep=max_safe,
            effective_keep=effective,
            tail_tokens=(table.tail_tokens(index) + sum(table.tokens_at(i) for i in pinned))
            if n
            else 0,
            tail_text_messages=table.tail_text(index) if n else 0,
            protected_head=head_end,
            steps=steps,
            ok=ok,
            reason=reason,
        )

    if n == 0:
        return result(0, False, "empty history: nothing to fold")

    forbid, users = table.forbid, table.users
    tail_tokens, tail_text = table.tail_tokens, table.tail_text
    # step 5 first, because every later step needs the head: protect_first_n,
    # extended to the first boundary that keeps a tool group whole
    head_end = min(cfg.protect_first_n, n)
    while head_end < n and forbid[head_end]:
        head_end += 1
    if head_end > min(cfg.protect_first_n, n):
        steps.append(f"5:head extended to {head_end} to keep a tool group whole")
    last_user = users[-1] if users else None

    # step 3: the last index in [head_end, n) where the gates hold (suffix sums are
    # monotone, so a bisection finds it). Both gates first; when the text gate cannot
    # be met within the ceiling (an autonomous run of tool calls has no text), the
    # token gate alone decides, so that such a run can still be compacted.
    def last_meeting(min_text: int) -> int | None:
        lo, hi = head_end, n  # bisect for the first index where the gates fail
        while lo < hi:
            mid = (lo + hi) // 2
            if tail_tokens(mid) >= effective and tail_text(mid) >= min_text:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1 if lo > head_end else None

    token_gate = last_meeting(0)
    if token_gate is None:
        steps.append("3:gates never met: everything after the head fits the keep budget")
        return result(
            head_end,
            False,
            f"nothing to fold: the {n - head_end} message(s) after the protected head fit the "
            f"keep budget ({tail_tokens(head_end)} < {effective} tokens)",
            head_end,
        )
    gate = last_meeting(cfg.keep_min_messages)
    if gate is not None and (gate == token_gate or tail_tokens(gate) <= ceiling):
        cut = gate
        steps.append(f"3:gates met at {cut} (tokens={tail_tokens(cut)}, text={tail_text(cut)})")
    else:
        cut = token_gate
        steps.append(
            f"3:text gate relaxed ({cfg.keep_min_messages} text messages do not fit the ceiling "
            f"{ceiling}); token gate met at {cut} (tokens={tail_tokens(cut)})"
        )

    # step 4: protect_last_n floor, bounded by the token ceiling
    floor = max(0, n - cfg.protect_last_n)
    if tail_tokens(floor) > ceiling:
        lo, hi = floor, n  # first index whose suffix fits the ceiling
        while lo < hi:
            mid = (lo + hi) // 2
            if tail_tokens(mid) > ceiling:
                lo = mid + 1
            else:
                hi = mid
        steps.append(f"4:protect_last_n floor {floor} moved to {lo}: tail over ceiling {ceiling}")
        floor = lo
    if cut > floor:
        steps.append(f"4:cut {cut} -> {floor} (protect_last_n)")
        cut = floor
    if cut < head_end:
        steps.append(f"5:cut {cut} -> {head_end} (protected head)")
        cut = head_end

    # step 6: snap. The tail should start with a user request (spec), but the cut never
    # moves past the floor or the latest user request (SPEC-NOTES defect), and a backward
    # snap that would blow the tail past the ceiling is a last resort, not the default.
    if last_user is not None and last_user >= head_end:
        upper = min(max(floor, head_end), last_user)
    else:
        upper = min(max(floor, head_end), n - 1)
    limit = max(ceiling, effective)
    chosen: int | None = None
    # (a) forward: the first user request in [cut, upper]
    for b in users[bisect.bisect_left(users, cut) : bisect.bisect_right(users, upper)]:
        if not forbid[b]:
            chosen = b
            if b != cut:
                steps.append(f"6:snapped forward {cut} -> {b}")
            break
    backward_user: int | None = None
    if chosen is None:
        hi_user = bisect.bisect_right(users, min(cut - 1, upper))
        lo_user = bisect.bisect_right(users, head_end)
        backward_user = next((b for b in reversed(users[lo_user:hi_user]) if not forbid[b]), None)
        # (b) backward: the nearest earlier user request, if the tail still fits the ceiling
        if backward_user is not None and tail_tokens(backward_user) <= limit:
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
            return result(pin_cut, True, None, head_end, (last_user,))
    if chosen is None:
        # (c) no user request fits: the nearest boundary that keeps tool groups whole,
        # forward first (a smaller tail), then backward within the ceiling
        start = min(cut, upper)
        found = next((b for b in range(start, upper + 1) if not forbid[b]), None)
        if found is None or found <= head_end:
            found = None
            for b in range(start - 1, head_end, -1):
                if tail_tokens(b) > limit:
                    break
                if not forbid[b]:
                    found = b
                    break
        if found is not None and found > head_end:
            chosen = found
            steps.append(f"6:no user request fits; cut at tool-group boundary {chosen}")
    if chosen is None and backward_user is not None:
        # (d) last resort: the earlier user request even though the tail exceeds the ceiling
        chosen = backward_user
        steps.append(f"6:snapped backward {cut} -> {chosen}; tail {tail_tokens(chosen)} exceeds ceiling {limit}")
    if chosen is None or chosen <= head_end:
        reason = (
            "nothing can be folded: the protected head, the latest user request and the "
            f"kept tail cover the whole history ({n} messages, head {head_end})"
        )
        return result(head_end, False, reason, head_end)
    return result(chosen, True, None, head_end)


def _pin_latest_request(
    table: Any, head_end: int, cut: int, floor: int, last_user: int, snapped: int | None
) -> tuple[int, int, int] | None:
    """``(cut, tokens folded by snapping back, tokens folded by pinning)`` when pinning wins.

    ``snapped`` is the backward snap of step 6 (b), or ``None`` when it was refused
    (its tail would exceed the ceiling).

    Pinning the latest request ``u`` means folding ``[head_end, pin_cut)`` minus ``u``
    and keeping ``u`` verbatim after the summary. It needs ``u`` to stand alone (no
    tool exchange runs across it) and a tool-group boundary after it near the gates'
    cut: forward up to the floor, else backward down to ``u + 2``.
    """
    forbid, prefix = table.forbid, table.prefix_tokens
    n = len(table)
    if not head_end < last_user < cut or forbid[last_user] or forbid[last_user + 1]:
        return None
    bound = max(floor, last_user + 2)
    pin_cut = next((b for b in range(cut, min(bound, n - 1) + 1) if not forbid[b]), None)
    if pin_cut is None:
        pin_cut = next((b for b in range(cut - 1, last_user + 1, -1) if not forbid[b]), None)
    if pin_cut is None:
        return None
    folded_back = prefix[snapped] - prefix[head_end] if snapped is not None else 0
    folded_pinned = prefix[pin_cut] - prefix[head_end] - table.tokens_at(last_user)
    if folded_pinned <= 0 or 2 * folded_back >= folded_pinned:
        return None
    return pin_cut, folded_back, folded_pinned
