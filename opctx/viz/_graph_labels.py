"""How a node looks: its colours (from the toolkit's one vocabulary), labels and tooltips.

Private to ``opctx.viz.graph``, which re-exports the palettes. Every number in a label
says what it counts (``_vocabulary.NUMBER_KEY``): ``#n`` is a sequence number, a count
carries its noun. Each node has a full label and a short one; the page shows the full
one, the short one or none, whichever fits without overlapping another label at the
current zoom. Tooltips are plain strings (escaped exactly once, by the JSON embedding of
the page).
"""

from __future__ import annotations

from typing import Any

from ._graph_nodes import NodeInfo
from ._vocabulary import EDGES, MEMBERSHIP, ROLES
from .html import preview

# the palettes as plain colours (the public names of opctx.viz.graph)
ROLE_COLORS = {name: fill.color for name, fill in ROLES.items()}
EDGE_COLORS = {name: line.color for name, line in EDGES.items()}
COMPACTION_COLORS = {name: mark.color for name, mark in MEMBERSHIP.items()}


def _node_labels(info: NodeInfo, inner: int) -> tuple[str, str]:
    """``(full, short)``: ``#seq name`` (and ``+n inside`` a collapsed frame), and ``#seq``."""
    full = preview(f"#{info.seq} {info.name or info.display_role}", 28)
    if inner:
        full += f" +{inner} inside"
    return full, f"#{info.seq}"


def _group_node(group: dict[str, Any], max_nodes: int) -> tuple[str, str, str, int, str | None]:
    """``(label, short label, tooltip, branch, compaction)`` of a collapsed group."""
    if group["kind"] == "older":
        return (
            f"{group['count']} earlier nodes",
            f"{group['count']} earlier",
            f"{group['count']} older nodes (seq {group['first']}\u2013{group['last']}) are not "
            f"drawn: max_nodes={max_nodes}.\nUse to_networkx() for all of them.",
            0, None,
        )
    members = group["members"]
    return (
        f"{len(members)} folded messages",
        f"{len(members)} folded",
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
        meaning = MEMBERSHIP[info.compaction].meaning if info.compaction in MEMBERSHIP else ""
        lines.append(f"{info.compaction}: {meaning} ({info.compaction_summary or '-'})")
    if info.copied_from:
        lines.append(f"copied from: {info.copied_from}")
    if inner:
        lines.append(f"{inner} nodes inside (collapsed)")
    return "\n".join([*lines, "", info.preview])
