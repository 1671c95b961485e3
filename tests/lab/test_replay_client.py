"""Replays of client recordings: the client version reaches every replay, and the client's trigger check.

Synthetic recordings from ``simulated_recording`` (a client whose trigger is known)
stand in for real ones: the trigger a replay resolves is read back from where its
automatic compactions fire.
"""

from __future__ import annotations

import logging

import pytest

from opctx.lab import _replay_client as replay_client_module
from opctx.lab.calibrate import calibrate, simulated_recording
from opctx.lab.fidelity import fidelity_table
from opctx.lab.history import RecordedHistory
from opctx.lab.replay import replay, resolve_trigger_check, with_client_version
from opctx.lab.sweep import sweep


def _first_auto_check(result) -> int:
    """The figure the first automatic decision of a replay was taken on."""
    df = result.steps_df
    fired = df[df["decision"].astype(str).isin(("auto", "emergency"))]
    assert len(fired), "the replay compacted"
    return int(fired["check_tokens"].iloc[0])


def _longest_check_below(result, limit: int) -> int:
    """The largest figure a decision was taken on without compacting, before the first compaction."""
    df = result.steps_df
    first = df.index[df["decision"].astype(str).isin(("auto", "emergency"))][0]
    return int(df.loc[: first - 1, "check_tokens"].max())


@pytest.fixture(scope="module")
def old_client():
    # 170,000 recorded trigger: far from both rules, so the recording's own compactions
    # come later than either rule and every replay compacts on its own rule first
    return simulated_recording(10**9, requests=90, seed=11, version="2.0.76")


def test_replay_resolves_the_recordings_client_version(old_client):
    r = replay(old_client, "claude-code", feed_usage=True, aging=False, keep_contexts=False)
    assert r.params["client_version"] == "2.0.76"
    assert r.params["trigger_check"] == "last-response"
    # 2.0.x: window - 32,000 - 13,000 = 155,000 at 200K; no earlier check reached it
    assert _first_auto_check(r) >= 155_000 > _longest_check_below(r, 155_000)


def test_explicit_parameters_override_the_recording(old_client):
    newer = replay(old_client, "claude-code", client_version="2.1.30", feed_usage=True, aging=False,
                   keep_contexts=False)
    assert newer.params["client_version"] == "2.1.30"
    assert _first_auto_check(newer) >= 167_000 > _longest_check_below(newer, 167_000)
    fitted = replay(old_client, "claude-code", trigger_before_window=60_000, feed_usage=True, aging=False,
                    keep_contexts=False)
    assert fitted.params["client_version"] == "2.0.76"  # still named, the fitted figure wins
    assert 140_000 <= _first_auto_check(fitted) < 155_000


def test_other_presets_and_other_clients_get_no_version(old_client):
    assert "client_version" not in with_client_version(old_client, "hermes", {})
    assert "client_version" not in with_client_version(old_client, "codex", {})  # a Claude Code recording
    assert with_client_version(old_client, "claude-code", {"client_version": "2.1.30"}) == {"client_version": "2.1.30"}
    assert resolve_trigger_check(old_client, "hermes", None) == "request"
    assert resolve_trigger_check(old_client, "codex", None) == "request"
    assert resolve_trigger_check(old_client, "claude-code", "request") == "request"
    with pytest.raises(ValueError, match="trigger_check"):
        resolve_trigger_check(old_client, "claude-code", "sometimes")
    r = replay(old_client.messages[:20], "hermes", keep_contexts=False)
    assert "client_version" not in r.params and r.params["trigger_check"] == "request"


def test_codex_recordings_name_their_cli_version():
    hist = simulated_recording(10**9, requests=10, seed=2, client="codex", version="0.77.0")
    r = replay(hist, "codex", keep_contexts=False)
    assert r.params["client_version"] == "0.77.0"
    assert r.params["trigger_check"] == "last-response"


def test_segments_take_the_version_where_they_start():
    hist = simulated_recording(155_000, requests=80, seed=5, version="2.0.76")
    assert hist.compactions
    # the client upgraded just after the first compaction: that line names the new version
    start = hist.compactions[0].stream_index
    messages = [dict(m) for m in hist.messages]
    messages[start] = {**messages[start], "source_fields": {"version": "2.1.30"}}
    upgraded = RecordedHistory(messages=messages, compactions=hist.compactions, model=hist.model, format=hist.format,
                               session_id=hist.session_id, meta=hist.meta)
    segment = upgraded.resume_after(0)
    assert with_client_version(segment, "claude-code", {})["client_version"] == "2.1.30"
    assert with_client_version(upgraded, "claude-code", {})["client_version"] == "2.0.76"


def test_unknown_versions_use_the_default_rule_and_say_so_once(caplog):
    hist = simulated_recording(10**9, requests=90, seed=11, version="0.9.4242")
    with caplog.at_level(logging.WARNING, logger="opctx.lab.client_rules"):
        first = replay(hist, "claude-code", feed_usage=True, aging=False, keep_contexts=False)
        replay(hist, "claude-code", feed_usage=True, aging=False, keep_contexts=False)
    said = [r for r in caplog.records if "0.9.4242" in r.getMessage()]
    assert len(said) == 1 and "no sourced rule" in said[0].getMessage()
    assert _first_auto_check(first) >= 167_000  # the documented default: the >=2.1.21 rule


def test_recordings_without_a_version_say_so_once(caplog, monkeypatch):
    monkeypatch.setattr(replay_client_module, "_NO_VERSION_WARNED", set())
    hist = simulated_recording(10**9, requests=10, seed=3)
    hist = RecordedHistory(messages=hist.messages, model=hist.model, format=hist.format, session_id="no-version")
    assert hist.client == "claude-code" and hist.client_version is None
    with caplog.at_level(logging.WARNING, logger="opctx.lab.replay"):
        r = replay(hist, "claude-code", keep_contexts=False)
        replay(hist, "claude-code", keep_contexts=False)
    said = [rec for rec in caplog.records if "names no client version" in rec.getMessage()]
    assert len(said) == 1
    assert r.params["client_version"] is None


def test_sweep_replays_resolve_the_version_too(old_client):
    grid = [{"preset": "claude-code", "aging": False, "feed_usage": True},
            {"preset": "claude-code", "aging": False, "feed_usage": True, "client_version": "2.1.30"}]
    df = sweep([old_client], grid, progress=False)
    assert df["error"].isna().all()
    direct = [replay(old_client, "claude-code", aging=False, feed_usage=True, keep_contexts=False),
              replay(old_client, "claude-code", aging=False, feed_usage=True, client_version="2.1.30",
                     keep_contexts=False)]
    assert df["compactions"].tolist() == [len(r.compactions) for r in direct]
    assert df["input_tokens_peak"].tolist() == [int(r.steps_df["tokens"].max()) for r in direct]
    # the two versions differ on this recording, so the sweep did not use one rule for both
    assert direct[0].steps_df["tokens"].tolist() != direct[1].steps_df["tokens"].tolist()


def test_calibrated_presets_take_the_version_in_replay():
    train = [simulated_recording(150_000, requests=100, seed=s, session_id=f"train-{s}") for s in range(3)]
    cal = calibrate(train, "claude-code")
    hist = simulated_recording(10**9, requests=90, seed=11, version="2.0.76")
    r = replay(hist, cal, feed_usage=True, aging=False, keep_contexts=False)
    assert r.params["client_version"] == "2.0.76" and r.params["trigger_check"] == "last-response"
    fitted = 200_000 - cal.fits[next(iter(cal.fits))]
    assert abs(fitted - 150_000) <= 1_500
    assert _first_auto_check(r) >= fitted - 1


# -- the client's trigger check ---------------------------------------------------------------------


def test_last_response_check_predicts_the_same_request_as_the_client():
    hist = simulated_recording(155_000, requests=130, seed=3, manual_at=(10,))
    table = fidelity_table([hist], presets=("claude-code",), mode="resync", aging=False)
    auto = table[table["trigger"].astype(str) == "auto"]
    assert len(auto) >= 2
    assert (auto["claude-code_trigger_check"] == "last-response").all()
    # the simulated client checks the last response's total, as the replay now does: same request
    assert auto["claude-code_delta_requests"].tolist() == [0] * len(auto)
    assert (auto["claude-code_check_tokens"] == auto["recorded_last_total"]).all()
    assert (auto["claude-code_believed_tokens"] == auto["recorded_last_total"]).all()
    # the engine's own check counts the tool results appended since: never later than the client
    request = fidelity_table([hist], presets=("claude-code",), mode="resync", aging=False, trigger_check="request")
    request = request[request["trigger"].astype(str) == "auto"]
    assert (request["claude-code_trigger_check"] == "request").all()
    assert set(request["claude-code_delta_requests"]) <= {-1, 0}


def test_the_replay_compares_what_the_client_compares():
    """Claude Code 2.1.2+ adds its estimate of the messages after the last response, Codex its
    estimate of the older encrypted reasoning: a replay of its own client's recording adds the same."""
    from opctx.lab.client_rules import check_tokens
    from opctx.lab.replay import client_check_count

    newer = simulated_recording(10**9, requests=40, seed=3, version="2.1.5")
    assert client_check_count(newer, "claude-code", {"client_version": "2.1.5"}) == "last-response+after"
    assert client_check_count(newer, "claude-code", {"client_version": "2.0.76"}) == "last-response"
    assert client_check_count(newer, "default", {}) == "last-response"
    codex = simulated_recording(10**9, requests=10, seed=3, client="codex", version="0.77.0")
    assert client_check_count(codex, "codex", {"client_version": "0.77.0"}) == "last-response+reasoning"
    r = replay(newer, "claude-code", aging=False, keep_contexts=False)
    df = r.steps_df
    stop = int(df.index[df["compacted"]][0]) if df["compacted"].any() else len(df)
    expected = [check_tokens(newer.messages, int(i), "last-response+after", fmt=newer.format, model=newer.model)
                for i in df["stream_index"].iloc[1:stop]]
    assert df["check_tokens"].iloc[1:stop].tolist() == expected
    assert any(c > p + o for c, p, o in zip(df["check_tokens"].iloc[2:stop], df["provider_input_tokens"].iloc[1:stop],
                                            df["output_tokens"].iloc[1:stop], strict=False))
