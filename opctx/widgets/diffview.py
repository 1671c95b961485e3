"""BranchDiffViewer: pick a compaction of a session, see before/after side by side.

A dropdown lists the session's compactions (``opctx.viz.diff.list_compactions``:
opctx's own and recorded ones alike); choosing one shows the escaped
side-by-side table of ``viz.diff.diff_html`` and, when "graph" is ticked, both
branches drawn by ``viz.diff.diff_graph`` in a sandboxed ``srcdoc`` iframe with
the same colours. The session is loaded once; switching compactions re-reads
nothing.

A compaction of 150 messages must not make a notebook 12,000 px tall: runs of
unchanged messages (an original beside its identical copy) collapse into one
expandable line ("… 37 unchanged messages …", a plain ``<details>``), and the
remaining lines - mostly the folded run beside its summary - are shown
``page_size`` at a time with previous / next buttons.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ..viz.diff import compare_compaction, diff_graph, diff_html, diff_lines, list_compactions
from ..viz.graph import load_session
from ..viz.html import escape_text

__all__ = ["BranchDiffViewer"]


class BranchDiffViewer(widgets.VBox):
    """Dropdown of compactions -> paged side-by-side diff table and (optionally) the graph."""

    def __init__(self, source: Any, session_id: str | None = None, *, show_graph: bool = True,
                 graph_height: int = 380, page_size: int = 30) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        self.graph, _ = load_session(source, session_id)
        self.compactions = list_compactions(self.graph)
        self.graph_height = graph_height
        self.page_size = page_size
        self.page = 0
        self.pages = 1
        options = [
            (
                f"#{r['index']} seq {r['seq']}: {r['folded']} folded, {r['kept']} kept"
                + (" (recorded)" if r["recorded"] else ""),
                int(r["index"]),
            )
            for _, r in self.compactions.iterrows()
        ]
        self.choice = widgets.Dropdown(options=options or [("no compaction", -1)],
                                       description="compaction", disabled=not options,
                                       layout=widgets.Layout(width="480px"))
        self.with_graph = widgets.Checkbox(value=show_graph, description="graph", indent=False)
        self.previous = widgets.Button(description="\u25c0 previous", layout=widgets.Layout(width="110px"))
        self.next = widgets.Button(description="next \u25b6", layout=widgets.Layout(width="110px"))
        self.position = widgets.HTML()
        self.table = widgets.HTML()
        self.picture = widgets.HTML()
        if options:
            self.choice.value = options[-1][1]  # the latest compaction first
        self.choice.observe(lambda _: self.show_compaction(), names="value")
        self.with_graph.observe(lambda _: self.show_compaction(), names="value")
        self.previous.on_click(lambda _: self.go(self.page - 1))
        self.next.on_click(lambda _: self.go(self.page + 1))
        pager = widgets.HBox([self.previous, self.next, self.position],
                             layout=widgets.Layout(align_items="center"))
        super().__init__(children=[widgets.HBox([self.choice, self.with_graph]), self.picture,
                                   pager, self.table])
        self.add_class("opctx-branch-diff")
        self.show_compaction()

    def show_compaction(self) -> None:
        """Show the chosen compaction from its first page."""
        if self.compactions.empty:
            self.table.value = "<i>This session has no compaction to compare.</i>"
            self.picture.value = self.position.value = ""
            self.previous.disabled = self.next.disabled = True
            return
        self.diff = compare_compaction(self.graph, compaction=int(self.choice.value))
        self.pages = max(1, -(-len(diff_lines(self.diff.rows, folded_context=None))
                              // self.page_size))
        if self.with_graph.value:
            view = diff_graph(self.graph, diff=self.diff, height=self.graph_height)
            self.picture.value = view._repr_html_()
        else:
            self.picture.value = (
                f"<small>{escape_text(len(self.diff.rows))} rows; tick 'graph' to draw both "
                "branches</small>"
            )
        self.go(0)

    # the name the viewer had before it paged; notebooks may call it
    update = show_compaction

    def go(self, page: int) -> None:
        """Show page ``page`` (clamped to the pages there are)."""
        if self.compactions.empty:
            return
        self.page = min(max(0, page), self.pages - 1)
        self.table.value = diff_html(self.diff.rows, summary=self.diff.summary,
                                     folded_context=None, page=self.page,
                                     page_size=self.page_size)
        self.previous.disabled = self.page == 0
        self.next.disabled = self.page >= self.pages - 1
        self.position.value = (
            f"<small>page {self.page + 1} of {self.pages} ({self.page_size} lines a page; "
            "runs of unchanged messages are folded, click one to open it)</small>"
        )
