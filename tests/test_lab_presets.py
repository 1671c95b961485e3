"""Presets: documented sources, registry entries, thresholds per window, observation masking."""

from __future__ import annotations

import pytest

from opctx.context.engine import CONTEXT_ENGINE_REGISTRY, DefaultContextEngine, get_engine
from opctx.lab.presets import (
    ENGINE_SOURCES,
    MASK_PLACEHOLDER,
    PRESETS,
    ObservationMasker,
    build_engine,
    preset_names,
    thresholds_for,
)
from opctx.lab.replay import replay
from opctx.lab.scenarios import generate_session


def test_every_preset_says_where_its_numbers_come_from():
    assert preset_names() == ["default", "claude-code", "hermes", "codex", "observation-masking", "none"]
    for spec in PRESETS.values():
        assert spec.description and spec.sources, spec.name
        assert all(isinstance(v, str) and v for v in spec.sources.values())
        # every number the preset sets is named in one of its sources
        described = " ".join(spec.sources)
        for param in spec.params:
            assert param in described or param == "aging" and "aging" in described, (spec.name, param)
    assert all(v for v in ENGINE_SOURCES.values())


def test_presets_are_registered_engines():
    for name in preset_names():
        engine = get_engine(name)
        assert isinstance(engine, DefaultContextEngine) and engine.name == name
    assert "claude-code" in CONTEXT_ENGINE_REGISTRY


def test_claude_code_thresholds_are_tokens_before_the_effective_window():
    engine = build_engine("claude-code", context_window=200_000, model="claude-sonnet-4-5")
    input_budget = 200_000 - 20_000  # reserve min(max output, 20K)
    assert engine.auto_compact_pct == pytest.approx(1 - 13_000 / input_budget)
    assert 0.92 < engine.auto_compact_pct < 0.93  # SPEC-NOTES: ~92-93% of a 200K window
    assert engine.recommend_pct < engine.auto_compact_pct < engine.emergency_pct
    assert engine.config.keep_max_tokens == 0 and engine.config.protect_first_n == 0


def test_codex_compacts_at_ninety_percent_of_the_window():
    engine = build_engine("codex", context_window=272_000, model="gpt-5")
    input_budget = 272_000 - 1_024
    assert engine.auto_compact_pct * input_budget == pytest.approx(0.9 * 272_000)
    assert engine.config.keep_min_tokens == engine.config.keep_max_tokens == 20_000
    assert engine.ager is None


def test_hermes_and_default_numbers():
    hermes = build_engine("hermes", context_window=100_000)
    assert hermes.auto_compact_pct == 0.5 and hermes.config.protect_first_n == 3
    assert hermes.config.keep_ratio == 0.10 and hermes.ager is None
    # spec §4 comparison table: Hermes' tail is proportional, without Claude Code's 8K/40K clamps
    assert (hermes.config.keep_min_tokens, hermes.config.keep_min_messages) == (0, 0)
    assert hermes.config.keep_max_tokens >= 100_000 and hermes.config.protect_last_n == 20
    default = build_engine("default", context_window=100_000)
    assert (default.recommend_pct, default.auto_compact_pct, default.emergency_pct) == (0.70, 0.80, 0.95)


def test_overrides_and_unknown_parameters():
    engine = build_engine("default", context_window=100_000, trigger_pct=0.6, keep_ratio=0.2)
    assert engine.auto_compact_pct == 0.6 and engine.config.keep_ratio == 0.2
    with pytest.raises(ValueError, match="unknown preset parameter"):
        build_engine("default", wibble=3)
    with pytest.raises(ValueError, match="unknown preset"):
        build_engine("gpt-magic")
    assert thresholds_for(PRESETS["none"], 1000, 800)["auto_compact_pct"] == float("inf")


def _tool(i):
    return {"id": f"t{i}", "role": "tool", "content": f"output number {i} " * 50, "tool_call_id": f"c{i}"}


def _call(i):
    return {"id": f"a{i}", "role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "name": "f", "arguments": {}}]}


def test_observation_masker_keeps_the_last_m_results():
    history = [{"id": "u", "role": "user", "content": "go"}]
    for i in range(15):
        history += [_call(i), _tool(i)]
    masker = ObservationMasker(keep_last=10)
    aged, report = masker.age(history)
    assert report.redacted == 5 and report.tokens_freed > 0
    tools = [m for m in aged if m.get("tool_call_id")]
    assert all(m["content"].startswith("[Old tool result omitted") for m in tools[:5])
    assert [m["content"] for m in tools[5:]] == [h["content"] for h in history if h["role"] == "tool"][5:]
    assert all(h["content"].startswith("output number") for h in history if h["role"] == "tool")  # originals untouched
    # incremental: one more pair masks exactly one more, and masked copies are stable objects
    history2 = history + [_call(15), _tool(15)]
    aged2, report2 = masker.age(history2)
    assert report2.redacted == 6
    assert all(a is b for a, b in zip(aged[:10], aged2[:10], strict=True))
    # a history that is not an extension is handled from scratch
    aged3, report3 = masker.age(history[:5])
    assert report3.redacted == 0 and aged3 == history[:5]
    with pytest.raises(ValueError):
        ObservationMasker(keep_last=-1)


def test_masking_handles_anthropic_result_wrappers():
    wrapper = {"id": "w", "role": "user", "content": "", "extra": {"blocks": [
        {"type": "tool_result", "tool_use_id": "c0", "content": "long output " * 100}]}}
    history = [_call(0), wrapper, _call(1), _tool(1)]
    aged, report = ObservationMasker(keep_last=1).age(history)
    assert report.redacted == 1
    block = aged[1]["extra"]["blocks"][0]
    assert block["content"].startswith(MASK_PLACEHOLDER.split("(")[0])
    assert block["_redacted"] and history[1]["extra"]["blocks"][0]["content"].startswith("long output")


def test_masking_and_none_never_compact():
    msgs = generate_session(2, n_turns=12).messages
    for preset in ("observation-masking", "none"):
        r = replay(msgs, preset, context_window=20_000)
        assert r.compactions == []
        assert (r.steps_df["decision"] == "none").all()
    masked = replay(msgs, "observation-masking", context_window=20_000)
    assert (masked.steps_df["tokens"] <= masked.steps_df["tokens_none"]).all()
    assert masked.steps_df["redacted"].max() > 0
