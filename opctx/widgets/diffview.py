"""BranchDiffViewer: pick a compaction of a session, see before/after side by side.

A dropdown lists the session's compactions (``opctx.viz.diff.list_compactions``:
opctx's own and recorded ones alike); choosing one shows the escaped
side-by-side table of ``viz.diff.diff_html`` and, when "graph" is ticked, both
branches drawn by ``viz.diff.diff_graph`` in a sandboxed ``srcdoc`` iframe with
the same colours. The session is loaded once; switching compactions re-reads
nothing.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ..viz.diff import compare_compaction, diff_graph, diff_html, list_compactions
from ..viz.graph import load_session
from ..viz.html import escape_text

__all__ = ["BranchDiffViewer"]


class BranchDiffViewer(widgets.VBox):
    """Dropdown of compactions -> side-by-side diff table and (optionally) the graph."""

    def __init__(self, source: Any, session_id: str | None = None, *, show_graph: bool = True,
                 graph_height: int = 380) -> None:
        self.graph, _ = load_session(source, session_id)
        self.compactions = list_compactions(self.graph)
        self.graph_height = graph_height
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
        self.table = widgets.HTML()
        self.picture = widgets.HTML()
        if options:
            self.choice.value = options[-1][1]  # the latest compaction first
        self.choice.observe(lambda _: self.update(), names="value")
        self.with_graph.observe(lambda _: self.update(), names="value")
        super().__init__(children=[widgets.HBox([self.choice, self.with_graph]), self.picture,
                                   self.table])
        self.add_class("opctx-branch-diff")
        self.update()

    def update(self) -> None:
        if self.compactions.empty:
            self.table.value = "<i>This session has no compaction to compare.</i>"
            self.picture.value = ""
            return
        diff = compare_compaction(self.graph, compaction=int(self.choice.value))
        self.diff = diff
        self.table.value = diff_html(diff.rows, summary=diff.summary)
        if self.with_graph.value:
            view = diff_graph(self.graph, diff=diff, height=self.graph_height)
            self.picture.value = view._repr_html_()
        else:
            self.picture.value = (
                f"<small>{escape_text(len(diff.rows))} rows; tick 'graph' to draw both branches</small>"
            )
