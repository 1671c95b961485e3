"""What a run costs, request by request: tiers, cache writes and reads, expiry, summaries.

``price_requests(requests, prices, policy) -> CostResult`` is a pure function of

* the requests, each a ``RequestTokens``: its whole prompt (``input_tokens``, cached part
  included), its output, when it was sent (``time``), and either how many of its prompt
  tokens repeat the previous prompt of its chain (``cached_prefix_tokens``: what a prefix
  cache could serve, a replay's ``prefix_kept_tokens``) or the cache figures the provider
  reported (``cache_read_tokens`` / ``cache_write_tokens``, used as they are). ``kind`` is
  ``"agent"`` or ``"summary"`` (the summariser's own calls, priced and totalled apart);
  each (kind, model) is its own cache chain;
* the prices: a ``PriceTable`` (by each request's model), a ``ModelPrice`` or the name of
  a price model in ``PRICE_MODELS`` (every request priced with it: "this run at
  Qwen3-Coder's prices");
* the ``CachePolicy``: how long the cache lives (``ttl="5m"``: the price row's
  ``cache_ttl_seconds``, 300 s; ``"1h"``: 3,600 s, written at the 1-hour price) and how the
  time between requests is known: ``"recorded"`` (each request's ``time``: a gap longer
  than the TTL is a miss, its prompt written again, not read), ``"always_warm"`` (every
  repeated prefix is a read: the assumption for a recording without per-request times),
  ``"interval"`` (every gap is ``interval_seconds``) or ``"never"`` (no cache at all);
  ``keep_warm=True`` pays for pings that keep a cache alive through long gaps (a ping
  every TTL re-reads the previous prompt and produces ``keep_warm_output_tokens``).

Each ``CostRecord`` is priced at the rates of its tier (``ModelPrice.for_prompt``), says
where its price came from (``price_source``) and which cache assumption it was priced
under (``cache_assumption``). A request whose model has no price costs NaN; one warning
names the sessions and models (``warn_unpriced``; ``price_requests(..., warn=False)`` lets
a caller pricing many sessions warn once for all). Never a silent default.

Worked example (Anthropic-style caching, 3 / 15 USD per million, reads 0.1x, writes
1.25x, 5-minute TTL): a 10,000-token request, then at +100 s a 12,000-token one that
repeats the first 10,000 (read 10,000, write 2,000), then at +500 s a 14,000-token one
(the 400 s gap outlived the cache: all 14,000 written):

>>> from opctx.lab.prices import ModelPrice
>>> p = ModelPrice(3.0, 15.0, cache_write_multiplier=1.25, cache_read_multiplier=0.1)
>>> r = price_requests([RequestTokens(10_000, time=0.0), RequestTokens(12_000, time=100.0, cached_prefix_tokens=10_000),
...                     RequestTokens(14_000, time=500.0, cached_prefix_tokens=12_000)], p)
>>> [(x.cache_read_tokens, x.cache_write_tokens) for x in r.records]
[(0, 10000), (10000, 2000), (0, 14000)]
>>> round(r.total(), 6)
0.1005
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .prices import PRICE_MODELS, ModelPrice, PriceTable, default_table

__all__ = [
    "RequestTokens",
    "CachePolicy",
    "CostRecord",
    "CostResult",
    "UnpricedModelWarning",
    "ONE_HOUR_TTL_SECONDS",
    "price_requests",
    "warn_unpriced",
    "requests_from_steps",
    "requests_from_summaries",
    "has_request_times",
]

ONE_HOUR_TTL_SECONDS = 3600.0
"""Anthropic's 1-hour cache lifetime (docs "Prompt caching", cache duration options)."""

Timing = Literal["recorded", "always_warm", "interval", "never"]


class UnpricedModelWarning(UserWarning):
    """Some requests have a model with no price: their cost is NaN."""


@dataclass(frozen=True)
class RequestTokens:
    """One request as a replay, an importer or a summariser knows it (see the module docstring)."""

    input_tokens: int
    output_tokens: int = 0
    time: float | None = None
    cached_prefix_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    kind: str = "agent"
    model: str | None = None
    session: str | None = None


@dataclass(frozen=True)
class CachePolicy:
    """How the prompt cache is assumed to behave (see the module docstring)."""

    timing: Timing = "recorded"
    interval_seconds: float = 0.0
    ttl: Literal["5m", "1h"] = "5m"
    keep_warm: bool = False
    keep_warm_output_tokens: int = 1

    def __post_init__(self) -> None:
        if self.timing not in ("recorded", "always_warm", "interval", "never"):
            raise ValueError(f"CachePolicy.timing must be recorded, always_warm, interval or never, got {self.timing!r}")
        if self.ttl not in ("5m", "1h"):
            raise ValueError(f"CachePolicy.ttl must be '5m' or '1h', got {self.ttl!r}")
        if self.interval_seconds < 0 or self.keep_warm_output_tokens < 0:
            raise ValueError("CachePolicy.interval_seconds and keep_warm_output_tokens must be >= 0")

    def describe(self) -> str:
        """The assumption in words, carried by every record priced under it."""
        timing = {
            "recorded": "cache expiry from the recorded request times",
            "always_warm": "cache assumed always warm (no request times)",
            "interval": f"cache expiry assuming {self.interval_seconds:g} s between requests",
            "never": "no prompt cache",
        }[self.timing]
        text = f"{timing}, {self.ttl} TTL"
        return text + (", kept warm by pings" if self.keep_warm else "")


@dataclass(frozen=True)
class CostRecord:
    """The priced request ``index`` (NaN costs when its model has no price).

    Every ``cost*`` field (``cost_input``, ``cost_cache_read``, ``cost_cache_write``,
    ``cost_output``, ``keep_warm_cost``, ``cost``) is in ``prices.COST_NOTE``: USD, at list
    prices in USD per million tokens of the stated map and date.
    """

    index: int
    kind: str
    model: str | None
    session: str | None
    time: float | None
    gap_seconds: float | None
    warm: bool
    tier: int
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    cost_input: float
    cost_cache_read: float
    cost_cache_write: float
    cost_output: float
    keep_warm_pings: int
    keep_warm_cost: float
    cost: float
    price_source: str
    cache_assumption: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CostResult:
    """The records of one pricing, with totals (``summary``)."""

    records: list[CostRecord]
    cache_assumption: str
    unpriced: dict[str, list[str]] = field(default_factory=dict)  # model -> sessions

    def total(self, kind: str | None = None) -> float:
        """Dollars of all requests (or of one ``kind``), keep-warm pings included."""
        return sum(r.cost + r.keep_warm_cost for r in self.records if kind is None or r.kind == kind)

    def summary(self) -> dict[str, Any]:
        """Flat totals: the agent's cost and the summariser's apart, tokens, sources.

        The ``cost*`` and ``keep_warm_cost`` totals are in ``prices.COST_NOTE`` (USD, at list
        prices in USD per million tokens of the stated map and date).
        """
        total = self.total()
        summary_cost = self.total("summary")
        recs = self.records
        return {
            "cost": total,
            "cost_agent": self.total("agent"),
            "cost_summary": summary_cost,
            "summary_cost_share": summary_cost / total if total and not math.isnan(total) else math.nan,
            "keep_warm_cost": sum(r.keep_warm_cost for r in recs),
            "requests": len(recs),
            "summary_requests": sum(1 for r in recs if r.kind == "summary"),
            "unpriced_requests": sum(1 for r in recs if math.isnan(r.cost)),
            "input_tokens": sum(r.input_tokens for r in recs),
            "cache_read_tokens": sum(r.cache_read_tokens for r in recs),
            "cache_write_tokens": sum(r.cache_write_tokens for r in recs),
            "output_tokens": sum(r.output_tokens for r in recs),
            "price_source": "; ".join(sorted({r.price_source for r in recs})),
            "cache_assumption": self.cache_assumption,
        }

    def to_dicts(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.records]


def _resolve(prices: PriceTable | ModelPrice | str | None, model: str | None) -> ModelPrice | None:
    if isinstance(prices, ModelPrice):
        return prices
    if isinstance(prices, str):
        if prices not in PRICE_MODELS:
            raise ValueError(f"unknown price model {prices!r}; known: {', '.join(sorted(PRICE_MODELS))}")
        return PRICE_MODELS[prices]
    return (prices if prices is not None else default_table()).find(model)


@dataclass
class _Chain:
    """The cache state of one (kind, model) chain: the previous request of it."""

    time: float | None = None
    prompt: int = 0
    seen: bool = False


def _warmth(r: RequestTokens, chain: _Chain, policy: CachePolicy, ttl: float) -> tuple[bool, float | None, int]:
    """(is the cache warm, the gap in seconds, keep-warm pings) for a computed request."""
    if not chain.seen or policy.timing == "never":
        return False, None, 0
    if policy.timing == "always_warm":
        return True, None, 0
    if policy.timing == "interval":
        gap = policy.interval_seconds
    else:
        if r.time is None or chain.time is None:
            raise ValueError(
                f"request of session {r.session!r} has no time: the 'recorded' cache timing needs one per "
                "request; price it with CachePolicy(timing='always_warm') or 'interval' and say so")
        gap = r.time - chain.time
    if gap <= ttl:
        return True, gap, 0
    if policy.keep_warm:
        return True, gap, max(math.ceil(gap / ttl) - 1, 1)
    return False, gap, 0


def _price_one(i: int, r: RequestTokens, row: ModelPrice | None, chain: _Chain, policy: CachePolicy,
               assumption: str) -> CostRecord:
    """One request: cache read / write split, tier, the four parts of its cost."""
    ttl = ONE_HOUR_TTL_SECONDS if policy.ttl == "1h" else (row.cache_ttl_seconds if row else 300.0)
    pings, ping_cost, gap = 0, 0.0, None
    if r.cache_read_tokens is not None:  # the provider's own figures
        read, write = int(r.cache_read_tokens), int(r.cache_write_tokens or 0)
        warm = read > 0
        if r.time is not None and chain.time is not None:
            gap = r.time - chain.time
    elif not r.cached_prefix_tokens:  # nothing this prompt repeats: nothing to read, whatever the time
        read, write, warm = 0, r.input_tokens, False
    else:
        warm, gap, pings = _warmth(r, chain, policy, ttl)
        read = min(int(r.cached_prefix_tokens or 0), r.input_tokens) if warm else 0
        write = r.input_tokens - read
    if row is None:
        nan = math.nan
        return CostRecord(i, r.kind, r.model, r.session, r.time, gap, warm, 0, r.input_tokens, read, write,
                          r.output_tokens, nan, nan, nan, nan, pings, nan if pings else 0.0, nan,
                          f"no price for model {r.model!r}", assumption)
    if pings:
        ping = row.cost(chain.prompt, policy.keep_warm_output_tokens, cache_read_tokens=chain.prompt)
        ping_cost = pings * ping
    rate = row.for_prompt(r.input_tokens)
    per_in = rate.input_per_mtok / 1e6
    parts = (
        (r.input_tokens - read - write) * per_in,
        read * per_in * rate.cache_read_multiplier,
        write * per_in * rate.write_multiplier(one_hour=policy.ttl == "1h"),
        r.output_tokens * rate.output_per_mtok / 1e6,
    )
    return CostRecord(i, r.kind, r.model, r.session, r.time, gap, warm, row.tier_of(r.input_tokens),
                      r.input_tokens, read, write, r.output_tokens, *parts, pings, ping_cost, sum(parts),
                      rate.source, assumption)


def price_requests(requests: Sequence[RequestTokens], prices: PriceTable | ModelPrice | str | None = None,
                   policy: CachePolicy | None = None, *, warn: bool = True) -> CostResult:
    """Price every request (see the module docstring); ``warn``: one warning for unpriced models."""
    policy = policy or CachePolicy()
    assumption = policy.describe()
    chains: dict[tuple[str, str | None], _Chain] = {}
    records = []
    unpriced: dict[str, list[str]] = {}
    for i, r in enumerate(requests):
        if r.input_tokens < 0 or r.output_tokens < 0:
            raise ValueError(f"request {i}: token counts must be >= 0")
        row = _resolve(prices, r.model)
        chain = chains.setdefault((r.kind, r.model), _Chain())
        records.append(_price_one(i, r, row, chain, policy, assumption))
        if row is None:
            sessions = unpriced.setdefault(str(r.model), [])
            if r.session is not None and r.session not in sessions:
                sessions.append(r.session)
        chain.time, chain.prompt, chain.seen = r.time, r.input_tokens, True
    result = CostResult(records, assumption, unpriced)
    if warn:
        warn_unpriced([result])
    return result


def warn_unpriced(results: Iterable[CostResult]) -> str | None:
    """One ``UnpricedModelWarning`` naming every model without a price and its sessions."""
    merged: dict[str, list[str]] = {}
    for res in results:
        for model, sessions in res.unpriced.items():
            seen = merged.setdefault(model, [])
            seen.extend(s for s in sessions if s not in seen)
    if not merged:
        return None
    parts = [f"{m!r} ({', '.join(s) if s else 'no session named'})" for m, s in sorted(merged.items())]
    text = ("no price for model " + "; ".join(parts) + ": their cost is NaN. Pass prices=... "
            "(a PriceTable, a ModelPrice or a PRICE_MODELS name) to price them.")
    warnings.warn(text, UnpricedModelWarning, stacklevel=3)
    return text


def requests_from_steps(times: Iterable[float | None], tokens: Iterable[int], prefix_kept: Iterable[int],
                        outputs: Iterable[int], *, model: str | None = None,
                        session: str | None = None) -> list[RequestTokens]:
    """The agent's requests of a replay, from its per-step columns (``timestamp``, ``tokens``,
    ``prefix_kept_tokens``, ``output_tokens``); the first request has nothing cached."""
    out = []
    for i, (t, n, kept, o) in enumerate(zip(times, tokens, prefix_kept, outputs, strict=True)):
        out.append(RequestTokens(int(n), int(o), None if t is None or t != t else float(t),
                                 cached_prefix_tokens=0 if i == 0 else int(kept), model=model, session=session))
    return out


def requests_from_summaries(records: Iterable[Any], *, session: str | None = None,
                            model: str | None = None) -> list[RequestTokens]:
    """The summariser's calls as requests, from records carrying ``model``, ``input_tokens``
    (whole prompt), ``output_tokens``, ``cache_read_tokens``, ``cache_write_tokens``
    (opctx.lab's summary records, or any object or mapping with those names)."""
    out = []
    for rec in records:
        get = rec.get if isinstance(rec, Mapping) else (lambda k, r=rec: getattr(r, k, None))
        out.append(RequestTokens(int(get("input_tokens") or 0), int(get("output_tokens") or 0),
                                 cache_read_tokens=int(get("cache_read_tokens") or 0),
                                 cache_write_tokens=int(get("cache_write_tokens") or 0),
                                 kind="summary", model=get("model") or model, session=session))
    return out


def has_request_times(times: Iterable[float | None]) -> bool:
    """Whether a run's request times can date its cache: at least two distinct finite times.

    Formats that record no time per request (SWE-agent ``.traj``, a single completion log)
    give every node the same time; pricing them with ``timing="recorded"`` would read
    "no gap" as "always warm" without saying so. Choose the timing with this.

    >>> has_request_times([0.0, 0.0, 0.0]), has_request_times([0.0, 12.5, None])
    (False, True)
    """
    seen = {t for t in times if t is not None and math.isfinite(t)}
    return len(seen) >= 2
