"""SummaryMeter: the summariser's tokens per compaction, from the reply's usage or estimated,
a failed call counted, and a call that outlives its compaction kept in its own slot."""

from __future__ import annotations

import threading

import pytest

from opctx.dag.providers import Reply, ScriptedProvider, Usage
from opctx.lab._replay_result import ReplayCompaction
from opctx.lab._summary_meter import SummaryMeter
from opctx.lab.summaries import LLMSummaries

ASK = [{"role": "user", "content": "summarise: fix calc.py"}]


def _compaction() -> ReplayCompaction:
    return ReplayCompaction(0, 0, 0, "auto", 10, 5, [], [], [], "s", False)


def test_the_replys_usage_is_what_the_compaction_cost():
    meter = SummaryMeter(lambda *a: Reply(text="s", tool_calls=[], usage=Usage(120, 30, 100, 0), model="small"))
    slot = meter.begin()
    meter(ASK, "agent-model", "sys", None)
    record = _compaction()
    meter.apply(slot, record)
    assert (record.summary_model, record.summary_input_tokens, record.summary_output_tokens) == ("small", 120, 30)
    assert (record.summary_cache_read_tokens, record.summary_calls, record.summary_tokens_estimated) == (100, 1, False)


def test_a_failed_call_is_counted_and_raised_again():
    def failing(*a):
        raise RuntimeError("down")

    meter = SummaryMeter(failing)
    slot = meter.begin()
    with pytest.raises(RuntimeError):
        meter(ASK, "m", "sys", None)
    u = meter.usage(slot)
    assert (u.calls, u.ok, u.input_tokens, u.model) == (1, False, 0, "m")


def test_a_summary_from_the_cache_keeps_its_measured_counts(tmp_path):
    llm = LLMSummaries(ScriptedProvider(["short summary"]), "small", cache=tmp_path / "c.sqlite")
    first, second = SummaryMeter(llm), SummaryMeter(llm)
    a, b = first.begin(), second.begin()
    first(ASK, "agent-model", "sys", None)
    second(ASK, "agent-model", "sys", None)
    made, served = first.usage(a), second.usage(b)
    assert not made.cached and served.cached and served.model == made.model == "small"
    assert served.input_tokens == made.input_tokens > 0 and served.estimated  # a str reply: opctx's estimate


def test_a_late_call_lands_in_the_slot_it_started_in():
    entered, release = threading.Event(), threading.Event()

    def slow(*a):
        entered.set()
        release.wait(5)
        return Reply(text="late", tool_calls=[], usage=Usage(7, 1), model="m")

    meter = SummaryMeter(slow)
    first = meter.begin()
    worker = threading.Thread(target=meter, args=(ASK, "m", "sys", None))
    worker.start()
    entered.wait(5)
    second = meter.begin()  # the engine gave up on the call and compacts again later
    release.set()
    worker.join()
    assert meter.usage(second) is None and meter.usage(first).input_tokens == 7
