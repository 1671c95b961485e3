"""Thinking clearing (Anthropic's clear_thinking_20251015) as the engine runs it: which thinking
goes, what stays untouched, and how its savings are counted for each model class."""

from __future__ import annotations

import copy

import pytest

from opctx import CompactionPolicy
from opctx.context.anthropic_messages import to_anthropic_request
from opctx.context.engine import DefaultContextEngine
from opctx.context.thinking_clearing import ThinkingClearer, thinking_clearer_for


def _think(text: str) -> dict:
    return {"type": "thinking", "thinking": f"{text} " * 120, "signature": f"sig-{text}"}


def _history() -> list[dict]:
    """Three turns: a tool loop whose call carries thinking (blocks in the content, as an
    Anthropic transcript has them), a thinking-only message, and a redacted block."""
    return [
        {"role": "system", "content": "You are an agent.", "id": "s"},
        {"role": "user", "content": "first", "id": "u0"},
        {"role": "assistant", "id": "a0", "content": [
            _think("plan0"), {"type": "tool_use", "id": "c0", "name": "ls", "input": {"path": "."}}]},
        {"role": "user", "id": "r0", "content": [{"type": "tool_result", "tool_use_id": "c0", "content": "a.py"}]},
        {"role": "assistant", "content": "listed", "id": "a0b", "thinking": [_think("sum0")]},
        {"role": "user", "content": "second", "id": "u1"},
        {"role": "assistant", "content": "", "id": "a1", "thinking": [_think("only")]},
        {"role": "assistant", "content": "ok", "id": "a1b",
         "thinking": [{"type": "redacted_thinking", "data": "opaque"}]},
        {"role": "user", "content": "third", "id": "u2"},
        {"role": "assistant", "content": "", "id": "a2", "thinking": [_think("plan2")],
         "tool_calls": [{"id": "c2", "name": "cat", "arguments": {"path": "a.py"}}]},
        {"role": "tool", "tool_call_id": "c2", "name": "cat", "content": "print(1)", "id": "r2"},
    ]


def _has_thinking(msg: dict) -> bool:
    blocks = msg.get("content") if isinstance(msg.get("content"), list) else []
    return bool(msg.get("thinking")) or any(b.get("type") in ("thinking", "redacted_thinking") for b in blocks)


@pytest.mark.parametrize("keep, kept", [(1, {"a2"}), (2, {"a1", "a1b", "a2"}), (3, {"a0", "a0b", "a1", "a1b", "a2"})])
def test_only_the_last_turns_keep_their_thinking(keep, kept):
    history = _history()
    before = copy.deepcopy(history)
    aged, report = ThinkingClearer(keep).age(history)
    assert history == before  # the input (the store's messages) is never modified
    assert {m["id"] for m in aged if _has_thinking(m)} == kept
    assert report.thinking_cleared == 5 - len(kept) and report.redacted == 0
    for old, new in zip(history, aged, strict=True):
        # everything but thinking is as it was: calls, results, texts, ids
        strip = lambda m: {k: ([b for b in v if b.get("type") not in ("thinking", "redacted_thinking")]  # noqa: E731
                               if k == "content" and isinstance(v, list) else v)
                           for k, v in m.items() if k not in ("thinking", "_thinking_cleared")}
        assert strip(old) == strip(new)
        assert (new is old) == (old["id"] in kept or not _has_thinking(old))


def test_a_cleared_message_is_the_same_copy_in_every_request():
    clearer = ThinkingClearer(1)
    history = _history()
    first, _ = clearer.age(history)
    again, _ = clearer.age(copy.deepcopy(history))  # the branch re-read from the store: equal copies
    assert all(a is b for a, b in zip(first, again, strict=True) if a.get("_thinking_cleared"))
    grown, _ = clearer.age(history + [{"role": "assistant", "content": "printed", "id": "a2b"},
                                      {"role": "user", "content": "fourth", "id": "u3"}])
    # a new request: the running turn is the fourth, so the third turn's thinking goes too
    assert not any(_has_thinking(m) for m in grown)


def test_the_request_keeps_its_pairs_and_the_running_loop_its_thinking():
    aged, _ = ThinkingClearer(1).age(_history())
    request = to_anthropic_request(aged, model="claude-opus-4-5-20251101")
    kinds = [[b["type"] for b in m["content"]] for m in request["messages"]]
    assert kinds[-2:] == [["thinking", "tool_use"], ["tool_result"]]
    assert sum(k.count("tool_use") for k in kinds) == sum(k.count("tool_result") for k in kinds) == 2


def test_off_unless_the_policy_asks():
    assert thinking_clearer_for(CompactionPolicy()) is None
    assert DefaultContextEngine(policy=CompactionPolicy()).thinking_clearer is None
    assert thinking_clearer_for(CompactionPolicy().replace(**{"aging.keep_thinking_turns": 2})).keep_turns == 2
    with pytest.raises(ValueError, match="keep_turns must be a positive int"):
        ThinkingClearer(0)


@pytest.mark.parametrize("model, saves", [("claude-opus-4-5-20251101", True), ("claude-sonnet-4-5-20250929", False)])
def test_savings_count_only_thinking_the_model_holds(model, saves):
    policy = CompactionPolicy().replace(**{"aging.kind": "none", "budget.context_window": 200_000})
    plain = DefaultContextEngine(policy=policy).prepare(None, "s", _history(), model, None)
    clearing = DefaultContextEngine(policy=policy.replace(**{"aging.keep_thinking_turns": 1}))
    prep = clearing.prepare(None, "s", _history(), model, None)
    assert (prep.budget.history < plain.budget.history) == saves
    assert (prep.tokens_freed_by_aging > 0) == saves
    if not saves:  # the model drops that thinking anyway: the figure is the same, not lower
        assert prep.budget.history == plain.budget.history
    assert clearing.thinking_clearer.acted == saves
    assert "aging:thinking_cleared=4" in prep.decision_path and prep.tool_results_redacted == 0
