"""CutPointExplorer: step through a session and see where a compaction would cut.

A step slider picks a point in the recorded history; the *active context* is the
stream up to that point. ``opctx.context.summarize.find_cut_index`` is asked where
a compaction there would cut, with the window and the summariser parameters set
by the other sliders, and the widget shows the answer: which messages stay as the
protected head, which would be folded into the summary, which are kept verbatim,
with tokens for each part and the step-by-step reasoning of the cut (``CutPoint.steps``).

Choices:

* The history is the *expanded* recorded stream (``opctx.lab.history``): a
  session that was already compacted is explored as if it had not been, which
  is the question a cut-point explorer answers.
* Token counts come from one ``MessageFacts`` cache shared by every slider move,
  the same cache ``find_cut_index`` uses, so a move costs a bisection and a table
  render, not a re-estimate of the history.
* The table shows at most ``max_rows`` rows: the protected head, the ends of the
  folded run and of the kept tail, with one "... N more ..." row for each gap.
* Every cell is escaped (``widgets.HTML`` inserts markup as is).
* The context window is an integer field, not a slider: the value given
  (``context_window=32_000``) is the value used; a slider would snap it to its
  step grid in the browser.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Any

import ipywidgets as widgets

from ..context.summarize import MessageFacts, SummarizerConfig, find_cut_index
from ..context.types import CutPoint
from ..viz.html import escape_text, preview
from ._common import Debouncer, html_table, load_messages

__all__ = ["CutPointExplorer", "cut_rows"]


def _role(msg: dict) -> str:
    from ..dag.messages import is_tool_result

    return "tool result" if is_tool_result(msg) and msg.get("role") != "tool" else str(msg.get("role"))


def cut_rows(
    messages: list[dict], cut: CutPoint, tokens: list[int], *, max_rows: int = 60,
    preview_chars: int = 110,
) -> tuple[list[list[Any]], list[str]]:
    """Table rows ``[index, status, role, tokens, preview]`` and their CSS classes.

    Status is ``protected`` (before ``cut.protected_head``), ``folded`` (up to
    ``cut.index``, only when ``cut.ok``) or ``kept``. Long runs are elided.
    """
    from ..dag.messages import message_text

    n = len(messages)
    head = min(cut.protected_head, n)
    fold_end = cut.index if cut.ok else head
    spans = [("protected", 0, head), ("folded", head, fold_end), ("kept", fold_end, n)]
    budget = max(max_rows - 3, 6)
    rows: list[list[Any]] = []
    classes: list[str] = []
    for status, lo, hi in spans:
        count = hi - lo
        if count <= 0:
            continue
        share = max(2, budget // 3) if status != "kept" else max(2, budget - 2 * (budget // 3))
        if count <= share:
            shown: list[range] = [range(lo, hi)]
        else:
            first = share // 2
            shown = [range(lo, lo + first), range(hi - (share - first), hi)]
        for k, block in enumerate(shown):
            if k == 1:
                hidden = count - sum(len(b) for b in shown)
                gap_tokens = sum(tokens[shown[0].stop : block.start])
                rows.append(["\u2026", status, f"{hidden} more", gap_tokens, ""])
                classes.append(f"gap {status}")
            for i in block:
                msg = messages[i]
                rows.append([i, status, _role(msg), tokens[i], preview(message_text(msg), preview_chars)])
                classes.append(status)
    return rows, classes


class CutPointExplorer(widgets.VBox):
    """Step slider over a session; shows the active context and what a cut there folds."""

    def __init__(
        self,
        session: Any,
        *,
        context_window: int | None = None,
        config: SummarizerConfig | None = None,
        max_rows: int = 60,
        debounce_ms: int = 150,
    ) -> None:
        self.messages, self.model = load_messages(session)
        if not self.messages:
            raise ValueError("this session has no messages to explore")
        self.config = config or SummarizerConfig()
        self.max_rows = max_rows
        self.facts = MessageFacts()
        self.tokens = [self.facts.tokens(m) for m in self.messages]
        self.cumulative = list(itertools.accumulate(self.tokens))
        window = context_window or self._default_window()
        n = len(self.messages)
        style = {"description_width": "150px"}
        layout = widgets.Layout(width="560px")
        self.step = widgets.IntSlider(value=n, min=1, max=n, description="step (messages)",
                                      style=style, layout=layout, continuous_update=True)
        # typed, not a slider: a slider snaps to its step in the browser (32,000 -> 31,744)
        self.window = widgets.BoundedIntText(
            value=window, min=min(1_024, window), max=max(window * 8, 10_000_000), step=1,
            description="context window", style=style, layout=widgets.Layout(width="300px"),
        )
        self.protect_first_n = widgets.IntSlider(
            value=self.config.protect_first_n, min=0, max=20, description="protect_first_n",
            style=style, layout=layout)
        self.protect_last_n = widgets.IntSlider(
            value=self.config.protect_last_n, min=0, max=100, description="protect_last_n",
            style=style, layout=layout)
        self.keep_ratio = widgets.FloatSlider(
            value=self.config.keep_ratio, min=0.0, max=0.5, step=0.01, description="keep_ratio",
            style=style, layout=layout)
        self.keep_min_tokens = widgets.IntSlider(
            value=min(self.config.keep_min_tokens, self.config.keep_max_tokens), min=0,
            max=self.config.keep_max_tokens, step=500, description="keep_min_tokens",
            style=style, layout=layout)
        self.summary = widgets.HTML()
        self.table = widgets.HTML()
        self._debounce = Debouncer(self.update, debounce_ms / 1000)
        controls = [self.step, self.window, self.protect_first_n, self.protect_last_n,
                    self.keep_ratio, self.keep_min_tokens]
        for w in controls:
            w.observe(self._debounce.trigger, names="value")
        super().__init__(children=[*controls, self.summary, self.table])
        self.add_class("opctx-cutpoints")
        self.update()

    def _default_window(self) -> int:
        try:
            from ..context.tokens import real_context_window

            return int(real_context_window(self.model)) if self.model else 128_000
        except Exception:  # noqa: BLE001 - an unknown model just gets a common window
            return 128_000

    def current_config(self) -> SummarizerConfig:
        d = self.config.to_dict()
        d.update(
            protect_first_n=int(self.protect_first_n.value),
            protect_last_n=int(self.protect_last_n.value),
            keep_ratio=float(self.keep_ratio.value),
            keep_min_tokens=int(self.keep_min_tokens.value),
        )
        d["keep_max_tokens"] = max(d["keep_max_tokens"], d["keep_min_tokens"])
        return SummarizerConfig(**d)

    def cut(self) -> CutPoint:
        """``find_cut_index`` for the current step, window and parameters."""
        context = self.messages[: self.step.value]
        return find_cut_index(context, int(self.window.value), self.current_config(),
                              facts=self.facts)

    def update(self) -> None:
        step = int(self.step.value)
        cut = self.cut()
        total = self.cumulative[step - 1]
        head = min(cut.protected_head, step)
        fold_end = cut.index if cut.ok else head
        head_tok = self.cumulative[head - 1] if head else 0
        fold_tok = (self.cumulative[fold_end - 1] if fold_end else 0) - head_tok
        users_before = bisect.bisect_right(
            [i for i, m in enumerate(self.messages) if m.get("role") == "user"], step - 1)
        pct = total / int(self.window.value)
        verdict = (
            f"a compaction here folds <b>{fold_end - head}</b> messages "
            f"(\u2248{fold_tok:,} tokens) after a protected head of {head}, "
            f"and keeps <b>{step - fold_end}</b> (\u2248{total - fold_tok - head_tok:,} tokens)"
            if cut.ok
            else f"nothing would be folded: {escape_text(cut.reason)}"
        )
        steps = "".join(f"<li>{escape_text(s)}</li>" for s in cut.steps)
        self.summary.value = (
            f"<div style='font:13px system-ui'>Active context: <b>{step}</b> messages, "
            f"{users_before} user turns, \u2248<b>{total:,}</b> tokens "
            f"({pct:.0%} of the window). Cut index <b>{cut.index}</b>: {verdict}."
            f"<details><summary>how the cut was chosen</summary><ol>{steps}</ol></details></div>"
        )
        rows, classes = cut_rows(self.messages[:step], cut, self.tokens, max_rows=self.max_rows)
        self.table.value = html_table(["#", "status", "role", "tokens", "preview"], rows,
                                      row_classes=classes)
