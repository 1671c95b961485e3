"""What a session graph is made of: a session loaded from whatever a notebook has at hand,
compaction membership, and one ``NodeInfo`` per node (the input of every drawing).

Private to ``opctx.viz.graph``, which re-exports every public name; the choices
(compaction membership, branches, tokens) are described in its docstring.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..dag.nodes import Call, Graph
from .html import preview, text_of

EDGE_KINDS = ("caller", "predecessor", "reads")


def load_session(source: Any, session_id: str | None = None) -> tuple[Graph, str | None]:
    """``(graph, head_id)`` from whatever a notebook has at hand.

    Accepts a ``Graph`` (head unknown: ``None``); anything with a ``graph``
    attribute (``DagSession``, ``DagRuntime``); a ``GraphStore``; an iterable of
    ``Call``; or, with ``session_id``, a database path or a ``DagSessionDB``
    (its open connection is reused, so ``DagSessionDB(":memory:")`` works).
    """
    if isinstance(source, Graph):
        return source, None
    inner = getattr(source, "graph", None)
    if isinstance(inner, Graph):
        return inner, _head_of(source)
    if hasattr(source, "load") and hasattr(source, "head") and hasattr(source, "session_id"):
        return source.load(), _head_of(source)
    if session_id is not None and not isinstance(source, str | os.PathLike):
        conn = _connection_of(source)
        if conn is not None:
            return _load_from(conn, session_id)
        path = getattr(source, "db_path", None) or getattr(source, "path", None)
        if isinstance(path, str | os.PathLike) and str(path) != ":memory:":
            source = path
    if isinstance(source, str | os.PathLike):
        if session_id is None:
            raise ValueError(f"a database path ({source}) needs session_id= to pick a session")
        if not Path(source).is_file():
            raise FileNotFoundError(f"no opctx database at {source}")
        return _load_from(source, session_id)
    if isinstance(source, Iterable) and not isinstance(source, str | bytes | Mapping):
        nodes = list(source)
        if all(isinstance(n, Call) for n in nodes):
            return Graph(nodes), None
    raise TypeError(
        f"cannot make a Graph from {type(source).__name__}: pass a Graph, a DagSession, "
        "a GraphStore, a list of Call, or a database path / DagSessionDB with session_id="
    )


def _connection_of(obj: Any) -> Any:
    from ..dag import store as store_mod

    conn_type = getattr(store_mod, "_Connection", None)
    for attr in ("connection", "conn", "_conn"):
        conn = getattr(obj, attr, None)
        if conn_type is not None and isinstance(conn, conn_type):
            return conn
    return None


def _load_from(db: Any, session_id: str) -> tuple[Graph, str | None]:
    from ..dag.store import GraphStore

    store = GraphStore(db, session_id, create=False)
    try:
        return store.load(), store.head()
    finally:
        store.close()


def as_graph(source: Any, session_id: str | None = None) -> Graph:
    """The ``Graph`` part of :func:`load_session`."""
    return load_session(source, session_id)[0]


def _head_of(source: Any) -> str | None:
    for obj in (source, getattr(source, "store", None)):
        head = getattr(obj, "head", None)
        if callable(head):
            try:
                value = head()
            except Exception:  # noqa: BLE001 - a closed store simply has no head to show
                continue
            if isinstance(value, str):
                return value
    return None


def call_text(call: Call) -> str:
    """The text a node contributes: input and output for code nodes, output otherwise."""
    out = text_of(call.output)
    if call.role == "code" and call.input is not None:
        return f"{call.name}({text_of(call.input)})\n{out}" if out else f"{call.name}({text_of(call.input)})"
    tool_calls = call.metadata.get("tool_calls")
    if call.role == "llm" and tool_calls:
        return (out + "\n" + text_of(tool_calls)).strip()
    return out


@lru_cache(maxsize=1)
def _library_estimator() -> Callable[[str], int] | None:
    try:
        from ..context.tokens import estimate_text_tokens
    except Exception:  # noqa: BLE001 - orchestration not installed/landed: use the heuristic
        return None
    return estimate_text_tokens


def _estimate_tokens(text: str) -> int:
    est = _library_estimator()
    if est is not None:
        try:
            return int(est(text))
        except Exception:  # noqa: BLE001 - an estimator bug must not break a picture
            pass
    return math.ceil(len(text) / 4)


def _display_role(call: Call, membership: str | None) -> str:
    # a summary stays a summary when a later compaction folds it (its role is who wrote it)
    if membership == "summary" or _is_summary(call):
        return "summary"
    if call.role == "user":
        return "user"
    if call.role == "llm":
        return "system" if call.metadata.get("role") == "system" else "assistant"
    # a code node answering a model's tool call is a tool; one with callees is an agentic frame
    return "tool" if call.metadata.get("tool_call_id") else "function"


def _is_summary(call: Call) -> bool:
    # a copy of an older summary (kept by a later compaction) is a copy, not a new summary
    if call.metadata.get("copied_from"):
        return False
    comp = call.metadata.get("compaction")
    if isinstance(comp, dict):
        return True
    return call.metadata.get("type") == "compactionSummary" or (
        call.metadata.get("source") == "compaction"
    )


def _range_ids(graph: Graph, first: str, last: str) -> list[str]:
    """Ids from ``first`` to ``last`` along ``predecessor`` (empty when not connected)."""
    out: list[str] = []
    node = graph.get(last)
    while node is not None:
        out.append(node.id)
        if node.id == first:
            return out[::-1]
        node = graph.get(node.predecessor)
    return []


def compaction_membership(graph: Graph) -> dict[str, tuple[str, str | None]]:
    """``{node_id: (status, summary_id)}`` for every node a compaction touched.

    Status is ``summary``, ``protected``, ``folded``, ``kept`` (originals, named by
    the summary's ``*_ids``) or ``copy`` (nodes with ``copied_from``). The latest
    compaction wins; see the module docstring.
    """
    out: dict[str, tuple[str, str | None]] = {}
    for node in graph:
        if node.metadata.get("copied_from") and node.id not in out:
            out[node.id] = ("copy", None)
        if not _is_summary(node):
            continue
        out[node.id] = ("summary", node.id)
        comp = node.metadata.get("compaction")
        if not isinstance(comp, dict):
            continue
        folded = list(comp.get("folded_ids") or ())
        rng = comp.get("folded_range")
        if not folded and isinstance(rng, list | tuple) and len(rng) == 2 and all(rng):
            folded = _range_ids(graph, rng[0], rng[1])
        for status, ids in (
            ("protected", comp.get("protected_ids") or ()),
            ("folded", folded),
            ("kept", comp.get("kept_ids") or ()),
        ):
            for nid in ids:
                if isinstance(nid, str):
                    out[nid] = (status, node.id)
    return out


# -- one pass over the graph ---------------------------------------------------------------------


@dataclass
class NodeInfo:
    """Everything both renderers need to know about one node."""

    id: str
    seq: int
    role: str
    display_role: str
    name: str
    created_at: float
    tokens: int
    status: str | None
    branch: int
    on_head_branch: bool
    depth: int
    compaction: str | None
    compaction_summary: str | None
    copied_from: str | None
    preview: str
    caller: str | None
    predecessor: str | None
    reads: list[str] = field(default_factory=list)

    def attributes(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        for key in ("id", "reads", "caller", "predecessor"):
            d.pop(key)
        return d


def node_infos(
    graph: Graph,
    *,
    head: str | None = None,
    token_counter: Callable[[str], int] | None = None,
    preview_chars: int = 300,
) -> list[NodeInfo]:
    """One ``NodeInfo`` per node, in ``seq`` order (see the module docstring)."""
    count = token_counter or _estimate_tokens
    membership = compaction_membership(graph)
    on_head = {n.id for n in graph.chain(head)} if head and head in graph else set()
    branch_of: dict[str, int] = {}
    depth_of: dict[str, int] = {}
    first_child: dict[str | None, str] = {}
    next_branch = 0
    infos: list[NodeInfo] = []
    for node in graph:
        pred = node.predecessor if node.predecessor in graph else None
        if pred is not None and first_child.setdefault(pred, node.id) == node.id:
            branch = branch_of[pred]
        elif pred is None and node.caller in branch_of:
            branch = branch_of[node.caller]
        elif pred is None and node.caller is None and None not in first_child:
            first_child[None] = node.id
            branch = next_branch
            next_branch += 1
        else:
            branch = next_branch
            next_branch += 1
        branch_of[node.id] = branch
        depth = depth_of.get(node.caller, -1) + 1 if node.caller in graph else 0
        depth_of[node.id] = depth
        status, summary_id = membership.get(node.id, (None, None))
        cleared_by = node.metadata.get("cleared_by")
        if status is None and isinstance(cleared_by, str):
            # a tool result a recorded aging step cleared in place (no new branch)
            status, summary_id = "cleared", cleared_by
        text = call_text(node)
        infos.append(
            NodeInfo(
                id=node.id,
                seq=node.seq,
                role=node.role,
                display_role=_display_role(node, status),
                name=node.name,
                created_at=node.created_at,
                tokens=int(count(text)) if text else 0,
                status=node.metadata.get("status"),
                branch=branch,
                on_head_branch=node.id in on_head,
                depth=depth,
                compaction=status,
                compaction_summary=summary_id,
                copied_from=node.metadata.get("copied_from"),
                preview=preview(text, preview_chars),
                caller=node.caller if node.caller in graph else None,
                predecessor=pred,
                reads=[r for r in node.reads if r in graph],
            )
        )
    return infos


def _check_edges(edges: Sequence[str]) -> tuple[str, ...]:
    if isinstance(edges, str):
        edges = (edges,)
    bad = [e for e in edges if e not in EDGE_KINDS]
    if bad:
        raise ValueError(f"unknown edge kind(s) {bad}: choose from {', '.join(EDGE_KINDS)}")
    return tuple(edges)
