"""The strategy presets of the literature: each value pinned to its public source, and every
strategy replayed on every trajectory of the corpus (all formats)."""

from __future__ import annotations

import json

import pytest

from opctx.context._cut import _is_request
from opctx.context.masking import is_observation
from opctx.context.tokens import Estimator
from opctx.lab._strategy_specs import STRATEGY_PRESETS, STRATEGY_SOURCES
from opctx.lab.metrics import tool_pair_breaks
from opctx.lab.presets import PRESETS, build_engine
from opctx.lab.replay import replay

STRATEGIES = list(STRATEGY_PRESETS)


# -- each value pinned to its source --------------------------------------------------------------


def test_the_strategy_library_is_the_literature_s():
    assert STRATEGIES == [
        "complexity-trap-masking", "complexity-trap-summary", "anthropic-clear-tool-uses",
        "langchain-clear-tool-uses", "anthropic-clear-thinking", "openhands-llm-summarizing",
        "openhands-observation-masking", "openhands-amortized-forgetting", "openhands-recent-events",
        "langchain-summarization",
    ]
    for name in STRATEGIES:
        assert PRESETS[name] is STRATEGY_PRESETS[name] and STRATEGY_SOURCES[name]


def test_complexity_trap_masking_is_the_paper_s():
    # arXiv 2508.21433 §3.1 / App. C.1 (M = 10); LastNObservations in
    # JetBrains-Research/the-complexity-trap at bf15b5fb, sweagent/agent/history_processors.py:
    # f"Old environment output: ({len(text.splitlines())} lines omitted)"; default_no_demo config
    p = PRESETS["complexity-trap-masking"].policy
    assert (p.aging.kind, p.aging.keep_last, p.aging.drop_demos) == ("masking", 10, True)
    assert p.aging.placeholder.format(lines=8, tokens=0) == "Old environment output: (8 lines omitted)"
    assert (p.trigger.auto_pct, p.trigger.turns, p.trigger.messages, p.trigger.tokens) == (None, None, None, None)


def test_complexity_trap_summary_is_the_paper_s():
    # §3.1: "We trigger summarization when the accumulated turns since the last summary reach
    # N+M"; config ..._N=21_M=10.yaml (n: 21, keep_last_m_turns: 10); history[:2] never summarised
    p = PRESETS["complexity-trap-summary"].policy
    assert p.trigger.turns == 21 + 10 and p.cut.keep_turns == 10 and p.cut.protect_first_n == 2
    assert p.summary.source == "llm" and p.aging.kind == "none"


def test_anthropic_clear_tool_uses_has_the_api_defaults():
    # platform.claude.com/docs/en/build-with-claude/context-editing, clear_tool_uses_20250919:
    # trigger 100,000 input tokens, keep 3 tool uses, clear_at_least none, exclude_tools none,
    # clear_tool_inputs false; the placeholder text is not published
    a = PRESETS["anthropic-clear-tool-uses"].policy.aging
    assert (a.kind, a.trigger_tokens, a.keep_last, a.clear_at_least, a.exclude_tools, a.clear_inputs) == (
        "clear-tool-uses", 100_000, 3, 0, (), False)
    assert a.placeholder is None


def test_anthropic_clear_thinking_keeps_the_documented_one_turn():
    # platform.claude.com/docs/en/build-with-claude/context-editing, "Thinking block clearing":
    # clear_thinking_20251015, keep {type: "thinking_turns", value: N}; the API's default keeps
    # "only the thinking blocks from the last assistant turn (equivalent to keep: {type:
    # 'thinking_turns', value: 1})"; keep "all" keeps every block. Nothing else is cleared.
    p = PRESETS["anthropic-clear-thinking"].policy
    assert (p.aging.keep_thinking_turns, p.aging.kind) == (1, "none")
    assert (p.trigger.auto_pct, p.trigger.turns, p.trigger.messages, p.trigger.tokens) == (None, None, None, None)
    assert p.replace(**{"aging.keep_thinking_turns": "all"}).aging.keep_thinking_turns is None
    assert "Thinking block clearing" in STRATEGY_SOURCES["anthropic-clear-thinking"]


def test_langchain_clear_tool_uses_has_the_library_defaults():
    # langchain 1.5.2, agents/middleware/context_editing.py: ClearToolUsesEdit(trigger=100_000,
    # clear_at_least=0, keep=3, clear_tool_inputs=False, exclude_tools=(), placeholder="[cleared]")
    a = PRESETS["langchain-clear-tool-uses"].policy.aging
    assert (a.trigger_tokens, a.clear_at_least, a.keep_last, a.clear_inputs, a.exclude_tools, a.placeholder) == (
        100_000, 0, 3, False, (), "[cleared]")


def test_openhands_condensers_have_their_defaults():
    # SDK 611629e6 llm_summarizing_condenser.py: max_size 240, keep_first 2,
    # kept tail max_size // 2 - keep_first - 1; condense when len(view) > max_size
    llm = PRESETS["openhands-llm-summarizing"].policy
    assert (llm.trigger.messages, llm.cut.protect_first_n, llm.cut.keep_messages) == (241, 2, 240 // 2 - 2 - 1)
    # _get_forgotten_events, Reason.TOKENS: tokens_to_reduce = total_tokens - max_tokens // 2
    assert (llm.trigger.auto_pct, llm.cut.overflow_keep_share) == (1.0, 0.5)
    # V0 d6fab190 condenser_config.py: ObservationMasking attention_window 100, placeholder <MASKED>
    masking = PRESETS["openhands-observation-masking"].policy.aging
    assert (masking.kind, masking.keep_last, masking.placeholder) == ("masking", 100 // 2, "<MASKED>")
    # AmortizedForgetting max_size 100, keep_first 1: keep first + last max_size // 2 - keep_first
    amortized = PRESETS["openhands-amortized-forgetting"].policy
    assert (amortized.trigger.messages, amortized.cut.protect_first_n, amortized.cut.keep_messages) == (101, 1, 49)
    # RecentEvents keep_first 1, max_events 100; recent_events_condenser.py returns a View
    # every step (no Condensation): a view ager, never a compaction
    recent = PRESETS["openhands-recent-events"].policy
    assert (recent.aging.kind, recent.aging.protect_first_n, recent.aging.keep_last) == ("recent-events", 1, 99)
    assert recent.trigger.messages is None and recent.trigger.auto_pct is None and recent.trigger.tokens is None
    assert amortized.summary.source == "forget"
    # d6fab190 conversation_memory.py: process_events puts the initial user message back
    # (_ensure_initial_user_message) after any V0 condenser; the SDK's condenser is not V0
    assert amortized.cut.keep_initial_request and recent.cut.keep_initial_request
    assert not llm.cut.keep_initial_request


def test_langchain_summarization_has_the_library_defaults():
    # langchain 1.5.2 summarization.py: keep=("messages", 20); trigger=None never fires, so the
    # documentation's example trigger=("tokens", 4000)
    p = PRESETS["langchain-summarization"].policy
    assert (p.cut.keep_messages, p.trigger.tokens, p.cut.protect_first_n) == (20, 4_000, 0)
    # before_model: total_tokens = self.token_counter(state["messages"]): the messages alone
    assert p.trigger.tokens_of == "history"


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_strategy_round_trips_and_builds(name):
    policy = PRESETS[name].policy
    assert type(policy).from_dict(json.loads(policy.to_json())) == policy
    assert build_engine(name, context_window=128_000).policy.aging.kind == policy.aging.kind


# -- replays -----------------------------------------------------------------------------------------


def check_replay(result, window: int | None = None) -> dict:
    """0 orphaned tool results and the latest request kept in every request; the masked count.

    A view of the last messages (recent-events) keeps the task but not a later request: the
    source's view forgets it as it forgets any other event."""
    stream = result.stream
    view = result.policy is not None and result.policy.aging.kind == "recent-events"
    requests = [i for i, m in enumerate(stream) if _is_request(m)][:1 if view else None]
    steps = result.steps_df
    for k in range(len(steps)):
        context = result.context(k)
        orphans = [b for b in tool_pair_breaks(context) if b["kind"] == "orphan_result"]
        assert not orphans, (result.preset, k, orphans[:2])
        at = int(steps["stream_index"].iloc[k])
        latest = max((i for i in requests if i <= at), default=None)
        if latest is not None:
            origins = {result.origin_of(m) for m in context}
            assert latest in origins, (result.preset, k, latest)
    # observations the last request saw (a masked copy is still one)
    last = result.context(len(steps) - 1) if len(steps) else []
    return {"masked": int(steps["redacted"].max()) if len(steps) else 0,
            "observations": sum(1 for m in last if is_observation(m))}


def _observation_session(n_turns: int = 14) -> list[dict]:
    msgs = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "fix the bug"}]
    for i in range(n_turns):
        msgs.append({"role": "assistant", "content": f"```bash\nls dir{i}\n```"})
        msgs.append({"role": "user", "content": "\n".join(f"file{i}_{j}.py" for j in range(30)),
                     "is_observation": True})
    return msgs


def test_masking_masks_user_observations_with_the_paper_s_placeholder():
    result = replay(_observation_session(), "complexity-trap-masking", keep_contexts=True)
    figures = check_replay(result)
    # the last request (the 14th answer) sees 13 observations: 3 masked, the last 10 kept
    assert figures["masked"] == 13 - 10
    last = result.context(len(result.steps_df) - 1)
    assert sum(m.get("content") == "Old environment output: (30 lines omitted)" for m in last) == 3
    assert not [e for e in result.events if e.get("event") == "strategy_idle"]


def _thinking_session(n_turns: int = 4) -> list[dict]:
    """Turns of a user request, a thinking tool call, its result and a thinking answer."""
    def thinking(text: str) -> list[dict]:
        return [{"type": "thinking", "thinking": f"{text} " * 150, "signature": f"sig-{text}"}]

    msgs = [{"role": "system", "content": "You are an agent."}]
    for k in range(n_turns):
        msgs.append({"role": "user", "content": f"task {k}"})
        msgs.append({"role": "assistant", "content": "", "thinking": thinking(f"plan{k}"),
                     "tool_calls": [{"id": f"c{k}", "name": "ls", "arguments": {"path": f"d{k}"}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "name": "ls", "content": f"a{k}.py"})
        msgs.append({"role": "assistant", "content": f"done {k}", "thinking": thinking(f"sum{k}")})
    return msgs


@pytest.mark.parametrize("keep", [1, 2])
def test_clear_thinking_keeps_the_thinking_of_the_last_turns_only(keep):
    msgs = _thinking_session()
    # a model that holds every earlier thinking block: the clearing saves what it clears
    model = "claude-opus-4-5-20251101"
    result = replay(msgs, "anthropic-clear-thinking", keep_contexts=True, model=model,
                    **{"aging.keep_thinking_turns": keep})
    base = replay(msgs, "none", keep_contexts=True, model=model)
    check_replay(result)
    turn_of = {i: sum(1 for m in msgs[:i + 1] if m["role"] == "user") - 1 for i in range(len(msgs))}
    for k in range(len(result.steps_df)):
        context = result.context(k)
        origins = [result.origin_of(m) for m in context]
        running = turn_of[max(origins)]
        for m, origin in zip(context, origins, strict=True):
            if msgs[origin].get("thinking"):
                # thinking kept exactly in the last `keep` turns (the running one counts)
                assert bool(m.get("thinking")) == (turn_of[origin] > running - keep), (k, origin)
        # the calls, results and texts are those of the store
        assert [m.get("tool_calls") for m in context] == [msgs[o].get("tool_calls") for o in origins]
        assert [m.get("content") for m in context] == [msgs[o].get("content") for o in origins]
    # the store is never modified, and the last request is smaller than without the strategy
    assert all(m.get("thinking") for m in result.stream if m["role"] == "assistant")
    assert result.steps_df["tokens"].iloc[-1] < base.steps_df["tokens"].iloc[-1]
    assert result.steps_df["tokens_freed_by_aging"].iloc[-1] > 0
    assert not [e for e in result.events if e.get("event") == "strategy_idle"]


def test_clear_thinking_claims_nothing_a_model_drops_anyway():
    # Sonnet 4.5 keeps only the last turn's thinking (anthropic_messages.thinking_retention):
    # clearing older thinking saves nothing, and the replay says the strategy was idle
    msgs = _thinking_session()
    model = "claude-sonnet-4-5-20250929"
    result = replay(msgs, "anthropic-clear-thinking", keep_contexts=True, model=model)
    base = replay(msgs, "none", keep_contexts=True, model=model)
    check_replay(result)
    assert list(result.steps_df["tokens"]) == list(base.steps_df["tokens"])
    assert (result.steps_df["tokens_freed_by_aging"] == 0).all()
    idle = [e for e in result.events if e.get("event") == "strategy_idle"]
    assert len(idle) == 1 and "drops anyway" in idle[0]["message"]


def test_clear_thinking_without_thinking_says_so():
    result = replay(_observation_session(3), "anthropic-clear-thinking", keep_contexts=True)
    idle = [e for e in result.events if e.get("event") == "strategy_idle"]
    assert len(idle) == 1 and "no thinking" in idle[0]["message"] and idle[0]["ager"] == "clear-thinking"
    assert result.metrics()["strategy_idle"] == 1


def test_a_strategy_with_nothing_to_act_on_says_so():
    msgs = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    result = replay(msgs, "complexity-trap-masking", keep_contexts=True)
    idle = [e for e in result.events if e.get("event") == "strategy_idle"]
    assert len(idle) == 1 and "no observation" in idle[0]["message"]
    assert result.metrics()["strategy_idle"] == 1


def test_the_summary_strategy_folds_21_turns_at_31_and_keeps_10():
    result = replay(_observation_session(40), "complexity-trap-summary", keep_contexts=True)
    check_replay(result)
    assert result.summaries == "structural" and len(result.compactions) == 1
    comp = result.compactions[0]
    kept_turns = sum(1 for i in comp.kept_indices if i is not None and result.stream[i]["role"] == "assistant")
    assert kept_turns == 10 and comp.protected_indices == [0, 1]


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.parametrize("name", STRATEGIES)
def test_every_strategy_replays_the_corpus(corpus_dir, name):
    from opctx import importers
    from opctx.importers.base import UnknownFormatError
    from opctx.lab.history import as_history

    manifest = json.loads((corpus_dir / "manifest.json").read_text(encoding="utf-8"))
    masking = PRESETS[name].policy.aging.kind == "masking"
    keep_last = PRESETS[name].policy.aging.keep_last
    formats = set()
    for entry in manifest:
        try:
            sessions = importers.parse_path(corpus_dir / entry["file"], on_error="skip")
        except UnknownFormatError:
            continue  # a side file of a transcript (a tool result saved apart), not a trajectory
        for session in sessions:
            history = as_history(session)
            if not history.messages:
                continue
            result = replay(history, name, keep_contexts=True)
            figures = check_replay(result)
            formats.add(entry["format"])
            if masking and figures["observations"] > keep_last:
                assert figures["masked"] >= 1, (name, entry["file"])
    assert len(formats) >= 8


def test_sweeps_vary_the_new_fields_by_their_dotted_names():
    from opctx.lab.sweep import sweep

    frame = sweep([_observation_session(40)], {"preset": ["complexity-trap-summary"], "trigger.turns": [11, 31],
                                               "cut.keep_turns": [5, 10]}, progress=False, errors="raise")
    assert len(frame) == 4 and set(frame["trigger.turns"]) == {11, 31} and (frame["strategy_idle"] == 0).all()
    compactions = dict(zip(zip(frame["trigger.turns"], frame["cut.keep_turns"], strict=True), frame["compactions"], strict=True))
    assert compactions[(11, 5)] > compactions[(31, 10)] >= 1


def test_the_result_says_which_summary_was_used():
    assert replay(_observation_session(3), "openhands-amortized-forgetting").summaries == "forget"
    assert replay(_observation_session(3), "complexity-trap-summary").summaries == "structural"
    assert replay(_observation_session(3), "complexity-trap-summary", summaries=lambda *a, **k: "s").summaries == "provider"


@pytest.mark.parametrize("name", ["openhands-recent-events", "openhands-amortized-forgetting"])
def test_the_openhands_forgetting_presets_keep_the_system_message_and_the_task(name):
    """keep_first 1 is the system message here; V0's conversation memory sends the initial
    user message after it whatever the condenser forgot, so every request holds both."""
    result = replay(_observation_session(80), name, keep_contexts=True)
    check_replay(result)
    for step in range(len(result.steps_df)):
        context = result.context(step)
        assert context[0]["content"] == "You are an agent." and context[1]["content"] == "fix the bug"
    if name == "openhands-amortized-forgetting":
        assert result.compactions
        assert all(comp.protected_indices == [0, 1] for comp in result.compactions)
    else:  # a view: nothing persisted, the last 99 messages after the head
        assert not result.compactions
        assert len(result.context(len(result.steps_df) - 1)) == 2 + 99


def _tool_session(n_turns: int) -> list[dict]:
    """A task, then turns of one OpenAI-shaped tool call and its result."""
    msgs = [{"role": "user", "content": "fix the bug"}]
    for k in range(n_turns):
        msgs.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{k}a", "name": "ls", "arguments": {"path": f"d{k}"}},
            {"id": f"c{k}b", "name": "cat", "arguments": {"path": f"f{k}"}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{k}a", "name": "ls", "content": f"a{k}.py " * 40})
        msgs.append({"role": "tool", "tool_call_id": f"c{k}b", "name": "cat", "content": f"b{k} " * 40})
    return msgs


def test_recent_events_is_a_view_of_the_history():
    """Every request: the first message and the last 99, results whose call was left out
    left out too; the figures count what the view sends, and the stored history is whole."""
    stream = _tool_session(60)
    result = replay(stream, "openhands-recent-events", keep_contexts=True)
    check_replay(result)  # no orphaned result in any request
    assert not result.compactions
    steps = result.steps_df
    for k in range(len(steps)):
        at = int(steps["stream_index"].iloc[k])
        context = result.context(k)
        if at <= 100:  # the history fits the view: sent whole
            assert len(context) == at
            continue
        assert context[0] is not None and context[0]["content"] == "fix the bug"
        tail = stream[at - 99:at]
        while tail[0]["role"] == "tool":  # its call is before the view
            tail = tail[1:]
        assert [m.get("content") for m in context[1:]] == [m.get("content") for m in tail]
    freed = steps["tokens_freed_by_aging"].to_numpy()
    assert freed[-1] > 0 and (freed[1:] >= 0).all()
    short = replay(_tool_session(10), "openhands-recent-events")
    assert [e["event"] for e in short.events if e.get("event") == "strategy_idle"] == ["strategy_idle"]


def test_the_sdk_condenser_past_its_token_limit_cuts_the_request_to_half():
    """OpenHands SDK LLMSummarizingCondenser: past the model's limit it forgets until the view
    would be half of it, whatever the 117 events of tail say; it does not compact again on
    the next request because the kept tail alone is over the window."""
    stream = _tool_session(120)  # about 220 tokens a turn: 117 messages are over 16,000
    result = replay(stream, "openhands-llm-summarizing", context_window=16_000, keep_contexts=True)
    check_replay(result)
    steps, comps = result.steps_df, result.compactions
    assert comps and not [e for e in result.events if e.get("event") == "compaction_failed"]
    budget = int(steps["input_budget"].iloc[-1])
    estimate = Estimator().message_tokens
    for comp in comps:  # half the budget, plus the summary the SDK adds on top
        summary = estimate({"role": "user", "content": comp.summary_text})
        assert comp.tokens_after - summary <= 0.5 * budget + 200, (comp.tokens_after, summary, budget)
    assert len(comps) <= len(steps) // 10  # spread out, not one per request
    # the count alone keeps a tail over the window: a compaction on request after request
    alone = replay(stream, "openhands-llm-summarizing", context_window=16_000, keep_contexts=False,
                   **{"cut.overflow_keep_share": None})
    assert len(alone.compactions) + alone.metrics()["compactions_failed"] > 3 * len(comps)
