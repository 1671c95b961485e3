"""What a replay costs, request by request: the replay's side of ``opctx.lab.costs``.

``replay_costs(result, prices, cache) -> ReplayCosts`` turns a replay's ``steps_df`` into
``RequestTokens`` and prices them with ``price_requests``:

* the agent's requests: each step's prompt (``tokens``), its output, its recorded time,
  and the prefix it shares with the previous request (``prefix_kept_tokens``: what a
  prefix cache could serve);
* the same requests of the unmodified history (``tokens_none``, append-only, so the
  whole previous prompt is its prefix): the ``none`` baseline, for savings in dollars;
* the summariser's own calls, one per compaction that wrote a summary, in their own
  cache chain and totalled apart (``summary_calls_cost``). A replay with structural
  summaries made no LLM call, so the call an LLM summariser would have made is
  modelled: its prompt is what the compaction folded (``tokens_before - tokens_after``
  plus the summary, the request's size before minus after, with the summary added
  back) and its output is the summary's own tokens. A compaction whose summariser reported
  its usage (``LLMSummaries``) is priced at those counts. ``summary_calls_basis`` says which.

The cache's timing: ``cache=None`` takes the recorded request times when the recording
has them (``has_request_times``: Claude Code, Codex) and otherwise assumes the cache
always warm (SWE-agent ``.traj``, a completion log without times), and every figure
carries ``cache_assumption``. A model with no price costs NaN (never a default price);
``warn=False`` leaves the one warning to a caller pricing many replays (``warn_unpriced``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .costs import (
    CachePolicy,
    CostResult,
    RequestTokens,
    has_request_times,
    price_requests,
    requests_from_steps,
)

__all__ = ["ReplayCosts", "replay_costs", "default_cache_policy", "SUMMARY_CALLS_MODELLED", "SUMMARY_CALLS_MEASURED"]

SUMMARY_CALLS_MODELLED = ("modelled: each compaction's summary call reads what it folded and writes the "
                          "summary (structural summaries stand in for an LLM's text)")
SUMMARY_CALLS_MEASURED = "measured: the summariser's reported usage, at its model's prices"


@dataclass
class ReplayCosts:
    """The priced requests of one replay: the strategy's (agent + summariser) and the baseline's."""

    strategy: CostResult
    none: CostResult
    summary_calls_basis: str
    summary_steps: list[int] = field(default_factory=list)  # the step of each summariser call

    def running_cost(self, steps: int) -> list[float]:
        """The strategy's cumulative cost after each step, its summariser's calls at their step."""
        per_step = [0.0] * steps
        agent = [r for r in self.strategy.records if r.kind == "agent"]
        for i, r in enumerate(agent[:steps]):
            per_step[i] += r.cost + r.keep_warm_cost
        summary = [r for r in self.strategy.records if r.kind == "summary"]
        for step, r in zip(self.summary_steps, summary, strict=True):
            per_step[min(max(step, 0), steps - 1)] += r.cost + r.keep_warm_cost
        return list(itertools.accumulate(per_step))

    def figures(self) -> dict[str, Any]:
        """The flat cost figures a replay's ``metrics()`` carries."""
        s = self.strategy.summary()
        return {
            "cost": s["cost"],
            "cost_none": self.none.total(),
            "agent_calls_cost": s["cost_agent"],
            "summary_calls_cost": s["cost_summary"],
            "summary_calls_priced": s["summary_requests"],
            "summary_calls_input_tokens": sum(r.input_tokens for r in self.strategy.records if r.kind == "summary"),
            "summary_calls_basis": self.summary_calls_basis,
            "cache_read_tokens": sum(r.cache_read_tokens for r in self.strategy.records if r.kind == "agent"),
            "cache_write_tokens": sum(r.cache_write_tokens for r in self.strategy.records if r.kind == "agent"),
            "price_source": s["price_source"],
            "cache_assumption": s["cache_assumption"],
        }


def _basis(calls: int, measured: int) -> str:
    """What ``summary_calls_basis`` says: the summariser's calls measured, modelled, or both."""
    if not calls:
        return "no summary calls"
    if measured == calls:
        return SUMMARY_CALLS_MEASURED
    if not measured:
        return SUMMARY_CALLS_MODELLED
    return f"{measured} of {calls} measured (the summariser's reported usage), the rest {SUMMARY_CALLS_MODELLED}"


def default_cache_policy(times: Any) -> CachePolicy:
    """Expiry from the recorded times when there are any, else the always-warm assumption."""
    return CachePolicy("recorded" if has_request_times(times) else "always_warm")


def summarised(result: Any) -> list[Any]:
    """The compactions that wrote a summary: one summariser call each."""
    return [c for c in result.compactions if getattr(c, "ok", True) and c.summary_text]


def _summary_requests(result: Any, steps_time: list[float], model: str | None, session: str | None,
                      estimate: Any) -> tuple[list[RequestTokens], int]:
    """One summariser call per compaction that wrote a summary, and how many were measured.

    A compaction whose summariser reported its usage (an LLM summary: ``summary_calls`` and
    ``summary_input_tokens`` on the record) is priced at those counts and that model; the
    others are modelled (module docstring)."""
    out, measured = [], 0
    for c in summarised(result):
        when = steps_time[c.step] if 0 <= c.step < len(steps_time) else None
        if getattr(c, "summary_calls", 0) and getattr(c, "summary_input_tokens", 0):
            measured += 1
            out.append(RequestTokens(int(c.summary_input_tokens), int(c.summary_output_tokens or 0), time=when,
                                     cached_prefix_tokens=0, kind="summary",
                                     model=getattr(c, "summary_model", None) or model, session=session))
            continue
        written = int(estimate(c.summary_text))
        folded = max(0, int(c.tokens_before) - int(c.tokens_after)) + written
        out.append(RequestTokens(folded, written, time=when, cached_prefix_tokens=0, kind="summary",
                                 model=model, session=session))
    return out, measured


def replay_costs(result: Any, prices: Any = None, cache: CachePolicy | None = None, *,
                 warn: bool = True) -> ReplayCosts:
    """Price a replay's requests, its summariser's calls and its ``none`` baseline."""
    from opctx.context.tokens import estimate_text_tokens

    df = result.steps_df
    times = df["timestamp"].tolist()
    policy = cache or default_cache_policy(times)
    model = result.model or None
    session = result.history.session_id or result.history.title or None
    outputs = df["output_tokens"].tolist()
    agent = requests_from_steps(times, df["tokens"].tolist(), df["prefix_kept_tokens"].tolist(), outputs,
                                model=model, session=session)
    none_tokens = df["tokens_none"].tolist()
    none = requests_from_steps(times, none_tokens, [0] + none_tokens[:-1], outputs, model=model, session=session)
    summaries, measured = _summary_requests(result, times, model, session, lambda t: estimate_text_tokens(t, model))
    # each kind is its own cache chain: the summariser's calls need not interleave with the agent's
    strategy = price_requests(agent + summaries, prices, policy, warn=warn)
    baseline = price_requests(none, prices, policy, warn=False)
    return ReplayCosts(strategy, baseline, _basis(len(summaries), measured),
                       [c.step for c in summarised(result)])
