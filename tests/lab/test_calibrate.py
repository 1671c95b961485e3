"""Calibration: client triggers fitted to recorded automatic compactions, leave-one-session-out."""

from __future__ import annotations

import json
import math
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

import opctx.lab
from opctx.lab.calibrate import (
    REPORT_COLUMNS,
    CalibratedPreset,
    calibrate,
    consensus_fit,
    loso_fidelity_table,
    median_fit,
    session_groups,
    simulated_recording,
)
from opctx.lab.history import as_history
from opctx.lab.replay import replay

WINDOW = 200_000


@pytest.fixture(scope="module")
def recordings():
    """Four sessions of a client whose trigger is 155,000 (Claude Code 2.0.76 at 200K)."""
    return [simulated_recording(155_000, requests=120, seed=seed) for seed in range(4)]


@pytest.fixture(scope="module")
def outlier():
    """The same client and model with CLAUDE_CODE_MAX_OUTPUT_TOKENS=64000: trigger 123,000."""
    return simulated_recording(123_000, requests=60, seed=11, session_id="sim-outlier")


@pytest.mark.parametrize("method", ["consensus", "median"])
def test_a_known_trigger_is_recovered_within_one_percent(recordings, method):
    cal = calibrate(recordings, "claude-code", method=method)
    assert isinstance(cal, CalibratedPreset) and cal.unit == "tokens_before_window"
    [(group, before)] = cal.fits.items()
    assert group == "claude-code 1.0.71-2.1.1"
    assert abs((WINDOW - before) - 155_000) <= 0.01 * 155_000
    report = cal.report
    assert list(report.columns) == REPORT_COLUMNS
    compactions = report[report["kind"] == "compaction"]
    assert len(compactions) == sum(len(h.compactions) for h in recordings) and not report["discounted"].any()
    assert set(compactions["source"]) == {"preTokens"} and set(report["version"]) == {"2.0.76"}
    # the stretches after the last compaction, which never compacted, are evidence too: all agree
    stretches = report[report["kind"] == "no compaction"]
    assert len(stretches) == len(recordings) and (stretches["previous_tokens"] < 155_000).all()


@pytest.mark.parametrize("method", ["consensus", "median"])
def test_the_fit_survives_an_outlier_and_says_which_rows_it_discounts(recordings, outlier, method):
    cal = calibrate([*recordings, outlier], "claude-code", method=method)
    [before] = cal.fits.values()
    assert abs((WINDOW - before) - 155_000) <= 0.01 * 155_000
    report = cal.report[cal.report["kind"] == "compaction"]
    discounted = report[report["discounted"]]
    assert set(discounted["session"]) == {"sim-outlier"}
    assert discounted["reason"].str.startswith("discounted").all()
    assert report[~report["discounted"]]["reason"].str.startswith("kept").all()


def test_codex_fits_a_fraction_of_the_model_window():
    # a limit of 80% of gpt-5.2-codex's 272,000 (model_auto_compact_token_limit = 217,600)
    hists = [simulated_recording(217_600, requests=130, seed=s, client="codex", version="0.77.0") for s in range(3)]
    cal = calibrate(hists, "codex")
    [(group, fraction)] = cal.fits.items()
    assert cal.unit == "window_fraction" and group == "codex (all versions)"
    assert abs(fraction * 272_000 - 217_600) <= 0.01 * 217_600
    assert cal.resolve(context_window=258_400, model="gpt-5.2-codex").auto_tokens == pytest.approx(217_600, rel=0.01)


def test_leave_one_session_out_never_scores_a_fit_on_itself(recordings, outlier):
    cal = calibrate([*recordings, outlier], "claude-code")
    report = cal.report[cal.report["kind"] == "compaction"]
    for _, row in report.iterrows():
        others = [h for h in [*recordings, outlier] if h.session_id != row["session"]]
        alone = calibrate(others, "claude-code")
        assert row["fitted_loso"] == pytest.approx(next(iter(alone.fits.values())))
        assert row["loso_from"] == "fit"
        assert row["predicted_tokens_loso"] == round(WINDOW - row["fitted_loso"])
        assert row["error_tokens"] == row["predicted_tokens_loso"] - row["observed_tokens"]
    kept = report[report["session"] != "sim-outlier"]
    # without its own session, each fit still finds the true trigger (the error also holds the overshoot)
    assert ((kept["predicted_tokens_loso"] - 155_000).abs() <= 1_550).all()
    assert kept["within_interval"].mean() >= 0.5
    # a group alone in its version group falls back to the table's rule
    lonely = simulated_recording(167_000, requests=60, seed=5, version="2.1.30", session_id="sim-new")
    row = calibrate([*recordings, lonely], "claude-code").report.query(
        "session == 'sim-new' and kind == 'compaction'").iloc[0]
    assert row["loso_from"] == "table" and row["fitted_loso"] == row["prior"] == 33_000


def test_sessions_sharing_a_compaction_or_a_recording_id_are_one_group():
    a = simulated_recording(155_000, requests=60, seed=1, session_id="a")
    b = simulated_recording(155_000, requests=60, seed=2, session_id="b")
    c = simulated_recording(155_000, requests=60, seed=3, session_id="c")
    d = simulated_recording(155_000, requests=60, seed=4, session_id="d")
    b.compactions[0].source_ids.append(a.compactions[0].source_ids[0])  # one boundary in two files
    d.meta["claude_code"]["sessionId"] = "c"  # the same session saved twice
    assert session_groups([a, b, c, d]) == [0, 0, 1, 1]
    report = calibrate([a, b, c, d], "claude-code").report.query("kind == 'compaction'")
    for _, row in report.iterrows():
        partners = {"a": "b", "b": "a", "c": "d", "d": "c"}
        others = [h for h in (a, b, c, d) if h.session_id not in (row["session"], partners[row["session"]])]
        assert row["fitted_loso"] == pytest.approx(next(iter(calibrate(others, "claude-code").fits.values())))


def test_the_calibrated_preset_replays_and_sweeps(recordings):
    from opctx.lab.sweep import sweep

    cal = calibrate(recordings[:2], "claude-code")
    trigger = cal.resolve(context_window=WINDOW, client_version="2.0.76").auto_tokens
    assert abs(trigger - 155_000) <= 1_550
    assert cal.params_for("2.0.76")["trigger_before_window"] == WINDOW - trigger
    # a version of another rule has no fit: the table's rule, with its version
    assert cal.params_for("2.1.30") == {"client_version": "2.1.30"}
    hist = recordings[2]
    result = replay(hist, cal, client_version=hist.client_version, aging=False, keep_contexts=False)
    assert result.preset == "claude-code+calibrated"
    fired = result.steps_df[result.steps_df["decision"].astype(str) == "auto"]
    assert len(fired) and (fired["tokens_before_compaction"] >= trigger - 1).all()
    clone = pickle.loads(pickle.dumps(cal))
    assert clone.fits == cal.fits and clone.name == cal.name
    df = sweep([hist], {"preset": [cal], "aging": [False]}, progress=False, errors="raise")
    assert df["config"].astype(str).iloc[0].startswith("claude-code+calibrated") and df["compactions"].iloc[0] >= 1
    # opctx.lab.calibrate is callable, however it was first reached
    assert opctx.lab.calibrate(recordings[:1], "claude-code").fits.keys() == cal.fits.keys()


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="client preset"):
        calibrate([], "hermes")
    with pytest.raises(ValueError, match="method"):
        calibrate([], "claude-code", method="mean")
    with pytest.raises(ValueError, match="by"):
        calibrate([], "claude-code", by="model")
    assert calibrate([], "codex").fits == {}


def test_by_version_fits_each_version():
    hists = [simulated_recording(155_000, requests=70, seed=s, version=v) for s, v in ((1, "2.0.74"), (2, "2.0.76"))]
    cal = calibrate(hists, "claude-code", by="version")
    assert set(cal.fits) == {"2.0.74", "2.0.76"}


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), min_size=1, max_size=12))
def test_consensus_is_inside_the_most_intervals(raw):
    intervals = [(float(lo), float(lo + width)) for lo, width in raw]
    points = [lo for lo, _ in intervals]
    fit, inside = consensus_fit(intervals, points)
    assert inside == [lo <= fit <= hi for lo, hi in intervals]
    best = max(sum(lo <= x <= hi for lo, hi in intervals) for x in {v for pair in intervals for v in pair})
    assert sum(inside) == best


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=15))
def test_median_fit_keeps_the_median(points):
    fit, kept = median_fit(points)
    assert any(kept) and min(points) <= fit <= max(points)
    assert all(k for p, k in zip(points, kept, strict=True) if p == sorted(points)[len(points) // 2])
    assert not math.isnan(fit)


# -- the real corpus --------------------------------------------------------------------------------


@pytest.mark.corpus
def test_corpus_claude_code_2_0_compacted_at_155k(corpus_dir):
    importers = pytest.importorskip("opctx.importers")
    manifest = json.loads((corpus_dir / "manifest.json").read_text(encoding="utf-8"))
    hists = []
    for entry in manifest:
        if entry["format"] in ("claude_code_jsonl", "claude_code_hook_chat_json") and entry.get("stats", {}).get("compact_boundary"):
            hists += [as_history(s) for s in importers.parse_path(corpus_dir / entry["file"], on_error="skip")]
    cal = calibrate([h for h in hists if h.compactions], "claude-code")
    before = cal.fits["claude-code 1.0.71-2.1.1"]
    assert abs((WINDOW - before) - 155_000) <= 1_550
    report = cal.report[cal.report["kind"] == "compaction"]
    # one automatic compaction of the same client and model at ~123K (a 64K max output): discounted
    discounted = report[report["discounted"]]
    assert len(report) >= 7 and len(discounted) == 1
    assert 120_000 < discounted["observed_tokens"].iloc[0] < 126_000
    # the table's 2.0.x rule is what the recordings did
    assert (report["prior"] == 45_000).all()
    # stretches without a compaction: sessions whose client had it off are listed, not used
    stretches = cal.report[cal.report["kind"] == "no compaction"]
    off = stretches[stretches["reason"].str.startswith("not used: auto-compaction off")]
    assert len(off) and (stretches.loc[~stretches.index.isin(off.index), "previous_tokens"] < 155_000).all()


@pytest.mark.corpus
def test_corpus_loso_fidelity_runs(corpus_dir):
    importers = pytest.importorskip("opctx.importers")
    path = next(p for p in (corpus_dir / "claude_code_jsonl").rglob("b16cf5ff-*.jsonl"))
    other = next(p for p in (corpus_dir / "claude_code_jsonl").rglob("0f199565-*.jsonl"))
    hists = [as_history(s) for p in (path, other) for s in importers.parse_path(p, on_error="skip")]
    table = loso_fidelity_table([h for h in hists if h.compactions], "claude-code", aging=False)
    assert len(table) == 3 and table["fit"].str.contains("claude-code 1.0.71-2.1.1").all()
    assert table["claude-code+calibrated_delta_requests"].abs().max() <= 1
