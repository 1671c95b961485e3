"""The HTML page of a session graph: inline vis-network (from pyvis's bundle), no external
resource, and the script that wraps the drawing for the frame it really gets.

Private to ``opctx.viz.graph``, which re-exports ``graph_html`` and ``vis_network_js``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ._graph_labels import COMPACTION_COLORS, EDGE_COLORS
from ._graph_layout import _COLUMN, _LANE, _LINE_GAP, _MAX_ZOOM, _Layout
from ._vocabulary import FADED_OPACITY, MEMBERSHIP, ROLES, legend_html
from .html import escape_text, json_for_script

# How the page draws labels (see _PAGE_JS, ``relabel``): font, the smallest and largest
# size on screen (vis-network's drawThreshold and maxVisible), the space kept around a
# label (px), and which labels win a place first (summaries, then groups and folded turns, then user messages, then the rest;
# within a rank the larger node first).
LABELS = {
    "face": "system-ui, sans-serif",
    "size": 10,
    "minPx": 9,
    "maxPx": 30,
    "pad": 2,
    "rank": {"summary": 0, "collapsed": 1, "turn": 1, "user": 2, "other": 3},
}


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


_PAGE_CSS = """
html,body{margin:0;padding:0;height:100%;font:13px/1.35 system-ui,-apple-system,Segoe UI,sans-serif;color:#222;background:#fff}
body{display:flex;flex-direction:column}
#opctx-graph{flex:1 1 auto;min-height:200px;width:100%;border-top:1px solid #e5e5e5}
#opctx-bar{flex:0 0 auto;padding:4px 8px}
#opctx-bar .row{display:flex;flex-wrap:wrap;gap:4px 14px;align-items:center;white-space:nowrap}
#opctx-bar .k{display:inline-flex;align-items:center;gap:4px}
#opctx-bar select,#opctx-bar button{font:inherit}
#opctx-bar .hint{color:#777}
div.vis-tooltip{position:absolute;visibility:hidden;padding:6px 8px;white-space:pre-wrap;max-width:520px;
font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,monospace;color:#111;background:#fffbe6;
border:1px solid #ccc;border-radius:4px;box-shadow:2px 2px 8px rgba(0,0,0,.2);pointer-events:none;z-index:5}
"""

# The page places the nodes itself: the same wrap as _columns_per_line / _wrap, for the
# frame it really has (a notebook's output can be any width), then fits the view. It also
# chooses which labels to draw (``relabel``): at the current zoom, in order of importance,
# a node shows its full label, else its short one, else none - whichever does not overlap a
# label already placed - so labels never overlap at any zoom or focus.
_PAGE_JS = """
(function(){
  var data = JSON.parse(document.getElementById("opctx-data").textContent);
  var geo = data.geometry, lab = data.labels;
  var container = document.getElementById("opctx-graph");
  var turnBox = document.getElementById("opctx-turns");
  var focusBox = document.getElementById("opctx-focus");
  var members = {};  // turn -> its nodes, in time order
  data.nodes.forEach(function(n){ if (n.turn >= 0) (members[n.turn] = members[n.turn] || []).push(n); });
  var folded = {};  // turn -> true while it is drawn as one node
  if (data.collapseTurns) Object.keys(members).forEach(function(t){ folded[t] = true; });

  function isFolded(n){ return n.turn >= 0 && folded[n.turn] && members[n.turn].length > 1; }
  function shownAs(index){ var n = data.nodes[index]; return isFolded(n) ? "turn:" + n.turn : index; }

  // selected or hovered, a node keeps its colours (vis-network would turn it light blue);
  // a selection shows as a thicker border
  function keepColors(c){ return Object.assign({}, c, {highlight: c, hover: c}); }
  function pageNode(n){  // what the page adds to a node of the payload (kept small: 5,000 nodes)
    return {full: n.label, short: n.short || n.label.split(" ")[0], label: "",
            color: keepColors(n.color), borderWidthSelected: n.borderWidth + 2};
  }
  function turnNode(n){  // one node standing for a whole turn (numbered from 1, as turns_df)
    var list = members[n.turn], number = n.turn + 1;
    var summary = list.some(function(m){ return m.role === "summary"; });
    return {id: "turn:" + n.turn, c: n.c, l: n.l, o: 0, turn: n.turn, shape: data.turn.shape,
            role: "turn", size: Math.min(17, 8 + 2 * Math.sqrt(list.length)),
            full: "turn " + number + " \\u00b7 " + list.length + " nodes", short: "turn " + number,
            font: {size: 13}, borderWidth: summary ? 3 : 1, borderWidthSelected: summary ? 5 : 3,
            // a turn holding a compaction's summary keeps the summary's colour on its rim
            color: keepColors({background: list[0].color.background,
                               border: summary ? data.summaryColor : list[0].color.background}),
            title: "turn " + number + ": " + list.length + " nodes, double-click to open\\n\\n" + list[0].title};
  }
  function visibleNodes(){
    var out = [], done = {}, any = false;
    data.nodes.forEach(function(n){
      if (!isFolded(n)) { out.push(Object.assign({}, n, pageNode(n))); return; }
      any = true;
      if (!done[n.turn]) { done[n.turn] = true; out.push(Object.assign(turnNode(n), {label: ""})); }
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

  // -- labels: full, short or none, never overlapping -------------------------------------
  var measure = document.createElement("canvas").getContext("2d"), widths = {};
  function textWidth(text){  // in px per px of font size
    var w = widths[text];
    if (w === undefined) { measure.font = "100px " + lab.face; w = widths[text] = measure.measureText(text).width / 100; }
    return w;
  }
  var labelled = {}, order = [];
  function importance(n){ return lab.rank[n.role] === undefined ? lab.rank.other : lab.rank[n.role]; }
  function relabel(){
    if (!network) return;
    var scale = network.getScale(), width = container.clientWidth, height = container.clientHeight;
    var positions = network.getPositions(), placed = [], changes = [];
    var selected = network.getSelectedNodes();
    var queue = selected.concat(order.filter(function(id){ return selected.indexOf(id) < 0; }));
    queue.forEach(function(id){
      var n = nodes.get(id), want = "";
      if (!n) return;
      var px = Math.min(lab.maxPx, ((n.font && n.font.size) || lab.size) * scale);
      if (px >= lab.minPx) {
        // where vis-network puts a label below a node (Label.calculateLabelSize, "hanging"):
        // half a font size and 4 canvas units under the node's rim, one font size tall
        var p = network.canvasToDOM(positions[id]);
        var top = p.y + (n.size + 4) * scale + px / 2 - lab.pad, h = px + 2 * lab.pad;
        if (p.x > 0 && p.x < width && top < height && top + h > 0) {
          var texts = [n.full, n.short];
          for (var t = 0; t < texts.length && !want; t++) {
            if (!texts[t]) continue;
            var w = textWidth(texts[t]) * px + 2 * lab.pad;
            var box = {x0: p.x - w / 2, x1: p.x + w / 2, y0: top, y1: top + h};
            var free = placed.every(function(b){
              return box.x1 <= b.x0 || b.x1 <= box.x0 || box.y1 <= b.y0 || b.y1 <= box.y0; });
            if (free) { placed.push(Object.assign(box, {id: id})); want = texts[t]; }
          }
        }
      }
      if ((labelled[id] || "") !== want) { labelled[id] = want; changes.push({id: id, label: want}); }
    });
    if (changes.length) nodes.update(changes);
    window.opctxLabelPasses = (window.opctxLabelPasses || 0) + 1;
    window.opctxPlaced = placed;
  }
  var relabelling = null;
  function relabelSoon(){ clearTimeout(relabelling); relabelling = setTimeout(relabel, 60); }
  window.opctxRelabel = relabel;

  var nodes = new vis.DataSet(), edges = new vis.DataSet(), network = null;
  function draw(){
    var nodeList = visibleNodes(), edgeList = visibleEdges();
    place(nodeList, edgeList);
    clearReads();
    nodes.clear(); edges.clear(); labelled = {}; restyled = false;
    nodes.add(nodeList); edges.add(edgeList);
    order = nodeList.slice().sort(function(a, b){
      var d = importance(a) - importance(b);
      if (d) return d;
      if (b.size !== a.size) return b.size - a.size;
      return a.c - b.c;
    }).map(function(n){ return n.id; });
    if (network) focusOn(focusBox ? Number(focusBox.value) : -1);
  }

  // focused on a compaction, the drawing shows what that compaction did: the nodes it
  // touched in its own memberships, every other node plain (the whole session shows each
  // node's latest fate instead: a later compaction may fold what an earlier one kept)
  var plain = {color: "", width: 1, dashes: [], faded: false};
  function styleOf(n, mark){  // vis options of a payload node: its own, or under a membership
    if (!mark) return {color: keepColors(n.color), borderWidth: n.borderWidth,
                       borderWidthSelected: n.borderWidth + 2, opacity: n.opacity || 1,
                       shapeProperties: {borderDashes: (n.shapeProperties || {}).borderDashes || false}};
    return {color: keepColors({background: n.color.background, border: mark.color || n.color.background}),
            borderWidth: mark.width, borderWidthSelected: mark.width + 2,
            opacity: mark.faded && n.role !== "collapsed" ? data.fadedOpacity : 1,
            shapeProperties: {borderDashes: mark.dashes.length ? mark.dashes : false}};
  }
  var restyled = false;
  function restyle(i){
    var marks = {}, c = i >= 0 ? data.compactions[i] : null, updates = [];
    if (!c && !restyled) return;
    if (c) Object.keys(c.membership).forEach(function(status){
      c.membership[status].forEach(function(r){ for (var j = r[0]; j <= r[1]; j++) marks[j] = status; });
    });
    data.nodes.forEach(function(n, j){
      if (!nodes.get(j)) return;  // drawn inside a folded turn
      var mark = c ? (marks[j] ? data.marks[marks[j]] : plain) : null;
      updates.push(Object.assign({id: j}, styleOf(n, mark)));
    });
    restyled = Boolean(c);
    if (updates.length) nodes.update(updates);
  }

  // fit the whole session (a small one may grow up to MAX_ZOOM), or where one compaction cut
  function fitAll(){ restyle(-1); network.fit({animation: false, maxZoomLevel: geo.maxZoom}); relabel(); }
  function focusOn(i){
    var compaction = i >= 0 ? data.compactions[i] : null;
    if (compaction) restyle(i);
    if (!compaction || !compaction.nodes.length) { fitAll(); return; }
    var ids = compaction.nodes.map(shownAs).filter(function(id, k, all){ return all.indexOf(id) === k; });
    // centre on the summary, zoomed so that about as many time steps as the cut holds fill
    // the width (its nodes may straddle two lines, so fitting their box would not zoom)
    network.fit({animation: false, maxZoomLevel: geo.maxZoom});
    var whole = network.getScale();
    var centre = compaction.summary !== null ? shownAs(compaction.summary) : ids[0];
    var scale = Math.min(geo.maxZoom, container.clientWidth / ((ids.length + 4) * geo.column));
    network.moveTo({position: network.getPositions([centre])[centre],
                    scale: Math.max(whole, scale), animation: false});
    if (centre === compaction.summary) network.selectNodes([centre]);
    relabel();
  }

  // click a node: draw what it read
  var readEdges = [];
  function clearReads(){ if (readEdges.length) { edges.remove(readEdges); readEdges = []; } }

  draw();
  network = new vis.Network(container, {nodes: nodes, edges: edges}, {
    physics: false,
    layout: {improvedLayout: false},
    interaction: {hover: true, tooltipDelay: 120, hideEdgesOnDrag: true, multiselect: false},
    edges: {smooth: false, arrows: {to: {enabled: true, scaleFactor: 0.4}}},
    nodes: {font: {size: lab.size, face: lab.face},
            scaling: {label: {drawThreshold: lab.minPx, maxVisible: lab.maxPx}}}
  });
  window.opctxNetwork = network;
  network.on("zoom", relabelSoon);
  network.on("dragEnd", relabelSoon);
  network.on("selectNode", function(p){
    clearReads();
    relabelSoon();
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
    if (add.length) { edges.add(add); readEdges = add.map(function(e){ return e.id; }); }
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
        "turn": {"shape": ROLES["turn"].shape},
        "geometry": {"column": _COLUMN, "lane": _LANE, "lineGap": _LINE_GAP, "maxZoom": _MAX_ZOOM},
        "labels": LABELS,
        "marks": {name: {"color": m.color, "width": m.width, "dashes": list(m.dashes),
                         "faded": m.faded} for name, m in MEMBERSHIP.items()},
        "fadedOpacity": FADED_OPACITY,
        "compactions": layout.compactions,
        "focus": focus,
        "collapseTurns": bool(collapse_turns and turns),
    }
    s = layout.stats
    summary = f"{s['drawn_nodes']} of {s['session_nodes']} nodes drawn"
    if s["truncated"]:
        summary += f", {s['truncated']} older grouped"
    if s["collapsed"]:
        summary += f", {s['collapsed']} collapsed"
    controls = ('<label class="k"><input type="checkbox" id="opctx-turns">turns folded</label>'
                if turns else "")
    if layout.compactions:
        controls += ('<label class="k" title="focused on a compaction, the borders show what '
                     'that compaction did">focus <select id="opctx-focus">'
                     '<option value="-1">whole session</option></select></label>')
    controls += '<button id="opctx-fit" type="button">fit</button>'
    hint = "click a node: its reads" + ("; double-click a turn: open it" if turns else "")
    return _document(title, payload, (
        f'<div class="row"><b>{escape_text(title)}</b><span>{escape_text(summary)}</span>'
        f'{controls}<span class="hint">{hint}</span></div>{_legend(layout, turns)}'))


def _legend(layout: _Layout, turns: bool) -> str:
    """The vocabulary's legend for what this drawing holds, and the key of its numbers."""
    roles = {n["role"] for n in layout.nodes} | ({"turn"} if turns else set())
    membership = {n["membership"] for n in layout.nodes if n.get("membership")}
    membership |= {status for c in layout.compactions for status in c.get("membership", ())}
    edges = {e["kind"] for e in layout.edges} | ({"reads"} if layout.reads else set())
    return legend_html(sorted(roles), sorted(membership), sorted(edges), numbers=True)


def _document(title: str, payload: dict, bar: str) -> str:
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        # belt and braces: even a stray URL in the bundled library cannot fetch anything
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{escape_text(title)}</title><style>{_PAGE_CSS}</style></head><body>"
        f'<div id="opctx-bar">{bar}</div>'
        '<div id="opctx-graph"></div>'
        f'<script id="opctx-data" type="application/json">{json_for_script(payload)}</script>'
        f"<script>{vis_network_js()}</script><script>{_PAGE_JS}</script>"
        "</body></html>"
    )
