"""Price table (litellm's dated rows, the paper's price models, tiers) and the cost of a run
request by request (cache expiry from timestamps, keep-warm pings, the summariser's calls),
each against hand-computed figures."""

from __future__ import annotations

import math
import warnings

import pytest

from opctx.lab import _litellm_prices
from opctx.lab.costs import (
    CachePolicy,
    RequestTokens,
    UnpricedModelWarning,
    has_request_times,
    price_requests,
    requests_from_steps,
    requests_from_summaries,
    warn_unpriced,
)
from opctx.lab.prices import (
    DEFAULT_PRICES,
    PRICE_MODELS,
    ModelPrice,
    PriceTable,
    from_litellm,
    price_for,
    request_cost,
)

SONNET = ModelPrice(3.0, 15.0, cache_write_multiplier=1.25, cache_read_multiplier=0.1,
                    cache_write_1h_multiplier=2.0, source="test row")


# -- the table ----------------------------------------------------------------------------------


def test_longest_prefix_wins_and_dated_ids_match():
    assert price_for("claude-opus-4-5-20251101").input_per_mtok == 5.0
    assert price_for("claude-opus-4-1-20250805").input_per_mtok == 15.0
    assert price_for("gpt-4o-mini-2024-07-18").input_per_mtok == 0.15
    assert price_for("gpt-4o-2024-08-06").input_per_mtok == 2.5
    assert price_for("openrouter/anthropic/claude-sonnet-4-5").output_per_mtok == 15.0
    assert DEFAULT_PRICES.find("anthropic/claude-opus-4.6").input_per_mtok == 5.0  # OpenRouter's spelling


def test_unknown_model_has_no_row_and_lookup_keeps_the_flagged_default():
    assert DEFAULT_PRICES.find("lm_studio/some-local-model") is None
    assert DEFAULT_PRICES.find(None) is None
    p = price_for("some-local-model")
    assert p.assumed_default and p.input_per_mtok > 0


@pytest.mark.parametrize("model,inp,out,read,write5,write1h", [
    # litellm 1.110.2 model cost map (opctx/lab/_litellm_prices.py), USD per million
    ("claude-opus-4-5-20251101", 5.0, 25.0, 0.5, 6.25, 10.0),
    ("claude-opus-4-6", 5.0, 25.0, 0.5, 6.25, 10.0),
    ("claude-sonnet-4-5-20250929", 3.0, 15.0, 0.3, 3.75, 6.0),
    ("claude-haiku-4-5-20251001", 1.0, 5.0, 0.1, 1.25, 2.0),
    ("gpt-5.2-codex", 1.75, 14.0, 0.175, 1.75, None),
    ("gpt-5.5", 5.0, 30.0, 0.5, 5.0, None),
    ("gemini-2.5-flash", 0.30, 2.5, 0.03, 0.30, None),
    ("/mnt/shared/models/GLM-4.6-FP8", 0.6, 2.2, 0.11, 0.6, None),
])
def test_litellm_rows_pin_the_map(model, inp, out, read, write5, write1h):
    p = DEFAULT_PRICES.find(model)
    assert "litellm 1.110.2" in p.source and _litellm_prices.LITELLM_VERSION == "1.110.2"
    assert (p.input_per_mtok, p.output_per_mtok) == pytest.approx((inp, out))
    assert p.input_per_mtok * p.cache_read_multiplier == pytest.approx(read)
    assert p.input_per_mtok * p.write_multiplier() == pytest.approx(write5)
    if write1h is None:
        assert p.cache_write_1h_multiplier is None
    else:
        assert p.input_per_mtok * p.write_multiplier(one_hour=True) == pytest.approx(write1h)


def test_long_context_tiers_from_the_map():
    gpt55 = DEFAULT_PRICES.find("gpt-5.5")  # >272K: 1e-05 / 4.5e-05 per token
    assert gpt55.for_prompt(272_000).input_per_mtok == 5.0
    assert gpt55.for_prompt(272_001).input_per_mtok == pytest.approx(10.0)
    assert gpt55.for_prompt(272_001).output_per_mtok == pytest.approx(45.0)
    pro = DEFAULT_PRICES.find("gemini-2.5-pro")  # >200K: 2.5e-06 / 1.5e-05
    assert pro.tier_of(200_000) == 0 and pro.tier_of(200_001) == 200_001
    assert from_litellm({"input_cost_per_token": None}, "x") is None


def test_dashscope_tiered_pricing_becomes_tiers():
    qwen = DEFAULT_PRICES.find("qwen3-coder-plus")
    assert [b for b, _ in qwen.tiers] == [32_000, 128_000, 256_000]
    assert qwen.for_prompt(31_999).input_per_mtok == pytest.approx(1.0)
    assert qwen.for_prompt(128_000).output_per_mtok == pytest.approx(15.0)


def test_the_complexity_trap_price_models():
    """notebooks/posthoc_compute_qwen_costs.py at bf15b5fb7d279679035a007ac9a81084d6b9a89a (qwen_costs),
    and litellm 1.77.7's gemini-2.5-flash (the litellm the paper's SWE-agent pinned)."""
    coder = PRICE_MODELS["complexity-trap-qwen3-coder-480b"]
    rows = [x for n in (0, 32_000, 128_000, 256_000) for x in (
        coder.for_prompt(n).input_per_mtok, coder.for_prompt(n).output_per_mtok,
        coder.for_prompt(n).input_per_mtok * coder.for_prompt(n).cache_read_multiplier)]
    assert rows == pytest.approx([1, 5, 0.4, 1.8, 9, 0.72, 3, 15, 1.2, 6, 60, 2.4])
    q32 = PRICE_MODELS["complexity-trap-qwen3-32b"]
    assert (q32.input_per_mtok, q32.output_per_mtok, q32.cache_read_multiplier) == (0.7, 2.8, 1.0)
    assert PRICE_MODELS["complexity-trap-qwen3-32b-thinking"].output_per_mtok == 8.4
    flash = PRICE_MODELS["complexity-trap-gemini-2.5-flash"]
    assert (flash.input_per_mtok, flash.output_per_mtok, flash.input_per_mtok * flash.cache_read_multiplier) == \
        pytest.approx((0.30, 2.5, 0.075))
    assert all("arXiv 2508.21433" in p.source or "Complexity Trap" in p.source for p in PRICE_MODELS.values())


def test_every_row_says_where_it_comes_from():
    for prefix, row in DEFAULT_PRICES.entries.items():
        assert "litellm" in row.source or "assumed" in row.source, prefix


def test_cost_formula_and_bad_input():
    expected = 80_000 * 3e-6 * 0.1 + 20_000 * 3e-6 * 1.25 + 1_000 * 15e-6
    assert SONNET.cost(100_000, 1_000, cache_read_tokens=80_000, cache_write_tokens=20_000) == pytest.approx(expected)
    assert SONNET.cost(100_000, 0, cache_write_tokens=100_000, cache_write_1h=True) == pytest.approx(0.6)
    assert request_cost("gpt-5", 1_000_000, 0, 1_000_000) == pytest.approx(0.125)
    with pytest.raises(ValueError, match="exceed"):
        SONNET.cost(100, 0, cache_read_tokens=80, cache_write_tokens=40)
    with pytest.raises(ValueError, match="input_per_mtok"):
        ModelPrice(-1.0, 1.0)
    with pytest.raises(ValueError, match="tiers"):
        ModelPrice(1.0, 1.0, tiers=((10, SONNET), (5, SONNET)))


def test_custom_table():
    table = PriceTable().with_entry("my-model", ModelPrice(1.0, 2.0))
    assert table.lookup("my-model-v2").output_per_mtok == 2.0
    assert table.find("other") is None and table.lookup("other").assumed_default


# -- the cost of a run ------------------------------------------------------------------------


def test_a_tier_boundary_prices_the_whole_request_at_its_tier():
    coder = "complexity-trap-qwen3-coder-480b"
    below, at = price_requests([RequestTokens(31_999, 1_000)], coder).records[0], \
        price_requests([RequestTokens(32_000, 1_000)], coder).records[0]
    # no cache on a first request: every prompt token is written at the input price (no surcharge)
    assert below.cost == pytest.approx(31_999 * 1.0e-6 + 1_000 * 5e-6)   # 0.036999
    assert at.cost == pytest.approx(32_000 * 1.8e-6 + 1_000 * 9e-6)      # 0.0666
    assert (below.tier, at.tier) == (0, 32_000)


def _three_requests(**kw):
    return [RequestTokens(10_000, 100, time=0.0, **kw),
            RequestTokens(12_000, 100, time=100.0, cached_prefix_tokens=10_000, **kw),
            RequestTokens(14_000, 100, time=500.0, cached_prefix_tokens=12_000, **kw)]


def test_a_gap_longer_than_the_ttl_is_a_write_not_a_read():
    r = price_requests(_three_requests(), SONNET)
    assert [(x.warm, x.cache_read_tokens, x.cache_write_tokens) for x in r.records] == [
        (False, 0, 10_000), (True, 10_000, 2_000), (False, 0, 14_000)]
    assert r.records[2].gap_seconds == 400.0
    out = 100 * 15e-6
    costs = [10_000 * 3.75e-6 + out, 10_000 * 0.3e-6 + 2_000 * 3.75e-6 + out, 14_000 * 3.75e-6 + out]
    assert [x.cost for x in r.records] == pytest.approx(costs)  # 0.039, 0.012, 0.054
    assert r.total() == pytest.approx(0.105)
    assert r.records[0].cache_assumption == "cache expiry from the recorded request times, 5m TTL"


def test_the_one_hour_cache_survives_the_gap_and_costs_more_to_write():
    r = price_requests(_three_requests(), SONNET, CachePolicy(ttl="1h"))
    assert r.records[2].cache_read_tokens == 12_000
    out = 100 * 15e-6
    assert r.records[2].cost == pytest.approx(12_000 * 0.3e-6 + 2_000 * 6e-6 + out)  # 0.0177
    assert r.records[0].cost == pytest.approx(10_000 * 6e-6 + out)


def test_keeping_the_cache_warm_pays_for_pings():
    r = price_requests(_three_requests(), SONNET, CachePolicy(keep_warm=True))
    third = r.records[2]
    assert third.warm and third.keep_warm_pings == 1 and third.cache_read_tokens == 12_000
    # one ping at +300 s re-reads the previous 12,000-token prompt and writes 1 token
    assert third.keep_warm_cost == pytest.approx(12_000 * 0.3e-6 + 1 * 15e-6)  # 0.003615
    assert r.summary()["keep_warm_cost"] == pytest.approx(0.003615)
    assert r.total() == pytest.approx(0.039 + 0.012 + (12_000 * 0.3e-6 + 2_000 * 3.75e-6 + 100 * 15e-6) + 0.003615)


def test_without_times_the_assumption_is_stated():
    untimed = [RequestTokens(10_000, time=None), RequestTokens(12_000, cached_prefix_tokens=10_000)]
    with pytest.raises(ValueError, match="no time"):
        price_requests(untimed, SONNET)
    warm = price_requests(untimed, SONNET, CachePolicy(timing="always_warm"))
    assert warm.records[1].cache_read_tokens == 10_000
    assert warm.summary()["cache_assumption"] == "cache assumed always warm (no request times), 5m TTL"
    slow = price_requests(untimed, SONNET, CachePolicy(timing="interval", interval_seconds=600))
    assert slow.records[1].cache_read_tokens == 0
    none = price_requests(untimed, SONNET, CachePolicy(timing="never"))
    assert none.records[1].cache_write_tokens == 12_000


def test_the_summarisers_calls_are_counted_and_shown_apart():
    agent = _three_requests(model="claude-sonnet-4-5")
    summary = requests_from_summaries([{"model": "claude-haiku-4-5", "input_tokens": 8_000, "output_tokens": 500,
                                        "cache_read_tokens": 2_000, "cache_write_tokens": 6_000}])
    r = price_requests([*agent[:2], *summary, agent[2]])
    s = r.summary()
    # the provider's own cache figures are used as they are (haiku: 1 / 5, read 0.1x, write 1.25x)
    expected_summary = 2_000 * 0.1e-6 + 6_000 * 1.25e-6 + 500 * 5e-6  # 0.0102
    assert s["cost_summary"] == pytest.approx(expected_summary) and s["summary_requests"] == 1
    assert s["cost_agent"] == pytest.approx(0.105)  # the agent's chain is not broken by the summary call
    assert s["cost"] == pytest.approx(0.105 + expected_summary)
    assert s["summary_cost_share"] == pytest.approx(expected_summary / (0.105 + expected_summary))
    assert "litellm" in s["price_source"]


def test_a_model_without_a_price_is_nan_with_one_warning_naming_the_sessions():
    reqs = [RequestTokens(1_000, model="local-model-x", session="s1"),
            RequestTokens(1_000, model="local-model-x", session="s2"),
            RequestTokens(1_000, model="gpt-5", session="s3")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = price_requests(reqs)
    assert len(caught) == 1 and issubclass(caught[0].category, UnpricedModelWarning)
    assert "local-model-x" in str(caught[0].message) and "s1, s2" in str(caught[0].message)
    assert math.isnan(r.records[0].cost) and not math.isnan(r.records[2].cost)
    assert r.records[0].price_source == "no price for model 'local-model-x'"
    assert math.isnan(r.total()) and r.summary()["unpriced_requests"] == 2
    # many sessions priced quietly, then one warning for all of them
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parts = [price_requests([q], warn=False) for q in reqs]
        text = warn_unpriced(parts)
    assert len(caught) == 1 and "s1, s2" in text


def test_replay_columns_become_requests():
    reqs = requests_from_steps([0.0, 10.0, float("nan")], [100, 150, 180], [999, 100, 150], [5, 6, 7],
                               model="gpt-5", session="x")
    assert [(q.cached_prefix_tokens, q.time) for q in reqs] == [(0, 0.0), (100, 10.0), (150, None)]
    assert has_request_times(q.time for q in reqs) and not has_request_times([5.0, 5.0])
    with pytest.raises(ValueError, match="token counts"):
        price_requests([RequestTokens(-1)], SONNET)
    with pytest.raises(ValueError, match="unknown price model"):
        price_requests([RequestTokens(1)], "no-such-model")
