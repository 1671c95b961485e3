"""DagRuntime: one LLM call over a graph, recorded as an llm node, mirrored into a GraphStore."""

from __future__ import annotations

import pytest

from opctx.dag.agentic import _call_id
from opctx.dag.nodes import Call, Graph, compute_reads
from opctx.dag.providers import ProviderHTTPError, Reply, ScriptedProvider, ToolCall, Usage
from opctx.dag.runtime import DagRuntime
from opctx.dag.store import GraphStore


class Clock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_exec_with_content_records_user_then_llm_node():
    p = ScriptedProvider(
        [Reply(text="hello!", model="served-model", usage=Usage(12, 3, 8, 0), tool_calls=[ToolCall("t", "f", {"a": 1})])]
    )
    rt = DagRuntime(p, Graph(), default_model="m", clock=Clock())
    reply = rt.exec("hi", system="sys")
    user, llm = list(rt.graph)
    assert user.role == "user" and user.output == "hi" and user.predecessor is None
    assert llm.id == reply.call_id == rt.head
    assert llm.role == "llm" and llm.name == "served-model" and llm.output == "hello!"
    assert llm.input == {"system": "sys"}
    assert llm.reads == [user.id] and llm.predecessor == user.id and llm.caller is None
    assert llm.metadata == {
        "usage": {"input_tokens": 12, "output_tokens": 3, "cache_read_tokens": 8, "cache_write_tokens": 0},
        "tool_calls": [{"id": "t", "name": "f", "arguments": {"a": 1}}],
    }
    assert (user.created_at, llm.created_at) == (1001.0, 1002.0)
    assert p.calls[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert p.calls[0]["model"] == "m" and p.calls[0]["system"] == "sys"


def test_reads_none_is_compute_reads_over_the_whole_graph():
    g = Graph()
    g.add(Call(role="user", output="first"))
    fn = g.add(Call(role="code", name="tool", output="r", metadata={"expose": "io"}))
    g.add(Call(role="llm", output="inner", caller=fn.id))  # hidden by expose="io"
    p = ScriptedProvider(["ok"])
    rt = DagRuntime(p, g)
    expected = compute_reads(g)
    rt.exec()
    assert rt.graph[rt.head].reads == expected
    assert [m["content"] for m in p.calls[0]["messages"]] == ["first", "tool()\n-> r"]


def test_explicit_reads_accept_calls_and_model_falls_back_to_the_requested_one():
    g = Graph()
    a = g.add(Call(role="user", output="a"))
    g.add(Call(role="user", output="b"))
    p = ScriptedProvider(["x"])
    rt = DagRuntime(p, g, default_model="default")
    reply = rt.exec(reads=[a], model="other", tools=[{"type": "function", "function": {"name": "f"}}])
    node = g[reply.call_id]
    assert node.reads == [a.id] and node.name == "other"
    assert p.calls[0]["messages"] == [{"role": "user", "content": "a"}]
    assert p.calls[0]["tools"][0]["function"]["name"] == "f"


def test_runtime_system_is_the_default_system():
    p = ScriptedProvider(["x", "y"])
    rt = DagRuntime(p, system="base")
    rt.exec("q")
    rt.exec("q2", system="override")
    assert [c["system"] for c in p.calls] == ["base", "override"]


def test_provider_error_appends_no_llm_node():
    def failing(messages, model, system, tools):
        raise ProviderHTTPError(400, "bad request")

    rt = DagRuntime(failing)
    with pytest.raises(ProviderHTTPError):
        rt.exec("hi")
    assert [n.role for n in rt.graph] == ["user"]


def test_record_function_call_and_head_chain():
    rt = DagRuntime(ScriptedProvider([{"tool_calls": [{"id": "c1", "name": "f", "arguments": {}}]}]))
    reply = rt.exec("go")
    ok = rt.record_function_call("f", {"x": 1}, reply.call_id, "result", tool_call_id="c1")
    bad = rt.record_function_call("g", {}, reply.call_id, "ValueError: no", is_error=True)
    assert ok.caller == reply.call_id and ok.predecessor == reply.call_id
    assert ok.metadata == {"status": "ok", "tool_call_id": "c1"}
    assert bad.metadata == {"status": "error", "is_error": True} and bad.predecessor == ok.id
    assert [n.id for n in rt.graph.chain(rt.head)] == [n.id for n in rt.graph]


def test_caller_comes_from_the_agentic_context_var():
    rt = DagRuntime(ScriptedProvider(["a"]))
    frame = rt.graph.add(Call(role="code", name="frame"))
    token = _call_id.set(frame.id)
    try:
        reply = rt.exec("x")
    finally:
        _call_id.reset(token)
    assert rt.graph[reply.call_id].caller == frame.id


def test_set_head_forks_the_conversation():
    rt = DagRuntime(ScriptedProvider(["a1", "a2"]))
    first = rt.exec("q1")
    u1 = rt.graph[first.call_id].predecessor
    rt.exec("q2")
    rt.set_head(first.call_id)
    retry = rt.add_user_message("q2 again")
    assert retry.predecessor == first.call_id
    assert len(rt.graph.children(first.call_id)) == 2
    assert rt.graph.chain(retry.id)[0].id == u1
    with pytest.raises(KeyError, match="no node 'nope'"):
        rt.set_head("nope")


def test_initial_head_is_the_newest_top_level_node():
    g = Graph()
    u = g.add(Call(role="user", output="x"))
    g.add(Call(role="llm", output="nested", caller=u.id))
    assert DagRuntime(ScriptedProvider([]), g).head == u.id
    assert DagRuntime(ScriptedProvider([])).head is None


# -- with the real GraphStore ----------------------------------------------------------


def test_store_mirrors_graph_and_head(db_path):
    store = GraphStore(db_path, "s1")
    rt = DagRuntime(ScriptedProvider(["one", "two"]), store.load(), store, "m", clock=Clock())
    rt.exec("q1")
    rt.exec("q2")
    loaded = store.load()
    assert [n.to_dict() for n in loaded] == [n.to_dict() for n in rt.graph]
    assert [n.seq for n in rt.graph] == [0, 1, 2, 3]
    assert store.head() == rt.head
    store.close()

    # a new runtime over the same session continues after the stored HEAD
    reopened = GraphStore(db_path, "s1", create=False)
    rt2 = DagRuntime(ScriptedProvider(["three"]), reopened.load(), reopened)
    assert rt2.head == rt.head
    reply = rt2.exec("q3")
    assert reopened.head() == reply.call_id
    assert [n.output for n in reopened.load().chain(reply.call_id)] == ["q1", "one", "q2", "two", "q3", "three"]
    reopened.close()


def test_store_set_head_and_annotate(db_path):
    store = GraphStore(db_path, "s1")
    rt = DagRuntime(ScriptedProvider(["a", "b"]), Graph(), store)
    first = rt.exec("q1")
    rt.exec("q2")
    rt.set_head(first.call_id)
    assert store.head() == first.call_id
    rt.annotate(first.call_id, note="kept")
    assert store.get(first.call_id).metadata["note"] == "kept"
    assert rt.graph[first.call_id].metadata["note"] == "kept"
    store.close()


def test_content_with_explicit_reads_is_added_to_the_reads():
    g = Graph()
    old = g.add(Call(role="user", output="context"))
    p = ScriptedProvider(["x"])
    rt = DagRuntime(p, g)
    reply = rt.exec("question", reads=[old.id])
    user = g[g[reply.call_id].predecessor]
    assert g[reply.call_id].reads == [old.id, user.id]
    assert [m["content"] for m in p.calls[0]["messages"]] == ["context", "question"]


def test_record_function_call_stores_json_safe_values(db_path):
    from dataclasses import dataclass

    @dataclass
    class Point:
        x: int
        y: float

    with GraphStore(db_path, "s") as store:
        rt = DagRuntime(ScriptedProvider([]), Graph(), store)
        node = rt.record_function_call("f", {"pts": (Point(1, 2.0),)}, None, {"inf": float("inf"), "s": {2, 1}})
        stored = store.get(node.id)
    assert stored.input == {"pts": [{"x": 1, "y": 2.0}]}
    assert stored.output == {"inf": "inf", "s": [1, 2]}


def test_json_safe_numpy_values():
    np = pytest.importorskip("numpy")
    from opctx.dag.runtime import json_safe

    assert json_safe({"i": np.int64(3), "a": np.array([1.5, 2]), "n": np.float64("nan"), "b": np.bool_(True)}) == {
        "i": 3,
        "a": [1.5, 2.0],
        "n": "nan",
        "b": True,
    }
