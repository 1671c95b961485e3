"""Observation masking and tool-use clearing act on observations: tool results and user
messages marked ``is_observation``; demonstrations never (and dropped on request)."""

from __future__ import annotations

from opctx.context.masking import (
    MASK_PLACEHOLDER,
    ObservationMasker,
    ToolUseClearer,
    is_observation,
)
from opctx.dag.messages import is_tool_result


def _size(msg: dict) -> int:
    return len(str(msg.get("content") or "")) // 4 + 1


def _agent_history(n: int, *, demo: bool = False) -> list[dict]:
    """SWE-agent-like: observations as user messages (the importers mark them)."""
    msgs = [{"role": "system", "content": "sys", "id": "s"}]
    if demo:
        msgs.append({"role": "user", "content": "a demonstration", "is_demo": True, "id": "d"})
    msgs.append({"role": "user", "content": "the task", "id": "t"})
    for i in range(n):
        msgs.append({"role": "assistant", "content": f"cmd {i}", "id": f"a{i}"})
        msgs.append({"role": "user", "content": "line\n" * 12, "is_observation": True, "id": f"o{i}"})
    return msgs


def _tool_history(n: int, name: str = "bash") -> list[dict]:
    msgs = [{"role": "user", "content": "the task", "id": "t"}]
    for i in range(n):
        msgs.append({"role": "assistant", "content": "", "id": f"a{i}",
                     "tool_calls": [{"id": f"c{i}", "name": name if i else "keep_me", "arguments": '{"x": 1}'}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 400, "id": f"r{i}"})
    return msgs


def test_observations_are_tool_results_and_marked_user_messages_never_demos():
    assert is_observation({"role": "tool", "content": "x"})
    assert is_observation({"role": "user", "content": "out", "is_observation": True})
    assert not is_observation({"role": "user", "content": "please fix"})
    assert not is_observation({"role": "user", "content": "demo", "is_observation": True, "is_demo": True})


def test_masking_masks_user_observations_with_a_placeholder_template():
    masker = ObservationMasker(2, estimate=_size, placeholder="Old environment output: ({lines} lines omitted)")
    aged, report = masker.age(_agent_history(5))
    masked = [m for m in aged if m.get("_masked")]
    assert report.redacted == 3 and [m["id"] for m in masked] == ["o0", "o1", "o2"]
    assert {m["content"] for m in masked} == {"Old environment output: (12 lines omitted)"}
    assert masker.acted and masker.observations_seen == 5
    # the task and the kept observations are the very objects given
    history = _agent_history(5)
    assert masker.age(history)[0][-1] is history[-1]


def test_masking_tool_results_keeps_them_results():
    masker = ObservationMasker(1, estimate=_size)
    aged, report = masker.age(_tool_history(3))
    assert report.redacted == 2 and all(is_tool_result(m) for m in aged if m.get("_masked"))
    assert aged[2]["content"] == MASK_PLACEHOLDER.format(tokens=101)


def test_demonstrations_are_never_masked_and_dropped_on_request():
    kept = ObservationMasker(1, estimate=_size).age(_agent_history(3, demo=True))[0]
    assert any(m["id"] == "d" and not m.get("_masked") for m in kept)
    dropped, report = ObservationMasker(1, estimate=_size, drop_demos=True).age(_agent_history(3, demo=True))
    assert "d" not in {m["id"] for m in dropped} and report.redacted == 2


def test_nothing_to_act_on_is_visible():
    masker = ObservationMasker(10, estimate=_size)
    masker.age([{"role": "user", "content": "hi", "id": "u"}, {"role": "assistant", "content": "hello", "id": "a"}])
    assert not masker.acted and masker.observations_seen == 0


def test_clearing_waits_for_its_trigger_then_keeps_the_last_uses():
    clearer = ToolUseClearer(2, trigger_tokens=500, estimate=_size)
    aged, report = clearer.age(_tool_history(4))  # 4 x 101 tokens of results: under 500 with the rest
    assert report.redacted == 0 and not clearer.acted
    aged, report = clearer.age(_tool_history(6))
    assert report.redacted == 4 and [m["id"] for m in aged if m.get("_masked")] == ["r0", "r1", "r2", "r3"]
    assert clearer.acted


def test_clearing_excludes_tools_stops_at_clear_at_least_and_clears_inputs():
    excluded = ToolUseClearer(1, trigger_tokens=None, exclude_tools=["keep_me"], estimate=_size)
    aged, _ = excluded.age(_tool_history(4))
    assert [m["id"] for m in aged if m.get("_masked")] == ["r1", "r2"]
    at_least = ToolUseClearer(0, trigger_tokens=None, clear_at_least=150, estimate=_size)
    aged, report = at_least.age(_tool_history(4))
    assert report.redacted == 2  # oldest first until 150 tokens are cleared (100 per result)
    too_much = ToolUseClearer(0, trigger_tokens=None, clear_at_least=10_000, estimate=_size)
    assert too_much.age(_tool_history(4))[1].redacted == 0  # cannot clear that much: nothing
    inputs = ToolUseClearer(3, trigger_tokens=None, clear_inputs=True, estimate=_size, placeholder="[cleared]")
    history = _tool_history(4)
    aged, _ = inputs.age(history)
    assert aged[2]["content"] == "[cleared]" and aged[1]["tool_calls"][0]["arguments"] == "{}"
    assert history[1]["tool_calls"][0]["arguments"] == '{"x": 1}' and aged[3] is history[3]


# -- a growing session: what is kept across requests changes nothing ---------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from opctx.context.thinking_clearing import ThinkingClearer  # noqa: E402


def _session(draw_sizes: list[int], names: list[str]) -> list[dict]:
    """Turns of a user request, an assistant call (with thinking), its result (some as
    Anthropic blocks), and an answer: what both clearing rules and thinking clearing act on."""
    msgs: list[dict] = []
    for i, size in enumerate(draw_sizes):
        name = names[i % len(names)]
        msgs.append({"role": "user", "content": f"request {i}", "id": f"u{i}"})
        msgs.append({"role": "assistant", "content": "", "id": f"a{i}",
                     "thinking": [{"type": "thinking", "thinking": "plan " * (i + 3), "signature": f"s{i}"}],
                     "tool_calls": [{"id": f"c{i}", "name": name, "arguments": '{"path": "f.py"}'}]})
        if i % 3 == 2:
            msgs.append({"role": "user", "id": f"r{i}", "content": [
                {"type": "tool_result", "tool_use_id": f"c{i}", "content": "x" * size}]})
        else:
            msgs.append({"role": "tool", "tool_call_id": f"c{i}", "name": name, "content": "y" * size, "id": f"r{i}"})
        msgs.append({"role": "assistant", "content": f"answer {i}", "id": f"f{i}"})
    return msgs


def _whole_size(msg: dict) -> int:
    """A size that counts everything a message holds, its thinking too."""
    return len(repr(msg)) // 4 + 1


def _fresh_equal(ager_factory, steps: list[list[dict]], thinking: bool) -> None:
    """One ager called request after request gives what a fresh one gives each request."""
    kept, kept_thinking = ager_factory(), ThinkingClearer(1)
    for history in steps:
        given_history = kept_thinking.age(history)[0] if thinking else history
        aged, report = kept.age(given_history)
        fresh_history = ThinkingClearer(1).age(history)[0] if thinking else history
        fresh_aged, fresh_report = ager_factory().age(fresh_history)
        assert aged == fresh_aged and report == fresh_report


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(10, 3_000), min_size=1, max_size=14),
    keep=st.integers(0, 4),
    trigger=st.sampled_from([None, 300, 2_000]),
    at_least=st.sampled_from([0, 500]),
    exclude=st.booleans(),
    inputs=st.booleans(),
    thinking=st.booleans(),
)
def test_tool_use_clearing_of_a_growing_session_is_each_request_edited_afresh(
    sizes, keep, trigger, at_least, exclude, inputs, thinking
):
    history = _session(sizes, ["bash", "read", "keep_me"])

    def factory() -> ToolUseClearer:
        return ToolUseClearer(keep, trigger_tokens=trigger, clear_at_least=at_least,
                              exclude_tools=["keep_me"] if exclude else (), clear_inputs=inputs, estimate=_whole_size)

    _fresh_equal(factory, [history[:end] for end in range(1, len(history) + 1)], thinking)


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(10, 3_000), min_size=1, max_size=14), keep=st.integers(0, 4),
       thinking=st.booleans())
def test_masking_of_a_growing_session_is_what_a_fresh_masker_gives(sizes, keep, thinking):
    history = _session(sizes, ["bash"])
    _fresh_equal(lambda: ObservationMasker(keep, estimate=_whole_size), [history[:end] for end in range(1, len(history) + 1)],
                 thinking)


def test_a_turn_whose_thinking_was_cleared_is_sent_cleared_by_the_masker_after_it():
    """Thinking clearing hands the ager a copy of an older assistant turn once it falls out
    of the turns kept: the masker must send that copy, not the message it took in before."""
    clearer, masker = ThinkingClearer(1), ObservationMasker(1, estimate=_size)
    history = _session([100, 100, 100], ["bash"])
    for end in (4, 8, 12):
        aged, _ = masker.age(clearer.age(history[:end])[0])
        kept_thinking = [m["id"] for m in aged if m.get("role") == "assistant" and "thinking" in m]
        assert kept_thinking == [f"a{end // 4 - 1}"]


def test_an_earlier_message_that_becomes_or_stops_being_an_observation_is_taken_in_afresh():
    for factory in (lambda: ObservationMasker(1, estimate=_size),
                    lambda: ToolUseClearer(1, trigger_tokens=None, estimate=_size)):
        history = _agent_history(6)
        kept = factory()
        kept.age(history)
        for i, replacement in ((2, {"role": "user", "content": "line\n" * 40, "is_observation": True, "id": "t2"}),
                               (4, {"role": "user", "content": "plain", "id": "o1-edited"})):
            edited = [*history[:i], replacement, *history[i + 1:]]
            aged, report = kept.age(edited)
            assert (aged, report) == factory().age(edited)
            history = edited
