"""Anthropic Messages requests: a session's history as ``{"system", "messages"}``.

``to_provider_messages`` builds the OpenAI chat shape; this module builds the shape of
Anthropic's Messages API from the same assembly (``provider_messages``: display-only
lines left out, every tool result right after its call, unanswered calls and orphan
results turned into text), so both shapes follow the same pairing rules:

* ``system`` is apart: the caller's system prompt, then the system messages the
  history starts with, joined by blank lines. A system message later in the history
  (an opctx compaction summary, a client's reminder) becomes user text where it is,
  as Claude Code sends its summaries.
* ``messages`` alternate ``user`` / ``assistant``. Consecutive messages of one role are
  merged into one turn, as the API itself would merge them ("consecutive user or
  assistant turns in your request will be combined into a single turn", Messages API
  reference). An assistant turn holds its thinking blocks, its text and one
  ``tool_use`` block per call (``input`` an object); the user turn after it starts with
  one ``tool_result`` block per result (``is_error`` on failures), in call order,
  before any text. A request that would start with an assistant turn gets a short user
  turn first (:data:`OPENING_USER_TEXT`), since the API expects the user to speak first.

Thinking blocks
===============
Importers keep the thinking blocks of a recorded reply in ``thinking`` (Claude Code:
``metadata.thinking``, signatures kept). A ``thinking`` block is sent with its
``signature`` and a ``redacted_thinking`` block with its ``data``, exactly as stored
(``provider_messages.thinking_blocks``; a block without them cannot be sent back).
What the API requires, and what the model keeps (Anthropic's documentation: "Building
with extended thinking", section "Preserving thinking blocks",
https://platform.claude.com/docs/en/build-with-claude/extended-thinking, and "Context
windows", section "The context window with extended thinking and tool use",
https://platform.claude.com/docs/en/build-with-claude/context-windows):

* in a tool loop that is still running (the request ends with tool results), the
  thinking blocks of the loop's assistant turn must be sent back, complete and
  unmodified, or the request is rejected; a tool loop is one assistant turn;
* thinking blocks of earlier turns may be left out. Whether the model keeps them
  depends on the model class: Claude Opus 4.5 and later Opus models and Claude Sonnet
  4.6 and later Sonnet models keep every earlier thinking block in their context;
  Claude Opus 4.1 and earlier, Sonnet 4.5 and earlier, every Haiku through Haiku 4.5
  and Claude 3.7 Sonnet keep only the last assistant turn's thinking: the API strips
  the rest ("context_window = (input_tokens - previous_thinking_tokens) +
  current_turn_tokens").

:func:`thinking_retention` is that table, the one place it lives. By default
(``thinking=None``) the builder sends exactly the blocks the model keeps, so the request
as built is the request as counted: ``fit_request`` and :func:`anthropic_request_tokens`
measure what the model will hold. ``thinking="all"`` sends every block (the API then
strips what the model does not keep; :func:`anthropic_request_tokens` still counts only
what it keeps), ``"last_turn"`` only the running turn's, ``"none"`` none (for a request
with thinking disabled).

Not handled: newer models check that nothing before a thinking block changed since it
was produced ("Preserved thinking", from Claude Fable 5.1 on; enforced by default on
accounts created from 31 August 2026). Aging and compaction change that prefix, so on
those models such a request fails unless it asks the API to drop the blocks that no
longer match (``thinking.block_binding.prefix_mismatch_behavior``).

The unit
========
An assistant turn that starts with thinking, its tool calls and their results is one
unit: Anthropic rejects a running tool loop whose first assistant message lost its
thinking block. OpenHands' agent SDK enforces the same thing in its condensers
(``ToolLoopAtomicityProperty`` in ``openhands/sdk/context/view/properties/
tool_loop_atomicity.py`` of OpenHands/software-agent-sdk: a loop is a batch with
thinking plus the action and observation batches that follow until the first other
event; no condensation may cut inside one). In opctx the assistant message carries its
thinking, its calls and (through pairing) its results, so the unit holds here by
construction: the pairing repair only ever removes an unanswered ``tool_use`` block or
moves a result, never a thinking block, and merging keeps block order. The cut
(``find_cut_index``) never starts the kept tail inside a unit (``FactsTable``) except
inside one larger than its ceiling, whose first tool group (the thinking block with
its results) it then keeps, pinned after the summary or in the protected head; aging
only replaces result contents.

>>> history = [
...     {"role": "system", "content": "You are terse."},
...     {"role": "user", "content": "list the files"},
...     {"role": "assistant", "content": "", "thinking": [
...         {"type": "thinking", "thinking": "use ls", "signature": "sig1"}],
...      "tool_calls": [{"id": "c1", "name": "ls", "arguments": {"path": "."}}]},
...     {"role": "system", "content": "PostToolUse hook ran", "display_only": True},
...     {"role": "tool", "tool_call_id": "c1", "name": "ls", "content": "a.py"},
... ]
>>> request = to_anthropic_request(history, "Be careful.", model="claude-sonnet-4-5")
>>> request["system"]
'Be careful.\\n\\nYou are terse.'
>>> for m in request["messages"]:
...     print(m["role"], [b["type"] for b in m["content"]])
user ['text']
assistant ['thinking', 'tool_use']
user ['tool_result']
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .provider_messages import _ProviderCache

__all__ = [
    "OPENING_USER_TEXT",
    "anthropic_request_tokens",
    "thinking_retention",
    "to_anthropic_request",
]

#: The user turn put in front of a request whose first message would be the assistant's.
OPENING_USER_TEXT = "(conversation continues)"

_THINKING_MODES = ("all", "last_turn", "none")
_THINKING_TYPES = ("thinking", "redacted_thinking")

# claude-opus-4-5-20251101, claude-sonnet-4-6, anthropic/claude-opus-4.1,
# us.anthropic.claude-sonnet-4-5-20250929-v1:0, claude-3-7-sonnet-20250219, claude-haiku-4-5
_NEW_NAME = re.compile(r"claude[-_.](opus|sonnet|haiku|mythos|fable)(?:[-_.](\d+)(?:[-_.](\d)(?!\d))?)?")
_OLD_NAME = re.compile(r"claude[-_.](\d+)(?:[-_.](\d)(?!\d))?[-_.](opus|sonnet|haiku)")

# (family, the first version that keeps every earlier thinking block); source: the
# module docstring (Anthropic, "Building with extended thinking", "Preserving thinking
# blocks"). Haiku: "all Haiku models through Claude Haiku 4.5 keep only the last turn";
# later Haiku models (5.x) bind thinking to the conversation like the other 5.x models
# and keep it ("Preserved thinking": usable blocks stay in context and are billed as
# input), so 5.0 is taken as the first.
_KEEPS_ALL_FROM = {"opus": (4, 5), "sonnet": (4, 6), "haiku": (5, 0)}


def thinking_retention(model: str | None) -> str:
    """Which earlier thinking blocks ``model`` keeps in its context: ``"all"`` or ``"last_turn"``.

    ``"last_turn"``: only the thinking of the last assistant turn (a running tool loop
    is one turn) counts; the API strips the rest. The table and its source are in the
    module docstring. A Claude name this cannot read, and any other model, is taken to
    keep everything it is sent (the estimate errs on the large side).

    >>> [thinking_retention(m) for m in ("claude-opus-4-5-20251101", "claude-opus-4-1-20250805",
    ...     "claude-sonnet-4-5-20250929", "claude-sonnet-4-6", "claude-haiku-4-5", "claude-3-7-sonnet-20250219")]
    ['all', 'last_turn', 'last_turn', 'all', 'last_turn', 'last_turn']
    """
    name = (model or "").lower()
    found = _NEW_NAME.search(name)
    if found:
        family, major, minor = found.group(1), found.group(2), found.group(3)
    else:
        old = _OLD_NAME.search(name)
        if not old:
            return "all"
        major, minor, family = old.group(1), old.group(2), old.group(3)
    if family in ("mythos", "fable") or major is None:
        return "all"
    first = _KEEPS_ALL_FROM[family]
    return "all" if (int(major), int(minor or 0)) >= first else "last_turn"


def to_anthropic_request(
    history: Sequence[dict],
    system: str = "",
    *,
    model: str | None = None,
    thinking: str | None = None,
    cache: _ProviderCache | None = None,
) -> dict[str, Any]:
    """``{"system": str, "messages": [...]}`` for Anthropic's Messages API (module docstring).

    ``thinking``: which thinking blocks to send: ``None`` (default) the ones ``model``
    keeps (:func:`thinking_retention`), or ``"all"``, ``"last_turn"``, ``"none"``.
    ``cache``: a ``_ProviderCache(api="anthropic")`` kept per session makes the assembly
    cost what changed since the last call, as for ``to_provider_messages``.
    """
    mode = thinking_retention(model) if thinking is None else thinking
    if mode not in _THINKING_MODES:
        raise ValueError(f"thinking must be one of {', '.join(_THINKING_MODES)} or None, got {thinking!r}")
    if cache is None:
        cache = _ProviderCache(api="anthropic")
    elif cache.api != "anthropic":
        raise ValueError("to_anthropic_request needs a _ProviderCache(api='anthropic')")
    flat = cache.provider_messages(history)
    system_parts = [system] if system else []
    start = 0
    while start < len(flat) and flat[start]["role"] == "system":
        system_parts.append(flat[start]["content"])
        start += 1
    turns: list[dict] = []
    for m in flat[start:]:
        role, content = _turn_part(m)
        if content:
            _add(turns, role, content)
    for turn in turns:
        if turn["role"] == "user":
            # the results answer the assistant turn before: they come first
            turn["content"].sort(key=lambda b: b.get("type") != "tool_result")
        else:
            # a reply stored as several messages (text, then a thinking tool call) merges into
            # one turn; the API wants that turn to open with its thinking (stable otherwise)
            turn["content"].sort(key=lambda b: b.get("type") not in _THINKING_TYPES)
    turns = _keep_thinking(turns, mode)
    if turns and turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": OPENING_USER_TEXT}]})
    return {"system": "\n\n".join(p for p in system_parts if p), "messages": turns}


def anthropic_request_tokens(
    request: dict[str, Any],
    model: str | None = None,
    *,
    tools: Sequence[dict] | None = None,
    estimator: Any = None,
) -> int:
    """Estimated input tokens of an Anthropic ``request`` for ``model``: its system
    prompt, ``tools`` and messages, with the thinking blocks counted as the model keeps
    them (:func:`thinking_retention`: blocks the API strips are not counted)."""
    from .tokens import default_estimator

    est = estimator or default_estimator()
    messages = list(request.get("messages") or [])
    # thinking before the last turn is stripped by the API for a model that keeps only that turn's
    keep_from = _running_turn_start(messages) if thinking_retention(model) == "last_turn" else 0
    system = request.get("system") or ""
    total = est.message_tokens({"role": "system", "content": system}, model) if system else 0
    total += est.tools_tokens(list(tools), model) if tools else 0
    for i, m in enumerate(messages):
        if i < keep_from and m.get("role") == "assistant":
            bare = [b for b in m.get("content") or () if b.get("type") not in _THINKING_TYPES]
            m = dict(m, content=bare) if bare else None
        total += est.message_tokens(m, model) if m else 0
    return total


def _turn_part(m: dict) -> tuple[str, list[dict]]:
    """One assembled provider message as ``(role, content blocks)`` of an Anthropic turn."""
    role = m["role"]
    if role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m["tool_call_id"]}
        if m.get("content"):
            block["content"] = m["content"]
        if m.get("is_error"):
            block["is_error"] = True
        return "user", [block]
    text = m.get("content")
    blocks = [{"type": "text", "text": text}] if isinstance(text, str) and text.strip() else []
    if role != "assistant":  # user, and system messages after the first turn
        return "user", blocks
    thinking = list(m.get("thinking") or ())
    calls = [
        {"type": "tool_use", "id": tc["id"], "name": tc["function"]["name"], "input": tc.get("input", {})}
        for tc in m.get("tool_calls") or ()
    ]
    return "assistant", thinking + blocks + calls


def _add(turns: list[dict], role: str, content: list[dict]) -> None:
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(content)
    else:
        turns.append({"role": role, "content": list(content)})


def _running_turn_start(turns: list[dict]) -> int:
    """Where the last assistant turn starts: after the last user turn that is not only
    answering tools (a tool loop is one turn)."""
    for i in range(len(turns) - 1, -1, -1):
        turn = turns[i]
        if turn["role"] == "user" and not any(b.get("type") == "tool_result" for b in turn["content"]):
            return i + 1
    return 0


def _keep_thinking(turns: list[dict], mode: str) -> list[dict]:
    """``turns`` with the thinking blocks ``mode`` does not send removed.

    With ``"last_turn"`` an earlier assistant turn that holds nothing but thinking keeps
    it (the API strips it; :func:`anthropic_request_tokens` does not count it): dropping
    the turn would merge the user turns around it and could move where the last turn
    starts. With ``"none"`` such a turn is dropped and its neighbours merged.
    """
    if mode == "all":
        return turns
    keep_from = _running_turn_start(turns) if mode == "last_turn" else len(turns)
    out: list[dict] = []
    for i, turn in enumerate(turns):
        content = turn["content"]
        if i < keep_from and turn["role"] == "assistant":
            bare = [b for b in content if b.get("type") not in _THINKING_TYPES]
            if bare:
                content = bare
            elif mode == "none":
                continue
        _add(out, turn["role"], content)
    return out
