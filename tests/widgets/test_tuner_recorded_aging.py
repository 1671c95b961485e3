"""The tuner draws a recording's microcompactions on its request timeline (escaped)."""

from __future__ import annotations

import types

import pandas as pd
import pytest

pytest.importorskip("ipywidgets")

from opctx.widgets.tuner import CompactionTuner, _mark_recorded_aging  # noqa: E402

CATALOGUE = {"default": {"trigger.auto_pct": 0.8, "aging.kind": "turns"}}


def _messages(with_event: bool) -> list[dict]:
    msgs: list[dict] = []
    t = 1_700_000_000.0
    for turn in range(6):
        msgs.append({"id": f"u{turn}", "role": "user", "content": f"turn {turn}", "timestamp": t})
        msgs.append({"id": f"a{turn}", "role": "assistant", "content": "", "timestamp": t + 1,
                     "tool_calls": [{"id": f"c{turn}", "name": "Read", "arguments": {"p": "x"}}]})
        msgs.append({"id": f"t{turn}", "role": "tool", "name": "Read", "tool_call_id": f"c{turn}",
                     "content": "line of code\n" * 150, "timestamp": t + 2})
        if with_event and turn == 3:
            msgs.append({"id": "mc", "role": "system", "content": "Context microcompacted", "timestamp": t + 2,
                         "display_only": True, "microcompaction": {
                             "uuid": "<img src=x onerror=alert(1)>", "trigger": "auto", "pre_tokens": 50_000,
                             "tokens_saved": 21_000, "tool_call_ids": ["c0", "c1"]}})
        msgs.append({"id": f"f{turn}", "role": "assistant", "content": "ok", "timestamp": t + 3})
        t += 10
    return msgs


def _fake_replay(history, preset, *, context_window=None, keep_contexts=True, **params):
    n = history.n_requests
    steps = pd.DataFrame({"step": range(n), "tokens": [1000 * (i + 1) for i in range(n)],
                          "tokens_none": [1000 * (i + 1) for i in range(n)],
                          "budget_pct": [0.05 * (i + 1) for i in range(n)], "compacted": [False] * n})
    comps = pd.DataFrame(columns=["step", "turn", "reason", "tokens_before", "tokens_after", "folded", "kept",
                                  "protected", "fell_back_to_structural", "ok", "cut_index", "summary_chars"])
    return types.SimpleNamespace(steps_df=steps, compactions_df=lambda: comps, context_window=context_window or 10_000)


def test_markers_status_and_table():
    tuner = CompactionTuner(_messages(True), presets=CATALOGUE, replay=_fake_replay, debounce_ms=0,
                            context_window=10_000)
    (event,) = tuner.recorded_aging
    # 3 turns of 2 requests and the 4th turn's tool request came before: it preceded request 7
    assert event["request"] == 7
    assert "1</b> recorded microcompaction" in tuner.status.value
    table = tuner.table.value
    assert "recorded microcompaction(s)" in table and "21000" in table
    assert "<img" not in table and "&lt;img src=x" in table
    plain = CompactionTuner(_messages(False), presets=CATALOGUE, replay=_fake_replay, debounce_ms=0,
                            context_window=10_000)
    assert plain.recorded_aging == [] and "microcompaction" not in plain.table.value
    assert plain.plot.value != tuner.plot.value  # the marker changes the picture


def test_marker_placement():
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    assert _mark_recorded_aging(ax, 10, [{"request": 4}, {"request": 40}, {"request": None}])
    xs = [line.get_xdata()[0] for line in ax.get_lines()]
    assert xs == [4]
    assert [t for t in (line.get_label() for line in ax.get_lines())] == ["recorded microcompaction"]
    assert not _mark_recorded_aging(Figure().subplots(), 10, [])
