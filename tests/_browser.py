"""Debian's Chromium driven by playwright, for the browser tests (never a downloaded browser).

``chromium()`` yields a launched browser or skips (fails under ``CI``, so CI cannot
silently lose a browser test). ``save_screenshot`` writes a picture to the test's
folder and, when ``OPCTX_SCREENSHOTS`` names a folder, a copy there (how the
pictures in docs/img are made).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
]


def unavailable(reason: str, what: str = "browser test") -> None:
    """Skip for ``reason``; under ``CI`` fail instead (CI must not silently lose a test)."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} cannot run in CI: {reason}")
    pytest.skip(reason)


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} not found")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                                    headless=True)
        try:
            yield browser
        finally:
            browser.close()


def save_screenshot(target: Any, folder: Path, name: str, **kwargs: Any) -> Path:
    """``target.screenshot`` (a page or an element) into ``folder``, copied to
    ``$OPCTX_SCREENSHOTS`` when set."""
    path = folder / name
    target.screenshot(path=str(path), **kwargs)
    extra = os.environ.get("OPCTX_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / name)
    return path


# what a page says about its vis-network drawing: every drawn node's box in page pixels
NODE_BOXES_JS = """() => {
  const net = window.opctxNetwork || window.network;
  const frame = net.body.container.getBoundingClientRect();
  const boxes = net.body.nodeIndices.map(id => {
    const b = net.getBoundingBox(id);
    const a = net.canvasToDOM({x: b.left, y: b.top}), z = net.canvasToDOM({x: b.right, y: b.bottom});
    return {id: id, x0: a.x, y0: a.y, x1: z.x, y1: z.y};
  });
  return {frame: {width: frame.width, height: frame.height, left: frame.left, top: frame.top},
          boxes: boxes};
}"""


def node_position_js(node_id: Any) -> str:
    """A script returning the page position of a node's centre (to hover it)."""
    return f"""() => {{
      const net = window.opctxNetwork || window.network;
      const frame = net.body.container.getBoundingClientRect();
      const p = net.canvasToDOM(net.getPositions([{node_id!r}])[{node_id!r}]);
      return {{x: frame.left + p.x, y: frame.top + p.y}};
    }}"""


# every label vis-network draws, as the box it drew it in (page pixels): nodes whose centre
# is in the frame (vis draws those, so their label sizes are current) and whose label is
# not empty and not below vis-network's drawThreshold at this zoom
LABEL_BOXES_JS = """() => {
  const net = window.opctxNetwork, scale = net.getScale();
  const frame = net.body.container.getBoundingClientRect();
  const out = [];
  for (const id of net.body.nodeIndices) {
    const node = net.body.nodes[id], text = node.options.label;
    if (!text) continue;
    const c = net.canvasToDOM({x: node.x, y: node.y});
    if (c.x < 0 || c.x > frame.width || c.y < -60 || c.y > frame.height) continue;
    if (node.options.font.size * scale < node.options.scaling.label.drawThreshold - 1) continue;
    const s = node.labelModule.size;
    const a = net.canvasToDOM({x: s.left, y: s.top});
    const z = net.canvasToDOM({x: s.left + s.width, y: s.top + s.height});
    out.push({id: id, text: text, x0: a.x, y0: a.y, x1: z.x, y1: z.y});
  }
  return out;
}"""

# resolves once vis-network has drawn the current state (label sizes are set when drawn)
REDRAWN_JS = """() => new Promise(done => {
  const net = window.opctxNetwork;
  net.once("afterDrawing", () => done(true));
  net.redraw();
})"""


def overlapping(boxes: list[dict]) -> list[tuple[str, str]]:
    """Pairs of boxes that overlap (touching edges do not)."""
    out = []
    ordered = sorted(boxes, key=lambda b: b["x0"])
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if b["x0"] >= a["x1"]:
                break
            if a["y0"] < b["y1"] and b["y0"] < a["y1"]:
                out.append((a["text"], b["text"]))
    return out
