"""Fidelity: where recordings compacted vs where the presets would, free and resynchronised."""

from __future__ import annotations

import json

import pytest

from opctx.context.tokens import Estimator
from opctx.lab.calibrate import simulated_recording
from opctx.lab.fidelity import MODES, fidelity_summary, fidelity_table, recorded_compaction_points
from opctx.lab.history import as_history

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
    summary = {mode: fidelity_summary(t).iloc[0] for mode, t in tables.items()}
    assert summary["resync"]["share_within_one"] == 1.0 and summary["free"]["share_within_one"] == 0.0


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
    with pytest.raises(ValueError, match="mode"):
        fidelity_table([old], mode="sideways")


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
    matched = table[table["claude-code_matched"]]
    assert len(matched) >= 1
    for _, row in matched.iterrows():
        # the decision is taken on the last response's total (the client's check) or the request
        assert row["claude-code_check_tokens"] >= row["claude-code_trigger_tokens"] - 1
        assert row["claude-code_trigger_check"] in ("last-response", "request")
    # Claude Code 2.0.x reserved the whole max output: 155,000 at 200K
    old = table[table["client_version"].astype(str).str.startswith("2.0.") & (table["claude-code_window"] == 200_000)]
    assert len(old) and (old["claude-code_trigger_tokens"] == 155_000).all()
    # a session that starts from a summary has nothing before it to replay
    starts = table[table["recorded_index"] == 0]
    assert (~starts["replayable"]).all() and (~starts["claude-code_matched"]).all()
    # the Codex recording reports its own window; replays use it
    codex = table[table["format"] == "codex"]
    assert (codex["codex_window"] < 400_000).all()


@pytest.mark.corpus
def test_recorded_points_are_inside_the_stream(histories):
    for h in histories:
        for point in recorded_compaction_points(h):
            assert 0 <= point["recorded_index"] <= len(h.messages)
            assert point["recorded_request"] <= h.n_requests
