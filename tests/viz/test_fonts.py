"""CJK text in plots: drawn in a CJK font where one is installed, one clear message where none is."""

from __future__ import annotations

import io
import warnings

from _browser import unavailable

from opctx.viz import _fonts
from opctx.viz.plots import budget_timeline, font_families

CJK_TITLE = "会话 セッション 세션: 上下文压缩"


def _draw(title: str, label: str = "管理 managed") -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = budget_timeline([{"step": 0, "budget_pct": 0.5, "tokens": 100},
                               {"step": 1, "budget_pct": 0.6, "tokens": 120}],
                              title=title, label=label)
        fig.savefig(io.BytesIO(), format="png")
    return list(caught)


def test_cjk_is_recognised():
    assert _fonts.has_cjk("上下文") and _fonts.has_cjk("セッション") and _fonts.has_cjk("세션")
    assert _fonts.has_cjk("\uff01")  # full-width punctuation
    assert not _fonts.has_cjk("context window, 32,000 tokens — ok")


def test_a_cjk_label_renders_with_no_warning_where_a_cjk_font_is_installed():
    font = _fonts.cjk_font()
    if font is None:
        unavailable("no CJK font installed (Debian: fonts-noto-cjk, `make system-deps`)",
                    what="the CJK plot test")
    caught = _draw(CJK_TITLE)
    assert not [str(w.message) for w in caught], "CJK text drew with warnings"
    # Latin text keeps matplotlib's configured font; CJK falls back to the CJK font
    import matplotlib

    assert font_families() == [*matplotlib.rcParams["font.family"], font]


def test_without_a_cjk_font_one_clear_message_and_no_glyph_warnings(monkeypatch):
    monkeypatch.setattr(_fonts, "cjk_font", lambda: None)
    monkeypatch.setattr(_fonts, "_warned", False)
    caught = _draw(CJK_TITLE) + _draw("第二个 " + CJK_TITLE)
    messages = [(w.category, str(w.message)) for w in caught]
    ours = [m for c, m in messages if c is _fonts.MissingCJKFontWarning]
    assert len(ours) == 1 and "fonts-noto-cjk" in ours[0], messages
    assert not [m for _, m in messages if m.startswith("Glyph")], messages


def test_latin_text_warns_nothing_even_without_a_cjk_font(monkeypatch):
    monkeypatch.setattr(_fonts, "cjk_font", lambda: None)
    monkeypatch.setattr(_fonts, "_warned", False)
    assert not _draw("a plain title, 32,000 tokens", label="managed")


def test_every_text_of_a_plot_gets_the_fallback_families(monkeypatch):
    monkeypatch.setattr(_fonts, "cjk_font", lambda: "Some CJK Font")
    fig = budget_timeline([{"step": 0, "budget_pct": 0.5, "tokens": 100}], title=CJK_TITLE)
    (ax,) = fig.axes
    assert ax.title.get_fontfamily()[-1] == "Some CJK Font"
    assert all(t.get_fontfamily()[-1] == "Some CJK Font" for t in ax.get_legend().get_texts())




def test_the_projects_setup_installs_a_cjk_font_where_the_tests_run():
    """`make test` runs `system-deps`, which installs Debian's fonts-noto-cjk (as root)."""
    from pathlib import Path

    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    target = makefile.split("\nsystem-deps:", 1)[1].split("\n\n", 1)[0]
    assert "fonts-noto-cjk" in target and "chromium" in target
    assert any(line.startswith("test:") and "system-deps" in line for line in makefile.splitlines())
    assert "Noto Sans CJK JP" in _fonts.CJK_FONTS  # the family that package installs
