"""chat_turn and parse_tool_call: the LLM <-> tool loop of §0.6."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from opctx.dag.agentic import Runtime, agentic_function
from opctx.dag.chat import (
    MAX_ITERATIONS_MARKER,
    ChatResult,
    chat_turn,
    parse_tool_call,
    tool_schema,
    turn_reads,
)
from opctx.dag.nodes import Call, Graph
from opctx.dag.providers import ReplayProvider, Reply, ScriptedProvider, ToolCall, Usage
from opctx.dag.render import render_dag_messages
from opctx.dag.runtime import DagRuntime
from opctx.dag.session import DagSessionManager
from opctx.dag.store import GraphStore


def native(*calls, text="", usage=None):
    return Reply(
        text=text,
        tool_calls=[ToolCall(cid, name, args) for cid, name, args in calls],
        usage=usage,
    )


# -- parse_tool_call ---------------------------------------------------------------------


def names_args(calls):
    return [(c.name, c.arguments) for c in calls]


@pytest.mark.parametrize(
    "text",
    [
        '{"tool": "search", "arguments": {"q": "dag"}}',
        '  {"name": "search", "arguments": {"q": "dag"}}\n',
        '{"name": "search", "arguments": "{\\"q\\": \\"dag\\"}"}',
        '{"tool": "search", "args": {"q": "dag"}}',
        '{"function": {"name": "search", "arguments": "{\\"q\\": \\"dag\\"}"}}',
        '{"tool_call": {"name": "search", "parameters": {"q": "dag"}}}',
        'Sure.\n```json\n{"tool": "search", "arguments": {"q": "dag"}}\n```\nDone.',
        'Sure.\n```\n{"name": "search", "arguments": {"q": "dag"}}\n```',
        'I will call {"tool": "search", "arguments": {"q": "dag"}} now.',
        'First {"note": 1} then {"name": "search", "arguments": {"q": "dag"}} ok',
        '```json\n{"not": "a call"}\n```\nbut {"tool": "search", "arguments": {"q": "dag"}}',
    ],
)
def test_parse_tool_call_shapes(text):
    assert names_args(parse_tool_call(text)) == [("search", {"q": "dag"})]


def test_parse_tool_call_tool_without_arguments_and_arrays():
    assert names_args(parse_tool_call('{"tool": "now"}')) == [("now", {})]
    calls = parse_tool_call('[{"tool": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]')
    assert names_args(calls) == [("a", {}), ("b", {"x": 1})]
    assert all(c.id.startswith("txt_") for c in calls) and calls[0].id != calls[1].id


def test_parse_tool_call_bad_argument_text_is_kept_raw():
    (call,) = parse_tool_call('{"name": "f", "arguments": "not json"}')
    assert call.arguments == {"_raw": "not json"}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "just prose, no JSON at all",
        '{"name": "Bob", "age": 3}',  # a name without arguments is data, not a call
        '{"tool": ""}',
        '{"tool": 5, "arguments": {}}',
        "[1, 2, 3]",
        '{"unclosed": ',
        "```json\n{broken\n```",
        '[{"tool": "a"}, {"x": 1}]',  # a mixed array is not a list of calls
        "{{{{}}}}",
    ],
)
def test_parse_tool_call_garbage_is_no_call(text):
    assert parse_tool_call(text) == []


def test_parse_tool_call_native_calls_win_and_keep_order():
    reply = native(("1", "a", {}), ("2", "b", {"k": 1}), text='{"tool": "ignored"}')
    assert [c.id for c in parse_tool_call(reply)] == ["1", "2"]
    assert names_args(parse_tool_call(Reply(text='{"tool": "t"}'))) == [("t", {})]
    assert parse_tool_call(None) == []
    with pytest.raises(TypeError, match="str or Reply"):
        parse_tool_call(42)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from('{}[]":,tolnamesrgu `json\n ab1'), max_size=80) | st.text(max_size=80))
def test_parse_tool_call_never_raises_on_any_text(text):
    calls = parse_tool_call(text)
    assert all(isinstance(c, ToolCall) and c.name and isinstance(c.arguments, dict) for c in calls)


@settings(max_examples=100, deadline=None)
@given(
    name=st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True),
    args=st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
    prose=st.text(alphabet=st.characters(blacklist_characters="{}[]`"), max_size=30),
)
def test_parse_tool_call_finds_any_call_embedded_in_prose(name, args, prose):
    blob = json.dumps({"tool": name, "arguments": args})
    assert names_args(parse_tool_call(f"{prose} {blob} {prose}")) == [(name, args)]


@pytest.mark.parametrize(
    "text",
    [
        '{"call": "search", "args": {"q": "dag"}}',
        '```json\n{"call": "search", "args": {"q": "dag"}}\n```',
        '```\n{"call": "search", "args": {"q": "dag"}}\n```',
        'Let me look that up: {"call": "search", "args": {"q": "dag"}} and report back.',
        'Plan:\n1. search\n```json\n{"call": "search", "args": {"q": "dag"}}\n```\nthen answer.',
        '{"call": "search", "arguments": {"q": "dag"}}',
        '[{"call": "search", "args": {"q": "dag"}}]',
    ],
)
def test_parse_tool_call_openprogram_call_format(text):
    assert names_args(parse_tool_call(text)) == [("search", {"q": "dag"})]


def test_parse_tool_call_openprogram_call_format_details():
    assert names_args(parse_tool_call('{"call": "now"}')) == [("now", {})]
    assert names_args(parse_tool_call('{"call": "fs.read_file", "args": "{\\"p\\": 1}"}')) == [
        ("fs.read_file", {"p": 1})
    ]
    # "call" is an ordinary English key too: only a tool-like name makes it a call
    for data in ('{"call": "see you at 5"}', '{"call": ""}', '{"call": 3, "args": {}}', '{"call": {"x": 1}}'):
        assert parse_tool_call(data) == [], data


@settings(max_examples=300, deadline=None)
@given(
    name=st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,15}", fullmatch=True),
    args=st.dictionaries(
        st.text(max_size=6),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(max_size=8),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
            max_leaves=6,
        ),
        max_size=3,
    ),
    before=st.text(max_size=60),
    after=st.text(max_size=60),
    shape=st.sampled_from(["bare", "fenced", "fenced-json", "embedded"]),
)
def test_parse_tool_call_finds_the_call_format_in_any_prose(name, args, before, after, shape):
    # prose may be anything that does not itself open JSON or a fence before the call
    assume(not any(c in before for c in "{[`") and "```" not in after)
    blob = json.dumps({"call": name, "args": args}, ensure_ascii=shape == "bare")
    text = {
        "bare": blob,
        "fenced": f"{before}\n```\n{blob}\n```\n{after}",
        "fenced-json": f"{before}\n```json\n{blob}\n```\n{after}",
        "embedded": f"{before}{blob}{after}",
    }[shape]
    assert names_args(parse_tool_call(text)) == [(name, args)]


def test_parse_tool_call_without_text_or_with_deep_json_is_no_call():
    assert parse_tool_call(Reply(text=None)) == []  # type: ignore[arg-type]
    deep = "[" * 100_000 + "]" * 100_000
    assert parse_tool_call(deep) == [] and parse_tool_call(f"see {deep}") == []
    assert names_args(parse_tool_call(f"{deep} then {{\"call\": \"f\"}}")) == [("f", {})]
    nested = '{"a": {"b": ' * 30_000  # deeper than the decoder recurses, and never closed
    assert parse_tool_call(nested) == [] and parse_tool_call(f"x {nested} y") == []
    # a call after a few broken fragments and a long valid object is still found
    text = 'draft {"tool": broken} {"x": "' + "y" * 200_000 + '"} {"call": "f", "args": {"k": 1}}'
    assert names_args(parse_tool_call(text)) == [("f", {"k": 1})]


def test_chat_turn_with_replies_without_text():
    replies = iter([native(("c1", "add", {"a": 1, "b": 2})), Reply(text=None)])  # type: ignore[arg-type]
    runtime = DagRuntime(lambda *a: next(replies), Graph())
    result = chat_turn("add", runtime, {"add": lambda a, b: a + b})
    assert result.stop_reason == "final" and result.text == "" and str(result) == ""
    assert [r.result for r in result.tool_results] == [3]


# -- tool schemas --------------------------------------------------------------------------


def test_tool_schema_from_signature_and_docstring():
    def grep(pattern: str, paths: list[str], max_hits: int = 10, mode: Literal["a", "b"] = "a", flag: bool | None = None, runtime=None, **kw):
        """Search files.

        Longer text that is not part of the description.
        """

    schema = tool_schema(grep)
    assert schema == {
        "type": "function",
        "function": {
            "name": "grep",
            "description": "Search files.",
            "parameters": {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string"},
                    "paths": {"type": "array", "items": {"type": "string"}},
                    "max_hits": {"type": "integer", "default": 10},
                    "mode": {"enum": ["a", "b"], "default": "a"},
                    "flag": {"type": "boolean", "default": None},
                },
                "required": ["pattern", "paths"],
            },
        },
    }


def test_tool_schema_of_an_agentic_function_uses_its_name():
    @agentic_function(name="summarise_file")
    def summarise(path: str, runtime=None):
        """Summarise a file."""

    assert tool_schema(summarise)["function"]["name"] == "summarise_file"
    assert tool_schema(summarise)["function"]["parameters"]["properties"] == {"path": {"type": "string"}}


# -- the loop -----------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def fail(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"broken: {reason}")


def test_single_turn_with_native_tool_calls_executed_in_order():
    order = []

    def note(text: str) -> str:
        order.append(text)
        return f"noted {text}"

    p = ScriptedProvider(
        [
            native(("c1", "note", {"text": "first"}), ("c2", "note", {"text": "second"}), usage=Usage(10, 2)),
            Reply(text="both noted", usage=Usage(20, 3)),
        ]
    )
    rt = DagRuntime(p, Graph(), default_model="m")
    result = chat_turn("take notes", rt, {"note": note})
    assert isinstance(result, ChatResult) and str(result) == "both noted"
    assert result.stop_reason == "final" and result.iterations == 2 and not result.hit_limit
    assert order == ["first", "second"]
    assert [(t.call.id, t.result, t.is_error) for t in result.tool_results] == [
        ("c1", "noted first", False),
        ("c2", "noted second", False),
    ]
    assert result.total_usage == Usage(30, 5)
    u, l1, r1, r2, l2 = list(rt.graph)
    assert [n.role for n in (u, l1, r1, r2, l2)] == ["user", "llm", "code", "code", "llm"]
    assert (r1.caller, r1.metadata["tool_call_id"], r2.metadata["tool_call_id"]) == (l1.id, "c1", "c2")
    assert l2.reads == [u.id, l1.id, r1.id, r2.id]
    assert p.calls[1]["messages"][2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "noted first"},
        {"role": "tool", "tool_call_id": "c2", "content": "noted second"},
    ]
    assert p.calls[0]["tools"][0]["function"]["name"] == "note"


def test_unknown_tool_raising_tool_and_bad_arguments_become_error_results():
    p = ScriptedProvider(
        [
            native(("c1", "nope", {}), ("c2", "fail", {"reason": "disk"}), ("c3", "add", {"a": 1})),
            "I see the errors",
        ]
    )
    rt = DagRuntime(p)
    result = chat_turn("try", rt, [add, fail])
    assert result.text == "I see the errors"
    errors = {t.call.id: t.result for t in result.tool_results}
    assert all(t.is_error for t in result.tool_results)
    assert errors["c1"] == "UnknownTool: no tool named 'nope' (available: add, fail)"
    assert errors["c2"] == "RuntimeError: broken: disk"
    assert errors["c3"].startswith("InvalidArguments: missing a required argument: 'b'")
    codes = [n for n in rt.graph if n.role == "code"]
    assert all(n.metadata["is_error"] and n.status == "error" for n in codes)
    # the model reads the failures on the next iteration
    tool_msgs = [m for m in p.calls[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_msgs] == [
        "[error] UnknownTool: no tool named 'nope' (available: add, fail)",
        "[error] RuntimeError: broken: disk",
        "[error] InvalidArguments: missing a required argument: 'b'",
    ]


def test_raw_arguments_are_reported_not_executed():
    p = ScriptedProvider([native(("c1", "add", {"_raw": "{oops"})), "ok"])
    result = chat_turn("x", DagRuntime(p), [add])
    assert result.tool_results[0].is_error
    assert "not a JSON object" in result.tool_results[0].result


def test_max_iterations_stops_with_a_marker_and_answers_every_call():
    p = ScriptedProvider([native((f"c{i}", "add", {"a": i, "b": 1})) for i in range(3)])
    rt = DagRuntime(p)
    result = chat_turn("loop forever", rt, [add], max_iterations=3)
    assert result.hit_limit and result.stop_reason == "max_iterations" and result.iterations == 3
    assert result.text == MAX_ITERATIONS_MARKER
    assert len(p.calls) == 3 and p.remaining == 0
    calls = [tc["id"] for n in rt.graph if n.role == "llm" for tc in n.metadata["tool_calls"]]
    answers = [n.metadata["tool_call_id"] for n in rt.graph if n.role == "code"]
    assert calls == answers == ["c0", "c1", "c2"]
    with pytest.raises(ValueError, match="max_iterations must be >= 1"):
        chat_turn("x", rt, [add], max_iterations=0)


def test_marker_is_appended_to_text_when_the_last_reply_had_some():
    p = ScriptedProvider([native(("c", "add", {"a": 1, "b": 1}), text="working")])
    result = chat_turn("x", DagRuntime(p), [add], max_iterations=1)
    assert result.text == f"working\n{MAX_ITERATIONS_MARKER}"


def test_text_protocol_tool_call_renders_as_function_call_text():
    p = ScriptedProvider(['```json\n{"tool": "add", "arguments": {"a": 2, "b": 3}}\n```', "5"])
    rt = DagRuntime(p)
    result = chat_turn("2+3?", rt, [add])
    assert result.text == "5" and result.tool_results[0].result == 5
    llm = [n for n in rt.graph if n.role == "llm"][0]
    assert llm.metadata["text_tool_calls"][0]["name"] == "add"
    assert "tool_calls" not in llm.metadata
    code = [n for n in rt.graph if n.role == "code"][0]
    assert "tool_call_id" not in code.metadata
    second = p.calls[1]["messages"]
    assert second[1]["role"] == "assistant" and "tool_calls" not in second[1]
    assert second[2] == {"role": "user", "content": "add(a=2, b=3)\n-> 5"}


def test_prior_turns_are_folded_to_user_and_final_answer():
    p = ScriptedProvider([native(("c1", "add", {"a": 1, "b": 2})), "three", "again"])
    rt = DagRuntime(p)
    chat_turn("1+2?", rt, [add])
    u1, l1, r1, l2 = list(rt.graph)
    chat_turn("thanks", rt, [add])
    u2 = [n for n in rt.graph if n.role == "user"][-1]
    last = rt.graph[rt.head]
    assert last.reads == [u1.id, l2.id, u2.id]  # the first turn's tool exchange is folded away
    assert p.calls[2]["messages"] == [
        {"role": "user", "content": "1+2?"},
        {"role": "assistant", "content": "three"},
        {"role": "user", "content": "thanks"},
    ]


def test_turn_reads_keep_a_system_summary_node_on_the_chain():
    g = Graph()
    s = g.add(Call(role="llm", output="[Previous conversation summary]\nearlier", metadata={"role": "system"}))
    u = g.add(Call(role="user", output="q", predecessor=s.id))
    a = g.add(Call(role="llm", output="a", predecessor=u.id))
    rt = DagRuntime(ScriptedProvider(["next"]), g)
    rt.add_user_message("q2")
    assert turn_reads(rt)[0] == s.id
    msgs = render_dag_messages(turn_reads(rt), g)
    assert msgs[0]["role"] == "system" and [m["content"] for m in msgs[1:]] == ["q", "a", "q2"]
    assert a.id in turn_reads(rt)


def test_agentic_tool_records_its_frame_below_the_requesting_llm_call(db_path):
    store = GraphStore(db_path, "s")
    inner_provider = ScriptedProvider(["a summary"])

    @agentic_function
    def summarise(path: str, runtime=Runtime(inner_provider, "small")):
        """Summarise a file."""
        return runtime.exec(f"summarise {path}")

    p = ScriptedProvider([native(("c1", "summarise", {"path": "a.py"})), "done"])
    rt = DagRuntime(p, store.load(), store)
    chat_turn("summarise a.py", rt, [summarise])
    graph = store.load()
    requesting = [n for n in graph if n.role == "llm" and n.metadata.get("tool_calls")][0]
    frame = [n for n in graph if n.role == "code" and n.metadata.get("doc")][0]
    assert frame.caller == requesting.id and frame.output == "a summary" and frame.status == "ok"
    inner = [n for n in graph if n.caller == frame.id]
    assert [n.role for n in inner] == ["llm"] and inner[0].name == "small"
    answer = [n for n in graph if n.metadata.get("tool_call_id") == "c1"][0]
    assert answer.output == "a summary"
    # the tool's own LLM call reads the conversation so far and its frame; the
    # pending call (its answer does not exist yet) is shown as a note, not sent
    # as a dangling tool call
    user = graph.chain(store.head())[0]
    assert inner[0].reads == [user.id, requesting.id, frame.id]
    assert inner_provider.calls[0]["messages"] == [
        {"role": "user", "content": "summarise a.py"},
        {"role": "assistant", "content": '[called summarise(path="a.py"); result not in context]'},
        {"role": "user", "content": 'Summarise a file.\nsummarise(path="a.py")'},
        {"role": "user", "content": "summarise a.py"},
    ]
    # top-level chain is unaffected by the nested frame
    assert [n.role for n in graph.chain(store.head())] == ["user", "llm", "code", "llm"]
    store.close()


def test_async_tool_runs():
    async def fetch(url: str) -> str:
        return f"body of {url}"

    p = ScriptedProvider([native(("c", "fetch", {"url": "u"})), "ok"])
    result = chat_turn("get u", DagRuntime(p), [fetch])
    assert result.tool_results[0].result == "body of u"


def test_none_user_input_continues_the_current_turn():
    rt = DagRuntime(ScriptedProvider(["first", "continued"]))
    chat_turn("start", rt)
    result = chat_turn(None, rt)
    assert result.text == "continued"
    assert [n.role for n in rt.graph] == ["user", "llm", "llm"]


# -- replaying a recorded session -----------------------------------------------------------


def test_replay_provider_drives_a_recorded_session_through_chat_turn(db_path):
    recorded = GraphStore(db_path, "recorded")
    script = [
        native(("c1", "add", {"a": 2, "b": 2}), text="let me add", usage=Usage(100, 5, 0, 0)),
        Reply(text="it is 4", usage=Usage(130, 4, 100, 0)),
        native(("c2", "fail", {"reason": "x"}), usage=Usage(150, 6, 120, 0)),
        Reply(text="that failed", usage=Usage(170, 3, 140, 0)),
    ]
    rt = DagRuntime(ScriptedProvider(script), recorded.load(), recorded, "gpt-rec")
    chat_turn("2+2?", rt, [add, fail])
    chat_turn("now fail", rt, [add, fail])
    recorded_graph = recorded.load()

    replay = ReplayProvider(recorded)
    fresh = DagRuntime(replay, Graph(), default_model="replayer")
    first = chat_turn("2+2?", fresh, [add, fail])
    second = chat_turn("now fail", fresh, [add, fail])
    assert (first.text, second.text) == ("it is 4", "that failed")
    assert replay.remaining == 0 and len(replay.calls) == 4

    def summary(graph):
        return [
            (n.role, n.output, n.metadata.get("tool_calls"), n.metadata.get("usage"), n.metadata.get("tool_call_id"))
            for n in graph
        ]

    assert summary(fresh.graph) == summary(recorded_graph)
    # the replayed prompts are the prompts of the recording
    assert [c["messages"] for c in replay.calls] == [
        render_dag_messages(n.reads, recorded_graph) for n in recorded_graph if n.role == "llm"
    ]
    recorded.close()


def test_replay_of_a_dag_session_from_the_manager(db_path):
    with DagSessionManager(db_path) as manager:
        session = manager.create(title="recorded", model="rec-model")
        script = [native(("t1", "add", {"a": 20, "b": 22})), "42", "bye"]
        DagRuntime.for_session(session, ScriptedProvider(script))
        assert session.runtime.default_model == "rec-model"
        chat_turn("20+22?", session, [add])  # a DagSession drives its runtime
        chat_turn("bye", session, [add])
        assert manager.get(session.id).head == session.runtime.head

        reloaded = manager.load(session.id)
        replay = ReplayProvider(reloaded)
        fresh = DagRuntime(replay, Graph())
        answers = [chat_turn(q, fresh, [add]).text for q in ("20+22?", "bye")]
        assert answers == ["42", "bye"]
        assert [n.output for n in fresh.graph] == [n.output for n in reloaded.graph]
        assert [c["messages"][-1] for c in replay.calls] == [
            {"role": "user", "content": "20+22?"},
            {"role": "tool", "tool_call_id": "t1", "content": "42"},
            {"role": "user", "content": "bye"},
        ]


def test_without_tools_json_in_the_answer_is_just_text():
    answer = 'Use this config: {"name": "svc", "arguments": {"port": 80}}'
    result = chat_turn("config?", DagRuntime(ScriptedProvider([answer])))
    assert result.text == answer and result.tool_results == [] and result.iterations == 1


def test_without_tools_a_native_call_is_still_answered_as_unknown():
    p = ScriptedProvider([native(("c", "ghost", {})), "sorry"])
    result = chat_turn("x", DagRuntime(p))
    assert result.tool_results[0].result == "UnknownTool: no tool named 'ghost' (available: none)"
    assert p.calls[0]["tools"] is None
