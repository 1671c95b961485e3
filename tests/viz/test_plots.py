"""opctx.viz.plots: every plot draws on plain data, returns its Figure, and needs no pyplot."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from opctx.context.types import BudgetAllocation  # noqa: E402
from opctx.viz.plots import (  # noqa: E402
    budget_timeline,
    estimator_error_plot,
    sweep_tradeoff,
    token_composition,
)


def _steps(n: int = 12) -> pd.DataFrame:
    tokens = np.linspace(1000, 9000, n).astype(int)
    tokens[6:] -= 5000  # a compaction at step 6
    return pd.DataFrame(
        {
            "step": range(n),
            "tokens": tokens,
            "tokens_none": np.linspace(1000, 9000, n).astype(int),
            "budget_pct": tokens / 10_000,
            "compacted": [i == 6 for i in range(n)],
        }
    )


def _hlines(ax) -> set[float]:
    return {round(line.get_ydata()[0], 3) for line in ax.get_lines()
            if len(set(line.get_ydata())) == 1 and len(line.get_ydata()) == 2}


def test_budget_timeline_thresholds_and_compaction_markers():
    before = len(plt.get_fignums())
    fig = budget_timeline(_steps())
    assert isinstance(fig, Figure)
    assert len(plt.get_fignums()) == before  # nothing registered with pyplot
    ax = fig.axes[0]
    assert {0.7, 0.8, 0.95, 1.0} <= _hlines(ax)
    managed = next(line for line in ax.get_lines() if line.get_label() == "managed")
    assert list(managed.get_ydata()) == pytest.approx(list(_steps()["budget_pct"]))
    none = next(line for line in ax.get_lines() if line.get_label() == "no management")
    # tokens_none is put on the same scale as budget_pct (tokens / 10_000 here)
    assert none.get_ydata()[-1] == pytest.approx(0.9)
    verticals = [line for line in ax.get_lines() if len(set(line.get_xdata())) == 1
                 and line.get_label() == "compaction"]
    assert len(verticals) == 1 and verticals[0].get_xdata()[0] == 6


def test_budget_timeline_from_tokens_and_budget_and_errors():
    df = _steps().drop(columns=["budget_pct"])
    fig = budget_timeline(df, input_budget=20_000)
    managed = next(line for line in fig.axes[0].get_lines() if line.get_label() == "managed")
    assert managed.get_ydata()[0] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="budget_pct"):
        budget_timeline(df)
    empty = budget_timeline(pd.DataFrame())
    assert "no requests" in [t.get_text() for t in empty.axes[0].texts]


def test_budget_timeline_draws_into_a_given_axes():
    fig, axes = plt.subplots(1, 2)
    try:
        out = budget_timeline(_steps(), ax=axes[1])
        assert out is fig and axes[1].get_lines() and not axes[0].get_lines()
    finally:
        plt.close(fig)


def test_token_composition_accepts_budget_allocations():
    allocs = [
        BudgetAllocation(context_window=32_000, system_prompt=500, history=h, tools_schema=300,
                         output_reserve=8000, input_used=800 + h, input_budget=24_000,
                         input_used_pct=(800 + h) / 24_000, headroom=0)
        for h in (1000, 4000, 9000)
    ]
    fig = token_composition(allocs)
    ax = fig.axes[0]
    stacks = ax.collections
    assert len(stacks) == 4  # system, history, tools, reserve
    assert [t.get_text() for t in ax.get_legend().get_texts()][:4] == [
        "system", "history", "tools", "reserve"]
    assert 32_000 in _hlines(ax)
    with pytest.raises(ValueError, match="token_composition"):
        token_composition(pd.DataFrame({"x": [1]}))


def test_sweep_tradeoff_one_point_per_configuration():
    sweep = pd.DataFrame({
        "preset": ["none", "spec", "hermes"],
        "tokens_saved": [0, 5000, 9000],
        "reference_losses": [0, 2, 7],
        "cost": [1.0, 0.6, 0.4],
    })
    fig = sweep_tradeoff(sweep)
    left, right = fig.axes
    assert left.collections[0].get_offsets().shape == (3, 2)
    assert [t.get_text() for t in left.texts] == ["none", "spec", "hermes"]
    assert right.collections[0].get_offsets()[:, 0].tolist() == [1.0, 0.6, 0.4]
    with pytest.raises(ValueError, match="reference_losses"):
        sweep_tradeoff(sweep.drop(columns=["reference_losses"]))


def test_estimator_error_plot_groups_and_computes_rel_error():
    df = pd.DataFrame({
        "estimated": [90, 110, 100, 130],
        "provider": [100, 100, 100, 100],
        "method": ["heuristic", "heuristic", "tiktoken", "tiktoken"],
    })
    fig = estimator_error_plot(df, by="method")
    left, right = fig.axes
    assert len(left.collections) == 2  # one scatter per method
    assert {t.get_text() for t in left.get_legend().get_texts()} >= {"heuristic", "tiktoken"}
    assert len(right.patches) > 0
    empty = estimator_error_plot(pd.DataFrame())
    assert empty.axes[0].texts


# -- text from data is drawn literally; legends stay off the data -------------------------------

DOLLARS = "cost $5 vs $\\frac{"  # two dollars: mathtext would parse (and fail on) the middle
DOLLAR_PAIR = "$x$ saved"  # valid mathtext: would be drawn as an italic x, not as written


def _render(fig) -> None:
    import io

    fig.savefig(io.BytesIO(), format="png")


def _all_texts(fig) -> list:
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_text()]


@pytest.mark.parametrize("text", [DOLLARS, DOLLAR_PAIR])
def test_every_plot_draws_text_from_data_literally(text):
    steps = _steps()
    sweep = pd.DataFrame({"preset": [text, "b"], "tokens_saved": [1, 2],
                          "reference_losses": [0, 1], "cost": [1.0, 2.0]})
    usage = pd.DataFrame({"estimated": [90, 110], "provider": [100, 100], "method": [text, "b"]})
    figures = [
        budget_timeline(steps, title=text, label=text, thresholds={text: 0.8}),
        token_composition(pd.DataFrame({"history": [1, 2], "tools": [1, 1]}), title=text),
        sweep_tradeoff(sweep, title=text),
        estimator_error_plot(usage, by="method", title=text),
        budget_timeline(pd.DataFrame(), title=text),
    ]
    for fig in figures:
        _render(fig)  # mathtext would raise here on DOLLARS
        shown = [t for t in _all_texts(fig) if text in t.get_text()]
        assert shown, "the text is drawn"
        assert all(not t.get_parse_math() for t in shown)
        assert all(t._preprocess_math(t.get_text()) == (t.get_text(), False) for t in shown)


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_legends_sit_outside_the_data_area():
    usage = pd.DataFrame({"estimated": [90, 110, 100], "provider": [100, 100, 100],
                          "method": ["a", "b", "b"]})
    for fig in (budget_timeline(_steps()), token_composition(pd.DataFrame({"history": [1, 2]})),
                estimator_error_plot(usage, by="method")):
        _render(fig)
        renderer = fig._get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            assert legend is not None
            assert not _overlaps(legend.get_window_extent(renderer), ax.bbox), "legend covers data"
            # and the legend is inside the figure, not cut off
            assert fig.bbox.contains(*legend.get_window_extent(renderer).p1)
