"""Every request the engine sends fits the window, or none is sent (opctx.context.fit).

The invariant, checked with fresh estimates of what the provider is actually given:
``system prompt + tool schemas + agent_messages <= input budget`` (the window minus
the output reserve), or ``ContextOverflowError`` before the provider is called.
"""

from __future__ import annotations

import json
import random

import pytest
from _compaction_fixtures import filler
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opctx.context.engine import DefaultContextEngine
from opctx.context.fit import TRUNCATION_MARKER, ContextOverflowError, fit_request, truncate_text
from opctx.context.provider_messages import to_provider_messages
from opctx.context.summarize import Summarizer
from opctx.context.tokens import Estimator
from opctx.context.turn import process_user_turn
from opctx.dag.providers import Reply, ToolCall
from opctx.dag.session_db import DagSessionDB
from opctx.dag.store import set_text_index

HEURISTIC = Estimator("heuristic")
MARKER_TAIL = "tokens truncated to fit the context window ...]"


def request_tokens(system: str | None, messages: list[dict], tools: list[dict] | None, model=None) -> int:
    """What the provider is sent, estimated afresh (no cache of the engine involved)."""
    est = Estimator("heuristic")
    system_t = est.message_tokens({"role": "system", "content": system}, model) if system else 0
    return system_t + (est.tools_tokens(tools, model) if tools else 0) + est.history_tokens(messages, model)


class Recorder:
    """A provider that records what it is sent and answers with text."""

    def __init__(self, replies=None):
        self.sent: list[tuple[list[dict], str | None, list[dict] | None]] = []
        self.replies = list(replies or [])

    def __call__(self, messages, model, system, tools):
        self.sent.append((messages, system, tools))
        return self.replies.pop(0) if self.replies else Reply(text="done")


def make(window: int) -> tuple[DagSessionDB, str, DefaultContextEngine]:
    db = DagSessionDB(":memory:")
    set_text_index(db.connection, False)  # megabytes of filler: nobody searches them here
    sid = db.create_session()
    engine = DefaultContextEngine(
        session_db=db,
        context_window=window,
        estimator=HEURISTIC,
        summarizer=Summarizer(lambda *a: Reply(text="summary"), model="s", count_tokens=HEURISTIC.text_tokens),
    )
    return db, sid, engine


def budget_of(engine: DefaultContextEngine, model: str) -> int:
    window = engine.window_for(model)
    return window - engine.budget_allocator.reserve_for(window, model)


def log_text(lines: int) -> str:
    return "\n".join(f"{i:06d} INFO worker processed item {i} in {i % 97} ms" for i in range(lines))


# ------------------------------------------------------------------------------ the turn


def test_a_user_message_larger_than_the_window_is_truncated_not_sent_whole() -> None:
    db, sid, engine = make(8_000)
    huge = log_text(20_000)  # ~ 300K tokens into an 8K window
    provider = Recorder()
    res = process_user_turn(db, sid, huge, agent="Be brief.", provider_call=provider, model="gpt-4o", engine=engine)
    (messages, system, tools), = provider.sent
    assert request_tokens(system, messages, tools) <= budget_of(engine, "gpt-4o")
    sent = messages[-1]["content"]
    assert sent.startswith("000000 INFO worker") and sent.endswith("item 19999 in 17 ms")
    assert MARKER_TAIL in sent
    assert db.get_message(sid, res.user_message_id)["content"] == huge  # the store keeps the original
    assert res.calls[0].request_tokens == request_tokens(system, messages, tools)
    assert any(step.startswith("fit:truncated=") for step in res.calls[0].decision_path)


def test_a_tool_result_larger_than_the_window_is_truncated_in_the_next_call() -> None:
    db, sid, engine = make(16_000)

    def dump_table() -> str:
        """Dump the whole table."""
        return log_text(30_000)

    provider = Recorder([Reply(text="", tool_calls=[ToolCall("c1", "dump_table", {})]), Reply(text="seen")])
    res = process_user_turn(
        db, sid, "dump it", agent="", provider_call=provider, model="gpt-4o", engine=engine,
        tools={"dump_table": dump_table},
    )
    assert res.text == "seen" and len(provider.sent) == 2
    for messages, system, tools in provider.sent:
        assert request_tokens(system, messages, tools) <= budget_of(engine, "gpt-4o")
    result = provider.sent[1][0][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "c1" and MARKER_TAIL in result["content"]


def test_a_system_prompt_larger_than_the_window_is_truncated() -> None:
    db, sid, engine = make(8_000)
    agent = "RULES\n" + log_text(10_000)
    provider = Recorder()
    process_user_turn(db, sid, "hello", agent=agent, provider_call=provider, model="gpt-4o", engine=engine)
    (messages, system, tools), = provider.sent
    assert request_tokens(system, messages, tools) <= budget_of(engine, "gpt-4o")
    assert system.startswith("RULES\n000000") and MARKER_TAIL in system
    assert messages[-1]["content"] == "hello"  # the small parts stay whole


def test_tool_schemas_larger_than_the_window_raise_before_any_provider_call() -> None:
    db, sid, engine = make(4_000)

    def search(query: str) -> str:
        return "nothing"

    search.__doc__ = "Search. " + filler(40_000)  # a schema no request can hold
    provider = Recorder()
    with pytest.raises(ContextOverflowError, match="tool schemas take .* nothing was sent to the provider"):
        process_user_turn(
            db, sid, "find it", agent="", provider_call=provider, model="gpt-4o", engine=engine,
            tools={"search": search},
        )
    assert provider.sent == []
    assert [m["content"] for m in db.get_branch(sid)] == ["find it"]


def test_an_engine_that_does_not_fit_its_requests_is_fitted_by_the_turn() -> None:
    db, sid, engine = make(8_000)

    class Unfitted(DefaultContextEngine):
        name = "unfitted"

        def prepare(self, *args, **kwargs):
            prep = super().prepare(*args, **kwargs)
            # what a custom engine that knows nothing of fitting hands back
            prep.system_prompt, prep.agent_messages = "Be brief.", [
                {"role": "user", "content": m["content"]} for m in args[2]
            ]
            prep.request_tokens, prep.overflow = None, None
            return prep

    custom = Unfitted(session_db=db, context_window=8_000, estimator=HEURISTIC)
    provider = Recorder()
    process_user_turn(db, sid, log_text(20_000), agent="x", provider_call=provider, model="gpt-4o", engine=custom)
    (messages, system, tools), = provider.sent
    assert request_tokens(system, messages, tools) <= budget_of(custom, "gpt-4o")
    assert MARKER_TAIL in messages[-1]["content"]


# ------------------------------------------------------------------------------ fit_request alone


def test_json_arguments_are_cut_value_by_value_and_stay_valid() -> None:
    big = log_text(8_000)
    messages = [
        {"role": "user", "content": "write the log"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "write_file", "arguments": json.dumps({"path": "out.log", "content": big})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    fitted = fit_request("", messages, None, 2_000, estimator=HEURISTIC)
    assert fitted.fits and fitted.truncated == 1 and fitted.tokens <= 2_000
    args = json.loads(fitted.messages[1]["tool_calls"][0]["function"]["arguments"])
    assert args["path"] == "out.log" and MARKER_TAIL in args["content"]
    assert fitted.messages[0] is messages[0] and fitted.messages[2] is messages[2]  # untouched parts: same objects
    assert json.loads(messages[1]["tool_calls"][0]["function"]["arguments"])["content"] == big  # input unchanged


def _strings(value):
    """Every string inside a JSON value, depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _shape(value):
    """A JSON value with every string replaced by "": what truncation must not change."""
    if isinstance(value, str):
        return ""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return value


MULTI_EDIT = {"file_path": "src/app.py", "edits": [
    {"old_string": log_text(3_000), "new_string": log_text(3_000) + " changed", "replace_all": False},
    {"old_string": "short", "new_string": log_text(2_000)},
]}


@pytest.mark.parametrize("arguments", [
    MULTI_EDIT,  # Claude Code's MultiEdit: the large strings are in a list of objects
    [log_text(3_000), {"deep": [[log_text(2_000)]]}, 7],  # a JSON array
    log_text(4_000),  # a bare JSON string
], ids=["multiedit", "array", "string"])
def test_nested_tool_arguments_are_cut_where_they_are_and_stay_valid_json(arguments) -> None:
    """Strings are cut wherever they are nested; the arguments stay JSON of the same shape
    (keys, list lengths, numbers, booleans) and every cut string carries the marker. Only
    top-level object values used to be cut: such a call could not be fitted at all, and an
    array or string was cut into invalid JSON."""
    messages = [
        {"role": "user", "content": "edit it"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "MultiEdit", "arguments": json.dumps(arguments)}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    fitted = fit_request("", messages, None, 1_500, estimator=HEURISTIC)
    assert fitted.fits and fitted.truncated == 1 and fitted.tokens <= 1_500
    sent = json.loads(fitted.messages[1]["tool_calls"][0]["function"]["arguments"])  # valid JSON
    assert _shape(sent) == _shape(arguments)
    long_ones = [(a, b) for a, b in zip(_strings(arguments), _strings(sent), strict=True) if len(a) > 4_000]
    assert long_ones and all(MARKER_TAIL in b and len(b) < len(a) for a, b in long_ones)
    assert json.loads(messages[1]["tool_calls"][0]["function"]["arguments"]) == arguments  # input unchanged


def test_nested_tool_use_input_in_an_anthropic_request_is_cut_too() -> None:
    messages = [
        {"role": "user", "content": "edit it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "MultiEdit",
                                           "input": MULTI_EDIT}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
    ]
    fitted = fit_request("", messages, None, 1_500, estimator=HEURISTIC)
    assert fitted.fits and fitted.tokens <= 1_500
    sent = fitted.messages[1]["content"][0]["input"]
    assert _shape(sent) == _shape(MULTI_EDIT) and MARKER_TAIL in sent["edits"][0]["old_string"]


def test_a_nested_call_in_the_protected_head_leaves_the_session_alive() -> None:
    """A MultiEdit of large strings among the first messages (kept verbatim by every
    compaction): each later turn is fitted and sent. The nested strings were never cut,
    so every turn raised ContextOverflowError: the session was dead."""
    db, sid, engine = make(8_000)
    db.append_messages(sid, [
        {"role": "user", "content": "apply the edits"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "e1", "name": "MultiEdit", "arguments": {
                "file_path": "big.py", "edits": [{"old_string": log_text(6_000), "new_string": log_text(6_000)}]}}]},
        {"role": "tool", "name": "MultiEdit", "tool_call_id": "e1", "content": "applied"},
    ])
    provider = Recorder()
    for turn in range(3):
        process_user_turn(db, sid, f"question {turn}", agent="Be brief.", provider_call=provider,
                          model="gpt-4o", engine=engine)
    assert len(provider.sent) == 3
    for messages, system, tools in provider.sent:
        assert request_tokens(system, messages, tools) <= budget_of(engine, "gpt-4o")


def test_parts_are_cut_evenly_from_the_largest_down() -> None:
    sizes = [40_000, 20_000, 400, 100]
    messages = [{"role": "user", "content": filler(n)} for n in sizes]
    fitted = fit_request("", messages, None, 6_000, estimator=HEURISTIC)
    after = [HEURISTIC.message_tokens(m) for m in fitted.messages]
    assert fitted.fits and sum(after) <= 6_000
    assert fitted.messages[2:] == messages[2:]  # small ones whole
    assert abs(after[0] - after[1]) <= 60  # the two large ones cut to about the same size


@given(text=st.text(min_size=0, max_size=3_000), target=st.integers(0, 800))
@settings(max_examples=200, deadline=None)
def test_truncate_text_never_exceeds_its_target_unless_only_the_marker_is_left(text: str, target: int) -> None:
    count = HEURISTIC.text_tokens
    out = truncate_text(text, target, count)
    if count(text) <= target:
        assert out == text
    elif count(out) > target:
        assert out.startswith("[... ") and out.endswith(MARKER_TAIL)
    else:
        assert MARKER_TAIL in out


# ------------------------------------------------------------------------------ the invariant


def _emptied(unit):
    """A provider message (or system prompt) with every text replaced by the longest
    marker: an upper bound of what truncating can bring it down to."""
    marker = TRUNCATION_MARKER.format(n=10**12)
    if isinstance(unit, str):
        return marker if unit else ""
    out = dict(unit)
    if isinstance(out.get("content"), str) and out["content"]:
        out["content"] = marker
    for call in out.get("tool_calls") or ():
        args = call["function"]["arguments"]
        try:
            parsed = json.loads(args)
        except ValueError:
            call["function"] = {**call["function"], "arguments": marker}
            continue
        call["function"] = {**call["function"], "arguments": json.dumps(_every_string(parsed, marker))}
    return out


def _every_string(value, marker):
    if isinstance(value, str):
        return marker if value else value
    if isinstance(value, dict):
        return {k: _every_string(v, marker) for k, v in value.items()}
    if isinstance(value, list):
        return [_every_string(v, marker) for v in value]
    return value


def assert_fits_or_cannot(prep, system: str, tools: list[dict] | None, budget: int, untruncated: list[dict]) -> None:
    if prep.overflow is None:
        sent = request_tokens(prep.system_prompt, prep.agent_messages, tools)
        assert sent <= budget
        assert prep.request_tokens == sent
        return
    # it may only give up when even everything cut to a marker would not fit (with a
    # little room for the estimates' rounding)
    least = (
        request_tokens(_emptied(system), [], tools)
        + sum(min(HEURISTIC.message_tokens(m), HEURISTIC.message_tokens(_emptied(m))) for m in untruncated)
    )
    assert least > budget * 0.9 - 10, (least, budget)


SIZES = st.one_of(
    st.integers(0, 300),  # small
    st.integers(300, 6_000),  # a screenful
    st.integers(60_000, 400_000),  # far larger than most windows
)


@st.composite
def histories(draw):
    history: list[dict] = []
    n = 0
    for _turn in range(draw(st.integers(1, 6))):
        history.append({"id": f"u{n}", "role": "user", "content": filler(draw(SIZES), f"user {n} ")})
        n += 1
        for _step in range(draw(st.integers(0, 2))):
            calls = [
                {"id": f"c{n}_{k}", "name": "edit",
                 "arguments": {"path": f"f{k}.py", "text": filler(draw(SIZES))}}
                for k in range(draw(st.integers(1, 2)))
            ]
            history.append({"id": f"a{n}", "role": "assistant", "content": "", "tool_calls": calls})
            n += 1
            for call in calls:
                if draw(st.integers(0, 3)):  # now and then a call is left without its result
                    history.append({"id": f"t{n}", "role": "tool", "name": "edit", "tool_call_id": call["id"],
                                    "content": filler(draw(SIZES), "result ")})
                    n += 1
        history.append({"id": f"a{n}", "role": "assistant", "content": filler(draw(SIZES), "answer ")})
        n += 1
    if draw(st.booleans()):  # an interrupted tool run: a call without its result
        history.append({"id": f"a{n}", "role": "assistant", "content": "",
                        "tool_calls": [{"id": "dangling", "name": "run", "arguments": {"cmd": filler(draw(SIZES))}}]})
    return history


@st.composite
def tool_sets(draw):
    return [
        {"type": "function", "function": {"name": f"tool{i}", "description": filler(draw(SIZES) // 4),
                                          "parameters": {"type": "object", "properties": {}}}}
        for i in range(draw(st.integers(0, 3)))
    ]


@given(
    history=histories(),
    system=st.builds(lambda n: filler(n, "SYSTEM "), SIZES),
    tools=tool_sets(),
    window=st.sampled_from([256, 1_000, 4_096, 8_192, 32_768, 128_000]),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_prepare_sends_what_fits_or_says_it_cannot(history, system, tools, window) -> None:
    engine = DefaultContextEngine(context_window=window, estimator=HEURISTIC)
    prep = engine.prepare(system, "s", history, "gpt-4o", tools or None)
    assert_fits_or_cannot(prep, system, tools or None, prep.budget.input_budget, to_provider_messages(prep.history_dicts))


@given(
    history=histories(),
    user_size=SIZES,
    window=st.sampled_from([1_000, 4_096, 16_384]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_process_user_turn_sends_what_fits_or_nothing(history, user_size, window, seed) -> None:
    db, sid, engine = make(window)
    db.append_messages(sid, [{k: v for k, v in m.items() if k != "id"} for m in history])
    rng = random.Random(seed)
    budget = budget_of(engine, "gpt-4o")

    def checking(messages, model, system, tools):
        assert request_tokens(system, messages, tools) <= budget
        if rng.random() < 0.5:
            return Reply(text="", tool_calls=[ToolCall(f"r{rng.random()}", "read", {})])
        return Reply(text="ok")

    def read() -> str:
        """Read something large."""
        return filler(rng.choice([100, 5_000, 200_000]))

    try:
        process_user_turn(db, sid, filler(user_size, "ask "), agent="Be brief.", provider_call=checking,
                          model="gpt-4o", engine=engine, tools={"read": read}, max_iterations=3)
    except ContextOverflowError as exc:
        assert "nothing was sent to the provider" in str(exc)


# ------------------------------------------------------------------------------ the corpus


@pytest.mark.corpus
def test_corpus_prefixes_fit_small_windows(corpus_dir) -> None:
    from opctx.importers import parse_path
    from opctx.lab.history import as_history

    manifest = json.loads((corpus_dir / "manifest.json").read_text())
    by_format: dict[str, list[dict]] = {}
    for entry in manifest:
        by_format.setdefault(entry["format"], []).append(entry)
    checked = 0
    for entries in by_format.values():
        for entry in sorted(entries, key=lambda e: -e["bytes"])[:2]:  # the largest of each format
            for session in parse_path(corpus_dir / entry["file"], on_error="skip"):
                messages = as_history(session).messages
                for window in (4_096, 16_384):
                    engine = DefaultContextEngine(context_window=window, estimator=HEURISTIC)
                    for end in sorted({len(messages), *range(10, len(messages), max(10, len(messages) // 6))}):
                        prep = engine.prepare("You are a coding agent.", session.session_id or "s",
                                              messages[:end], None, None)
                        assert_fits_or_cannot(prep, "You are a coding agent.", None,
                                              prep.budget.input_budget, to_provider_messages(prep.history_dicts))
                        checked += 1
    assert checked > 50


@settings(max_examples=300, deadline=None)
@given(
    units=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 300)), min_size=1, max_size=40),
    room=st.integers(0, 30_000),
)
def test_floors_worked_out_largest_first_give_the_level_of_all_floors(units, room):
    """Only the largest units' floors are worked out; the water level is the one every
    floor known gives, and so is the overflow (None)."""
    from opctx.context.fit import _Floors, _water_level

    count = lambda text: len(text) // 4 + 1  # noqa: E731
    texts = ["x" * n for n, _ in units]
    sizes = [(count(t) if t else 0) + extra for t, (_, extra) in zip(texts, units, strict=True)]
    every = _Floors(texts, sizes, count)
    every._compute(len(texts))
    lazy = _Floors(texts, sizes, count)
    for r in (room, room // 2, room // 7):
        assert lazy.level(r) == _water_level(sizes, every.values, r)
    if lazy.level(room) is None:
        assert lazy.values == every.values


@settings(max_examples=300, deadline=None)
@given(
    units=st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 400)), max_size=60),
    room=st.integers(0, 60_000),
)
def test_water_level_is_its_definition(units, room):
    """The bisection that sums only the units above the level tried finds the largest level
    whose request fits, as summing every unit does."""
    from opctx.context.fit import _water_level

    sizes = [s for s, _ in units]
    floors = [min(s, f) for s, f in units]
    fits = lambda c: sum(max(min(s, c), f) for s, f in zip(sizes, floors, strict=True)) <= room  # noqa: E731
    level = _water_level(sizes, floors, room)
    if sum(floors) > room:
        assert level is None
    else:
        assert fits(level) and (level >= max(sizes, default=0) or not fits(level + 1))


# ------------------------------------------------------------------------------ cuts carried across requests


def _over_window(n: int) -> list[dict]:
    """A conversation of ``n`` messages whose tool outputs are each larger than the windows
    below (every one of them must be cut)."""
    out: list[dict] = []
    for i in range(n):
        if i % 2 == 0:
            out.append({"role": "user", "content": filler(6_000, f"output {i}: ")})
        else:
            out.append({"role": "assistant", "content": f"read part {i}"})
    return out


def test_carried_cuts_are_sent_again_while_the_request_fits_with_them() -> None:
    from opctx.context.fit import CarriedCuts

    carried = CarriedCuts(0.2)
    messages = _over_window(3)
    first = fit_request("", messages, None, 3_000, estimator=HEURISTIC, carried=carried)
    assert first.fits and first.truncated == 2 and len(carried) == 2
    assert first.tokens == request_tokens(None, first.messages, None) <= 3_000 * 0.8  # with the headroom
    more = [*messages, {"role": "assistant", "content": "short"}]
    second = fit_request("", more, None, 3_000, estimator=HEURISTIC, carried=carried)
    # the very strings sent before: the prefix of the request does not change
    assert second.messages[0] is first.messages[0] and second.messages[2] is first.messages[2]
    assert second.messages[1] is more[1] and second.messages[3] is more[3]
    assert second.truncated == 2 and second.tokens == request_tokens(None, second.messages, None) <= 3_000
    # a fresh fit of the same request would cut to the budget, not below it
    assert fit_request("", more, None, 3_000, estimator=HEURISTIC).tokens > second.tokens
    # a new large output no longer fits with the cuts made: fitted afresh, with the headroom
    grown = [*more, {"role": "user", "content": filler(6_000, "new output: ")}]
    third = fit_request("", grown, None, 3_000, estimator=HEURISTIC, carried=carried)
    assert third.fits and third.truncated == 3 and third.tokens <= 3_000 * 0.8
    assert third.messages[0] is not first.messages[0]
    assert third.tokens == request_tokens(None, third.messages, None)


def test_carried_cuts_let_go_when_the_request_fits_or_changes() -> None:
    from opctx.context.fit import CarriedCuts

    carried = CarriedCuts(0.1)
    system = filler(20_000, "SYSTEM ")
    messages = _over_window(3)
    first = fit_request(system, messages, None, 4_000, estimator=HEURISTIC, carried=carried)
    assert first.system_prompt != system and len(carried) == 3
    # an equal system prompt keeps its cut; another one is fitted afresh
    again = fit_request(system[:], [*messages, {"role": "assistant", "content": "ok"}], None, 4_000,
                        estimator=HEURISTIC, carried=carried)
    assert again.system_prompt is first.system_prompt
    other = fit_request(filler(20_000, "OTHER "), messages, None, 4_000, estimator=HEURISTIC, carried=carried)
    assert other.system_prompt.startswith("OTHER ") and other.system_prompt is not first.system_prompt
    # a message sent as another object (changed, say by aging) is not taken for the one cut
    copies = [dict(m) for m in messages]
    fresh = fit_request("", copies, None, 3_000, estimator=HEURISTIC, carried=carried)
    assert all(m is not n for m, n in zip(fresh.messages, first.messages[:3], strict=True))
    # a request that fits whole sends everything whole and keeps no cut
    small = fit_request("", [{"role": "user", "content": "hi"}], None, 3_000, estimator=HEURISTIC, carried=carried)
    assert small.truncated == 0 and len(carried) == 0
    with pytest.raises(ValueError, match="headroom"):
        CarriedCuts(1.5)


def test_the_headroom_gives_way_when_only_the_budget_itself_can_be_met() -> None:
    """Fifty short messages whose fixed costs fill most of the budget: below it by the
    headroom, even every cut cannot fit; at the budget it fits."""
    from opctx.context.fit import CarriedCuts

    messages = [{"role": "user", "content": f"note {i}"} for i in range(50)]
    messages.append({"role": "user", "content": filler(6_000, "log: ")})
    floor = fit_request("", messages, None, 10, estimator=HEURISTIC)
    assert not floor.fits
    least = request_tokens(None, messages[:-1], None) + 40
    carried = CarriedCuts(0.5)
    fitted = fit_request("", messages, None, least, estimator=HEURISTIC, carried=carried)
    assert fitted.fits and least * 0.5 < fitted.tokens <= least and fitted.truncated == 1


def test_engine_carries_cuts_across_a_session_and_zero_headroom_fits_afresh() -> None:
    from opctx.context.policy import CompactionPolicy

    def engine(headroom: float) -> DefaultContextEngine:
        policy = CompactionPolicy().replace(**{
            "budget.context_window": 8_000, "budget.output_reserve": 1_024, "budget.fit_headroom": headroom,
            "trigger.recommend_pct": None, "trigger.auto_pct": None, "trigger.emergency_pct": None,
        })
        return DefaultContextEngine(policy=policy, estimator=HEURISTIC)

    history = _over_window(40)
    carrying, afresh = engine(0.25), engine(0.0)
    sent_before: list[dict] = []
    fresh_fits, kept = 0, 0
    for end in range(4, 41, 2):
        prep = carrying.prepare("", "s", history[:end], "gpt-4o", None)
        budget = prep.budget.input_budget
        assert request_tokens(None, prep.agent_messages, None) <= budget
        shared = sum(a is b for a, b in zip(prep.agent_messages, sent_before, strict=False))
        if shared == len(sent_before):
            kept += 1  # every message sent before is sent again as it was
        else:
            fresh_fits += 1
            assert prep.request_tokens <= budget * 0.75
        sent_before = prep.agent_messages
        # without headroom, each request is what fitting it alone gives
        plain = afresh.prepare("", "s", history[:end], "gpt-4o", None)
        alone = fit_request("", to_provider_messages(plain.history_dicts), None, budget, model="gpt-4o",
                            estimator=HEURISTIC)
        assert plain.agent_messages == alone.messages and plain.request_tokens == alone.tokens
    assert kept > fresh_fits > 1


def test_prepare_without_assembling_gives_the_same_figures_and_decision() -> None:
    """``assemble=False`` (what a replay asks): no request assembled or fitted, and every
    figure the decision rests on as with the request fitted."""
    history = _over_window(30)

    def engine() -> DefaultContextEngine:
        return DefaultContextEngine(context_window=8_000, estimator=HEURISTIC)

    sending, reading = engine(), engine()
    for end in (6, 18, 30):
        sent = sending.prepare("Be brief.", "s", history[:end], "gpt-4o", None)
        read = reading.prepare("Be brief.", "s", history[:end], "gpt-4o", None, assemble=False)
        assert sent.request_tokens is not None and (sent.truncated_parts > 0) == (end > 6)
        assert read.agent_messages == [] and read.request_tokens is None and read.truncated_parts == 0
        assert read.system_prompt == "Be brief." and read.overflow is None
        assert (read.budget, read.budget_pct, read.decision, read.history_dicts, read.usage) == (
            sent.budget, sent.budget_pct, sent.decision, sent.history_dicts, sent.usage)
        assert read.decision_path == [w for w in sent.decision_path if not w.startswith("fit:")]


@given(
    history=histories(),
    system=st.builds(lambda n: filler(n, "SYSTEM "), SIZES),
    window=st.sampled_from([1_000, 4_096, 8_192, 32_768]),
    headroom=st.sampled_from([0.05, 0.1, 0.3]),
    step=st.integers(1, 4),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_every_request_of_a_growing_session_fits_with_the_cuts_carried(history, system, window, headroom, step):
    """Request after request of one session, the cuts kept from earlier requests never make
    a request larger than the budget, nor one the provider could not be sent."""
    from opctx.context.policy import CompactionPolicy

    policy = CompactionPolicy().replace(**{"budget.context_window": window, "budget.fit_headroom": headroom})
    engine = DefaultContextEngine(policy=policy, estimator=HEURISTIC)
    for end in range(1, len(history) + 1, step):
        prep = engine.prepare(system, "s", history[:end], "gpt-4o", None)
        assert_fits_or_cannot(prep, system, None, prep.budget.input_budget, to_provider_messages(prep.history_dicts))
