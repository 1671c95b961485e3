"""Fonts of the plots: CJK text drawn in a CJK font where one is installed, one message where none is.

Transcripts are often Chinese, Japanese or Korean (most of the project's corpus is), and
their text reaches plot titles, legends and annotations. matplotlib's default font
(DejaVu Sans) has no CJK glyphs: it draws an empty box for each and warns once per
glyph ("Glyph 20320 (...) missing from font(s) DejaVu Sans."). Since matplotlib 3.6 a
Text whose font family is a *list* falls back from one font to the next glyph by glyph,
so every text the toolkit draws gets the families ``font_families()``: matplotlib's
configured family first (``rcParams["font.family"]``, unchanged for Latin text), then
the first installed CJK font of ``CJK_FONTS``. Nothing global is changed: the families
are set on the toolkit's own Text artists (``apply_fonts``), never in ``rcParams``.

Where no CJK font is installed and a text holds CJK characters, ``apply_fonts`` warns
once per process (``MissingCJKFontWarning``, naming the fix: Debian's ``fonts-noto-cjk``,
which ``make system-deps`` installs as root) and silences matplotlib's per-glyph warnings
for CJK characters only, which would otherwise repeat the same news dozens of times.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

__all__ = ["CJK_FONTS", "MissingCJKFontWarning", "cjk_font", "font_families", "has_cjk",
           "apply_fonts"]

# Installed CJK fonts in order of preference: Noto CJK (Debian's fonts-noto-cjk; the same
# family as Adobe's Source Han), then what other systems ship.
CJK_FONTS = (
    "Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans CJK TC", "Noto Sans CJK KR",
    "Source Han Sans", "Source Han Sans SC", "Noto Sans SC", "Noto Sans JP", "Noto Sans KR",
    "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback", "AR PL UMing CN",
    "Hiragino Sans", "PingFang SC", "Microsoft YaHei", "Yu Gothic", "Malgun Gothic",
    "MS Gothic", "SimHei",
)

# Han (with extension A and compatibility ideographs), kana, Hangul, CJK punctuation and
# full-width forms: the characters a Latin font lacks in CJK text.
_CJK = re.compile(
    "[\u2e80-\u2fdf\u3000-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0002fa1f]"
)
# matplotlib's warning for a glyph no font of the text has, for the characters above
_GLYPH_WARNING = (r"Glyph \d+ \(\\N\{(CJK|HIRAGANA|KATAKANA|HANGUL|IDEOGRAPHIC|FULLWIDTH|"
                  r"HALFWIDTH|BOPOMOFO|KANGXI)")


class MissingCJKFontWarning(UserWarning):
    """CJK text is drawn but no CJK font is installed: it shows as empty boxes."""


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a character that needs a CJK font."""
    return bool(_CJK.search(text))


@lru_cache(maxsize=1)
def cjk_font() -> str | None:
    """The first font of ``CJK_FONTS`` that matplotlib finds installed, else ``None``.

    matplotlib lists the system's fonts once and caches the list, so a font installed
    after that (``apt-get install fonts-noto-cjk`` on a machine that already drew a plot)
    is not in it: when no CJK font is listed, the system's font files the list lacks are
    added to this process's font manager (``FontManager.addfont``) and looked at again.
    """
    from matplotlib import font_manager

    manager = font_manager.fontManager

    def first() -> str | None:
        installed = {entry.name for entry in manager.ttflist}
        return next((name for name in CJK_FONTS if name in installed), None)

    found = first()
    if found is None:
        known = {entry.fname for entry in manager.ttflist}
        for path in font_manager.findSystemFonts():
            if path not in known:
                try:
                    manager.addfont(path)
                except (OSError, RuntimeError, ValueError):  # a file FreeType cannot read
                    continue
        found = first()
    return found


def font_families() -> list[str]:
    """matplotlib's configured families, then the installed CJK font (if any), as a
    fallback list for ``Text.set_fontfamily``."""
    from matplotlib import rcParams

    base = list(rcParams["font.family"])
    extra = cjk_font()
    return base + [extra] if extra and extra not in base else base


_warned = False


def _no_cjk_font() -> None:
    global _warned
    # each time (a filter added twice is kept once): a caller's catch_warnings may have
    # dropped it since the last time
    warnings.filterwarnings("ignore", message=_GLYPH_WARNING, category=UserWarning)
    if _warned:
        return
    _warned = True
    warnings.warn(
        "No CJK font is installed, so Chinese, Japanese and Korean text in plots shows as "
        "empty boxes. Install one (Debian/Ubuntu: apt-get install fonts-noto-cjk, which "
        "`make system-deps` does as root; any of opctx.viz._fonts.CJK_FONTS works), then "
        "restart the kernel.",
        MissingCJKFontWarning,
        stacklevel=3,
    )


def apply_fonts(texts: Iterable[Any]) -> None:
    """Give every matplotlib ``Text`` of ``texts`` the fallback families; say once when
    CJK text meets no CJK font."""
    families = font_families()
    cjk_seen = False
    for text in texts:
        text.set_fontfamily(families)
        cjk_seen = cjk_seen or has_cjk(text.get_text())
    if cjk_seen and cjk_font() is None:
        _no_cjk_font()
