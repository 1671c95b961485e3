"""Hostile transcript text never reaches a page as markup: graph, diff and widget HTML.

A session whose messages (user text, tool output, tool names, model names,
node ids) hold ``<script>`` and ``<img onerror>`` is rendered by every HTML
producer of the toolkit; the raw payloads must not survive anywhere, and the
escaped forms must (so the text is shown, not dropped).
"""

from __future__ import annotations

import html
import json
import re

import pytest

from opctx.dag.nodes import Call, Graph
from opctx.viz.diff import compare_compaction, diff_graph, diff_html
from opctx.viz.graph import render_graph, to_pyvis
from opctx.viz.html import escape_text, iframe_srcdoc, json_for_script, preview

SCRIPT = '<script>alert("pwned-1")</script>'
IMG = "<img src=x onerror=alert('pwned-2')>"
CLOSE = "</script><script>alert('pwned-3')</script>"
PAYLOADS = (SCRIPT, IMG, CLOSE)
RAW_MARKERS = ("<script>alert", "<img src=x", "</script><script>")


def hostile_session() -> Graph:
    """A session with a compaction, every text field carrying a payload."""
    g = Graph()
    ids = []
    for i in range(8):
        role = ("user", "llm", "code")[i % 3]
        node = g.add(Call(
            role=role,
            id=f"n{i}",
            name=f"tool{IMG}" if role == "code" else (f"model{SCRIPT}" if role == "llm" else ""),
            input={"cmd": CLOSE} if role == "code" else None,
            output=f"message {i} {SCRIPT} {IMG} {CLOSE}",
            predecessor=ids[-1] if ids else None,
            metadata={"tool_call_id": f"t{i}"} if role == "code" else {},
        ))
        ids.append(node.id)
    copies = []
    for original in ("n0", "n6", "n7"):
        if original == "n6":
            s = g.add(Call(role="llm", id="S", name="compaction", predecessor=copies[-1],
                           output=f"[Previous conversation summary]\n{SCRIPT}{IMG}",
                           metadata={"role": "system", "compaction": {
                               "folded_ids": ["n1", "n2", "n3", "n4", "n5"],
                               "protected_ids": ["n0"], "kept_ids": ["n6", "n7"],
                               "trigger": SCRIPT}}))
            copies.append(s.id)
        c = g[original].copy(id=f"k{original}", seq=-1,
                             predecessor=copies[-1] if copies else None,
                             metadata={**g[original].metadata, "copied_from": original})
        g.add(c)
        copies.append(c.id)
    return g


def assert_no_raw_payload(text: str) -> None:
    for marker in RAW_MARKERS:
        assert marker not in text, f"raw {marker!r} reached the output"


def test_helpers():
    assert escape_text(SCRIPT) == html.escape(SCRIPT, quote=True)
    assert escape_text(None) == ""
    js = json_for_script({"a": CLOSE, "b": "\u2028"})
    assert "<" not in js and ">" not in js and "&" not in js and "\u2028" not in js
    assert json.loads(js) == {"a": CLOSE, "b": "\u2028"}  # still valid JSON, same data
    frame = iframe_srcdoc(f"<p>{escape_text(SCRIPT)}</p>")
    srcdoc = re.search(r'srcdoc="([^"]*)"', frame).group(1)
    assert "<" not in srcdoc and '"' not in srcdoc
    assert preview("a\n  b " + "x" * 50, 10) == "a b xxxxx\u2026"


def test_graph_page_escapes_labels_and_tooltips():
    page = render_graph(hostile_session()).html
    data_block = re.search(r'<script id="opctx-data" type="application/json">(.*?)</script>',
                           page, re.S).group(1)
    assert_no_raw_payload(data_block)
    # outside the inlined vis-network library, the page has exactly our three scripts
    from opctx.viz.graph import vis_network_js

    assert page.replace(vis_network_js(), "").count("<script") == 3
    # the text is still there, for the tooltip (text-only in vis-network 9) to show
    data = json.loads(data_block)
    titles = " ".join(n["title"] for n in data["nodes"])
    assert SCRIPT in titles and IMG in titles
    frame = render_graph(hostile_session())._repr_html_()
    assert_no_raw_payload(frame)


def test_pyvis_export_embeds_titles_escaped():
    net = to_pyvis(hostile_session())
    assert any(SCRIPT in node["title"] for node in net.nodes)  # the text itself, to show
    page = net.generate_html()
    assert_no_raw_payload(page)
    assert "innerHTML = nodeData" not in page


def test_diff_html_and_graph_escape():
    d = compare_compaction(hostile_session(), compaction="S")
    page = diff_html(d.rows, summary=d.summary)
    assert_no_raw_payload(page)
    assert html.escape(SCRIPT, quote=True) in page
    assert page.count("<script") == 0 and page.count("<img") == 0
    graph_page = diff_graph(hostile_session(), compaction="S").html
    data_block = re.search(r'type="application/json">(.*?)</script>', graph_page, re.S).group(1)
    assert_no_raw_payload(data_block)


@pytest.fixture
def hostile_messages() -> list[dict]:
    msgs = []
    for i in range(30):
        role = "user" if i % 3 == 0 else "assistant"
        msgs.append({"id": f"m{i}", "role": role, "content": f"{i} {SCRIPT} {IMG} {CLOSE} " * 20,
                     "timestamp": 1_700_000_000.0 + i})
    return msgs


def test_cut_point_explorer_escapes(hostile_messages):
    from opctx.widgets.cutpoints import CutPointExplorer

    w = CutPointExplorer(hostile_messages, context_window=4096, debounce_ms=0)
    for value in (5, 17, 30):
        w.step.value = value
        assert_no_raw_payload(w.table.value)
        assert_no_raw_payload(w.summary.value)
        assert "&lt;script&gt;" in w.table.value


def test_branch_diff_viewer_escapes():
    from opctx.widgets.diffview import BranchDiffViewer

    w = BranchDiffViewer(hostile_session())
    assert_no_raw_payload(w.table.value)
    assert_no_raw_payload(w.picture.value)
    assert "&lt;img src=x" in w.table.value


def test_compaction_tuner_escapes(hostile_messages):
    """Preset names, replay errors and compaction rows all reach the page escaped."""
    import types

    import pandas as pd

    from opctx.widgets.tuner import CompactionTuner

    def fake_replay(history, preset, **kwargs):
        if kwargs.get("trigger_pct") == 0.5:
            raise ValueError(f"bad value {IMG}")
        steps = pd.DataFrame({"step": [0, 1], "tokens": [10, 20], "budget_pct": [0.1, 0.2],
                              "compacted": [False, True]})
        comps = pd.DataFrame([{"step": 1, "turn": 0, "reason": SCRIPT, "tokens_before": 20,
                               "tokens_after": 10, "folded": 1, "kept": 1, "protected": 0,
                               "cut_index": 1, "fell_back_to_structural": True}])
        return types.SimpleNamespace(steps_df=steps, compactions_df=lambda: comps,
                                     context_window=100)

    t = CompactionTuner(hostile_messages, presets={SCRIPT: {"trigger_pct": 0.8}},
                        preset=SCRIPT, replay=fake_replay, debounce_ms=0)
    for value in (t.status.value, t.table.value, t.plot.value):
        assert_no_raw_payload(value)
    assert "&lt;script&gt;" in t.table.value and "&lt;script&gt;" in t.status.value
    t.controls["trigger_pct"].value = 0.5
    assert_no_raw_payload(t.status.value)
    assert "&lt;img src=x" in t.status.value


# -- in a browser: a tooltip shows the text as written and runs nothing ----------------------

TOOLTIP_TEXT = ('a & b < c &amp; d <script>window.__pwned = 1</script>'
                '<img src=x onerror="window.__pwned = 2"> the end')


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize(("renderer", "extra", "tooltip"), [
    ("render_graph", "", "div.vis-tooltip"),
    ("to_pyvis", "", "div.vis-tooltip"),
    # "href" in a title switches pyvis to a popup of its own, which set innerHTML
    ("to_pyvis", " see href", "div.popup"),
], ids=["render_graph", "to_pyvis", "to_pyvis-link-popup"])
def test_tooltips_show_transcript_text_as_written_and_run_nothing(renderer, extra, tooltip,
                                                                   tmp_path):
    from _browser import chromium, node_position_js

    from opctx.dag.nodes import UserMessage

    text = TOOLTIP_TEXT + extra
    g = Graph([UserMessage(text, id="x"), UserMessage("two", id="y", predecessor="x")])
    page_html = render_graph(g).html if renderer == "render_graph" else to_pyvis(g).generate_html()
    path = tmp_path / "page.html"
    path.write_text(page_html, encoding="utf-8")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 900, "height": 600})
        page.goto(path.as_uri())
        page.wait_for_function("() => window.opctxNetwork || window.network", timeout=30_000)
        page.wait_for_timeout(300)
        point = page.evaluate(node_position_js(0))
        page.mouse.move(point["x"] - 40, point["y"] - 40)
        page.mouse.move(point["x"], point["y"], steps=5)
        page.wait_for_function(
            f"() => {{ const t = document.querySelector({tooltip!r});"
            " return t && t.innerText.includes('the end') && getComputedStyle(t).visibility !== 'hidden'"
            " && getComputedStyle(t).display !== 'none'; }",
            timeout=15_000,
        )
        shown = page.evaluate(f"() => document.querySelector({tooltip!r}).innerText")
        # exactly the transcript's characters: escaped once on the way in, never twice
        assert text in " ".join(shown.split())
        assert "&amp;amp;" not in shown and "&lt;" not in shown
        # and nothing in it ran or became an element
        assert page.evaluate("() => window.__pwned") is None
        tags = page.evaluate(f"() => Array.from(document.querySelector({tooltip!r})"
                             ".querySelectorAll('*')).map(e => e.tagName)")
        assert set(tags) <= {"BR"}, tags  # innerText turns line breaks into <br>, nothing else
        assert page.evaluate("() => document.querySelectorAll('img[src=x]').length") == 0
