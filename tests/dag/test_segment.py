"""The compiled CJK segmentation (``opctx/dag/_segment.c``) equals its definition, the
Python path ``_search._segment_cjk_python``, on any text.

Compared: every code point at once (surrogates included), arbitrary text (astral
characters, lone surrogates), text drawn from CJK / ASCII / mixed alphabets, and the
edges of each range of ``_search._CJK``. The compiled side is skipped (with the reason)
where it did not build; under CI=1 that is a failure.
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opctx.dag import _search

try:
    from opctx.dag._segment import segment_cjk as compiled
except ImportError:  # pragma: no cover - installs without a compiler
    compiled = None

needs_compiled = pytest.mark.skipif(compiled is None, reason="opctx.dag._segment not built")
python = _search._segment_cjk_python
_settings = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


def _ranges() -> list[tuple[int, int]]:
    """The ranges of the CJK class, read from the pattern the Python path uses."""
    pairs = re.findall(r"(.)-(.)", _search._CJK, flags=re.S)
    assert "".join(lo + "-" + hi for lo, hi in pairs) == _search._CJK
    return [(ord(lo), ord(hi)) for lo, hi in pairs]


def test_compiled_segmentation_is_built_in_ci_and_used():
    # setup.py marks the extension optional so installs without a compiler still work;
    # CI has one, and a silent fallback there would hide a broken build
    if os.environ.get("CI") and compiled is None:
        pytest.fail("opctx.dag._segment did not build")
    assert _search._segment_cjk is (compiled or python)


@needs_compiled
def test_every_code_point_is_segmented_alike():
    text = "".join(map(chr, range(0x110000)))
    out = compiled(text)
    assert out == python(text)
    cjk = sum(hi - lo + 1 for lo, hi in _ranges())
    assert len(out) == len(text) + cjk


@needs_compiled
@pytest.mark.parametrize("lo, hi", _ranges())
def test_range_edges_are_segmented_alike(lo, hi):
    for cp in (lo - 1, lo, lo + 1, hi - 1, hi, hi + 1):
        for text in (chr(cp), "a" + chr(cp) + "b", chr(cp) * 3, "é" + chr(cp), "😀" + chr(cp)):
            assert compiled(text) == python(text), hex(cp)


@needs_compiled
@_settings
@given(st.text())
def test_arbitrary_text_is_segmented_alike(text):
    assert compiled(text) == python(text)


_any_code_point = st.characters(exclude_categories=())  # lone surrogates too


@needs_compiled
@_settings
@given(st.text(alphabet=_any_code_point))
def test_text_with_lone_surrogates_is_segmented_alike(text):
    assert compiled(text) == python(text)


_cjk_chars = st.one_of(*(st.characters(min_codepoint=lo, max_codepoint=hi) for lo, hi in _ranges()))
_ascii_chars = st.characters(min_codepoint=0, max_codepoint=0x7F)
_alphabets = {
    "cjk": _cjk_chars,
    "ascii": _ascii_chars,
    "mixed": st.one_of(
        _cjk_chars,
        _ascii_chars,
        st.sampled_from("éßПривет\u200b\u3000\u303f\u3100\u4dc0\ufb00\U0001f600\U0002fa20\U00030000"),
    ),
}


@needs_compiled
@_settings
@given(st.sampled_from(sorted(_alphabets)).flatmap(lambda name: st.text(alphabet=_alphabets[name])))
def test_cjk_ascii_and_mixed_text_is_segmented_alike(text):
    assert compiled(text) == python(text)


@pytest.mark.parametrize("segment", [python, compiled], ids=["python", "compiled"])
@pytest.mark.parametrize("text", ["", "plain ascii", "Latin-1: é ß ÿ", "Привет \u3000\u303f", "emoji 😀 \U00030000"])
def test_text_without_cjk_comes_back_as_the_same_object(segment, text):
    if segment is None:
        pytest.skip("opctx.dag._segment not built")
    assert segment(text) is text


@needs_compiled
def test_long_text_and_a_str_subclass():
    text = ("上下文管理的设计と実装 context 한국어 \U00020001" * 10_000)[:200_000]
    assert compiled(text) == python(text)

    class Text(str):
        pass

    assert compiled(Text("ok")) == "ok"
    assert compiled(Text("上")) == "上\u200b"
    assert type(compiled(Text("上"))) is str


@needs_compiled
def test_a_non_string_is_refused():
    with pytest.raises(TypeError, match="must be str, not bytes"):
        compiled("上".encode())
