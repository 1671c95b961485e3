"""OpenHands outputs older than function calling: a ``history`` of
``[action, observation]`` pairs (mid-2024) and a flat history without
``tool_call_metadata`` (late 2024). Actions are tool calls, observations their results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opctx.dag.messages import call_to_message
from opctx.importers import detect, import_paths, parse_path
from opctx.importers.export import session_to_openai

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
PAIRS = SAMPLES / "openhands_pairs_output.jsonl"
FLAT = SAMPLES / "openhands_flat_output.jsonl"


def calls_and_results(session):
    llm = [c for c in session.calls if c.role == "llm"]
    calls = [tc for c in llm for tc in c.metadata.get("tool_calls") or ()]
    codes = {c.metadata.get("tool_call_id"): c for c in session.calls if c.role == "code"}
    return llm, calls, codes


def test_pairs_history_is_openhands_not_swe_agent(tmp_path):
    assert detect(PAIRS) == "openhands"
    # the same instance as one pretty-printed JSON document
    doc = tmp_path / "instance.json"
    doc.write_text(json.dumps(json.loads(PAIRS.read_text(encoding="utf-8")), indent=2), encoding="utf-8")
    assert detect(doc) == "openhands"


def test_pairs_history_actions_become_tool_calls():
    (s,) = parse_path(PAIRS)
    assert s.model == "gpt-4o-2024-05-13"  # metadata.model_name of mid-2024 outputs
    llm, calls, codes = calls_and_results(s)
    assert [tc["name"] for tc in calls] == ["run_ipython", "run", "run_ipython", "run", "finish"]
    assert calls[1]["arguments"]["command"].endswith("pytest tests/test_ops.py -q")
    assert "thought" not in calls[1]["arguments"]
    assert llm[1].output.startswith("Line 8 uses floor division")  # the thought is the model's text
    # every observation answers its action: a code node under that llm node
    for tc in calls[:4]:
        code = codes[tc["id"]]
        assert code.caller == next(c.id for c in llm if tc in c.metadata["tool_calls"])
        assert code.input == tc["arguments"] and code.output
    assert "1 failed, 1 passed" in codes[calls[1]["id"]].output
    assert codes[calls[1]["id"]].metadata["event"]["extras"]["exit_code"] == 1
    # finish was answered by a null observation: not a result the model saw
    assert codes[calls[4]["id"]].metadata.get("missing_output") is True
    # observations never turn into user messages; only the task is a user node
    assert [c.output[:16] for c in s.calls if c.role == "user"] == ["<uploaded_files>"]
    assert any(e.get("observation") == "null" for e in s.calls[0].metadata.get("events", []))


def test_flat_history_without_tool_call_metadata():
    (s,) = parse_path(FLAT)
    assert s.model == "anthropic/claude-3-5-sonnet-20241022"
    llm, calls, codes = calls_and_results(s)
    assert [tc["name"] for tc in calls] == ["run", "run_ipython", "edit", "browse", "run", "finish"]
    assert calls[2]["arguments"]["path"] == "/workspace/calc/calc/ops.py"
    answered = [codes[tc["id"]] for tc in calls[:5]]
    assert [c.metadata["observation"] for c in answered] == ["run", "run_ipython", "edit", "browse", "run"]
    assert answered[2].output.startswith("--- /workspace/calc/calc/ops.py")
    assert answered[2].metadata["event"]["extras"]["prev_exist"] is True
    assert codes[calls[5]["id"]].metadata.get("missing_output") is True
    # the agent's question is its text; the simulated user's reply a user node
    users = [c.output for c in s.calls if c.role == "user"]
    assert len(users) == 2 and users[1].startswith("Please continue working")
    assert any(c.output == "Should I also make `divide` accept Decimal inputs?" for c in llm)
    # bookkeeping stays in metadata.events
    states = [e["extras"]["agent_state"] for c in s.calls for e in c.metadata.get("events", [])
              if e.get("observation") == "agent_state_changed"]
    assert states == ["running", "awaiting_user_input", "running", "finished"]


@pytest.mark.parametrize("path", [PAIRS, FLAT], ids=["pairs", "flat"])
def test_older_shapes_export_as_paired_tool_messages(path, tmp_path):
    db = tmp_path / "oh.db"
    report = import_paths([path], db)
    assert report.ok and report.sessions == 1
    messages = session_to_openai(str(db), report.written[0]["session_id"])
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [tc["id"] for tc in m["tool_calls"]]
            answers = [x.get("tool_call_id") for x in messages[i + 1:i + 1 + len(ids)]]
            assert answers == ids, (m, messages[i + 1:i + 3])
    assert sum(1 for m in messages if m["role"] == "tool") == (5 if path == PAIRS else 6)


def test_pairs_order_beats_a_missing_cause(tmp_path):
    """A pair's observation answers its action even without ``cause`` or ids."""
    inst = json.loads(PAIRS.read_text(encoding="utf-8"))
    for action, observation in inst["history"]:
        for event in (action, observation):
            event.pop("id", None)
            event.pop("cause", None)
    p = tmp_path / "no_ids.jsonl"
    p.write_text(json.dumps(inst) + "\n", encoding="utf-8")
    (s,) = parse_path(p)
    _, calls, codes = calls_and_results(s)
    assert len(calls) == 5 and all(not codes[tc["id"]].metadata.get("missing_output") for tc in calls[:4])
    assert [call_to_message(c)["role"] for c in s.calls].count("tool") == 5
