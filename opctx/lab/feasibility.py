"""Can a configuration work at all on a session? Read off a replay's result.

A strategy whose trigger sits at or below what every request carries anyway cannot work:
the client's fixed part (system prompt, tool schemas, files it re-attaches after a
compaction) plus the summary already fills the trigger, so the replay compacts, frees
almost nothing, and compacts again on the next request. Measured on estimates alone such a
configuration can even look cheap (the estimate misses that fixed part); with the
provider's counts fed back it is seen for what it is. ``feasibility(result)`` says which
mode the replay ran in and flags, with the figures:

* ``"overhead at or above the trigger"``: the first request's provider count (what the
  client sends before any history), or the smallest request right after one of the
  replay's own compactions, reaches the trigger (not for a token trigger that counts the
  history alone, ``trigger.tokens_of``: the fixed part is not in its count);
* ``"every request compacting"``: after its first compaction the replay compacted on at
  least ``THRASH_SHARE`` of the requests (and at least ``THRASH_MIN`` times).

The trigger (tokens of the figure the decision compares) is the one given, else the one
the replay's own decisions show: the smallest ``check_tokens`` of a request where it
decided to compact. ``FeasibilityReport.row()`` is the flat form for sweep rows and
tables; ``problems`` is what a tuner shows.

>>> FeasibilityReport(PROVIDER_USAGE, None, None, None, 0.0).ok
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FeasibilityReport", "feasibility", "replay_mode", "THRASH_SHARE", "THRASH_MIN",
           "PROVIDER_USAGE", "ESTIMATES", "REPLAY_MODES", "FEASIBILITY_COLUMNS"]

# the two ways a replay counts a request (``ReplayResult.mode``): the provider's counts fed
# back (``feed_usage``), or opctx's estimate alone
PROVIDER_USAGE = "provider usage"
ESTIMATES = "estimates"
REPLAY_MODES = (PROVIDER_USAGE, ESTIMATES)

# a replay that compacts on half of its requests after the first compaction does nothing
# else (assumed); three in a row is the smallest run that is not a coincidence (assumed)
THRASH_SHARE = 0.5
THRASH_MIN = 3


# What each column of ``FeasibilityReport.row`` means (a sweep's columns after the metrics).
FEASIBILITY_COLUMNS: dict[str, str] = {
    "replay_mode": "what the replay counted on: 'provider usage' (the recorded counts) or 'estimates'",
    "feasible": "False when the configuration cannot work here (feasibility_problems says why)",
    "feasibility_problems": "why not: the fixed part at or above the trigger, every request compacting",
    "trigger_tokens_seen": "the trigger the replay ran with, tokens (NaN: none)",
    "first_request_tokens": "the provider's count of the first request, if recorded (NaN: not)",
    "post_compaction_floor_tokens": "the smallest request right after one of the replay's compactions (NaN: none)",
    "compaction_rate": "compactions per request after the first compaction",
}


@dataclass
class FeasibilityReport:
    """What a replay shows about whether its configuration can work."""

    mode: str  # "provider usage" (feed_usage) or "estimates"
    trigger_tokens: int | None
    first_request_tokens: int | None  # the provider's count of the first request, if recorded
    floor_tokens: int | None  # the smallest request right after one of the replay's compactions
    compaction_rate: float  # compactions per request after the first compaction
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def row(self) -> dict[str, Any]:
        """Flat columns for a sweep row or a table (a figure not seen is NaN, as in the other
        metrics, so a column keeps one type through a Parquet file)."""
        def figure(value: int | None) -> float:
            return math.nan if value is None else value

        return {
            "replay_mode": self.mode, "feasible": self.ok, "feasibility_problems": "; ".join(self.problems),
            "trigger_tokens_seen": figure(self.trigger_tokens), "first_request_tokens": figure(self.first_request_tokens),
            "post_compaction_floor_tokens": figure(self.floor_tokens), "compaction_rate": self.compaction_rate,
        }


def replay_mode(result: Any) -> str:
    """``"provider usage"`` when the replay fed the recording's counts back, else ``"estimates"``.

    What the result says (``result.mode``, ``params["feed_usage"]``), else what its figures
    show: a fed replay's requests count what the provider counted while it sends what the
    recording sent.
    """
    mode = getattr(result, "mode", None)
    if isinstance(mode, str) and mode:
        return mode
    params = getattr(result, "params", None) or {}
    if "feed_usage" in params:
        return PROVIDER_USAGE if params["feed_usage"] else ESTIMATES
    steps = result.steps_df
    if len(steps) < 2 or "provider_input_tokens" not in steps:
        return ESTIMATES
    # the second request's check is the first response as counted: the provider's count + its
    # output when fed, opctx's estimate otherwise
    prev = steps.iloc[0]
    if prev["provider_input_tokens"] is None or prev["provider_input_tokens"] != prev["provider_input_tokens"]:
        return ESTIMATES
    counted = int(prev["provider_input_tokens"]) + int(prev["output_tokens"])
    return PROVIDER_USAGE if abs(int(steps.iloc[1]["check_tokens"]) - counted) <= 0.01 * counted else ESTIMATES


def _trigger(steps: Any) -> int | None:
    fired = steps[steps["decision"].astype(str).isin(("auto", "emergency"))]
    return int(fired["check_tokens"].min()) if len(fired) else None


def feasibility(result: Any, *, trigger_tokens: int | None = None) -> FeasibilityReport:
    """Which mode ``result`` (an ``opctx.lab.replay`` result) ran in, and whether its
    configuration can work on that session (module docstring)."""
    steps = result.steps_df
    mode = replay_mode(result)
    trigger = int(trigger_tokens) if trigger_tokens is not None else (_trigger(steps) if len(steps) else None)
    first = None
    if len(steps) and "provider_input_tokens" in steps:
        counted = steps["provider_input_tokens"].dropna()
        first = int(counted.iloc[0]) if len(counted) else None
    compacted = steps.index[steps["compacted"].astype(bool)].tolist() if len(steps) else []
    floor = int(steps.loc[compacted, "tokens"].min()) if compacted else None
    after = len(steps) - compacted[0] if compacted else 0
    rate = len(compacted) / after if after else 0.0
    problems = []
    # a token trigger on the history alone (trigger.tokens_of) never counts the fixed part
    policy = getattr(result, "policy", None)
    on_history = getattr(getattr(policy, "trigger", None), "tokens_of", "request") == "history"
    if trigger is not None and not on_history:
        if first is not None and first >= trigger:
            problems.append(f"overhead at or above the trigger: the first request already counts {first:,} "
                            f"tokens (system prompt, tools) against a {trigger:,} trigger")
        if floor is not None and floor >= trigger:
            problems.append(f"overhead at or above the trigger: right after compacting a request still holds "
                            f"{floor:,} tokens (fixed part, summary, re-attached files) against a {trigger:,} trigger")
    if len(compacted) >= THRASH_MIN and rate >= THRASH_SHARE:
        problems.append(f"every request compacting: {len(compacted)} compactions in the {after} requests from "
                        f"the first one ({rate:.0%})")
    if mode == ESTIMATES and problems:
        problems.append("measured on estimates: the provider's counts (feed_usage=True) would show the unseen "
                        "fixed part too")
    return FeasibilityReport(mode, trigger, first, floor, rate if not math.isnan(rate) else 0.0, problems)
