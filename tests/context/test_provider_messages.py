"""Provider messages: display-only lines never sent, every tool result right after its call."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.persistence import copy_message
from opctx.context.provider_messages import _ProviderCache, is_display_only, to_provider_messages


def _call(mid: str, *ids: str, text: str = "") -> dict:
    return {"id": mid, "role": "assistant", "content": text,
            "tool_calls": [{"id": i, "name": "run", "arguments": {"n": i}} for i in ids]}


def _result(mid: str, call_id: str, text: str = "out") -> dict:
    return {"id": mid, "role": "tool", "name": "run", "tool_call_id": call_id, "content": f"{text} {call_id}"}


def _display(mid: str) -> dict:
    return {"id": mid, "role": "system", "content": f"hook output {mid}", "display_only": True}


def assert_adjacent(out: list[dict]) -> None:
    """Every tool message follows its call message, with only tool messages of that call in between;
    every call has its result."""
    i = 0
    while i < len(out):
        m = out[i]
        assert m["role"] != "tool", f"tool message {i} is not right after a call: {m}"
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [tc["id"] for tc in m["tool_calls"]]
            j = i + 1
            answered: list[str] = []
            while j < len(out) and out[j]["role"] == "tool":
                assert out[j]["tool_call_id"] in ids, f"result {out[j]} after a call message that did not make it"
                answered.append(out[j]["tool_call_id"])
                j += 1
            assert sorted(answered) == sorted(ids), f"call message {i} is missing results: {ids} vs {answered}"
            i = j
        else:
            i += 1


def test_display_only_lines_never_reach_a_request() -> None:
    history = [
        {"id": "u1", "role": "user", "content": "fix it"},
        _call("a1", "c1", "c2"),
        _display("s1"),
        _result("t1", "c1"),
        _display("s2"),
        _result("t2", "c2"),
        {"id": "a2", "role": "assistant", "content": "done"},
    ]
    out = to_provider_messages(history)
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "assistant"]
    assert not any("hook output" in str(m.get("content")) for m in out)
    assert is_display_only(history[2]) and not is_display_only(history[0])
    # the incremental assembly agrees, and a display-only line appended later changes nothing
    cache = _ProviderCache()
    assert to_provider_messages(history, cache) == out
    assert to_provider_messages([*history, _display("s3")], cache) == out


def test_a_message_between_a_call_and_its_result_moves_after_the_results() -> None:
    history = [
        {"id": "u1", "role": "user", "content": "run the tests"},
        _call("a1", "c1", "c2"),
        _result("t1", "c1"),
        {"id": "u2", "role": "user", "content": "also check the linter"},
        {"id": "x1", "role": "system", "content": "reminder: be brief"},
        _result("t2", "c2"),
        _call("a2", "c3"),
        _result("t3", "c3"),
    ]
    out = to_provider_messages(history)
    assert [(m["role"], m.get("tool_call_id") or m.get("content")) for m in out] == [
        ("user", "run the tests"),
        ("assistant", None),
        ("tool", "c1"),
        ("tool", "c2"),
        ("user", "also check the linter"),
        ("system", "reminder: be brief"),
        ("assistant", None),
        ("tool", "c3"),
    ]
    assert_adjacent(out)


def test_an_older_result_after_a_newer_call_joins_its_own_call() -> None:
    history = [_call("a1", "c1", "c2"), _result("t1", "c1"), _call("a2", "c3"), _result("t3", "c3"),
               _result("t2", "c2")]
    out = to_provider_messages(history)
    assert [m.get("tool_call_id") or m["role"] for m in out] == ["assistant", "c1", "c2", "assistant", "c3"]
    assert_adjacent(out)


def test_results_beside_user_text_in_one_message() -> None:
    # Anthropic shape: a user message holding tool_result blocks and the user's text after them
    history = [
        {"id": "a1", "role": "assistant", "content": "",
         "extra": {"blocks": [{"type": "tool_use", "id": "tu1", "name": "read", "input": {"p": "x"}}]}},
        {"id": "u1", "role": "user", "content": "",
         "extra": {"blocks": [{"type": "tool_result", "tool_use_id": "tu1", "content": "text of x"},
                              {"type": "text", "text": "now summarise it"}]}},
    ]
    out = to_provider_messages(history)
    assert [m["role"] for m in out] == ["assistant", "tool", "user"]
    assert out[2]["content"] == "now summarise it"


# -- the property: random interleavings ------------------------------------------------

_KINDS = ["call1", "call2", "call3", "result", "result", "result", "display", "user", "text", "orphan"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_KINDS), st.integers(0, 7)), max_size=40), st.integers(0, 3))
def test_every_result_follows_its_call_and_nothing_but_display_lines_is_dropped(ops, split) -> None:
    history: list[dict] = []
    issued: list[str] = []
    n = [0]

    def next_id(prefix: str) -> str:
        n[0] += 1
        return f"{prefix}{n[0]}"

    for kind, k in ops:
        if kind.startswith("call"):
            ids = [next_id("c") for _ in range(int(kind[-1]))]
            issued.extend(ids)
            history.append(_call(next_id("a"), *ids, text=f"thinking aloud {k}" if k % 2 else ""))
        elif kind == "result" and issued:
            history.append(_result(next_id("t"), issued[k % len(issued)], text=f"r{n[0]}"))
        elif kind == "orphan":
            history.append(_result(next_id("t"), f"gone{k}", text=f"r{n[0]}"))
        elif kind == "display":
            history.append(_display(next_id("s")))
        elif kind == "user":
            history.append({"id": next_id("u"), "role": "user", "content": f"user says {n[0]}"})
        elif kind == "text":
            history.append({"id": next_id("a"), "role": "assistant", "content": f"assistant says {n[0]}"})
    out = to_provider_messages(history)
    assert_adjacent(out)
    sent = "\n".join(str(m.get("content")) for m in out)
    for m in history:
        if is_display_only(m):
            assert m["content"] not in sent
        elif m["role"] in ("user", "tool") or m.get("content"):
            # every other line reaches the request: a text, a result (paired or as a user note)
            assert m["content"] in sent, f"{m} was dropped"
    # the incremental assembly gives the same request, also when the history arrives in pieces
    cache = _ProviderCache()
    cut = len(history) * split // 3
    to_provider_messages(history[:cut], cache)
    assert to_provider_messages(history, cache) == out


def test_after_a_compaction_copies_send_their_originals_provider_messages():
    cache = _ProviderCache()
    history = [{"id": "u0", "role": "user", "content": "go"}, _call("a1", "c1"), _result("t1", "c1"),
               {"id": "u2", "role": "user", "content": "more"}, _call("a3", "c3"), _result("t3", "c3")]
    before = cache.provider_messages(history)
    fresh = cache.after_compaction()
    summary = {"id": "s", "role": "system", "content": "[Previous conversation summary]\nearlier"}
    copies = [copy_message(m, None) for m in history[3:]]
    changed = {**copy_message(history[0], None), "content": "go, changed"}
    after = fresh.provider_messages([changed, summary, *copies])
    assert after == to_provider_messages([changed, summary, *copies])
    # the kept tail's copies: the very objects sent before (their estimates carry over)
    assert all(a is b for a, b in zip(after[-3:], before[-3:], strict=True))
    # a copy that differs from its original is converted afresh
    assert after[0] is not before[0] and after[0]["content"] == "go, changed"
