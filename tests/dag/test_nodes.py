"""Call, Graph and the §0.1 algorithms (opctx.dag.nodes)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.dag.nodes import (
    Call,
    FunctionCall,
    Graph,
    ModelCall,
    UserMessage,
    branch_internal,
    branch_terminals,
    compute_reads,
    fold_history,
    last_user_message,
    linear_back_to,
    new_id,
)

# -- Call -----------------------------------------------------------------------------


def test_unknown_role_is_refused_with_the_valid_roles_named():
    with pytest.raises(ValueError, match=r"unknown role 'assistant'.*user, llm, code"):
        Call(role="assistant")


def test_ids_are_generated_with_a_role_prefix_and_are_unique():
    ids = {Call(role="code").id for _ in range(200)}
    assert len(ids) == 200
    assert all(i.startswith("c_") and len(i) == 18 for i in ids)
    assert new_id("k").startswith("k_")


def test_called_by_is_a_read_write_alias_of_caller():
    c = Call(role="code", called_by="p1")
    assert c.caller == "p1" and c.called_by == "p1"
    c.called_by = "p2"
    assert c.caller == "p2"
    c.caller = "p3"
    assert c.called_by == "p3"
    assert Call(role="code", caller="x", called_by="x").caller == "x"
    with pytest.raises(ValueError, match="aliases"):
        Call(role="code", caller="x", called_by="y")


def test_empty_edges_mean_none():
    c = Call(role="code", called_by="", predecessor="")
    assert c.caller is None and c.predecessor is None
    c.predecessor = ""
    assert c.predecessor is None
    with pytest.raises(TypeError):
        Call(role="code", caller=3)  # type: ignore[arg-type]


def test_legacy_property_aliases_read_and_write_the_real_fields():
    c = Call(role="llm", name="gpt-4o", input={"system": "be brief"}, output="hi")
    assert c.content == c.result == "hi"
    assert c.model == c.function_name == "gpt-4o"
    assert c.arguments == {"system": "be brief"}
    assert c.system_prompt == "be brief"
    c.content = "a"
    assert c.output == "a"
    c.result = "b"
    assert c.output == "b"
    c.model = "m2"
    assert c.name == "m2"
    c.function_name = "f"
    assert c.name == "f"
    c.arguments = {"x": 1}
    assert c.input == {"x": 1}
    c.system_prompt = "s"
    assert c.input == {"x": 1, "system": "s"}
    d = Call(role="llm", input="raw")
    assert d.system_prompt is None
    d.system_prompt = "s2"
    assert d.input == {"value": "raw", "system": "s2"}


def test_role_checks_and_status():
    assert UserMessage("x").is_user()
    assert ModelCall("m").is_llm()
    assert FunctionCall("f").is_code()
    assert Call(role="code", metadata={"status": "running"}).status == "running"
    assert Call(role="code").status is None


def test_to_dict_from_dict_copy_and_equality():
    c = Call(
        id="a", role="code", name="f", input={"x": [1, 2]}, output={"ok": True},
        caller="p", predecessor="q", reads=["r1"], metadata={"k": {"n": 1}}, created_at=5.0,
    )
    d = c.to_dict()
    assert Call.from_dict(d) == c
    legacy = dict(d)
    legacy["called_by"] = legacy.pop("caller")
    assert Call.from_dict(legacy).caller == "p"
    twin = c.copy()
    assert twin == c and twin is not c
    twin.input["x"].append(3)
    assert c.input == {"x": [1, 2]}, "copy must be deep"
    moved = c.copy(id="b", called_by="p2")
    assert moved.id == "b" and moved.caller == "p2"
    assert c != moved
    assert Call.__hash__ is None
    assert pickle.loads(pickle.dumps(c)) == c


def test_factories_build_calls_with_the_documented_fields():
    u = UserMessage("hello")
    assert (u.role, u.name, u.output) == ("user", "user", "hello")
    m = ModelCall(model="gpt", reads=["a", "b"], output="hi", system_prompt="sys")
    assert (m.role, m.name, m.reads, m.output, m.input) == ("llm", "gpt", ["a", "b"], "hi", {"system": "sys"})
    m2 = ModelCall(model="gpt", input={"tools": []}, system_prompt="sys")
    assert m2.input == {"tools": [], "system": "sys"}
    f = FunctionCall(function_name="grep", arguments={"p": "x"}, result=["l1"], called_by="m1")
    assert (f.role, f.name, f.input, f.output, f.caller) == ("code", "grep", {"p": "x"}, ["l1"], "m1")


# -- Graph -----------------------------------------------------------------------------


def _chat_graph() -> tuple[Graph, list[Call]]:
    g = Graph()
    u0 = g.add(UserMessage("q1", id="u0"))
    l1 = g.add(ModelCall("m", output="a1", predecessor="u0", id="l1"))
    u2 = g.add(UserMessage("q2", predecessor="l1", id="u2"))
    l3 = g.add(ModelCall("m", output="a2", predecessor="u2", id="l3"))
    return g, [u0, l1, u2, l3]


def test_add_assigns_seq_in_order_and_refuses_duplicates():
    g, nodes = _chat_graph()
    assert [n.seq for n in nodes] == [0, 1, 2, 3]
    assert [n.id for n in g] == ["u0", "l1", "u2", "l3"]
    assert len(g) == 4 and "u2" in g and g.next_seq == 4
    with pytest.raises(ValueError, match="duplicate node id 'u0'"):
        g.add(UserMessage("again", id="u0"))
    with pytest.raises(ValueError, match="duplicate seq 2"):
        g.add(Call(role="user", seq=2))
    with pytest.raises(TypeError):
        g.add({"role": "user"})  # type: ignore[arg-type]


def test_explicit_seqs_keep_seq_order_even_when_added_out_of_order():
    g = Graph()
    g.add(Call(id="b", role="user", seq=10))
    g.add(Call(id="a", role="user", seq=3))
    g.add(Call(id="c", role="user"))
    assert [n.id for n in g] == ["a", "b", "c"]
    assert g.by_seq(11).id == "c"
    assert g.last.id == "c"


def test_update_replaces_fields_merges_metadata_and_keeps_indexes_right():
    g, _ = _chat_graph()
    g.add(FunctionCall("f", id="f1", caller="l3", metadata={"status": "running", "a": 1}))
    g.update("f1", output="done", status="ok", metadata={"b": 2})
    f = g["f1"]
    assert f.output == "done" and f.metadata == {"status": "ok", "a": 1, "b": 2}
    g.update("f1", called_by="l1", predecessor="u0")
    assert [c.id for c in g.callees("l1")] == ["f1"] and g.callees("l3") == []
    assert "f1" in [c.id for c in g.children("u0")]
    for key in ("id", "seq", "role"):
        with pytest.raises(ValueError, match=key):
            g.update("f1", **{key: "x"})
    with pytest.raises(KeyError, match="nope"):
        g.update("nope", output=1)


def test_children_roots_chain_and_forks():
    g, _ = _chat_graph()
    retry = g.add(ModelCall("m", output="a1-retry", predecessor="u0", id="l1b"))
    assert [c.id for c in g.children("u0")] == ["l1", "l1b"]
    assert [r.id for r in g.roots()] == ["u0"]
    assert [n.id for n in g.chain("l3")] == ["u0", "l1", "u2", "l3"]
    assert [n.id for n in g.chain(retry.id)] == ["u0", "l1b"]
    with pytest.raises(KeyError):
        g.chain("missing")
    g.update("u0", predecessor="l3")
    with pytest.raises(ValueError, match="cycle"):
        g.chain("l3")


def test_subtree_callees_terminals_and_branch_internal():
    g = Graph()
    spawn = g.add(FunctionCall("spawn", id="s"))
    a = g.add(ModelCall("m", id="a", caller="s"))
    a1 = g.add(FunctionCall("t", id="a1", caller="a"))
    b = g.add(ModelCall("m", id="b", caller="s"))
    assert [n.id for n in g.subtree("s")] == ["a", "a1", "b"]
    assert [n.id for n in g.callees("s")] == ["a", "b"]
    assert [n.id for n in branch_terminals(spawn.id, g)] == ["a1", "b"]
    assert [n.id for n in branch_internal("s", a1.id, g)] == ["a", "a1"]
    assert [n.id for n in branch_internal("s", b.id, g)] == ["b"]
    g.add(UserMessage("elsewhere", id="x"))
    with pytest.raises(ValueError, match="not in the caller subtree"):
        branch_internal("s", "x", g)
    assert branch_terminals("x", g) == []
    assert a.caller == "s"


def test_last_user_message_and_linear_back_to():
    g, nodes = _chat_graph()
    assert last_user_message(g).id == "u2"
    assert last_user_message(Graph()) is None
    assert [n.id for n in linear_back_to(g, "l1")] == ["l1", "u2", "l3"]
    assert [n.id for n in linear_back_to(g, nodes[3])] == ["l3"]


def test_fold_history_keeps_user_and_final_llm_of_earlier_turns():
    g = Graph()
    g.add(UserMessage("q1", id="u0"))
    g.add(ModelCall("m", output="thinking", id="l1", predecessor="u0"))
    g.add(FunctionCall("t", id="c2", predecessor="l1"))
    g.add(ModelCall("m", output="final1", id="l3", predecessor="c2"))
    g.add(UserMessage("q2", id="u4", predecessor="l3"))
    g.add(ModelCall("m", output="step", id="l5", predecessor="u4"))
    g.add(FunctionCall("t", id="c6", predecessor="l5"))
    assert [n.id for n in fold_history("c6", g)] == ["u0", "l3", "u4", "l5", "c6"]
    # without predecessor links: top-level nodes up to the current seq
    flat = Graph()
    for i, role in enumerate(["user", "llm", "llm", "user", "llm"]):
        flat.add(Call(id=f"n{i}", role=role))
    assert [n.id for n in fold_history("n4", flat)] == ["n0", "n2", "n3", "n4"]


def _summary(id_: str, predecessor: str | None = None) -> Call:
    """A compaction summary node as docs/ARCHITECTURE.md lays it out."""
    return ModelCall(
        "compaction", output="[Previous conversation summary]\nearlier work", id=id_,
        predecessor=predecessor,
        metadata={"role": "system", "source": "compaction",
                  "compaction": {"folded_ids": ["o1", "o2"], "recorded": True}},
    )


def test_fold_history_keeps_a_summary_that_copied_assistants_follow():
    # A recorded compaction whose conversation goes on with copied assistant
    # messages before the next user message: u0 - a1 - S - k2 - c3 - k4 | u5 - a6.
    # k4 is that turn's final llm; the summary must survive the fold anyway.
    g = Graph()
    g.add(UserMessage("q1", id="u0"))
    g.add(ModelCall("m", output="protected answer", id="a1", predecessor="u0"))
    g.add(_summary("S", predecessor="a1"))
    g.add(ModelCall("m", output="copied step", id="k2", predecessor="S", metadata={"copied_from": "o3"}))
    g.add(FunctionCall("t", id="c3", predecessor="k2", metadata={"copied_from": "o4"}))
    g.add(ModelCall("m", output="copied final", id="k4", predecessor="c3", metadata={"copied_from": "o5"}))
    g.add(UserMessage("q2", id="u5", predecessor="k4"))
    g.add(ModelCall("m", output="now", id="a6", predecessor="u5"))
    assert [n.id for n in fold_history("a6", g)] == ["u0", "S", "k4", "u5", "a6"]
    # the summary is never taken for the final answer of its turn
    g.add(UserMessage("q3", id="u7", predecessor="a6"))
    g.add(ModelCall("m", output="answer", id="a8", predecessor="u7"))
    g.add(_summary("S2", predecessor="a8"))
    g.add(UserMessage("q4", id="u9", predecessor="S2"))
    assert [n.id for n in fold_history("u9", g)] == ["u0", "S", "k4", "u5", "a6", "u7", "a8", "S2", "u9"]
    # a branch that starts with the summary (protect_first_n = 0)
    h = Graph()
    h.add(_summary("S"))
    h.add(ModelCall("m", output="copied", id="k1", predecessor="S"))
    h.add(UserMessage("q", id="u2", predecessor="k1"))
    assert [n.id for n in fold_history("u2", h)] == ["S", "k1", "u2"]
    # the flat fallback (no predecessor links) keeps it too
    flat = Graph()
    flat.add(UserMessage("q", id="f0"))
    flat.add(_summary("fS"))
    flat.add(ModelCall("m", id="f2"))
    flat.add(UserMessage("q", id="f3"))
    assert [n.id for n in fold_history("f3", flat)] == ["f0", "fS", "f2", "f3"]


# -- compute_reads ------------------------------------------------------------------------


def _agentic_graph() -> Graph:
    g = Graph()
    g.add(UserMessage("task", id="u0"))                                    # seq 0
    g.add(FunctionCall("outer", id="f1"))                                  # seq 1 frame
    g.add(ModelCall("m", id="l2", caller="f1"))                            # seq 2
    g.add(FunctionCall("inner", id="c3", caller="f1"))                     # seq 3 expose io
    g.add(ModelCall("m", id="l4", caller="c3"))                            # seq 4 hidden by io
    g.add(FunctionCall("secret", id="c5", caller="f1", metadata={"expose": "hidden"}))
    g.add(FunctionCall("deep", id="c6", caller="c5"))                      # seq 6 hidden
    g.add(FunctionCall("open", id="c7", caller="f1", metadata={"expose": "full"}))
    g.add(ModelCall("m", id="l8", caller="c7"))                            # seq 8 kept (full)
    return g


def test_compute_reads_top_level_applies_expose_modes():
    g = _agentic_graph()
    # f1 and c3 are "io" (default): their own llm calls l2 / l4 are hidden; c5 is
    # hidden with its subtree; c7 is "full" so its llm call l8 stays.
    assert compute_reads(g) == ["u0", "f1", "c3", "c7", "l8"]
    assert compute_reads(g, head_seq=2) == ["u0", "f1"]
    assert compute_reads(Graph()) == []


def test_compute_reads_inside_a_frame_and_render_range():
    g = _agentic_graph()
    g.add(UserMessage("later", id="u9"))  # not in the frame: never read from inside it
    # Inside the frame its own llm call l2 is visible (io hides a node's calls only
    # from the outside).
    assert compute_reads(g, frame_entry_seq=1) == ["u0", "f1", "l2", "c3", "c7", "l8"]
    assert compute_reads(g, frame_entry_seq=1, render_range={"callers": 0}) == [
        "f1", "l2", "c3", "c7", "l8"
    ]
    assert compute_reads(g, frame_entry_seq=1, render_range={"subcalls": 2}) == [
        "u0", "f1", "c7", "l8"
    ]
    assert compute_reads(g, frame_entry_seq=1, render_range={"subcalls": 0, "callers": 5}) == [
        "u0", "f1"
    ]
    with pytest.raises(KeyError):
        compute_reads(g, frame_entry_seq=99)


def test_render_range_is_checked_in_one_place_and_minus_one_means_no_limit():
    """-1 is "no limit" for both keys (it dropped every earlier node for ``callers``); a
    misspelt key, a fraction or a bool is one clear ``ValueError`` from ``compute_reads``
    and from ``@agentic_function`` alike, not a silent default or a TypeError in slicing."""
    from opctx.dag.agentic import agentic_function

    g = _agentic_graph()
    whole = compute_reads(g, frame_entry_seq=1)
    assert compute_reads(g, frame_entry_seq=1, render_range={"callers": -1}) == whole
    assert compute_reads(g, frame_entry_seq=1, render_range={"subcalls": -1, "callers": None}) == whole
    bad = [({"calers": 3}, "unknown key 'calers'"), ({"callers": 2.5}, "whole number"),
           ({"subcalls": True}, "whole number"), ({"callers": -2}, "whole number"),
           ({"subcalls": "3"}, "whole number"), (["callers"], "must be a dict")]
    for render_range, said in bad:
        with pytest.raises(ValueError, match=said):
            compute_reads(g, frame_entry_seq=1, render_range=render_range)
        with pytest.raises(ValueError, match=f"agentic_function: .*{said}"):
            agentic_function(render_range=render_range)(lambda: None)


def _frame_after(earlier: int, inside: int) -> Graph:
    """``earlier`` top-level nodes, then a frame holding ``inside`` llm calls."""
    g = Graph()
    for i in range(earlier):
        g.add(UserMessage(f"q{i}", id=f"p{i}"))
    g.add(FunctionCall("fn", id="frame"))
    for i in range(inside):
        g.add(ModelCall("m", id=f"in{i}", caller="frame"))
    return g


def test_render_range_larger_than_what_exists_means_all_of_it():
    g = _frame_after(4, 3)
    frame = g.get("frame").seq
    everything = ["p0", "p1", "p2", "p3", "frame", "in0", "in1", "in2"]
    assert compute_reads(g, frame_entry_seq=frame, render_range={"callers": 5}) == everything
    assert compute_reads(g, frame_entry_seq=frame, render_range={"callers": 7, "subcalls": 9}) == everything
    assert compute_reads(g, frame_entry_seq=frame, render_range={"callers": 2, "subcalls": 1}) == [
        "p2", "p3", "frame", "in2"
    ]


@settings(max_examples=100, deadline=None)
@given(earlier=st.integers(0, 8), inside=st.integers(0, 8), callers=st.integers(0, 20), subcalls=st.integers(0, 20))
def test_render_range_keeps_the_latest_n_or_all(earlier, inside, callers, subcalls):
    g = _frame_after(earlier, inside)
    reads = compute_reads(
        g, frame_entry_seq=g.get("frame").seq, render_range={"callers": callers, "subcalls": subcalls}
    )
    pre = [f"p{i}" for i in range(earlier)]
    own = [f"in{i}" for i in range(inside)]
    assert reads == pre[max(0, earlier - callers) :][: callers] + ["frame"] + own[max(0, inside - subcalls) :][: subcalls]
    assert len(reads) == min(callers, earlier) + 1 + min(subcalls, inside)


# -- property: Graph indexes agree with a brute-force scan ---------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.booleans()), max_size=30))
def test_children_and_callees_match_a_scan(spec):
    g = Graph()
    ids: list[str] = []
    for pred_i, caller_i, is_root in spec:
        pred = None if is_root or not ids else ids[pred_i % len(ids)]
        caller = None if not ids or caller_i % 3 == 0 else ids[caller_i % len(ids)]
        ids.append(g.add(Call(role="code", predecessor=pred, caller=caller)).id)
    for nid in [None, *ids]:
        assert [c.id for c in g.children(nid)] == [n.id for n in g if n.predecessor == nid]
        assert [c.id for c in g.callees(nid)] == [n.id for n in g if n.caller == nid]
