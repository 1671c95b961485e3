"""The graph page in Chromium: labels never overlap at any focus level, every number says
what it counts, the legend names what is drawn, and CJK labels render as glyphs.

The label boxes are vis-network's own (``labelModule.size`` of every drawn label, in page
pixels), not the page script's estimate of them, so the test checks what a reader sees.
Pictures go to ``tmp_path`` (and ``$OPCTX_SCREENSHOTS``: docs/img). Without Chromium or
playwright the tests skip; with ``CI`` set they fail.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from _browser import LABEL_BOXES_JS, REDRAWN_JS, chromium, overlapping, save_screenshot, unavailable

from opctx.dag.nodes import Call, Graph, ModelCall, UserMessage
from opctx.viz.graph import render_graph
from opctx.viz.synthetic import synthetic_session

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

# every number in a label says what it counts (opctx.viz._vocabulary.NUMBER_KEY)
NUMBERED = re.compile(r"^(#\d+( .*)?|turn \d+( \u00b7 \d+ nodes)?|\d+ (folded|earlier)( .*)?)$")


def _open(browser, view, tmp_path, name="graph.html", size=(1200, 700)):
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(view.save_html(tmp_path / name).as_uri())
    page.wait_for_selector('body[data-opctx-ready="1"]', timeout=60_000)
    return page, errors


def _labels(page) -> list[dict]:
    """The labels drawn now, once the page has chosen them and vis-network drawn them."""
    page.evaluate("() => window.opctxRelabel()")
    page.evaluate(REDRAWN_JS)
    return page.evaluate(LABEL_BOXES_JS)


def _check(page, level: str) -> list[dict]:
    boxes = _labels(page)
    assert not overlapping(boxes), f"{level}: labels overlap: {overlapping(boxes)[:5]}"
    unexplained = [b["text"] for b in boxes if re.search(r"\d", b["text"])
                   and not NUMBERED.match(b["text"])]
    assert not unexplained, f"{level}: numbers that do not say what they count: {unexplained[:5]}"
    return boxes


def test_labels_never_overlap_at_any_focus_level(tmp_path):
    session, head = synthetic_session(760, compact_every=200, seed=1)
    view = render_graph(session, head=head, title="a 760-node session")
    with chromium() as browser:
        page, errors = _open(browser, view, tmp_path)
        n_compactions = page.evaluate("() => document.querySelectorAll('#opctx-focus option').length") - 1
        assert n_compactions >= 3
        seen = {}
        for folded in (False, True):
            page.set_checked("#opctx-turns", folded)
            for focus in range(-1, n_compactions):
                page.select_option("#opctx-focus", str(focus))
                level = f"focus {focus}, turns folded {folded}"
                seen[level] = _check(page, level)
                # zoomed in and out from there, as a reader would with the wheel
                for factor in (1.6, 0.6):
                    page.evaluate(f"""() => {{ const net = window.opctxNetwork;
                        net.moveTo({{scale: net.getScale() * {factor}, animation: false}}); }}""")
                    _check(page, f"{level}, zoom x{factor}")
        # focused on a compaction, labels are there to read (not all hidden), in both
        # spellings: full where there is room, the short "#n" where there is not
        page.set_checked("#opctx-turns", False)
        page.select_option("#opctx-focus", "0")
        focused = _check(page, "compaction 1")
        assert len(focused) >= 20, focused
        assert all(b["text"].startswith("#") for b in focused)
        assert any(" " in b["text"] for b in focused)
        assert any(len(seen[level]) for level in seen if "turns folded True" in level)
        assert any(b["text"].startswith("turn ") for level, bs in seen.items()
                   if "turns folded True" in level for b in bs)
        save_screenshot(page, tmp_path, "graph-focus-compaction-1.png")
        assert not errors, errors


def test_the_legend_names_roles_membership_edges_and_the_numbers(tmp_path):
    session, head = synthetic_session(300, compact_every=120, seed=2)
    view = render_graph(session, head=head, title="legend")
    with chromium() as browser:
        page, errors = _open(browser, view, tmp_path)
        legend = page.evaluate("""() => Array.from(document.querySelectorAll(
            '#opctx-bar .opctx-legend .k')).map(k => [k.textContent.trim(), k.title])""")
        names = {text for text, _ in legend}
        assert {"user", "assistant", "tool", "summary"} <= names
        assert {"protected", "folded", "kept"} <= names
        assert {"predecessor", "reads"} <= names
        assert any(text.startswith("#n") for text in names)
        assert all(title for _, title in legend)  # every entry says what it means on hover
        # the legend's swatches are the drawing's colours: a folded node's border is the
        # folded ring's colour
        ring = page.evaluate("""() => { const k = Array.from(document.querySelectorAll(
            '#opctx-bar .opctx-legend .k')).find(k => k.textContent.trim() === 'folded');
            return getComputedStyle(k.querySelector('.ring')).borderTopColor; }""")
        folded = page.evaluate("""() => { const net = window.opctxNetwork;
            const id = net.body.nodeIndices.find(i => net.body.nodes[i].options.shapeProperties
                && net.body.nodes[i].options.shapeProperties.borderDashes);
            return net.body.nodes[id].options.color.border; }""")
        assert ring == _rgb(folded)
        assert not errors, errors


def _rgb(hex_color: str) -> str:
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def _fontconfig_has_cjk() -> bool:
    try:
        out = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(out.stdout.strip())


CJK = "读取文件会话"
TOFU = "\U000f0000" * len(CJK)  # private use, plane 15: no font has it, drawn as a box


def test_cjk_labels_render_as_glyphs_not_boxes(tmp_path):
    if not _fontconfig_has_cjk():
        unavailable("no CJK font installed (Debian: fonts-noto-cjk, `make system-deps`)")
    g = Graph()
    g.add(UserMessage("请读取配置文件", id="u"))
    g.add(ModelCall("m", output="好的", predecessor="u", id="a"))
    g.add(Call(role="code", name=CJK, input={"路径": "设置.cfg"}, output="行宽 100",
               caller="a", predecessor="a", id="t", metadata={"tool_call_id": "c1"}))
    view = render_graph(g, title="会话图")
    with chromium() as browser:
        page, errors = _open(browser, view, tmp_path, size=(900, 500))
        face = page.evaluate("() => JSON.parse(document.getElementById('opctx-data').textContent)"
                             ".labels.face")
        measure = """([text, face]) => { const c = document.createElement('canvas').getContext('2d');
            c.font = '20px ' + face; return c.measureText(text).width; }"""
        cjk, tofu = (page.evaluate(measure, [t, face]) for t in (CJK, TOFU))
        # a CJK glyph is one em wide; a missing glyph is the fallback font's box
        assert cjk == pytest.approx(20 * len(CJK), rel=0.1), (cjk, tofu)
        assert abs(cjk - tofu) > 2 * len(CJK), (cjk, tofu)
        # and on the page: the label vis-network drew, and the title in the bar
        label = next(b for b in _labels(page) if CJK in b["text"])
        assert label["x1"] - label["x0"] > 0
        title_width = page.evaluate("() => document.querySelector('#opctx-bar b').getBoundingClientRect().width")
        tofu_width = page.evaluate("""(t) => { const s = document.createElement('b');
            s.textContent = t; document.querySelector('#opctx-bar').appendChild(s);
            const w = s.getBoundingClientRect().width; s.remove(); return w; }""", TOFU[:3])
        assert abs(title_width - tofu_width) > 3, (title_width, tofu_width)
        page.evaluate("() => window.opctxNetwork.moveTo({scale: 1.5, animation: false})")
        save_screenshot(page, tmp_path, "graph-cjk.png")
        assert not errors, errors


def test_focused_on_a_compaction_the_borders_show_what_it_did(tmp_path):
    """The whole session shows each node's latest fate; a focus shows that compaction's."""
    from opctx.viz._vocabulary import MEMBERSHIP

    session, head = synthetic_session(400, compact_every=150, seed=5)
    view = render_graph(session, head=head)
    state = """(i) => { const net = window.opctxNetwork;
        const c = JSON.parse(document.getElementById('opctx-data').textContent).compactions[i];
        const look = j => { const o = net.body.nodes[j].options;
            return [o.color.border, o.opacity === undefined ? 1 : o.opacity]; };
        return {summary: look(c.summary), kept: (c.membership.kept || []).map(r => look(r[0])),
                folded: (c.membership.folded || []).map(r => look(r[0]))}; }"""
    with chromium() as browser:
        page, errors = _open(browser, view, tmp_path)
        whole = page.evaluate(state, 0)
        # a later compaction folded the first one's summary: faded in the whole session
        assert whole["summary"] == [MEMBERSHIP["folded"].color, pytest.approx(0.45)]
        page.select_option("#opctx-focus", "0")
        focused = page.evaluate(state, 0)
        assert focused["summary"] == [MEMBERSHIP["summary"].color, 1]
        assert focused["kept"] and all(k == [MEMBERSHIP["kept"].color, 1] for k in focused["kept"])
        assert all(f == [MEMBERSHIP["folded"].color, pytest.approx(0.45)] for f in focused["folded"])
        page.select_option("#opctx-focus", "-1")
        assert page.evaluate(state, 0) == whole
        assert not errors, errors
