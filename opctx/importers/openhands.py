"""OpenHands: evaluation ``output.jsonl`` (one instance per line, its ``history`` of
events) and bare event arrays (``trajs/*.json``).

An event is an *action* or an *observation* (``source``: ``user`` / ``agent`` /
``environment``; ``cause`` links an observation to its action).

Mapping
=======
* ``system`` action -> llm node with ``metadata.role = "system"``.
* ``message`` action -> user node (``source = "user"``) or llm node (agent).
* an action with ``tool_call_metadata`` (``run``, ``read``, ``edit``, ``think``,
  ``finish``, ``browse``, ...) is one tool call of one model response; the actions of one
  ``model_response.id`` become ONE llm node (text = the response's message content, or the
  action's ``thought``; ``metadata.tool_calls`` with the arguments the model really sent,
  read from ``model_response.choices[0].message.tool_calls`` where present, else the
  action's ``args``; ``metadata.usage`` from the response's usage; the response itself in
  ``metadata.model_response``).
* the observation answering a tool call (same ``tool_call_id``, or ``cause`` = the
  action's id) -> a code node (``output`` = the observation's ``content``, ``caller`` =
  the llm node, ``metadata.tool_call_id``, ``metadata.observation`` = its kind, ``extras``
  kept). A tool call whose observation is not in the history (``finish`` usually) gets a
  code node with ``output=None`` and ``metadata.missing_output``.
* an observation that answers no tool call (no ``tool_call_metadata``, no ``cause``
  naming a tool-call action) but is of a kind OpenHands shows the model
  (``OBSERVATIONS_SHOWN_AS_MESSAGES``: e.g. the ``error`` observation written when the
  model's function call failed validation, so no action was recorded for it; a command
  the user ran) and has text -> a user node (``output`` = its ``content``,
  ``metadata.observation`` = its kind, ``metadata.is_observation``, ``event`` kept).
  OpenHands' conversation memory
  sends exactly these as ``user`` messages, so the next llm node ``reads`` them: leaving
  them out would hide from a replay what the model was told.
* older outputs, before function calling (no ``tool_call_metadata``): an agent action
  other than a message (``run``, ``run_ipython``, ``edit``, ``browse``,
  ``browse_interactive``, ``read``, ``write``, ``delegate``, ``finish``, ...) is one
  model response with one tool call, named by the action kind, with the ``args`` (but
  the ``thought``, which is the llm node's text) as arguments and
  ``metadata.legacy_action``. Its observation (``cause`` = the action's id, or the
  other half of its pair) is the code node answering it. Evaluation outputs written
  before October 2024 hold ``history`` as ``[action, observation]`` pairs
  (``flatten_history``); a pair's ``null`` observation ("No observation") answers
  nothing, so a ``finish`` keeps ``missing_output``. The run's model is
  ``metadata.llm_config.model``, or ``metadata.model_name`` in mid-2024 outputs.
* everything else -> ``metadata.events`` of the latest node: kept, not in the
  conversation. These are the events the model never sees as they are: ``null``
  observations (the "No observation" answer to a message or a state change),
  ``agent_state_changed`` and ``change_agent_state``, ``recall`` actions and
  observations (OpenHands renders the workspace context from the observation's
  ``extras`` through its own prompt templates; the recorded ``content`` is only
  "Added workspace context", so there is no faithful text to put in a node), empty
  observations, a second answer to an already answered call, and unknown kinds.

Every node lists the event ids it came from in ``metadata.source_event_ids``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opctx.dag.nodes import Call

from .base import (
    ImportedSession,
    Issue,
    SessionBuilder,
    TranscriptError,
    content_text,
    iter_jsonl,
    load_json,
    parse_arguments,
    short_title,
)
from .fields import Field, FieldTable, json_type
from .message_lists import _usage, file_digest, with_file_issues

__all__ = ["FORMAT", "OBSERVATIONS_SHOWN_AS_MESSAGES", "EVENT_FIELDS", "OUTPUT_FIELDS", "parse_openhands",
           "looks_like_event", "looks_like_pair", "flatten_history", "convert_events"]

FORMAT = "openhands"
# Observation kinds that OpenHands' conversation memory turns into a message for the model
# (a tool message when they answer a tool call, else a user message). Not in this set:
# "null", "agent_state_changed", "recall" (rendered from extras by a template), "success".
OBSERVATIONS_SHOWN_AS_MESSAGES = frozenset({
    "run", "run_ipython", "read", "write", "edit", "browse", "error", "user_rejected",
    "think", "delegate", "condense", "mcp", "download",
})


_TCM = "tool_call_metadata"
_RESPONSE = f"{_TCM}.model_response"

# The fields an event is read with (opctx.importers.fields): kinds, names, ids and texts
# are kept as their JSON text; the rest is read from any value (an ``args`` or a model
# response that is no object counts as absent, and stays in the event kept on the node).
EVENT_FIELDS = FieldTable("openhands", "event", [
    Field("source", ("string",), "text"),
    Field("action", ("string",), "text"),
    Field("observation", ("string",), "text"),
    Field("id", ("integer", "string"), "text"),
    Field("cause", ("integer", "string"), "text"),
    Field("message", ("string",), "text"),
    Field("content", ("string", "list"), "read"),
    Field("timestamp", ("string", "number"), "read"),
    Field("success", ("boolean",), "read"),
    Field("args", ("object",), "read"),
    Field("args.content", ("string",), "read"),
    Field("args.thought", ("string",), "read"),
    Field(_TCM, ("object",), "read"),
    Field(f"{_TCM}.function_name", ("string",), "text"),
    Field(f"{_TCM}.tool_call_id", ("string",), "text"),
    Field(_RESPONSE, ("object",), "read"),
    Field(f"{_RESPONSE}.id", ("string",), "text"),
    Field(f"{_RESPONSE}.model", ("string",), "read"),
    Field(f"{_RESPONSE}.usage", ("object",), "read"),
    Field(f"{_RESPONSE}.choices", ("list",), "read"),
    Field(f"{_RESPONSE}.choices[].message", ("object",), "read"),
    Field(f"{_RESPONSE}.choices[].message.tool_calls", ("list",), "read"),
    Field(f"{_RESPONSE}.choices[].message.tool_calls[]", ("object",), "read"),
    Field(f"{_RESPONSE}.choices[].message.tool_calls[].id", ("string",), "text"),
    Field(f"{_RESPONSE}.choices[].message.tool_calls[].function", ("object",), "read"),
    Field(f"{_RESPONSE}.choices[].message.tool_calls[].function.name", ("string",), "text"),
    Field(f"{_RESPONSE}.choices[].message.tool_calls[].function.arguments", ("string", "object"), "read"),
], is_record=lambda value, top: looks_like_event(value))

# An evaluation output line (or document): the run's fields around its history.
OUTPUT_FIELDS = FieldTable("openhands", "line", [
    Field("history", ("list",)),
    Field("instance_id", ("string", "integer"), "text"),
    Field("metadata", ("object",), "read"),
    Field("metadata.llm_config", ("object",), "read"),
    Field("metadata.llm_config.model", ("string",), "read"),
    Field("metadata.model_name", ("string",), "read"),
], is_record=lambda value, top: top and isinstance(value, dict) and "history" in value)


def looks_like_event(value: Any) -> bool:
    return isinstance(value, dict) and "source" in value and ("action" in value or "observation" in value)


def _messages(resp: dict) -> list[dict]:
    """The ``message`` of each of a model response's choices that is an object."""
    choices = resp.get("choices")
    return [c["message"] for c in choices if isinstance(c, dict) and isinstance(c.get("message"), dict)] \
        if isinstance(choices, list) else []


def _response_calls(resp: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for msg in _messages(resp):
        calls = msg.get("tool_calls")
        for tc in calls if isinstance(calls, list) else ():
            if not isinstance(tc, dict):
                continue
            fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
            out[tc.get("id")] = {"name": fn.get("name", ""), "arguments": parse_arguments(fn.get("arguments"))}
    return out


def _response_text(resp: dict) -> str:
    for msg in _messages(resp):
        if msg.get("content"):
            return content_text(msg["content"])
    return ""


# Actions that are not a model's decision: the controller's bookkeeping, context recalls.
_NOT_MODEL_ACTIONS = frozenset({"system", "message", "change_agent_state", "recall", "null",
                                "condensation", "condensation_request"})


def flatten_history(history: list) -> list[tuple[Any, int | None]]:
    """``(event, position of the action it answers or None)`` for every event, in order.

    OpenHands evaluation outputs written before October 2024 hold ``history`` as
    ``[action, observation]`` pairs (``compatibility_for_eval_history_pairs``); later
    ones a flat list of events. A pair's observation answers its action even where it
    has no ``cause`` (the ``null`` observation of a message has no id at all).
    """
    out: list[tuple[Any, int | None]] = []
    for item in history:
        if isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(x, dict) for x in item):
            out.append((item[0], None))
            out.append((item[1], len(out) - 1))
        else:
            out.append((item, None))
    return out


def looks_like_pair(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 2 and looks_like_event(value[0])


class _EventConverter:
    """Turns OpenHands events into nodes of one ``SessionBuilder`` (module docstring)."""

    def __init__(self, b: SessionBuilder) -> None:
        self.b = b
        self.llm_by_response: dict[str, Call] = {}
        self.owner: dict[str, tuple[Call, dict]] = {}
        self.action_tool: dict[Any, str] = {}  # action event id -> tool_call_id
        self.position_tool: dict[int, str] = {}  # position in the history -> tool_call_id
        self.answered: set[str] = set()
        self.facts: dict[str, Any] = {"first_user": "", "models": {}}

    def attach(self, ev: dict) -> None:
        """Keep an event the model never saw as it is, on the latest node."""
        target = self.b.by_id.get(self.b.head) if self.b.head else None
        if target is None:
            self.facts.setdefault("events_before_first_node", []).append(ev)
        else:
            target.metadata.setdefault("events", []).append(ev)

    def event(self, pos: int, ev: dict, answers: int | None) -> None:
        when = self.b.time(ev.get("timestamp"))
        action, observation = ev.get("action"), ev.get("observation")
        tcm = ev.get("tool_call_metadata") if isinstance(ev.get("tool_call_metadata"), dict) else None
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        src_meta: dict[str, Any] = {"source_event_ids": [ev.get("id")]}
        if ev.get("llm_metrics"):
            src_meta["llm_metrics"] = ev["llm_metrics"]
        if action == "system":
            self.b.add("llm", output=args.get("content") or ev.get("message") or "", created_at=when,
                       metadata={**src_meta, "role": "system", "event": _rest(ev)})
        elif action == "message" and tcm is None:
            self._message(ev, args, src_meta, when)
        elif action is not None and tcm is not None:
            self._function_call(pos, ev, args, tcm, src_meta, when)
        elif isinstance(action, str) and action not in _NOT_MODEL_ACTIONS and ev.get("source") == "agent":
            self._legacy_action(pos, ev, args, src_meta, when)
        elif observation is not None:
            self._observation(ev, tcm, answers, src_meta, when)
        else:
            self.attach(ev)

    def _message(self, ev: dict, args: dict, src_meta: dict, when: float) -> None:
        text = args.get("content") if isinstance(args.get("content"), str) else ev.get("message") or ""
        text = text if isinstance(text, str) else content_text(text)
        if ev.get("source") == "user":
            self.b.add("user", name="user", output=text, created_at=when,
                       metadata={**src_meta, "event": _rest(ev)})
            if not self.facts["first_user"]:
                self.facts["first_user"] = text
        else:
            self.b.add("llm", output=text, created_at=when, metadata={**src_meta, "event": _rest(ev)})

    def _function_call(self, pos: int, ev: dict, args: dict, tcm: dict, src_meta: dict,
                       when: float) -> None:
        """An action the model asked for by function calling: one call of its response's node."""
        resp = tcm.get("model_response") if isinstance(tcm.get("model_response"), dict) else {}
        rid = _key(resp.get("id")) or f"event-{_key(ev.get('id'))}"
        llm = self.llm_by_response.get(rid)
        if llm is None:
            model = resp.get("model") if isinstance(resp.get("model"), str) else ""
            meta = {**src_meta, "tool_calls": [], "model_response": resp}
            usage = _usage(resp.get("usage"))
            if usage:
                meta["usage"] = usage
            text = _response_text(resp) or (args.get("thought") if isinstance(args.get("thought"), str) else "")
            llm = self.b.add("llm", name=model, output=text, created_at=when, metadata=meta)
            self.llm_by_response[rid] = llm
            if model:
                self.facts["models"][model] = self.facts["models"].get(model, 0) + 1
        else:
            llm.metadata["source_event_ids"].append(ev.get("id"))
        tid = _key(tcm.get("tool_call_id")) or f"event-{_key(ev.get('id'))}"
        sent = _response_calls(resp).get(tid)
        tc = {"id": tid, "name": tcm.get("function_name") or (sent or {}).get("name", ""),
              "arguments": sent["arguments"] if sent else dict(args),
              "action": ev.get("action"), "event": _rest(ev, drop=("tool_call_metadata",))}
        self._register(pos, ev, llm, tc)

    def _legacy_action(self, pos: int, ev: dict, args: dict, src_meta: dict, when: float) -> None:
        """An agent action of an older output (no function calling): one response, one call.

        The model wrote its ``thought`` and the action (``<execute_bash>``, ...) as text;
        the thought becomes the llm node's text, the action its one tool call, named by
        its kind (``run``, ``run_ipython``, ``edit``, ``browse``, ``finish``, ...), with
        the other ``args`` as arguments.
        """
        action = ev["action"]
        thought = args.get("thought") if isinstance(args.get("thought"), str) else ""
        tid = f"event-{_key(ev['id'])}" if ev.get("id") is not None else f"position-{pos}"
        llm = self.b.add("llm", output=thought, created_at=when,
                         metadata={**src_meta, "tool_calls": [], "legacy_action": True})
        tc = {"id": tid, "name": action, "arguments": {k: v for k, v in args.items() if k != "thought"},
              "action": action, "event": _rest(ev)}
        self._register(pos, ev, llm, tc)

    def _register(self, pos: int, ev: dict, llm: Call, tc: dict) -> None:
        llm.metadata["tool_calls"].append(tc)
        self.owner[tc["id"]] = (llm, tc)
        if _key(ev.get("id")) is not None:
            self.action_tool[_key(ev.get("id"))] = tc["id"]
        self.position_tool[pos] = tc["id"]

    def _observation(self, ev: dict, tcm: dict | None, answers: int | None, src_meta: dict,
                     when: float) -> None:
        observation = ev.get("observation")
        tid = _key((tcm or {}).get("tool_call_id")) or self.action_tool.get(_key(ev.get("cause")))
        if tid is None and answers is not None:
            tid = self.position_tool.get(answers)
        if tid is not None and tid in self.owner and tid not in self.answered and observation != "null":
            llm, tc = self.owner[tid]
            meta = {**src_meta, "tool_call_id": tid, "observation": observation,
                    "event": _rest(ev, drop=("tool_call_metadata", "content"))}
            if ev.get("success") is False:
                meta["is_error"] = True
            self.b.add("code", name=tc["name"], input=tc["arguments"], output=_text(ev), caller=llm.id,
                       created_at=when, metadata=meta)
            self.answered.add(tid)
        elif tid is None and observation in OBSERVATIONS_SHOWN_AS_MESSAGES and _text(ev).strip():
            meta = {**src_meta, "observation": observation, "is_observation": True,
                    "event": _rest(ev, drop=("tool_call_metadata", "content"))}
            if ev.get("success") is False or observation == "error":
                meta["is_error"] = True
            self.b.add("user", output=_text(ev), created_at=when, metadata=meta)
        else:
            self.attach(ev)

    def finish(self) -> dict[str, Any]:
        """Every call gets its code node: one with no observation gets ``missing_output``."""
        for tid, (llm, tc) in self.owner.items():
            if tid not in self.answered:
                self.b.add("code", name=tc["name"], input=tc["arguments"], output=None, caller=llm.id,
                           metadata={"tool_call_id": tid, "missing_output": True})
        return self.facts


def convert_events(events: list, b: SessionBuilder, path: str, on_error: str,
                   issues: list[Issue], line: int | None = None) -> dict[str, Any]:
    """Append an OpenHands ``history`` (flat events or ``[action, observation]`` pairs) to ``b``.

    ``line``: the ``output.jsonl`` line the history came from, so that errors name it.
    """
    conv = _EventConverter(b)
    for pos, (ev, answers) in enumerate(flatten_history(events)):
        if not isinstance(ev, dict):
            _refuse(path, line, f"event {pos} is {json_type(ev)}, not an object", on_error, issues)
            continue
        if not EVENT_FIELDS.check_record(ev, path=path, line=line, on_error=on_error, issues=issues,
                                         label=f"event {pos}"):
            continue
        try:
            conv.event(pos, ev, answers)
        except (KeyError, TypeError, AttributeError, ValueError):
            # a shape no field of the table describes: still this event only
            _refuse(path, line, f"event {pos}: a field has a type or shape this importer does not read",
                    on_error, issues)
    return conv.finish()


def _refuse(path: str, line: int | None, reason: str, on_error: str, issues: list[Issue],
            action: str = "event skipped") -> None:
    if on_error != "skip":
        raise TranscriptError(path, line, reason)
    issues.append(Issue(path, line, reason, action))


def _key(value: Any) -> Any:
    """An id usable as a dict key (a damaged file may hold a list where an id belongs)."""
    return value if value is None or isinstance(value, (str, int)) else repr(value)


def _text(ev: dict) -> str:
    content = ev.get("content")
    return content if isinstance(content, str) else content_text(content)


def _rest(ev: dict, drop: tuple = ()) -> dict:
    return {k: v for k, v in ev.items() if k not in ("llm_metrics", *drop)}


def parse_openhands(path: str, *, on_error: str = "stop", parsed: Any = None) -> list[ImportedSession]:
    path = str(path)
    issues: list[Issue] = []
    with open(path, "rb") as fh:
        data = fh.read()
    digest = file_digest(data)
    head = data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    instances: list[tuple[list, dict, int | None]] = []
    if parsed is None and head == b"[":
        parsed = load_json(path, on_error=on_error, issues=issues, data=data)
    if isinstance(parsed, list):
        instances.append((parsed, {}, None))
    elif isinstance(parsed, dict) and isinstance(parsed.get("history"), list):
        if OUTPUT_FIELDS.check_record(parsed, path=path, line=None, on_error=on_error, issues=issues,
                                      label="output document"):
            instances.append((parsed["history"], {k: v for k, v in parsed.items() if k != "history"}, None))
    else:
        for jl in iter_jsonl(path, on_error=on_error, issues=issues, data=data):
            hist = jl.value.get("history")
            if hist is None:
                _refuse(path, jl.line, "an OpenHands output line without a history list", on_error, issues,
                        "line skipped")
                continue
            if not OUTPUT_FIELDS.check_record(jl.value, path=path, line=jl.line, on_error=on_error,
                                              issues=issues, label="output line"):
                continue
            instances.append((hist, {k: v for k, v in jl.value.items() if k != "history"}, jl.line))
    if not instances:
        raise TranscriptError(path, None, "no OpenHands events in the file")
    out = []
    for n, (events, container, line) in enumerate(instances):
        b = SessionBuilder(FORMAT, path)
        facts = convert_events(events, b, path, on_error, issues, line=line)
        meta = dict(container)
        if line is not None:
            meta["source_line"] = line
        if facts.get("events_before_first_node"):
            meta["events_before_first_node"] = facts["events_before_first_node"]
        run_meta = container.get("metadata") if isinstance(container.get("metadata"), dict) else {}
        cfg = run_meta.get("llm_config") if isinstance(run_meta.get("llm_config"), dict) else {}
        models = facts["models"]
        named = cfg.get("model") or run_meta.get("model_name")  # model_name: outputs of mid-2024
        model = named if isinstance(named, str) and named else (max(models, key=models.get) if models else "")
        iid = container.get("instance_id")
        sid = f"openhands-{digest}" + (f"-{iid}" if iid else (f"-{n}" if len(instances) > 1 else ""))
        title = str(iid) if iid else (short_title(facts["first_user"]) or Path(path).stem)
        out.append(b.finish(session_id=sid, title=title, model=model, meta=meta, skipped=[]))
    return with_file_issues(out, issues)
