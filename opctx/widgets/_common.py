"""Pieces the widgets share: debouncing, escaped HTML tables, figure-to-HTML, history loading.

* ``Debouncer`` runs a callback once, ``delay`` seconds after the last call.
  In a kernel, widget callbacks run on the kernel's asyncio loop, so the timer
  is ``loop.call_later`` on that loop: the callback runs on the same thread as
  every other widget update (no locking, no interleaved comm messages). Where no
  loop is running (a plain script, a unit test) it runs at once, synchronously,
  which keeps the widgets testable without an event loop.
* ``html_table`` renders rows as an HTML table with every cell escaped, in the
  toolkit's table style (numbers right, text left, long text on hover; membership
  rows in the vocabulary's inks, with a legend); the widgets put it in
  ``widgets.HTML`` (whose value is inserted as markup, so escaping is what keeps
  transcript text from becoming markup).
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

from ..viz._vocabulary import MEMBERSHIP, legend_html, number_cell, table_css, text_cell
from ..viz.html import escape_text, text_of

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


_TABLE_CSS = f"<style>{table_css('opctx-t')}table.opctx-t td{{max-width:560px}}" + (
    "table.opctx-t tr.gap td{text-align:center;color:#999}</style>")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def html_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    row_classes: Iterable[str] | None = None,
    caption: str | None = None,
    css_class: str = "opctx-t",
) -> str:
    """An HTML table with every header and cell escaped, in the toolkit's table style.

    A column whose cells are all numbers (or empty) is right-aligned, header included
    (values written as given);
    other cells are text, left-aligned, a long one cut to three lines with the whole of
    it on hover. ``row_classes`` are our own tokens: a membership (``folded``, ``kept``,
    ...) marks the row in the vocabulary's ink, and the table gets a legend of those used.
    """
    rows = [list(r) for r in rows]
    classes = list(row_classes) if row_classes is not None else None
    numeric = [all(_is_number(r[i]) or r[i] is None or r[i] == "" for r in rows if i < len(r))
               and any(i < len(r) and _is_number(r[i]) for r in rows) for i in range(len(columns))]
    used = sorted({c for cls in classes or () for c in cls.split() if c in MEMBERSHIP})
    out = [_TABLE_CSS, legend_html(membership=used) if used else "", f'<table class="{css_class}">']
    if caption:
        out.append(f"<caption>{escape_text(caption)}</caption>")
    out.append("<tr>" + "".join(
        f'<th class="num">{escape_text(c)}</th>' if numeric[i] else f"<th>{escape_text(c)}</th>"
        for i, c in enumerate(columns)) + "</tr>")
    for i, row in enumerate(rows):
        cls = classes[i] if classes is not None and i < len(classes) else ""
        attr = f' class="{escape_text(cls)}"' if cls else ""
        cells = "".join(
            number_cell(v, separators=False) if numeric[k] and (_is_number(v) or v is None or v == "")
            else text_cell(text_of(v)) if len(text_of(v)) > 40 else f"<td>{escape_text(v)}</td>"
            for k, v in enumerate(row))
        out.append(f"<tr{attr}>{cells}</tr>")
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
