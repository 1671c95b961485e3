"""Property tests: whatever the history, a compaction never breaks the conversation.

Random histories mix plain turns, single and parallel tool calls (OpenAI and
Anthropic shapes), tool errors, CJK text and huge tool outputs. After ANY
compaction (random window, keep override, protected head/tail sizes):

* the active branch has no orphaned tool call or result and no split parallel group;
* the protected head is kept verbatim, first, followed by the summary node;
* the latest user request is on the new branch (in the tail, or pinned right after the
  summary when the tail starts inside an autonomous run);
* every original node is still in the store, unchanged;
* a compaction that could not run changed nothing.
"""

from __future__ import annotations

import itertools

from _compaction_fixtures import (
    assert_anthropic_request_accepted,
    assert_pairs_intact,
    assert_units_whole,
    filler,
    first_group_end,
    thinking_histories,
    unit_spans,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from opctx.context.anthropic_messages import to_anthropic_request
from opctx.context.engine import DefaultContextEngine
from opctx.context.summarize import Summarizer, SummarizerConfig
from opctx.context.tokens import Estimator
from opctx.dag.messages import is_tool_result
from opctx.dag.session_db import DagSessionDB

HEURISTIC = Estimator("heuristic")
CJK = "数据库结构迁移需要保留用户的表和索引"
_ids = itertools.count()


def text_of(kind: str, size: int) -> str:
    if kind == "cjk":
        return (CJK * (size // len(CJK) + 1))[: max(1, size)]
    if kind == "mixed":
        return filler(size // 2, "混合 text ") + CJK[: size // 4]
    return filler(max(1, size))


tool_round = st.fixed_dictionaries(
    {
        "parallel": st.integers(1, 3),
        "anthropic": st.booleans(),
        "sizes": st.lists(st.sampled_from([10, 200, 1_500, 6_000, 30_000]), min_size=3, max_size=3),
        "errors": st.lists(st.booleans(), min_size=3, max_size=3),
        "text": st.booleans(),
    }
)
turn = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["ascii", "cjk", "mixed"]),
        "size": st.integers(5, 1_500),
        "rounds": st.lists(tool_round, max_size=3),
        "final": st.booleans(),
    }
)


def build(turns: list[dict]) -> list[dict]:
    msgs: list[dict] = []
    for t in turns:
        msgs.append({"role": "user", "content": text_of(t["kind"], t["size"])})
        for r in t["rounds"]:
            n = r["parallel"]
            ids = [f"call_{next(_ids)}" for _ in range(n)]
            content = "let me check" if r["text"] else ""
            if r["anthropic"]:
                msgs.append({
                    "role": "assistant",
                    "content": content,
                    "extra": {"blocks": [{"type": "tool_use", "id": i, "name": "grep", "input": {"q": "x"}} for i in ids]},
                })
                msgs.append({
                    "role": "user",
                    "content": "",
                    "extra": {"blocks": [
                        {"type": "tool_result", "tool_use_id": i, "content": text_of("ascii", r["sizes"][k] * 4),
                         "is_error": r["errors"][k]}
                        for k, i in enumerate(ids)
                    ]},
                })
            else:
                msgs.append({
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [{"id": i, "name": "read", "arguments": {"path": f"/src/{i}.py"}} for i in ids],
                })
                for k, i in enumerate(ids):
                    msgs.append({
                        "role": "tool", "name": "read", "tool_call_id": i, "is_error": r["errors"][k],
                        # CJK output is kept short: the store's FTS segmentation of CJK text is
                        # slow enough to dominate the test; huge outputs are ASCII
                        "content": ("Error: " if r["errors"][k] else "")
                        + text_of(t["kind"] if r["sizes"][k] <= 200 else "ascii", r["sizes"][k] * 3),
                    })
        if t["final"]:
            msgs.append({"role": "assistant", "content": text_of(t["kind"], t["size"] // 2 + 5)})
    return msgs


def latest_request(branch: list[dict]) -> dict | None:
    users = [m for m in branch if m["role"] == "user" and not is_tool_result(m)]
    return users[-1] if users else None


def summary_call(messages, model, system, tools):
    return "## User intent\nproperty-test summary"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    turns=st.lists(turn, min_size=1, max_size=14),
    window=st.sampled_from([8_000, 32_000, 64_000, 200_000]),
    keep=st.one_of(st.none(), st.integers(0, 20_000)),
    protect_first=st.integers(0, 5),
    protect_last=st.integers(0, 25),
    llm_summary=st.booleans(),
    twice=st.booleans(),
)
def test_any_compaction_keeps_the_conversation_valid(
    turns, window, keep, protect_first, protect_last, llm_summary, twice
) -> None:
    db = DagSessionDB(":memory:")
    sid = db.create_session(title="prop")
    db.append_messages(sid, build(turns))
    config = SummarizerConfig(protect_first_n=protect_first, protect_last_n=protect_last)
    engine = DefaultContextEngine(
        session_db=db,
        context_window=window,
        estimator=HEURISTIC,
        config=config,
        summarizer=Summarizer(summary_call if llm_summary else None, config=config, count_tokens=HEURISTIC.text_tokens),
    )
    for _round in range(2 if twice else 1):
        before = db.get_branch(sid)
        snapshot = {m["id"]: m for m in db.get_messages(sid)}
        res = engine.compact(None, sid, None, user_initiated=True, keep_recent_tokens=keep)
        after = db.get_branch(sid)
        for mid, original in snapshot.items():
            assert db.get_message(sid, mid) == original, "an existing node changed"
        event("compacted" if res.ok else "not compacted")
        if not res.ok:
            assert [m["id"] for m in after] == [m["id"] for m in before]
            assert res.error
            break
        p = res.protected_count
        assert_pairs_intact(after)
        # protected head verbatim, then the summary, then the kept tail
        assert after[0]["parent_id"] is None
        for copy_, orig in zip(after[:p], before[:p], strict=True):
            assert copy_["copied_from"] == orig["id"]
            assert {k: v for k, v in copy_.items() if k not in ("id", "parent_id", "copied_from")} == {
                k: v for k, v in orig.items() if k not in ("id", "parent_id", "copied_from")
            }
        summary = after[p]
        assert summary["type"] == "compactionSummary" and summary["id"] == res.summary_id
        kept = after[p + 1 :]
        # a pinned request (an autonomous run's task) is copied first, ahead of the tail
        # (these histories have no thinking units, so nothing else is pinned)
        pinned = summary["compaction"].get("pinned_ids", [])
        assert all(m["role"] == "user" for m in before if m["id"] in pinned)
        assert [m["copied_from"] for m in kept] == pinned + [m["id"] for m in before[res.cut_index :]]
        assert summary["compaction"]["folded_ids"] == [
            m["id"] for m in before[p : res.cut_index] if m["id"] not in pinned
        ]
        # the latest user request survives, on the new branch
        request = latest_request(before)
        if request is not None:
            on_branch = {m.get("copied_from") for m in after}
            assert request["id"] in on_branch
        # a structural summary lists every folded message
        if res.fell_back_to_structural:
            assert summary["content"].count("\n[") >= len(summary["compaction"]["folded_ids"])
        if twice:
            db.append_messages(sid, build(turns[:3]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    history=thinking_histories(),
    window=st.sampled_from([8_000, 32_000, 200_000]),
    keep=st.one_of(st.none(), st.integers(0, 12_000)),
    protect_first=st.integers(0, 4),
)
def test_compaction_keeps_thinking_units_and_a_request_anthropic_accepts(history, window, keep, protect_first) -> None:
    """After any compaction of a history with thinking units, every kept
    loop keeps the message with its thinking (a unit cut inside keeps its first tool group,
    pinned), and the Anthropic request built from the new branch keeps every tool_result
    next to its tool_use."""
    db = DagSessionDB(":memory:")
    sid = db.create_session(title="units")
    db.append_messages(sid, history)
    config = SummarizerConfig(protect_first_n=protect_first, protect_last_n=2)
    engine = DefaultContextEngine(
        session_db=db, context_window=window, estimator=HEURISTIC, config=config,
        summarizer=Summarizer(None, config=config, count_tokens=HEURISTIC.text_tokens),
    )
    before = db.get_branch(sid)
    res = engine.compact(None, sid, None, user_initiated=True, keep_recent_tokens=keep)
    event("compacted" if res.ok else "not compacted")
    if not res.ok:
        return
    after = db.get_branch(sid)
    assert_pairs_intact(after)
    position = {m["id"]: i for i, m in enumerate(before)}
    kept = {position[m["copied_from"]] for m in after if m.get("copied_from") in position}
    assert_units_whole(before, kept)
    pinned = after[res.protected_count]["compaction"].get("pinned_ids", [])
    groups = {i for s, _e in unit_spans(before) for i in range(s, first_group_end(before, s))}
    for mid in pinned:  # a pin is the latest request or part of a unit's first tool group
        assert before[position[mid]]["role"] == "user" or position[mid] in groups
    if any(position[mid] in groups for mid in pinned):
        event("a unit's first group pinned")
    for model in ("claude-sonnet-4-5", "claude-opus-4-5"):
        assert_anthropic_request_accepted(to_anthropic_request(after, model=model))
