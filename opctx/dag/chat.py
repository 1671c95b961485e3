"""The chat loop: one user turn of LLM <-> tool iterations (spec §0.6).

``chat_turn(user_input, runtime, tools=None, max_iterations=8, *, model=None,
system=None) -> ChatResult``::

    add the user message (unless user_input is None: continue the current turn)
    repeat at most max_iterations times:
        reads = fold_history(head)            # prior turns folded to (user, final llm)
        reply = runtime.exec(reads=reads, tools=<schemas>)
        calls = parse_tool_call(reply)
        no calls  -> return the reply          # stop_reason "final"
        calls     -> run each in order, record a code node per call, loop
    return the last reply + MAX_ITERATIONS_MARKER  # stop_reason "max_iterations"

``ChatResult`` is a :class:`~opctx.dag.providers.Reply` (the final one: its text,
tool calls, usage, model, ``call_id``) with ``stop_reason``, ``iterations``,
``tool_results`` (one :class:`ToolResult` per executed call) and ``total_usage``
(summed over the turn's LLM calls). ``str(result)`` is the final text.

Tools
-----
``tools`` is a dict ``name -> callable`` or a list of callables (named by their
``__agentic__["name"]`` when decorated with ``@agentic_function``, else
``__name__``). The provider receives OpenAI tool schemas derived from each
signature (:func:`tool_schema`): annotations give JSON types (``str``, ``int``,
``float``, ``bool``, ``list[X]``, ``dict``, ``Literal[...]`` as ``enum``,
``X | None`` as X), parameters without default are ``required``, the docstring's
first paragraph is the description; a parameter named ``runtime``, ``*args``
and ``**kwargs`` are left out. ``tool.tool_schema`` (a dict), when a callable
carries one, wins.

Choices where the specification is open
---------------------------------------
* **Every tool call gets a result node**, even on the last allowed iteration,
  so the DAG never holds a tool call without its answer; the loop stops after
  ``max_iterations`` LLM calls with ``stop_reason="max_iterations"`` and the
  text ending in ``MAX_ITERATIONS_MARKER``.
* **Failures are results, not crashes.** An unknown tool, arguments that do not
  fit the signature, and a tool that raises are recorded as a code node with
  ``is_error=True`` and output ``"<Type>: <message>"``; the model reads it on the
  next iteration. Provider errors do propagate: there is no answer to record.
* **Native and text tool calls.** Native calls (``Reply.tool_calls``) are
  recorded in the llm node's ``metadata.tool_calls`` and answered by code nodes
  with ``tool_call_id``: they render as an OpenAI tool exchange. A call parsed
  out of the text (a model without native tools) keeps the text as the
  assistant message, is noted in ``metadata.text_tool_calls``, and its result
  node has no ``tool_call_id``: it renders as ``name(args) -> result`` in a
  user message, the same protocol the model used.
* **Tool code runs inside the DAG**: ``_call_id`` is the llm node that asked
  for the call, and, when no DAG is installed, the runtime's graph/store are
  installed for the call, so an ``@agentic_function`` tool records its frame
  below that llm node. Async tools are run with ``asyncio.run`` (a running
  event loop is reported as the tool's error).
* **No tools, no text parsing.** With no tools registered, JSON in the
  reply's text is never taken for a call (a final answer may quote JSON);
  native tool calls are still answered (as unknown tools).
* ``runtime`` is a ``DagRuntime``, or a ``DagSession`` whose ``runtime`` slot
  holds one (see ``DagRuntime.for_session``).
* **Folded reads keep system nodes.** ``fold_history`` keeps (user, final llm)
  of earlier turns and every system-role node on the chain (the compaction
  summary), in chain order, since dropping it would lose the whole folded past.
* Results are recorded JSON-safe (see ``runtime.json_safe``).

``parse_tool_call(text_or_reply) -> list[ToolCall]`` (empty: no tool call)
accepts: a Reply with native tool calls (all of them, in order; they win over
the text); bare JSON; a fenced block (```` ```json ```` or plain ```` ``` ````);
JSON embedded in prose. A JSON object is a tool call when it has a string
``"tool"`` (``"arguments"`` optional), a string ``"call"`` naming a tool
(OpenProgram's own text format ``{"call": "name", "args": {...}}``, ``"args"``
optional; the name must look like one: letters, digits and ``_ . - : /``, no
spaces, so ``{"call": "see you at 5"}`` stays text) or a string ``"name"`` together with
``"arguments"`` (``"args"``, ``"parameters"`` and ``"input"`` are accepted as
synonyms); ``{"function": {"name", "arguments"}}`` and ``{"tool_call": {...}}``
wrappers and a JSON array of calls are accepted too. String arguments are
decoded as JSON (``{"_raw": text}`` when they are not an object). The first
fenced block or embedded object that is a tool call wins. A reply without text
(``Reply(text=None)``, as OpenAI-style providers return beside native calls) has
no text calls; JSON nested too deep to decode is not a call; after 1,000 fragments
that fail to decode the rest of a text is not searched (a hostile text of broken
JSON would otherwise take minutes).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import re
import types
import typing
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .agentic import _call_id, _graph, use_store
from .nodes import Call, fold_history
from .providers import Reply, ToolCall, Usage, parse_arguments
from .runtime import json_safe

__all__ = [
    "chat_turn",
    "parse_tool_call",
    "tool_schema",
    "ToolRegistry",
    "ToolResult",
    "ChatResult",
    "MAX_ITERATIONS_MARKER",
    "turn_reads",
]

MAX_ITERATIONS_MARKER = "[stopped: max_iterations reached]"

_ARG_KEYS = ("arguments", "args", "parameters", "input")
# a tool name as OpenProgram's {"call": ...} format spells it: one word, no spaces
_CALL_NAME = re.compile(r"[A-Za-z_][\w.:/-]*")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)


# -- parsing -------------------------------------------------------------------------


def _as_call(obj: Any) -> ToolCall | None:
    if not isinstance(obj, dict):
        return None
    for wrapper in ("tool_call", "function_call"):
        if isinstance(obj.get(wrapper), dict):
            return _as_call(obj[wrapper])
    if isinstance(obj.get("function"), dict) and isinstance(obj["function"].get("name"), str):
        fn = obj["function"]
        return ToolCall(
            id=str(obj.get("id") or _text_call_id()),
            name=fn["name"],
            arguments=parse_arguments(fn.get("arguments")),
        )
    args_key = next((k for k in _ARG_KEYS if k in obj), None)
    tool = obj.get("tool")
    called = obj.get("call")
    if isinstance(tool, str) and tool.strip():
        name = tool.strip()
    elif isinstance(called, str) and _CALL_NAME.fullmatch(called.strip()):
        name = called.strip()
    elif isinstance(obj.get("name"), str) and obj["name"].strip() and args_key is not None:
        name = obj["name"].strip()
    else:
        return None
    args = obj.get(args_key) if args_key is not None else None
    return ToolCall(id=str(obj.get("id") or _text_call_id()), name=name, arguments=parse_arguments(args))


def _calls_from_json(value: Any) -> list[ToolCall]:
    if isinstance(value, list):
        calls = [_as_call(v) for v in value]
        return [c for c in calls if c is not None] if calls and all(calls) else []
    call = _as_call(value)
    return [call] if call is not None else []


def _text_call_id() -> str:
    return f"txt_{uuid.uuid4().hex[:12]}"


# where an embedded call can start: an object (``{`` then a key or ``}``), or an array
# whose first item is one (an array of anything else is never a list of calls)
_JSON_START = re.compile(r'\{\s*["}]|\[\s*\{\s*["}]')
# how much of the text one decode attempt sees first (then 16 times more, then all):
# a failed decode reports its line and column, counted from the start of what it was
# given, so attempts on the whole of a long text would cost time quadratic in its length
_DECODE_WINDOWS = (4_096, 65_536)
# failed decode attempts after which the rest of a text is not searched: a model's reply
# holds a few broken JSON fragments at most, a hostile text can hold a million, each
# costing up to a deep parse
_MAX_FAILED_DECODES = 1_000


def _decode_at(decoder: json.JSONDecoder, text: str, j: int) -> tuple[Any, int] | None:
    """The JSON value starting at ``text[j]`` and where it ends, or None."""
    for window in (*_DECODE_WINDOWS, None):
        piece = text[j:] if window is None or j + window >= len(text) else text[j : j + window]
        try:
            value, end = decoder.raw_decode(piece)
        except RecursionError:  # nested too deep to be a call
            return None
        except json.JSONDecodeError as exc:
            if piece is text or j + len(piece) >= len(text) or exc.pos < len(piece) - 1:
                return None  # a real error, not the end of the window
            continue
        return value, j + end
    return None


def _embedded_json(text: str) -> Iterable[Any]:
    """Every JSON object, and array of objects, that starts in ``text``, left to right."""
    decoder = json.JSONDecoder()
    i = 0
    failed = 0
    while failed < _MAX_FAILED_DECODES:
        found = _JSON_START.search(text, i)
        if found is None:
            return
        j = found.start()
        decoded = _decode_at(decoder, text, j)
        if decoded is None:
            failed += 1
            i = j + 1
            continue
        value, i = decoded
        yield value


def parse_tool_call(text_or_reply: str | Reply | None) -> list[ToolCall]:
    """The tool calls expressed by a reply or a text; ``[]`` when there are none."""
    if text_or_reply is None:
        return []
    if isinstance(text_or_reply, Reply):
        if text_or_reply.tool_calls:
            return list(text_or_reply.tool_calls)
        text = text_or_reply.text if isinstance(text_or_reply.text, str) else ""
    elif isinstance(text_or_reply, str):
        text = text_or_reply
    else:
        raise TypeError(f"parse_tool_call takes a str or Reply, got {type(text_or_reply).__name__}")
    stripped = text.strip()
    if not stripped:
        return []
    try:
        calls = _calls_from_json(json.loads(stripped))
    except (ValueError, RecursionError):
        calls = []
    if calls:
        return calls
    for match in _FENCE.finditer(text):
        try:
            calls = _calls_from_json(json.loads(match.group(2)))
        except (ValueError, RecursionError):
            calls = []
        if calls:
            return calls
    for value in _embedded_json(text):
        calls = _calls_from_json(value)
        if calls:
            return calls
    return []


# -- tool schemas ----------------------------------------------------------------------

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    set: "array",
    dict: "object",
}


def _json_type(annotation: Any) -> dict[str, Any]:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return _json_type(non_none[0])
        options = [_json_type(a) for a in non_none]
        return {"anyOf": options} if all(options) else {}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set):
        out: dict[str, Any] = {"type": "array"}
        if args and args[0] is not Ellipsis:
            item = _json_type(args[0])
            if item:
                out["items"] = item
        return out
    if origin is dict or annotation is dict:
        return {"type": "object"}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    return {}


def _description(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n", 1)[0].strip()


def _target(fn: Callable[..., Any]) -> Callable[..., Any]:
    return getattr(fn, "__wrapped__", fn)


def tool_name(fn: Callable[..., Any]) -> str:
    agentic = getattr(fn, "__agentic__", None)
    if isinstance(agentic, dict) and agentic.get("name"):
        return agentic["name"]
    name = getattr(fn, "__name__", None)
    if not name:
        raise ValueError(f"cannot name tool {fn!r}: pass tools as a dict name -> callable")
    return name


def tool_schema(fn: Callable[..., Any], name: str | None = None) -> dict[str, Any]:
    """The OpenAI tool schema of a callable; see the module docstring."""
    custom = getattr(fn, "tool_schema", None)
    if isinstance(custom, dict):
        return custom
    target = _target(fn)
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # noqa: BLE001 - unresolvable forward refs: fall back to raw annotations
        hints = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(target).parameters.items():
        if pname in ("runtime", "self", "cls") or param.kind in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            continue
        prop = _json_type(hints.get(pname, param.annotation))
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        elif param.default is None or isinstance(param.default, str | int | float | bool):
            prop["default"] = param.default
        properties[pname] = prop
    return {
        "type": "function",
        "function": {
            "name": name or tool_name(fn),
            "description": _description(target),
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


class ToolRegistry:
    """Tools by name, with their schemas and a runner that turns failures into error results."""

    def __init__(self, tools: dict[str, Callable[..., Any]] | Iterable[Callable[..., Any]] | None):
        self.tools: dict[str, Callable[..., Any]] = {}
        if tools is None:
            return
        items = tools.items() if isinstance(tools, dict) else ((tool_name(f), f) for f in tools)
        for name, fn in items:
            if not callable(fn):
                raise TypeError(f"tool {name!r} is not callable: {fn!r}")
            if name in self.tools:
                raise ValueError(f"two tools are named {name!r}")
            self.tools[name] = fn

    def schemas(self) -> list[dict]:
        return [tool_schema(fn, name) for name, fn in self.tools.items()]

    def run(self, call: ToolCall) -> tuple[Any, bool]:
        """``(result, is_error)``; never raises for a failure of the tool or of its arguments."""
        fn = self.tools.get(call.name)
        if fn is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return f"UnknownTool: no tool named {call.name!r} (available: {known})", True
        if set(call.arguments) == {"_raw"}:
            return f"InvalidArguments: arguments are not a JSON object: {call.arguments['_raw']!r}", True
        try:
            inspect.signature(_target(fn)).bind(**call.arguments)
        except TypeError as exc:
            return f"InvalidArguments: {exc}", True
        except ValueError:
            pass  # no inspectable signature (a builtin): let the call itself decide
        try:
            result = fn(**call.arguments)
            if inspect.isawaitable(result):
                result = _run_awaitable(result)
        except Exception as exc:  # noqa: BLE001 - a tool failure is a result the model must see
            return f"{type(exc).__name__}: {exc}", True
        return json_safe(result), False


def _run_awaitable(awaitable: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        raise RuntimeError("an async tool cannot run from inside a running event loop")

    async def wait() -> Any:
        return await awaitable

    return asyncio.run(wait())


# -- the loop --------------------------------------------------------------------------


@dataclass
class ToolResult:
    """One executed tool call of a turn."""

    call: ToolCall
    result: Any
    is_error: bool
    node_id: str


@dataclass
class ChatResult(Reply):
    """The final Reply of a turn plus how the turn went; see the module docstring."""

    stop_reason: str = "final"
    iterations: int = 0
    tool_results: list[ToolResult] = field(default_factory=list)
    total_usage: Usage | None = None

    @property
    def hit_limit(self) -> bool:
        return self.stop_reason == "max_iterations"


def turn_reads(runtime: Any) -> list[str]:
    """The reads of the next LLM call of the turn: ``fold_history`` of the head.

    ``fold_history`` keeps system-role nodes of the chain (a compaction summary) in
    chain order, so the folded past stays in the prompt.
    """
    if runtime.head is None:
        return []
    return [n.id for n in fold_history(runtime.head, runtime.graph)]


def chat_turn(
    user_input: Any,
    runtime: Any,
    tools: dict[str, Callable[..., Any]] | Iterable[Callable[..., Any]] | None = None,
    max_iterations: int = 8,
    *,
    model: str | None = None,
    system: str | None = None,
) -> ChatResult:
    """Run one user turn through ``runtime`` (a ``DagRuntime`` or a ``DagSession``); see the module docstring."""
    if max_iterations < 1:
        raise ValueError(f"max_iterations must be >= 1, got {max_iterations}")
    if not callable(getattr(runtime, "exec", None)) and hasattr(runtime, "runtime"):
        runtime = runtime.runtime  # a DagSession: drive its DagRuntime
    registry = ToolRegistry(tools)
    schemas = registry.schemas() or None
    if user_input is not None:
        runtime.add_user_message(user_input)
    executed: list[ToolResult] = []
    total: Usage | None = None
    reply: Reply | None = None
    for iteration in range(1, max_iterations + 1):
        reply = runtime.exec(reads=turn_reads(runtime), model=model, system=system, tools=schemas)
        if reply.usage is not None:
            total = reply.usage if total is None else total + reply.usage
        # Without tools there is nothing to call: JSON in the text is just text.
        calls = parse_tool_call(reply) if registry.tools or reply.tool_calls else []
        if not calls:
            return _result(reply, "final", iteration, executed, total)
        native = bool(reply.tool_calls)
        if not native and reply.call_id is not None:
            runtime.annotate(reply.call_id, text_tool_calls=[c.to_dict() for c in calls])
        for call in calls:
            result, is_error = _run_in_dag(registry, call, runtime, reply.call_id)
            node: Call = runtime.record_function_call(
                call.name,
                json_safe(call.arguments),
                reply.call_id,
                result,
                tool_call_id=call.id if native else None,
                is_error=is_error,
            )
            executed.append(ToolResult(call, result, is_error, node.id))
    assert reply is not None
    limited = _result(reply, "max_iterations", max_iterations, executed, total)
    limited.text = f"{reply.text}\n{MAX_ITERATIONS_MARKER}" if reply.text else MAX_ITERATIONS_MARKER
    return limited


def _run_in_dag(registry: ToolRegistry, call: ToolCall, runtime: Any, llm_id: str | None) -> tuple[Any, bool]:
    with contextlib.ExitStack() as stack:
        if _graph.get() is None:
            stack.enter_context(use_store(getattr(runtime, "store", None), runtime.graph))
        token = _call_id.set(llm_id)
        try:
            return registry.run(call)
        finally:
            _call_id.reset(token)


def _result(
    reply: Reply, stop: str, iterations: int, executed: list[ToolResult], total: Usage | None
) -> ChatResult:
    return ChatResult(
        text=reply.text if isinstance(reply.text, str) else "",  # Reply(text=None): no text
        tool_calls=list(reply.tool_calls),
        usage=reply.usage,
        model=reply.model,
        raw=reply.raw,
        call_id=reply.call_id,
        stop_reason=stop,
        iterations=iterations,
        tool_results=list(executed),
        total_usage=total,
    )
