"""Message dicts: the message-tree shape that chat front ends and the context layer use.

The context orchestration (tokens, aging, references, summarise, persist) works on
plain ``dict`` messages, the shape of the legacy message-tree API (spec §0.4).
This module is the one place that knows that shape, and the one place that maps
it to and from ``Call`` nodes. A message dict has:

==================  ==========================================================
``id``              str
``role``            ``"user"`` | ``"assistant"`` | ``"tool"`` | ``"system"``
``content``         str (the text; for a tool message, the result as text)
``timestamp``       float, seconds since the epoch
``parent_id``       str | None: the conversation predecessor
``model``           (assistant) model id
``name``            (tool) function name; (user) user name
``arguments``       (tool) the call's arguments
``tool_call_id``    (tool) the id of the tool call it answers
``is_error``        (tool) the call failed
``tool_calls``      (assistant) ``[{"id", "name", "arguments": dict}]``
``extra``           dict; ``extra["blocks"]`` holds Anthropic-style content
                    blocks: ``text``, ``tool_use {id, name, input}``,
                    ``tool_result {tool_use_id, content, is_error}``, ``image``
==================  ==========================================================

Two shapes of tool traffic are accepted everywhere: OpenAI-style (an assistant
``tool_calls`` list answered by ``role="tool"`` messages) and Anthropic-style
(``tool_use`` blocks answered by a message whose ``content`` is empty and whose
``extra.blocks`` hold ``tool_result`` blocks: a "tool-result wrapper").

Mapping to ``Call`` (§0.4): user -> ``role="user"``; assistant -> ``role="llm"``;
tool -> ``role="code"``; system -> ``role="llm"`` with ``metadata["role"] =
"system"``. ``parent_id`` is the ``predecessor`` edge. Every key that is not part
of the core mapping is kept in ``metadata`` and hoisted back on the way out, so
``call_to_message(message_to_call(m)) == m`` for any message that is JSON.
"""

from __future__ import annotations

import json
from typing import Any

from .nodes import Call

__all__ = [
    "MESSAGE_ROLES",
    "blocks",
    "tool_use_ids",
    "tool_result_ids",
    "is_tool_result",
    "has_text_block",
    "message_text",
    "as_text",
    "message_to_call",
    "call_to_message",
]

MESSAGE_ROLES = ("user", "assistant", "tool", "system")

# Keys with a home of their own on a Call, per role; everything else rides in metadata.
_CORE = ("id", "role", "content", "timestamp", "parent_id")
_CORE_OF = {
    "user": (*_CORE, "name"),
    "assistant": (*_CORE, "model"),
    "system": (*_CORE, "model"),
    "tool": (*_CORE, "name", "arguments"),
}


def as_text(value: Any) -> str:
    """Render any stored value as prompt text: str as is, None as "", else JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def blocks(msg: dict) -> list[dict]:
    """The message's content blocks (``extra.blocks``, or a list ``content``)."""
    extra = msg.get("extra")
    if isinstance(extra, dict) and isinstance(extra.get("blocks"), list):
        return extra["blocks"]
    content = msg.get("content")
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def tool_use_ids(msg: dict) -> list[str]:
    """Ids of the tool calls this (assistant) message makes, in order."""
    ids = [tc.get("id") for tc in msg.get("tool_calls") or () if isinstance(tc, dict)]
    ids += [b.get("id") for b in blocks(msg) if b.get("type") == "tool_use"]
    return [i for i in ids if i]


def tool_result_ids(msg: dict) -> list[str]:
    """Ids of the tool calls this message answers."""
    ids = []
    if msg.get("role") == "tool" and msg.get("tool_call_id"):
        ids.append(msg["tool_call_id"])
    ids += [b.get("tool_use_id") for b in blocks(msg) if b.get("type") == "tool_result"]
    return [i for i in ids if i]


def is_tool_result(msg: dict) -> bool:
    """A ``role="tool"`` message or a tool-result wrapper (empty content + result blocks)."""
    if msg.get("role") == "tool":
        return True
    content = msg.get("content")
    text = content if isinstance(content, str) else ""
    return not text.strip() and any(b.get("type") == "tool_result" for b in blocks(msg))


def has_text_block(msg: dict) -> bool:
    """§4.2: role user/assistant/system with non-empty text. Tool traffic does not count."""
    if msg.get("role") not in ("user", "assistant", "system"):
        return False
    content = msg.get("content")
    if isinstance(content, str):
        if content.strip():
            return True
    return any(b.get("type") == "text" and str(b.get("text", "")).strip() for b in blocks(msg))


def message_text(msg: dict) -> str:
    """All the text a message puts in front of a model, joined by newlines.

    Content, text blocks, tool calls (name + arguments), tool_use inputs and
    tool_result contents. Used for token estimates, references and search.
    """
    parts: list[str] = []
    content = msg.get("content")
    if isinstance(content, str):
        if content:
            parts.append(content)
    for tc in msg.get("tool_calls") or ():
        if isinstance(tc, dict):
            parts.append(as_text(tc.get("name")))
            parts.append(as_text(tc.get("arguments")))
    for b in blocks(msg):
        kind = b.get("type")
        if kind == "text":
            parts.append(as_text(b.get("text")))
        elif kind == "tool_use":
            parts.append(as_text(b.get("name")))
            parts.append(as_text(b.get("input")))
        elif kind == "tool_result":
            c = b.get("content")
            if isinstance(c, list):
                parts.extend(as_text(x.get("text")) for x in c if isinstance(x, dict))
            else:
                parts.append(as_text(c))
    return "\n".join(p for p in parts if p)


def message_to_call(msg: dict, default_time: float | None = None) -> Call:
    """A message dict as a ``Call`` (§0.4). Raises ``ValueError`` on an unknown role.

    ``default_time``: the ``created_at`` of a message without a timestamp (else now).
    """
    role = msg.get("role")
    if role not in MESSAGE_ROLES:
        raise ValueError(
            f"unknown message role {role!r}: expected one of {', '.join(MESSAGE_ROLES)}"
        )
    # a copy less the core keys, in the message's order: a recorded message has dozens of
    # keys, and copying them at C speed was cheaper than choosing them one by one
    metadata = dict(msg)
    for key in _CORE_OF[role]:
        metadata.pop(key, None)
    common: dict[str, Any] = {"predecessor": msg.get("parent_id")}
    if msg.get("id"):
        common["id"] = msg["id"]
    timestamp = msg.get("timestamp")
    if timestamp is not None:
        common["created_at"] = timestamp
    elif default_time is not None:
        common["created_at"] = default_time
    content = msg.get("content")
    if role == "user":
        call = Call(role="user", name=msg.get("name", ""), output=content, **common)
    elif role == "tool":
        call = Call(
            role="code", name=msg.get("name", ""), input=msg.get("arguments"), output=content, **common
        )
    else:
        if role == "system":
            metadata["role"] = "system"
        call = Call(role="llm", name=msg.get("model", ""), output=content, **common)
    call.metadata = metadata  # already the Call's own: Call() would copy it once more
    return call


def call_to_message(call: Call) -> dict:
    """A ``Call`` as a message dict (§0.4); metadata keys are hoisted to the top level."""
    meta = dict(call.metadata)
    if call.role == "user":
        msg: dict[str, Any] = {"id": call.id, "role": "user", "content": call.output}
        if call.name:
            msg["name"] = call.name
    elif call.role == "code":
        msg = {
            "id": call.id,
            "role": "tool",
            "content": call.output,
            "name": call.name,
            "arguments": call.input,
        }
    else:
        role = "system" if meta.pop("role", None) == "system" else "assistant"
        msg = {"id": call.id, "role": role, "content": call.output}
        if call.name:
            msg["model"] = call.name
    msg["timestamp"] = call.created_at
    msg["parent_id"] = call.predecessor
    # the metadata after the core keys, which it never overrides (the few core keys are
    # dropped from it, then the rest is added at C speed)
    for k in msg:
        meta.pop(k, None)
    msg.update(meta)
    return msg
