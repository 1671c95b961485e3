"""A message split into content kinds and structure, the input of every estimate.

Private to ``opctx.context.tokens``, which re-exports every public name.

``message_parts`` splits a message into content kinds (``CONTENT_KINDS``: text, tool
inputs, tool results, thinking, ``<system-reminder>`` spans, other) plus structure: tool
calls, tool results, images (with their pixel size when the base64 header tells it) and
reasoning carried only as an opaque payload (a thinking block's signature when its text
is empty, ``redacted_thinking``, encrypted reasoning). Image payloads (base64) are never
tokenised as text. Both shapes are read: opctx message dicts
(``opctx.dag.messages``: ``extra.blocks``, ``tool_calls`` with dict arguments, and the
keys importers keep: ``thinking``, ``content_blocks``, ``reasoning``) and OpenAI provider
messages (``content`` str or list of parts, ``tool_calls[].function.arguments`` as a
JSON string). ``Call`` nodes are converted with ``call_to_message``. A text block equal
to (or contained in) the string ``content`` is not counted twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..dag.messages import as_text, call_to_message
from ._image_sizes import _image_size

#: The content kinds ``message_parts`` tells apart: what a user or assistant wrote or said,
#: tool call names + arguments, tool results, reasoning, ``<system-reminder>`` spans a
#: client injects into any text, and anything else (unknown block types, as JSON).
CONTENT_KINDS = ("text", "tool_input", "tool_result", "thinking", "reminder", "other")

_IMAGE_TYPES = {"image", "image_url", "input_image", "output_image"}
# payloads sent as data (base64 files and audio): counted like an image, never tokenised
_OPAQUE_TYPES = {"file", "input_file", "input_audio", "audio", "document"}
_TEXT_TYPES = {"text", "input_text", "output_text", "refusal", "summary_text"}
_THINKING_TYPES = {"thinking", "redacted_thinking", "reasoning"}
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


@dataclass
class MessageParts:
    """What one message sends, by kind (see ``message_parts``).

    ``segments``: (kind, text) in order; ``images``: the pixel size of each image or
    document (None when unknown); ``tool_calls`` / ``tool_results``: structure items;
    ``hidden_thinking_bytes``: reasoning present only as an opaque payload (a signature of
    a thinking block with empty text, ``redacted_thinking`` data, encrypted reasoning).
    """

    segments: list[tuple[str, str]] = field(default_factory=list)
    images: list[tuple[int, int] | None] = field(default_factory=list)
    tool_calls: int = 0
    tool_results: int = 0
    hidden_thinking_bytes: int = 0
    thinking_blocks: int = 0

    def add(self, kind: str, text: str) -> None:
        if not text:
            return
        if "<system-reminder>" not in text:
            self.segments.append((kind, text))
            return
        pos = 0
        for found in _REMINDER.finditer(text):
            if found.start() > pos:
                self.segments.append((kind, text[pos : found.start()]))
            self.segments.append(("reminder", found.group()))
            pos = found.end()
        if pos < len(text):
            self.segments.append((kind, text[pos:]))

    def add_hidden(self, payload: Any) -> None:
        if isinstance(payload, str) and payload:
            # base64 (signatures, redacted data, Fernet tokens): 3 bytes per 4 characters
            self.hidden_thinking_bytes += len(payload) * 3 // 4


def _thinking_part(part: dict, parts: MessageParts) -> None:
    parts.thinking_blocks += 1
    if part.get("type") == "redacted_thinking":
        parts.add_hidden(part.get("data"))
        return
    visible = part.get("thinking")
    if visible is None:
        visible = part.get("text")
    if visible is None and isinstance(part.get("summary"), list):
        visible = "\n".join(as_text(s.get("text") if isinstance(s, dict) else s) for s in part["summary"])
    visible = as_text(visible)
    if visible:
        parts.add("thinking", visible)
    else:
        parts.add_hidden(part.get("signature") or part.get("encrypted_content"))


def _add_part(part: Any, parts: MessageParts, kind: str) -> None:
    """One content part/block of a message whose plain text is of ``kind``."""
    if isinstance(part, str):
        parts.add(kind, part)
        return
    if not isinstance(part, dict):
        parts.add("other", as_text(part))
        return
    block = part.get("type")
    if block in _TEXT_TYPES:
        parts.add(kind, as_text(part.get("text")))
    elif block in _IMAGE_TYPES:
        parts.images.append(_image_size(part))
    elif block in ("tool_use", "server_tool_use"):
        parts.tool_calls += 1
        parts.add("tool_input", as_text(part.get("name")))
        parts.add("tool_input", as_text(part.get("input")))
    elif block == "tool_result":
        parts.tool_results += 1
        content = part.get("content")
        if isinstance(content, list):
            for sub in content:
                _add_part(sub, parts, "tool_result")
        else:
            parts.add("tool_result", as_text(content))
    elif block in _THINKING_TYPES:
        _thinking_part(part, parts)
    elif block in _OPAQUE_TYPES or "source" in part:
        # opaque payloads: documents are counted like an image page, data is never tokenised
        parts.images.append(None)
    else:
        parts.add("other", as_text(part))


def _as_message(msg: Any) -> dict:
    if isinstance(msg, dict):
        return msg
    if isinstance(msg, str):
        return {"role": "user", "content": msg}
    if hasattr(msg, "role") and hasattr(msg, "metadata"):
        return call_to_message(msg)
    raise TypeError(f"cannot estimate tokens of a {type(msg).__name__}: expected a message dict")


def message_parts(msg: Any) -> MessageParts:
    """What a message sends, by content kind, in either message shape.

    Read: ``content`` (a string, or a list of text / image / ``tool_use`` /
    ``tool_result`` / thinking parts), ``extra.blocks`` (counted once when equal to the
    content), ``tool_calls`` (opctx dict arguments or OpenAI JSON strings), and the keys
    the importers keep per node: ``content_blocks`` (non-text blocks such as images),
    ``thinking`` (thinking blocks of a recorded reply), ``reasoning`` /
    ``reasoning_encrypted`` (Codex reasoning summaries and payloads). A ``role="tool"``
    message is a tool result. Text inside ``<system-reminder>`` tags is kind
    ``reminder`` wherever it appears.

    >>> p = message_parts({"role": "assistant", "content": "ok",
    ...                    "tool_calls": [{"id": "1", "name": "ls", "arguments": {"path": "."}}]})
    >>> [kind for kind, _ in p.segments], p.tool_calls
    (['text', 'tool_input', 'tool_input'], 1)
    """
    msg = _as_message(msg)
    parts = MessageParts()
    kind = "tool_result" if msg.get("role") == "tool" else "text"
    content = msg.get("content")
    content_str = content if isinstance(content, str) else ""
    seen_blocks: list[Any] = []
    if content_str:
        parts.add(kind, content_str)
    elif isinstance(content, list):
        seen_blocks = content
        for part in content:
            _add_part(part, parts, kind)
    elif content is not None and not isinstance(content, str):
        parts.add("other", as_text(content))
    extra = msg.get("extra")
    extra_blocks = extra.get("blocks") if isinstance(extra, dict) else None
    # the blocks may be the content list itself, or an equal copy of it once the message
    # went through the store: counted once either way, as the provider is sent them once
    if isinstance(extra_blocks, list) and extra_blocks is not content and extra_blocks != content:
        seen_blocks = [*seen_blocks, *extra_blocks]
        for block in extra_blocks:
            if (
                content_str
                and isinstance(block, dict)
                and block.get("type") == "text"
                and isinstance(block.get("text"), str)
                and block["text"] in content_str
            ):
                continue  # the same text already counted from content
            _add_part(block, parts, kind)
    for block in msg.get("content_blocks") or ():
        if block not in seen_blocks:
            _add_part(block, parts, kind)
    if not parts.thinking_blocks:
        _recorded_reasoning(msg, parts)
    for call in msg.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        parts.tool_calls += 1
        fn = call.get("function") if isinstance(call.get("function"), dict) else None
        name = call.get("name") if call.get("name") is not None else (fn or {}).get("name")
        args = call.get("arguments") if "arguments" in call else (fn or {}).get("arguments")
        parts.add("tool_input", as_text(name))
        parts.add("tool_input", as_text(args))
    if msg.get("role") == "tool":
        parts.tool_results += 1
    return parts


def _recorded_reasoning(msg: dict, parts: MessageParts) -> None:
    """Reasoning an importer kept beside the reply (``thinking``, ``reasoning``)."""
    thinking = msg.get("thinking")
    if isinstance(thinking, str):
        parts.thinking_blocks += 1
        parts.add("thinking", thinking)
    elif isinstance(thinking, list):
        for block in thinking:
            if isinstance(block, dict):
                _thinking_part(block, parts)
            elif isinstance(block, str):
                parts.thinking_blocks += 1
                parts.add("thinking", block)
    reasoning = msg.get("reasoning")
    for summary in [reasoning] if isinstance(reasoning, str) else reasoning if isinstance(reasoning, list) else ():
        parts.add("thinking", as_text(summary))
    encrypted = msg.get("reasoning_encrypted")
    for payload in [encrypted] if isinstance(encrypted, str) else encrypted if isinstance(encrypted, list) else ():
        parts.add_hidden(payload)


def message_segments(msg: Any) -> tuple[list[str], int, int]:
    """(text segments, image count, tool item count) of a message in either shape."""
    parts = message_parts(msg)
    return [s for _, s in parts.segments], len(parts.images), parts.tool_calls + parts.tool_results
