"""A recorded Claude Code session driven through ``chat_turn`` with ``ReplayProvider``.

The imported session is written to an in-memory database and loaded back (so the
nodes have their store-assigned ``seq``), its active branch is walked in order: every
user message that the model answered is fed to ``chat_turn``; the provider replays the
recorded llm nodes; the tools answer with the recorded tool outputs, in order. The
assistant texts and tool calls that come out must be the recorded ones, in order.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import pytest

from opctx.dag.chat import chat_turn
from opctx.dag.nodes import Graph
from opctx.dag.providers import ReplayProvider
from opctx.dag.runtime import DagRuntime
from opctx.dag.store import GraphStore, connect
from opctx.importers import parse_path, write_session
from opctx.importers.export import active_branch

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "samples" / "openai_chat.json"


def _stored_branch(path: Path):
    sessions = parse_path(path)
    s = sessions[0]
    conn = connect(":memory:")
    write_session(s, conn)
    with GraphStore(conn, s.session_id, create=False) as store:
        graph = store.load()
        head = store.head()
    conn.close()
    return active_branch(list(graph), head)


def _replay(branch):
    """Drive chat_turn over ``branch``; returns (recorded llm nodes, runtime graph)."""
    recorded = [n for n in branch if n.role == "llm" and n.metadata.get("role") != "system"]
    outputs = deque(n for n in branch if n.role == "code")
    names = {n.name for n in branch if n.role == "code"}

    def make_tool(name):
        def tool(**kwargs):
            node = outputs.popleft()
            assert node.name == name, (node.name, name)
            assert kwargs == (node.input or {})
            return node.output
        tool.__name__ = name
        return tool

    tools = {name: make_tool(name) for name in names}
    runtime = DagRuntime(ReplayProvider(recorded), graph=Graph())
    prompted = [n for n in branch if not n.metadata.get("display_only")]
    for i, node in enumerate(prompted):
        if node.role != "user":
            continue
        answered = i + 1 < len(prompted) and prompted[i + 1].role == "llm" \
            and prompted[i + 1].metadata.get("role") != "system"
        if answered:
            chat_turn(node.output, runtime, tools=tools, max_iterations=10_000)
        else:
            runtime.add_user_message(node.output)
    assert not outputs, "every recorded tool output was asked for"
    return recorded, runtime.graph


def _check(recorded, graph):
    replayed = [n for n in graph if n.role == "llm"]
    assert [n.output for n in replayed] == [n.output for n in recorded]
    assert [[tc["name"] for tc in n.metadata.get("tool_calls") or []] for n in replayed] == \
        [[tc["name"] for tc in n.metadata.get("tool_calls") or []] for n in recorded]
    codes = [n for n in graph if n.role == "code"]
    assert all(not n.metadata.get("is_error") for n in codes)


def test_replay_sample_conversation():
    recorded, graph = _replay(_stored_branch(SAMPLE))
    assert len(recorded) == 3
    _check(recorded, graph)


@pytest.mark.corpus
def test_replay_recorded_claude_code_session(corpus_dir):
    path = (corpus_dir / "claude_code_jsonl/WenJ-He_SinglePTZ-FaceTrack__032a96df-f5b8-4b7e-b09e-30af53c1912f"
            / "032a96df-f5b8-4b7e-b09e-30af53c1912f.jsonl")
    branch = _stored_branch(path)
    recorded, graph = _replay(branch)
    assert len(recorded) == 110
    _check(recorded, graph)
    texts = [n.output for n in recorded if n.output]
    assert texts and any("\u4e00" <= ch <= "\u9fff" for ch in texts[-1])


def test_replay_claude_code_sample_after_its_compaction():
    cc = SAMPLE.parent / "7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f.jsonl"
    branch = _stored_branch(cc)
    assert branch[0].metadata["compaction"]["recorded"] is True
    recorded, graph = _replay(branch)
    assert [n.output[:5] for n in recorded] == ["好的，我会", "已加上上限"]
    _check(recorded, graph)
