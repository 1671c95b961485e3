"""The folded messages as the text of the summary prompt (spec §4.4).

:func:`render_transcript` renders each message as ``[role] text`` with its tool
calls, each cut to ``max_message_chars``; to fit ``max_tokens`` the *oldest*
messages fall back to structural one-liners, and :class:`PromptTooLarge` says when
even that does not fit. The prompt templates themselves are ``prompts.py``;
``Summarizer.build_prompt`` puts the two together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ._structural import (
    _call_summaries,
    _clip,
    _content_text,
    _default_text_tokens,
    _label,
    is_summary_message,
    structural_line,
)

__all__ = ["render_transcript", "PromptTooLarge"]


def _full_line(msg: dict, max_chars: int) -> str:
    label = _label(msg)
    body = _clip(_content_text(msg), max_chars)
    calls = _call_summaries(msg)
    lines = [f"[{label}] {body}".rstrip()]
    lines.extend("-> call " + _clip(c, max_chars) for c in calls)
    return "\n".join(lines)


def render_transcript(
    messages: Sequence[dict],
    *,
    max_message_chars: int = 4_000,
    max_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    skip_summaries: bool = False,
    head_chars: int = 60,
) -> str:
    """The folded messages as prompt text; oldest ones fall back to one-liners to fit ``max_tokens``."""
    count = count_tokens or _default_text_tokens
    rendered: list[str] = []
    brief: list[str] = []
    for msg in messages:
        if skip_summaries and is_summary_message(msg):
            rendered.append("[summary] (previous summary, given separately)")
            brief.append(rendered[-1])
            continue
        rendered.append(_full_line(msg, max_message_chars))
        brief.append(structural_line(msg, head_chars))
    if max_tokens is None:
        return "\n\n".join(rendered)
    costs = [count(r) + 2 for r in rendered]
    brief_costs = [count(b) + 1 for b in brief]
    total = sum(costs)
    shortened = 0
    while total > max_tokens and shortened < len(rendered):
        total += brief_costs[shortened] - costs[shortened]
        shortened += 1
    if total > max_tokens:
        raise PromptTooLarge(
            f"the folded transcript needs about {total} tokens even as one-liners; "
            f"the summary call allows {max_tokens}"
        )
    if not shortened:
        return "\n\n".join(rendered)
    note = f"(The {shortened} oldest message(s) are listed in brief to fit the summary call.)"
    return "\n".join([note, *brief[:shortened]]) + "\n\n" + "\n\n".join(rendered[shortened:])


class PromptTooLarge(Exception):
    """The folded messages cannot fit the summary call, even in brief."""
