"""The token and cost side of a published comparison, replayed on recorded trajectories.

``compare_costs(histories)`` replays each trajectory under raw / masking / summary (by
default The Complexity Trap's ``none``, ``complexity-trap-masking`` and
``complexity-trap-summary`` presets) and prices every replay with each of the paper's
price models (``opctx.lab.prices.PRICE_MODELS``) under the paper's cache accounting: the
prefix a request shares with the previous one is read from the cache, no expiry, no
write surcharge (``CachePolicy("always_warm")``; the paper's ``_calculate_cached_tokens``
in ``sweagent/agent/models.py`` at bf15b5fb). It returns the per-trajectory rows and,
per (strategy, price model), the relative change of input tokens and cost against raw,
the summariser's share of the cost and the median turn at which the strategy's running
cost drops below raw for good (``breakeven_turn``: None when it never does).

``PAPER_TABLE1``: the paper's own figures (Lindenbauer et al. 2025, arXiv 2508.21433,
§4 Table 1, SWE-bench Verified, 500 instances per cell, SWE-agent): cost per instance
of the raw agent and the change under each strategy. There the agent really ran under
each strategy (its trajectories changed: §3.4, "trajectory elongation"); here the
recorded trajectory is held fixed. The difference is the subject of docs/lab.md,
"What a replay reproduces of a paper".

>>> PAPER_TABLE1["complexity-trap-qwen3-coder-480b"]["masking"]
-52.7
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .costs import CachePolicy

__all__ = ["PAPER_TABLE1", "STRATEGIES", "PRICE_MODEL_NAMES", "compare_costs", "breakeven_turn", "running_costs"]

PAPER_TABLE1: dict[str, dict[str, float]] = {
    # §4 Table 1: raw cost per instance (USD) and the change (%) of each strategy vs raw
    "complexity-trap-qwen3-coder-480b": {"raw_usd": 1.29, "masking": -52.7, "summary": -50.4},
    "complexity-trap-gemini-2.5-flash": {"raw_usd": 0.41, "masking": -56.1, "summary": -41.5},
    "complexity-trap-qwen3-32b": {"raw_usd": 1.12, "masking": -50.9, "summary": -55.4},
}
"""The Complexity Trap (arXiv 2508.21433), §4 Table 1 (``tab:main_results``)."""

STRATEGIES: dict[str, str] = {
    "raw": "none",
    "masking": "complexity-trap-masking",
    "summary": "complexity-trap-summary",
}
"""The paper's three agents as opctx presets (raw = no history processor)."""

PRICE_MODEL_NAMES: tuple[str, ...] = tuple(PAPER_TABLE1)

PAPER_CACHE = CachePolicy("always_warm")
"""The paper's cache accounting: the shared prefix is read, no TTL, no write surcharge."""


def breakeven_turn(running: Sequence[float], raw_running: Sequence[float]) -> int | None:
    """The first turn (1-based request) from which ``running`` stays below ``raw_running``.

    >>> breakeven_turn([1, 3, 4, 5], [1, 2, 4.5, 6])
    3
    >>> breakeven_turn([1, 2], [1, 2]) is None
    True
    """
    n = min(len(running), len(raw_running))
    turn = None
    for i in range(n):
        if running[i] < raw_running[i] - 1e-12:
            turn = i + 1 if turn is None else turn
        else:
            turn = None
    return turn


def _pct(new: float, old: float) -> float:
    return (new - old) / old * 100.0 if old else math.nan


def _replays(histories: Sequence[Any], strategies: Mapping[str, str]) -> list[dict[str, Any]]:
    from .replay import quiet_replays, replay

    out = []
    with quiet_replays():
        for h in histories:
            out.append({name: replay(h, preset, keep_contexts=False) for name, preset in strategies.items()})
    return out


def _session_rows(histories: Sequence[Any], replays: list[dict[str, Any]], prices: Sequence[str],
                  strategies: Mapping[str, str]) -> tuple[list[dict[str, Any]], list[Any]]:
    from ._replay_costs import replay_costs

    rows, priced = [], []
    for h, by_strategy in zip(histories, replays, strict=True):
        for pm in prices:
            costs = {name: replay_costs(r, pm, PAPER_CACHE, warn=False) for name, r in by_strategy.items()}
            priced.extend(c.strategy for c in costs.values())
            raw = by_strategy["raw"]
            raw_running = costs["raw"].running_cost(len(raw.steps_df))
            raw_tokens = int(raw.steps_df["tokens"].sum())
            for name, r in by_strategy.items():
                fig = costs[name].figures()
                tokens = int(r.steps_df["tokens"].sum())
                rows.append({
                    "session": h.session_id or h.title, "format": h.format, "turns": len(r.steps_df),
                    "strategy": name, "preset": strategies[name], "prices": pm,
                    "input_tokens": tokens, "cost": fig["cost"], "summary_calls_cost": fig["summary_calls_cost"],
                    "input_tokens_change_pct": _pct(tokens, raw_tokens),
                    "cost_change_pct": _pct(fig["cost"], costs["raw"].figures()["cost"]),
                    "breakeven_turn": breakeven_turn(costs[name].running_cost(len(r.steps_df)), raw_running),
                    "summaries": r.summaries, "price_source": fig["price_source"],
                    "cache_assumption": fig["cache_assumption"],
                })
    return rows, priced


def _totals(rows: list[dict[str, Any]], strategies: Iterable[str], prices: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for pm in prices:
        raw = [r for r in rows if r["prices"] == pm and r["strategy"] == "raw"]
        raw_tokens, raw_cost = sum(r["input_tokens"] for r in raw), sum(r["cost"] for r in raw)
        for name in strategies:
            sel = [r for r in rows if r["prices"] == pm and r["strategy"] == name]
            cost = sum(r["cost"] for r in sel)
            turns = [r["breakeven_turn"] for r in sel if r["breakeven_turn"] is not None]
            paper = PAPER_TABLE1.get(pm, {})
            out.append({
                "strategy": name, "prices": pm, "sessions": len(sel),
                "input_tokens_change_pct": round(_pct(sum(r["input_tokens"] for r in sel), raw_tokens), 2),
                "cost_change_pct": round(_pct(cost, raw_cost), 2),
                "summary_calls_cost_share_pct": round(sum(r["summary_calls_cost"] for r in sel) / cost * 100, 2)
                if cost else 0.0,
                # the median over the trajectories that break even; how many do beside it
                "breakeven_turn_median": float(statistics.median(turns)) if turns and name != "raw" else None,
                "breakeven_sessions": len(turns) if name != "raw" else 0,
                "raw_cost_per_session_usd": round(raw_cost / len(raw), 4) if raw else None,
                "paper_cost_change_pct": paper.get(name, 0.0 if name == "raw" else None),
                "paper_raw_cost_usd": paper.get("raw_usd"),
            })
    return out


def compare_costs(histories: Iterable[Any], *, strategies: Mapping[str, str] | None = None,
                  prices: Sequence[str] = PRICE_MODEL_NAMES) -> tuple[Any, list[dict[str, Any]]]:
    """``(per-trajectory DataFrame, one summary dict per (strategy, price model))``.

    ``histories``: anything ``replay`` takes. ``strategies``: name -> preset, and one must be
    ``"raw"`` (the baseline). Each replay runs once and is priced under every price model;
    unpriced models (none among ``PRICE_MODELS``) would warn once.
    """
    import pandas as pd

    from .costs import warn_unpriced
    from .history import as_history

    strategies = dict(strategies or STRATEGIES)
    if "raw" not in strategies:
        raise ValueError("strategies must name a 'raw' baseline")
    hs = [as_history(h) for h in histories]
    rows, priced = _session_rows(hs, _replays(hs, strategies), list(prices), strategies)
    warn_unpriced(priced)
    return pd.DataFrame(rows), _totals(rows, strategies, list(prices))


def running_costs(history: Any, prices: str = PRICE_MODEL_NAMES[0], *,
                  strategies: Mapping[str, str] | None = None) -> Any:
    """One trajectory's cumulative cost turn by turn under each strategy (a long DataFrame:
    ``turn``, ``strategy``, ``running_cost``), summariser calls at the turn they happen."""
    import pandas as pd

    from ._replay_costs import replay_costs

    rows = []
    for name, r in _replays([history], dict(strategies or STRATEGIES))[0].items():
        running = replay_costs(r, prices, PAPER_CACHE, warn=False).running_cost(len(r.steps_df))
        rows.extend({"turn": i + 1, "strategy": name, "running_cost": c} for i, c in enumerate(running))
    return pd.DataFrame(rows)
