"""Fidelity over the real corpus: where the recordings compacted vs where the presets would."""

from __future__ import annotations

import json

import pytest

from opctx.lab.fidelity import fidelity_table, recorded_compaction_points
from opctx.lab.history import as_history
from opctx.lab.presets import build_engine

pytestmark = pytest.mark.corpus


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


@pytest.fixture(scope="module")
def table(histories):
    return fidelity_table(histories)


def test_one_row_per_recorded_compaction(histories, table, corpus_dir):
    expected = sum(n for _, n in _compacting_files(corpus_dir))
    assert len(table) == expected
    assert set(table["format"].astype(str)) == {"claude_code", "claude_code_hook", "codex"}
    for col in ("recorded_index", "recorded_turn", "trigger", "recorded_pre_tokens", "recorded_provider_tokens",
                "claude-code_index", "claude-code_delta_requests", "codex_index", "codex_tokens_before"):
        assert col in table.columns


def test_recorded_pre_tokens_agree_with_provider_usage(table):
    both = table.dropna(subset=["recorded_pre_tokens", "recorded_provider_tokens"])
    assert len(both) >= 4
    ratio = both["recorded_provider_tokens"].astype(float) / both["recorded_pre_tokens"].astype(float)
    # Claude Code's preTokens is the prompt count of the request before the boundary
    assert ratio.between(0.85, 1.05).all(), ratio.tolist()


def test_presets_compact_at_their_thresholds(histories, table):
    matched = table[table["claude-code_matched"]]
    assert len(matched) >= 1
    for row in matched.itertuples():
        window = int(table.loc[row.Index, "claude-code_window"])
        engine = build_engine("claude-code", context_window=window, model=row.model)
        input_budget = window - 20_000
        assert table.loc[row.Index, "claude-code_tokens_before"] >= engine.auto_compact_pct * input_budget - 1
    # a session that starts from a summary has nothing before it to replay
    starts = table[table["recorded_index"] == 0]
    assert (~starts["replayable"]).all() and (~starts["claude-code_matched"]).all()
    # the Codex recording reports its own window; replays use it
    codex = table[table["format"] == "codex"]
    assert (codex["codex_window"] < 400_000).all()


def test_recorded_points_are_inside_the_stream(histories):
    for h in histories:
        for point in recorded_compaction_points(h):
            assert 0 <= point["recorded_index"] <= len(h.messages)
            assert point["recorded_request"] <= h.n_requests
