"""The tuner says how its replay counted requests, and flags a configuration that cannot work."""

from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets")

from opctx.lab.calibrate import simulated_recording  # noqa: E402
from opctx.widgets.tuner import CompactionTuner  # noqa: E402


@pytest.fixture(scope="module")
def heavy():
    """A client whose every request carries 60,000 tokens the transcript does not hold."""
    return simulated_recording(155_000, requests=40, seed=2, overhead=60_000)


def test_a_window_under_the_fixed_part_is_flagged_in_red(heavy):
    tuner = CompactionTuner(heavy, preset="claude-code", context_window=64_000, debounce_ms=0)
    assert tuner.result.mode == "provider usage"
    assert "counted on provider usage" in tuner.status.value
    assert "cannot work here: overhead at or above the trigger" in tuner.status.value
    assert "color:#b00" in tuner.status.value
    tuner.window.value = 200_000
    tuner.update()
    assert "counted on provider usage" in tuner.status.value and "cannot work here" not in tuner.status.value
