"""CompactionTuner: every field of the compaction policy on a control, replayed live.

Pick a strategy preset (``opctx.lab.presets``), a context window, move any field of
the preset's policy, and the session is replayed (``opctx.lab.replay.replay``)
with those values: the budget timeline (``viz.plots.budget_timeline``: input used
per request, the thresholds the replay used, a marker per compaction) and the
cut-point table (one row per compaction: when, why, tokens before/after, what was
folded, kept, protected, and the cut index) update after every change.

Choices:

* **Controls come from the policy.** Each control is a field of
  ``opctx.context.policy.CompactionPolicy``, named by its dotted name
  (``trigger.auto_pct``, ``cut.keep_ratio`` ...), built from the field's metadata (its
  kind: a share of the budget or a fraction is a 0..1 slider, tokens and counts an
  integer slider scaled from the value, a choice a dropdown, a flag a checkbox) with
  its meaning as the tooltip; a field added to the policy gets a control here with no
  change to this file. Which fields a preset shows follows what it runs: the masking
  strategy shows its ``aging.keep_last``, the recent-events view its head, its tail and
  whether the task is kept, the ``none`` baseline only the budget, the
  others every field of the trigger, the cut, the guard, the summary, the spec's aging
  and their client; fields that are off (``None``) have no control. The few fields people move
  most (``PRIMARY``: the three thresholds, the tail, aging, the output reserve,
  observation masking's ``keep_last``) stay in view; the rest sit in a collapsed
  "more parameters" group.
* **What is shown is what the replay uses.** A control the user has not touched
  shows the value in the policy the replay's engine runs with for the current preset,
  window and the fields the user did set: ``engine.policy`` of
  ``opctx.lab.presets.build_engine`` called with the same arguments ``replay`` gives
  it, not recomputed here, so thresholds that presets define in tokens before the
  window (Claude Code, Codex) follow every change of the window, the output reserve or
  its policy, and the lines on the plot are the engine's. A control the user moved
  keeps its value across window changes. Every value that differs from the preset's
  own is passed to the replay by its dotted name (a derived threshold included, so the
  engine gets the very number drawn). Choosing a preset resets every control without
  replaying once per control. Thresholds stay ordered (``recommend_pct <= auto_pct <=
  emergency_pct``): moving one pushes the others instead of producing an invalid
  policy. ``budget.output_reserve`` shows the reserve the budget keeps at this window
  (``BudgetAllocator.reserve_for``: the base reserve, the model's maximum output or
  16,384, capped by the window's rules), never a base larger than the window; its
  slider ends at the window, and the status line says the reserve the replay kept.
* **Nothing shown outlives its replay.** The status line, the plot, the table and the
  warning box are all recomputed from the replay just run (or taken back together
  from the memo of that same setting). The guard's warning (auto-compaction disabled:
  ``opctx.lab.replay.guard_summary``) is shown in the box above the plot, not logged
  into the cell's output, where the first replay's warning would stay after the
  settings changed.
* **The window is typed, not snapped.** The context window is an integer field,
  so 32,000 stays 32,000 (a slider would round it to its step). With no window
  given, the one ``replay`` would choose is shown and used.
* **Debounced, cached.** A change schedules one replay
  ``debounce_ms`` after the last move (see ``_common.Debouncer``); the replay uses
  structural summaries and keeps no per-step contexts (the tuner needs neither
  LLM calls nor reference-loss metrics), and results are memoised by
  (preset, parameters, window), so going back to a setting is instant.
* **The plot is the main thing.** It takes two thirds of the widget's width and
  at least 400 px of height, with its legend outside the axes. It is a PNG in an
  ``<img>`` with a ``data:`` URI inside a ``widgets.HTML``: it needs no file and
  no request, and its ``src`` changes exactly when the picture does. The table
  is escaped HTML.
* **Recorded aging is drawn.** A recording that holds Claude Code microcompactions
  (``opctx.lab.aging_fidelity.recorded_microcompactions``) gets a dotted vertical
  marker at each request the client cleared tool results before (x = that request's
  step), a count in the status line and a table under the cut table (request,
  uuid, trigger, the client's ``preTokens`` / ``tokensSaved``, results cleared), all
  escaped: the uuids and figures come from the transcript.
* **Which count, and whether it can work.** The status line says how the replay counted
  its requests (``result.mode``: the recording's provider usage where it has it, else
  estimates), and a configuration that cannot work on the session (the client's fixed
  part at or above the trigger, every request compacting: ``opctx.lab.feasibility``) gets
  a red line naming the figures.
* **Errors are shown, not raised**: an invalid combination (``cut.keep_min_tokens``
  above ``cut.keep_max_tokens``, thresholds out of order) is reported in the status
  line with the policy's own message, naming the field, and the last good picture stays.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import ipywidgets as widgets

from ..context.policy import PolicyField, policy_fields
from ..viz.html import escape_text
from ..viz.plots import _outside_legend, budget_timeline, new_figure
from ._common import Debouncer, figure_html, html_table, load_messages

__all__ = ["CompactionTuner", "preset_catalogue", "control_for", "PRIMARY"]

_FIELDS: dict[str, PolicyField] = {pf.name: pf for pf in policy_fields()}
_THRESHOLD_ORDER = ("trigger.recommend_pct", "trigger.auto_pct", "trigger.emergency_pct")
# the names budget_timeline styles, for the engine's three thresholds
_THRESHOLD_LABELS = {"trigger.recommend_pct": "recommend", "trigger.auto_pct": "trigger",
                     "trigger.emergency_pct": "emergency"}
# the fields that stay in view; every other one sits in the collapsed group
PRIMARY = ("trigger.auto_pct", "trigger.recommend_pct", "trigger.emergency_pct", "cut.keep_ratio",
           "cut.protect_last_n", "aging.kind", "aging.keep_last", "budget.output_reserve")
_TABLE_COLUMNS = ["step", "turn", "reason", "tokens before", "tokens after", "saved",
                  "folded", "kept", "protected", "cut index", "structural"]
# the PNG: 8 x 5 inches at 100 dpi = 800 x 500 px, shown at the plot column's width; at
# 1.6 : 1 a plot column of 640 px (a 960 px notebook output) still draws 400 px tall
_FIGURE_INCHES = (8.0, 5.0)
_PLOT_DPI = 100
_PLOT_CSS = "width:100%;height:auto;min-height:400px;object-fit:contain"
# the window has its own control; the client's name and version are the recording's
_NO_CONTROL = {"budget.context_window", "client.name", "client.version"}


def _engine(name: str, context_window: int | None, model: str | None, params: Mapping[str, Any]) -> Any:
    """The engine of preset ``name`` for ``params``, built with the arguments ``replay``
    passes ``build_engine``; ``None`` when those are invalid (the replay will say why)."""
    from ..lab.presets import build_engine

    try:
        return build_engine(name, context_window=context_window, model=model or None, **dict(params))
    except (ValueError, TypeError):
        return None


def _engine_policy(
    name: str, context_window: int | None, model: str | None, params: Mapping[str, Any]
) -> Any:
    """The policy the engine of preset ``name`` runs with for ``params``: ``engine.policy``,
    so this is the replay's own; ``None`` when the arguments are invalid."""
    engine = _engine(name, context_window, model, params)
    return None if engine is None else engine.policy


def _shown(spec: Any, name: str) -> bool:
    """Whether preset ``spec`` shows field ``name`` (module docstring: what it runs)."""
    part = name.split(".", 1)[0]
    if name in _NO_CONTROL or name == "summary.timeout":
        return False
    if part == "budget":
        return True
    if spec.kind == "none":
        return False
    if spec.kind == "masking":
        return name in ("aging.kind", "aging.keep_last")
    if spec.kind == "view":
        return name in ("aging.kind", "aging.protect_first_n", "aging.keep_last", "cut.keep_initial_request")
    if name == "aging.keep_last":
        return False
    return part != "client" or spec.client is not None


def _full_parameters(spec: Any, context_window: int | None, model: str | None) -> dict[str, Any]:
    """Every policy field the tuner shows for ``spec``, at the value its engine uses.

    The output reserve is the one the budget keeps at this window (``reserve_for``: the
    base reserve capped by the window's rules), never the base itself, which can be
    larger than the window (64,000 for a model whose max output is 64,000, at 32,000).
    """
    from ..context.budget import BudgetAllocator
    from ..context.tokens import real_context_window

    engine = _engine(spec.name, context_window, model, {})
    policy = spec.policy if engine is None else engine.policy
    values = {name: value for name, value in policy.flat().items() if _shown(spec, name)}
    allocator = BudgetAllocator() if engine is None else engine.budget_allocator
    window = context_window or real_context_window(model or None)
    values["budget.output_reserve"] = allocator.reserve_for(window, model or None)
    return values


def preset_catalogue(
    presets: Any = None, *, context_window: int | None = None, model: str | None = None
) -> dict[str, dict[str, Any]]:
    """``{preset: {dotted field: value}}``: every policy field the tuner shows per preset.

    Built from ``opctx.lab.presets.PRESETS`` (each preset's policy, resolved by its
    engine for ``context_window``), so a new field of the policy gets a control.
    ``presets`` may instead be a ready mapping (used as is, whatever the window; tests
    pass one).
    """
    if isinstance(presets, Mapping):
        return {str(k): dict(v) for k, v in presets.items()}
    from ..lab import presets as presets_module

    module = presets or presets_module
    return {
        name: _full_parameters(spec, context_window, model)
        for name, spec in module.PRESETS.items()
    }


def control_for(name: str, value: Any, *, width: str = "480px") -> widgets.Widget | None:
    """The widget for one field at ``value`` (``None``: no control).

    A policy field (a dotted name) gets the control of its kind, with its meaning as
    the tooltip; any other name (a ready catalogue's) the control of its value's type.
    """
    style = {"description_width": "150px"}
    layout = widgets.Layout(width=width)
    common = {"description": name, "style": style, "layout": layout, "continuous_update": False}
    info = _FIELDS.get(name)
    if info is not None:
        common["tooltip"] = f"{info.doc} (source: {info.source})"
        if info.kind == "choice" and value in info.choices:
            return widgets.Dropdown(options=info.choices, value=value, description=name,
                                    style=style, layout=layout,
                                    tooltip=common["tooltip"])
    if value is None and _off_at_zero(name):
        # an optional count (a trigger, a keep) or share: the slider's 0 means "off" (None)
        common["tooltip"] = f"{common.get('tooltip', name)}; 0: off"
        if info is not None and info.kind == "fraction":
            return widgets.FloatSlider(value=0.0, min=0.0, max=1.0, step=0.01, **common)
        return widgets.IntSlider(value=0, min=0, max=512, **common)
    if value is None or isinstance(value, str) and info is None:
        return None
    if isinstance(value, bool):
        return widgets.Checkbox(value=value, description=name, indent=True, style=style,
                                layout=layout)
    kind = info.kind if info is not None else None
    if isinstance(value, float) or kind in ("threshold", "fraction", "seconds", "percent"):
        value = float(value)
        if not math.isfinite(value):
            return None  # an "off" threshold has no meaningful range
        if kind in ("threshold", "fraction") or (kind is None and 0.0 <= value <= 1.0):
            # a threshold of 0 means "compact before every request": the policy refuses it
            low = 0.05 if kind == "threshold" or name.endswith("_pct") else 0.0
            return widgets.FloatSlider(value=value, min=min(low, value), max=max(1.0, value),
                                       step=0.01, **common)
        hi = max(value * 4, 1.0)
        return widgets.FloatSlider(value=value, min=0.0, max=hi, step=hi / 200, **common)
    if isinstance(value, int):
        if value <= 64:
            return widgets.IntSlider(value=value, min=0, max=max(64, value * 4), **common)
        step = 10 ** max(0, len(str(value)) - 2)
        return widgets.IntSlider(value=value, min=0, max=value * 4, step=step, **common)
    return None


def _off_at_zero(name: str) -> bool:
    """Whether field ``name`` is an optional count, or an optional share that refuses 0,
    whose control shows "off" (None) as 0."""
    info = _FIELDS.get(name)
    return info is not None and info.optional and (
        info.kind in ("tokens", "count") or info.kind == "fraction" and info.positive)


def _control_value(name: str, control: widgets.Widget) -> Any:
    """The field value a control stands for (0 on an optional count: None)."""
    value = control.value
    return None if value == 0 and _off_at_zero(name) else value


def _show_value(control: widgets.Widget, value: Any) -> None:
    """Set ``control`` to exactly ``value``, widening a slider's range if it must
    (None on a slider: 0, "off")."""
    if value is None and isinstance(control, widgets.FloatSlider | widgets.IntSlider):
        value = 0
    if isinstance(control, widgets.FloatSlider | widgets.IntSlider):
        if value > control.max:
            control.max = value
        if value < control.min:
            control.min = value
    control.value = value


class CompactionTuner(widgets.VBox):
    """Preset, window and parameter controls -> live replay, budget plot, cut table."""

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
        self.recorded_aging = _recorded_aging(self.history)
        self._fixed_catalogue = presets if isinstance(presets, Mapping) else None
        self._presets_module = None if self._fixed_catalogue is not None else presets
        names = list(preset_catalogue(self._fixed_catalogue) if self._fixed_catalogue is not None
                     else self._module().PRESETS)
        if preset not in names:
            raise ValueError(f"unknown preset {preset!r}: choose from {', '.join(names)}")
        if replay is None:
            from ..lab.replay import replay as lab_replay

            replay = lab_replay
        self._replay = replay
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._views: dict[tuple, tuple[str, str, str]] = {}
        self._baselines: dict[tuple[str, int], dict[str, Any]] = {}
        self._cache_size = cache_size
        self._resetting = False
        self._explicit: set[str] = set()
        self.result: Any = None
        self.replays = 0

        self.preset = widgets.Dropdown(options=names, value=preset, description="preset",
                                       layout=widgets.Layout(width="320px"),
                                       style={"description_width": "60px"})
        self.window = widgets.IntText(value=self._resolve_window(context_window),
                                      description="context window",
                                      layout=widgets.Layout(width="260px"),
                                      style={"description_width": "110px"})
        self.controls: dict[str, widgets.Widget] = {}
        self.controls_box = widgets.VBox(layout=widgets.Layout(width="100%"))
        self.more_box = widgets.VBox(layout=widgets.Layout(width="100%"))
        self.more = widgets.Accordion(children=[self.more_box], selected_index=None,
                                      layout=widgets.Layout(width="100%"))
        self.status = widgets.HTML()
        self.status.add_class("opctx-tuner-status")
        # the guard's warning about the replay on show, replaced by every replay
        self.warnings = widgets.HTML()
        self.warnings.add_class("opctx-tuner-warnings")
        self.plot = widgets.HTML(layout=widgets.Layout(width="100%"))
        self.plot.add_class("opctx-budget-plot")
        self.table = widgets.HTML()
        self.table.add_class("opctx-cut-table")
        self._debounce = Debouncer(self.update, debounce_ms / 1000)
        self.preset.observe(self._on_preset, names="value")
        self.window.observe(self._on_window, names="value")
        self._build_controls(preset)
        self.plot_box = widgets.VBox(
            [self.plot], layout=widgets.Layout(flex="2 1 0%", width="67%", min_width="0"))
        self.plot_box.add_class("opctx-tuner-plot")
        self.sidebar = widgets.VBox(
            [self.controls_box, self.more],
            layout=widgets.Layout(flex="1 1 0%", width="33%", min_width="0"))
        self.sidebar.add_class("opctx-tuner-controls")
        header = widgets.HBox([self.preset, self.window, self.status],
                              layout=widgets.Layout(align_items="center", flex_flow="row wrap"))
        body = widgets.HBox([self.plot_box, self.sidebar], layout=widgets.Layout(width="100%"))
        super().__init__(children=[header, self.warnings, body, self.table],
                         layout=widgets.Layout(width="100%"))
        self.add_class("opctx-tuner")
        self.update()

    # -- what the replay will use ----------------------------------------------------
    def _module(self) -> Any:
        if self._presets_module is None:
            from ..lab import presets as presets_module

            self._presets_module = presets_module
        return self._presets_module

    def _resolve_window(self, context_window: int | None) -> int:
        """The window ``replay`` would pick: given, else recorded, else the model's."""
        if context_window:
            return int(context_window)
        if self.history.context_window:
            return int(self.history.context_window)
        from ..context.tokens import real_context_window

        return int(real_context_window(self.model or None))

    def current_window(self) -> int:
        return int(self.window.value)

    def baseline(self) -> dict[str, Any]:
        """Every parameter of the current preset at the current window, nothing set."""
        preset, window = self.preset.value, self.current_window()
        key = (preset, window)
        if key not in self._baselines:
            if self._fixed_catalogue is not None:
                values = dict(self._fixed_catalogue[preset])
            else:
                spec = self._module().PRESETS[preset]
                values = _full_parameters(spec, window if window > 0 else None, self.model)
            self._baselines[key] = values
        return self._baselines[key]

    def params(self) -> dict[str, Any]:
        """What the replay gets: every value that differs from the preset's own.

        (A threshold shown as the engine derives it from the other settings is passed
        too when it differs: the engine then gets the very number drawn.)
        """
        base = self.baseline()
        values = {k: _control_value(k, w) for k, w in self.controls.items()}
        return {k: v for k, v in values.items() if v != base.get(k)}

    def thresholds(self) -> dict[str, float]:
        """The thresholds drawn on the plot: the controls' values (finite ones)."""
        return {
            _THRESHOLD_LABELS[name]: float(self.controls[name].value)
            for name in _THRESHOLD_ORDER
            if name in self.controls and math.isfinite(float(self.controls[name].value))
        }

    def _show_derived(self) -> None:
        """Put every control the user did not set at the value the replay will use."""
        base = self.baseline()
        self._resetting = True
        try:
            # first every untouched control at the preset's value, then the thresholds
            # the engine derives from what the user did set
            for name, control in self.controls.items():
                if name not in self._explicit and name in base:
                    _show_value(control, base[name])
            if self._fixed_catalogue is None:
                window = self.current_window()
                used = _engine_policy(self.preset.value, window if window > 0 else None,
                                      self.model, self.params())
                for name in _THRESHOLD_ORDER if used is not None else ():
                    value = used.get(name)
                    if name in self.controls and value is not None:
                        _show_value(self.controls[name], value)
            reserve = self.controls.get("budget.output_reserve")
            if isinstance(reserve, widgets.IntSlider) and self.current_window() > 0:
                # a reserve can never be larger than the window it is kept in
                reserve.max = self.current_window()
        finally:
            self._resetting = False

    # -- controls --------------------------------------------------------------------
    def _build_controls(self, preset: str) -> None:
        for w in self.controls.values():
            w.unobserve(self._on_change, names="value")
        self.controls = {}
        self._explicit = set()
        for name, default in self.baseline().items():
            control = control_for(name, default, width="100%")
            if control is None:
                continue
            control.observe(self._on_change, names="value")
            self.controls[name] = control
        self._show_derived()
        primary = [w for name, w in self.controls.items() if name in PRIMARY]
        rest = [w for name, w in self.controls.items() if name not in PRIMARY]
        self.controls_box.children = primary
        self.more_box.children = rest
        self.more.set_title(0, f"more parameters ({len(rest)})")
        self.more.layout.display = "" if rest else "none"

    def _on_preset(self, change: dict) -> None:
        self._resetting = True
        try:
            self._build_controls(change["new"])
        finally:
            self._resetting = False
        self._debounce.trigger()

    def _on_window(self, _change: dict) -> None:
        self._show_derived()
        self._debounce.trigger()

    def _on_change(self, change: dict) -> None:
        if self._resetting:
            return
        owner = next((k for k, w in self.controls.items() if w is change.get("owner")), None)
        if owner is None:
            return
        self._explicit.add(owner)
        if owner in _THRESHOLD_ORDER:
            self._keep_thresholds_ordered(owner)
        self._show_derived()
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
                    self._explicit.add(name)
            for name in present[pos + 1 :]:
                if self.controls[name].value < value:
                    self.controls[name].value = value
                    self._explicit.add(name)
        finally:
            self._resetting = False

    # -- replay ----------------------------------------------------------------------
    def _key(self) -> tuple:
        return (self.preset.value, self.current_window(), tuple(sorted(self.params().items())))

    def run(self) -> Any:
        """Replay with the current settings (memoised) and return the ``ReplayResult``."""
        key = self._key()
        _preset, window, items = key
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        from ..lab.replay import quiet_replays

        # the guard's warning is shown beside this replay (update), not logged into the
        # cell's output, where it would outlive the replay it is about
        with quiet_replays():
            result = self._replay(self.history, self.preset.value, context_window=window,
                                  keep_contexts=False, **dict(items))
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
            self.status.value, self.warnings.value, self.plot.value, self.table.value = view
            return
        self.status.value = "<div style='font:13px system-ui;color:#777'>replaying\u2026</div>"
        try:
            result = self.run()
        except Exception as exc:  # noqa: BLE001 - shown to the user, the widget stays usable
            self.status.value = (
                f"<span style='color:#b00'>replay failed: {escape_text(type(exc).__name__)}: "
                f"{escape_text(exc)}</span>"
            )
            self.warnings.value = ""  # it was about another replay
            return
        self.result = result
        elapsed = time.perf_counter() - started
        steps = result.steps_df
        comps = result.compactions_df()
        peak = int(steps["tokens"].max()) if len(steps) else 0
        self.status.value = (
            f"<div style='font:13px system-ui'>{escape_text(self.preset.value)}: "
            f"<b>{len(steps)}</b> requests, <b>{len(comps)}</b> compactions, peak "
            f"\u2248{peak:,} tokens, window {escape_text(f'{result.context_window:,}')}"
            f"{_reserve_note(result)}"
            f"{_aging_note(self.recorded_aging)}{_mode_note(result)}; "
            f"replayed in {elapsed * 1000:.0f} ms</div>{_feasibility_note(result)}"
        )
        self.warnings.value = _warning_html(result)
        fig, (ax,) = new_figure(*_FIGURE_INCHES)
        # the lines are the thresholds this replay used, not the specification's defaults
        budget_timeline(steps, ax=ax, thresholds=self.thresholds(),
                        title=f"{self.preset.value}: input budget used per request")
        if _mark_recorded_aging(ax, len(steps), self.recorded_aging):
            _outside_legend(ax)
        self.plot.value = figure_html(fig, dpi=_PLOT_DPI, style=_PLOT_CSS)
        rows = [
            [r.step, r.turn, r.reason, r.tokens_before, r.tokens_after,
             r.tokens_before - r.tokens_after, r.folded, r.kept, r.protected,
             "" if r.cut_index is None or r.cut_index != r.cut_index else int(r.cut_index),
             "yes" if r.fell_back_to_structural else ""]
            for r in comps.itertuples(index=False)
        ]
        caption = (f"{len(rows)} compaction(s) with these settings" if rows
                   else "no compaction with these settings")
        self.table.value = html_table(_TABLE_COLUMNS, rows, caption=caption) + _aging_table(self.recorded_aging)
        self._views[key] = (self.status.value, self.warnings.value, self.plot.value, self.table.value)
        while len(self._views) > self._cache_size:
            self._views.pop(next(iter(self._views)))


def _mode_note(result: Any) -> str:
    """How the replay counted its requests (``ReplayResult.mode``), for the status line."""
    mode = getattr(result, "mode", None)
    return f"; counted on {escape_text(mode)}" if mode else ""


def _feasibility_note(result: Any) -> str:
    """A red line naming why this configuration cannot work on this session, or nothing
    (``opctx.lab.feasibility``: overhead at or above the trigger, every request compacting).
    A replay function that returns no ``feasibility`` (a stand-in) gets nothing."""
    check = getattr(result, "feasibility", None)
    report = check() if callable(check) else None
    if report is None or report.ok:
        return ""
    return ("<div style='font:13px system-ui;color:#b00'>cannot work here: "
            f"{escape_text('; '.join(report.problems))}</div>")


def _reserve_note(result: Any) -> str:
    """The output reserve this replay kept: its window minus its input budget."""
    steps = getattr(result, "steps_df", None)
    if steps is None or not len(steps) or "input_budget" not in steps:
        return ""
    reserve = int(result.context_window) - int(steps["input_budget"].iloc[-1])
    return f", output reserve {reserve:,}"


def _warning_html(result: Any) -> str:
    """The guard's warning for this replay (``replay.guard_summary``), or nothing."""
    from ..lab.replay import guard_summary

    text = guard_summary(result) if hasattr(result, "events") and hasattr(result, "history") else ""
    if not text:
        return ""
    return ("<div style='font:13px system-ui;color:#7a1c00;background:#fdecea;border-left:4px solid "
            f"#b00;padding:6px 10px;margin:4px 0'>{escape_text(text)}</div>")


# -- recorded aging (Claude Code microcompactions) ---------------------------------------------

_AGING_COLUMNS = ["request", "uuid", "trigger", "client preTokens", "client tokensSaved", "results cleared"]
_AGING_COLOR = "#b2182b"


def _recorded_aging(history: Any) -> list[dict[str, Any]]:
    from ..lab.aging_fidelity import recorded_microcompactions

    return recorded_microcompactions(history)


def _aging_note(events: list[dict[str, Any]]) -> str:
    if not events:
        return ""
    n = len(events)
    return f", <b>{n}</b> recorded microcompaction{'s' if n != 1 else ''} (dotted)"


def _mark_recorded_aging(ax: Any, n_steps: int, events: list[dict[str, Any]]) -> bool:
    """A dotted line at each request a recorded microcompaction preceded; True if any drawn."""
    drawn = False
    for event in events:
        x = event.get("request")
        if not isinstance(x, int) or not 0 <= x < max(n_steps, 1):
            continue
        ax.axvline(x, color=_AGING_COLOR, linestyle=":", linewidth=1.4,
                   label="recorded microcompaction" if not drawn else None)
        drawn = True
    return drawn


def _aging_table(events: list[dict[str, Any]]) -> str:
    if not events:
        return ""
    rows = [[e.get("request"), e.get("uuid") or "", e.get("trigger") or "", e.get("pre_tokens"),
             e.get("tokens_saved"), len(e.get("tool_call_ids") or ())] for e in events]
    return html_table(_AGING_COLUMNS, rows, caption=f"{len(rows)} recorded microcompaction(s) in the recording")
