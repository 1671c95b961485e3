"""``aging_fidelity_table``: recorded microcompactions vs the claude-code preset's model of them."""

from __future__ import annotations

import pytest
from _microcompact_sample import BOUNDARY_UUID, tool_id, write_sample

from opctx.importers.claude_code import parse_claude_code_jsonl
from opctx.lab import aging_fidelity_summary, aging_fidelity_table, recorded_microcompactions
from opctx.lab.aging_fidelity import simulate_microcompaction
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
    # previous request 150K >= 147K; 6 Read results of 10K tokens, the last 3 kept:
    # clearing the two oldest leaves 40K and saves 20K, exactly what the sample records
    table = aging_fidelity_table([_session(tmp_path, n_cleared=2)], mode="resync")
    assert len(table) == 1
    row = table.iloc[0]
    assert row["recorded_request"] == 7 and row["recorded_context_tokens"] == 150_000
    assert row["recorded_pre_tokens"] == 60_000 and row["recorded_tokens_saved"] == 20_000
    assert row["claude-code_delta_requests"] == 0 and row["claude-code_request"] == 7
    assert row["claude-code_jaccard"] == 1.0
    assert row["claude-code_tokens_saved"] == 20_000 and row["claude-code_pre_tokens"] == 60_000
    assert row["claude-code_warning_tokens"] == 147_000 and row["mode"] == "resync"


def test_resync_misses_are_rows_too(tmp_path):
    # the previous request was far below the threshold: the model does not clear there
    table = aging_fidelity_table([_session(tmp_path, usage_before=100_000)], mode="resync")
    row = table.iloc[0]
    assert row["claude-code_jaccard"] == 0.0
    assert row["claude-code_delta_requests"] is None or str(row["claude-code_delta_requests"]) == "<NA>"
    summary = aging_fidelity_summary(table)["claude-code"]
    assert summary == {**summary, "rows": 1, "predicted": 0, "within_one_request": 0}


def test_free_mode_has_the_same_columns(tmp_path):
    session = _session(tmp_path, n_cleared=2)
    free = aging_fidelity_table([session], mode="free")
    resync = aging_fidelity_table([session], mode="resync")
    assert list(free.columns) == list(resync.columns)
    assert free["mode"].iloc[0] == "free"
    # the preset's replay clears where the recording did: its ager reads the provider's counts
    row = free.iloc[0]
    assert row["claude-code_delta_requests"] == 0 and row["claude-code_jaccard"] == 1.0
    assert row["claude-code_tokens_saved"] == 20_000
    # the engine-free variant runs on the estimate (+ the overhead measured at the first request)
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
    with pytest.raises(ValueError, match="fit"):
        aging_fidelity_table([session], fit="all")


def test_loso_threshold_comes_from_the_other_groups(tmp_path):
    a = _session(tmp_path, n_cleared=2)
    b = _session(tmp_path, session=OTHER, boundary_uuid="b0000000-0000-4000-8000-0000000000b2",
                 usage_before=160_000, n_cleared=2)
    table = aging_fidelity_table([a, b], fit="loso")
    by_session = table.set_index("session_id")
    # each session runs with the smallest context the *other* one was seen clearing at
    assert by_session.loc[a.session_id, "claude-code_warning_tokens"] == 160_000
    assert by_session.loc[b.session_id, "claude-code_warning_tokens"] == 150_000
    assert by_session["group"].nunique() == 2
    # two files of one session (same boundary uuid) are one group: nothing left to fit on
    twin = _session(tmp_path / "twin", n_cleared=2)
    pair = aging_fidelity_table([a, twin], fit="loso")
    assert pair["group"].nunique() == 1
    assert (pair["claude-code_warning_tokens"] == 147_000).all()


def test_corpus_figures(corpus_dir):
    """The figures docs/lab.md quotes (benchmarks/aging_fidelity.py prints them)."""
    files = sorted(p for p in (corpus_dir / "claude_code_jsonl").glob("*/*.jsonl")
                   if b"microcompact_boundary" in p.read_bytes())
    sessions = [parse_claude_code_jsonl(str(p), with_subagents=False)[0] for p in files]
    resync = aging_fidelity_table(sessions, mode="resync")
    free = aging_fidelity_table(sessions, mode="free")
    # 15 lines, 14 distinct uuids; two lines sit on branches the session left (rewound)
    assert len(resync) == len(free) == 13
    for table in (resync, free):
        summary = aging_fidelity_summary(table)["claude-code"]
        assert summary["within_one_request"] >= 11
        assert summary["median_jaccard"] >= 0.8
