"""opctx.viz.graph: networkx export, compaction membership, the offline vis-network page."""

from __future__ import annotations

import json
import re

import networkx as nx
import pytest

from opctx.dag.nodes import Call, FunctionCall, Graph, ModelCall, UserMessage
from opctx.viz.graph import (
    GraphView,
    compaction_membership,
    load_session,
    node_infos,
    render_graph,
    to_networkx,
    to_pyvis,
    vis_network_js,
)
from opctx.viz.synthetic import synthetic_session


def _small_graph() -> Graph:
    """user -> llm (tool call) -> code, plus an agentic frame with a nested llm call."""
    g = Graph()
    u = g.add(UserMessage("hello", id="u1"))
    m = g.add(ModelCall("gpt-4o", reads=["u1"], output="calling", predecessor=u.id, id="m1",
                        metadata={"tool_calls": [{"id": "t1", "name": "ls", "arguments": {}}]}))
    c = g.add(FunctionCall("ls", {"path": "."}, "a.py", called_by=m.id, predecessor=m.id, id="c1",
                           metadata={"tool_call_id": "t1"}))
    f = g.add(FunctionCall("analyse", {"x": 1}, "done", predecessor=c.id, id="f1",
                           metadata={"status": "ok"}))
    g.add(ModelCall("gpt-4o-mini", reads=["f1"], output="inner", caller=f.id, id="m2"))
    g.add(ModelCall("gpt-4o", reads=["u1", "m1", "c1", "f1"], output="bye", predecessor=f.id,
                    id="m3"))
    return g


def _data(html: str) -> dict:
    match = re.search(r'<script id="opctx-data" type="application/json">(.*?)</script>', html, re.S)
    assert match, "the page embeds its data in one JSON script element"
    return json.loads(match.group(1))


def test_to_networkx_edges_and_attributes():
    g = to_networkx(_small_graph())
    assert isinstance(g, nx.MultiDiGraph)
    assert g.number_of_nodes() == 6
    edges = {(u, v, d["kind"]) for u, v, d in g.edges(data=True) if d["kind"] != "reads"}
    # every edge points forward in time, from the referred-to node to the referring one
    assert edges == {
        ("u1", "m1", "predecessor"),
        ("m1", "c1", "caller"),
        ("m1", "c1", "predecessor"),
        ("c1", "f1", "predecessor"),
        ("f1", "m2", "caller"),
        ("f1", "m3", "predecessor"),
    }
    assert g.has_edge("c1", "f1", key="predecessor")
    reads_into_m3 = {u for u, v, d in g.in_edges("m3", data=True) if d["kind"] == "reads"}
    assert reads_into_m3 == {"u1", "m1", "c1", "f1"}
    attrs = g.nodes["c1"]
    assert attrs["role"] == "code" and attrs["display_role"] == "tool"
    assert g.nodes["f1"]["display_role"] == "function" and g.nodes["f1"]["status"] == "ok"
    assert g.nodes["m2"]["depth"] == 1 and g.nodes["m2"]["branch"] == g.nodes["f1"]["branch"]
    assert [g.nodes[n]["seq"] for n in ("u1", "m1", "c1")] == [0, 1, 2]
    assert all(g.nodes[n]["tokens"] > 0 for n in g)


def test_to_networkx_edge_selection_and_bad_kind():
    g = to_networkx(_small_graph(), edges=("predecessor",))
    assert {d["kind"] for *_, d in g.edges(data=True)} == {"predecessor"}
    with pytest.raises(ValueError, match="unknown edge kind"):
        to_networkx(_small_graph(), edges=("parent",))


def test_branches_number_forks_in_seq_order():
    g = Graph()
    g.add(UserMessage("a", id="a"))
    g.add(ModelCall("m", output="b", predecessor="a", id="b"))
    g.add(ModelCall("m", output="c", predecessor="a", id="c"))  # fork from a
    g.add(UserMessage("d", predecessor="c", id="d"))
    infos = {i.id: i for i in node_infos(g, head="d")}
    assert infos["a"].branch == infos["b"].branch == 0
    assert infos["c"].branch == infos["d"].branch == 1
    assert infos["d"].on_head_branch and infos["a"].on_head_branch and not infos["b"].on_head_branch


def test_compaction_membership_follows_the_layout():
    graph, head = synthetic_session(70, compact_every=30, keep_last=4, protect_first_n=2)
    membership = compaction_membership(graph)
    summaries = [n for n in graph if isinstance(n.metadata.get("compaction"), dict)
                 and not n.metadata.get("copied_from")]
    assert len(summaries) >= 1
    latest = summaries[-1]
    comp = latest.metadata["compaction"]
    assert membership[latest.id] == ("summary", latest.id)
    for nid in comp["folded_ids"]:
        assert membership[nid] == ("folded", latest.id)
    for nid in comp["protected_ids"]:
        assert membership[nid] == ("protected", latest.id)
    for nid in comp["kept_ids"]:
        assert membership[nid] == ("kept", latest.id)
    # the copies on the newest branch that no later compaction touched are "copy"
    copies = [n.id for n in graph.chain(head) if n.metadata.get("copied_from")]
    assert copies and all(membership[c][0] == "copy" for c in copies)


def test_folded_range_alone_is_expanded_by_walking_predecessors():
    g = Graph()
    for i in range(5):
        g.add(UserMessage(f"m{i}", id=f"m{i}", predecessor=f"m{i-1}" if i else None))
    g.add(Call(role="llm", id="S", output="sum", metadata={
        "role": "system", "compaction": {"folded_range": ["m1", "m3"], "recorded": True}}))
    membership = compaction_membership(g)
    assert [membership.get(f"m{i}", (None,))[0] for i in range(5)] == [
        None, "folded", "folded", "folded", None]


def test_render_is_offline_and_self_contained(tmp_path):
    view = render_graph(_small_graph())
    html = view.html
    assert isinstance(view, GraphView)
    # no external resource of any kind: no src/href to a URL, no CDN, no Bootstrap
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', html)
    assert "cdn" not in html.lower().replace("cdnjs", "")
    assert "bootstrap" not in html.lower()
    assert "default-src 'none'" in html  # CSP forbids fetching even by accident
    assert vis_network_js()[:200] in html  # the vis build pyvis ships is inlined
    data = _data(html)
    assert len(data["nodes"]) == 6
    # physics is off, so positions are final: x follows seq order
    xs = [n["x"] for n in data["nodes"]]
    assert xs == sorted(xs)
    out = view.save_html(tmp_path / "g.html")
    assert out.read_text(encoding="utf-8") == html


def test_reads_are_shipped_as_index_ranges_for_the_selected_node():
    data = _data(render_graph(_small_graph()).html)
    labels = {n["id"]: n["label"] for n in data["nodes"]}
    m3 = next(i for i, label in labels.items() if label.startswith("#5 "))
    ranges = data["reads"][str(m3)]
    read = {j for a, b in ranges for j in range(a, b + 1)}
    assert {labels[j].split()[0] for j in read} == {"#0", "#1", "#2", "#3"}


def test_notebook_display_is_an_escaped_sandboxed_srcdoc_iframe():
    view = render_graph(_small_graph())
    frame = view._repr_html_()
    assert frame.startswith("<iframe") and 'sandbox="allow-scripts"' in frame
    assert "allow-same-origin" not in frame
    srcdoc = re.search(r'srcdoc="([^"]*)"', frame).group(1)
    assert "<" not in srcdoc and "&lt;!DOCTYPE html&gt;" in srcdoc


def test_large_session_is_capped_and_collapsed():
    graph, head = synthetic_session(3000, compact_every=250)
    full = render_graph(graph, head=head, collapse=False, max_nodes=500)
    assert full.stats["drawn_nodes"] == 500
    assert full.stats["truncated"] == len(graph) - 499
    data = _data(full.html)
    # the "older nodes" group comes first, its number saying what it counts
    assert data["nodes"][0]["label"] == f"{len(graph) - 499} earlier nodes"
    collapsed = render_graph(graph, head=head, max_nodes=500)  # auto-collapse kicks in
    assert collapsed.stats["collapsed"] > 0
    assert collapsed.stats["drawn_nodes"] <= 500
    # every edge points at nodes that exist in the page
    data = _data(collapsed.html)
    ids = {n["id"] for n in data["nodes"]}
    assert all(e["from"] in ids and e["to"] in ids for e in data["edges"])


def test_collapse_true_folds_frames_into_their_node():
    view = render_graph(_small_graph(), collapse=True)
    data = _data(view.html)
    assert len(data["nodes"]) == 5  # m2 is inside the frame f1
    assert any(n["label"].endswith(" +1 inside") for n in data["nodes"])


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="max_nodes"):
        render_graph(_small_graph(), max_nodes=1)
    with pytest.raises(ValueError, match="collapse"):
        render_graph(_small_graph(), collapse="yes")
    with pytest.raises(TypeError, match="cannot make a Graph"):
        render_graph(42)
    with pytest.raises(ValueError, match="session_id"):
        load_session("some.db")


def test_to_pyvis_titles_are_text_escaped_once_on_the_way_into_the_page():
    """vis-network shows a string title as text: an HTML-escaped title would show
    ``&amp;&lt;``. The title stays the text; the page embeds it escaped (tojson)."""
    g = Graph([UserMessage("<b>bold</b> &< see href=x", id="x")])
    net = to_pyvis(g)
    assert "<b>bold</b> &< see href=x" in net.nodes[0]["title"]
    assert "&amp;" not in net.nodes[0]["title"] and "&lt;" not in net.nodes[0]["title"]
    page = net.generate_html()
    assert "<b>bold</b>" not in page and "\\u003cb\\u003ebold" in page
    # a title mentioning "href" switches pyvis to a popup that would set innerHTML
    assert "popup.innerHTML" not in page and "popup.innerText = nodeData[0].title" in page


def test_to_pyvis_draws_reads_edges_when_asked():
    g = _small_graph()
    expected = {(u, v) for u, v, d in to_networkx(g).edges(data=True) if d["kind"] == "reads"}
    net = to_pyvis(g, edges=("reads",))
    label_id = {n["id"]: n["title"].split("\n")[1].removeprefix("id: ") for n in net.nodes}
    drawn = {(label_id[e["from"]], label_id[e["to"]]) for e in net.edges}
    assert drawn == expected and len(expected) == 6
    assert not to_pyvis(g, edges=("caller",)).edges or all(
        e["title"] == "caller" for e in to_pyvis(g, edges=("caller",)).edges)


def test_to_pyvis_pages_load_nothing_off_the_machine(tmp_path):
    g = Graph([UserMessage("<script>alert(1)</script>", id="x"), UserMessage("two", id="y", predecessor="x")])
    net = to_pyvis(g)
    page = net.generate_html()
    assert "vis.Network" in page or "new vis" in page  # the library is inlined
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page), "no remote src/href"
    assert "bootstrap" not in page.lower()
    assert "<script>alert(1)</script>" not in page
    net.write_html(str(tmp_path / "page.html"))
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", (tmp_path / "page.html").read_text())


@pytest.mark.slow
def test_a_5000_node_session_renders_under_5_mb_and_stays_escaped():
    # size only: the time target is measured by benchmarks/render.py, not in a unit test
    graph, head = synthetic_session(5_000, compact_every=400, payload="<b>x</b> ")
    for kwargs in ({}, {"max_nodes": len(graph)}):  # the default, and everything drawn
        view = render_graph(graph, head=head, **kwargs)
        assert len(view.html.encode("utf-8")) < 5_000_000
        assert "<b>x</b>" not in view.html


# -- the layout: a frame filled at real sizes -------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from opctx.viz import _graph_layout as layout_module  # noqa: E402


def _extent(nodes: list[dict]) -> tuple[float, float]:
    """Width and height of the drawing, node radii included (canvas units)."""
    xs0 = min(n["x"] - n["size"] for n in nodes)
    xs1 = max(n["x"] + n["size"] for n in nodes)
    ys0 = min(n["y"] - n["size"] for n in nodes)
    ys1 = max(n["y"] + n["size"] for n in nodes)
    return xs1 - xs0, ys1 - ys0


@pytest.mark.parametrize("n_nodes", [150, 407, 600, 1000])
def test_sessions_of_normal_size_fill_the_frame_with_readable_nodes(n_nodes):
    """At the zoom that fits the whole drawing into 1200 x 560 px, the drawing covers
    most of the frame and the median node is at least 12 px across."""
    graph, head = synthetic_session(n_nodes, compact_every=150, seed=2)
    data = _data(render_graph(graph, head=head).html)
    width, height = _extent(data["nodes"])
    frame_w, frame_h = 1200, 560
    scale = min(layout_module._MAX_ZOOM, frame_w / width, frame_h / height)  # as the page fits
    cover = (width * scale) * (height * scale) / (frame_w * frame_h)
    diameters = sorted(2 * n["size"] * scale for n in data["nodes"])
    assert cover >= 0.6, f"{n_nodes} nodes cover {cover:.0%} of the frame"
    assert diameters[len(diameters) // 2] >= 12
    # one lane: the compactions' new branches follow the old ones in time
    assert render_graph(graph, head=head).stats["lanes"] == 1


def test_wrap_keeps_time_in_reading_order():
    graph, head = synthetic_session(300, compact_every=120, seed=1)
    data = _data(render_graph(graph, head=head).html)
    per_line = max(n["c"] for n in data["nodes"] if n["y"] < 60) + 1
    for n in data["nodes"]:
        assert n["x"] == (n["c"] % per_line) * layout_module._COLUMN
    line_tops = [n["y"] - n["o"] for n in sorted(data["nodes"], key=lambda n: n["c"])]
    assert line_tops == sorted(line_tops)  # later in time: same line or a later one


@settings(max_examples=200, deadline=None)
@given(n_columns=st.integers(1, 3000), n_lanes=st.integers(1, 4),
       aspect=st.floats(0.3, 6.0))
def test_columns_per_line_is_the_best_fit(n_columns, n_lanes, aspect):
    chosen = layout_module._columns_per_line(n_columns, n_lanes, aspect)
    line = n_lanes * layout_module._LANE + layout_module._LINE_GAP

    def scale(w: int) -> float:
        return min(aspect / (w * layout_module._COLUMN), 1.0 / (-(-n_columns // w) * line))

    assert 1 <= chosen <= n_columns
    # never worse than one long line or one tall column, and no other width does better
    assert scale(chosen) >= max(scale(n_columns), scale(1)) - 1e-12
    assert all(scale(chosen) >= scale(w) - 1e-12 for w in range(1, n_columns + 1, 7))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 30)), min_size=1, max_size=12))
def test_lanes_separate_exactly_the_branches_that_overlap_in_time(raw):
    spans = {b: (first, first + length) for b, (first, length) in enumerate(raw)}
    lanes = layout_module._pack_lanes(spans)
    for a in spans:
        for b in spans:
            if a < b and lanes[a] == lanes[b]:
                (a0, a1), (b0, b1) = spans[a], spans[b]
                assert a1 < b0 or b1 < a0, "two branches running side by side share a lane"
    # greedy interval colouring uses as many lanes as the most branches alive at once
    depth = max(sum(1 for f, last in spans.values() if f <= t <= last)
                for t in range(0, 81))
    assert len(set(lanes.values())) == depth


def test_a_fork_that_runs_beside_its_origin_gets_its_own_lane():
    g = Graph()
    g.add(UserMessage("a", id="a"))
    g.add(ModelCall("m", output="b", predecessor="a", id="b"))
    g.add(ModelCall("m", output="c", predecessor="a", id="c"))  # fork from a, seq after b
    g.add(UserMessage("d", predecessor="b", id="d"))  # the first branch goes on after the fork
    data = _data(render_graph(g).html)
    lanes = {n["label"].split()[0]: n["l"] for n in data["nodes"]}
    assert lanes["#0"] == lanes["#1"] == lanes["#3"] != lanes["#2"]


def test_turns_start_at_each_top_level_user_message():
    graph, head = synthetic_session(200, seed=3)
    data = _data(render_graph(graph, head=head).html)
    users = [n for n in data["nodes"] if n["role"] == "user"]
    assert max(n["turn"] for n in data["nodes"]) == len(users) - 1
    for n in users:
        # a turn's first node is its user message: the previous node is in the turn before
        previous = [m for m in data["nodes"] if m["c"] == n["c"] - 1]
        assert not previous or previous[0]["turn"] == n["turn"] - 1
    turns = _data(render_graph(graph, head=head, collapse="turns").html)
    assert turns["collapseTurns"] is True and not data["collapseTurns"]


def test_focus_names_a_compaction_and_holds_its_cut():
    graph, head = synthetic_session(400, compact_every=150, keep_last=6, seed=2)
    compactions = _data(render_graph(graph, head=head).html)["compactions"]
    assert len(compactions) >= 2
    summaries = [n for n in graph if isinstance(n.metadata.get("compaction"), dict)
                 and not n.metadata.get("copied_from")]
    assert [c["id"] for c in compactions] == [s.id for s in summaries]
    data = _data(render_graph(graph, head=head, focus=-1).html)
    last = data["compactions"][-1]
    assert data["focus"] == len(compactions) - 1
    by_index = {n["id"]: n for n in data["nodes"]}
    focused = [by_index[i] for i in last["nodes"]]
    assert last["summary"] in last["nodes"]
    kept = set(summaries[-1].metadata["compaction"]["kept_ids"])
    assert {n["title"].split("\n")[1].removeprefix("id: ") for n in focused} >= kept
    assert _data(render_graph(graph, head=head, focus=summaries[0].id).html)["focus"] == 0
    with pytest.raises(IndexError):
        render_graph(graph, head=head, focus=9)
    with pytest.raises(ValueError, match="not the summary"):
        render_graph(graph, head=head, focus="nope")
    with pytest.raises(ValueError, match="has none"):
        render_graph(_small_graph(), focus=0)


def test_diff_graph_puts_each_copy_under_its_original():
    from opctx.viz.diff import compare_compaction, diff_graph

    graph, _ = synthetic_session(160, compact_every=110, protect_first_n=3, keep_last=37, seed=4)
    d = compare_compaction(graph, compaction=0)
    data = _data(diff_graph(graph, diff=d).html)
    node_of = {n["title"].split("\n")[1].removeprefix("id: "): n for n in data["nodes"]}
    after = d.rows[(d.rows.side == "after") & d.rows.original_id.notna()]
    for copy_id, original_id in zip(after.copy_id, after.original_id, strict=True):
        copy, original = node_of[copy_id], node_of[original_id]
        assert (copy["c"], copy["l"], original["l"]) == (original["c"], 1, 0)
        assert copy["x"] == original["x"] and copy["y"] > original["y"]
    folded = d.rows[(d.rows.side == "before") & (d.rows.status == "folded")].original_id
    columns = sorted(node_of[i]["c"] for i in folded)
    assert columns[0] <= node_of[d.summary.id]["c"] <= columns[-1]
    assert 'id="opctx-turns"' not in diff_graph(graph, diff=d).html  # a diff keeps its columns


def test_each_compaction_ships_its_own_memberships_for_the_focus():
    graph, head = synthetic_session(400, compact_every=150, seed=5)
    data = _data(render_graph(graph, head=head).html)
    by_label = {n["label"].split()[0]: i for i, n in enumerate(data["nodes"])}
    summaries = [n for n in graph if isinstance(n.metadata.get("compaction"), dict)
                 and not n.metadata.get("copied_from")]
    assert len(data["compactions"]) == len(summaries) >= 2
    for focus, summary in zip(data["compactions"], summaries, strict=True):
        comp = summary.metadata["compaction"]
        shipped = {status: {j for a, b in ranges for j in range(a, b + 1)}
                   for status, ranges in focus["membership"].items()}
        assert shipped["summary"] == {by_label[f"#{summary.seq}"]}
        for status in ("protected", "folded", "kept"):
            expected = {by_label[f"#{graph[i].seq}"] for i in comp.get(f"{status}_ids") or ()}
            assert shipped.get(status, set()) == expected, status
