"""OpenHands ``log_completions`` files: one JSON document per LLM call.

OpenHands writes, with ``log_completions`` on, one file per call into a folder per
instance (``llm_completions/<instance_id>/<model with / as __>-<time.time()>.json``):
``messages`` (the whole prompt of that call), ``response`` (the provider's reply),
``args``, ``kwargs`` (the call's other arguments; evaluation runs put
``extra_body.metadata`` there: ``instance_id``, ``step_id``, tags), ``timestamp`` (when
the reply was logged) and ``cost``. When the model had no native function calling,
OpenHands sent a prompt-formatted conversation and logged the function-calling form
beside it: ``fncall_messages`` / ``fncall_response``. Those are preferred here: they carry
the real tool calls and ``tool`` results, which become llm and code nodes; the
prompt-formatted text would turn every observation into a user message.

Two ways in:

* **one file**: its prompt plus its reply is the whole trajectory up to that call (the
  last call of an instance is the whole run). One session; the file has one timestamp,
  so the requests have no times of their own: ``meta["request_times"] = "none"`` (a cost
  figure must state its cache assumption).
* **a folder of one instance's calls** (``parse_path`` on the folder, or a walked folder
  holding two or more such files): the run is rebuilt from all of them, in the order of
  their ``timestamp``. Each call's prompt is the history so far: the messages it adds to
  the previous call's prompt are appended, and the assistant message at the position of
  the previous call's reply gets that call's ``usage``, ``cost``, response id and time
  (``metadata.completion``), so every request of the run has its own time and usage
  (``meta["request_times"] = "recorded"``). A prompt that does not continue the one
  before (a condenser rewrote the history, another agent called) starts a branch at the
  last message the two share, with a warning; HEAD follows the latest call. A reply
  that the next prompt does not contain is still kept as an llm node (nothing dropped).

Messages are converted by ``message_lists``' converter (OpenAI shape: ``tool_calls``,
``role="tool"``), so nodes look like the other importers'. The server of some runs logs
``prompt_tokens = 0``: that usage has no prompt count (``provider_prompt_tokens`` treats
an all-zero prompt as unknown) and ``metadata.completion.prompt_tokens_unreported`` says
so. A field of the wrong type is an error naming the file and its JSON path
(``FILE: messages[3]: ...``), or with ``on_error="skip"`` that message is left out and
listed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import ImportedSession, Issue, SessionBuilder, TranscriptError, load_json, short_title
from .fields import Field, FieldTable, json_type
from .message_lists import MESSAGE_FIELDS, _message_record, _MessageConverter, _refuse, _usage

__all__ = [
    "FORMAT",
    "looks_like_completion",
    "is_completion_name",
    "log_prefix",
    "calls_folder",
    "parse_openhands_completions",
    "COMPLETION_FIELDS",
    "PROMPT_FIELDS",
]

FORMAT = "openhands_completions"
# the file name OpenHands gives each call: "<model, / written __>-<time.time()>.json"
_LOG_NAME = re.compile(r"-\d{9,}(?:\.\d+)?\.json$")


_META = "kwargs.extra_body.metadata"

# The fields of one logged call (opctx.importers.fields). The prompt list that is read
# places the call ("skip": a call without a readable prompt is left out, naming the
# file); the reply, its usage and the run's metadata are read from any value: a reply of
# the wrong shape is left out with an issue naming the file and the field, the prompt
# still imports; a time that is no number is ignored with an issue.
COMPLETION_FIELDS = FieldTable("openhands_completions", "completion log", [
    Field("messages", ("list",)),
    Field("fncall_messages", ("list",)),
    Field("response", ("object",), "read"),
    Field("response.choices", ("list",), "read"),
    Field("response.choices[]", ("object",), "read"),
    Field("response.choices[].message", ("object",), "read"),
    Field("response.id", ("string",), "read"),
    Field("response.model", ("string",), "read"),
    Field("response.created", ("number",), "read"),
    Field("response.usage", ("object",), "read"),
    Field("response.usage.prompt_tokens", ("integer",), "read"),
    Field("response.usage.completion_tokens", ("integer",), "read"),
    Field("fncall_response", ("object",), "read"),
    Field("fncall_response.choices", ("list",), "read"),
    Field("fncall_response.choices[].message", ("object",), "read"),
    Field("timestamp", ("number",), "read"),
    Field("cost", ("number",), "read"),
    Field("kwargs", ("object",), "read"),
    Field("kwargs.extra_body", ("object",), "read"),
    Field(_META, ("object",), "read"),
    Field(f"{_META}.instance_id", ("string", "integer"), "read"),
    Field(f"{_META}.step_id", ("integer", "string"), "read"),
    Field(f"{_META}.tags", ("list",), "read"),
], is_record=lambda value, top: top and isinstance(value, dict))


def _prompt_message(document: Any, path: tuple) -> bool:
    """Whether ``path`` is a message of the prompt list this importer reads."""
    if not isinstance(document, dict) or len(path) != 2 or not isinstance(path[1], int):
        return False
    return path[0] == ("fncall_messages" if document.get("fncall_messages") is not None else "messages")


# The prompt's messages are checked with the message table of every message-list format
# (MESSAGE_FIELDS). This is its view for the fuzzer: the list that is read (not the other
# copy of the prompt), and the fields of the OpenAI shape OpenHands logs, less the content
# blocks (its prompts' content is text; blocks are fuzzed through the OpenAI samples, with
# the same check).
PROMPT_FIELDS = FieldTable("openhands_completions", "message",
                           [f for f in MESSAGE_FIELDS.fields if not f.path.startswith("content[")],
                           is_record=_message_record, within=_prompt_message)


def looks_like_completion(doc: Any) -> bool:
    """A whole-file JSON document written by OpenHands' ``log_completions``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        return False
    response = doc.get("response")
    return (isinstance(response, dict) and isinstance(response.get("choices"), list)) or \
        isinstance(doc.get("fncall_messages"), list)


def is_completion_name(name: str) -> bool:
    """Whether a file name has the shape OpenHands gives a completion log."""
    return bool(_LOG_NAME.search(name))


def log_prefix(name: str) -> str:
    """The part of a completion log's name before its time: the model that wrote it."""
    m = _LOG_NAME.search(name)
    return name[: m.start()] if m else name


def calls_folder(path: str | os.PathLike) -> list[Path]:
    """The completion logs of one run directly in folder ``path``, checked by content.

    A run is the logs of one model (one name prefix); where several models logged into
    the folder, the one with the most calls. Empty when the folder holds none, or when
    the first one named like a log is not one (nothing this importer rebuilds).
    """
    folder = Path(path)
    try:
        named = sorted(p for p in folder.iterdir() if p.is_file() and is_completion_name(p.name))
    except OSError:
        return []
    if not named:
        return []
    groups: dict[str, list[Path]] = {}
    for p in named:
        groups.setdefault(log_prefix(p.name), []).append(p)
    files = max(groups.values(), key=len)
    try:
        first = load_json(str(files[0]))
    except (TranscriptError, OSError):
        return files  # damaged: the parser reports it, naming the file
    return files if looks_like_completion(first) else []


@dataclass
class _Call:
    """One logged call, checked: the prompt to use, the reply, its time and its file."""

    path: str
    doc: dict
    messages: list
    reply: dict | None
    timestamp: float | None
    fncall: bool
    skipped: list[Issue] = field(default_factory=list)


def _checked_call(path: str, doc: Any, on_error: str, issues: list[Issue]) -> _Call:
    """The parts of one completion log, each checked for its type (errors name the JSON path)."""
    if not isinstance(doc, dict):
        raise TranscriptError(path, None, f"expected an OpenHands completion log object, got {json_type(doc)}")
    own: list[Issue] = []
    if not COMPLETION_FIELDS.check_record(doc, path=path, line=None, on_error=on_error, issues=own):
        issues.extend(own[:-1])
        raise TranscriptError(path, None, own[-1].reason)
    issues.extend(own)
    fncall = doc.get("fncall_messages") is not None
    key = "fncall_messages" if fncall else "messages"
    messages = doc.get(key)
    if not isinstance(messages, list):
        raise TranscriptError(path, None, f"field {key}: expected a list, got {json_type(messages)}")
    response = doc.get("fncall_response" if fncall and "fncall_response" in doc else "response")
    reply = None
    if response is not None:
        reply = _reply_message(path, response, "fncall_response" if fncall else "response", on_error, issues)
    ts = doc.get("timestamp")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, (int, float))):
        _refuse(path, None, f"field timestamp: expected a number, got {json_type(ts)}", on_error, issues,
                "timestamp ignored")
        ts = None
    return _Call(path, doc, messages, reply, float(ts) if ts is not None else None, fncall)


def _reply_message(path: str, response: Any, key: str, on_error: str, issues: list[Issue]) -> dict | None:
    """``response.choices[0].message`` as an assistant message (with the response's usage)."""
    problem = None
    if not isinstance(response, dict):
        problem = f"field {key}: expected an object, got {json_type(response)}"
    elif not isinstance(response.get("choices"), list) or not response["choices"]:
        problem = f"field {key}.choices: expected a non-empty list, got {json_type(response.get('choices'))}"
    elif not isinstance(response["choices"][0], dict):
        problem = f"field {key}.choices[0]: expected an object, got {json_type(response['choices'][0])}"
    elif not isinstance(response["choices"][0].get("message"), dict):
        problem = f"field {key}.choices[0].message: expected an object, got {json_type(response['choices'][0].get('message'))}"
    if problem is not None:
        _refuse(path, None, problem, on_error, issues, "reply left out")
        return None
    msg = dict(response["choices"][0]["message"])
    msg["role"] = "assistant"
    return msg


def _load_calls(paths: list[str], on_error: str, issues: list[Issue]) -> list[_Call]:
    calls = []
    for p in paths:
        try:
            doc = load_json(p, on_error=on_error, issues=issues)
            calls.append(_checked_call(p, doc, on_error, issues))
        except TranscriptError as exc:
            if on_error != "skip" or len(paths) == 1:
                raise
            issues.append(Issue(p, None, f"not a readable completion log: {exc.reason}", "file skipped"))
    if not calls:
        raise TranscriptError(paths[0] if paths else None, None, "no readable completion log")
    # the order of the run: the logged time, then the name (which embeds the same time)
    calls.sort(key=lambda c: (c.timestamp if c.timestamp is not None else float("inf"), os.path.basename(c.path)))
    return calls


def _key(msg: Any) -> str:
    """What makes two prompt messages the same message: role, text, tool calls, call id."""
    if not isinstance(msg, dict):
        return json.dumps(msg, sort_keys=True, default=str)
    content = msg.get("content")
    if isinstance(content, str):
        content = content.strip()
    calls = []
    for tc in msg.get("tool_calls") or ():
        if isinstance(tc, dict):
            fn = tc.get("function") if isinstance(tc.get("function"), dict) else tc
            calls.append([tc.get("id"), fn.get("name"), fn.get("arguments")])
    return json.dumps([msg.get("role"), content, calls, msg.get("tool_call_id")], sort_keys=True, default=str)


class _Run:
    """Rebuilds one run from its calls (see the module docstring)."""

    def __init__(self, b: SessionBuilder, on_error: str, issues: list[Issue]) -> None:
        self.b = b
        self.on_error = on_error
        self.issues = issues
        self.conv = _MessageConverter(b, path=b.source_path, fmt_extra=None)
        self.keys: list[str] = []      # the current chain, as message keys
        self.nodes: list[str] = []     # the node each chain message ended on
        self.pending: _Call | None = None  # the call whose reply is not placed yet

    def add_call(self, call: _Call) -> None:
        prompt = call.messages
        if self.pending is not None:
            self._place_pending(prompt)
        shared = self._shared_prefix(prompt)
        if shared < len(self.keys):
            self.b.warnings.append(
                f"{call.path}: this call's prompt does not continue the previous one after message "
                f"{shared}; it starts a branch there")
            self.keys, self.nodes = self.keys[:shared], self.nodes[:shared]
            self.b.head = self.nodes[-1] if self.nodes else None
        start = self._request_time(call)
        if start is not None:
            self.b.last_time = max(self.b.last_time, start)
        for idx in range(shared, len(prompt)):
            self._append(call.path, idx, prompt[idx], "fncall_messages" if call.fncall else "messages")
        self.pending = call

    def finish(self) -> None:
        """The last call's reply becomes the last llm node (no later prompt holds it)."""
        if self.pending is not None and self.pending.reply is not None:
            self._append_reply(self.pending)
        self.pending = None

    def _place_pending(self, prompt: list) -> None:
        """Give the previous call's usage and time to its reply, found in this prompt."""
        call = self.pending
        self.pending = None
        pos = len(call.messages)
        if (call.reply is not None and pos == len(self.keys) and len(prompt) > pos
                and isinstance(prompt[pos], dict) and prompt[pos].get("role") == "assistant"
                and self._shared_prefix(prompt) == pos):
            self._append(call.path, pos, prompt[pos], "(next call's prompt)", completion=call)
        elif call.reply is not None:
            node = self._append_reply(call)
            if node is not None:
                node.metadata["completion"]["reply_not_in_next_prompt"] = True

    def _shared_prefix(self, prompt: list) -> int:
        n = 0
        for key, msg in zip(self.keys, prompt, strict=False):
            if key != _key(msg):
                break
            n += 1
        return n

    def _append(self, path: str, idx: int, msg: Any, where: str, completion: _Call | None = None) -> None:
        before = len(self.b.calls)
        if not isinstance(msg, dict) or msg.get("role") is None:
            _refuse(path, None, f"{where}[{idx}]: not a {{role, content}} object", self.on_error,
                    self.issues, "message skipped")
            return
        if not MESSAGE_FIELDS.check_record(msg, path=path, line=None, on_error=self.on_error,
                                           issues=self.issues, label=f"{where}[{idx}]"):
            return
        if completion is not None:
            self.b.last_time = max(self.b.last_time, completion.timestamp or self.b.last_time)
        try:
            self.conv.add(idx, msg, f"{path}, {where}[{idx}]")
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            _refuse(path, None, f"{where}[{idx}]: unexpected content ({type(exc).__name__}: {exc})",
                    self.on_error, self.issues, "message skipped")
            return
        if len(self.b.calls) == before:
            return
        node = self.b.calls[-1]
        if completion is not None and node.role == "llm":
            self._annotate(node, completion)
        self.keys.append(_key(msg))
        self.nodes.append(node.id)

    def _append_reply(self, call: _Call) -> Any:
        before = len(self.b.calls)
        self._append(call.path, len(call.messages), call.reply, "reply", completion=call)
        return self.b.calls[-1] if len(self.b.calls) > before else None

    def _annotate(self, node: Any, call: _Call) -> None:
        """Usage, cost, time and ids of the call that produced this assistant message."""
        response = call.doc.get("fncall_response") if call.fncall and isinstance(
            call.doc.get("fncall_response"), dict) else call.doc.get("response")
        response = response if isinstance(response, dict) else {}
        raw = response.get("usage")
        usage = _usage(raw)
        if usage is not None:
            node.metadata["usage"] = usage
            node.metadata["usage_raw"] = raw
        info: dict[str, Any] = {"file": os.path.basename(call.path)}
        for name, value in (("timestamp", call.timestamp), ("cost", call.doc.get("cost")),
                            ("response_id", response.get("id")), ("created", response.get("created"))):
            if value is not None:
                info[name] = value
        if isinstance(raw, dict) and not raw.get("prompt_tokens") and call.messages:
            info["prompt_tokens_unreported"] = True
        meta = _run_metadata(call.doc)
        if meta.get("step_id") is not None:
            info["step_id"] = meta["step_id"]
        node.metadata["completion"] = info
        if isinstance(response.get("model"), str) and not node.name:
            node.name = response["model"]
        if call.timestamp is not None:
            node.created_at = call.timestamp

    @staticmethod
    def _request_time(call: _Call) -> float | None:
        """When the request left: the response's ``created`` (seconds), else unknown."""
        response = call.doc.get("response")
        created = response.get("created") if isinstance(response, dict) else None
        if isinstance(created, (int, float)) and not isinstance(created, bool) and created > 0:
            return float(created)
        return None


def _run_metadata(doc: dict) -> dict:
    """``kwargs.extra_body.metadata`` of an evaluation run (instance id, step, tags), or {}."""
    kwargs = doc.get("kwargs")
    body = kwargs.get("extra_body") if isinstance(kwargs, dict) else None
    meta = body.get("metadata") if isinstance(body, dict) else None
    return meta if isinstance(meta, dict) else {}


def _digest(paths: list[str]) -> str:
    h = hashlib.sha1()
    for p in sorted(paths, key=os.path.basename):
        h.update(os.path.basename(p).encode())
        with open(p, "rb") as fh:
            h.update(hashlib.sha1(fh.read()).digest())
    return h.hexdigest()[:16]


def parse_openhands_completions(path: str | os.PathLike, *, on_error: str = "stop",
                                parsed: Any = None) -> list[ImportedSession]:
    """One session from a completion log, or from a folder of one instance's logs."""
    path = str(path)
    issues: list[Issue] = []
    if os.path.isdir(path):
        paths = [str(p) for p in calls_folder(path)]
        if not paths:
            raise TranscriptError(path, None, "no OpenHands completion logs in this folder")
        calls = _load_calls(paths, on_error, issues)
        others = sorted(p.name for p in Path(path).iterdir()
                        if is_completion_name(p.name) and str(p) not in paths)
    else:
        paths, others = [path], []
        doc = parsed if parsed is not None else load_json(path, on_error=on_error, issues=issues)
        calls = [_checked_call(path, doc, on_error, issues)]
    b = SessionBuilder(FORMAT, path)
    if others:
        b.warnings.append(f"{path}: {len(others)} logs of another model left out of this run "
                          f"(import them one by one): {', '.join(others[:3])}")
    run = _Run(b, on_error, issues)
    for call in calls:
        run.add_call(call)
    run.finish()
    last = calls[-1]
    info = _run_metadata(last.doc)
    meta: dict[str, Any] = {
        "calls": len(calls),
        "request_times": "recorded" if len(calls) > 1 else "none",
        "function_calling_form": "fncall_messages" if last.fncall else "messages",
    }
    for key in ("instance_id", "step_id", "tags", "session_id"):
        if info.get(key) is not None:
            meta[key] = info[key]
    if len(paths) > 1:
        meta["files"] = [os.path.basename(c.path) for c in calls]
    models = run.conv.facts.get("models") or {}
    model = max(models, key=models.get) if models else ""
    if not model:
        resp = last.doc.get("response")
        model = resp.get("model", "") if isinstance(resp, dict) and isinstance(resp.get("model"), str) else ""
    title = str(info.get("instance_id") or "") or short_title(run.conv.facts.get("first_user", "")) or Path(path).stem
    return [b.finish(session_id=f"{FORMAT}-{_digest(paths)}", title=title, model=model, meta=meta,
                     skipped=issues)]
