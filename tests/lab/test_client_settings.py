"""What a recording shows of its client's settings, and the leave-one-session-out choice."""

from __future__ import annotations

import pytest

from opctx.lab.calibrate import simulated_recording
from opctx.lab.client_settings import (
    ClientSettings,
    infer_client_settings,
    loso_settings,
    settings_for,
)


def test_an_automatic_compaction_says_on():
    rec = simulated_recording(155_000, requests=60, seed=1)
    found = infer_client_settings(rec)
    assert found.auto_compact is True and "automatic compaction" in found.evidence
    assert found.params() == {"auto_compact": True}


def test_running_past_the_trigger_without_compacting_says_off():
    rec = simulated_recording(155_000, requests=60, seed=1, auto_compact=False)
    assert not rec.compactions
    found = infer_client_settings(rec)
    assert found.auto_compact is False and "155,000 threshold without a compaction" in found.evidence


def test_a_short_recording_says_nothing():
    rec = simulated_recording(155_000, requests=10, seed=1)
    assert infer_client_settings(rec) == ClientSettings()
    assert ClientSettings().params() == {}


def test_loso_takes_the_majority_of_the_other_groups_of_the_same_rule():
    on = [simulated_recording(155_000, requests=60, seed=s, session_id=f"on{s}") for s in range(2)]
    off = simulated_recording(155_000, requests=60, seed=9, auto_compact=False, session_id="off")
    newer = simulated_recording(167_000, requests=60, seed=3, version="2.1.30", session_id="new")
    chosen = loso_settings([*on, off, newer])
    assert [c.auto_compact for c in chosen] == [True, True, True, None]
    assert "2 of 2 other sessions" in chosen[2].evidence
    # the same group never votes for itself
    assert [c.auto_compact for c in loso_settings([on[0], off], groups=[0, 0])] == [None, None]
    assert [c.auto_compact for c in settings_for([off], "recording")] == [False]
    assert [c.auto_compact for c in settings_for([off], "default")] == [None]
    with pytest.raises(ValueError, match="settings"):
        settings_for([off], "majority")
