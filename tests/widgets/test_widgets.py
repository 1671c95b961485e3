"""opctx.widgets: the tuner, the cut-point explorer and the diff viewer, driven from Python."""

from __future__ import annotations

import asyncio
import dataclasses
import types

import pandas as pd
import pytest
from _compaction_fixtures import HistoryBuilder

from opctx.context.summarize import SummarizerConfig, find_cut_index
from opctx.widgets._common import Debouncer, html_table
from opctx.widgets.cutpoints import CutPointExplorer, cut_rows
from opctx.widgets.diffview import BranchDiffViewer
from opctx.widgets.tuner import CompactionTuner, control_for


def _messages(n_turns: int = 12) -> list[dict]:
    msgs: list[dict] = []
    t = 1_700_000_000.0
    for turn in range(n_turns):
        msgs.append({"id": f"u{turn}", "role": "user", "content": f"turn {turn}: fix bug {turn}",
                     "timestamp": t})
        msgs.append({"id": f"a{turn}", "role": "assistant", "content": "", "timestamp": t + 1,
                     "tool_calls": [{"id": f"c{turn}", "name": "read", "arguments": {"p": "x"}}]})
        msgs.append({"id": f"t{turn}", "role": "tool", "name": "read", "tool_call_id": f"c{turn}",
                     "content": "line of code\n" * 150, "timestamp": t + 2})
        msgs.append({"id": f"f{turn}", "role": "assistant", "content": f"fixed bug {turn}",
                     "timestamp": t + 3})
        t += 10
    return msgs


# -- Debouncer -----------------------------------------------------------------------------


def test_debouncer_runs_once_after_the_last_trigger_on_a_loop():
    calls = []
    deb = Debouncer(lambda: calls.append(asyncio.get_running_loop().time()), delay=0.05)

    async def burst():
        for _ in range(5):
            deb.trigger()
            await asyncio.sleep(0.01)
        assert calls == []  # still within the quiet period
        await asyncio.sleep(0.15)

    asyncio.run(burst())
    assert len(calls) == 1 and deb.calls == 1


def test_debouncer_without_a_loop_is_synchronous():
    calls = []
    deb = Debouncer(lambda: calls.append(1), delay=0.2)
    deb.trigger()
    deb.trigger()
    assert calls == [1, 1]


def test_html_table_escapes_cells_headers_and_caption():
    out = html_table(["<th>"], [["<script>x</script>"]], caption="<b>", row_classes=['"x'])
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "<th>&lt;th&gt;</th>" in out and "&lt;b&gt;" in out and 'class="&quot;x"' in out


# -- CutPointExplorer -------------------------------------------------------------------------


def test_cut_point_explorer_matches_find_cut_index():
    msgs = _messages()
    w = CutPointExplorer(msgs, context_window=8192, debounce_ms=0)
    assert w.step.max == len(msgs) and w.step.value == len(msgs)
    cfg = w.current_config()
    expected = find_cut_index(msgs, 8192, cfg)
    got = w.cut()
    assert (got.index, got.ok, got.protected_head) == (expected.index, expected.ok,
                                                      expected.protected_head)
    assert expected.ok, expected.reason
    assert f"Cut index <b>{expected.index}</b>" in w.summary.value
    folded = expected.index - expected.protected_head
    assert f"folds <b>{folded}</b> messages" in w.summary.value


def test_cut_point_explorer_reacts_to_every_control():
    w = CutPointExplorer(_messages(), context_window=8192, debounce_ms=0)
    seen = {w.table.value}
    w.step.value = 20
    seen.add(w.table.value)
    assert "Active context: <b>20</b> messages" in w.summary.value
    w.protect_first_n.value = 0
    seen.add(w.table.value)
    w.window.value = 4096
    seen.add(w.table.value)
    assert len(seen) == 4


@pytest.mark.parametrize("window", [32_000, 200_000, 8_192, 1_000_000, 1_500])
def test_cut_point_explorer_uses_the_window_given(window):
    """The value given is the value used, and no control can be snapped off it in the
    browser: a slider's front end rounds to ``min + k * step`` (32,000 became 31,744)."""
    w = CutPointExplorer(_messages(), context_window=window, debounce_ms=0)
    assert w.window.value == window
    assert w.cut().reason == find_cut_index(w.messages, window, w.current_config()).reason
    for control in (w.step, w.window, w.protect_first_n, w.protect_last_n, w.keep_min_tokens):
        assert control.min <= control.value <= control.max
        assert (control.value - control.min) % control.step == 0, control.description


def test_cut_rows_statuses_and_elision():
    msgs = _messages(30)
    cut = find_cut_index(msgs, 16384, SummarizerConfig())
    tokens = [1] * len(msgs)
    rows, classes = cut_rows(msgs, cut, tokens, max_rows=30)
    statuses = [c for c in classes if not c.startswith("gap")]
    assert statuses == sorted(statuses, key=["protected", "folded", "kept"].index)
    assert len(rows) <= 30 + 3
    gaps = [r for r, c in zip(rows, classes, strict=True) if c.startswith("gap")]
    hidden = sum(int(r[2].split()[0]) for r in gaps)
    assert len(rows) - len(gaps) + hidden == len(msgs)  # nothing lost, only elided
    # indices of shown rows are exactly the message positions
    shown = [r[0] for r, c in zip(rows, classes, strict=True) if not c.startswith("gap")]
    assert shown == sorted(shown) and shown[0] == 0 and shown[-1] == len(msgs) - 1


def _pinning_history() -> tuple[list[dict], int, int]:
    """A request, then one thinking turn and a tool loop far over any keep budget: the cut
    pins the request and the loop's first tool group (``CutPoint.pinned``)."""
    h = HistoryBuilder()
    h.user("a")
    h.answer("b")
    h.user("c")
    task = h.user("port the <whole> module")
    first = h.loop(60, size=1_500, think="first")[0]
    return h.messages, task, first


def test_cut_rows_show_pinned_positions():
    msgs, task, first = _pinning_history()
    cut = find_cut_index(msgs, 32_000, SummarizerConfig())
    assert cut.ok and cut.pinned == (task, first, first + 1), cut.steps
    rows, classes = cut_rows(msgs, cut, [1] * len(msgs), max_rows=30)
    pinned_rows = [r[0] for r, c in zip(rows, classes, strict=True) if c == "pinned"]
    assert pinned_rows == list(cut.pinned)  # always shown, never elided
    assert all(r[1] == "pinned" for r, c in zip(rows, classes, strict=True) if c == "pinned")
    shown = [r[0] for r, c in zip(rows, classes, strict=True) if not c.startswith("gap")]
    assert shown == sorted(shown)  # in branch order, between the folded rows around them
    statuses = [c for c in classes if not c.startswith("gap")]
    assert statuses.index("pinned") > statuses.index("protected")
    assert len(rows) <= 30 + 3 + len(cut.pinned)
    gaps = [r for r, c in zip(rows, classes, strict=True) if c.startswith("gap")]
    assert len(rows) - len(gaps) + sum(int(r[2].split()[0]) for r in gaps) == len(msgs)
    # a cut that declines pins nothing, whatever it carries
    declined = dataclasses.replace(cut, ok=False)
    _, classes = cut_rows(msgs, declined, [1] * len(msgs))
    assert "pinned" not in classes and "folded" not in classes


def test_cut_point_explorer_shows_what_the_cut_pins():
    msgs, task, first = _pinning_history()
    w = CutPointExplorer(msgs, context_window=32_000, debounce_ms=0)
    cut = w.cut()
    assert cut.pinned == (task, first, first + 1)
    assert w.table.value.count('class="pinned"') == len(cut.pinned)
    folded = cut.index - cut.protected_head - len(cut.pinned)
    kept = len(msgs) - cut.index + len(cut.pinned)
    assert f"folds <b>{folded}</b> messages" in w.summary.value
    assert f"keeps <b>{kept}</b>" in w.summary.value
    assert f"<b>3</b> pinned after the summary ({task}-{first + 1}," in w.summary.value
    assert "&lt;whole&gt;" in w.table.value and "<whole>" not in w.table.value
    # tokens: folded + kept + head add up to the context, pinned counted with what is kept
    tokens = w.tokens
    folded_tok = sum(tokens[cut.protected_head : cut.index]) - sum(tokens[i] for i in cut.pinned)
    assert f"(\u2248{folded_tok:,} tokens) after a protected head" in w.summary.value


def test_cut_point_explorer_refuses_an_empty_session():
    with pytest.raises(ValueError, match="no messages"):
        CutPointExplorer([])


# -- CompactionTuner (with a fake replay: the widget logic alone) -------------------------------


class FakeReplay:
    """Records calls; the result's shape is that of opctx.lab.replay.ReplayResult."""

    def __init__(self):
        self.calls = []

    def __call__(self, history, preset, *, context_window=None, keep_contexts=True, **params):
        self.calls.append((preset, context_window, dict(params)))
        trigger = params.get("trigger.auto_pct", 0.8)
        n = 10
        steps = pd.DataFrame({
            "step": range(n),
            "tokens": [1000 * (i + 1) for i in range(n)],
            "tokens_none": [1000 * (i + 1) for i in range(n)],
            "budget_pct": [min(0.1 * (i + 1), trigger) for i in range(n)],
            "compacted": [abs(0.1 * (i + 1) - trigger) < 1e-9 for i in range(n)],
        })
        comps = pd.DataFrame([{
            "step": int(trigger * 10), "turn": 1, "reason": "auto", "tokens_before": 8000,
            "tokens_after": int(8000 * trigger / 2), "folded": int(trigger * 10), "kept": 2,
            "protected": 1, "fell_back_to_structural": True, "ok": True,
            "cut_index": int(trigger * 10), "summary_chars": 10,
        }])
        return types.SimpleNamespace(steps_df=steps, compactions_df=lambda: comps,
                                     context_window=context_window or 10_000)


CATALOGUE = {
    "default": {"trigger.auto_pct": 0.8, "cut.keep_min_tokens": 8000, "cut.protect_first_n": 3,
                "aging.kind": "turns", "budget.reserve_policy": "cap", "note": None},
    "hermes": {"trigger.auto_pct": 0.5, "cut.keep_min_tokens": 4000, "cut.protect_first_n": 3,
               "aging.kind": "none", "budget.reserve_policy": "cap", "note": None},
}


def test_controls_follow_the_default_types():
    import ipywidgets as widgets

    assert isinstance(control_for("trigger_pct", 0.8), widgets.FloatSlider)
    assert isinstance(control_for("aging", True), widgets.Checkbox)
    big = control_for("keep_min_tokens", 8000)
    assert isinstance(big, widgets.IntSlider) and big.max == 32000 and big.step == 100
    assert isinstance(control_for("protect_first_n", 3), widgets.IntSlider)
    assert control_for("note", None) is None
    # a policy field: the control of its kind, its meaning and source as the tooltip
    trigger = control_for("trigger.auto_pct", 0.8)
    assert isinstance(trigger, widgets.FloatSlider) and trigger.min == 0.05 and trigger.max == 1.0
    assert "spec §4" in trigger.tooltip
    assert control_for("trigger.emergency_pct", 1.004).max == 1.004  # a share past the budget
    assert isinstance(control_for("budget.reserve_policy", "cap"), widgets.Dropdown)
    assert control_for("budget.reserve_policy", "cap").options == ("cap", "floor")
    assert isinstance(control_for("aging.kind", "turns"), widgets.Dropdown)
    assert isinstance(control_for("cut.fold_current_turn", False), widgets.Checkbox)
    assert isinstance(control_for("aging.keep_recent_seconds", 60), widgets.FloatSlider)
    assert control_for("trigger.auto_pct", None) is None  # never: no control
    # an optional share that refuses 0: a slider whose 0 stands for "off" (None)
    from opctx.widgets.tuner import _control_value

    share = control_for("cut.overflow_keep_share", None)
    assert isinstance(share, widgets.FloatSlider) and (share.value, share.max) == (0.0, 1.0)
    assert _control_value("cut.overflow_keep_share", share) is None
    share.value = 0.5
    assert _control_value("cut.overflow_keep_share", share) == 0.5


def test_tuner_replays_on_change_and_redraws():
    fake = FakeReplay()
    t = CompactionTuner(_messages(), presets=CATALOGUE, replay=fake, debounce_ms=0,
                        context_window=10_000)
    assert set(t.controls) == {"trigger.auto_pct", "cut.keep_min_tokens", "cut.protect_first_n",
                               "aging.kind", "budget.reserve_policy"}
    assert fake.calls == [("default", 10_000, {})]
    plot0, table0 = t.plot.value, t.table.value
    assert plot0.startswith('<img alt="plot"') and "data:image/png;base64," in plot0
    t.controls["trigger.auto_pct"].value = 0.6
    assert fake.calls[-1] == ("default", 10_000, {"trigger.auto_pct": 0.6})
    assert t.plot.value != plot0 and t.table.value != table0
    # going back is served from the cache: no replay, and the very same picture
    from unittest import mock

    with mock.patch("opctx.widgets.tuner.figure_html", side_effect=AssertionError("redrawn")):
        t.controls["trigger.auto_pct"].value = 0.8
    assert len(fake.calls) == 2 and t.table.value == table0 and t.plot.value == plot0


def test_tuner_preset_switch_resets_controls_with_one_replay():
    fake = FakeReplay()
    t = CompactionTuner(_messages(), presets=CATALOGUE, replay=fake, debounce_ms=0)
    t.preset.value = "hermes"
    # no window given: the one replay would choose (the model's) is shown and passed
    assert t.window.value == 128_000
    assert len(fake.calls) == 2 and fake.calls[-1] == ("hermes", 128_000, {})
    assert t.controls["trigger.auto_pct"].value == 0.5 and t.controls["aging.kind"].value == "none"


def test_tuner_reports_replay_errors_and_keeps_the_last_picture():
    fake = FakeReplay()
    t = CompactionTuner(_messages(), presets=CATALOGUE, replay=fake, debounce_ms=0)
    good = t.plot.value

    def broken(*a, **k):
        raise ValueError("keep_min_tokens <b>exceeds</b> keep_max_tokens")

    t._replay = broken
    t.controls["cut.keep_min_tokens"].value = 9000
    assert "replay failed" in t.status.value and "&lt;b&gt;exceeds" in t.status.value
    assert t.plot.value == good


def test_tuner_rejects_unknown_preset():
    with pytest.raises(ValueError, match="unknown preset"):
        CompactionTuner(_messages(), presets=CATALOGUE, replay=FakeReplay(), preset="nope")


# -- BranchDiffViewer ------------------------------------------------------------------------


def test_branch_diff_viewer_switches_compactions():
    from opctx.viz.synthetic import synthetic_session

    graph, _ = synthetic_session(120, compact_every=30, seed=5)
    w = BranchDiffViewer(graph, show_graph=False)
    options = w.choice.options
    assert len(options) >= 2 and w.choice.value == options[-1][1]
    latest = w.table.value
    w.choice.value = options[0][1]
    assert w.table.value != latest and w.diff.summary.id == w.compactions.summary_id.iloc[0]
    assert "tick 'graph'" in w.picture.value
    w.with_graph.value = True
    assert w.picture.value.startswith("<iframe")


def test_branch_diff_viewer_without_compactions():
    from opctx.dag.nodes import Graph, UserMessage

    w = BranchDiffViewer(Graph([UserMessage("hi")]))
    assert w.choice.disabled and "no compaction" in w.table.value


def test_tuner_keeps_thresholds_ordered():
    catalogue = {"default": {"trigger.recommend_pct": 0.7, "trigger.auto_pct": 0.8,
                             "trigger.emergency_pct": 0.95}}
    fake = FakeReplay()
    t = CompactionTuner(_messages(), presets=catalogue, replay=fake, debounce_ms=0)
    t.controls["trigger.auto_pct"].value = 0.5
    assert t.controls["trigger.recommend_pct"].value == 0.5 and t.controls["trigger.emergency_pct"].value == 0.95
    assert fake.calls[-1][2] == {"trigger.recommend_pct": 0.5, "trigger.auto_pct": 0.5}
    t.controls["trigger.auto_pct"].value = 0.97
    assert t.controls["trigger.emergency_pct"].value == 0.97
    assert len(fake.calls) == 3  # one replay per user move, none for the pushed sliders


def test_tuner_with_the_real_presets_and_replay():
    from opctx.lab.presets import PRESETS
    from opctx.lab.scenarios import generate_session

    session = generate_session(7, n_turns=6, max_tools_per_turn=3)
    t = CompactionTuner(session.messages, context_window=16_384, debounce_ms=0)
    assert list(t.preset.options) == list(PRESETS)
    # every engine and summariser parameter has a control on the default preset
    for name in ("trigger.recommend_pct", "trigger.auto_pct", "trigger.emergency_pct", "cut.keep_ratio",
                 "cut.keep_min_tokens", "cut.protect_first_n", "cut.protect_last_n", "aging.kind",
                 "budget.output_reserve", "budget.reserve_policy", "cut.tail_budget_share",
                 "guard.min_saving"):
        assert name in t.controls, name
    # every shown field of the policy has a control: none is hand-copied here
    from opctx.context.policy import policy_fields

    shown = {f.name for f in policy_fields() if f.name.split(".")[0] in ("trigger", "cut", "guard")}
    assert shown <= set(t.controls)
    assert "replay failed" not in t.status.value
    assert len(t.result.steps_df) == session.meta["n_messages"] - sum(
        1 for m in session.messages if m["role"] != "assistant")
    before = t.table.value
    t.controls["trigger.auto_pct"].value = 0.3
    assert "replay failed" not in t.status.value
    assert t.result.params is not None and t.table.value != before
    assert t.result.policy.trigger.auto_pct == 0.3
    t.preset.value = "observation-masking"
    assert set(t.controls) == {"aging.kind", "aging.keep_last", "budget.output_reserve",
                               "budget.reserve_policy", "budget.fit_headroom"}


# -- what the tuner draws is what its replay used --------------------------------------------


def _tuner_session():
    from opctx.lab.scenarios import generate_session

    return generate_session(11, n_turns=8, max_tools_per_turn=3).messages


@pytest.fixture
def spy(monkeypatch):
    """Every engine a replay drives, and every threshold set the tuner draws."""
    from opctx.lab import _engine_driver
    from opctx.widgets import tuner as tuner_module

    seen = types.SimpleNamespace(engines=[], drawn=[])

    class Driver(_engine_driver.EngineDriver):
        def __init__(self, engine, *args, **kwargs):
            seen.engines.append(engine)
            super().__init__(engine, *args, **kwargs)

    def timeline(*args, thresholds, **kwargs):
        seen.drawn.append(dict(thresholds))
        return tuner_module.budget_timeline.__wrapped__(*args, thresholds=thresholds, **kwargs)

    timeline.__wrapped__ = tuner_module.budget_timeline
    monkeypatch.setattr(_engine_driver, "EngineDriver", Driver)
    monkeypatch.setattr(tuner_module, "budget_timeline", timeline)
    return seen


def _assert_drawn_equals_used(t, seen):
    engine = seen.engines[-1]
    used = {"recommend": engine.recommend_pct, "trigger": engine.auto_compact_pct,
            "emergency": engine.emergency_pct}
    used = {k: v for k, v in used.items() if v != float("inf")}
    assert seen.drawn[-1] == pytest.approx(used), "the plot's lines are not the replay's"
    sliders = {label: t.controls[name].value for name, label in (
        ("trigger.recommend_pct", "recommend"), ("trigger.auto_pct", "trigger"),
        ("trigger.emergency_pct", "emergency")) if name in t.controls}
    assert sliders == pytest.approx(used), "the sliders are not the replay's"
    assert engine.context_window == t.window.value == t.result.context_window
    # and so every automatic compaction starts at or above the drawn trigger line
    steps = t.result.steps_df
    auto = steps[steps.compacted & (steps.decision == "auto")]
    before = auto.tokens_before_compaction / auto.input_budget
    assert (before >= seen.drawn[-1].get("trigger", 0) - 1e-9).all()


def test_tuner_window_change_after_a_preset_change_redraws_the_replays_thresholds(spy):
    t = CompactionTuner(_tuner_session(), context_window=32_000, debounce_ms=0)
    t.preset.value = "claude-code"
    _assert_drawn_equals_used(t, spy)
    at_32k = dict(spy.drawn[-1])
    assert at_32k["trigger"] == pytest.approx(1 - 13_000 / (32_000 - 8_000))
    t.window.value = 64_000
    _assert_drawn_equals_used(t, spy)
    assert spy.drawn[-1]["trigger"] > at_32k["trigger"] + 0.2  # 0.73 at 64K, not 0.46


@pytest.mark.parametrize("moves", [
    [("preset", "codex"), ("window", 50_000), ("window", 200_000)],
    [("preset", "claude-code"), ("budget.output_reserve", 4_000), ("window", 100_000)],
    [("preset", "claude-code"), ("budget.reserve_policy", "floor"), ("window", 40_000)],
    [("window", 20_000), ("trigger.auto_pct", 0.5), ("window", 90_000), ("preset", "hermes")],
    [("preset", "claude-code"), ("trigger.auto_pct", 0.6), ("window", 128_000),
     ("preset", "default"), ("window", 16_000)],
], ids=["codex", "reserve", "policy", "moved-trigger", "back-and-forth"])
def test_tuner_draws_what_the_replay_used_after_any_sequence(spy, moves):
    t = CompactionTuner(_tuner_session(), context_window=32_000, debounce_ms=0)
    for what, value in moves:
        if what == "preset":
            t.preset.value = value
        elif what == "window":
            t.window.value = value
        else:
            t.controls[what].value = value
        assert "replay failed" not in t.status.value, t.status.value
        _assert_drawn_equals_used(t, spy)


def test_tuner_keeps_a_moved_threshold_across_window_changes(spy):
    t = CompactionTuner(_tuner_session(), preset="claude-code", context_window=32_000,
                        debounce_ms=0)
    t.controls["trigger.auto_pct"].value = 0.6
    t.window.value = 64_000
    assert t.controls["trigger.auto_pct"].value == 0.6
    assert spy.engines[-1].auto_compact_pct == 0.6
    _assert_drawn_equals_used(t, spy)


# -- the tuner's layout: the plot first ---------------------------------------------------------


def _png_size(img_html: str) -> tuple[int, int]:
    import base64
    import re
    import struct

    data = base64.b64decode(re.search(r"base64,([^\"]+)", img_html).group(1))
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_tuner_plot_is_the_main_thing_and_rare_parameters_are_folded_away():
    from opctx.widgets.tuner import PRIMARY

    t = CompactionTuner(_tuner_session(), context_window=32_000, debounce_ms=0)
    # two thirds of the width for the plot, one third for the controls
    assert t.plot_box.layout.width == "67%" and t.sidebar.layout.width == "33%"
    assert t.plot_box.layout.flex.startswith("2 ") and t.sidebar.layout.flex.startswith("1 ")
    width, height = _png_size(t.plot.value)
    # 1.6 : 1, so that two thirds of a 960 px output (640 px) still draw it 400 px tall
    assert height >= 400 and 1.5 * height <= width <= 1.6 * height
    assert "min-height:400px" in t.plot.value and "width:100%" in t.plot.value
    # the handful in view, the rest in one collapsed group
    in_view = [w.description for w in t.controls_box.children]
    folded = [w.description for w in t.more_box.children]
    assert set(in_view) == {n for n in PRIMARY if n in t.controls} and len(in_view) <= 8
    assert set(in_view) | set(folded) == set(t.controls) and not set(in_view) & set(folded)
    assert t.more.selected_index is None and len(folded) >= 10
    assert t.more.get_title(0) == f"more parameters ({len(folded)})"
    t.preset.value = "observation-masking"
    assert {w.description for w in t.controls_box.children} == {"aging.kind", "aging.keep_last",
                                                                 "budget.output_reserve"}
    assert [w.description for w in t.more_box.children] == ["budget.reserve_policy", "budget.fit_headroom"]


# -- BranchDiffViewer: long diffs fold and page -------------------------------------------------


def test_branch_diff_viewer_folds_unchanged_runs_and_pages_the_rest():
    import re

    from opctx.viz.diff import diff_lines
    from opctx.viz.synthetic import synthetic_session

    graph, _ = synthetic_session(160, compact_every=110, protect_first_n=3, keep_last=37, seed=4)
    w = BranchDiffViewer(graph, show_graph=False, page_size=25)
    rows = w.diff.rows
    assert len(rows) >= 149

    def shown(html):  # rows of the outer table, header excluded, unopened <details> removed
        return re.sub(r"<details>.*?</details>", "", html, flags=re.S).count("<tr>")

    lines = diff_lines(rows, folded_context=None)
    assert w.pages == -(-len(lines) // 25) >= 2
    seen, pages = 0, []
    for _ in range(w.pages):
        assert shown(w.table.value) <= 25
        seen += shown(w.table.value)
        pages.append(w.table.value)
        w.next.click()
    assert seen == len(lines) and w.page == w.pages - 1 and w.next.disabled
    assert any("unchanged messages \u2026" in p for p in pages)
    # every message is on some page, shown or folded into an expandable line
    everything = "".join(pages)
    assert all(ident in everything for ident in rows.original_id.dropna())
    w.previous.click()
    assert w.page == w.pages - 2 and not w.next.disabled
    w.with_graph.value = True  # showing the compaction again starts from its first page
    assert w.page == 0 and w.previous.disabled and w.picture.value.startswith("<iframe")
