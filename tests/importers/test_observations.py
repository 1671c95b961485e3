"""Environment output sent as user messages is marked by each agent's own markers."""

from __future__ import annotations

from pathlib import Path

import pytest

from opctx.dag.messages import call_to_message
from opctx.importers import parse_path
from opctx.importers.observations import (
    observation_marks_mini_swe_agent,
    observation_marks_swe_agent,
)

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _users(s):
    return [c for c in s.calls if c.role == "user"]


def test_swe_agent_0x_history_marks_observations_and_the_demonstration():
    (s,) = parse_path(SAMPLES / "swe_agent_thought_action.traj")
    demo, task, *observations = _users(s)
    assert demo.metadata["is_demo"] is True and not demo.metadata.get("is_observation")
    assert not task.metadata.get("is_observation")  # the instance template is the task
    assert [o.metadata.get("is_observation") for o in observations] == [True, True]
    # a message dict carries the marks as top-level keys
    assert call_to_message(observations[0])["is_observation"] is True
    assert call_to_message(demo)["is_demo"] is True


def test_swe_agent_1x_marks_by_message_type_and_leaves_tool_results_alone():
    (s,) = parse_path(SAMPLES / "swe_agent_calc.traj")
    assert not any(c.metadata.get("is_observation") for c in s.calls)  # results are code nodes
    marks = observation_marks_swe_agent([
        {"role": "system", "message_type": "system_prompt"},
        {"role": "user", "message_type": "observation"},
        {"role": "assistant", "message_type": "action"},
        {"role": "user", "message_type": "observation", "is_demo": True},
        {"role": "user", "message_type": "user"},  # a requery, not environment output
        {"role": "user", "message_type": "observation"},
    ])
    assert marks == {3: {"is_demo": True}, 5: {"is_observation": True}}


def test_mini_swe_agent_every_user_message_after_the_task():
    (s,) = parse_path(SAMPLES / "mini_swe_agent.traj.json")
    task, *rest = _users(s)
    assert not task.metadata.get("is_observation") and rest
    assert all(c.metadata["is_observation"] is True for c in rest)
    assert observation_marks_mini_swe_agent([{"role": "user"}, "junk", {"role": "user"}]) == {
        2: {"is_observation": True}}


def test_openhands_observation_shown_as_a_user_message():
    marked = []
    for name in ("openhands_events.json", "openhands_output.jsonl", "openhands_flat_output.jsonl",
                 "openhands_pairs_output.jsonl"):
        for s in parse_path(SAMPLES / name):
            for c in _users(s):
                assert bool(c.metadata.get("is_observation")) == ("observation" in c.metadata)
                marked += [c] if c.metadata.get("is_observation") else []
    assert all(c.metadata["observation"] for c in marked)


@pytest.mark.corpus
def test_corpus_agents_that_send_observations_as_user_messages_get_them_marked(corpus_dir):
    """Every SWE-agent / mini-swe-agent session of the corpus without native tool calls
    has its observations marked: all of its user messages but the task (and demos)."""
    files = [*sorted((corpus_dir / "swe_agent_traj").iterdir()), *sorted((corpus_dir / "mini_swe_agent_traj").iterdir())]
    checked = 0
    for f in files:
        (s,) = parse_path(f)
        users = _users(s)
        if any(c.role == "code" for c in s.calls):
            continue  # function calling: the observations are tool results
        plain = [c for c in users if not c.metadata.get("is_demo")]
        assert len(plain) >= 2, f
        assert not plain[0].metadata.get("is_observation"), f
        assert all(c.metadata.get("is_observation") for c in plain[1:]), f
        checked += 1
    assert checked == 4
