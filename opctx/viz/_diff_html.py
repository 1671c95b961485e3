"""The HTML of the compaction diff and of the recorded-aging table.

Private to ``opctx.viz.diff``, which re-exports ``DiffLine``, ``diff_lines``, ``diff_html``
and ``aging_html``. Both tables follow the toolkit's table rules (``_vocabulary.table_css``):
text left, numbers right, a long text cut to three lines with the whole of it on hover,
ids cut with an ellipsis; membership as the vocabulary's tags, with its legend above the
table. Every piece of transcript text is escaped (``escape_text``) exactly once.

The diff has five columns a side - status, message (role, name, id), seq, tokens, text -
originals on the left, the new branch on the right, aligned by original: a protected or
kept original sits beside its copy, and the summary sits beside the folded run, its cells
spanning the run's rows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._vocabulary import id_span, legend_html, number_cell, table_css, tag_html, text_cell
from .html import escape_text

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from ..dag.nodes import Call

_SIDE = 5  # columns a side: status, message, seq, tokens, text
_DIFF_CSS = table_css("opctx-diff") + (
    "table.opctx-diff{width:100%;table-layout:fixed}"
    "table.opctx-diff td.empty{background:#fafafa}"
    "table.opctx-diff td.gap{background:#fbfbfb;color:#666;text-align:center}"
    "table.opctx-diff td.gap summary{cursor:pointer}"
    "table.opctx-diff td.gap table.opctx-diff{margin-top:4px}"
)
_COLUMNS = ('<col style="width:7.5em"><col style="width:10em"><col style="width:3.8em">'
            '<col style="width:4.6em"><col>')
_HEADER = ('<th>status</th><th>message</th><th class="num">seq</th>'
           '<th class="num">tokens</th><th>text</th>')


def _cells(r: Any) -> str:
    """One side of a line: the row's five cells (status, message, seq, tokens, text)."""
    status = str(r["status"])
    ident = r["copy_id"] if r["side"] == "after" else r["original_id"]
    cleared = r.get("cleared_by") if hasattr(r, "get") else None
    faded = " f-folded" if status == "folded" and r["side"] == "before" else ""
    tags = tag_html(status) + (tag_html("cleared", f"cleared by {cleared}")
                               if isinstance(cleared, str) else "")
    name = r["name"] if r["name"] and r["name"] != r["role"] else ""
    return (
        f'<td class="m-{status}{faded}">{tags}</td>'
        f'<td class="{faded.strip()}"><b>{escape_text(r["role"])}</b> {escape_text(name)}'
        f"{id_span(ident)}</td>"
        + number_cell(r["seq"], css=f"num{faded}")
        + number_cell(r["tokens"], prefix="\u2248", css=f"num{faded}")
        + text_cell(r["preview"], css=f"text{faded}")
    )


def _spanning(cells: str, rows: int) -> str:
    """The same cells, each spanning ``rows`` rows (the summary beside its folded run)."""
    return re.sub(r"<td(?=[ >])", f'<td rowspan="{rows}"', cells) if rows > 1 else cells


@dataclass
class DiffLine:
    """One line of the side-by-side view.

    ``kind`` is ``unchanged`` (an original and its identical copy), ``folded`` (a
    folded original; the summary spans these lines on the right), ``changed`` (an
    original with no copy, or the summary alone), or a collapsed run:
    ``gap-unchanged`` / ``gap-folded`` with ``hidden`` lines inside. ``left`` and
    ``right`` are the cells of each side (HTML, escaped), empty for no message.
    """

    kind: str
    left: str = ""
    right: str = ""
    hidden: list[DiffLine] = field(default_factory=list)


def diff_lines(
    rows: pd.DataFrame,
    *,
    context: int | None = 3,
    folded_context: int | None = 10,
) -> list[DiffLine]:
    """The aligned lines of a diff, long runs collapsed.

    A run of unchanged lines longer than ``2 * context + 1`` keeps ``context``
    lines at each end and becomes one ``gap-unchanged`` line in between ("… 37
    unchanged messages …"); folded runs likewise with ``folded_context``. ``None``
    collapses nothing of that kind. Every message stays in exactly one line or one
    gap's ``hidden`` list.
    """
    before = rows[rows["side"] == "before"].sort_values("position")
    after = rows[rows["side"] == "after"].sort_values("position")
    copies = {r["original_id"]: r for _, r in after.iterrows() if r["original_id"] is not None}
    summaries = [r for _, r in after.iterrows() if r["status"] == "summary"]
    summary_cells = _cells(summaries[0]) if summaries else ""
    lines: list[DiffLine] = []
    for _, r in before.iterrows():
        if r["status"] == "folded":
            lines.append(DiffLine("folded", _cells(r), summary_cells))
            continue
        copy = copies.get(r["original_id"])
        lines.append(DiffLine("unchanged" if copy is not None else "changed", _cells(r),
                              _cells(copy) if copy is not None else ""))
    if summaries and not any(line.kind == "folded" for line in lines):
        # nothing folded (a recorded compaction may list no ids): still show the summary
        lines.append(DiffLine("changed", "", summary_cells))
    return _collapse_runs(lines, {"unchanged": context, "folded": folded_context})


def _collapse_runs(lines: list[DiffLine], keep: dict[str, int | None]) -> list[DiffLine]:
    out: list[DiffLine] = []
    start = 0
    while start < len(lines):
        kind = lines[start].kind
        end = start
        while end < len(lines) and lines[end].kind == kind:
            end += 1
        run = lines[start:end]
        ends = keep.get(kind)
        if ends is None or len(run) <= 2 * ends + 1:
            out.extend(run)
        else:
            hidden = run[ends : len(run) - ends]
            out.extend(run[:ends])
            # a folded gap keeps the summary on its right, like the lines it stands for
            out.append(DiffLine(f"gap-{kind}", "", run[0].right if kind == "folded" else "",
                                hidden))
            out.extend(run[len(run) - ends :])
        start = end
    return out


def _gap_label(line: DiffLine) -> str:
    what = "unchanged" if line.kind == "gap-unchanged" else "more folded"
    return f"\u2026 {len(line.hidden)} {what} messages \u2026"


def _side(cells: str) -> str:
    return cells or f'<td class="empty" colspan="{_SIDE}"></td>'


def _render_lines(lines: Sequence[DiffLine]) -> list[str]:
    """``<tr>`` elements; the summary spans each run of folded lines on the page."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.kind in ("folded", "gap-folded"):
            j = i
            while j < len(lines) and lines[j].kind in ("folded", "gap-folded"):
                j += 1
            for k in range(i, j):
                right = _spanning(_side(line.right), j - i) if k == i else ""
                out.append(f"<tr>{_folded_left(lines[k])}{right}</tr>")
            i = j
            continue
        if line.kind == "gap-unchanged":
            inner = "".join(_render_lines(line.hidden))
            out.append(
                f'<tr><td colspan="{2 * _SIDE}" class="gap"><details><summary>{_gap_label(line)}'
                f'</summary><table class="opctx-diff"><colgroup>{_COLUMNS}{_COLUMNS}</colgroup>'
                f"{inner}</table></details></td></tr>"
            )
        else:
            out.append(f"<tr>{_side(line.left)}{_side(line.right)}</tr>")
        i += 1
    return out


def _folded_left(line: DiffLine) -> str:
    if line.kind == "folded":
        return _side(line.left)
    rows = "".join(f"<tr>{h.left}</tr>" for h in line.hidden)
    return (f'<td colspan="{_SIDE}" class="gap"><details><summary>{_gap_label(line)}</summary>'
            f'<table class="opctx-diff"><colgroup>{_COLUMNS}</colgroup>{rows}</table>'
            "</details></td>")


def diff_html(
    rows: pd.DataFrame,
    *,
    summary: Call | None = None,
    title: str | None = None,
    context: int | None = 3,
    folded_context: int | None = 10,
    page: int | None = None,
    page_size: int = 40,
) -> str:
    """The diff as an HTML fragment: originals left, new branch right, aligned, escaped.

    Long runs are collapsed into expandable ``<details>`` lines (see
    ``diff_lines``); with ``page`` given, only that page of ``page_size`` lines is
    drawn (the summary is repeated on every page its folded run reaches). The legend
    above the table names the memberships it shows.
    """
    before = rows[rows["side"] == "before"]
    n_folded = int((before["status"] == "folded").sum())
    folded_tokens = int(before.loc[before["status"] == "folded", "tokens"].sum())
    heading = title or (
        f"Compaction {summary.id}: {n_folded} folded (\u2248{folded_tokens:,} tokens), "
        f"{int((before['status'] == 'protected').sum())} protected, "
        f"{int((before['status'] == 'kept').sum())} kept"
        if summary is not None
        else "Compaction diff"
    )
    lines = diff_lines(rows, context=context, folded_context=folded_context)
    if page is not None:
        first = max(0, page) * page_size
        lines = lines[first : first + page_size]
    shown = [str(s) for s in rows["status"].unique()]
    if rows["cleared_by"].notna().any():
        shown.append("cleared")
    out = [f"<style>{_DIFF_CSS}</style>", legend_html(membership=shown),
           '<table class="opctx-diff">', f"<caption><b>{escape_text(heading)}</b></caption>",
           f"<colgroup>{_COLUMNS}{_COLUMNS}</colgroup>",
           f'<thead><tr class="sides"><th colspan="{_SIDE}">before (original branch)</th>'
           f'<th colspan="{_SIDE}">after (new branch)</th></tr>',
           f'<tr class="columns">{_HEADER}{_HEADER}</tr></thead>',
           "<tbody>", *_render_lines(lines), "</tbody></table>"]
    return "".join(out)


def aging_html(diff: Any, *, title: str | None = None) -> str:
    """An ``AgingDiff`` as an HTML table: cleared results marked, the event's figures on top."""
    mc = diff.event.metadata["microcompaction"]
    rows = diff.rows
    cleared = rows[rows["status"] == "cleared"]
    heading = title or (
        f"Recorded microcompaction {mc.get('uuid') or diff.event.id} ({mc.get('trigger') or '?'}): "
        f"{len(cleared)} of {len(rows)} tool results cleared; the client counted "
        f"{mc.get('pre_tokens')} tokens of clearable results and saved {mc.get('tokens_saved')}"
    )
    out = [f"<style>{_DIFF_CSS}</style>",
           legend_html(membership=[str(s) for s in rows["status"].unique()]),
           '<table class="opctx-diff">', f"<caption><b>{escape_text(heading)}</b></caption>",
           '<colgroup><col style="width:8.5em"><col style="width:10em"><col style="width:14em">'
           '<col style="width:3.8em"><col style="width:4.6em"><col></colgroup>',
           '<thead><tr class="columns"><th>status</th><th>tool</th><th>tool call id</th><th class="num">seq</th>'
           '<th class="num">tokens</th><th>tool result (before the event)</th></tr></thead><tbody>']
    for _, r in rows.iterrows():
        status = str(r["status"])
        out.append(
            f'<tr class="{status.replace(" ", "-")}"><td>{tag_html(status)}</td>'
            f'<td><b>{escape_text(r["name"])}</b></td><td>{id_span(r["tool_call_id"])}</td>'
            + number_cell(r["seq"]) + number_cell(r["tokens"], prefix="\u2248")
            + text_cell(r["preview"]) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)
