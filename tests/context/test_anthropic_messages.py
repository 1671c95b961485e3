"""Anthropic Messages requests: structure, thinking blocks kept where the API needs them,
counted as the model keeps them, fitted to the window like the OpenAI shape."""

from __future__ import annotations

import copy

import pytest
from _compaction_fixtures import assert_anthropic_request_accepted
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context import to_anthropic_request
from opctx.context.anthropic_messages import (
    OPENING_USER_TEXT,
    anthropic_request_tokens,
    thinking_retention,
)
from opctx.context.fit import fit_request
from opctx.context.provider_messages import _ProviderCache
from opctx.context.tokens import Estimator

HEURISTIC = Estimator("heuristic")


def think(text: str, sig: str) -> dict:
    return {"type": "thinking", "thinking": text, "signature": sig}


def tool_call(mid: str, *ids: str, text: str = "", thinking: list[dict] | None = None) -> dict:
    msg = {"id": mid, "role": "assistant", "content": text,
           "tool_calls": [{"id": i, "name": "bash", "arguments": {"cmd": f"run {i}"}} for i in ids]}
    if thinking:
        msg["thinking"] = thinking
    return msg


def result(mid: str, call_id: str, text: str = "ok", error: bool = False) -> dict:
    return {"id": mid, "role": "tool", "name": "bash", "tool_call_id": call_id, "content": text, "is_error": error}


def roles_and_types(request: dict) -> list[tuple[str, list[str]]]:
    return [(m["role"], [b["type"] for b in m["content"]]) for m in request["messages"]]


def test_the_request_shape() -> None:
    history = [
        {"id": "s0", "role": "system", "content": "Project rules."},
        {"id": "u1", "role": "user", "content": "fix the build"},
        tool_call("a1", "c1", "c2", text="Looking.", thinking=[think("read the log first", "sig-a1")]),
        result("t1", "c1", "error: missing header", error=True),
        {"id": "d1", "role": "system", "content": "PostToolUse hook ran", "display_only": True},
        result("t2", "c2", "make: *** [all] Error 2"),
        {"id": "x1", "role": "system", "content": "[Previous conversation summary]\nwe were fixing the build"},
        {"id": "a2", "role": "assistant", "content": "Fixed."},
    ]
    request = to_anthropic_request(history, "You are a coding agent.", model="claude-opus-4-5-20251101")
    assert request["system"] == "You are a coding agent.\n\nProject rules."
    assert roles_and_types(request) == [
        ("user", ["text"]),
        ("assistant", ["thinking", "text", "tool_use", "tool_use"]),
        ("user", ["tool_result", "tool_result", "text"]),  # results first, the later system line as text
        ("assistant", ["text"]),
    ]
    turn = request["messages"][1]["content"]
    assert turn[0] == think("read the log first", "sig-a1")  # unmodified, signature kept
    assert turn[2] == {"type": "tool_use", "id": "c1", "name": "bash", "input": {"cmd": "run c1"}}
    results_turn = request["messages"][2]["content"]
    assert results_turn[0] == {"type": "tool_result", "tool_use_id": "c1",
                               "content": "[error] error: missing header", "is_error": True}
    assert "hook ran" not in str(request)


def test_anthropic_shaped_history_and_an_assistant_first_request() -> None:
    history = [
        {"id": "a0", "role": "assistant", "content": "",
         "extra": {"blocks": [{"type": "thinking", "thinking": "hm", "signature": "s0"},
                              {"type": "tool_use", "id": "tu1", "name": "read", "input": {"path": "x"}}]}},
        {"id": "u0", "role": "user", "content": "",
         "extra": {"blocks": [{"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "X"}]}]}},
    ]
    request = to_anthropic_request(history, model="claude-sonnet-4-5")
    assert request["messages"][0] == {"role": "user", "content": [{"type": "text", "text": OPENING_USER_TEXT}]}
    assert roles_and_types(request)[1:] == [("assistant", ["thinking", "tool_use"]), ("user", ["tool_result"])]
    assert request["messages"][1]["content"][1]["input"] == {"path": "x"}
    assert request["system"] == ""


def test_thinking_retention_by_model_class() -> None:
    keeps_all = ["claude-opus-4-5-20251101", "claude-opus-4-6", "claude-sonnet-4-6", "anthropic/claude-opus-4.5",
                 "us.anthropic.claude-opus-4-5-20251101-v1:0", "claude-opus-5", "claude-sonnet-5-5", "claude-haiku-5-5",
                 "claude-mythos-preview", "gpt-5", None, "claude-unknown"]
    last_turn = ["claude-opus-4-1-20250805", "claude-opus-4-20250514", "claude-sonnet-4-5-20250929",
                 "claude-sonnet-4-20250514", "claude-haiku-4-5-20251001", "claude-3-7-sonnet-20250219",
                 "claude-3-5-haiku-20241022", "anthropic/claude-sonnet-4.5"]
    assert [thinking_retention(m) for m in keeps_all] == ["all"] * len(keeps_all)
    assert [thinking_retention(m) for m in last_turn] == ["last_turn"] * len(last_turn)


def _two_turns() -> list[dict]:
    return [
        {"id": "u1", "role": "user", "content": "first task"},
        tool_call("a1", "c1", thinking=[think("old plan " * 200, "sig-old")]),
        result("t1", "c1"),
        {"id": "a2", "role": "assistant", "content": "first done", "thinking": [think("wrap up", "sig-wrap")]},
        {"id": "u2", "role": "user", "content": "second task"},
        tool_call("a3", "c3", thinking=[think("new plan", "sig-new")]),
        result("t3", "c3"),
        tool_call("a4", "c4", thinking=[{"type": "redacted_thinking", "data": "EncRypted"}]),
        result("t4", "c4"),
    ]


def test_thinking_blocks_are_sent_where_the_model_keeps_them() -> None:
    history = _two_turns()
    kept = to_anthropic_request(history, model="claude-opus-4-5")
    stripped = to_anthropic_request(history, model="claude-sonnet-4-5")

    def sigs(request: dict) -> list[str]:
        return [b.get("signature") or b.get("data") for m in request["messages"] for b in m["content"]
                if b["type"] in ("thinking", "redacted_thinking")]

    assert sigs(kept) == ["sig-old", "sig-wrap", "sig-new", "EncRypted"]
    # older models keep only the running tool loop's thinking: the API strips the rest
    assert sigs(stripped) == ["sig-new", "EncRypted"]
    assert sigs(to_anthropic_request(history, model="claude-sonnet-4-5", thinking="all")) == sigs(kept)
    assert sigs(to_anthropic_request(history, thinking="none")) == []
    # the running loop's first assistant message starts with its thinking
    running = stripped["messages"][-4]
    assert running["role"] == "assistant" and running["content"][0]["signature"] == "sig-new"
    # an earlier assistant turn that holds only thinking keeps it (dropping the turn would merge
    # the user turns around it and move where the last turn starts); without thinking it goes
    only_thinking = [{"id": "u0", "role": "user", "content": "q"},
                     {"id": "a0", "role": "assistant", "content": "", "thinking": [think("t " * 300, "s")]},
                     {"id": "u1", "role": "user", "content": "q2"}]
    kept_turn = to_anthropic_request(only_thinking, model="claude-sonnet-4-5")
    assert roles_and_types(kept_turn) == [("user", ["text"]), ("assistant", ["thinking"]), ("user", ["text"])]
    assert anthropic_request_tokens(kept_turn, "claude-sonnet-4-5", estimator=HEURISTIC) < 40  # not counted
    assert roles_and_types(to_anthropic_request(only_thinking, thinking="none")) == [("user", ["text", "text"])]
    with pytest.raises(ValueError, match="thinking must be"):
        to_anthropic_request(history, thinking="some")


def test_thinking_is_counted_as_the_model_keeps_it() -> None:
    history = _two_turns()
    sent_all = to_anthropic_request(history, model="claude-sonnet-4-5", thinking="all")
    as_kept = to_anthropic_request(history, model="claude-sonnet-4-5")
    # the API strips the old plan for Sonnet 4.5: the count is the same whether it was sent or not
    est = HEURISTIC
    assert anthropic_request_tokens(sent_all, "claude-sonnet-4-5", estimator=est) == \
        anthropic_request_tokens(as_kept, "claude-sonnet-4-5", estimator=est)
    assert anthropic_request_tokens(as_kept, "claude-sonnet-4-5", estimator=est) == sum(
        est.message_tokens(m, "claude-sonnet-4-5") for m in as_kept["messages"])
    # Opus 4.5 keeps it: about 400 more tokens of old plan
    opus = to_anthropic_request(history, model="claude-opus-4-5")
    more = anthropic_request_tokens(opus, "claude-opus-4-5", estimator=est) - \
        anthropic_request_tokens(as_kept, "claude-opus-4-5", estimator=est)
    assert 300 < more < 600


def test_fit_truncates_an_anthropic_request_but_never_a_thinking_block() -> None:
    big = "\n".join(f"line {i}: value {i * 7}" for i in range(6_000))
    history = [
        {"id": "u1", "role": "user", "content": "summarise the log"},
        tool_call("a1", "c1", thinking=[think("the log is long " * 50, "sig-1")]),
        result("t1", "c1", big),
    ]
    history[1]["tool_calls"][0]["arguments"] = {"cmd": "cat " + "x" * 20_000}
    request = to_anthropic_request(history, "system", model="claude-opus-4-5")
    original = copy.deepcopy(request)
    fitted = fit_request(request["system"], request["messages"], None, 4_000, model="claude-opus-4-5",
                         estimator=HEURISTIC)
    assert fitted.fits and fitted.tokens <= 4_000 and fitted.truncated >= 2
    assert request == original  # only the request's copies change
    call_turn, result_turn = fitted.messages[1]["content"], fitted.messages[2]["content"]
    assert call_turn[0] == original["messages"][1]["content"][0]  # thinking untouched, signature intact
    assert "tokens truncated to fit the context window" in call_turn[1]["input"]["cmd"]
    text = result_turn[0]["content"]
    assert text.startswith("line 0: value 0") and text.endswith("line 5999: value 41993")
    assert anthropic_request_tokens({"system": "system", "messages": fitted.messages}, "claude-opus-4-5",
                                    estimator=HEURISTIC) <= 4_000


# -- the property: structural rules of the Messages API ----------------------------------

_KINDS = ["call", "call", "call2", "result", "result", "result", "display", "user", "text", "orphan", "system",
          "thinking_only"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_KINDS), st.integers(0, 9)), max_size=40),
       st.sampled_from(["claude-opus-4-5", "claude-sonnet-4-5", None]), st.integers(0, 3))
def test_the_builder_obeys_the_messages_api_rules(ops, model, split) -> None:
    history: list[dict] = []
    issued: list[str] = []
    n = [0]

    def nid(prefix: str) -> str:
        n[0] += 1
        return f"{prefix}{n[0]}"

    for kind, k in ops:
        if kind in ("call", "call2"):
            ids = [nid("c") for _ in range(2 if kind == "call2" else 1)]
            issued += ids
            thinking = [think(f"plan {n[0]}", f"sig{n[0]}")] if k % 3 else None
            history.append(tool_call(nid("a"), *ids, text="step" if k % 2 else "", thinking=thinking))
        elif kind == "result" and issued:
            history.append(result(nid("t"), issued[k % len(issued)], f"out {n[0]}", error=k == 0))
        elif kind == "orphan":
            history.append(result(nid("t"), f"gone{k}"))
        elif kind == "display":
            history.append({"id": nid("d"), "role": "system", "content": "hook", "display_only": True})
        elif kind == "user":
            history.append({"id": nid("u"), "role": "user", "content": f"user {n[0]}"})
        elif kind == "system":
            history.append({"id": nid("x"), "role": "system", "content": f"note {n[0]}"})
        elif kind == "thinking_only":
            history.append({"id": nid("a"), "role": "assistant", "content": "", "thinking": [think("hm", f"s{n[0]}")]})
        else:
            history.append({"id": nid("a"), "role": "assistant", "content": f"answer {n[0]}"})
    request = to_anthropic_request(history, "sys", model=model)
    assert_anthropic_request_accepted(request)
    # thinking blocks are sent unmodified (the very dicts stored), never invented
    stored = {id(b) for m in history for b in m.get("thinking") or ()}
    sent = [b for m in request["messages"] for b in m["content"] if b["type"] in ("thinking", "redacted_thinking")]
    assert all(id(b) in stored for b in sent)
    if model == "claude-opus-4-5":  # keeps every thinking block: the repair dropped none
        assert sorted(map(id, sent)) == sorted(stored)
    # the running tool loop keeps the thinking of its assistant messages (the unit the API checks)
    last = request["messages"][-1] if request["messages"] else None
    if last and last["role"] == "user" and any(b["type"] == "tool_result" for b in last["content"]):
        turn = request["messages"][-2]["content"]
        calls_with_thinking = [m for m in history if m.get("thinking") and any(
            tc["id"] in {b["id"] for b in turn if b["type"] == "tool_use"} for tc in m.get("tool_calls") or ())]
        for m in calls_with_thinking:
            assert all(any(b is t for b in turn) for t in m["thinking"])
    # nothing but display-only lines is dropped: every text still reaches the request
    text = str(request)
    for m in history:
        if not m.get("display_only") and m.get("content"):
            assert str(m["content"]).split()[-1] in text
    # the incremental assembly builds the same request
    cache = _ProviderCache(api="anthropic")
    to_anthropic_request(history[: len(history) * split // 3], "sys", model=model, cache=cache)
    assert to_anthropic_request(history, "sys", model=model, cache=cache) == request
    with pytest.raises(ValueError, match="api='anthropic'"):
        to_anthropic_request(history, cache=_ProviderCache())


def test_the_engine_counts_thinking_as_the_model_keeps_it() -> None:
    from opctx.context.engine import DefaultContextEngine
    from opctx.context.summarize import MessageFacts

    history = _two_turns()
    old_plan = HEURISTIC.message_tokens(history[1], "claude-sonnet-4-5") - HEURISTIC.message_tokens(
        {k: v for k, v in history[1].items() if k != "thinking"}, "claude-sonnet-4-5")
    wrap = HEURISTIC.message_tokens(history[3], "claude-sonnet-4-5") - HEURISTIC.message_tokens(
        {k: v for k, v in history[3].items() if k != "thinking"}, "claude-sonnet-4-5")
    table = MessageFacts(lambda m: HEURISTIC.message_tokens(m, "claude-sonnet-4-5")).table(history)
    assert table.turn_start == 4  # "second task" starts the running turn
    assert table.counted_tokens("all") - table.counted_tokens("last_turn") == old_plan + wrap > 300

    def history_estimate(model: str) -> int:
        engine = DefaultContextEngine(context_window=200_000, estimator=HEURISTIC, aging=False)
        return engine.prepare(None, "s", history, model, None).budget.history

    everything = sum(HEURISTIC.message_tokens(m, "claude-sonnet-4-5") for m in history)
    assert history_estimate("claude-sonnet-4-5") == everything - old_plan - wrap
    assert history_estimate("claude-opus-4-5") == sum(HEURISTIC.message_tokens(m, "claude-opus-4-5") for m in history)
    # a request right after tool results joins their user turn: the loop goes on, nothing is dropped
    joined = [*history[:3], {"id": "u9", "role": "user", "content": "also this"}, *history[5:]]
    assert MessageFacts(lambda m: 1).table(joined).turn_start == 0


def test_a_merged_assistant_turn_opens_with_its_thinking():
    """A text reply followed by a thinking tool call, stored as two messages, becomes one
    assistant turn; Anthropic rejects a tool-loop turn that does not start with thinking."""
    from opctx.context.anthropic_messages import to_anthropic_request

    history = [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": "Let me look."},
        {"role": "assistant", "content": "", "thinking": [
            {"type": "thinking", "thinking": "use ls", "signature": "sig1"}],
         "tool_calls": [{"id": "t1", "name": "bash", "arguments": {"cmd": "ls"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "a.txt"},
    ]
    request = to_anthropic_request(history, thinking="all")
    assistant = [t for t in request["messages"] if t["role"] == "assistant"]
    assert [b["type"] for b in assistant[0]["content"]] == ["thinking", "text", "tool_use"]
