"""BudgetAllocator (spec §2.3, docs/design.md output-reserve policies)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.budget import BudgetAllocator
from opctx.context.tokens import (
    Estimator,
    estimate_history_tokens,
    estimate_message_tokens,
    estimate_tools_tokens,
)
from opctx.context.types import BudgetAllocation

# window -> (cap reserve, floor reserve), base 16,384 (no model)
WINDOW_TABLE = [
    (8_192, 2_048, 6_144),
    (32_768, 8_192, 16_384),
    (65_536, 16_384, 16_384),
    (200_000, 16_384, 50_000),
    (272_000, 16_384, 68_000),
    (1_000_000, 16_384, 250_000),
]


@pytest.mark.parametrize(("window", "cap", "floor"), WINDOW_TABLE)
def test_window_table(window, cap, floor):
    assert BudgetAllocator().reserve_for(window) == cap
    assert BudgetAllocator(reserve_policy="floor").reserve_for(window) == floor
    for policy, expected in (("cap", cap), ("floor", floor)):
        alloc = BudgetAllocator(reserve_policy=policy).allocate(window, "", [], None)
        assert alloc.output_reserve == expected
        assert alloc.input_budget == window - expected
        # neither policy ever leaves a window without room for input
        assert alloc.input_budget >= min(8_000, window // 4)


def test_reserve_uses_model_max_output_when_known():
    a = BudgetAllocator()
    # gpt-4o: max output 16,384 < 25% of 128K
    assert a.reserve_for(128_000, "gpt-4o") == 16_384
    # gpt-4.1: 32,768 max output, 1M window
    assert a.reserve_for(1_047_576, "gpt-4.1") == 32_768
    # claude opus 4.5: 64,000 capped at 25% of 200K
    assert a.reserve_for(200_000, "claude-opus-4-5-20251101") == 50_000
    # an explicit reserve beats the model figure
    assert BudgetAllocator(output_reserve=4_000).reserve_for(200_000, "claude-opus-4-5") == 4_000


def test_reserve_never_below_minimum_but_never_eats_a_tiny_window():
    a = BudgetAllocator(output_reserve=100)
    assert a.reserve_for(200_000) == 1_024
    assert a.reserve_for(1_500) == 750  # half the window stays for input
    assert BudgetAllocator(reserve_policy="floor").reserve_for(1_000) == 750


def test_allocation_has_all_nine_fields_consistent():
    system = "You are a careful assistant."
    history = [
        {"role": "user", "content": "List the files please"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "ls", "arguments": {"path": "."}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py\n" * 50},
    ]
    tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
    alloc = BudgetAllocator().allocate(32_768, system, history, tools)
    assert isinstance(alloc, BudgetAllocation)
    assert alloc.system_prompt == estimate_message_tokens({"role": "system", "content": system})
    assert alloc.history == estimate_history_tokens(history)
    assert alloc.tools_schema == estimate_tools_tokens(tools) > 5
    assert alloc.input_used == alloc.system_prompt + alloc.history + alloc.tools_schema
    assert alloc.input_budget == alloc.context_window - alloc.output_reserve
    assert alloc.input_used_pct == pytest.approx(alloc.input_used / alloc.input_budget)
    assert alloc.headroom == alloc.input_budget - alloc.input_used
    assert set(alloc.to_dict()) == {
        "context_window", "system_prompt", "history", "tools_schema", "output_reserve",
        "input_used", "input_budget", "input_used_pct", "headroom",
    }


def test_window_from_model_when_none():
    alloc = BudgetAllocator().allocate(None, "", [], model="claude-sonnet-4-5")
    assert alloc.context_window == 200_000


def test_precounted_ints_are_accepted():
    alloc = BudgetAllocator().allocate(100_000, 1_000, 50_000, 2_000)
    assert (alloc.system_prompt, alloc.history, alloc.tools_schema) == (1_000, 50_000, 2_000)
    assert alloc.input_used == 53_000


def test_over_budget_gives_negative_headroom():
    alloc = BudgetAllocator().allocate(8_192, 0, 10_000, 0)
    assert alloc.headroom < 0 and alloc.input_used_pct > 1


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [({"reserve_policy": "maybe"}, "reserve_policy"), ({"output_reserve": 0}, "output_reserve"), ({"reserve_fraction": 1.5}, "reserve_fraction")],
)
def test_bad_config_is_rejected(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        BudgetAllocator(**kwargs)


def test_bad_inputs_are_rejected():
    a = BudgetAllocator()
    with pytest.raises(ValueError, match="context_window"):
        a.allocate(0, "", [])
    with pytest.raises(TypeError, match="history"):
        a.allocate(1000, "", "not a list")
    with pytest.raises(ValueError, match="history"):
        a.allocate(1000, "", -5)
    schema = {"type": "function", "function": {"name": "search", "parameters": {}}}
    for bare in (schema, "search", b"search"):  # one schema not in a list would be counted by its keys
        with pytest.raises(TypeError, match="tools must be a list"):
            a.allocate(1000, "", [], bare)
    assert a.allocate(1000, "", [], [schema]).tools_schema > 0


@pytest.mark.parametrize("policy", ["cap", "floor"])
@pytest.mark.parametrize("window", [1, 2, 3, 4, 7])
def test_a_tiny_window_always_leaves_input_room(policy, window):
    alloc = BudgetAllocator(reserve_policy=policy).allocate(window, "", [])
    assert alloc.input_budget >= 1 and alloc.output_reserve >= 0
    assert alloc.input_used_pct == 0.0


def test_the_floor_input_minimum_does_not_follow_the_reserve_fraction():
    # docs/design.md: the input budget never drops below min(8000, 25% of the window)
    a = BudgetAllocator(reserve_policy="floor", reserve_fraction=0.9)
    assert 8_192 - a.reserve_for(8_192) == 2_048
    assert 100_000 - a.reserve_for(100_000) == 10_000  # 90% reserved, 10,000 >= 8,000 left
    assert 40_000 - a.reserve_for(40_000) == 8_000


def test_custom_estimator_is_used():
    a = BudgetAllocator(estimator=Estimator("heuristic"))
    alloc = a.allocate(100_000, "", [{"role": "user", "content": "x" * 3_800}])
    assert alloc.history == 1_000 + 4


@settings(max_examples=200, deadline=None)
@given(
    window=st.integers(min_value=64, max_value=20_000_000),
    base=st.none() | st.integers(min_value=1, max_value=2_000_000),
    policy=st.sampled_from(["cap", "floor"]),
)
def test_reserve_properties(window, base, policy):
    reserve = BudgetAllocator(output_reserve=base, reserve_policy=policy).reserve_for(window)
    assert 0 < reserve < window
    if policy == "cap":
        assert reserve <= max(window // 4, min(1_024, window // 2))
        assert reserve >= min(1_024, window // 2)
    else:
        assert window - reserve >= min(8_000, window // 4)
        assert reserve >= min(window // 4, window - min(8_000, window // 4))
