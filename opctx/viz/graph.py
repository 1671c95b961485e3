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
    ``summary`` / ``kept`` / ``copy``, ``cleared`` for a tool result a recorded
    aging step cleared, or ``None``), ``compaction_summary`` (the summary node, or
    the aging boundary, that gave that membership), ``copied_from`` and ``preview``.
    A summary keeps ``display_role`` "summary" when a later compaction folds it.

``render_graph(source, ...) -> GraphView``
    a self-contained HTML page drawing the graph with vis-network, and a notebook
    display object for it.

Choices, and why:

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
  ``_layout`` is that sequence of named steps (units, slots, wrap, turns, nodes,
  edges, compaction focus), each testable alone.
* **Looks: one vocabulary.** Fill and shape say the role, the border (ink, dash,
  fade) the membership, from ``_vocabulary`` (the same as the diff tables, the
  widgets and the plots; docs/viz.md "Visual vocabulary"); the page's legend names
  what it draws and the key of its numbers.
* **Labels never overlap.** Each node has a full label (``#seq name``) and a short
  one (``#seq``); every number says what it counts (``#n`` a sequence number,
  ``turn n`` a user turn, "12 folded", "+3 inside"). The page decides at every zoom
  and focus which to draw: in order of importance (summaries, groups and folded
  turns, user messages, then larger nodes), each node takes its full label, else its
  short one, else none, whichever does not overlap a label already placed, measured
  with the label's font where vis-network draws it.
* **Turns and compactions.** ``collapse="turns"`` (or the "turns folded" box on
  the page) folds each user turn - a top-level user message and everything up to
  the next one - into one node with vis-network's clustering; double-click one to
  open it. ``focus=`` (or the page's "focus" list) zooms onto one compaction: its
  protected, folded and kept originals, the summary and the copies; while focused,
  the borders show what *that* compaction did (the whole session shows each node's
  latest fate, and a later compaction may fold what an earlier one kept).
* **Size.** ``collapse="auto"`` folds each top-level agentic frame's internals
  into the frame node and each compaction's folded range into one node, but only
  when the graph has more than ``max_nodes`` nodes; ``True``/``False`` force it.
  If more than ``max_nodes`` remain, the newest ``max_nodes - 1`` are drawn and
  the older ones become one summary node, edges redirected onto it (the recent
  end of a session is what one usually inspects; ``to_networkx`` always has all
  of it). ``reads`` edges are fan-in (an llm call reads most earlier nodes), so
  they are not drawn up front: they are shipped as index ranges and drawn for the
  selected node only.

Code layout: this module keeps ``to_networkx``, ``render_graph``, ``GraphView`` and
``to_pyvis``; private modules hold the parts, every public name re-exported here:
``_graph_nodes`` (loading a session, compaction membership, ``NodeInfo`` /
``node_infos``), ``_graph_labels`` (palettes, labels and tooltips), ``_graph_layout``
(the layout steps above, ``_layout``) and ``_graph_page`` (``graph_html``, the page's
CSS and script, ``vis_network_js``). Imports among them point one way: ``graph`` ->
``_graph_page`` -> ``_graph_layout`` -> ``_graph_labels`` -> ``_graph_nodes``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..dag.nodes import Graph
from ._graph_labels import COMPACTION_COLORS, EDGE_COLORS, ROLE_COLORS
from ._graph_layout import DEFAULT_ASPECT, _Layout, _layout, _Slot, _Units
from ._graph_nodes import (
    EDGE_KINDS,
    NodeInfo,
    _check_edges,
    as_graph,
    call_text,
    compaction_membership,
    load_session,
    node_infos,
)
from ._graph_page import graph_html, vis_network_js
from .html import iframe_srcdoc

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
