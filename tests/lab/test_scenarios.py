"""Synthetic sessions: deterministic, realistic, with exactly the planted references they claim."""

from __future__ import annotations

import json

import pytest

from opctx.dag.messages import message_text, tool_result_ids, tool_use_ids
from opctx.lab.metrics import identifiers
from opctx.lab.scenarios import generate_session, load_scenario, write_scenarios


def test_same_seed_same_session_different_seed_different_session():
    a = generate_session(7, n_turns=12)
    b = generate_session(7, n_turns=12)
    c = generate_session(8, n_turns=12)
    assert json.dumps(a.messages, sort_keys=True) == json.dumps(b.messages, sort_keys=True)
    assert a.meta == b.meta
    assert json.dumps(a.messages) != json.dumps(c.messages)


def test_session_shape_chain_timestamps_and_tool_pairs():
    s = generate_session(3, n_turns=15)
    msgs = s.messages
    assert msgs[0]["role"] == "user" and msgs[0]["parent_id"] is None
    for prev, cur in zip(msgs, msgs[1:], strict=False):
        assert cur["parent_id"] == prev["id"]
        assert cur["timestamp"] > prev["timestamp"]
    # every tool call is answered right after its assistant message, every result has its call
    open_calls: set[str] = set()
    for msg in msgs:
        for rid in tool_result_ids(msg):
            assert rid in open_calls
            open_calls.discard(rid)
        if msg["role"] == "assistant":
            assert not open_calls
            open_calls.update(tool_use_ids(msg))
    assert not open_calls
    roles = {m["role"] for m in msgs}
    assert roles == {"user", "assistant", "tool"}


def test_content_is_realistic_and_mixed_language():
    s = generate_session(5, n_turns=40)
    text = "\n".join(message_text(m) for m in s.messages)
    assert "Traceback (most recent call last):" in text or "FAILURES" in text
    assert "test session starts" in text
    assert any("\u4e00" <= ch <= "\u9fff" for ch in text)  # CJK present
    assert sum(len(message_text(m)) for m in s.messages) > 200_000  # long enough to need compaction


def test_planted_identifiers_occur_only_at_source_and_uses():
    s = generate_session(11, n_turns=40)
    assert len(s.planted) >= 6
    texts = [message_text(m) for m in s.messages]
    for p in s.planted:
        assert s.messages[p.source_index]["role"] == "tool"
        assert p.identifier in identifiers(texts[p.source_index])
        for use in p.uses:
            assert use["index"] > p.source_index
            assert s.messages[use["index"]]["role"] == use["role"]
            # the metric's extractor sees the planted identifier whole in the use
            assert p.identifier in identifiers(texts[use["index"]])
        hits = {i for i, t in enumerate(texts) if p.identifier in t}
        assert hits == {p.source_index, *(u["index"] for u in p.uses)}
    # both sides of the masking window M=10 are represented
    gaps = [p.uses[0]["tool_results_before"] - p.source_tool_ordinal for p in s.planted]
    assert any(g <= 10 for g in gaps) and any(g > 11 for g in gaps)


def test_write_and_load_roundtrip(tmp_path):
    paths = write_scenarios(tmp_path, seeds=(1, 2), n_turns=5)
    assert [p.name for p in paths] == ["scenario-0001.jsonl", "scenario-0002.jsonl"]
    loaded = load_scenario(paths[0])
    original = generate_session(1, n_turns=5)
    assert loaded.messages == original.messages
    assert [p.to_dict() for p in loaded.planted] == [p.to_dict() for p in original.planted]
    assert (tmp_path / "scenario-0001.meta.json").is_file()


def test_load_reports_file_and_line_of_bad_json(tmp_path):
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"role": "user", "content": "hi"}\n{not json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.jsonl:2"):
        load_scenario(bad)


@pytest.mark.parametrize("kwargs", [{"n_turns": 0}, {"max_tools_per_turn": 0}, {"n_planted": -1}, {"file_lines": (10, 5)}])
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(ValueError):
        generate_session(1, **kwargs)


def test_committed_sample_scenarios_are_up_to_date():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "data" / "scenarios"
    if not folder.is_dir():
        pytest.skip("data/scenarios not present")
    for seed in (1, 2, 3):
        loaded = load_scenario(folder / f"scenario-{seed:04d}.jsonl")
        assert loaded.messages == generate_session(seed, n_turns=20).messages, (
            "data/scenarios is stale: regenerate with write_scenarios('data/scenarios', seeds=(1, 2, 3), n_turns=20)"
        )
