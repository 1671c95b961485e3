"""The structural summary (spec §4.5): one line per folded message, no LLM.

:func:`structural_line` is ``[role] first N characters`` of a message, tool
calls listed as ``-> name(args)``, tool results labelled ``[tool name]`` (``error``
for failures); :func:`structural_summary` puts the previous summary on top and
lists the folded messages, one line each. Given a token bound (the engine passes
``summary_output_tokens``, 4,096 by default) it stays within it: the previous
summary is clipped and the *oldest* folded messages are collapsed into one line
counting them by role and naming their first and last ids. Every folded message
is accounted for, not every one is listed: docs/design.md says the same. :func:`is_summary_message` recognises a compaction summary
(ours or a recorded one). The line helpers here are shared with the prompt
transcript (``_transcript.py``). See "The summary" in the
``opctx.context.summarize`` docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from opctx.dag.messages import is_tool_result, message_text

__all__ = ["structural_line", "structural_summary", "is_summary_message"]


def is_summary_message(msg: dict) -> bool:
    """A compaction summary node (ours or a recorded one) as a message dict."""
    if msg.get("type") == "compactionSummary":
        return True
    extra = msg.get("extra")
    return isinstance(extra, dict) and extra.get("compaction") is True


def _one_line(text: str, limit: int) -> str:
    # Flattening a prefix of the text gives a prefix of the flattened text (a word cut at
    # the end is a prefix of that word), so a long tool result is not flattened whole
    # for the first ``limit`` characters; a prefix that flattens short (mostly blanks)
    # falls back to the whole text.
    bound = 2 * limit + 64
    if len(text) > bound:
        flat = " ".join(text[:bound].split())
        if len(flat) > limit:
            return flat[:limit] + "..."
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def _call_summaries(msg: dict) -> list[str]:
    out = []
    for tc in msg.get("tool_calls") or ():
        if isinstance(tc, dict):
            fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
            name = tc.get("name") or fn.get("name") or "?"
            args = tc.get("arguments", fn.get("arguments"))
            out.append(f"{name}({_args_text(args)})")
    for b in _blocks(msg):
        if b.get("type") == "tool_use":
            out.append(f"{b.get('name') or '?'}({_args_text(b.get('input'))})")
    return out


def _args_text(args: Any) -> str:
    from opctx.dag.messages import as_text

    return as_text(args)


def _blocks(msg: dict) -> list[dict]:
    extra = msg.get("extra")
    found = extra.get("blocks") if isinstance(extra, dict) else None
    return [b for b in found if isinstance(b, dict)] if isinstance(found, list) else []


def _label(msg: dict) -> str:
    if is_summary_message(msg):
        return "summary"
    if is_tool_result(msg):
        failed = bool(msg.get("is_error")) or any(
            b.get("type") == "tool_result" and b.get("is_error") for b in _blocks(msg)
        )
        label = f"tool {msg.get('name') or ''}".strip()
        return f"{label} error" if failed else label
    return str(msg.get("role") or "?")


def _content_text(msg: dict) -> str:
    """Text of a message without its tool-call lines (those are listed separately)."""
    has_calls = bool(msg.get("tool_calls")) or any(
        b.get("type") == "tool_use" for b in _blocks(msg)
    )
    if not has_calls:
        return message_text(msg)
    content = msg.get("content")
    parts = [content] if isinstance(content, str) and content else []
    for b in _blocks(msg):
        if b.get("type") == "text" and b.get("text") and b.get("text") != content:
            parts.append(str(b["text"]))
    return "\n".join(parts)


def structural_line(msg: dict, head_chars: int = 60) -> str:
    """One line per message: ``[role] first N characters`` (§4.5), tool calls included."""
    text = _one_line(_content_text(msg), head_chars)
    calls = _call_summaries(msg)
    parts = [f"[{_label(msg)}]"]
    if text:
        parts.append(text)
    for c in calls:
        parts.append("-> " + _one_line(c, head_chars))
    if len(parts) == 1:
        parts.append("(empty)")
    return " ".join(parts)


def structural_summary(
    messages: Sequence[dict],
    previous_summary: str | None = None,
    *,
    head_chars: int = 60,
    error: str | None = None,
    max_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> str:
    """The deterministic summary: previous summary on top, then the folded messages.

    ``max_tokens`` bounds it (the engine passes ``summary_output_tokens``, the budget an
    LLM summary gets). Without a bound, chained structural summaries grow with every
    compaction (each one restates the previous) until a compaction no longer shrinks the
    input and auto-compaction stops. Over the bound, the previous summary is clipped to a
    third of it (its start and end stay), and the *oldest* folded messages are collapsed
    into one line that counts them by role and names the first and last id: nothing is
    dropped silently, and the originals stay in the store under those ids.
    """
    count = count_tokens or _default_text_tokens
    header = f"Structural summary of {len(messages)} folded message(s)"
    if error:
        header += f" (LLM summary unavailable: {_one_line(error, 200)})"
    header += ":"
    listing = [
        "[summary] (previous summary, kept above)"
        if previous_summary and is_summary_message(msg)
        else structural_line(msg, head_chars)
        for msg in messages
    ]
    previous = previous_summary.strip() if previous_summary else ""

    def assemble(prev: str, collapsed: str | None, lines: Sequence[str]) -> str:
        out = ["Earlier summary:", prev, ""] if prev else []
        out.append(header)
        if collapsed:
            out.append(collapsed)
        out.extend(lines)
        return "\n".join(out)

    text = assemble(previous, None, listing)
    if max_tokens is None or count(text) <= max_tokens:
        return text

    if previous:
        prev_budget = max_tokens // 3
        if count(previous) > prev_budget:
            # characters per token of this text, so CJK and ASCII clip alike
            ratio = max(1.0, len(previous) / max(1, count(previous)))
            previous = _clip(previous, int(prev_budget * ratio))
    room = max_tokens - count(assemble(previous, "[... 0000 earlier ...]", [])) - 40
    kept: list[str] = []
    used = 0
    for line in reversed(listing):
        cost = count(line) + 1
        if used + cost > room:
            break
        kept.append(line)
        used += cost
    kept.reverse()
    omitted = messages[: len(messages) - len(kept)]
    if not omitted:
        return assemble(previous, None, kept)
    roles: dict[str, int] = {}
    for msg in omitted:
        label = _label(msg).split(" ")[0]
        roles[label] = roles.get(label, 0) + 1
    by_role = ", ".join(f"{n} {role}" for role, n in roles.items())
    first, last = omitted[0].get("id"), omitted[-1].get("id")
    span = f" (ids {first} .. {last})" if first and last else ""
    collapsed = (
        f"[{len(omitted)} earlier folded message(s) not listed to stay within "
        f"{max_tokens} tokens: {by_role}{span}; the originals are kept in the store]"
    )
    return assemble(previous, collapsed, kept)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters omitted ...]\n{text[-tail:]}"


def _default_text_tokens(text: str) -> int:
    from .tokens import estimate_text_tokens

    return estimate_text_tokens(text)
