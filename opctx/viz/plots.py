"""Plots of budgets, token composition, sweeps and estimator error (matplotlib).

Every function draws on plain data - a ``pandas.DataFrame``, a ``ReplayResult``
(its ``steps_df`` is used) or lists - and returns the ``matplotlib.figure.Figure``
it drew on; pass ``ax=`` to draw into an existing Axes instead (the Axes' figure
is returned).

Choices:

* **No pyplot state.** Figures are created with ``matplotlib.figure.Figure``, not
  ``pyplot.figure``: nothing accumulates in pyplot's registry (a widget that
  redraws on every slider move would otherwise leak a figure per move), the
  module works under any backend including Agg on a headless CI, and a figure
  returned as a notebook cell's value is displayed exactly once (a PNG
  formatter for ``Figure`` is registered with IPython when one is running).
* **Column names.** The defaults are those of ``opctx.lab`` (``steps_df``:
  ``step``, ``tokens``, ``tokens_none``, ``budget_pct``, ``compacted``;
  ``metrics.summarize``: ``tokens_saved``, ``cost``, ``reference_losses``;
  ``metrics.estimator_error``: ``estimated``, ``provider``, ``rel_error``).
  Each function takes the names as keywords, and ``token_composition`` also
  recognises the field names of ``BudgetAllocation``.
* **Thresholds.** The budget timeline draws the specification's three lines:
  0.70 (recommend), 0.80 (trigger), 0.95 (emergency), plus 1.0, the input
  budget itself. The y axis is ``input_used / input_budget`` as in the spec.
* **Missing data.** An empty input gives an empty, labelled plot with a note,
  never an exception: a sweep that produced nothing should still draw.
* **Text is literal.** Titles, labels, legend entries and annotations come from
  data (session ids, preset and model names, a user's title) and are drawn as
  they are: matplotlib would read a pair of ``$`` as mathtext (and raise on a
  malformed one), so every text artist of an Axes we draw on gets
  ``parse_math=False`` (``_literal_text``).
* **Legends sit outside the data**, to the right of the Axes (constrained
  layout makes room for them), so no line or marker is hidden behind one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..lab.prices import COST_UNIT
from ._fonts import apply_fonts, font_families
from ._vocabulary import BUDGET_PARTS, EVENTS, SERIES, THRESHOLD_STYLE

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "THRESHOLDS",
    "PALETTE",
    "budget_timeline",
    "token_composition",
    "sweep_tradeoff",
    "estimator_error_plot",
    "new_figure",
    "font_families",
]

THRESHOLDS: dict[str, float] = {"recommend": 0.70, "trigger": 0.80, "emergency": 0.95}
# colours come from the toolkit's one vocabulary (docs/viz.md "Visual vocabulary")
PALETTE = SERIES
_THRESHOLD_STYLE = THRESHOLD_STYLE
_COMPACTION = EVENTS["compaction"]


def _png(fig: Figure) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


_registered = False


def _register_notebook_display() -> None:
    """Teach IPython to show a pyplot-free Figure as a PNG (pyplot's inline backend
    only registers its formatter once pyplot itself is imported)."""
    global _registered
    if _registered:
        return
    _registered = True
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from matplotlib.figure import Figure

    shell.display_formatter.formatters["image/png"].for_type(Figure, _png)


def new_figure(width: float = 8.0, height: float = 3.5, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    """A pyplot-free figure with ``ncols`` Axes side by side."""
    from matplotlib.figure import Figure

    _register_notebook_display()
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def _axes(ax: Axes | None, width: float = 8.0, height: float = 3.5) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig, (axis,) = new_figure(width, height)
    return fig, axis


def _frame(data: Any) -> pd.DataFrame:
    import pandas as pd

    if data is None:
        return pd.DataFrame()
    steps = getattr(data, "steps_df", None)
    if steps is not None:
        return steps
    if isinstance(data, pd.DataFrame):
        return data
    if isinstance(data, Mapping):
        return pd.DataFrame(data)
    rows = list(data)
    if rows and hasattr(rows[0], "to_dict"):
        rows = [r.to_dict() for r in rows]
    return pd.DataFrame(rows)


def _literal_text(*artists: Any) -> None:
    """Draw every text of ``artists`` (Axes, Figures, Text) literally (no mathtext) and
    in the toolkit's fonts (CJK falls back to a CJK font: ``_fonts``).

    Called last by every plot on what it drew, so legends, annotations and titles
    made from data are covered; texts a caller adds afterwards are left alone.
    """
    from matplotlib.text import Text

    texts = []
    for artist in artists:
        texts += [artist] if isinstance(artist, Text) else artist.findobj(Text)
    for text in texts:
        text.set_parse_math(False)
    apply_fonts(texts)


def _outside_legend(ax: Axes, **kwargs: Any) -> None:
    """A legend to the right of the Axes, never over the data."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                  fontsize=8, **kwargs)


def _empty(ax: Axes, note: str) -> None:
    ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, color="#777")


def budget_timeline(
    steps: Any,
    *,
    ax: Axes | None = None,
    x: str = "step",
    pct: str = "budget_pct",
    tokens: str = "tokens",
    tokens_none: str = "tokens_none",
    compacted: str = "compacted",
    tokens_before: str = "tokens_before_compaction",
    input_budget: float | None = None,
    thresholds: Mapping[str, float] = THRESHOLDS,
    compaction_steps: Iterable[Any] | None = None,
    title: str = "Input budget used per request",
    label: str | None = None,
) -> Figure:
    """Budget used per request (``input_used / input_budget``) with threshold lines.

    ``steps``: a ``ReplayResult``, a ``steps_df``-like DataFrame, or a list of
    rows. ``pct`` is used when present; otherwise ``tokens / input_budget``.
    Compactions are marked where ``compacted`` is true (or at the given
    ``compaction_steps``), with a segment up to where the request stood before
    the compaction when ``tokens_before`` is a column (``steps_df`` has it). When ``tokens_none`` is present, the same history with
    no management is drawn dashed, on the same scale.
    """
    fig, ax = _axes(ax)
    df = _frame(steps)
    ax.set_title(title)
    ax.set_xlabel("request")
    ax.set_ylabel("input used / input budget")
    for name, level in thresholds.items():
        color, style = _THRESHOLD_STYLE.get(name, ("#999", ":"))
        ax.axhline(level, color=color, linestyle=style, linewidth=1, label=f"{name} {level:.2f}")
    ax.axhline(1.0, color="#333", linewidth=0.8)
    if df.empty:
        _empty(ax, "no requests")
        ax.set_ylim(0, 1.1)
        _literal_text(ax)
        return fig
    xs = df[x] if x in df else df.index
    if pct in df:
        ys = df[pct].astype(float)
        scale = None
        if tokens in df:
            tok = df[tokens].astype(float)
            scale = (ys / tok.where(tok > 0)).median()
    elif tokens in df and input_budget:
        scale = 1.0 / float(input_budget)
        ys = df[tokens].astype(float) * scale
    else:
        raise ValueError(
            f"budget_timeline needs a {pct!r} column, or {tokens!r} with input_budget=; "
            f"got columns {list(df.columns)}"
        )
    ax.plot(xs, ys, color=PALETTE[0], linewidth=1.6, label=label or "managed")
    if tokens_none in df and scale is not None and scale == scale:  # NaN-safe
        ax.plot(xs, df[tokens_none].astype(float) * scale, color="#999", linewidth=1,
                linestyle="--", label="no management")
    marks: list[Any]
    if compaction_steps is not None:
        marks = list(compaction_steps)
    elif compacted in df:
        marks = list(xs[df[compacted].astype(bool)])
    else:
        marks = []
    for i, m in enumerate(marks):
        ax.axvline(m, color=_COMPACTION, alpha=0.5, linewidth=1, label="compaction" if i == 0 else None)
    peak = float(ys.max()) if len(ys) else 0.0
    if marks:
        lookup = dict(zip(list(xs), list(ys), strict=False))
        ax.scatter(marks, [lookup.get(m, float("nan")) for m in marks], marker="v",
                   color=_COMPACTION, zorder=3)
        if tokens_before in df and scale is not None and scale == scale:
            # where the request stood before it was compacted: the crossing of the trigger
            before = dict(zip(list(xs), list(df[tokens_before].astype(float) * scale),
                              strict=False))
            tops = [before.get(m, float("nan")) for m in marks]
            ax.vlines(marks, [lookup.get(m, float("nan")) for m in marks], tops,
                      color=_COMPACTION, linewidth=1.6)
            ax.scatter(marks, tops, marker="o", facecolors="white", edgecolors=_COMPACTION,
                       zorder=3, label="before compaction")
            peak = max([peak, *(t for t in tops if t == t)])
    top = max(1.05, peak * 1.05)
    ax.set_ylim(0, top)
    _outside_legend(ax)
    _literal_text(ax)
    return fig


_COMPOSITION_ALIASES = {
    "system": ("system", "system_prompt", "system_tokens"),
    "history": ("history", "history_tokens"),
    "tools": ("tools", "tools_schema", "tools_tokens"),
    "reserve": ("reserve", "output_reserve"),
}


def token_composition(
    data: Any,
    *,
    ax: Axes | None = None,
    x: str | None = "step",
    columns: Mapping[str, str] | None = None,
    context_window: float | None = None,
    title: str = "Context window composition per request",
) -> Figure:
    """Stacked areas of system / history / tools / output reserve per request.

    ``data``: a DataFrame, a list of ``BudgetAllocation`` (or dicts), or a
    ``ReplayResult``. ``columns`` maps the four parts to column names when they
    differ from the recognised ones (``system_prompt``, ``history``,
    ``tools_schema``, ``output_reserve`` and short forms).
    """
    fig, ax = _axes(ax)
    df = _frame(data)
    ax.set_title(title)
    ax.set_xlabel("request")
    ax.set_ylabel("tokens")
    chosen: dict[str, str] = {}
    for part, names in _COMPOSITION_ALIASES.items():
        if columns and part in columns:
            chosen[part] = columns[part]
            continue
        for name in names:
            if name in df:
                chosen[part] = name
                break
    if df.empty:
        _empty(ax, "no requests")
        _literal_text(ax)
        return fig
    if not chosen:
        raise ValueError(
            "token_composition found none of the columns "
            f"{sorted({n for v in _COMPOSITION_ALIASES.values() for n in v})}; "
            f"got {list(df.columns)} (pass columns={{'history': ...}})"
        )
    xs = df[x] if x and x in df else range(len(df))
    parts = [p for p in _COMPOSITION_ALIASES if p in chosen]
    colors = BUDGET_PARTS
    ax.stackplot(list(xs), *[df[chosen[p]].fillna(0).astype(float) for p in parts],
                 labels=parts, colors=[colors[p] for p in parts], alpha=0.9)
    window = context_window
    if window is None and "context_window" in df:
        window = float(df["context_window"].max())
    if window:
        ax.axhline(window, color="#333", linewidth=0.8, label="context window")
    _outside_legend(ax)
    _literal_text(ax)
    return fig


def _label_column(df: pd.DataFrame, label: str | None) -> str | None:
    if label:
        return label if label in df else None
    for name in ("preset", "config", "name", "label", "strategy"):
        if name in df:
            return name
    return None


def sweep_tradeoff(
    sweep: Any,
    *,
    saved: str = "tokens_saved",
    loss: str = "reference_losses",
    cost: str = "cost",
    label: str | None = None,
    title: str = "Strategy trade-offs",
) -> Figure:
    """Two panels: tokens saved vs reference loss, and cost vs reference loss.

    One point per configuration (a row of a sweep DataFrame, as written by
    ``opctx.lab.sweep``), annotated with its ``preset``/``config``/``name``.
    Points on the lower-right (many tokens saved, few losses) and lower-left
    (cheap, few losses) are the good ones. The ``cost`` axis is in US dollars
    (``opctx.lab.prices.COST_NOTE``).
    """
    fig, (left, right) = new_figure(11, 4, ncols=2)
    fig.suptitle(title, parse_math=False)
    df = _frame(sweep)
    left.set_xlabel(saved.replace("_", " "))
    left.set_ylabel(loss.replace("_", " "))
    right.set_xlabel(f"{cost} ({COST_UNIT})" if cost == "cost" else cost)
    right.set_ylabel(loss.replace("_", " "))
    if df.empty:
        _empty(left, "no configurations")
        _empty(right, "no configurations")
        _literal_text(left, right)
        return fig
    for col in (saved, loss):
        if col not in df:
            raise ValueError(f"sweep_tradeoff needs column {col!r}; got {list(df.columns)}")
    name_col = _label_column(df, label)
    names = list(df[name_col].astype(str)) if name_col else [str(i) for i in df.index]
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(df))]
    panels = [(left, saved)] + ([(right, cost)] if cost in df else [])
    for axis, xcol in panels:
        axis.scatter(df[xcol].astype(float), df[loss].astype(float), c=colors, s=45, zorder=3)
        for xv, yv, name in zip(df[xcol], df[loss], names, strict=False):
            axis.annotate(name, (float(xv), float(yv)), textcoords="offset points",
                          xytext=(4, 4), fontsize=8)
        axis.grid(alpha=0.3)
    if cost not in df:
        _empty(right, f"no {cost!r} column")
    _literal_text(left, right)
    return fig


def estimator_error_plot(
    data: Any,
    *,
    estimated: str = "estimated",
    provider: str = "provider",
    rel_error: str = "rel_error",
    by: str | None = None,
    title: str = "Token estimate vs provider-reported usage",
) -> Figure:
    """Left: estimate against the provider's count (with y = x). Right: relative errors.

    ``by`` names a column (an estimator method, a model, a file) to colour by;
    without it one series is drawn. ``rel_error`` is computed when absent.
    """
    fig, (left, right) = new_figure(11, 4, ncols=2)
    fig.suptitle(title, parse_math=False)
    df = _frame(data)
    left.set_xlabel("provider input tokens")
    left.set_ylabel("estimated input tokens")
    right.set_xlabel("relative error (estimate - provider) / provider")
    right.set_ylabel("requests")
    if df.empty:
        _empty(left, "no requests with provider usage")
        _empty(right, "no requests with provider usage")
        _literal_text(left, right)
        return fig
    for col in (estimated, provider):
        if col not in df:
            raise ValueError(f"estimator_error_plot needs column {col!r}; got {list(df.columns)}")
    if rel_error not in df:
        df = df.assign(**{rel_error: (df[estimated] - df[provider]) / df[provider].where(df[provider] > 0)})
    groups: Sequence[tuple[str, pd.DataFrame]]
    groups = [(str(k), g) for k, g in df.groupby(by, sort=True)] if by and by in df else [("", df)]
    hi = float(max(df[estimated].max(), df[provider].max()))
    left.plot([0, hi], [0, hi], color="#333", linewidth=0.8, label="y = x")
    for i, (name, g) in enumerate(groups):
        color = PALETTE[i % len(PALETTE)]
        left.scatter(g[provider], g[estimated], s=14, color=color, alpha=0.7, label=name or None)
        errs = g[rel_error].dropna().astype(float)
        if len(errs):
            right.hist(errs, bins=30, color=color, alpha=0.55, label=name or None)
    right.axvline(0, color="#333", linewidth=0.8)
    if by:
        _outside_legend(left)
        _outside_legend(right)
    _literal_text(left, right)
    return fig
