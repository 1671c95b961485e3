"""A replay's costs: tiers, cache expiry from recorded times, the summariser's calls (hand-computed)."""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import pandas as pd
import pytest

from opctx.context.tokens import estimate_text_tokens
from opctx.lab._replay_costs import replay_costs
from opctx.lab.costs import CachePolicy, UnpricedModelWarning
from opctx.lab.prices import ModelPrice
from opctx.lab.replay import replay
from opctx.lab.scenarios import generate_session


def _result(tokens, kept, times, outputs, *, model="m", compactions=(), none=None):
    df = pd.DataFrame({"timestamp": times, "tokens": tokens, "prefix_kept_tokens": kept,
                       "output_tokens": outputs, "tokens_none": none or tokens})
    return SimpleNamespace(steps_df=df, model=model, compactions=list(compactions),
                           history=SimpleNamespace(session_id="s1", title=""))


def test_tier_boundary_prices_the_whole_request_at_its_tier():
    # Qwen3-Coder 480B (The Complexity Trap's notebook): < 32,000 tokens 1 / 5 / cached 0.4;
    # from 32,000: 1.8 / 9 / cached 0.72 USD per million, cached part and output included
    r = _result([31_999, 32_000], [0, 31_999], [0.0, 0.0], [100, 100])
    costs = replay_costs(r, "complexity-trap-qwen3-coder-480b")
    first, second = costs.strategy.records
    assert first.tier == 0 and second.tier == 32_000
    assert first.cost == pytest.approx(31_999 * 1e-6 + 100 * 5e-6)
    assert second.cost == pytest.approx(1 * 1.8e-6 + 31_999 * 0.72e-6 + 100 * 9e-6)
    assert "always warm" in costs.figures()["cache_assumption"]


def test_cache_expiry_from_recorded_times():
    # 3 / 15 USD per million, write 1.25x, read 0.1x, 5-minute TTL; the third request comes
    # 400 s after the second: the cache expired, its whole prompt is written again
    price = ModelPrice(3.0, 15.0, cache_write_multiplier=1.25, cache_read_multiplier=0.1, source="test")
    r = _result([10_000, 12_000, 14_000], [0, 10_000, 12_000], [0.0, 100.0, 500.0], [0, 0, 0])
    figures = replay_costs(r, price).figures()
    expected = (10_000 * 3.75e-6) + (10_000 * 0.3e-6 + 2_000 * 3.75e-6) + 14_000 * 3.75e-6
    assert figures["cost"] == pytest.approx(expected)
    assert figures["cache_read_tokens"] == 10_000 and figures["cache_write_tokens"] == 26_000
    assert "recorded request times" in figures["cache_assumption"] and figures["price_source"] == "test"


def test_summariser_call_counted_in_the_cost_and_shown_apart():
    text = "summary of the folded turns: fixed calc.py, tests pass " * 10
    written = estimate_text_tokens(text, "m")
    comp = SimpleNamespace(ok=True, summary_text=text, tokens_before=50_000, tokens_after=10_000, step=1)
    r = _result([50_000, 10_000], [0, 0], [0.0, 0.0], [0, 0], compactions=[comp])
    figures = replay_costs(r, ModelPrice(1.0, 2.0, source="test")).figures()
    summary = (40_000 + written) * 1e-6 + written * 2e-6
    assert figures["summary_calls_priced"] == 1
    assert figures["summary_calls_cost"] == pytest.approx(summary)
    assert figures["cost"] == pytest.approx(60_000 * 1e-6 + summary)
    assert figures["agent_calls_cost"] == pytest.approx(60_000 * 1e-6)
    assert figures["summary_calls_basis"].startswith("modelled")


def test_a_replay_that_compacts_counts_its_summary_calls():
    result = replay(generate_session(13, n_turns=30).messages, "default", context_window=30_000)
    m = result.metrics(reference_loss=False)
    # structural summaries: no summariser call was made (summary_calls 0), one is priced per compaction
    assert m["compactions"] > 0 and m["summary_calls_priced"] == m["compactions"] and m["summary_calls"] == 0
    assert m["cost"] == pytest.approx(m["agent_calls_cost"] + m["summary_calls_cost"])
    assert m["summary_calls_cost"] > 0


def test_unknown_model_costs_nan_with_one_warning_naming_the_session():
    msgs = generate_session(12, n_turns=4).messages
    result = replay(msgs, "none", model="no-such-model-x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = result.metrics(reference_loss=False)
    assert math.isnan(m["cost"]) and math.isnan(m["cost_none"])
    assert "no price for model" in m["price_source"]
    unpriced = [w for w in caught if issubclass(w.category, UnpricedModelWarning)]
    assert len(unpriced) == 1 and "no-such-model-x" in str(unpriced[0].message)


def test_metrics_without_contexts_need_no_contexts():
    msgs = generate_session(12, n_turns=6).messages
    result = replay(msgs, "observation-masking", keep_contexts=False)
    m = result.metrics(reference_loss=False)
    assert m["steps"] == len(result.steps_df) and math.isnan(m["broken_pairs"])
    assert "reference_losses" not in result.metrics()  # defaults to what the replay kept
    with pytest.raises(RuntimeError):
        result.metrics(reference_loss=True)


def test_redacted_total_counts_each_redacted_message_once():
    result = replay(generate_session(12, n_turns=30).messages, "observation-masking", keep_contexts=False)
    per_request = result.steps_df["redacted"]
    assert per_request.sum() > per_request.max() > 0
    assert result.metrics()["redacted_total"] == per_request.max()


def test_cache_policy_can_be_stated():
    r = _result([1_000, 2_000], [0, 1_000], [0.0, 1_000.0], [0, 0])
    warm = replay_costs(r, ModelPrice(1.0, 1.0, cache_read_multiplier=0.1), CachePolicy("always_warm"))
    cold = replay_costs(r, ModelPrice(1.0, 1.0, cache_read_multiplier=0.1))
    assert warm.figures()["cache_read_tokens"] == 1_000 and cold.figures()["cache_read_tokens"] == 0


def test_a_summariser_that_reported_its_usage_is_priced_at_it():
    text = "summary"
    measured = SimpleNamespace(ok=True, summary_text=text, tokens_before=50_000, tokens_after=10_000, step=1,
                               summary_calls=1, summary_input_tokens=30_000, summary_output_tokens=700,
                               summary_model="m")
    r = _result([50_000, 10_000], [0, 0], [0.0, 0.0], [0, 0], compactions=[measured])
    figures = replay_costs(r, ModelPrice(1.0, 2.0, source="test")).figures()
    assert figures["summary_calls_cost"] == pytest.approx(30_000 * 1e-6 + 700 * 2e-6)
    assert figures["summary_calls_basis"].startswith("measured")
