"""The tuner shows a view preset what the view runs on."""

from opctx.lab.presets import PRESETS, thresholds_for
from opctx.widgets.tuner import _shown


def test_the_recent_events_view_shows_its_head_tail_and_task():
    spec = PRESETS["openhands-recent-events"]
    assert spec.kind == "view"
    shown = {name for name in spec.policy.flat() if _shown(spec, name)}
    assert shown - {n for n in shown if n.startswith("budget.")} == {
        "aging.kind", "aging.protect_first_n", "aging.keep_last", "cut.keep_initial_request"}
    assert set(thresholds_for(spec, 128_000, 100_000).values()) == {float("inf")}
