"""Claude Code's microcompaction modelled: the rule, the ager, the claude-code preset hook."""

from __future__ import annotations

import pytest

from opctx.lab.microcompact import (
    CLEARED_TEXT,
    ClaudeCodeMicrocompactor,
    MicrocompactRule,
    is_clearable,
    microcompactor_for,
    plan_clearing,
    records_microcompaction,
    result_tokens,
    rule_for,
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


def test_versions_that_record_it():
    assert records_microcompaction("2.1.9") and records_microcompaction("2.1.19")
    assert records_microcompaction("2.2.0")
    assert not records_microcompaction("2.0.76") and not records_microcompaction(None)
    assert not records_microcompaction("garbage")


def test_clearable_tools():
    assert all(is_clearable(n) for n in ("Read", "Bash", "Grep", "Glob", "Edit", "Write", "WebFetch"))
    assert not any(is_clearable(n) for n in ("Task", "TaskOutput", "mcp__srv__tool", "AskUserQuestion",
                                             "ExitPlanMode", None, 3))


def test_rule_and_plan():
    rule = rule_for(200_000)
    assert rule.warning_tokens == 147_000 and rule.keep_tokens == 40_000 and rule.min_savings == 20_000
    assert result_tokens({"role": "tool", "content": "x" * 401}) == 101
    results = [(f"t{i}", 10_000) for i in range(8)]
    # below the warning threshold: nothing
    assert plan_clearing(results, 146_999, rule) is None
    ids, pre, saved = plan_clearing(results, 147_000, rule)
    # oldest first until at most 40K remain: 80K -> clear 4
    assert ids == ["t0", "t1", "t2", "t3"] and pre == 80_000 and saved == 40_000
    # a saving under 20K is not worth it
    assert plan_clearing([(f"t{i}", 10_000) for i in range(5)], 200_000, rule) is None
    # the last 3 results are never cleared, even if they are all there is
    big = [("old", 1_000), ("a", 50_000), ("b", 50_000), ("c", 50_000)]
    assert plan_clearing(big, 200_000, rule) is None
    assert plan_clearing(big, 200_000, MicrocompactRule(keep_recent=0))[0] == ["old", "a", "b", "c"]


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
    eager = ClaudeCodeMicrocompactor(MicrocompactRule(**{**rule.__dict__, "count_since_last_request": True}),
                                     estimate=lambda m: len(str(m.get("content") or "")) // 4)
    eager.age(history[:9])
    eager.age(history[:11])
    assert len(eager.events) == 1 and eager.events[0].request == 1


@pytest.mark.parametrize(("version", "flag", "expected"), [
    ("2.1.15", None, True), ("2.0.76", None, False), (None, None, False),
    ("2.0.76", True, True), ("2.1.15", False, False),
])
def test_claude_code_preset_uses_it_for_recording_versions(version, flag, expected):
    params = {"client_version": version} if version else {}
    if flag is not None:
        params["microcompact"] = flag
    engine = build_engine("claude-code", context_window=200_000, model="claude-opus-4-5", **params)
    assert isinstance(engine.ager, ClaudeCodeMicrocompactor) is expected
    if expected:
        assert engine.ager.rule.warning_tokens == 147_000
        assert engine.ager.estimate is not None
    assert microcompactor_for(version, flag, 200_000) is not None if expected else True


@pytest.mark.parametrize(("version", "flag", "ages"), [
    ("2.0.74", None, False),  # a known client before 2.1.0: Claude Code clears nothing the spec's way
    (None, None, True),       # no version: the spec's aging, as before
    ("2.0.74", False, True),  # microcompaction explicitly off: the preset's own aging
])
def test_claude_code_before_2_1_runs_no_turn_aging(version, flag, ages):
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
    # the request after the first one above 147K clears, and the context drops below it
    assert steps["tokens"].iloc[first - 1] >= 147_000 > steps["tokens"].iloc[first - 2]
    assert steps["tokens"].iloc[first] < 147_000 and steps["tokens_freed_by_aging"].iloc[first] > 20_000
    assert not steps["compacted"].any()  # clearing kept it below the auto-compaction trigger
    ctx = result.context(first)
    cleared = [m for m in ctx if m.get("content") == CLEARED_TEXT]
    assert cleared and all(m["role"] == "tool" for m in cleared)
    # a version that does not record microcompaction keeps the spec's aging and compacts instead
    older = replay(history, "claude-code", context_window=200_000, model="claude-opus-4-5",
                   client_version="2.0.76", keep_contexts=False)
    assert older.steps_df["compacted"].any()


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
    assert len(ager.events) == 1 and ager.events[0].context_tokens == 150_000 and report.redacted >= 1
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
    result = replay(history, "claude-code", context_window=200_000, model="claude-opus-4-5",
                    client_version="2.1.19", keep_contexts=False)
    redacted = list(result.steps_df["redacted"])
    first = next(i for i, n in enumerate(redacted) if n)
    # request 5 reported 150K (>= 147K): the client clears before request 6
    assert first == 6


def test_corpus_replays_clear_where_the_recordings_did(corpus_dir):
    """``replay(history, "claude-code", client_version=...)`` on the corpus (docs/lab.md figure)."""
    from opctx.importers.claude_code import parse_claude_code_jsonl
    from opctx.lab.aging_fidelity import recorded_microcompactions
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
        redacted = list(replay(history, "claude-code", client_version=history.client_version,
                               keep_contexts=False).steps_df["redacted"])
        clears = [i for i in range(1, len(redacted)) if redacted[i] > redacted[i - 1]]
        total += len(recorded)
        hits += sum(1 for r in recorded if any(abs(c - r) <= 1 for c in clears))
    assert total == 13 and hits >= 12
