"""SessionBuilder: what each llm node read (``reads``) on branching, compacted histories."""

from __future__ import annotations

import random

import pytest

from opctx.importers.base import SessionBuilder, TranscriptError


def _reference_prompt(b: SessionBuilder, node_id: str | None) -> list[str]:
    """The prompt by definition: the whole chain from the root, minus display-only nodes."""
    out = []
    while node_id is not None:
        node = b.by_id[node_id]
        if node.metadata.get("display_only") is not True:
            out.append(node_id)
        node_id = node.predecessor
    return out[::-1]


@pytest.mark.parametrize("seed", range(5))
def test_reads_are_the_chain_whatever_order_the_branches_grow_in(seed):
    # prompt_of remembers the last prompt it computed and walks back only to it; forks,
    # jumps to older nodes, display-only nodes and compactions must not change the result
    rng = random.Random(seed)
    b = SessionBuilder("test", "mem.jsonl")
    for step in range(300):
        ids = [c.id for c in b.calls]
        pred = rng.choice(ids) if ids and rng.random() < 0.2 else b.head
        role = rng.choice(["user", "llm", "llm", "code"])
        display = role == "llm" and rng.random() < 0.1
        call = b.add(role, output=f"step {step}", predecessor=pred, in_prompt=not display,
                     metadata={"display_only": True} if display else None, move_head=True)
        if role == "llm":
            assert call.reads == _reference_prompt(b, pred), step
        if step % 97 == 96:
            summary = b.record_compaction(f"summary {step}", kept_ids=ids[-2:])
            assert summary.id in b.by_id
    for call in b.calls:
        if call.role == "llm" and call.metadata.get("copied_from"):
            assert call.reads == _reference_prompt(b, call.predecessor)


def test_a_predecessor_cycle_is_an_error_naming_the_file():
    b = SessionBuilder("test", "loop.jsonl")
    first = b.add("user", output="a")
    second = b.add("user", output="b", predecessor=first.id)
    first.predecessor = second.id  # only a corrupt recording can do this
    with pytest.raises(TranscriptError, match="loop.jsonl: predecessor cycle"):
        b.prompt_of(second.id)
