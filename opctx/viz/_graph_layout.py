"""Where every node of a session graph is drawn: a sequence of small named steps.

Private to ``opctx.viz.graph`` (its docstring has the choices: time wraps like text,
lanes per branch, turns and compactions, collapsing and capping).

    units     = _visible_units(...)     what is drawn: nodes, collapsed groups, the "older" group
    slots     = _time_slots(...)        where in time: (column, lane, offset) per unit
    positions = _wrap(slots, aspect)    lines of columns filling a frame of that aspect
    turns     = _turn_of_units(...)     the user turn of each unit (for collapsing turns)
    nodes     = _vis_nodes(...)         vis-network node dicts: label, tooltip, colour, size
    edges     = _vis_edges(...)         caller/predecessor edges, reads as index ranges
    focus     = _compaction_focus(...)  the units of each compaction, for "focus on it"

``_layout`` runs them in that order; ``graph_html`` (in ``_graph_page``) draws the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..dag.nodes import Graph
from ._graph_labels import EDGE_COLORS, _group_node, _node_labels, _tooltip
from ._graph_nodes import NodeInfo, _is_summary, _range_ids
from ._vocabulary import EDGES, vis_style

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


def _vis_nodes(
    units: _Units,
    by_id: Mapping[str, NodeInfo],
    slots: Sequence[_Slot],
    positions: Sequence[tuple[float, float]],
    turns: Sequence[int],
    *,
    max_nodes: int,
) -> list[dict]:
    """One vis-network node per unit: position, slot, size, the vocabulary's style for its
    role and membership, a full and a short label (the page shows whichever fits).
    Tooltips are plain text (see the module docstring)."""
    nodes: list[dict] = []
    for i, key in enumerate(units.keys):
        group = units.groups.get(key)
        if group is not None:
            label, short, title, _branch, comp = _group_node(group, max_nodes)
            role, radius = "collapsed", 12.0
        else:
            info = by_id[key]
            inner = units.inner.get(key, 0)
            label, short = _node_labels(info, inner)
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
            **vis_style(role, comp),
            "role": role,  # not vis-network's "group": a group's colours would override these on update
        }
        if comp:
            node["membership"] = comp
        if short != label.split(" ")[0]:
            node["short"] = short  # else the page takes the label's first word
        if role in ("user", "summary", "collapsed"):
            node["font"] = {"size": 13}  # landmarks: their labels win a place first
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
            "dashes": EDGES[k].dashes,
            "width": 1 + min(4.0, math.log2(c)) if c > 1 else 1,
            "title": f"{k}" + (f" \u00d7{c}" if c > 1 else ""),
        }
        for (s, t, k), c in counts.items()
    ]
    return edges, reads


def _compaction_focus(graph: Graph, units: _Units) -> list[dict]:
    """Per compaction (summary node, in ``seq`` order): a label, the units around its cut -
    the summary, the kept originals, the copies and the last folded messages - and what
    *this* compaction did to each unit it touched (``membership``: status -> index ranges).

    The drawing shows each node's latest fate (a later compaction may fold what an earlier
    one kept); focused on one compaction, the page draws that compaction's own memberships.
    The protected head is left out of the zoom: it sits at the start of the session, and
    zooming to hold it would show the whole session again.
    """
    index = {key: i for i, key in enumerate(units.keys)}

    def drawn(ids: Iterable[str]) -> list[int]:
        return sorted({index[u] for u in map(units.unit_of, ids) if u in index})

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
        protected = {i for i in comp.get("protected_ids") or () if isinstance(i, str)}
        copies = {n.id for n in graph if n.metadata.get("copied_from") in kept | protected}
        around = {node.id} | kept | copies | set(folded[-_FOCUS_FOLDED:])
        membership = {status: _index_ranges(drawn(ids)) for status, ids in (
            ("protected", protected), ("folded", folded), ("kept", kept), ("copy", copies),
            ("summary", [node.id]))}
        out.append({"id": node.id, "label": f"compaction {len(out) + 1} (seq {node.seq})",
                    "summary": index.get(units.unit_of(node.id)), "nodes": drawn(around),
                    "membership": {k: v for k, v in membership.items() if v}})
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
