"""Message-list recordings: OpenAI chat completions, Anthropic Messages, Hermes session
exports, SWE-agent ``.traj``, mini-swe-agent trajectories, and opctx's own JSONL export.

One converter, ``convert_messages``, reads both shapes of tool traffic:

* OpenAI: an assistant ``tool_calls`` list (``{"id", "type": "function", "function":
  {"name", "arguments": "<json>"}}``, or opctx's own ``{"id", "name", "arguments": {}}``)
  answered by ``role="tool"`` messages with ``tool_call_id`` (SWE-agent writes
  ``tool_call_ids``, a list); the legacy ``function_call`` / ``role="function"`` pair.
* Anthropic: ``tool_use`` blocks in the assistant content answered by ``tool_result``
  blocks in the next user message (a message may carry both results and new text: the
  results become code nodes first, the text a user node after them).

Mapping: ``system``/``developer`` -> llm node with ``metadata.role = "system"`` (and
``original_role``); ``user`` -> user node; ``assistant`` -> llm node (text, and
``metadata.tool_calls`` with arguments parsed from their JSON text; text that is not JSON
is kept as ``{"_raw": text}``); ``tool``/``function`` and ``tool_result`` blocks -> code
node whose ``caller`` is the llm node that made the call and whose ``name``/``input`` come
from that call. The chain is the list order. Reasoning fields (``reasoning``,
``reasoning_content``, Anthropic ``thinking`` blocks) -> ``metadata.reasoning`` /
``metadata.thinking``; ``usage`` (OpenAI or Anthropic names) -> ``metadata.usage``; a
per-message ``token_count`` (Hermes) -> ``metadata.token_count``. Every other key of a
message is kept in ``metadata.source_fields``; non-text content parts (images) in
``metadata.content_blocks``.

Formats on top of it:

``openai`` / ``anthropic``
    A JSON array of messages, ``{"messages": [...]}`` (with an optional top-level
    ``system`` string, Anthropic style, which becomes the first system node, flagged
    ``metadata.from_field = "system"``), or JSONL: one message per line, or one
    ``{"messages": [...]}`` conversation per line (each line a session).
``hermes``
    ``sessions export`` JSONL, one session per line: session fields -> meta, the
    ``system_prompt`` -> a first system node flagged ``from_field = "system_prompt"``
    (it was in every prompt; it is not one of the exported messages).
``swe_agent``
    ``.traj``: ``history`` -> messages (``thought``, ``action``, ``agent``,
    ``message_type`` kept per node; observations sent as user messages and
    demonstrations marked ``is_observation`` / ``is_demo``, see ``observations``); ``info`` (``model_stats``, ``exit_status``,
    ``submission``) and ``environment`` -> meta; the ``trajectory`` steps -> meta
    without the fields that repeat the history (``response``, ``thought``, ``action``,
    ``observation``).
``mini_swe_agent``
    a message list or ``{"messages", "info", "trajectory_format"}``; the bash command of
    an assistant reply (its fenced block) is kept in ``metadata.command``; every user
    message after the task is marked ``is_observation``.
``opctx_jsonl``
    ``opctx export --format jsonl``: one ``Call.to_dict()`` per line; nodes come back
    with fresh ids (edges, ``copied_from`` and compaction id lists remapped), so the
    same export can be imported twice into one database.

Sessions of formats without ids of their own get ``<format>-<sha1 of the file>``
(``-<n>`` for the n-th session of a multi-session file), so a re-import is recognised.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

from opctx.dag.nodes import Call, new_id

from .base import (
    ImportedSession,
    Issue,
    SessionBuilder,
    TranscriptError,
    content_text,
    iter_jsonl,
    load_json,
    parse_arguments,
    parse_timestamp,
    short_title,
)
from .claude_code import _count
from .fields import Field, FieldTable
from .observations import observation_marks_mini_swe_agent, observation_marks_swe_agent

log = logging.getLogger(__name__)

__all__ = [
    "convert_messages",
    "parse_openai",
    "parse_anthropic",
    "parse_hermes",
    "parse_swe_agent",
    "parse_mini_swe_agent",
    "parse_opctx_jsonl",
    "is_message",
    "uses_anthropic_blocks",
    "looks_mini_swe_agent",
    "file_digest",
    "with_file_issues",
    "MESSAGE_FIELDS",
    "CONTAINER_FIELDS",
    "SWE_AGENT_FIELDS",
    "HERMES_FIELDS",
    "OPCTX_NODE_FIELDS",
    "OPCTX_HEADER_FIELDS",
]

_MSG_CONSUMED = {"role", "content", "tool_calls", "tool_call_id", "tool_call_ids", "name",
                 "function_call", "timestamp", "created_at", "usage", "reasoning",
                 "reasoning_content", "model", "token_count"}
_FENCE = re.compile(r"```(?:mswea_bash_command|bash|sh)?\s*\n(.*?)```", re.S)


_LIST_FORMATS = ("openai", "anthropic", "hermes", "swe_agent", "mini_swe_agent")
_BLOCK = "content[type=text|input_text|output_text]"
_TOOL_USE = "content[type=tool_use]"
_RESULT = "content[type=tool_result]"
_CALL = "tool_calls[]"


def _message_record(value: Any, top: bool) -> bool:
    return is_message(value)


# The fields a chat message is read with (opctx.importers.fields), in every format built
# on convert_messages: the role and the shape of content and tool_calls place the
# message ("skip"); names, models, ids and text blocks are kept as their JSON text.
MESSAGE_FIELDS = FieldTable(_LIST_FORMATS, "message", [
    Field("role", ("string",)),
    Field("content", ("string", "list", "object")),
    Field("tool_calls", ("list",)),
    Field("name", ("string",), "text"),
    Field("tool_name", ("string",), "text"),
    Field("model", ("string",), "text"),
    Field("tool_call_id", ("string",), "text"),
    Field("tool_call_ids", ("list",), "read"),
    Field("timestamp", ("string", "number"), "read"),
    Field("created_at", ("string", "number"), "read"),
    Field("usage", ("object",), "read"),
    Field("usage.prompt_tokens", ("integer",), "read"),
    Field("usage.completion_tokens", ("integer",), "read"),
    Field("usage.input_tokens", ("integer",), "read"),
    Field("usage.output_tokens", ("integer",), "read"),
    Field("reasoning", ("string",), "read"),
    Field("reasoning_content", ("string",), "read"),
    Field("token_count", ("integer",), "read"),
    Field(f"{_CALL}.id", ("string",), "text"),
    Field(f"{_CALL}.name", ("string",), "text"),
    Field(f"{_CALL}.function", ("object",), "read"),
    Field(f"{_CALL}.function.name", ("string",), "text"),
    Field(f"{_CALL}.function.arguments", ("string", "object"), "read"),
    Field(f"{_CALL}.arguments", ("string", "object"), "read"),
    Field("function_call", ("object",), "read"),
    Field("function_call.name", ("string",), "text"),
    Field(f"{_BLOCK}.text", ("string",), "text"),
    Field(f"{_TOOL_USE}.id", ("string",), "text"),
    Field(f"{_TOOL_USE}.name", ("string",), "text"),
    Field(f"{_TOOL_USE}.input", ("object",), "read"),
    Field(f"{_RESULT}.tool_use_id", ("string",), "text"),
    Field(f"{_RESULT}.content", ("string", "list"), "read"),
    Field(f"{_RESULT}.is_error", ("boolean",), "read"),
], is_record=_message_record)

# The containers around the messages: read where they are of the right type, kept in the
# session's meta as they are otherwise (nothing here can refuse a file).
CONTAINER_FIELDS = FieldTable(("openai", "anthropic", "mini_swe_agent"), "document", [
    Field("messages", ("list",), "read"),
    Field("system", ("string", "list"), "read"),
    Field("model", ("string",), "read"),
], is_record=lambda value, top: top and isinstance(value, dict) and "messages" in value)
SWE_AGENT_FIELDS = FieldTable("swe_agent", "document", [
    Field("trajectory", ("list",), "read"),
    Field("info", ("object",), "read"),
    Field("info.model_name", ("string",), "read"),
    Field("info.model", ("string",), "read"),
], is_record=lambda value, top: top and isinstance(value, dict) and "history" in value)

# A Hermes ``sessions export`` line: one whole session, so its own fields are kept as
# text rather than lose the session; only a messages list that is no list leaves it out.
HERMES_FIELDS = FieldTable("hermes", "line", [
    Field("messages", ("list",)),
    Field("id", ("string",), "text"),
    Field("model", ("string",), "text"),
    Field("title", ("string",), "text"),
    Field("system_prompt", ("string",), "text"),
    Field("parent_session_id", ("string",), "text"),
    Field("started_at", ("string", "number"), "read"),
])

# opctx's own export: a header line, then one Call.to_dict() per line.
OPCTX_HEADER_FIELDS = FieldTable("opctx_jsonl", "line", [
    Field("session_id", ("string",), "text"),
    Field("title", ("string",), "text"),
    Field("model", ("string",), "text"),
    Field("head", ("string",), "text"),
    Field("meta", ("object",)),
], is_record=lambda value, top: top and isinstance(value, dict) and bool(value.get("opctx_export")))
OPCTX_NODE_FIELDS = FieldTable("opctx_jsonl", "line", [
    Field("id", ("string",)),
    Field("role", ("string",)),
    Field("name", ("string",), "text"),
    Field("caller", ("string",), "text"),  # an id that names no node: cleared, kept in dangling_edges
    Field("predecessor", ("string",), "text"),
    Field("reads", ("list",)),
    Field("reads[]", ("string",), "text"),
    Field("metadata", ("object",)),
    Field("created_at", ("number", "string"), "read"),
], is_record=lambda value, top: top and isinstance(value, dict) and not value.get("opctx_export"))


def is_message(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("role"), str) and (
        "content" in value or "tool_calls" in value)


def uses_anthropic_blocks(messages: list) -> bool:
    for m in messages:
        if isinstance(m, dict) and isinstance(m.get("content"), list):
            for b in m["content"]:
                if isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result", "thinking"):
                    return True
    return False


def looks_mini_swe_agent(messages: list) -> bool:
    for m in messages[:6]:
        if isinstance(m, dict) and "mswea_bash_command" in str(m.get("content", ""))[:20000]:
            return True
        if isinstance(m, dict) and m.get("role") == "system" and \
                "exactly ONE bash code block" in str(m.get("content", "")):
            return True
    return False


def file_digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:16]


def _usage(u: Any) -> dict[str, int] | None:
    if not isinstance(u, dict):
        return None
    u = {k: _count(v) if k != "prompt_tokens_details" else v for k, v in u.items()}
    if "prompt_tokens" in u or "completion_tokens" in u:
        details = u.get("prompt_tokens_details") or {}
        cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
        return {"input_tokens": max(int(u.get("prompt_tokens") or 0) - cached, 0),
                "output_tokens": int(u.get("completion_tokens") or 0),
                "cache_read_tokens": cached, "cache_write_tokens": 0}
    if "input_tokens" in u or "output_tokens" in u:
        return {"input_tokens": int(u.get("input_tokens") or 0),
                "output_tokens": int(u.get("output_tokens") or 0),
                "cache_read_tokens": int(u.get("cache_read_input_tokens") or u.get("cache_read_tokens") or 0),
                "cache_write_tokens": int(u.get("cache_creation_input_tokens") or u.get("cache_write_tokens") or 0)}
    return None


def _call_key(value: Any) -> Any:
    """A tool-call id usable as a key: a list or object id (a damaged file) as its JSON text."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return value


def _tool_calls(msg: dict) -> list[dict]:
    out = []
    for tc in msg.get("tool_calls") or ():
        if not isinstance(tc, dict):
            continue
        fn = tc.get("function") if isinstance(tc.get("function"), dict) else None
        name = (fn or tc).get("name", "")
        args = parse_arguments((fn or tc).get("arguments"))
        entry = {"id": _call_key(tc.get("id")) or new_id("call"), "name": name, "arguments": args}
        extra = {k: v for k, v in tc.items() if k not in ("id", "type", "function", "name", "arguments")}
        if tc.get("type") not in (None, "function"):
            extra["type"] = tc["type"]
        if extra:
            entry["call_fields"] = extra
        out.append(entry)
    fc = msg.get("function_call")
    if isinstance(fc, dict):
        out.append({"id": new_id("call"), "name": fc.get("name", ""),
                    "arguments": parse_arguments(fc.get("arguments")), "legacy_function_call": True})
    return out


def convert_messages(messages: list, b: SessionBuilder, *, path: str, on_error: str,
                     issues: list[Issue], fmt_extra: Any = None,
                     lines: list[int] | None = None,
                     marks: dict[int, dict] | None = None) -> dict[str, Any]:
    """Append ``messages`` to ``b`` (see the module docstring). Returns a few facts.

    ``lines``: the file line of each message (JSON Lines), so that errors name it.
    ``marks``: metadata to add to the node of message ``i`` (``is_observation``,
    ``is_demo``: see ``observation_marks``).

    The steps, per message: check its shape (a bad one is an error naming its line, or an
    issue with ``on_error="skip"``); then hand it to the converter of its role.
    """
    conv = _MessageConverter(b, path=path, fmt_extra=fmt_extra)
    conv.marks = marks or {}
    for idx, msg in enumerate(messages):
        line = lines[idx] if lines is not None and idx < len(lines) else None
        if not isinstance(msg, dict) or msg.get("role") is None:
            _refuse(path, line, f"message {idx} is not a {{role, content}} object", on_error, issues,
                    "message skipped")
            continue
        if not MESSAGE_FIELDS.check_record(msg, path=path, line=line, on_error=on_error, issues=issues,
                                           label=f"message {idx}"):
            continue
        where = f"{path}:{line}" if line is not None else f"{path}, message {idx}"
        try:
            conv.add(idx, msg, where)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            # a shape no field of the table describes: still this message only
            log.debug("%s: %s", where, exc, exc_info=True)
            _refuse(path, line, f"message {idx}: a field has a type or shape this importer does not read",
                    on_error, issues, "message skipped")
    return conv.facts


def _refuse(path: str, line: int | None, reason: str, on_error: str, issues: list[Issue],
            action: str) -> None:
    """Raise ``TranscriptError`` (``on_error="stop"``) or record the issue and go on."""
    if on_error != "skip":
        raise TranscriptError(path, line, reason)
    issues.append(Issue(path, line, reason, action))


def _non_text_blocks(blocks: list, text_types: tuple[str, ...] = ("text",)) -> list:
    """The dict blocks of a content list that are not text (images, files): kept as they are."""
    return [x for x in blocks if isinstance(x, dict) and x.get("type") not in text_types]


def _result_text(inner: Any) -> str:
    """The text of a ``tool_result`` block's content (a string, blocks, or any JSON value)."""
    if isinstance(inner, list):
        return content_text(inner)
    if isinstance(inner, str):
        return inner
    return "" if inner is None else json.dumps(inner)


class _MessageConverter:
    """Turns checked chat messages into nodes of one ``SessionBuilder``, one role at a time.

    It remembers which llm node made each tool call (``owners``), so that a result, however
    it is spelt (a ``tool`` message, a ``tool_result`` block, a legacy ``function`` reply),
    becomes a code node whose ``caller`` is that llm node.
    """

    def __init__(self, b: SessionBuilder, *, path: str, fmt_extra: Any) -> None:
        self.b = b
        self.path = path
        self.fmt_extra = fmt_extra
        self.marks: dict[int, dict] = {}
        self.owners: dict[str, tuple[Call, dict]] = {}
        self.last_legacy: tuple[Call, dict] | None = None
        self.facts: dict[str, Any] = {"first_user": "", "models": {}}

    def add(self, idx: int, msg: dict, where: str | None = None) -> None:
        """Convert one well-formed message: the fields every role shares, then its role's own."""
        role = msg["role"]
        when = self.b.time(msg.get("timestamp", msg.get("created_at")), where)
        meta = self._common_meta(msg)
        meta.update(self.marks.get(idx, ()))
        if role in ("system", "developer"):
            self._system(msg, meta, when)
        elif role == "user":
            self._user(msg, meta, when)
        elif role == "assistant":
            self._assistant(msg, meta, when)
        elif role in ("tool", "function"):
            self._tool_message(msg, meta, when)
        else:
            self._unknown_role(idx, msg, meta, when)

    def _common_meta(self, msg: dict) -> dict[str, Any]:
        """``source_fields`` (every key without a home of its own) and ``token_count``."""
        meta: dict[str, Any] = {}
        fields = {k: v for k, v in msg.items() if k not in _MSG_CONSUMED}
        if fields:
            meta["source_fields"] = fields
        if msg.get("token_count") is not None:
            meta["token_count"] = msg["token_count"]
        return meta

    def _system(self, msg: dict, meta: dict, when: float) -> None:
        """``system``/``developer`` -> an llm node flagged ``metadata.role = "system"``."""
        meta.update({"role": "system"})
        if msg["role"] != "system":
            meta["original_role"] = msg["role"]
        self.b.add("llm", output=content_text(msg.get("content")), created_at=when, metadata=meta,
                   name=msg.get("model") or "")

    def _user(self, msg: dict, meta: dict, when: float) -> None:
        """Its ``tool_result`` blocks become code nodes first; its text (if any) a user node."""
        content = msg.get("content")
        blocks = content if isinstance(content, list) else []
        results = [x for x in blocks if isinstance(x, dict) and x.get("type") == "tool_result"]
        rest = [x for x in blocks if not (isinstance(x, dict) and x.get("type") == "tool_result")]
        for block in results:
            self._tool_result_block(block, when)
        if rest or not results:
            text = content if isinstance(content, str) else content_text(rest)
            nt = _non_text_blocks(rest, ("text", "input_text"))
            if nt:
                meta["content_blocks"] = nt
            self.b.add("user", name=msg.get("name") or "user", output=text, created_at=when,
                       metadata=meta)
            if not self.facts["first_user"] and text.strip():
                self.facts["first_user"] = text

    def _tool_result_block(self, block: dict, when: float) -> None:
        """An Anthropic ``tool_result`` block -> the code node answering its ``tool_use``."""
        tid = _call_key(block.get("tool_use_id"))
        rmeta: dict[str, Any] = {"tool_call_id": tid, "is_error": bool(block.get("is_error"))}
        inner = block.get("content")
        if isinstance(inner, list):
            nt = _non_text_blocks(inner)
            if nt:
                rmeta["content_blocks"] = nt
        self._add_result(self.owners.get(tid), _result_text(inner), rmeta, when, tid)

    def _assistant(self, msg: dict, meta: dict, when: float) -> None:
        """One llm node: text, tool calls (both shapes), reasoning, usage; registers its calls."""
        texts, calls, thinking, other = _assistant_parts(msg)
        meta["tool_calls"] = calls
        for key in ("reasoning", "reasoning_content"):
            if msg.get(key):
                meta["reasoning"] = msg[key]
        if thinking:
            meta["thinking"] = thinking
        if other:
            meta["content_blocks"] = other
        usage = _usage(msg.get("usage"))
        if usage:
            meta["usage"] = usage
            meta["usage_raw"] = msg["usage"]
        if self.fmt_extra == "mini_swe_agent":
            m = _FENCE.search("\n".join(texts))
            if m:
                meta["command"] = m.group(1).strip()
        model = msg.get("model") or ""
        if model:
            self.facts["models"][model] = self.facts["models"].get(model, 0) + 1
        llm = self.b.add("llm", name=model, output="\n\n".join(t for t in texts if t),
                         created_at=when, metadata=meta)
        for tc in calls:
            self.owners[tc["id"]] = (llm, tc)
            if tc.get("legacy_function_call"):
                self.last_legacy = (llm, tc)

    def _tool_message(self, msg: dict, meta: dict, when: float) -> None:
        """A ``tool`` (or legacy ``function``) message -> the code node answering its call."""
        content = msg.get("content")
        ids = msg.get("tool_call_ids") if isinstance(msg.get("tool_call_ids"), list) else None
        tid = _call_key(msg.get("tool_call_id") or (ids[0] if ids else None))
        owner = self.owners.get(tid) if tid else None
        if owner is None and msg["role"] == "function" and self.last_legacy is not None:
            owner, tid = self.last_legacy, self.last_legacy[1]["id"]
        meta["tool_call_id"] = tid
        if ids and len(ids) > 1:
            meta["tool_call_ids"] = ids
        if msg.get("name") or msg.get("tool_name"):
            meta["tool_name"] = msg.get("name") or msg.get("tool_name")
        if isinstance(content, list):
            nt = _non_text_blocks(content)
            if nt:
                meta["content_blocks"] = nt
        text = content if isinstance(content, str) else content_text(content)
        self._add_result(owner, text, meta, when, tid)

    def _unknown_role(self, idx: int, msg: dict, meta: dict, when: float) -> None:
        """A role no format defines: kept as a user node, with a warning."""
        role = msg["role"]
        reason = f"message {idx} has unknown role {role!r}"
        self.b.warnings.append(f"{self.path}: {reason}; kept as a user node with metadata.original_role")
        meta["original_role"] = role
        self.b.add("user", output=content_text(msg.get("content")), created_at=when, metadata=meta)

    def _add_result(self, owner: tuple[Call, dict] | None, text: str, meta: dict, when: float,
                    tid: Any) -> Call:
        """A code node under the llm node that made the call; an orphan (warned) without one."""
        b = self.b
        if owner is None:
            meta["orphan_result"] = True
            b.warnings.append(f"{self.path}: tool result {tid!r} answers no tool call")
            name = meta.get("tool_name", "")
            return b.add("code", name=name, output=text, created_at=when, metadata=meta)
        llm, tc = owner
        return b.add("code", name=tc["name"], input=tc["arguments"], output=text, caller=llm.id,
                     created_at=when, metadata=meta)


def _assistant_parts(msg: dict) -> tuple[list[str], list[dict], list[dict], list]:
    """(texts, tool calls, thinking blocks, other blocks) of an assistant message.

    Tool calls come from the OpenAI ``tool_calls``/``function_call`` fields first, then
    from Anthropic ``tool_use`` blocks, in content order.
    """
    content = msg.get("content")
    texts: list[str] = [content] if isinstance(content, str) else []
    calls, thinking, other = _tool_calls(msg), [], []
    for x in content if isinstance(content, list) else []:
        if not isinstance(x, dict):
            other.append(x)
        elif x.get("type") in ("text", "output_text"):
            texts.append(x.get("text") or "")
        elif x.get("type") == "tool_use":
            inp = x.get("input")
            calls.append({"id": _call_key(x.get("id")) or new_id("call"), "name": x.get("name", ""),
                          "arguments": inp if isinstance(inp, dict) else {"_value": inp}})
        elif x.get("type") in ("thinking", "redacted_thinking"):
            thinking.append(x)
        else:
            other.append(x)
    return texts, calls, thinking, other


def _finish(b: SessionBuilder, facts: dict, *, session_id: str, meta: dict, issues: list[Issue],
            default_title: str, model: str = "") -> ImportedSession:
    models = facts.get("models") or {}
    if not model and models:
        model = max(models, key=models.get)
    title = short_title(facts.get("first_user", "")) or default_title
    return b.finish(session_id=session_id, title=title, model=model, meta=meta, skipped=issues)


def with_file_issues(sessions: list[ImportedSession], issues: list[Issue]) -> list[ImportedSession]:
    """Every issue of a file on its first session: a line skipped after the first session
    (or an issue met while converting a later one) must not be lost with nowhere to go."""
    if sessions and issues:
        sessions[0].skipped = list(issues)
        sessions[0].meta["import_skipped"] = [i.to_dict() for i in issues]
    return sessions


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _conversations(path: str, on_error: str, issues: list[Issue], data: bytes,
                   parsed: Any = None) -> list[tuple[list, dict, list[int] | None]]:
    """(messages, container fields, line of each message or None) per conversation."""
    stripped = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if parsed is None and stripped[:1] in (b"[", b"{"):
        try:
            parsed = load_json(path, on_error=on_error, issues=issues, data=data)
        except TranscriptError:
            if stripped[:1] == b"[":
                raise
            parsed = None  # JSONL whose lines are objects
    if isinstance(parsed, list):
        return [(parsed, {}, None)]
    if isinstance(parsed, dict) and isinstance(parsed.get("messages"), list):
        return [(parsed["messages"], {k: v for k, v in parsed.items() if k != "messages"}, None)]
    if isinstance(parsed, dict) and is_message(parsed):
        return [([parsed], {}, None)]
    lines = list(iter_jsonl(path, on_error=on_error, issues=issues, data=data))
    if not lines:
        raise TranscriptError(path, None, "file is empty")
    if all(isinstance(jl.value.get("messages"), list) for jl in lines):
        return [(jl.value["messages"], {k: v for k, v in jl.value.items() if k != "messages"},
                 [jl.line] * len(jl.value["messages"])) for jl in lines]
    return [([jl.value for jl in lines], {}, [jl.line for jl in lines])]


def _parse_lists(path: str, fmt: str, on_error: str, parsed: Any = None) -> list[ImportedSession]:
    path = str(path)
    data = _read(path)
    issues: list[Issue] = []
    convs = _conversations(path, on_error, issues, data, parsed)
    digest = file_digest(data)
    out = []
    for n, (messages, container, msg_lines) in enumerate(convs):
        b = SessionBuilder(fmt, path)
        system = container.get("system")
        if isinstance(system, (str, list)) and system:
            b.add("llm", output=content_text(system), metadata={"role": "system", "from_field": "system"})
        extra = "mini_swe_agent" if fmt == "mini_swe_agent" else None
        marks = observation_marks_mini_swe_agent(messages) if extra else None
        facts = convert_messages(messages, b, path=path, on_error=on_error, issues=issues,
                                 fmt_extra=extra, lines=msg_lines, marks=marks)
        meta = {k: v for k, v in container.items() if k != "system"}
        sid = f"{fmt}-{digest}" + (f"-{n}" if len(convs) > 1 else "")
        model = container.get("model") if isinstance(container.get("model"), str) else ""
        out.append(_finish(b, facts, session_id=sid, meta=meta, issues=[],
                           default_title=Path(path).stem, model=model))
    return with_file_issues(out, issues)


def parse_openai(path: str, *, on_error: str = "stop", parsed: Any = None) -> list[ImportedSession]:
    return _parse_lists(path, "openai", on_error, parsed)


def parse_anthropic(path: str, *, on_error: str = "stop", parsed: Any = None) -> list[ImportedSession]:
    return _parse_lists(path, "anthropic", on_error, parsed)


def parse_mini_swe_agent(path: str, *, on_error: str = "stop", parsed: Any = None) -> list[ImportedSession]:
    return _parse_lists(path, "mini_swe_agent", on_error, parsed)


def parse_hermes(path: str, *, on_error: str = "stop") -> list[ImportedSession]:
    path = str(path)
    issues: list[Issue] = []
    out = []
    for jl in iter_jsonl(path, on_error=on_error, issues=issues):
        rec = jl.value
        messages = rec.get("messages")
        if messages is None:
            _refuse(path, jl.line, "a Hermes session line without a messages list", on_error, issues,
                    "line skipped")
            continue
        if not HERMES_FIELDS.check_record(rec, path=path, line=jl.line, on_error=on_error, issues=issues,
                                          label="session line"):
            continue
        b = SessionBuilder("hermes", path)
        b.time(rec.get("started_at"))
        if rec.get("system_prompt"):
            b.add("llm", output=rec["system_prompt"],
                  metadata={"role": "system", "from_field": "system_prompt"})
        facts = convert_messages(messages, b, path=path, on_error=on_error, issues=issues,
                                 lines=[jl.line] * len(messages))
        meta = {k: v for k, v in rec.items() if k not in ("messages", "system_prompt")}
        meta["source_line"] = jl.line
        if rec.get("parent_session_id"):
            meta["parent"] = {"source_session_id": rec["parent_session_id"],
                              "session_id": f"hermes-{rec['parent_session_id']}"}
        sid = rec.get("id") or f"{file_digest(_read(path))}-{jl.line}"
        out.append(_finish(b, facts, session_id=f"hermes-{sid}", meta=meta,
                           issues=[], default_title=str(sid),
                           model=rec.get("model") or ""))
    if not out:
        raise TranscriptError(path, None, "no Hermes sessions in the file")
    return with_file_issues(out, issues)


def parse_swe_agent(path: str, *, on_error: str = "stop", parsed: Any = None) -> list[ImportedSession]:
    path = str(path)
    issues: list[Issue] = []
    data = _read(path)
    doc = parsed if parsed is not None else load_json(path, on_error=on_error, issues=issues, data=data)
    if not isinstance(doc, dict) or not isinstance(doc.get("history"), list):
        raise TranscriptError(path, None, "expected a SWE-agent trajectory object with a history list")
    b = SessionBuilder("swe_agent", path)
    facts = convert_messages(doc["history"], b, path=path, on_error=on_error, issues=issues,
                             marks=observation_marks_swe_agent(doc["history"]))
    meta: dict[str, Any] = {k: v for k, v in doc.items() if k not in ("history", "trajectory")}
    steps = doc.get("trajectory")
    if isinstance(steps, list):
        meta["trajectory"] = [
            {k: v for k, v in s.items() if k not in ("response", "thought", "action", "observation")}
            if isinstance(s, dict) else s for s in steps
        ]
    info = doc.get("info") if isinstance(doc.get("info"), dict) else {}
    model = ""
    for key in ("model_name", "model"):
        if isinstance(info.get(key), str):
            model = info[key]
    return [_finish(b, facts, session_id=f"swe_agent-{file_digest(data)}", meta=meta,
                    issues=issues, default_title=Path(path).stem.split(".")[0], model=model)]


def parse_opctx_jsonl(path: str, *, on_error: str = "stop") -> list[ImportedSession]:
    """opctx's own lossless export: one ``Call.to_dict()`` per line (after a header line)."""
    path = str(path)
    issues: list[Issue] = []
    header: dict[str, Any] = {}
    records: list[tuple[int, dict]] = []
    for jl in iter_jsonl(path, on_error=on_error, issues=issues):
        if not jl.value.get("opctx_export"):
            records.append((jl.line, jl.value))
        elif OPCTX_HEADER_FIELDS.check_record(jl.value, path=path, line=jl.line, on_error=on_error,
                                              issues=issues):
            header = jl.value
    if not records:
        raise TranscriptError(path, None, "no nodes in the opctx export")
    idmap: dict[str, str] = {}
    for _, r in records:
        old = r.get("id")
        if isinstance(old, str):
            idmap[old] = new_id(old.split("_", 1)[0] if "_" in old else "n")
    b = SessionBuilder("opctx_jsonl", path)

    def m(x: Any) -> Any:
        return idmap.get(x, x) if isinstance(x, str) else x

    for line, r in records:
        if not OPCTX_NODE_FIELDS.check_record(r, path=path, line=line, on_error=on_error, issues=issues):
            continue
        try:
            meta = dict(r.get("metadata") or {})
            if "copied_from" in meta:
                meta["copied_from"] = m(meta["copied_from"])
            comp = meta.get("compaction")
            if isinstance(comp, dict):
                comp = dict(comp)
                for key in ("folded_ids", "folded_range", "protected_ids", "kept_ids"):
                    if isinstance(comp.get(key), list):
                        comp[key] = [m(x) for x in comp[key]]
                meta["compaction"] = comp
            call = Call(id=idmap[r["id"]], role=r["role"], name=r.get("name") or "",
                        input=r.get("input"), output=r.get("output"),
                        created_at=parse_timestamp(r.get("created_at"), 0.0),
                        caller=m(r.get("caller")), predecessor=m(r.get("predecessor")),
                        reads=[m(x) for x in r.get("reads") or []], metadata=meta)
        except (KeyError, TypeError, ValueError) as exc:
            log.debug("%s:%s: %s", path, line, exc, exc_info=True)
            missing = [k for k in ("id", "role") if r.get(k) is None]
            reason = (f"not a Call record (no {' or '.join(missing)})" if missing
                      else "not a Call record (a field has a type or shape this importer does not read)")
            _refuse(path, line, reason, on_error, issues, "line skipped")
            continue
        call.metadata.setdefault("original_id", r["id"])
        b.calls.append(call)
        b.by_id[call.id] = call
        if "compaction" in call.metadata:
            b.compactions.append(call.id)
    if not b.calls:
        raise TranscriptError(path, None, "no valid node in the opctx export")
    _drop_dangling_edges(b, {new: old for old, new in idmap.items()}, path)
    head = m(header.get("head")) if header.get("head") else b.calls[-1].id
    if not isinstance(head, str) or head not in b.by_id:
        head = b.calls[-1].id
    meta = dict(header.get("meta") or {})
    sid = header.get("session_id") or file_digest(_read(path))
    first_user = next((c.output for c in b.calls if c.role == "user" and isinstance(c.output, str)), "")
    return [b.finish(session_id=f"{sid}-reimport-{file_digest(_read(path))[:8]}",
                     title=header.get("title") or short_title(first_user) or Path(path).stem,
                     model=header.get("model") or "", meta=meta, skipped=issues, head=head)]


def _drop_dangling_edges(b: SessionBuilder, original: dict[str, str], path: str) -> None:
    """Edges to a node that is not in the session (its line was skipped, or it never was
    in the export) are cleared, never left pointing nowhere: the id they named is kept in
    ``metadata.dangling_edges`` and a warning says so."""
    for call in b.calls:
        gone = {edge: original.get(target, target) for edge in ("caller", "predecessor")
                if (target := getattr(call, edge)) is not None and target not in b.by_id}
        missing_reads = [r for r in call.reads if r not in b.by_id]
        if not gone and not missing_reads:
            continue
        for edge in gone:
            setattr(call, edge, None)
        if missing_reads:
            gone["reads"] = [original.get(r, r) for r in missing_reads]
            call.reads = [r for r in call.reads if r in b.by_id]
        call.metadata["dangling_edges"] = gone
        b.warnings.append(f"{path}: node {call.metadata.get('original_id')} names nodes that are not in "
                          f"the export ({', '.join(gone)}); cleared, kept in metadata.dangling_edges")
