"""The recent-events view: first and last messages per request, incremental figures."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.engine import DefaultContextEngine
from opctx.context.policy import CompactionPolicy
from opctx.context.recent import RecentEvents


def _est(msg: dict) -> int:
    return len(str(msg.get("content", ""))) + 1


def _turns(n: int, start: int = 0) -> list[dict]:
    out = []
    for k in range(start, start + n):
        out.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"c{k}", "name": "ls", "arguments": {}}]})
        out.append({"role": "tool", "tool_call_id": f"c{k}", "content": f"out {k} " * (k % 7 + 1)})
    return out


def test_short_histories_are_sent_whole_and_the_view_says_so():
    view = RecentEvents(1, 10, estimate=_est)
    hist = [{"role": "user", "content": "task"}, *_turns(4)]
    aged, report = view.age(hist)
    assert aged is hist and report.tokens_freed == 0
    assert not view.acted and "never held more than the first 1 and last 10" in view.idle_reason()


def test_the_view_keeps_the_head_and_tail_and_counts_what_it_leaves_out():
    view = RecentEvents(1, 5, estimate=_est)
    hist = [{"role": "user", "content": "task"}, *_turns(10)]
    aged, report = view.age(hist)
    # the last 5 start with a result whose call is left out: it goes too
    assert aged == [hist[0], *hist[-4:]]
    assert all(a is b for a, b in zip(aged[1:], hist[-4:], strict=True))
    assert report.tokens_freed == sum(_est(m) for m in hist[1:-4])
    assert view.acted and view.idle_reason() is None


def test_the_initial_request_is_kept_after_a_system_message():
    hist = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}, *_turns(10)]
    assert RecentEvents(1, 4).age(hist)[0][:2] == [hist[0], hist[-4]]
    aged, _ = RecentEvents(1, 4, keep_initial_request=True).age(hist)
    assert aged == [hist[0], hist[1], *hist[-4:]]


def test_a_result_answering_a_call_of_the_head_stays():
    hist = [{"role": "user", "content": "task"}, *_turns(6)]
    # the head ends with a call whose result the view leaves out: sent as it is (the
    # request's assembly drops an unanswered call, opctx.context.provider_messages)
    view = RecentEvents(2, 5)
    aged, _ = view.age(hist)
    assert aged[:2] == hist[:2] and aged[2:] == hist[-4:]
    # the tail opens with the result of the head's call: not an orphan, it stays
    hist2 = [*hist[:2], {"role": "system", "content": "hook", "display_only": True}, hist[2], *_turns(6, 10)]
    aged, _ = RecentEvents(2, len(hist2) - 3).age(hist2)
    assert aged == [*hist2[:2], *hist2[3:]]


def test_hook_lines_between_a_call_and_its_result_do_not_hide_an_orphan():
    hook = {"role": "system", "content": "hook", "display_only": True}
    hist = [{"role": "user", "content": "task"}, *_turns(3)]
    hist = [*hist[:-1], hook, hist[-1], *_turns(2, 3)]  # call, hook, result
    aged, _ = RecentEvents(1, 6).age(hist)  # the tail starts at the hook
    assert aged[1] is hook and all(m.get("tool_call_id") != "c2" for m in aged)


@pytest.mark.parametrize("bad", [-1, 1.5, True, None])
def test_counts_are_checked(bad):
    with pytest.raises(ValueError, match="must be an int >= 0"):
        RecentEvents(bad, 3)
    with pytest.raises(ValueError, match="must be an int >= 0"):
        RecentEvents(1, bad)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.booleans()), min_size=1, max_size=25),
       st.integers(0, 3), st.integers(0, 12))
def test_called_request_after_request_it_gives_what_a_fresh_view_gives(steps, keep_first, keep_last):
    """Growing histories, with now and then an earlier message replaced by a copy (thinking
    clearing hands in such copies): the running sums never go stale."""
    view = RecentEvents(keep_first, keep_last, estimate=_est)
    hist: list[dict] = [{"role": "user", "content": "task"}]
    k = 0
    for grow, replace in steps:
        hist = [*hist, *_turns(grow, k)]
        k += grow
        if replace and len(hist) > 2:
            i = len(hist) // 2
            hist[i] = {**copy.copy(hist[i]), "content": "x"}
        got = view.age(hist)
        want = RecentEvents(keep_first, keep_last, estimate=_est).age(list(hist))
        assert got[0] == want[0] and got[1].tokens_freed == want[1].tokens_freed
        assert got[1].tokens_freed == sum(map(_est, hist)) - sum(map(_est, got[0]))


def test_the_policy_builds_the_view():
    policy = CompactionPolicy().replace(**{"aging.kind": "recent-events", "aging.protect_first_n": 1,
                                           "aging.keep_last": 99, "cut.keep_initial_request": True})
    ager = DefaultContextEngine(policy=policy).ager
    assert isinstance(ager, RecentEvents)
    assert (ager.keep_first, ager.keep_last, ager.keep_initial_request) == (1, 99, True)


def test_the_provider_count_carries_across_a_sliding_view():
    """The view drops a message from the front as one is appended, so the counted prompt is
    no prefix of the next: the figure is still the provider's count plus what changed (the
    unseen overhead kept), as for an unchanged prefix."""
    policy = CompactionPolicy().replace(**{"aging.kind": "recent-events", "aging.protect_first_n": 1,
                                           "aging.keep_last": 6, "budget.context_window": 200_000,
                                           **{f"trigger.{k}": None for k in ("recommend_pct", "auto_pct", "emergency_pct")}})
    engine = DefaultContextEngine(policy=policy)
    overhead = 5_000  # what the provider counts and the history does not hold
    hist = [{"role": "user", "content": "task", "id": "u"}]
    for k in range(12):
        hist.append({"role": "assistant", "content": f"step {k} " * 30, "id": f"a{k}"})
        prep = engine.prepare(None, "s", hist, None, None)
        if k >= 2:
            assert prep.decision_path[0] == "usage:provider", (k, prep.decision_path)
            # the figure: the view's estimate plus the overhead the provider counted
            assert abs(prep.budget.input_used - (alone(policy, hist) + overhead)) <= 2, k
        engine.after_turn("s", {"input_tokens": alone(policy, hist) + overhead, "output_tokens": 5}, prep)
        hist.append({"role": "user", "content": f"ok {k}", "id": f"u{k}"})


def alone(policy: CompactionPolicy, hist: list[dict]) -> int:
    """The estimate of the view of ``hist`` by an engine that has no provider count."""
    return DefaultContextEngine(policy=policy).prepare(None, "x", hist, None, None).budget.input_used
