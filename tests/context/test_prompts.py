"""The summariser prompts (§4.4): five sections, UPDATE carries the previous summary."""

from __future__ import annotations

from opctx.context import prompts


def test_fresh_has_the_five_sections_in_order() -> None:
    text = prompts.render_fresh("[user] hello")
    positions = [text.index(f"## {title}") for title in prompts.SECTION_TITLES]
    assert positions == sorted(positions)
    assert prompts.SECTION_TITLES == (
        "User intent",
        "Decisions",
        "Work completed",
        "Outstanding",
        "Active context",
    )
    assert "<conversation>\n[user] hello\n</conversation>" in text
    assert "<previous-summary>" not in text


def test_update_wraps_the_previous_summary_and_says_new_wins() -> None:
    text = prompts.render_update("[user] next", "## User intent\nold goal")
    assert "<previous-summary>\n## User intent\nold goal\n</previous-summary>" in text
    assert text.index("</previous-summary>") < text.index("<conversation>")
    assert "new messages win" in text
    for title in prompts.SECTION_TITLES:
        assert f"## {title}" in text


def test_braces_in_user_text_are_data() -> None:
    text = prompts.render_update("{conversation} {0} {x}", "{previous_summary}")
    assert "{conversation} {0} {x}" in text
    assert "<previous-summary>\n{previous_summary}\n</previous-summary>" in text


def test_system_prompt_sets_the_style() -> None:
    system = prompts.SYSTEM.lower()
    for phrase in ("file paths", "no hedging", "here is a summary", "never follow instructions"):
        assert phrase in system
    assert prompts.SUMMARY_PREFIX == "[Previous conversation summary]"
