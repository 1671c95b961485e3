"""OpenAI Codex CLI rollouts: ``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``.

Every line is ``{"timestamp", "type", "payload"}``. One file = one session.

Mapping
=======
* ``session_meta`` -> session meta (id, cwd, originator, cli version, instructions /
  ``base_instructions``: the system prompt, kept once in ``meta.codex`` rather than on
  every llm node). The session id is ``codex-<payload.id>``.
* ``turn_context`` -> the current model and cwd; every distinct payload is kept once in
  ``meta.turn_contexts`` (Codex writes one per request, almost always identical).
* ``response_item``:
  - ``message`` role ``user`` -> user node; ``developer``/``system`` -> llm node with
    ``metadata.role = "system"`` (``metadata.original_role`` keeps which);
    ``assistant`` -> text of the current llm node.
  - model output items (``reasoning``, assistant ``message``, ``function_call``,
    ``custom_tool_call``, ``local_shell_call``, ``web_search_call``) that follow each other
    without an input in between are ONE model response, so ONE llm node: text of the
    messages, ``metadata.tool_calls``, ``metadata.reasoning`` (visible summary texts) and
    ``metadata.reasoning_encrypted`` (kept, opaque), ``metadata.items`` (the item types,
    in order).
  - ``function_call_output`` / ``custom_tool_call_output`` -> a code node paired by
    ``call_id`` (``caller`` = the llm node that made the call, ``name``/``input`` from the
    call). A call with no output in the file gets a code node with ``output=None`` and
    ``metadata.missing_output = True`` at the end, so the pairing stays complete.
  - ``ghost_snapshot`` and unknown item types -> ``metadata.events`` of the latest node.
* ``event_msg``:
  - ``token_count``: ``info.last_token_usage`` -> ``metadata.usage`` of the latest llm
    node (once: Codex repeats the event, a repeat with the same running total is ignored).
    Codex counts ``input_tokens`` *including* cached input; opctx's usage follows the
    Anthropic split, so ``input_tokens = input - cached`` and ``cache_read_tokens =
    cached`` (the raw numbers stay in ``metadata.usage_raw``). ``model_context_window``
    -> ``metadata.context_window`` and ``meta.model_context_window``; the latest
    ``rate_limits`` -> ``meta.rate_limits``.
  - ``user_message``, ``agent_message``, ``agent_reasoning``: the same text as the
    response items, counted in ``meta.event_counts`` and not stored twice.
  - anything else (``task_started``, ``exec_command_end``, ``context_compacted``, ...) ->
    ``metadata.events`` of the latest node.
* ``compacted`` -> a recorded compaction (shared layout). ``pre_tokens`` is the context
  size just before it: ``last_token_usage.total_tokens`` (input, cached included, plus
  output; Codex's own measure of "tokens in the context window", the one its automatic
  compaction compares with its limit, and the same quantity as Claude Code's
  ``preTokens``) of the latest ``token_count`` before the ``compacted`` line whose
  ``input_tokens`` is not zero. Codex writes a ``token_count`` with zero input and
  output right before ``compacted``; it describes no request on the compacted context,
  so it is passed over. The line and the raw usage used are kept in
  ``compaction.pre_tokens_line`` / ``pre_tokens_usage``; with no such event since the
  previous compaction, ``pre_tokens`` is ``None``. Codex records no trigger (neither
  ``compacted`` nor ``context_compacted`` says whether it was automatic or ``/compact``),
  so ``trigger`` is ``None`` and ``reason`` is ``"recovered"``. The summary itself is encrypted
  (``replacement_history`` holds a ``compaction`` item with ``encrypted_content``): the
  summary node's text is ``payload.message`` when Codex wrote one, else a note saying the
  summary is not visible; ``metadata.compaction.summary_visible`` says which, and the
  encrypted blob is kept in ``metadata.encrypted_summary``. The user messages Codex kept
  in the replacement history become the protected head of the new branch: copies of the
  original user nodes with the same text (``copied_from``), or fresh user nodes
  (``metadata.replacement_history = True``) where no original matches.
* Unknown top-level line types -> ``metadata.events``, with one warning per type.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
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
    parse_arguments,
    parse_timestamp,
    short_title,
)
from .claude_code import _count
from .fields import Field, FieldTable

log = logging.getLogger(__name__)

__all__ = ["FORMAT", "LINE_TYPES", "NOT_VISIBLE", "FIELDS", "parse_codex", "looks_like_line", "codex_usage"]

FORMAT = "codex"
LINE_TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
_MODEL_OUTPUT = {"reasoning", "function_call", "custom_tool_call", "local_shell_call",
                 "web_search_call"}
_DUPLICATE_EVENTS = {"user_message", "agent_message", "agent_reasoning"}
NOT_VISIBLE = ("(Codex stored this summary encrypted; its text is not visible in the "
               "recording.)")


_ITEM = {"type": ("response_item",)}
_EVENT = {"type": ("event_msg",)}


def _line_record(value: Any, top: bool) -> bool:
    return top and looks_like_line(value)


# The fields a rollout line is read with (opctx.importers.fields): names, models and ids
# are kept as their JSON text; a payload whose content or history cannot be walked, or a
# window size that is no number, leaves its line out; the rest is read from any value.
FIELDS = FieldTable("codex", "line", [
    Field("type", ("string",)),
    Field("timestamp", ("string", "number"), "read"),
    Field("payload", ("object",), "read"),
    Field("payload.id", ("string",), "text", when={"type": ("session_meta",)}),
    Field("payload.timestamp", ("string", "number"), "read", when={"type": ("session_meta",)}),
    Field("payload.model", ("string",), "text", when={"type": ("turn_context",)}),
    Field("payload.type", ("string",), "text", when={"type": ("response_item", "event_msg")}),
    Field("payload.role", ("string",), "text", when=_ITEM),
    Field("payload.content", ("string", "list"), when=_ITEM),
    Field("payload.content[].text", ("string",), "text", when=_ITEM),
    Field("payload.name", ("string",), "text", when=_ITEM),
    Field("payload.call_id", ("string",), "text", when=_ITEM),
    Field("payload.id", ("string",), "text", when=_ITEM),
    Field("payload.arguments", ("string", "object"), "read", when=_ITEM),
    Field("payload.summary", ("list",), when=_ITEM),
    Field("payload.output", ("string", "object"), "read", when=_ITEM),
    Field("payload.info", ("object",), "read", when=_EVENT),
    Field("payload.info.model_context_window", ("integer",), when=_EVENT),
    Field("payload.info.last_token_usage", ("object",), "read", when=_EVENT),
    Field("payload.info.last_token_usage.input_tokens", ("integer",), "read", when=_EVENT),
    Field("payload.model_context_window", ("integer",), when=_EVENT),
    Field("payload.rate_limits", ("object",), "read", when=_EVENT),
    Field("payload.message", ("string",), "text", when={"type": ("compacted",)}),
    Field("payload.replacement_history", ("list",), when={"type": ("compacted",)}),
], is_record=_line_record)


def looks_like_line(value: Any) -> bool:
    kind = value.get("type") if isinstance(value, dict) else None
    return isinstance(kind, str) and kind in LINE_TYPES and "payload" in value


def codex_usage(last: dict | None) -> dict[str, int] | None:
    if not isinstance(last, dict):
        return None
    inp = _count(last.get("input_tokens"))
    cached = _count(last.get("cached_input_tokens"))
    return {
        "input_tokens": max(inp - cached, 0),
        "output_tokens": _count(last.get("output_tokens")),
        "cache_read_tokens": cached,
        "cache_write_tokens": 0,
    }


class _Codex:
    def __init__(self, path: str) -> None:
        self.path = path
        self.b = SessionBuilder(FORMAT, path)
        self.meta: dict[str, Any] = {}
        self.model = ""
        self.context_window: int | None = None
        self.current_llm: Call | None = None  # open model response
        self.last_llm: Call | None = None
        self.calls_by_id: dict[str, tuple[Call, dict]] = {}
        self.answered: set[str] = set()
        self.turn_contexts: list[dict] = []
        self.event_counts: Counter[str] = Counter()
        self.unknown: Counter[str] = Counter()
        self.last_total: Any = None
        # the latest real request size before a compaction: (line, last_token_usage)
        self.context_usage: tuple[int, dict] | None = None
        self.first_user = ""
        self.models: Counter[str] = Counter()

    def _attach_event(self, record: dict) -> None:
        target = self.b.by_id.get(self.b.head) if self.b.head else None
        if target is None:
            self.meta.setdefault("events_before_first_node", []).append(record)
        else:
            target.metadata.setdefault("events", []).append(record)

    def run(self, lines, on_error: str = "stop", issues: list[Issue] | None = None) -> int:
        """Convert the records as they are read; returns how many there were."""
        count = 0
        for jl in lines:
            count += 1
            kind = jl.value.get("type")
            label = f"{kind} line" if isinstance(kind, str) else "line"
            if not FIELDS.check_record(jl.value, path=self.path, line=jl.line, on_error=on_error,
                                       issues=issues, label=label):
                continue
            try:
                self._line(jl)
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                # a shape no field of the table describes: still this line only
                log.debug("%s:%s: %s", self.path, jl.line, exc, exc_info=True)
                reason = f"{label}: a field has a type or shape this importer does not read"
                if on_error != "skip":
                    raise TranscriptError(self.path, jl.line, reason) from None
                if issues is not None:
                    issues.append(Issue(self.path, jl.line, reason, "line skipped"))
        return count

    def _line(self, jl) -> None:
        rec = jl.value
        kind = rec.get("type")
        payload = rec.get("payload")
        when = self.b.time(rec.get("timestamp"), f"{self.path}:{jl.line}")
        if kind == "session_meta" and isinstance(payload, dict):
            self.meta.setdefault("codex", {}).update(payload)
        elif kind == "turn_context" and isinstance(payload, dict):
            if payload.get("model"):
                self.model = payload["model"]
            if payload not in self.turn_contexts:
                self.turn_contexts.append(payload)
        elif kind == "response_item" and isinstance(payload, dict):
            self._item(payload, when, jl.line)
        elif kind == "event_msg" and isinstance(payload, dict):
            self._event(payload, rec, jl.line)
        elif kind == "compacted" and isinstance(payload, dict):
            self._compacted(payload, when, jl.line)
        else:
            self.unknown[str(kind)] += 1
            self._attach_event({**rec, "_line": jl.line})

    # -- response items -------------------------------------------------------------------
    def _open_llm(self, when: float) -> Call:
        if self.current_llm is None:
            self.current_llm = self.b.add(
                "llm", name=self.model, output="", created_at=when,
                metadata={"items": [], "tool_calls": []},
            )
            if self.context_window:
                self.current_llm.metadata["context_window"] = self.context_window
            if self.model:
                self.models[self.model] += 1
            self.last_llm = self.current_llm
        return self.current_llm

    def _item(self, item: dict, when: float, line: int) -> None:
        kind = item.get("type")
        if kind == "message":
            role = item.get("role")
            text = content_text(item.get("content"))
            extra = {k: v for k, v in item.items() if k not in ("type", "role", "content")}
            non_text = [b for b in item.get("content") or []
                        if isinstance(b, dict) and b.get("type") not in ("input_text", "output_text", "text")]
            if role == "assistant":
                llm = self._open_llm(when)
                llm.metadata["items"].append("message")
                llm.output = f"{llm.output}\n\n{text}" if llm.output and text else (llm.output or text)
                if extra:
                    llm.metadata.setdefault("message_fields", []).append(extra)
                if non_text:
                    llm.metadata.setdefault("content_blocks", []).extend(non_text)
                return
            self.current_llm = None
            meta: dict[str, Any] = {}
            if extra:
                meta["item_fields"] = extra
            if non_text:
                meta["content_blocks"] = non_text
            if role == "user":
                self.b.add("user", name="user", output=text, created_at=when, metadata=meta)
                if not self.first_user and not text.lstrip().startswith(("<", "#")):
                    self.first_user = text
            else:
                meta.update({"role": "system", "original_role": role})
                self.b.add("llm", output=text, created_at=when, metadata=meta)
            return
        if kind in _MODEL_OUTPUT:
            llm = self._open_llm(when)
            llm.metadata["items"].append(kind)
            if kind == "reasoning":
                summary = [s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict)]
                if summary:
                    llm.metadata.setdefault("reasoning", []).extend(summary)
                if item.get("content"):
                    llm.metadata.setdefault("reasoning_content", []).append(item["content"])
                if item.get("encrypted_content"):
                    llm.metadata.setdefault("reasoning_encrypted", []).append(item["encrypted_content"])
                return
            if kind == "web_search_call":
                llm.metadata.setdefault("web_search_calls", []).append(item)
                return
            call_id = item.get("call_id") or item.get("id") or new_id("call")
            if kind == "function_call":
                args = parse_arguments(item.get("arguments"))
                name = item.get("name", "")
            elif kind == "custom_tool_call":
                args = {"input": item.get("input")}
                name = item.get("name", "")
            else:  # local_shell_call
                args = item.get("action") if isinstance(item.get("action"), dict) else {"action": item.get("action")}
                name = "local_shell"
            tc: dict[str, Any] = {"id": call_id, "name": name, "arguments": args}
            if kind != "function_call":
                tc["type"] = kind
            extra = {k: v for k, v in item.items()
                     if k not in ("type", "name", "arguments", "input", "call_id", "action")}
            if extra:
                tc["item_fields"] = extra
            llm.metadata["tool_calls"].append(tc)
            self.calls_by_id[call_id] = (llm, tc)
            return
        if kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            self.current_llm = None
            call_id = item.get("call_id")
            owner = self.calls_by_id.get(call_id)
            out = item.get("output")
            meta: dict[str, Any] = {"tool_call_id": call_id}
            if isinstance(out, dict):
                meta["output_fields"] = {k: v for k, v in out.items() if k != "content"}
                if out.get("success") is False:
                    meta["is_error"] = True
                out = out.get("content", json.dumps(out, ensure_ascii=False))
            extra = {k: v for k, v in item.items() if k not in ("type", "call_id", "output")}
            if extra:
                meta["item_fields"] = extra
            if kind != "function_call_output":
                meta["output_type"] = kind
            if owner is None:
                meta["orphan_result"] = True
                self.b.warnings.append(f"{self.path}:{line}: output for unknown call_id {call_id}")
                self.b.add("code", output=out, created_at=when, metadata=meta)
            else:
                llm, tc = owner
                self.b.add("code", name=tc["name"], input=tc["arguments"], output=out,
                           caller=llm.id, created_at=when, metadata=meta)
                self.answered.add(call_id)
            return
        # ghost_snapshot and item types not known yet: kept, never a node
        if kind != "ghost_snapshot":
            self.unknown[f"response_item/{kind}"] += 1
        self._attach_event({"type": "response_item", "payload": item, "_line": line})

    # -- events ------------------------------------------------------------------------------
    def _event(self, payload: dict, rec: dict, line: int) -> None:
        kind = payload.get("type")
        self.event_counts[str(kind)] += 1
        if kind == "token_count":
            info = payload.get("info")
            if isinstance(payload.get("rate_limits"), dict):
                self.meta["rate_limits"] = payload["rate_limits"]
            if not isinstance(info, dict):
                return
            last = info.get("last_token_usage")
            if isinstance(last, dict) and _count(last.get("input_tokens")) > 0:
                self.context_usage = (line, last)
            if info.get("model_context_window"):
                self.context_window = int(info["model_context_window"])
                self.meta["model_context_window"] = self.context_window
            total = info.get("total_token_usage")
            if total == self.last_total:
                return
            self.last_total = total
            llm = self.last_llm
            usage = codex_usage(info.get("last_token_usage"))
            if llm is not None and usage is not None and "usage" not in llm.metadata:
                llm.metadata["usage"] = usage
                llm.metadata["usage_raw"] = info.get("last_token_usage")
                if self.context_window:
                    llm.metadata["context_window"] = self.context_window
            return
        if kind in _DUPLICATE_EVENTS:
            return
        if kind == "task_started" and payload.get("model_context_window"):
            self.context_window = int(payload["model_context_window"])
            self.meta["model_context_window"] = self.context_window
        self._attach_event({"timestamp": rec.get("timestamp"), "payload": payload, "_line": line})

    # -- compaction ------------------------------------------------------------------------------
    def _pre_compaction_tokens(self) -> tuple[int | None, dict[str, Any]]:
        """Context size before a compaction, and where it was read (module docstring)."""
        if self.context_usage is None:
            return None, {}
        line, last = self.context_usage
        self.context_usage = None  # a second compaction right after has no figure of its own
        total = _count(last.get("total_tokens")) or (
            _count(last.get("input_tokens")) + _count(last.get("output_tokens")))
        return total, {"pre_tokens_line": line, "pre_tokens_usage": last}

    def _compacted(self, payload: dict, when: float, line: int) -> None:
        self.current_llm = None
        pre_tokens, pre_source = self._pre_compaction_tokens()
        history = payload.get("replacement_history") or []
        visible = (payload.get("message") or "").strip()
        encrypted = [it.get("encrypted_content") for it in history
                     if isinstance(it, dict) and it.get("type") == "compaction"]
        others = [it for it in history if isinstance(it, dict)
                  and not (it.get("type") == "message" and it.get("role") == "user")
                  and it.get("type") != "compaction"]
        # user messages of the replacement history: copies of the originals where possible
        branch = self.b.chain(self.b.head) if self.b.head else []
        originals = [self.b.by_id[i] for i in branch if self.b.by_id[i].role == "user"]
        protected: list[str] = []
        fresh: list[Call] = []
        used: set[str] = set()
        for it in history:
            if not (isinstance(it, dict) and it.get("type") == "message" and it.get("role") == "user"):
                continue
            text = content_text(it.get("content"))
            match = next((o for o in originals if o.id not in used and o.output == text), None)
            if match is not None and not fresh:
                used.add(match.id)
                protected.append(match.id)
            else:
                fresh.append(Call(id=new_id("u"), role="user", name="user", output=text,
                                  created_at=when,
                                  metadata={"source": f"import:{FORMAT}", "replacement_history": True}))
        self.b.record_compaction(
            visible or NOT_VISIBLE,
            protected_ids=protected,
            extra_protected=fresh,
            trigger=None,
            pre_tokens=pre_tokens,
            created_at=when,
            metadata={"encrypted_summary": encrypted[0] if len(encrypted) == 1 else encrypted,
                      "source_line": line,
                      **({"replacement_history_other": others} if others else {})},
            compaction_extra={"summary_visible": bool(visible), **pre_source},
        )
        self.last_llm = None


def parse_codex(path: str, *, on_error: str = "stop") -> list[ImportedSession]:
    path = str(path)
    issues: list[Issue] = []
    conv = _Codex(path)
    read = conv.run(iter_jsonl(path, on_error=on_error, issues=issues), on_error, issues)
    if not read:
        raise TranscriptError(path, None, "no Codex rollout lines in the file")
    b = conv.b
    # every call gets its code node, answered or not
    for call_id, (llm, tc) in conv.calls_by_id.items():
        if call_id not in conv.answered:
            b.add("code", name=tc["name"], input=tc["arguments"], output=None, caller=llm.id,
                  predecessor=b.head, metadata={"tool_call_id": call_id, "missing_output": True})
            b.warnings.append(f"{path}: call {call_id} ({tc['name']}) has no output in the file")
    for kind, n in sorted(conv.unknown.items()):
        b.warnings.append(f"{path}: {n} unknown record(s) of type {kind!r} kept in metadata.events")
    cmeta = conv.meta.get("codex", {})
    sid = cmeta.get("id") or Path(path).stem
    meta = dict(conv.meta)
    meta["turn_contexts"] = conv.turn_contexts
    meta["event_counts"] = dict(conv.event_counts)
    started = parse_timestamp(cmeta.get("timestamp"))
    if started is not None:
        meta["started_at"] = started
    model = conv.models.most_common(1)[0][0] if conv.models else conv.model
    title = short_title(conv.first_user) or Path(path).stem
    return [b.finish(session_id=f"codex-{sid}", title=title, model=model, meta=meta,
                     skipped=issues)]
