"""``DagRuntime``: "given a graph and reads, call the LLM once, record it" (spec §0.5).

``DagRuntime(provider_call, graph, store=None, default_model="", clock=time.time)``
is the DAG-native runtime that the chat loop (``chat.py``) drives. It does not
compute reads itself beyond a default; the caller decides what the model sees.

* ``exec(content=None, reads=None, model=None, system=None, tools=None) -> Reply``
  adds ``content`` as a user message first (if given), renders ``reads`` with
  :func:`~opctx.dag.render.render_dag_messages`, calls the provider and appends
  one ``llm`` Call: ``name`` = the model that answered (else the one asked for),
  ``input = {"system": system}``, ``output`` = the reply text, ``reads`` = the
  ids read, ``metadata.usage`` / ``metadata.tool_calls`` (only when present),
  ``predecessor`` = the conversation head, ``caller`` = the running
  ``@agentic_function`` frame (the ``_call_id`` ContextVar) if any. The
  returned ``Reply`` carries the new node's id in ``call_id``.
* ``add_user_message(content)`` appends a user Call on the head.
* ``record_function_call(name, arguments, called_by, result, tool_call_id=None,
  is_error=False)`` appends a code Call on the head: the result of a function the
  caller ran itself (a tool call), ``metadata.status`` ``"ok"`` or ``"error"``.

Choices where the specification is open
---------------------------------------
* **The conversation head.** ``head`` is the id the next conversational node
  follows (its ``predecessor``). It starts at the store's HEAD when a store is
  given, else at the newest top-level node of the graph (``None`` for an empty
  graph), and moves to every node this runtime appends. ``set_head(id)`` moves
  it (fork / rewind) and, with a store, the store's HEAD too.
* **content with explicit reads**: the new user message is appended to
  ``reads`` if the caller's list does not hold it; asking a question the
  model cannot see would make no sense.
* **reads=None** means ``compute_reads(graph)``: every visible node, with the
  ``expose`` rules of §0.7 applied, as the specification's top-level row says.
  The chat loop passes folded reads instead.
* **system=None** falls back to ``runtime.system`` (``None`` by default), so that
  ``@agentic_function(system=...)`` can apply a system prompt to an injected
  ``DagRuntime`` exactly as it does to a ``Runtime`` (§0.7).
* ``record_function_call`` stores arguments and result JSON-safe
  (:func:`json_safe`: tuples become lists, unknown objects their ``repr``), so
  whatever a tool returns can be persisted.
* **Store first, graph second.** With a store, a node is appended to the store
  (which allocates ``seq`` inside its write transaction) and then added to the
  graph with that seq, so the in-memory graph mirrors the database. A provider
  error appends nothing: a failed call leaves no half-written llm node.
* **Shared with the agentic layer.** ``append_node``, ``update_node``,
  ``reply_metadata``, ``json_safe`` and the ``_call_id`` ContextVar live in
  ``_context.py`` (re-exported here), so that this module and ``agentic.py``
  do not import each other.
* ``DagRuntime.for_session(session, provider_call)`` fills a ``DagSession``'s
  ``runtime`` slot (session.py does not import this module; layers stay one-way).
* ``clock`` stamps ``created_at`` on every node this runtime creates, so a replay
  can run on recorded time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from ._context import _call_id, append_node, json_safe, reply_metadata, update_node
from .nodes import Call, Graph, compute_reads
from .providers import Reply, call_provider
from .render import render_dag_messages

__all__ = ["DagRuntime", "append_node", "update_node", "reply_metadata", "json_safe"]


def _current_frame() -> str | None:
    """The running ``@agentic_function`` frame: the caller of the llm nodes appended now."""
    return _call_id.get()


class DagRuntime:
    """Call an LLM over a graph and record each call as an llm node; see the module docstring."""

    def __init__(
        self,
        provider_call: Callable[..., Any],
        graph: Graph | None = None,
        store: Any = None,
        default_model: str = "",
        clock: Callable[[], float] = time.time,
        *,
        system: str | None = None,
    ) -> None:
        if not callable(provider_call):
            raise TypeError(f"provider_call must be callable, got {type(provider_call).__name__}")
        self.provider_call = provider_call
        self.graph = graph if graph is not None else Graph()
        self.store = store
        self.default_model = default_model
        self.clock = clock
        self.system = system
        self.head: str | None = self._initial_head()

    @classmethod
    def for_session(
        cls,
        session: Any,
        provider_call: Callable[..., Any],
        default_model: str | None = None,
        clock: Callable[[], float] = time.time,
        *,
        system: str | None = None,
    ) -> DagRuntime:
        """A runtime over a ``DagSession``'s graph and store, put in its ``runtime`` slot.

        ``default_model`` defaults to the session's model (``session.meta.model``).
        """
        if default_model is None:
            meta = getattr(session, "meta", None)
            default_model = getattr(meta, "model", "") or ""
        runtime = cls(provider_call, session.graph, session.store, default_model, clock, system=system)
        session.runtime = runtime
        return runtime

    def _initial_head(self) -> str | None:
        if self.store is not None and hasattr(self.store, "head"):
            head = self.store.head()
            if head is not None:
                return head
        for node in reversed(list(self.graph)):
            if node.caller is None:
                return node.id
        return None

    # -- bookkeeping ---------------------------------------------------------------
    def _append(self, node: Call, *, advance_head: bool = True) -> Call:
        node = append_node(node, self.graph, self.store)
        if advance_head:
            self.head = node.id
        return node

    def set_head(self, node_id: str | None) -> None:
        """Continue the conversation after ``node_id`` (a fork or a rewind)."""
        if node_id is not None and node_id not in self.graph:
            raise KeyError(f"set_head: no node {node_id!r} in the graph")
        if self.store is not None:
            self.store.set_head(node_id)
        self.head = node_id

    # -- the three operations of §0.5 ------------------------------------------------
    def add_user_message(self, content: Any, *, name: str = "user") -> Call:
        """Append a user message on the head and make it the head."""
        node = Call(
            role="user",
            name=name,
            output=content,
            predecessor=self.head,
            created_at=self.clock(),
        )
        return self._append(node)

    def record_function_call(
        self,
        name: str,
        arguments: Any,
        called_by: str | None,
        result: Any,
        tool_call_id: str | None = None,
        is_error: bool = False,
    ) -> Call:
        """Record a function the caller ran itself, as a code node on the head."""
        meta: dict[str, Any] = {"status": "error" if is_error else "ok"}
        if tool_call_id is not None:
            meta["tool_call_id"] = tool_call_id
        if is_error:
            meta["is_error"] = True
        node = Call(
            role="code",
            name=name,
            input=json_safe(arguments),
            output=json_safe(result),
            caller=called_by,
            predecessor=self.head,
            created_at=self.clock(),
            metadata=meta,
        )
        return self._append(node)

    def render(self, reads: Iterable[str | Call] | None = None) -> list[dict]:
        """The messages ``exec(reads=reads)`` would send (without calling anything)."""
        ids = self._read_ids(reads)
        return render_dag_messages(ids, self.graph)

    def _read_ids(self, reads: Iterable[str | Call] | None) -> list[str]:
        if reads is None:
            return compute_reads(self.graph)
        return [r.id if isinstance(r, Call) else r for r in reads]  # a fresh list: exec may extend it

    def exec(
        self,
        content: Any = None,
        reads: Iterable[str | Call] | None = None,
        model: str | None = None,
        system: str | None = None,
        tools: list[dict] | None = None,
    ) -> Reply:
        """One LLM call over ``reads``; see the module docstring."""
        user = self.add_user_message(content) if content is not None else None
        ids = self._read_ids(reads)
        if user is not None and user.id not in ids:
            ids.append(user.id)  # explicit reads + content: the model must see the content
        messages = self.render(ids)
        model = model or self.default_model
        system = system if system is not None else self.system
        reply = call_provider(self.provider_call, messages, model, system, tools)
        node = Call(
            role="llm",
            name=reply.model or model,
            input={"system": system},
            output=reply.text,
            reads=ids,
            caller=_current_frame(),
            predecessor=self.head,
            created_at=self.clock(),
            metadata=reply_metadata(reply),
        )
        node = self._append(node)
        reply.call_id = node.id
        return reply

    def annotate(self, node_id: str, **fields: Any) -> None:
        """Update a node this runtime recorded, in the store and in the graph."""
        update_node(node_id, self.graph, self.store, **fields)

    def __repr__(self) -> str:
        return f"DagRuntime({len(self.graph)} nodes, head={self.head!r}, model={self.default_model!r})"
