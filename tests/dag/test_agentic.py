"""@agentic_function + Runtime: placeholder lifecycle, exact reads per §0.7 row, system= handling."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.dag.agentic import (
    Runtime,
    _call_id,
    _graph,
    _store,
    agentic_function,
    current_frame,
    json_safe,
    use_store,
)
from opctx.dag.nodes import Call, Graph, compute_reads
from opctx.dag.providers import Reply, ScriptedProvider, Usage
from opctx.dag.store import GraphStore


def echo_provider():
    """Answers every call with "ans<k>" and records it."""
    counter = {"n": 0}

    def answer(messages, model, system, tools):
        counter["n"] += 1
        return Reply(text=f"ans{counter['n']}", usage=Usage(len(messages), 1))

    return ScriptedProvider(answer)


@pytest.fixture
def store(db_path):
    s = GraphStore(db_path, "sess")
    yield s
    s.close()


def seed(store: GraphStore) -> tuple[Call, Call]:
    """A finished top-level exchange before any agentic code runs."""
    u0 = store.append(Call(role="user", output="task"))
    a0 = store.append(Call(role="llm", name="m", output="ack", predecessor=u0.id))
    return u0, a0


def llm_calls(graph: Graph, caller: str | None) -> list[Call]:
    return [n for n in graph.callees(caller) if n.role == "llm"]


def by_name(graph: Graph, name: str) -> Call:
    (node,) = [n for n in graph if n.role == "code" and n.name == name]
    return node


# -- lifecycle ----------------------------------------------------------------------------


def test_placeholder_then_filled_node_with_doc_expose_and_json_safe_input(store):
    seen_inside = {}

    @agentic_function(expose="full")
    def analyse(path: str, depth: int = 2, runtime: Runtime | None = None) -> dict:
        """Analyse a file."""
        node = store.get(current_frame())
        seen_inside.update(status=node.status, output=node.output, caller=node.caller)
        return {"path": path, "lines": (1, 2)}

    rt = Runtime(echo_provider(), "m")
    with use_store(store) as graph:
        result = analyse("a.py", runtime=rt)
        assert _call_id.get() is None
    assert result == {"path": "a.py", "lines": (1, 2)}  # the live value is untouched
    assert seen_inside == {"status": "running", "output": None, "caller": None}
    stored = store.get(by_name(graph, "analyse").id)
    assert stored.input == {"path": "a.py", "depth": 2}  # runtime left out, default bound
    assert stored.output == {"path": "a.py", "lines": [1, 2]}
    assert stored.metadata == {"status": "ok", "doc": "Analyse a file.", "expose": "full"}
    assert graph[stored.id].to_dict() == stored.to_dict()  # graph mirrors the store
    assert len(store.load()) == 1  # filled in place: no second node


def test_error_fills_the_same_node_and_reraises(store):
    @agentic_function
    def explode(x):
        raise ValueError(f"bad {x}")

    with use_store(store) as graph:
        with pytest.raises(ValueError, match="bad 3"):
            explode(3)
        assert _call_id.get() is None
    (node,) = store.load()
    assert node.output == {"error": "ValueError: bad 3"} and node.status == "error"
    assert graph[node.id].status == "error"


def test_nested_functions_take_the_frame_as_caller(store):
    @agentic_function
    def leaf(runtime):
        return runtime.exec("leaf?")

    @agentic_function
    def middle(runtime):
        return leaf(runtime)

    @agentic_function
    def top(runtime):
        return middle(runtime) + "!"

    rt = Runtime(echo_provider(), "m")
    with use_store(store) as graph:
        assert top(rt) == "ans1!"
    t, m, lf = by_name(graph, "top"), by_name(graph, "middle"), by_name(graph, "leaf")
    assert (t.caller, m.caller, lf.caller) == (None, t.id, m.id)
    (llm,) = llm_calls(graph, lf.id)
    assert llm.output == "ans1" and llm.input == {"system": None, "content": "leaf?"}
    assert llm.metadata["usage"]["input_tokens"] >= 1
    assert [n.output for n in (lf, m, t)] == ["ans1", "ans1", "ans1!"]
    assert [n.to_dict() for n in store.load()] == [n.to_dict() for n in graph]


def test_no_dag_installed_is_a_plain_llm_call_and_records_nothing():
    p = echo_provider()
    rt = Runtime(p, "m", system="sys")

    @agentic_function(system="fn-sys")
    def ask(q, runtime):
        return runtime.exec(q)

    assert _graph.get() is None and _store.get() is None
    assert ask("hello", runtime=rt) == "ans1"
    assert p.calls[0]["messages"] == [{"role": "user", "content": "hello"}]
    assert p.calls[0]["system"] == "fn-sys" and rt.system == "sys"
    assert current_frame() is None


def test_in_memory_graph_without_store():
    g = Graph()

    @agentic_function
    def f(runtime):
        return runtime.exec("x")

    with use_store(None, graph=g):
        f(Runtime(echo_provider()))
    assert [n.role for n in g] == ["code", "llm"]
    assert g.last.caller == g.by_seq(0).id


def test_store_assigns_seq_and_the_graph_mirrors_it():
    class FakeStore:
        """append/update/get only; seqs start at 100 to prove the graph takes the store's."""

        def __init__(self):
            self.nodes: dict[str, Call] = {}
            self.next = 100

        def append(self, node):
            node.seq = self.next
            self.next += 10
            self.nodes[node.id] = node.copy()
            return node

        def update(self, node_id, **fields):
            g = Graph([self.nodes[node_id]])
            return g.update(node_id, **fields)

        def get(self, node_id):
            return self.nodes.get(node_id)

    fake = FakeStore()
    g = Graph()

    @agentic_function
    def f(runtime):
        return runtime.exec("x")

    with use_store(fake, graph=g):
        f(Runtime(echo_provider()))
    assert [n.seq for n in g] == [100, 110]
    assert fake.get(g.by_seq(100).id).status == "ok"
    assert g.by_seq(100).status == "ok"


def test_async_functions_and_concurrent_frames(store):
    @agentic_function
    async def worker(tag, runtime):
        await asyncio.sleep(0.01)
        return runtime.exec(f"work {tag}")

    @agentic_function
    async def boss(runtime):
        return await asyncio.gather(worker("a", runtime), worker("b", runtime))

    async def main():
        with use_store(store) as graph:
            out = await boss(Runtime(echo_provider()))
        return out, graph

    out, graph = asyncio.run(main())
    assert sorted(out) == ["ans1", "ans2"]
    b = by_name(graph, "boss")
    workers = [n for n in graph.callees(b.id) if n.name == "worker"]
    assert len(workers) == 2
    for w in workers:
        (llm,) = llm_calls(graph, w.id)  # each task kept its own frame
        assert llm.input["content"] == f"work {w.input['tag']}"
        assert w.output == llm.output and w.status == "ok"


def test_async_error_path(store):
    @agentic_function
    async def fails():
        raise KeyError("k")

    with use_store(store):
        with pytest.raises(KeyError):
            asyncio.run(fails())
    (node,) = store.load()
    assert node.status == "error" and node.output == {"error": "KeyError: 'k'"}


def test_decorator_validates_its_options():
    with pytest.raises(ValueError, match="expose='secret'"):
        agentic_function(expose="secret")(lambda: None)
    with pytest.raises(ValueError, match="render_range: unknown key 'caller'"):
        agentic_function(render_range={"caller": 1})(lambda: None)
    with pytest.raises(ValueError, match="needs a store, a graph"):
        with use_store(None):
            pass


def test_json_safe_conversions():
    assert json_safe({1: (1, 2), "s": {3, 1}, "f": float("nan"), "r": Reply(text="t")}) == {
        "1": [1, 2],
        "s": [1, 3],
        "f": "nan",
        "r": "t",
    }
    assert json_safe(object()).startswith("<object object")


# -- the §0.7 table: exact reads of every LLM call ------------------------------------------


def run_parent(store, *, child_expose="io", parent_range=None):
    """parent: exec p1, child("c") (which execs once), exec p2. Returns the node handles."""

    @agentic_function(expose=child_expose)
    def child(x, runtime):
        """Child doc."""
        return runtime.exec(f"child {x}")

    @agentic_function(render_range=parent_range)
    def parent(topic, runtime):
        """Parent doc."""
        runtime.exec("p1")
        child("c", runtime)
        return runtime.exec("p2")

    p = echo_provider()
    u0, a0 = seed(store)
    with use_store(store) as graph:
        parent("t", Runtime(p, "m"))
    P = by_name(graph, "parent")
    C = by_name(graph, "child")
    L1, L2 = llm_calls(graph, P.id)
    (LC,) = llm_calls(graph, C.id)
    return graph, p, (u0, a0, P, L1, C, LC, L2)


def ids(*nodes):
    return [n.id for n in nodes]


def test_reads_inside_a_frame_expose_io(store):
    graph, p, (u0, a0, P, L1, C, LC, L2) = run_parent(store)
    # inside a frame: the nodes before it, the frame itself, then its own new nodes
    assert L1.reads == ids(u0, a0, P)
    # the child's frame: pre-frame nodes (parent is io, so the parent's own llm call
    # L1 is hidden from it), then the child frame node
    assert LC.reads == ids(u0, a0, P, C)
    # expose="io": the child shows as name(args) -> result; its llm call LC is gone
    assert L2.reads == ids(u0, a0, P, L1, C)
    # the messages the provider saw for L2: the frame header (running: no result),
    # the earlier question/answer, the child as doc + call + result, then the prompt
    assert p.calls[2]["messages"] == [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "ack"},
        {"role": "user", "content": 'Parent doc.\nparent(topic="t")'},
        {"role": "user", "content": "p1"},
        {"role": "assistant", "content": "ans1"},
        {"role": "user", "content": 'Child doc.\nchild(x="c")\n-> ans2'},
        {"role": "user", "content": "p2"},
    ]
    # the stored nodes carry the same reads
    assert store.get(L2.id).reads == L2.reads


def test_reads_expose_full_keeps_the_childs_llm_calls(store):
    graph, p, (u0, a0, P, L1, C, LC, L2) = run_parent(store, child_expose="full")
    assert L2.reads == ids(u0, a0, P, L1, C, LC)


def test_reads_expose_hidden_removes_the_child_and_its_subtree(store):
    graph, p, (u0, a0, P, L1, C, LC, L2) = run_parent(store, child_expose="hidden")
    assert L2.reads == ids(u0, a0, P, L1)
    assert all("child" not in (m["content"] or "") for m in p.calls[2]["messages"])


def test_reads_callers_zero_is_full_isolation(store):
    graph, p, (u0, a0, P, L1, C, LC, L2) = run_parent(store, parent_range={"callers": 0})
    assert L1.reads == ids(P)
    assert L2.reads == ids(P, L1, C)
    assert p.calls[0]["messages"][0] == {"role": "user", "content": 'Parent doc.\nparent(topic="t")'}


def test_reads_callers_n_keeps_the_latest_n_pre_frame_nodes(store):
    graph, p, (u0, a0, P, L1, C, LC, L2) = run_parent(store, parent_range={"callers": 1})
    assert L1.reads == ids(a0, P)
    assert L2.reads == ids(a0, P, L1, C)


def test_reads_subcalls_limits_the_in_frame_nodes(store):
    graph, p, (u0, a0, P, L1, C, LC, L2) = run_parent(store, parent_range={"subcalls": 1})
    assert L1.reads == ids(u0, a0, P)
    assert L2.reads == ids(u0, a0, P, C)
    with GraphStore(store.db_path, "other") as other:
        graph, p, nodes = run_parent(other, parent_range={"subcalls": 0})
    u0, a0, P, L1, C, LC, L2 = nodes
    assert L2.reads == ids(u0, a0, P)


def test_reads_top_level_is_every_visible_node(store):
    graph, p, (u0, a0, P, L1, C, LC, L2) = run_parent(store)
    rt = Runtime(p, "m")
    with use_store(store, graph=graph):
        reply = rt.exec_reply("after")
    top = graph[reply.call_id]
    assert top.caller is None and top.predecessor is None
    # parent (io) hides its own llm calls L1, L2; child (io) hides LC
    assert top.reads == ids(u0, a0, P, C)
    assert p.calls[-1]["messages"][2] == {"role": "user", "content": 'Parent doc.\nparent(topic="t")\n-> ans3'}


def test_use_store_call_id_hangs_the_run_below_a_command_node(store):
    cmd = store.append(Call(role="user", output="/run job"))

    @agentic_function
    def job(runtime):
        return runtime.exec("go")

    with use_store(store, call_id=cmd.id) as graph:
        job(Runtime(echo_provider()))
    assert by_name(graph, "job").caller == cmd.id
    assert _call_id.get() is None


# -- system= ------------------------------------------------------------------------------


def test_system_applied_during_the_call_and_restored_after_success_and_error(store):
    p = echo_provider()
    rt = Runtime(p, "m", system="base")

    @agentic_function(system="inner-sys")
    def inner(runtime):
        return runtime.exec("i")

    @agentic_function(system="outer-sys")
    def outer(runtime, fail=False):
        runtime.exec("o1")
        inner(runtime)
        runtime.exec("o2")
        if fail:
            raise RuntimeError("late failure")
        return "done"

    with use_store(store) as graph:
        outer(rt)
        assert rt.system == "base"
        with pytest.raises(RuntimeError):
            outer(rt, fail=True)
        assert rt.system == "base"
    assert [c["system"] for c in p.calls] == ["outer-sys", "inner-sys", "outer-sys"] * 2
    # system= goes through the runtime into the llm node's input, never onto the code node
    assert all("system" not in n.metadata for n in graph if n.role == "code")
    assert {n.input["system"] for n in graph if n.role == "llm"} == {"outer-sys", "inner-sys"}


def test_system_applies_to_a_default_runtime_and_is_restored_when_the_body_raises():
    p = echo_provider()
    default_rt = Runtime(p, "m")

    @agentic_function(system="S")
    def uses_default(runtime=default_rt):
        runtime.exec("x")
        raise ValueError("boom")

    with pytest.raises(ValueError):
        uses_default()
    assert p.calls[0]["system"] == "S"
    assert default_rt.system is None


def test_system_requires_a_runtime_with_a_system_attribute():
    @agentic_function(system="S")
    def f(runtime):
        return 1

    with pytest.raises(TypeError, match="'system' attribute"):
        f(object())


# -- watching from a second connection ----------------------------------------------------------


def test_a_second_connection_sees_running_then_filled(db_path):
    writer = GraphStore(db_path, "live")
    seen: list[tuple[str | None, object]] = []
    running_seen = threading.Event()
    finished = threading.Event()
    errors: list[BaseException] = []

    def watch():
        try:
            reader = GraphStore(db_path, "live", create=False)  # its own sqlite connection
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                nodes = [n for n in reader.load() if n.name == "slow"]
                if nodes:
                    state = (nodes[0].status, nodes[0].output)
                    if not seen or seen[-1] != state:
                        seen.append(state)
                    if state[0] == "running":
                        running_seen.set()
                    if state[0] == "ok":
                        break
                if finished.is_set() and seen and seen[-1][0] == "ok":
                    break
                time.sleep(0.01)
            reader.close()
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)
            running_seen.set()

    @agentic_function
    def slow(n):
        assert running_seen.wait(20), "the watcher never saw the running node"
        return n * 2

    watcher = threading.Thread(target=watch)
    watcher.start()
    with use_store(writer):
        assert slow(21) == 42
    finished.set()
    watcher.join(30)
    writer.close()
    assert not errors, errors
    assert seen[0] == ("running", None)
    assert seen[-1] == ("ok", 42)


def test_store_installed_alone_records_and_reads_the_stored_history(store):
    u0, a0 = seed(store)

    @agentic_function
    def f(runtime):
        """F doc."""
        return runtime.exec("q")

    token = _store.set(store)  # the specification's turn entry: the store only
    try:
        f(Runtime(echo_provider()))
        store.append(Call(role="user", output="from another writer"))
        f(Runtime(echo_provider()))
    finally:
        _store.reset(token)
    graph = store.load()
    frames = [n for n in graph if n.name == "f"]
    assert [n.status for n in frames] == ["ok", "ok"]
    first_llm, second_llm = (llm_calls(graph, fr.id)[0] for fr in frames)
    assert first_llm.reads == ids(u0, a0, frames[0])
    # the cached graph was refreshed: the other writer's node is read
    other = [n for n in graph if n.output == "from another writer"][0]
    assert second_llm.reads == ids(u0, a0, frames[0], other, frames[1])


# -- property: every recorded read list is compute_reads at that moment ----------------------

render_ranges = st.none() | st.fixed_dictionaries(
    {},
    optional={"callers": st.none() | st.integers(0, 4), "subcalls": st.none() | st.integers(-1, 3)},
)
programs = st.recursive(
    st.just("exec"),
    lambda inner: st.fixed_dictionaries(
        {
            "expose": st.sampled_from(["io", "full", "hidden"]),
            "rr": render_ranges,
            "steps": st.lists(inner, max_size=4),
        }
    ),
    max_leaves=12,
)


def build(spec, counter):
    counter[0] += 1

    @agentic_function(expose=spec["expose"], render_range=spec["rr"] or None, name=f"f{counter[0]}")
    def fn(runtime):
        """Generated."""
        for step in spec["steps"]:
            if step == "exec":
                runtime.exec("q")
            else:
                build(step, counter)(runtime)
        return "done"

    return fn


@settings(max_examples=60, deadline=None)
@given(st.lists(programs, min_size=1, max_size=3))
def test_property_reads_are_compute_reads_of_the_moment(top_steps):
    g = Graph()
    u = g.add(Call(role="user", output="task"))
    g.add(Call(role="llm", output="ok", predecessor=u.id))
    rt = Runtime(echo_provider())
    counter = [0]
    with use_store(None, graph=g):
        for step in top_steps:
            if step == "exec":
                rt.exec("top")
            else:
                build(step, counter)(rt)
    for node in g:
        if node.role == "code":
            assert node.status == "ok" and node.output == "done"
        if node.role != "llm" or node.seq < 2:
            continue
        frame = g.get(node.caller)
        if frame is None:
            expected = compute_reads(g, head_seq=node.seq - 1)
        else:
            expected = compute_reads(
                g,
                head_seq=node.seq - 1,
                frame_entry_seq=frame.seq,
                render_range=frame.metadata.get("render_range"),
            )
        assert node.reads == expected


def test_runtime_subclass_is_its_own_provider(store):
    class Upper(Runtime):
        def call(self, messages, model, system, tools):
            return messages[-1]["content"].upper()

    @agentic_function
    def shout(text, runtime):
        return runtime.exec(text)

    with use_store(store) as graph:
        assert shout("hey", Upper(model="u")) == "HEY"
    assert [n.output for n in graph if n.role == "llm"] == ["HEY"]
    with pytest.raises(TypeError, match="overrides call"):
        Runtime()
