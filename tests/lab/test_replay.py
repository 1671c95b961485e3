"""Replay: the recording reproduced exactly under `none`, real compactions otherwise, determinism."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opctx.context.engine import DefaultContextEngine
from opctx.lab._replay_db import replay_message_id
from opctx.lab.history import RecordedCompaction, RecordedHistory
from opctx.lab.replay import DECISIONS, ReplayClock, replay
from opctx.lab.scenarios import generate_session


def _key(msg):
    return (msg.get("id"), msg.get("role"), msg.get("content"), repr(msg.get("tool_calls")), msg.get("tool_call_id"))


@pytest.fixture(scope="module")
def scenario():
    return generate_session(21, n_turns=25)


def test_none_reproduces_the_recorded_sequence_exactly(scenario):
    msgs = scenario.messages
    r = replay(msgs, "none")
    df = r.steps_df
    requests = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    assert list(df["stream_index"]) == requests
    assert list(df["node_id"]) == [msgs[i]["id"] for i in requests]
    for step, index in enumerate(requests):
        ctx = r.context(step)
        assert [_key(m) for m in ctx] == [_key(m) for m in msgs[:index]]
        assert all(r.origin_of(m) == j for j, m in enumerate(ctx))
    assert not df["compacted"].any() and (df["redacted"] == 0).all()
    assert (df["tokens"] == df["tokens_none"]).all()
    # append-only: every request keeps the whole previous one as its prefix
    assert (df["prefix_invalidated_tokens"] == 0).all()
    assert set(df["decision"].cat.categories) == set(DECISIONS)
    assert isinstance(df["time"].dtype, pd.DatetimeTZDtype)


def test_small_window_compacts_through_the_real_engine(scenario):
    r = replay(scenario.messages, "default", context_window=40_000)
    assert r.compactions, "a 40K window must force compactions on this session"
    df = r.steps_df
    assert df["compacted"].sum() == len([c for c in r.compactions if c.reason in ("auto", "emergency")])
    for c in r.compactions:
        assert c.ok and c.fell_back_to_structural  # default summaries are structural
        assert c.tokens_after < c.tokens_before
        assert c.folded_ids and c.summary_text
        step_ctx = r.context(c.step)
        assert any(m.get("type") == "compactionSummary" for m in step_ctx)
        # the latest user request is kept verbatim in the tail
        last_user = max(i for i, m in enumerate(scenario.messages[: c.stream_index]) if m["role"] == "user")
        assert last_user in {r.origin_of(m) for m in step_ctx}
    # after a compaction the request is smaller than the same request under `none`
    after = df[df["compacted"]]
    assert (after["tokens"] < after["tokens_none"]).all()
    m = r.metrics()
    assert m["broken_pairs_introduced"] == 0 and m["broken_pairs"] == 0
    assert m["compactions"] == len(r.compactions) and m["compression_ratio_mean"] > 1
    assert m["tokens_saved"] > 0


def test_replays_are_deterministic(scenario):
    a = replay(scenario.messages, "default", context_window=40_000)
    b = replay(scenario.messages, "default", context_window=40_000)
    pd.testing.assert_frame_equal(a.steps_df, b.steps_df)
    strip = [(c.step, c.summary_text, c.folded_indices, c.kept_indices, c.tokens_before, c.tokens_after) for c in a.compactions]
    assert strip == [(c.step, c.summary_text, c.folded_indices, c.kept_indices, c.tokens_before, c.tokens_after) for c in b.compactions]
    assert a.metrics() == b.metrics()


def test_provider_summaries_are_used(scenario):
    seen = []

    def provider(messages, model, system, tools):
        seen.append(messages[0]["content"])
        return "LLM SUMMARY: the user asked to fix tests."

    # aging off: with aging the engine's compact() judges the un-aged branch and may take
    # the emergency (structural) path even when prepare() said "auto"
    r = replay(scenario.messages, "default", context_window=40_000, summaries=provider, aging=False)
    assert r.compactions and seen
    assert all(c.summary_text == "LLM SUMMARY: the user asked to fix tests." for c in r.compactions)
    assert not any(c.fell_back_to_structural for c in r.compactions)
    assert r.summaries == "provider"


def test_recorded_summaries_compact_where_the_recording_did(scenario):
    msgs = scenario.messages
    point = next(i for i, m in enumerate(msgs) if i > len(msgs) // 2 and m["role"] == "user")
    history = RecordedHistory(
        messages=msgs,
        compactions=[RecordedCompaction(stream_index=point, node_id="S1", summary_text="RECORDED SUMMARY", trigger="auto")],
        model=scenario.model,
    )
    r = replay(history, "none", summaries="recorded")
    assert len(r.compactions) == 1
    comp = r.compactions[0]
    assert comp.reason == "recorded" and comp.summary_text == "RECORDED SUMMARY"
    assert not comp.fell_back_to_structural
    first_request_after = next(i for i in range(point, len(msgs)) if msgs[i]["role"] == "assistant")
    assert comp.stream_index == first_request_after
    row = r.steps_df.loc[comp.step]
    assert row["decision"] == "recorded" and row["compacted"]
    assert "RECORDED SUMMARY" in "\n".join(str(m.get("content")) for m in r.context(comp.step))
    # the recording's context differs from the stream after its compaction
    assert r.steps_df.loc[comp.step:, "diverged"].all()


def test_wall_clock_gates_run_on_the_recording_clock(scenario):
    clock = ReplayClock(100.0)
    clock.set(50.0)  # never backwards
    assert clock() == 100.0
    clock.set(float("nan"))
    assert clock() == 100.0
    r = replay(scenario.messages, "none")
    assert list(r.steps_df["timestamp"]) == [scenario.messages[i]["timestamp"] for i in r.steps_df["stream_index"]]


def test_engine_factory_and_instance(scenario):
    msgs = scenario.messages[:120]

    def factory(*, session_db, clock, context_window, model, summarizer_provider):
        return DefaultContextEngine(session_db=session_db, clock=clock, context_window=context_window, name="mine", aging=False)

    r = replay(msgs, factory, context_window=20_000)
    assert r.preset == "mine" and r.compactions
    configured = DefaultContextEngine(name="configured", aging=False, auto_compact_pct=0.5, recommend_pct=0.4)
    r2 = replay(msgs, configured, context_window=20_000)
    assert r2.preset == "configured" and r2.compactions
    assert configured.session_db is None  # the caller's engine is not modified
    # with its default TurnAger (which holds a lock and the shared estimator cache)
    aging = DefaultContextEngine(name="aging", auto_compact_pct=0.5, recommend_pct=0.4)
    r3 = replay(msgs, aging, context_window=20_000)
    assert r3.preset == "aging" and r3.compactions
    assert aging.ager is not None and aging.ager._states == []  # the caller's ager saw nothing
    from opctx.lab.presets import build_engine

    masking = build_engine("observation-masking", session_db=None, context_window=20_000)
    r4 = replay(msgs, masking, context_window=20_000)
    assert r4.steps_df["redacted"].max() > 0 and masking.ager._seen == []


def test_bad_arguments_are_refused(scenario):
    msgs = scenario.messages[:10]
    with pytest.raises(ValueError, match="summaries"):
        replay(msgs, "none", summaries="bogus")
    with pytest.raises(ValueError, match="unknown preset"):
        replay(msgs, "nope")
    with pytest.raises(ValueError, match="unknown preset parameter"):
        replay(msgs, "default", not_a_param=1)
    with pytest.raises(TypeError, match="cannot replay"):
        replay(42, "none")
    with pytest.raises(ValueError, match="role"):
        replay([{"role": "robot", "content": "x"}], "none")
    r = replay(msgs, "none", keep_contexts=False)
    with pytest.raises(RuntimeError, match="keep_contexts"):
        r.context(0)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    window=st.sampled_from([12_000, 20_000, 40_000]),
    preset=st.sampled_from(["default", "claude-code", "hermes", "codex"]),
)
def test_property_compaction_never_breaks_tool_pairs_and_always_shrinks(seed, window, preset):
    msgs = generate_session(seed, n_turns=8, max_tools_per_turn=4).messages
    r = replay(msgs, preset, context_window=window)
    m = r.metrics(reference_loss=False)
    assert m["broken_pairs_introduced"] == 0
    for c in r.compactions:
        assert c.tokens_after < c.tokens_before
        # nothing after the cut is lost: kept + folded + protected cover the branch
        assert c.folded_ids


def test_messages_without_ids_or_timestamps(scenario):
    msgs = [{k: v for k, v in m.items() if k not in ("id", "parent_id", "timestamp")} for m in scenario.messages]
    r = replay(msgs, "default", context_window=30_000)
    assert r.compactions and len(r.steps_df) == sum(m["role"] == "assistant" for m in msgs)
    last = r.context(len(r.steps_df) - 1)
    assert all(r.origin_of(m) is not None for m in last if m.get("type") != "compactionSummary")
    assert any(str(m["id"]).startswith("replay_") for m in r.context(0))


def test_chained_structural_summaries_stay_deterministic():
    # chained structural summaries soon list more than fits and name the omitted range by
    # the ids of earlier copies and summaries. Those ids are minted deterministically by the
    # replay's database, so the text (and its tokens) is the same on every run.
    msgs = generate_session(7, n_turns=50).messages
    a = replay(msgs, "default", context_window=64_000, keep_contexts=False)
    b = replay(msgs, "default", context_window=64_000, keep_contexts=False)
    assert any("(ids " in c.summary_text for c in a.compactions), "the test must reach the omitted-ids line"
    assert [c.summary_text for c in a.compactions] == [c.summary_text for c in b.compactions]
    assert [c.summary_id for c in a.compactions] == [c.summary_id for c in b.compactions]
    pd.testing.assert_frame_equal(a.steps_df, b.steps_df)


_IMPORT_AND_REPLAY = """
import json, sys
from opctx.importers.message_lists import parse_openai
from opctx.lab.replay import replay
session = parse_openai(sys.argv[1])[0]
r = replay(session, "default", context_window=24_000, summary_output_tokens=800, keep_contexts=False)
print(json.dumps({"summaries": [c.summary_text for c in r.compactions], "tokens": r.steps_df["tokens"].tolist()}))
"""


def test_a_replay_of_an_imported_transcript_is_the_same_in_every_process(tmp_path):
    # an import names messages with random ids, and a chained structural summary names the
    # first and last ids of the messages it does not list: the replay's own ids for imported
    # messages keep that text, and its tokens, the same in every process (and hash seed)
    path = tmp_path / "session.json"
    path.write_text(json.dumps(generate_session(7, n_turns=12).messages))
    runs = [subprocess.Popen([sys.executable, "-c", _IMPORT_AND_REPLAY, str(path)], stdout=subprocess.PIPE,
                             env={**os.environ, "PYTHONHASHSEED": seed}, text=True) for seed in ("0", "1")]
    outs = [json.loads(run.communicate(timeout=120)[0]) for run in runs]
    assert all(run.returncode == 0 for run in runs)
    assert re.search(r"\(ids \S+ \.\. [lu]_", "\n".join(outs[0]["summaries"])), "must name an imported message"
    assert outs[0] == outs[1]


def test_only_an_imports_random_ids_are_replaced():
    assert replay_message_id("m0", 3) == "m0" and replay_message_id("replay_000003", 3) == "replay_000003"
    minted = replay_message_id("l_0123456789ab4cde", 3)  # opctx.dag.nodes.new_id's shape
    assert minted != "l_0123456789ab4cde" and re.fullmatch(r"l_[0-9a-f]{12}4[0-9a-f]{3}", minted)
    assert replay_message_id("l_fedcba9876544321", 3) == minted  # the position decides, not the random digits
    assert replay_message_id("u_fedcba9876544321", 3) == "u_" + minted[2:]
    assert replay_message_id("l_fedcba9876544321", 4) != minted


def test_engine_guard_notes_become_one_clear_warning(caplog):
    import logging

    msgs = generate_session(2, n_turns=40).messages
    with caplog.at_level(logging.INFO, logger="opctx"):
        r = replay(msgs, "hermes", context_window=32_000)
    engine_records = [x for x in caplog.records if x.name == "opctx.context.engine"]
    lab_records = [x for x in caplog.records if x.name == "opctx.lab.replay"]
    assert engine_records == []  # kept in the result instead
    notes = [e for e in r.events if e["event"] == "engine_log"]
    assert any(n["level"] == "WARNING" and "auto-compaction disabled" in n["message"] for n in notes)
    counts = r.metrics(reference_loss=False)
    assert counts["auto_compaction_disabled"] > 0 and counts["compactions_failed"] > 0
    assert len(lab_records) == 1 and lab_records[0].levelno == logging.WARNING
    text = lab_records[0].getMessage()
    assert "'hermes'" in text and "32,000" in text and "protect_last_n" in text
    # outside a replay the engine's records pass through untouched
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="opctx"):
        logging.getLogger("opctx.context.engine").warning("outside a replay")
    assert [x.getMessage() for x in caplog.records] == ["outside a replay"]


def test_every_result_carries_the_policy_it_ran_with(scenario, tmp_path):
    import json

    from opctx.context.policy import CompactionPolicy
    from opctx.lab.presets import PRESETS, build_engine, resolve_trigger

    r = replay(scenario.messages, "claude-code", context_window=30_000, client_version="2.0.76")
    expected = build_engine("claude-code", context_window=30_000, model=r.model or None,
                            client_version="2.0.76").policy
    assert r.policy == expected and r.policy.resolved
    auto_tokens = resolve_trigger("claude-code", context_window=30_000, model=r.model or None,
                                  client_version="2.0.76").auto_tokens
    assert r.policy.trigger.auto_pct * r.steps_df["input_budget"].iloc[0] == pytest.approx(auto_tokens)
    # the frames carry it as JSON: every step, every compaction, through Parquet and back
    assert set(r.steps_df["policy"]) == {r.policy_json}
    assert CompactionPolicy.from_dict(json.loads(r.steps_df["policy"].iloc[0])) == r.policy
    comps = r.compactions_df()
    assert len(comps) and set(comps["policy"]) == {r.policy_json}
    path = tmp_path / "steps.parquet"
    r.steps_df.to_parquet(path)
    back = pd.read_parquet(path)
    assert CompactionPolicy.from_dict(json.loads(back["policy"].iloc[-1])) == r.policy
    # a policy given as such is replayed as such (the window it names wins)
    mine = PRESETS["hermes"].policy.replace(**{"cut.protect_last_n": 4})
    again = replay(scenario.messages, mine, context_window=30_000)
    assert again.policy == mine.replace(**{"budget.context_window": 30_000}) and again.preset == "custom"


def test_the_summarisers_tokens_are_counted_even_when_its_summary_made_no_progress():
    """A summary too long to shrink the request fails the compaction; its call still cost tokens."""
    from opctx.dag.providers import Reply, Usage

    def verbose(messages, model, system, tools):
        return Reply(text="word " * 30_000, tool_calls=[], usage=Usage(500, 30_000), model="small")

    def concise(messages, model, system, tools):
        return "short summary"  # no usage reported: opctx's estimate

    r = replay(generate_session(21, n_turns=12).messages, "default", context_window=40_000, aging=False,
               summaries=verbose)
    failed = [e for e in r.events if e.get("event") == "compaction_failed"]
    assert failed and failed[0]["summary_calls"] == 1 and failed[0]["summary_input_tokens"] == 500
    requests = r.summary_requests()
    assert requests[0]["compacted"] is False and requests[0]["model"] == "small"
    assert r.metrics()["summary_output_tokens"] == 30_000 * len(requests)
    ok = replay(generate_session(21, n_turns=12).messages, "default", context_window=40_000, aging=False,
                summaries=concise)
    assert ok.compactions and all(c.summary_tokens_estimated and c.summary_input_tokens > 0 for c in ok.compactions)
    assert all(c.summary_model == ok.model for c in ok.compactions)  # a bare call names no model: the replay's
    assert ok.summaries == "provider"


def test_a_replay_reads_figures_only_and_an_engine_without_that_option_still_replays(scenario):
    """The replay sends nothing, so it asks the engine for the figures and the decision only
    (``prepare(assemble=False)``); an engine whose ``prepare`` has no such keyword (a user's
    subclass written against the ``ContextEngine`` signature) is replayed as before, with the
    same figures."""
    msgs = scenario.messages[:120]
    asked: list[dict] = []

    class Recording(DefaultContextEngine):
        def prepare(self, agent, session, history, model, tools, **kw):
            asked.append(kw)
            prep = super().prepare(agent, session, history, model, tools, **kw)
            assert prep.agent_messages == [] and prep.request_tokens is None
            return prep

    class Plain(DefaultContextEngine):
        def prepare(self, agent, session, history, model, tools):
            prep = super().prepare(agent, session, history, model, tools)
            assert prep.request_tokens is not None
            return prep

    def run(cls):
        def factory(*, session_db, clock, context_window, model, summarizer_provider):
            return cls(session_db=session_db, clock=clock, context_window=context_window, name="e", aging=False)

        return replay(msgs, factory, context_window=6_000)

    figures_only, assembled = run(Recording), run(Plain)
    assert asked and all(kw == {"assemble": False} for kw in asked)
    assert figures_only.compactions and figures_only.metrics() == assembled.metrics()
    pd.testing.assert_frame_equal(figures_only.steps_df, assembled.steps_df)
