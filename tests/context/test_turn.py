"""process_user_turn and trigger_compaction: the overall flow, end to end on DagSessionDB(":memory:")."""

from __future__ import annotations

import random
import threading
import time

import pytest
from _compaction_fixtures import assert_pairs_intact, filler

from opctx.context.engine import ContextEngine, DefaultContextEngine, EngineError
from opctx.context.summarize import Summarizer
from opctx.context.tokens import Estimator, register_model, unregister_model
from opctx.context.turn import (
    TurnResult,
    is_context_length_error,
    process_user_turn,
    trigger_compaction,
)
from opctx.dag.providers import ProviderHTTPError, Reply, ToolCall, Usage
from opctx.dag.session_db import DagSessionDB

HEURISTIC = Estimator("heuristic")
AGENT = "You are a coding agent working in /repo."


class ToolThenAnswer:
    """A scripted model: on a fresh user request it calls `read`, then it answers."""

    def __init__(self, sizes: list[int] | None = None, seed: int = 0, usage: bool = True):
        self.rng = random.Random(seed)
        self.sizes = sizes
        self.calls: list[list[dict]] = []
        self.usage = usage

    def __call__(self, messages, model, system, tools):
        self.calls.append(messages)
        n = len(self.calls)
        prompt_tokens = HEURISTIC.history_tokens(messages) + (HEURISTIC.text_tokens(system) if system else 0)
        usage = Usage(input_tokens=prompt_tokens, output_tokens=30) if self.usage else None
        last = messages[-1]
        if last["role"] == "user":
            size = self.sizes[n % len(self.sizes)] if self.sizes else self.rng.randint(200, 6_000)
            return Reply(text="", tool_calls=[ToolCall(id=f"call_{n}", name="read", arguments={"tokens": size})], usage=usage)
        return Reply(text=f"answer {n}: " + filler(120), usage=usage)


def read(tokens: int) -> str:
    """Read a file (returns about `tokens` tokens of text)."""
    return filler(int(tokens * 3.8))


def summary_provider(text: str = "## User intent\nkeep going"):
    calls = []

    def call(messages, model, system, tools):
        calls.append(messages)
        return Reply(text=text)

    call.calls = calls  # type: ignore[attr-defined]
    return call


def make(window: int = 32_000, summarizer_call=None, **kw) -> tuple[DagSessionDB, str, DefaultContextEngine]:
    db = DagSessionDB(":memory:")
    sid = db.create_session(title="turns")
    engine = DefaultContextEngine(
        session_db=db,
        context_window=window,
        estimator=HEURISTIC,
        summarizer=Summarizer(summarizer_call or summary_provider(), model="s", count_tokens=HEURISTIC.text_tokens),
        **kw,
    )
    return db, sid, engine


def run(db, sid, engine, text, provider, **kw) -> TurnResult:
    kw.setdefault("tools", {"read": read})
    return process_user_turn(db, sid, text, agent=AGENT, provider_call=provider, model="gpt-4o", engine=engine, **kw)


def test_one_turn_with_a_tool_call() -> None:
    db, sid, engine = make()
    provider = ToolThenAnswer(sizes=[300])
    res = run(db, sid, engine, "read the config", provider)
    assert res.stop_reason == "final" and res.iterations == 2
    assert res.text.startswith("answer 2")
    branch = db.get_branch(sid)
    assert [m["role"] for m in branch] == ["user", "assistant", "tool", "assistant"]
    assert [m["id"] for m in branch] == res.message_ids
    assert branch[1]["tool_calls"][0]["name"] == "read"
    assert branch[2]["tool_call_id"] == branch[1]["tool_calls"][0]["id"]
    assert res.tool_results == [{"id": "call_1", "name": "read", "is_error": False, "message_id": branch[2]["id"]}]
    # the provider saw the system prompt separately and OpenAI-format messages
    assert provider.calls[1][1]["tool_calls"][0]["function"]["name"] == "read"
    assert len(res.calls) == 2 and all(c.input_used <= c.input_budget for c in res.calls)
    assert res.total_usage.output_tokens == 60
    # after_turn fed the real usage back
    assert engine.usage_tracker.get(sid).source == "provider"


def test_tool_errors_are_results_and_max_iterations_stops() -> None:
    db, sid, engine = make()

    def always_calls(messages, model, system, tools):
        return Reply(text="", tool_calls=[ToolCall(id=f"c{len(messages)}", name="missing_tool", arguments={})])

    res = run(db, sid, engine, "loop forever", always_calls, max_iterations=3)
    assert res.stop_reason == "max_iterations" and res.iterations == 3
    assert all(t["is_error"] for t in res.tool_results) and len(res.tool_results) == 3
    assert_pairs_intact(db.get_branch(sid))


def test_auto_compaction_inline_then_reprepare() -> None:
    events: list[str] = []
    db, sid, engine = make()
    provider = ToolThenAnswer(sizes=[3_000])
    compactions = []
    for i in range(12):
        res = run(db, sid, engine, f"request {i}", provider, on_event=lambda n, p: events.append(n))
        compactions += [c for c in res.compactions if c.ok]
        for call in res.calls:
            assert call.input_used <= call.input_budget
    assert compactions, "the 32K window fills up within 12 turns of 3K tool outputs"
    assert all(c.reason == "auto" for c in compactions)
    assert "compaction_started" in events and "compaction_finished" in events
    assert "compaction_recommended" in events
    branch = db.get_branch(sid)
    assert branch[3]["type"] == "compactionSummary"
    assert branch[0]["content"] == "request 0"


@pytest.mark.parametrize("failure", ["raises", "times_out", "cancelled"])
def test_summary_failure_falls_back_and_loses_nothing(failure: str) -> None:
    cancel = threading.Event()

    def bad_summary(messages, model, system, tools):
        if failure == "raises":
            raise ProviderHTTPError(503, "overloaded")
        if failure == "cancelled":
            cancel.set()
        time.sleep(1.0)
        return "late"

    db, sid, engine = make(summarizer_call=bad_summary)
    engine.summarizer.config.timeout = 0.2 if failure == "times_out" else 30
    provider = ToolThenAnswer(sizes=[1_500])
    for i in range(10):
        run(db, sid, engine, f"request {i}", provider)
    originals = {m["id"]: m for m in db.get_messages(sid)}
    if failure == "cancelled":
        res = engine.compact(AGENT, sid, "gpt-4o", cancel_event=cancel, user_initiated=True)
    else:
        res = trigger_compaction(db, sid, agent=AGENT, model="gpt-4o", engine=engine)
    assert res.ok and res.fell_back_to_structural
    expected = {
        "raises": "ProviderHTTPError: HTTP 503 from provider: overloaded",
        "times_out": "SummaryTimeout: no summary within 0.2s",
        "cancelled": "SummaryCancelled: cancelled during the summary call",
    }[failure]
    assert res.error == expected
    assert res.reason == "manual"
    # every folded message is listed in the structural summary, and still stored unchanged
    folded_ids = db.get_branch(sid)[3]["compaction"]["folded_ids"]
    assert res.summary_text.count("\n[") >= len(folded_ids)
    for mid in folded_ids:
        assert db.get_message(sid, mid) == originals[mid]
    # and the session carries on
    after = run(db, sid, engine, "carry on", provider)
    assert after.stop_reason == "final"


def test_trigger_compaction_manual_with_keep_recent_tokens() -> None:
    db, sid, engine = make()
    provider = ToolThenAnswer(sizes=[800])
    for i in range(10):
        run(db, sid, engine, f"request {i}", provider)
    res = trigger_compaction(db, sid, 1_000, agent=AGENT, model="gpt-4o", engine=engine)
    assert res.ok and res.reason == "manual"
    branch = db.get_branch(sid)
    assert branch[-1]["id"] == res.new_head_id
    assert sum(HEURISTIC.message_tokens(m) for m in branch[4:]) < 1_000 + 2_000


def test_context_length_error_recovers_once() -> None:
    db, sid, engine = make()
    provider = ToolThenAnswer(sizes=[1_500])
    for i in range(10):
        run(db, sid, engine, f"request {i}", provider)
    state = {"failed": False}

    def picky(messages, model, system, tools):
        if not state["failed"]:
            state["failed"] = True
            raise ProviderHTTPError(400, "This model's maximum context length is 32000 tokens")
        return Reply(text="fine now")

    res = run(db, sid, engine, "one more", picky)
    assert res.text == "fine now"
    assert [c.reason for c in res.compactions] == ["recovered"]
    assert any("maximum context length" in e for e in res.errors)
    assert is_context_length_error(ProviderHTTPError(400, "prompt is too long: 250000 tokens"))
    assert not is_context_length_error(ProviderHTTPError(401, "context length"))

    def broken(messages, model, system, tools):
        raise ProviderHTTPError(500, "boom")

    with pytest.raises(ProviderHTTPError):
        run(db, sid, engine, "fails", broken)


class BrokenEngine(ContextEngine):
    name = "broken"

    def prepare(self, agent, session, history, model, tools):
        raise RuntimeError("index corrupted")

    def compact(self, *a, **kw):
        raise RuntimeError("never")


def test_a_failing_custom_engine_is_reported_not_replaced() -> None:
    db = DagSessionDB(":memory:")
    sid = db.create_session()
    with pytest.raises(EngineError, match="context engine 'broken' failed in prepare: RuntimeError: index corrupted"):
        process_user_turn(db, sid, "hi", agent=None, provider_call=lambda *a: "x", model="m", engine=BrokenEngine())
    with pytest.raises(EngineError, match="unknown context engine 'nope'"):
        process_user_turn(db, sid, "hi", agent={"context_engine": "nope"}, provider_call=lambda *a: "x", model="m")


def test_nothing_can_be_cut_does_not_loop() -> None:
    # one enormous first request (in the protected head) fills the window by itself
    db, sid, engine = make(window=8_000)

    def answer(messages, model, system, tools):
        return Reply(text="ok")

    res = run(db, sid, engine, filler(30_000), answer, tools=None)
    assert res.stop_reason == "final"
    res2 = run(db, sid, engine, "and now?", answer, tools=None)
    attempts = res.compactions + res2.compactions
    assert len(attempts) == 1 and not attempts[0].ok and attempts[0].disabled_auto
    assert "nothing" in attempts[0].error
    assert engine.guard_state(sid)["disabled"]


def test_eight_k_window_turns() -> None:
    db, sid, engine = make(window=8_000)
    provider = ToolThenAnswer(sizes=[200, 600, 900, 400])
    compactions = 0
    for i in range(25):
        res = run(db, sid, engine, f"small step {i}", provider)
        compactions += sum(1 for c in res.compactions if c.ok)
        assert len(res.compactions) <= 2
        for call in res.calls:
            assert call.input_used <= call.input_budget
    assert compactions >= 3
    assert_pairs_intact(db.get_branch(sid))


@pytest.mark.slow
def test_three_hundred_turns_on_a_32k_window() -> None:
    db, sid, engine = make(window=32_000)
    provider = ToolThenAnswer(seed=7)  # tool outputs of 200-6,000 tokens
    compactions = 0
    head_ids = None
    for i in range(300):
        res = run(db, sid, engine, f"turn {i}: inspect the next module", provider)
        assert res.stop_reason == "final"
        for call in res.calls:
            assert call.input_used <= call.input_budget, (i, call)
        for c in res.compactions:
            assert c.ok, c.error
            compactions += 1
            branch = db.get_branch(sid)
            head = [m.get("copied_from") for m in branch[:3]]
            if head_ids is None:
                head_ids = [m["copied_from"] for m in branch[:3]]
            # the protected head is always copied from the very first messages
            assert [db.get_message(sid, h)["content"] for h in head] == [
                db.get_message(sid, h)["content"] for h in head_ids
            ]
            assert branch[3]["type"] == "compactionSummary"
            assert_pairs_intact(branch)
    assert compactions >= 20


def test_default_engine_summarises_with_the_agents_provider() -> None:
    db = DagSessionDB(":memory:")
    sid = db.create_session()
    inner = ToolThenAnswer(sizes=[4_000])
    summary_prompts = []

    def provider(messages, model, system, tools):
        if system and system.startswith("You condense"):
            summary_prompts.append(messages[0]["content"])
            return Reply(text="## User intent\nwritten by the agent's provider")
        return inner(messages, model, system, tools)

    # no engine given: resolve_engine_for(agent) -> the shared default engine, which
    # reads the window from the model table
    agent = {"name": "coder", "system_prompt": AGENT}
    compacted = []
    register_model("opctx-test-tiny-32k", 32_000, 4_000)
    try:
        for i in range(10):
            res = process_user_turn(
                db, sid, f"request {i}", agent=agent, provider_call=provider,
                model="opctx-test-tiny-32k", tools={"read": read},
            )
            compacted += [c for c in res.compactions if c.ok]
    finally:
        unregister_model("opctx-test-tiny-32k")
    assert compacted
    assert summary_prompts, "the summary was asked of the agent's provider"
    llm_made = [c for c in compacted if not c.fell_back_to_structural]
    assert llm_made and llm_made[0].summary_text == "## User intent\nwritten by the agent's provider"


def test_replies_without_text_beside_tool_calls() -> None:
    # OpenAI-style providers answer a tool call with content None
    db, sid, engine = make()
    replies = iter([Reply(text=None, tool_calls=[ToolCall("c1", "read", {"tokens": 10})]), Reply(text=None)])
    res = run(db, sid, engine, "read it", lambda *a: next(replies))
    assert res.stop_reason == "final" and res.text == "" and res.iterations == 2
    branch = db.get_branch(sid)
    assert [m["role"] for m in branch] == ["user", "assistant", "tool", "assistant"]
    assert branch[1]["content"] == "" and branch[1]["tool_calls"][0]["name"] == "read"


def test_agentic_tools_record_their_frame_and_inner_calls_below_the_asking_message() -> None:
    from opctx.dag.agentic import Runtime, _call_id, _store, agentic_function
    from opctx.dag.providers import ScriptedProvider

    db, sid, engine = make()
    seen = {}

    @agentic_function
    def summarise(path: str, runtime=Runtime(ScriptedProvider(["a short summary"]), "small")) -> str:
        """Summarise a file."""
        seen["frame"] = _call_id.get()
        seen["status"] = db.get_message(sid, _call_id.get())  # the placeholder, written on entry
        return runtime.exec(f"summarise {path}")

    replies = iter([Reply(text="", tool_calls=[ToolCall("c1", "summarise", {"path": "a.py"})]), Reply(text="done")])
    res = run(db, sid, engine, "summarise a.py", lambda *a: next(replies), tools={"summarise": summarise})
    assert res.text == "done"
    graph = db.store(sid).load()
    asking = graph.get(res.message_ids[1])
    assert asking.metadata.get("tool_calls")
    frame = graph.get(seen["frame"])
    assert frame.role == "code" and frame.name == "summarise" and frame.caller == asking.id
    assert frame.status == "ok" and frame.output == "a short summary" and frame.metadata["doc"] == "Summarise a file."
    assert seen["status"]["status"] == "running"  # visible while it ran
    inner = [n for n in graph if n.caller == frame.id]
    assert [(n.role, n.name, n.output) for n in inner] == [("llm", "small", "a short summary")]
    # the conversation itself is untouched: user, assistant, tool result, assistant
    assert [m["role"] for m in db.get_branch(sid)] == ["user", "assistant", "tool", "assistant"]
    assert _store.get() is None and _call_id.get() is None  # reset after the turn


def test_the_dag_context_is_reset_when_the_turn_fails() -> None:
    from opctx.dag.agentic import _call_id, _store

    db, sid, engine = make()
    seen = []

    def failing(messages, model, system, tools):
        seen.append(_store.get())
        raise RuntimeError("provider down")

    with pytest.raises(RuntimeError, match="provider down"):
        run(db, sid, engine, "hello", failing)
    assert seen and seen[0] is db.store(sid)  # installed while the turn ran
    assert _store.get() is None and _call_id.get() is None


def test_trigger_compaction_stores_a_summary_with_a_lone_surrogate():
    from opctx.context.turn import trigger_compaction

    db, sid, engine = make(summarizer_call=summary_provider("## intent\nhalf an emoji \ud83d"))
    for i in range(10):
        run(db, sid, engine, f"request {i} \udc00", ToolThenAnswer(sizes=[1_500]))
    res = trigger_compaction(db, sid, agent=AGENT, model="gpt-4o", engine=engine)
    assert res.ok, res.error
    summary = db.get_message(sid, res.summary_id)
    assert "half an emoji \ufffd" in summary["content"]
    assert db.get_extra_meta(sid)  # the session's meta (last summary text) was stored too
