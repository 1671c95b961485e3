"""Retention probes: the scoring rules, the tool readers, probe_table's strategies and sanity
rows, and the figures on the corpus's recorded Claude Code compactions."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from opctx.dag.providers import ScriptedProvider
from opctx.lab import _tool_facts as tf
from opctx.lab.history import RecordedCompaction, RecordedHistory, as_history
from opctx.lab.judge import DIMENSIONS, LLMJudge, parse_scores
from opctx.lab.probes import (
    FAMILIES,
    Probe,
    cuts_of,
    evaluate,
    extract_probes,
    is_user_request,
    probe_table,
    score_probes,
    strategy_context,
    weak_families,
)
from opctx.lab.scenarios import generate_session
from opctx.lab.summaries import CallSettings, LLMSummaries


def call(cid: str, name: str, **args) -> dict:
    return {"id": f"a-{cid}", "role": "assistant", "content": "", "tool_calls": [{"id": cid, "name": name, "arguments": args}]}


def result(cid: str, content: str, *, error: bool = False, name: str = "") -> dict:
    return {"id": f"r-{cid}", "role": "tool", "tool_call_id": cid, "name": name, "content": content, "is_error": error}


def story() -> list[dict]:
    return [
        {"id": "u1", "role": "user", "content": "Port the parser to https://example.com/spec v2.0.1. Always keep the CLI flags."},
        call("t1", "Read", file_path="/src/app/parser.py"),
        result("t1", "def parse(): ..."),
        call("t2", "Write", file_path="/src/app/lexer.py", content="TOKENS = []"),
        result("t2", "File created"),
        call("t3", "Bash", command="pytest -q tests/test_parser.py"),
        result("t3", "FAILED tests/test_parser.py::test_empty - KeyError: 'x'\nKeyError: 'x'", error=True),
        call("t4", "TodoWrite", todos=[{"content": "Handle empty input in parse()", "status": "pending"}]),
        result("t4", "ok"),
        {"id": "a5", "role": "assistant", "content": "Parser ported; one test still fails."},
        {"id": "u2", "role": "user", "content": "Then fix the empty-input case and rerun the tests."},
        {"id": "a6", "role": "assistant", "content": "On it."},
    ]


# -- extraction ----------------------------------------------------------------------------------


def test_probes_have_families_evidence_and_stable_ids():
    probes = extract_probes(story(), 11)
    kinds = {(p.family, p.kind, p.text) for p in probes}
    assert ("artifact", "file", "/src/app/parser.py") in kinds and ("artifact", "file", "/src/app/lexer.py") in kinds
    assert ("recall", "user_identifier", "v2.0.1") in kinds
    assert ("recall", "user_identifier", "https://example.com/spec") in kinds
    assert ("recall", "error", "KeyError: 'x'") in kinds
    assert ("recall", "failing_command", "pytest -q tests/test_parser.py") in kinds
    assert ("continuation", "plan_item", "Handle empty input in parse()") in kinds
    assert ("continuation", "failing_test", "tests/test_parser.py::test_empty") in kinds
    assert ("continuation", "open_request", "Then fix the empty-input case and rerun the tests.") in kinds
    assert ("instruction", "constraint", "Always keep the CLI flags.") in kinds
    error = next(p for p in probes if p.kind == "error")
    assert error.evidence == ("a-t3", "r-t3") and error.rule == "substring"
    lexer = next(p for p in probes if p.text == "/src/app/lexer.py")
    assert lexer.detail.startswith("created") and lexer.rule == "path"
    assert [p.id for p in extract_probes(story(), 11)] == [p.id for p in probes]
    assert [p.family for p in probes] == sorted((p.family for p in probes), key=FAMILIES.index)


def test_an_answered_request_is_not_open_and_only_history_before_the_cut_counts():
    kinds = {(p.kind, p.text) for p in extract_probes(story())}
    assert not any(k == "open_request" for k, _ in kinds)  # "On it." answered it
    assert {p.text for p in extract_probes(story(), 3)} >= {"/src/app/parser.py"}
    assert not any(p.text == "/src/app/lexer.py" for p in extract_probes(story(), 3))
    assert extract_probes(story(), 0) == []


def test_injected_user_messages_are_not_requests():
    assert is_user_request({"role": "user", "content": "fix it"})
    for text in ("<command-name>/compact</command-name>", "<system-reminder>x</system-reminder>",
                 "<environment_context>cwd</environment_context>", "<returncode>0</returncode>",
                 "This session is being continued from a previous conversation"):
        assert not is_user_request({"role": "user", "content": text})
    assert not is_user_request({"role": "user", "content": "", "extra": {"blocks": [{"type": "tool_result"}]}})


def test_display_only_lines_are_never_read():
    msgs = [{"id": "s", "role": "system", "display_only": True, "content": "Never print secrets. https://x.io/y"}]
    assert extract_probes(msgs) == []


def test_tool_protocol_errors_are_not_recall_probes():
    msgs = [call("t", "Write", file_path="a.py", content=""),
            result("t", "<tool_use_error>File has not been read yet. Read it first.</tool_use_error>", error=True)]
    assert not [p for p in extract_probes(msgs) if p.family == "recall"]


# -- the tool readers ----------------------------------------------------------------------------


@pytest.mark.parametrize("name,args,expected", [
    ("Edit", {"file_path": "a/b.py", "old_string": "x", "new_string": "y"}, [("a/b.py", "modified")]),
    ("MultiEdit", {"file_path": "m.py", "edits": [{"old_string": "1", "new_string": "2"}]}, [("m.py", "modified")]),
    ("NotebookEdit", {"notebook_path": "n.ipynb", "new_source": "x"}, [("n.ipynb", "modified")]),
    ("Write", {"file_path": "w.txt", "content": "x"}, [("w.txt", "created")]),
    ("Read", {"file_path": "r.md"}, [("r.md", "read")]),
    ("str_replace_editor", {"command": "view", "path": "/r/v.py"}, [("/r/v.py", "read")]),
    ("str_replace_editor", {"command": "create", "path": "/r/c.py", "file_text": "x"}, [("/r/c.py", "created")]),
    ("str_replace_editor", {"command": "insert", "path": "/r/i.py", "new_str": "x"}, [("/r/i.py", "modified")]),
    ("read", {"path": "/w/x.py"}, [("/w/x.py", "read")]),  # OpenHands before function calling
    ("write", {"path": "/w/y.py", "content": "x"}, [("/w/y.py", "created")]),
    ("patch", {"mode": "replace", "path": "h.py", "old_string": "a", "new_string": "b"}, [("h.py", "modified")]),
    ("apply_patch", {"input": "*** Begin Patch\n*** Delete File: old.py\n*** Update File: u.py\n@@\n-a\n+b\n*** End Patch"},
     [("old.py", "deleted"), ("u.py", "modified")]),
    ("shell", {"command": ["bash", "-lc", "echo hi > out.log"]}, [("out.log", "created")]),
    ("exec_command", {"cmd": "sed -i 's/a/b/' conf.ini"}, [("conf.ini", "modified")]),
    ("Bash", {"command": "mv a.txt b.txt && cp src/x.py dst/"}, [("a.txt", "deleted"), ("b.txt", "created"),
                                                                   ("src/x.py", "read"), ("dst/x.py", "created")]),
    ("run_ipython", {"code": "print(open('k.py').read())"}, []),
    ("Grep", {"pattern": "x", "path": "src"}, []),
])
def test_file_touches_per_tool(name, args, expected):
    assert [(t.path, t.action) for t in tf.file_touches(name, args)] == expected


def test_swe_agent_edit_changes_the_open_file():
    assert [(t.path, t.action) for t in tf.file_touches("edit", {"start_line": 1, "end_line": 2, "replacement_text": "x"},
                                                     open_file="/repo/calc.py")] == [("/repo/calc.py", "modified")]
    msgs = [call("o", "open", path="/repo/calc.py"), result("o", "[File: /repo/calc.py]"),
            call("e", "edit", start_line=1, end_line=2, replacement_text="x"), result("e", "ok")]
    files = {p.text: p.detail for p in extract_probes(msgs) if p.family == "artifact"}
    assert files["/repo/calc.py"].startswith("modified")


def test_aider_edit_blocks_and_plans():
    text = "Change:\n\nsrc/app.py\n```python\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n```"
    assert [(t.path, t.action) for t in tf.aider_edit_touches(text)] == [("src/app.py", "modified")]
    assert [i.text for i in tf.plan_items("update_plan", {"plan": [{"step": "a", "status": "completed"},
                                                                   {"step": "b", "status": "pending"}]}) if tf.is_open(i)] == ["b"]
    assert tf.plan_items("Read", {}) is None


def test_claude_code_tasks_follow_create_and_update():
    msgs = [call("c1", "TaskCreate", subject="Write the migration", description="d", activeForm="Writing"),
            result("c1", "Task #1 created successfully: Write the migration"),
            call("c2", "TaskCreate", subject="Update the docs", description="d", activeForm="Updating"),
            result("c2", "Task #2 created successfully: Update the docs"),
            call("c3", "TaskUpdate", taskId="1", status="completed"), result("c3", "ok")]
    assert [p.text for p in extract_probes(msgs) if p.kind == "plan_item"] == ["Update the docs"]


@pytest.mark.parametrize("msg,text,code", [
    ({}, "Exit code: 2\nOutput:\nboom", 2),
    ({}, "<returncode>1</returncode>\n<output>x</output>", 1),
    ({}, '{"output": "fine", "exit_code": 0}', 0),
    ({}, '{"output":"Success","metadata":{"exit_code":3}}', 3),
    ({"event": {"extras": {"metadata": {"exit_code": 1}}}}, "boom", 1),
    ({"extras": {"exit_code": -1}}, "still running", None),
    ({}, "plain text", None),
])
def test_tool_output_exit_codes(msg, text, code):
    assert tf.tool_output(msg, text)[1] == code


# -- scoring -------------------------------------------------------------------------------------


def test_path_rule_matches_the_path_or_a_trailing_part_but_not_a_longer_name():
    probe = Probe("artifact", "file", "/home/u/proj/src/app.py", "path")
    for text, kept in [("edited src/app.py", True), ("`/home/u/proj/src/app.py`", True), ("see app.py", False),
                       ("src/app.pyc changed", False), ("proj/src/app.py/x", False), ("\"src\\\\app.py\"", False)]:
        (score,) = score_probes([probe], [{"role": "user", "content": text}])
        assert score.retained is kept, text
    (score,) = score_probes([probe], [{"id": "k", "role": "user", "content": "we changed src/app.py today"}])
    assert score.where == "k" and "src/app.py" in score.matched


def test_substring_rule_ignores_case_quotes_and_spacing():
    probe = Probe("recall", "error", "KeyError: 'missing key'", "substring")
    assert score_probes([probe], [{"role": "user", "content": "a   keyerror:  “missing key” happened"}])[0].retained
    assert not score_probes([probe], [{"role": "user", "content": "KeyError: other"}])[0].retained


def test_overlap_rule_needs_most_tokens_in_one_place():
    probe = Probe("instruction", "constraint", "Never push to the main branch without review", "overlap")
    near = [{"role": "user", "content": "Rules:\nnever push directly to main branch\nwithout a review"}]
    far = [{"role": "user", "content": "never push"}, {"role": "user", "content": "main branch"},
           {"role": "user", "content": "without review"}]
    kept = score_probes([probe], near)[0]
    assert kept.retained and kept.overlap >= 0.6 and "main branch" in kept.matched
    assert not score_probes([probe], far)[0].retained
    cjk = Probe("instruction", "constraint", "不要修改测试文件", "overlap")
    assert score_probes([cjk], [{"role": "user", "content": "记住：不要修改任何测试文件"}])[0].retained


def test_a_summary_message_is_named_as_such():
    probe = Probe("recall", "user_identifier", "v2.0.1", "substring")
    (score,) = score_probes([probe], [{"role": "user", "type": "compactionSummary", "content": "target v2.0.1"}])
    assert score.where == "summary"


# -- the table -----------------------------------------------------------------------------------


def recorded_history(summary: str = "Ported the parser; /src/app/lexer.py written; KeyError: 'x' remains.") -> RecordedHistory:
    msgs = story()
    comp = RecordedCompaction(stream_index=11, node_id="S", summary_text=summary, protected_ids=["u1"])
    return RecordedHistory(msgs, [comp], session_id="demo", model="claude-sonnet-4-5")


def test_probe_table_rows_and_sanity_bounds():
    ev = evaluate([recorded_history()], ["recorded", "structural", "masking", "keep-all", "drop-all", "default"])
    t = ev.table
    assert set(t["strategy"]) == {"recorded", "structural", "masking", "keep-all", "drop-all", "default"}
    assert len(t) == 6 * len(FAMILIES) and set(t["family"]) == set(FAMILIES)
    assert ev.keep_all_ok
    keep = t[t.strategy == "keep-all"].set_index("family")
    assert (keep["retention"].dropna() == 1.0).all()
    drop = t[(t.strategy == "drop-all")]
    assert drop["retained"].sum() == 0  # the next request restates nothing
    rec = t[t.strategy == "recorded"].set_index("family")
    assert rec.loc["artifact", "retained"] == 1 and rec.loc["instruction", "retained"] == 1  # protected u1
    assert (t.groupby("strategy")["context_tokens"].first()["keep-all"]
            > t.groupby("strategy")["context_tokens"].first()["recorded"])
    assert set(ev.scores.columns) >= {"probe_id", "family", "text", "evidence", "rule", "retained", "matched", "where"}
    report = ev.report()
    assert set(report) == {"strategies", "probes_per_cut_median", "weak_families"}
    assert set(report["strategies"]["recorded"]) == {"retention_pct", "context_tokens_median", "cuts"}
    json.dumps(report)


def test_drop_all_that_keeps_a_family_marks_it_weak():
    msgs = story()[:11] + [{"id": "u3", "role": "user", "content": "reminder: Always keep the CLI flags."},
                           {"id": "a9", "role": "assistant", "content": "ok"}]
    h = RecordedHistory(msgs, [RecordedCompaction(stream_index=11, node_id="S", summary_text="s")], session_id="w")
    t = probe_table([h], ["drop-all"])
    assert weak_families(t) == ["instruction"]


def test_cuts_at_stream_indices_and_codex_summaries_left_out():
    h = recorded_history()
    assert [c.index for c in cuts_of(h)] == [11]
    assert [c.index for c in cuts_of(h, [4, 99, 0])] == [4]
    codex = RecordedHistory(h.messages, h.compactions, format="codex")
    assert cuts_of(codex) == []
    cut = cuts_of(h, [4])[0]
    with pytest.raises(ValueError, match="no recorded compaction"):
        strategy_context(cut, "recorded")
    with pytest.raises(ValueError, match="unknown strategy"):
        strategy_context(cut, "bogus")


def test_llm_strategy_and_its_fallback():
    ok = LLMSummaries(ScriptedProvider(["Wrote /src/app/lexer.py; KeyError: 'x' open."]), "m", cache=False)
    t = probe_table([recorded_history()], ["recorded"], summaries=ok)
    row = t[(t.strategy == "llm") & (t.family == "artifact")].iloc[0]
    assert row["summary"] == "llm:opctx:m" and not row["fell_back"] and row["retained"] == 1
    assert row["summary_input_tokens"] > 0 and row["summary_output_tokens"] > 0
    # a preset given the summariser counts what its own summary call cost too
    session = generate_session(21, n_turns=25).messages
    ok = LLMSummaries(ScriptedProvider(["Wrote calc.py."] * 3), "m", cache=False)
    t = probe_table([session], ["default"], summaries=ok, cuts=[60], context_window=40_000)
    row = t[(t.strategy == "default") & (t.family == "artifact")].iloc[0]
    assert row["summary"] == "llm:opctx:m" and not row["fell_back"] and row["summary_input_tokens"] > 0
    failing = LLMSummaries(lambda *a: (_ for _ in ()).throw(RuntimeError("down")), "m", cache=False,
                           settings=CallSettings(retries=0))
    t = probe_table([recorded_history()], ["keep-all"], summaries=failing)
    rows = t[t.strategy == "llm"]
    assert rows["fell_back"].all() and rows["error"].str.contains("RuntimeError: down").all()


def test_preset_strategy_runs_the_engine_at_the_cut():
    h = RecordedHistory(story(), [], session_id="p", model="claude-sonnet-4-5")
    ctx = strategy_context(cuts_of(h, [11])[0], "default", context_window=8_000)
    assert ctx.messages and ctx.summary in ("structural", "none")


def test_judge_scores_through_the_same_endpoint():
    answer = json.dumps({d: 4 for d in DIMENSIONS})
    llm = LLMSummaries(ScriptedProvider([answer] * 10), "judge-m", cache=False)
    t = probe_table([recorded_history()], ["recorded", "drop-all"], judge=LLMJudge(llm))
    assert (t["judge_continuity"] == 4.0).all() and t["judge_error"].isna().all()
    bad = LLMSummaries(ScriptedProvider(["I cannot grade this."]), "judge-m", cache=False)
    verdict = LLMJudge(bad).judge([], [{"role": "user", "content": "x"}])
    assert verdict.error.startswith("ValueError") and math.isnan(verdict.columns()["judge_accuracy"])
    assert parse_scores('noise {"accuracy": 9, "continuity": "high"} tail')["accuracy"] == 5.0


# -- the corpus ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def claude_code_compactions(corpus_dir):
    importers = pytest.importorskip("opctx.importers")
    manifest = json.loads((corpus_dir / "manifest.json").read_text(encoding="utf-8"))
    histories = []
    for entry in manifest:
        stats = entry.get("stats", {})
        n = max(stats.get("compact_boundary") or 0, stats.get("compact_summary") or 0)
        if n and entry["format"] in ("claude_code_jsonl", "claude_code_hook_chat_json"):
            histories += [h for h in (as_history(s) for s in importers.parse_path(corpus_dir / entry["file"], on_error="skip"))
                          if h.compactions]
    return histories


@pytest.mark.corpus
def test_probes_on_the_recorded_claude_code_compactions(claude_code_compactions):
    comps = [(h, c) for h in claude_code_compactions for c in h.compactions]
    assert len(comps) == 16  # 14 in the JSONL transcripts, 2 in the hook dumps
    counts = [len(extract_probes(h.messages, c.stream_index)) for h, c in comps]
    assert sum(1 for n in counts if n) / len(counts) >= 0.90
    assert statistics.median([n for n in counts if n]) >= 10 and statistics.median(counts) >= 10


@pytest.mark.corpus
@pytest.mark.slow
def test_keep_all_and_weak_families_on_the_corpus(claude_code_compactions):
    ev = evaluate(claude_code_compactions, ["recorded", "structural", "keep-all", "drop-all"])
    assert ev.keep_all_ok
    assert len(ev.weak_families()) <= 1
    share = ev.retention()
    assert (share.loc["keep-all"] == 1.0).all()
    # the client's own summaries keep more than opctx's one-line-per-message fallback
    assert share.loc["recorded"].mean() > share.loc["structural"].mean()
