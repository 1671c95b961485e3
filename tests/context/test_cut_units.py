"""Thinking units and the cut: the kept head is a whole unit, and a
tool loop that thought once and outgrew every budget is cut inside, its first tool group
(the one carrying the thinking block) pinned so the request still carries the thinking."""

from __future__ import annotations

from _compaction_fixtures import (
    HistoryBuilder,
    assert_anthropic_request_accepted,
    assert_pairs_intact,
    char_tokens,
    compacted_branch,
    first_group_end,
    unit_inside,
    unit_spans,
)

from opctx.context.anthropic_messages import to_anthropic_request
from opctx.context.summarize import SummarizerConfig, find_cut_index

MODELS = ("claude-sonnet-4-5", "claude-opus-4-5")


def _request_after(history: list[dict], cut, model: str) -> dict:
    return to_anthropic_request(compacted_branch(history, cut), "Be careful.", model=model)


def _long_loop_that_thought_once() -> tuple[list[dict], int, int]:
    """Three opening messages, the task, then one thinking turn and a 60-call loop of 1,500
    tokens a result (with display-only lines): (history, task index, first group index)."""
    h = HistoryBuilder()
    h.user("a")
    h.answer("b")
    h.user("c")
    task = h.user("port the whole module")
    first = h.loop(60, size=1_500, think="first", display=True)[0]
    return h.messages, task, first


def test_the_head_is_extended_to_the_end_of_its_thinking_unit() -> None:
    # protect_first_n=3 ends after the first tool group of a loop that thought once: the
    # fold must not begin in the middle of that loop, so the head takes the whole unit
    h = HistoryBuilder()
    h.user("set up the project")
    h.loop(3, size=300, think="first")
    h.answer("set up")
    h.chat(20, size=400)
    history = h.messages
    unit = unit_spans(history)[0]
    assert unit_inside(history, 3) == unit  # the head as configured splits it
    cut = find_cut_index(history, 32_000, SummarizerConfig(protect_first_n=3), estimate=char_tokens)
    assert cut.ok, cut.reason
    assert cut.protected_head == unit[1]
    assert any("thinking unit" in s and s.startswith("5:") for s in cut.steps), cut.steps
    assert unit_inside(history, cut.protected_head) is None
    for model in MODELS:
        assert_anthropic_request_accepted(_request_after(history, cut, model))


def test_a_head_inside_an_oversized_unit_keeps_the_unit_s_first_group() -> None:
    # the head's unit goes on far past the ceiling: keeping it whole in the head would keep
    # everything; the head keeps the first group (with the thinking block), the rest is cut
    # as a unit larger than the budget (the documented exception)
    h = HistoryBuilder()
    h.user("migrate every table")
    first = h.loop(50, size=1_000, think="first")[0]
    history = h.messages
    cut = find_cut_index(history, 200_000, SummarizerConfig(protect_first_n=3), 8_000, estimate=char_tokens)
    assert cut.ok, cut.reason
    assert cut.protected_head == first_group_end(history, first) == 3
    assert any("over the ceiling" in s and s.startswith("5:") for s in cut.steps), cut.steps
    assert cut.pinned == ()  # the thinking is in the head already
    assert cut.tail_tokens <= 8_000 + 1_100
    assert_pairs_intact(compacted_branch(history, cut))
    for model in MODELS:
        running = assert_anthropic_request_accepted(_request_after(history, cut, model))
        assert running[0]["type"] == "thinking"
        assert running[0]["signature"] == f"sig-{history[first]['id']}"


def test_a_long_tool_loop_that_thought_once_is_cut_inside_with_its_thinking_pinned() -> None:
    # one thinking turn, then a loop far larger than the keep
    # budget. No boundary outside the unit fits, and cutting at its start keeps all of it;
    # the cut goes inside the loop and pins the first group, which carries the thinking block
    history, task, first = _long_loop_that_thought_once()
    cut = find_cut_index(history, 200_000, SummarizerConfig(protect_first_n=3), 8_000, estimate=char_tokens)
    assert cut.ok, cut.reason
    group = tuple(range(first, first_group_end(history, first)))
    assert cut.pinned == (task, *group)
    assert unit_inside(history, cut.index) == unit_spans(history)[0]  # inside, by design
    assert any("thinking unit" in s and s.startswith("6:") for s in cut.steps), cut.steps
    pinned_tokens = sum(char_tokens(history[i]) for i in cut.pinned)
    assert cut.tail_tokens - pinned_tokens <= 8_000
    branch = compacted_branch(history, cut)
    assert_pairs_intact(branch)
    for model in MODELS:
        request = _request_after(history, cut, model)
        running = assert_anthropic_request_accepted(request)
        # the unfinished loop's assistant turn starts with the thinking block, unmodified
        assert running[0] is history[first]["thinking"][0]


def test_the_pinned_group_follows_a_request_inside_the_head() -> None:
    h = HistoryBuilder()
    h.user("a")
    h.answer("b")
    h.user("c")
    h.user("port the whole module")
    first = h.loop(60, size=1_500, think="first")[0]
    history = h.messages
    cut = find_cut_index(history, 200_000, SummarizerConfig(protect_first_n=4), 8_000, estimate=char_tokens)
    assert cut.ok, cut.reason
    assert cut.protected_head == 4
    assert cut.pinned == tuple(range(first, first_group_end(history, first)))
    assert_anthropic_request_accepted(_request_after(history, cut, "claude-sonnet-4-5"))


def test_an_anthropic_shaped_parallel_loop_is_cut_inside_too() -> None:
    h = HistoryBuilder()
    h.user("a")
    h.answer("b")
    h.user("c")
    task = h.user("audit every file")
    first = h.group("read", "grep", size=400, thinking=True, anthropic=True, display=True)
    for _ in range(40):
        h.group("read", "grep", size=400, anthropic=True, display=True)
    history = h.messages
    cut = find_cut_index(history, 200_000, SummarizerConfig(protect_first_n=3), 8_000, estimate=char_tokens)
    assert cut.ok, cut.reason
    assert cut.pinned == (task, *range(first, first_group_end(history, first)))
    running = assert_anthropic_request_accepted(_request_after(history, cut, "claude-opus-4-5"))
    assert running[0]["type"] == "thinking"


def test_a_unit_that_fits_is_never_cut_inside() -> None:
    # the same loop, but small enough to keep: the tail starts at the unit, nothing is pinned
    # but the request the pinning rule already keeps
    h = HistoryBuilder()
    h.chat(30, size=400)
    h.user("one more thing")
    h.loop(6, size=500, think="first")
    history = h.messages
    cut = find_cut_index(history, 200_000, SummarizerConfig(protect_first_n=3), 8_000, estimate=char_tokens)
    assert cut.ok
    assert unit_inside(history, cut.index) is None
    assert all(history[i]["role"] == "user" for i in cut.pinned)


def test_the_engine_compacts_a_long_loop_into_a_request_anthropic_accepts() -> None:
    # the whole path: the engine cuts, persistence copies the pinned group after the summary,
    # and the request built from the new branch opens the unfinished loop with its thinking
    from opctx.context.engine import DefaultContextEngine
    from opctx.context.summarize import Summarizer
    from opctx.context.tokens import Estimator
    from opctx.dag.session_db import DagSessionDB

    history, task, first = _long_loop_that_thought_once()
    db = DagSessionDB(":memory:")
    sid = db.create_session(title="long loop")
    db.append_messages(sid, history)
    config = SummarizerConfig()
    estimator = Estimator("heuristic")
    engine = DefaultContextEngine(
        session_db=db, context_window=200_000, estimator=estimator, config=config,
        summarizer=Summarizer(None, config=config, count_tokens=estimator.text_tokens),
    )
    res = engine.compact(None, sid, None, user_initiated=True, keep_recent_tokens=8_000)
    assert res.ok, res.error
    after = db.get_branch(sid)
    summary = after[res.protected_count]
    group = [m["id"] for m in history[first : first_group_end(history, first)]]
    assert summary["compaction"]["pinned_ids"] == [history[task]["id"], *group]
    assert [m["copied_from"] for m in after[res.protected_count + 1 :][: 1 + len(group)]] == [
        history[task]["id"], *group]
    assert_pairs_intact(after)
    for model in MODELS:
        running = assert_anthropic_request_accepted(to_anthropic_request(after, "Be careful.", model=model))
        assert running[0] == history[first]["thinking"][0]  # the stored block, signature intact
    assert sum(1 for m in after if m.get("thinking")) == 1
