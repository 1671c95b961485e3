"""find_cut_index: the six steps of §4.2 and the docs/design.md invariants."""

from __future__ import annotations

import pytest
from _compaction_fixtures import (
    HistoryBuilder,
    anthropic_call,
    anthropic_result,
    assert_anthropic_request_accepted,
    assert_pairs_intact,
    assert_units_whole,
    assistant,
    call,
    char_tokens,
    chat_turns,
    compacted_branch,
    filler,
    first_group_end,
    latest_user_index,
    results,
    thinking_histories,
    tool_loop,
    tool_turn,
    uid,
    unit_inside,
    user,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.anthropic_messages import to_anthropic_request
from opctx.context.summarize import MessageFacts, SummarizerConfig, find_cut_index, keep_budget
from opctx.dag.messages import tool_result_ids, tool_use_ids

# §4.2 table: window -> (desired_keep, max_safe_keep, effective_keep)
WINDOW_TABLE = [
    (8_000, 8_000, 6_000, 6_000),
    (32_000, 8_000, 24_000, 8_000),
    (64_000, 8_000, 56_000, 8_000),
    (200_000, 20_000, 192_000, 20_000),
    (272_000, 27_200, 264_000, 27_200),
    (1_000_000, 40_000, 992_000, 40_000),
]


@pytest.mark.parametrize(("window", "desired", "max_safe", "effective"), WINDOW_TABLE)
def test_window_table(window: int, desired: int, max_safe: int, effective: int) -> None:
    assert keep_budget(window) == (desired, max_safe, effective)
    cut = find_cut_index(chat_turns(3), window, estimate=char_tokens)
    assert (cut.desired_keep, cut.max_safe_keep, cut.effective_keep) == (desired, max_safe, effective)


@pytest.mark.parametrize(("window", "desired", "max_safe", "effective"), WINDOW_TABLE)
def test_kept_tail_meets_effective_keep(window: int, desired: int, max_safe: int, effective: int) -> None:
    # 500-token messages: the gate closes within a few messages of `effective`
    history = chat_turns(400, size=500)
    cfg = SummarizerConfig(protect_last_n=0)
    cut = find_cut_index(history, window, cfg, estimate=char_tokens)
    assert cut.ok
    assert history[cut.index]["role"] == "user"
    # step 3 closes both gates; the spec's forward snap to the next user message may then
    # give back the one assistant message in front of it, never more
    assert any(s.startswith("3:gates met") for s in cut.steps)
    assert effective - 600 <= cut.tail_tokens < effective + 2 * 600
    assert cut.tail_text_messages >= cfg.keep_min_messages - 1


def test_keep_recent_tokens_override_skips_ratio_and_clamp() -> None:
    history = chat_turns(100, size=500)
    cut = find_cut_index(history, 200_000, SummarizerConfig(protect_last_n=0), 3_000, estimate=char_tokens)
    assert cut.effective_keep == 3_000  # not clamped up to keep_min_tokens (8,000)
    assert 3_000 <= cut.tail_tokens < 3_000 + 2 * 600
    assert cut.steps[0].startswith("1-2:override")
    with pytest.raises(ValueError, match="keep_recent_tokens"):
        find_cut_index(history, 200_000, keep_recent_tokens=-1, estimate=char_tokens)


def test_text_block_gate_stops_one_huge_tool_result_from_being_the_tail() -> None:
    history = chat_turns(20, size=100)
    c = call("grep")
    history += [user("search it"), c, *results(c, 30_000), assistant("found it")]
    cut = find_cut_index(history, 200_000, SummarizerConfig(protect_last_n=0), estimate=char_tokens)
    # tokens alone were met by the single 30K result; the gate still walked back to 5 text
    # messages (the forward snap may give back the assistant message before a user one)
    assert "text=5" in next(s for s in cut.steps if s.startswith("3:"))
    assert cut.tail_text_messages >= 4
    assert cut.index < len(history) - 4


def test_protect_last_n_is_a_floor_of_the_tail() -> None:
    history = chat_turns(60, size=10)  # tiny messages: the token gate is never met
    cut = find_cut_index(history, 32_000, SummarizerConfig(), estimate=char_tokens)
    assert not cut.ok  # 120 tiny messages fit the 8K keep budget entirely
    cut = find_cut_index(history, 32_000, SummarizerConfig(), 100, estimate=char_tokens)
    assert cut.ok
    assert len(history) - cut.index >= 20 or "4:protect_last_n floor" in " ".join(cut.steps)


def test_protect_last_n_floor_is_bounded_by_the_token_ceiling() -> None:
    history = chat_turns(5, size=100)
    for _ in range(10):
        history += tool_turn(tool_size=5_000)
    cfg = SummarizerConfig()
    cut = find_cut_index(history, 32_000, cfg, estimate=char_tokens, max_tail_tokens=12_000)
    assert cut.ok
    assert any("moved to" in s for s in cut.steps)
    assert cut.tail_tokens <= 12_000 + 5_100  # one tool group may straddle the ceiling


def test_snap_never_moves_forward_past_the_floor_or_latest_user() -> None:
    # the latest user message opens a long autonomous run of 30 tool rounds
    history = chat_turns(30, size=300)
    history.append(user("now refactor everything"))
    history += tool_loop(30, 20, names=("edit",))
    last = latest_user_index(history)
    cfg = SummarizerConfig(protect_last_n=20)
    cut = find_cut_index(history, 32_000, cfg, estimate=char_tokens)
    assert cut.ok
    assert cut.index <= last  # the request stays in the tail
    assert cut.index <= len(history) - 20
    assert history[cut.index]["role"] == "user"


def test_backward_snap_when_forward_would_cross_the_floor() -> None:
    history = chat_turns(40, size=200)
    history.append(user("long task"))
    history += tool_loop(12, 1_000, text="running the next step")  # the token gate closes inside this run
    cut = find_cut_index(history, 32_000, SummarizerConfig(protect_last_n=5), estimate=char_tokens)
    assert cut.ok
    assert cut.index == latest_user_index(history)
    assert any("snapped backward" in s for s in cut.steps)


def test_parallel_tool_calls_are_never_split() -> None:
    history = chat_turns(10, size=300)
    for _ in range(30):
        history += tool_turn(tool_size=300, parallel=3)
    for window in (8_000, 32_000, 64_000):
        for keep in (None, 500, 1_000, 2_345, 5_000):
            cut = find_cut_index(history, window, SummarizerConfig(protect_last_n=3), keep, estimate=char_tokens)
            assert cut.ok
            head, tail = history[: cut.protected_head], history[cut.index :]
            assert_pairs_intact(head + tail)


def test_head_extends_to_keep_its_tool_group_whole() -> None:
    c = call("read", "list")
    history = [user("start"), c, *results(c, 50), assistant("ok")] + chat_turns(30, size=400)
    cut = find_cut_index(history, 32_000, SummarizerConfig(protect_first_n=2), estimate=char_tokens)
    assert cut.protected_head == 4  # user, call, two results
    assert any("head extended" in s for s in cut.steps)


def test_the_head_reaches_the_initial_request_when_asked() -> None:
    """A history that opens with a system message: protect_first_n 1 keeps only that, unless
    keep_initial_request takes the head on to the task (OpenHands' conversation memory)."""
    from opctx.context.summarize import counted_cut

    history = [{"role": "system", "content": "You are OpenHands."}, user("fix the failing test")]
    history += chat_turns(30, size=400)
    for keep_initial in (False, True):
        config = SummarizerConfig(protect_first_n=1, keep_initial_request=keep_initial)
        cut = find_cut_index(history, 32_000, config, estimate=char_tokens)
        counted = counted_cut(history, MessageFacts(char_tokens), ("messages", 10), 1,
                              keep_initial_request=keep_initial)
        for point in (cut, counted):
            assert point.ok and point.protected_head == (2 if keep_initial else 1)
            assert any("initial request" in s for s in point.steps) == keep_initial
    # a history that opens with the request: nothing to extend
    plain = history[1:]
    cut = counted_cut(plain, MessageFacts(char_tokens), ("messages", 10), 1, keep_initial_request=True)
    assert cut.protected_head == 1 and not any("initial request" in s for s in cut.steps)


def test_a_count_keep_folds_at_least_what_it_is_told() -> None:
    """The OpenHands SDK condenser past its token limit: the tail the count keeps is cut down
    until the folded range holds the reduction, at the next boundary after the point (a
    tool pair stays whole)."""
    from opctx.context.summarize import counted_cut

    history = [user("fix the failing test")]
    for _ in range(30):
        history += tool_turn(tool_size=400)
    facts = MessageFacts(char_tokens)
    plain = counted_cut(history, facts, ("messages", 40), 1)
    assert plain.ok and plain.index == len(history) - 40
    table = facts.table(history)
    moved = 0
    for goal in (100, 9_000, 11_000):  # the count alone folds about 8,600
        cut = counted_cut(history, facts, ("messages", 40), 1, fold_at_least=goal)
        moved += cut.index > plain.index
        folded = table.prefix_tokens[cut.index] - table.prefix_tokens[cut.protected_head]
        assert cut.ok and cut.index >= plain.index and table.tail_may_start(cut.index)
        if cut.index > plain.index:
            assert folded >= goal and any("fold at least" in s for s in cut.steps)
            # the boundary before it would not fold enough
            assert table.prefix_tokens[cut.index - 1] - table.prefix_tokens[cut.protected_head] < goal \
                or not table.tail_may_start(cut.index - 1)
        assert_pairs_intact(history[cut.index:])
    assert moved == 2
    # more than the whole range: everything after the head is folded
    assert counted_cut(history, facts, ("messages", 40), 1, fold_at_least=10**9).index == len(history)


def test_anthropic_shaped_tool_traffic() -> None:
    history = chat_turns(10, size=500)
    for _ in range(20):
        c = anthropic_call("search")
        history += [user("look"), c, anthropic_result(c, 800), assistant("seen")]
    cut = find_cut_index(history, 32_000, SummarizerConfig(protect_last_n=2), estimate=char_tokens)
    assert cut.ok
    assert_pairs_intact(history[: cut.protected_head] + history[cut.index :])
    # a tool-result wrapper is not a user request: the tail starts at a real one
    assert history[cut.index]["content"] == "look"


def test_reused_call_ids_pair_with_the_nearest_call() -> None:
    history = chat_turns(5, size=500)
    for i in range(20):
        c = call("step")
        c["tool_calls"][0]["id"] = "call_0"  # some local models reuse ids every turn
        r = results(c, 300)
        history += [user(f"go {i}"), c, *r, assistant("next")]
    cut = find_cut_index(history, 32_000, SummarizerConfig(protect_last_n=2), estimate=char_tokens)
    assert cut.ok
    assert history[cut.index]["role"] == "user"


def test_autonomous_run_cuts_at_a_tool_group_boundary() -> None:
    history = [user("do the whole migration"), assistant("starting")]
    history += tool_loop(80, 400, names=("migrate",))
    cut = find_cut_index(history, 32_000, SummarizerConfig(protect_first_n=2, protect_last_n=4), estimate=char_tokens)
    assert cut.ok
    assert history[cut.index]["role"] == "assistant"  # no later user request exists
    assert any("tool-group boundary" in s for s in cut.steps)
    assert_pairs_intact(history[:2] + history[cut.index :])


def test_nothing_can_be_cut_returns_a_reason() -> None:
    assert not find_cut_index([], 32_000, estimate=char_tokens).ok
    short = chat_turns(2)
    cut = find_cut_index(short, 32_000, estimate=char_tokens)
    assert not cut.ok
    assert "nothing to fold" in cut.reason
    # after the head, the latest request and one tool group larger than the keep budget:
    # no boundary lies between them, so nothing can be folded
    c = call("x", "y")
    history = [user("a"), assistant("b"), user("c"), user("the real task"), c, *results(c, 6_000)]
    cut = find_cut_index(history, 8_000, SummarizerConfig(protect_first_n=3), estimate=char_tokens)
    assert not cut.ok
    assert "nothing can be folded" in cut.reason


def test_orphaned_results_in_the_input_do_not_block_the_cut() -> None:
    history = chat_turns(30, size=400)
    history.insert(5, {"id": "t_orphan", "role": "tool", "tool_call_id": "missing", "content": "?"})
    cut = find_cut_index(history, 32_000, SummarizerConfig(protect_last_n=2), estimate=char_tokens)
    assert cut.ok


def _counting(calls: list[str]):
    """``char_tokens`` that records the id of every message it estimates."""

    def counting(msg: dict) -> int:
        calls.append(msg["id"])
        return char_tokens(msg)

    return counting


def test_facts_cache_is_incremental_on_append() -> None:
    calls: list[str] = []
    facts = MessageFacts(_counting(calls))
    history = chat_turns(50, size=100)
    find_cut_index(history, 32_000, facts=facts)
    assert len(calls) == 100
    history += chat_turns(1, size=100)
    find_cut_index(history, 32_000, facts=facts)
    assert len(calls) == 102  # only the two new messages were estimated
    # the same history re-read as new dicts (same ids): reused by key, no estimate
    find_cut_index([dict(m) for m in history], 32_000, facts=facts)
    assert len(calls) == 102


def test_facts_of_a_message_updated_under_its_id_are_recomputed() -> None:
    # GraphStore.update keeps a node's id; an edit of the same length must not be served stale
    facts = MessageFacts()  # the default, character-class-aware estimate
    history = chat_turns(5, size=100)
    before = facts.table(history).total_tokens
    edited = dict(history[3], content="中" * len(history[3]["content"]))
    assert len(edited["content"]) == len(history[3]["content"]) and edited["id"] == history[3]["id"]
    changed = history[:3] + [edited] + history[4:]
    expected = MessageFacts().table(changed).total_tokens
    assert expected > before
    assert facts.table(changed).total_tokens == expected
    # the per-message cache too, through a history it did not see last
    fresh = MessageFacts()
    fresh.table(history)
    fresh.table(history[:1])
    assert fresh.table(changed).total_tokens == expected


def test_facts_of_a_compaction_copy_come_from_its_original_unless_it_differs() -> None:
    from opctx.context.persistence import copy_message

    calls: list[str] = []
    facts = MessageFacts(_counting(calls))
    history = chat_turns(10, size=100)
    facts.table(history)
    assert len(calls) == 20
    copies = [copy_message(m, None) for m in history[10:]]
    facts.table(history[:2] + copies)
    assert len(calls) == 20  # a copy differs from its original only in identity: no estimate
    assert [facts.get(c) for c in copies] == [facts.get(m) for m in history[10:]]
    edited = dict(copies[0], content="x" * len(copies[0]["content"]), id="k_edited")
    facts.get(edited)
    assert calls[-1] == "k_edited"  # same size, other content: estimated


def test_a_probe_table_takes_cached_facts_and_keeps_nothing() -> None:
    # a compaction's predicted branch: the kept messages as they are, one aged copy, the
    # summary (no id); counted as a fresh cache would, estimating only what is new
    calls: list[str | None] = []

    def counting(msg: dict) -> int:
        calls.append(msg.get("id"))
        return char_tokens(msg)

    facts = MessageFacts(counting)
    history = chat_turns(10, size=100)
    table = facts.table(history)
    seen = len(calls)
    aged = dict(history[4], content="[cleared]")
    summary = {"role": "system", "content": "[Previous conversation summary]\nS"}
    layout = history[:1] + [summary] + history[3:4] + [aged] + history[5:]
    probe = facts.probe_table(layout)
    assert probe.prefix_tokens == MessageFacts(char_tokens).table(layout).prefix_tokens
    assert probe.users == MessageFacts(char_tokens).table(layout).users
    assert sorted(calls[seen:], key=str) == sorted([None, aged["id"]], key=str)
    # nothing kept: the aged copy did not displace its original, the last table stands
    assert facts.get(history[4]) == table.facts[4] and len(calls) == seen + 2
    assert facts.table(history) is table


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="keep_min_tokens"):
        SummarizerConfig(keep_min_tokens=50_000, keep_max_tokens=40_000)
    with pytest.raises(ValueError, match="trigger_pct"):
        SummarizerConfig(trigger_pct=1.5)
    with pytest.raises(ValueError, match=r"trigger.recommend_pct \(0.9\) must not exceed trigger.auto_pct"):
        SummarizerConfig(recommend_pct=0.9, trigger_pct=0.8)
    with pytest.raises(ValueError, match="unknown SummarizerConfig"):
        SummarizerConfig.from_dict({"nope": 1})
    with pytest.raises(ValueError, match="context_window"):
        keep_budget(0)


def test_an_autonomous_run_pins_the_request_instead_of_folding_nothing() -> None:
    # one request, then a long run of tool rounds: snapping back to the request would
    # keep everything; the request is pinned after the summary and the run is cut
    history = chat_turns(3, size=100)
    history.append(user("fix every failing test"))
    history += tool_loop(60, 400, text="next step")
    request = latest_user_index(history)
    cut = find_cut_index(history, 32_000, SummarizerConfig(), estimate=char_tokens)
    assert cut.ok and cut.pinned == (request,)
    assert cut.index > request + 1
    assert any("pinned" in s for s in cut.steps)
    # the cut keeps tool groups whole and the tail is near the keep budget
    assert history[cut.index]["role"] == "assistant"
    assert cut.tail_tokens <= cut.effective_keep * 2
    folded = sum(char_tokens(m) for m in history[cut.protected_head : cut.index]) - char_tokens(history[request])
    assert folded > 2 * sum(char_tokens(m) for m in history[cut.protected_head : request])


def test_no_pin_when_snapping_back_folds_enough() -> None:
    history = chat_turns(40, size=200)
    history.append(user("long task"))
    history += tool_loop(12, 1_000, text="running the next step")
    cut = find_cut_index(history, 32_000, SummarizerConfig(protect_last_n=5), estimate=char_tokens)
    assert cut.pinned == () and cut.index == latest_user_index(history)


def test_display_only_lines_cost_the_kept_tail_nothing() -> None:
    # a Claude Code hook line is shown, never sent: it must not make the tail look bigger
    history = chat_turns(30, size=300)
    noisy = []
    for m in history:
        noisy.append(m)
        noisy.append({"id": uid("s"), "role": "system", "content": filler(2_000), "display_only": True})
    plain = find_cut_index(history, 32_000, SummarizerConfig(protect_last_n=0), estimate=char_tokens)
    cut = find_cut_index(noisy, 32_000, SummarizerConfig(protect_last_n=0), estimate=char_tokens)
    assert cut.ok and cut.tail_tokens == plain.tail_tokens
    assert noisy[cut.index]["id"] == history[plain.index]["id"]


def test_a_request_right_after_the_head_is_pinned_and_its_run_folded() -> None:
    # the latest request is the first message after the protected head and
    # a long run follows it; snapping back to it folds nothing, so the cut used to decline
    history = [user("a"), assistant("b"), user("c"), user("the real task")]
    history += tool_loop(40, 1_500, names=("x",), text="next step")
    cfg = SummarizerConfig(protect_first_n=3)
    cut = find_cut_index(history, 200_000, cfg, 8_000, estimate=char_tokens)
    assert cut.ok, cut.reason
    assert cut.protected_head == 3 and cut.pinned == (3,)
    assert history[cut.index]["role"] == "assistant" and cut.index > 5
    assert cut.tail_tokens <= 8_000 + 1_600 + char_tokens(history[3])
    assert_pairs_intact(history[:3] + [history[3]] + history[cut.index :])


def test_an_oversized_final_tool_group_is_kept_and_the_rest_folded() -> None:
    # the last tool group alone exceeds the ceiling; no boundary fits, and the
    # cut used to decline although everything before that group could be folded
    history = [user("start the migration"), assistant("ok")]
    history += tool_loop(8, 2_000, names=("step",))
    final = call("dump", "dump_more")
    history += [final, *results(final, 6_000)]  # 12K tokens in one group, over the 8K ceiling
    cut = find_cut_index(history, 200_000, SummarizerConfig(protect_first_n=2), 8_000, estimate=char_tokens)
    assert cut.ok, cut.reason
    assert history[cut.index] is final  # the oversized group is the whole tail
    assert cut.tail_tokens > 8_000
    assert any("no boundary fits the ceiling" in s for s in cut.steps)
    assert_pairs_intact(history[:2] + history[cut.index :])
    # the same with a group straddling the floor: the nearest boundary before it is taken
    history = [user("start"), assistant("ok")]
    for size in (3_000, 3_000, 3_000, 2_500, 3_000):
        c = call("step", "step2")
        history += [c, *results(c, size // 2)]
    cut = find_cut_index(history, 200_000, SummarizerConfig(protect_first_n=2), 8_000, estimate=char_tokens)
    assert cut.ok and 2 < cut.index < len(history) and history[cut.index]["role"] == "assistant"
    assert_pairs_intact(history[:2] + history[cut.index :])


def _splits_a_pair(messages: list[dict], kept: set[int]) -> bool:
    """Whether a call and its result (a recording may hold unanswered calls) end up on
    different sides of the cut."""
    side: dict[str, bool] = {}
    for i, m in enumerate(messages):
        for rid in tool_result_ids(m):
            if rid in side and side[rid] != (i in kept):
                return True
        for cid in tool_use_ids(m):
            side[cid] = i in kept
    return False


def _tail_start_exists(table, head_end: int) -> bool:
    """Whether some boundary after the head could start the kept tail (the oracle of the sweep)."""
    n = len(table)
    last_user = table.users[-1] if table.users else None
    pinnable = (
        last_user is not None and last_user >= head_end
        and not table.forbid[last_user] and not table.forbid[last_user + 1]
    )
    for b in range(head_end + 1, n):
        if table.forbid[b]:
            continue
        if last_user is None or last_user < head_end or b <= last_user or (pinnable and b >= last_user + 2):
            return True
    return False


@pytest.mark.corpus
def test_corpus_cut_points_never_decline_when_something_can_be_folded(corpus_dir) -> None:
    """Every corpus prefix ending before an assistant message with at least
    20K tokens, cut with a 200K window and an 8K keep: a decline only where nothing lies
    between the head and the tail (or everything after the head fits the keep budget)."""
    from opctx.importers.api import iter_transcript_files, parse_path
    from opctx.lab.history import RecordedHistory

    points = declined = inside = running_loops = 0
    wrong = []
    for path, _explicit in iter_transcript_files([corpus_dir]):
        try:
            sessions = parse_path(path)
        except Exception:  # not a transcript (manifest.json), or one the importers refuse
            continue
        for session in sessions:
            messages = RecordedHistory.from_calls(session.calls, session.head).messages
            facts = MessageFacts()
            prefix = facts.table(messages).prefix_tokens
            for i, m in enumerate(messages):
                if m.get("role") != "assistant" or prefix[i] < 20_000:
                    continue
                points += 1
                cut = find_cut_index(messages[:i], 200_000, keep_recent_tokens=8_000, facts=facts)
                if cut.ok:
                    kept = [*range(cut.protected_head), *cut.pinned, *range(cut.index, i)]
                    assert not _splits_a_pair(messages[:i], set(kept)), (path, i, cut.steps)
                    assert_units_whole(messages[:i], set(kept))
                    if any("inside the thinking unit" in s for s in cut.steps):
                        # the documented case: the request still opens the loop with its thinking
                        inside += 1
                        branch = compacted_branch(messages[:i], cut)
                        running = assert_anthropic_request_accepted(to_anthropic_request(branch, model=session.model))
                        unit = unit_inside(messages[:i], cut.index)
                        if unit and unit[1] == i:  # the unit cut inside is the loop still running
                            assert running[0]["type"] in ("thinking", "redacted_thinking"), (path, i)
                            running_loops += 1
                    continue
                declined += 1
                table = facts.table(messages[:i])
                if cut.reason.startswith("nothing can be folded") and _tail_start_exists(table, cut.protected_head):
                    wrong.append((path, i, cut.steps))
    print(f"{points} cut points, {declined} declined, {inside} cut inside an oversized thinking unit "
          f"({running_loops} of them in a running loop)")
    assert points > 500
    assert not wrong, f"{len(wrong)} of {points} cut points declined with something to fold: {wrong[:3]}"


# -- thinking units ---------------------------------------------------------------------


def test_the_tail_starts_where_a_thinking_unit_starts() -> None:
    # an autonomous run where the model thinks every fourth step: the tail may start at a step
    # with thinking, never at one that continues the loop without it
    h = HistoryBuilder()
    h.user("a")
    h.answer("b")
    h.user("port the module")
    h.loop(30, size=800, think=4, text="next")
    history = h.messages
    cut = find_cut_index(history, 200_000, SummarizerConfig(protect_first_n=2), 8_000, estimate=char_tokens)
    assert cut.ok
    assert history[cut.index].get("thinking"), history[cut.index]
    plain = [m for m in history if not m.get("thinking")]  # the same run without thinking: any group boundary
    other = find_cut_index(plain, 200_000, SummarizerConfig(protect_first_n=2), 8_000, estimate=char_tokens)
    assert other.ok and not plain[other.index].get("thinking")


@settings(max_examples=150, deadline=None)
@given(
    history=thinking_histories(),
    window=st.sampled_from([8_000, 32_000, 200_000]),
    keep=st.one_of(st.none(), st.integers(0, 12_000)),
    protect_first=st.integers(0, 4),
)
def test_thinking_units_survive_cutting(history, window, keep, protect_first) -> None:
    """Every cut keeps whole thinking units, except inside a unit larger than the ceiling
    (documented case), where the unit's first tool group is kept (head or pinned); the
    request built after the compaction obeys the Messages API rules."""
    cfg = SummarizerConfig(protect_first_n=protect_first, protect_last_n=2)
    cut = find_cut_index(history, window, cfg, keep, estimate=char_tokens)
    if not cut.ok:
        return
    branch = compacted_branch(history, cut)
    assert_pairs_intact(branch)
    for boundary, step in ((cut.index, "6:"), (cut.protected_head, "5:")):
        unit = unit_inside(history, boundary)
        if unit is None:
            continue
        # the documented case: a unit over the ceiling, cut inside, its first group kept
        assert any(s.startswith(step) and "over the ceiling" in s for s in cut.steps), (boundary, cut.steps)
        group = range(unit[0], first_group_end(history, unit[0]))
        assert all(i < cut.protected_head or i in cut.pinned for i in group), (unit, cut)
    request = latest_user_index(history)
    if request is not None and request >= cut.protected_head:
        assert request in cut.pinned or request >= cut.index
    kept = {*range(cut.protected_head), *cut.pinned, *range(cut.index, len(history))}
    assert_units_whole(history, kept)
    for model in ("claude-sonnet-4-5", "claude-opus-4-5"):
        running = assert_anthropic_request_accepted(to_anthropic_request(branch, model=model))
        start = [m for m in branch if m["role"] == "assistant" and m.get("thinking")]
        if running and any(b["type"] == "thinking" for b in running):
            # a running loop that kept thinking sends the blocks of a unit's start, stored ones
            assert any(b is t for m in start for t in m["thinking"] for b in running)
