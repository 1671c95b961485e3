"""CompactionTuner: every engine and summariser parameter on a slider, replayed live.

Pick a strategy preset (``opctx.lab.presets``), move any of its parameters, and
the session is replayed (``opctx.lab.replay.replay``) with those values: the
budget timeline (``viz.plots.budget_timeline``: input used per request with the
0.70/0.80/0.95 lines and a marker per compaction) and the cut-point table (one
row per compaction: when, why, tokens before/after, what was folded, kept,
protected, and the cut index) update after every change.

Choices:

* **Controls come from the preset.** The parameters and their defaults are read
  from the presets module, so a parameter added there gets a control here with
  no change to this file. The kind of control follows the default's type: a
  checkbox for a bool, a 0..1 slider for a float fraction, an integer slider
  (range scaled from the default) for counts and token sizes, a dropdown for a
  string with known choices. Choosing a preset resets every control to that
  preset's values without replaying once per control. Thresholds stay ordered
  (``recommend_pct <= auto_compact_pct <= emergency_pct``): moving one pushes
  the others instead of producing an invalid configuration. Thresholds of
  presets defined in tokens before the window (Claude Code, Codex) are shown as
  the fractions they become for the given ``context_window``; ``output_reserve``
  is shown as 16,384 when the preset leaves it to the model's rule (a value is
  only passed to the replay once it differs from what is shown).
* **Debounced, cached, estimate-only.** A change schedules one replay
  ``debounce_ms`` after the last move (see ``_common.Debouncer``); the replay uses
  structural summaries and keeps no per-step contexts (the tuner needs neither
  LLM calls nor reference-loss metrics), and results are memoised by
  (preset, parameters, window), so going back to a setting is instant.
* **The plot is a PNG** in an ``<img>`` with a ``data:`` URI inside a
  ``widgets.HTML``: it needs no file and no request, and its ``src`` changes
  exactly when the picture does. The table is escaped HTML.
* **Errors are shown, not raised**: an invalid combination (``keep_min_tokens``
  above ``keep_max_tokens``, thresholds out of order) is reported in the status
  line with the engine's own message, and the last good picture stays.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import ipywidgets as widgets

from ..viz.html import escape_text
from ..viz.plots import budget_timeline
from ._common import Debouncer, figure_html, html_table, load_messages

__all__ = ["CompactionTuner", "preset_catalogue", "control_for"]

# string parameters whose values are a closed set
_CHOICES: dict[str, tuple[str, ...]] = {
    "reserve_policy": ("cap", "floor"),
    "summaries": ("structural", "recorded"),
}
_THRESHOLD_ORDER = ("recommend_pct", "auto_compact_pct", "emergency_pct")
_TABLE_COLUMNS = ["step", "turn", "reason", "tokens before", "tokens after", "saved",
                  "folded", "kept", "protected", "cut index", "structural"]


# TurnAger's documented defaults (docs/ARCHITECTURE.md), used if aging cannot be introspected
_AGING_DEFAULTS = {"keep_recent_turns": 4, "keep_recent_seconds": 60, "min_tokens": 800,
                   "protect_first_n": 2}
# the summariser keeps a copy of the thresholds; the engine's are the ones that decide
_THRESHOLD_COPIES = {"recommend_pct", "trigger_pct", "emergency_pct", "timeout"}
# what an unset output_reserve means for the slider: the specification's 16,384
_RESERVE_SHOWN = 16_384


def _init_defaults(cls: Any, skip: set[str]) -> dict[str, Any]:
    import inspect

    out = {}
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name in skip or p.name == "self" or p.default is inspect.Parameter.empty:
            continue
        if isinstance(p.default, bool | int | float | str):
            out[p.name] = p.default
    return out


def _full_parameters(spec: Any, context_window: int | None, model: str | None) -> dict[str, Any]:
    """Every parameter ``replay`` accepts for ``spec``, at the value the preset uses."""
    from dataclasses import fields

    from ..context.budget import BudgetAllocator
    from ..context.engine import DefaultContextEngine
    from ..context.summarize import SummarizerConfig
    from ..lab import presets as presets_module

    budget: dict[str, Any] = {"output_reserve": _RESERVE_SHOWN, "reserve_policy": "cap"}
    if spec.kind == "none":
        params = dict(budget)
    elif spec.kind == "masking":
        params = {"keep_last": 10, **budget}
    else:
        engine = _init_defaults(DefaultContextEngine, {"context_window", "name", "aging"})
        engine = {k: v for k, v in engine.items() if k in presets_module._ENGINE_FIELDS}
        config = {f.name: f.default for f in fields(SummarizerConfig)
                  if f.name not in _THRESHOLD_COPIES}
        try:
            from ..context.aging import TurnAger

            aging = _init_defaults(TurnAger, {"clock"}) or dict(_AGING_DEFAULTS)
        except ImportError:
            aging = dict(_AGING_DEFAULTS)
        params = {**engine, **config, "aging": True,
                  **{f"aging_{k}": v for k, v in aging.items()}, **budget}
        if context_window:
            # presets defined in tokens-before-the-window get their fractions for this window
            reserve = BudgetAllocator(**({"output_reserve": spec.params["output_reserve"]}
                                         if "output_reserve" in spec.params else {}))
            input_budget = max(1, context_window - reserve.reserve_for(context_window, model))
            params.update(presets_module.thresholds_for(spec, context_window, input_budget))
    params.update(spec.params)
    return params


def preset_catalogue(
    presets: Any = None, *, context_window: int | None = None, model: str | None = None
) -> dict[str, dict[str, Any]]:
    """``{preset: {parameter: value}}``: every parameter a replay of that preset accepts.

    Built from ``opctx.lab.presets.PRESETS`` (each preset's overrides) on top of
    the defaults of the engine, ``SummarizerConfig``, ``TurnAger`` and the budget,
    so a new field in any of them gets a control. ``presets`` may instead be a
    ready mapping (used as is; tests pass one).
    """
    if isinstance(presets, Mapping):
        return {str(k): dict(v) for k, v in presets.items()}
    from ..lab import presets as presets_module

    module = presets or presets_module
    return {
        name: _full_parameters(spec, context_window, model)
        for name, spec in module.PRESETS.items()
    }


def control_for(name: str, default: Any, *, width: str = "480px") -> widgets.Widget | None:
    """The widget for one parameter, chosen from its default value (``None``: no control)."""
    style = {"description_width": "170px"}
    layout = widgets.Layout(width=width)
    common = {"description": name, "style": style, "layout": layout, "continuous_update": False}
    if isinstance(default, bool):
        return widgets.Checkbox(value=default, description=name, indent=True, style=style,
                                layout=layout)
    if isinstance(default, float):
        if default != default or default in (float("inf"), float("-inf")):
            return None  # an "off" threshold has no meaningful range
        if 0.0 <= default <= 1.0:
            # a threshold of 0 means "compact before every request": the engine refuses it
            low = 0.05 if name.endswith("_pct") else 0.0
            return widgets.FloatSlider(value=default, min=min(low, default), max=1.0, step=0.01,
                                       **common)
        hi = max(default * 4, 1.0)
        return widgets.FloatSlider(value=default, min=0.0, max=hi, step=hi / 200, **common)
    if isinstance(default, int):
        if default <= 64:
            return widgets.IntSlider(value=default, min=0, max=max(64, default * 4), **common)
        step = 10 ** max(0, len(str(default)) - 2)
        return widgets.IntSlider(value=default, min=0, max=default * 4, step=step, **common)
    if isinstance(default, str) and name in _CHOICES:
        return widgets.Dropdown(options=_CHOICES[name], value=default, description=name,
                                style=style, layout=layout)
    return None


class CompactionTuner(widgets.VBox):
    """Preset dropdown + one control per parameter -> live replay, budget plot, cut table."""

    def __init__(
        self,
        session: Any,
        *,
        preset: str = "default",
        context_window: int | None = None,
        presets: Any = None,
        replay: Callable[..., Any] | None = None,
        debounce_ms: int = 200,
        cache_size: int = 32,
    ) -> None:
        from ..lab.history import as_history

        self.history = as_history(session)
        if not self.history.messages:
            raise ValueError("this session has no messages to replay")
        self.messages, self.model = load_messages(self.history)
        self.catalogue = preset_catalogue(presets, context_window=context_window,
                                          model=self.model or None)
        if preset not in self.catalogue:
            raise ValueError(f"unknown preset {preset!r}: choose from {', '.join(self.catalogue)}")
        if replay is None:
            from ..lab.replay import replay as lab_replay

            replay = lab_replay
        self._replay = replay
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._views: dict[tuple, tuple[str, str, str]] = {}
        self._cache_size = cache_size
        self._resetting = False
        self.result: Any = None
        self.replays = 0

        self.preset = widgets.Dropdown(options=list(self.catalogue), value=preset,
                                       description="preset", layout=widgets.Layout(width="480px"),
                                       style={"description_width": "170px"})
        self.window = widgets.IntText(value=int(context_window or 0), description="context window",
                                      layout=widgets.Layout(width="300px"),
                                      style={"description_width": "170px"})
        self.controls: dict[str, widgets.Widget] = {}
        self.controls_box = widgets.VBox()
        self.status = widgets.HTML()
        self.plot = widgets.HTML()
        self.plot.add_class("opctx-budget-plot")
        self.table = widgets.HTML()
        self.table.add_class("opctx-cut-table")
        self._debounce = Debouncer(self.update, debounce_ms / 1000)
        self.preset.observe(self._on_preset, names="value")
        self.window.observe(self._on_change, names="value")
        self._build_controls(preset)
        left = widgets.VBox([self.preset, self.window, self.controls_box],
                            layout=widgets.Layout(min_width="500px"))
        right = widgets.VBox([self.status, self.plot], layout=widgets.Layout(flex="1 1 auto"))
        super().__init__(children=[widgets.HBox([left, right]), self.table])
        self.add_class("opctx-tuner")
        self.update()

    # -- controls --------------------------------------------------------------------
    def _build_controls(self, preset: str) -> None:
        for w in self.controls.values():
            w.unobserve(self._on_change, names="value")
        self.controls = {}
        for name, default in self.catalogue[preset].items():
            control = control_for(name, default)
            if control is None:
                continue
            control.observe(self._on_change, names="value")
            self.controls[name] = control
        self.controls_box.children = list(self.controls.values())

    def _on_preset(self, change: dict) -> None:
        self._resetting = True
        try:
            self._build_controls(change["new"])
        finally:
            self._resetting = False
        self._debounce.trigger()

    def _on_change(self, change: dict) -> None:
        if self._resetting:
            return
        owner = next((k for k, w in self.controls.items() if w is change.get("owner")), None)
        if owner in _THRESHOLD_ORDER:
            self._keep_thresholds_ordered(owner)
        self._debounce.trigger()

    def _keep_thresholds_ordered(self, moved: str) -> None:
        """recommend <= auto <= emergency: moving one pushes the others, as a user expects."""
        present = [k for k in _THRESHOLD_ORDER if k in self.controls]
        pos = present.index(moved)
        value = self.controls[moved].value
        self._resetting = True
        try:
            for name in present[:pos]:
                if self.controls[name].value > value:
                    self.controls[name].value = value
            for name in present[pos + 1 :]:
                if self.controls[name].value < value:
                    self.controls[name].value = value
        finally:
            self._resetting = False

    def params(self) -> dict[str, Any]:
        """The parameters that differ from the preset's defaults (what the replay gets)."""
        defaults = self.catalogue[self.preset.value]
        return {k: w.value for k, w in self.controls.items() if w.value != defaults.get(k)}

    # -- replay ----------------------------------------------------------------------
    def _key(self) -> tuple:
        window = int(self.window.value) or None
        return (self.preset.value, window, tuple(sorted(self.params().items())))

    def run(self) -> Any:
        """Replay with the current settings (memoised) and return the ``ReplayResult``."""
        key = self._key()
        _preset, window, items = key
        params = dict(items)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        result = self._replay(self.history, self.preset.value, context_window=window,
                              keep_contexts=False, **params)
        self.replays += 1
        self._cache[key] = result
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return result

    def update(self) -> None:
        started = time.perf_counter()
        # Drawing the PNG costs as much as the replay; a setting seen before gets its
        # picture and table back as they were, so going back and forth is instant.
        key = self._key()
        view = self._views.get(key)
        if view is not None and key in self._cache:
            self.result = self._cache[key]
            self.status.value, self.plot.value, self.table.value = view
            return
        self.status.value = "<div style='font:13px system-ui;color:#777'>replaying\u2026</div>"
        try:
            result = self.run()
        except Exception as exc:  # noqa: BLE001 - shown to the user, the widget stays usable
            self.status.value = (
                f"<span style='color:#b00'>replay failed: {escape_text(type(exc).__name__)}: "
                f"{escape_text(exc)}</span>"
            )
            return
        self.result = result
        elapsed = time.perf_counter() - started
        steps = result.steps_df
        comps = result.compactions_df()
        peak = int(steps["tokens"].max()) if len(steps) else 0
        self.status.value = (
            f"<div style='font:13px system-ui'>{escape_text(self.preset.value)}: "
            f"<b>{len(steps)}</b> requests, <b>{len(comps)}</b> compactions, peak "
            f"\u2248{peak:,} tokens, window {escape_text(f'{result.context_window:,}')}; "
            f"replayed in {elapsed * 1000:.0f} ms</div>"
        )
        # the lines are the thresholds this replay used, not the specification's defaults
        thresholds = {
            label: float(self.controls[name].value)
            for label, name in (("recommend", "recommend_pct"), ("trigger", "auto_compact_pct"),
                                ("emergency", "emergency_pct"))
            if name in self.controls and float(self.controls[name].value) <= 2.0
        }
        fig = budget_timeline(
            steps,
            thresholds=thresholds or {},
            title=f"{self.preset.value}: input budget used per request",
        )
        self.plot.value = figure_html(fig)
        rows = [
            [r.step, r.turn, r.reason, r.tokens_before, r.tokens_after,
             r.tokens_before - r.tokens_after, r.folded, r.kept, r.protected,
             "" if r.cut_index is None or r.cut_index != r.cut_index else int(r.cut_index),
             "yes" if r.fell_back_to_structural else ""]
            for r in comps.itertuples(index=False)
        ]
        caption = (f"{len(rows)} compaction(s) with these settings" if rows
                   else "no compaction with these settings")
        self.table.value = html_table(_TABLE_COLUMNS, rows, caption=caption)
        self._views[key] = (self.status.value, self.plot.value, self.table.value)
        while len(self._views) > self._cache_size:
            self._views.pop(next(iter(self._views)))
