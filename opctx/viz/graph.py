"""Session graphs: a networkx view of the DAG and an offline vis-network renderer.

Two products from one walk over a session's ``Graph``:

``to_networkx(source, edges=("caller", "predecessor", "reads"))``
    an ``nx.MultiDiGraph`` for analysis. Every edge carries ``kind``. Edges
    point forward in time, from the node that is referred to to the node that
    holds the reference: ``caller -> callee``, ``predecessor -> successor``,
    ``read node -> llm call that read it``. One orientation for all three kinds
    means "ancestors" and "descendants" mean the same thing whatever the kind.
    Node attributes: ``role`` (the Call role), ``display_role`` (user,
    assistant, system, tool, function, summary), ``name``, ``seq``,
    ``created_at``, ``tokens``, ``status``, ``branch``, ``on_head_branch``,
    ``depth`` (caller nesting), ``compaction`` (``protected`` / ``folded`` /
    ``summary`` / ``kept`` / ``copy`` or ``None``), ``compaction_summary`` (the
    summary node that gave that membership), ``copied_from`` and ``preview``.

``render_graph(source, ...) -> GraphView``
    a self-contained HTML page drawing the graph with vis-network, and a notebook
    display object for it.

Choices where the brief is open, and why:

* **Compaction membership.** Read from the summary nodes'
  ``metadata.compaction`` (``folded_ids`` / ``protected_ids`` / ``kept_ids``,
  which name ORIGINAL ids, docs/ARCHITECTURE.md "Compaction layout") and from
  ``metadata.copied_from`` on copies. Summaries are visited in ``seq`` order and
  a later compaction overrides an earlier one, so a node shows its latest fate
  (a tail kept by the first compaction and folded by the second is "folded").
  When a recording gives only ``folded_range`` the range is recovered by walking
  ``predecessor`` from its last id back to its first.
* **Branches.** A branch is numbered in ``seq`` order: a node continues its
  predecessor's branch when it is that predecessor's first child (lowest seq),
  and opens a new branch otherwise (a fork, or a root such as the first copy of
  a compaction's new branch). A node with no predecessor but a caller (inside an
  agentic function) sits on its caller's branch.
* **Tokens.** ``tokens`` is an estimate of the node's own text, by
  ``opctx.context.tokens.estimate_text_tokens`` when that module is importable,
  else 4 characters per token. Pass ``token_counter=`` to use another one.
* **Offline rendering.** pyvis's own template always pulls Bootstrap and (unless
  ``in_line``) vis-network from CDNs, so the page is assembled here instead: the
  vis-network JavaScript that pyvis ships (``pyvis/lib/vis-9.x``) is inlined, its
  220 KB stylesheet is replaced by the few rules the tooltip needs, and the page
  makes no network request at all. ``to_pyvis`` still returns a
  ``pyvis.network.Network`` for those who want pyvis's own API.
* **Escaping.** Node data is embedded with ``json_for_script`` (no ``<``, ``>``
  or ``&`` survives in the page source). Labels are drawn on a canvas, which
  never interprets markup. Tooltips are plain strings, which vis-network 9
  assigns with ``innerText`` (checked in the bundled build), so they are
  text-only; the pyvis export, whose template may be used with other
  vis versions, gets ``html.escape``d titles as well.
* **Layout.** ``x`` = the node's rank in ``seq`` order (times a spacing; rank
  rather than raw ``seq`` so that collapsed or capped nodes leave no gap),
  ``y`` = a lane per branch with an offset per role, so the page reads left to
  right in time and forks stack downward. A graph of more than 150 drawn nodes
  opens zoomed on its newest 150. Physics and vis's "improved layout" are off: positions are final,
  which is what keeps a large graph responsive.
* **Size.** ``collapse="auto"`` folds each top-level agentic frame's internals
  into the frame node and each compaction's folded range into one node, but only
  when the graph has more than ``max_nodes`` nodes; ``True``/``False`` force it.
  If more than ``max_nodes`` remain, the newest ``max_nodes - 1`` are drawn and
  the older ones become one summary node, edges redirected onto it (the recent
  end of a session is what one usually inspects; ``to_networkx`` always has all
  of it). ``reads`` edges are fan-in (an llm call reads most earlier nodes), so
  they are not drawn up front: they are shipped as index ranges and drawn for the
  selected node only.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..dag.nodes import Call, Graph
from .html import escape_text, iframe_srcdoc, json_for_script, preview, text_of

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

__all__ = [
    "EDGE_KINDS",
    "ROLE_COLORS",
    "EDGE_COLORS",
    "COMPACTION_COLORS",
    "NodeInfo",
    "GraphView",
    "as_graph",
    "load_session",
    "call_text",
    "compaction_membership",
    "node_infos",
    "to_networkx",
    "to_pyvis",
    "render_graph",
    "graph_html",
    "vis_network_js",
]

EDGE_KINDS = ("caller", "predecessor", "reads")

# Tableau-10: distinguishable, colour-blind tolerable, and the same palette the plots use.
ROLE_COLORS = {
    "user": "#4e79a7",
    "assistant": "#59a14f",
    "system": "#9c755f",
    "tool": "#f28e2b",
    "function": "#edc948",
    "summary": "#e15759",
    "collapsed": "#bab0ac",
}
EDGE_COLORS = {"caller": "#f28e2b", "predecessor": "#4e79a7", "reads": "#b07aa1"}
COMPACTION_COLORS = {
    "protected": "#1b7837",
    "folded": "#8c8c8c",
    "summary": "#e15759",
    "kept": "#2166ac",
    "copy": "#76b7b2",
}
_ROLE_ROW = {"user": 0, "system": 0, "summary": 0, "assistant": 1, "tool": 2, "function": 2}
_X_SPACING = 60
_ROW_SPACING = 45
_LANE_SPACING = 4 * _ROW_SPACING


# -- input ---------------------------------------------------------------------------------------


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
    if membership == "summary":
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


def to_networkx(
    session_or_graph: Any,
    edges: Sequence[str] = EDGE_KINDS,
    *,
    session_id: str | None = None,
    head: str | None = None,
    token_counter: Callable[[str], int] | None = None,
) -> nx.MultiDiGraph:
    """The session as an ``nx.MultiDiGraph`` (attributes: see the module docstring)."""
    import networkx as nx

    kinds = _check_edges(edges)
    graph, found_head = load_session(session_or_graph, session_id)
    infos = node_infos(graph, head=head or found_head, token_counter=token_counter)
    g = nx.MultiDiGraph()
    for info in infos:
        g.add_node(info.id, **info.attributes())
    for info in infos:
        if "caller" in kinds and info.caller:
            g.add_edge(info.caller, info.id, key="caller", kind="caller")
        if "predecessor" in kinds and info.predecessor:
            g.add_edge(info.predecessor, info.id, key="predecessor", kind="predecessor")
        if "reads" in kinds:
            for rid in info.reads:
                g.add_edge(rid, info.id, key="reads", kind="reads")
    return g


# -- the HTML page -------------------------------------------------------------------------------


def _vis_dir() -> Path:
    import importlib.util

    # locate pyvis without importing it: its import pulls jinja2, IPython and networkx
    # (about 2 s cold), and only its bundled files are needed here
    spec = importlib.util.find_spec("pyvis")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("pyvis is not installed; it ships the vis-network build")
    base = Path(next(iter(spec.submodule_search_locations))).resolve()
    candidates = sorted((base / "lib").glob("vis-*/vis-network.min.js")) + sorted(
        (base / "templates" / "lib").glob("vis-*/vis-network.min.js")
    )
    if not candidates:
        raise FileNotFoundError(
            f"pyvis at {base} ships no vis-network.min.js (looked in lib/vis-*/): "
            "reinstall pyvis>=0.3.2"
        )
    # highest bundled version first; versions sort as tuples of ints
    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(p) for p in path.parent.name.removeprefix("vis-").split(".") if p.isdigit())

    return max(candidates, key=version).parent


@lru_cache(maxsize=1)
def vis_network_js() -> str:
    """The vis-network build that pyvis ships, as text (read once per process)."""
    js = (_vis_dir() / "vis-network.min.js").read_text(encoding="utf-8")
    # it is inlined in a <script> element: a literal "</script" inside would end it early
    return js.replace("</script", "<\\/script")


@dataclass
class _Layout:
    nodes: list[dict]
    edges: list[dict]
    reads: dict[int, list[list[int]]]
    stats: dict[str, int]


def _frame_roots(graph: Graph, infos: list[NodeInfo]) -> dict[str, str]:
    """Map every node inside a top-level agentic frame to that frame's id."""
    rep: dict[str, str] = {}
    for info in infos:
        if info.caller is None and info.role == "code":
            inside = graph.subtree(info.id)
            for n in inside:
                rep.setdefault(n.id, info.id)
    return rep


def _layout(
    graph: Graph,
    infos: list[NodeInfo],
    *,
    edges: tuple[str, ...],
    max_nodes: int,
    collapse: bool | str,
) -> _Layout:
    by_id = {i.id: i for i in infos}
    do_collapse = collapse is True or (collapse == "auto" and len(infos) > max_nodes)
    rep: dict[str, str] = {}
    synthetic: dict[str, dict[str, Any]] = {}
    if do_collapse:
        rep.update(_frame_roots(graph, infos))
        for info in infos:
            if info.compaction == "folded" and info.id not in rep:
                key = f"folded:{info.compaction_summary}"
                rep[info.id] = key
                grp = synthetic.setdefault(
                    key,
                    {"members": [], "kind": "folded", "summary": info.compaction_summary},
                )
                grp["members"].append(info)
    # a frame's internals point at the frame, which may itself sit in a folded range
    for member in list(rep):
        target, hops = rep[member], 0
        while target in rep and hops < 4:
            target, hops = rep[target], hops + 1
        rep[member] = target
    collapsed_count: dict[str, int] = {}
    for _member, target in rep.items():
        collapsed_count[target] = collapsed_count.get(target, 0) + 1

    # visible units in seq order: real nodes that are not collapsed, plus synthetic groups
    units: list[tuple[int, str]] = [(i.seq, i.id) for i in infos if i.id not in rep]
    for key, grp in synthetic.items():
        units.append((min(m.seq for m in grp["members"]), key))
    units.sort()
    truncated = 0
    older_key = "older:0"
    if len(units) > max_nodes:
        cut = len(units) - (max_nodes - 1)
        dropped = {k for _, k in units[:cut]}
        first_seq, last_seq = units[0][0], units[cut - 1][0]
        units = [(first_seq, older_key)] + units[cut:]
        for info in infos:
            unit = rep.get(info.id, info.id)
            if unit in dropped:
                rep[info.id] = older_key
                truncated += 1
        synthetic[older_key] = {
            "members": [],
            "kind": "older",
            "count": truncated,
            "first": first_seq,
            "last": last_seq,
        }

    def resolve(nid: str) -> str:
        return rep.get(nid, nid)

    index = {key: i for i, (_, key) in enumerate(units)}
    lane_of: dict[int, int] = {}
    nodes: list[dict] = []
    for i, (_seq, key) in enumerate(units):
        if key in synthetic:
            grp = synthetic[key]
            if grp["kind"] == "older":
                label = f"\u2026 {grp['count']} earlier nodes"
                title = (
                    f"{grp['count']} older nodes (seq {grp['first']}\u2013{grp['last']}) "
                    f"are not drawn: max_nodes={max_nodes}.\nUse to_networkx() for all of them."
                )
                branch, row, comp = 0, 0, None
            else:
                members = grp["members"]
                label = f"folded \u00d7{len(members)}"
                title = (
                    f"{len(members)} messages folded by summary {grp['summary']}\n"
                    f"seq {members[0].seq}\u2013{members[-1].seq}, "
                    f"\u2248{sum(m.tokens for m in members)} tokens"
                )
                branch, row, comp = members[0].branch, 1, "folded"
            role = "collapsed"
            size = 14
        else:
            info = by_id[key]
            inner = collapsed_count.get(key, 0)
            name = info.name or info.display_role
            label = preview(f"{info.seq} {name}", 28) + (f" (+{inner})" if inner else "")
            lines = [
                f"{info.display_role} \u00b7 {info.name or '-'} \u00b7 seq {info.seq}",
                f"id: {info.id}",
                f"tokens \u2248 {info.tokens}",
            ]
            if info.status:
                lines.append(f"status: {info.status}")
            if info.compaction:
                lines.append(f"compaction: {info.compaction} ({info.compaction_summary or '-'})")
            if info.copied_from:
                lines.append(f"copied from: {info.copied_from}")
            if inner:
                lines.append(f"{inner} nodes inside (collapsed)")
            lines.append("")
            lines.append(info.preview)
            title = "\n".join(lines)
            branch, row, comp = info.branch, _ROLE_ROW.get(info.display_role, 1), info.compaction
            role = info.display_role
            size = 8 + min(18.0, 2.0 * math.log2(info.tokens + 1))
            row += min(info.depth, 2) * 0.4
        lane = lane_of.setdefault(branch, len(lane_of))
        node: dict[str, Any] = {
            "id": i,
            "label": label,
            "title": title,
            # rank in seq order, not raw seq: gaps left by collapsed or older nodes close up
            "x": i * _X_SPACING,
            "y": lane * _LANE_SPACING + row * _ROW_SPACING,
            "size": round(size, 1),
            "color": {
                "background": ROLE_COLORS[role],
                "border": COMPACTION_COLORS.get(comp or "", ROLE_COLORS[role]),
            },
            "borderWidth": 3 if comp else 1,
            "shape": "box" if role == "collapsed" else ("diamond" if role == "summary" else "dot"),
            "group": role,
        }
        if comp == "folded" and role != "collapsed":
            node["opacity"] = 0.45
        nodes.append(node)

    edge_map: dict[tuple[int, int, str], int] = {}
    reads: dict[int, list[list[int]]] = {}
    for info in infos:
        tgt = index.get(resolve(info.id))
        if tgt is None:
            continue
        for kind in ("caller", "predecessor"):
            src_id = getattr(info, kind)
            if kind not in edges or not src_id:
                continue
            src = index.get(resolve(src_id))
            if src is None or src == tgt:
                continue
            edge_map[(src, tgt, kind)] = edge_map.get((src, tgt, kind), 0) + 1
        if "reads" in edges and info.reads and info.id not in rep:
            idx = sorted({index[r] for r in map(resolve, info.reads) if r in index} - {tgt})
            ranges: list[list[int]] = []
            for j in idx:
                if ranges and ranges[-1][1] == j - 1:
                    ranges[-1][1] = j
                else:
                    ranges.append([j, j])
            if ranges:
                reads[tgt] = ranges
    edge_list = [
        {
            "from": s,
            "to": t,
            "color": EDGE_COLORS[k],
            "dashes": k == "caller",
            "width": 1 + min(4.0, math.log2(c)) if c > 1 else 1,
            "title": f"{k}" + (f" \u00d7{c}" if c > 1 else ""),
        }
        for (s, t, k), c in edge_map.items()
    ]
    stats = {
        "session_nodes": len(infos),
        "drawn_nodes": len(nodes),
        "drawn_edges": len(edge_list),
        "collapsed": sum(collapsed_count.values()) if do_collapse else 0,
        "truncated": truncated,
        "branches": len(lane_of),
    }
    return _Layout(nodes, edge_list, reads, stats)


_PAGE_CSS = """
html,body{margin:0;padding:0;height:100%;font:13px/1.35 system-ui,-apple-system,Segoe UI,sans-serif;color:#222;background:#fff}
body{display:flex;flex-direction:column}
#opctx-graph{flex:1 1 auto;min-height:200px;width:100%;border-top:1px solid #e5e5e5}
#opctx-bar{flex:0 0 auto;display:flex;flex-wrap:wrap;gap:4px 14px;align-items:center;padding:5px 8px;white-space:nowrap}
#opctx-bar .k{display:inline-flex;align-items:center;gap:4px}
#opctx-bar .sw{display:inline-block;width:11px;height:11px;border-radius:50%}
#opctx-bar .ln{display:inline-block;width:16px;height:0;border-top:2px solid}
div.vis-tooltip{position:absolute;visibility:hidden;padding:6px 8px;white-space:pre-wrap;max-width:520px;
font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,monospace;color:#111;background:#fffbe6;
border:1px solid #ccc;border-radius:4px;box-shadow:2px 2px 8px rgba(0,0,0,.2);pointer-events:none;z-index:5}
"""

_PAGE_JS = """
(function(){
  var data = JSON.parse(document.getElementById("opctx-data").textContent);
  var nodes = new vis.DataSet(data.nodes);
  var edges = new vis.DataSet(data.edges);
  var container = document.getElementById("opctx-graph");
  var network = new vis.Network(container, {nodes: nodes, edges: edges}, {
    physics: false,
    layout: {improvedLayout: false},
    interaction: {hover: true, tooltipDelay: 120, hideEdgesOnDrag: true, multiselect: false},
    edges: {smooth: false, arrows: {to: {enabled: true, scaleFactor: 0.4}}},
    nodes: {font: {size: 11, face: "system-ui"}}
  });
  if (data.nodes.length > data.focusLast) {
    // vis fits the whole graph on its first draw; then zoom onto the newest nodes
    var tail = data.nodes.slice(-data.focusLast);
    var x0 = tail[0].x, x1 = tail[tail.length - 1].x, y0 = Infinity, y1 = -Infinity;
    tail.forEach(function(n){ y0 = Math.min(y0, n.y); y1 = Math.max(y1, n.y); });
    var scale = Math.min(container.clientWidth / (x1 - x0 + 120), container.clientHeight / (y1 - y0 + 120));
    var focus = function(){
      network.moveTo({position: {x: (x0 + x1) / 2, y: (y0 + y1) / 2}, scale: scale, animation: false});
    };
    focus();
    network.once("afterDrawing", function(){ setTimeout(focus, 0); });
  }
  var shown = [];
  function clearReads(){ if (shown.length) { edges.remove(shown); shown = []; } }
  network.on("selectNode", function(p){
    clearReads();
    var id = p.nodes[0], ranges = data.reads[String(id)] || [], add = [];
    for (var r = 0; r < ranges.length; r++)
      for (var j = ranges[r][0]; j <= ranges[r][1]; j++)
        add.push({id: "r" + j + "-" + id, from: j, to: id, color: data.readsColor, width: 0.6});
    if (add.length) { edges.add(add); shown = add.map(function(e){ return e.id; }); }
  });
  network.on("deselectNode", clearReads);
  document.body.setAttribute("data-opctx-ready", "1");
  window.opctxNetwork = network;
})();
"""


def graph_html(layout: _Layout, *, title: str = "opctx session graph") -> str:
    """A whole HTML document for ``layout``: inline vis-network, no external resource."""
    payload = {
        "nodes": layout.nodes,
        "edges": layout.edges,
        "reads": {str(k): v for k, v in layout.reads.items()},
        "readsColor": EDGE_COLORS["reads"],
        # a large graph opens on its newest nodes, where one usually starts reading
        "focusLast": 150,
    }
    legend = "".join(
        f'<span class="k"><span class="sw" style="background:{c}"></span>{r}</span>'
        for r, c in ROLE_COLORS.items()
    ) + "".join(
        f'<span class="k"><span class="ln" style="border-color:{c}"></span>{k}</span>'
        for k, c in EDGE_COLORS.items()
    )
    s = layout.stats
    summary = f"{s['drawn_nodes']} of {s['session_nodes']} nodes drawn"
    if s["truncated"]:
        summary += f", {s['truncated']} older grouped"
    if s["collapsed"]:
        summary += f", {s['collapsed']} collapsed"
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        # belt and braces: even a stray URL in the bundled library cannot fetch anything
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{escape_text(title)}</title><style>{_PAGE_CSS}</style></head><body>"
        f'<div id="opctx-bar"><b>{escape_text(title)}</b><span>{escape_text(summary)}</span>'
        f"{legend}<span>click a node: its reads</span></div>"
        '<div id="opctx-graph"></div>'
        f'<script id="opctx-data" type="application/json">{json_for_script(payload)}</script>'
        f"<script>{vis_network_js()}</script><script>{_PAGE_JS}</script>"
        "</body></html>"
    )


class GraphView:
    """A rendered session graph: ``.html`` (a full page), notebook display, ``save_html``.

    In a notebook it displays as a sandboxed ``<iframe srcdoc=...>`` (see
    ``opctx.viz.html``), which needs no file and no server route.
    """

    def __init__(self, html: str, stats: dict[str, int], *, height: int = 600) -> None:
        self.html = html
        self.stats = stats
        self.height = height

    def _repr_html_(self) -> str:
        return iframe_srcdoc(self.html, height=self.height, title="opctx session graph")

    def save_html(self, path: str | os.PathLike) -> Path:
        """Write the page to ``path`` (UTF-8) and return the path."""
        p = Path(path)
        p.write_text(self.html, encoding="utf-8")
        return p

    def __repr__(self) -> str:
        return f"GraphView({self.stats}, {len(self.html)} bytes)"


def render_graph(
    session_or_graph: Any,
    *,
    session_id: str | None = None,
    edges: Sequence[str] = EDGE_KINDS,
    max_nodes: int = 1500,
    collapse: bool | str = "auto",
    head: str | None = None,
    title: str = "opctx session graph",
    height: int = 600,
    token_counter: Callable[[str], int] | None = None,
    infos: list[NodeInfo] | None = None,
) -> GraphView:
    """Draw a session. See the module docstring for layout, collapsing and capping."""
    kinds = _check_edges(edges)
    if max_nodes < 2:
        raise ValueError(f"max_nodes must be at least 2, got {max_nodes}")
    if collapse not in (True, False, "auto"):
        raise ValueError(f"collapse must be True, False or 'auto', got {collapse!r}")
    graph, found_head = load_session(session_or_graph, session_id)
    if infos is None:
        infos = node_infos(graph, head=head or found_head, token_counter=token_counter)
    layout = _layout(graph, infos, edges=kinds, max_nodes=max_nodes, collapse=collapse)
    return GraphView(graph_html(layout, title=title), layout.stats, height=height)


def to_pyvis(
    session_or_graph: Any,
    *,
    session_id: str | None = None,
    edges: Sequence[str] = ("caller", "predecessor"),
    max_nodes: int = 1500,
    collapse: bool | str = "auto",
) -> Any:
    """The same drawing as a ``pyvis.network.Network`` (``cdn_resources="in_line"``).

    Titles are ``html.escape``d here, because pyvis's template may be used with a
    vis version that renders string titles as HTML. pyvis's page template links
    Bootstrap from a CDN whatever ``cdn_resources`` says; the network returned here
    renders through a copy of that template with those links removed, so its
    ``generate_html``/``write_html`` pages make no request off the machine.
    """
    from pyvis.network import Network

    kinds = _check_edges(edges)
    graph, head = load_session(session_or_graph, session_id)
    infos = node_infos(graph, head=head)
    layout = _layout(graph, infos, edges=kinds, max_nodes=max_nodes, collapse=collapse)
    net = Network(height="600px", width="100%", directed=True, cdn_resources="in_line")
    net.templateEnv = _offline_template_env(net.template_dir)
    net.toggle_physics(False)
    for n in layout.nodes:
        net.add_node(
            n["id"],
            label=n["label"],
            title=escape_text(n["title"]),
            x=n["x"],
            y=n["y"],
            color=n["color"],
            shape=n["shape"],
            size=n["size"],
        )
    for e in layout.edges:
        net.add_edge(e["from"], e["to"], color=e["color"], title=e["title"], dashes=e["dashes"])
    return net


# pyvis's template.html pulls Bootstrap's CSS and JS from jsdelivr, unconditionally.
_CDN_BOOTSTRAP = re.compile(
    r"<link[^>]*?https://cdn\.jsdelivr\.net/npm/bootstrap[^>]*?/?>"
    r"|<script[^>]*?https://cdn\.jsdelivr\.net/npm/bootstrap[^>]*?>\s*</script>",
    re.S,
)


@lru_cache(maxsize=4)
def _offline_template_env(template_dir: str) -> Any:
    """pyvis's jinja environment, serving its templates without the Bootstrap links.

    One per template folder, so templates are compiled once, not on every render.
    """
    from jinja2 import Environment, FileSystemLoader, FunctionLoader

    files = FileSystemLoader(template_dir)

    def load(name: str) -> tuple[str, str | None, Any]:
        source, filename, uptodate = files.get_source(env, name)
        if name.endswith(".html"):
            source = _CDN_BOOTSTRAP.sub("", source)
        return source, filename, uptodate

    env = Environment(loader=FunctionLoader(load))
    return env
