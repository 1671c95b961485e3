"""CompactionPolicy: one typed value, its defaults with their sources, JSON, replace, diff, checks."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.policy import (
    AGING_KINDS,
    FROM_CLIENT,
    KEEP_FIELDS,
    LEGACY_NAMES,
    PARTS,
    CompactionPolicy,
    CutPolicy,
    TriggerPolicy,
    policy_fields,
)
from opctx.context.summarize import SummarizerConfig


def test_every_field_states_its_default_once_with_a_source():
    fields = policy_fields()
    assert len({f.name for f in fields}) == len(fields)
    assert {f.name.split(".")[0] for f in fields} == set(PARTS)
    for f in fields:
        assert f.doc and f.source, f.name
        assert CompactionPolicy().get(f.name) == f.default
    # the specification's numbers, pinned to the fields that hold them
    p = CompactionPolicy()
    assert (p.trigger.recommend_pct, p.trigger.auto_pct, p.trigger.emergency_pct) == (0.70, 0.80, 0.95)
    assert (p.cut.keep_ratio, p.cut.keep_min_tokens, p.cut.keep_max_tokens, p.cut.keep_min_messages) == (
        0.10, 8_000, 40_000, 5)
    assert (p.cut.protect_first_n, p.cut.protect_last_n) == (3, 20)
    assert (p.aging.keep_recent_turns, p.aging.keep_recent_seconds, p.aging.min_tokens,
            p.aging.protect_first_n) == (4, 60, 800, 2)
    assert (p.guard.min_saving, p.guard.low_saving_streak, p.guard.rearm_fraction) == (0.10, 2, 0.25)
    assert "spec §4" in next(f.source for f in fields if f.name == "trigger.auto_pct")
    assert "Complexity Trap" in next(f.source for f in fields if f.name == "aging.keep_last")


def test_component_defaults_are_the_policys():
    from opctx.context.aging import TurnAger
    from opctx.context.budget import BudgetAllocator
    from opctx.context.engine import AUTO_COMPACT_PCT, EMERGENCY_PCT, RECOMMEND_PCT

    p = CompactionPolicy()
    ager = TurnAger()
    assert (ager.keep_recent_turns, ager.keep_recent_seconds, ager.min_tokens, ager.protect_first_n) == (
        p.aging.keep_recent_turns, p.aging.keep_recent_seconds, p.aging.min_tokens, p.aging.protect_first_n)
    assert BudgetAllocator().reserve_policy == p.budget.reserve_policy
    assert (RECOMMEND_PCT, AUTO_COMPACT_PCT, EMERGENCY_PCT) == p.trigger.thresholds()
    assert SummarizerConfig().to_policy() == p
    assert SummarizerConfig.from_policy(p) == SummarizerConfig()


def test_replace_with_dotted_names_and_whole_parts():
    p = CompactionPolicy()
    q = p.replace(**{"cut.keep_ratio": 0.2, "trigger.auto_pct": 0.9})
    assert (q.cut.keep_ratio, q.trigger.auto_pct) == (0.2, 0.9) and p.cut.keep_ratio == 0.1
    assert p.replace(cut=CutPolicy(keep_ratio=0.3)).cut.keep_ratio == 0.3
    assert p.replace(cut={"keep_ratio": 0.3}).cut == CutPolicy(keep_ratio=0.3)
    with pytest.raises(ValueError, match=r"unknown policy field 'cut.keep_rato'; did you mean 'cut.keep_ratio'"):
        p.replace(**{"cut.keep_rato": 0.2})
    with pytest.raises(ValueError, match="unknown policy field 'cut.nope'"):
        p.replace(cut={"nope": 1})


def test_diff_lists_what_differs_in_field_order():
    p = CompactionPolicy()
    q = p.replace(**{"guard.min_saving": 0.2, "trigger.auto_pct": 0.9, "aging.kind": "none"})
    assert [tuple(c) for c in p.diff(q)] == [
        ("trigger.auto_pct", 0.8, 0.9), ("aging.kind", "turns", "none"), ("guard.min_saving", 0.1, 0.2)]
    assert p.diff(p) == [] and q.diff(p)[0] == ("trigger.auto_pct", 0.9, 0.8)


@pytest.mark.parametrize("name, value, message", [
    ("cut.keep_min_tokens", -1, r"cut.keep_min_tokens must be an int >= 0, got -1"),
    ("cut.keep_ratio", 1.5, r"cut.keep_ratio must be a fraction in \[0, 1\], got 1.5"),
    ("guard.min_saving", -0.1, r"guard.min_saving must be a fraction"),
    ("cut.tail_budget_share", 0.0, r"cut.tail_budget_share must be a fraction in \(0, 1\]"),
    ("trigger.recommend_pct", 0.9, r"trigger.recommend_pct \(0.9\) must not exceed trigger.auto_pct \(0.8\)"),
    ("trigger.auto_pct", 0.0, r"trigger.auto_pct must be a share of the input budget above 0"),
    ("trigger.auto_pct", math.inf, r"trigger.auto_pct must be a share .* \(None: never"),
    ("cut.keep_min_tokens", 50_000, r"cut.keep_min_tokens \(50000\) must not exceed cut.keep_max_tokens"),
    ("budget.context_window", 0, r"budget.context_window must be a positive int"),
    ("budget.reserve_policy", "wide", r"budget.reserve_policy must be one of 'cap', 'floor'"),
    ("aging.kind", "magic", r"aging.kind must be one of"),
    ("summary.timeout", 0, r"summary.timeout must be a number > 0 or None"),
    ("client.autocompact_pct_override", 150, r"client.autocompact_pct_override must be a number in \(0, 100\]"),
    ("cut.fold_current_turn", "yes", r"cut.fold_current_turn must be a bool"),
    ("trigger.auto_pct", FROM_CLIENT, r"trigger.auto_pct is 'client' but client.name is None"),
    ("aging.keep_thinking_turns", 0, r"aging.keep_thinking_turns must be a positive int or None, got 0"),
    ("aging.keep_thinking_turns", "last", r"aging.keep_thinking_turns must be a positive int"),
])
def test_invalid_values_raise_one_error_naming_the_field(name, value, message):
    with pytest.raises(ValueError, match=message):
        CompactionPolicy().replace(**{name: value})


def test_never_is_none_and_the_client_marker_is_explicit():
    never = CompactionPolicy().replace(**{
        "trigger.recommend_pct": None, "trigger.auto_pct": None, "trigger.emergency_pct": None})
    assert never.trigger.thresholds() == (math.inf, math.inf, math.inf)
    assert json.loads(json.dumps(never.to_dict()))["trigger"] == {
        "recommend_pct": None, "auto_pct": None, "emergency_pct": None,
        "tokens": None, "tokens_of": "request", "messages": None, "turns": None}
    client = CompactionPolicy().replace(**{"client.name": "claude-code", "trigger.auto_pct": FROM_CLIENT,
                                           "budget.output_reserve": FROM_CLIENT})
    assert client.client_decides() == ["trigger.auto_pct", "budget.output_reserve"] and not client.resolved
    with pytest.raises(ValueError, match="resolve the policy"):
        client.trigger.thresholds()
    # a share past the budget is a share (Codex's blocking tier at the full window)
    assert TriggerPolicy(emergency_pct=1.004).emergency_pct == 1.004


def test_with_params_takes_flat_names_and_lets_thresholds_give_way():
    p = CompactionPolicy()
    q = p.with_params({"keep_ratio": 0.2, "trigger_pct": 0.6, "aging_min_tokens": 100})
    assert (q.cut.keep_ratio, q.aging.min_tokens) == (0.2, 100)
    assert (q.trigger.recommend_pct, q.trigger.auto_pct, q.trigger.emergency_pct) == (0.6, 0.6, 0.95)
    assert p.with_params({"auto_compact_pct": 0.97}).trigger.emergency_pct == 0.97
    # a threshold that is named keeps its value and is checked
    with pytest.raises(ValueError, match="must not exceed"):
        p.with_params({"trigger.auto_pct": 0.6, "trigger.recommend_pct": 0.7})
    # never-recommending gives way to a trigger that is set; never-emergency stays never
    never = p.replace(**{"trigger.recommend_pct": None, "trigger.auto_pct": None, "trigger.emergency_pct": None})
    assert never.with_params({"trigger.auto_pct": 0.6}).trigger.thresholds() == (0.6, 0.6, math.inf)
    with pytest.raises(ValueError, match="both set trigger.auto_pct"):
        p.with_params({"trigger_pct": 0.6, "auto_compact_pct": 0.7})
    with pytest.raises(ValueError, match="unknown policy field 'wibble'"):
        p.with_params({"wibble": 1})
    assert set(LEGACY_NAMES.values()) <= {f.name for f in policy_fields()}


def test_from_dict_defaults_and_unknown_keys():
    assert CompactionPolicy.from_dict(None) == CompactionPolicy() == CompactionPolicy.from_dict({})
    assert CompactionPolicy.from_dict({"cut": {"keep_ratio": 0.3}}).cut.keep_ratio == 0.3
    with pytest.raises(ValueError, match="unknown policy field 'cutt'"):
        CompactionPolicy.from_dict({"cutt": {}})
    with pytest.raises(ValueError, match="a policy must be a dict"):
        CompactionPolicy.from_dict([1])  # type: ignore[arg-type]
    assert json.loads(CompactionPolicy().to_json()) == CompactionPolicy().to_dict()


def test_policies_are_frozen_and_hashable():
    p = CompactionPolicy()
    with pytest.raises(AttributeError):
        p.cut = CutPolicy()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        p.cut.keep_ratio = 0.5  # type: ignore[misc]
    assert hash(p) == hash(CompactionPolicy()) and {p: 1}[CompactionPolicy()] == 1


# -- random valid policies ----------------------------------------------------------------------


def _values(f):
    if f.kind == "fraction":
        low = 0.01 if f.positive else 0.0  # a share that refuses 0
        return st.floats(low, 1.0)
    if f.kind in ("tokens", "count", "chars"):
        low = 1 if f.name.startswith(("budget.", "client.", "trigger.")) or f.name in (
            "guard.low_saving_streak", "aging.trigger_tokens", "aging.keep_thinking_turns") else 0
        return st.integers(low, 300_000)
    if f.kind == "seconds":
        return st.floats(0.5 if f.name == "summary.timeout" else 0.0, 1e6)
    if f.kind == "percent":
        return st.floats(0.5, 100.0)
    if f.kind == "flag":
        return st.booleans()
    if f.kind == "choice":
        return st.sampled_from([c for c in f.choices if c not in ("client",)])
    if f.kind == "text":
        return st.text(min_size=1, max_size=12)
    if f.kind == "names":
        return st.lists(st.text(min_size=1, max_size=8), max_size=3).map(tuple)
    raise AssertionError(f.kind)


@st.composite
def valid_policies(draw):
    changes = {}
    for f in policy_fields():
        if f.kind == "threshold" or not draw(st.booleans()):
            continue
        value = draw(st.one_of(st.none(), _values(f)) if f.optional else _values(f))
        changes[f.name] = value
    if changes.get("client.name") is None:
        for name in [n for n in changes if n.startswith("client.") and n not in (
                "client.version", "client.post_compaction_tokens")]:
            changes.pop(name)
    for name in [n for n in KEEP_FIELDS if changes.get(n) is not None][1:]:
        changes.pop(name)  # keep by one unit only
    low, high = sorted((changes.get("cut.keep_min_tokens", 8_000), changes.get("cut.keep_max_tokens", 40_000)))
    changes["cut.keep_min_tokens"], changes["cut.keep_max_tokens"] = low, high
    shares = sorted(draw(st.lists(st.one_of(st.none(), st.floats(0.05, 1.5)), min_size=3, max_size=3)),
                    key=lambda v: math.inf if v is None else v)
    changes.update(zip(("trigger.recommend_pct", "trigger.auto_pct", "trigger.emergency_pct"), shares, strict=True))
    return CompactionPolicy().replace(**changes)


@given(valid_policies())
@settings(max_examples=150, deadline=None)
def test_random_valid_policies_round_trip_through_json(p):
    text = json.dumps(p.to_dict())
    assert CompactionPolicy.from_dict(json.loads(text)) == p
    assert CompactionPolicy.from_dict(json.loads(p.to_json())) == p
    assert p.diff(CompactionPolicy.from_dict(p.to_dict())) == []


def test_thinking_clearing_is_off_by_default_and_all_means_off():
    # Anthropic's clear_thinking_20251015 keep: {type: thinking_turns, value: N} or "all"
    assert CompactionPolicy().aging.keep_thinking_turns is None
    p = CompactionPolicy().replace(**{"aging.keep_thinking_turns": 2})
    assert p.to_dict()["aging"]["keep_thinking_turns"] == 2
    assert CompactionPolicy.from_dict(json.loads(p.to_json())) == p
    assert [tuple(c) for c in CompactionPolicy().diff(p)] == [("aging.keep_thinking_turns", None, 2)]
    assert p.replace(**{"aging.keep_thinking_turns": "all"}) == CompactionPolicy()
    assert CompactionPolicy.from_dict({"aging": {"keep_thinking_turns": "all"}}) == CompactionPolicy()


def test_aging_kinds_are_named_once():
    assert AGING_KINDS == ("turns", "masking", "clear-tool-uses", "recent-events", "microcompact", "client", "none")


def test_the_design_document_lists_every_field():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text(encoding="utf-8")
    section = text.split("### The compaction policy", 1)[1].split("\n## ", 1)[0]
    for f in policy_fields():
        assert f"| `{f.name}` |" in section, f.name


def test_the_policy_imports_nothing_of_opctx():
    import ast
    from pathlib import Path

    import opctx.context.policy as module

    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(name.startswith(("opctx", ".")) or name == "" for name in imported), imported


# -- count triggers and count keeps ------------------------------------------------------------------


def test_count_triggers_fire_first_come_and_name_their_field():
    t = TriggerPolicy(tokens=4_000, messages=100, turns=31)
    assert t.fired(tokens=10, messages=5, turns=31) == "trigger.turns"
    assert t.fired(tokens=4_000, messages=100, turns=31) == "trigger.tokens"  # the first that fires
    assert t.fired(tokens=3_999, messages=99, turns=30) is None
    for name, bad in (("trigger.turns", 0), ("trigger.messages", -1), ("trigger.tokens", 1.5)):
        with pytest.raises(ValueError, match=name.replace(".", r"\.")):
            CompactionPolicy().replace(**{name: bad})


def test_keep_by_one_unit_only_and_round_trip():
    p = CompactionPolicy().replace(**{"cut.keep_turns": 10, "trigger.turns": 31, "aging.exclude_tools": ["web"]})
    assert p.cut.keep() == ("turns", 10) and CompactionPolicy().cut.keep() is None
    assert CompactionPolicy.from_dict(json.loads(p.to_json())) == p and p.aging.exclude_tools == ("web",)
    with pytest.raises(ValueError, match=r"cut\.keep_turns and cut\.keep_messages are both set"):
        p.replace(**{"cut.keep_messages": 20})
    with pytest.raises(ValueError, match=r"aging\.exclude_tools"):
        p.replace(**{"aging.exclude_tools": "web"})
    with pytest.raises(ValueError, match=r"summary\.source"):
        p.replace(**{"summary.source": "magic"})


def test_the_engine_decides_on_a_count_trigger():
    from opctx.context.engine import DefaultContextEngine
    from opctx.context.types import DecisionKind

    policy = CompactionPolicy().replace(**{"trigger.turns": 3, "aging.kind": "none"})
    engine = DefaultContextEngine(policy=policy)
    history = [{"role": "user", "content": "task", "id": "u"}]
    for i in range(3):
        history.append({"role": "assistant", "content": f"step {i}", "id": f"a{i}"})
        history.append({"role": "user", "content": f"output {i}", "id": f"o{i}"})
    prep = engine.prepare(None, "s", history, "gpt-4o", None)
    assert prep.decision.kind is DecisionKind.COMPACT and prep.decision.fired == "trigger.turns"
    assert prep.budget_pct < 0.1 and engine.should_auto_compact(prep)
    prep = engine.prepare(None, "s2", history[:5], "gpt-4o", None)
    assert prep.decision.kind is DecisionKind.NONE and prep.decision.fired is None


def test_the_token_trigger_counts_the_request_or_the_history():
    """``trigger.tokens_of``: LangChain's SummarizationMiddleware counts the agent's messages,
    not the system prompt and tool schemas every request carries."""
    from opctx.context.engine import DefaultContextEngine

    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "does a careful thing " * 60,
                                              "parameters": {"type": "object", "properties": {}}}}
             for i in range(8)]  # tokens every request carries and the history does not hold
    history = [{"role": "user", "content": "fix the bug " * 100}, {"role": "assistant", "content": "ok"}]
    never = {"trigger.recommend_pct": None, "trigger.auto_pct": None, "trigger.emergency_pct": None,
             "trigger.tokens": 1_500, "budget.context_window": 200_000}
    request = DefaultContextEngine(policy=CompactionPolicy().replace(**never))
    alone = DefaultContextEngine(policy=CompactionPolicy().replace(**never, **{"trigger.tokens_of": "history"}))
    fired = request.prepare(None, "s", history, None, tools)
    assert fired.decision.fired == "trigger.tokens" and fired.budget.input_used >= 1_500
    quiet = alone.prepare(None, "s", history, None, tools)
    assert quiet.decision.fired is None
    with pytest.raises(ValueError, match="tokens_of"):
        CompactionPolicy().replace(**{"trigger.tokens_of": "prompt"})
