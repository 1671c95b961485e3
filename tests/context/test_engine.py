"""ContextEngine hooks, DefaultContextEngine (prepare, compact, guards, events) and the registry (§5)."""

from __future__ import annotations

import dataclasses
import inspect
import math

import pytest
from _compaction_fixtures import assistant, call, chat_turns, filler, results, tool_turn, user
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.engine import (
    CONTEXT_ENGINE_REGISTRY,
    ContextEngine,
    DefaultContextEngine,
    EngineError,
    default_engine,
    get_engine,
    register_engine,
    resolve_engine_for,
    to_provider_messages,
    unregister_engine,
)
from opctx.context.policy import CompactionPolicy
from opctx.context.provider_messages import _ProviderCache
from opctx.context.summarize import Summarizer, SummarizerConfig
from opctx.context.tokens import Estimator
from opctx.context.types import (
    AgingReport,
    CompactRequest,
    CompactResult,
    Decision,
    DecisionKind,
    TurnPrep,
)
from opctx.dag.providers import Reply, ScriptedProvider, Usage
from opctx.dag.session_db import DagSessionDB

SYSTEM = "You are a careful test agent."


class CountingEstimator(Estimator):
    def __init__(self) -> None:
        super().__init__("heuristic")
        self.message_calls = 0

    def message_tokens(self, msg, model=None, method=None):
        self.message_calls += 1
        return super().message_tokens(msg, model, method)


HEURISTIC = Estimator("heuristic")  # fast and predictable: 3.8 ASCII characters per token


def summariser(text: str = "## User intent\nsummary text") -> tuple[Summarizer, ScriptedProvider]:
    provider = ScriptedProvider(lambda *a: Reply(text=text))
    return Summarizer(provider, model="summary-model", count_tokens=HEURISTIC.text_tokens), provider


def stored_session(db: DagSessionDB, msgs: list[dict]) -> str:
    sid = db.create_session(title="engine")
    db.append_messages(sid, [{k: v for k, v in m.items() if k != "id"} for m in msgs])
    return sid


def make_engine(db: DagSessionDB, window: int = 32_000, **kw) -> DefaultContextEngine:
    kw.setdefault("summarizer", summariser()[0])
    kw.setdefault("estimator", HEURISTIC)
    return DefaultContextEngine(session_db=db, context_window=window, aging=False, **kw)


@pytest.fixture
def db() -> DagSessionDB:
    return DagSessionDB(":memory:")


# ------------------------------------------------------------------ the ABC


def test_abc_exposes_every_hook() -> None:
    hooks = {
        "on_session_start", "ingest", "prepare", "should_recommend", "should_auto_compact",
        "compact", "after_turn", "on_session_end",
    }
    assert hooks <= set(dir(ContextEngine))
    assert ContextEngine.__abstractmethods__ == {"prepare", "compact"}
    with pytest.raises(TypeError):
        ContextEngine()  # type: ignore[abstract]
    # the turn loop passes one CompactRequest; nobody inspects a signature
    assert list(inspect.signature(ContextEngine.compact).parameters)[1:] == ["request"]
    assert inspect.signature(ContextEngine.compact).parameters["request"].annotation in (
        CompactRequest, "CompactRequest")
    assert list(inspect.signature(ContextEngine.prepare).parameters)[1:] == [
        "agent", "session", "history", "model", "tools",
    ]


def test_components_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        DefaultContextEngine(None)  # type: ignore[misc]
    params = inspect.signature(DefaultContextEngine.__init__).parameters
    for name in ("policy", "usage_tracker", "budget_allocator", "ager", "summarizer", "persister",
                 "references", "session_db", "clock", "estimator", "name"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
    spec = DefaultContextEngine()
    assert spec.policy == CompactionPolicy()
    assert (spec.recommend_pct, spec.auto_compact_pct, spec.emergency_pct) == (0.70, 0.80, 0.95)
    hermes = DefaultContextEngine(policy=CompactionPolicy().replace(**{
        "trigger.recommend_pct": 0.4, "trigger.auto_pct": 0.5}))
    assert (hermes.recommend_pct, hermes.auto_compact_pct, hermes.emergency_pct) == (0.4, 0.5, 0.95)
    # the policy is the one home of the numbers: the engine's attributes are views of it
    with pytest.raises(AttributeError):
        hermes.auto_compact_pct = 0.9  # type: ignore[misc]
    never = DefaultContextEngine(policy=CompactionPolicy().replace(**{
        "trigger.recommend_pct": None, "trigger.auto_pct": None, "trigger.emergency_pct": None}))
    assert never.auto_compact_pct == math.inf and never.config.trigger_pct == 1.0


def test_the_older_keyword_arguments_build_a_policy_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="policy=CompactionPolicy"):
        legacy = DefaultContextEngine(auto_compact_pct=0.6, recommend_pct=0.5, context_window=50_000,
                                      tail_budget_share=0.4, min_saving=0.2, rearm_fraction=0.3,
                                      aging=False, config=SummarizerConfig(keep_ratio=0.2))
    assert legacy.policy == CompactionPolicy().replace(**{
        "trigger.recommend_pct": 0.5, "trigger.auto_pct": 0.6, "budget.context_window": 50_000,
        "cut.tail_budget_share": 0.4, "guard.min_saving": 0.2, "guard.rearm_fraction": 0.3,
        "aging.kind": "none", "cut.keep_ratio": 0.2})
    assert legacy.ager is None and legacy.context_window == 50_000
    with pytest.warns(DeprecationWarning):
        never = DefaultContextEngine(recommend_pct=math.inf, auto_compact_pct=math.inf, emergency_pct=math.inf)
    assert never.policy.trigger.auto_pct is None and never.auto_compact_pct == math.inf
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="trigger.recommend_pct"):
        DefaultContextEngine(recommend_pct=0.9, auto_compact_pct=0.8)
    # thresholds not given come from the config, whose own defaults are the policy's
    with pytest.warns(DeprecationWarning):
        hermes = DefaultContextEngine(config=SummarizerConfig(recommend_pct=0.4, trigger_pct=0.5))
    assert (hermes.recommend_pct, hermes.auto_compact_pct, hermes.emergency_pct) == (0.4, 0.5, 0.95)
    with pytest.warns(DeprecationWarning):
        explicit = DefaultContextEngine(config=SummarizerConfig(trigger_pct=0.5, recommend_pct=0.4),
                                        auto_compact_pct=0.6)
    assert explicit.auto_compact_pct == 0.6
    # a summariser's config still says the engine's numbers when nothing else does (no warning)
    summarizer = Summarizer(None, config=SummarizerConfig(keep_ratio=0.3))
    assert DefaultContextEngine(summarizer=summarizer).policy.cut.keep_ratio == 0.3
    with pytest.raises(TypeError, match="not both"):
        DefaultContextEngine(policy=CompactionPolicy(), auto_compact_pct=0.5)
    with pytest.raises(TypeError, match="unexpected keyword"):
        DefaultContextEngine(wibble=1)
    with pytest.raises(ValueError, match="still say 'client'"):
        DefaultContextEngine(policy=CompactionPolicy().replace(**{
            "client.name": "codex", "trigger.auto_pct": "client"}))


def test_the_ager_comes_from_the_policy() -> None:
    from opctx.context.aging import TurnAger
    from opctx.context.masking import ObservationMasker

    def kind(k: str, **more: object) -> DefaultContextEngine:
        return DefaultContextEngine(policy=CompactionPolicy().replace(**{"aging.kind": k, **more}))

    turns = kind("turns", **{"aging.min_tokens": 123})
    assert isinstance(turns.ager, TurnAger) and turns.ager.min_tokens == 123
    masking = kind("masking", **{"aging.keep_last": 3})
    assert isinstance(masking.ager, ObservationMasker) and masking.ager.keep_last == 3
    assert kind("none").ager is None
    with pytest.raises(ValueError, match="Claude Code's clearing"):
        kind("microcompact")


def test_the_decision_is_typed() -> None:
    engine = DefaultContextEngine()
    thresholds = (0.7, 0.8, 0.95)
    assert engine.decide(0.5).kind is DecisionKind.NONE
    assert engine.decide(0.5, redacted=2).kind is DecisionKind.AGE
    assert engine.decide(0.75).kind is DecisionKind.RECOMMEND
    compact = engine.decide(0.85)
    assert compact.kind is DecisionKind.COMPACT and compact.compacts and compact.path_word == "auto_compact"
    assert (compact.budget_pct, compact.recommend_pct, compact.auto_pct, compact.emergency_pct) == (0.85, *thresholds)
    assert engine.decide(0.97).kind is DecisionKind.EMERGENCY and engine.decide(0.97).compacts
    disabled = engine.decide(0.97, auto_disabled=True, reason="guard")
    assert disabled.kind is DecisionKind.DISABLED and not disabled.compacts and disabled.reason == "guard"
    assert engine.decide(0.5, auto_disabled=True).kind is DecisionKind.NONE
    assert Decision.of(0.5, (math.inf,) * 3).kind is DecisionKind.NONE
    # nothing parses decision_path: a prep whose telemetry says otherwise is decided by its decision
    prep = engine.prepare(None, "s", [{"role": "user", "content": "hi"}], None, None)
    assert prep.decision.kind is DecisionKind.NONE and prep.decision_path[-1] == "ok"
    forced = dataclasses.replace(prep, decision=engine.decide(0.9), decision_path=["ok"])
    assert engine.should_auto_compact(forced)
    undecided = dataclasses.replace(prep, decision=None, budget_pct=0.9)
    assert engine.should_auto_compact(undecided)  # an engine that does not decide: the threshold


def test_compact_takes_a_request_and_the_older_arguments(db) -> None:
    sid = db.create_session(title="t")
    parent = None
    for i in range(40):
        parent = db.append_message(sid, {"role": "user" if i % 2 == 0 else "assistant",
                                         "content": f"message {i} " + "words " * 200, "parent_id": parent})["id"]
    engine = DefaultContextEngine(session_db=db, policy=CompactionPolicy().replace(**{
        "budget.context_window": 16_000, "aging.kind": "none"}))
    events: list[str] = []
    request = CompactRequest(sid, user_initiated=True, trigger="test", on_event=lambda n, p: events.append(n))
    assert request.why == "manual"
    result = engine.compact(request)
    assert result.ok and result.reason == "manual" and events == ["compaction_started", "compaction_finished"]
    meta = db.get_message(sid, result.summary_id)["compaction"]
    assert meta["trigger"] == "test"
    # the older positional call is the same request
    assert CompactRequest.from_arguments(None, sid, None, None, None, True, trigger="t") == CompactRequest(
        sid, user_initiated=True, trigger="t")
    again = engine.compact(None, sid, None, user_initiated=True)
    assert again.reason == "manual"
    with pytest.raises(TypeError, match="not both"):
        engine.compact(request, sid)
    with pytest.raises(ValueError, match="auto, manual or recovered"):
        engine.compact(CompactRequest(sid, reason="whenever"))  # type: ignore[arg-type]


def test_the_session_store_protocol_is_declared() -> None:
    from opctx.context.persistence import SessionStore

    assert isinstance(DagSessionDB(":memory:"), SessionStore)
    assert not isinstance(object(), SessionStore)
    params = inspect.signature(SessionStore.set_head).parameters
    assert params["expected"].kind is inspect.Parameter.KEYWORD_ONLY


# ------------------------------------------------------------------ prepare


def test_prepare_returns_a_full_turn_prep(db: DagSessionDB) -> None:
    c = call("read_file")
    history = [user("fix the bug in /src/app.py"), c, *results(c, 50), assistant("found it")]
    sid = stored_session(db, history)
    branch = db.get_branch(sid)
    engine = make_engine(db)
    prep = engine.prepare(SYSTEM, sid, branch, "gpt-4o", None)
    assert isinstance(prep, TurnPrep)
    assert prep.system_prompt == SYSTEM
    assert prep.context_window == 32_000 == prep.budget.context_window
    assert prep.budget_pct == prep.budget.input_used_pct
    assert prep.budget.history > 0 and prep.budget.system_prompt > 0
    assert prep.decision_path[0] == "usage:estimate"
    assert prep.decision_path[1] == "aging:redacted=0"
    assert prep.decision_path[2] == f"budget:{prep.budget_pct:.2f}"
    assert prep.decision_path[-1] == "ok"
    assert prep.history_dicts == branch
    assert [m["role"] for m in prep.agent_messages] == ["user", "assistant", "tool", "assistant"]
    tc = prep.agent_messages[1]["tool_calls"][0]
    assert tc["type"] == "function" and tc["function"]["name"] == "read_file"
    assert prep.agent_messages[2]["tool_call_id"] == tc["id"]
    assert prep.summary_id is None


def test_prepare_is_incremental(db: DagSessionDB) -> None:
    est = CountingEstimator()
    engine = make_engine(db, estimator=est)
    history = chat_turns(1_000, size=20)
    for i, m in enumerate(history):
        m["timestamp"] = float(i)
    engine.prepare(SYSTEM, "s1", history, "gpt-4o", None)
    first = est.message_calls
    assert first >= 2_000
    history += [user("one more"), assistant("sure")]
    engine.prepare(SYSTEM, "s1", history, "gpt-4o", None)
    # the two new messages (in the history table, then as provider messages in the
    # request's measure) plus the system prompt, never the 2,000 old ones again
    assert est.message_calls - first <= 5


def test_prepare_uses_provider_usage_after_a_turn(db: DagSessionDB) -> None:
    engine = make_engine(db)
    history = chat_turns(5)
    prep = engine.prepare(SYSTEM, "s2", history, "gpt-4o", None)
    engine.after_turn("s2", Usage(input_tokens=5_000, output_tokens=50), prep)
    history = history + [assistant("reply"), user("next")]
    prep2 = engine.prepare(SYSTEM, "s2", history, "gpt-4o", None)
    assert prep2.decision_path[0] == "usage:provider"
    # provider prefix (5,000, which already holds system and tools) + the two new messages
    assert 5_000 < prep2.budget.input_used < 5_100
    assert prep2.usage.source == "provider"


def test_thresholds_and_decisions(db: DagSessionDB) -> None:
    engine = make_engine(db, window=10_000)
    budget = engine.budget_allocator.allocate(10_000, 0, 0, 0).input_budget

    def prep_at(pct: float) -> TurnPrep:
        size = int(budget * pct)
        history = [user(filler(size * 38 // 10))]
        return engine.prepare(None, "s3", history, None, None)

    assert prep_at(0.5).decision_path[-1] == "ok"
    p = prep_at(0.72)
    assert p.decision_path[-1] == "recommend" and engine.should_recommend(p) and not engine.should_auto_compact(p)
    p = prep_at(0.85)
    assert p.decision_path[-1] == "auto_compact" and engine.should_auto_compact(p)
    p = prep_at(0.99)
    assert p.decision_path[-1] == "emergency" and engine.should_auto_compact(p)


def test_provider_messages_repair_broken_pairs() -> None:
    c = call("grep", "ls")
    r = results(c)
    history = [user("a"), c, r[0], {"id": "t9", "role": "tool", "tool_call_id": "gone", "name": "cat", "content": "orphan"}]
    out = to_provider_messages(history)
    assert out[1]["tool_calls"] == [
        {"id": c["tool_calls"][0]["id"], "type": "function", "function": {"name": "grep", "arguments": '{"path": "/src/grep.py"}'}}
    ]
    assert "called ls(" in out[1]["content"] and "result not in context" in out[1]["content"]
    assert out[2]["role"] == "tool"
    assert out[3] == {"role": "user", "content": "[result of tool cat (call gone)]\norphan"}
    assert to_provider_messages([{"id": "e", "role": "assistant", "content": ""}]) == []
    # ids reused turn after turn (some local models) pair with the nearest open call
    reused = []
    for _ in range(2):
        c = call("step")
        c["tool_calls"][0]["id"] = "call_0"
        reused += [user("go"), c, *results(c)]
    reused.append({"id": "t_extra", "role": "tool", "tool_call_id": "call_0", "name": "step", "content": "dup"})
    out = to_provider_messages(reused)
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "user", "assistant", "tool", "user"]
    assert out[-1]["content"] == "[result of tool step (call call_0)]\ndup"


# mostly well-paired turns (the flat fast path), sometimes an open call or an orphan result (the repair path)
_PAIRING_KINDS = ["user", "turn", "turn", "turn2", "text", "empty", "call", "orphan", "late"]


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(
                ["append"] * 4 + ["append_in_place", "age_one", "age_one", "edit_same_length", "rewind", "copy", "same"]
            ),
            st.lists(st.tuples(st.sampled_from(_PAIRING_KINDS), st.integers(0, 3)), min_size=1, max_size=5),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_provider_cache_assembles_like_the_one_shot_conversion(ops) -> None:
    """The incremental assembly (appends, aged copies patched in, rewinds, re-read copies) equals a fresh conversion."""
    cache = _ProviderCache()
    history: list[dict] = []
    counter = [0]
    opened: list[str] = []

    def fresh_id(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def messages(kind: str, k: int) -> list[dict]:
        if kind in ("turn", "turn2", "call"):
            ids = [fresh_id("c") for _ in range(2 if kind == "turn2" else 1)]
            call_msg = {"id": fresh_id("a"), "role": "assistant", "content": "",
                        "tool_calls": [{"id": i, "name": "run", "arguments": {"k": k}} for i in ids]}
            if kind == "call":  # left open (a "late" result may answer it)
                opened.extend(ids)
                return [call_msg]
            return [call_msg] + [
                {"id": fresh_id("t"), "role": "tool", "name": "run", "tool_call_id": i, "content": f"out {k} " * (k + 1)}
                for i in ids
            ]
        if kind == "late" and opened:  # a result for an earlier open call (maybe answered already)
            cid = opened[k % len(opened)]
            return [{"id": fresh_id("t"), "role": "tool", "name": "run", "tool_call_id": cid, "content": f"late {k}"}]
        if kind == "orphan":
            return [{"id": fresh_id("t"), "role": "tool", "name": "cat", "tool_call_id": f"gone{k}", "content": "x"}]
        if kind == "empty":
            return [{"id": fresh_id("a"), "role": "assistant", "content": ""}]
        return [{"id": fresh_id("u"), "role": "user" if kind == "user" else "assistant", "content": f"text {k}"}]

    for op, specs in ops:
        new = [m for kind, k in specs for m in messages(kind, k)]
        if op == "append":
            history = history + new
        elif op == "append_in_place":  # the caller grows the very list it passed last time
            history.extend(new)
        elif op == "age_one" and history:  # aging replaced one message by a new object
            i = (specs[0][1] * 7 + len(history) // 2) % len(history)
            msg = history[i]
            if msg["role"] == "tool":
                cleared = dict(msg, content="[Old tool result content cleared (was 9 tokens)]", _redacted=True)
            elif specs[0][1] % 2:  # another message in its place (new id): pairing and counts may change
                cleared = new[0]
            else:
                cleared = dict(msg, content=(msg.get("content") or "") + " note")
            history = history[:i] + [cleared] + history[i + 1 :]
        elif op == "edit_same_length" and history:
            # a node updated under its id (GraphStore.update): same role and content length
            i = (specs[0][1] * 5 + len(history) // 3) % len(history)
            msg = history[i]
            content = msg.get("content") or ""
            edited = dict(msg, content=content[::-1] if len(set(content)) > 1 else content.swapcase())
            if msg.get("tool_calls"):
                edited["tool_calls"] = [dict(tc, arguments={"edited": True}) for tc in msg["tool_calls"]]
            history = history[:i] + [edited] + history[i + 1 :]
        elif op == "rewind":
            history = history[: max(0, len(history) - specs[0][1] - 1)]
        elif op == "copy":  # the branch read again: new dicts
            history = [dict(m) for m in history]
        got = to_provider_messages(history, cache)
        assert got == to_provider_messages(history)
        got.append({"role": "user", "content": "the caller may change the list it got"})
        assert to_provider_messages(history, cache) == to_provider_messages(history)


def test_provider_cache_replacement_that_changes_the_message_count() -> None:
    c = call("grep")
    history = [user("a"), c, *results(c), assistant("done"), user("b")]
    cache = _ProviderCache()
    assert to_provider_messages(history, cache) == to_provider_messages(history)
    emptied = history[:3] + [{"id": "e1", "role": "assistant", "content": ""}] + history[4:]
    assert to_provider_messages(emptied, cache) == to_provider_messages(emptied) and len(to_provider_messages(emptied)) == 4
    refilled = emptied[:3] + [assistant("back")] + emptied[4:]
    assert to_provider_messages(refilled, cache) == to_provider_messages(refilled)


# ------------------------------------------------------------------ the counted prefix changes


def _log_session(t0: float) -> list[dict]:
    """A tool result of ~6K tokens, then a few turns: old enough to clear after four more."""
    big = "\n".join(f"line {i}: value={i * 7919 % 1000} status ok" for i in range(1500))

    def msg(i: int, role: str, content: str, **kw) -> dict:
        return {"id": f"m{i}", "role": role, "content": content, "timestamp": t0 + i, **kw}

    history = [msg(0, "user", "task: summarise the log"), msg(1, "assistant", "ok"),
               msg(2, "assistant", "", tool_calls=[{"id": "c1", "name": "read", "arguments": {"p": "x"}}]),
               msg(3, "tool", big, tool_call_id="c1", name="read")]
    history += [msg(i, "assistant" if i % 2 else "user", f"turn {i}") for i in range(4, 10)]
    later = [msg(10, "assistant", "reply"), msg(11, "user", "next"), msg(12, "assistant", "more"), msg(13, "user", "go")]
    return history + later


def test_hybrid_estimate_drops_what_aging_cleared_inside_the_counted_prefix() -> None:
    t0 = 1_000_000.0
    clock = lambda: t0 + 3_600  # noqa: E731
    session = _log_session(t0)
    engine = DefaultContextEngine(clock=clock, context_window=32_768)
    first = engine.prepare(None, "s", session[:10], None, None)
    assert first.tool_results_redacted == 0 and first.budget.input_used > 6_000
    # the provider agrees with the estimate of the prompt it was sent
    engine.after_turn("s", {"input_tokens": first.budget.input_used, "output_tokens": 5}, first)
    second = engine.prepare(None, "s", session, None, None)
    assert second.decision_path[0] == "usage:provider"
    assert second.tool_results_redacted == 1  # cleared now, inside the counted prefix
    alone = DefaultContextEngine(clock=clock, context_window=32_768).prepare(None, "other", session, None, None)
    assert abs(second.budget.input_used - alone.budget.input_used) <= 20
    assert second.budget.input_used < 1_000


def test_hybrid_estimate_follows_a_tool_set_that_grew() -> None:
    t0 = 1_000_000.0
    clock = lambda: t0 + 10  # noqa: E731 - nothing old enough to age
    session = _log_session(t0)
    engine = DefaultContextEngine(clock=clock, context_window=200_000)
    first = engine.prepare("agent", "s", session[:10], None, None)
    engine.after_turn("s", {"input_tokens": first.budget.input_used, "output_tokens": 5}, first)
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "does a thing " * 40,
                                              "parameters": {"type": "object", "properties": {}}}}
             for i in range(20)]
    grown = engine.prepare("agent", "s", session[:12], None, tools)
    same = engine.prepare("agent", "s", session[:12], None, None)
    assert grown.decision_path[0] == same.decision_path[0] == "usage:provider"
    tools_tokens = Estimator().tools_tokens(tools)
    assert tools_tokens > 2_000
    assert grown.budget.input_used - same.budget.input_used == tools_tokens


def test_the_estimate_path_uses_the_models_tokenizer_and_scale() -> None:
    # Claude counts ~1.2x cl100k (docs/tokens.md): the engine's own figure must too, or the
    # 80% trigger fires at ~96% of the real window
    history = _log_session(1_000_000.0)[:10]
    engine = DefaultContextEngine(clock=lambda: 1_000_000.0, context_window=200_000)
    for model in ("claude-sonnet-4-5", "gpt-4o", None):
        prep = engine.prepare(None, "s", history, model, None)
        assert prep.decision_path[0] == "usage:estimate"
        assert prep.budget.history == Estimator().history_tokens(history, model), model
    claude = engine.prepare(None, "s", history, "claude-sonnet-4-5", None).budget.history
    assert claude > Estimator().history_tokens(history, None) * 1.15


def test_a_cleared_result_with_images_is_counted_as_its_placeholder() -> None:
    t0 = 1_000_000.0
    big = "\n".join(f"row {j}: value {j * 7919 % 1000}" for j in range(900))
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    history = [
        {"id": "u0", "role": "user", "content": "go", "timestamp": t0},
        {"id": "a1", "role": "assistant", "content": "", "timestamp": t0,
         "extra": {"blocks": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]}},
        {"id": "r1", "role": "user", "content": "", "timestamp": t0, "extra": {"blocks": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": big}, image, image]}]}},
    ] + [{"id": f"x{i}", "role": "assistant" if i % 2 else "user", "content": f"r{i}", "timestamp": t0} for i in range(10)]
    estimator = Estimator("heuristic")
    prep = DefaultContextEngine(clock=lambda: t0 + 3_600, estimator=estimator).prepare(None, "s", history, None, None)
    assert prep.tool_results_redacted == 1
    assert prep.budget.history == estimator.history_tokens(prep.history_dicts)


def test_each_session_ages_with_its_own_memory() -> None:
    # one shared TurnAger remembers a few histories: a dozen sessions served in turn would
    # make every call a full pass behind one lock
    engine = DefaultContextEngine(clock=lambda: 1_000_000.0 + 3_600, context_window=200_000)
    sessions = {f"s{k}": _log_session(1_000_000.0 + k) for k in range(12)}
    for end in (10, 12, 14):
        for sid, history in sessions.items():
            engine.prepare(None, sid, history[:end], None, None)
    agers = {id(engine._state(sid).ager) for sid in sessions}
    assert len(agers) == 12 and id(engine.ager) not in agers
    assert engine.ager._states == []
    for sid in sessions:
        assert len(engine._state(sid).ager._states) == 1


def test_compact_judges_the_emergency_on_the_prompt_as_prepare_sends_it(db: DagSessionDB) -> None:
    # three big tool results that aging has cleared: the stored history is over the budget,
    # the prompt is not, so the LLM summary is used, not the emergency structural one
    estimator = Estimator("heuristic")
    summ, provider = summariser("## User intent\nLLM summary")
    t0 = 1_000_000.0
    big = lambda t: "\n".join(f"row {t}-{j}: token{j * 31 % 97} value {j * 7919 % 1000}" for j in range(900))  # noqa: E731
    msgs = [user("task"), assistant("ok")]
    for t in range(3):
        c = {"id": f"a{t}", "role": "assistant", "content": "", "tool_calls": [{"id": f"c{t}", "name": "read", "arguments": {"p": t}}]}
        msgs += [c, {"id": f"t{t}", "role": "tool", "tool_call_id": f"c{t}", "name": "read", "content": big(t)},
                 assistant(f"done {t}"), user(f"go {t}")]
    for k in range(4):
        msgs += [assistant(f"reply {k}"), user(f"more {k}")]
    for i, m in enumerate(msgs):
        m["timestamp"] = t0 + i
    sid = stored_session(db, msgs)
    engine = DefaultContextEngine(session_db=db, summarizer=summ, clock=lambda: t0 + 3_600,
                                  context_window=24_000, estimator=estimator)
    prep = engine.prepare(None, sid, db.get_branch(sid), None, None)
    assert prep.tool_results_redacted == 3 and prep.budget_pct < 0.1
    assert estimator.history_tokens(db.get_branch(sid)) > 0.95 * prep.budget.input_budget
    result = engine.compact(None, sid, None, user_initiated=True)
    assert result.ok and not result.fell_back_to_structural, result.error
    assert provider.calls, "the LLM summary was asked for"
    # before and after are the prompt as prepare sends it (aged), before and after
    assert result.tokens_before == prep.budget.input_used
    after = engine.prepare(None, sid, db.get_branch(sid), None, None)
    assert result.tokens_after == after.budget.input_used


def test_a_cleared_result_in_stored_legacy_blocks_is_counted_as_sent(db: DagSessionDB) -> None:
    # the legacy shape keeps the blocks as the content list and in extra.blocks; stored,
    # they are two equal lists, and both must carry the placeholder
    t0 = 1_000_000.0
    big = "\n".join(f"row {j}: value {j * 7919 % 1000}" for j in range(900))
    use = [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]
    result = [{"type": "tool_result", "tool_use_id": "t1", "content": big}]
    msgs = [user("go"), assistant("ok"), {"role": "assistant", "content": use, "extra": {"blocks": use}},
            {"role": "user", "content": result, "extra": {"blocks": result}}]
    msgs += [assistant(f"r{i}") if i % 2 else user(f"q{i}") for i in range(10)]
    for i, m in enumerate(msgs):
        m["timestamp"] = t0 + i
    sid = stored_session(db, msgs)
    branch = db.get_branch(sid)
    assert branch[3]["content"] == branch[3]["extra"]["blocks"]
    estimator = Estimator("heuristic")
    engine = DefaultContextEngine(session_db=db, clock=lambda: t0 + 3_600, estimator=estimator, context_window=200_000)
    prep = engine.prepare(None, sid, branch, None, None)
    assert prep.tool_results_redacted == 1
    aged = prep.history_dicts[3]
    assert aged["content"] == aged["extra"]["blocks"] and aged["content"][0]["_redacted"]
    sent = sum(estimator.message_tokens(m) for m in prep.agent_messages)
    assert prep.budget.history == estimator.history_tokens(prep.history_dicts) == sent
    assert branch[3]["content"][0]["content"] == big  # the input is not touched


def test_an_ager_that_drops_messages_is_counted_by_what_it_returns() -> None:
    class KeepEnds:
        def age(self, history, references=None):
            return history[:2] + history[-6:], AgingReport(tokens_freed=1)

    history = _log_session(1_000_000.0)
    estimator = Estimator("heuristic")
    prep = DefaultContextEngine(estimator=estimator, ager=KeepEnds(), context_window=200_000).prepare(
        None, "s", history, None, None)
    assert len(prep.history_dicts) == 8
    assert prep.budget.history == estimator.history_tokens(prep.history_dicts)


def test_existing_sessions_follow_a_change_of_the_engines_ager() -> None:
    t0 = 1_000_000.0
    history = _log_session(t0)
    engine = DefaultContextEngine(clock=lambda: t0 + 3_600, context_window=200_000)
    assert engine.prepare(None, "s", history, None, None).tool_results_redacted == 1
    engine.ager.keep_recent_turns = 1_000
    assert engine.prepare(None, "s", history, None, None).tool_results_redacted == 0
    engine.ager.keep_recent_turns = 4
    assert engine.prepare(None, "s", history, None, None).tool_results_redacted == 1
    engine.ager = None
    assert engine.prepare(None, "s", history, None, None).tool_results_redacted == 0


def test_a_provider_count_for_another_model_is_not_used() -> None:
    t0 = 1_000_000.0
    session = _log_session(t0)
    engine = DefaultContextEngine(clock=lambda: t0 + 10, context_window=200_000)
    first = engine.prepare("agent", "s", session[:10], "gpt-4o", None)
    engine.after_turn("s", {"input_tokens": first.budget.input_used, "output_tokens": 5}, first)
    assert engine.prepare("agent", "s", session[:12], "gpt-4o", None).decision_path[0] == "usage:provider"
    switched = engine.prepare("agent", "s", session[:12], "claude-sonnet-4-5", None)
    assert switched.decision_path[0] == "usage:estimate"
    alone = DefaultContextEngine(clock=lambda: t0 + 10, context_window=200_000).prepare(
        "agent", "other", session[:12], "claude-sonnet-4-5", None)
    assert switched.budget.input_used == alone.budget.input_used


def test_unhashable_message_ids_from_a_malformed_transcript_do_not_crash_prepare() -> None:
    history = [{"id": ["odd"], "role": "user", "content": "hi"}, {"id": {"x": 1}, "role": "assistant", "content": "hello"}]
    prep = DefaultContextEngine(context_window=32_000).prepare(None, "s", history, None, None)
    assert [m["role"] for m in prep.agent_messages] == ["user", "assistant"]


# ------------------------------------------------------------------ compact


def big_session(db: DagSessionDB, turns: int = 10, tool_size: int = 1_500) -> str:
    msgs = [user("the original task: migrate the schema"), assistant("understood"), user("use postgres")]
    for _ in range(turns):
        msgs += tool_turn(tool_size=tool_size)
    return stored_session(db, msgs)


def test_compact_writes_the_layout_and_reports(db: DagSessionDB) -> None:
    sid = big_session(db)
    before = db.get_branch(sid)
    events: list[tuple[str, dict]] = []
    engine = make_engine(db)
    res = engine.compact(SYSTEM, sid, "gpt-4o", lambda n, p: events.append((n, p)), user_initiated=True)
    assert isinstance(res, CompactResult) and res.ok, res.error
    assert res.reason == "manual"
    assert res.tokens_after < res.tokens_before
    assert res.duration_ms > 0
    assert res.protected_count == 3 and res.cut_index is not None
    assert res.kept_count == len(before) - res.cut_index
    assert res.summarised_count == res.cut_index - 3
    branch = db.get_branch(sid)
    assert res.new_head_id == db.get_head(sid) == branch[-1]["id"]
    assert branch[3]["id"] == res.summary_id
    assert [m["copied_from"] for m in branch[:3]] == [m["id"] for m in before[:3]]
    assert [n for n, _ in events] == ["compaction_started", "compaction_finished"]
    assert events[1][1]["summary_id"] == res.summary_id and events[1][1]["session_id"] == sid
    assert events[1][1] == {"session_id": sid, **dataclasses.asdict(res)}
    # the event copies the result's fields as they are: right while every field is a scalar
    scalars = {"bool", "str", "int", "float", "None", "CompactReason"}
    for f in dataclasses.fields(CompactResult):
        assert set(str(f.type).replace(" ", "").split("|")) <= scalars, f.name
    prep = engine.prepare(SYSTEM, sid, branch, "gpt-4o", None)
    assert prep.summary_id == res.summary_id
    assert prep.agent_messages[3]["role"] == "system"
    assert prep.agent_messages[3]["content"].startswith("[Previous conversation summary]\n## User intent")


def test_chained_summaries_use_update(db: DagSessionDB) -> None:
    summ, provider = summariser("## User intent\nFIRST SUMMARY")
    sid = big_session(db)
    engine = make_engine(db, summarizer=summ)
    first = engine.compact(SYSTEM, sid, "gpt-4o")
    assert first.ok and not first.used_previous_summary
    assert "<previous-summary>" not in provider.calls[0]["messages"][0]["content"]
    for m in [x for _ in range(6) for x in tool_turn(tool_size=1_500)]:
        db.append_message(sid, {k: v for k, v in m.items() if k != "id"})
    second = engine.compact(SYSTEM, sid, "gpt-4o")
    assert second.ok and second.used_previous_summary and not second.fell_back_to_structural
    prompt = provider.calls[1]["messages"][0]["content"]
    assert "<previous-summary>\n## User intent\nFIRST SUMMARY\n</previous-summary>" in prompt
    assert db.get_extra_meta(sid)["_last_summary_text"] == second.summary_text


def test_emergency_goes_straight_to_structural(db: DagSessionDB) -> None:
    summ, provider = summariser()
    sid = big_session(db, turns=15)  # about 24.5K tokens of a 24K input budget
    engine = make_engine(db, summarizer=summ)
    prep = engine.prepare(SYSTEM, sid, db.get_branch(sid), "gpt-4o", None)
    assert prep.budget_pct >= 0.95 and prep.decision_path[-1] == "emergency"
    res = engine.compact(SYSTEM, sid, "gpt-4o")
    assert res.ok and res.fell_back_to_structural
    assert res.error.startswith("Emergency: input at")
    assert provider.calls == []
    assert "Structural summary of" in res.summary_text


def test_keep_recent_tokens_override(db: DagSessionDB) -> None:
    sid = big_session(db)
    engine = make_engine(db)
    res = engine.compact(SYSTEM, sid, "gpt-4o", user_initiated=True, keep_recent_tokens=2_000)
    assert res.ok
    branch = db.get_branch(sid)
    tail = branch[4:]
    assert sum(engine.estimator.message_tokens(m) for m in tail) < 2_000 + 2 * 1_600


def test_nothing_to_cut_disables_auto_and_rearms(db: DagSessionDB) -> None:
    # the protected head alone is huge: nothing after it can be folded
    msgs = [user(filler(100_000)), assistant("ok"), user("go")] + chat_turns(2, size=50)
    sid = stored_session(db, msgs)
    events: list[str] = []
    engine = make_engine(db)
    res = engine.compact(SYSTEM, sid, "gpt-4o", lambda n, p: events.append(n))
    assert not res.ok and res.disabled_auto
    assert "nothing to fold" in res.error
    assert events == ["compaction_started", "compaction_finished"]
    assert engine.guard_state(sid)["disabled"]
    branch = db.get_branch(sid)
    prep = engine.prepare(SYSTEM, sid, branch, "gpt-4o", None)
    assert prep.decision_path[-1] == "auto_compact_disabled"
    assert not engine.should_auto_compact(prep)
    # re-armed once the history grew by rearm_fraction of the input budget
    grown = branch + chat_turns(20, size=400)
    prep = engine.prepare(SYSTEM, sid, grown, "gpt-4o", None)
    assert not engine.guard_state(sid)["disabled"]
    assert engine.should_auto_compact(prep)
    # and a manual compaction re-arms at once
    engine.compact(SYSTEM, sid, "gpt-4o")
    assert engine.guard_state(sid)["disabled"]
    engine.compact(SYSTEM, sid, "gpt-4o", user_initiated=True)
    assert not engine.guard_state(sid)["disabled"]


def test_summary_that_does_not_shrink_is_not_written(db: DagSessionDB) -> None:
    verbose, _ = summariser(filler(200_000))
    sid = big_session(db, turns=10)  # under the emergency threshold: the LLM summary is used
    head = db.get_head(sid)
    engine = make_engine(db, summarizer=verbose)
    res = engine.compact(SYSTEM, sid, "gpt-4o")
    assert not res.ok and res.disabled_auto
    assert res.error.startswith("no progress")
    assert db.get_head(sid) == head


def test_low_savings_twice_disables_auto(db: DagSessionDB) -> None:
    sid = big_session(db, turns=12)
    engine = make_engine(db, min_saving=0.99)  # every compaction counts as a low saving
    first = engine.compact(SYSTEM, sid, "gpt-4o")
    assert first.ok and not first.disabled_auto
    for m in [x for _ in range(12) for x in tool_turn(tool_size=1_500)]:
        db.append_message(sid, {k: v for k, v in m.items() if k != "id"})
    second = engine.compact(SYSTEM, sid, "gpt-4o")
    assert second.ok and second.disabled_auto
    assert "two compactions in a row" in second.error
    assert engine.guard_state(sid)["disabled"]


def test_eight_k_window_compacts_without_looping(db: DagSessionDB) -> None:
    msgs = [user("small model task"), assistant("ok"), user("details")]
    for _ in range(14):
        msgs += tool_turn(tool_size=400)
    sid = stored_session(db, msgs)
    engine = make_engine(db, window=8_000)
    seen = []
    for _ in range(5):
        prep = engine.prepare(SYSTEM, sid, db.get_branch(sid), None, None)
        if not engine.should_auto_compact(prep):
            break
        res = engine.compact(SYSTEM, sid, None)
        seen.append(res)
        if not res.ok:
            break
    assert seen and seen[0].ok
    prep = engine.prepare(SYSTEM, sid, db.get_branch(sid), None, None)
    assert prep.budget_pct < 0.8
    assert len(seen) <= 2


def test_compact_without_a_session_db_is_an_error() -> None:
    engine = DefaultContextEngine(summarizer=summariser()[0])
    with pytest.raises(EngineError, match="no session_db"):
        engine.compact(None, "nope", None)


def test_after_turn_emits_recommended_once_per_crossing(db: DagSessionDB) -> None:
    engine = make_engine(db, window=10_000)
    events: list[tuple[str, dict]] = []
    history = [user(filler(20_000))]
    prep = engine.prepare(None, "s9", history, None, None)
    budget = prep.budget.input_budget
    engine.after_turn("s9", Usage(input_tokens=int(budget * 0.75)), prep, lambda n, p: events.append((n, p)))
    engine.after_turn("s9", Usage(input_tokens=int(budget * 0.76)), prep, lambda n, p: events.append((n, p)))
    assert [n for n, _ in events] == ["compaction_recommended"]
    assert events[0][1]["budget_pct"] == pytest.approx(0.75, abs=0.01)
    engine.after_turn("s9", Usage(input_tokens=int(budget * 0.3)), prep, lambda n, p: events.append((n, p)))
    engine.after_turn("s9", Usage(input_tokens=int(budget * 0.71)), prep, lambda n, p: events.append((n, p)))
    assert [n for n, _ in events] == ["compaction_recommended"] * 2


def test_failing_event_handler_is_contained(db: DagSessionDB) -> None:
    sid = big_session(db)

    def boom(name, payload):
        raise RuntimeError("observer bug")

    res = make_engine(db).compact(SYSTEM, sid, "gpt-4o", boom)
    assert res.ok


def test_summary_config_is_used_for_the_cut(db: DagSessionDB) -> None:
    sid = big_session(db)
    engine = make_engine(db, config=SummarizerConfig(protect_first_n=1))
    res = engine.compact(SYSTEM, sid, "gpt-4o")
    assert res.ok and res.protected_count == 1


# ------------------------------------------------------------------ registry


class NamedEngine(DefaultContextEngine):
    pass


def test_registry_round_trip() -> None:
    engine = NamedEngine(name="lab-test-engine")
    try:
        assert register_engine(engine) is engine
        assert get_engine("lab-test-engine") is engine
        assert CONTEXT_ENGINE_REGISTRY["lab-test-engine"] is engine
        with pytest.raises(ValueError, match="already registered"):
            register_engine(NamedEngine(name="lab-test-engine"))
        register_engine(engine)  # the same engine again is fine
    finally:
        unregister_engine("lab-test-engine")
    with pytest.raises(TypeError):
        register_engine(object())  # type: ignore[arg-type]


def test_unknown_engine_is_an_error_listing_names() -> None:
    with pytest.raises(EngineError) as info:
        get_engine("does-not-exist")
    assert "does-not-exist" in str(info.value) and "default" in str(info.value)


def test_default_engine_and_resolution_order() -> None:
    assert get_engine(None) is default_engine() is get_engine("default")
    a, b = NamedEngine(name="per-agent"), NamedEngine(name="from-config")
    register_engine(a)
    register_engine(b)
    try:
        assert resolve_engine_for({"context_engine": "per-agent"}, {"context": {"engine": "from-config"}}) is a
        assert resolve_engine_for({"name": "x"}, {"context": {"engine": "from-config"}}) is b

        class Cfg:
            class context:  # noqa: N801 - attribute-style config
                engine = "from-config"

        assert resolve_engine_for(None, Cfg()) is b
        assert resolve_engine_for(None) is default_engine()
        with pytest.raises(EngineError, match="unknown context engine 'typo'"):
            resolve_engine_for({"context_engine": "typo"})
    finally:
        unregister_engine("per-agent")
        unregister_engine("from-config")


class RedactAllButLastTool:
    """A stand-in TurnAger: redacts every tool result except the last one, on copies."""

    def __init__(self) -> None:
        self.seen_references = None

    def age(self, history, references):
        self.seen_references = references
        tools = [i for i, m in enumerate(history) if m["role"] == "tool"]
        aged, freed, ids = [], 0, []
        for i, m in enumerate(history):
            if i in tools[:-1]:
                placeholder = "[Old tool result content cleared]"
                freed += HEURISTIC.message_tokens(m) - HEURISTIC.message_tokens({**m, "content": placeholder})
                ids.append(m["id"])
                m = {**m, "content": placeholder}
            aged.append(m)
        from opctx.context.types import AgingReport

        return aged, AgingReport(redacted=len(ids), tokens_freed=freed, redacted_ids=ids)


def test_aging_feeds_the_budget_and_the_prompt(db: DagSessionDB) -> None:
    ager = RedactAllButLastTool()
    engine = DefaultContextEngine(
        session_db=db, context_window=32_000, estimator=HEURISTIC, ager=ager, summarizer=summariser()[0]
    )
    history = [m for _ in range(4) for m in tool_turn(tool_size=1_000)]
    raw = make_engine(db).prepare(SYSTEM, "aging", history, None, None)
    prep = engine.prepare(SYSTEM, "aging", history, None, None)
    assert prep.tool_results_redacted == 3
    assert prep.decision_path[1] == "aging:redacted=3"
    assert prep.tokens_freed_by_aging > 2_500
    assert prep.budget.history == raw.budget.history - prep.tokens_freed_by_aging
    assert sum(m["content"] == "[Old tool result content cleared]" for m in prep.agent_messages) == 3
    assert history[2]["content"] != "[Old tool result content cleared]"  # the input was not mutated
    assert ager.seen_references is not None
