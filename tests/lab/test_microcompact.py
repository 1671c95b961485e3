"""Claude Code's microcompaction modelled: the rule, the ager, the claude-code preset hook."""

from __future__ import annotations

import pytest

from opctx.lab.microcompact import (
    CLEARED_TEXT,
    ClaudeCodeMicrocompactor,
    MicrocompactRule,
    candidates,
    is_clearable,
    microcompactor_for,
    plan_clearing,
    records_microcompaction,
    result_tokens,
    rule_for,
    rule_for_version,
    versions_for,
)
from opctx.lab.presets import build_engine


def tool_session(n: int, chars: int = 40_000, *, names=None) -> list[dict]:
    """user, then n x (assistant calling a tool, its result of ``chars`` characters)."""
    msgs: list[dict] = [{"id": "u0", "role": "user", "content": "go", "timestamp": 0.0}]
    for i in range(n):
        name = (names or {}).get(i, "Read")
        msgs.append({"id": f"a{i}", "role": "assistant", "content": "", "timestamp": float(i + 1),
                     "tool_calls": [{"id": f"t{i}", "name": name, "arguments": {"file_path": f"/f{i}"}}]})
        body = " ".join(f"word{(i * 7919 + k) % 100003}" for k in range(chars // 10))[:chars]
        msgs.append({"id": f"r{i}", "role": "tool", "name": name, "tool_call_id": f"t{i}",
                     "content": body, "timestamp": float(i + 1)})
    return msgs


def test_versions_that_clear_and_record_it():
    # cli.js: the clearing from 1.0.59 to 2.1.62, its line from 2.1.8
    assert versions_for("1.0.58") is None and versions_for("1.0.59") is not None
    assert not records_microcompaction("2.1.7") and records_microcompaction("2.1.8")
    assert records_microcompaction("2.1.19") and records_microcompaction("2.1.62")
    assert versions_for("2.1.63") is None and versions_for("2.1.101") is None
    assert not records_microcompaction("2.0.76") and not records_microcompaction(None)
    assert not records_microcompaction("garbage")
    # LS was cleared before Edit and Write were (1.0.73)
    assert "LS" in versions_for("1.0.70").clearable and "Edit" not in versions_for("1.0.70").clearable
    assert {"Edit", "Write"} <= versions_for("1.0.73").clearable


def test_clearable_tools():
    assert all(is_clearable(n) for n in ("Read", "Bash", "Grep", "Glob", "Edit", "Write", "WebFetch"))
    assert not any(is_clearable(n) for n in ("Task", "TaskOutput", "mcp__srv__tool", "AskUserQuestion",
                                             "ExitPlanMode", None, 3))


def test_each_version_warns_where_its_client_does():
    # the warning threshold is the version's trigger less 20,000 (0.8 of it in 1.0.51-1.0.70);
    # with auto-compaction off, the effective window less 20,000
    assert rule_for_version("1.0.70").warning_tokens == 123_648
    assert rule_for_version("2.0.74").warning_tokens == 135_000
    assert rule_for_version("2.1.19", auto_compact=False).warning_tokens == 148_000
    assert rule_for_version("2.1.30").warning_tokens == 147_000 == rule_for(200_000).warning_tokens
    assert rule_for_version("1.0.30") is None and rule_for_version(None) is None


def test_rule_and_plan():
    rule = MicrocompactRule(warning_tokens=147_000)
    # characters / 4 per text block, rounded as JavaScript does (halves up); an image 2,000
    assert result_tokens({"role": "tool", "content": "x" * 402}) == 101
    assert result_tokens({"role": "tool", "content": [{"type": "text", "text": "ab"}, {"type": "image"},
                                                      {"type": "text", "text": "abcdef"}]}) == 1 + 2_000 + 2
    # a spilled result counts as the preview the model saw
    assert result_tokens({"role": "tool", "content": "y" * 9_000, "inline_output": "z" * 400}) == 100
    results = [(f"t{i}", 10_000) for i in range(8)]
    # below the warning threshold nothing; at it (>=) the rule clears
    assert plan_clearing(results, 146_999, rule) is None
    ids, pre, saved = plan_clearing(results, 147_000, rule)
    # oldest first while more than 40K remain: 80K -> clear 4
    assert ids == ["t0", "t1", "t2", "t3"] and pre == 80_000 and saved == 40_000
    # a saving under 20K is not worth it
    assert plan_clearing([(f"t{i}", 10_000) for i in range(5)], 200_000, rule) is None
    # the last 3 candidates are never cleared, even if they are all there is
    big = [("old", 1_000), ("a", 50_000), ("b", 50_000), ("c", 50_000)]
    assert plan_clearing(big, 200_000, rule) is None
    assert plan_clearing(big, 200_000, MicrocompactRule(keep_recent=0))[0] == ["old", "a", "b", "c"]


def test_candidates_follow_the_tool_calls_not_where_the_results_landed():
    rule = MicrocompactRule()
    msgs = [
        {"role": "assistant", "tool_calls": [{"id": "a", "name": "Read"}, {"id": "b", "name": "Task"},
                                             {"id": "c", "name": "Bash"}]},
        {"role": "tool", "tool_call_id": "c", "name": "Bash", "content": "c" * 40},  # landed first
        {"role": "tool", "tool_call_id": "b", "name": "Task", "content": "b" * 40},
        {"role": "tool", "tool_call_id": "a", "name": "Read", "content": "a" * 80},
        {"role": "assistant", "tool_calls": [{"id": "d", "name": "Grep"}]},  # no result yet
    ]
    assert candidates(msgs, rule) == [("a", 20), ("c", 10), ("d", 0)]
    assert candidates(msgs, rule, {"a"}) == [("c", 10), ("d", 0)]
    # a call without its result still holds its place among the last three
    assert plan_clearing([("x", 30_000), ("y", 30_000), ("a", 1), ("b", 1), ("d", 0)], 150_000,
                         MicrocompactRule(keep_tokens=10_000, min_savings=1))[0] == ["x", "y"]


def test_ager_clears_oldest_once_and_keeps_pairs():
    rule = MicrocompactRule(warning_tokens=30_000, keep_tokens=20_000, min_savings=5_000)
    ager = ClaudeCodeMicrocompactor(rule, estimate=lambda m: len(str(m.get("content") or "")) // 4)
    history = tool_session(6, names={1: "Task", 2: "mcp__x__y"})
    aged, report = ager.age(history[:3])  # first request: small
    assert report.redacted == 0 and not ager.events
    ager.age(history[:11])  # the next request: 5 x 10K tokens, compared at the one after
    aged, report = ager.age(history)  # the previous request (~50K) was above the threshold
    assert ager.events and report.redacted >= 1
    cleared = {m["tool_call_id"] for m in aged if m.get("_microcompacted")}
    assert "t1" not in cleared and "t2" not in cleared  # Task and mcp__ results are never cleared
    assert "t0" in cleared
    assert all(m["content"] == CLEARED_TEXT for m in aged if m.get("_microcompacted"))
    # same positions, same ids: every result still answers its call
    assert [m["id"] for m in aged] == [m["id"] for m in history]
    # a later request reuses the same cleared copies
    longer = history + tool_session(7)[-2:]
    longer[-2] = {**longer[-2], "id": "a-next"}
    again, _ = ager.age(longer)
    assert all(again[i] is aged[i] for i, m in enumerate(aged) if m.get("_microcompacted"))


def test_ager_compares_the_previous_request_size():
    rule = MicrocompactRule(warning_tokens=45_000, keep_tokens=10_000, min_savings=5_000)
    ager = ClaudeCodeMicrocompactor(rule, estimate=lambda m: len(str(m.get("content") or "")) // 4)
    history = tool_session(6)
    ager.age(history[:9])  # 4 results, ~40K: below
    ager.age(history[:11])  # 5 results, ~50K now, but the previous request was ~40K
    assert not ager.events
    ager.age(history)  # the previous request (~50K) was above: clears now
    assert len(ager.events) == 1 and ager.events[0].request == 2


@pytest.mark.parametrize(("version", "flag", "expected"), [
    ("2.1.15", None, True), ("2.0.76", None, True), ("1.0.58", None, False), (None, None, False),
    ("1.0.58", True, True), ("2.1.15", False, False),
])
def test_claude_code_preset_uses_it_for_recording_versions(version, flag, expected):
    params = {"client_version": version} if version else {}
    if flag is not None:
        params["microcompact"] = flag
    engine = build_engine("claude-code", context_window=200_000, model="claude-opus-4-5", **params)
    assert isinstance(engine.ager, ClaudeCodeMicrocompactor) is expected
    if expected:
        assert engine.ager.rule.warning_tokens == (135_000 if version != "1.0.58" else 147_000)
        assert engine.ager.estimate is not None
    assert microcompactor_for(version, flag, 200_000) is not None if expected else True


@pytest.mark.parametrize(("version", "flag", "ages"), [
    ("1.0.30", None, False),  # a known client before microcompaction: Claude Code clears nothing the spec's way
    (None, None, True),       # no version: the spec's aging, as before
    ("2.0.74", False, True),  # microcompaction explicitly off: the preset's own aging
])
def test_claude_code_without_microcompaction_runs_no_turn_aging(version, flag, ages):
    params = {"client_version": version} if version else {}
    if flag is not None:
        params["microcompact"] = flag
    engine = build_engine("claude-code", context_window=200_000, model="claude-opus-4-5", **params)
    assert (engine.ager is not None) is ages
    assert not isinstance(engine.ager, ClaudeCodeMicrocompactor)


def test_other_presets_never_microcompact():
    engine = build_engine("default", context_window=200_000, model="claude-opus-4-5")
    assert not isinstance(engine.ager, ClaudeCodeMicrocompactor)


def test_replay_applies_it():
    from opctx.lab.replay import replay

    history = tool_session(30)
    result = replay(history, "claude-code", context_window=200_000, model="claude-opus-4-5",
                    client_version="2.1.15", keep_contexts=True)
    steps = result.steps_df
    first = int(steps.index[steps["redacted"] > 0][0])
    # the request after the first one at or above 135K (2.1.15, auto-compaction on) clears
    assert steps["tokens"].iloc[first - 1] >= 135_000 > steps["tokens"].iloc[first - 2]
    assert steps["tokens"].iloc[first] < 135_000 and steps["tokens_freed_by_aging"].iloc[first] > 20_000
    ctx = result.context(first)
    cleared = [m for m in ctx if m.get("content") == CLEARED_TEXT]
    assert cleared and all(m["role"] == "tool" for m in cleared)
    # a client from before microcompaction keeps everything and compacts instead
    older = replay(history, "claude-code", context_window=200_000, model="claude-opus-4-5",
                   client_version="1.0.30", keep_contexts=False)
    assert older.steps_df["compacted"].any() and not older.steps_df["redacted"].any()


def test_ager_compares_the_provider_count_when_the_history_has_one():
    rule = MicrocompactRule(warning_tokens=147_000, keep_tokens=20_000, min_savings=5_000)
    ager = ClaudeCodeMicrocompactor(rule, estimate=lambda m: len(str(m.get("content") or "")) // 4)
    history = tool_session(6)
    # the estimate alone (~60K) is far below 147K; the provider counted more (system prompt, tools...)
    for i, count in enumerate([100_000, 110_000, 120_000, 130_000, 140_000, 150_000]):
        history[1 + 2 * i] = {**history[1 + 2 * i], "usage": {"input_tokens": 10, "cache_read_tokens": count - 10,
                                                               "cache_write_tokens": 0, "output_tokens": 5}}
    ager.age(history[:11])  # the last request counted 140K: below
    assert not ager.events
    aged, report = ager.age(history + [{"id": "a-next", "role": "assistant", "content": "", "timestamp": 99.0}])
    # the last response's prompt + output, as the client counts it
    assert len(ager.events) == 1 and ager.events[0].context_tokens == 150_005 and report.redacted >= 1
    # a count from before a compaction summary is not the current context's
    fresh = ClaudeCodeMicrocompactor(rule, estimate=lambda m: len(str(m.get("content") or "")) // 4)
    summary = {"id": "s", "role": "user", "content": "summary", "compaction": {"kind": "summary"}}
    fresh.age(history + [summary, {"id": "u-after", "role": "user", "content": "go on"}])
    assert not fresh.events


def test_replay_of_a_recording_clears_where_its_counts_say():
    from opctx.lab.replay import replay

    history = tool_session(12, chars=50_000)
    for i in range(12):  # the provider's counts grow 10K per request from 100K
        history[1 + 2 * i] = {**history[1 + 2 * i], "usage": {"input_tokens": 100_000 + 10_000 * i,
                                                               "cache_read_tokens": 0, "cache_write_tokens": 0,
                                                               "output_tokens": 5}}
    # the client's auto-compaction off (its setting moves the clearing's warning threshold, and
    # the preset never compacts by itself); the replay counts on the recorded usage by default
    result = replay(history, "claude-code", context_window=200_000, model="claude-opus-4-5",
                    client_version="2.1.19", keep_contexts=False, auto_compact=False)
    assert result.mode == "provider usage" and not result.steps_df["compacted"].any()
    redacted = list(result.steps_df["redacted"])
    first = next(i for i, n in enumerate(redacted) if n)
    # request 5 reported 150K + 5 (>= 148K, auto-compaction off): the client clears before request 6
    assert first == 6


def test_corpus_replays_clear_where_the_recordings_did(corpus_dir):
    """``replay(history, "claude-code", ...)`` with each recording's version and settings (docs/lab.md)."""
    from opctx.importers.claude_code import parse_claude_code_jsonl
    from opctx.lab.aging_fidelity import recorded_microcompactions
    from opctx.lab.client_settings import infer_client_settings
    from opctx.lab.history import as_history
    from opctx.lab.replay import replay

    hits = total = 0
    for path in sorted((corpus_dir / "claude_code_jsonl").glob("*/*.jsonl")):
        if b"microcompact_boundary" not in path.read_bytes():
            continue
        history = as_history(parse_claude_code_jsonl(str(path), with_subagents=False)[0])
        recorded = [p["request"] for p in recorded_microcompactions(history)]
        if not recorded:
            continue
        settings = infer_client_settings(history)
        rule = rule_for_version(history.client_version, auto_compact=settings.auto_compact)
        redacted = list(replay(history, "claude-code", client_version=history.client_version, microcompact=rule,
                               keep_contexts=False, **settings.params()).steps_df["redacted"])
        clears = [i for i in range(1, len(redacted)) if redacted[i] > redacted[i - 1]]
        total += len(recorded)
        hits += sum(1 for r in recorded if any(abs(c - r) <= 1 for c in clears))
    assert total == 13 and hits >= 11


@pytest.mark.parametrize("n", [60, 120])
def test_ager_estimates_each_message_once_however_long_the_replay(n):
    """Linearity by counting work: every request used to re-estimate the whole history
    (quadratic); now each message is estimated once, each cleared copy once more."""
    calls = []

    def estimate(msg):
        calls.append(msg.get("id"))
        return len(str(msg.get("content") or "")) // 4

    ager = ClaudeCodeMicrocompactor(rule_for(200_000), estimate=estimate)
    msgs = tool_session(n, chars=16_000)
    for end in range(2, len(msgs) + 1):  # one request per step, the history growing as in a replay
        ager.age(msgs[:end])
    cleared = sum(len(e.tool_call_ids) for e in ager.events)
    assert ager.events  # the rule did clear: cleared copies were estimated as well
    assert ager.estimates == len(calls) <= len(msgs) + 2 * cleared
