"""Message dicts and their §0.4 mapping to Calls (opctx.dag.messages)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.dag.messages import (
    as_text,
    blocks,
    call_to_message,
    has_text_block,
    is_tool_result,
    message_text,
    message_to_call,
    tool_result_ids,
    tool_use_ids,
)
from opctx.dag.nodes import Call

# -- mapping --------------------------------------------------------------------------


def test_each_role_maps_to_the_documented_call_fields():
    u = message_to_call({"id": "u", "role": "user", "content": "hi", "name": "ana", "timestamp": 3.0})
    assert (u.role, u.output, u.name, u.created_at, u.predecessor) == ("user", "hi", "ana", 3.0, None)

    a = message_to_call({"id": "a", "role": "assistant", "content": "yo", "model": "gpt", "parent_id": "u"})
    assert (a.role, a.name, a.output, a.predecessor) == ("llm", "gpt", "yo", "u")
    assert a.metadata == {}

    t = message_to_call(
        {"id": "t", "role": "tool", "content": "out", "name": "grep", "arguments": {"p": 1},
         "tool_call_id": "c1", "is_error": False, "parent_id": "a"}
    )
    assert (t.role, t.name, t.input, t.output) == ("code", "grep", {"p": 1}, "out")
    assert t.metadata == {"tool_call_id": "c1", "is_error": False}

    s = message_to_call({"id": "s", "role": "system", "content": "rules"})
    assert (s.role, s.metadata) == ("llm", {"role": "system"})
    assert call_to_message(s)["role"] == "system"


def test_non_core_fields_ride_in_metadata_and_are_hoisted_back():
    msg = {
        "id": "u1", "role": "user", "content": "x", "timestamp": 1.5, "parent_id": None,
        "source": "telegram", "attachments": [{"path": "a.png"}], "_titled": True,
    }
    call = message_to_call(msg)
    assert call.metadata == {"source": "telegram", "attachments": [{"path": "a.png"}], "_titled": True}
    assert call_to_message(call) == msg


def test_unknown_role_is_a_clear_value_error():
    with pytest.raises(ValueError, match=r"unknown message role 'robot'.*user, assistant, tool, system"):
        message_to_call({"role": "robot", "content": "beep"})
    with pytest.raises(ValueError, match="None"):
        message_to_call({"content": "no role"})


def test_missing_id_and_timestamp_are_generated():
    call = message_to_call({"role": "assistant", "content": "x"})
    assert call.id.startswith("l_") and call.created_at > 0
    out = call_to_message(call)
    assert out["parent_id"] is None and out["timestamp"] == call.created_at


def test_call_built_by_the_runtime_reads_as_a_message():
    call = Call(id="f", role="code", name="ls", input={"d": "."}, output=["a"], predecessor="l",
                metadata={"tool_call_id": "c9"})
    msg = call_to_message(call)
    assert msg == {"id": "f", "role": "tool", "content": ["a"], "name": "ls", "arguments": {"d": "."},
                   "timestamp": call.created_at, "parent_id": "l", "tool_call_id": "c9"}


# -- property: round trip ---------------------------------------------------------------

_json_leaf = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=20)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_CORE = {"id", "role", "content", "timestamp", "parent_id", "name", "model", "arguments"}
_extra_keys = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10).filter(
    lambda k: k not in _CORE
)


@st.composite
def messages(draw):
    role = draw(st.sampled_from(["user", "assistant", "tool", "system"]))
    msg = {
        "id": draw(st.text("abcdef0123456789", min_size=1, max_size=12)),
        "role": role,
        "content": draw(st.text(max_size=40) | st.none()),
        "timestamp": draw(st.floats(0, 2e9, allow_nan=False)),
        "parent_id": draw(st.none() | st.text("xyz", min_size=1, max_size=5)),
    }
    if role == "tool":
        msg["name"] = draw(st.text(max_size=8))
        msg["arguments"] = draw(_json)
    elif role == "user" and draw(st.booleans()):
        msg["name"] = draw(st.text(min_size=1, max_size=8))
    elif role in ("assistant", "system") and draw(st.booleans()):
        msg["model"] = draw(st.text(min_size=1, max_size=8))
    msg.update(draw(st.dictionaries(_extra_keys, _json, max_size=4)))
    return msg


@settings(max_examples=200, deadline=None)
@given(messages())
def test_message_call_message_round_trip(msg):
    call = message_to_call(msg)
    assert call_to_message(call) == msg
    # and through Call's own dict form, as the store serialises it
    assert call_to_message(Call.from_dict(call.to_dict())) == msg


# -- helpers ----------------------------------------------------------------------------

OPENAI_ASSISTANT = {
    "role": "assistant", "content": "",
    "tool_calls": [{"id": "c1", "name": "grep", "arguments": {"pattern": "TODO"}}],
}
ANTHROPIC_ASSISTANT = {
    "role": "assistant", "content": "",
    "extra": {"blocks": [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "tu1", "name": "read", "input": {"path": "a.py"}},
    ]},
}
ANTHROPIC_RESULT = {
    "role": "user", "content": "",
    "extra": {"blocks": [{"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "print(1)"}]}]},
}


def test_tool_ids_in_both_shapes():
    assert tool_use_ids(OPENAI_ASSISTANT) == ["c1"]
    assert tool_use_ids(ANTHROPIC_ASSISTANT) == ["tu1"]
    assert tool_result_ids({"role": "tool", "tool_call_id": "c1", "content": "x"}) == ["c1"]
    assert tool_result_ids(ANTHROPIC_RESULT) == ["tu1"]
    assert tool_use_ids({"role": "user", "content": "plain"}) == []


def test_tool_result_detection_and_text_blocks():
    assert is_tool_result({"role": "tool", "content": "x"})
    assert is_tool_result(ANTHROPIC_RESULT)
    assert not is_tool_result({"role": "user", "content": "hello", **{k: v for k, v in ANTHROPIC_RESULT.items() if k == "extra"}})
    assert has_text_block({"role": "user", "content": "hi"})
    assert not has_text_block({"role": "user", "content": "   "})
    assert has_text_block(ANTHROPIC_ASSISTANT)
    assert not has_text_block({"role": "tool", "content": "result text"})
    assert blocks({"role": "user", "content": [{"type": "text", "text": "a"}, "junk"]}) == [{"type": "text", "text": "a"}]


def test_message_text_collects_everything_a_model_sees():
    assert message_text(OPENAI_ASSISTANT) == 'grep\n{"pattern": "TODO"}'
    assert message_text(ANTHROPIC_ASSISTANT) == 'Let me look.\nread\n{"path": "a.py"}'
    assert message_text(ANTHROPIC_RESULT) == "print(1)"
    assert message_text({"role": "user", "content": "中文"}) == "中文"


def test_as_text():
    assert as_text(None) == ""
    assert as_text("s") == "s"
    assert as_text({"a": "é"}) == '{"a": "é"}'
    # Not JSON: still text (json default=str), never an exception.
    assert as_text({"when": object}) == '{"when": "<class \'object\'>"}'
