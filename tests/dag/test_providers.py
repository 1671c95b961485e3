"""Provider value types, ScriptedProvider and ReplayProvider."""

from __future__ import annotations

import pytest

from opctx.dag.nodes import Call, Graph
from opctx.dag.providers import (
    ProviderCall,
    ProviderConfigError,
    ProviderResponseError,
    ReplayProvider,
    Reply,
    ScriptedProvider,
    ScriptExhausted,
    ToolCall,
    Usage,
    as_reply,
    parse_arguments,
    parse_chat_completion,
    recorded_tool_calls,
)


def test_usage_from_our_dict_and_from_openai_usage():
    assert Usage.from_dict({"input_tokens": 10, "output_tokens": 2, "cache_read_tokens": 4}) == Usage(10, 2, 4, 0)
    openai_usage = {"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 60}}
    u = Usage.from_dict(openai_usage)
    assert u == Usage(input_tokens=100, output_tokens=7, cache_read_tokens=60, cache_write_tokens=0)
    assert u.uncached_input_tokens == 40 and u.total_tokens == 107
    assert Usage(1, 2, 3, 4) + Usage(10, 20, 30, 40) == Usage(11, 22, 33, 44)
    assert Usage.from_dict(None) is None
    assert Usage.from_dict(u.to_dict()) == u


def test_tool_call_shapes_and_raw_arguments():
    ours = ToolCall.from_dict({"id": "1", "name": "f", "arguments": {"x": 1}})
    openai = ToolCall.from_dict({"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}})
    assert ours == openai == ToolCall("1", "f", {"x": 1})
    assert openai.to_openai()["function"]["arguments"] == '{"x": 1}'
    bad = ToolCall.from_dict({"id": "2", "function": {"name": "g", "arguments": "{not json"}})
    assert bad.arguments == {"_raw": "{not json"}
    # the raw text round-trips unchanged to the provider
    assert bad.to_openai()["function"]["arguments"] == "{not json"
    assert parse_arguments("[1, 2]") == {"_raw": "[1, 2]"}
    assert parse_arguments("") == {} and parse_arguments(None) == {}
    with pytest.raises(ValueError, match="without a name"):
        ToolCall.from_dict({"arguments": {}})


def test_as_reply_coercions():
    assert as_reply("hi") == Reply(text="hi")
    r = as_reply({"content": None, "tool_calls": [{"name": "f", "arguments": {}}], "usage": {"input_tokens": 3}})
    assert r.text == "" and r.tool_calls == [ToolCall("call_0", "f", {})] and r.usage == Usage(3)
    with pytest.raises(ValueError, match="unknown Reply keys"):
        as_reply({"txt": "typo"})
    with pytest.raises(ProviderResponseError, match="got int"):
        as_reply(42)


def test_plain_function_is_a_provider_call():
    def echo(messages, model, system, tools):
        return Reply(text=messages[-1]["content"])

    assert isinstance(echo, ProviderCall)
    assert isinstance(ScriptedProvider(["x"]), ProviderCall)


def test_scripted_provider_answers_in_order_and_records_calls():
    p = ScriptedProvider(["one", Reply(text="two", model="m2"), {"text": "three"}], model="fake")
    msgs = [{"role": "user", "content": "q"}]
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert p(msgs, "asked", "sys", tools).text == "one"
    msgs.append({"role": "assistant", "content": "one"})  # mutation after the call is not recorded
    assert p(msgs, "asked", None, None).model == "m2"
    third = p([], "asked", None, None)
    assert third.text == "three" and third.model == "fake"
    assert len(p.calls) == 3 and p.remaining == 0
    assert p.calls[0] == {"messages": [{"role": "user", "content": "q"}], "model": "asked", "system": "sys", "tools": tools}
    with pytest.raises(ScriptExhausted, match=r"call #4 but only 3 scripted"):
        p([{"role": "user", "content": "more?"}], "asked", None, None)


def test_scripted_provider_replies_are_independent_copies():
    shared = Reply(text="x", tool_calls=[ToolCall("1", "f", {"a": 1})])
    p = ScriptedProvider([shared, shared])
    first = p([], "", None, None)
    first.tool_calls[0].arguments["a"] = 99
    assert p([], "", None, None).tool_calls[0].arguments == {"a": 1}


def test_scripted_provider_callable_script_sees_the_call():
    p = ScriptedProvider(lambda messages, model, system, tools: f"{model}:{len(messages)}:{system}")
    assert p([{"role": "user", "content": "a"}], "m", "s", None).text == "m:1:s"
    assert p.remaining == -1


def test_scripted_provider_refuses_a_single_string():
    with pytest.raises(ProviderConfigError, match="list of replies"):
        ScriptedProvider("oops")


def recorded_session() -> Graph:
    g = Graph()
    u = g.add(Call(role="user", output="hello"))
    sys_node = g.add(Call(role="llm", output="summary", metadata={"role": "system"}, predecessor=u.id))
    a1 = g.add(
        Call(
            role="llm",
            name="rec-model",
            output="",
            predecessor=sys_node.id,
            metadata={
                "tool_calls": [{"id": "t1", "name": "search", "arguments": {"q": "x"}}],
                "usage": {"input_tokens": 50, "output_tokens": 5, "cache_read_tokens": 20, "cache_write_tokens": 0},
            },
        )
    )
    r = g.add(Call(role="code", name="search", output="found", predecessor=a1.id, metadata={"tool_call_id": "t1"}))
    g.add(Call(role="llm", output=None, predecessor=r.id))  # placeholder: skipped
    inner = g.add(Call(role="llm", name="rec-model", output="nested", caller=r.id))
    g.add(Call(role="llm", name="rec-model", output="final answer", predecessor=r.id, metadata={"usage": {"input_tokens": 70}}))
    assert inner.seq < g.last.seq
    return g


def test_replay_provider_returns_recorded_outputs_in_seq_order():
    g = recorded_session()
    p = ReplayProvider(g)
    first = p([], "", None, None)
    assert first.text == "" and first.tool_calls == [ToolCall("t1", "search", {"q": "x"})]
    assert first.usage == Usage(50, 5, 20, 0) and first.model == "rec-model"
    assert p([], "", None, None).text == "nested"
    last = p([], "", None, None)
    assert last.text == "final answer" and last.usage == Usage(70)
    with pytest.raises(ScriptExhausted, match="has 3 assistant replies"):
        p([], "", None, None)


def test_replay_provider_top_level_only_and_sources():
    g = recorded_session()
    top = ReplayProvider(g, top_level_only=True)
    assert [top([], "", None, None).text for _ in range(top.remaining)] == ["", "final answer"]

    class Session:
        graph = g

    class Store:
        def load(self):
            return g

    assert len(ReplayProvider(Session()).recorded) == 3
    assert len(ReplayProvider(Store()).recorded) == 3
    assert len(ReplayProvider(list(g)).recorded) == 3
    with pytest.raises(ProviderConfigError, match="expected Call nodes"):
        ReplayProvider(["not a call"])
    with pytest.raises(ProviderConfigError, match="got int"):
        ReplayProvider(3)


def test_recorded_tool_calls_reads_anthropic_blocks():
    node = Call(
        role="llm",
        metadata={"extra": {"blocks": [{"type": "text", "text": "x"}, {"type": "tool_use", "id": "tu", "name": "bash", "input": {"cmd": "ls"}}]}},
    )
    assert recorded_tool_calls(node) == [{"id": "tu", "name": "bash", "arguments": {"cmd": "ls"}}]


def test_parse_chat_completion_from_a_dict():
    reply = parse_chat_completion(
        {
            "model": "m",
            "choices": [{"message": {"content": None, "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 1, "cache_creation_input_tokens": 4},
        }
    )
    assert reply.tool_calls == [ToolCall("a", "f", {})]
    assert reply.usage == Usage(9, 1, 0, 4)
    with pytest.raises(ProviderResponseError, match="no choices"):
        parse_chat_completion({"error": "x"})
