"""Summarizer: FRESH / UPDATE, and the structural fallback on every kind of failure (§4.4-§4.6)."""

from __future__ import annotations

import threading
import time

import pytest
from _compaction_fixtures import assistant, call, char_tokens, results, user
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context import prompts
from opctx.context.summarize import (
    PromptTooLarge,
    Summarizer,
    SummarizerConfig,
    render_transcript,
    structural_line,
    structural_summary,
)
from opctx.dag.providers import ProviderHTTPError, Reply, ScriptedProvider


def folded() -> list[dict]:
    c = call("read_file", "list_dir")
    return [
        user("explain the database schema in section 4"),
        assistant("The schema has three tables: users, sessions, messages and more text here"),
        c,
        *results(c, 30),
        {**results(call("rm"), 5, error=True)[0], "content": "PermissionError: /etc/passwd"},
        user("now refactor the message table to add a thread_id column"),
    ]


def provider_answer(text: str = "## User intent\nRefactor the schema.") -> ScriptedProvider:
    return ScriptedProvider([Reply(text=text)])


def test_fresh_prompt_when_no_previous_summary() -> None:
    provider = provider_answer()
    s = Summarizer(provider, model="m")
    res = s.summarise(folded(), estimate=char_tokens)
    assert not res.fell_back_to_structural and res.error is None
    assert res.text == "## User intent\nRefactor the schema."
    assert not res.used_previous_summary
    assert res.summarised_count == 7
    assert res.summarised_tokens == sum(char_tokens(m) for m in folded())
    sent = provider.calls[0]
    assert sent["system"] == prompts.SYSTEM
    assert sent["model"] == "m"
    body = sent["messages"][0]["content"]
    assert "<previous-summary>" not in body
    assert "explain the database schema" in body
    assert "read_file(" in body and "[tool rm error] PermissionError" in body
    for title in prompts.SECTION_TITLES:
        assert f"## {title}" in body


def test_update_prompt_carries_the_previous_summary() -> None:
    provider = provider_answer("## User intent\nupdated")
    res = Summarizer(provider).summarise(folded(), previous_summary="OLD SUMMARY TEXT", estimate=char_tokens)
    assert res.used_previous_summary
    body = provider.calls[0]["messages"][0]["content"]
    assert "<previous-summary>\nOLD SUMMARY TEXT\n</previous-summary>" in body
    assert "the new messages win" in body
    assert res.prompt == body


def test_previous_summary_node_in_the_fold_is_not_repeated() -> None:
    node = {
        "id": "summary_1",
        "role": "system",
        "type": "compactionSummary",
        "content": "[Previous conversation summary]\nOLD",
        "extra": {"compaction": True},
    }
    provider = provider_answer()
    Summarizer(provider).summarise([node, *folded()], previous_summary="OLD", estimate=char_tokens)
    body = provider.calls[0]["messages"][0]["content"]
    assert body.count("[Previous conversation summary]") == 0
    assert "[summary] (previous summary, given separately)" in body


def assert_structural(res, messages, previous: str | None = None) -> None:
    assert res.fell_back_to_structural
    lines = res.text.splitlines()
    if previous:
        assert lines[0] == "Earlier summary:" and lines[1] == previous
    listed = [ln for ln in lines if ln.startswith("[")]
    assert len(listed) == len(messages), "every folded message is listed"
    for line, msg in zip(listed, messages, strict=True):
        assert line == structural_line(msg)


@pytest.mark.parametrize(
    "exc",
    [ProviderHTTPError(401, "invalid api key"), ConnectionError("network down"), ValueError("bad")],
)
def test_provider_exception_falls_back(exc: Exception) -> None:
    def failing(messages, model, system, tools):
        raise exc

    msgs = folded()
    res = Summarizer(failing).summarise(msgs, previous_summary="prev", estimate=char_tokens)
    assert_structural(res, msgs, "prev")
    assert res.error == f"{type(exc).__name__}: {exc}"
    assert res.used_previous_summary
    assert res.error.split(":")[0] in res.text  # the summary says why it is structural


def test_empty_reply_falls_back() -> None:
    msgs = folded()
    res = Summarizer(provider_answer("   ")).summarise(msgs, estimate=char_tokens)
    assert_structural(res, msgs)
    assert res.error.startswith("ValueError: the provider returned an empty summary")


def test_timeout_falls_back_quickly() -> None:
    release = threading.Event()

    def slow(messages, model, system, tools):
        release.wait(5)
        return "too late"

    msgs = folded()
    started = time.monotonic()
    res = Summarizer(slow).summarise(msgs, timeout=0.2, estimate=char_tokens)
    release.set()
    assert time.monotonic() - started < 2
    assert_structural(res, msgs)
    assert res.error.startswith("SummaryTimeout: no summary within 0.2s")


def test_cancel_before_during_and_after_the_call() -> None:
    msgs = folded()
    cancel = threading.Event()
    cancel.set()
    called = []
    res = Summarizer(lambda *a: called.append(1) or "x").summarise(msgs, cancel_event=cancel, estimate=char_tokens)
    assert_structural(res, msgs)
    assert res.error == "SummaryCancelled: cancelled before the summary call"
    assert not called

    cancel = threading.Event()
    entered = threading.Event()

    def blocking(messages, model, system, tools):
        entered.set()
        time.sleep(2)
        return "late"

    threading.Thread(target=lambda: (entered.wait(2), cancel.set()), daemon=True).start()
    started = time.monotonic()
    res = Summarizer(blocking).summarise(msgs, cancel_event=cancel, estimate=char_tokens)
    assert time.monotonic() - started < 1.5
    assert res.error == "SummaryCancelled: cancelled during the summary call"

    cancel = threading.Event()

    def sets_cancel(messages, model, system, tools):
        cancel.set()
        return "answer that arrives after the user cancelled"

    res = Summarizer(sets_cancel).summarise(msgs, cancel_event=cancel, estimate=char_tokens)
    assert res.fell_back_to_structural
    assert res.error in (
        "SummaryCancelled: cancelled after the summary call returned",
        "SummaryCancelled: cancelled during the summary call",
    )


def test_no_provider_is_structural_with_a_reason() -> None:
    msgs = folded()
    res = Summarizer(None).summarise(msgs, estimate=char_tokens)
    assert_structural(res, msgs)
    assert res.error.startswith("NoProvider")


def test_forced_structural_skips_the_provider() -> None:
    provider = provider_answer()
    msgs = folded()
    res = Summarizer(provider).summarise(msgs, force_structural="Emergency: 97% used", estimate=char_tokens)
    assert_structural(res, msgs)
    assert res.error == "Emergency: 97% used"
    assert provider.calls == []


def test_structural_lines() -> None:
    c = call("grep", "ls")
    assert structural_line(user("line one\nline two")) == "[user] line one line two"
    long = structural_line(assistant("x" * 200))
    assert long == "[assistant] " + "x" * 60 + "..."
    line = structural_line(c)
    assert line.startswith("[assistant] -> grep(") and "-> ls(" in line
    r = results(c, 100)[0]
    assert structural_line(r) == "[tool grep] " + r["content"][:60] + "..."
    assert structural_line({"id": "e", "role": "assistant", "content": ""}) == "[assistant] (empty)"
    cjk = structural_line(user("数据库结构" * 30))
    assert cjk == "[user] " + ("数据库结构" * 12) + "..."
    text = structural_summary([user("a"), user("b")], "PREV", error="Boom: x")
    assert text.splitlines()[:2] == ["Earlier summary:", "PREV"]
    assert "Boom: x" in text


def test_huge_messages_are_clipped_and_oldest_become_one_liners() -> None:
    big = [user("u" * 50_000), assistant("a" * 50_000)] + [user(f"msg {i} " + "z" * 2_000) for i in range(20)]
    text = render_transcript(big, max_message_chars=1_000, count_tokens=lambda s: len(s) // 4)
    assert "characters omitted" in text
    assert len(text) < 30_000
    fitted = render_transcript(big, max_message_chars=1_000, max_tokens=2_000, count_tokens=lambda s: len(s) // 4)
    assert "listed in brief" in fitted
    assert len(fitted) // 4 <= 2_000
    assert "msg 19" in fitted  # the newest stay in full
    with pytest.raises(PromptTooLarge):
        render_transcript(big, max_tokens=10, count_tokens=lambda s: len(s) // 4)


def test_prompt_too_large_falls_back() -> None:
    provider = provider_answer()
    msgs = folded()
    res = Summarizer(provider, count_tokens=lambda s: len(s) // 4).summarise(
        msgs, max_prompt_tokens=50, estimate=char_tokens
    )
    assert_structural(res, msgs)
    assert res.error.startswith("PromptTooLarge")
    assert provider.calls == []


def test_config_round_trip() -> None:
    cfg = SummarizerConfig(protect_first_n=2, timeout=None)
    assert SummarizerConfig.from_dict(cfg.to_dict()) == cfg


def test_structural_summary_is_bounded_and_names_what_it_collapses() -> None:
    many = [user(f"step {i}: " + "details " * 20) for i in range(400)]
    full = structural_summary(many)
    assert all(f"step {i}:" in full for i in range(400))  # unbounded: every message listed
    def count(text: str) -> int:
        return len(text) // 4

    bounded = structural_summary(many, "PREV " * 2_000, max_tokens=1_000, count_tokens=count)
    assert count(bounded) <= 1_000
    lines = bounded.splitlines()
    collapsed = next(line for line in lines if "earlier folded message(s) not listed" in line)
    n_omitted = int(collapsed.split()[0].lstrip("["))
    listed = [line for line in lines if line.startswith("[user] step ")]
    assert n_omitted + len(listed) == 400  # every folded message is listed or counted
    assert f"ids {many[0]['id']} .. {many[n_omitted - 1]['id']}" in collapsed
    assert listed[-1].startswith("[user] step 399:")  # the newest ones stay listed
    assert "characters omitted" in bounded  # the previous summary was clipped, not dropped
    small = structural_summary(many[:3], "PREV", max_tokens=1_000, count_tokens=count)
    assert small == structural_summary(many[:3], "PREV")


def test_the_docs_say_what_the_structural_summary_does() -> None:
    """The structural fallback lists the folded messages up to ``summary_output_tokens``
    and collapses the oldest past it; docs/design.md and ``summarize`` said it "lists
    every folded message". Each place that describes it says the bound and the collapse."""
    import re
    from pathlib import Path

    import opctx.context._structural as structural_module
    import opctx.context.summarize as summarize_module

    assert SummarizerConfig().summary_output_tokens == 4_096
    many = [user(f"step {i}: " + "details " * 200) for i in range(400)]
    text = Summarizer(None, config=SummarizerConfig()).summarise(many).text
    assert "earlier folded message(s) not listed" in text  # the code collapses past the bound
    design = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    for name, doc in (("docs/design.md", design), ("summarize", summarize_module.__doc__),
                      ("_structural", structural_module.__doc__)):
        flat = " ".join(doc.split())
        assert not re.search(r"lists (\*\*)?every(\*\*)? folded message", flat), name
        assert "summary_output_tokens" in flat and "collapsed" in flat and "oldest" in flat, name


def test_chained_structural_summaries_stay_within_the_summary_budget() -> None:
    cfg = SummarizerConfig(summary_output_tokens=2_000)
    summarizer = Summarizer(provider_call=None, config=cfg)
    previous = None
    sizes = []
    for round_ in range(12):
        batch = [user(f"round {round_} message {i} " + "x" * 200) for i in range(60)]
        result = summarizer.summarise(batch, previous_summary=previous)
        assert result.fell_back_to_structural
        sizes.append(len(result.text) // 4)
        previous = result.text
    assert max(sizes) <= 2_000 * 1.1
    assert "round 11 message 59" in previous


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(["a", "b", " ", "\n", "\t", "é"]), max_size=400),
       st.integers(1, 80))
def test_a_one_liner_flattens_only_what_it_shows(text, limit):
    from opctx.context._structural import _one_line

    flat = " ".join(text.split())
    assert _one_line(text, limit) == (flat if len(flat) <= limit else flat[:limit] + "...")
