"""``aging_fidelity_table``: recorded microcompactions vs the claude-code preset's model of them."""

from __future__ import annotations

import pytest
from _microcompact_sample import BOUNDARY_UUID, tool_id, write_sample

from opctx.importers.claude_code import parse_claude_code_jsonl
from opctx.lab import aging_fidelity_summary, aging_fidelity_table, recorded_microcompactions
from opctx.lab.aging_fidelity import silent_clearings, simulate_microcompaction
from opctx.lab.history import as_history
from opctx.lab.microcompact import MicrocompactRule

OTHER = "5e551011-0000-4000-8000-00000000b0b0"


def _session(tmp_path, **kw):
    folder = tmp_path / kw.get("session", "main")
    folder.mkdir(parents=True, exist_ok=True)
    return parse_claude_code_jsonl(str(write_sample(folder, **kw)))[0]


def test_recorded_points(tmp_path):
    history = as_history(_session(tmp_path, n_cleared=2))
    (point,) = recorded_microcompactions(history)
    assert point["uuid"] == BOUNDARY_UUID and point["request"] == 7
    assert point["tool_call_ids"] == [tool_id(0), tool_id(2)]
    assert point["client_version"] == "2.1.15"


def test_resync_reproduces_a_boundary_the_rule_explains(tmp_path):
    # previous response 150,050 >= 135,000 (2.1.15, auto-compaction on); 6 Read results of 10K
    # tokens, the last 3 kept: clearing the two oldest leaves 40K and saves 20K, as recorded
    table = aging_fidelity_table([_session(tmp_path, n_cleared=2)], mode="resync")
    assert len(table) == 1
    row = table.iloc[0]
    assert row["recorded_request"] == 7 and row["recorded_context_tokens"] == 150_050
    assert row["recorded_pre_tokens"] == 60_000 and row["recorded_tokens_saved"] == 20_000
    assert row["claude-code_delta_requests"] == 0 and row["claude-code_request"] == 7
    assert row["claude-code_jaccard"] == 1.0 and row["claude-code_exact_set"] and row["source"] == "boundary"
    assert row["claude-code_tokens_saved"] == 20_000 and row["claude-code_pre_tokens"] == 60_000
    assert row["claude-code_warning_tokens"] == 135_000 and row["mode"] == "resync"
    assert row["claude-code_rule"] == "claude-code 2.1.15"


def test_resync_misses_are_rows_too(tmp_path):
    # the previous request was far below the threshold: the model does not clear there
    table = aging_fidelity_table([_session(tmp_path, usage_before=100_000)], mode="resync")
    row = table.iloc[0]
    # an unpredicted row is scored like the others: no overlap, nothing saved (a 100 % error)
    assert row["claude-code_jaccard"] == 0.0 and not row["claude-code_predicted"]
    assert row["claude-code_tokens_saved"] == 0 and not row["claude-code_exact_set"]
    assert row["claude-code_delta_requests"] is None or str(row["claude-code_delta_requests"]) == "<NA>"
    summary = aging_fidelity_summary(table)["claude-code"]
    assert summary == {**summary, "rows": 1, "predicted": 0, "within_one_request": 0, "exact_set": 0,
                       "median_tokens_saved_error": 1.0}


def test_free_mode_has_the_same_columns(tmp_path):
    # 140,000 before the clearing: above the warning (135,000), and with the result appended
    # since (2.1.2+ adds it) still under the 155,000 trigger, so the replay clears, not compacts
    session = _session(tmp_path, n_cleared=2, usage_before=140_000)
    free = aging_fidelity_table([session], mode="free")
    resync = aging_fidelity_table([session], mode="resync")
    assert list(free.columns) == list(resync.columns)
    assert free["mode"].iloc[0] == "free"
    # the preset's replay clears where the recording did: its ager reads the provider's counts
    row = free.iloc[0]
    assert row["claude-code_delta_requests"] == 0 and row["claude-code_jaccard"] == 1.0
    assert row["claude-code_tokens_saved"] == 20_000
    # the engine-free variant: the rule over the recording's counts, its own cleared set
    events = simulate_microcompaction(session)
    assert events and all(e.tokens_saved >= 20_000 for e in events)


def test_variant_rules_and_bad_arguments(tmp_path):
    session = _session(tmp_path, n_cleared=2)
    strict = MicrocompactRule(warning_tokens=10**9)
    table = aging_fidelity_table([session], presets=("claude-code", ("never", strict)))
    assert table["never_jaccard"].iloc[0] == 0.0 and table["claude-code_jaccard"].iloc[0] == 1.0
    with pytest.raises(ValueError, match="mode"):
        aging_fidelity_table([session], mode="sometimes")
    with pytest.raises(ValueError, match="claude-code"):
        aging_fidelity_table([session], presets=("hermes",))
    with pytest.raises(ValueError, match="settings"):
        aging_fidelity_table([session], settings="guess")


def test_loso_settings_come_from_the_other_groups(tmp_path):
    # a cleared after a check of 140,050: only the threshold of auto-compaction on (135,000) says so
    a = _session(tmp_path, n_cleared=2, usage_before=140_000)
    # b ran past 155,000 (with what came after its last response) without compacting: off
    b = _session(tmp_path, session=OTHER, boundary_uuid="b0000000-0000-4000-8000-0000000000b2",
                 usage_before=160_000, n_cleared=2)
    own = aging_fidelity_table([a, b], settings="recording").set_index("session_id")
    assert own.loc[a.session_id, "claude-code_warning_tokens"] == 135_000
    assert own.loc[b.session_id, "claude-code_warning_tokens"] == 148_000
    assert "without a compaction" in own.loc[b.session_id, "settings_evidence"]
    # leave-one-session-out: each runs with what the *other* shows
    table = aging_fidelity_table([a, b], settings="loso").set_index("session_id")
    assert table.loc[a.session_id, "claude-code_warning_tokens"] == 148_000
    assert table.loc[b.session_id, "claude-code_warning_tokens"] == 135_000
    assert not table.loc[a.session_id, "claude-code_predicted"]  # a's own setting was the other one
    assert table["group"].nunique() == 2
    # two files of one session (same boundary uuid) are one group: nothing left to learn from
    twin = _session(tmp_path / "twin", n_cleared=2, usage_before=140_000)
    pair = aging_fidelity_table([a, twin], settings="loso")
    assert pair["group"].nunique() == 1
    assert (pair["claude-code_warning_tokens"] == 135_000).all()


def test_saved_results_mark_a_silent_clearing(tmp_path):
    """A client that writes no line saves what it cleared to tool-results/<id>.txt."""
    import json

    folder = tmp_path / "silent"
    folder.mkdir()
    path = write_sample(folder, n_cleared=2)
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    boundary = next(x for x in lines if x.get("subtype") == "microcompact_boundary")
    cleared = boundary["microcompactMetadata"]["compactedToolIds"]
    lines.remove(boundary)
    for line in lines:
        line["version"] = "2.0.76"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    saved = folder / path.stem / "tool-results"
    saved.mkdir(parents=True)
    by_id = {b["tool_use_id"]: b["content"] for x in lines if x.get("type") == "user"
             for b in (x["message"]["content"] if isinstance(x["message"]["content"], list) else [])
             if isinstance(b, dict) and b.get("type") == "tool_result"}
    for tid in cleared:
        (saved / f"{tid}.txt").write_text(by_id[tid], encoding="utf-8")
    history = as_history(parse_claude_code_jsonl(str(path))[0])
    assert recorded_microcompactions(history) == []
    (point,) = silent_clearings(history)
    # placed before the request whose provider count fell: a-end (150,000 -> 120,000)
    assert point["source"] == "saved results" and point["request"] == 7
    assert sorted(point["tool_call_ids"]) == sorted(cleared)
    row = aging_fidelity_table([history], settings="default").iloc[0]
    assert row["claude-code_delta_requests"] == 0 and row["claude-code_exact_set"]
    assert aging_fidelity_table([history], silent=False).empty


def test_corpus_figures(corpus_dir):
    """The figures docs/lab.md quotes (benchmarks/aging_fidelity.py prints them)."""
    files = sorted(p for p in (corpus_dir / "claude_code_jsonl").glob("*/*.jsonl")
                   if b"microcompact_boundary" in p.read_bytes())
    sessions = [parse_claude_code_jsonl(str(p), with_subagents=False)[0] for p in files]
    resync = aging_fidelity_table(sessions, mode="resync")
    free = aging_fidelity_table(sessions, mode="free")
    # 15 lines, 14 distinct uuids; two lines sit on branches the session left (rewound)
    lines = resync[resync["source"] == "boundary"]
    assert len(lines) == 13 and len(resync) == len(free)
    summary = aging_fidelity_summary(lines)["claude-code"]
    # settings from the other sessions (leave-one-session-out): every line on its request but one
    assert summary["exact_request"] >= 12 and summary["exact_set"] >= 12
    free_summary = aging_fidelity_summary(free[free["source"] == "boundary"])["claude-code"]
    assert free_summary["within_one_request"] >= 10 and free_summary["median_jaccard"] >= 0.8


def test_the_benchmark_prints_a_line_per_clearing(tmp_path, capsys):
    import importlib.util
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("aging_benchmark", root / "benchmarks" / "aging_fidelity.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["aging_benchmark"] = bench
    spec.loader.exec_module(bench)
    write_sample(tmp_path, n_cleared=2)
    assert bench.main(["--corpus", str(tmp_path), "--modes", "resync", "--rows"]) == 0
    out = capsys.readouterr().out
    assert "resync/loso/boundary" in out and "| cc-5e551011 | boundary | 2.1.15 | 7 |" in out
    assert bench.main(["--corpus", str(tmp_path), "--modes", "resync", "--json", "--rows"]) == 0
    report = json.loads(capsys.readouterr().out)
    (row,) = report["rows"]["resync/loso"]
    assert row["claude-code_delta_requests"] == 0 and row["claude-code_exact_set"] is True
