"""opctx.lab.literature and benchmarks/literature.py: the paper's figures, the JSON shape, the corpus."""

from __future__ import annotations

import json

import pytest
from _benchmarks import load_benchmark

from opctx.lab.literature import PAPER_TABLE1, STRATEGIES, breakeven_turn, compare_costs
from opctx.lab.scenarios import generate_session

KEYS = {"strategy", "prices", "sessions", "input_tokens_change_pct", "cost_change_pct",
        "summary_calls_cost_share_pct", "breakeven_turn_median"}


def test_paper_table1_figures():
    # The Complexity Trap (arXiv 2508.21433) §4 Table 1: raw USD per instance, change vs raw in %
    assert PAPER_TABLE1["complexity-trap-qwen3-coder-480b"] == {"raw_usd": 1.29, "masking": -52.7, "summary": -50.4}
    assert PAPER_TABLE1["complexity-trap-gemini-2.5-flash"] == {"raw_usd": 0.41, "masking": -56.1, "summary": -41.5}
    assert PAPER_TABLE1["complexity-trap-qwen3-32b"] == {"raw_usd": 1.12, "masking": -50.9, "summary": -55.4}
    assert STRATEGIES == {"raw": "none", "masking": "complexity-trap-masking", "summary": "complexity-trap-summary"}


def test_breakeven_is_the_turn_from_which_it_stays_below():
    assert breakeven_turn([1, 1, 3, 3.5], [2, 2, 2.5, 4]) == 4
    assert breakeven_turn([1, 2, 3], [2, 3, 4]) == 1
    assert breakeven_turn([3], [2]) is None


def test_compare_costs_on_a_long_session():
    per, totals = compare_costs([generate_session(31, n_turns=45).messages], prices=["complexity-trap-qwen3-32b"])
    assert len(totals) == 3 and all(KEYS <= set(t) for t in totals)
    by = {t["strategy"]: t for t in totals}
    assert by["raw"]["cost_change_pct"] == 0 and by["raw"]["breakeven_turn_median"] is None
    assert by["masking"]["input_tokens_change_pct"] < 0 and by["masking"]["cost_change_pct"] < 0
    # Qwen3-32B has no cache discount: cost follows input tokens closely
    assert by["masking"]["cost_change_pct"] == pytest.approx(by["masking"]["input_tokens_change_pct"], abs=5)
    assert set(per["strategy"]) == {"raw", "masking", "summary"}


def test_benchmark_json_on_the_corpus(corpus_dir, capsys):
    bench = load_benchmark("literature")
    assert bench.main(["--corpus", str(corpus_dir), "--json"]) == 0
    totals = json.loads(capsys.readouterr().out)
    assert len(totals) == 9 and all(KEYS <= set(t) for t in totals)
    masking = [t for t in totals if t["strategy"] == "masking"]
    assert all(t["input_tokens_change_pct"] < -20 for t in masking)
