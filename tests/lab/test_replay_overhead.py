"""Replays that stay synchronised with the provider: the unseen overhead, continued sessions, display-only lines.

Synthetic recordings (``simulated_recording``) are made by a client whose prompt
count is ``overhead`` + opctx's own estimate of its context, so the overhead a
replay recovers is known exactly. The corpus test checks, on a real Claude Code session, that
the engine sees the provider's count at the real compaction (the estimate alone said 136K
where the provider counted 155K), and skips without the corpus.
"""

from __future__ import annotations

import json

import pytest

from opctx.context.tokens import Estimator
from opctx.lab.calibrate import simulated_recording
from opctx.lab.fidelity import fidelity_table, recorded_compaction_points
from opctx.lab.history import RecordedCompaction, RecordedHistory, as_history
from opctx.lab.replay import replay

OVERHEAD = 15_000


def _estimate(result, step: int, model: str) -> int:
    """opctx's estimate of a replayed request (display-only lines are never sent)."""
    estimator = Estimator()
    return sum(estimator.message_tokens(m, model) for m in result.context(step) if not m.get("display_only"))


def _carried(result, model: str) -> list[int]:
    df = result.steps_df
    return [int(df["tokens"].iloc[k]) - _estimate(result, k, model) for k in range(len(df))]


def test_overhead_is_carried_past_the_replays_own_compaction():
    hist = simulated_recording(10**9, requests=60, seed=1, overhead=OVERHEAD)
    fed = replay(hist, "default", context_window=100_000, feed_usage=True)
    df = fed.steps_df
    assert df["compacted"].any(), "the replay compacts on its own"
    after = df.index[df["diverged"]]
    assert len(after) >= 5
    carried = _carried(fed, hist.model)
    # the known overhead, within what the replies' reported output lengths change
    assert all(abs(carried[k] - OVERHEAD) <= 600 for k in after), [carried[k] for k in after]
    # before: no count once diverged, the request was its bare estimate
    bare = replay(hist, "default", context_window=100_000, feed_usage=False)
    assert all(abs(c) <= 5 for c in _carried(bare, hist.model))


def test_overhead_is_carried_past_the_recordings_compaction():
    # the recording compacts at 60K; claude-code (155K) does not: the recorded counts drop,
    # the replay's context does not, and the overhead measured before is carried
    hist = simulated_recording(60_000, requests=60, seed=2, overhead=OVERHEAD)
    first = hist.compactions[0].stream_index
    r = replay(hist, "claude-code", feed_usage=True, aging=False)
    df = r.steps_df
    own = df.index[df["compacted"]]
    until = own[0] if len(own) else len(df)
    later = df.index[(df["stream_index"] > first + 2) & (df.index < until)]
    assert len(later) >= 5
    carried = _carried(r, hist.model)
    assert all(abs(carried[k] - OVERHEAD) <= 600 for k in later)
    provider = df.loc[later, "provider_input_tokens"].astype(float)
    assert (df.loc[later, "tokens"] > provider + 20_000).all()  # the recording's counts no longer apply


def test_the_none_baseline_carries_it_too():
    hist = simulated_recording(10**9, requests=30, seed=4, overhead=OVERHEAD)
    fed = replay(hist, "none", feed_usage=True, keep_contexts=False).steps_df
    bare = replay(hist, "none", feed_usage=False, keep_contexts=False).steps_df
    assert ((fed["tokens_none"] - bare["tokens_none"]).iloc[1:] == OVERHEAD).all()


def _continued_session(unseen: int = 60_000) -> RecordedHistory:
    """A session that starts from a summary: its first count is far above what the file holds."""
    estimator = Estimator()
    model = "claude-opus-4-5-20251101"
    summary = {"id": "s0", "role": "user", "content": "This session is being continued from a previous "
               "conversation that ran out of context. Summary: the parser is half done.", "timestamp": 1.0}
    messages, sent = [summary], estimator.message_tokens(summary, model)
    for r in range(12):
        prompt = unseen + sent
        call = {"id": f"a{r}", "role": "assistant", "content": f"step {r}", "timestamp": 2.0 + r,
                "tool_calls": [{"id": f"c{r}", "name": "run", "arguments": {"r": r}}],
                "usage": {"input_tokens": prompt, "output_tokens": 40}}
        result = {"id": f"t{r}", "role": "tool", "tool_call_id": f"c{r}", "name": "run",
                  "content": f"output of step {r}: " + "lorem ipsum " * 200, "timestamp": 2.5 + r}
        for m in (call, result):
            messages.append(m)
            sent += estimator.message_tokens(m, model)
    comp = RecordedCompaction(stream_index=0, node_id="s0", summary_text=summary["content"], trigger=None)
    return RecordedHistory(messages=messages, compactions=[comp], model=model, format="claude_code",
                           session_id="continued", meta={"claude_code": {"version": "2.0.76"}})


def test_a_session_that_starts_from_a_summary_is_fed():
    hist = _continued_session()
    r = replay(hist, "claude-code", feed_usage=True, aging=False)
    df = r.steps_df
    assert not df["diverged"].any()
    rel = (df["tokens"] - df["provider_input_tokens"].astype(float)).abs() / df["provider_input_tokens"].astype(float)
    assert (rel.iloc[1:] < 0.01).all(), rel.tolist()
    assert df["tokens"].iloc[-1] > 60_000  # the unseen earlier context is counted
    bare = replay(hist, "claude-code", feed_usage=False, aging=False).steps_df
    assert bare["tokens"].iloc[-1] < 30_000


# -- display-only lines -----------------------------------------------------------------------------


def _with_display_only(messages: list[dict]) -> list[dict]:
    noise = {"role": "system", "content": "PostToolUse hook ran: " + "formatted 12 files " * 400,
             "display_only": True}
    out = []
    for i, m in enumerate(messages):
        out.append(m)
        if m.get("role") == "tool":
            out.append({**noise, "id": f"hook-{i}", "timestamp": m.get("timestamp")})
    return out


def test_display_only_lines_cost_nothing_in_replay_figures():
    hist = simulated_recording(10**9, requests=20, seed=6)
    plain = replay(hist, "none").steps_df
    noisy_history = RecordedHistory(messages=_with_display_only(hist.messages), model=hist.model,
                                    format=hist.format, session_id="noisy", meta=hist.meta)
    noisy = replay(noisy_history, "none").steps_df
    for col in ("tokens", "tokens_none", "prefix_kept_tokens", "prefix_invalidated_tokens"):
        assert noisy[col].tolist() == plain[col].tolist(), col
    fed = replay(noisy_history, "none", feed_usage=True).steps_df
    fed_plain = replay(hist, "none", feed_usage=True).steps_df
    assert fed["tokens"].tolist() == fed_plain["tokens"].tolist()


def test_display_only_lines_cost_nothing_in_fidelity_estimates():
    hist = simulated_recording(60_000, requests=60, seed=7)
    shift = {}
    messages = []
    for i, m in enumerate(hist.messages):
        shift[i] = len(messages)
        messages.append(m)
        if m.get("role") == "tool":
            messages.append({"id": f"hook-{i}", "role": "system", "content": "hook output " * 500,
                             "display_only": True})
    comps = [RecordedCompaction(**{**c.__dict__, "stream_index": shift[c.stream_index]}) for c in hist.compactions]
    noisy = RecordedHistory(messages=messages, compactions=comps, model=hist.model, format=hist.format,
                            session_id="noisy", meta=hist.meta)
    plain_points = recorded_compaction_points(hist)
    noisy_points = recorded_compaction_points(noisy)
    assert [p["estimated_tokens"] for p in noisy_points] == [p["estimated_tokens"] for p in plain_points]
    table = fidelity_table([noisy], presets=("claude-code",), aging=False, context_window=80_000)
    plain = fidelity_table([hist], presets=("claude-code",), aging=False, context_window=80_000)
    assert table["claude-code_delta_requests"].tolist() == plain["claude-code_delta_requests"].tolist()


# -- the real corpus --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dd09(corpus_dir):
    importers = pytest.importorskip("opctx.importers")
    manifest = json.loads((corpus_dir / "manifest.json").read_text(encoding="utf-8"))
    entry = next((e for e in manifest if e["format"] == "claude_code_jsonl" and "dd09f641" in e["file"]
                  and e["file"].endswith(".jsonl") and "/subagents/" not in e["file"]), None)
    if entry is None:
        pytest.skip("the corpus has no session dd09f641")
    found = [as_history(s) for s in importers.parse_path(corpus_dir / entry["file"], on_error="skip")]
    return next(h for h in found if len(h.compactions) == 3)


@pytest.mark.corpus
def test_corpus_engine_sees_the_providers_count_at_the_real_compaction(dd09):
    """Without the carried overhead the engine believed 136K where the provider had counted 155K."""
    for params, tolerance in (({"aging": False}, 0.005), ({}, 0.03)):
        table = fidelity_table([dd09], presets=("claude-code",), mode="resync", **params)
        row = table.iloc[2]
        assert row["trigger"] == "auto" and row["recorded_provider_tokens"] == 155_039
        believed, recorded = float(row["claude-code_believed_tokens"]), float(row["recorded_last_total"])
        # with aging, the replay cleared what the client had not: the count less what it cleared
        assert abs(believed - recorded) / recorded < tolerance, (params, believed, recorded)
    assert row["claude-code_believed_tokens"] > 150_000


def _rejoined(result) -> list[int]:
    return [e["stream_index"] for e in result.events if e.get("event") == "rejoined_recording"]


def test_a_compaction_on_the_recordings_own_request_rejoins_the_recording():
    # the client re-attaches 30,000 tokens after each compaction, more than the preset's constant:
    # alone, the replay believes too little after its first compaction and compacts late
    hist = simulated_recording(155_000, requests=130, seed=5, post_compaction_tokens=30_000)
    requests = [i for i, m in enumerate(hist.messages) if m.get("role") == "assistant"]
    recorded = [next(i for i in requests if i >= c.stream_index) for c in hist.compactions]
    assert len(recorded) == 3 and all(c.trigger == "auto" for c in hist.compactions)
    followed = replay(hist, "claude-code", feed_usage=True, keep_contexts=False, follow_recording=True)
    alone = replay(hist, "claude-code", feed_usage=True, keep_contexts=False)
    assert [c.stream_index for c in followed.compactions] == recorded
    assert _rejoined(followed) == recorded and not _rejoined(alone)
    assert [c.stream_index for c in alone.compactions][0] == recorded[0]
    assert [c.stream_index for c in alone.compactions][1] > recorded[1]
    # after rejoining, each request is fed the recording's own count: the next request's check
    # is the recorded prompt + output
    df = followed.steps_df
    after = df[(df["stream_index"] >= recorded[0]) & (df["stream_index"] < hist.compactions[1].stream_index)]
    fed = (after["provider_input_tokens"] + after["output_tokens"]).tolist()[:-1]
    assert len(fed) > 10 and after["check_tokens"].tolist()[1:] == fed
    # the "none" baseline keeps the overhead measured before the replay's own compaction
    assert followed.steps_df["tokens_none"].tolist() == alone.steps_df["tokens_none"].tolist()


def test_a_compaction_elsewhere_does_not_rejoin():
    hist = simulated_recording(155_000, requests=130, seed=5, post_compaction_tokens=30_000)
    early = replay(hist, "claude-code", feed_usage=True, keep_contexts=False, follow_recording=True,
                   trigger_before_window=80_000)
    assert early.compactions and not _rejoined(early)
    assert early.steps_df.equals(replay(hist, "claude-code", feed_usage=True, keep_contexts=False,
                                        trigger_before_window=80_000).steps_df)


def test_a_compaction_of_its_own_after_a_rejoin_goes_on_alone():
    # a trigger between the checks before the client's first and second compactions: the replay
    # compacts with the client the first time, one request early the second
    hist = simulated_recording(155_000, requests=130, seed=5, post_compaction_tokens=30_000)
    requests = [i for i, m in enumerate(hist.messages) if m.get("role") == "assistant"]
    recorded = [next(i for i in requests if i >= c.stream_index) for c in hist.compactions]
    result = replay(hist, "claude-code", feed_usage=True, keep_contexts=False, follow_recording=True,
                    trigger_before_window=48_000)
    own = [c.stream_index for c in result.compactions]
    assert own[0] == recorded[0] and own[1] < recorded[1] and _rejoined(result) == [recorded[0]]
    # after it, the replay counts its own compacted context, not the client's uncompacted one
    df = result.steps_df
    at, after = df[df["stream_index"] == own[1]].iloc[0], df[df["stream_index"] > own[1]].iloc[0]
    assert at["provider_input_tokens"] > 150_000 and after["check_tokens"] < 100_000


def test_corpus_following_the_recording_counts_the_clients_clearing_once(corpus_dir):
    # 2.1.19 clears old tool results itself (its counts hold that); the replay clears them too.
    # Measured against the whole stream the overhead took the client's clearing off a second
    # time (the replay's figure 112,640 where the provider counted 160,832 + output)
    from opctx.importers import parse_path
    from opctx.lab.microcompact import rule_for_version

    path = next(corpus_dir.glob("claude_code_jsonl/*560343df*/*.jsonl"), None)
    if path is None:
        pytest.skip("session 560343df is not in this corpus")
    history = as_history(parse_path(path)[0])
    rule = rule_for_version(history.client_version, model=history.model, auto_compact=False, context_window=200_000)

    def last_check(follow: bool) -> tuple[int, int]:
        df = replay(history, "claude-code", feed_usage=True, keep_contexts=False, auto_compact=False,
                    microcompact=rule, follow_recording=follow).steps_df
        assert df["tokens_freed_by_aging"].iloc[-1] > 0 and not df["compacted"].any()
        counted = df.dropna(subset=["provider_input_tokens"])
        last, previous = df.iloc[-1], counted[counted["step"] < df["step"].iloc[-1]].iloc[-1]
        return int(last["check_tokens"]), int(previous["provider_input_tokens"] + previous["output_tokens"])

    check, provider = last_check(True)
    assert abs(check - provider) <= 0.02 * provider
    check, provider = last_check(False)
    assert check < 0.8 * provider
