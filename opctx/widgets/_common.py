"""Pieces the widgets share: debouncing, escaped HTML tables, figure-to-HTML, history loading.

* ``Debouncer`` runs a callback once, ``delay`` seconds after the last call.
  In a kernel, widget callbacks run on the kernel's asyncio loop, so the timer
  is ``loop.call_later`` on that loop: the callback runs on the same thread as
  every other widget update (no locking, no interleaved comm messages). Where no
  loop is running (a plain script, a unit test) it runs at once, synchronously,
  which keeps the widgets testable without an event loop.
* ``html_table`` renders rows as an HTML table with every cell escaped; the
  widgets put it in ``widgets.HTML`` (whose value is inserted as markup, so
  escaping is what keeps transcript text from becoming markup).
* ``figure_html`` turns a matplotlib Figure into an ``<img>`` with a base64 PNG
  ``data:`` URI, so that a plot can live inside a ``widgets.HTML`` (an image in a
  data URI cannot run anything and needs no request).
"""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..viz.html import escape_text

__all__ = ["Debouncer", "html_table", "figure_html", "load_messages"]


class Debouncer:
    """Call ``fn`` once, ``delay`` seconds after the latest ``trigger()``."""

    def __init__(self, fn: Callable[[], Any], delay: float = 0.2) -> None:
        self.fn = fn
        self.delay = delay
        self._handle: asyncio.TimerHandle | None = None
        self.calls = 0

    def _run(self) -> None:
        self._handle = None
        self.calls += 1
        self.fn()

    def trigger(self, *_: Any) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or self.delay <= 0:
            self._run()
        else:
            self._handle = loop.call_later(self.delay, self._run)

    def flush(self) -> None:
        """Run a pending call now (tests, and a final update before display)."""
        if self._handle is not None:
            self._handle.cancel()
            self._run()


_TABLE_CSS = (
    "<style>.opctx-t{border-collapse:collapse;font:12px/1.3 system-ui,sans-serif}"
    ".opctx-t th,.opctx-t td{border:1px solid #e3e3e3;padding:2px 6px;text-align:left;"
    "vertical-align:top;max-width:560px;overflow-wrap:anywhere}"
    ".opctx-t th{background:#f6f6f6}.opctx-t tr.folded td{background:#f1f1f1;color:#777}"
    ".opctx-t tr.protected td:first-child{border-left:3px solid #1b7837}"
    ".opctx-t tr.kept td:first-child{border-left:3px solid #2166ac}"
    ".opctx-t tr.pinned td{background:#fdf3dc}.opctx-t tr.pinned td:first-child{border-left:3px solid #b8860b}"
    ".opctx-t tr.gap td{text-align:center;color:#999}</style>"
)


def html_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    row_classes: Iterable[str] | None = None,
    caption: str | None = None,
    css_class: str = "opctx-t",
) -> str:
    """An HTML table with every header and cell escaped. ``row_classes`` are our own tokens."""
    classes = list(row_classes) if row_classes is not None else None
    out = [_TABLE_CSS, f'<table class="{css_class}">']
    if caption:
        out.append(f'<caption style="text-align:left">{escape_text(caption)}</caption>')
    out.append("<tr>" + "".join(f"<th>{escape_text(c)}</th>" for c in columns) + "</tr>")
    for i, row in enumerate(rows):
        cls = classes[i] if classes is not None and i < len(classes) else ""
        attr = f' class="{escape_text(cls)}"' if cls else ""
        out.append(f"<tr{attr}>" + "".join(f"<td>{escape_text(v)}</td>" for v in row) + "</tr>")
    out.append("</table>")
    return "".join(out)


def figure_html(fig: Any, *, dpi: int = 90, style: str = "max-width:100%") -> str:
    """A matplotlib Figure as an ``<img>`` with an inline PNG (no file, no request).

    ``style`` is the image's CSS (our own constant, never data).
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="plot" style="{escape_text(style)}" src="data:image/png;base64,{data}"/>'


def load_messages(session: Any) -> tuple[list[dict], str]:
    """``(messages, model)``: the whole recorded stream of ``session``.

    ``session`` is anything ``opctx.lab.history.as_history`` accepts (a message
    list, ``(db_path, session_id)``, a ``SessionSpec``, a ``RecordedHistory``, an
    imported session). Compactions already in the recording are expanded, so a
    widget explores the full history, not what survived the last compaction.
    """
    from ..lab.history import as_history

    hist = as_history(session)
    return list(hist.messages), hist.model or ""
