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
  text-only and escaped exactly once, by the JSON embedding. The pyvis export
  passes titles as they are too (pyvis embeds them with jinja's ``tojson``); its
  template's one ``innerHTML`` popup is rewritten to ``innerText``.
* **Layout: time wraps like text.** Sessions of 150-1,000 nodes are the normal
  case, and one node per time step along a single axis draws a thin strip of
  tiny dots. So time runs left to right along a *line* of columns (a node's rank
  in ``seq`` order, so collapsed or capped nodes leave no gap), and lines stack
  downward like lines of text; the number of columns per line is the one that
  lets the whole drawing fit the frame at the largest zoom. Within a line, each
  branch that runs side by side with another gets a lane (branches that follow
  one another, such as a compaction's new branch, share one), and roles are
  offset (user messages on top, assistant calls below, tool results lowest). The
  page wraps again for the frame it really has (a notebook's output can be any
  width), fits the view, and wraps again when resized; an edge from the end of one
  line to the start of the next is drawn faintly. Physics and vis's "improved
  layout" are off: positions are final, which keeps a large graph responsive.
  Labels appear as one zooms in (landmarks first: user messages, summaries).
  ``_layout`` is that sequence of named steps (units, slots, wrap, turns, nodes,
  edges, compaction focus), each testable alone.
* **Turns and compactions.** ``collapse="turns"`` (or the "turns folded" box on
  the page) folds each user turn - a top-level user message and everything up to
  the next one - into one node with vis-network's clustering; double-click one to
  open it. ``focus=`` (or the page's "focus" list) zooms onto one compaction: its
  protected, folded and kept originals, the summary and the copies.
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
    "DEFAULT_ASPECT",
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


# -- the bundled vis-network ---------------------------------------------------------------------


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


# -- the layout: a sequence of small named steps --------------------------------------------------
#
#   units     = _visible_units(...)     what is drawn: nodes, collapsed groups, the "older" group
#   slots     = _time_slots(...)        where in time: (column, lane, offset) per unit
#   positions = _wrap(slots, aspect)    lines of columns filling a frame of that aspect
#   turns     = _turn_of_units(...)     the user turn of each unit (for collapsing turns)
#   nodes     = _vis_nodes(...)         vis-network node dicts: label, tooltip, colour, size
#   edges     = _vis_edges(...)         caller/predecessor edges, reads as index ranges
#   focus     = _compaction_focus(...)  the units of each compaction, for "focus on it"


# a slot's geometry, in vis-network canvas units (also used by the page's script)
_COLUMN = 40.0  # one time step
_LANE = 48.0  # one branch lane within a line
_LINE_GAP = 20.0  # between two lines of the wrap
_ROLE_OFFSET = {"user": 0.0, "system": 0.0, "summary": 0.0, "collapsed": 0.0, "assistant": 10.0,
                "tool": 20.0, "function": 20.0}
_DEPTH_OFFSET = 4.0  # per caller level, at most two
_RADIUS = (7.0, 1.2, 18.0)  # a node's radius: base + per doubling of its tokens, at most
_MAX_ZOOM = 1.5  # fitting a small session enlarges it at most this much
# the frame the Python side wraps for (the page re-wraps for its real frame): 1200 x 600 px
DEFAULT_ASPECT = 2.0
# how many of a compaction's last folded messages its focus shows
_FOCUS_FOLDED = 8


@dataclass
class _Units:
    """What is drawn: one unit per visible node or collapsed group, in ``seq`` order."""

    keys: list[str]  # node ids, or "folded:<summary>" / "older:0" for groups
    rep: dict[str, str]  # node id -> the group it is drawn in (when not drawn itself)
    groups: dict[str, dict[str, Any]]  # group key -> kind, members / count, seq range
    inner: dict[str, int]  # unit -> number of nodes collapsed into it
    truncated: int
    collapsed: bool

    def unit_of(self, node_id: str) -> str:
        return self.rep.get(node_id, node_id)


@dataclass
class _Slot:
    column: int  # position in time
    lane: int  # branch lane within a line
    offset: float  # role offset within the lane


@dataclass
class _Layout:
    nodes: list[dict]
    edges: list[dict]
    reads: dict[int, list[list[int]]]
    stats: dict[str, int]
    slots: list[_Slot] = field(default_factory=list)
    compactions: list[dict] = field(default_factory=list)


def _frame_roots(graph: Graph, infos: list[NodeInfo]) -> dict[str, str]:
    """Map every node inside a top-level agentic frame to that frame's id."""
    rep: dict[str, str] = {}
    for info in infos:
        if info.caller is None and info.role == "code":
            inside = graph.subtree(info.id)
            for n in inside:
                rep.setdefault(n.id, info.id)
    return rep


def _visible_units(
    graph: Graph, infos: list[NodeInfo], *, max_nodes: int, collapse: bool | str
) -> _Units:
    """Collapse frames and folded ranges (when asked or too big), then cap at ``max_nodes``.

    The newest ``max_nodes - 1`` units are kept and the older ones become one group:
    the recent end of a session is what one usually inspects.
    """
    do_collapse = collapse is True or (collapse == "auto" and len(infos) > max_nodes)
    rep: dict[str, str] = {}
    groups: dict[str, dict[str, Any]] = {}
    if do_collapse:
        rep.update(_frame_roots(graph, infos))
        for info in infos:
            if info.compaction == "folded" and info.id not in rep:
                key = f"folded:{info.compaction_summary}"
                rep[info.id] = key
                group = groups.setdefault(
                    key, {"members": [], "kind": "folded", "summary": info.compaction_summary})
                group["members"].append(info)
    # a frame's internals point at the frame, which may itself sit in a folded range
    for member in list(rep):
        target, hops = rep[member], 0
        while target in rep and hops < 4:
            target, hops = rep[target], hops + 1
        rep[member] = target
    inner: dict[str, int] = {}
    for target in rep.values():
        inner[target] = inner.get(target, 0) + 1
    ordered = [(i.seq, i.id) for i in infos if i.id not in rep]
    ordered += [(min(m.seq for m in g["members"]), key) for key, g in groups.items()]
    ordered.sort()
    truncated = 0
    if len(ordered) > max_nodes:
        cut = len(ordered) - (max_nodes - 1)
        dropped = {key for _, key in ordered[:cut]}
        older = "older:0"
        for info in infos:
            if rep.get(info.id, info.id) in dropped:
                rep[info.id] = older
                truncated += 1
        groups[older] = {"members": [], "kind": "older", "count": truncated,
                         "first": ordered[0][0], "last": ordered[cut - 1][0]}
        ordered = [(ordered[0][0], older)] + ordered[cut:]
    return _Units([key for _, key in ordered], rep, groups, inner, truncated, do_collapse)


def _pack_lanes(spans: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Branch -> lane: branches whose column spans do not overlap share a lane.

    A compaction's new branch starts where the old one stops, so a session with any
    number of compactions takes one lane; only branches that run side by side in
    time (forks, rewinds that continue both ways) need a lane of their own.
    """
    lane_end: list[int] = []
    lanes: dict[int, int] = {}
    for branch, (first, last) in sorted(spans.items(), key=lambda kv: kv[1]):
        lane = next((i for i, end in enumerate(lane_end) if end < first), len(lane_end))
        if lane == len(lane_end):
            lane_end.append(last)
        else:
            lane_end[lane] = last
        lanes[branch] = lane
    return lanes


def _unit_branch_and_role(units: _Units, by_id: Mapping[str, NodeInfo], key: str) -> tuple[int, str, int]:
    group = units.groups.get(key)
    if group is None:
        info = by_id[key]
        return info.branch, info.display_role, info.depth
    if group["kind"] == "older":
        return 0, "collapsed", 0
    return group["members"][0].branch, "collapsed", 0


def _offset(role: str, depth: int) -> float:
    return _ROLE_OFFSET.get(role, 10.0) + _DEPTH_OFFSET * min(depth, 2)


def slot_offset(info: NodeInfo) -> float:
    """How far below its lane's top a node sits: by role, then by caller depth."""
    return _offset(info.display_role, info.depth)


def _time_slots(units: _Units, by_id: Mapping[str, NodeInfo]) -> list[_Slot]:
    """Time along the columns (rank in ``seq`` order, so collapsed or capped nodes leave
    no gap), one lane per branch that runs side by side with another, an offset per role
    (user messages on top, assistant calls below, tool results lowest)."""
    described = [_unit_branch_and_role(units, by_id, key) for key in units.keys]
    spans: dict[int, tuple[int, int]] = {}
    for column, (branch, _role, _depth) in enumerate(described):
        first, _last = spans.get(branch, (column, column))
        spans[branch] = (first, column)
    lanes = _pack_lanes(spans)
    return [
        _Slot(column, lanes[branch], _offset(role, depth))
        for column, (branch, role, depth) in enumerate(described)
    ]


def _columns_per_line(n_columns: int, n_lanes: int, aspect: float) -> int:
    """How many time steps a line holds so that the drawing best fills a frame of
    ``aspect`` (width / height): the choice that gives the largest zoom at which the
    whole drawing fits. The page's script makes the same choice for its real frame."""
    line_height = n_lanes * _LANE + _LINE_GAP
    best, best_scale = max(1, n_columns), -1.0
    for per_line in range(1, max(1, n_columns) + 1):
        lines = -(-n_columns // per_line)
        scale = min(aspect / (per_line * _COLUMN), 1.0 / (lines * line_height))
        if scale > best_scale + 1e-12:
            best, best_scale = per_line, scale
    return best


def _wrap(slots: Sequence[_Slot], aspect: float = DEFAULT_ASPECT) -> tuple[list[tuple[float, float]], int]:
    """``(x, y)`` per slot and the columns per line: time wraps into lines like text."""
    if not slots:
        return [], 1
    n_columns = max(s.column for s in slots) + 1
    n_lanes = max(s.lane for s in slots) + 1
    per_line = _columns_per_line(n_columns, n_lanes, aspect)
    line_height = n_lanes * _LANE + _LINE_GAP
    return [
        ((s.column % per_line) * _COLUMN,
         (s.column // per_line) * line_height + s.lane * _LANE + s.offset)
        for s in slots
    ], per_line


def _turn_of_units(units: _Units, by_id: Mapping[str, NodeInfo]) -> list[int]:
    """The user turn of every unit: a turn starts at each top-level user message
    (-1 for groups, which are never folded into a turn)."""
    turns: list[int] = []
    turn = 0
    seen_user = False
    for key in units.keys:
        info = by_id.get(key)
        if info is None:
            turns.append(-1)
            continue
        if info.display_role == "user" and info.depth == 0:
            turn += 1 if seen_user else 0
            seen_user = True
        turns.append(turn)
    return turns


def _group_node(group: dict[str, Any], max_nodes: int) -> tuple[str, str, int, str | None]:
    """``(label, tooltip, branch, compaction)`` of a collapsed group."""
    if group["kind"] == "older":
        return (
            f"\u2026 {group['count']} earlier nodes",
            f"{group['count']} older nodes (seq {group['first']}\u2013{group['last']}) are not "
            f"drawn: max_nodes={max_nodes}.\nUse to_networkx() for all of them.",
            0, None,
        )
    members = group["members"]
    return (
        f"folded \u00d7{len(members)}",
        f"{len(members)} messages folded by summary {group['summary']}\n"
        f"seq {members[0].seq}\u2013{members[-1].seq}, "
        f"\u2248{sum(m.tokens for m in members)} tokens",
        members[0].branch, "folded",
    )


def _tooltip(info: NodeInfo, inner: int) -> str:
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
    return "\n".join([*lines, "", info.preview])


def _vis_nodes(
    units: _Units,
    by_id: Mapping[str, NodeInfo],
    slots: Sequence[_Slot],
    positions: Sequence[tuple[float, float]],
    turns: Sequence[int],
    *,
    max_nodes: int,
) -> list[dict]:
    """One vis-network node per unit. Tooltips are plain text (see the module docstring)."""
    nodes: list[dict] = []
    for i, key in enumerate(units.keys):
        group = units.groups.get(key)
        if group is not None:
            label, title, _branch, comp = _group_node(group, max_nodes)
            role, radius = "collapsed", 14.0
        else:
            info = by_id[key]
            inner = units.inner.get(key, 0)
            label = preview(f"{info.seq} {info.name or info.display_role}", 28) + (
                f" (+{inner})" if inner else "")
            title = _tooltip(info, inner)
            role, comp = info.display_role, info.compaction
            base, per_doubling, largest = _RADIUS
            radius = min(largest, base + per_doubling * math.log2(info.tokens + 1))
        x, y = positions[i]
        node: dict[str, Any] = {
            "id": i,
            "label": label,
            "title": title,
            "x": x,
            "y": y,
            # the slot, for the page to wrap again for its own frame
            "c": slots[i].column,
            "l": slots[i].lane,
            "o": slots[i].offset,
            "turn": turns[i],
            "size": round(radius, 1),
            "color": {
                "background": ROLE_COLORS[role],
                "border": COMPACTION_COLORS.get(comp or "", ROLE_COLORS[role]),
            },
            "borderWidth": 3 if comp else 1,
            "shape": "box" if role == "collapsed" else ("diamond" if role == "summary" else "dot"),
            "group": role,
        }
        if role in ("user", "summary", "collapsed"):
            node["font"] = {"size": 13}  # landmarks: their labels appear first when zooming in
        if comp == "folded" and role != "collapsed":
            node["opacity"] = 0.45
        nodes.append(node)
    return nodes


def _index_ranges(indices: Iterable[int]) -> list[list[int]]:
    ranges: list[list[int]] = []
    for j in sorted(set(indices)):
        if ranges and ranges[-1][1] == j - 1:
            ranges[-1][1] = j
        else:
            ranges.append([j, j])
    return ranges


def _vis_edges(
    units: _Units, infos: Sequence[NodeInfo], kinds: tuple[str, ...]
) -> tuple[list[dict], dict[int, list[list[int]]]]:
    """Caller and predecessor edges between units (merged, with a count), and each
    drawn node's reads as index ranges (an llm call reads most earlier nodes: they
    are drawn for the selected node only)."""
    index = {key: i for i, key in enumerate(units.keys)}
    counts: dict[tuple[int, int, str], int] = {}
    reads: dict[int, list[list[int]]] = {}
    for info in infos:
        target = index.get(units.unit_of(info.id))
        if target is None:
            continue
        for kind in ("caller", "predecessor"):
            source_id = getattr(info, kind)
            if kind not in kinds or not source_id:
                continue
            source = index.get(units.unit_of(source_id))
            if source is not None and source != target:
                counts[(source, target, kind)] = counts.get((source, target, kind), 0) + 1
        if "reads" in kinds and info.reads and info.id not in units.rep:
            read = {index[u] for u in map(units.unit_of, info.reads) if u in index} - {target}
            if read:
                reads[target] = _index_ranges(read)
    edges = [
        {
            "from": s,
            "to": t,
            "kind": k,
            "color": EDGE_COLORS[k],
            "dashes": k == "caller",
            "width": 1 + min(4.0, math.log2(c)) if c > 1 else 1,
            "title": f"{k}" + (f" \u00d7{c}" if c > 1 else ""),
        }
        for (s, t, k), c in counts.items()
    ]
    return edges, reads


def _compaction_focus(graph: Graph, units: _Units) -> list[dict]:
    """Per compaction (summary node, in ``seq`` order): a label and the units around its
    cut - the summary, the kept originals, the copies and the last folded messages.

    The protected head is left out: it sits at the start of the session, and zooming
    to hold it would show the whole session again.
    """
    index = {key: i for i, key in enumerate(units.keys)}
    out = []
    for node in graph:
        comp = node.metadata.get("compaction")
        if not _is_summary(node) or not isinstance(comp, dict):
            continue
        folded = [i for i in comp.get("folded_ids") or () if isinstance(i, str)]
        span = comp.get("folded_range")
        if not folded and isinstance(span, list | tuple) and len(span) == 2 and all(span):
            folded = _range_ids(graph, span[0], span[1])
        kept = {i for i in comp.get("kept_ids") or () if isinstance(i, str)}
        originals = kept | {i for i in comp.get("protected_ids") or () if isinstance(i, str)}
        copies = {n.id for n in graph if n.metadata.get("copied_from") in originals}
        around = {node.id} | kept | copies | set(folded[-_FOCUS_FOLDED:])
        drawn = sorted({index[u] for u in map(units.unit_of, around) if u in index})
        out.append({"id": node.id, "label": f"compaction {len(out) + 1} (seq {node.seq})",
                    "summary": index.get(units.unit_of(node.id)), "nodes": drawn})
    return out


def _layout(
    graph: Graph,
    infos: list[NodeInfo],
    *,
    edges: tuple[str, ...],
    max_nodes: int,
    collapse: bool | str,
    aspect: float = DEFAULT_ASPECT,
    slots: Callable[[_Units], list[_Slot]] | None = None,
) -> _Layout:
    """The drawing of ``infos``: the steps above, in order (``slots`` may place units)."""
    by_id = {i.id: i for i in infos}
    units = _visible_units(graph, infos, max_nodes=max_nodes, collapse=collapse)
    placed = slots(units) if slots is not None else _time_slots(units, by_id)
    positions, per_line = _wrap(placed, aspect)
    turns = _turn_of_units(units, by_id)
    nodes = _vis_nodes(units, by_id, placed, positions, turns, max_nodes=max_nodes)
    edge_list, reads = _vis_edges(units, infos, edges)
    stats = {
        "session_nodes": len(infos),
        "drawn_nodes": len(nodes),
        "drawn_edges": len(edge_list),
        "collapsed": sum(units.inner.values()) if units.collapsed else 0,
        "truncated": units.truncated,
        "branches": len({by_id[k].branch for k in units.keys if k in by_id}),
        "lanes": len({s.lane for s in placed}),
        "turns": len({t for t in turns if t >= 0}),
        "columns_per_line": per_line,
    }
    return _Layout(nodes, edge_list, reads, stats, placed, _compaction_focus(graph, units))


# -- the HTML page -------------------------------------------------------------------------------

_PAGE_CSS = """
html,body{margin:0;padding:0;height:100%;font:13px/1.35 system-ui,-apple-system,Segoe UI,sans-serif;color:#222;background:#fff}
body{display:flex;flex-direction:column}
#opctx-graph{flex:1 1 auto;min-height:200px;width:100%;border-top:1px solid #e5e5e5}
#opctx-bar{flex:0 0 auto;display:flex;flex-wrap:wrap;gap:4px 14px;align-items:center;padding:5px 8px;white-space:nowrap}
#opctx-bar .k{display:inline-flex;align-items:center;gap:4px}
#opctx-bar .sw{display:inline-block;width:11px;height:11px;border-radius:50%}
#opctx-bar .ln{display:inline-block;width:16px;height:0;border-top:2px solid}
#opctx-bar select,#opctx-bar button{font:inherit}
div.vis-tooltip{position:absolute;visibility:hidden;padding:6px 8px;white-space:pre-wrap;max-width:520px;
font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,monospace;color:#111;background:#fffbe6;
border:1px solid #ccc;border-radius:4px;box-shadow:2px 2px 8px rgba(0,0,0,.2);pointer-events:none;z-index:5}
"""

# The page places the nodes itself: the same wrap as _columns_per_line / _wrap, for the
# frame it really has (a notebook's output can be any width), then fits the view.
_PAGE_JS = """
(function(){
  var data = JSON.parse(document.getElementById("opctx-data").textContent);
  var geo = data.geometry;
  var container = document.getElementById("opctx-graph");
  var turnBox = document.getElementById("opctx-turns");
  var focusBox = document.getElementById("opctx-focus");
  var members = {};  // turn -> its nodes, in time order
  data.nodes.forEach(function(n){ if (n.turn >= 0) (members[n.turn] = members[n.turn] || []).push(n); });
  var folded = {};  // turn -> true while it is drawn as one node
  if (data.collapseTurns) Object.keys(members).forEach(function(t){ folded[t] = true; });

  function isFolded(n){ return n.turn >= 0 && folded[n.turn] && members[n.turn].length > 1; }
  function shownAs(index){ var n = data.nodes[index]; return isFolded(n) ? "turn:" + n.turn : index; }

  function turnNode(n){  // one node standing for a whole turn
    var list = members[n.turn];
    return {id: "turn:" + n.turn, c: n.c, l: n.l, o: 0, turn: n.turn, shape: "dot",
            size: Math.min(17, 8 + 2 * Math.sqrt(list.length)), label: String(n.turn),
            font: {size: 13}, borderWidth: 3,
            // a turn holding a compaction's summary keeps the summary's colour on its rim
            color: {background: list[0].color.background,
                    border: list.some(function(m){ return m.group === "summary"; }) ? data.summaryColor : "#2b4c6f"},
            title: "turn " + n.turn + ": " + list.length + " nodes, double-click to open\\n\\n" + list[0].title};
  }
  function visibleNodes(){
    var out = [], done = {}, any = false;
    data.nodes.forEach(function(n){
      if (!isFolded(n)) { out.push(Object.assign({}, n)); return; }
      any = true;
      if (!done[n.turn]) { done[n.turn] = true; out.push(turnNode(n)); }
    });
    if (any) out.forEach(function(n, k){ n.c = k; });  // a folded turn takes one time step
    return out;
  }
  function visibleEdges(){
    var seen = {}, out = [];
    data.edges.forEach(function(e){
      var a = shownAs(e.from), b = shownAs(e.to), key = a + ">" + b + ">" + e.kind;
      if (a === b || seen[key]) return;
      seen[key] = true;
      out.push({id: key, from: a, to: b, color: e.color, dashes: e.dashes, width: e.width, title: e.title});
    });
    return out;
  }

  // the same choice as opctx.viz.graph._columns_per_line, for the frame the page really has
  function columnsPerLine(nColumns, lineHeight, aspect){
    var best = Math.max(1, nColumns), bestScale = -1;
    for (var w = 1; w <= Math.max(1, nColumns); w++) {
      var lines = Math.ceil(nColumns / w);
      var scale = Math.min(aspect / (w * geo.column), 1.0 / (lines * lineHeight));
      if (scale > bestScale + 1e-12) { best = w; bestScale = scale; }
    }
    return best;
  }
  function place(nodeList, edgeList){  // as opctx.viz.graph._wrap
    var nColumns = 0, nLanes = 0, line = {};
    nodeList.forEach(function(n){ nColumns = Math.max(nColumns, n.c + 1); nLanes = Math.max(nLanes, n.l + 1); });
    var lineHeight = nLanes * geo.lane + geo.lineGap;
    var w = columnsPerLine(nColumns, lineHeight, container.clientWidth / Math.max(1, container.clientHeight));
    nodeList.forEach(function(n){
      line[n.id] = Math.floor(n.c / w);
      n.x = (n.c % w) * geo.column;
      n.y = line[n.id] * lineHeight + n.l * geo.lane + n.o;
    });
    // an edge from the end of one line to the start of the next is drawn faintly
    edgeList.forEach(function(e){
      e.color = {color: typeof e.color === "string" ? e.color : e.color.color,
                 opacity: line[e.from] === line[e.to] ? 1 : 0.2};
    });
    window.opctxColumnsPerLine = w;
  }

  var nodes = new vis.DataSet(), edges = new vis.DataSet(), network = null;
  function draw(){
    var nodeList = visibleNodes(), edgeList = visibleEdges();
    place(nodeList, edgeList);
    clearReads();
    nodes.clear(); edges.clear();
    nodes.add(nodeList); edges.add(edgeList);
    if (network) focusOn(focusBox ? Number(focusBox.value) : -1);
  }

  // fit the whole session (a small one may grow up to MAX_ZOOM), or where one compaction cut
  function fitAll(){ network.fit({animation: false, maxZoomLevel: geo.maxZoom}); }
  function focusOn(i){
    var compaction = i >= 0 ? data.compactions[i] : null;
    if (!compaction || !compaction.nodes.length) { fitAll(); return; }
    var ids = compaction.nodes.map(shownAs).filter(function(id, k, all){ return all.indexOf(id) === k; });
    // centre on the summary, zoomed so that about as many time steps as the cut holds fill
    // the width (its nodes may straddle two lines, so fitting their box would not zoom)
    fitAll();
    var whole = network.getScale();
    var centre = compaction.summary !== null ? shownAs(compaction.summary) : ids[0];
    var scale = Math.min(geo.maxZoom, container.clientWidth / ((ids.length + 4) * geo.column));
    network.moveTo({position: network.getPositions([centre])[centre],
                    scale: Math.max(whole, scale), animation: false});
    if (centre === compaction.summary) network.selectNodes([centre]);
  }

  // click a node: draw what it read
  var shown = [];
  function clearReads(){ if (shown.length) { edges.remove(shown); shown = []; } }

  draw();
  network = new vis.Network(container, {nodes: nodes, edges: edges}, {
    physics: false,
    layout: {improvedLayout: false},
    interaction: {hover: true, tooltipDelay: 120, hideEdgesOnDrag: true, multiselect: false},
    edges: {smooth: false, arrows: {to: {enabled: true, scaleFactor: 0.4}}},
    nodes: {font: {size: 10, face: "system-ui"}, scaling: {label: {drawThreshold: 9}}}
  });
  window.opctxNetwork = network;
  network.on("selectNode", function(p){
    clearReads();
    var id = p.nodes[0];
    if (typeof id !== "number") return;
    var ranges = data.reads[String(id)] || [], add = [], seen = {};
    for (var r = 0; r < ranges.length; r++)
      for (var j = ranges[r][0]; j <= ranges[r][1]; j++) {
        var from = shownAs(j);
        if (seen[from] || from === id) continue;
        seen[from] = true;
        add.push({id: "r:" + from + ">" + id, from: from, to: id, color: data.readsColor, width: 0.6});
      }
    if (add.length) { edges.add(add); shown = add.map(function(e){ return e.id; }); }
  });
  network.on("deselectNode", clearReads);
  network.on("doubleClick", function(p){
    var id = p.nodes.length ? p.nodes[0] : null;
    if (typeof id === "string" && id.indexOf("turn:") === 0) { delete folded[id.slice(5)]; draw(); }
  });
  if (turnBox) {
    turnBox.checked = Boolean(data.collapseTurns);
    turnBox.addEventListener("change", function(){
      folded = {};
      if (turnBox.checked) Object.keys(members).forEach(function(t){ folded[t] = true; });
      draw();
    });
  }
  if (focusBox) {
    data.compactions.forEach(function(c, i){
      var option = document.createElement("option");
      option.value = String(i); option.textContent = c.label;
      focusBox.appendChild(option);
    });
    focusBox.value = String(data.focus === null ? -1 : data.focus);
    focusBox.addEventListener("change", function(){ focusOn(Number(focusBox.value)); });
  }
  var fitButton = document.getElementById("opctx-fit");
  if (fitButton) fitButton.addEventListener("click", function(){
    if (focusBox) focusBox.value = "-1";
    fitAll();
  });
  var resizing = null;
  window.addEventListener("resize", function(){ clearTimeout(resizing); resizing = setTimeout(draw, 150); });

  var start = function(){ focusOn(data.focus === null ? -1 : data.focus); };
  start();
  network.once("afterDrawing", function(){
    setTimeout(function(){ start(); document.body.setAttribute("data-opctx-ready", "1"); }, 0);
  });
})();
"""


def graph_html(
    layout: _Layout,
    *,
    title: str = "opctx session graph",
    focus: int | None = None,
    collapse_turns: bool = False,
    turns: bool = True,
) -> str:
    """A whole HTML document for ``layout``: inline vis-network, no external resource.

    ``focus``: the index of a compaction (``layout.compactions``) to open on;
    ``collapse_turns``: open with every turn folded into one node; ``turns``: offer
    the "turns folded" switch at all (a diff, laid out by its own columns, does not).
    """
    payload = {
        "nodes": layout.nodes,
        "edges": [{**e, "id": f"e{k}"} for k, e in enumerate(layout.edges)],
        "reads": {str(k): v for k, v in layout.reads.items()},
        "readsColor": EDGE_COLORS["reads"],
        "summaryColor": COMPACTION_COLORS["summary"],
        "geometry": {"column": _COLUMN, "lane": _LANE, "lineGap": _LINE_GAP, "maxZoom": _MAX_ZOOM},
        "compactions": layout.compactions,
        "focus": focus,
        "collapseTurns": bool(collapse_turns and turns),
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
    controls = ('<label class="k"><input type="checkbox" id="opctx-turns">turns folded</label>'
                if turns else "")
    if layout.compactions:
        controls += ('<label class="k">focus <select id="opctx-focus">'
                     '<option value="-1">whole session</option></select></label>')
    controls += '<button id="opctx-fit" type="button">fit</button>'
    hint = "click a node: its reads" + ("; double-click a turn: open it" if turns else "")
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        # belt and braces: even a stray URL in the bundled library cannot fetch anything
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{escape_text(title)}</title><style>{_PAGE_CSS}</style></head><body>"
        f'<div id="opctx-bar"><b>{escape_text(title)}</b><span>{escape_text(summary)}</span>'
        f"{controls}{legend}<span>{hint}</span></div>"
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


def _focus_index(layout: _Layout, focus: int | str | None) -> int | None:
    """``focus`` (a compaction index, a summary id, or None) as an index of ``layout.compactions``."""
    if focus is None:
        return None
    if not layout.compactions:
        raise ValueError("focus= names a compaction, but this session has none")
    if isinstance(focus, int) and not isinstance(focus, bool):
        if not -len(layout.compactions) <= focus < len(layout.compactions):
            raise IndexError(f"focus={focus}: this session has {len(layout.compactions)} "
                             "compaction(s)")
        return focus % len(layout.compactions)
    if isinstance(focus, str):
        summaries = [c["id"] for c in layout.compactions]
        if focus not in summaries:
            raise ValueError(f"focus={focus!r} is not the summary node of a compaction")
        return summaries.index(focus)
    raise TypeError(f"focus must be a compaction index, a summary id or None, got {focus!r}")


def _render(
    graph: Graph,
    infos: list[NodeInfo],
    *,
    kinds: tuple[str, ...],
    max_nodes: int,
    collapse: bool | str,
    title: str,
    height: int,
    focus: int | str | None = None,
    slots: Callable[[_Units], list[_Slot]] | None = None,
    turns: bool = True,
) -> GraphView:
    layout = _layout(graph, infos, edges=kinds, max_nodes=max_nodes,
                     collapse=False if collapse == "turns" else collapse,
                     aspect=_aspect_of(height), slots=slots)
    page = graph_html(layout, title=title, focus=_focus_index(layout, focus),
                      collapse_turns=collapse == "turns", turns=turns)
    return GraphView(page, layout.stats, height=height)


def _aspect_of(height: int) -> float:
    # the frame the Python layout assumes: a notebook's output width (~1,200 px) by
    # ``height`` less the bar; the page wraps again for the frame it really gets
    return 1200.0 / max(100.0, height - 40.0)


def render_graph(
    session_or_graph: Any,
    *,
    session_id: str | None = None,
    edges: Sequence[str] = EDGE_KINDS,
    max_nodes: int = 1500,
    collapse: bool | str = "auto",
    focus: int | str | None = None,
    head: str | None = None,
    title: str = "opctx session graph",
    height: int = 600,
    token_counter: Callable[[str], int] | None = None,
    infos: list[NodeInfo] | None = None,
) -> GraphView:
    """Draw a session. See the module docstring for layout, collapsing and capping.

    ``collapse``: ``"auto"``, ``True``, ``False`` (frames and folded ranges), or
    ``"turns"`` (open with every user turn folded into one node; double-click one
    to open it). ``focus``: open zoomed on a compaction (its index in ``seq`` order,
    ``-1`` the latest, or its summary node's id) instead of the whole session.
    """
    kinds = _check_edges(edges)
    if max_nodes < 2:
        raise ValueError(f"max_nodes must be at least 2, got {max_nodes}")
    if collapse not in (True, False, "auto", "turns"):
        raise ValueError(f"collapse must be True, False, 'auto' or 'turns', got {collapse!r}")
    graph, found_head = load_session(session_or_graph, session_id)
    if infos is None:
        infos = node_infos(graph, head=head or found_head, token_counter=token_counter)
    return _render(graph, infos, kinds=kinds, max_nodes=max_nodes, collapse=collapse,
                   title=title, height=height, focus=focus)


def to_pyvis(
    session_or_graph: Any,
    *,
    session_id: str | None = None,
    edges: Sequence[str] = ("caller", "predecessor"),
    max_nodes: int = 1500,
    collapse: bool | str = "auto",
) -> Any:
    """The same drawing as a ``pyvis.network.Network`` (``cdn_resources="in_line"``).

    Positions are those of ``render_graph`` for a 1200 x 560 px frame. ``reads``
    edges are drawn when ``edges`` names them (all of them: pyvis has no
    "on selection"). Tooltips are plain text, escaped exactly once on their way
    into the page (pyvis embeds node data with jinja's ``tojson``) and shown as
    text by vis-network; the network renders through a copy of pyvis's template
    whose Bootstrap links are removed (no request leaves the machine) and whose
    link-tooltip popup (used by pyvis when a title contains "href") sets text, not
    HTML.
    """
    from pyvis.network import Network

    kinds = _check_edges(edges)
    if collapse not in (True, False, "auto"):
        raise ValueError(f"collapse must be True, False or 'auto', got {collapse!r}")
    graph, head = load_session(session_or_graph, session_id)
    infos = node_infos(graph, head=head)
    layout = _layout(graph, infos, edges=kinds, max_nodes=max_nodes, collapse=collapse)
    net = Network(height="600px", width="100%", directed=True, cdn_resources="in_line")
    net.templateEnv = _offline_template_env(net.template_dir)
    net.toggle_physics(False)
    for n in layout.nodes:
        net.add_node(n["id"], label=n["label"], title=n["title"], x=n["x"], y=n["y"],
                     color=n["color"], shape=n["shape"], size=n["size"])
    for e in layout.edges:
        net.add_edge(e["from"], e["to"], color=e["color"], title=e["title"], dashes=e["dashes"])
    for target, ranges in layout.reads.items():
        for first, last in ranges:
            for source in range(first, last + 1):
                net.add_edge(source, target, color=EDGE_COLORS["reads"], title="reads", width=0.6)
    return net


# pyvis's template.html pulls Bootstrap's CSS and JS from jsdelivr, unconditionally.
_CDN_BOOTSTRAP = re.compile(
    r"<link[^>]*?https://cdn\.jsdelivr\.net/npm/bootstrap[^>]*?/?>"
    r"|<script[^>]*?https://cdn\.jsdelivr\.net/npm/bootstrap[^>]*?>\s*</script>",
    re.S,
)


_LINK_POPUP_HTML = "popup.innerHTML = nodeData[0].title;"
_LINK_POPUP_TEXT = "popup.innerText = nodeData[0].title;"


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
            # the popup pyvis uses when a title mentions "href" sets innerHTML: text only
            source = source.replace(_LINK_POPUP_HTML, _LINK_POPUP_TEXT)
        return source, filename, uptodate

    env = Environment(loader=FunctionLoader(load))
    return env
