"""Price table: lookup by longest prefix, cache-aware cost formula, clear errors."""

from __future__ import annotations

import pytest

from opctx.lab.prices import DEFAULT_PRICES, ModelPrice, PriceTable, price_for, request_cost


def test_longest_prefix_wins_and_dated_ids_match():
    assert price_for("claude-opus-4-5-20251101").input_per_mtok == 5.0
    assert price_for("claude-opus-4-1-20250805").input_per_mtok == 15.0
    assert price_for("gpt-4o-mini-2024-07-18").input_per_mtok == 0.15
    assert price_for("gpt-4o-2024-08-06").input_per_mtok == 2.5
    assert price_for("openrouter/anthropic/claude-sonnet-4-5").output_per_mtok == 15.0


def test_unknown_model_gets_flagged_default():
    p = price_for("some-local-model")
    assert p.assumed_default and p.input_per_mtok > 0
    assert price_for(None).assumed_default


def test_cost_formula_anthropic_cache():
    p = DEFAULT_PRICES.lookup("claude-sonnet-4-5")
    # 100K prompt: 80K read from cache, 20K written; 1K output
    expected = 80_000 * 3e-6 * 0.1 + 20_000 * 3e-6 * 1.25 + 1_000 * 15e-6
    assert p.cost(100_000, 1_000, cache_read_tokens=80_000, cache_write_tokens=20_000) == pytest.approx(expected)
    # no caching at all is plain input price
    assert p.cost(100_000) == pytest.approx(0.3)


def test_openai_cached_input_has_no_write_surcharge():
    p = price_for("gpt-5")
    assert p.cache_write_multiplier == 1.0
    assert p.cost(1_000_000, 0, cache_read_tokens=1_000_000) == pytest.approx(0.125)
    assert request_cost("gpt-5", 1_000_000, 0, 0, 1_000_000) == pytest.approx(1.25)


def test_every_row_says_where_it_comes_from():
    for prefix, row in DEFAULT_PRICES.entries.items():
        assert "assumed" in row.source, prefix


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="exceed"):
        price_for("gpt-5").cost(100, 0, cache_read_tokens=80, cache_write_tokens=40)
    with pytest.raises(ValueError, match="input_per_mtok"):
        ModelPrice(-1.0, 1.0)


def test_custom_table():
    table = PriceTable().with_entry("my-model", ModelPrice(1.0, 2.0))
    assert table.lookup("my-model-v2").output_per_mtok == 2.0
    assert table.lookup("other").assumed_default
