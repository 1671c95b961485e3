"""``feasibility``: a configuration whose trigger sits under the client's fixed part cannot work."""

from __future__ import annotations

import pytest

from opctx.lab.calibrate import simulated_recording
from opctx.lab.feasibility import FeasibilityReport, feasibility, replay_mode
from opctx.lab.replay import replay


@pytest.fixture(scope="module")
def heavy():
    """A client whose every request carries 60,000 tokens the transcript does not hold."""
    return simulated_recording(155_000, requests=60, seed=2, overhead=60_000)


def test_a_trigger_under_the_fixed_part_is_flagged_with_its_figures(heavy):
    small = replay(heavy, "claude-code", context_window=64_000, feed_usage=True, aging=False, keep_contexts=False)
    report = feasibility(small)
    assert report.mode == "provider usage" and not report.ok
    # the replay fired on its very first check: that check bounds the trigger from above
    assert report.first_request_tokens >= 60_000 and report.floor_tokens >= report.trigger_tokens
    assert any(p.startswith("overhead at or above the trigger") for p in report.problems)
    assert any(p.startswith("every request compacting") for p in report.problems)
    row = report.row()
    assert row["feasible"] is False and row["replay_mode"] == "provider usage" and row["compaction_rate"] >= 0.5
    # with the preset's own trigger (64K window: 64,000 - 16,000 - 13,000) the first request says it alone
    from opctx.lab.presets import resolve_trigger

    trigger = resolve_trigger("claude-code", context_window=64_000, model=heavy.model,
                              client_version=heavy.client_version).auto_tokens
    assert trigger == 35_000
    given = feasibility(small, trigger_tokens=trigger)
    assert "the first request already counts 60,010" in given.problems[0]


def test_a_trigger_on_the_history_alone_is_not_under_the_fixed_part(heavy):
    """LangChain's token trigger counts the agent's messages: the 60,000 tokens every request
    carries are not in its count, so no overhead verdict (it may still compact often)."""
    result = replay(heavy, "langchain-summarization", feed_usage=True, keep_contexts=False)
    assert result.policy.trigger.tokens_of == "history"
    report = feasibility(result)
    assert report.first_request_tokens >= 60_000
    assert not any(p.startswith("overhead at or above the trigger") for p in report.problems)


def test_the_client_s_own_window_works(heavy):
    full = replay(heavy, "claude-code", feed_usage=True, aging=False, keep_contexts=False)
    report = feasibility(full)
    assert report.ok and report.row()["feasibility_problems"] == ""


def test_estimates_say_so(heavy):
    small = replay(heavy, "claude-code", context_window=64_000, feed_usage=False, aging=False, keep_contexts=False)
    assert replay_mode(small) == "estimates" and small.mode == "estimates"
    report = feasibility(small, trigger_tokens=35_000)
    # on estimates the fixed part is unseen; the first request's recorded count still shows it
    assert report.trigger_tokens == 35_000 and not report.ok
    assert report.problems[-1].startswith("measured on estimates")


def test_an_empty_report_is_fine():
    assert FeasibilityReport("estimates", None, None, None, 0.0).row()["feasible"] is True


def test_the_default_is_the_provider_count_where_the_recording_has_one(heavy):
    """A recording with provider usage replays fed by default; the result, its metrics and its
    frames say so, and the infeasible configuration is flagged in the metrics (sweep rows)."""
    small = replay(heavy, "claude-code", context_window=64_000, aging=False)
    assert small.mode == "provider usage" and small.params["feed_usage"] is True
    assert set(small.steps_df["replay_mode"]) == {"provider usage"}
    assert set(small.compactions_df()["replay_mode"]) == {"provider usage"}
    metrics = small.metrics(reference_loss=False)
    assert metrics["replay_mode"] == "provider usage" and metrics["feasible"] is False
    assert "overhead at or above the trigger" in metrics["feasibility_problems"]
    # the estimate-only replay of the same configuration stays available, and says what it is
    bare = replay(heavy, "claude-code", context_window=64_000, feed_usage=False, aging=False)
    assert bare.mode == "estimates" and bare.metrics(reference_loss=False)["replay_mode"] == "estimates"


def test_a_recording_without_usage_replays_on_estimates():
    messages = [{"role": "user", "content": "hello " * 50}, {"role": "assistant", "content": "hi " * 50}] * 5
    result = replay(messages, "default")
    assert result.mode == "estimates" and result.params["feed_usage"] is False
    assert result.metrics(reference_loss=False)["feasible"] is True


def test_sweep_rows_carry_the_mode_and_the_verdict(heavy):
    from opctx.lab.sweep import sweep

    df = sweep([heavy], [{"preset": "claude-code", "context_window": 64_000, "aging": False},
                         {"preset": "claude-code", "aging": False}], progress=False)
    assert list(df["replay_mode"]) == ["provider usage", "provider usage"]
    assert list(df["feasible"]) == [False, True]
