"""Fidelity: where recordings compacted vs where the presets would, free and resynchronised."""

from __future__ import annotations

import json

import pytest

from opctx.context.tokens import Estimator
from opctx.lab.calibrate import simulated_recording
from opctx.lab.fidelity import (
    MODES,
    fidelity_predictions,
    fidelity_summary,
    fidelity_table,
    recorded_compaction_points,
)
from opctx.lab.history import RecordedHistory, as_history, recorded_branches

# -- synthetic recordings with a known trigger ------------------------------------------------------


@pytest.fixture(scope="module")
def manual_then_auto():
    """A 2.0.76-like client (trigger 155,000): a manual /compact early, then automatic ones."""
    return simulated_recording(155_000, requests=130, seed=3, manual_at=(10,))


def test_resync_predicts_each_compaction_from_the_context_after_the_previous(manual_then_auto):
    hist = manual_then_auto
    assert [c.trigger for c in hist.compactions] == ["manual", "auto", "auto"]
    tables = {mode: fidelity_table([hist], presets=("claude-code",), mode=mode, aging=False) for mode in MODES}
    assert list(tables["resync"].columns) == list(tables["free"].columns)
    assert set(tables["resync"]["mode"].astype(str)) == {"resync"}
    for table in tables.values():
        assert (table["claude-code_trigger_tokens"] == 155_000).all()  # the recording's version, 2.0.76
    auto = {mode: t[t["trigger"].astype(str) == "auto"] for mode, t in tables.items()}
    # the replay checks the last response's count, as the client does: the same request
    assert set(auto["resync"]["claude-code_delta_requests"]) == {0}
    # from the start, the replay never had the manual compaction: every later row is off
    free = auto["free"]["claude-code_delta_requests"]
    assert (free.isna() | (free.abs() > 1)).all()
    summary = {mode: fidelity_summary(t, by_version=False).iloc[0] for mode, t in tables.items()}
    assert summary["resync"]["share_within_one"] == 1.0 and summary["free"]["share_within_one"] == 0.0
    # resync decides as the client does, over the recording's own counts
    assert set(tables["resync"]["claude-code_method"]) == {"client-check"}
    assert summary["resync"]["precision"] == 1.0 and summary["resync"]["recall"] == 1.0


def test_estimated_tokens_is_the_request_at_that_point(manual_then_auto):
    hist = manual_then_auto
    points = recorded_compaction_points(hist)
    estimator = Estimator()
    second = points[1]
    # the agent's context then: the manual compaction's summary and everything since
    seg = hist.resume_after(0)
    upto = second["recorded_index"] - seg.stream_start + seg.prefix_len
    expected = sum(estimator.message_tokens(m, hist.model) for m in seg.messages[:upto])
    assert second["estimated_tokens"] == expected
    third = points[2]
    cumulative = sum(estimator.message_tokens(m, hist.model) for m in hist.messages[: third["recorded_index"]])
    assert third["estimated_tokens"] < cumulative / 2  # not the whole session so far
    assert second["segment_start"] == hist.compactions[0].stream_index
    # the provider figures of the check that compacted and of the one before it
    assert second["recorded_last_total"] == second["recorded_pre_tokens"] >= 155_000 > second["previous_total"]


def test_presets_get_the_recordings_client_version():
    old = simulated_recording(155_000, requests=70, seed=4, version="2.0.76")
    new = simulated_recording(155_000, requests=70, seed=4, version="2.1.30")
    for hist, trigger in ((old, 155_000), (new, 167_000)):
        table = fidelity_table([hist], presets=("claude-code", "hermes"), aging=False)
        assert (table["claude-code_trigger_tokens"] == trigger).all()
        assert table["hermes_trigger_tokens"].isna().all()
        assert table["client_version"].tolist() == [hist.client_version] * len(table)
        assert table["claude-code_rule_known"].all() and table["claude-code_rule_source"].str.contains("cli.js").all()
    with pytest.raises(ValueError, match="mode"):
        fidelity_table([old], mode="sideways")


def test_the_trigger_shown_is_the_one_that_ran():
    hist = simulated_recording(123_000, requests=70, seed=4, version="2.0.76")
    table = fidelity_table([hist], presets=("claude-code",), max_output_tokens=64_000)
    # CLAUDE_CODE_MAX_OUTPUT_TOKENS=64000: 200,000 - 64,000 - 13,000, and it is where the client compacted
    assert (table["claude-code_trigger_tokens"] == 123_000).all()
    auto = table[table["trigger"].astype(str) == "auto"]
    assert set(auto["claude-code_delta_requests"]) == {0}


def test_a_version_without_a_sourced_rule_is_a_miss_and_says_so():
    hist = simulated_recording(167_000, requests=70, seed=4, version="0.2.125")
    table = fidelity_table([hist], presets=("claude-code",))
    assert not table["claude-code_rule_known"].any()
    assert table["claude-code_rule"].str.startswith("no sourced rule for claude-code '0.2.125'").all()
    # the replay fires where the default rule says, but the row does not count
    assert (table["claude-code_delta_requests"].abs() <= 1).all()
    summary = fidelity_summary(table, by_version=False).iloc[0]
    assert summary["within_one_request"] == 0 and summary["recall"] == 0.0
    assert set(fidelity_predictions(table)["outcome"]) == {"unsourced"}


def test_sessions_that_never_compacted_are_negative_evidence():
    # a client with auto-compaction off runs past the trigger: every firing is a false positive
    off = simulated_recording(155_000, requests=90, seed=6, auto_compact=False, session_id="off")
    on = simulated_recording(155_000, requests=90, seed=7, session_id="on")
    table = fidelity_table([off, on], presets=("claude-code",), settings="default")
    assert set(table["session"]) == {"on"}  # rows: recorded compactions only
    predictions = fidelity_predictions(table)
    fp = predictions[predictions["outcome"] == "false positive"]
    assert set(fp["session"]) == {"off"} and len(fp) == 1  # one per segment: the first firing
    summary = fidelity_summary(table, by_version=False).iloc[0]
    hits = int((predictions["outcome"] == "hit").sum())
    assert summary["false_positives"] == 1 and summary["precision"] == pytest.approx(hits / (hits + 1))
    # read off each recording, the off session is off: no firing, no false positive
    own = fidelity_predictions(fidelity_table([off, on], presets=("claude-code",), settings="recording"))
    assert not (own["outcome"] == "false positive").any()
    free = fidelity_predictions(fidelity_table([off, on], presets=("claude-code",), mode="free",
                                               settings="default", aging=False))
    assert (free[free["session"] == "off"]["outcome"] == "false positive").all()


def test_each_preset_is_scored_on_its_own_client():
    cc = simulated_recording(155_000, requests=70, seed=4)
    codex = simulated_recording(244_800, requests=200, seed=4, client="codex", version="0.77.0")
    table = fidelity_table([cc, codex])
    # by default a client preset runs on its own client's recordings only
    assert table.loc[table["client"].astype(str) == "codex", "claude-code_matched"].isna().all() or \
        not table.loc[table["client"].astype(str) == "codex", "claude-code_matched"].any()
    summary = fidelity_summary(table, by_version=False).set_index("preset")
    assert summary.loc["claude-code", "client"] == "claude-code" and summary.loc["codex", "client"] == "codex"
    assert summary.loc["claude-code", "automatic"] == int((table["client"].astype(str) == "claude-code").sum())
    everything = fidelity_table([cc, codex], foreign=True)
    assert everything.loc[everything["client"].astype(str) == "codex", "claude-code_window"].notna().all()


def test_a_session_resumed_from_before_a_compaction_is_built_from_its_real_parent(tmp_path):
    from _resumed_sample import write_resumed

    from opctx.importers.claude_code import parse_claude_code_jsonl

    session = parse_claude_code_jsonl(str(write_resumed(tmp_path)))[0]
    main, branch = recorded_branches(session)
    # HEAD is on the resumed branch: its stream runs to the fork point, then the new lines
    ids = [m["id"] for m in main.messages]
    assert branch.session_id.endswith("#branch-1") and len(main.compactions) == len(branch.compactions) == 1
    fork = next(m for m in main.messages if m.get("content") == "go on from here, differently")
    assert "post0" not in " ".join(str(m.get("tool_call_id")) for m in main.messages[: ids.index(fork["id"])])
    table = fidelity_table([session], presets=("claude-code",))
    # both compactions, each from the context the client really had: same request, no flag
    assert len(table) == 2 and (table["claude-code_delta_requests"] == 0).all()
    assert not table["context_flag"].any()
    pre = table["recorded_pre_tokens"].tolist()
    assert abs(pre[0] - pre[1]) <= 5_000


def test_a_stream_that_misses_what_the_client_sent_is_flagged():
    hist = simulated_recording(155_000, requests=70, seed=4)
    first = hist.compactions[0].stream_index
    # drop half of the stream before the compaction, as a branch attached to the wrong parent would
    cut = [m for i, m in enumerate(hist.messages) if not (first // 3 <= i < 2 * first // 3)
           or m.get("role") == "assistant"]
    shift = len(hist.messages) - len(cut)
    broken = RecordedHistory(messages=cut, compactions=[
        type(c)(**{**c.__dict__, "stream_index": c.stream_index - shift}) for c in hist.compactions],
        model=hist.model, format=hist.format, session_id="broken", meta=hist.meta)
    row = recorded_compaction_points(broken)[0]
    assert row["context_flag"] and "holds less than the client sent" in row["context_reason"]
    assert not recorded_compaction_points(hist)[0]["context_flag"]


# -- the real corpus --------------------------------------------------------------------------------


def _compacting_files(corpus_dir):
    manifest = json.loads((corpus_dir / "manifest.json").read_text(encoding="utf-8"))
    out = []
    for entry in manifest:
        stats = entry.get("stats", {})
        n = max(stats.get("compact_boundary") or 0, stats.get("compact_summary") or 0, stats.get("compacted") or 0)
        if n and entry["format"] in ("claude_code_jsonl", "claude_code_hook_chat_json", "codex_rollout_jsonl"):
            out.append((corpus_dir / entry["file"], n))
    return out


@pytest.fixture(scope="module")
def histories(corpus_dir):
    importers = pytest.importorskip("opctx.importers")
    files = _compacting_files(corpus_dir)
    assert files, "the corpus lists sessions with compactions"
    found = []
    for path, n in files:
        sessions = [as_history(s) for s in importers.parse_path(path, on_error="skip")]
        compacted = [h for h in sessions if h.compactions]
        assert sum(len(h.compactions) for h in compacted) == n, path.name
        found.extend(compacted)
    return found


@pytest.fixture(scope="module", params=MODES)
def table(histories, request):
    return fidelity_table(histories, mode=request.param)


@pytest.mark.corpus
def test_one_row_per_recorded_compaction(histories, table, corpus_dir):
    expected = sum(n for _, n in _compacting_files(corpus_dir))
    assert len(table) == expected
    assert set(table["format"].astype(str)) == {"claude_code", "claude_code_hook", "codex"}
    for col in ("recorded_index", "recorded_turn", "trigger", "recorded_pre_tokens", "recorded_provider_tokens",
                "claude-code_index", "claude-code_delta_requests", "codex_index", "codex_tokens_before"):
        assert col in table.columns


@pytest.mark.corpus
def test_recorded_pre_tokens_agree_with_provider_usage(table):
    both = table.dropna(subset=["recorded_pre_tokens", "recorded_provider_tokens"])
    assert len(both) >= 4
    ratio = both["recorded_provider_tokens"].astype(float) / both["recorded_pre_tokens"].astype(float)
    # Claude Code's preTokens is the prompt count of the request before the boundary
    assert ratio.between(0.85, 1.05).all(), ratio.tolist()
    # ... plus that request's output: what the client compares with its trigger
    auto = both[both["trigger"].astype(str) == "auto"]
    gap = (auto["recorded_pre_tokens"] - auto["recorded_last_total"]).abs()
    assert len(auto) >= 5 and (gap <= 200).all(), gap.tolist()


@pytest.mark.corpus
def test_presets_compact_at_their_thresholds(histories, table):
    matched = table[table["claude-code_matched"].fillna(False).astype(bool)]
    assert len(matched) >= 1
    for _, row in matched.iterrows():
        # the decision is taken on the client's own figure (or the request)
        assert row["claude-code_check_tokens"] >= row["claude-code_trigger_tokens"] - 1
        assert row["claude-code_trigger_check"] in ("last-response", "request")
    # Claude Code 2.0.x reserved the whole max output: 155,000 at 200K
    old = table[table["client_version"].astype(str).str.startswith("2.0.") & (table["claude-code_window"] == 200_000)]
    assert len(old) and (old["claude-code_trigger_tokens"] == 155_000).all()
    # a session that starts from a summary has nothing before it to replay
    starts = table[table["recorded_index"] == 0]
    assert (~starts["replayable"]).all() and not starts["claude-code_matched"].fillna(False).astype(bool).any()
    # the Codex recording reports its own window; replays use it
    codex = table[table["format"] == "codex"]
    assert (codex["codex_window"] < 400_000).all()


@pytest.mark.corpus
def test_recorded_points_are_inside_the_stream(histories):
    for h in histories:
        for point in recorded_compaction_points(h):
            assert 0 <= point["recorded_index"] <= len(h.messages)
            assert point["recorded_request"] <= h.n_requests


def test_free_mode_follows_the_recording_after_a_coinciding_compaction():
    # what the client re-attached after its compaction is in the recorded counts, not in the preset
    hist = simulated_recording(155_000, requests=130, seed=5, post_compaction_tokens=30_000)
    table = fidelity_table([hist], presets=("claude-code",), mode="free", settings="default")
    assert table["claude-code_delta_requests"].tolist() == [0, 0, 0]
