"""The named summary prompts: each pinned to the source it was read from, rendered as its client sends it."""

from __future__ import annotations

import hashlib

import pytest

from opctx.context import prompts as opctx_prompts
from opctx.lab.summary_prompts import PROMPTS, claude_code_format, get_prompt, prompt_names

# (excerpt of the source, where it was read, sha256 of the text as read there)
PINS = {
    "claude-code": (
        "Your task is to create a detailed summary of the conversation so far, paying close attention "
        "to the user's explicit requests and your previous actions.",
        "@anthropic-ai/claude-code@2.0.76",
        # the text of aY0 (no custom instructions) in package/cli.js of 2.0.76
        "31fefa8f6334284d94733af5de913d65137b849b2128b488e2e2fb388024de31",
    ),
    "openhands": (
        "If the events being summarized contain ANY task-tracking, you MUST include a TASK_TRACKING "
        "section to maintain continuity.",
        "OpenHands/software-agent-sdk@611629e6999ad398dc49c761721eefe18d5e6bd9",
        None,  # pinned below on the whole template file
    ),
    "complexity-trap": (
        "You are maintaining a context-aware state summary for an interactive agent. You will be given "
        "a list of events corresponding to actions taken by the agent, and the most recent previous "
        "summary if one exists. Track:",
        "adfaa1a18b8b3500abb7537101b2bdcefa31f22a",
        None,
    ),
}

# summarizing_prompt.j2 at the commit above: git blob 189d769905369c4abdb650b77a25fe81dd96c784
OPENHANDS_TEMPLATE_SHA256 = "88cfcc443636ee2df8aa267417a22c0f1c9e3caa73c4edce10fe4ad6b03dd3f3"
OPENHANDS_LOOP = "{% for event in events %}\n<EVENT>\n{{ event }}\n</EVENT>\n{% endfor %}\n\nNow summarize the events using the rules above.\n"

MESSAGES = [
    {"role": "user", "content": "Fix the division in calc.py; never change tests."},
    {"role": "assistant", "content": "Reading it.", "tool_calls": [
        {"id": "t1", "name": "Read", "arguments": {"file_path": "/repo/calc.py"}}]},
    {"role": "tool", "tool_call_id": "t1", "name": "Read", "content": "def divide(a, b): return a // b"},
]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_every_prompt_has_a_name_a_source_and_a_licence():
    assert prompt_names() == ["claude-code", "complexity-trap", "opctx", "openhands"]
    for name, prompt in PROMPTS.items():
        assert prompt.name == name and prompt.source and prompt.licence
        assert prompt.excerpt in (prompt.instructions + (prompt.system or ""))
    assert get_prompt(PROMPTS["opctx"]) is PROMPTS["opctx"]
    with pytest.raises(ValueError, match="unknown summary prompt"):
        get_prompt("gemini")


@pytest.mark.parametrize("name", sorted(PINS))
def test_prompts_are_pinned_to_their_source(name):
    excerpt, source, text_sha = PINS[name]
    prompt = get_prompt(name)
    assert excerpt in prompt.instructions and prompt.excerpt in prompt.instructions
    assert source in prompt.source
    if text_sha:
        assert sha(prompt.instructions) == text_sha


def test_openhands_template_is_the_file_at_the_commit():
    assert sha(get_prompt("openhands").instructions + OPENHANDS_LOOP) == OPENHANDS_TEMPLATE_SHA256


def test_claude_code_sends_the_conversation_then_its_instructions():
    system, user = get_prompt("claude-code").render(MESSAGES)
    assert system == "You are a helpful AI assistant tasked with summarizing conversations."
    assert user.index("/repo/calc.py") < user.index("Your task is to create a detailed summary")
    assert user.startswith("[user] Fix the division")
    system, user = get_prompt("claude-code").render(MESSAGES, "PREVIOUS SUMMARY")
    assert user.startswith("[user] PREVIOUS SUMMARY")


def test_claude_code_post_processing_is_the_clients():
    out = claude_code_format("<analysis>\nthinking\n</analysis>\n\n\n\n<summary>\n1. Primary Request\n</summary>")
    assert out == (
        "This session is being continued from a previous conversation that ran out of context. "
        "The conversation is summarized below:\nAnalysis:\nthinking\n\nSummary:\n1. Primary Request."
    )


def test_openhands_one_event_per_message_and_the_previous_summary_first():
    system, user = get_prompt("openhands").render(MESSAGES, "EARLIER")
    assert system is None
    assert user.count("<EVENT>") == 4 and user.index("EARLIER") < user.index("Fix the division")
    assert user.endswith("Now summarize the events using the rules above.")


def test_complexity_trap_turns_and_problem_statement():
    system, user = get_prompt("complexity-trap").render(MESSAGES)
    assert system.startswith("You are maintaining a context-aware state summary")
    assert user.startswith("<PROBLEM_STATEMENT>\nFix the division in calc.py; never change tests.\n</PROBLEM_STATEMENT>\n")
    assert "<TURN-1>\nASSISTANT: Reading it." in user and "TOOL: def divide" in user
    assert user.endswith("You are hard-working and must always perform this task without exceptions.")
    _, user = get_prompt("complexity-trap").render(MESSAGES, "CHECKPOINT 1")
    assert user.startswith("<PREVIOUS_CHECKPOINT>\nCHECKPOINT 1\n</PREVIOUS_CHECKPOINT>\n")


def test_opctx_prompt_is_the_engines():
    system, user = get_prompt("opctx").render(MESSAGES)
    assert system == opctx_prompts.SYSTEM and user.startswith(opctx_prompts.FRESH.split("{conversation}")[0])
    _, user = get_prompt("opctx").render(MESSAGES, "before")
    assert "<previous-summary>\nbefore\n</previous-summary>" in user


def test_a_rendered_transcript_goes_in_as_one_block():
    system, user = get_prompt("openhands").render_block("[user] a\n\n[assistant] b")
    assert user.count("<EVENT>") == 1 and "[user] a\n\n[assistant] b" in user
    system, user = get_prompt("opctx").render_block("[user] a", "prev")
    assert "<previous-summary>\nprev\n</previous-summary>" in user and "[user] a" in user
