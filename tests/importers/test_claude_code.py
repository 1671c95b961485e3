"""Claude Code importer: the invented sample (data/samples) and the real corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opctx.dag.messages import call_to_message
from opctx.importers import detect, parse_path
from opctx.importers.base import SUMMARY_PREFIX
from opctx.importers.claude_code import parse_claude_code_hook_json

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
SAMPLE = SAMPLES / "7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f.jsonl"
COMPACTION_KEYS = {"kind", "folded_ids", "folded_range", "protected_ids", "kept_ids", "reason",
                   "trigger", "pre_tokens", "tokens_after", "fell_back_to_structural", "recorded",
                   "format"}


@pytest.fixture(scope="module")
def parsed():
    return parse_path(SAMPLE)


@pytest.fixture(scope="module")
def main(parsed):
    return parsed[0]


def by_source(session, n: int):
    """The node made from sample line ``n`` (the sample's uuids end with ``n`` in hex)."""
    uuid_suffix = f"{n:04x}"
    for c in session.calls:
        ids = c.metadata.get("source_ids") or [c.metadata.get("source_id")]
        if any(i and i.endswith(uuid_suffix) for i in ids):
            return c
    raise AssertionError(f"no node from line ...{uuid_suffix}")


def chain(session, head):
    by_id = {c.id: c for c in session.calls}
    out = []
    while head:
        out.append(by_id[head])
        head = by_id[head].predecessor
    return out[::-1]


def test_detected_from_content(tmp_path):
    assert detect(SAMPLE) == "claude_code"
    renamed = tmp_path / "whatever.txt"
    renamed.write_bytes(SAMPLE.read_bytes())
    assert detect(renamed) == "claude_code"
    assert detect(SAMPLES / "claude_code_hook_chat.json") == "claude_code_hook"


def test_lines_of_one_message_id_are_one_llm_node(main):
    first = by_source(main, 3)
    assert by_source(main, 4) is first and by_source(main, 5) is first
    assert len(first.metadata["source_ids"]) == 3
    assert first.output == "我先读一下这个文件。"
    assert [tc["name"] for tc in first.metadata["tool_calls"]] == ["Read"]
    assert first.metadata["thinking"][0]["thinking"].startswith("先读文件")
    # usage counted once: the last line's (final output count), not a sum
    assert first.metadata["usage"] == {"input_tokens": 12, "output_tokens": 88,
                                       "cache_read_tokens": 0, "cache_write_tokens": 5200}
    assert first.name == "claude-sonnet-4-5-20250929"


def test_tool_result_is_a_code_node_called_by_its_llm(main):
    llm = by_source(main, 3)
    code = by_source(main, 6)
    assert code.role == "code" and code.caller == llm.id and code.predecessor == llm.id
    assert code.name == "Read"
    assert code.input == {"file_path": "/workspace/shop-api/src/orders/list.py"}
    assert code.metadata["tool_call_id"] == "toolu_01SampleRead"
    assert code.metadata["tool_use_result"]["file"]["numLines"] == 3
    msg = call_to_message(code)
    assert msg["role"] == "tool" and msg["tool_call_id"] == "toolu_01SampleRead"
    assert "offset = page * size" in msg["content"]


def test_forks_are_kept(main):
    asked = by_source(main, 7)
    children = [c for c in main.calls if c.predecessor == asked.id]
    assert sorted(c.output[:4] for c in children) == ["先别改，", "好的，直"]
    assert all(c.role == "user" for c in children)


def test_spilled_tool_result_content_attached(main):
    code = by_source(main, 14)
    assert "12 passed" in code.output
    assert code.metadata["inline_output"].startswith("(output saved to")
    assert code.metadata["spilled_file"].endswith("tool-results/toolu_01SampleBash.txt")


def test_recorded_compaction_layout(main):
    summary = next(c for c in main.calls if "compaction" in c.metadata)
    meta = summary.metadata
    assert summary.role == "llm" and summary.name == "compaction"
    assert meta["role"] == "system" and meta["type"] == "compactionSummary"
    assert meta["source"] == "compaction" and meta["extra"] == {"compaction": True}
    assert summary.output.startswith(SUMMARY_PREFIX + "This session is being continued")
    comp = meta["compaction"]
    assert COMPACTION_KEYS <= set(comp)
    assert comp["recorded"] is True and comp["trigger"] == "auto" and comp["reason"] == "auto"
    assert comp["pre_tokens"] == 167012 and comp["format"] == "claude_code"
    assert comp["protected_ids"] == [] and comp["kept_ids"] == []
    # the new branch starts at S; the folded branch is the chain that ended at the
    # boundary's logical parent, kept untouched in the session
    assert summary.predecessor is None
    folded = [c.id for c in chain(main, by_source(main, 18).id)]
    assert comp["folded_ids"] == folded
    assert comp["folded_range"] == [folded[0], folded[-1]]
    by_id = {c.id: c for c in main.calls}
    assert all(i in by_id for i in folded)
    assert main.meta["_last_summary_text"].startswith("This session is being continued")
    assert main.recorded_compactions == [summary.id]
    # both source lines (boundary + summary) are named by the summary node
    assert len(meta["source_ids"]) == 2
    msg = call_to_message(summary)
    assert msg["role"] == "system" and msg["content"].startswith(SUMMARY_PREFIX)


def test_head_and_reads_after_compaction(main):
    summary = next(c for c in main.calls if "compaction" in c.metadata)
    branch = chain(main, main.head)
    assert branch[0] is summary
    # HEAD is the last non-sidechain line (the turn_duration system line)
    assert main.head == by_source(main, 41).id
    last_llm = by_source(main, 40)
    # an llm node reads the active branch since the compaction, minus display-only lines
    assert last_llm.reads[0] == summary.id
    assert all(main.calls[0].id != r for r in last_llm.reads)
    display = by_source(main, 41)
    assert display.metadata["display_only"] and display.metadata["role"] == "system"
    assert display.id not in last_llm.reads


def test_synthetic_and_unknown_entries_kept(main):
    synthetic = by_source(main, 18)
    assert synthetic.metadata["synthetic"] is True
    attached = [e for c in main.calls for e in c.metadata.get("events", [])]
    assert [e["type"] for e in attached] == ["attachment"]
    assert any("attachment" in w for w in main.warnings)
    snap_holder = by_source(main, 2)
    assert snap_holder.metadata["file_history_snapshots"][0]["messageId"].endswith("0002")
    assert main.title == "修复订单接口的分页错误 (pagination fix)"
    assert main.meta["claude_code"]["cwd"] == "/workspace/shop-api"


def test_subagent_linked_to_parent_and_task_call(parsed, main):
    sub = parsed[1]
    assert sub.session_id == f"{main.session_id}-agent-a5a3c0ffee1234567"
    parent = sub.meta["parent"]
    task_code = by_source(main, 35)
    assert parent["session_id"] == main.session_id
    assert parent["tool_call_id"] == "toolu_01SampleTask"
    assert parent["node_id"] == task_code.id
    assert task_code.metadata["subagent_session_id"] == sub.session_id
    assert sub.meta["subagent_meta"] == {"agentType": "Explore",
                                         "description": "Find other paginated endpoints"}
    assert sub.head == sub.calls[-1].id and sub.model == "claude-haiku-4-5-20251001"


def test_message_view_of_an_llm_node(main):
    msg = call_to_message(by_source(main, 33))
    assert msg["role"] == "assistant"
    assert msg["content"].startswith("好的，我会在函数开头加")
    assert msg["tool_calls"][0]["name"] == "Task"
    assert msg["model"] == "claude-sonnet-4-5-20250929"
    user = call_to_message(by_source(main, 16))
    assert user["role"] == "user" and "<script>alert(1)</script>" in user["content"]


def test_hook_array_summary_without_boundary():
    (s,) = parse_path(SAMPLES / "claude_code_hook_chat.json")
    assert s.format == "claude_code_hook"
    summary = next(c for c in s.calls if "compaction" in c.metadata)
    comp = summary.metadata["compaction"]
    assert comp["trigger"] is None and comp["reason"] == "recovered" and comp["pre_tokens"] is None
    assert len(comp["folded_ids"]) == 4
    hook_line = next(c for c in s.calls if c.metadata.get("display_only"))
    assert "\x1b[1mPreToolUse:Write" in hook_line.output
    assert chain(s, s.head)[0] is summary


def test_hook_array_groups_cross_linked_session_ids():
    # hook lines can carry another process's sessionId while hanging on this conversation
    entries = [
        {"type": "user", "uuid": "a", "parentUuid": None, "sessionId": "S1",
         "message": {"role": "user", "content": "hi"}, "timestamp": "2025-01-01T00:00:00Z"},
        {"type": "system", "uuid": "b", "parentUuid": "a", "sessionId": "S2", "content": "hook ok",
         "timestamp": "2025-01-01T00:00:01Z"},
        {"type": "assistant", "uuid": "c", "parentUuid": "b", "sessionId": "S1",
         "message": {"id": "m1", "role": "assistant", "model": "m", "content": [{"type": "text", "text": "hello"}]},
         "timestamp": "2025-01-01T00:00:02Z"},
        {"type": "user", "uuid": "d", "parentUuid": None, "sessionId": "S3",
         "message": {"role": "user", "content": "other conversation"}, "timestamp": "2025-01-01T00:00:03Z"},
    ]
    sessions = parse_claude_code_hook_json("mem.json", data=entries)
    assert sorted(len(s.calls) for s in sessions) == [1, 3]


@pytest.mark.corpus
def test_real_compactions_and_spilled_outputs(corpus_dir):
    path = corpus_dir / "claude_code_jsonl/aistrad_work__4045bfe4-269b-4032-9968-86b3c310fcd0/4045bfe4-269b-4032-9968-86b3c310fcd0.jsonl"
    (s,) = parse_path(path)
    summaries = [c for c in s.calls if "compaction" in c.metadata]
    assert len(summaries) == 2
    by_id = {c.id: c for c in s.calls}
    for summ in summaries:
        comp = summ.metadata["compaction"]
        assert summ.predecessor is None and comp["recorded"] and comp["pre_tokens"] > 0
        assert comp["trigger"] in ("auto", "manual")
        assert all(i in by_id for i in comp["folded_ids"])
        assert summ.output.startswith(SUMMARY_PREFIX)
    assert chain(s, s.head)[0] is summaries[-1]
    spilled = [c for c in s.calls if c.metadata.get("spilled_file")]
    assert len(spilled) == 3
    tr_dir = path.with_suffix("") / "tool-results"
    for c in spilled:
        text = (tr_dir / f"{c.metadata['tool_call_id']}.txt").read_text(encoding="utf-8")
        assert c.output == text


@pytest.mark.corpus
def test_real_subagents_linked(corpus_dir):
    new = corpus_dir / "claude_code_jsonl/WenJ-He_SinglePTZ-FaceTrack__032a96df-f5b8-4b7e-b09e-30af53c1912f/032a96df-f5b8-4b7e-b09e-30af53c1912f.jsonl"
    old = corpus_dir / "claude_code_jsonl/LilLeapo_cccc_clash_test__f84b640b-c091-44bf-9464-71a557d19a1d/f84b640b-c091-44bf-9464-71a557d19a1d.jsonl"
    for path, n_sub in ((new, 2), (old, 7)):
        main, *subs = parse_path(path)
        assert len(subs) == n_sub
        tasks = {c.id for c in main.calls if c.role == "code"}
        linked = [s for s in subs if s.meta["parent"].get("node_id") in tasks]
        # subagents whose Task call is in the file are linked to it (the "Warmup" ones of
        # the old layout were started by the client itself, with no Task call)
        real = [s for s in subs if s.title != "Warmup"]
        assert linked and len(linked) == len(real), path.name
        for s in linked:
            code = next(c for c in main.calls if c.id == s.meta["parent"]["node_id"])
            assert code.metadata["subagent_session_id"] == s.session_id
    main, *subs = parse_path(new)
    assert {s.meta["subagent_meta"]["agentType"] for s in subs} == {"Explore", "general-purpose"}


@pytest.mark.corpus
def test_real_cjk_text_survives(corpus_dir):
    path = corpus_dir / "claude_code_jsonl/aistrad_work__6cf1b78b-d583-41c0-9193-7e078b05f254/6cf1b78b-d583-41c0-9193-7e078b05f254.jsonl"
    (s,) = parse_path(path)
    raw_users = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    texts = [e["message"]["content"] for e in raw_users
             if e.get("type") == "user" and isinstance(e.get("message", {}).get("content"), str)
             and not e.get("isCompactSummary")]
    outputs = [c.output for c in s.calls if c.role == "user"]
    assert texts == outputs


def test_walk_a_claude_projects_folder(tmp_path, db_path):
    import shutil

    from opctx.importers import import_paths, iter_transcript_files

    project = tmp_path / ".claude" / "projects" / "-workspace-shop-api"
    project.mkdir(parents=True)
    shutil.copy(SAMPLE, project / SAMPLE.name)
    shutil.copytree(SAMPLE.with_suffix(""), project / SAMPLE.with_suffix("").name)
    other = tmp_path / ".claude" / "projects" / "-workspace-blog"
    other.mkdir()
    shutil.copy(SAMPLES / "claude_code_hook_chat.json", other / "chat.json")
    files = [f for f, _ in iter_transcript_files([tmp_path / ".claude" / "projects"])]
    # the subagent transcript and the spilled output are read with their session, not alone
    assert [Path(f).name for f in files] == ["chat.json", SAMPLE.name]
    report = import_paths([tmp_path / ".claude" / "projects"], db_path)
    assert report.ok and report.sessions == 3 and not report.ignored
    again = import_paths([tmp_path / ".claude" / "projects"], db_path)
    assert again.sessions == 0 and len(again.existing) == 3


@pytest.mark.corpus
def test_real_compactions_keep_trigger_and_pre_tokens(corpus_dir):
    """Every ``compact_boundary`` of the corpus (JSONL and hook JSON) gives its summary
    node the recording's ``compactMetadata.trigger`` and ``preTokens``, in file order."""
    paths = sorted((corpus_dir / "claude_code_jsonl").rglob("*.jsonl"))
    paths += sorted((corpus_dir / "claude_code_hook_chat_json").glob("*.json"))
    checked = 0
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if "compact_boundary" not in text or "/agent-" in str(path) or "/subagents/" in str(path):
            continue
        if path.suffix == ".json":
            entries = json.loads(text)
        else:
            entries = [json.loads(x) for x in text.splitlines() if x.strip()]
        recorded = [(e["compactMetadata"].get("trigger"), e["compactMetadata"].get("preTokens"))
                    for e in entries if e.get("subtype") == "compact_boundary"]
        comps = [c.metadata["compaction"] for s in parse_path(path) if Path(s.source_path) == path
                 for c in s.calls if "boundary" in c.metadata and "compaction" in c.metadata]
        assert [(c["trigger"], c["pre_tokens"]) for c in comps] == recorded, path.name
        assert [c["reason"] for c in comps] == [t for t, _ in recorded], path.name
        checked += len(recorded)
    assert checked >= 5


def test_duplicate_uuids_warn_with_file_and_line_and_stay_distinct(tmp_path):
    def entry(uid: str, parent: str | None, kind: str, content, n: int) -> dict:
        msg = {"role": kind, "content": content}
        if kind == "assistant":
            msg.update(id=f"m{n}", model="claude-x")
        return {"type": kind, "uuid": uid, "parentUuid": parent, "sessionId": "dup",
                "timestamp": f"2026-01-01T00:00:0{n}Z", "message": msg}

    lines = [entry("a", None, "user", "first question", 1),
             entry("b", "a", "assistant", [{"type": "text", "text": "answer"}], 2),
             entry("c", "b", "user", "follow-up", 3),
             entry("c", "b", "user", "follow-up, written twice", 4),
             entry("d", "c", "assistant", [{"type": "text", "text": "second answer"}], 5)]
    p = tmp_path / "dup.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    (s,) = parse_path(p)
    assert [c.output for c in s.calls] == ["first question", "answer", "follow-up",
                                           "follow-up, written twice", "second answer"]
    first, later, answer = s.calls[2], s.calls[3], s.calls[4]
    assert first.id != later.id and first.predecessor == later.predecessor == s.calls[1].id
    assert "duplicate_uuid" not in first.metadata
    assert later.metadata["duplicate_uuid"] == {"uuid": "c", "first_line": 3}
    assert answer.predecessor == later.id  # written after the later one: hangs on it
    assert any(w.startswith(f"{p}:4: uuid c already used at line 3") for w in s.warnings)
