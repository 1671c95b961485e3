"""The heuristic token count: ``method="heuristic"``, and the fallback with no encoding.

Private to ``opctx.context.tokens``, which re-exports every public name.

``method="heuristic"``: characters weighted per Unicode class over the *whole* text (not a
verdict from a sample, docs/design.md). Characters per token, one rate per class:

=====================================  ==============  ==================================
class                                  chars / token   why
=====================================  ==============  ==================================
ASCII (letters, digits, punctuation,   3.8             spec §2.2; English prose and code
whitespace)                                            under cl100k/o200k run 3.5-4.5
CJK (Han, kana, Hangul, CJK and        1.3             spec §2.2 rate (a Han character is
fullwidth punctuation)                                 about 0.6-1 token in current BPEs)
Cyrillic, Greek, Armenian, Georgian    2.4             letters of 2-byte alphabets merge
                                                       about half as well as ASCII
Latin with diacritics, other 2-byte    2.0             accented letters often split
Other BMP scripts (Arabic, Hebrew,     1.2             3-byte scripts: Devanagari, Thai,
Indic, Thai, symbols)                                  Arabic get few merges
Astral plane (emoji, rare Han)         0.5             one emoji is 2-3 byte tokens
=====================================  ==============  ==================================
"""

from __future__ import annotations

import re

HEURISTIC_CHARS_PER_TOKEN: dict[str, float] = {
    "ascii": 3.8,
    "cjk": 1.3,
    "cyrillic_greek": 2.4,
    "latin_ext": 2.0,
    "other_bmp": 1.2,
    "astral": 0.5,
}

# CJK: CJK radicals/symbols/punctuation, kana, Bopomofo, Hangul Jamo/compat, CJK Ext A, unified
# ideographs, Yi, Hangul syllables, compatibility ideographs, CJK compat forms, fullwidth forms.
_CJK = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u30ff\u3100-\u31ff\u3200-\u4dbf\u4e00-\u9fff"
    "\ua000-\ua4cf\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]"
)
_CYRILLIC_GREEK = re.compile("[\u0370-\u03ff\u0400-\u052f\u0530-\u058f\u10a0-\u10ff]")
_LATIN_EXT = re.compile("[\u0080-\u036f\u1e00-\u1eff]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_NON_ASCII = re.compile("[^\x00-\x7f]")


def _count(pattern: re.Pattern[str], text: str) -> int:
    # subn counts matches in C; faster than iterating characters in Python
    return pattern.subn("", text)[1]


def heuristic_tokens(text: str) -> float:
    """Tokens of ``text`` by per-character-class rates over the whole text (unrounded)."""
    if not text:
        return 0.0
    n = len(text)
    if text.isascii():
        return n / HEURISTIC_CHARS_PER_TOKEN["ascii"]
    rates = HEURISTIC_CHARS_PER_TOKEN
    non_ascii = _count(_NON_ASCII, text)
    cjk = _count(_CJK, text)
    cyr = _count(_CYRILLIC_GREEK, text)
    latin = _count(_LATIN_EXT, text)
    astral = _count(_ASTRAL, text)
    other = max(0, non_ascii - cjk - cyr - latin - astral)
    return (
        (n - non_ascii) / rates["ascii"]
        + cjk / rates["cjk"]
        + cyr / rates["cyrillic_greek"]
        + latin / rates["latin_ext"]
        + other / rates["other_bmp"]
        + astral / rates["astral"]
    )
