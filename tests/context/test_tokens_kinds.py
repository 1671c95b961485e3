"""Per-kind costs of the estimator: content kinds, structure, hidden thinking, images, CJK."""

from __future__ import annotations

import base64
import math
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context import tokens
from opctx.context._family_profiles import _scaled
from opctx.context.tokens import (
    FAMILY_PROFILES,
    IMAGE_TOKENS,
    Estimator,
    FamilyProfile,
    TextCount,
    estimate_message_tokens,
    image_dimensions,
    image_tokens,
    message_parts,
)

CLAUDE = "claude-opus-4-5-20251101"


def kinds(msg) -> list[str]:
    return [kind for kind, _ in message_parts(msg).segments]


# ---------------------------------------------------------------- content kinds


def test_each_kind_is_told_apart():
    assistant = {
        "role": "assistant",
        "content": "I'll look.",
        "thinking": [{"type": "thinking", "thinking": "The user wants a listing.", "signature": "EoS" * 50}],
        "tool_calls": [{"id": "t1", "name": "Bash", "arguments": {"command": "ls"}}],
    }
    assert kinds(assistant) == ["text", "thinking", "tool_input", "tool_input"]
    parts = message_parts(assistant)
    assert parts.tool_calls == 1 and parts.hidden_thinking_bytes == 0  # visible thinking: text
    result = {"role": "tool", "tool_call_id": "t1", "content": "a.py\n<system-reminder>\nbe careful\n</system-reminder>\n"}
    assert kinds(result) == ["tool_result", "reminder", "tool_result"]
    assert message_parts(result).tool_results == 1
    user = {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "mystery", "x": 1}]}
    assert kinds(user) == ["text", "other"]


def test_reminder_spans_are_kept_whole_and_text_around_them_keeps_its_kind():
    text = "before <system-reminder>one</system-reminder> middle <system-reminder>two</system-reminder>"
    parts = message_parts({"role": "user", "content": text})
    assert parts.segments == [
        ("text", "before "),
        ("reminder", "<system-reminder>one</system-reminder>"),
        ("text", " middle "),
        ("reminder", "<system-reminder>two</system-reminder>"),
    ]
    assert "".join(s for _, s in parts.segments) == text


def test_thinking_with_empty_text_is_counted_from_its_signature():
    signature = base64.b64encode(b"x" * 3_000).decode()
    reply = {"role": "assistant", "content": "ok", "thinking": [{"type": "thinking", "thinking": "", "signature": signature}]}
    parts = message_parts(reply)
    assert parts.hidden_thinking_bytes == 3_000 and parts.thinking_blocks == 1
    plain = estimate_message_tokens({"role": "assistant", "content": "ok"}, CLAUDE)
    profile = FAMILY_PROFILES["anthropic"]
    assert estimate_message_tokens(reply, CLAUDE) == plain + math.ceil(3_000 / profile.thinking_bytes_per_token)
    # raw methods never count what no text shows
    assert estimate_message_tokens(reply, CLAUDE, method="tiktoken") == estimate_message_tokens(
        {"role": "assistant", "content": "ok"}, CLAUDE, method="tiktoken"
    )


def test_redacted_thinking_and_encrypted_reasoning_are_hidden_bytes():
    redacted = {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "A" * 400}]}
    assert message_parts(redacted).hidden_thinking_bytes == 300
    codex = {"role": "assistant", "content": "", "reasoning": ["**Planning**"], "reasoning_encrypted": ["gAAA" * 100]}
    parts = message_parts(codex)
    assert parts.segments == [("thinking", "**Planning**")] and parts.hidden_thinking_bytes == 300


def test_thinking_in_content_is_not_counted_again_from_the_thinking_key():
    block = {"type": "thinking", "thinking": "reason " * 30, "signature": "sig"}
    both = {"role": "assistant", "content": [block, {"type": "text", "text": "done"}], "thinking": [block]}
    assert kinds(both).count("thinking") == 1


def test_importer_content_blocks_are_counted_once():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _png(780, 493)}}
    stored = {"role": "user", "content": "look", "content_blocks": [image]}
    assert message_parts(stored).images == [(780, 493)]
    inline = {"role": "user", "content": [{"type": "text", "text": "look"}, image], "content_blocks": [image]}
    assert message_parts(inline).images == [(780, 493)]


# ---------------------------------------------------------------- structure and text costs


def test_claude_counts_tool_calls_and_results_as_structure():
    profile = FAMILY_PROFILES["anthropic"]
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "t", "name": "ls", "arguments": {}}]}
    result = {"role": "tool", "tool_call_id": "t", "content": ""}
    text_of_call = Estimator().text_tokens("ls{}", CLAUDE)
    assert estimate_message_tokens(call, CLAUDE) >= profile.tool_call_tokens + profile.message_tokens
    assert estimate_message_tokens(result, CLAUDE) == profile.tool_result_tokens + profile.message_tokens
    # a round trip costs far more than the generic 8 per item: what the old estimate missed
    assert profile.tool_call_tokens + profile.tool_result_tokens > 4 * tokens.TOOL_CALL_OVERHEAD_TOKENS
    assert text_of_call > 0


def test_cjk_characters_cost_per_character_for_claude():
    profile = FAMILY_PROFILES["anthropic"]
    est = Estimator()
    for text in ("中" * 100, "鑫龘" * 50, "テスト" * 30):
        assert est.text_tokens(text, CLAUDE) == math.ceil(len(text) * profile.cjk_tokens_per_char)
    mixed = "状态 status 完成"
    count = est.text_count(mixed, tokens.OFFLINE_CL100K)
    assert count.cjk_chars == 4
    assert count.non_cjk_tokens == est.count(" status ", tokens.OFFLINE_CL100K)


def test_line_number_prefixes_are_counted_apart():
    listing = "".join(f"{i:>6}\u2192line {i}\n" for i in range(1, 51))
    count = Estimator().text_count(listing, tokens.OFFLINE_CL100K)
    assert count.numbered_lines == 50
    profile = FAMILY_PROFILES["anthropic"]
    raw = math.ceil(count.tokens * profile.scale)
    assert Estimator().text_tokens(listing, CLAUDE) == max(0, math.ceil(count.tokens * profile.scale + 50 * profile.numbered_line_tokens))
    assert Estimator().text_tokens(listing, CLAUDE) < raw


def test_kind_scales_apply_to_their_kind_only():
    profile = FamilyProfile("tiktoken", scale=2.0, kind_scales=(("tool_input", 1.0),), cjk_tokens_per_char=1.0)
    counts = {"tool_input": TextCount(100, 100), "tool_result": TextCount(100, 100)}
    assert profile.text_cost(counts) == 300
    assert profile.scale_of("tool_input") == 1.0 and profile.scale_of("text") == 2.0


def test_plain_profile_keeps_integer_scaling():
    profile = FamilyProfile("tiktoken", scale=1.05)
    assert profile.text_cost(TextCount(10, 10)) == _scaled(10, 1.05)
    assert FamilyProfile("tiktoken").text_cost({"text": TextCount(7, 7), "tool_result": TextCount(5, 5)}) == 12


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["user", "assistant", "tool"]))
def test_every_family_estimate_is_at_least_the_framing(text, role):
    msg = {"role": role, "content": text}
    for model in (CLAUDE, "gpt-4o", "mystery-model", None):
        counter, profile = Estimator().profile(model)
        assert estimate_message_tokens(msg, model) >= profile.message_tokens


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab 中文\n\u2192123"), max_size=200), st.text(max_size=100))
def test_adding_text_never_lowers_a_claude_estimate_much(a, b):
    # the line-number term is negative, so appending can lower the count by that much at most
    est = Estimator()
    assert est.text_tokens(a + b, CLAUDE) >= est.text_tokens(a, CLAUDE) - 3


# ---------------------------------------------------------------- images


def _png(width: int, height: int) -> str:
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", width, height) + b"\x08\x02\x00\x00\x00"
    body = header + struct.pack(">I", zlib.crc32(header[12:])) + b"\x00" * 64
    return base64.b64encode(body).decode()


def _gif(width: int, height: int) -> str:
    return base64.b64encode(b"GIF89a" + struct.pack("<HH", width, height) + b"\x00" * 40).decode()


def _jpeg(width: int, height: int) -> str:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
    exif = b"\xff\xe1" + struct.pack(">H", 2 + 5000) + b"\x00" * 5000  # an EXIF block first
    sof = b"\xff\xc0" + struct.pack(">HBHH", 17, 8, height, width) + b"\x03" + b"\x00" * 9
    return base64.b64encode(b"\xff\xd8" + app0 + exif + sof + b"\xff\xd9").decode()


def _webp(width: int, height: int) -> str:
    vp8x = b"VP8X" + struct.pack("<I", 10) + b"\x00" * 4 + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return base64.b64encode(b"RIFF" + struct.pack("<I", 30) + b"WEBP" + vp8x + b"\x00" * 16).decode()


@pytest.mark.parametrize("make", [_png, _gif, _jpeg, _webp], ids=["png", "gif", "jpeg", "webp"])
def test_image_dimensions_are_read_from_the_header(make):
    assert image_dimensions(make(1234, 567)) == (1234, 567)


def test_unreadable_image_data_has_no_size():
    assert image_dimensions("iVBORw0KGgo" * 10) is None
    assert image_dimensions("not base64 at all!!") is None
    assert image_dimensions("") is None


def test_image_costs_follow_the_provider_rules():
    # Anthropic: w*h/750, scaled to a 1568 px long edge and ~1,600 tokens at most
    assert image_tokens((780, 493), "pixels") == math.ceil(780 * 493 / 750)
    assert image_tokens((200, 200), "pixels") == 54
    assert image_tokens((2554, 1346), "pixels") == IMAGE_TOKENS
    # OpenAI high detail: 85 + 170 per 512 px tile after fitting 2048 and a 768 short side
    assert image_tokens((1024, 1024), "tiles") == 85 + 170 * 4
    assert image_tokens((4096, 8192), "tiles") == 85 + 170 * 6
    assert image_tokens(None, "tiles") == image_tokens(None) == IMAGE_TOKENS


def test_an_image_message_costs_its_pixels_not_a_flat_figure():
    small = {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _png(300, 200)}}]}
    empty = {"role": "user", "content": []}
    assert estimate_message_tokens(small, CLAUDE) - estimate_message_tokens(empty, CLAUDE) == 80
    low = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}]}
    assert estimate_message_tokens(low, "gpt-4o") - estimate_message_tokens(empty, "gpt-4o") == 85


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200) | st.binary(max_size=120).map(lambda b: base64.b64encode(b).decode()))
def test_image_dimensions_never_raise_and_stay_plausible(data):
    size = image_dimensions(data)
    assert size is None or (0 < size[0] <= 65_535 and 0 < size[1] <= 65_535)
