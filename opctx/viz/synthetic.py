"""Synthetic sessions for the toolkit's own demos, tests and benchmarks.

``synthetic_session(n_nodes)`` builds an in-memory ``Graph`` shaped like a real
agent session: user turns, assistant calls with tool calls, tool results,
agentic-function frames with nested llm/code calls, ``reads`` edges as the
runtime would set them, and compactions in the exact layout of
docs/ARCHITECTURE.md ("Compaction layout": protected-head copies, a summary
node with ``metadata.compaction``, kept-tail copies on a new branch).

It exists so that rendering can be measured and tested at any size without
depending on the lab's scenario generator or on recorded transcripts (which
may not be redistributed). Content is deterministic for a given ``seed``.
``payload`` is inserted into every user message: the escaping tests put
``<script>`` there.

``reads`` are stored as the runtime does for top-level calls (every earlier
node on the active branch), capped at ``reads_window`` nodes so that a 5,000-node
session does not carry 12.5 million read edges in memory.
"""

from __future__ import annotations

import random

from ..dag.nodes import Call, Graph, new_id

__all__ = ["synthetic_session"]

_WORDS = (
    "parse config cache retry token budget summary branch commit index query schema "
    "migration handler request response timeout buffer"
).split()


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def synthetic_session(
    n_nodes: int = 200,
    *,
    seed: int = 0,
    compact_every: int = 0,
    protect_first_n: int = 2,
    keep_last: int = 4,
    frame_every: int = 5,
    payload: str = "",
    reads_window: int = 64,
    start_time: float = 1_700_000_000.0,
) -> tuple[Graph, str]:
    """A ``(graph, head_id)`` of about ``n_nodes`` nodes (never fewer).

    ``compact_every``: after that many nodes on the active branch, compact it
    (0: never). ``frame_every``: every N-th turn calls an agentic function with
    nested calls instead of a plain tool.
    """
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be positive, got {n_nodes}")
    rng = random.Random(seed)
    graph = Graph()
    branch: list[str] = []  # active branch, root first
    clock = [start_time]

    def add(role: str, **kw) -> Call:
        """Append a node to the active branch (its predecessor is the branch's end)."""
        clock[0] += rng.uniform(0.5, 4.0)
        pred = branch[-1] if branch else None
        node = graph.add(Call(role=role, created_at=clock[0], predecessor=pred, **kw))
        branch.append(node.id)
        return node

    turn = 0
    while len(graph) < n_nodes:
        turn += 1
        add("user", name="user", output=f"{payload}Turn {turn}: {_sentence(rng, 12)}")
        call_id = f"call_{turn}"
        llm = add(
            "llm",
            name="gpt-4o",
            output=_sentence(rng, 20),
            reads=branch[-reads_window:],
            metadata={
                "tool_calls": [{"id": call_id, "name": "search", "arguments": {"q": payload}}],
                "usage": {"input_tokens": 40 * len(branch), "output_tokens": 30},
            },
        )
        if frame_every and turn % frame_every == 0:
            frame = add(
                "code",
                name="analyse",
                input={"topic": _sentence(rng, 3)},
                output=None,
                metadata={"status": "running", "tool_call_id": call_id, "doc": "Analyse it."},
            )
            inner_llm = graph.add(
                Call(
                    role="llm",
                    name="gpt-4o-mini",
                    caller=frame.id,
                    output=_sentence(rng, 15),
                    reads=[frame.id],
                    created_at=clock[0] + 0.1,
                )
            )
            graph.add(
                Call(
                    role="code",
                    name="read_file",
                    caller=inner_llm.id,
                    input={"path": "src/app.py"},
                    output=payload + _sentence(rng, 40),
                    created_at=clock[0] + 0.2,
                )
            )
            graph.update(frame.id, output=_sentence(rng, 10), status="ok")
        else:
            add(
                "code",
                name="search",
                caller=llm.id,
                input={"q": _sentence(rng, 2)},
                output=payload + _sentence(rng, 60),
                metadata={"tool_call_id": call_id},
            )
        add("llm", name="gpt-4o", output=_sentence(rng, 25), reads=branch[-reads_window:])
        if compact_every and len(branch) >= compact_every and len(graph) < n_nodes:
            _compact(graph, branch, protect_first_n, keep_last, rng, clock)
    return graph, branch[-1]


def _compact(
    graph: Graph,
    branch: list[str],
    protect_first_n: int,
    keep_last: int,
    rng: random.Random,
    clock: list[float],
) -> None:
    """Compact the active branch in the ARCHITECTURE layout; ``branch`` becomes the new one."""
    nodes = [graph[i] for i in branch]
    cut = len(nodes) - keep_last
    # the kept tail starts at a user message, as find_cut_index guarantees
    while cut > protect_first_n and nodes[cut].role != "user":
        cut -= 1
    protected, folded, kept = nodes[:protect_first_n], nodes[protect_first_n:cut], nodes[cut:]
    new_branch: list[str] = []

    def copy(node: Call) -> Call:
        clock[0] += 0.01
        c = node.copy(
            id=new_id("k"),
            seq=-1,
            predecessor=new_branch[-1] if new_branch else None,
            created_at=clock[0],
            metadata={**node.metadata, "copied_from": node.id},
        )
        graph.add(c)
        new_branch.append(c.id)
        return c

    for n in protected:
        copy(n)
    clock[0] += 0.01
    summary = graph.add(
        Call(
            role="llm",
            name="compaction",
            predecessor=new_branch[-1] if new_branch else None,
            created_at=clock[0],
            output="[Previous conversation summary]\n" + _sentence(rng, 40),
            metadata={
                "role": "system",
                "type": "compactionSummary",
                "source": "compaction",
                "extra": {"compaction": True},
                "compaction": {
                    "kind": "summary",
                    "folded_ids": [n.id for n in folded],
                    "folded_range": [folded[0].id, folded[-1].id] if folded else None,
                    "protected_ids": [n.id for n in protected],
                    "kept_ids": [n.id for n in kept],
                    "reason": "auto",
                    "trigger": "budget",
                    "pre_tokens": 40 * len(nodes),
                    "tokens_after": 40 * (len(protected) + len(kept) + 1),
                    "fell_back_to_structural": False,
                    "recorded": False,
                    "format": None,
                },
            },
        )
    )
    new_branch.append(summary.id)
    for n in kept:
        copy(n)
    branch[:] = new_branch
