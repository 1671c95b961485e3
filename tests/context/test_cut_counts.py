"""Cuts of a text counted from its pieces agree with the tokenizer (opctx.context._cut_counts).

``fit`` counts the head, the tail and the two joined around the marker of every text it
truncates; ``_cut_counts`` works those counts out from the text's pre-tokeniser pieces
and places them in the estimator's cache. A wrong count there would change a fitted
request without any other sign, so every count it places is checked here against a
fresh tiktoken count, on texts made to meet the pattern's edge cases (runs of blanks,
punctuation before newlines, contractions, digits, CJK, one long word), plain and as
JSON string values.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from opctx.context import _cut_counts
from opctx.context._tiktoken_offline import bpe_token_count, get_encoding
from opctx.context.fit import TRUNCATION_MARKER, truncate_text
from opctx.context.tokens import _SPLIT, Estimator

MODELS = ["gpt-4o", "gpt-4"]  # o200k and cl100k

_PIECES = [
    "word", " word", "  two", "\n", "\n\n", " \n ", "\t", "it's", " they'll", "I'M", "1234567", " 42",
    "...", ".\n", "?!\r\n", "()", " {", "};\n", "    ", "  \n\n  ", "//", " /path/to/file.py", "\u4e2d\u6587",
    "\u65e5\u672c\u8a9e\u306e\u6587", "caf\u00e9", " na\u00efve", "\U0001F600", "=" * 30, "a" * 300, "x=1;y=2",
    "\u2192", "   12\u2192line", "<tag attr=\"v\">", "\\n", "\"quoted\"",
]


def _text(rng: random.Random, n: int) -> str:
    out, size = [], 0
    while size < n:
        piece = rng.choice(_PIECES)
        out.append(piece)
        size += len(piece)
    return "".join(out)


def _fresh(model: str):
    """A fresh estimator, the counter it uses for ``model`` and that counter's encoding."""
    est = Estimator()
    counter = est.profile(model)[0]
    enc = get_encoding(counter)
    if enc is None:
        pytest.skip("no tiktoken encoding offline")
    return est, counter, enc


def _recording(placed: list[tuple[str, int]]):
    """``Estimator.remember_count`` that also notes each count placed in ``placed``."""
    original = Estimator.remember_count

    def spy(self, text, counter, tokens):
        placed.append((text, tokens))
        original(self, text, counter, tokens)

    return spy


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("in_json", [False, True])
def test_every_count_placed_is_the_tokenizers(model, in_json, monkeypatch):
    est, _, enc = _fresh(model)
    placed: list[tuple[str, int]] = []
    spy = _recording(placed)

    monkeypatch.setattr(Estimator, "remember_count", spy)
    rng = random.Random(7)
    for _ in range(60):
        text = _text(rng, rng.choice([2_500, 6_000, 8_100, 9_000, 20_000, 45_000]))
        known = _cut_counts.known_cuts(text, est, model, in_json)
        assert known is not None
        for _ in range(6):
            keep = rng.randrange(0, len(text))
            head = text[: int(keep * 0.6)]
            tail = text[len(text) - (keep - len(head)):] if keep > len(head) else ""
            known.remember(head, tail)
            out = "\n".join(p for p in (head, TRUNCATION_MARKER.format(n=rng.randrange(1, 9999)), tail) if p)
            known.remember(out)
    assert len(placed) > 300
    for text, tokens in placed:
        assert tokens == bpe_token_count(enc, text), text[:80]


@pytest.mark.parametrize("model", MODELS)
def test_truncated_texts_are_the_same_with_and_without_pieces(model):
    """``truncate_text`` gives the same cut when its counts come from the pieces."""
    rng = random.Random(11)
    for _ in range(25):
        text = _text(rng, rng.choice([3_000, 7_000, 12_000, 30_000]))
        plain, pieces = Estimator(), Estimator()
        count_plain = lambda t, est=plain: est.text_tokens(t, model)  # noqa: E731
        count_pieces = lambda t, est=pieces: est.text_tokens(t, model)  # noqa: E731
        total = count_plain(text)
        for target in (total // 2, total // 5, total // 20, 40):
            expected = truncate_text(text, target, count_plain)
            known = _cut_counts.known_cuts(text, pieces, model)
            assert truncate_text(text, target, count_pieces, known=known) == expected


@pytest.mark.parametrize("in_json", [False, True])
def test_split_counts_placed_are_the_estimators(in_json, monkeypatch):
    """A profile that counts CJK characters and line-number prefixes apart (Claude's) also
    gets those parts of each cut placed: the count without CJK, the CJK characters and the
    prefixes, worked out from the text's own (the stretch around the cut searched again).
    Each equals what a fresh estimator counts of the cut, cuts falling inside prefixes,
    CJK runs and line ends included."""
    model = "claude-sonnet-4-5"
    est, counter, _ = _fresh(model)
    assert est.profile(model)[1].splits_text
    placed: list[tuple[str, object]] = []
    original = Estimator.remember_text_count

    def spy(self, text, counter_, counts):
        placed.append((text, counts))
        original(self, text, counter_, counts)

    monkeypatch.setattr(Estimator, "remember_text_count", spy)
    rng = random.Random(3)
    for _ in range(30):
        text = _text(rng, rng.choice([3_000, 9_000, 20_000]))
        known = _cut_counts.known_cuts(text, est, model, in_json)
        for _ in range(6):
            keep = rng.randrange(0, len(text))
            head = text[: int(keep * 0.6)]
            tail = text[len(text) - (keep - len(head)):] if keep > len(head) else ""
            known.remember(head, tail)
            middle = rng.choice(["\n", "\n12\u2192 ", "\u4e2d\n   7\u2192x\n"]) + TRUNCATION_MARKER.format(n=3) + "\n"
            known.remember(head + middle + tail)
    assert len(placed) > 100
    assert any(c.cjk_chars and (c.numbered_lines or in_json) for _, c in placed)  # JSON escapes newlines
    for text, counts in placed:
        assert counts == Estimator().text_count(text, counter, True), text[:80]


def test_json_values_are_counted_as_encoded():
    model = "gpt-4o"
    est, counter, enc = _fresh(model)
    text = "line one\n\t\"quoted\" \\ back\n" * 200
    known = _cut_counts.known_cuts(text, est, model, in_json=True)
    head, tail = text[:1_000], text[-900:]
    known.remember(head, tail)
    encoded = json.dumps(head, ensure_ascii=False)
    assert est._cache.get((counter, encoded)) == bpe_token_count(enc, encoded)


def _oversized_request(rng: random.Random) -> list[dict]:
    """Messages whose texts are cut in every shape ``fit`` knows: a plain text, OpenAI
    tool-call arguments, an Anthropic ``tool_use`` input and ``tool_result`` content."""
    big = lambda: _text(rng, rng.choice([6_000, 15_000, 30_000]))  # noqa: E731
    return [
        {"role": "user", "content": big()},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "write", "arguments": json.dumps({"path": "/a.py", "content": big(), "mode": "w"})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": big()},
        {"role": "assistant", "content": [
            {"type": "text", "text": "editing"},
            {"type": "tool_use", "id": "t1", "name": "Edit", "input": {"edits": [{"old": big(), "new": big()}]}},
        ]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "text", "text": big()}]}]},
    ]


@pytest.mark.parametrize("model", MODELS)
def test_rebuilt_messages_are_counted_as_the_tokenizer_counts_them(model, monkeypatch):
    """Every count placed while fitting (cuts, and the segments of each rebuilt message:
    JSON arguments with a value cut, tool results) is the tokenizer's, and the fitted
    request is the one a fit that encodes everything makes."""
    from opctx.context import fit as fit_module

    est, _, enc = _fresh(model)
    placed: list[tuple[str, int]] = []
    spy = _recording(placed)

    rng = random.Random(5)
    for _ in range(4):
        messages = _oversized_request(rng)
        total = Estimator().history_tokens(messages, model)
        for budget in (total // 2, total // 6):
            monkeypatch.setattr(Estimator, "remember_count", spy)
            fitted = fit_module.fit_request("", messages, None, budget, model=model, estimator=est)
            monkeypatch.setattr(Estimator, "remember_count", lambda self, text, counter_, tokens: None)
            plain = fit_module.fit_request("", messages, None, budget, model=model, estimator=Estimator())
            assert fitted.messages == plain.messages and fitted.tokens == plain.tokens
    assert len(placed) > 50
    for text, tokens in placed:
        assert tokens == bpe_token_count(enc, text), text[:80]


@given(st.text(max_size=60), st.text(max_size=60), st.text(max_size=60))
def test_common_prefix_and_suffix(a, b, shared):
    import os

    x, y = shared + a + shared, shared + b + shared
    assert _cut_counts._common_prefix(x, y) == len(os.path.commonprefix([x, y]))
    assert _cut_counts._common_suffix(x, y) == len(os.path.commonprefix([x[::-1], y[::-1]]))


def test_a_cut_counted_already_is_not_worked_out_again(monkeypatch):
    """A replay that meets the cuts an earlier one made finds them in the cache: nothing
    is split or counted again (the counts would be the same)."""
    model = "gpt-4o"
    est, counter, _ = _fresh(model)
    text = _text(random.Random(9), 9_000)
    head, tail = text[:3_000], text[-2_000:]
    out = head + "\n" + TRUNCATION_MARKER.format(n=7) + "\n" + tail
    placed: list[tuple[str, int]] = []
    monkeypatch.setattr(Estimator, "remember_count", _recording(placed))
    _cut_counts.known_cuts(text, est, model).remember(out)
    assert placed
    est.text_tokens(out, model)  # measured, as fit measures each cut
    assert est.has_count(out, counter, split=est.profile(model)[1].splits_text)
    placed.clear()
    _cut_counts.known_cuts(text, est, model).remember(out)
    assert placed == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    size=st.sampled_from([2_500, 9_000, 17_000]),
    cut_at=st.floats(0, 1), kept=st.floats(0, 1),
    middle=st.lists(st.sampled_from(_PIECES), max_size=12),
)
def test_any_splice_of_a_text_is_placed_exactly(seed, size, cut_at, kept, middle):
    """Whatever replaces a stretch of a text (not only a marker: the pieces of the text
    itself, so the common prefix or suffix may reach into the replacement), what is placed
    for the result, its count and its split parts for a profile that counts CJK and
    line-number prefixes apart, is what a fresh estimator counts."""
    model = "claude-sonnet-4-5"
    est, counter, _ = _fresh(model)
    text = _text(random.Random(seed), size)
    k = int(cut_at * len(text))
    tail = int(kept * (len(text) - k))
    s = text[:k] + "".join(middle) + text[len(text) - tail:]
    assume(len(s) >= 48 and k + tail >= len(s) // 2)  # else short, or left to the tokenizer
    _cut_counts._place(text, s, est, counter, True)
    fresh = Estimator()
    assert est._cache[(counter, s)] == fresh.count(s, counter)  # placed: head and tail are most of it
    split = est._cache.get((counter + _SPLIT, s))
    if split is not None:
        assert split == fresh.text_count(s, counter, True)
