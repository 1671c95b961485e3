"""How a node looks: the palettes and the text of labels and tooltips.

Private to ``opctx.viz.graph``, which re-exports the palettes. Tooltips are plain
strings (escaped exactly once, by the JSON embedding of the page).
"""

from __future__ import annotations

from typing import Any

from ._graph_nodes import NodeInfo

# Tableau-10: distinguishable, colour-blind tolerable, and the same palette the plots use.
ROLE_COLORS = {
    "user": "#4e79a7",
    "assistant": "#59a14f",
    "system": "#9c755f",
    "tool": "#f28e2b",
    "function": "#edc948",
    "summary": "#e15759",
    "collapsed": "#bab0ac",
}
EDGE_COLORS = {"caller": "#f28e2b", "predecessor": "#4e79a7", "reads": "#b07aa1"}
COMPACTION_COLORS = {
    "protected": "#1b7837",
    "folded": "#8c8c8c",
    "summary": "#e15759",
    "kept": "#2166ac",
    "copy": "#76b7b2",
}


def _group_node(group: dict[str, Any], max_nodes: int) -> tuple[str, str, int, str | None]:
    """``(label, tooltip, branch, compaction)`` of a collapsed group."""
    if group["kind"] == "older":
        return (
            f"\u2026 {group['count']} earlier nodes",
            f"{group['count']} older nodes (seq {group['first']}\u2013{group['last']}) are not "
            f"drawn: max_nodes={max_nodes}.\nUse to_networkx() for all of them.",
            0, None,
        )
    members = group["members"]
    return (
        f"folded \u00d7{len(members)}",
        f"{len(members)} messages folded by summary {group['summary']}\n"
        f"seq {members[0].seq}\u2013{members[-1].seq}, "
        f"\u2248{sum(m.tokens for m in members)} tokens",
        members[0].branch, "folded",
    )


def _tooltip(info: NodeInfo, inner: int) -> str:
    lines = [
        f"{info.display_role} \u00b7 {info.name or '-'} \u00b7 seq {info.seq}",
        f"id: {info.id}",
        f"tokens \u2248 {info.tokens}",
    ]
    if info.status:
        lines.append(f"status: {info.status}")
    if info.compaction:
        lines.append(f"compaction: {info.compaction} ({info.compaction_summary or '-'})")
    if info.copied_from:
        lines.append(f"copied from: {info.copied_from}")
    if inner:
        lines.append(f"{inner} nodes inside (collapsed)")
    return "\n".join([*lines, "", info.preview])
