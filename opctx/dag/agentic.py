"""``@agentic_function`` and ``Runtime``: agentic code recorded into the DAG (spec §0.7).

ContextVars carry the integration; there is no glue layer (§0.7 names
``_store`` and ``_call_id``; ``_graph`` is the in-memory mirror they imply).
They are defined in ``_context.py``, shared with ``DagRuntime`` (which reads
``_call_id``), and re-exported here:

``_store``
    the GraphStore of the current turn (``None``: nothing is persisted).
``_graph``
    the in-memory ``Graph`` mirroring it (reads are computed on it).
``_call_id``
    the id of the code node of the ``@agentic_function`` running now; every
    node created inside it (LLM calls, nested functions) takes it as ``caller``.

``use_store(store, graph=None, call_id=None)`` installs them for a turn and
resets them on exit (§0.7 "turn entry ... finally reset"); ``graph`` defaults to
``store.load()`` and ``call_id`` lets a run path hang everything below a command
node. It yields the graph.

The decorator
-------------
On entry a placeholder code node is appended: ``name`` = the function's name,
``input`` = its bound arguments made JSON-safe (the injected ``runtime`` left
out), ``output=None``, ``caller`` = the enclosing frame,
``metadata = {"status": "running", "doc": <docstring>, "expose": <mode>}``
(plus ``render_range`` when given). ``_call_id`` is set to it for the duration
of the call. On return the same node is updated (``output=<result>``,
``status="ok"``); on an exception ``output={"error": "Type: message"}``,
``status="error"`` and the exception propagates. No second node is ever written.
Sync and async functions are both supported; nesting works because each frame
saves and resets its ContextVar token.

``system=`` is applied to the injected runtime (the argument bound to a
parameter named ``runtime``, passed explicitly or taken from the default) for
the duration of the call, and restored afterwards, also when the function
raises. It changes the runtime, never the DAG node (§0.7).

``Runtime``
-----------
The provider wrapper that agentic code calls: ``Runtime(provider_call, model,
system=None)``. ``exec(content)`` returns the reply text; ``exec_reply`` the
whole :class:`~opctx.dag.providers.Reply`.

* No DAG installed: a plain LLM call, ``[{"role": "user", "content": content}]``
  and nothing recorded.
* DAG installed: ``compute_reads(graph, frame_entry_seq=<seq of the current
  frame>, render_range=<the frame's render_range>)`` (top level: the whole
  graph), rendered by ``render_dag_messages``, then ``content`` as the last user
  message; the answer is appended as an llm node with ``caller`` = the frame
  (``None`` at top level), ``reads`` = the ids read,
  ``input = {"system": ..., "content": content}``, usage and tool calls in
  metadata.

Choices where the specification is open
---------------------------------------
* **The prompt is part of the llm node, not a node of its own.** ``content`` is
  the instruction of one LLM call, not a user turn; a user node would make
  ``last_user_message`` and ``fold_history`` see a turn that the user never
  typed. It is kept in ``input["content"]`` and ``render_dag_messages`` renders
  it before the answer, so a later call in the same frame sees the earlier
  question and answer.
* **A store without a graph.** ``_store.set(store)`` alone (the
  specification's turn entry) works: the store's graph is loaded on first use,
  cached per store and reloaded when the store's node count changes. Prefer
  ``use_store(store, graph)`` to share one graph with a ``DagRuntime``.
* **A DAG without a store.** ``use_store(None, graph=g)`` records into an
  in-memory graph only (used by the chat loop without persistence, the lab's
  replays and the tests). The DAG is "installed" when a graph or a store is;
  with neither, everything is a no-op (§0.7).
* **Agentic llm nodes have no predecessor.** They hang off their frame by
  ``caller``; the conversation chain (``predecessor``) belongs to the chat
  loop's user / assistant / tool nodes. At top level (no frame) the llm node
  has neither edge.
* **JSON-safe.** Arguments and results are stored as JSON: dataclasses become
  dicts, tuples and sets lists, non-finite floats and other objects their
  ``repr``; a ``Reply`` becomes its text. The live Python value is what the
  function returns; only the record is converted.
* **Frames that are not agentic functions.** When ``_call_id`` names a node that
  is not in the graph (set by a caller outside this graph), the call is treated
  as top level for reads but still records that id as its caller.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from ._context import _call_id, _graph, _store, append_node, json_safe, reply_metadata, update_node
from .nodes import EXPOSE_MODES, Call, Graph, check_render_range, compute_reads
from .providers import Reply, as_reply, call_provider
from .render import render_dag_messages

__all__ = [
    "_store",
    "_graph",
    "_call_id",
    "use_store",
    "current_graph",
    "current_store",
    "current_frame",
    "agentic_function",
    "Runtime",
    "json_safe",
]

# Graphs for stores installed without one (``_store.set(store)`` alone, as the
# specification's turn entry does), loaded on first use and reloaded when the
# store holds a different number of nodes (another writer appended).
_store_graphs: weakref.WeakKeyDictionary[Any, Graph] = weakref.WeakKeyDictionary()


def current_store() -> Any:
    return _store.get()


def current_graph() -> Graph | None:
    """The installed graph; for a store installed alone, its (cached) loaded graph."""
    graph = _graph.get()
    if graph is not None:
        return graph
    store = _store.get()
    if store is None:
        return None
    try:
        cached = _store_graphs.get(store)
    except TypeError:  # a store that cannot be weakly referenced: no cache
        return store.load()
    count = getattr(store, "count", None)
    if cached is None or (callable(count) and count() != len(cached)):
        cached = store.load()
        _store_graphs[store] = cached
    return cached


def current_frame() -> str | None:
    return _call_id.get()


@contextlib.contextmanager
def use_store(
    store: Any,
    graph: Graph | None = None,
    call_id: str | None = None,
) -> Iterator[Graph]:
    """Install the DAG of a turn: ``_store``, ``_graph`` (and ``_call_id`` if given); reset on exit."""
    if graph is None:
        if store is None:
            raise ValueError("use_store needs a store, a graph, or both")
        graph = store.load()
    tokens = [(_store, _store.set(store)), (_graph, _graph.set(graph))]
    if call_id is not None:
        tokens.append((_call_id, _call_id.set(call_id)))
    try:
        yield graph
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


# -- the decorator ----------------------------------------------------------------


def _is_runtime_like(value: Any) -> bool:
    return hasattr(value, "system") and callable(getattr(value, "exec", None))


class _Frame:
    """Entry / exit bookkeeping of one agentic call."""

    __slots__ = ("node_id", "token", "runtime", "saved_system", "applied", "graph", "store")

    def __init__(self) -> None:
        self.node_id: str | None = None
        self.token: Any = None
        self.runtime: Any = None
        self.saved_system: Any = None
        self.applied = False
        self.graph: Graph | None = None
        self.store: Any = None


class _AgenticSpec:
    def __init__(
        self,
        fn: Callable[..., Any],
        system: str | None,
        expose: str,
        render_range: dict | None,
        name: str | None,
    ) -> None:
        if expose not in EXPOSE_MODES:
            raise ValueError(
                f"agentic_function: expose={expose!r}; expected one of {', '.join(EXPOSE_MODES)}"
            )
        if render_range is not None:
            try:
                check_render_range(render_range)  # the one check, shared with compute_reads
            except ValueError as exc:
                raise ValueError(f"agentic_function: {exc}") from None
        self.fn = fn
        self.system = system
        self.expose = expose
        self.render_range = dict(render_range) if render_range is not None else None
        self.name = name or fn.__name__
        self.doc = inspect.getdoc(fn) or ""
        self.signature = inspect.signature(fn)

    def enter(self, args: tuple, kwargs: dict) -> _Frame:
        frame = _Frame()
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        runtime = bound.arguments.get("runtime")
        if self.system is not None and runtime is not None:
            if not hasattr(runtime, "system"):
                raise TypeError(
                    f"{self.name}: system= needs the injected runtime to have a 'system' "
                    f"attribute; got {type(runtime).__name__}"
                )
            frame.runtime = runtime
            frame.saved_system = runtime.system
            runtime.system = self.system
            frame.applied = True
        graph = current_graph()
        if graph is None:
            return frame  # no DAG installed: recording is a no-op (§0.7)
        store = _store.get()
        recorded = {
            k: json_safe(v)
            for k, v in bound.arguments.items()
            if k not in ("runtime", "self", "cls") and not _is_runtime_like(v)
        }
        meta: dict[str, Any] = {"status": "running", "doc": self.doc, "expose": self.expose}
        if self.render_range is not None:
            meta["render_range"] = dict(self.render_range)
        node = Call(
            role="code",
            name=self.name,
            input=recorded,
            output=None,
            caller=_call_id.get(),
            created_at=time.time(),
            metadata=meta,
        )
        try:
            append_node(node, graph, store)
        except BaseException:
            self.restore(frame)
            raise
        frame.node_id = node.id
        frame.graph = graph
        frame.store = store
        frame.token = _call_id.set(node.id)
        return frame

    def restore(self, frame: _Frame) -> None:
        if frame.applied:
            frame.runtime.system = frame.saved_system
            frame.applied = False

    def exit_ok(self, frame: _Frame, result: Any) -> None:
        try:
            if frame.node_id is not None:
                _call_id.reset(frame.token)
                update_node(
                    frame.node_id, frame.graph, frame.store, output=json_safe(result), status="ok"
                )
        finally:
            self.restore(frame)

    def exit_error(self, frame: _Frame, exc: BaseException) -> None:
        try:
            if frame.node_id is not None:
                _call_id.reset(frame.token)
                update_node(
                    frame.node_id,
                    frame.graph,
                    frame.store,
                    output={"error": f"{type(exc).__name__}: {exc}"},
                    status="error",
                )
        finally:
            self.restore(frame)


def agentic_function(
    fn: Callable[..., Any] | None = None,
    *,
    system: str | None = None,
    expose: str = "io",
    render_range: dict | None = None,
    name: str | None = None,
) -> Any:
    """Record a (sync or async) function as a code node of the DAG; see the module docstring.

    Usable bare (``@agentic_function``) or with options
    (``@agentic_function(system=..., expose="full", render_range={"callers": 0})``).
    The wrapper exposes ``__agentic__`` (the options) and ``__wrapped__``.
    """

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        spec = _AgenticSpec(func, system, expose, render_range, name)

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                frame = spec.enter(args, kwargs)
                try:
                    result = await func(*args, **kwargs)
                except BaseException as exc:
                    spec.exit_error(frame, exc)
                    raise
                spec.exit_ok(frame, result)
                return result

            wrapper: Any = async_wrapper
        else:

            @functools.wraps(func)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                frame = spec.enter(args, kwargs)
                try:
                    result = func(*args, **kwargs)
                except BaseException as exc:
                    spec.exit_error(frame, exc)
                    raise
                spec.exit_ok(frame, result)
                return result

            wrapper = sync_wrapper
        wrapper.__agentic__ = {
            "name": spec.name,
            "system": spec.system,
            "expose": spec.expose,
            "render_range": spec.render_range,
            "doc": spec.doc,
        }
        return wrapper

    if fn is not None:
        if not callable(fn):
            raise TypeError("agentic_function decorates a function")
        return decorate(fn)
    return decorate


# -- Runtime -----------------------------------------------------------------------


class Runtime:
    """The provider wrapper injected into agentic functions; see the module docstring.

    A provider is either passed as ``provider_call`` or supplied by a subclass
    that overrides :meth:`call` (the "provider base class" of §0.5); the DAG
    bookkeeping of ``exec`` is the same for both.
    """

    def __init__(
        self,
        provider_call: Callable[..., Any] | None = None,
        model: str = "",
        system: str | None = None,
        *,
        tools: list[dict] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        overridden = type(self).call is not Runtime.call
        if provider_call is None and not overridden:
            raise TypeError("Runtime needs a provider_call, or a subclass that overrides call()")
        if provider_call is not None and not callable(provider_call):
            raise TypeError(f"provider_call must be callable, got {type(provider_call).__name__}")
        self.provider_call = provider_call
        self.model = model
        self.system = system
        self.tools = tools
        self.clock = clock

    def call(
        self, messages: list[dict], model: str, system: str | None, tools: list[dict] | None
    ) -> Reply:
        """One provider call; subclasses override this to be the provider themselves."""
        return call_provider(self.provider_call, messages, model, system, tools)

    def reads(self) -> list[str]:
        """The reads the next ``exec`` would use in the current context ([] with no DAG)."""
        return self._reads(current_graph())

    @staticmethod
    def _reads(graph: Graph | None) -> list[str]:
        if graph is None:
            return []
        frame_id = _call_id.get()
        frame = graph.get(frame_id)
        if frame is None:
            return compute_reads(graph)
        render_range = frame.metadata.get("render_range")
        return compute_reads(graph, frame_entry_seq=frame.seq, render_range=render_range)

    def exec_reply(
        self,
        content: Any = None,
        *,
        model: str | None = None,
        system: str | None = None,
        tools: list[dict] | None = None,
    ) -> Reply:
        """One LLM call in the current agentic context; returns the whole Reply."""
        model = model or self.model
        system = system if system is not None else self.system
        tools = tools if tools is not None else self.tools
        graph = current_graph()
        prompt = [] if content is None else [{"role": "user", "content": _prompt_text(content)}]
        if graph is None:
            return as_reply(self.call(prompt, model, system, tools))
        store = _store.get()
        ids = self._reads(graph)
        messages = render_dag_messages(ids, graph) + prompt
        reply = as_reply(self.call(messages, model, system, tools))
        node = Call(
            role="llm",
            name=reply.model or model,
            input={"system": system, "content": json_safe(content)},
            output=reply.text,
            reads=ids,
            caller=_call_id.get(),
            created_at=self.clock(),
            metadata=reply_metadata(reply),
        )
        append_node(node, graph, store)
        reply.call_id = node.id
        return reply

    def exec(
        self,
        content: Any = None,
        *,
        model: str | None = None,
        system: str | None = None,
        tools: list[dict] | None = None,
    ) -> str:
        """One LLM call in the current agentic context; returns the reply text."""
        return self.exec_reply(content, model=model, system=system, tools=tools).text

    def __repr__(self) -> str:
        return f"Runtime(model={self.model!r}, system={'set' if self.system else None})"


def _prompt_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    from .messages import as_text

    return as_text(json_safe(content))
