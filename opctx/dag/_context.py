"""What ``agentic`` and ``runtime`` share: the turn's context variables and node writing.

Both the ``@agentic_function`` layer (``agentic.py``) and ``DagRuntime``
(``runtime.py``) record nodes into the DAG of the running turn, and both need to
know the frame they run in. What they share lives here, so that neither imports
the other:

``_store``, ``_graph``, ``_call_id``
    the ContextVars of §0.7 (the GraphStore of the turn, its in-memory ``Graph``,
    the id of the running ``@agentic_function`` frame). ``agentic.py`` documents
    them and installs them (``use_store``); ``DagRuntime`` reads ``_call_id`` as the
    ``caller`` of the llm nodes it appends.
``append_node`` / ``update_node``
    write one node, or one update, to the store first and mirror it into the graph.
``reply_metadata``
    what an llm node records about a reply (usage, tool calls).
``json_safe``
    a value as plain JSON for the record.

The public names are re-exported where they were first defined
(``opctx.dag.agentic`` for the ContextVars, ``opctx.dag.runtime`` for the helpers).

>>> json_safe({"when": (1, 2.5), "tags": {"b", "a"}, "bad": float("nan")})
{'when': [1, 2.5], 'tags': ['a', 'b'], 'bad': 'nan'}
"""

from __future__ import annotations

import dataclasses
import math
from contextvars import ContextVar
from typing import Any

from .nodes import Call, Graph
from .providers import Reply

__all__ = [
    "_store",
    "_graph",
    "_call_id",
    "append_node",
    "update_node",
    "reply_metadata",
    "json_safe",
]

_store: ContextVar[Any] = ContextVar("opctx_store", default=None)
_graph: ContextVar[Graph | None] = ContextVar("opctx_graph", default=None)
_call_id: ContextVar[str | None] = ContextVar("opctx_call_id", default=None)


def append_node(node: Call, graph: Graph | None, store: Any = None) -> Call:
    """Append to the store (seq allocated there) and mirror into the graph."""
    if store is not None:
        node = store.append(node)
    if graph is not None and node.id not in graph:
        graph.add(node)
    return node


def update_node(node_id: str, graph: Graph | None, store: Any = None, **fields: Any) -> None:
    """Apply one update to the store and to the graph, store first."""
    if store is not None:
        store.update(node_id, **fields)
    if graph is not None and node_id in graph:
        graph.update(node_id, **fields)


def reply_metadata(reply: Reply) -> dict[str, Any]:
    """The metadata an llm node records for a reply: usage and tool calls, when present."""
    meta: dict[str, Any] = {}
    if reply.usage is not None:
        meta["usage"] = reply.usage.to_dict()
    if reply.tool_calls:
        meta["tool_calls"] = [tc.to_dict() for tc in reply.tool_calls]
    return meta


# -- JSON-safe records ------------------------------------------------------------


def json_safe(value: Any, _depth: int = 0) -> Any:
    """``value`` as plain JSON for the record; the live value is never changed.

    ``None``/``bool``/``int``/``str`` as is; finite floats as is, NaN and the
    infinities as their ``repr``; dict keys as ``str``; lists and tuples as
    lists; sets as sorted lists; dataclasses, objects with ``to_dict()`` and
    NumPy-style values (``dtype`` + ``tolist()``) as their plain form; a
    ``Reply`` as its text; anything else, or nesting deeper than 50, as ``repr``.
    """
    if _depth > 50:
        return repr(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else repr(float(value))
    if isinstance(value, Reply):
        return value.text
    if isinstance(value, dict):
        return {str(k): json_safe(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v, _depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        items = [json_safe(v, _depth + 1) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value), _depth + 1)
    if hasattr(value, "dtype") and callable(getattr(value, "tolist", None)):
        return json_safe(value.tolist(), _depth + 1)  # numpy scalars and arrays
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        try:
            return json_safe(to_dict(), _depth + 1)
        except Exception:  # noqa: BLE001 - a broken to_dict falls back to repr
            pass
    return repr(value)
