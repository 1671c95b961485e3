"""The compaction diff table in Chromium: text left, numbers right, a long text cut with
the whole of it on hover, and transcript markup shown as text.

What JupyterLab shows is the table's own HTML and CSS (``BranchDiff._repr_html_``), so the
page here is that HTML alone; the checks read the computed styles and the rendered boxes,
not the source. The picture goes to ``tmp_path`` (and ``$OPCTX_SCREENSHOTS``: docs/img).
"""

from __future__ import annotations

import pytest
from _browser import chromium, save_screenshot

from opctx.viz.diff import compare_compaction
from opctx.viz.synthetic import synthetic_session

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

HOSTILE = "<script>window.opctxPwned = 1</script><b>bold?</b> " + "long text " * 60


def _page(browser, tmp_path):
    graph, _ = synthetic_session(90, compact_every=30, protect_first_n=2, keep_last=4, seed=3)
    for node in graph:  # a long, hostile text in every model reply
        if node.role == "llm":
            node.output = HOSTILE
    html = compare_compaction(graph, compaction=0)._repr_html_()
    path = tmp_path / "diff.html"
    path.write_text(f"<!doctype html><meta charset='utf-8'><body>{html}</body>", encoding="utf-8")
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(path.as_uri())
    return page


def test_diff_table_aligns_text_left_numbers_right_and_cuts_long_text(tmp_path):
    with chromium() as browser:
        page = _page(browser, tmp_path)
        align = page.evaluate("""() => {
            const out = {num: new Set(), text: new Set(), header_num: new Set()};
            for (const td of document.querySelectorAll('table.opctx-diff td.num'))
                out.num.add(getComputedStyle(td).textAlign);
            for (const td of document.querySelectorAll('table.opctx-diff td.text'))
                out.text.add(getComputedStyle(td).textAlign);
            for (const th of document.querySelectorAll('table.opctx-diff th.num'))
                out.header_num.add(getComputedStyle(th).textAlign);
            return {num: [...out.num], text: [...out.text], header_num: [...out.header_num]};
        }""")
        assert align["num"] == ["right"], align
        assert align["header_num"] == ["right"], align
        assert set(align["text"]) <= {"left", "start"} and align["text"], align
        # a long text is cut on screen (its box shorter than its content) and whole on hover
        cut = page.evaluate("""() => {
            const cells = [...document.querySelectorAll('table.opctx-diff td.text')]
                .filter(td => td.textContent.includes('long text long text') && td.getClientRects().length
                        && !td.hasAttribute('rowspan'));  // shown, and not a summary beside a run
            return cells.map(td => {
                const shown = td.querySelector('.clip') || td;
                return {clipped: shown.scrollHeight > shown.clientHeight + 1, n: shown.textContent.length,
                        whole_on_hover: td.getAttribute('title') === shown.textContent};
            });
        }""")
        assert cut and all(c["clipped"] for c in cut if c["n"] > 300), [c for c in cut if not c["clipped"]][:3]
        assert all(c["whole_on_hover"] for c in cut), cut[:3]
        # markup from the transcript is text: no script ran, no <b> element from it
        assert page.evaluate("() => window.opctxPwned") is None
        assert "<script>window.opctxPwned" in page.inner_text("table.opctx-diff")
        save_screenshot(page, tmp_path, "diff-table.png", full_page=False)
