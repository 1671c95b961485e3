"""CutPointExplorer: step through a session and see where a compaction would cut.

A step slider picks a point in the recorded history; the *active context* is the
stream up to that point. ``opctx.context.summarize.find_cut_index`` is asked where
a compaction there would cut, with the window and the summariser parameters set
by the other sliders, and the widget shows the answer: which messages stay as the
protected head, which would be folded into the summary, which are kept verbatim,
with tokens for each part and the step-by-step reasoning of the cut (``CutPoint.steps``).
Messages the cut *pins* (``CutPoint.pinned``: the latest request of an autonomous run,
and the first tool group of a thinking unit the cut lies inside, the one carrying its
thinking block) sit in the folded range but are kept, copied right after the summary:
they are shown as ``pinned`` rows, and the summary counts them with what is kept.

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
    ``cut.index``, only when ``cut.ok``), ``pinned`` (a position of ``cut.pinned``:
    in the folded range, but kept after the summary) or ``kept``. Long runs are elided;
    pinned rows are always shown.
    """
    from ..dag.messages import message_text

    n = len(messages)
    head = min(cut.protected_head, n)
    fold_end = cut.index if cut.ok else head
    budget = max(max_rows - 3, 6)
    rows: list[list[Any]] = []
    classes: list[str] = []
    spans = _spans(head, fold_end, n, cut.pinned if cut.ok else ())
    folded_runs = max(1, sum(1 for s in spans if s[0] == "folded"))
    for status, lo, hi in spans:
        count = hi - lo
        if status == "pinned":
            share = count
        elif status == "kept":
            share = max(2, budget - 2 * (budget // 3))
        elif status == "folded":  # pinned rows split the folded range: its runs share its rows
            share = max(2, budget // 3 // folded_runs)
        else:
            share = max(2, budget // 3)
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


def _ranges(positions: list[int]) -> str:
    """``[3, 7, 8, 9]`` as ``"3, 7-9"``."""
    out: list[tuple[int, int]] = []
    for p in positions:
        if out and out[-1][1] == p - 1:
            out[-1] = (out[-1][0], p)
        else:
            out.append((p, p))
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def _spans(head: int, fold_end: int, n: int, pinned: tuple[int, ...]) -> list[tuple[str, int, int]]:
    """``(status, lo, hi)`` runs of one status, in order: the head, the folded range split
    around its pinned positions, the kept tail."""
    spans = [("protected", 0, head)]
    lo = head
    for p in sorted(i for i in set(pinned) if head <= i < fold_end):
        if spans[-1][0] == "pinned" and spans[-1][2] == p:
            spans[-1] = ("pinned", spans[-1][1], p + 1)
        else:
            spans += [("folded", lo, p), ("pinned", p, p + 1)]
        lo = p + 1
    spans += [("folded", lo, fold_end), ("kept", fold_end, n)]
    return [s for s in spans if s[2] > s[1]]


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
        pinned = sorted(i for i in set(cut.pinned) if head <= i < fold_end) if cut.ok else []
        pinned_tok = sum(self.tokens[i] for i in pinned)
        fold_tok = (self.cumulative[fold_end - 1] if fold_end else 0) - head_tok - pinned_tok
        users_before = bisect.bisect_right(
            [i for i, m in enumerate(self.messages) if m.get("role") == "user"], step - 1)
        pct = total / int(self.window.value)
        verdict = (
            f"a compaction here folds <b>{fold_end - head - len(pinned)}</b> messages "
            f"(\u2248{fold_tok:,} tokens) after a protected head of {head}, "
            f"and keeps <b>{step - fold_end + len(pinned)}</b> (\u2248{total - fold_tok - head_tok:,} tokens)"
            + (f", of which <b>{len(pinned)}</b> pinned after the summary "
               f"({escape_text(_ranges(pinned))}, \u2248{pinned_tok:,} tokens)" if pinned else "")
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
