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
  ``metadata.observation`` = its kind, ``event`` kept). OpenHands' conversation memory
  sends exactly these as ``user`` messages, so the next llm node ``reads`` them: leaving
  them out would hide from a replay what the model was told.
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
from .message_lists import _usage, file_digest

__all__ = ["FORMAT", "OBSERVATIONS_SHOWN_AS_MESSAGES", "parse_openhands", "looks_like_event",
           "convert_events"]

FORMAT = "openhands"
# Observation kinds that OpenHands' conversation memory turns into a message for the model
# (a tool message when they answer a tool call, else a user message). Not in this set:
# "null", "agent_state_changed", "recall" (rendered from extras by a template), "success".
OBSERVATIONS_SHOWN_AS_MESSAGES = frozenset({
    "run", "run_ipython", "read", "write", "edit", "browse", "error", "user_rejected",
    "think", "delegate", "condense", "mcp", "download",
})


def looks_like_event(value: Any) -> bool:
    return isinstance(value, dict) and "source" in value and ("action" in value or "observation" in value)


def _response_calls(resp: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for choice in resp.get("choices") or ():
        msg = choice.get("message") if isinstance(choice, dict) else None
        for tc in (msg or {}).get("tool_calls") or ():
            fn = tc.get("function") or {}
            out[tc.get("id")] = {"name": fn.get("name", ""), "arguments": parse_arguments(fn.get("arguments"))}
    return out


def _response_text(resp: dict) -> str:
    for choice in resp.get("choices") or ():
        msg = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(msg, dict) and msg.get("content"):
            return content_text(msg["content"])
    return ""


def convert_events(events: list, b: SessionBuilder, path: str, on_error: str,
                   issues: list[Issue]) -> dict[str, Any]:
    llm_by_response: dict[str, Call] = {}
    owner: dict[str, tuple[Call, dict]] = {}
    action_tool: dict[Any, str] = {}  # action event id -> tool_call_id
    answered: set[str] = set()
    facts: dict[str, Any] = {"first_user": "", "models": {}}

    def attach(ev: dict) -> None:
        target = b.by_id.get(b.head) if b.head else None
        if target is None:
            facts.setdefault("events_before_first_node", []).append(ev)
        else:
            target.metadata.setdefault("events", []).append(ev)

    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            reason = f"event {i} is not an object"
            if on_error != "skip":
                raise TranscriptError(path, None, reason)
            issues.append(Issue(path, None, reason, "event skipped"))
            continue
        when = b.time(ev.get("timestamp"))
        action, observation = ev.get("action"), ev.get("observation")
        tcm = ev.get("tool_call_metadata") if isinstance(ev.get("tool_call_metadata"), dict) else None
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        src_meta = {"source_event_ids": [ev.get("id")]}
        if ev.get("llm_metrics"):
            src_meta["llm_metrics"] = ev["llm_metrics"]
        if action == "system":
            b.add("llm", output=args.get("content") or ev.get("message") or "", created_at=when,
                  metadata={**src_meta, "role": "system", "event": _rest(ev)})
        elif action == "message" and tcm is None:
            text = args.get("content") if isinstance(args.get("content"), str) else ev.get("message") or ""
            if ev.get("source") == "user":
                b.add("user", name="user", output=text, created_at=when,
                      metadata={**src_meta, "event": _rest(ev)})
                if not facts["first_user"]:
                    facts["first_user"] = text
            else:
                b.add("llm", output=text, created_at=when, metadata={**src_meta, "event": _rest(ev)})
        elif action is not None and tcm is not None:
            resp = tcm.get("model_response") if isinstance(tcm.get("model_response"), dict) else {}
            rid = resp.get("id") or f"event-{ev.get('id')}"
            llm = llm_by_response.get(rid)
            if llm is None:
                model = resp.get("model") or ""
                meta = {**src_meta, "tool_calls": [], "model_response": resp}
                usage = _usage(resp.get("usage"))
                if usage:
                    meta["usage"] = usage
                text = _response_text(resp) or (args.get("thought") if isinstance(args.get("thought"), str) else "")
                llm = b.add("llm", name=model, output=text, created_at=when, metadata=meta)
                llm_by_response[rid] = llm
                if model:
                    facts["models"][model] = facts["models"].get(model, 0) + 1
            else:
                llm.metadata["source_event_ids"].append(ev.get("id"))
            tid = tcm.get("tool_call_id") or f"event-{ev.get('id')}"
            sent = _response_calls(resp).get(tid)
            tc = {"id": tid, "name": tcm.get("function_name") or (sent or {}).get("name", ""),
                  "arguments": sent["arguments"] if sent else dict(args),
                  "action": action, "event": _rest(ev, drop=("tool_call_metadata",))}
            llm.metadata["tool_calls"].append(tc)
            owner[tid] = (llm, tc)
            action_tool[ev.get("id")] = tid
        elif observation is not None:
            tid = (tcm or {}).get("tool_call_id") or action_tool.get(ev.get("cause"))
            if tid is not None and tid in owner and tid not in answered:
                llm, tc = owner[tid]
                out = _text(ev)
                meta = {**src_meta, "tool_call_id": tid, "observation": observation,
                        "event": _rest(ev, drop=("tool_call_metadata", "content"))}
                if ev.get("success") is False:
                    meta["is_error"] = True
                b.add("code", name=tc["name"], input=tc["arguments"], output=out, caller=llm.id,
                      created_at=when, metadata=meta)
                answered.add(tid)
            elif tid is None and observation in OBSERVATIONS_SHOWN_AS_MESSAGES and _text(ev).strip():
                meta = {**src_meta, "observation": observation,
                        "event": _rest(ev, drop=("tool_call_metadata", "content"))}
                if ev.get("success") is False or observation == "error":
                    meta["is_error"] = True
                b.add("user", output=_text(ev), created_at=when, metadata=meta)
            else:
                attach(ev)
        else:
            attach(ev)
    for tid, (llm, tc) in owner.items():
        if tid not in answered:
            b.add("code", name=tc["name"], input=tc["arguments"], output=None, caller=llm.id,
                  metadata={"tool_call_id": tid, "missing_output": True})
    return facts


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
        instances.append((parsed["history"], {k: v for k, v in parsed.items() if k != "history"}, None))
    else:
        for jl in iter_jsonl(path, on_error=on_error, issues=issues, data=data):
            hist = jl.value.get("history")
            if not isinstance(hist, list):
                reason = "an OpenHands output line without a history list"
                if on_error != "skip":
                    raise TranscriptError(path, jl.line, reason)
                issues.append(Issue(path, jl.line, reason, "line skipped"))
                continue
            instances.append((hist, {k: v for k, v in jl.value.items() if k != "history"}, jl.line))
    if not instances:
        raise TranscriptError(path, None, "no OpenHands events in the file")
    out = []
    for n, (events, container, line) in enumerate(instances):
        b = SessionBuilder(FORMAT, path)
        facts = convert_events(events, b, path if line is None else f"{path}:{line}", on_error, issues)
        meta = dict(container)
        if line is not None:
            meta["source_line"] = line
        if facts.get("events_before_first_node"):
            meta["events_before_first_node"] = facts["events_before_first_node"]
        cfg = (container.get("metadata") or {}).get("llm_config") if isinstance(container.get("metadata"), dict) else None
        models = facts["models"]
        model = (cfg or {}).get("model") or (max(models, key=models.get) if models else "")
        iid = container.get("instance_id")
        sid = f"openhands-{digest}" + (f"-{iid}" if iid else (f"-{n}" if len(instances) > 1 else ""))
        title = str(iid) if iid else (short_title(facts["first_user"]) or Path(path).stem)
        out.append(b.finish(session_id=sid, title=title, model=model, meta=meta,
                            skipped=issues if n == 0 else []))
    return out
