"""LLM providers: one calling convention, a scripted fake, a replayer and an OpenAI-compatible client.

The calling convention
----------------------
Every provider is a callable ``provider_call(messages, model, system, tools) -> Reply``:

``messages``
    OpenAI chat-completions message dicts (``{"role": "user", "content": ...}``,
    assistant messages with ``tool_calls``, ``role="tool"`` results), as produced
    by :func:`opctx.dag.render.render_dag_messages`.
``model``
    the model id (``""`` lets the provider pick its default).
``system``
    the system prompt, kept out of ``messages`` so that a provider can place it
    where its API wants it; ``None`` means none.
``tools``
    OpenAI tool schemas (``{"type": "function", "function": {...}}``) or ``None``.

Callers always pass these four arguments positionally, so a plain function
``def call(messages, model, system, tools)`` is a provider. :class:`ProviderCall`
is the matching ``Protocol`` for type checkers. :func:`as_reply` coerces what a
plain callable returns (``str``, a ``dict`` or a :class:`Reply`) into a ``Reply``,
so quick fakes can return bare text.

Value types
-----------
:class:`Usage` counts tokens. ``input_tokens`` is the WHOLE prompt as the
provider counted it, cached tokens included (OpenAI's ``prompt_tokens``);
``cache_read_tokens`` / ``cache_write_tokens`` are the parts of it served from /
written to the prompt cache. One convention for every provider means the usage
tracker can compare a prompt count with its own estimate of the whole prompt
(the hybrid estimate of docs/design.md) without knowing where the number came from.
Anthropic-style counts (input excluding cache) are normalised by the adapter
that reads them, never downstream.

:class:`ToolCall` carries ``arguments`` as a ``dict``. A model that emits
arguments which are not a JSON object keeps them, unparsed, as
``{"_raw": "<text>"}``: nothing the model said is lost and the tool runner can
report a precise error back to the model.

Providers
---------
:class:`ScriptedProvider`
    answers from a list (or a function), records every call in ``.calls``; the
    fake used by tests and notebooks. Running out of script raises
    :class:`ScriptExhausted` naming the call number and the last message, not an
    ``IndexError``.
:class:`ReplayProvider`
    answers with the assistant outputs recorded in a session (its llm nodes in
    ``seq`` order: text, recorded tool calls, recorded usage), so a recorded
    history can be driven through ``chat_turn`` again.
:class:`OpenAICompatProvider`
    any ``/v1/chat/completions`` server through the ``openai`` package (the
    ``openai`` extra, imported lazily). The client is built with
    ``max_retries=0``: retrying is ours, so that it is visible and testable
    (exponential backoff with an injectable ``sleep``, ``Retry-After`` honoured
    up to ``max_backoff``). Retried: HTTP 408, 409, 429, 5xx, timeouts and
    connection failures. Any other 4xx raises :class:`ProviderHTTPError` at once,
    naming the status and the server's own message.

Errors
------
``ProviderError`` is the base of everything a provider raises on purpose:
``ProviderConfigError`` (missing ``openai`` package, bad arguments),
``ScriptExhausted``, ``ProviderHTTPError`` (``.status``, ``.server_message``),
``ProviderTimeoutError``, ``ProviderConnectionError`` and
``ProviderResponseError`` (a 200 that is not a chat completion).
"""

from __future__ import annotations

import copy
import json
import os
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .nodes import Call, Graph

__all__ = [
    "Usage",
    "ToolCall",
    "Reply",
    "ProviderCall",
    "as_reply",
    "call_provider",
    "ProviderError",
    "ProviderConfigError",
    "ScriptExhausted",
    "ProviderHTTPError",
    "ProviderTimeoutError",
    "ProviderConnectionError",
    "ProviderResponseError",
    "ScriptedProvider",
    "ReplayProvider",
    "OpenAICompatProvider",
    "recorded_tool_calls",
]


# -- value types ----------------------------------------------------------------


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


@dataclass
class Usage:
    """Token counts of one provider call; see the module docstring for the convention."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def uncached_input_tokens(self) -> int:
        """Prompt tokens neither read from nor written to the cache."""
        return max(0, self.input_tokens - self.cache_read_tokens - self.cache_write_tokens)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }

    @classmethod
    def from_dict(cls, data: dict | Usage | None) -> Usage | None:
        """A Usage from our own dict shape or from an OpenAI ``usage`` dict; None stays None."""
        if data is None:
            return None
        if isinstance(data, Usage):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"usage must be a dict or Usage, got {type(data).__name__}")
        if "prompt_tokens" in data or "completion_tokens" in data:
            details = data.get("prompt_tokens_details") or {}
            return cls(
                input_tokens=_int(data.get("prompt_tokens")),
                output_tokens=_int(data.get("completion_tokens")),
                cache_read_tokens=_int(details.get("cached_tokens")),
                cache_write_tokens=_int(data.get("cache_creation_input_tokens")),
            )
        return cls(
            input_tokens=_int(data.get("input_tokens")),
            output_tokens=_int(data.get("output_tokens")),
            cache_read_tokens=_int(data.get("cache_read_tokens")),
            cache_write_tokens=_int(data.get("cache_write_tokens")),
        )

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass
class ToolCall:
    """One tool call requested by a model. ``arguments`` is always a dict."""

    id: str
    name: str
    arguments: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``metadata.tool_calls`` entry shape: ``{"id", "name", "arguments": dict}``."""
        return {"id": self.id, "name": self.name, "arguments": copy.deepcopy(self.arguments)}

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry shape (arguments as a JSON string)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments_to_json(self.arguments)},
        }

    @classmethod
    def from_dict(cls, data: dict | ToolCall, *, default_id: str = "") -> ToolCall:
        """Accepts our shape, the OpenAI shape (``function.name/arguments``) and ``input=``."""
        if isinstance(data, ToolCall):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"a tool call must be a dict or ToolCall, got {type(data).__name__}")
        fn = data.get("function") if isinstance(data.get("function"), dict) else None
        name = (fn or data).get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"tool call without a name: {data!r}")
        if fn is not None:
            args = fn.get("arguments")
        else:
            args = data.get("arguments", data.get("input"))
        return cls(id=str(data.get("id") or default_id), name=name, arguments=parse_arguments(args))


def parse_arguments(args: Any) -> dict:
    """Tool-call arguments as a dict: JSON text is decoded; anything else is kept as ``_raw``."""
    if args is None or args == "":
        return {}
    if isinstance(args, dict):
        return args
    if isinstance(args, str):
        try:
            value = json.loads(args)
        except ValueError:
            return {"_raw": args}
        return value if isinstance(value, dict) else {"_raw": args}
    return {"_raw": args}


def arguments_to_json(arguments: dict) -> str:
    """The JSON string a provider expects; a ``{"_raw": text}`` round-trips to ``text``."""
    if set(arguments) == {"_raw"} and isinstance(arguments["_raw"], str):
        return arguments["_raw"]
    return json.dumps(arguments, ensure_ascii=False, default=str)


@dataclass
class Reply:
    """What a provider returns.

    ``call_id`` is filled by the runtimes with the id of the llm node that
    recorded this reply (``None`` straight out of a provider).
    """

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    model: str | None = None
    raw: Any = None
    call_id: str | None = None

    def __str__(self) -> str:
        return self.text

    @classmethod
    def from_dict(cls, data: dict) -> Reply:
        """``{"text"|"content", "tool_calls", "usage", "model"}``; tool calls without an id get one."""
        unknown = set(data) - {"text", "content", "tool_calls", "usage", "model", "raw", "call_id"}
        if unknown:
            raise ValueError(f"unknown Reply keys {sorted(unknown)} in {data!r}")
        text = data.get("text", data.get("content"))
        calls = [
            ToolCall.from_dict(tc, default_id=f"call_{i}")
            for i, tc in enumerate(data.get("tool_calls") or ())
        ]
        return cls(
            text="" if text is None else str(text),
            tool_calls=calls,
            usage=Usage.from_dict(data.get("usage")),
            model=data.get("model"),
            raw=data.get("raw"),
            call_id=data.get("call_id"),
        )


def as_reply(value: Any) -> Reply:
    """Coerce a provider's return value: ``Reply`` as is, ``str`` as text, ``dict`` via ``from_dict``."""
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(text=value)
    if isinstance(value, dict):
        return Reply.from_dict(value)
    raise ProviderResponseError(
        f"a provider must return a Reply, str or dict; got {type(value).__name__}"
    )


@runtime_checkable
class ProviderCall(Protocol):
    """``(messages, model, system, tools) -> Reply``; plain functions qualify."""

    def __call__(
        self,
        messages: list[dict],
        model: str,
        system: str | None,
        tools: list[dict] | None,
    ) -> Reply: ...


def call_provider(
    provider: Callable[..., Any],
    messages: list[dict],
    model: str,
    system: str | None,
    tools: list[dict] | None,
) -> Reply:
    """Call ``provider`` with the four positional arguments and coerce the result."""
    if not callable(provider):
        raise ProviderConfigError(f"provider_call must be callable, got {type(provider).__name__}")
    return as_reply(provider(messages, model, system, tools))


# -- errors -----------------------------------------------------------------------


class ProviderError(Exception):
    """Base of every error a provider raises on purpose."""


class ProviderConfigError(ProviderError):
    """The provider cannot be used as configured (missing package, bad argument)."""


class ScriptExhausted(ProviderError):
    """A ScriptedProvider / ReplayProvider was called more times than it has answers."""


class ProviderHTTPError(ProviderError):
    """The server answered with an HTTP error status."""

    def __init__(self, status: int, server_message: str, *, attempts: int = 1, body: Any = None):
        self.status = status
        self.server_message = server_message
        self.attempts = attempts
        self.body = body
        tail = f" (after {attempts} attempts)" if attempts > 1 else ""
        super().__init__(f"HTTP {status} from provider: {server_message}{tail}")


class ProviderTimeoutError(ProviderError):
    """Every attempt timed out."""


class ProviderConnectionError(ProviderError):
    """The server could not be reached on any attempt."""


class ProviderResponseError(ProviderError):
    """The server answered 200 with something that is not a chat completion."""


# -- ScriptedProvider -------------------------------------------------------------


ScriptItem = str | Reply | dict


def _record_call(
    calls: list[dict[str, Any]],
    messages: list[dict],
    model: str,
    system: str | None,
    tools: list[dict] | None,
) -> None:
    """One entry of a test provider's ``.calls``: deep copies of ``messages`` and ``tools``
    plus ``model`` and ``system``, so a test asserts on exactly what the model was sent
    even when the caller mutates its lists afterwards."""
    calls.append(
        {
            "messages": copy.deepcopy(messages),
            "model": model,
            "system": system,
            "tools": copy.deepcopy(tools),
        }
    )


class ScriptedProvider:
    """Answers from a script and records every call.

    ``replies`` is a list of ``str`` / ``Reply`` / ``dict`` (see
    :meth:`Reply.from_dict`) consumed in order, or a callable
    ``(messages, model, system, tools) -> str | Reply | dict`` asked every time.
    ``.calls`` holds one dict per call: deep copies of ``messages`` and ``tools``
    plus ``model`` and ``system``, so a test can assert on exactly what the model saw.
    A reply without a model gets ``model`` (the argument, else the one asked for).
    """

    def __init__(
        self,
        replies: Iterable[ScriptItem] | Callable[..., ScriptItem],
        *,
        model: str | None = None,
    ) -> None:
        if callable(replies):
            self._fn: Callable[..., ScriptItem] | None = replies
            self._script: list[ScriptItem] = []
        else:
            if isinstance(replies, str | dict | Reply):
                raise ProviderConfigError(
                    "ScriptedProvider takes a list of replies (or a callable), not a single reply"
                )
            self._fn = None
            self._script = list(replies)
        self.model = model
        self.calls: list[dict[str, Any]] = []
        self._next = 0

    @property
    def remaining(self) -> int:
        return len(self._script) - self._next if self._fn is None else -1

    def __call__(
        self,
        messages: list[dict],
        model: str,
        system: str | None,
        tools: list[dict] | None,
    ) -> Reply:
        _record_call(self.calls, messages, model, system, tools)
        if self._fn is not None:
            item = self._fn(messages, model, system, tools)
        else:
            if self._next >= len(self._script):
                last = messages[-1] if messages else None
                raise ScriptExhausted(
                    f"ScriptedProvider ran out of replies: call #{len(self.calls)} but only "
                    f"{len(self._script)} scripted; last message was {last!r}"
                )
            item = self._script[self._next]
            self._next += 1
        reply = copy.deepcopy(as_reply(item))
        if reply.model is None:
            reply.model = self.model or model or None
        return reply


# -- ReplayProvider ----------------------------------------------------------------


def recorded_tool_calls(node: Call) -> list[dict]:
    """The tool calls an llm node made: ``metadata.tool_calls``, else Anthropic ``tool_use`` blocks.

    Always ``[{"id", "name", "arguments": dict}]``. Imported transcripts keep the
    Anthropic shape in ``metadata.extra.blocks``; both are read so that imported
    and native sessions render and replay alike.
    """
    meta = node.metadata
    out: list[dict] = []
    for i, tc in enumerate(meta.get("tool_calls") or ()):
        if isinstance(tc, dict | ToolCall):
            try:
                out.append(ToolCall.from_dict(tc, default_id=f"{node.id}_tc{i}").to_dict())
            except ValueError:
                continue
    if out:
        return out
    extra = meta.get("extra")
    blocks = extra.get("blocks") if isinstance(extra, dict) else None
    for i, block in enumerate(blocks or ()):
        if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name"):
            out.append(
                {
                    "id": str(block.get("id") or f"{node.id}_tc{i}"),
                    "name": block["name"],
                    "arguments": parse_arguments(block.get("input")),
                }
            )
    return out


def _replayable(node: Call) -> bool:
    if node.role != "llm" or node.metadata.get("role") == "system":
        return False
    return bool(node.output not in (None, "")) or bool(recorded_tool_calls(node))


class ReplayProvider:
    """Answers with the assistant outputs recorded in a session, in ``seq`` order.

    ``source`` is a ``DagSession`` (anything with a ``.graph``), a ``Graph``, a
    ``GraphStore`` (anything with ``.load()``) or an iterable of ``Call``. The
    replies are its llm nodes that carry an answer (text or tool calls), system
    nodes and empty placeholders skipped, sorted by ``seq``. Each reply has the
    node's text, its recorded tool calls (same ids, so the replayed tool results
    pair up exactly as recorded), its recorded ``metadata.usage`` and its model.

    ``top_level_only=True`` keeps only llm nodes without a caller: the answers of
    the chat loop, not the LLM calls made inside agentic functions.
    ``.calls`` records every call as ScriptedProvider does; ``.position`` is the
    index of the next reply.
    """

    def __init__(self, source: Any, *, top_level_only: bool = False) -> None:
        nodes = self._nodes_of(source)
        picked = [n for n in nodes if _replayable(n)]
        if top_level_only:
            picked = [n for n in picked if n.caller is None]
        picked.sort(key=lambda n: n.seq)
        self.recorded: list[Call] = picked
        self.calls: list[dict[str, Any]] = []
        self.position = 0

    @staticmethod
    def _nodes_of(source: Any) -> list[Call]:
        if isinstance(source, Graph):
            return list(source)
        graph = getattr(source, "graph", None)
        if isinstance(graph, Graph):
            return list(graph)
        if hasattr(source, "load") and callable(source.load):
            loaded = source.load()
            if isinstance(loaded, Graph):
                return list(loaded)
        if isinstance(source, Iterable) and not isinstance(source, str | bytes | dict):
            nodes = list(source)
            bad = [type(n).__name__ for n in nodes if not isinstance(n, Call)]
            if bad:
                raise ProviderConfigError(f"ReplayProvider: expected Call nodes, got {bad[0]}")
            return nodes
        raise ProviderConfigError(
            "ReplayProvider takes a DagSession, Graph, GraphStore or list of Calls, "
            f"got {type(source).__name__}"
        )

    @property
    def remaining(self) -> int:
        return len(self.recorded) - self.position

    def reply_for(self, node: Call) -> Reply:
        """The Reply a recorded llm node stands for."""
        usage = node.metadata.get("usage")
        return Reply(
            text="" if node.output is None else str(node.output),
            tool_calls=[ToolCall.from_dict(tc) for tc in recorded_tool_calls(node)],
            usage=Usage.from_dict(usage) if isinstance(usage, dict | Usage) else None,
            model=node.name or None,
            raw=node,
        )

    def __call__(
        self,
        messages: list[dict],
        model: str,
        system: str | None,
        tools: list[dict] | None,
    ) -> Reply:
        _record_call(self.calls, messages, model, system, tools)
        if self.position >= len(self.recorded):
            raise ScriptExhausted(
                f"ReplayProvider: the recording has {len(self.recorded)} assistant replies, "
                f"call #{len(self.calls)} asked for one more"
            )
        node = self.recorded[self.position]
        self.position += 1
        return self.reply_for(node)


# -- OpenAICompatProvider -------------------------------------------------------------

_RETRY_STATUSES = frozenset({408, 409, 429})


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise ProviderConfigError(
            "OpenAICompatProvider needs the 'openai' package: pip install 'opctx[openai]'"
        ) from exc
    return openai


def _server_message(exc: Any) -> str:
    """The server's own error text from an ``openai.APIStatusError``."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        msg = body.get("message")
        if isinstance(msg, str) and msg:
            return msg
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(err, str):
            return err
    if isinstance(body, str) and body:
        return body
    response = getattr(exc, "response", None)
    text = getattr(response, "text", None)
    if isinstance(text, str) and text.strip():
        return text.strip()[:500]
    return str(getattr(exc, "message", exc))


def _retry_after(exc: Any) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    value = getattr(obj, key, None)
    if value is None:
        extra = getattr(obj, "model_extra", None)
        if isinstance(extra, dict):
            value = extra.get(key)
    return value


def parse_openai_usage(usage: Any) -> Usage | None:
    """``usage`` of a chat completion (object or dict) as :class:`Usage`.

    ``prompt_tokens_details.cached_tokens`` is the cache read; a cache write is
    taken from ``cache_creation_input_tokens`` / ``prompt_tokens_details.cache_write_tokens``
    when a compatible server reports one (OpenAI itself does not).
    """
    if usage is None:
        return None
    details = _get(usage, "prompt_tokens_details")
    return Usage(
        input_tokens=_int(_get(usage, "prompt_tokens")),
        output_tokens=_int(_get(usage, "completion_tokens")),
        cache_read_tokens=_int(_get(details, "cached_tokens")),
        cache_write_tokens=_int(
            _get(usage, "cache_creation_input_tokens") or _get(details, "cache_write_tokens")
        ),
    )


def parse_chat_completion(completion: Any) -> Reply:
    """A chat-completions response (object or dict) as a Reply; the first choice is used."""
    choices = _get(completion, "choices")
    if not choices:
        raise ProviderResponseError(f"the response has no choices: {str(completion)[:300]}")
    message = _get(choices[0], "message")
    if message is None:
        raise ProviderResponseError(f"the first choice has no message: {str(choices[0])[:300]}")
    text = _get(message, "content")
    calls: list[ToolCall] = []
    for i, tc in enumerate(_get(message, "tool_calls") or ()):
        fn = _get(tc, "function")
        name = _get(fn, "name")
        if not name:
            raise ProviderResponseError(f"tool call #{i} has no function name: {tc!r}")
        calls.append(
            ToolCall(
                id=str(_get(tc, "id") or f"call_{i}"),
                name=str(name),
                arguments=parse_arguments(_get(fn, "arguments")),
            )
        )
    return Reply(
        text="" if text is None else str(text),
        tool_calls=calls,
        usage=parse_openai_usage(_get(completion, "usage")),
        model=_get(completion, "model"),
        raw=completion,
    )


class OpenAICompatProvider:
    """A provider over any OpenAI-compatible ``/v1/chat/completions`` endpoint.

    ``base_url`` is the API root (``http://host:port/v1``). ``api_key`` defaults to
    ``$OPENAI_API_KEY`` and then to a dummy value (local servers ignore it).
    ``timeout`` is per attempt, in seconds. ``max_retries`` is the number of
    retries after the first attempt; the delay before retry ``k`` (0-based) is
    ``backoff * 2**k`` plus up to 10% jitter, or the server's ``Retry-After`` if
    larger, never more than ``max_backoff``. ``sleep`` is injectable so tests
    can observe the delays without waiting. ``extra_params`` are merged into
    every request (``temperature=...``, ``max_tokens=...``). ``client`` injects a
    prepared ``openai.OpenAI``.

    ``.attempts`` lists every attempt of the last call as
    ``(outcome, delay_before_next)`` where outcome is ``"ok"``, an HTTP status,
    ``"timeout"`` or ``"connection"``.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        extra_params: dict | None = None,
        default_headers: dict | None = None,
        client: Any = None,
    ) -> None:
        if max_retries < 0:
            raise ProviderConfigError(f"max_retries must be >= 0, got {max_retries}")
        if timeout <= 0:
            raise ProviderConfigError(f"timeout must be > 0 seconds, got {timeout}")
        self.base_url = base_url
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        self.extra_params = dict(extra_params or {})
        self.attempts: list[tuple[Any, float]] = []
        self._openai = _import_openai()
        if client is None:
            client = self._openai.OpenAI(
                base_url=base_url,
                api_key=api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
                timeout=timeout,
                max_retries=0,  # the retry loop below is the only one
                default_headers=default_headers,
            )
        self.client = client

    def _delay(self, retry: int, exc: Any = None) -> float:
        delay = self.backoff * (2**retry)
        delay += delay * 0.1 * random.random()
        hinted = _retry_after(exc) if exc is not None else None
        if hinted is not None:
            delay = max(delay, hinted)
        return min(delay, self.max_backoff)

    def _request(self, messages: list[dict], model: str, system: str | None, tools: list[dict] | None) -> dict:
        full = ([{"role": "system", "content": system}] if system else []) + list(messages)
        params: dict[str, Any] = {"model": model, "messages": full, **self.extra_params}
        if tools:
            params["tools"] = tools
        return params

    def __call__(
        self,
        messages: list[dict],
        model: str,
        system: str | None,
        tools: list[dict] | None,
    ) -> Reply:
        openai = self._openai
        params = self._request(messages, model, system, tools)
        self.attempts = []
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                completion = self.client.chat.completions.create(**params)
            except openai.APITimeoutError as exc:
                outcome, error = "timeout", exc
                if last:
                    self.attempts.append((outcome, 0.0))
                    raise ProviderTimeoutError(
                        f"{self.base_url}: no answer within {self.timeout}s "
                        f"on any of {attempt + 1} attempts"
                    ) from exc
            except openai.APIConnectionError as exc:
                outcome, error = "connection", exc
                if last:
                    self.attempts.append((outcome, 0.0))
                    raise ProviderConnectionError(
                        f"{self.base_url}: cannot connect ({exc}) after {attempt + 1} attempts"
                    ) from exc
            except openai.APIStatusError as exc:
                status = int(exc.status_code)
                outcome, error = status, exc
                retryable = status in _RETRY_STATUSES or status >= 500
                if last or not retryable:
                    self.attempts.append((outcome, 0.0))
                    raise ProviderHTTPError(
                        status, _server_message(exc), attempts=attempt + 1, body=exc.body
                    ) from exc
            else:
                self.attempts.append(("ok", 0.0))
                return parse_chat_completion(completion)
            delay = self._delay(attempt, error)
            self.attempts.append((outcome, delay))
            self.sleep(delay)
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover
