"""render_dag_messages: node -> OpenAI message mapping, tool pairing repair, placeholders."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.dag.nodes import Call, Graph, compute_reads
from opctx.dag.render import (
    ORPHAN_RESULT_PREFIX,
    UNMATCHED_CALL_NOTE,
    function_header,
    render_dag_messages,
)


def assert_provider_valid(messages: list[dict]) -> None:
    """What an OpenAI-compatible server checks about tool traffic and emptiness."""
    pending: list[str] = []
    for i, msg in enumerate(messages):
        role = msg["role"]
        assert role in ("system", "user", "assistant", "tool"), msg
        if role == "tool":
            assert pending, f"message {i}: tool result without a preceding call: {msg}"
            assert msg["tool_call_id"] == pending.pop(0), f"message {i}: out of order"
            assert isinstance(msg["content"], str)
            continue
        assert not pending, f"message {i}: calls {pending} left unanswered before {msg}"
        if role == "assistant" and msg.get("tool_calls"):
            pending = [tc["id"] for tc in msg["tool_calls"]]
            for tc in msg["tool_calls"]:
                assert tc["type"] == "function"
                json.loads(tc["function"]["arguments"])
        else:
            assert isinstance(msg["content"], str) and msg["content"].strip(), f"empty: {msg}"
    assert not pending, f"calls {pending} never answered"


def tool_exchange(graph: Graph, call_ids=("c1",), *, results=True):
    u = graph.add(Call(role="user", output="list files"))
    llm = graph.add(
        Call(
            role="llm",
            name="m",
            output="",
            predecessor=u.id,
            metadata={
                "tool_calls": [
                    {"id": cid, "name": "ls", "arguments": {"path": f"/{cid}"}} for cid in call_ids
                ]
            },
        )
    )
    outs = []
    if results:
        for cid in call_ids:
            outs.append(
                graph.add(
                    Call(
                        role="code",
                        name="ls",
                        input={"path": f"/{cid}"},
                        output=f"files of {cid}",
                        caller=llm.id,
                        predecessor=llm.id,
                        metadata={"tool_call_id": cid},
                    )
                )
            )
    return u, llm, outs


def test_user_assistant_system_mapping():
    g = Graph()
    s = g.add(Call(role="llm", output="[Previous conversation summary]\nx", metadata={"role": "system"}))
    u = g.add(Call(role="user", output="hello"))
    a = g.add(Call(role="llm", name="m", output="hi there", predecessor=u.id))
    assert render_dag_messages([s.id, u.id, a.id], g) == [
        {"role": "system", "content": "[Previous conversation summary]\nx"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi there"},
    ]


def test_reads_may_be_calls_ids_mixed_and_duplicates_are_dropped():
    g = Graph()
    u = g.add(Call(role="user", output="q"))
    a = g.add(Call(role="llm", output="a"))
    assert render_dag_messages([u, a.id, u.id], g) == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]
    loose = Call(role="user", output="not in any graph")
    assert render_dag_messages([loose], None) == [{"role": "user", "content": "not in any graph"}]


def test_unknown_read_id_is_a_clear_error():
    with pytest.raises(KeyError, match="'ghost' is not a node"):
        render_dag_messages(["ghost"], Graph())


def test_tool_call_and_result_pair_by_id_in_call_order():
    g = Graph()
    u, llm, outs = tool_exchange(g, ("c1", "c2"))
    # results given out of order in reads: they still follow their call, in call order
    msgs = render_dag_messages([u.id, llm.id, outs[1].id, outs[0].id], g)
    assert msgs == [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "/c1"}'}},
                {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": '{"path": "/c2"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "files of c1"},
        {"role": "tool", "tool_call_id": "c2", "content": "files of c2"},
    ]
    assert_provider_valid(msgs)


def test_node_between_call_and_result_moves_after_the_results():
    g = Graph()
    u, llm, outs = tool_exchange(g, ("c1",), results=False)
    note = g.add(Call(role="user", output="interjection"))
    res = g.add(Call(role="code", name="ls", output="r", caller=llm.id, metadata={"tool_call_id": "c1"}))
    msgs = render_dag_messages([u.id, llm.id, note.id, res.id], g)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "user"]
    assert_provider_valid(msgs)


def test_call_without_result_is_dropped_and_text_kept():
    g = Graph()
    u, llm, outs = tool_exchange(g, ("c1", "c2"))
    g.update(llm.id, output="let me look")
    msgs = render_dag_messages([u.id, llm.id, outs[0].id], g)
    assert msgs[1]["content"] == "let me look"
    assert [tc["id"] for tc in msgs[1]["tool_calls"]] == ["c1"]
    assert_provider_valid(msgs)


def test_call_only_message_without_any_result_becomes_a_note():
    g = Graph()
    u, llm, _ = tool_exchange(g, ("c1",), results=False)
    msgs = render_dag_messages([u.id, llm.id], g)
    assert msgs[1] == {
        "role": "assistant",
        "content": f'[called ls(path="/c1"); {UNMATCHED_CALL_NOTE}]',
    }
    assert_provider_valid(msgs)


def test_result_whose_call_is_not_read_renders_as_user_text():
    g = Graph()
    u, llm, outs = tool_exchange(g, ("c1",))
    msgs = render_dag_messages([u.id, outs[0].id], g)
    assert msgs[1] == {"role": "user", "content": f"{ORPHAN_RESULT_PREFIX} ls (call c1)]\nfiles of c1"}
    assert_provider_valid(msgs)


def test_duplicate_result_for_one_call_is_not_a_second_tool_message():
    g = Graph()
    u, llm, outs = tool_exchange(g, ("c1",))
    again = g.add(Call(role="code", name="ls", output="retry", metadata={"tool_call_id": "c1"}))
    msgs = render_dag_messages([u.id, llm.id, outs[0].id, again.id], g)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "user"]
    assert "retry" in msgs[-1]["content"]
    assert_provider_valid(msgs)


def test_error_result_is_flagged_for_the_model():
    g = Graph()
    u, llm, outs = tool_exchange(g, ("c1",))
    g.update(outs[0].id, output="ValueError: boom", metadata={"is_error": True})
    msgs = render_dag_messages([u.id, llm.id, outs[0].id], g)
    assert msgs[2]["content"] == "[error] ValueError: boom"


def test_placeholder_llm_node_is_never_rendered():
    g = Graph()
    u = g.add(Call(role="user", output="hi"))
    ph = g.add(Call(role="llm", output=None, predecessor=u.id))
    empty = g.add(Call(role="llm", output="", predecessor=u.id))
    assert render_dag_messages([u.id, ph.id, empty.id], g) == [{"role": "user", "content": "hi"}]


def test_agentic_function_node_doc_before_call_then_result():
    g = Graph()
    fn = g.add(
        Call(
            role="code",
            name="summarize",
            input={"text": "abc", "n": 2},
            output="short",
            metadata={"doc": "Summarize text in n words.", "status": "ok"},
        )
    )
    msgs = render_dag_messages([fn.id], g)
    assert msgs == [
        {"role": "user", "content": 'Summarize text in n words.\nsummarize(text="abc", n=2)\n-> short'}
    ]
    content = msgs[0]["content"]
    assert content.index("Summarize text") < content.index("summarize(")


def test_running_function_renders_its_header_only_and_error_renders_the_error():
    g = Graph()
    running = g.add(
        Call(role="code", name="plan", input={"goal": "x"}, metadata={"doc": "Plan.", "status": "running"})
    )
    failed = g.add(
        Call(
            role="code",
            name="step",
            input={},
            output={"error": "KeyError: 'k'"},
            metadata={"status": "error"},
        )
    )
    msgs = render_dag_messages([running.id, failed.id], g)
    assert msgs[0] == {"role": "user", "content": 'Plan.\nplan(goal="x")'}
    assert msgs[1] == {"role": "user", "content": "step()\n-> error: KeyError: 'k'"}
    assert function_header(running) == 'Plan.\nplan(goal="x")'


def test_agentic_llm_node_renders_its_prompt_then_answer():
    g = Graph()
    n = g.add(Call(role="llm", input={"system": None, "content": "classify: x"}, output="A"))
    assert render_dag_messages([n.id], g) == [
        {"role": "user", "content": "classify: x"},
        {"role": "assistant", "content": "A"},
    ]


def test_imported_anthropic_blocks_pair_like_native_calls():
    g = Graph()
    u = g.add(Call(role="user", output="go"))
    a = g.add(
        Call(
            role="llm",
            output="",
            metadata={"extra": {"blocks": [{"type": "tool_use", "id": "tu1", "name": "bash", "input": {"cmd": "ls"}}]}},
        )
    )
    w = g.add(
        Call(
            role="user",
            output="",
            metadata={"extra": {"blocks": [{"type": "tool_result", "tool_use_id": "tu1", "content": "a.txt"}]}},
        )
    )
    msgs = render_dag_messages([u.id, a.id, w.id], g)
    assert msgs[1]["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"cmd": "ls"}'}
    assert msgs[2] == {"role": "tool", "tool_call_id": "tu1", "content": "a.txt"}
    assert_provider_valid(msgs)
    # the wrapper without its call: visible text, valid protocol
    alone = render_dag_messages([u.id, w.id], g)
    assert alone[1]["role"] == "user" and "a.txt" in alone[1]["content"]
    assert_provider_valid(alone)


def test_compute_reads_output_renders_valid_for_a_whole_session():
    g = Graph()
    tool_exchange(g, ("a", "b"))
    tool_exchange(g, ("c",))
    msgs = render_dag_messages(compute_reads(g), g)
    assert_provider_valid(msgs)
    assert sum(m["role"] == "tool" for m in msgs) == 3


# -- property: any subset of any tool-heavy session renders to a valid request --------


@st.composite
def sessions_and_subsets(draw):
    g = Graph()
    head = None
    n_turns = draw(st.integers(1, 5))
    counter = 0
    for _ in range(n_turns):
        u = g.add(Call(role="user", output=f"q{counter}", predecessor=head))
        head = u.id
        for _ in range(draw(st.integers(0, 3))):
            ids = [f"t{counter}_{k}" for k in range(draw(st.integers(1, 3)))]
            counter += 1
            text = draw(st.sampled_from(["", "thinking"]))
            a = g.add(
                Call(
                    role="llm",
                    output=text,
                    predecessor=head,
                    metadata={"tool_calls": [{"id": i, "name": "f", "arguments": {"k": i}} for i in ids]},
                )
            )
            head = a.id
            for i in ids:
                r = g.add(
                    Call(
                        role="code",
                        name="f",
                        output=draw(st.sampled_from(["", "ok", "x" * 5])),
                        caller=a.id,
                        predecessor=head,
                        metadata={"tool_call_id": i, "is_error": draw(st.booleans())},
                    )
                )
                head = r.id
        a = g.add(Call(role="llm", output=draw(st.sampled_from(["", "done"])), predecessor=head))
        head = a.id
    nodes = list(g)
    keep = draw(st.lists(st.booleans(), min_size=len(nodes), max_size=len(nodes)))
    subset = [n.id for n, k in zip(nodes, keep, strict=True) if k]
    if draw(st.booleans()):
        subset = draw(st.permutations(subset))
    return g, subset


@settings(max_examples=150, deadline=None)
@given(sessions_and_subsets())
def test_property_any_reads_subset_renders_a_valid_request(case):
    g, subset = case
    msgs = render_dag_messages(subset, g)
    assert_provider_valid(msgs)
    # nothing a read node said is lost: every non-empty tool output appears somewhere
    rendered = "\n".join(m.get("content") or "" for m in msgs)
    for nid in subset:
        node = g[nid]
        if node.role == "code" and node.output:
            assert node.output in rendered


def test_call_ids_reused_across_exchanges_pair_with_the_nearest_call():
    g = Graph()
    u1, l1, r1 = tool_exchange(g, ("call_0",))
    u2, l2, r2 = tool_exchange(g, ("call_0",))
    msgs = render_dag_messages(compute_reads(g), g)
    assert_provider_valid(msgs)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool"] * 2
    assert [m["content"] for m in msgs if m["role"] == "tool"] == ["files of call_0"] * 2
    # the first exchange's answer missing: its call is dropped, the second still pairs
    msgs = render_dag_messages([u1.id, l1.id, u2.id, l2.id, r2[0].id], g)
    assert_provider_valid(msgs)
    assert "tool_calls" not in msgs[1] and msgs[3]["tool_calls"][0]["id"] == "call_0"
