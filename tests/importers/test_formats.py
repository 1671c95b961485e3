"""Message-list formats, OpenHands and Aider, on the invented samples; detection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opctx.dag.messages import call_to_message
from opctx.importers import FORMATS, UnknownFormatError, detect, parse_path
from opctx.importers.aider import parse_token_report

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"

EXPECTED_FORMATS = {
    "7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f.jsonl": "claude_code",
    "claude_code_hook_chat.json": "claude_code_hook",
    "rollout-2026-02-02T10-00-00-019c0000-aaaa-7bbb-8ccc-0123456789ab.jsonl": "codex",
    "openai_chat.json": "openai",
    "anthropic_messages.json": "anthropic",
    "hermes_sessions.jsonl": "hermes",
    "swe_agent_calc.traj": "swe_agent",
    "swe_agent_thought_action.traj": "swe_agent",
    "mini_swe_agent.traj.json": "mini_swe_agent",
    "openhands_output.jsonl": "openhands",
    "openhands_events.json": "openhands",
    "openhands_pairs_output.jsonl": "openhands",
    "openhands_flat_output.jsonl": "openhands",
    "openhands_completion.json": "openhands_completions",
    "sample.aider.chat.history.md": "aider",
}


def roles(session):
    return [call_to_message(c)["role"] for c in session.calls]


@pytest.mark.parametrize("name,fmt", sorted(EXPECTED_FORMATS.items()))
def test_every_sample_detected_by_content(name, fmt, tmp_path):
    assert detect(SAMPLES / name) == fmt
    # the name does not matter: the content decides
    anon = tmp_path / "recording.dat"
    anon.write_bytes((SAMPLES / name).read_bytes())
    assert detect(anon) == fmt
    assert fmt in FORMATS


def test_every_format_has_a_sample():
    assert set(EXPECTED_FORMATS.values()) | {"opctx_jsonl"} == set(FORMATS)


def test_openai_tool_exchange():
    (s,) = parse_path(SAMPLES / "openai_chat.json")
    assert roles(s) == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    llm, code = s.calls[2], s.calls[3]
    assert llm.metadata["tool_calls"] == [{"id": "call_oa_weather1", "name": "get_weather",
                                           "arguments": {"city": "Hangzhou", "day": "tomorrow"}}]
    assert code.caller == llm.id and code.name == "get_weather"
    assert code.input == {"city": "Hangzhou", "day": "tomorrow"}
    assert code.metadata["tool_call_id"] == "call_oa_weather1"
    assert s.calls[4].reads == [c.id for c in s.calls[:4]]
    assert s.head == s.calls[-1].id
    assert "<script>alert(1)</script>" in s.calls[1].output


def test_anthropic_blocks_and_system_field():
    (s,) = parse_path(SAMPLES / "anthropic_messages.json")
    assert roles(s) == ["system", "user", "assistant", "tool", "assistant"]
    assert s.calls[0].metadata["from_field"] == "system"
    assert s.calls[2].output == "Let me read it."
    assert s.calls[2].metadata["tool_calls"][0]["arguments"] == {"path": "utils/slug.py"}
    assert s.calls[3].caller == s.calls[2].id and s.calls[3].output.startswith("def slugify")
    assert s.model == "claude-sonnet-4-5-20250929"


def test_hermes_sessions_and_parent_link():
    a, b = parse_path(SAMPLES / "hermes_sessions.jsonl")
    assert a.session_id == "hermes-20260301_090000_abc123"
    assert roles(a) == ["system", "user", "assistant", "tool", "assistant"]
    assert a.calls[0].metadata["from_field"] == "system_prompt"
    assert a.calls[2].metadata["token_count"] == 40
    assert a.calls[3].metadata["tool_name"] == "read_file" and a.calls[3].caller == a.calls[2].id
    assert a.calls[1].created_at == 1772355601.0
    assert b.meta["parent"]["session_id"] == a.session_id
    assert a.meta["end_reason"] == "cli_close" and a.model == "anthropic/claude-opus-4.6"


def test_swe_agent_traj():
    (s,) = parse_path(SAMPLES / "swe_agent_calc.traj")
    assert roles(s) == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert s.calls[2].metadata["source_fields"]["thought"] == "Let me find calc.py."
    assert s.calls[3].metadata["tool_call_id"] == "call_swe_1" and s.calls[3].name == "find_file"
    assert s.meta["info"]["model_stats"]["api_calls"] == 2
    assert [set(step) for step in s.meta["trajectory"]][0] == {"execution_time", "state", "messages"}


def test_mini_swe_agent_command_kept():
    (s,) = parse_path(SAMPLES / "mini_swe_agent.traj.json")
    assert roles(s) == ["system", "user", "assistant", "user", "assistant"]
    assert s.calls[2].metadata["command"] == "cat greet.py"


def test_openhands_instance_and_events():
    (inst,) = parse_path(SAMPLES / "openhands_output.jsonl")
    assert inst.title == "demo__titles-1" and inst.model == "anthropic/claude-3-5-sonnet-20241022"
    assert roles(inst) == ["system", "user", "assistant", "tool", "assistant", "tool"]
    llm, code = inst.calls[2], inst.calls[3]
    assert llm.output == "Let me find the title code."
    assert llm.metadata["tool_calls"][0]["arguments"] == {"command": "grep -n title app.py"}
    assert llm.metadata["usage"]["input_tokens"] == 3000
    assert code.output == '12:    return f"<h1>{title}</h1>"' and code.caller == llm.id
    # the recall action + observation are kept as events, not conversation
    assert [e["id"] for e in inst.calls[1].metadata["events"]] == [2, 3]
    # finish had no observation: a code node records that, so the call is answered
    assert inst.calls[-1].metadata["missing_output"] is True
    (arr,) = parse_path(SAMPLES / "openhands_events.json")
    assert roles(arr) == ["user", "assistant", "tool", "assistant"]
    assert arr.meta["events_before_first_node"][0]["observation"] == "agent_state_changed"


def test_aider_markdown():
    (s,) = parse_path(SAMPLES / "sample.aider.chat.history.md")
    assert s.model == "gpt-4o-mini" and s.meta["lossy"] is True
    kinds = [(c.role, c.metadata.get("aider_kind")) for c in s.calls]
    assert kinds[0] == ("llm", "console") and ("user", None) in kinds
    replies = [c for c in s.calls if c.role == "llm" and not c.metadata.get("display_only")]
    assert replies[0].metadata["usage"] == {"input_tokens": 2400, "output_tokens": 104,
                                            "cache_read_tokens": 0, "cache_write_tokens": 0}
    assert all(c.metadata.get("display_only") for c in s.calls if c.metadata.get("aider_kind"))
    assert not any(r in {c.id for c in s.calls if c.metadata.get("display_only")}
                   for c in replies for r in c.reads)


def test_aider_token_report_forms():
    r = parse_token_report("Tokens: 12k sent, 1.5k cache write, 3.2k cache hit, 310 received. Cost: $0.01 message")
    assert r["usage"] == {"input_tokens": 12000 - 1500 - 3200, "output_tokens": 310,
                          "cache_read_tokens": 3200, "cache_write_tokens": 1500}
    assert parse_token_report("Applied edit to x.py") is None


def test_unknown_content_is_a_clear_error(tmp_path):
    cases = {
        "readme.txt": b"hello, this is not a transcript\n",
        "numbers.json": b"[1, 2, 3]",
        "config.json": b'{"name": "demo", "version": 2}',
        "log.jsonl": b'{"level": "info", "msg": "started"}\n{"level": "warn", "msg": "x"}\n',
        "empty_array.json": b"[]",
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(UnknownFormatError) as err:
            detect(p)
        assert str(p) in str(err.value), name


def test_jsonl_of_messages_and_conversations(tmp_path):
    msgs = tmp_path / "msgs.jsonl"
    msgs.write_text("\n".join(json.dumps(m) for m in [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]) + "\n")
    assert detect(msgs) == "openai"
    (s,) = parse_path(msgs)
    assert roles(s) == ["user", "assistant"]
    convs = tmp_path / "convs.jsonl"
    convs.write_text("\n".join(json.dumps({"messages": m}) for m in [
        [{"role": "user", "content": "a"}], [{"role": "user", "content": "b"},
                                             {"role": "assistant", "content": "c"}]]) + "\n")
    sessions = parse_path(convs)
    assert [len(x.calls) for x in sessions] == [1, 2]
    assert len({x.session_id for x in sessions}) == 2


def test_aider_every_token_report_kept(tmp_path):
    """A report with no reply of its own (before the first reply, or a second one for
    the same reply) is kept in its console node and named in the warnings."""
    path = tmp_path / ".aider.chat.history.md"
    path.write_text("\n".join([
        "# aider chat started at 2026-01-05 10:00:00",
        "",
        "> Tokens: 1.0k sent, 0 received.",
        "",
        "#### hello",
        "",
        "Hi there.",
        "",
        "> Tokens: 2.4k sent, 104 received. Cost: $0.01 message, $0.01 session.",
        "> Tokens: 2.5k sent, 12 received.",
        "",
    ]) + "\n", encoding="utf-8")
    (s,) = parse_path(path, format="aider")
    reply = next(c for c in s.calls if c.role == "llm" and not c.metadata.get("display_only"))
    assert reply.metadata["usage"]["input_tokens"] == 2400 and reply.metadata["aider_token_line"] == 9
    reports = [r for c in s.calls for r in c.metadata.get("token_reports", ())]
    assert [(r["line"], r["reply"]) for r in reports] == [(3, None), (9, reply.id), (10, None)]
    assert reports[2]["usage"]["output_tokens"] == 12
    assert [w.split(": ")[0] for w in s.warnings] == [f"{path}:3", f"{path}:10"]


def test_openhands_observation_without_call_is_a_user_message(tmp_path):
    """An ``error`` observation answering no action (a function call that failed
    validation) is what the model is told next: a user node the next llm node reads.
    ``null`` and ``agent_state_changed`` observations stay in ``metadata.events``."""
    call = {"tool_call_id": "toolu_1", "function_name": "execute_bash",
            "model_response": {"id": "r1", "choices": [{"message": {"content": "Listing."}}]}}
    call2 = {**call, "tool_call_id": "toolu_2",
             "model_response": {"id": "r2", "choices": [{"message": {"content": "Again."}}]}}
    events = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "list files"}},
        {"id": 1, "source": "user", "cause": 0, "observation": "null", "content": ""},
        {"id": 2, "source": "agent", "action": "run", "args": {"command": "ls"}, "tool_call_metadata": call},
        {"id": 3, "source": "agent", "cause": 2, "observation": "run", "content": "a.py"},
        {"id": 4, "source": "agent", "observation": "error", "content": "Parameter 'command' is missing."},
        {"id": 5, "source": "environment", "observation": "agent_state_changed", "content": "",
         "extras": {"agent_state": "running"}},
        {"id": 6, "source": "agent", "action": "run", "args": {"command": "ls -a"}, "tool_call_metadata": call2},
        {"id": 7, "source": "agent", "cause": 6, "observation": "run", "content": ". .. a.py"},
    ]
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(events), encoding="utf-8")
    (s,) = parse_path(path, format="openhands")
    error = next(c for c in s.calls if c.metadata.get("observation") == "error")
    assert error.role == "user" and error.output == "Parameter 'command' is missing."
    assert error.metadata["source_event_ids"] == [4] and error.metadata["is_error"] is True
    assert [e["id"] for e in error.metadata["events"]] == [5]
    second = next(c for c in s.calls if c.output == "Again.")
    assert error.id in second.reads and second.predecessor == error.id
    kept = {e["id"] for c in s.calls for e in c.metadata.get("events", ())}
    assert kept == {1, 5}
    assert s.title == "list files"
