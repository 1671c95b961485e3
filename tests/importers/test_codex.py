"""Codex CLI rollout importer: the invented sample and the real compaction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opctx.dag.messages import call_to_message
from opctx.importers import detect, parse_path
from opctx.importers.base import SUMMARY_PREFIX
from opctx.importers.codex import NOT_VISIBLE, codex_usage

SAMPLE = (Path(__file__).resolve().parents[2] / "data" / "samples"
          / "rollout-2026-02-02T10-00-00-019c0000-aaaa-7bbb-8ccc-0123456789ab.jsonl")


@pytest.fixture(scope="module")
def session():
    (s,) = parse_path(SAMPLE)
    return s


def test_detect_and_session_meta(session):
    assert detect(SAMPLE) == "codex"
    assert session.session_id == "codex-019c0000-aaaa-7bbb-8ccc-0123456789ab"
    assert session.model == "gpt-5.2-codex"
    assert session.meta["codex"]["cli_version"] == "0.77.0"
    assert session.meta["model_context_window"] == 258400
    assert session.meta["event_counts"]["token_count"] == 4
    assert session.title == "把 notes/ 目录下所有的 TODO 列出来"


def test_one_model_response_is_one_llm_node(session):
    first = next(c for c in session.calls if c.role == "llm" and c.metadata.get("items"))
    assert first.metadata["items"] == ["reasoning", "function_call"]
    assert first.metadata["reasoning"] == ["**Searching for TODO markers**"]
    assert first.metadata["reasoning_encrypted"] == ["gAAAAsample-encrypted-reasoning"]
    (tc,) = first.metadata["tool_calls"]
    assert tc == {"id": "call_SampleRg01", "name": "shell_command",
                  "arguments": {"command": "rg -n TODO notes", "workdir": "/workspace/notes"}}
    # Codex input includes the cached part; opctx splits it Anthropic-style
    assert first.metadata["usage"] == {"input_tokens": 1100, "output_tokens": 40,
                                       "cache_read_tokens": 3000, "cache_write_tokens": 0}
    assert first.metadata["context_window"] == 258400


def test_outputs_paired_by_call_id(session):
    codes = [c for c in session.calls if c.role == "code"]
    assert [c.metadata["tool_call_id"] for c in codes] == ["call_SampleRg01", "call_SamplePatch1"]
    by_id = {c.id: c for c in session.calls}
    for c in codes:
        tc_ids = [tc["id"] for tc in by_id[c.caller].metadata["tool_calls"]]
        assert c.metadata["tool_call_id"] in tc_ids
    patch = codes[1]
    assert patch.name == "apply_patch" and patch.input["input"].startswith("*** Begin Patch")
    assert patch.metadata["output_type"] == "custom_tool_call_output"
    # the exec_command_end event is kept on the node it followed
    assert codes[0].metadata["events"][0]["payload"]["type"] == "exec_command_end"
    assert call_to_message(codes[0])["tool_call_id"] == "call_SampleRg01"


def test_encrypted_compaction(session):
    (sid,) = session.recorded_compactions
    by_id = {c.id: c for c in session.calls}
    summary = by_id[sid]
    comp = summary.metadata["compaction"]
    assert summary.output == SUMMARY_PREFIX + NOT_VISIBLE
    assert comp["summary_visible"] is False and comp["recorded"] and comp["format"] == "codex"
    assert summary.metadata["encrypted_summary"] == "gAAAAsample-encrypted-summary"
    # the user message Codex kept is a copy of the original, before the summary
    (protected,) = comp["protected_ids"]
    copy = by_id[summary.predecessor]
    assert copy.metadata["copied_from"] == protected and copy.predecessor is None
    assert copy.output == by_id[protected].output
    assert protected not in comp["folded_ids"] and comp["folded_ids"]
    # the conversation continues after S; HEAD is the last reply
    head = by_id[session.head]
    assert head.output.startswith("好的") and by_id[head.predecessor].predecessor == summary.id
    assert head.metadata["usage"]["input_tokens"] == 2100
    # context size before the compaction: total_tokens of the last request before it
    assert comp["pre_tokens"] == comp["pre_tokens_usage"]["total_tokens"] == 4580
    assert comp["trigger"] is None and comp["reason"] == "recovered"


def _line(kind: str, payload: dict, second: int) -> str:
    return json.dumps({"timestamp": f"2026-03-01T09:00:{second:02d}.000Z", "type": kind,
                       "payload": payload})


def _token_count(inp: int, out: int, total: int, running: int) -> dict:
    return {"type": "token_count", "info": {
        "total_token_usage": {"input_tokens": running, "output_tokens": 0, "total_tokens": running},
        "last_token_usage": {"input_tokens": inp, "cached_input_tokens": 0, "output_tokens": out,
                             "total_tokens": total},
        "model_context_window": 200000}}


def _compacted() -> dict:
    return {"message": "", "replacement_history": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
        {"type": "compaction", "encrypted_content": "gAAAAx"}]}


def test_pre_compaction_tokens_from_the_last_real_request(tmp_path):
    """The zeroed token_count Codex writes before ``compacted`` is passed over; a second
    compaction with no request in between has no figure of its own."""
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]}
    reply = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}
    lines = [
        _line("session_meta", {"id": "019c1111-0000-7000-8000-000000000001", "cli_version": "0.77.0"}, 0),
        _line("turn_context", {"model": "gpt-5.2-codex"}, 0),
        _line("response_item", user, 1),
        _line("response_item", reply, 2),
        _line("event_msg", _token_count(180000, 700, 180700, 180000), 2),
        _line("event_msg", _token_count(180000, 700, 180700, 180000), 3),  # Codex repeats it
        _line("event_msg", _token_count(0, 0, 9000, 180000), 4),           # zeroed, before compacted
        _line("compacted", _compacted(), 4),
        _line("event_msg", {"type": "context_compacted"}, 4),
        _line("compacted", _compacted(), 5),
    ]
    path = tmp_path / "rollout-2026-03-01T09-00-00-019c1111-0000-7000-8000-000000000001.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (s,) = parse_path(path)
    by_id = {c.id: c for c in s.calls}
    first, second = (by_id[i].metadata["compaction"] for i in s.recorded_compactions)
    assert first["pre_tokens"] == 180700
    assert first["pre_tokens_line"] == 6  # the repeat, not the zeroed line 7
    assert first["pre_tokens_usage"]["input_tokens"] == 180000
    assert first["trigger"] is None and first["reason"] == "recovered"
    assert second["pre_tokens"] is None and "pre_tokens_line" not in second


def test_usage_mapping_never_negative():
    assert codex_usage({"input_tokens": 10, "cached_input_tokens": 50, "output_tokens": 1}) == {
        "input_tokens": 0, "output_tokens": 1, "cache_read_tokens": 50, "cache_write_tokens": 0}
    assert codex_usage(None) is None


@pytest.mark.corpus
def test_real_compaction_keeps_replacement_users(corpus_dir):
    path = corpus_dir / "codex_rollout_jsonl/dreyer-thomas_TravelBlogs__rollout-2025-12-29T21-39-00-019b6bd5-ed54-7b23-873a-2177ca046ce3.jsonl"
    (s,) = parse_path(path)
    by_id = {c.id: c for c in s.calls}
    (sid,) = s.recorded_compactions
    summary = by_id[sid]
    comp = summary.metadata["compaction"]
    assert len(comp["protected_ids"]) + sum(
        1 for c in s.calls if c.metadata.get("replacement_history")) == 16
    assert summary.metadata["encrypted_summary"].startswith("gAAAA")
    assert len(summary.metadata["replacement_history_other"]) == 14  # ghost snapshots kept
    # new branch: copies of the kept user messages, then S, then the continued turns
    branch = []
    node = by_id[s.head]
    while node is not None:
        branch.append(node)
        node = by_id.get(node.predecessor)
    branch.reverse()
    idx = branch.index(summary)
    assert all(n.role == "user" for n in branch[:idx])
    assert branch[0].predecessor is None
    assert all(by_id[i].role == "user" for i in comp["protected_ids"])
    # pre-compaction tokens: the last request before the compaction (line 1150: 210,336
    # input + 316 output), read again from the file to check the line named
    assert comp["trigger"] is None and comp["reason"] == "recovered"
    assert comp["pre_tokens"] == 210652
    raw = path.read_text(encoding="utf-8").splitlines()
    source = json.loads(raw[comp["pre_tokens_line"] - 1])["payload"]["info"]["last_token_usage"]
    assert source == comp["pre_tokens_usage"] and source["input_tokens"] == 210336
    between = [json.loads(x) for x in raw[comp["pre_tokens_line"]:summary.metadata["source_line"] - 1]]
    assert not [r for r in between if r["type"] == "event_msg" and r["payload"]["type"] == "token_count"
                and r["payload"]["info"]["last_token_usage"]["input_tokens"] > 0]
