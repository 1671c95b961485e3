"""Presets: documented sources, registry entries, thresholds per window and client version, masking."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.engine import CONTEXT_ENGINE_REGISTRY, DefaultContextEngine, get_engine
from opctx.context.policy import FROM_CLIENT, CompactionPolicy
from opctx.context.summarize import SummarizerConfig
from opctx.lab import client_rules
from opctx.lab.client_rules import rule_for
from opctx.lab.presets import (
    ENGINE_SOURCES,
    MASK_PLACEHOLDER,
    PRESETS,
    TRIGGER_RULES,
    ObservationMasker,
    build_engine,
    parse_version,
    preset_names,
    preset_policy,
    resolve_policy,
    resolve_trigger,
    thresholds_for,
)
from opctx.lab.replay import replay
from opctx.lab.scenarios import generate_session


def test_every_preset_says_where_its_numbers_come_from():
    assert preset_names() == ["default", "claude-code", "hermes", "codex", "observation-masking", "none",
                              "complexity-trap-masking", "complexity-trap-summary", "anthropic-clear-tool-uses",
                              "langchain-clear-tool-uses", "anthropic-clear-thinking", "openhands-llm-summarizing",
                              "openhands-observation-masking", "openhands-amortized-forgetting",
                              "openhands-recent-events", "langchain-summarization"]
    for spec in PRESETS.values():
        assert spec.description and spec.sources, spec.name
        assert all(isinstance(v, str) and v for v in spec.sources.values())
        # every field the preset sets differently from the default policy is named in one of
        # its sources (by its dotted name); the default policy's own are in the field metadata
        described = " ".join(spec.sources)
        for name in spec.set_fields():
            assert name in described and spec.source_of(name), (spec.name, name)
    assert all(v for v in ENGINE_SOURCES.values())
    assert PRESETS["hermes"].source_of("trigger.auto_pct").startswith("docs/design.md")
    assert PRESETS["hermes"].source_of("cut.min_prompt_ratio") == "spec §4 parameter table"


def test_presets_are_registered_engines():
    for name in preset_names():
        engine = get_engine(name)
        assert isinstance(engine, DefaultContextEngine) and engine.name == name
    assert "claude-code" in CONTEXT_ENGINE_REGISTRY


def test_claude_code_thresholds_are_tokens_before_the_effective_window():
    engine = build_engine("claude-code", context_window=200_000, model="claude-sonnet-4-5")
    input_budget = 200_000 - 20_000  # reserve min(max output, 20K)
    assert engine.auto_compact_pct == pytest.approx(1 - 13_000 / input_budget)
    assert 0.92 < engine.auto_compact_pct < 0.93  # docs/design.md: ~92-93% of a 200K window
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
    # dotted names and whole policies too
    dotted = build_engine("default", context_window=100_000, **{"cut.keep_ratio": 0.2, "trigger.auto_pct": 0.6})
    assert dotted.policy == engine.policy
    assert build_engine(engine.policy).policy == engine.policy


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


# -- client versions ------------------------------------------------------------------------------

OPUS = "claude-opus-4-5-20251101"


def test_claude_code_trigger_follows_the_client_version():
    at = {v: resolve_trigger("claude-code", context_window=200_000, model=OPUS, client_version=v) for v in
          ("2.0.0", "2.0.74", "2.0.76", "2.1.20", "2.1.21", "2.1.173")}
    # 2.0.x: the whole max output (32,000) is reserved: 'Autocompact buffer: 45.0k tokens'
    assert {v: r.auto_tokens for v, r in at.items()} == {
        "2.0.0": 155_000, "2.0.74": 155_000, "2.0.76": 155_000, "2.1.20": 155_000,
        "2.1.21": 167_000, "2.1.173": 167_000}
    assert at["2.0.76"].output_reserve == 32_000 and at["2.1.21"].output_reserve == 20_000
    assert all(r.known for r in at.values())
    assert at["2.0.76"].rule is not at["2.1.21"].rule
    # the engine built for a version compacts at that many tokens of its input budget
    engine = build_engine("claude-code", context_window=200_000, model=OPUS, client_version="2.0.76")
    assert engine.auto_compact_pct * (200_000 - 32_000) == pytest.approx(155_000)
    assert engine.recommend_pct < engine.auto_compact_pct < engine.emergency_pct
    # a small what-if window caps the reserve as opctx's budget does (25%): 13K before 24K of input
    small = build_engine("claude-code", context_window=32_000, model=OPUS)
    assert small.auto_compact_pct == pytest.approx(1 - 13_000 / 24_000)
    assert resolve_trigger("claude-code", context_window=32_000, model=OPUS, client_version="2.0.76").auto_tokens == 11_000


def test_claude_code_settings_are_parameters():
    def auto(version, **kw):
        return resolve_trigger("claude-code", context_window=200_000, model=OPUS, client_version=version, **kw).auto_tokens

    # CLAUDE_CODE_MAX_OUTPUT_TOKENS=64000: 77.0k buffer before 2.1.21 (#17660), capped at 20K after
    assert auto("2.0.76", max_output_tokens=64_000) == 123_000
    assert auto("2.1.30", max_output_tokens=64_000) == 167_000
    assert auto("2.1.30", max_output_tokens=8_000) == 200_000 - 8_000 - 13_000
    # CLAUDE_CODE_AUTO_COMPACT_WINDOW: the window the trigger is computed from, never above the real one
    assert auto("2.1.30", auto_compact_window=150_000) == 150_000 - 20_000 - 13_000
    assert auto("2.1.30", auto_compact_window=900_000) == 167_000
    # CLAUDE_AUTOCOMPACT_PCT_OVERRIDE: a share of the effective window that can only lower the trigger
    assert auto("2.1.30", autocompact_pct_override=50) == 90_000
    assert auto("2.1.30", autocompact_pct_override=95) == 167_000
    # a calibrated figure: tokens before the window
    assert auto("2.0.76", trigger_before_window=40_000) == 160_000
    res = resolve_trigger("claude-code", context_window=200_000, client_version="2.0.76", max_output_tokens=64_000)
    assert res.overridden_by == ("max_output_tokens",) and "max_output_tokens" in res.source
    for bad in ({"max_output_tokens": 0}, {"autocompact_pct_override": 150}, {"auto_compact_token_limit": 9}):
        with pytest.raises(ValueError):
            resolve_trigger("claude-code", context_window=200_000, **bad)


def test_codex_limit_is_ninety_percent_of_the_model_window():
    # a rollout reports 95% of gpt-5.2-codex's 272,000 as its window; Codex's limit is 90% of 272,000
    res = resolve_trigger("codex", context_window=258_400, model="gpt-5.2-codex", client_version="0.77.0")
    assert res.auto_tokens == 244_800 and res.known
    assert resolve_trigger("codex", context_window=258_400, model="gpt-5.2-codex",
                           auto_compact_token_limit=200_000).auto_tokens == 200_000
    assert resolve_trigger("codex", context_window=258_400, model="gpt-5.2-codex",
                           trigger_window_fraction=0.75).auto_tokens == 204_000
    # a what-if window keeps 90% of itself
    assert resolve_trigger("codex", context_window=100_000, model="gpt-5.2-codex").auto_tokens == 90_000
    engine = build_engine("codex", context_window=258_400, model="gpt-5.2-codex", client_version="0.77.0")
    assert engine.auto_compact_pct * (258_400 - 1_024) == pytest.approx(244_800)
    with pytest.raises(ValueError, match="Claude Code settings"):
        build_engine("codex", context_window=258_400, max_output_tokens=64_000)


def test_client_parameters_belong_to_client_presets():
    # client_version is accepted (and ignored) by every preset: one call can replay a recording under several
    build_engine("hermes", context_window=100_000, client_version="2.0.76")
    with pytest.raises(ValueError, match="client presets"):
        build_engine("hermes", context_window=100_000, max_output_tokens=64_000)


def test_unknown_versions_use_the_default_rule_and_say_so_once(caplog, monkeypatch):
    monkeypatch.setattr(client_rules, "_WARNED_VERSIONS", set())
    with caplog.at_level("WARNING", logger="opctx.lab.client_rules"):
        for _ in range(3):
            res = resolve_trigger("claude-code", context_window=200_000, model=OPUS, client_version="0.2.125")
        resolve_trigger("claude-code", context_window=200_000, model=OPUS, client_version="not a version")
        silent = resolve_trigger("claude-code", context_window=200_000, model=OPUS, client_version=None)
    assert not res.known and res.auto_tokens == 167_000 and res.rule is client_rules.DEFAULT_TRIGGER_RULES["claude-code"]
    assert silent.auto_tokens == 167_000 and not silent.known
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and "'0.2.125'" in warned[0] and "'not a version'" in warned[1]
    assert "no sourced rule" in warned[0]


def test_every_trigger_rule_has_a_source():
    for rule in TRIGGER_RULES:
        assert rule.rule and len(rule.source) > 40, rule.label
        # the client's own code at named versions (cli.js of the npm package, codex-rs)
        assert "cli.js" in rule.source or "codex-rs" in rule.source, rule.label


@given(st.tuples(st.integers(0, 3), st.integers(0, 300), st.integers(0, 400)))
def test_a_version_falls_in_at_most_one_row_per_client(version):
    text = ".".join(map(str, version))
    assert parse_version(text) == version
    for client in ("claude-code", "codex"):
        covering = [r for r in TRIGGER_RULES if r.client == client and r.covers(version)]
        assert len(covering) <= 1
        rule, known = rule_for(client, text)
        assert known == bool(covering) and (not covering or rule is covering[0])


# -- every preset is a policy ---------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_is_a_policy_that_round_trips_through_json(name):
    import json

    spec = PRESETS[name]
    assert isinstance(spec.policy, CompactionPolicy)
    assert CompactionPolicy.from_dict(json.loads(json.dumps(spec.policy.to_dict()))) == spec.policy
    # built for a window, every field holds a number, and the engine runs with that policy
    engine = build_engine(name, context_window=64_000, model="claude-sonnet-4-5")
    assert engine.policy.resolved and engine.policy.client.name == spec.policy.client.name
    assert CompactionPolicy.from_dict(json.loads(engine.policy.to_json())) == engine.policy
    assert (engine.recommend_pct, engine.auto_compact_pct, engine.emergency_pct) == engine.policy.trigger.thresholds()
    # and an engine built from that resolved policy is the same engine
    again = build_engine(engine.policy, context_window=64_000, model="claude-sonnet-4-5")
    assert again.policy == engine.policy and type(again.ager) is type(engine.ager)


def test_the_client_decides_what_says_client():
    spec = PRESETS["claude-code"]
    assert spec.policy.client_decides() == [
        "trigger.recommend_pct", "trigger.auto_pct", "trigger.emergency_pct", "aging.kind",
        "budget.output_reserve"]
    assert PRESETS["codex"].policy.client_decides() == [
        "trigger.recommend_pct", "trigger.auto_pct", "trigger.emergency_pct"]
    old = resolve_policy(spec.policy.replace(**{"client.version": "2.0.76"}), context_window=200_000, model=OPUS)
    # 2.0.76 clears old results without writing a line (microcompaction from 1.0.59); before 1.0.59
    # a known client clears nothing
    assert old.budget.output_reserve == 32_000 and old.aging.kind == "microcompact"
    older = resolve_policy(spec.policy.replace(**{"client.version": "1.0.30"}), context_window=200_000, model=OPUS)
    assert older.aging.kind == "none"
    assert old.trigger.auto_pct * (200_000 - 32_000) == pytest.approx(155_000)
    new = resolve_policy(spec.policy.replace(**{"client.version": "2.1.30"}), context_window=200_000, model=OPUS)
    assert new.budget.output_reserve == 20_000 and new.aging.kind == "microcompact"
    assert resolve_policy(spec, context_window=200_000, model=OPUS).aging.kind == "turns"
    # a threshold set explicitly wins; those the client decides give way to it
    moved = build_engine("claude-code", context_window=200_000, model=OPUS, auto_compact_pct=0.5)
    assert moved.policy.trigger.auto_pct == 0.5 and moved.policy.trigger.recommend_pct == 0.5
    assert moved.policy.trigger.emergency_pct > 0.9
    assert preset_policy("claude-code", {"microcompact": True}).aging.kind == "microcompact"
    assert preset_policy("claude-code", {"microcompact": False}).aging.kind == "turns"
    assert preset_policy("claude-code", {"aging": False}).aging.kind == "none"
    assert preset_policy("observation-masking", {"aging": False}).aging.kind == "masking"
    assert spec.params["post_compaction_tokens"] == 10_000 and "output_reserve" not in spec.params
    assert FROM_CLIENT not in PRESETS["codex"].params.values()


def test_policy_fields_by_dotted_name_and_flat_name_build_the_same_engine():
    flat = build_engine("hermes", context_window=80_000, keep_ratio=0.2, aging_min_tokens=100, aging=True,
                        min_saving=0.2)
    dotted = build_engine("hermes", context_window=80_000, aging=True, **{
        "cut.keep_ratio": 0.2, "aging.min_tokens": 100, "guard.min_saving": 0.2})
    assert flat.policy == dotted.policy and flat.ager.min_tokens == 100
    assert [c.name for c in PRESETS["hermes"].policy.diff(flat.policy)] == [
        "cut.keep_ratio", "aging.kind", "aging.min_tokens", "budget.context_window", "guard.min_saving"]


# -- an engine built from a policy replays as one built from the older keyword arguments ----------


@st.composite
def _engine_policies(draw):
    """Random valid policies within what the older engine arguments can say."""
    shares = sorted(draw(st.lists(st.floats(0.3, 1.2), min_size=3, max_size=3)))
    keep = sorted(draw(st.lists(st.integers(0, 12_000), min_size=2, max_size=2)))
    return CompactionPolicy().replace(**{
        "trigger.recommend_pct": shares[0], "trigger.auto_pct": shares[1], "trigger.emergency_pct": shares[2],
        "cut.keep_ratio": draw(st.floats(0.0, 0.5)), "cut.keep_min_tokens": keep[0], "cut.keep_max_tokens": keep[1],
        "cut.keep_min_messages": draw(st.integers(0, 6)), "cut.protect_first_n": draw(st.integers(0, 4)),
        "cut.protect_last_n": draw(st.integers(0, 25)), "cut.tail_budget_share": draw(st.floats(0.1, 1.0)),
        "cut.fold_current_turn": draw(st.booleans()),
        "guard.min_saving": draw(st.floats(0.0, 0.5)), "guard.rearm_fraction": draw(st.floats(0.0, 1.0)),
        "aging.kind": draw(st.sampled_from(["turns", "none"])),
        "budget.context_window": draw(st.sampled_from([12_000, 20_000, 32_000])),
        "summary.structural_head_chars": draw(st.integers(10, 80)),
    })


def _legacy_engine(policy):
    import warnings

    config = SummarizerConfig.from_policy(policy)

    def factory(*, session_db, clock, context_window, model, summarizer_provider, **_):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return DefaultContextEngine(
                session_db=session_db, clock=clock, config=config,
                recommend_pct=policy.trigger.recommend_pct, auto_compact_pct=policy.trigger.auto_pct,
                emergency_pct=policy.trigger.emergency_pct, context_window=policy.budget.context_window,
                tail_budget_share=policy.cut.tail_budget_share, min_saving=policy.guard.min_saving,
                rearm_fraction=policy.guard.rearm_fraction, aging=policy.aging.kind != "none")

    return factory


def _policy_engine(policy):
    def factory(*, session_db, clock, context_window, model, summarizer_provider, **_):
        return DefaultContextEngine(policy=policy, session_db=session_db, clock=clock)

    return factory


_SESSION = generate_session(5, n_turns=10, max_tools_per_turn=3).messages


@given(_engine_policies())
@settings(max_examples=12, deadline=None)
def test_a_policy_engine_replays_as_the_legacy_arguments_did(policy):
    window = policy.budget.context_window
    new = replay(_SESSION, _policy_engine(policy), context_window=window, keep_contexts=False)
    old = replay(_SESSION, _legacy_engine(policy), context_window=window, keep_contexts=False)
    assert new.policy == policy
    columns = [c for c in new.steps_df.columns if c != "policy"]
    assert new.steps_df[columns].equals(old.steps_df[columns])
    assert [c.to_dict() | {"duration_ms": 0} for c in new.compactions] == [
        c.to_dict() | {"duration_ms": 0} for c in old.compactions]
    assert new.events == old.events


def test_own_configuration_is_the_recordings_client_preset_and_window():
    """A tool opens on what the agent really ran: its client's preset, its window."""
    from opctx.lab.history import RecordedHistory
    from opctx.lab.presets import own_configuration

    user = {"role": "user", "content": "hi"}
    codex = RecordedHistory.from_messages(
        [user, {"role": "assistant", "content": "ok", "model": "gpt-5.2-codex", "context_window": 258_400}],
        fmt="codex")
    own = own_configuration(codex)
    assert (own.preset, own.context_window) == ("codex", 258_400)
    assert "the window the recording reports" in own.says and "codex" in own.says
    claude = RecordedHistory.from_messages(
        [user, {"role": "assistant", "content": "ok", "model": "claude-sonnet-4-5"}], fmt="claude_code")
    own = own_configuration(claude)
    assert (own.preset, own.context_window) == ("claude-code", 200_000)
    assert "the model's window, claude-sonnet-4-5" in own.says
    plain = RecordedHistory.from_messages([user, {"role": "assistant", "content": "ok"}], fmt="openai")
    assert own_configuration(plain).preset == "default"
