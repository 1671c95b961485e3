"""Before/after views of one compaction: a table, side-by-side HTML and a coloured graph.

A compaction never edits history: it writes a new branch next to the old one
(docs/ARCHITECTURE.md, "Compaction layout")::

    m0 - ... - m{p-1} - m{p} ... m{cut-1} - m{cut} ... m{n-1}     before (originals)
    c0 - ... - c{p-1} - S - k{cut} - ... - k{n-1}                 after (new branch)

so a diff needs no replay: the summary node ``S`` names the originals it
protected, folded and kept (``metadata.compaction.*_ids``), and every copy names
its original (``metadata.copied_from``). The same code therefore serves opctx's
own compactions and recorded ones (Claude Code, Codex), which importers write in
the same layout with ``recorded: True`` and, where the recording keeps no tail,
an empty ``kept_ids``.

``branch_diff`` returns one row per message::

    side         "before" | "after"
    position     index within its side
    status       protected | folded | summary | kept
    original_id  the original node (None for the summary)
    copy_id      its copy on the new branch (None for folded originals)
    role         message role: user | assistant | system | tool
    name, seq, tokens, preview

Choices:

* ``compaction=`` takes the summary node's id, or an index into the session's
  compactions in ``seq`` order (``-1``, the default, is the latest).
* The "after" side is the new branch as the compaction wrote it: the copies
  before ``S`` (walked along ``predecessor`` from ``S`` to the branch root), ``S``
  and then the copies of the kept originals following ``S``. Messages appended
  later on that branch belong to the conversation, not to the compaction, and
  are not listed.
* Recorded summaries whose ``folded_ids`` are missing but ``folded_range`` is
  given are expanded by walking ``predecessor`` (as in ``viz.graph``).
* ``diff_html`` lays the two sides out as one table aligned by original: a
  protected or kept original sits next to its copy, and the folded run sits
  next to the summary (its cells spanning the run). Five columns a side (status,
  message, seq, tokens, text): text left, numbers right, a long text cut to three
  lines with the whole of it on hover, the vocabulary's legend above
  (``_diff_html``; docs/viz.md "Visual vocabulary"). All text is escaped.
* A tool result that a recorded microcompaction cleared (``metadata.cleared_by``,
  see below) carries that mark in the diff rows (``cleared_by``) and a
  ``cleared`` tag in the HTML.

Recorded aging (Claude Code's microcompaction)
----------------------------------------------
A microcompaction clears old tool results in place, without a new branch: the
client recorded a display-only ``microcompact_boundary`` node
(``metadata.microcompaction``) and the importer marked each cleared result with
``metadata.cleared_by`` (the boundary's uuid). ``list_aging_events`` lists a
session's events; ``compare_aging(source, session_id, event=-1)`` returns an
``AgingDiff``: one row per tool result on the branch before the event
(``AGING_COLUMNS``), with ``status`` ``cleared`` (by this event), ``cleared
earlier`` (by an earlier one), ``kept``; ``aging_html`` draws it, the event's
figures in the caption, every transcript text escaped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..dag.nodes import Call, Graph
from ._diff_html import DiffLine, aging_html, diff_html, diff_lines
from ._graph_layout import _Slot, _Units, slot_offset
from ._graph_nodes import _estimate_tokens, _range_ids
from .graph import (
    GraphView,
    NodeInfo,
    _render,
    call_text,
    load_session,
    node_infos,
)
from .html import preview

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "DIFF_COLUMNS",
    "BranchDiff",
    "DiffLine",
    "diff_lines",
    "list_compactions",
    "branch_diff",
    "compare_compaction",
    "diff_html",
    "diff_graph",
    "AGING_COLUMNS",
    "AgingDiff",
    "list_aging_events",
    "compare_aging",
    "aging_html",
]

DIFF_COLUMNS = [
    "side", "position", "status", "original_id", "copy_id", "role", "name", "seq", "tokens",
    "preview", "cleared_by",
]


def _summaries(graph: Graph) -> list[Call]:
    return [
        n
        for n in graph
        if isinstance(n.metadata.get("compaction"), dict) and not n.metadata.get("copied_from")
    ]


def list_compactions(source: Any, session_id: str | None = None) -> pd.DataFrame:
    """One row per compaction of a session, in ``seq`` order.

    Columns: ``index, summary_id, seq, protected, folded, kept, reason, trigger,
    pre_tokens, tokens_after, recorded, format, fell_back_to_structural``.
    """
    import pandas as pd

    graph, _ = load_session(source, session_id)
    rows = []
    for i, s in enumerate(_summaries(graph)):
        comp = s.metadata["compaction"]
        rows.append(
            {
                "index": i,
                "summary_id": s.id,
                "seq": s.seq,
                "protected": len(comp.get("protected_ids") or ()),
                "folded": len(_folded_ids(graph, comp)),
                "kept": len(comp.get("kept_ids") or ()),
                "reason": comp.get("reason"),
                "trigger": comp.get("trigger"),
                "pre_tokens": comp.get("pre_tokens"),
                "tokens_after": comp.get("tokens_after"),
                "recorded": bool(comp.get("recorded", False)),
                "format": comp.get("format"),
                "fell_back_to_structural": bool(comp.get("fell_back_to_structural", False)),
            }
        )
    columns = ["index", "summary_id", "seq", "protected", "folded", "kept", "reason", "trigger",
               "pre_tokens", "tokens_after", "recorded", "format", "fell_back_to_structural"]
    return pd.DataFrame(rows, columns=columns)


def _folded_ids(graph: Graph, comp: dict) -> list[str]:
    folded = [i for i in comp.get("folded_ids") or () if isinstance(i, str)]
    rng = comp.get("folded_range")
    if not folded and isinstance(rng, list | tuple) and len(rng) == 2 and all(rng):
        folded = _range_ids(graph, rng[0], rng[1])
    return folded


def _pick_summary(graph: Graph, compaction: str | int | None) -> Call:
    summaries = _summaries(graph)
    if not summaries:
        raise ValueError("this session has no compaction (no node with metadata.compaction)")
    if compaction is None:
        return summaries[-1]
    if isinstance(compaction, str):
        node = graph.get(compaction)
        if node is None:
            raise KeyError(f"no node {compaction!r} in this session")
        if all(s.id != node.id for s in summaries):
            raise ValueError(f"node {compaction!r} is not a compaction summary")
        return node
    if isinstance(compaction, int) and not isinstance(compaction, bool):
        try:
            return summaries[compaction]
        except IndexError:
            raise IndexError(
                f"compaction index {compaction} out of range: this session has "
                f"{len(summaries)} compaction(s)"
            ) from None
    raise TypeError(f"compaction must be a summary id, an int index or None, got {compaction!r}")


def _message_role(call: Call, status: str | None = None) -> str:
    if status == "summary":
        return "system"
    if call.role == "user":
        return "user"
    if call.role == "code":
        return "tool"
    return "system" if call.metadata.get("role") == "system" else "assistant"


@dataclass
class BranchDiff:
    """The rows of one compaction diff plus the summary node (what the views need)."""

    rows: pd.DataFrame
    summary: Call
    graph: Graph

    def _repr_html_(self) -> str:
        return diff_html(self.rows, summary=self.summary)


def compare_compaction(
    source: Any,
    session_id: str | None = None,
    compaction: str | int | None = None,
    *,
    preview_chars: int = 400,
) -> BranchDiff:
    """The diff of one compaction as a :class:`BranchDiff` (rows, summary node, graph).

    ``preview_chars``: the length of each row's ``preview``; the table shows three lines
    of it and the whole preview on hover, so it is longer than a line.
    """
    import pandas as pd

    graph, _ = load_session(source, session_id)
    summary = _pick_summary(graph, compaction)
    comp = summary.metadata["compaction"]
    protected = [i for i in comp.get("protected_ids") or () if isinstance(i, str)]
    folded = _folded_ids(graph, comp)
    kept = [i for i in comp.get("kept_ids") or () if isinstance(i, str)]

    # the new branch: copies before S (to the root), S, copies of kept originals after S
    head_part = graph.chain(summary.id)[:-1]
    kept_set = set(kept)
    tail_part: list[Call] = []
    node = summary
    while len(tail_part) < len(kept):
        nxt = next(
            (c for c in graph.children(node.id) if c.metadata.get("copied_from") in kept_set),
            None,
        )
        if nxt is None:
            break
        tail_part.append(nxt)
        node = nxt
    copy_of = {
        c.metadata["copied_from"]: c.id for c in head_part + tail_part if c.metadata.get("copied_from")
    }

    def row(side: str, pos: int, status: str, call: Call | None, original: str | None,
            copy: str | None) -> dict[str, Any]:
        text = call_text(call) if call is not None else ""
        source = graph.get(original) if original is not None else None
        cleared_by = (source or call).metadata.get("cleared_by") if (source or call) is not None else None
        return {
            "side": side,
            "position": pos,
            "status": status,
            "original_id": original,
            "copy_id": copy,
            "role": _message_role(call, status) if call is not None else None,
            "name": call.name if call is not None else None,
            "seq": call.seq if call is not None else None,
            "tokens": _tokens(text),
            "preview": preview(text, preview_chars),
            "cleared_by": cleared_by if isinstance(cleared_by, str) else None,
        }

    rows: list[dict[str, Any]] = []
    before = [("protected", i) for i in protected] + [("folded", i) for i in folded] + [
        ("kept", i) for i in kept
    ]
    for pos, (status, oid) in enumerate(before):
        rows.append(row("before", pos, status, graph.get(oid), oid, copy_of.get(oid)))
    after_nodes = head_part + [summary] + tail_part
    for pos, c in enumerate(after_nodes):
        if c.id == summary.id:
            rows.append(row("after", pos, "summary", c, None, c.id))
        else:
            orig = c.metadata.get("copied_from")
            status = "kept" if orig in kept_set else "protected"
            rows.append(row("after", pos, status, c, orig, c.id))
    df = pd.DataFrame(rows, columns=DIFF_COLUMNS)
    for col in ("original_id", "copy_id", "cleared_by"):
        # keep a real None (not NaN) for "no such node": it is what the views test for
        df[col] = df[col].astype(object).where(df[col].notna(), None)
    df["side"] = df["side"].astype(pd.CategoricalDtype(["before", "after"]))
    df["status"] = df["status"].astype(
        pd.CategoricalDtype(["protected", "folded", "summary", "kept"])
    )
    return BranchDiff(df, summary, graph)


def _tokens(text: str) -> int:
    if not text:
        return 0
    return _estimate_tokens(text)


def branch_diff(
    session_db_or_path: Any,
    session_id: str | None = None,
    compaction: str | int | None = None,
    *,
    preview_chars: int = 400,
) -> pd.DataFrame:
    """One row per message before and after a compaction (see the module docstring)."""
    return compare_compaction(
        session_db_or_path, session_id, compaction, preview_chars=preview_chars
    ).rows


def _diff_slots(d: BranchDiff, infos: list[NodeInfo]) -> Callable[[_Units], list[_Slot]]:
    """Two lanes in diff order: the originals above, each copy under its original and
    the summary under the middle of the run it replaced."""
    before = d.rows[d.rows["side"] == "before"].sort_values("position")
    after = d.rows[d.rows["side"] == "after"]
    column_of = {oid: i for i, oid in enumerate(before["original_id"])}
    folded = [column_of[o] for o, st in zip(before["original_id"], before["status"], strict=True)
              if str(st) == "folded"]
    protected = [column_of[o] for o, st in zip(before["original_id"], before["status"],
                                                strict=True) if str(st) == "protected"]
    summary_column = folded[len(folded) // 2] if folded else (max(protected, default=-1) + 1)
    original_of = {c: o for c, o in zip(after["copy_id"], after["original_id"], strict=True)
                   if o is not None}
    offset = {i.id: slot_offset(i) for i in infos}

    def place(units: _Units) -> list[_Slot]:
        slots = []
        for key in units.keys:
            if key in column_of:
                slots.append(_Slot(column_of[key], 0, offset.get(key, 0.0)))
            elif original_of.get(key) in column_of:
                slots.append(_Slot(column_of[original_of[key]], 1, offset.get(key, 0.0)))
            else:  # the summary
                slots.append(_Slot(summary_column, 1, 0.0))
        return slots

    return place


def diff_graph(
    source: Any,
    session_id: str | None = None,
    compaction: str | int | None = None,
    *,
    diff: BranchDiff | None = None,
    height: int = 420,
) -> GraphView:
    """Both branches of one compaction as a graph, coloured exactly as the diff table.

    Only the nodes of the diff are drawn (originals and the new branch), so the
    picture stays small whatever the session's size. The originals run along the
    upper lane of each line, the new branch along the lower one: every copy sits
    under its original and the summary under the run it replaced, and the lines
    wrap to fill the frame.
    """
    d = diff or compare_compaction(source, session_id, compaction)
    ids = set(d.rows["original_id"].dropna()) | set(d.rows["copy_id"].dropna())
    sub = Graph(n for n in d.graph if n.id in ids)
    infos = node_infos(sub)
    status_of = {}
    for _, r in d.rows.iterrows():
        key = r["copy_id"] if r["side"] == "after" else r["original_id"]
        status_of[key] = str(r["status"])
    for info in infos:
        info.compaction = status_of.get(info.id)
        info.compaction_summary = d.summary.id
        if info.id == d.summary.id:
            info.display_role = "summary"
    return _render(sub, infos, kinds=("caller", "predecessor"), max_nodes=max(2, len(infos)),
                   collapse=False, title=f"compaction {d.summary.id}", height=height,
                   slots=_diff_slots(d, infos), turns=False)


# -- recorded aging ------------------------------------------------------------------------

AGING_COLUMNS = ["position", "status", "node_id", "tool_call_id", "name", "seq", "tokens", "cleared_by",
                 "preview"]
AGING_STATUSES = ["cleared", "cleared earlier", "kept"]


def _aging_events(graph: Graph) -> list[Call]:
    return sorted((n for n in graph if isinstance(n.metadata.get("microcompaction"), dict)),
                  key=lambda n: n.seq)


def list_aging_events(source: Any, session_id: str | None = None) -> pd.DataFrame:
    """One row per recorded microcompaction of a session, in ``seq`` order.

    Columns: ``index, node_id, seq, uuid, trigger, pre_tokens, tokens_saved, cleared``.
    """
    import pandas as pd

    graph, _ = load_session(source, session_id)
    rows = []
    for i, node in enumerate(_aging_events(graph)):
        mc = node.metadata["microcompaction"]
        rows.append({"index": i, "node_id": node.id, "seq": node.seq, "uuid": mc.get("uuid"),
                     "trigger": mc.get("trigger"), "pre_tokens": mc.get("pre_tokens"),
                     "tokens_saved": mc.get("tokens_saved"), "cleared": len(mc.get("tool_call_ids") or ())})
    return pd.DataFrame(rows, columns=["index", "node_id", "seq", "uuid", "trigger", "pre_tokens",
                                       "tokens_saved", "cleared"])


@dataclass
class AgingDiff:
    """The tool results one recorded microcompaction saw, and what it cleared."""

    rows: pd.DataFrame
    event: Call
    graph: Graph

    def _repr_html_(self) -> str:
        return aging_html(self)


def compare_aging(
    source: Any,
    session_id: str | None = None,
    event: str | int = -1,
    *,
    preview_chars: int = 400,
) -> AgingDiff:
    """The tool results on the branch before a recorded microcompaction (module docstring)."""
    import pandas as pd

    graph, _ = load_session(source, session_id)
    events = _aging_events(graph)
    if not events:
        raise ValueError("this session has no recorded microcompaction (no node with metadata.microcompaction)")
    if isinstance(event, str):
        node = next((e for e in events if e.id == event or e.metadata["microcompaction"].get("uuid") == event), None)
        if node is None:
            raise KeyError(f"no recorded microcompaction {event!r} in this session")
    elif isinstance(event, int) and not isinstance(event, bool):
        try:
            node = events[event]
        except IndexError:
            raise IndexError(f"event index {event} out of range: this session has {len(events)} "
                             "recorded microcompaction(s)") from None
    else:
        raise TypeError(f"event must be a node id, a uuid or an int index, got {event!r}")
    mc = node.metadata["microcompaction"]
    mine = {mc.get("uuid"), node.id}
    this_ids = {t for t in mc.get("tool_call_ids") or () if isinstance(t, str)}
    rows = []
    for call in graph.chain(node.id)[:-1]:
        if call.role != "code":
            continue
        tool_call_id = call.metadata.get("tool_call_id")
        cleared_by = call.metadata.get("cleared_by")
        if tool_call_id in this_ids or cleared_by in mine:
            status = "cleared"
        elif isinstance(cleared_by, str):
            status = "cleared earlier"
        else:
            status = "kept"
        text = call_text(call)
        rows.append({"position": len(rows), "status": status, "node_id": call.id, "tool_call_id": tool_call_id,
                     "name": call.name, "seq": call.seq, "tokens": -(-len(text) // 4),
                     "cleared_by": cleared_by if isinstance(cleared_by, str) else None,
                     "preview": preview(text, preview_chars)})
    df = pd.DataFrame(rows, columns=AGING_COLUMNS)
    df["status"] = df["status"].astype(pd.CategoricalDtype(AGING_STATUSES))
    df["cleared_by"] = df["cleared_by"].astype(object).where(df["cleared_by"].notna(), None)
    return AgingDiff(df, node, graph)
