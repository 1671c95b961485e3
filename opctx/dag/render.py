"""Render the nodes an LLM call reads into OpenAI chat-completions messages.

``render_dag_messages(reads, graph)`` turns a ``reads`` list (node ids or
``Call`` objects, in the order given, duplicates dropped) into the ``messages``
of a provider call (spec §0.5-§0.7). A node gives one message or none; tool
answers are moved to follow the assistant message that made the call; an llm
node made by an agentic ``Runtime.exec`` (its prompt recorded in
``input["content"]``) gives the prompt (user) and then the answer (assistant).

Mapping
-------
=========================================  ====================================================
user node                                  ``{"role": "user", "content": text}`` (none if empty)
llm node, ``metadata.role == "system"``    ``{"role": "system", "content": text}``
llm node                                   ``{"role": "assistant", "content": text|None,
                                           "tool_calls": [{"id", "type": "function",
                                           "function": {"name", "arguments": json}}]}``
llm node with no text and no tool calls    nothing: a placeholder is never rendered
code node with ``metadata.tool_call_id``   ``{"role": "tool", "tool_call_id", "content"}``,
whose call is rendered                     placed right after the assistant message that made
                                           the call (OpenAI requires it), in call order
other code node (agentic function)         ``{"role": "user", "content": doc + "\\n" +
                                           "name(args)" + "\\n-> " + output}``
=========================================  ====================================================

Choices where the specification is open
---------------------------------------
* **Agentic function nodes render as user messages.** They are context the
  caller supplies (what this function is for, with which arguments, what it
  returned), not something the model said; rendering them as assistant text
  would put words in the model's mouth. The docstring comes first so that a
  function's own LLM calls read "what am I for" before "what was I given"
  (§0.7). A running node (``metadata.status == "running"``, the frame being
  executed) renders its header only; an errored one renders ``-> error: ...``.
  Arguments render as ``name(key=<json>, ...)``.
* **Tool pairing is repaired, never broken.** A provider rejects an assistant
  ``tool_calls`` entry without its ``tool`` answer, and a ``tool`` message
  without its call. So:

  - a tool call whose result is not in ``reads`` is dropped from its
    assistant message; if that leaves the message with no text and no calls,
    it becomes a short text naming the calls (``[called name(args); result
    not in context]``), so the model still knows what it did;
  - a tool result whose call is not rendered becomes a user message
    ``[result of tool <name> (call <id>)]`` followed by the output: the
    information stays visible, the protocol stays valid;
  - an answer pairs with the nearest preceding assistant message that made a
    still-unanswered call with its id (so ids reused across exchanges, as
    some providers and scripted fakes do, pair correctly); a second answer for
    an already answered call is unmatched.
* Tool results flagged ``is_error`` are prefixed ``[error] `` (unless the text
  already says so) because the OpenAI message format has no error flag.
* Anthropic-shaped tool traffic from imported transcripts is read too: an llm
  node's ``metadata.extra.blocks`` ``tool_use`` blocks count as its tool calls,
  and a user node that is a tool-result wrapper (empty text, ``tool_result``
  blocks) yields one tool answer per block.
* Nothing is escaped: these are prompts for a model, not HTML. The viz layer
  escapes when it renders to a page.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .messages import as_text
from .nodes import Call, Graph
from .providers import arguments_to_json, recorded_tool_calls

__all__ = [
    "render_dag_messages",
    "resolve_reads",
    "function_header",
    "format_arguments",
    "UNMATCHED_CALL_NOTE",
    "ORPHAN_RESULT_PREFIX",
]

UNMATCHED_CALL_NOTE = "result not in context"
ORPHAN_RESULT_PREFIX = "[result of tool"


def resolve_reads(reads: Iterable[str | Call], graph: Graph | None) -> list[Call]:
    """``reads`` as Calls: ids looked up in ``graph``, Calls taken as given; first occurrence wins."""
    out: list[Call] = []
    seen: set[str] = set()
    for item in reads:
        if isinstance(item, Call):
            node = item
        elif isinstance(item, str):
            node = graph.get(item) if graph is not None else None
            if node is None:
                raise KeyError(f"render_dag_messages: read {item!r} is not a node of the graph")
        else:
            raise TypeError(f"reads holds node ids or Calls, got {type(item).__name__}")
        if node.id not in seen:
            seen.add(node.id)
            out.append(node)
    return out


def format_arguments(arguments: Any) -> str:
    """``key=<json>, ...`` for a dict; the JSON / text of anything else."""
    if arguments is None:
        return ""
    if isinstance(arguments, dict):
        return ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in arguments.items()
        )
    return as_text(arguments)


def function_header(node: Call) -> str:
    """Docstring (if any) then ``name(args)``: what a function node is and how it was called."""
    call_line = f"{node.name or 'function'}({format_arguments(node.input)})"
    doc = node.metadata.get("doc")
    if isinstance(doc, str) and doc.strip():
        return f"{doc.strip()}\n{call_line}"
    return call_line


def _function_message(node: Call) -> dict:
    text = function_header(node)
    status = node.metadata.get("status")
    if status == "running":
        return {"role": "user", "content": text}
    out = node.output
    if status == "error" or node.metadata.get("is_error"):
        err = out.get("error") if isinstance(out, dict) and "error" in out else out
        return {"role": "user", "content": f"{text}\n-> error: {as_text(err)}"}
    return {"role": "user", "content": f"{text}\n-> {as_text(out)}"}


def _tool_text(node: Call, output: Any) -> str:
    text = as_text(output)
    if node.metadata.get("status") == "running" and output is None:
        return "[running]"
    if node.metadata.get("is_error") and not text.lower().startswith(("[error]", "error")):
        return f"[error] {text}"
    return text


def _wrapper_results(node: Call) -> list[tuple[str, Any, bool]]:
    """``(tool_use_id, content, is_error)`` of an imported tool-result wrapper, else []."""
    if node.output not in (None, "") and as_text(node.output).strip():
        return []
    extra = node.metadata.get("extra")
    blocks = extra.get("blocks") if isinstance(extra, dict) else None
    out = []
    for b in blocks or ():
        if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id"):
            content = b.get("content")
            if isinstance(content, list):
                content = "\n".join(
                    as_text(x.get("text")) for x in content if isinstance(x, dict)
                )
            out.append((str(b["tool_use_id"]), content, bool(b.get("is_error"))))
    return out


class _Result:
    """One tool answer: from a code node or from a block of a tool-result wrapper."""

    __slots__ = ("call_id", "name", "content")

    def __init__(self, call_id: str, name: str, content: str) -> None:
        self.call_id = call_id
        self.name = name
        self.content = content


def _answers(node: Call) -> list[_Result]:
    """The tool answers a node carries (none for most nodes)."""
    if node.role == "code":
        tcid = node.metadata.get("tool_call_id")
        if tcid:
            return [_Result(str(tcid), node.name, _tool_text(node, node.output))]
    elif node.role == "user":
        return [
            _Result(call_id, "", f"[error] {as_text(content)}" if is_error else as_text(content))
            for call_id, content, is_error in _wrapper_results(node)
        ]
    return []


def _unique_calls(node: Call) -> list[dict]:
    seen: set[str] = set()
    out = []
    for tc in recorded_tool_calls(node):
        if tc["id"] not in seen:  # a repeated id inside one message cannot be answered twice
            seen.add(tc["id"])
            out.append(tc)
    return out


def render_dag_messages(reads: Iterable[str | Call], graph: Graph | None) -> list[dict]:
    """The OpenAI-format messages for ``reads``; see the module docstring for every rule."""
    nodes = resolve_reads(reads, graph)

    # Pair answers with calls by position: an answer goes to the nearest preceding
    # assistant message that made a still-unanswered call with its id. Anything
    # left over is rendered as text at its own place.
    calls_of: dict[int, list[dict]] = {}
    open_calls: dict[str, list[int]] = {}
    answer_of: dict[tuple[int, str], _Result] = {}
    orphans_at: dict[int, list[_Result]] = {}
    for i, node in enumerate(nodes):
        if node.role == "llm" and node.metadata.get("role") != "system":
            calls_of[i] = _unique_calls(node)
            for tc in calls_of[i]:
                open_calls.setdefault(tc["id"], []).append(i)
        for res in _answers(node):
            owners = open_calls.get(res.call_id)
            if owners:
                answer_of[(owners.pop(), res.call_id)] = res
            else:
                orphans_at.setdefault(i, []).append(res)

    messages: list[dict] = []
    for i, node in enumerate(nodes):
        if node.role == "llm":
            messages.extend(_llm_messages(node, i, calls_of.get(i, []), answer_of))
            continue
        if i in orphans_at or _answers(node):
            messages.extend(_orphan_message(res) for res in orphans_at.get(i, ()))
            continue  # a tool answer renders with its call, or here as text
        if node.role == "user":
            text = as_text(node.output)
            if text.strip():
                messages.append({"role": "user", "content": text})
        else:
            messages.append(_function_message(node))
    return messages


def _orphan_message(res: _Result) -> dict:
    label = f" {res.name}" if res.name else ""
    return {
        "role": "user",
        "content": f"{ORPHAN_RESULT_PREFIX}{label} (call {res.call_id})]\n{res.content}",
    }


def _llm_messages(
    node: Call,
    index: int,
    calls: list[dict],
    answer_of: dict[tuple[int, str], _Result],
) -> list[dict]:
    text = as_text(node.output)
    if node.metadata.get("role") == "system":
        return [{"role": "system", "content": text}] if text.strip() else []
    if not text and not calls:
        return []  # placeholder: never an empty message (docs/design.md)
    out: list[dict] = []
    prompt = node.input.get("content") if isinstance(node.input, dict) else None
    if prompt not in (None, ""):
        out.append({"role": "user", "content": as_text(prompt)})
    kept = [tc for tc in calls if (index, tc["id"]) in answer_of]
    dropped = [tc for tc in calls if (index, tc["id"]) not in answer_of]
    msg: dict[str, Any] = {"role": "assistant", "content": text or None}
    if kept:
        msg["tool_calls"] = [
            {
                "id": tc["id"],
                "type": "function",
                "function": {"name": tc["name"], "arguments": arguments_to_json(tc["arguments"])},
            }
            for tc in kept
        ]
    elif not text:
        notes = "; ".join(f"{tc['name']}({format_arguments(tc['arguments'])})" for tc in dropped)
        msg["content"] = f"[called {notes}; {UNMATCHED_CALL_NOTE}]"
    out.append(msg)
    for tc in kept:
        out.append(
            {"role": "tool", "tool_call_id": tc["id"], "content": answer_of[(index, tc["id"])].content}
        )
    return out
