"""Price tables for cache-aware cost estimates of replays.

Every figure here is an **assumed list price** in US dollars per million tokens,
copied from the providers' public price pages as remembered in late 2025; they
are not fetched (no network at run time) and may be out of date. They exist so
that strategies can be *compared* (a compaction that invalidates a cached prefix
costs more than its token count suggests), not to produce invoices. Pass your
own ``PriceTable`` (or ``register_price``) for real accounting.

Model of a request's cost
-------------------------
A request of ``input`` prompt tokens, of which ``cache_read`` were served from
the provider's prefix cache and ``cache_write`` were written to it, producing
``output`` tokens, costs::

    (input - cache_read - cache_write) * input_price
    + cache_read  * input_price * cache_read_multiplier
    + cache_write * input_price * cache_write_multiplier
    + output      * output_price

Families differ in how caching works, recorded per entry:

* Anthropic: explicit ``cache_control`` breakpoints; writing the 5-minute cache
  costs 1.25x input, reading it 0.1x; entries expire 5 minutes after last use.
  ``cache_write_multiplier=1.25``, ``cache_read_multiplier=0.1``, ``cache_ttl_seconds=300``.
* OpenAI: automatic prefix caching, no write surcharge (1.0x), cached input at
  0.1x (GPT-5 family) to 0.5x (GPT-4o/4.1 family); "in-memory" retention of
  5-10 minutes of inactivity: ``cache_ttl_seconds=300`` (assumed, the low end).
* Google Gemini 2.5: implicit caching, cached input at 0.25x; TTL assumed 300 s.
* DeepSeek: automatic disk cache, hits at about 0.1x input (assumed).
* Unknown models: Sonnet-class prices (3 / 15) with Anthropic-style caching,
  flagged ``assumed_default=True``.

``ModelPrice.source`` says where each row comes from.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

__all__ = [
    "ModelPrice",
    "PriceTable",
    "DEFAULT_PRICES",
    "price_for",
    "register_price",
    "request_cost",
]


@dataclass(frozen=True)
class ModelPrice:
    """List prices of one model family, USD per million tokens, plus caching behaviour."""

    input_per_mtok: float
    output_per_mtok: float
    cache_write_multiplier: float = 1.0
    cache_read_multiplier: float = 1.0
    cache_ttl_seconds: float = 300.0
    source: str = "assumed list price"
    assumed_default: bool = False

    def __post_init__(self) -> None:
        for name in ("input_per_mtok", "output_per_mtok", "cache_write_multiplier", "cache_read_multiplier"):
            if getattr(self, name) < 0:
                raise ValueError(f"ModelPrice.{name} must be >= 0, got {getattr(self, name)}")

    def cost(
        self,
        input_tokens: float,
        output_tokens: float = 0,
        cache_read_tokens: float = 0,
        cache_write_tokens: float = 0,
    ) -> float:
        """Dollars for one request (see the module docstring for the formula)."""
        if cache_read_tokens + cache_write_tokens > input_tokens + 1e-9:
            raise ValueError(
                f"cache_read ({cache_read_tokens}) + cache_write ({cache_write_tokens}) "
                f"exceed the request's input tokens ({input_tokens})"
            )
        plain = input_tokens - cache_read_tokens - cache_write_tokens
        per_in = self.input_per_mtok / 1e6
        return (
            plain * per_in
            + cache_read_tokens * per_in * self.cache_read_multiplier
            + cache_write_tokens * per_in * self.cache_write_multiplier
            + output_tokens * self.output_per_mtok / 1e6
        )


_ANTHROPIC = {"cache_write_multiplier": 1.25, "cache_read_multiplier": 0.1, "cache_ttl_seconds": 300.0}
_SRC_ANTHROPIC = "assumed: anthropic.com/pricing list price (late 2025); 5-min cache write 1.25x, read 0.1x"
_SRC_OPENAI = "assumed: openai.com/api/pricing list price (late 2025); cached input, no write surcharge"


@dataclass
class PriceTable:
    """Prices by model-name prefix; the longest matching prefix wins."""

    entries: dict[str, ModelPrice] = field(default_factory=dict)
    default: ModelPrice = field(
        default_factory=lambda: ModelPrice(
            3.0, 15.0, **_ANTHROPIC, source="assumed default (Sonnet-class)", assumed_default=True
        )
    )

    def lookup(self, model: str | None) -> ModelPrice:
        """The price of ``model`` (normalised like ``opctx.context.tokens`` does)."""
        name = _normalise(model)
        best = None
        for prefix in self.entries:
            if name.startswith(prefix) and (best is None or len(prefix) > len(best)):
                best = prefix
        return self.entries[best] if best is not None else self.default

    def with_entry(self, prefix: str, price: ModelPrice) -> PriceTable:
        """A copy of this table with one more (or a replaced) entry."""
        entries = dict(self.entries)
        entries[prefix.lower()] = price
        return replace(self, entries=entries)


def _normalise(model: str | None) -> str:
    if not model:
        return ""
    try:
        from opctx.context.tokens import normalise_model_name

        return normalise_model_name(model)
    except ImportError:  # tokens not importable: a plain lower-case match still works
        return model.lower().rsplit("/", 1)[-1]


def _anthropic(inp: float, out: float) -> ModelPrice:
    return ModelPrice(inp, out, **_ANTHROPIC, source=_SRC_ANTHROPIC)


def _openai(inp: float, out: float, cached: float) -> ModelPrice:
    return ModelPrice(
        inp, out, cache_write_multiplier=1.0, cache_read_multiplier=cached / inp,
        cache_ttl_seconds=300.0, source=_SRC_OPENAI,
    )


DEFAULT_PRICES = PriceTable(
    entries={
        # Anthropic
        "claude-opus-4-5": _anthropic(5.0, 25.0),
        "claude-opus-4-1": _anthropic(15.0, 75.0),
        "claude-opus-4": _anthropic(15.0, 75.0),
        "claude-3-opus": _anthropic(15.0, 75.0),
        "claude-sonnet-4-5": _anthropic(3.0, 15.0),
        "claude-sonnet-4": _anthropic(3.0, 15.0),
        "claude-3-7-sonnet": _anthropic(3.0, 15.0),
        "claude-3-5-sonnet": _anthropic(3.0, 15.0),
        "claude-haiku-4-5": _anthropic(1.0, 5.0),
        "claude-3-5-haiku": _anthropic(0.8, 4.0),
        "claude-3-haiku": _anthropic(0.25, 1.25),
        "claude": _anthropic(3.0, 15.0),
        # OpenAI
        "gpt-5": _openai(1.25, 10.0, 0.125),
        "gpt-5-mini": _openai(0.25, 2.0, 0.025),
        "gpt-5-nano": _openai(0.05, 0.40, 0.005),
        "gpt-5-codex": _openai(1.25, 10.0, 0.125),
        "gpt-5.1": _openai(1.25, 10.0, 0.125),
        "gpt-4.1": _openai(2.0, 8.0, 0.5),
        "gpt-4.1-mini": _openai(0.4, 1.6, 0.1),
        "gpt-4o": _openai(2.5, 10.0, 1.25),
        "gpt-4o-mini": _openai(0.15, 0.6, 0.075),
        "o3": _openai(2.0, 8.0, 0.5),
        "o4-mini": _openai(1.1, 4.4, 0.275),
        "codex-mini": _openai(1.5, 6.0, 0.375),
        # Google (prompts up to 200K tokens)
        "gemini-2.5-pro": ModelPrice(
            1.25, 10.0, cache_read_multiplier=0.25,
            source="assumed: ai.google.dev pricing (late 2025), <=200K prompts, implicit cache 0.25x",
        ),
        "gemini-2.5-flash": ModelPrice(
            0.30, 2.5, cache_read_multiplier=0.25,
            source="assumed: ai.google.dev pricing (late 2025), implicit cache 0.25x",
        ),
        # DeepSeek
        "deepseek": ModelPrice(
            0.28, 0.42, cache_read_multiplier=0.1,
            source="assumed: api-docs.deepseek.com pricing (late 2025), cache hit ~0.1x",
        ),
    }
)

_REGISTRY_LOCK = threading.Lock()
_registered = DEFAULT_PRICES


def register_price(prefix: str, price: ModelPrice) -> None:
    """Add or replace a row of the process-wide default table (used when ``prices=None``)."""
    global _registered
    with _REGISTRY_LOCK:
        _registered = _registered.with_entry(prefix, price)


def price_for(model: str | None, prices: PriceTable | None = None) -> ModelPrice:
    """The price row of ``model`` in ``prices`` (default: the process-wide table)."""
    return (prices or _registered).lookup(model)


def request_cost(
    model: str | None,
    input_tokens: float,
    output_tokens: float = 0,
    cache_read_tokens: float = 0,
    cache_write_tokens: float = 0,
    prices: PriceTable | None = None,
) -> float:
    """Dollars for one request of ``model``; see ``ModelPrice.cost``."""
    return price_for(model, prices).cost(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
