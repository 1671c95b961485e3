"""CompactionTuner shows nothing its last replay did not produce: the guard's warning goes
with the replay it is about, and the output reserve is the one kept at the window."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("ipywidgets")

from opctx.lab.scenarios import generate_session  # noqa: E402
from opctx.widgets.tuner import CompactionTuner  # noqa: E402


@pytest.fixture(scope="module")
def session():
    # long enough that a 16,000 window makes the default preset's guard give up
    return generate_session(1).messages


def test_the_guard_warning_is_the_replays_and_goes_with_it(session, caplog):
    caplog.set_level(logging.WARNING, logger="opctx.lab.replay")
    t = CompactionTuner(session, preset="default", context_window=16_000, debounce_ms=0)
    warning = t.warnings.value
    assert "auto-compaction was disabled" in warning and "&#x27;default&#x27;" in warning
    assert "window 16,000" in warning
    # shown beside the replay, not logged into the cell's output where it would stay
    assert not [r for r in caplog.records if "auto-compaction was disabled" in r.getMessage()]

    t.preset.value = "claude-code"
    assert "&#x27;claude-code&#x27;" in t.warnings.value and "default" not in t.warnings.value
    t.window.value = 32_000
    assert t.warnings.value == "", "a warning from an earlier replay stayed"
    # going back to a setting seen before brings its own warning back with its picture
    t.window.value = 16_000
    assert "&#x27;claude-code&#x27;" in t.warnings.value


def test_a_failed_replay_leaves_no_warning_of_another(session):
    t = CompactionTuner(session, preset="default", context_window=16_000, debounce_ms=0)
    assert t.warnings.value
    t._replay = lambda *a, **k: (_ for _ in ()).throw(ValueError("broken"))
    t.window.value = 20_000
    assert "replay failed" in t.status.value and t.warnings.value == ""


@pytest.mark.parametrize("window", [8_000, 32_000, 64_000, 200_000])
def test_the_output_reserve_never_reads_larger_than_the_window(session, window):
    from opctx.context.budget import BudgetAllocator

    # claude-sonnet-4-5's max output is 64,000: as a base it is twice a 32,000 window
    assert BudgetAllocator().base_reserve("claude-sonnet-4-5") == 64_000
    for preset in ("default", "claude-code", "codex"):
        t = CompactionTuner(session, preset=preset, context_window=window, debounce_ms=0)
        reserve = t.controls["budget.output_reserve"]
        assert reserve.value <= window and reserve.max <= window, (preset, reserve.value, reserve.max)
        # the control reads what the replay kept: its window minus its input budget
        kept = window - int(t.result.steps_df.input_budget.iloc[-1])
        assert reserve.value == kept
        assert f"output reserve {kept:,}" in t.status.value


def test_the_reserve_follows_the_window_until_the_user_moves_it(session):
    t = CompactionTuner(session, preset="default", context_window=32_000, debounce_ms=0)
    assert t.controls["budget.output_reserve"].value == 8_000  # 25% of 32,000
    t.window.value = 200_000
    assert t.controls["budget.output_reserve"].value == 50_000  # 25% of 200,000 < 64,000
    t.controls["budget.output_reserve"].value = 4_000
    t.window.value = 32_000
    assert t.controls["budget.output_reserve"].value == 4_000
    assert t.params()["budget.output_reserve"] == 4_000
    assert "output reserve 4,000" in t.status.value
